//! Event traces: what a session did and decided, handed to a [`TraceSink`] as it happens.
//! [`JsonLinesTrace`] writes them as JSON lines structured like qlog events
//! (docs/OBSERVABILITY.md §4). With no sink set, the cost is one `Option` test per core event
//! and per driver poll: nothing is formatted, allocated or sampled.
//!
//! Three kinds of events:
//! * the core's events ([`TraceEvent::Core`]) as they are dispatched, except `StreamReadable` /
//!   `StreamWritable`, which come with nearly every record and only say "look again";
//! * **samples**, every [`TraceSink::sample_interval`] (100 ms by default) while the session
//!   moves data, and just before a connection ends: per-connection counters (bytes and records
//!   each way, unacknowledged records, the kernel's RTT and congestion window), per-stream
//!   progress, memory use, what failover re-sent. Per-record events would cost a line per
//!   16 KiB record; the samples aggregate them, and the records the scheduler put on each
//!   connection are the differences between two samples;
//! * changes seen when sampling: key updates, streams becoming flow-control blocked, streams
//!   closing; the path manager's decisions ([`TraceEvent::Path`]); and what the IO layer did
//!   with the peer's socket-option requests ([`TraceEvent::SocketOption`]).

use std::collections::HashMap;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{json, Value};
use tcpls_proto::sync::LockExt;
use tcpls_proto::{ConnId, ConnStats, Event, MemoryUse, Side, StreamId, StreamProgress};

use crate::events::SocketOptionApplied;

/// One traced event.
#[derive(Debug)]
pub struct TraceRecord<'a> {
    /// Distinguishes the sessions of one process (numbered from 1 in the order traced).
    pub session: u64,
    pub side: Side,
    /// Since the trace of this session started.
    pub elapsed: Duration,
    pub event: TraceEvent<'a>,
}

