//! Decryptions per record for `experiments streams`, counted on the sans-IO core.
//!
//! The tokio `Session` reports bytes per connection but not records, so this runs the same
//! transfer (N streams, the same order) between two `tcpls_proto::Session`s joined in memory,
//! whose per-connection counters are public: the sender's `records_sent` and the receiver's
//! `records_received`, which counts the records the receiver decrypted (each AEAD open that
//! succeeded). An open that fails is fatal in v2 framing — the connection fails with
//! bad_record_mac (PROTOCOL.md §2), there is no trying another key — so the failed decryptions
//! are those of a failed receiving session: 0 or 1. Decryptions per record is therefore
//! `(records_received + failed) / records_sent`; TCPLS v1 needed up to one per stream.
//!
//! The sending [`Order`] and the receiver's budget are defined here, and `streams` uses them,
//! so that the two transfers cannot drift apart.

use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use tcpls::proto::{tcpls_client_config, tcpls_server_config, ConnId, Event, Session, SessionConfig, StreamId};

use crate::pattern::{self, Verifier};
use crate::pki::Pki;
use crate::tcpls_run::{decode_request, encode_request, REQUEST_LEN};

/// The order in which the sender serves its streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    Sequential,
    RoundRobinFirst,
    RoundRobinLast,
}

impl Order {
    pub const ALL: [Order; 3] = [Order::Sequential, Order::RoundRobinFirst, Order::RoundRobinLast];

    pub fn key(self) -> &'static str {
        match self {
            Order::Sequential => "sequential",
            Order::RoundRobinFirst => "rr_first",
            Order::RoundRobinLast => "rr_last",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Order::Sequential => "sequential (one stream after the other)",
            Order::RoundRobinFirst => "round-robin from the first stream",
            Order::RoundRobinLast => "round-robin from the last stream",
        }
    }

    /// Stream indices in the order they first get data.
    pub fn first_writes(self, n: usize) -> Vec<usize> {
        match self {
            Order::RoundRobinLast => (0..n).rev().collect(),
            _ => (0..n).collect(),
        }
    }
}

/// The receiver's `receive_budget`: room for 1000 streams' initial windows (the default,
/// 64 MiB, admits ~990 streams at once).
pub(crate) const RECEIVER_BUDGET: u64 = 256 << 20;

/// The only connection of the in-memory sessions.
const CONN: ConnId = 0;

/// What one counted transfer gave.
#[derive(Debug, Clone, Copy, Default)]
pub struct RecordCount {
    /// Records the sender sealed on the connection (data, control and close).
    pub records_sent: u64,
    /// Records the receiver decrypted (one AEAD open each).
    pub records_decrypted: u64,
    /// AEAD opens that failed (each fails the connection).
    pub failed_decryptions: u64,
}

impl RecordCount {
    pub fn decryptions_per_record(&self) -> f64 {
        (self.records_decrypted + self.failed_decryptions) as f64 / self.records_sent.max(1) as f64
    }
}

/// A receiving stream: header, then its pattern.
struct Incoming {
    id: StreamId,
    header: Vec<u8>,
    verifier: Option<(u64, Verifier)>,
    done: bool,
}

/// Moves `bytes` over `n` streams in `order` between in-memory sessions and counts records.
pub fn count(pki: &Pki, n: usize, bytes: u64, order: Order) -> Result<RecordCount, String> {
    let per_stream = bytes / n as u64;
    let name = ServerName::try_from("localhost").map_err(|e| e.to_string())?;
    let client_tls = std::sync::Arc::new(tcpls_client_config(&pki.client));
    let server_tls = std::sync::Arc::new(tcpls_server_config(&pki.server));
    let mut sender = Session::client(client_tls, name, SessionConfig::default()).map_err(|e| e.to_string())?;
    let settings = SessionConfig { receive_budget: RECEIVER_BUDGET, ..SessionConfig::default() };
    let mut receiver = Session::server(server_tls, settings).map_err(|e| e.to_string())?;
    let mut now = Instant::now();
    handshake(&mut sender, &mut receiver, &mut now)?;

    let mut ids = Vec::with_capacity(n);
    for _ in 0..n {
        ids.push(sender.open_stream().map_err(|e| format!("open stream: {e}"))?);
    }
    // Bytes written per stream, the 16-byte header included.
    let total = per_stream + REQUEST_LEN as u64;
    let mut written = vec![0u64; n];
    let sequence = order.first_writes(n);
    // Round-robin orders: every stream first gets one record's worth, in order.
    if order != Order::Sequential {
        for &i in &sequence {
            let upto = total.min(REQUEST_LEN as u64 + (16 << 10));
            write_some(&mut sender, ids[i], i, per_stream, &mut written[i], upto)?;
            if written[i] == total {
                sender.finish(ids[i]).map_err(|e| format!("finish: {e}"))?;
            }
        }
    }
    let mut incoming: Vec<Incoming> = Vec::new();
    let mut finished = 0;
    let mut idle = 0;
    while finished < n {
        for &i in &sequence {
            if written[i] < total {
                write_some(&mut sender, ids[i], i, per_stream, &mut written[i], total)?;
                if written[i] == total {
                    sender.finish(ids[i]).map_err(|e| format!("finish: {e}"))?;
                }
            }
            // Sequential: the next stream only once this one has everything queued.
            if order == Order::Sequential && written[i] < total {
                break;
            }
        }
        now += Duration::from_micros(50);
        let moved = pump(&mut sender, &mut receiver, now);
        while let Some(e) = receiver.poll_event() {
            if let Event::StreamOpened(_) = e {
                while let Some(id) = receiver.accept_stream() {
                    incoming.push(Incoming { id, header: Vec::new(), verifier: None, done: false });
                }
            }
        }
        for s in incoming.iter_mut().filter(|s| !s.done) {
            read_stream(&mut receiver, s, per_stream)?;
            finished += usize::from(s.done);
        }
        let back = pump(&mut receiver, &mut sender, now);
        while sender.poll_event().is_some() {}
        if let Some(e) = receiver.error() {
            return Ok(counts(&sender, &receiver, Some(e.to_string())));
        }
        if moved || back {
            idle = 0;
        } else {
            // Let timers (delayed ACKs) fire, a bounded number of times.
            idle += 1;
            if idle > 50 {
                let queued: u64 = written.iter().sum();
                return Err(format!(
                    "in-memory transfer ({}, {n} streams) stalled with {finished} streams done, {} accepted, {queued} bytes queued, receiver error {:?}",
                    order.key(),
                    incoming.len(),
                    receiver.error()
                ));
            }
            now += Duration::from_millis(30);
        }
    }
    // Whatever the sender sealed last (e.g. after the final credit) reaches the receiver too.
    pump(&mut sender, &mut receiver, now);
    Ok(counts(&sender, &receiver, receiver.error().map(|e| e.to_string())))
}

