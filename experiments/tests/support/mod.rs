//! Running the `experiments` binary and checking its three output files.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// A fresh output directory under the target's tmp dir, removed on drop.
pub struct OutDir(pub PathBuf);

impl OutDir {
    pub fn new(tag: &str) -> OutDir {
        let p = std::env::temp_dir().join(format!("experiments-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        OutDir(p)
    }
}

impl Drop for OutDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Whether this test can run: namespaces (root, TUN, iproute2) and, for the comparisons, MPTCP.
/// Prints `SKIPPED` with the reason otherwise.
pub fn supported(test: &str, needs_mptcp: bool) -> bool {
    if let Err(why) = tcpls_netem::check_support() {
        tcpls_netem::print_skipped(test, &why);
        return false;
    }
    if !needs_mptcp {
        return true;
    }
    let mptcp = std::fs::read_to_string("/proc/sys/net/mptcp/enabled").is_ok_and(|s| s.trim() == "1");
    if !mptcp {
        tcpls_netem::print_skipped(test, "kernel without MPTCP (net.mptcp.enabled is not 1)");
        return false;
    }
    true
}

/// Runs `experiments NAME --quick --out DIR` and returns the summary it printed.
pub fn run_quick(name: &str, out: &Path) -> serde_json::Value {
    run_quick_with(name, out, &[])
}

/// Same with extra arguments (`--trace FILE`).
pub fn run_quick_with(name: &str, out: &Path, extra: &[&std::ffi::OsStr]) -> serde_json::Value {
    let started = std::time::Instant::now();
    let o = Command::new(env!("CARGO_BIN_EXE_experiments"))
        .args([name, "--quick", "--out"])
        .arg(out)
        .args(extra)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&o.stdout);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "experiments {name} --quick failed: {stderr}\n{stdout}");
    eprintln!("experiments {name} --quick took {:?}", started.elapsed());
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("summary is not JSON ({e}): {stdout}"))
}

/// Checks `DIR/NAME.{csv,png,json}`: the JSON equals the printed summary, the CSV has its header
/// and numeric rows for every series, the PNG is a real PNG of a plausible size.
pub fn check_outputs(out: &Path, name: &str, printed: &serde_json::Value, series: &[&str]) {
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join(format!("{name}.json"))).unwrap()).unwrap();
    assert_eq!(&json, printed, "NAME.json is the printed summary");

    let csv = std::fs::read_to_string(out.join(format!("{name}.csv"))).unwrap();
    let mut lines = csv.lines();
    assert_eq!(lines.next(), Some("panel,series,time_s,goodput_mbps"));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.rsplitn(3, ',').collect()).collect();
    assert!(rows.len() > 20, "too few CSV rows: {}", rows.len());
    for r in &rows {
        assert_eq!(r.len(), 3, "bad CSV row {r:?}");
        let (v, t): (f64, f64) = (r[0].parse().unwrap(), r[1].parse().unwrap());
        assert!(v >= 0.0 && t >= 0.0 && v.is_finite(), "bad CSV values {r:?}");
    }
    for s in series {
        assert!(rows.iter().any(|r| r[2].ends_with(s)), "no CSV rows for series {s}");
    }

    let png = std::fs::read(out.join(format!("{name}.png"))).unwrap();
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n", "not a PNG");
    assert_eq!(&png[12..16], b"IHDR");
    let width = u32::from_be_bytes(png[16..20].try_into().unwrap());
    let height = u32::from_be_bytes(png[20..24].try_into().unwrap());
    assert!(width >= 800 && height >= 300, "PNG is {width}x{height}");
    assert!(png.len() > 20_000, "PNG suspiciously small ({} bytes): empty plot?", png.len());
}