/// What happened.
#[derive(Debug)]
pub enum TraceEvent<'a> {
    /// An event of the session's core.
    Core(&'a Event),
    /// Counters of one connection (sampled).
    Connection(&'a ConnectionSample),
    /// Progress of one stream whose counters moved since the last sample.
    Stream(&'a StreamProgress),
    /// A stream seen at the previous sample is gone: both halves ended (finished or reset).
    StreamClosed(&'a StreamProgress),
    /// A stream's new data waits for the peer's flow-control credit (seen at a sample).
    StreamBlocked(&'a StreamProgress),
    /// The peer finished (FIN) or reset its direction of a stream (seen at a sample).
    StreamPeerEnded(&'a StreamProgress),
    /// The application opened a stream, finished its sending half or reset it (`what`:
    /// "opened", "finished", "reset"; `error_code` for a reset).
    StreamLocal { stream: StreamId, what: &'static str, error_code: Option<u32> },
    /// KeyUpdates on a connection since the last sample: the totals sent and received.
    KeyUpdated { conn: ConnId, sent: u64, received: u64 },
    /// Memory use of the session and what failover re-sent so far (sampled).
    Session(&'a SessionSample),
    /// A decision of the client's path manager.
    Path(&'a PathEvent),
    /// The IO layer applied (or refused) a peer's request to change a socket option.
    SocketOption(&'a SocketOptionApplied),
    /// The core's `FailedOver`, with the session's totals of what failover re-sent so far
    /// (records and their stream bytes), this failover included.
    FailedOver { conn: ConnId, records_resent: u64, stream_bytes_resent: u64 },
}

/// One connection's counters at a sample.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ConnectionSample {
    pub conn: ConnId,
    pub stats: ConnStats,
    /// Sent records kept for failover, not yet acknowledged.
    pub unacked_records: u64,
    /// The kernel's view (`TCP_INFO`), if the socket is open: smoothed RTT, congestion window
    /// (segments), retransmitted segments.
    pub rtt_us: Option<u32>,
    pub cwnd: Option<u32>,
    pub tcp_retrans: Option<u32>,
}

/// Session-wide numbers at a sample.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SessionSample {
    pub memory: MemoryUse,
    pub failovers: u64,
    pub records_resent: u64,
    pub stream_bytes_resent: u64,
}

/// What the path manager did with one path (server address + local side).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathEvent {
    /// `up` (joined as `conn`), `lost` (its connection ended), `failed` (an attempt failed,
    /// retried after `retry_ms`), `dropped` (its interface went away).
    pub state: &'static str,
    pub remote: std::net::SocketAddr,
    /// The local side, as `PathOptions` displays it ("" for the default route).
    pub local: String,
    pub conn: Option<ConnId>,
    pub error: Option<String>,
    pub retry_ms: Option<u64>,
}

/// Receives the events of the sessions it was given to. Called with the session's lock held:
/// keep it short (buffer, don't block).
pub trait TraceSink: Send + Sync + 'static {
    fn record(&self, record: &TraceRecord<'_>);

    /// How often a session moving data is sampled; `None`: no samples, core events only.
    fn sample_interval(&self) -> Option<Duration> {
        Some(DEFAULT_SAMPLE_INTERVAL)
    }

    /// Writes out what is buffered (called by [`flush_default_trace`]).
    fn flush(&self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Samples of a busy session: 10 a second.
pub const DEFAULT_SAMPLE_INTERVAL: Duration = Duration::from_millis(100);

static DEFAULT_SINK: OnceLock<Arc<dyn TraceSink>> = OnceLock::new();

/// Traces every session this process makes from now on (connectors and listeners without a
/// sink of their own), like `SSLKEYLOGFILE` does for keys: what `tcpls --trace FILE` uses.
/// Set once; later calls return false and change nothing.
pub fn set_default_trace(sink: Arc<dyn TraceSink>) -> bool {
    DEFAULT_SINK.set(sink).is_ok()
}

/// Flushes the sink set by [`set_default_trace`], if any: call it before `std::process::exit`
/// (statics are not dropped).
pub fn flush_default_trace() -> std::io::Result<()> {
    DEFAULT_SINK.get().map_or(Ok(()), |sink| sink.flush())
}

pub(crate) fn default_trace() -> Option<Arc<dyn TraceSink>> {
    DEFAULT_SINK.get().cloned()
}

/// What the previous sample saw of a stream.
#[derive(Clone, Copy)]
struct StreamMark {
    last: StreamProgress,
    seen: bool,
}

/// A session's tracing state (in the shared state of the session).
pub(crate) struct Tracer {
    sink: Arc<dyn TraceSink>,
    session: u64,
    start: Instant,
    interval: Option<Duration>,
    next_sample: Instant,
    conns: HashMap<ConnId, (ConnStats, (u64, u64))>,
    streams: HashMap<StreamId, StreamMark>,
    last_session: SessionSample,
}

static NEXT_SESSION: AtomicU64 = AtomicU64::new(1);

impl Tracer {
    pub(crate) fn new(sink: Arc<dyn TraceSink>) -> Self {
        let interval = sink.sample_interval();
        let start = Instant::now();
        Self {
            sink,
            session: NEXT_SESSION.fetch_add(1, Ordering::Relaxed),
            start,
            interval,
            next_sample: start,
            conns: HashMap::new(),
            streams: HashMap::new(),
            last_session: SessionSample::default(),
        }
    }

    fn emit(&self, side: Side, event: TraceEvent<'_>) {
        let record = TraceRecord { session: self.session, side, elapsed: self.start.elapsed(), event };
        self.sink.record(&record);
    }

    pub(crate) fn record(&self, proto: &tcpls_proto::Session, event: &Event) {
        let side = proto.side();
        match event {
            Event::StreamReadable(_) | Event::StreamWritable(_) => {}
            Event::FailedOver { conn } => {
                let stats = proto.stats();
                let (records_resent, stream_bytes_resent) = (stats.records_resent, stats.stream_bytes_resent);
                self.emit(side, TraceEvent::FailedOver { conn: *conn, records_resent, stream_bytes_resent });
            }
            _ => self.emit(side, TraceEvent::Core(event)),
        }
    }

    pub(crate) fn stream(&self, side: Side, stream: StreamId, what: &'static str, error_code: Option<u32>) {
        self.emit(side, TraceEvent::StreamLocal { stream, what, error_code });
    }

    pub(crate) fn path(&self, side: Side, event: &PathEvent) {
        self.emit(side, TraceEvent::Path(event));
    }

    pub(crate) fn socket_option(&self, side: Side, outcome: &SocketOptionApplied) {
        self.emit(side, TraceEvent::SocketOption(outcome));
    }

    /// Whether a sample is due (cheap: one clock read when tracing with samples).
    pub(crate) fn sample_due(&self, now: Instant) -> bool {
        self.interval.is_some() && now >= self.next_sample
    }

    /// Samples the session: the connections and streams whose counters moved, then what
    /// changed (key updates, blocked streams, closed streams, memory, failover totals).
    pub(crate) fn sample(
        &mut self,
        proto: &tcpls_proto::Session,
        tcp_info: &dyn Fn(ConnId) -> Option<crate::tcp_info::TcpInfo>,
        now: Instant,
    ) {
        let Some(interval) = self.interval else { return };
        self.next_sample = now + interval;
        let side = proto.side();
        let ids = proto.connection_ids();
        // Connections the session forgot are forgotten here too (bounded by the session's).
        self.conns.retain(|c, _| ids.contains(c));
        for conn in ids {
            let Some(stats) = proto.connection_stats(conn) else { continue };
            let keys = proto.key_updates(conn);
            let previous = self.conns.insert(conn, (stats, keys));
            if previous.is_some_and(|(s, _)| s == stats) {
                continue;
            }
            let info = tcp_info(conn);
            let sample = ConnectionSample {
                conn,
                stats,
                unacked_records: proto.connection_unacked_records(conn) as u64,
                rtt_us: info.map(|i| i.rtt_us),
                cwnd: info.map(|i| i.cwnd),
                tcp_retrans: info.map(|i| i.total_retrans),
            };
            self.emit(side, TraceEvent::Connection(&sample));
            if previous.is_some_and(|(_, k)| k != keys) || (previous.is_none() && keys != (0, 0)) {
                self.emit(side, TraceEvent::KeyUpdated { conn, sent: keys.0, received: keys.1 });
            }
        }
        for mark in self.streams.values_mut() {
            mark.seen = false;
        }
        let mut moved = Vec::new();
        proto.for_each_stream_progress(|p| {
            let mark =
                self.streams.entry(p.stream).or_insert(StreamMark { last: StreamProgress::default(), seen: false });
            let was = mark.last;
            mark.seen = true;
            mark.last = p;
            let first = was == StreamProgress::default();
            let changed = first
                || was.sent != p.sent
                || was.acked != p.acked
                || was.received != p.received
                || was.written != p.written;
            let blocked = p.blocked && (first || !was.blocked);
            let ended = p.peer_final_size.is_some() && (first || was.peer_final_size.is_none());
            if changed || blocked || ended {
                moved.push((p, blocked, ended));
            }
        });
        for (p, blocked, ended) in &moved {
            self.emit(side, TraceEvent::Stream(p));
            if *blocked {
                self.emit(side, TraceEvent::StreamBlocked(p));
            }
            if *ended {
                self.emit(side, TraceEvent::StreamPeerEnded(p));
            }
        }
        let gone: Vec<StreamId> = self.streams.iter().filter(|(_, m)| !m.seen).map(|(id, _)| *id).collect();
        for id in gone {
            if let Some(mark) = self.streams.remove(&id) {
                self.emit(side, TraceEvent::StreamClosed(&mark.last));
            }
        }
        let stats = proto.stats();
        let session = SessionSample {
            memory: proto.memory_use(),
            failovers: stats.failovers,
            records_resent: stats.records_resent,
            stream_bytes_resent: stats.stream_bytes_resent,
        };
        if session != self.last_session {
            self.last_session = session;
            self.emit(side, TraceEvent::Session(&session));
        }
    }
}

/// Writes each record as one JSON object per line, structured like a qlog event
/// (draft-ietf-quic-qlog-main-schema: `time`, `name` = `namespace:type`, `data`), in the
/// `tcpls` namespace:
/// `{"time":12.345,"name":"tcpls:connection_lost","group_id":1,"side":"client","data":{"conn":1,"error":"..."}}`.
/// The first line is a header naming the format and the reference time. Lines are buffered
/// and written when the buffer fills, on [`flush`](Self::flush) and when the sink is dropped.
pub struct JsonLinesTrace {
    out: Mutex<BufWriter<File>>,
    start: Instant,
    interval: Option<Duration>,
}

impl JsonLinesTrace {
    /// Creates (truncates) `path` and writes the header line.
    pub fn create(path: &Path) -> std::io::Result<Self> {
        Self::with_sample_interval(path, Some(DEFAULT_SAMPLE_INTERVAL))
    }

    /// Like [`create`](Self::create), sampling every `interval` (`None`: no samples).
    pub fn with_sample_interval(path: &Path, interval: Option<Duration>) -> std::io::Result<Self> {
        let mut out = BufWriter::new(File::create(path)?);
        let epoch_ms = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64() * 1e3);
        let header = json!({
            "qlog_version": "0.4",
            "qlog_format": "JSON-LINES",
            "title": "tcpls event trace",
            "description": "one JSON object per line after this one; docs/OBSERVABILITY.md section 4",
            "common_fields": { "time_format": "relative", "reference_time": epoch_ms, "protocol_type": ["TCPLS"] },
            "sample_interval_ms": interval.map(|i| i.as_millis() as u64),
        });
        writeln!(out, "{header}")?;
        // On disk at once: a reader (`tail -f`, a test) finds the file well-formed from the start.
        out.flush()?;
        Ok(Self { out: Mutex::new(out), start: Instant::now(), interval })
    }

    pub fn flush(&self) -> std::io::Result<()> {
        self.out.lock_unpoisoned().flush()
    }
}

impl TraceSink for JsonLinesTrace {
    fn record(&self, r: &TraceRecord<'_>) {
        let (name, data) = describe(&r.event);
        let time = self.start.elapsed().as_micros() as f64 / 1e3;
        let line = json!({
            "time": time,
            "name": format!("tcpls:{name}"),
            "group_id": r.session,
            "side": if r.side == Side::Client { "client" } else { "server" },
            "data": data,
        });
        let mut text = line.to_string();
        text.push('\n');
        let mut out = self.out.lock_unpoisoned();
        // One write per line: the file only ever holds whole lines when the buffer goes out (a
        // reader of a live server's trace never sees half a line). A full disk must not take the
        // session down: the trace just stops growing.
        let _ = out.write_all(text.as_bytes());
    }

    fn sample_interval(&self) -> Option<Duration> {
        self.interval
    }

    fn flush(&self) -> std::io::Result<()> {
        JsonLinesTrace::flush(self)
    }
}

impl Drop for JsonLinesTrace {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

/// A sink that drops everything but still makes the session sample: the cost of tracing
/// without the cost of writing (the benchmarks use it).
#[derive(Debug, Default)]
pub struct NullTrace {
    pub records: AtomicU64,
}

impl TraceSink for NullTrace {
    fn record(&self, _: &TraceRecord<'_>) {
        self.records.fetch_add(1, Ordering::Relaxed);
    }
}

fn error_text(e: &Option<tcpls_proto::Error>) -> Value {
    e.as_ref().map_or(Value::Null, |e| json!(e.to_string()))
}

fn stream_json(p: &StreamProgress) -> Value {
    json!({ "stream": p.stream, "written": p.written, "sent": p.sent, "acked": p.acked,
            "max_data": p.max_data, "blocked": p.blocked, "received": p.received,
            "peer_final_size": p.peer_final_size, "peer_reset": p.peer_reset })
}

/// The event's name (after `tcpls:`) and its data. Join tokens are credentials: never
/// written. Core events not listed here (ones added later, say) are traced by name only.
pub fn describe(event: &TraceEvent<'_>) -> (String, Value) {
    let (name, data) = match event {
        TraceEvent::Core(e) => return describe_core(e),
        TraceEvent::Connection(s) => (
            "connection_sample",
            json!({ "conn": s.conn, "bytes_sent": s.stats.bytes_sent, "bytes_received": s.stats.bytes_received,
                    "records_sent": s.stats.records_sent, "records_received": s.stats.records_received,
                    "unacked_records": s.unacked_records, "rtt_us": s.rtt_us, "cwnd": s.cwnd,
                    "tcp_retrans": s.tcp_retrans }),
        ),
        TraceEvent::Stream(p) => ("stream_progress", stream_json(p)),
        TraceEvent::StreamClosed(p) => ("stream_closed", stream_json(p)),
        TraceEvent::StreamBlocked(p) => ("stream_blocked", stream_json(p)),
        TraceEvent::StreamPeerEnded(p) => ("stream_peer_ended", stream_json(p)),
        TraceEvent::StreamLocal { stream, what, error_code } => {
            let name = match *what {
                "opened" => "stream_opened",
                "reset" => "stream_reset",
                _ => "stream_finished",
            };
            (name, json!({ "stream": stream, "by": "local", "error_code": error_code }))
        }
        TraceEvent::KeyUpdated { conn, sent, received } => {
            ("key_updated", json!({ "conn": conn, "sent": sent, "received": received }))
        }
        TraceEvent::Session(s) => (
            "session_sample",
            json!({ "receive_credit": s.memory.receive_credit, "receive_budget": s.memory.receive_budget,
                    "receive_allocated": s.memory.receive_allocated, "send_buffered": s.memory.send_buffered,
                    "unacked_records": s.memory.unacked_records, "unacked_control_bytes": s.memory.unacked_control_bytes,
                    "failovers": s.failovers, "records_resent": s.records_resent,
                    "stream_bytes_resent": s.stream_bytes_resent }),
        ),
        TraceEvent::FailedOver { conn, records_resent, stream_bytes_resent } => (
            "failed_over",
            json!({ "conn": conn, "records_resent_total": records_resent,
                    "stream_bytes_resent_total": stream_bytes_resent }),
        ),
        TraceEvent::SocketOption(SocketOptionApplied { conn, option, value, result }) => (
            "socket_option_applied",
            json!({ "conn": conn, "option": option, "value": value, "error": result.as_ref().err() }),
        ),
        TraceEvent::Path(p) => (
            "path_updated",
            json!({ "state": p.state, "remote": p.remote.to_string(), "local": p.local, "conn": p.conn,
                    "error": p.error, "retry_ms": p.retry_ms }),
        ),
    };
    (name.to_string(), data)
}

fn describe_core(event: &Event) -> (String, Value) {
    let (name, data) = match event {
        Event::Established { fallback } => ("established", json!({ "fallback": fallback })),
        Event::StreamOpened(id) => ("stream_opened", json!({ "stream": id, "by": "peer" })),
        Event::TokensReceived { total } => ("tokens_received", json!({ "total": total })),
        Event::TokenIssued { sequence, .. } => ("token_issued", json!({ "sequence": sequence })),
        Event::TokenUsed { sequence } => ("token_used", json!({ "sequence": sequence })),
        Event::ConnectionEstablished { conn } => ("connection_joined", json!({ "conn": conn })),
        Event::StreamSteered { stream, conn } => ("stream_steered", json!({ "stream": stream, "conn": conn })),
        Event::PeerAddressAdded { address_id, addr } => {
            ("peer_address_added", json!({ "address_id": address_id, "addr": addr.to_string() }))
        }
        Event::PeerAddressRemoved { address_id } => ("peer_address_removed", json!({ "address_id": address_id })),
        Event::PeerTcpInfo { conn, info } => (
            "peer_tcp_info",
            json!({ "conn": conn, "rtt_us": info.rtt_us, "rttvar_us": info.rttvar_us, "cwnd": info.cwnd,
                    "total_retrans": info.total_retrans, "delivery_rate": info.delivery_rate,
                    "bytes_acked": info.bytes_acked }),
        ),
        Event::RttMeasured { conn, rtt_us } => ("rtt_measured", json!({ "conn": conn, "rtt_us": rtt_us })),
        Event::RateLimited { conn, bytes_per_second } => {
            ("rate_limited", json!({ "conn": conn, "bytes_per_second": bytes_per_second }))
        }
        Event::SteerRequested { stream, conn } => ("steer_requested", json!({ "stream": stream, "conn": conn })),
        Event::ConnectionClosed { conn, error: Some(e) } => {
            ("connection_lost", json!({ "conn": conn, "error": e.to_string() }))
        }
        Event::ConnectionClosed { conn, error: None } => ("connection_closed", json!({ "conn": conn, "error": null })),
        Event::FailedOver { conn } => ("failed_over", json!({ "conn": conn })),
        Event::PathSuspected { conn } => ("path_suspected", json!({ "conn": conn })),
        Event::PathRecovered { conn } => ("path_recovered", json!({ "conn": conn })),
        Event::AllConnectionsLost => ("all_connections_lost", json!({})),
        Event::PeerClosed => ("peer_closed", json!({})),
        Event::Closed { error } => ("closed", json!({ "error": error_text(error) })),
        other => {
            let debug = format!("{other:?}");
            let name: String = debug.chars().take_while(char::is_ascii_alphanumeric).collect();
            return (snake_case(&name), json!({}));
        }
    };
    (name.to_string(), data)
}

fn snake_case(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_snake_case_in_the_tcpls_namespace() {
        assert_eq!(snake_case("JoinRequested"), "join_requested");
        let (name, data) = describe(&TraceEvent::Core(&Event::JoinRequested));
        assert_eq!((name.as_str(), data), ("join_requested", json!({})));
        let lost = Event::ConnectionClosed { conn: 1, error: Some(tcpls_proto::Error::ConnectionLost("rst".into())) };
        assert_eq!(describe(&TraceEvent::Core(&lost)).0, "connection_lost");
        let token = Event::TokenIssued { sequence: 3, token: [7; 32] };
        let (_, data) = describe(&TraceEvent::Core(&token));
        assert_eq!(data, json!({ "sequence": 3 }), "the token itself is never traced");
        let refused = SocketOptionApplied {
            conn: 0,
            option: "congestion_control",
            value: "vegas".into(),
            result: Err("not allowed".into()),
        };
        let (name, data) = describe(&TraceEvent::SocketOption(&refused));
        assert_eq!(name, "socket_option_applied");
        assert_eq!(
            data,
            json!({ "conn": 0, "option": "congestion_control", "value": "vegas", "error": "not allowed" })
        );
    }
}
