//! The `-i` interval sampler of `tcpls perf`: every interval it reads the payload counters and
//! each connection's bytes and TCP_INFO, prints the lines (human output) and keeps them for the
//! JSON. It also marks the end of the `--omit` warm-up, from which the summary counts.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tcpls::Session;

use super::report::{interval_lines, Interval, IntervalConnection, Output};

/// A stream steered over all connections (`--aggregate`): its payload has no one connection.
pub const SPREAD: u32 = u32::MAX;

/// Payload bytes so far of one stream (written by the client on an upload, read on a download)
/// and the connection it is steered to.
pub struct StreamCounter {
    pub upload: bool,
    pub bytes: AtomicU64,
    /// A download's payload failed verification.
    pub corrupt: AtomicBool,
    /// A download's delivery times.
    pub gaps: crate::transfer::Gaps,
    pub conn: AtomicU32,
}

/// The payload counters of every stream of the run.
pub struct Counters {
    pub streams: Vec<StreamCounter>,
    /// When the downloads delivered payload (the client's longest stall).
    pub stalls: crate::transfer::StallMeter,
}

impl Counters {
    /// `streams`: (upload, connection or [`SPREAD`]) for each stream, in the order of their index.
    pub fn new(streams: impl IntoIterator<Item = (bool, u32)>) -> Self {
        let streams = streams
            .into_iter()
            .map(|(upload, conn)| StreamCounter {
                upload,
                bytes: AtomicU64::new(0),
                corrupt: AtomicBool::new(false),
                gaps: Default::default(),
                conn: AtomicU32::new(conn),
            })
            .collect();
        Self { streams, stalls: Default::default() }
    }

    /// `--migrate-at`: the streams on `from` now go over `to`.
    pub fn migrate(&self, from: u32, to: u32) {
        for s in &self.streams {
            let _ = s.conn.compare_exchange(from, to, Ordering::Relaxed, Ordering::Relaxed);
        }
    }
}

/// Whose TCP_INFO describes the sending side: ours, or the server's (on a download).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SenderView {
    Local,
    Peer,
}

#[derive(Debug, Clone, Copy, Default)]
struct ConnSample {
    bytes_sent: u64,
    bytes_received: u64,
    retransmits: Option<u64>,
    cwnd: Option<u32>,
    rtt_us: Option<u32>,
}

/// The counters at one moment.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Seconds since the transfer started.
    pub at: f64,
    pub upload: u64,
    pub download: u64,
    /// Each stream's payload so far and its connection.
    streams: Vec<(u64, u32)>,
    conns: Vec<(u32, ConnSample)>,
}

impl Snapshot {
    /// Nothing yet: the start of the transfer.
    pub fn zero() -> Self {
        Self { at: 0.0, upload: 0, download: 0, streams: Vec::new(), conns: Vec::new() }
    }

    /// The sender's retransmissions so far, over all connections.
    pub fn retransmits(&self) -> Option<u64> {
        let known: Vec<u64> = self.conns.iter().filter_map(|(_, c)| c.retransmits).collect();
        (!known.is_empty()).then(|| known.iter().sum())
    }
}

pub struct Sampler {
    pub session: Session,
    pub counters: Arc<Counters>,
    pub start: Instant,
    pub omit: Duration,
    /// None: no interval lines (`-i 0`), only the omit mark and the end.
    pub interval: Option<Duration>,
    pub view: SenderView,
    /// Print each interval as it ends (human output).
    pub live: Option<Output>,
    /// Both directions run (`--bidir`): the lines and JSON give each.
    pub bidir: bool,
}

/// What the sampler measured.
pub struct Sampled {
    pub intervals: Vec<Interval>,
    /// The counters when the omitted warm-up ended (at the start without `--omit`; None if
    /// the transfer ended first).
    pub at_omit: Option<Snapshot>,
    pub at_end: Snapshot,
}

/// A final interval shorter than this fraction of `-i` (a timed run ends a moment after its last
/// boundary) is no interval of its own: its rate would mislead. Its bytes join the interval
/// before in the JSON, so that the intervals still add up to the summary; the lines, printed
/// as intervals end, leave it out.
const SHORTEST_LAST_INTERVAL: f64 = 0.1;

