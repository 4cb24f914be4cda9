//! `join`: cost of adding a TCP connection to a TCPLS session (`Session::join`), with TLS
//! session resumption (the client has a ticket: no certificate, no signature) and without it
//! (a full handshake on every join). See README.md, "join".
//!
//! Every run is a fresh server process and a fresh client process. The server listens on
//! 127.0.0.1 and 127.0.0.2 (two `TcplsListener`s sharing one `JoinRegistry`). The client opens
//! one session to 127.0.0.1, makes one unmeasured warm-up join, then `--joins` joins to
//! 127.0.0.2 one after the other, each followed by `close_connection` and a wait for that
//! connection's end. A control stream marks the join phase, so the server measures its own CPU
//! time (getrusage) over exactly that phase.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::server::{ServerSessionMemoryCache, StoresServerSessions};
use serde::{Deserialize, Serialize};
use tcpls::{server_name_for, Event, JoinRegistry, SessionConfig, TcplsConnector, TcplsListener};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::compare::{machine, median, percent, read_json, spawn_side, utc_now, Children, Machine, Watchdog};
use crate::pki::{Pki, SERVER_NAME};
use crate::sys::{monotonic_ns, Cpu};
use crate::Res;

#[derive(clap::Args)]
pub struct Options {
    /// Measured joins per run.
    #[arg(long, default_value_t = 200)]
    joins: u32,
    /// Repetitions; each runs both modes (resumed, full), the order alternating.
    #[arg(long, default_value_t = 3)]
    reps: u32,
    /// Print the results as JSON (progress still goes to stderr).
    #[arg(long)]
    json: bool,
    /// Tokio worker threads in each of the two processes (0: current-thread runtime).
    #[arg(long, default_value_t = 2)]
    worker_threads: usize,
    /// Give up on one run after this many seconds.
    #[arg(long, default_value_t = 120)]
    timeout: u64,
}

/// Whether the joining connections' handshakes can resume the TLS session.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mode {
    /// Default rustls client config: the client keeps the server's tickets and offers one.
    Resumed,
    /// `config.resumption = Resumption::disabled()`: every handshake is a full one.
    Full,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Resumed => "resumed",
            Mode::Full => "full",
        }
    }
}

/// The server's first line: its two listeners' ports (127.0.0.1, 127.0.0.2).
#[derive(Debug, Serialize, Deserialize)]
struct Ports {
    first: u16,
    second: u16,
}

/// What the server measured over the join phase.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ServerReport {
    cpu_user_ns: u64,
    cpu_sys_ns: u64,
    /// Ticket lookups that found a session (rustls then resumes it): resumed handshakes.
    resumed_handshakes: u64,
    /// Ticket lookups (handshakes in which the client offered a ticket).
    ticket_lookups: u64,
    /// Tickets stored (sent to the client).
    tickets_issued: u64,
}

/// What the client measured.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ClientReport {
    /// Whether the session's initial handshake resumed (should be false: fresh processes).
    initial_resumed: Option<bool>,
    /// Time from calling `join` to its return, per join.
    latencies_ns: Vec<u64>,
    /// Bytes the client had received on the joined connection when `join` returned (the
    /// server's handshake flight; a full handshake carries the certificate and its signature).
    handshake_bytes: Vec<u64>,
    /// The whole join phase, waits for the closes included.
    phase_ns: u64,
    cpu_user_ns: u64,
    cpu_sys_ns: u64,
    /// Closed connections whose end was not reported within `CLOSE_WAIT`.
    close_waits_timed_out: u32,
}

/// The server's session storage (rustls' in-memory cache) with counters. Without a ticketer,
/// rustls 0.23 resumes TLS 1.3 sessions statefully: a ticket is an ID that the server `take`s
/// from this store, so a hit is a resumed handshake.
#[derive(Debug)]
struct CountingStore {
    inner: Arc<ServerSessionMemoryCache>,
    lookups: AtomicU64,
    hits: AtomicU64,
    puts: AtomicU64,
}

