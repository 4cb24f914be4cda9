//! The protocols compared, and the messages the child processes print (one JSON object a line).

use serde::{Deserialize, Serialize};

/// Size of every application write and read buffer.
pub const IO_SIZE: usize = 256 << 10;

/// Streams of the `tcpls-64` variant.
pub const MANY_STREAMS: u32 = 64;

/// Streams of the `tcpls-1000` variant.
pub const VERY_MANY_STREAMS: u32 = 1000;

/// Receive budget of the `tcpls-1000` receiver: the default 64 MiB admits ~990 streams (each is
/// charged its 64 KiB initial window), so 1000 need more (as experiments/src/streams.rs does).
pub const VERY_MANY_RECEIVE_BUDGET: u64 = 256 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Proto {
    /// Plain tokio TcpStream.
    Tcp,
    /// TLS 1.3 over TCP with tokio-rustls.
    Tls,
    /// Same, but the receiver's TcpStream is wrapped in a 256 KiB BufReader, so rustls' small
    /// socket reads (at most one record, ~16 KiB) are served from memory. Not run by default.
    TlsBufread,
    /// QUIC (quinn 0.11, rustls + aws-lc-rs), one bidirectional stream, see `quic.rs`.
    Quic,
    /// Same with 8952-byte UDP datagrams (a jumbo-frame path) instead of at most 1452. Not run
    /// by default.
    #[value(name = "quic-9k")]
    #[serde(rename = "quic-9k")]
    Quic9k,
    /// One TCPLS stream, receiver consumes in place with `read_chunk_with`.
    Tcpls,
    /// As `tcpls` with acknowledgements off: no failover (no retention of sent records) on
    /// either side, and the receiver's ACK thresholds so high that it sends none.
    TcplsNoack,
    /// As `tcpls` over two TCP connections of one session (a join to the same server address),
    /// the stream not steered, so the session's scheduler spreads its records over both.
    #[value(name = "tcpls-agg2")]
    #[serde(rename = "tcpls-agg2")]
    TcplsAgg2,
    /// As `tcpls` with `SessionConfig::zero_copy = false` (the copying receive path).
    TcplsNozc,
    /// As `tcpls` with both sessions traced (`tcpls::JsonLinesTrace` to a file in the temporary
    /// directory, samples every 100 ms): what `--trace FILE` costs. Not run by default.
    TcplsTrace,
    /// One TCPLS stream, receiver uses `AsyncRead` into a 256 KiB buffer.
    TcplsRead,
    /// One TCPLS session, 64 streams sharing the bytes, receivers use `read_chunk_with`.
    #[value(name = "tcpls-64")]
    #[serde(rename = "tcpls-64")]
    Tcpls64,
    /// One TCPLS session, 1000 streams sharing the bytes, receivers use `read_chunk_with`; the
    /// receiver's `receive_budget` is raised to 256 MiB so that it admits them all.
    #[value(name = "tcpls-1000")]
    #[serde(rename = "tcpls-1000")]
    Tcpls1000,
    /// As `tcpls` with the budgets of before autotuning: a fixed 16 MiB send budget
    /// (`send_autotune` off), 4 MiB per stream, fixed 16 MiB receive windows
    /// (`receive_autotune` off). Not run by default.
    TcplsFixed,
    /// As `tcpls-64` with those fixed budgets. Not run by default.
    #[value(name = "tcpls-64-fixed")]
    #[serde(rename = "tcpls-64-fixed")]
    Tcpls64Fixed,
    /// As `tcpls-1000` with those fixed budgets. Not run by default.
    #[value(name = "tcpls-1000-fixed")]
    #[serde(rename = "tcpls-1000-fixed")]
    Tcpls1000Fixed,
}

impl Proto {
    pub const DEFAULT: [Proto; 7] =
        [Proto::Tcp, Proto::Tls, Proto::Quic, Proto::Tcpls, Proto::TcplsNoack, Proto::TcplsAgg2, Proto::TcplsNozc];

