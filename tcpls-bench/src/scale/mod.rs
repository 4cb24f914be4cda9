//! `scale`: how TCPLS scales in handshakes and sessions, next to TLS over TCP (tokio-rustls).
//!
//! One server process (a `TcplsListener` and a tokio-rustls listener, both echoing what they
//! receive on each stream or connection) and one client process, the parent driving both
//! through their standard input and output. Phases, for `tls` then `tcpls`:
//!
//! 1. **Handshakes**: after 20 unmeasured ones, `--handshakes` sequential connections, each a full handshake (resumption
//!    off), a 1-byte request echoed back, and a graceful close. The server's CPU time over the
//!    phase / connections = CPU per handshake; 1 / that = handshakes per second per core. The
//!    client's time from starting the TCP connect until the echoed byte arrives is the **time
//!    to first byte** (median, p90).
//! 2. **Concurrent sessions**: `--sessions` connections opened (at most 64 handshakes in
//!    flight) from several source addresses 127.0.0.2.., each echoing one byte once, then all
//!    kept open and idle for 2 s. **Memory per idle session** = (RSS with all open − RSS
//!    before) / sessions, per process, and the same from the live heap bytes a counting global
//!    allocator sees (`heap.rs`: what the program asked for, without allocator slack). Then every session echoes one more byte (all still
//!    work), and all close.

mod client;
mod server;

use std::io::{BufReader, Write};
use std::process::{ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::compare::{machine, median, utc_now, Machine};
use crate::pki::Pki;
use crate::Res;

pub use client::client;
pub use server::server;

#[derive(clap::Args)]
pub struct Options {
    /// Concurrent sessions held open at once (per protocol). Default: as many as the
    /// open-file limit allows (each end holds one socket per session; see `sessions_fd_limit` in
    /// the report); a larger number is lowered to that, with a note on stderr.
    #[arg(long)]
    sessions: Option<u32>,
    /// Sequential handshakes measured (per protocol).
    #[arg(long, default_value_t = 500)]
    handshakes: u32,
    /// Protocols, in this order.
    #[arg(long, value_delimiter = ',', default_values_t = vec![ScaleProto::Tls, ScaleProto::Tcpls], value_enum)]
    protos: Vec<ScaleProto>,
    /// Repetitions; each runs every protocol once, the order alternating (tls, tcpls, then
    /// tcpls, tls, ...). The table gives medians over the repetitions.
    #[arg(long, default_value_t = 1)]
    reps: u32,
    /// Print the results as JSON (progress still goes to stderr).
    #[arg(long)]
    json: bool,
    /// Tokio worker threads in each of the two processes (and the cores of the server's
    /// `tcpls-per-core`).
    #[arg(long, default_value_t = 2)]
    worker_threads: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ScaleProto {
    /// TLS 1.3 over TCP, tokio-rustls.
    Tls,
    /// TCPLS, one stream per session, the listener on the server's multi-thread (work-stealing)
    /// runtime.
    Tcpls,
    /// TCPLS served per core (`tcpls::ServerBuilder`: one listener and current-thread runtime
    /// per worker thread).
    TcplsPerCore,
}

/// Source addresses the client spreads its connections over (ephemeral ports are per address).
pub(crate) const SOURCES: u8 = 16;
/// Handshakes in flight at once while opening the concurrent sessions.
pub(crate) const IN_FLIGHT: usize = 64;
/// Unmeasured handshakes before the measured ones.
pub(crate) const WARM_UP: u32 = 20;
/// Descriptors kept free for everything but the sessions' sockets (the runtime's epoll and
/// eventfd, listeners, standard streams, /proc reads, the handshake phase's last sockets in
/// TIME_WAIT close).
pub(crate) const FD_RESERVE: u64 = 256;

/// How long the open sessions stay idle before memory is measured.
pub(crate) const IDLE: Duration = Duration::from_secs(2);

/// The server's first line.
#[derive(Debug, Serialize, Deserialize)]
pub struct ServerReady {
    pub(crate) tls_port: u16,
    pub(crate) tcpls_port: u16,
    pub(crate) tcpls_per_core_port: u16,
}

/// What the server says when asked (a line "stats" on its stdin).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServerStats {
    cpu_ns: u64,
    rss_bytes: u64,
    /// Live heap bytes (counting allocator, `heap.rs`) and allocations so far.
    heap_bytes: i64,
    allocs: u64,
    open: u64,
    accepted: u64,
}

/// What the client reports at the end of each phase.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClientPhase {
    phase: String,
    proto: ScaleProto,
    count: u32,
    seconds: f64,
    cpu_ns: u64,
    rss_before: u64,
    rss_after: u64,
    /// Live heap bytes before opening the sessions and with all open and idle.
    heap_before: i64,
    heap_after: i64,
    /// Allocations during the phase (handshake phase).
    allocs: u64,
    /// Time to first byte per connection (handshake phase), microseconds.
    ttfb_us: Vec<f64>,
    /// Sessions that answered the final echo (concurrent phase).
    alive: u32,
}

