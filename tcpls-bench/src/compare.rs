//! `compare`: runs every protocol once per repetition (rep 1: all, rep 2: all, ...), each run
//! as a fresh server process and a fresh client process, and summarizes.
//!
//! Why separate processes: on a 2-core machine a single runtime with 2 workers would run the
//! sender's and the receiver's tasks on the same two threads, so one side's task can sit queued
//! behind the other's, and their CPU use cannot be told apart. With one process (and runtime)
//! per side, the kernel schedules the two ends like two real peers, each gets its own
//! allocator arenas and timers, and getrusage(RUSAGE_SELF) gives each side's CPU time.

use std::io::{BufRead, BufReader};
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use serde::Serialize;

use crate::pki::Pki;
use crate::proto::{jain_index, Proto, Ready, SideReport, TcplsReceiverStats};
use crate::sys::{kill_child, nproc};
use crate::Res;

const GIB: f64 = (1u64 << 30) as f64;

#[derive(clap::Args)]
pub struct Options {
    /// Bytes per transfer (binary multiples: 64M, 2G, ...).
    #[arg(long, value_parser = parse_size, default_value = "2G")]
    bytes: u64,
    /// Repetitions; each runs every protocol once, in turn.
    #[arg(long, default_value_t = 3)]
    reps: u32,
    /// Print the results as JSON (progress still goes to stderr).
    #[arg(long)]
    json: bool,
    /// Protocols to run (comma-separated), in this order within a repetition.
    #[arg(long, value_delimiter = ',', default_values_t = Proto::DEFAULT.to_vec(), value_enum)]
    protos: Vec<Proto>,
    /// Tokio worker threads in each of the two processes (0: current-thread runtime).
    #[arg(long, default_value_t = 2)]
    worker_threads: usize,
    /// Give up on one transfer after this many seconds.
    #[arg(long, default_value_t = 300)]
    timeout: u64,
    /// Run the client (sender) under this command, split at spaces, e.g.
    /// "perf record -g -o client.data --" or "perf stat -e page-faults --" (for profiling).
    #[arg(long, value_name = "CMD")]
    wrap_client: Option<String>,
    /// Same for the server (receiver).
    #[arg(long, value_name = "CMD")]
    wrap_server: Option<String>,
    /// Pin the server to CPU 0 and the client to CPU 1 (less variance, less realistic: by
    /// default the kernel places both processes' threads freely).
    #[arg(long)]
    pin: bool,
    /// TCPLS clients call `Session::close()` right after their last write instead of first
    /// waiting for the server's "done" reply (reproduces a hang; see README.md).
    #[arg(long)]
    close_early: bool,
}

/// `1500`, `64K`, `256M`, `2G` (binary multiples; a trailing `B` or `iB` is accepted).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let t = t.strip_suffix("iB").or_else(|| t.strip_suffix('B')).unwrap_or(t);
    let (digits, shift) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 10),
        Some('m' | 'M') => (&t[..t.len() - 1], 20),
        Some('g' | 'G') => (&t[..t.len() - 1], 30),
        Some('t' | 'T') => (&t[..t.len() - 1], 40),
        _ => (t, 0),
    };
    let n: u64 = digits.trim().parse().map_err(|_| format!("invalid size {s:?} (examples: 1500, 64K, 256M, 2G)"))?;
    let v = n.checked_mul(1u64 << shift).ok_or_else(|| format!("size {s:?} is too large"))?;
    if v == 0 {
        return Err("size must be at least 1 byte".into());
    }
    Ok(v)
}

