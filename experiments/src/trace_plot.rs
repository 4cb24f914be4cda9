//! `experiments trace-plot FILE -o OUT.png`: draws one session of a `tcpls --trace FILE` event
//! trace (docs/OBSERVABILITY.md §4): bytes per connection over time with joins, losses and
//! failovers marked, per-stream progress, and each connection's RTT and congestion window from
//! the TCP_INFO samples.
//!
//! It lives here rather than in the `tcpls` command so the command stays free of the plotting
//! stack (plotters, its PNG encoder and the bundled font: about a megabyte), which only the
//! people drawing plots need.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{json, Value};

use crate::plot::{Marker, Panel, Series, XAxis};

/// Streams drawn at most (the ones that moved the most bytes): more make an unreadable legend.
const MAX_STREAMS: usize = 8;

const MIB: f64 = 1024.0 * 1024.0;

/// One session's events, times in seconds since its first event.
#[derive(Debug, Default)]
pub struct SessionTrace {
    pub session: u64,
    pub side: String,
    pub events: Vec<(f64, String, Value)>,
}

/// Reads a trace file: the sessions it holds, by `group_id`.
pub fn read(path: &Path) -> Result<BTreeMap<u64, SessionTrace>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    parse(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// Parses trace lines (the header line, without a `name`, is skipped).
pub fn parse(text: &str) -> Result<BTreeMap<u64, SessionTrace>, String> {
    let mut sessions: BTreeMap<u64, SessionTrace> = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(line)
            .map_err(|e| format!("line {}: not JSON ({e}); is this a `tcpls --trace` file?", i + 1))?;
        let Some(name) = v["name"].as_str() else { continue };
        let (Some(time), Some(session)) = (v["time"].as_f64(), v["group_id"].as_u64()) else {
            return Err(format!("line {}: an event without time or group_id", i + 1));
        };
        let s = sessions.entry(session).or_insert_with(|| SessionTrace { session, ..Default::default() });
        if s.side.is_empty() {
            s.side = v["side"].as_str().unwrap_or("").to_string();
        }
        let name = name.strip_prefix("tcpls:").unwrap_or(name).to_string();
        s.events.push((time / 1e3, name, v["data"].clone()));
    }
    for s in sessions.values_mut() {
        let t0 = s.events.iter().map(|(t, _, _)| *t).fold(f64::INFINITY, f64::min);
        for e in &mut s.events {
            e.0 -= t0;
        }
    }
    if sessions.is_empty() {
        return Err("no events (an empty trace, or not a `tcpls --trace` file)".into());
    }
    Ok(sessions)
}

fn u(v: &Value, key: &str) -> Option<f64> {
    v[key].as_u64().map(|x| x as f64)
}

/// Bytes a session moved (the larger direction of its last connection samples).
fn volume(s: &SessionTrace) -> f64 {
    let (sent, received) = directions(s);
    sent.max(received)
}

/// Total bytes sent and received over the session's connections (their last samples).
fn directions(s: &SessionTrace) -> (f64, f64) {
    let mut last: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
    for (_, name, d) in &s.events {
        if name == "connection_sample" {
            if let Some(conn) = d["conn"].as_u64() {
                last.insert(conn, (u(d, "bytes_sent").unwrap_or(0.0), u(d, "bytes_received").unwrap_or(0.0)));
            }
        }
    }
    last.values().fold((0.0, 0.0), |(a, b), (s, r)| (a + s, b + r))
}