#[derive(Debug, Clone, Serialize)]
struct ProtoResult {
    protocol: ScaleProto,
    /// The repetition of a single run; absent in the medians.
    #[serde(skip_serializing_if = "Option::is_none")]
    rep: Option<u32>,
    handshakes: u32,
    server_cpu_us_per_handshake: f64,
    handshakes_per_second_per_core: f64,
    client_cpu_us_per_handshake: f64,
    ttfb_median_us: f64,
    ttfb_p90_us: f64,
    sessions: u32,
    sessions_open_at_server: u64,
    sessions_alive: u32,
    open_seconds: f64,
    server_rss_bytes_per_idle_session: f64,
    client_rss_bytes_per_idle_session: f64,
    /// Live heap bytes with all sessions open and idle minus before, / sessions.
    server_heap_bytes_per_idle_session: f64,
    client_heap_bytes_per_idle_session: f64,
    /// Heap allocations (and reallocations) per handshake phase connection.
    server_allocs_per_handshake: f64,
    client_allocs_per_handshake: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    date_utc: String,
    machine: Machine,
    method: &'static str,
    reps: u32,
    /// Per protocol, the median of every field over the repetitions (counts: the smallest).
    results: Vec<ProtoResult>,
    /// RLIMIT_NOFILE of each process (after raising it as far as allowed) and whether it
    /// lowered `--sessions` (or chose it, when not given).
    sessions_fd_limit: u64,
    sessions_limited_by_fd: bool,
    /// TCPLS divided by TLS, from the medians (when both ran).
    #[serde(skip_serializing_if = "Option::is_none")]
    tcpls_to_tls: Option<Ratios>,
    /// The per-core server divided by TLS, and by the work-stealing listener.
    #[serde(skip_serializing_if = "Option::is_none")]
    tcpls_per_core_to_tls: Option<Ratios>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tcpls_per_core_to_tcpls: Option<Ratios>,
    runs: Vec<ProtoResult>,
}

#[derive(Debug, Serialize)]
struct Ratios {
    server_cpu_per_handshake: f64,
    client_cpu_per_handshake: f64,
    ttfb_median: f64,
    server_memory_per_idle_session: f64,
    client_memory_per_idle_session: f64,
    server_heap_per_idle_session: f64,
    client_heap_per_idle_session: f64,
}

type Piped = (std::process::Child, ChildStdin, BufReader<ChildStdout>);

/// Starts this binary with `args`, the certificate in its environment, stdin and stdout piped.
fn spawn(pki: &Pki, args: &[String]) -> Res<Piped> {
    let mut child = Command::new(std::env::current_exe()?)
        .args(args)
        .envs(pki.env().iter().map(|(k, v)| (*k, v.clone())))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let stdin = child.stdin.take().ok_or("no stdin pipe")?;
    let stdout = child.stdout.take().ok_or("no stdout pipe")?;
    Ok((child, stdin, BufReader::new(stdout)))
}