/// One transfer.
#[derive(Debug, Clone, Serialize)]
struct Sample {
    rep: u32,
    seconds: f64,
    gbit_s: f64,
    sender_user_s: f64,
    sender_sys_s: f64,
    receiver_user_s: f64,
    receiver_sys_s: f64,
    /// CPU used by anything other than this benchmark while the run's processes were alive,
    /// as a share of the machine's capacity (compiles and tests of others skew results).
    other_load: Option<f64>,
    /// TCPLS: what the receiving session counted (zero-copy and copied bytes, per connection).
    #[serde(skip_serializing_if = "Option::is_none")]
    receiver_tcpls: Option<TcplsReceiverStats>,
    /// Peak resident set size (VmHWM) of the sending and the receiving process, MiB.
    sender_peak_rss_mib: f64,
    receiver_peak_rss_mib: f64,
    /// Multi-stream transfers: Jain's fairness index over the streams' goodputs (each stream's
    /// bytes / (its last byte read - the sender's first write)); 1 = all equal.
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_fairness: Option<f64>,
    /// ... and the slowest and fastest stream's goodput, Mbit/s.
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_mbit_s_min_max: Option<(f64, f64)>,
}

impl Sample {
    fn sender_cpu(&self) -> f64 {
        self.sender_user_s + self.sender_sys_s
    }
    fn receiver_cpu(&self) -> f64 {
        self.receiver_user_s + self.receiver_sys_s
    }
}

#[derive(Debug, Serialize)]
struct CpuPerGib {
    sender: f64,
    receiver: f64,
    total: f64,
}

#[derive(Debug, Serialize)]
struct Summary {
    protocol: &'static str,
    description: &'static str,
    streams: u32,
    median_gbit_s: f64,
    min_gbit_s: f64,
    max_gbit_s: f64,
    /// Median goodput divided by the median goodput of `tls` (absent if `tls` was not run).
    ratio_to_tls: Option<f64>,
    /// Median goodput divided by the median goodput of `quic` (absent if `quic` was not run).
    #[serde(skip_serializing_if = "Option::is_none")]
    ratio_to_quic: Option<f64>,
    /// Medians over the repetitions of CPU seconds (user + system) per GiB transferred.
    cpu_s_per_gib: CpuPerGib,
    /// Largest `other_load` of the samples.
    max_other_load: Option<f64>,
    /// TCPLS: stream bytes the receivers decrypted in place / copied, summed over the samples.
    #[serde(skip_serializing_if = "Option::is_none")]
    zero_copy_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    copied_bytes: Option<u64>,
    /// Medians over the repetitions of the processes' peak RSS, MiB.
    sender_peak_rss_mib: f64,
    receiver_peak_rss_mib: f64,
    /// Median of the samples' Jain's index over per-stream goodputs (multi-stream protocols).
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_fairness: Option<f64>,
    samples: Vec<Sample>,
}

#[derive(Debug, Serialize)]
pub struct Machine {
    pub nproc: usize,
    pub cpu_model: String,
    pub kernel: String,
}

#[derive(Debug, Serialize)]
struct Report {
    date_utc: String,
    machine: Machine,
    bytes: u64,
    reps: u32,
    address: &'static str,
    processes: String,
    io_size: usize,
    content_verified: bool,
    goodput: &'static str,
    cpu: &'static str,
    results: Vec<Summary>,
}

pub fn run(opts: Options) -> Res<()> {
    if opts.protos.is_empty() || opts.reps == 0 {
        return Err("nothing to run: give at least one protocol and one repetition".into());
    }
    let pki = Pki::generate()?;
    let env = pki.env();
    let mut samples: Vec<(Proto, Sample)> = Vec::new();
    for rep in 1..=opts.reps {
        for &proto in &opts.protos {
            let s = run_one(proto, rep, &opts, &env).map_err(|e| format!("{} (rep {rep}): {e}", proto.name()))?;
            eprintln!(
                "rep {rep}/{} {:<11} {:7.2} Gbit/s  {:6.3} s  CPU s/GiB sender {:.3} receiver {:.3}  peak RSS MiB sender {:.0} receiver {:.0}{}  other load {}{}",
                opts.reps,
                proto.name(),
                s.gbit_s,
                s.seconds,
                s.sender_cpu() / (opts.bytes as f64 / GIB),
                s.receiver_cpu() / (opts.bytes as f64 / GIB),
                s.sender_peak_rss_mib,
                s.receiver_peak_rss_mib,
                s.stream_fairness
                    .zip(s.stream_mbit_s_min_max)
                    .map(|(j, (lo, hi))| format!("  fairness (Jain) {j:.3}, stream Mbit/s {lo:.1}..{hi:.1}"))
                    .unwrap_or_default(),
                percent(s.other_load),
                s.receiver_tcpls.as_ref().map(describe_receiver).unwrap_or_default(),
            );
            samples.push((proto, s));
        }
    }
    let report = summarize(&opts, samples);
    if opts.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    Ok(())
}