    pub fn name(self) -> &'static str {
        match self {
            Proto::Tcp => "tcp",
            Proto::Tls => "tls",
            Proto::TlsBufread => "tls-bufread",
            Proto::Quic => "quic",
            Proto::Quic9k => "quic-9k",
            Proto::Tcpls => "tcpls",
            Proto::TcplsNoack => "tcpls-noack",
            Proto::TcplsAgg2 => "tcpls-agg2",
            Proto::TcplsNozc => "tcpls-nozc",
            Proto::TcplsTrace => "tcpls-trace",
            Proto::TcplsRead => "tcpls-read",
            Proto::Tcpls64 => "tcpls-64",
            Proto::Tcpls1000 => "tcpls-1000",
            Proto::TcplsFixed => "tcpls-fixed",
            Proto::Tcpls64Fixed => "tcpls-64-fixed",
            Proto::Tcpls1000Fixed => "tcpls-1000-fixed",
        }
    }

    pub fn is_tcpls(self) -> bool {
        matches!(
            self,
            Proto::Tcpls
                | Proto::TcplsNoack
                | Proto::TcplsAgg2
                | Proto::TcplsNozc
                | Proto::TcplsTrace
                | Proto::TcplsRead
                | Proto::Tcpls64
                | Proto::Tcpls1000
                | Proto::TcplsFixed
                | Proto::Tcpls64Fixed
                | Proto::Tcpls1000Fixed
        )
    }

    pub fn streams(self) -> u32 {
        match self {
            Proto::Tcpls64 | Proto::Tcpls64Fixed => MANY_STREAMS,
            Proto::Tcpls1000 | Proto::Tcpls1000Fixed => VERY_MANY_STREAMS,
            _ => 1,
        }
    }

    /// TCP connections of the session (TCPLS).
    pub fn connections(self) -> usize {
        match self {
            Proto::TcplsAgg2 => 2,
            _ => 1,
        }
    }

    /// The TCPLS settings of both ends.
    pub fn tcpls_settings(self) -> tcpls::SessionConfig {
        let default = tcpls::SessionConfig::default();
        match self {
            Proto::TcplsNoack => tcpls::SessionConfig {
                failover: false,
                // The receiver acknowledges whatever the sender's setting; these make it never do.
                ack_every_records: u32::MAX,
                ack_delay: std::time::Duration::from_secs(24 * 3600),
                ..default
            },
            Proto::TcplsNozc => tcpls::SessionConfig { zero_copy: false, ..default },
            Proto::Tcpls1000 => tcpls::SessionConfig { receive_budget: VERY_MANY_RECEIVE_BUDGET, ..default },
            Proto::TcplsFixed | Proto::Tcpls64Fixed => fixed_budgets(default),
            Proto::Tcpls1000Fixed => {
                fixed_budgets(tcpls::SessionConfig { receive_budget: VERY_MANY_RECEIVE_BUDGET, ..default })
            }
            _ => default,
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            Proto::Tcp => "tokio TcpStream, 256 KiB writes, 256 KiB read buffer",
            Proto::Tls => "tokio-rustls, TLS 1.3 AES-128-GCM, 16 KiB records, 256 KiB writes/reads",
            Proto::TlsBufread => "as tls, receiver's socket behind a 256 KiB tokio BufReader",
            Proto::Quic => "quinn 0.11, AES-128-GCM, 1 bidi stream, 256 KiB write_all, read_chunk (no copy), UDP payload <= 1452 (MTU discovery), GSO",
            Proto::Quic9k => "as quic with 8952-byte UDP payloads",
            Proto::Tcpls => "TCPLS, 1 stream, 256 KiB write_all, receiver read_chunk_with (no copy)",
            Proto::TcplsNoack => "as tcpls, failover off and no ACKs (ack thresholds at infinity)",
            Proto::TcplsAgg2 => "as tcpls, 2 TCP connections (join), stream spread by the default scheduler",
            Proto::TcplsNozc => "as tcpls, SessionConfig::zero_copy = false (copying receive path)",
            Proto::TcplsTrace => "as tcpls, both sessions traced to a JSON-lines file (samples every 100 ms)",
            Proto::TcplsRead => "TCPLS, 1 stream, 256 KiB write_all, receiver AsyncRead into 256 KiB",
            Proto::Tcpls64 => "TCPLS, 64 streams share the bytes, receivers read_chunk_with",
            Proto::Tcpls1000 => "TCPLS, 1000 streams share the bytes, receivers read_chunk_with, receive_budget 256 MiB",
            Proto::TcplsFixed => "as tcpls, fixed budgets (16 MiB send budget, 4 MiB per stream, 16 MiB receive windows)",
            Proto::Tcpls64Fixed => "as tcpls-64, fixed budgets (16 MiB send budget, 4 MiB per stream, 16 MiB receive windows)",
            Proto::Tcpls1000Fixed => "as tcpls-1000, fixed budgets (16 MiB send budget, 4 MiB per stream, 16 MiB windows)",
        }
    }
}