impl StoresServerSessions for CountingStore {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        self.puts.fetch_add(1, Ordering::Relaxed);
        self.inner.put(key, value)
    }
    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.inner.get(key)
    }
    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.lookups.fetch_add(1, Ordering::Relaxed);
        let v = self.inner.take(key);
        if v.is_some() {
            self.hits.fetch_add(1, Ordering::Relaxed);
        }
        v
    }
    fn can_cache(&self) -> bool {
        self.inner.can_cache()
    }
}

/// Control stream messages: client "go" (warm-up done), server "ok" (CPU noted); at the end
/// the client's FIN, then the server's "done".
const GO: &[u8] = b"g";
const OK: &[u8] = b"k";
const DONE: &[u8] = b"done";

/// How long the client waits for a closed connection's end before the next join.
const CLOSE_WAIT: Duration = Duration::from_secs(1);

pub async fn server(joins: u32) -> Res<ServerReport> {
    let pki = Pki::from_env()?;
    let store = Arc::new(CountingStore {
        inner: ServerSessionMemoryCache::new(4096),
        lookups: AtomicU64::new(0),
        hits: AtomicU64::new(0),
        puts: AtomicU64::new(0),
    });
    let mut config = pki.server_config()?;
    config.session_storage = store.clone();
    let config = Arc::new(config);
    // Enough tokens that the budget (1 + tokens live connections) never limits the joins.
    let settings = SessionConfig { tokens: joins + 8, ..SessionConfig::default() };
    let registry = JoinRegistry::new();
    let first = TcplsListener::bind_with_registry(
        ([127, 0, 0, 1], 0).into(),
        config.clone(),
        settings.clone(),
        registry.clone(),
    )
    .await?;
    let second = TcplsListener::bind_with_registry(([127, 0, 0, 2], 0).into(), config, settings, registry).await?;
    println!(
        "{}",
        serde_json::to_string(&Ports { first: first.local_addr().port(), second: second.local_addr().port() })?
    );
    {
        use std::io::Write;
        std::io::stdout().flush()?;
    }
    let (session, _) = first.accept().await.ok_or("TCPLS listener failed")?;
    if session.is_fallback() {
        return Err("client did not negotiate TCPLS".into());
    }
    let (mut send, mut recv) = session.accept_stream().await.ok_or("session ended before the control stream")?;
    let mut go = [0u8; 1];
    recv.read_exact(&mut go).await?;
    let (cpu0, lookups0, hits0, puts0) = (
        Cpu::now(),
        store.lookups.load(Ordering::Relaxed),
        store.hits.load(Ordering::Relaxed),
        store.puts.load(Ordering::Relaxed),
    );
    send.write_all(OK).await?;
    // The client's FIN ends the join phase.
    let mut rest = Vec::new();
    recv.read_to_end(&mut rest).await?;
    let cpu = Cpu::now().since(cpu0);
    let report = ServerReport {
        cpu_user_ns: cpu.user_ns,
        cpu_sys_ns: cpu.sys_ns,
        resumed_handshakes: store.hits.load(Ordering::Relaxed) - hits0,
        ticket_lookups: store.lookups.load(Ordering::Relaxed) - lookups0,
        tickets_issued: store.puts.load(Ordering::Relaxed) - puts0,
    };
    send.write_all(DONE).await?;
    send.shutdown().await?;
    if let Some(e) = session.close().await {
        return Err(format!("TCPLS session failed: {e}").into());
    }
    if second.failed_handshakes() + first.failed_handshakes() > 0 {
        eprintln!(
            "tcpls-bench join server: {} failed handshakes",
            second.failed_handshakes() + first.failed_handshakes()
        );
    }
    Ok(report)
}