impl Sampler {
    /// Samples until `done` completes (the transfer ended), then once more.
    pub async fn run(self, done: impl std::future::Future<Output = ()>) -> Sampled {
        tokio::pin!(done);
        let mut prev = self.snapshot().await;
        let mut at_omit = self.omit.is_zero().then(|| prev.clone());
        let mut intervals = Vec::new();
        let mut boundary = Duration::ZERO;
        // Where the last interval began, and whether it was omitted: a short remainder at the
        // end is merged into it.
        let mut last_start: Option<(Snapshot, bool)> = None;
        loop {
            let next = self.next_boundary(boundary);
            let ended = match next {
                Some(t) => tokio::select! {
                    () = tokio::time::sleep_until((self.start + t).into()) => false,
                    () = &mut done => true,
                },
                None => {
                    (&mut done).await;
                    true
                }
            };
            let now = self.snapshot().await;
            let length = now.at - prev.at;
            let shown = !ended || self.interval.is_some_and(|i| length >= SHORTEST_LAST_INTERVAL * i.as_secs_f64());
            if self.interval.is_some() {
                let omitted = boundary < self.omit;
                match last_start.as_ref().filter(|_| !shown) {
                    // The JSON keeps every byte, so that the intervals add up to the summary.
                    Some((start, was_omitted)) => {
                        if let Some(last) = intervals.last_mut() {
                            *last = self.interval_between(start, &now, *was_omitted);
                        }
                    }
                    None => {
                        let interval = self.interval_between(&prev, &now, omitted);
                        if let Some(output) = self.live.as_ref().filter(|_| shown) {
                            for line in interval_lines(&interval, output.format) {
                                output.out.line(&line);
                            }
                        }
                        intervals.push(interval);
                        last_start = Some((prev.clone(), omitted));
                    }
                }
            }
            if at_omit.is_none() && !ended && next.is_some_and(|t| t >= self.omit) {
                at_omit = Some(now.clone());
            }
            prev = now;
            if ended {
                break;
            }
            boundary = next.unwrap_or(boundary);
        }
        Sampled { intervals, at_omit, at_end: prev }
    }

    /// The interval boundaries: every `-i` seconds, restarting at the end of the omitted time.
    fn next_boundary(&self, last: Duration) -> Option<Duration> {
        match self.interval {
            Some(i) if last < self.omit => Some((last + i).min(self.omit)),
            Some(i) => Some(last + i),
            None if last < self.omit => Some(self.omit),
            None => None,
        }
    }

    async fn snapshot(&self) -> Snapshot {
        let at = self.start.elapsed().as_secs_f64();
        let streams: Vec<(u64, u32)> = self
            .counters
            .streams
            .iter()
            .map(|s| (s.bytes.load(Ordering::Relaxed), s.conn.load(Ordering::Relaxed)))
            .collect();
        let total = |upload: bool| -> u64 {
            self.counters.streams.iter().zip(&streams).filter(|(c, _)| c.upload == upload).map(|(_, s)| s.0).sum()
        };
        let (upload, download) = (total(true), total(false));
        let mut conns = Vec::new();
        for c in self.session.connections() {
            let info = match self.view {
                SenderView::Local => c.tcp_info,
                // A closed connection cannot carry the request; one unanswered in time is skipped.
                SenderView::Peer if c.usable => {
                    tokio::time::timeout(Duration::from_millis(200), self.session.peer_tcp_info(c.id))
                        .await
                        .ok()
                        .and_then(Result::ok)
                }
                SenderView::Peer => None,
            };
            conns.push((
                c.id,
                ConnSample {
                    bytes_sent: c.bytes_sent,
                    bytes_received: c.bytes_received,
                    retransmits: info.map(|i| u64::from(i.total_retrans)),
                    cwnd: info.map(|i| i.cwnd),
                    rtt_us: info.map(|i| i.rtt_us),
                },
            ));
        }
        Snapshot { at, upload, download, streams, conns }
    }

    fn interval_between(&self, a: &Snapshot, b: &Snapshot, omitted: bool) -> Interval {
        let seconds = (b.at - a.at).max(1e-9);
        let before: HashMap<u32, ConnSample> = a.conns.iter().copied().collect();
        // Each stream's payload in the interval goes to the connection it is on now; a stream
        // spread over all of them (--aggregate) leaves the connections' payload unknown.
        let spread = b.streams.iter().any(|&(_, conn)| conn == SPREAD);
        let mut payload: HashMap<u32, u64> = HashMap::new();
        for (i, &(bytes, conn)) in b.streams.iter().enumerate() {
            let then = a.streams.get(i).map_or(0, |s| s.0);
            *payload.entry(conn).or_default() += bytes.saturating_sub(then);
        }
        let connections = b
            .conns
            .iter()
            .map(|(id, now)| {
                let then = before.get(id).copied().unwrap_or_default();
                let sent = now.bytes_sent.saturating_sub(then.bytes_sent);
                let received = now.bytes_received.saturating_sub(then.bytes_received);
                let payload = (!spread).then(|| payload.get(id).copied().unwrap_or(0));
                IntervalConnection {
                    id: *id,
                    bytes_sent: sent,
                    bytes_received: received,
                    bits_per_second: (sent + received) as f64 * 8.0 / seconds,
                    payload_bytes: payload,
                    payload_bits_per_second: payload.map(|p| p as f64 * 8.0 / seconds),
                    retransmits: now.retransmits.map(|n| n.saturating_sub(then.retransmits.unwrap_or(0))),
                    cwnd_segments: now.cwnd,
                    rtt_us: now.rtt_us,
                }
            })
            .collect();
        let (up, down) = (b.upload - a.upload, b.download - a.download);
        Interval {
            start: a.at,
            end: b.at,
            omitted,
            bytes: up + down,
            bits_per_second: (up + down) as f64 * 8.0 / seconds,
            upload_bytes: self.bidir.then_some(up),
            download_bytes: self.bidir.then_some(down),
            connections,
        }
    }
}
