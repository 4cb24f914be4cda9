//! What `tcpls perf` reports: the interval lines while it runs and the summary at the end, as
//! iperf3 prints them (human) or as one JSON document (`--json`), on stdout or `--logfile`.

use std::io::Write;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use tcpls_proto::sync::LockExt;

use super::protocol::PathStats;
use crate::units::{Amount, Format, Rate};

/// Where the human lines (or the JSON document) go: stdout, or the `--logfile` file.
#[derive(Clone)]
pub struct Out(Arc<Mutex<Box<dyn Write + Send>>>);

impl Out {
    pub fn stdout() -> Self {
        Self(Arc::new(Mutex::new(Box::new(std::io::stdout()))))
    }

    /// Appends to `path` (as iperf3's `--logfile`).
    pub fn file(path: &std::path::Path) -> Result<Self, String> {
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| format!("cannot open --logfile {}: {e}", path.display()))?;
        Ok(Self(Arc::new(Mutex::new(Box::new(f)))))
    }

    /// Writes one line (flushed at once, so a pipe or a `tail -f` sees it while the run goes on).
    pub fn line(&self, text: &str) {
        let mut w = self.0.lock_unpoisoned();
        let _ = writeln!(w, "{text}");
        let _ = w.flush();
    }
}

/// How `tcpls perf` prints while it runs.
#[derive(Clone)]
pub struct Output {
    pub out: Out,
    pub json: bool,
    pub format: Format,
}

#[derive(Debug, Serialize)]
pub struct ConnectionReport {
    pub id: u32,
    pub local: Option<String>,
    pub remote: Option<String>,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Still open at the end (false after a migration closed it, or a failure).
    pub open: bool,
}

/// One connection during one interval. `bytes_*` and `bits_per_second` are the connection's own
/// (TLS records with the TCPLS framing, about 0.3 % above the payload); `payload_*` is the
/// goodput of the streams steered to it (absent with `--aggregate`, where every stream is
/// spread over all connections); TCP figures are the sender's (TCP_INFO: ours when we send, the
/// server's, asked with a TCP Info frame, on a download).
#[derive(Debug, Clone, Serialize)]
pub struct IntervalConnection {
    pub id: u32,
    pub bytes_sent: u64,
    pub bytes_received: u64,
    pub bits_per_second: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payload_bits_per_second: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retransmits: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwnd_segments: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rtt_us: Option<u32>,
}

/// One `-i` interval: the verified payload per direction and each connection.
#[derive(Debug, Clone, Serialize)]
pub struct Interval {
    /// Seconds since the transfer started (the omitted seconds count too).
    pub start: f64,
    pub end: f64,
    /// Within the `--omit` warm-up, left out of the summary.
    pub omitted: bool,
    /// Payload bytes (client sent on an upload, received on a download; both with `--bidir`).
    pub bytes: u64,
    pub bits_per_second: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upload_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub download_bytes: Option<u64>,
    pub connections: Vec<IntervalConnection>,
}

/// One end of one direction over the measured time (after `--omit`).
#[derive(Debug, Serialize)]
pub struct EndSummary {
    /// None when that end does not report it (the server's written bytes on a download).
    pub bytes: Option<u64>,
    pub seconds: f64,
    pub bits_per_second: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retransmits: Option<u64>,
}

/// The sender and receiver lines of one direction, as iperf3's summary.
#[derive(Debug, Serialize)]
pub struct DirectionSummary {
    pub direction: &'static str,
    pub sender: EndSummary,
    pub receiver: EndSummary,
    pub verified: bool,
}

