//! Sending and verifying the perf payload on one stream (shared by client and server).
//!
//! A transfer ends in one of two ways. By its byte count: the sender sends FIN after the last
//! byte and the receiver reads to the end. By time (the `--time` deadline, or Ctrl-C on the
//! client): the sender resets the stream with [`TIME_UP`]. The reset drops what is still queued
//! in the session (up to the session's send budget), so a run ends at its
//! deadline even when that queue drains slowly (a `--rate-limit` of a few Mbit/s would take
//! many seconds); the receiver counts and has verified every byte it read before the reset.

use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tcpls::{RecvStream, SendStream};
use tokio::io::AsyncWriteExt;

use crate::pattern;

/// Writes in pieces of this size (the session's send buffer takes them without copying twice).
const WRITE_CHUNK: usize = 256 * 1024;

/// Stream Reset error code of a timed transfer's end (not an error: "time is up").
pub const TIME_UP: u32 = 0x7045_5246; // "pERF"

/// How a sender's transfer ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendEnd {
    /// Every byte asked for was queued, then FIN.
    Complete,
    /// Stopped by time or interruption: the stream was reset with [`TIME_UP`].
    Stopped,
}

/// Sends the pattern of `seed` for `bytes` bytes (FIN after them) or until `stop` completes
/// (then the stream is reset with [`TIME_UP`]). Returns the bytes queued and how it ended.
pub async fn send_pattern(
    send: &mut SendStream,
    seed: u64,
    bytes: u64,
    stop: impl Future<Output = ()>,
    progress: &AtomicU64,
) -> io::Result<(u64, SendEnd)> {
    tokio::pin!(stop);
    let mut offset = 0u64;
    while offset < bytes {
        let want = (bytes - offset).min(WRITE_CHUNK as u64) as usize;
        let data = pattern::chunk(seed, offset, want);
        // `write` is cancel safe: either it took bytes (counted) or it took none.
        let n = tokio::select! {
            biased;
            () = &mut stop => {
                send.reset(TIME_UP)?;
                return Ok((offset, SendEnd::Stopped));
            }
            n = send.write(data) => n?,
        };
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::WriteZero, "the stream accepts no more bytes"));
        }
        offset += n as u64;
        progress.fetch_add(n as u64, Ordering::Relaxed);
    }
    send.shutdown().await?;
    Ok((offset, SendEnd::Complete))
}

/// How a receiver's transfer ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecvEnd {
    /// FIN: the sender sent everything it meant to.
    Finished,
    /// The sender's time was up (Stream Reset with [`TIME_UP`]).
    TimeUp,
    /// We stopped reading (`stop` completed: Ctrl-C).
    Stopped,
}

/// What a receiver reports while it runs: payload bytes verified so far, whether any failed
/// verification, and when payload was delivered (shared by every stream of a session).
pub struct Received<'a> {
    pub bytes: &'a AtomicU64,
    pub corrupt: &'a AtomicBool,
    pub stalls: &'a StallMeter,
    /// This stream's own delivery times.
    pub gaps: &'a Gaps,
}