/// The panels of one session's plot, and what was marked.
pub fn panels(s: &SessionTrace) -> (Vec<Panel>, Vec<Marker>) {
    let (sent, received) = directions(s);
    let (key, dir) = if sent >= received { ("bytes_sent", "sent") } else { ("bytes_received", "received") };
    let mut conns: BTreeMap<u64, Vec<(f64, f64)>> = BTreeMap::new();
    let mut rtt: BTreeMap<u64, Vec<(f64, f64)>> = BTreeMap::new();
    let mut cwnd: BTreeMap<u64, Vec<(f64, f64)>> = BTreeMap::new();
    let mut streams: BTreeMap<u64, Vec<(f64, f64)>> = BTreeMap::new();
    let mut markers = Vec::new();
    let mut resent_before = 0;
    let stream_key = if dir == "sent" { "sent" } else { "received" };
    for (t, name, d) in &s.events {
        let conn = d["conn"].as_u64();
        match name.as_str() {
            "connection_sample" => {
                let Some(c) = conn else { continue };
                if let Some(b) = u(d, key) {
                    conns.entry(c).or_default().push((*t, b / MIB));
                }
                if let Some(r) = u(d, "rtt_us") {
                    rtt.entry(c).or_default().push((*t, r / 1e3));
                }
                if let Some(w) = u(d, "cwnd") {
                    cwnd.entry(c).or_default().push((*t, w));
                }
            }
            "stream_progress" => {
                if let (Some(id), Some(b)) = (d["stream"].as_u64(), u(d, stream_key)) {
                    streams.entry(id).or_default().push((*t, b / MIB));
                }
            }
            "connection_joined" => markers.push(Marker { label: format!("conn {} joined", conn.unwrap_or(0)), t: *t }),
            "connection_lost" => markers.push(Marker { label: format!("conn {} lost", conn.unwrap_or(0)), t: *t }),
            "failed_over" => {
                // How many records it re-sent: the session's total, less the previous failover's.
                let total = d["records_resent_total"].as_u64().unwrap_or(0);
                let label = match total.saturating_sub(std::mem::replace(&mut resent_before, total)) {
                    0 => "failover".to_string(),
                    n => format!("failover ({n} records re-sent)"),
                };
                markers.push(Marker { label, t: *t });
            }
            "all_connections_lost" => markers.push(Marker { label: "all lost".into(), t: *t }),
            "path_updated" if d["state"] == "dropped" => markers.push(Marker { label: "path dropped".into(), t: *t }),
            _ => {}
        }
    }
    markers.sort_by(|a, b| a.t.total_cmp(&b.t));
    // Events closer than 2 % of the plot's width share one line (their labels would overlap).
    let span = s.events.iter().map(|e| e.0).fold(0.0f64, f64::max);
    let mut merged: Vec<Marker> = Vec::new();
    for m in markers {
        match merged.last_mut() {
            Some(last) if m.t - last.t < span * 0.02 => last.label = format!("{} + {}", last.label, m.label),
            _ => merged.push(m),
        }
    }
    let markers = merged;
    let series = |m: BTreeMap<u64, Vec<(f64, f64)>>, what: &str| -> Vec<Series> {
        m.into_iter().map(|(id, points)| Series { label: format!("{what} {id}"), points }).collect()
    };
    let mut top: Vec<(u64, Vec<(f64, f64)>)> = streams.into_iter().collect();
    top.sort_by(|a, b| {
        let last = |p: &Vec<(f64, f64)>| p.last().map_or(0.0, |x| x.1);
        last(&b.1).total_cmp(&last(&a.1)).then(a.0.cmp(&b.0))
    });
    let hidden = top.len().saturating_sub(MAX_STREAMS);
    top.truncate(MAX_STREAMS);
    top.sort_by_key(|(id, _)| *id);
    let panel = |title: String, y: &str, series: Vec<Series>, markers: &[Marker]| Panel {
        title,
        y_label: y.into(),
        series,
        markers: markers.to_vec(),
        legend_top: true,
        x_axis: XAxis::Time,
        dashed: Vec::new(),
    };
    let mut out = vec![panel(
        format!("bytes {dir} per TCP connection (TLS records, all streams)"),
        &format!("MiB {dir}"),
        series(conns, "conn"),
        &markers,
    )];
    if !top.is_empty() {
        let more =
            if hidden > 0 { format!(" ({MAX_STREAMS} busiest, {hidden} more not shown)") } else { String::new() };
        out.push(panel(
            format!("stream progress: bytes {dir}{more}"),
            &format!("MiB {dir}"),
            series(top.into_iter().collect(), "stream"),
            &markers,
        ));
    }
    if !rtt.is_empty() {
        out.push(panel("smoothed RTT (TCP_INFO)".into(), "ms", series(rtt, "conn"), &markers));
        out.push(panel("congestion window (TCP_INFO)".into(), "segments", series(cwnd, "conn"), &markers));
    }
    (out, markers)
}

/// Plots session `session` of the trace `input` (default: the one that moved the most bytes)
/// into the PNG `output`; returns a JSON summary.
pub fn run(input: &Path, output: &Path, session: Option<u64>) -> Result<Value, String> {
    let sessions = read(input)?;
    let chosen = match session {
        Some(id) => sessions.get(&id).ok_or_else(|| {
            let ids: Vec<_> = sessions.keys().collect();
            format!("no session {id} in {} (its sessions: {ids:?})", input.display())
        })?,
        None => sessions
            .values()
            .max_by(|a, b| volume(a).total_cmp(&volume(b)))
            .ok_or_else(|| format!("no sessions in {}", input.display()))?,
    };
    let (panels, markers) = panels(chosen);
    let title = format!("TCPLS session {} ({} side): {}", chosen.session, chosen.side, input.display());
    crate::plot::render(output, &title, &panels)?;
    Ok(json!({
        "output": output.display().to_string(),
        "session": chosen.session,
        "side": chosen.side,
        "sessions_in_file": sessions.len(),
        "events": chosen.events.len(),
        "panels": panels.iter().map(|p| p.title.clone()).collect::<Vec<_>>(),
        "connections": panels.first().map_or(0, |p| p.series.len()),
        "markers": markers.iter().map(|m| json!({ "t_s": (m.t * 1e3).round() / 1e3, "label": m.label })).collect::<Vec<_>>(),
    }))
}