fn counts(sender: &Session, receiver: &Session, failure: Option<String>) -> RecordCount {
    let sent = sender.connection_stats(CONN).unwrap_or_default();
    let received = receiver.connection_stats(CONN).unwrap_or_default();
    if let Some(e) = &failure {
        crate::note(&format!("streams: the receiving session failed: {e}"));
    }
    RecordCount {
        records_sent: sent.records_sent,
        records_decrypted: received.records_received,
        failed_decryptions: u64::from(failure.is_some()),
    }
}

/// Queues stream `i`'s header and pattern up to `upto` bytes (or as much as its buffer takes).
fn write_some(
    s: &mut Session,
    id: StreamId,
    i: usize,
    per_stream: u64,
    written: &mut u64,
    upto: u64,
) -> Result<(), String> {
    let e = |e: tcpls::StreamError| format!("write: {e}");
    if *written == 0 {
        let header = encode_request(per_stream, i as u64);
        if s.write(id, &header).map_err(e)? != REQUEST_LEN {
            return Ok(());
        }
        *written = REQUEST_LEN as u64;
    }
    while *written < upto {
        let off = *written - REQUEST_LEN as u64;
        let c = pattern::chunk(i as u64, off, (upto - *written).min(256 << 10) as usize);
        let took = s.write(id, c).map_err(e)?;
        if took == 0 {
            break;
        }
        *written += took as u64;
    }
    Ok(())
}

/// Reads what stream `s` has, checking it.
fn read_stream(r: &mut Session, s: &mut Incoming, per_stream: u64) -> Result<(), String> {
    loop {
        let chunk = match r.recv_chunk(s.id).map_err(|e| format!("receive: {e}"))? {
            None => return Ok(()),
            Some(c) => c,
        };
        if chunk.is_empty() {
            let ok = s.verifier.as_ref().is_some_and(|(bytes, v)| *bytes == per_stream && v.verified(per_stream));
            if !ok {
                return Err(format!("stream {} arrived incomplete or corrupted", s.id));
            }
            s.done = true;
            return Ok(());
        }
        let len = chunk.len();
        let mut data = chunk;
        if s.verifier.is_none() {
            let need = REQUEST_LEN - s.header.len();
            let take = need.min(data.len());
            s.header.extend_from_slice(&data[..take]);
            data = &data[take..];
            if let Ok(h) = <[u8; REQUEST_LEN]>::try_from(s.header.as_slice()) {
                let (bytes, seed) = decode_request(&h);
                s.verifier = Some((bytes, Verifier::new(seed)));
            }
        }
        if let Some((_, v)) = s.verifier.as_mut() {
            v.feed(data);
        }
        r.consume(s.id, len);
    }
}

fn handshake(client: &mut Session, server: &mut Session, now: &mut Instant) -> Result<(), String> {
    for _ in 0..1000 {
        *now += Duration::from_micros(10);
        let a = pump(client, server, *now);
        let b = pump(server, client, *now);
        while client.poll_event().is_some() {}
        while server.poll_event().is_some() {}
        if !a && !b && client.is_established() && server.is_established() {
            return Ok(());
        }
    }
    Err(format!("in-memory handshake did not complete: {:?} / {:?}", client.error(), server.error()))
}

/// Moves everything `from` has sealed to `to`; whether anything moved.
fn pump(from: &mut Session, to: &mut Session, now: Instant) -> bool {
    from.prepare_transmit(now);
    let data = from.transmit_data(CONN).to_vec();
    if data.is_empty() {
        return false;
    }
    from.transmit_advance(CONN, data.len());
    to.handle_data(CONN, &data, now);
    true
}
