//! Event traces: every event of a session's core, as it is dispatched, handed to a
//! [`TraceSink`] with the time since the trace started. [`JsonLinesTrace`] writes them as JSON
//! lines (docs/OBSERVABILITY.md §4). With no sink set, the cost is one `Option` test per event.
//!
//! `StreamReadable` / `StreamWritable` are left out: they come with nearly every record and
//! only say "look again", which the other events and the session's counters summarize.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use tcpls_proto::{Event, Side};

/// One traced event.
#[derive(Debug)]
pub struct TraceRecord<'a> {
    /// Distinguishes the sessions of one process (numbered from 1 in the order traced).
    pub session: u64,
    pub side: Side,
    /// Since the trace of this session started.
    pub elapsed: Duration,
    pub event: &'a Event,
}

/// Receives the events of the sessions it was given to. Called with the session's lock held:
/// keep it short (buffer, don't block).
pub trait TraceSink: Send + Sync + 'static {
    fn record(&self, record: &TraceRecord<'_>);
}

/// A session's tracing state (in the shared state of the session).
pub(crate) struct Tracer {
    sink: Arc<dyn TraceSink>,
    session: u64,
    start: Instant,
}

static NEXT_SESSION: AtomicU64 = AtomicU64::new(1);

impl Tracer {
    pub(crate) fn new(sink: Arc<dyn TraceSink>) -> Self {
        Self { sink, session: NEXT_SESSION.fetch_add(1, Ordering::Relaxed), start: Instant::now() }
    }

    pub(crate) fn record(&self, side: Side, event: &Event) {
        if matches!(event, Event::StreamReadable(_) | Event::StreamWritable(_)) {
            return;
        }
        let record = TraceRecord { session: self.session, side, elapsed: self.start.elapsed(), event };
        self.sink.record(&record);
    }
}

/// Writes each record as one JSON object per line:
/// `{"t_us":1234,"session":1,"side":"client","event":"ConnectionClosed","conn":1,"error":null}`.
/// Lines are buffered and written when the buffer fills, on [`flush`](Self::flush) and when
/// the sink is dropped.
pub struct JsonLinesTrace {
    out: Mutex<BufWriter<File>>,
}

impl JsonLinesTrace {
    pub fn create(path: &Path) -> std::io::Result<Self> {
        Ok(Self { out: Mutex::new(BufWriter::new(File::create(path)?)) })
    }

    pub fn flush(&self) -> std::io::Result<()> {
        self.out.lock().unwrap_or_else(|e| e.into_inner()).flush()
    }
}

impl TraceSink for JsonLinesTrace {
    fn record(&self, r: &TraceRecord<'_>) {
        let mut line = Map::new();
        line.insert("t_us".into(), json!(r.elapsed.as_micros() as u64));
        line.insert("session".into(), json!(r.session));
        line.insert("side".into(), json!(if r.side == Side::Client { "client" } else { "server" }));
        let (name, fields) = describe(r.event);
        line.insert("event".into(), json!(name));
        line.extend(fields);
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        // A full disk must not take the session down: the trace just stops growing.
        let _ = writeln!(out, "{}", Value::Object(line));
    }
}

impl Drop for JsonLinesTrace {
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

fn error_text(e: &Option<tcpls_proto::Error>) -> Value {
    e.as_ref().map_or(Value::Null, |e| json!(e.to_string()))
}

/// The event's name and its fields. Join tokens are credentials: never written. Events not
/// listed here (ones added later, say) are traced by name only.
fn describe(event: &Event) -> (String, Map<String, Value>) {
    let (name, fields) = match event {
        Event::Established { fallback } => ("Established", json!({ "fallback": fallback })),
        Event::StreamOpened(id) => ("StreamOpened", json!({ "stream": id })),
        Event::TokensReceived { total } => ("TokensReceived", json!({ "total": total })),
        Event::TokenIssued { sequence, .. } => ("TokenIssued", json!({ "sequence": sequence })),
        Event::TokenUsed { sequence } => ("TokenUsed", json!({ "sequence": sequence })),
        Event::ConnectionEstablished { conn } => ("ConnectionEstablished", json!({ "conn": conn })),
        Event::StreamSteered { stream, conn } => ("StreamSteered", json!({ "stream": stream, "conn": conn })),
        Event::PeerAddressAdded { address_id, addr } => {
            ("PeerAddressAdded", json!({ "address_id": address_id, "addr": addr.to_string() }))
        }
        Event::PeerAddressRemoved { address_id } => ("PeerAddressRemoved", json!({ "address_id": address_id })),
        Event::PeerTcpInfo { conn, info } => (
            "PeerTcpInfo",
            json!({ "conn": conn, "rtt_us": info.rtt_us, "rttvar_us": info.rttvar_us, "cwnd": info.cwnd,
                    "total_retrans": info.total_retrans, "delivery_rate": info.delivery_rate,
                    "bytes_acked": info.bytes_acked }),
        ),
        Event::RttMeasured { conn, rtt_us } => ("RttMeasured", json!({ "conn": conn, "rtt_us": rtt_us })),
        Event::RateLimited { conn, bytes_per_second } => {
            ("RateLimited", json!({ "conn": conn, "bytes_per_second": bytes_per_second }))
        }
        Event::SocketOptionApplied { conn, option, value, result } => (
            "SocketOptionApplied",
            json!({ "conn": conn, "option": option, "value": value, "error": result.as_ref().err() }),
        ),
        Event::SteerRequested { stream, conn } => ("SteerRequested", json!({ "stream": stream, "conn": conn })),
        Event::ConnectionClosed { conn, error } => {
            ("ConnectionClosed", json!({ "conn": conn, "error": error_text(error) }))
        }
        Event::FailedOver { conn } => ("FailedOver", json!({ "conn": conn })),
        Event::Closed { error } => ("Closed", json!({ "error": error_text(error) })),
        other => {
            let debug = format!("{other:?}");
            let name: String = debug.chars().take_while(char::is_ascii_alphanumeric).collect();
            return (name, Map::new());
        }
    };
    match fields {
        Value::Object(map) => (name.to_string(), map),
        _ => (name.to_string(), Map::new()),
    }
}
