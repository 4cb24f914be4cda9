//! The userspace link emulator: one [`LinkDirection`] per path and direction.
//!
//! A reader thread takes IP packets from a TUN device, applies blackhole/down, random loss and
//! the bottleneck model (drop-tail queue of `queue_packets` in front of a serialiser running at
//! `rate`), and schedules each packet for `tx_end + delay`. A writer thread writes packets back
//! into the same TUN device at their due time; the kernel then forwards them on.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tcpls_proto::sync::{wait_timeout_unpoisoned, LockExt};

use crate::sys;

/// Parameters of one direction of a link. All can be changed at runtime.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkParams {
    /// One-way propagation delay added to every packet.
    pub delay: Duration,
    /// Delay variation: an extra delay drawn uniformly in [0, jitter] every [`JITTER_PERIOD`]
    /// (a path whose RTT wanders, as a Wi-Fi or cellular link's does), never reordering packets:
    /// when the extra delay drops, packets queued behind slower ones leave with them.
    pub jitter: Duration,
    /// Bottleneck rate in bit/s counted on IP packet bytes (0 = unlimited).
    pub rate_bps: u64,
    /// Drop-tail queue limit: packets waiting for or in serialisation (0 = unlimited).
    pub queue_packets: usize,
    /// Independent random loss probability in [0, 1].
    pub loss: f64,
    /// Drop everything (also packets already in flight) while set.
    pub blackhole: bool,
    /// Link is up. While down everything is dropped, like a blackhole.
    pub up: bool,
}

impl Default for LinkParams {
    fn default() -> Self {
        LinkParams {
            delay: Duration::ZERO,
            jitter: Duration::ZERO,
            rate_bps: 0,
            queue_packets: 1000,
            loss: 0.0,
            blackhole: false,
            up: true,
        }
    }
}

/// Packet and byte counters of one direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Packets/bytes read from the TUN device (offered to the link).
    pub rx_packets: u64,
    pub rx_bytes: u64,
    /// Packets/bytes delivered (written back to the kernel).
    pub tx_packets: u64,
    pub tx_bytes: u64,
    /// Dropped because the queue was full.
    pub drop_queue: u64,
    /// Dropped by random loss.
    pub drop_loss: u64,
    /// Dropped because of blackhole or link down.
    pub drop_blackhole: u64,
    /// Link-local control traffic of the TUN device itself (IPv6 MLD/RS, multicast), discarded
    /// and not counted in `rx_*`.
    pub ignored: u64,
    /// Sum over delivered packets of (actual write time − scheduled time), in ns: the
    /// emulator's own timing error (thread wake-up latency). Mean = `late_ns / tx_packets`.
    pub late_ns: u64,
    /// Sum over delivered packets of (scheduled time − actual write time) for packets written
    /// early because of the wake-up compensation, in ns.
    pub early_ns: u64,
}

#[derive(Default)]
struct Counters {
    rx_packets: AtomicU64,
    rx_bytes: AtomicU64,
    tx_packets: AtomicU64,
    tx_bytes: AtomicU64,
    drop_queue: AtomicU64,
    drop_loss: AtomicU64,
    drop_blackhole: AtomicU64,
    ignored: AtomicU64,
    late_ns: AtomicU64,
    early_ns: AtomicU64,
}

struct Pending {
    due: Instant,
    data: Vec<u8>,
}

struct Queue {
    /// Packets in flight, in delivery order (due times are non-decreasing).
    pending: VecDeque<Pending>,
    /// Serialisation end times of packets still in the bottleneck queue.
    backlog: VecDeque<Instant>,
    /// When the serialiser becomes free.
    tx_free: Instant,
    /// Due time of the last scheduled packet (to never reorder when the delay shrinks).
    last_due: Instant,
}

struct Shared {
    params: Mutex<LinkParams>,
    queue: Mutex<Queue>,
    cv: Condvar,
    stop: AtomicBool,
    counters: Counters,
}

/// How often the jitter's extra delay is drawn again.
pub const JITTER_PERIOD: Duration = Duration::from_millis(100);

/// Hard cap on packets in flight (protects memory when rate is unlimited).
const MAX_IN_FLIGHT: usize = 200_000;

/// Upper bound of the writer's wake-up compensation.
const MAX_EARLY_NS: f64 = 500_000.0;
/// Its starting value (typical wake-up latency measured on the test VM).
const INITIAL_EARLY_NS: f64 = 60_000.0;

/// One running direction of the emulator (owns its threads; stops them on drop).
pub struct LinkDirection {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<()>>,
}