/// ", zero-copy 0 B, copied 1073741824 B, per connection [..]" for the progress line.
fn describe_receiver(t: &TcplsReceiverStats) -> String {
    let mut out = format!("  zero-copy {} B, copied {} B", t.zero_copy_bytes, t.copied_bytes);
    if t.connection_bytes.len() > 1 {
        out.push_str(&format!(", received per connection {:?}", t.connection_bytes));
    }
    out
}

fn summarize(opts: &Options, samples: Vec<(Proto, Sample)>) -> Report {
    let gib = opts.bytes as f64 / GIB;
    let mut protos: Vec<Proto> = Vec::new();
    for &p in &opts.protos {
        if !protos.contains(&p) {
            protos.push(p);
        }
    }
    let mut results: Vec<Summary> = protos
        .iter()
        .map(|&p| {
            let mine: Vec<Sample> = samples.iter().filter(|(q, _)| *q == p).map(|(_, s)| s.clone()).collect();
            let gbps: Vec<f64> = mine.iter().map(|s| s.gbit_s).collect();
            Summary {
                protocol: p.name(),
                description: p.describe(),
                streams: p.streams(),
                median_gbit_s: median(&gbps),
                min_gbit_s: gbps.iter().copied().fold(f64::INFINITY, f64::min),
                max_gbit_s: gbps.iter().copied().fold(0.0, f64::max),
                ratio_to_tls: None,
                ratio_to_quic: None,
                cpu_s_per_gib: CpuPerGib {
                    sender: median(&mine.iter().map(|s| s.sender_cpu() / gib).collect::<Vec<_>>()),
                    receiver: median(&mine.iter().map(|s| s.receiver_cpu() / gib).collect::<Vec<_>>()),
                    total: median(&mine.iter().map(|s| (s.sender_cpu() + s.receiver_cpu()) / gib).collect::<Vec<_>>()),
                },
                max_other_load: mine.iter().filter_map(|s| s.other_load).reduce(f64::max),
                zero_copy_bytes: p
                    .is_tcpls()
                    .then(|| mine.iter().filter_map(|s| s.receiver_tcpls.as_ref()).map(|t| t.zero_copy_bytes).sum()),
                copied_bytes: p
                    .is_tcpls()
                    .then(|| mine.iter().filter_map(|s| s.receiver_tcpls.as_ref()).map(|t| t.copied_bytes).sum()),
                sender_peak_rss_mib: median(&mine.iter().map(|s| s.sender_peak_rss_mib).collect::<Vec<_>>()),
                receiver_peak_rss_mib: median(&mine.iter().map(|s| s.receiver_peak_rss_mib).collect::<Vec<_>>()),
                stream_fairness: (p.streams() > 1)
                    .then(|| median(&mine.iter().filter_map(|s| s.stream_fairness).collect::<Vec<_>>())),
                samples: mine,
            }
        })
        .collect();
    if let Some(tls) = results.iter().find(|r| r.protocol == Proto::Tls.name()).map(|r| r.median_gbit_s) {
        for r in &mut results {
            r.ratio_to_tls = Some(r.median_gbit_s / tls);
        }
    }
    if let Some(quic) = results.iter().find(|r| r.protocol == Proto::Quic.name()).map(|r| r.median_gbit_s) {
        for r in &mut results {
            r.ratio_to_quic = Some(r.median_gbit_s / quic);
        }
    }
    let mut runtime = if opts.worker_threads == 0 {
        "a current-thread tokio runtime".to_string()
    } else {
        format!("a multi-thread tokio runtime with {} worker threads", opts.worker_threads)
    };
    if opts.pin {
        runtime.push_str(", server pinned to CPU 0 and client to CPU 1");
    }
    Report {
        date_utc: utc_now(),
        machine: machine(),
        bytes: opts.bytes,
        reps: opts.reps,
        address: "127.0.0.1",
        processes: format!(
            "server and client are separate processes (fresh for every transfer), each with {runtime}; \
             the application code runs as a task on that runtime"
        ),
        io_size: crate::proto::IO_SIZE,
        content_verified: false,
        goodput: "bytes / (receiver read the last byte - sender's first write), CLOCK_MONOTONIC across processes",
        cpu: "getrusage(RUSAGE_SELF) user+sys of each process over its active window \
              (sender: first write until the peer closed; receiver: after the handshake until the last byte)",
        results,
    }
}

