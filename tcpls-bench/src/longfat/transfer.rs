//! One measured transfer across the test bed: the same server and client processes as
//! `compare` (hidden `server` / `client` subcommands), started with `ip netns exec` in the
//! server and the client namespace; the receiver checks every byte and samples its progress.
//! For the RTT jump, a thread changes the path's delay while the transfer runs.

use std::sync::mpsc;
use std::time::{Duration, Instant};

use tcpls_netem::{LinkStats, Side};

use super::bed::Bed;
use crate::compare::{read_json, spawn_side, Children, Watchdog};
use crate::proto::{Proto, Ready, SideReport};
use crate::sys::{monotonic_ns, Cpu, LoadMeter};
use crate::Res;

/// How often the receiver samples its byte count.
pub const TIMELINE_MS: u64 = 100;

/// A delay change during the transfer.
#[derive(Debug, Clone, Copy)]
pub struct Jump {
    /// One-way delay before and after, ms.
    pub from_ms: f64,
    pub to_ms: f64,
    /// Seconds after the first MiB of data crossed the path.
    pub at_s: f64,
}

/// What to run.
pub struct Spec<'a> {
    pub proto: Proto,
    pub bytes: u64,
    pub jump: Option<Jump>,
    pub timeout: Duration,
    pub worker_threads: usize,
    /// The sender's TCP congestion control.
    pub cc: &'a str,
    pub env: &'a [(&'static str, String); 2],
}

/// What one transfer measured.
pub struct Measured {
    pub sent: SideReport,
    pub received: SideReport,
    /// CLOCK_MONOTONIC ns when the delay changed (None: no jump, or the transfer ended first).
    pub jump_ns: Option<u64>,
    /// The emulator's data-direction counters over the transfer.
    pub emulator: LinkStats,
    /// CPU time of this process over the run, as a share of one CPU over the same wall time:
    /// the emulator's threads (both directions), as the process does nothing else meanwhile
    /// but wait for its children.
    pub emulator_cpu_share: f64,
    pub other_load: Option<f64>,
}

fn counters_since(after: LinkStats, before: LinkStats) -> LinkStats {
    LinkStats {
        rx_packets: after.rx_packets - before.rx_packets,
        rx_bytes: after.rx_bytes - before.rx_bytes,
        tx_packets: after.tx_packets - before.tx_packets,
        tx_bytes: after.tx_bytes - before.tx_bytes,
        drop_queue: after.drop_queue - before.drop_queue,
        drop_loss: after.drop_loss - before.drop_loss,
        drop_blackhole: after.drop_blackhole - before.drop_blackhole,
        ignored: after.ignored - before.ignored,
        late_ns: after.late_ns - before.late_ns,
        early_ns: after.early_ns - before.early_ns,
    }
}

/// Data that must have crossed the path before the jump's clock starts: the transfer is under
/// way (handshakes and process start-up, slow in a debug build or on a loaded machine, are
/// behind it).
const JUMP_CLOCK_BYTES: u64 = 1 << 20;

/// How often the jump thread looks at the emulator's counters while it waits for the data.
const JUMP_POLL: Duration = Duration::from_millis(5);

/// Waits until [`JUMP_CLOCK_BYTES`] have crossed the path in the data direction, then
/// `jump.at_s` more, unless cancelled first; then changes the delay and returns when.
fn jump_thread(bed: &Bed, jump: Jump, cancel: mpsc::Receiver<()>) -> Option<u64> {
    let delivered0 = bed.data_direction().tx_bytes;
    while bed.data_direction().tx_bytes < delivered0 + JUMP_CLOCK_BYTES {
        if !matches!(cancel.recv_timeout(JUMP_POLL), Err(mpsc::RecvTimeoutError::Timeout)) {
            return None;
        }
    }
    match cancel.recv_timeout(Duration::from_secs_f64(jump.at_s)) {
        Err(mpsc::RecvTimeoutError::Timeout) => {
            bed.set_delay_ms(jump.to_ms);
            Some(monotonic_ns())
        }
        _ => None,
    }
}

fn side_args(spec: &Spec, side: &str) -> Vec<String> {
    vec![
        side.to_string(),
        "--proto".into(),
        spec.proto.name().into(),
        "--bytes".into(),
        spec.bytes.to_string(),
        "--worker-threads".into(),
        spec.worker_threads.to_string(),
    ]
}

pub fn run(bed: &Bed, spec: &Spec) -> Res<Measured> {
    if let Some(j) = spec.jump {
        bed.set_delay_ms(j.from_ms);
    }
    let load = LoadMeter::start();
    let emulator0 = bed.data_direction();
    let (cpu0, wall0) = (Cpu::now(), Instant::now());
    let watchdog = Watchdog::start(spec.timeout);
    let mut children = Children(Vec::new());
    let (cancel_jump, cancelled) = mpsc::channel::<()>();
    let (result, jump_ns) = std::thread::scope(|scope| {
        let mut jumper = None;
        let result = (|| -> Res<(SideReport, SideReport)> {
            let mut args = side_args(spec, "server");
            args.extend(["--listen".into(), format!("{}:0", bed.server()), "--verify".into()]);
            args.extend(["--timeline-ms".into(), TIMELINE_MS.to_string()]);
            let (server, mut server_out) = spawn_side(Some(&bed.wrap(Side::Server)), &args, spec.env)?;
            watchdog.watch(&server);
            children.0.push(server);
            let ready: Ready = read_json(&mut server_out, "server")?;
            let mut args = side_args(spec, "client");
            args.extend(["--host".into(), bed.server().to_string(), "--port".into(), ready.port.to_string()]);
            args.extend(["--cc".into(), spec.cc.to_string()]);
            let (client, mut client_out) = spawn_side(Some(&bed.wrap(Side::Client)), &args, spec.env)?;
            watchdog.watch(&client);
            children.0.push(client);
            jumper = spec.jump.map(|j| scope.spawn(move || jump_thread(bed, j, cancelled)));
            let sent: SideReport = read_json(&mut client_out, "client")?;
            let received: SideReport = read_json(&mut server_out, "server")?;
            Ok((sent, received))
        })();
        let _ = cancel_jump.send(());
        let jump_ns = jumper.and_then(|h| h.join().ok()).flatten();
        (result, jump_ns)
    });
    watchdog.stop();
    let (sent, received) = result?;
    children.wait_all()?;
    let emulator = counters_since(bed.data_direction(), emulator0);
    let cpu = Cpu::now().since(cpu0);
    let emulator_cpu_share = (cpu.user_ns + cpu.sys_ns) as f64 / 1e9 / wall0.elapsed().as_secs_f64().max(1e-9);
    if received.bytes != spec.bytes || sent.bytes != spec.bytes {
        return Err(format!(
            "byte count mismatch: sent {}, received {}, expected {}",
            sent.bytes, received.bytes, spec.bytes
        )
        .into());
    }
    if sent.congestion_control.as_deref() != Some(spec.cc) {
        return Err(
            format!("the sender asked for {} but its sockets use {:?}", spec.cc, sent.congestion_control).into()
        );
    }
    if received.t_ns <= sent.t_ns {
        return Err("clock went backwards between first write and last read".into());
    }
    let jump_ns = jump_ns.filter(|&t| t < received.t_ns);
    Ok(Measured { sent, received, jump_ns, emulator, emulator_cpu_share, other_load: load.others() })
}