pub fn run(mut opts: Options) -> Res<()> {
    // The children raise their limit the same way; the parent's is theirs (same user, same
    // hard limit).
    crate::sys::raise_fd_limit();
    let fd_limit = crate::sys::fd_limit();
    let fd_sessions = u32::try_from(fd_limit.saturating_sub(FD_RESERVE)).unwrap_or(u32::MAX);
    let sessions = match opts.sessions {
        None => {
            eprintln!(
                "scale: {fd_sessions} sessions: as many as the open-file limit allows ({fd_limit} per process, \
                 {FD_RESERVE} kept for the rest; --sessions N for fewer)"
            );
            fd_sessions
        }
        Some(n) if n > fd_sessions => {
            eprintln!(
                "scale: --sessions {n} lowered to {fd_sessions}: each process may open {fd_limit} files \
                 (RLIMIT_NOFILE, hard limit; {FD_RESERVE} kept for the rest). Raise the hard limit \
                 (ulimit -Hn, limits.conf, or run as root where allowed) for more"
            );
            fd_sessions
        }
        Some(n) => n,
    };
    let limited_by_fd = sessions == fd_sessions;
    opts.sessions = Some(sessions);
    if opts.protos.is_empty() || sessions == 0 || opts.handshakes == 0 || opts.reps == 0 {
        return Err("nothing to run: give a protocol, sessions, handshakes and repetitions".into());
    }
    let pki = Pki::generate()?;
    let mut runs = Vec::new();
    for rep in 1..=opts.reps {
        let mut order = opts.protos.clone();
        if rep % 2 == 0 {
            order.reverse();
        }
        for proto in order {
            eprintln!("rep {rep}/{}: {proto:?}", opts.reps);
            let mut r = run_proto(&pki, proto, &opts)?;
            r.rep = Some(rep);
            runs.push(r);
        }
    }
    let results: Vec<ProtoResult> = opts
        .protos
        .iter()
        .filter_map(|&p| summarize(&runs.iter().filter(|r| r.protocol == p).cloned().collect::<Vec<_>>()))
        .collect();
    let find = |p: ScaleProto| results.iter().find(|r| r.protocol == p);
    let tcpls_to_tls = find(ScaleProto::Tcpls).zip(find(ScaleProto::Tls)).map(|(t, l)| ratios(t, l));
    let tcpls_per_core_to_tls = find(ScaleProto::TcplsPerCore).zip(find(ScaleProto::Tls)).map(|(t, l)| ratios(t, l));
    let tcpls_per_core_to_tcpls =
        find(ScaleProto::TcplsPerCore).zip(find(ScaleProto::Tcpls)).map(|(t, l)| ratios(t, l));
    let report = Report {

        date_utc: utc_now(),
        machine: machine(),
        method: "a fresh server process (TcplsListener and tokio-rustls listener, echo) and client process per \
                 protocol and repetition, each a multi-thread tokio runtime; handshakes: sequential full \
                 handshakes (resumption off) + 1-byte echo + close, server CPU (getrusage) per handshake, ttfb = \
                 TCP connect start to echoed byte; sessions: all opened (64 handshakes in flight, sources \
                 127.0.0.2-17), 1-byte echo each, idle 2 s, RSS delta / sessions (VmRSS) and live heap delta / sessions \
                 (counting global allocator), then every session echoes again",
        reps: opts.reps,
        results,
        sessions_fd_limit: fd_limit,
        sessions_limited_by_fd: limited_by_fd,
        tcpls_to_tls,
        tcpls_per_core_to_tls,
        tcpls_per_core_to_tcpls,
        runs,
    };
    if opts.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    Ok(())
}

/// `t` divided by `l`, field by field.
fn ratios(t: &ProtoResult, l: &ProtoResult) -> Ratios {
    Ratios {
        server_cpu_per_handshake: t.server_cpu_us_per_handshake / l.server_cpu_us_per_handshake,
        client_cpu_per_handshake: t.client_cpu_us_per_handshake / l.client_cpu_us_per_handshake,
        ttfb_median: t.ttfb_median_us / l.ttfb_median_us,
        server_memory_per_idle_session: t.server_rss_bytes_per_idle_session / l.server_rss_bytes_per_idle_session,
        client_memory_per_idle_session: t.client_rss_bytes_per_idle_session / l.client_rss_bytes_per_idle_session,
        server_heap_per_idle_session: t.server_heap_bytes_per_idle_session / l.server_heap_bytes_per_idle_session,
        client_heap_per_idle_session: t.client_heap_bytes_per_idle_session / l.client_heap_bytes_per_idle_session,
    }
}

/// Medians of the runs of one protocol (counts: the smallest, so a failure shows).
fn summarize(runs: &[ProtoResult]) -> Option<ProtoResult> {
    let first = runs.first()?;
    let med = |f: fn(&ProtoResult) -> f64| median(&runs.iter().map(f).collect::<Vec<_>>());
    Some(ProtoResult {
        protocol: first.protocol,
        rep: None,
        handshakes: runs.iter().map(|r| r.handshakes).min().unwrap_or(0),
        server_cpu_us_per_handshake: med(|r| r.server_cpu_us_per_handshake),
        handshakes_per_second_per_core: med(|r| r.handshakes_per_second_per_core),
        client_cpu_us_per_handshake: med(|r| r.client_cpu_us_per_handshake),
        ttfb_median_us: med(|r| r.ttfb_median_us),
        ttfb_p90_us: med(|r| r.ttfb_p90_us),
        sessions: runs.iter().map(|r| r.sessions).min().unwrap_or(0),
        sessions_open_at_server: runs.iter().map(|r| r.sessions_open_at_server).min().unwrap_or(0),
        sessions_alive: runs.iter().map(|r| r.sessions_alive).min().unwrap_or(0),
        open_seconds: med(|r| r.open_seconds),
        server_rss_bytes_per_idle_session: med(|r| r.server_rss_bytes_per_idle_session),
        client_rss_bytes_per_idle_session: med(|r| r.client_rss_bytes_per_idle_session),
        server_heap_bytes_per_idle_session: med(|r| r.server_heap_bytes_per_idle_session),
        client_heap_bytes_per_idle_session: med(|r| r.client_heap_bytes_per_idle_session),
        server_allocs_per_handshake: med(|r| r.server_allocs_per_handshake),
        client_allocs_per_handshake: med(|r| r.client_allocs_per_handshake),
    })
}