pub fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn print_table(r: &Report) {
    println!("tcpls-bench compare — {}", r.date_utc);
    println!("machine: {} CPUs, {}, Linux {}", r.machine.nproc, r.machine.cpu_model, r.machine.kernel);
    println!(
        "transfer: {} ({:.2} GiB) client -> server, one connection, on {}; {} repetitions, protocols alternating",
        r.bytes,
        r.bytes as f64 / GIB,
        r.address,
        r.reps
    );
    println!("processes: {}", r.processes);
    println!("payload: the tcpls-pattern stream (seed 0) in 256 KiB writes; the receiver counts bytes exactly but does NOT verify content (correctness is tested elsewhere)");
    println!("goodput: {}", r.goodput);
    println!("cpu: {}", r.cpu);
    println!();
    println!(
        "{:<11} {:>8} {:>8} {:>8} {:>7}   {:>9} {:>8} {:>8}   {:>6}   {:>9}   {:>8} {:>8}   {:>6}",
        "", "Gbit/s", "", "", "ratio", "CPU s/GiB", "", "", "other", "received", "peak RSS", "MiB", "stream"
    );
    println!(
        "{:<11} {:>8} {:>8} {:>8} {:>7}   {:>9} {:>8} {:>8}   {:>6}   {:>9}   {:>8} {:>8}   {:>6}",
        "protocol",
        "median",
        "min",
        "max",
        "to tls",
        "sender",
        "receiver",
        "total",
        "load",
        "zero-copy",
        "sender",
        "receiver",
        "Jain"
    );
    for s in &r.results {
        let ratio = s.ratio_to_tls.map(|x| format!("{x:.2}")).unwrap_or_else(|| "-".into());
        let zero_copy = match (s.zero_copy_bytes, s.copied_bytes) {
            (Some(z), Some(c)) if z + c > 0 => format!("{:.0}%", 100.0 * z as f64 / (z + c) as f64),
            _ => "-".into(),
        };
        let fairness = s.stream_fairness.map(|j| format!("{j:.3}")).unwrap_or_else(|| "-".into());
        println!(
            "{:<11} {:>8.2} {:>8.2} {:>8.2} {:>7}   {:>9.3} {:>8.3} {:>8.3}   {:>6}   {:>9}   {:>8.0} {:>8.0}   {:>6}",
            s.protocol,
            s.median_gbit_s,
            s.min_gbit_s,
            s.max_gbit_s,
            ratio,
            s.cpu_s_per_gib.sender,
            s.cpu_s_per_gib.receiver,
            s.cpu_s_per_gib.total,
            percent(s.max_other_load),
            zero_copy,
            s.sender_peak_rss_mib,
            s.receiver_peak_rss_mib,
            fairness,
        );
    }
    println!();
    println!("CPU s/GiB: medians over the repetitions. other load: the most CPU that other programs used");
    println!(
        "during one of the protocol's runs, as a share of all {} CPUs. received zero-copy: TCPLS",
        r.machine.nproc
    );
    println!("receivers' zero_copy_bytes / (zero_copy_bytes + copied_bytes) over all repetitions.");
    println!("peak RSS: VmHWM of each process at its end, medians. stream Jain: Jain's fairness index over");
    println!("the streams' goodputs (bytes / (its last byte read - first write)), 1 = equal, medians.");
    if r.results.iter().any(|s| s.max_other_load.is_some_and(|l| l > NOISY)) {
        println!(
            "WARNING: other programs used more than {:.0}% of the machine during some runs; results are skewed.",
            NOISY * 100.0
        );
    }
    if let Some(t) = r.results.iter().find(|s| s.protocol == Proto::Tcpls.name()) {
        if let Some(q) = t.ratio_to_quic {
            println!("tcpls / quic: goodput {q:.2}x (medians)");
        }
    }
    println!();
    for s in &r.results {
        println!("  {:<11} {}", s.protocol, s.description);
    }
}