/// Waits until connection `conn` has ended (its `ConnectionClosed` event); false on timeout.
async fn wait_closed(session: &tcpls::Session, conn: tcpls::ConnId) -> bool {
    let deadline = Instant::now() + CLOSE_WAIT;
    loop {
        if session.poll_events().iter().any(|e| matches!(e, Event::ConnectionClosed { conn: c, .. } if *c == conn)) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// One join to `addr` (then its close): latency, handshake bytes received, closed in time.
async fn one_join(session: &tcpls::Session, addr: std::net::SocketAddr) -> Res<(u64, u64, bool)> {
    let t0 = monotonic_ns();
    let id = session.join(addr).await?;
    let latency = monotonic_ns() - t0;
    let bytes = session.connections().iter().find(|c| c.id == id).map(|c| c.bytes_received).unwrap_or(0);
    session.close_connection(id)?;
    let closed = wait_closed(session, id).await;
    Ok((latency, bytes, closed))
}

pub async fn client(mode: Mode, joins: u32, first: u16, second: u16) -> Res<ClientReport> {
    let pki = Pki::from_env()?;
    let mut config = pki.client_config()?;
    if mode == Mode::Full {
        config.resumption = rustls::client::Resumption::disabled();
    }
    let connector = TcplsConnector::new(Arc::new(config));
    let session = connector.connect(([127, 0, 0, 1], first).into(), server_name_for(SERVER_NAME)?).await?;
    if session.is_fallback() {
        return Err("server did not negotiate TCPLS".into());
    }
    let initial_resumed = session.handshake_info().map(|h| h.resumed);
    let target = ([127, 0, 0, 2], second).into();
    // Warm-up (not measured): tokens and tickets have arrived, code paths are hot.
    let _ = session.poll_events();
    one_join(&session, target).await?;
    let (mut send, mut recv) = session.open_stream()?;
    send.write_all(GO).await?;
    let mut ok = [0u8; 1];
    recv.read_exact(&mut ok).await?;
    if ok != OK {
        return Err(format!("server replied {ok:?} instead of {OK:?}").into());
    }
    let (t0, cpu0) = (monotonic_ns(), Cpu::now());
    let mut latencies_ns = Vec::with_capacity(joins as usize);
    let mut handshake_bytes = Vec::with_capacity(joins as usize);
    let mut close_waits_timed_out = 0;
    for _ in 0..joins {
        let (latency, bytes, closed) = one_join(&session, target).await?;
        latencies_ns.push(latency);
        handshake_bytes.push(bytes);
        close_waits_timed_out += u32::from(!closed);
    }
    let phase_ns = monotonic_ns() - t0;
    let cpu = Cpu::now().since(cpu0);
    send.shutdown().await?;
    let mut reply = Vec::new();
    recv.read_to_end(&mut reply).await?;
    if reply != DONE {
        return Err(format!("server replied {reply:?} instead of \"done\"").into());
    }
    if let Some(e) = session.close().await {
        return Err(format!("TCPLS session failed: {e}").into());
    }
    Ok(ClientReport {
        initial_resumed,
        latencies_ns,
        handshake_bytes,
        phase_ns,
        cpu_user_ns: cpu.user_ns,
        cpu_sys_ns: cpu.sys_ns,
        close_waits_timed_out,
    })
}

/// One run (one mode, one repetition).
#[derive(Debug, Clone, Serialize)]
struct Sample {
    rep: u32,
    median_us: f64,
    p90_us: f64,
    /// Joins per second of join time (1 / mean latency; the waits for closes are excluded).
    joins_per_s: f64,
    server_cpu_us_per_join: f64,
    client_cpu_us_per_join: f64,
    /// Median bytes received on a joined connection by the time `join` returned.
    handshake_bytes_median: f64,
    resumed_handshakes: u64,
    ticket_lookups: u64,
    tickets_issued: u64,
    initial_resumed: Option<bool>,
    close_waits_timed_out: u32,
    other_load: Option<f64>,
    #[serde(skip)]
    latencies_us: Vec<f64>,
}

#[derive(Debug, Serialize)]
struct Summary {
    mode: &'static str,
    /// Over all measured joins of all repetitions.
    median_us: f64,
    p90_us: f64,
    /// Medians over the repetitions.
    joins_per_s: f64,
    server_cpu_us_per_join: f64,
    client_cpu_us_per_join: f64,
    handshake_bytes_median: f64,
    /// Resumed handshakes seen by the server / measured joins, all repetitions.
    resumed_handshakes: u64,
    joins: u64,
    max_other_load: Option<f64>,
    samples: Vec<Sample>,
}

#[derive(Debug, Serialize)]
struct Report {
    date_utc: String,
    machine: Machine,
    joins_per_run: u32,
    reps: u32,
    method: &'static str,
    results: Vec<Summary>,
    /// full / resumed, for latency (median) and server CPU per join.
    full_to_resumed_latency: f64,
    full_to_resumed_server_cpu: f64,
}

fn quantile(v: &[f64], q: f64) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    if v.is_empty() {
        return f64::NAN;
    }
    // Nearest rank.
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

pub fn run(opts: Options) -> Res<()> {
    if opts.joins == 0 || opts.reps == 0 {
        return Err("nothing to run: give at least one join and one repetition".into());
    }
    let pki = Pki::generate()?;
    let env = pki.env();
    let mut samples: Vec<(Mode, Sample)> = Vec::new();
    for rep in 1..=opts.reps {
        let order = if rep % 2 == 1 { [Mode::Resumed, Mode::Full] } else { [Mode::Full, Mode::Resumed] };
        for mode in order {
            let s = run_one(mode, rep, &opts, &env).map_err(|e| format!("{} (rep {rep}): {e}", mode.name()))?;
            eprintln!(
                "rep {rep}/{} {:<8} median {:7.1} µs  p90 {:7.1} µs  {:6.0} joins/s  server CPU {:6.1} µs/join  \
                 client CPU {:6.1} µs/join  handshake bytes {:5.0}  resumed {}/{}  other load {}",
                opts.reps,
                mode.name(),
                s.median_us,
                s.p90_us,
                s.joins_per_s,
                s.server_cpu_us_per_join,
                s.client_cpu_us_per_join,
                s.handshake_bytes_median,
                s.resumed_handshakes,
                opts.joins,
                percent(s.other_load),
            );
            samples.push((mode, s));
        }
    }
    let results: Vec<Summary> = [Mode::Resumed, Mode::Full]
        .iter()
        .map(|&m| {
            let mine: Vec<Sample> = samples.iter().filter(|(q, _)| *q == m).map(|(_, s)| s.clone()).collect();
            let all: Vec<f64> = mine.iter().flat_map(|s| s.latencies_us.iter().copied()).collect();
            let med = |f: fn(&Sample) -> f64| median(&mine.iter().map(f).collect::<Vec<_>>());
            Summary {
                mode: m.name(),
                median_us: quantile(&all, 0.5),
                p90_us: quantile(&all, 0.9),
                joins_per_s: med(|s| s.joins_per_s),
                server_cpu_us_per_join: med(|s| s.server_cpu_us_per_join),
                client_cpu_us_per_join: med(|s| s.client_cpu_us_per_join),
                handshake_bytes_median: med(|s| s.handshake_bytes_median),
                resumed_handshakes: mine.iter().map(|s| s.resumed_handshakes).sum(),
                joins: all.len() as u64,
                max_other_load: mine.iter().filter_map(|s| s.other_load).reduce(f64::max),
                samples: mine,
            }
        })
        .collect();
    let report = Report {
        date_utc: utc_now(),
        machine: machine(),
        joins_per_run: opts.joins,
        reps: opts.reps,
        method: "fresh server and client processes per run; one session to 127.0.0.1, one warm-up join, then \
                 sequential joins to 127.0.0.2, each closed (close_connection) and its end awaited before the next; \
                 latency = call to return of Session::join; CPU = getrusage(RUSAGE_SELF) of each process over the \
                 join phase (closes included); resumption counted by the server's session store (ticket hits)",
        full_to_resumed_latency: results[1].median_us / results[0].median_us,
        full_to_resumed_server_cpu: results[1].server_cpu_us_per_join / results[0].server_cpu_us_per_join,
        results,
    };
    if opts.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    Ok(())
}

fn print_table(r: &Report) {
    println!("tcpls-bench join — {}", r.date_utc);
    println!("machine: {} CPUs, {}, Linux {}", r.machine.nproc, r.machine.cpu_model, r.machine.kernel);
    println!("{} measured joins per run, {} repetitions of both modes (order alternating)", r.joins_per_run, r.reps);
    println!("method: {}", r.method);
    println!();
    println!(
        "{:<8} {:>9} {:>9} {:>8}   {:>10} {:>10}   {:>9} {:>12}   {:>6}",
        "mode", "median µs", "p90 µs", "joins/s", "server CPU", "client CPU", "handshake", "resumed", "other"
    );
    println!(
        "{:<8} {:>9} {:>9} {:>8}   {:>10} {:>10}   {:>9} {:>12}   {:>6}",
        "", "", "", "", "µs/join", "µs/join", "bytes", "(server)", "load"
    );
    for s in &r.results {
        println!(
            "{:<8} {:>9.1} {:>9.1} {:>8.0}   {:>10.1} {:>10.1}   {:>9.0} {:>12}   {:>6}",
            s.mode,
            s.median_us,
            s.p90_us,
            s.joins_per_s,
            s.server_cpu_us_per_join,
            s.client_cpu_us_per_join,
            s.handshake_bytes_median,
            format!("{}/{}", s.resumed_handshakes, s.joins),
            percent(s.max_other_load),
        );
    }
    println!();
    println!(
        "full / resumed: latency (median) {:.2}x, server CPU per join {:.2}x",
        r.full_to_resumed_latency, r.full_to_resumed_server_cpu
    );
    println!(
        "median/p90: over all measured joins of all repetitions; joins/s (1 / mean join latency, closes excluded)"
    );
    println!("and CPU per join: medians over the repetitions. handshake bytes: median bytes received on the joined");
    println!("connection when join returned (a full handshake carries the certificate and its signature).");
}

fn run_one(mode: Mode, rep: u32, opts: &Options, env: &[(&'static str, String); 2]) -> Res<Sample> {
    let threads = opts.worker_threads.to_string();
    let load = crate::sys::LoadMeter::start();
    let watchdog = Watchdog::start(Duration::from_secs(opts.timeout));
    let mut children = Children(Vec::new());
    let result = (|| -> Res<(ClientReport, ServerReport)> {
        let args = ["join-server", "--joins", &opts.joins.to_string(), "--worker-threads", &threads].map(String::from);
        let (server, mut server_out) = spawn_side(None, &args, env)?;
        watchdog.watch(&server);
        children.0.push(server);
        let ports: Ports = read_json(&mut server_out, "server")?;
        let args = [
            "join-client",
            "--mode",
            mode.name(),
            "--joins",
            &opts.joins.to_string(),
            "--first",
            &ports.first.to_string(),
            "--second",
            &ports.second.to_string(),
            "--worker-threads",
            &threads,
        ]
        .map(String::from);
        let (client, mut client_out) = spawn_side(None, &args, env)?;
        watchdog.watch(&client);
        children.0.push(client);
        let client: ClientReport = read_json(&mut client_out, "client")?;
        let server: ServerReport = read_json(&mut server_out, "server")?;
        Ok((client, server))
    })();
    watchdog.stop();
    let (client, server) = result?;
    children.wait_all()?;
    let other_load = load.others();
    if client.latencies_ns.len() != opts.joins as usize {
        return Err(format!("client made {} joins instead of {}", client.latencies_ns.len(), opts.joins).into());
    }
    let n = f64::from(opts.joins);
    let latencies_us: Vec<f64> = client.latencies_ns.iter().map(|&l| l as f64 / 1e3).collect();
    let mean_us = latencies_us.iter().sum::<f64>() / n;
    let bytes: Vec<f64> = client.handshake_bytes.iter().map(|&b| b as f64).collect();
    Ok(Sample {
        rep,
        median_us: quantile(&latencies_us, 0.5),
        p90_us: quantile(&latencies_us, 0.9),
        joins_per_s: 1e6 / mean_us,
        server_cpu_us_per_join: (server.cpu_user_ns + server.cpu_sys_ns) as f64 / 1e3 / n,
        client_cpu_us_per_join: (client.cpu_user_ns + client.cpu_sys_ns) as f64 / 1e3 / n,
        handshake_bytes_median: median(&bytes),
        resumed_handshakes: server.resumed_handshakes,
        ticket_lookups: server.ticket_lookups,
        tickets_issued: server.tickets_issued,
        initial_resumed: client.initial_resumed,
        close_waits_timed_out: client.close_waits_timed_out,
        other_load,
        latencies_us,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles() {
        let v: Vec<f64> = (1..=10).map(f64::from).collect();
        assert_eq!(quantile(&v, 0.5), 5.0);
        assert_eq!(quantile(&v, 0.9), 9.0);
        assert_eq!(quantile(&[3.0], 0.9), 3.0);
        assert!(quantile(&[], 0.5).is_nan());
    }
}