impl LinkDirection {
    /// Start emulating on `tun` (a TUN device opened in `IFF_NO_PI` mode).
    pub fn start(tun: File, params: LinkParams, name: &str) -> std::io::Result<LinkDirection> {
        let now = Instant::now();
        let shared = Arc::new(Shared {
            params: Mutex::new(params),
            queue: Mutex::new(Queue {
                pending: VecDeque::new(),
                backlog: VecDeque::new(),
                tx_free: now,
                last_due: now,
            }),
            cv: Condvar::new(),
            stop: AtomicBool::new(false),
            counters: Counters::default(),
        });
        let tun = Arc::new(tun);
        let (s1, t1) = (shared.clone(), tun.clone());
        let reader =
            std::thread::Builder::new().name(format!("netem-rd-{name}")).spawn(move || reader_loop(&s1, &t1))?;
        let (s2, t2) = (shared.clone(), tun);
        let writer =
            match std::thread::Builder::new().name(format!("netem-wr-{name}")).spawn(move || writer_loop(&s2, &t2)) {
                Ok(w) => w,
                Err(e) => {
                    shared.stop.store(true, Ordering::SeqCst);
                    let _ = reader.join();
                    return Err(e);
                }
            };
        Ok(LinkDirection { shared, threads: vec![reader, writer] })
    }

    /// Current parameters.
    pub fn params(&self) -> LinkParams {
        *self.shared.params.lock_unpoisoned()
    }

    /// Change parameters with a closure.
    pub fn update(&self, f: impl FnOnce(&mut LinkParams)) {
        let mut p = self.shared.params.lock_unpoisoned();
        f(&mut p);
        drop(p);
        self.shared.cv.notify_all();
    }

    /// Counters so far.
    pub fn stats(&self) -> LinkStats {
        let c = &self.shared.counters;
        LinkStats {
            rx_packets: c.rx_packets.load(Ordering::Relaxed),
            rx_bytes: c.rx_bytes.load(Ordering::Relaxed),
            tx_packets: c.tx_packets.load(Ordering::Relaxed),
            tx_bytes: c.tx_bytes.load(Ordering::Relaxed),
            drop_queue: c.drop_queue.load(Ordering::Relaxed),
            drop_loss: c.drop_loss.load(Ordering::Relaxed),
            drop_blackhole: c.drop_blackhole.load(Ordering::Relaxed),
            ignored: c.ignored.load(Ordering::Relaxed),
            late_ns: c.late_ns.load(Ordering::Relaxed),
            early_ns: c.early_ns.load(Ordering::Relaxed),
        }
    }