/// Kills (SIGKILL) the given unreaped children unless cancelled within `limit`.
pub struct Watchdog {
    cancel: mpsc::Sender<()>,
    pids: mpsc::Sender<u32>,
    thread: std::thread::JoinHandle<()>,
}

impl Watchdog {
    pub fn start(limit: Duration) -> Self {
        let (cancel, cancelled) = mpsc::channel::<()>();
        let (pids, pid_rx) = mpsc::channel::<u32>();
        let thread = std::thread::spawn(move || {
            if let Err(mpsc::RecvTimeoutError::Timeout) = cancelled.recv_timeout(limit) {
                eprintln!("tcpls-bench: transfer timed out after {} s, killing it", limit.as_secs());
                for pid in pid_rx.try_iter() {
                    kill_child(pid);
                }
            }
        });
        Self { cancel, pids, thread }
    }

    pub fn watch(&self, child: &Child) {
        let _ = self.pids.send(child.id());
    }

    /// Must be called before the children are reaped.
    pub fn stop(self) {
        let _ = self.cancel.send(());
        let _ = self.thread.join();
    }
}

/// Children still to be reaped; on an error path they are killed first.
pub struct Children(pub Vec<Child>);

impl Children {
    pub fn wait_all(&mut self) -> Res<()> {
        for mut c in self.0.drain(..) {
            let status = c.wait()?;
            if !status.success() {
                return Err(format!("a benchmark process failed ({status})").into());
            }
        }
        Ok(())
    }
}