/// The budgets of before autotuning (the `*-fixed` variants): what autotuning is compared with.
fn fixed_budgets(settings: tcpls::SessionConfig) -> tcpls::SessionConfig {
    tcpls::SessionConfig {
        send_autotune: false,
        receive_autotune: false,
        send_budget: 16 << 20,
        stream_send_buffer: 4 << 20,
        stream_receive_window: 16 << 20,
        ..settings
    }
}

/// Bytes of stream `i` of `streams` when `total` bytes are split (the first ones carry the rest).
pub fn share(total: u64, streams: u32, i: u32) -> u64 {
    let n = u64::from(streams.max(1));
    total / n + u64::from(u64::from(i) < total % n)
}

/// The server's first line: where to connect.
#[derive(Debug, Serialize, Deserialize)]
pub struct Ready {
    pub port: u16,
}

/// What each side measured. Times are `CLOCK_MONOTONIC` nanoseconds (comparable across the
/// two processes); CPU is user and system time of the whole process over its active window.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SideReport {
    /// Bytes written (client) or received (server).
    pub bytes: u64,
    /// Client: just before the first write. Server: when the last expected byte was read.
    pub t_ns: u64,
    pub cpu_user_ns: u64,
    pub cpu_sys_ns: u64,
    /// The receiving TCPLS session's counters (server side of TCPLS transfers only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcpls: Option<TcplsReceiverStats>,
    /// Peak resident set size of the process (`VmHWM`), KiB, when it reported.
    #[serde(default)]
    pub peak_rss_kib: u64,
    /// Receiver of a multi-stream transfer: for each stream, `(bytes, CLOCK_MONOTONIC ns when
    /// its last byte was read)`, for per-stream goodput and fairness.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub streams: Vec<(u64, u64)>,
}

/// This process's peak resident set size (`VmHWM` in /proc/self/status), KiB; 0 if unknown.
pub fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Jain's fairness index of `x`: (sum x)^2 / (n * sum x^2), 1 when all are equal, 1/n when one
/// gets everything.
pub fn jain_index(x: &[f64]) -> f64 {
    let sum: f64 = x.iter().sum();
    let squares: f64 = x.iter().map(|v| v * v).sum();
    if x.is_empty() || squares == 0.0 {
        return f64::NAN;
    }
    sum * sum / (x.len() as f64 * squares)
}

/// What the receiving TCPLS session says about its receive path and its connections.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct TcplsReceiverStats {
    /// `SessionStats::zero_copy_bytes`: decrypted straight into the stream's buffer.
    pub zero_copy_bytes: u64,
    /// `SessionStats::copied_bytes`: decrypted elsewhere, then copied.
    pub copied_bytes: u64,
    /// Bytes received on each TCP connection of the session (records, headers included).
    pub connection_bytes: Vec<u64>,
}

/// The payload every protocol sends: the `tcpls-pattern` stream of this seed (the payload of
/// `tcpls perf`), written as borrowed slices of its table, so producing it costs nothing.
pub const PAYLOAD_SEED: u64 = 0;

/// The trace sink of a `tcpls-trace` side: a JSON-lines file in the temporary directory, left
/// there for a look (a few KiB per run).
pub fn trace_sink(proto: Proto, side: &str) -> Result<Option<std::sync::Arc<tcpls::JsonLinesTrace>>, String> {
    if proto != Proto::TcplsTrace {
        return Ok(None);
    }
    let path = std::env::temp_dir().join(format!("tcpls-bench-trace-{}-{side}.jsonl", std::process::id()));
    // TCPLS_BENCH_TRACE_SAMPLE_MS=1 samples every millisecond (the cost of denser samples).
    let ms = std::env::var("TCPLS_BENCH_TRACE_SAMPLE_MS").ok().and_then(|v| v.parse().ok()).unwrap_or(100);
    let interval = Some(std::time::Duration::from_millis(ms));
    let sink = tcpls::JsonLinesTrace::with_sample_interval(&path, interval)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    Ok(Some(std::sync::Arc::new(sink)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_add_up() {
        for total in [0u64, 1, 63, 64, 65, 2 << 30, (2 << 30) + 17] {
            let sum: u64 = (0..MANY_STREAMS).map(|i| share(total, MANY_STREAMS, i)).sum();
            assert_eq!(sum, total);
        }
        assert_eq!(share(10, 1, 0), 10);
    }

    #[test]
    fn jain() {
        assert!((jain_index(&[3.0, 3.0, 3.0]) - 1.0).abs() < 1e-12);
        assert!((jain_index(&[1.0, 0.0, 0.0, 0.0]) - 0.25).abs() < 1e-12);
        assert!(jain_index(&[]).is_nan());
    }
}