/// Reads a stream to its end, checking every byte against the pattern of `seed` in place (no
/// copy out of the session), until FIN, a [`TIME_UP`] reset, or `stop`. Returns (bytes,
/// verified, how it ended).
pub async fn receive_pattern(
    recv: &mut RecvStream,
    seed: u64,
    stop: impl Future<Output = ()>,
    progress: &Received<'_>,
) -> io::Result<(u64, bool, RecvEnd)> {
    tokio::pin!(stop);
    let mut offset = 0u64;
    let mut verified = true;
    let ended = |offset, verified, end| {
        progress.stalls.stream_ended(progress.gaps);
        Ok((offset, verified, end))
    };
    loop {
        let read = recv.read_chunk_with(|chunk| {
            if verified && !pattern::verify(seed, offset, chunk) {
                verified = false;
            }
            chunk.len()
        });
        let n = tokio::select! {
            biased;
            () = &mut stop => return ended(offset, verified, RecvEnd::Stopped),
            n = read => n,
        };
        if !verified {
            progress.corrupt.store(true, Ordering::Relaxed);
        }
        let n = match n {
            Ok(n) => n,
            Err(e) if is_time_up(&e) => return ended(offset, verified, RecvEnd::TimeUp),
            Err(e) => {
                progress.stalls.stream_ended(progress.gaps);
                return Err(e);
            }
        };
        if n == 0 {
            return ended(offset, verified, RecvEnd::Finished);
        }
        progress.stalls.delivered(progress.gaps);
        offset += n as u64;
        progress.bytes.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// When one receiver (a stream, or a whole session) got payload: the last time and the longest
/// gap between two deliveries. Two atomics: nothing grows with the run.
#[derive(Default)]
pub struct Gaps {
    /// Nanoseconds since [`epoch`] of the last delivery (0: none yet).
    last: AtomicU64,
    longest: AtomicU64,
}

impl Gaps {
    fn delivered(&self, now: u64) {
        let before = self.last.swap(now, Ordering::Relaxed);
        if before != 0 {
            self.longest.fetch_max(now.saturating_sub(before), Ordering::Relaxed);
        }
    }

    /// The longest gap (ns), counting the one from the last delivery to `end`; None before the
    /// first delivery.
    fn longest_until(&self, end: u64) -> Option<u64> {
        match self.last.load(Ordering::Relaxed) {
            0 => None,
            last => Some(self.longest.load(Ordering::Relaxed).max(end.saturating_sub(last))),
        }
    }
}

/// The stalls of the payload an end received: the longest interval with no payload delivered
/// on any stream of its session, from the first byte to the end of the transfer (the last
/// receiving stream that ended, or now while one is still open), and the longest of any one
/// stream (from its first byte to its end), which a stream steered to a silent path shows
/// even while the others go on.
#[derive(Default)]
pub struct StallMeter {
    session: Gaps,
    /// Of the last end of a receiving stream (0: none yet).
    end: AtomicU64,
    /// The longest stall of a stream that ended, plus one (0: none yet).
    worst_stream: AtomicU64,
}

/// The process's time origin for [`StallMeter`] (an `Instant` cannot live in an atomic).
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Nanoseconds since [`epoch`], never 0 (0 means "never" in the meter).
fn now_ns() -> u64 {
    u64::try_from(epoch().elapsed().as_nanos()).unwrap_or(u64::MAX).max(1)
}

impl StallMeter {
    /// Payload was delivered now on the stream of `stream`.
    pub fn delivered(&self, stream: &Gaps) {
        let now = now_ns();
        self.session.delivered(now);
        stream.delivered(now);
    }

    /// The stream of `stream` ended now (FIN, reset, error, stop, or given up): its last gap
    /// counts up to now.
    pub fn stream_ended(&self, stream: &Gaps) {
        let now = now_ns();
        self.end.fetch_max(now, Ordering::Relaxed);
        if let Some(gap) = stream.longest_until(now) {
            self.worst_stream.fetch_max(gap.saturating_add(1), Ordering::Relaxed);
        }
    }

    /// The session's longest stall so far; None before the first payload byte.
    pub fn longest(&self) -> Option<Duration> {
        let end = match self.end.load(Ordering::Relaxed) {
            0 => now_ns(),
            end => end,
        };
        self.session.longest_until(end).map(Duration::from_nanos)
    }

    /// The longest stall of one stream, over the streams that ended; None if none received.
    pub fn longest_stream(&self) -> Option<Duration> {
        match self.worst_stream.load(Ordering::Relaxed) {
            0 => None,
            n => Some(Duration::from_nanos(n - 1)),
        }
    }
}

/// The peer reset the stream with [`TIME_UP`].
fn is_time_up(e: &io::Error) -> bool {
    e.get_ref()
        .and_then(|inner| inner.downcast_ref::<tcpls::StreamError>())
        .is_some_and(|s| matches!(s, tcpls::StreamError::Reset(TIME_UP)))
}

/// Completes at `deadline` (never without one).
pub async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d.into()).await,
        None => std::future::pending().await,
    }
}

/// Deadline for a request's milliseconds (0: none).
pub fn deadline(millis: u64) -> Option<Instant> {
    (millis > 0).then(|| Instant::now() + Duration::from_millis(millis))
}