impl Drop for Children {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub fn spawn_side(
    wrap: Option<&str>,
    args: &[String],
    env: &[(&'static str, String); 2],
) -> Res<(Child, BufReader<ChildStdout>)> {
    let exe = std::env::current_exe()?;
    let mut cmd = match wrap.map(|w| w.split_whitespace().collect::<Vec<_>>()) {
        Some(w) if !w.is_empty() => {
            let mut c = Command::new(w[0]);
            c.args(&w[1..]).arg(exe);
            c
        }
        _ => Command::new(exe),
    };
    let mut child = cmd
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let out = child.stdout.take().ok_or("no stdout pipe")?;
    Ok((child, BufReader::new(out)))
}

pub fn read_json<T: serde::de::DeserializeOwned>(out: &mut BufReader<ChildStdout>, who: &str) -> Res<T> {
    let mut line = String::new();
    if out.read_line(&mut line)? == 0 {
        return Err(format!("{who} exited without a report").into());
    }
    serde_json::from_str(line.trim()).map_err(|e| format!("{who} printed {line:?}: {e}").into())
}

fn run_one(proto: Proto, rep: u32, opts: &Options, env: &[(&'static str, String); 2]) -> Res<Sample> {
    let common = |side: &str| {
        let mut args = vec![
            side.to_string(),
            "--proto".into(),
            proto.name().into(),
            "--bytes".into(),
            opts.bytes.to_string(),
            "--worker-threads".into(),
            opts.worker_threads.to_string(),
        ];
        if opts.pin {
            args.extend(["--pin".to_string(), if side == "server" { "0" } else { "1" }.to_string()]);
        }
        args
    };
    let load = crate::sys::LoadMeter::start();
    let watchdog = Watchdog::start(Duration::from_secs(opts.timeout));
    let mut children = Children(Vec::new());
    let result = (|| -> Res<(SideReport, SideReport)> {
        let (server, mut server_out) = spawn_side(opts.wrap_server.as_deref(), &common("server"), env)?;
        watchdog.watch(&server);
        children.0.push(server);
        let ready: Ready = read_json(&mut server_out, "server")?;
        let mut args = common("client");
        args.extend(["--port".to_string(), ready.port.to_string()]);
        if opts.close_early {
            args.push("--close-early".into());
        }
        let (client, mut client_out) = spawn_side(opts.wrap_client.as_deref(), &args, env)?;
        watchdog.watch(&client);
        children.0.push(client);
        let sent: SideReport = read_json(&mut client_out, "client")?;
        let received: SideReport = read_json(&mut server_out, "server")?;
        Ok((sent, received))
    })();
    watchdog.stop();
    let (sent, received) = result?;
    children.wait_all()?;
    let other_load = load.others();
    if received.bytes != opts.bytes || sent.bytes != opts.bytes {
        return Err(format!(
            "byte count mismatch: sent {}, received {}, expected {}",
            sent.bytes, received.bytes, opts.bytes
        )
        .into());
    }
    if received.t_ns <= sent.t_ns {
        return Err("clock went backwards between first write and last read".into());
    }
    let seconds = (received.t_ns - sent.t_ns) as f64 / 1e9;
    let per_stream: Vec<f64> = received
        .streams
        .iter()
        .map(|&(bytes, t)| bytes as f64 * 8.0 / (t.saturating_sub(sent.t_ns).max(1) as f64 / 1e9) / 1e6)
        .collect();
    let (stream_fairness, stream_mbit_s_min_max) = if per_stream.len() > 1 {
        let min = per_stream.iter().copied().fold(f64::INFINITY, f64::min);
        let max = per_stream.iter().copied().fold(0.0, f64::max);
        (Some(jain_index(&per_stream)), Some((min, max)))
    } else {
        (None, None)
    };
    Ok(Sample {
        rep,
        seconds,
        gbit_s: opts.bytes as f64 * 8.0 / seconds / 1e9,
        sender_user_s: sent.cpu_user_ns as f64 / 1e9,
        sender_sys_s: sent.cpu_sys_ns as f64 / 1e9,
        receiver_user_s: received.cpu_user_ns as f64 / 1e9,
        receiver_sys_s: received.cpu_sys_ns as f64 / 1e9,
        other_load,
        receiver_tcpls: received.tcpls,
        sender_peak_rss_mib: sent.peak_rss_kib as f64 / 1024.0,
        receiver_peak_rss_mib: received.peak_rss_kib as f64 / 1024.0,
        stream_fairness,
        stream_mbit_s_min_max,
    })
}

pub fn machine() -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split_once(':')).map(|(_, v)| v.trim().to_string()))
        .unwrap_or_else(|| "unknown CPU".into());
    Machine {
        nproc: nproc(),
        cpu_model,
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease").map(|s| s.trim().to_string()).unwrap_or_default(),
    }
}

/// Above this share of the machine used by others, the table warns.
const NOISY: f64 = 0.10;

pub fn percent(x: Option<f64>) -> String {
    x.map(|v| format!("{:.0}%", v * 100.0)).unwrap_or_else(|| "?".into())
}

/// The current time as `YYYY-MM-DDTHH:MM:SSZ`.
pub fn utc_now() -> String {
    let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    format_utc(secs)
}

fn format_utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, rem % 3600 / 60, rem % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("256M"), Ok(256 << 20));
        assert_eq!(parse_size("64KiB"), Ok(64 << 10));
        assert_eq!(parse_size("1500"), Ok(1500));
        assert!(parse_size("0").is_err());
        assert!(parse_size("x").is_err());
    }

    #[test]
    fn medians() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
    }

    #[test]
    fn dates() {
        assert_eq!(format_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(format_utc(1_700_000_000), "2023-11-14T22:13:20Z");
    }
}
