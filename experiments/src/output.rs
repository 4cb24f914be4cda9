//! Writing an experiment's results: `NAME.csv` (every time series, long format), `NAME.png`
//! (the plot) and `NAME.json` (the summary).

use std::fmt::Write as _;
use std::path::PathBuf;

use crate::plot::{self, Panel};
use crate::{Opts, Summary};

/// Writes the three files of experiment `name` into `opts.out` and returns their paths.
pub fn write_all(
    opts: &Opts,
    name: &str,
    title: &str,
    panels: &[Panel],
    summary: &Summary,
) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(&opts.out).map_err(|e| format!("cannot create {}: {e}", opts.out.display()))?;
    let csv = opts.out.join(format!("{name}.csv"));
    let png = opts.out.join(format!("{name}.png"));
    let json = opts.out.join(format!("{name}.json"));
    std::fs::write(&csv, to_csv(panels)).map_err(|e| format!("cannot write {}: {e}", csv.display()))?;
    plot::render(&png, title, panels)?;
    let text = serde_json::to_string_pretty(summary).map_err(|e| e.to_string())?;
    std::fs::write(&json, text + "\n").map_err(|e| format!("cannot write {}: {e}", json.display()))?;
    Ok(vec![csv, png, json])
}

/// `panel,series,time_s,goodput_mbps`, one line per point. The panel is named by its title up to
/// " — " (what follows are the measured numbers, which are in the JSON). The last column holds
/// the panel's y value (goodput; load time for the latency panel of hol-blocking).
pub fn to_csv(panels: &[Panel]) -> String {
    let mut out = String::from("panel,series,time_s,goodput_mbps\n");
    for p in panels {
        let name = p.title.split(" — ").next().unwrap_or_default();
        for s in &p.series {
            for (t, v) in &s.points {
                let _ = writeln!(out, "{},{},{t:.3},{v:.3}", csv_field(name), csv_field(&s.label));
            }
        }
    }
    out
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

/// Rounds to `digits` decimals for the JSON summary (measurements are not that precise).
pub fn round(x: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (x * f).round() / f
}
