//! What the ends of a transfer share, whatever the protocol (`child` for TCP, TLS and TCPLS,
//! `quic` for QUIC): the receive counter, the port announcement, the payload writer and the
//! server's "done".

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::proto::{peak_rss_kib, Ready, SideReport, IO_SIZE, PAYLOAD_SEED};
use crate::sys::{monotonic_ns, Cpu};
use crate::Res;

/// Counts received bytes over all streams and records the moment the last expected one
/// arrived (with the CPU time so far). Lock-free, so that 1000 reader tasks adding to it do not
/// contend on a lock of the benchmark's own (a profile showed the mutex in the 1000-stream
/// receiver; the interleaved A/B after the change was within noise: 0.316 vs 0.322 s/GiB).
pub struct Counter {
    expected: u64,
    bytes: AtomicU64,
    done: OnceLock<(u64, Cpu)>,
}

impl Counter {
    pub fn new(expected: u64) -> Arc<Self> {
        Arc::new(Self { expected, bytes: AtomicU64::new(0), done: OnceLock::new() })
    }

    pub fn add(&self, n: usize) {
        let before = self.bytes.fetch_add(n as u64, Ordering::Relaxed);
        // Exactly one add crosses `expected`: it records the moment.
        if before < self.expected && before + n as u64 >= self.expected {
            let _ = self.done.set((monotonic_ns(), Cpu::now()));
        }
    }

    /// Total bytes so far.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Total bytes, and the time and CPU at the last expected byte (or now, if it never came).
    pub fn finish(&self, cpu0: Cpu) -> SideReport {
        let (t, cpu) = self.done.get().copied().unwrap_or_else(|| (monotonic_ns(), Cpu::now()));
        let cpu = cpu.since(cpu0);
        SideReport {
            bytes: self.bytes(),
            t_ns: t,
            cpu_user_ns: cpu.user_ns,
            cpu_sys_ns: cpu.sys_ns,
            tcpls: None,
            peak_rss_kib: peak_rss_kib(),
            streams: Vec::new(),
            timeline: Vec::new(),
            congestion_control: None,
        }
    }
}

pub fn announce(port: u16) -> Res<()> {
    println!("{}", serde_json::to_string(&Ready { port })?);
    use std::io::Write;
    std::io::stdout().flush()?;
    Ok(())
}

pub fn localhost() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

/// What the TCPLS server sends back on stream 0 once it has received every byte.
pub const DONE: &[u8] = b"done";

/// Writes the first `bytes` bytes of the payload ([`PAYLOAD_SEED`]) in 256 KiB (or shorter, at
/// the end) pieces.
pub async fn write_payload<W: AsyncWrite + Unpin>(w: &mut W, bytes: u64) -> Res<()> {
    let mut sent = 0;
    while sent < bytes {
        let piece = tcpls_pattern::chunk(PAYLOAD_SEED, sent, (bytes - sent).min(IO_SIZE as u64) as usize);
        w.write_all(piece).await?;
        sent += piece.len() as u64;
    }
    Ok(())
}

/// What a receiver does besides counting: `longfat` checks every byte and samples the
/// received total over time (`compare` does neither: it measures CPU cost, and checking costs
/// CPU).
#[derive(Debug, Clone, Copy, Default)]
pub struct ReceiverChecks {
    /// Compare every received byte with the payload (each stream carries it from offset 0).
    pub verify: bool,
    /// Sample the bytes received so far this often (CLOCK_MONOTONIC), for goodput over time.
    pub timeline: Option<std::time::Duration>,
}

/// The content check of one received stream: every byte against the payload from offset 0.
pub struct StreamCheck(Option<tcpls_pattern::Verifier>);

impl StreamCheck {
    pub fn new(checks: ReceiverChecks) -> Self {
        Self(checks.verify.then(|| tcpls_pattern::Verifier::new(PAYLOAD_SEED)))
    }

    pub fn feed(&mut self, data: &[u8]) {
        if let Some(v) = &mut self.0 {
            v.feed(data);
        }
    }

    /// At the end of the stream: an error if a byte differed from the payload.
    pub fn finish(&self) -> Res<()> {
        match &self.0 {
            Some(v) if !v.verified(v.len()) => {
                Err(format!("received bytes differ from the payload (within the first {} bytes)", v.len()).into())
            }
            _ => Ok(()),
        }
    }
}

/// Most timeline samples kept (a day at 1 s, 2.7 hours at 100 ms): bounds the memory.
const MAX_TIMELINE_SAMPLES: usize = 100_000;

/// Samples a [`Counter`] every period on a thread of its own (the runtime's workers may be
/// busy), until every expected byte arrived or [`TimelineSampler::finish`] is called.
pub struct TimelineSampler {
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<(u64, u64)>>>,
}

impl TimelineSampler {
    pub fn start(counter: Arc<Counter>, period: Option<std::time::Duration>) -> Res<Self> {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let Some(period) = period else {
            return Ok(Self { stop, thread: None });
        };
        let stopped = stop.clone();
        let thread = std::thread::Builder::new().name("timeline".into()).spawn(move || {
            let mut samples = vec![(monotonic_ns(), counter.bytes())];
            while !stopped.load(Ordering::Relaxed) && samples.len() < MAX_TIMELINE_SAMPLES {
                std::thread::sleep(period);
                let bytes = counter.bytes();
                samples.push((monotonic_ns(), bytes));
                if bytes >= counter.expected {
                    break;
                }
            }
            samples
        })?;
        Ok(Self { stop, thread: Some(thread) })
    }

    /// `(CLOCK_MONOTONIC ns, bytes received so far)` pairs; the last expected byte's moment is
    /// added as the final sample.
    pub fn finish(mut self, counter: &Counter) -> Vec<(u64, u64)> {
        self.stop.store(true, Ordering::Relaxed);
        let mut samples = self.thread.take().and_then(|t| t.join().ok()).unwrap_or_default();
        if let Some(&(t, _)) = counter.done.get() {
            samples.retain(|&(at, _)| at < t);
            samples.push((t, counter.expected));
        }
        samples
    }
}