/// One protocol: a fresh server (so that the previous run's freed memory does not hide this
/// one's growth) and a fresh client, through the three phases.
fn run_proto(pki: &Pki, proto: ScaleProto, opts: &Options) -> Res<ProtoResult> {
    let threads = opts.worker_threads.to_string();
    let (server, mut server_in, mut server_out) =
        spawn(pki, &["scale-server".into(), "--worker-threads".into(), threads.clone()])?;
    let mut children = crate::compare::Children(vec![server]);
    let ready: ServerReady = crate::compare::read_json(&mut server_out, "scale server")?;
    let port = match proto {
        ScaleProto::Tls => ready.tls_port,
        ScaleProto::Tcpls => ready.tcpls_port,
        ScaleProto::TcplsPerCore => ready.tcpls_per_core_port,
    };
    let args = [
        "scale-client".to_string(),
        "--proto".into(),
        proto_name(proto).into(),
        "--port".into(),
        port.to_string(),
        "--sessions".into(),
        opts.sessions.unwrap_or(0).to_string(),
        "--handshakes".into(),
        opts.handshakes.to_string(),
        "--worker-threads".into(),
        threads.clone(),
    ];
    let (client, mut client_in, mut client_out) = spawn(pki, &args)?;
    children.0.push(client);
    let ask = |server_in: &mut ChildStdin, server_out: &mut BufReader<ChildStdout>| -> Res<ServerStats> {
        writeln!(server_in, "stats")?;
        server_in.flush()?;
        crate::compare::read_json(server_out, "scale server")
    };
    let go = |client_in: &mut ChildStdin| -> Res<()> {
        writeln!(client_in, "go")?;
        client_in.flush()?;
        Ok(())
    };
    let _warm: ClientPhase = crate::compare::read_json(&mut client_out, "scale client")?;
    // Phase 1: handshakes.
    let s0 = ask(&mut server_in, &mut server_out)?;
    go(&mut client_in)?;
    let hs: ClientPhase = crate::compare::read_json(&mut client_out, "scale client")?;
    let s1 = ask(&mut server_in, &mut server_out)?;
    eprintln!("{proto:?}: {} handshakes in {:.2} s", hs.count, hs.seconds);
    // Phase 2: concurrent sessions, measured while all are open and idle.
    let s2 = ask(&mut server_in, &mut server_out)?;
    go(&mut client_in)?;
    let open: ClientPhase = crate::compare::read_json(&mut client_out, "scale client")?;
    let s3 = ask(&mut server_in, &mut server_out)?;
    eprintln!(
        "{proto:?}: {} sessions open in {:.2} s, server holds {}, server RSS +{:.1} MiB (heap +{:.1}), client RSS \
         +{:.1} MiB (heap +{:.1})",
        open.count,
        open.seconds,
        s3.open,
        (s3.rss_bytes as f64 - s2.rss_bytes as f64) / f64::from(1 << 20),
        (s3.heap_bytes - s2.heap_bytes) as f64 / f64::from(1 << 20),
        (open.rss_after as f64 - open.rss_before as f64) / f64::from(1 << 20),
        (open.heap_after - open.heap_before) as f64 / f64::from(1 << 20),
    );
    go(&mut client_in)?;
    let alive: ClientPhase = crate::compare::read_json(&mut client_out, "scale client")?;
    eprintln!("{proto:?}: {} of {} sessions answered the final echo", alive.alive, open.count);
    drop(client_in);
    drop(server_in); // EOF: the server exits.
    children.wait_all()?;
    let mut ttfb = hs.ttfb_us.clone();
    ttfb.sort_by(f64::total_cmp);
    let p90 = ttfb.get(((ttfb.len() * 9).div_ceil(10)).saturating_sub(1)).copied().unwrap_or(f64::NAN);
    let n = f64::from(hs.count);
    let server_cpu_us = (s1.cpu_ns - s0.cpu_ns) as f64 / 1e3 / n;
    let sessions = f64::from(open.count);
    Ok(ProtoResult {
        protocol: proto,
        rep: None,
        handshakes: hs.count,
        server_cpu_us_per_handshake: server_cpu_us,
        handshakes_per_second_per_core: 1e6 / server_cpu_us,
        client_cpu_us_per_handshake: hs.cpu_ns as f64 / 1e3 / n,
        ttfb_median_us: median(&ttfb),
        ttfb_p90_us: p90,
        sessions: open.count,
        sessions_open_at_server: s3.open,
        sessions_alive: alive.alive,
        open_seconds: open.seconds,
        server_rss_bytes_per_idle_session: (s3.rss_bytes as f64 - s2.rss_bytes as f64) / sessions,
        client_rss_bytes_per_idle_session: (open.rss_after as f64 - open.rss_before as f64) / sessions,
        server_heap_bytes_per_idle_session: (s3.heap_bytes - s2.heap_bytes) as f64 / sessions,
        client_heap_bytes_per_idle_session: (open.heap_after - open.heap_before) as f64 / sessions,
        server_allocs_per_handshake: (s1.allocs - s0.allocs) as f64 / n,
        client_allocs_per_handshake: hs.allocs as f64 / n,
    })
}