    /// Stop the threads (also done on drop).
    pub fn stop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.shared.cv.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for LinkDirection {
    fn drop(&mut self) {
        self.stop();
    }
}

/// SplitMix64 — statistically good, tiny, no dependency. Good enough for loss decisions.
struct Rng(u64);

impl Rng {
    fn new() -> Rng {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1);
        Rng(t ^ (u64::from(std::process::id()) << 40) ^ SEQ.fetch_add(0x9E37_79B9, Ordering::Relaxed))
    }
    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn serialisation_time(bytes: usize, rate_bps: u64) -> Duration {
    if rate_bps == 0 {
        return Duration::ZERO;
    }
    Duration::from_nanos(((bytes as u128 * 8 * 1_000_000_000) / rate_bps as u128) as u64)
}

/// Packets a router never forwards: multicast destinations and IPv6 link-local sources. The
/// kernel emits such packets on the TUN device itself (MLD reports, router solicitations).
fn is_local_control(pkt: &[u8]) -> bool {
    match pkt.first().map(|b| b >> 4) {
        Some(4) if pkt.len() >= 20 => (224..240).contains(&pkt[16]) || pkt[16..20] == [255; 4],
        Some(6) if pkt.len() >= 40 => pkt[24] == 0xff || (pkt[8] == 0xfe && pkt[9] & 0xc0 == 0x80),
        _ => false,
    }
}

/// Timing setup of an emulator thread: 1 µs timer slack, and `SCHED_FIFO` (low RT priority)
/// unless `TCPLS_NETEM_NO_RT` is set, so that CPU-hungry neighbours (builds, the tests' own
/// senders) do not delay packet releases. The threads block between packets, so they cannot
/// starve anything; the kernel's RT throttling is a further guard.
fn tune_thread() {
    sys::set_timer_slack_ns(1_000);
    if std::env::var_os("TCPLS_NETEM_NO_RT").is_none() {
        sys::set_realtime(RT_PRIORITY);
    }
}

/// `SCHED_FIFO` priority of emulator threads.
const RT_PRIORITY: i32 = 10;

fn reader_loop(shared: &Shared, tun: &File) {
    tune_thread();
    let mut rng = Rng::new();
    let mut buf = vec![0u8; 65536];
    let c = &shared.counters;
    // The jitter's current extra delay and when it is drawn again.
    let mut extra = Duration::ZERO;
    let mut redraw = Instant::now();
    while !shared.stop.load(Ordering::Relaxed) {
        match sys::poll_readable(tun.as_raw_fd(), Duration::from_millis(100)) {
            Ok(true) => {}
            Ok(false) => continue,
            Err(_) => {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
        }
        let n = match (&*tun).read(&mut buf) {
            Ok(0) => continue,
            Ok(n) => n,
            Err(_) => continue,
        };
        let now = Instant::now();
        if is_local_control(&buf[..n]) {
            c.ignored.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        c.rx_packets.fetch_add(1, Ordering::Relaxed);
        c.rx_bytes.fetch_add(n as u64, Ordering::Relaxed);
        let p = *shared.params.lock_unpoisoned();
        if p.blackhole || !p.up {
            c.drop_blackhole.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        if p.loss > 0.0 && rng.next_f64() < p.loss {
            c.drop_loss.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let mut q = shared.queue.lock_unpoisoned();
        while q.backlog.front().is_some_and(|&end| end <= now) {
            q.backlog.pop_front();
        }
        if (p.queue_packets > 0 && q.backlog.len() >= p.queue_packets) || q.pending.len() >= MAX_IN_FLIGHT {
            c.drop_queue.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let tx_start = q.tx_free.max(now);
        let tx_end = tx_start + serialisation_time(n, p.rate_bps);
        q.tx_free = tx_end;
        if p.rate_bps > 0 {
            q.backlog.push_back(tx_end);
        }
        if p.jitter.is_zero() {
            extra = Duration::ZERO;
        } else if now >= redraw {
            extra = p.jitter.mul_f64(rng.next_f64());
            redraw = now + JITTER_PERIOD;
        }
        let due = (tx_end + p.delay + extra).max(q.last_due);
        q.last_due = due;
        let was_empty = q.pending.is_empty();
        q.pending.push_back(Pending { due, data: buf[..n].to_vec() });
        drop(q);
        if was_empty {
            shared.cv.notify_one();
        }
    }
}

fn writer_loop(shared: &Shared, tun: &File) {
    tune_thread();
    let c = &shared.counters;
    let mut batch: Vec<Pending> = Vec::new();
    // Self-calibrating wake-up compensation: timed waits return late by the scheduler's
    // wake-up latency (≈ 100 µs on the test VM), so we aim early by an EWMA of that lateness.
    let mut early_ns: f64 = INITIAL_EARLY_NS;
    loop {
        {
            let mut q = shared.queue.lock_unpoisoned();
            loop {
                if shared.stop.load(Ordering::Relaxed) {
                    return;
                }
                let now = Instant::now();
                let early = Duration::from_nanos(early_ns as u64);
                match q.pending.front() {
                    None => q = wait_timeout_unpoisoned(&shared.cv, q, Duration::from_millis(100)).0,
                    Some(p) if p.due <= now + early => break,
                    Some(p) => {
                        let target = p.due - early;
                        let wait = target - now;
                        let (g, res) = wait_timeout_unpoisoned(&shared.cv, q, wait);
                        q = g;
                        if res.timed_out() {
                            let late = Instant::now().saturating_duration_since(target).as_nanos() as f64;
                            early_ns = (early_ns + 0.25 * (late - early_ns)).clamp(0.0, MAX_EARLY_NS);
                        }
                    }
                }
            }
            let release = Instant::now() + Duration::from_nanos(early_ns as u64);
            while q.pending.front().is_some_and(|p| p.due <= release) {
                if let Some(p) = q.pending.pop_front() {
                    batch.push(p);
                }
            }
        }
        let p = *shared.params.lock_unpoisoned();
        for pkt in batch.drain(..) {
            if p.blackhole || !p.up {
                c.drop_blackhole.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            if (&*tun).write(&pkt.data).is_ok() {
                let now = Instant::now();
                c.tx_packets.fetch_add(1, Ordering::Relaxed);
                c.tx_bytes.fetch_add(pkt.data.len() as u64, Ordering::Relaxed);
                c.late_ns.fetch_add(now.saturating_duration_since(pkt.due).as_nanos() as u64, Ordering::Relaxed);
                c.early_ns.fetch_add(pkt.due.saturating_duration_since(now).as_nanos() as u64, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialisation() {
        assert_eq!(serialisation_time(1500, 12_000_000), Duration::from_millis(1));
        assert_eq!(serialisation_time(1500, 0), Duration::ZERO);
    }

    #[test]
    fn local_control_detection() {
        let mut v6 = [0u8; 40];
        v6[0] = 0x60;
        v6[8] = 0xfd;
        v6[24] = 0xfd;
        assert!(!is_local_control(&v6));
        v6[24] = 0xff;
        assert!(is_local_control(&v6));
        v6[24] = 0xfd;
        v6[8] = 0xfe;
        v6[9] = 0x80;
        assert!(is_local_control(&v6));
        let mut v4 = [0u8; 20];
        v4[0] = 0x45;
        v4[16] = 10;
        assert!(!is_local_control(&v4));
        v4[16] = 224;
        assert!(is_local_control(&v4));
    }

    #[test]
    fn rng_loss_fraction() {
        for _ in 0..5 {
            let mut r = Rng::new();
            let n = 100_000;
            let hits = (0..n).filter(|_| r.next_f64() < 0.2).count();
            let f = hits as f64 / n as f64;
            eprintln!("loss fraction {f}");
            assert!((f - 0.2).abs() < 0.01, "{f}");
        }
    }

    #[test]
    fn rng_in_range() {
        let mut r = Rng::new();
        let mut sum = 0.0;
        for _ in 0..10_000 {
            let v = r.next_f64();
            assert!((0.0..1.0).contains(&v));
            sum += v;
        }
        assert!((sum / 10_000.0 - 0.5).abs() < 0.05);
    }
}