#[derive(Debug, Serialize)]
pub struct MigrationReport {
    /// When the streams were moved (seconds since the transfer started).
    pub at_seconds: f64,
    pub from: u32,
    pub to: u32,
    /// Why it failed; None when it worked.
    pub error: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct PerfReport {
    /// upload, download or bidir.
    pub direction: &'static str,
    pub streams: u32,
    /// Payload bytes verified by the receivers, both directions, omitted seconds included.
    pub bytes: u64,
    /// The measured time (after `--omit`).
    pub seconds: f64,
    /// Received payload over the measured time, in bits per second.
    pub goodput_bps: f64,
    pub verified: bool,
    /// Ended by Ctrl-C or SIGTERM: the figures cover what was done until then.
    pub interrupted: bool,
    /// The signal that ended it (SIGINT, SIGTERM), if one did.
    pub signal: Option<&'static str>,
    /// A timed run that was still waiting for streams at its hard deadline (`--time` plus a
    /// grace of [`super::client::DEADLINE_GRACE`]): `undelivered` says what was missing.
    pub ended_at_deadline: bool,
    /// What was not delivered, one line per stream (empty when everything was).
    pub undelivered: Vec<String>,
    /// Why the run failed, when the session or a stream did (the figures cover what was done).
    pub error: Option<String>,
    /// What each end saw of the paths: the client's, and the server's (asked on a stats stream
    /// at the end; None when the server could not say, see `server_stats_error`).
    pub client_stats: PathStats,
    pub server_stats: Option<PathStats>,
    pub server_stats_error: Option<String>,
    pub omit_seconds: f64,
    /// When the transfer started (after the handshake and the joins), in seconds since the
    /// Unix epoch: the origin of `intervals[]`, to line them up with outside events.
    pub start_unix_seconds: f64,
    pub fallback: bool,
    pub cipher: String,
    pub failovers: u64,
    pub resumed: bool,
    pub early_data_accepted: bool,
    pub zero_copy_bytes: u64,
    pub copied_bytes: u64,
    pub handshake_ms: f64,
    pub migration: Option<MigrationReport>,
    pub summary: Vec<DirectionSummary>,
    pub intervals: Vec<Interval>,
    pub connections: Vec<ConnectionReport>,
}

/// The column header of interval and summary lines.
pub const HEADER: &str = "[ ID] Interval           Transfer     Bitrate          Retr  Cwnd       RTT";

fn interval_span(start: f64, end: f64) -> String {
    format!("{:>6.2}-{:<6.2} sec", start, end)
}

/// The lines of one interval: each connection, then the verified payload per direction.
pub fn interval_lines(i: &Interval, format: Format) -> Vec<String> {
    let span = interval_span(i.start, i.end);
    let omitted = if i.omitted { "  (omitted)" } else { "" };
    let mut lines = Vec::new();
    for c in &i.connections {
        let tcp = match (c.retransmits, c.cwnd_segments, c.rtt_us) {
            (None, None, None) => String::new(),
            (r, w, t) => format!(
                "{:>5}  {:<9}  {}",
                r.map_or("-".into(), |r| r.to_string()),
                w.map_or("-".into(), |w| format!("{w} seg")),
                t.map_or("-".into(), |t| format!("{:.2} ms", f64::from(t) / 1e3))
            ),
        };
        // The connection's goodput when its streams are known, its own bytes otherwise.
        let (bytes, bps) = match (c.payload_bytes, c.payload_bits_per_second) {
            (Some(b), Some(bps)) => (b, bps),
            _ => (c.bytes_sent + c.bytes_received, c.bits_per_second),
        };
        lines.push(format!(
            "[{:>3}] {span}  {:<11}  {:<15}  {tcp}{omitted}",
            c.id,
            Amount(bytes, format).to_string(),
            Rate(bps, format).to_string(),
        ));
    }
    let seconds = (i.end - i.start).max(1e-9);
    let mut sum = |tag: &str, bytes: u64| {
        lines.push(format!(
            "[{tag}] {span}  {:<11}  {:<15}  payload, verified{omitted}",
            Amount(bytes, format).to_string(),
            Rate(bytes as f64 * 8.0 / seconds, format).to_string(),
        ))
    };
    match (i.upload_bytes, i.download_bytes) {
        (Some(up), Some(down)) => {
            sum(" TX", up);
            sum(" RX", down);
        }
        _ => sum("SUM", i.bytes),
    }
    lines
}

/// The summary: sender and receiver lines per direction, then the session's facts.
pub fn summary_lines(r: &PerfReport, format: Format) -> Vec<String> {
    let mut lines = vec!["- - - - - - - - - - - - - - - - - - - - - - - - -".to_string(), HEADER.to_string()];
    let bidir = r.summary.len() > 1;
    for d in &r.summary {
        let tag = match (bidir, d.direction) {
            (false, _) => "SUM",
            (true, "upload") => " TX",
            (true, _) => " RX",
        };
        for (end, role) in [(&d.sender, "sender"), (&d.receiver, "receiver")] {
            let span = interval_span(r.omit_seconds, r.omit_seconds + end.seconds);
            let (amount, rate) = match (end.bytes, end.bits_per_second) {
                (Some(b), Some(bps)) => (Amount(b, format).to_string(), Rate(bps, format).to_string()),
                _ => ("(not known)".to_string(), String::new()),
            };
            let retr = end.retransmits.map_or(String::new(), |n| n.to_string());
            let note = match role {
                "receiver" if d.verified => "  (verified byte for byte)",
                "receiver" => "  (VERIFICATION FAILED)",
                _ => "",
            };
            lines.push(format!("[{tag}] {span}  {amount:<11}  {rate:<15}  {retr:>5}  {role}{note}"));
        }
    }
    let conns = r.connections.len();
    lines.push(format!(
        "{}: {} stream{} over {} connection{}, {}{}, handshake {:.1} ms{}",
        r.direction,
        r.streams,
        if r.streams == 1 { "" } else { "s" },
        conns,
        if conns == 1 { "" } else { "s" },
        r.cipher,
        if r.resumed { ", resumed" } else { "" },
        r.handshake_ms,
        if r.early_data_accepted { ", 0-RTT accepted" } else { "" },
    ));
    if let Some(m) = &r.migration {
        lines.push(match &m.error {
            None => format!(
                "migration at {:.2} s: streams moved from connection {} to connection {}, which closed",
                m.at_seconds, m.from, m.to
            ),
            Some(e) => format!("migration at {:.2} s failed: {e}", m.at_seconds),
        });
    }
    let ends = [("client", Some(&r.client_stats)), ("server", r.server_stats.as_ref())];
    if ends.iter().any(|(_, s)| s.is_some_and(PathStats::any_event)) {
        let parts: Vec<String> =
            ends.iter().filter_map(|(end, s)| s.map(|s| format!("{end}: {}", describe_paths(s, format)))).collect();
        lines.push(format!("path events: {}", parts.join("; ")));
    }
    if let Some(e) = &r.server_stats_error {
        lines.push(format!("server stats unavailable: {e}"));
    }
    for c in &r.connections {
        lines.push(format!(
            "  connection {}: {} -> {}: {} sent, {} received{}",
            c.id,
            c.local.as_deref().unwrap_or("?"),
            c.remote.as_deref().unwrap_or("?"),
            Amount(c.bytes_sent, format),
            Amount(c.bytes_received, format),
            if c.open { "" } else { " (closed)" },
        ));
    }
    if r.interrupted {
        let by = match r.signal {
            Some("SIGTERM") => "SIGTERM",
            _ => "Ctrl-C",
        };
        lines.push(format!("interrupted ({by}): the figures cover what was done until then"));
    }
    for u in &r.undelivered {
        lines.push(format!("not delivered: {u}"));
    }
    lines
}

/// One end's path events, for the summary line.
fn describe_paths(s: &PathStats, format: Format) -> String {
    let stall = match (s.longest_stall_ms, s.longest_stream_stall_ms) {
        (Some(all), Some(one)) => format!("longest stall {all:.0} ms ({one:.0} ms on one stream)"),
        (Some(all), None) => format!("longest stall {all:.0} ms"),
        _ => "no payload received".into(),
    };
    format!(
        "{} failover{}, {} connection{} lost, {} record{} re-sent ({}), {} path{} suspected, {} recovered, {} received twice, {stall}",
        s.failovers,
        if s.failovers == 1 { "" } else { "s" },
        s.connections_lost,
        if s.connections_lost == 1 { "" } else { "s" },
        s.records_resent,
        if s.records_resent == 1 { "" } else { "s" },
        Amount(s.stream_bytes_resent, format),
        s.paths_suspected,
        if s.paths_suspected == 1 { "" } else { "s" },
        s.paths_recovered,
        Amount(s.duplicate_bytes_received, format),
    )
}

/// One end's [`PathStats`] from its session's statistics and its receivers' stall meter.
pub fn path_stats(stats: &tcpls_proto::SessionStats, stalls: &crate::transfer::StallMeter) -> PathStats {
    let ms = |d: std::time::Duration| (d.as_secs_f64() * 1e6).round() / 1e3;
    PathStats {
        failovers: stats.failovers,
        connections_lost: stats.connections_lost,
        records_resent: stats.records_resent,
        stream_bytes_resent: stats.stream_bytes_resent,
        paths_suspected: stats.paths_suspected,
        paths_recovered: stats.paths_recovered,
        duplicate_bytes_received: stats.duplicate_bytes_received,
        longest_stall_ms: stalls.longest().map(ms),
        longest_stream_stall_ms: stalls.longest_stream().map(ms),
    }
}

/// Prints the report: the summary lines, or the JSON document.
pub fn print(r: &PerfReport, output: &Output) -> Result<(), String> {
    if output.json {
        output.out.line(&serde_json::to_string_pretty(r).map_err(|e| e.to_string())?);
    } else {
        for line in summary_lines(r, output.format) {
            output.out.line(&line);
        }
    }
    Ok(())
}

/// One line per run, for `tcpls demo`.
pub fn one_line(r: &PerfReport) -> String {
    format!(
        "{} {} over {} stream{} in {:.3} s: {}, {} ({})",
        r.direction,
        Amount(r.bytes, Format::Auto),
        r.streams,
        if r.streams == 1 { "" } else { "s" },
        r.seconds,
        Rate(r.goodput_bps, Format::Auto),
        if r.verified { "verified byte for byte" } else { "VERIFICATION FAILED" },
        r.cipher
    )
}