/// The protocol's name on the command line.
fn proto_name(p: ScaleProto) -> &'static str {
    match p {
        ScaleProto::Tls => "tls",
        ScaleProto::Tcpls => "tcpls",
        ScaleProto::TcplsPerCore => "tcpls-per-core",
    }
}

fn print_table(r: &Report) {
    println!("tcpls-bench scale — {}", r.date_utc);
    println!("machine: {} CPUs, {}, Linux {}", r.machine.nproc, r.machine.cpu_model, r.machine.kernel);
    println!("{}", r.method);
    println!("medians over {} repetition(s)", r.reps);
    println!(
        "open-file limit: {} per process{}",
        r.sessions_fd_limit,
        if r.sessions_limited_by_fd { " (it set the number of sessions)" } else { "" }
    );
    println!();
    println!(
        "{:<6} {:>10} {:>12} {:>10} {:>10} {:>9} {:>9}   {:>9} {:>7} {:>7} {:>8} {:>11} {:>11} {:>11} {:>11} {:>12}",
        "proto",
        "handshakes",
        "srv CPU µs/hs",
        "hs/s/core",
        "cli µs/hs",
        "ttfb µs",
        "p90 µs",
        "sessions",
        "held",
        "alive",
        "open s",
        "srv B/sess",
        "cli B/sess",
        "srv heap B",
        "cli heap B",
        "srv alloc/hs"
    );
    for p in &r.results {
        println!(
            "{:<6} {:>10} {:>12.1} {:>10.0} {:>10.1} {:>9.1} {:>9.1}   {:>9} {:>7} {:>7} {:>8.2} {:>11.0} {:>11.0} {:>11.0} {:>11.0} {:>12.1}",
            proto_name(p.protocol),
            p.handshakes,
            p.server_cpu_us_per_handshake,
            p.handshakes_per_second_per_core,
            p.client_cpu_us_per_handshake,
            p.ttfb_median_us,
            p.ttfb_p90_us,
            p.sessions,
            p.sessions_open_at_server,
            p.sessions_alive,
            p.open_seconds,
            p.server_rss_bytes_per_idle_session,
            p.client_rss_bytes_per_idle_session,
            p.server_heap_bytes_per_idle_session,
            p.client_heap_bytes_per_idle_session,
            p.server_allocs_per_handshake,
        );
    }
    for (name, x) in [
        ("tcpls/tls", &r.tcpls_to_tls),
        ("tcpls-per-core/tls", &r.tcpls_per_core_to_tls),
        ("tcpls-per-core/tcpls", &r.tcpls_per_core_to_tcpls),
    ] {
        let Some(x) = x else { continue };
        println!(
            "{name}: server CPU per handshake {:.2}, client CPU per handshake {:.2}, ttfb {:.2}, \
             memory per idle session (RSS): server {:.1}, client {:.1}, heap: server {:.1}, client {:.1}",
            x.server_cpu_per_handshake,
            x.client_cpu_per_handshake,
            x.ttfb_median,
            x.server_memory_per_idle_session,
            x.client_memory_per_idle_session,
            x.server_heap_per_idle_session,
            x.client_heap_per_idle_session
        );
    }
}
