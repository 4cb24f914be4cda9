//! Outages of every path during a transfer: a server with ONE address, a client
//! with two interfaces ("wifi" and "lte") under a path manager that follows rtnetlink. Both
//! interfaces go down for 0.3 s, 3 s, then (another test) 20 s: the connections over them are
//! dropped at once, and every connection attempt meanwhile is refused (ENETUNREACH: no route,
//! as during a handover). The session must survive each outage — no token burnt by the failed
//! connects, the client session kept for the path manager's outage tolerance — and resume as
//! soon as an interface is back, with every byte of the transfer verified at the server.
//! A last test shows the error when an outage outlasts the tolerance.
//! Root and namespaces only (tcpls-netem); otherwise SKIPPED.
#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use common::Pki;
use tcpls::{
    server_name_for, Endpoint, PathManager, PathManagerConfig, PathOptions, PathPolicy, TcplsConnector, TcplsListener,
};
use tcpls_netem::{skip_unless_supported, PathSpec, Side, Topology};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The server's only address, on its loopback interface, reached over both paths.
const SERVICE: &str = "10.99.0.1";
const SEED: u64 = 21;

/// Routes to the service address over each path (the topology only routes each path's own
/// subnets); wifi first by metric.
fn route_service(topo: &Topology, path: usize) {
    let info = topo.path(path).info();
    let via = match info.client_v4.unwrap().octets() {
        [a, b, c, _] => format!("{a}.{b}.{c}.1"),
    };
    let metric = (100 * (path + 1)).to_string();
    topo.ip(Side::Client, &["route", "replace", SERVICE, "via", &via, "dev", &info.client_iface, "metric", &metric])
        .unwrap();
}

/// What the client reports at the end.
struct ClientEnd {
    sent: u64,
    tokens: usize,
    error: Option<tcpls_proto::Error>,
    failovers: u64,
}

/// The path manager's view, refreshed every 20 ms: failed attempts (summed over paths), paths
/// up, their last errors, whether the session is orphaned (no connection at all).
type ManagerState = Arc<std::sync::Mutex<(u32, usize, Vec<String>, bool)>>;

struct Bed {
    topo: Topology,
    ifaces: Vec<String>,
    /// Bytes the client application has written so far.
    written: Arc<AtomicU64>,
    /// Set to end the transfer.
    stop: Arc<AtomicBool>,
    manager_state: ManagerState,
    client: std::thread::JoinHandle<ClientEnd>,
    /// Bytes the server got, whether they were all the pattern, and the longest time its
    /// session spent orphaned (every connection lost, waiting for the client).
    server: mpsc::Receiver<(u64, bool, Duration)>,
    _server: std::thread::JoinHandle<()>,
}

/// Starts a server (one address) and a client with two interfaces writing the pattern until
/// `stop`; `tolerance` is the client's path manager outage tolerance.
/// `server_rejoin`: how long the server keeps a session whose connections were all lost.
fn start(tolerance: Duration, server_rejoin: Duration) -> Bed {
    let topo = Topology::builder().path(PathSpec::new(5.0, 40.0)).path(PathSpec::new(15.0, 20.0)).build().unwrap();
    topo.ip(Side::Server, &["addr", "add", &format!("{SERVICE}/32"), "dev", "lo"]).unwrap();
    for i in 0..2 {
        route_service(&topo, i);
    }
    let ifaces: Vec<String> = (0..2).map(|i| topo.path(i).info().client_iface.clone()).collect();
    let server_addr: SocketAddr = format!("{SERVICE}:4443").parse().unwrap();
    let pki = Pki::new();
    let (server_tls, client_tls) = (pki.server(), pki.client());

    // Server: checks every byte against the pattern as it arrives; keeps an orphaned session
    // for a minute (its own tolerance, at least the client's).
    let (ready_tx, ready_rx) = mpsc::channel();
    let (result_tx, result_rx) = mpsc::channel::<(u64, bool, Duration)>();
    let server = topo
        .spawn_in(Side::Server, move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                let settings = tcpls::SessionConfig { rejoin_timeout: server_rejoin, ..Default::default() };
                let listener = TcplsListener::bind_with(server_addr, server_tls, settings).await.unwrap();
                ready_tx.send(()).unwrap();
                let (session, _) = listener.accept().await.unwrap();
                let longest_orphan = Arc::new(std::sync::Mutex::new(Duration::ZERO));
                let (s2, lo) = (session.clone(), longest_orphan.clone());
                tokio::spawn(async move {
                    while !s2.is_closed() {
                        if let Some(since) = s2.orphaned_since() {
                            let mut l = lo.lock().unwrap();
                            *l = (*l).max(since.elapsed());
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                });
                let (send, mut recv) = session.accept_stream().await.unwrap();
                let mut got = 0u64;
                let mut ok = true;
                let mut buf = vec![0u8; 64 << 10];
                loop {
                    let n = match tokio::time::timeout(Duration::from_secs(90), recv.read(&mut buf)).await {
                        Ok(Ok(n)) => n,
                        Ok(Err(e)) => {
                            eprintln!("server: read failed: {e}");
                            ok = false;
                            break;
                        }
                        Err(_) => {
                            eprintln!("server: no data for 90 s");
                            ok = false;
                            break;
                        }
                    };
                    if n == 0 {
                        break;
                    }
                    ok &= tcpls_pattern::verify(SEED, got, &buf[..n]);
                    got += n as u64;
                }
                let longest = *longest_orphan.lock().unwrap();
                result_tx.send((got, ok, longest)).unwrap();
                drop(send);
                let _ = tokio::time::timeout(Duration::from_secs(30), session.closed()).await;
                // The listener stays up (it answers joins: a rejoin of a session it no longer
                // knows is refused) until the test tears the namespaces down.
                tokio::time::sleep(Duration::from_secs(30)).await;
                drop(listener);
            })
        })
        .unwrap();
    ready_rx.recv_timeout(Duration::from_secs(10)).unwrap();

    let written = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let manager_state: ManagerState = Arc::new(std::sync::Mutex::new((0, 0, Vec::new(), false)));
    let (w, st, ms, ifs) = (written.clone(), stop.clone(), manager_state.clone(), ifaces.clone());
    let client = topo
        .spawn_in(Side::Client, move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                let wifi = PathOptions::new().device(ifs[0].clone());
                let lte = PathOptions::new().device(ifs[1].clone());
                let connector = TcplsConnector::new(client_tls).with_path(wifi.clone());
                let session = connector.connect(server_addr, server_name_for("localhost").unwrap()).await.unwrap();
                let config = PathManagerConfig {
                    policy: PathPolicy::Fullmesh,
                    endpoints: vec![Endpoint::new(wifi.clone()), Endpoint::new(lte)],
                    initial: wifi,
                    outage_tolerance: tolerance,
                    ..Default::default()
                };
                let manager = PathManager::start(&session, server_addr, config);
                manager.follow_interfaces().unwrap();
                // The manager's view, for the test's checks.
                let (m, ms2, s2) = (manager.clone(), ms.clone(), session.clone());
                tokio::spawn(async move {
                    loop {
                        let paths = m.paths();
                        let failures = paths.iter().map(|p| p.failures).sum::<u32>();
                        let up = paths.iter().filter(|p| p.conn.is_some()).count();
                        let errors = paths.iter().filter_map(|p| p.last_error.clone()).collect();
                        *ms2.lock().unwrap() = (failures, up, errors, s2.orphaned_since().is_some());
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                });
                let (mut send, _recv) = session.open_stream().unwrap();
                let mut sent = 0u64;
                let mut failed = false;
                while !st.load(Ordering::Relaxed) {
                    let chunk = tcpls_pattern::chunk(SEED, sent, 64 << 10);
                    // Writes block while every path is down (the send buffer is full); a
                    // timeout lets the loop see `stop`.
                    match tokio::time::timeout(Duration::from_millis(200), send.write(chunk)).await {
                        Ok(Ok(n)) => {
                            sent += n as u64;
                            w.store(sent, Ordering::Relaxed);
                        }
                        Ok(Err(e)) => {
                            eprintln!("client: write failed: {e}");
                            failed = true;
                            break;
                        }
                        Err(_) => {}
                    }
                    // Paced, so that the transfer lasts as long as the test needs.
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                if !failed {
                    let _ = tokio::time::timeout(Duration::from_secs(60), send.shutdown()).await;
                }
                let failovers = session.stats().failovers;
                let tokens = session.token_count();
                let error = match tokio::time::timeout(Duration::from_secs(60), session.close()).await {
                    Ok(e) => e,
                    Err(_) => Some(tcpls_proto::Error::SessionClosed),
                };
                ClientEnd { sent, tokens, error, failovers }
            })
        })
        .unwrap();
    Bed { topo, ifaces, written, stop, manager_state, client, server: result_rx, _server: server }
}

impl Bed {
    /// Waits until the application has written `more` bytes beyond now; returns how long it took.
    fn wait_progress(&self, more: u64, within: Duration) -> Duration {
        let t0 = Instant::now();
        let target = self.written.load(Ordering::Relaxed) + more;
        let mut last_print = Instant::now();
        while self.written.load(Ordering::Relaxed) < target {
            if std::env::var_os("OUTAGE_DEBUG").is_some() && last_print.elapsed() > Duration::from_millis(250) {
                last_print = Instant::now();
                eprintln!(
                    "  {:?}: written {} {:?}",
                    t0.elapsed(),
                    self.written.load(Ordering::Relaxed),
                    self.manager_state.lock().unwrap()
                );
            }
            assert!(t0.elapsed() < within, "no progress within {within:?}: {:?}", self.manager_state.lock().unwrap());
            std::thread::sleep(Duration::from_millis(5));
        }
        t0.elapsed()
    }

    /// Both interfaces down for `d`, then up again with their routes; returns the time from
    /// the interfaces coming back to the transfer moving again (1 MiB written).
    /// `server_notices`: the server's sockets are destroyed too (`ss -K`), so that its session
    /// is orphaned for the whole outage and must wait for the client (its rejoin timeout).
    fn outage(&self, d: Duration, server_notices: bool) -> Duration {
        let failures_before = self.manager_state.lock().unwrap().0;
        for dev in &self.ifaces {
            self.topo.ip(Side::Client, &["link", "set", dev, "down"]).unwrap();
        }
        if server_notices {
            let killed = self.topo.kill_tcp_sockets(Side::Server, &["sport", "=", ":4443"]).unwrap();
            assert!(killed.lines().count() >= 3, "the server's two connections: {killed}");
        }
        std::thread::sleep(d);
        let state = self.manager_state.lock().unwrap().clone();
        eprintln!("end of a {d:?} outage: path manager {state:?}");
        assert_eq!(state.1, 0, "no path is up during the outage");
        if d >= Duration::from_secs(1) {
            // The manager kept trying, and the connects were refused (not a token problem).
            assert!(state.0 > failures_before, "attempts during the outage: {state:?}");
            assert!(
                state.2.iter().any(|e| e.contains("unreachable") || e.contains("No such device")),
                "refused connects: {state:?}"
            );
        }
        for (i, dev) in self.ifaces.iter().enumerate() {
            self.topo.ip(Side::Client, &["link", "set", dev, "up"]).unwrap();
            self.topo.path(i).restore_routes().unwrap();
            route_service(&self.topo, i);
        }
        let resumed = self.wait_progress(1 << 20, Duration::from_secs(15));
        eprintln!("a {d:?} outage: the transfer moved again {resumed:?} after the interfaces came back");
        resumed
    }

    /// Ends the transfer and checks every byte arrived, once and in order.
    fn finish(self) -> (ClientEnd, Duration) {
        self.wait_progress(1 << 20, Duration::from_secs(15));
        self.stop.store(true, Ordering::Relaxed);
        let end = self.client.join().unwrap();
        let (got, ok, orphaned) = self.server.recv_timeout(Duration::from_secs(60)).unwrap();
        eprintln!(
            "sent {} bytes, server got {got} (verified: {ok}); client tokens left {}, failovers {}, error {:?}; \
             the server's session was orphaned for up to {orphaned:?}",
            end.sent, end.tokens, end.failovers, end.error
        );
        assert_eq!(end.error, None, "the session survived every outage and closed cleanly");
        assert!(ok, "every byte the server got is the pattern at its offset");
        assert_eq!(got, end.sent, "every byte arrived");
        assert!(end.tokens >= 1, "the client still has join tokens");
        (end, orphaned)
    }
}

#[test]
fn outages_of_300_ms_and_3_s_are_survived() {
    skip_unless_supported!("netns_outage::outages_of_300_ms_and_3_s_are_survived");
    let bed = start(tcpls::DEFAULT_OUTAGE_TOLERANCE, Duration::from_secs(60));
    bed.wait_progress(4 << 20, Duration::from_secs(30));
    for (d, server_notices) in
        [(Duration::from_millis(300), false), (Duration::from_secs(3), true), (Duration::from_millis(300), false)]
    {
        let resumed = bed.outage(d, server_notices);
        assert!(resumed < Duration::from_secs(3), "resumed {resumed:?} after a {d:?} outage");
        bed.wait_progress(2 << 20, Duration::from_secs(15));
    }
    let (end, orphaned) = bed.finish();
    assert!(end.failovers >= 1);
    assert!(orphaned >= Duration::from_secs(2), "the server waited for the client through the 3 s outage");
}

#[test]
fn an_outage_of_20_s_is_survived() {
    skip_unless_supported!("netns_outage::an_outage_of_20_s_is_survived");
    let bed = start(tcpls::DEFAULT_OUTAGE_TOLERANCE, Duration::from_secs(60));
    bed.wait_progress(4 << 20, Duration::from_secs(30));
    // The server notices too (its sockets are destroyed): it keeps the orphaned session for its
    // own rejoin timeout (60 s here; the default 10 s would end it half-way).
    let resumed = bed.outage(Duration::from_secs(20), true);
    assert!(resumed < Duration::from_secs(3), "resumed {resumed:?} after a 20 s outage");
    let (_, orphaned) = bed.finish();
    assert!(orphaned >= Duration::from_secs(15), "the server waited {orphaned:?} for the client");
}

/// An outage longer than the tolerance ends the session with an error that says so.
#[test]
fn an_outage_past_the_tolerance_ends_the_session_with_a_clear_error() {
    skip_unless_supported!("netns_outage::an_outage_past_the_tolerance_ends_the_session_with_a_clear_error");
    let bed = start(Duration::from_secs(2), Duration::from_secs(60));
    bed.wait_progress(2 << 20, Duration::from_secs(30));
    for dev in &bed.ifaces {
        bed.topo.ip(Side::Client, &["link", "set", dev, "down"]).unwrap();
    }
    std::thread::sleep(Duration::from_secs(3));
    bed.stop.store(true, Ordering::Relaxed);
    let end = bed.client.join().unwrap();
    let why = end.error.expect("the session failed").to_string();
    eprintln!("error: {why}");
    assert!(why.contains("every connection was lost and none rejoined within 2."), "{why}");
    assert!(why.contains("last attempts: 2 path(s) tried"), "{why}");
    assert!(why.contains("unreachable") || why.contains("No such device"), "{why}");
}

/// The server gave up first (its rejoin timeout, 1 s here, is shorter than the 3 s outage, and
/// it noticed the loss): the client's rejoin is refused, and the session ends at once with an
/// error saying why, instead of retrying for its whole tolerance (60 s).
#[test]
fn a_server_that_gave_up_refuses_the_rejoin_and_the_client_says_so_at_once() {
    skip_unless_supported!("netns_outage::a_server_that_gave_up_refuses_the_rejoin_and_the_client_says_so_at_once");
    let bed = start(tcpls::DEFAULT_OUTAGE_TOLERANCE, Duration::from_secs(1));
    bed.wait_progress(2 << 20, Duration::from_secs(30));
    for dev in &bed.ifaces {
        bed.topo.ip(Side::Client, &["link", "set", dev, "down"]).unwrap();
    }
    bed.topo.kill_tcp_sockets(Side::Server, &["sport", "=", ":4443"]).unwrap();
    std::thread::sleep(Duration::from_secs(3));
    let back = Instant::now();
    for (i, dev) in bed.ifaces.iter().enumerate() {
        bed.topo.ip(Side::Client, &["link", "set", dev, "up"]).unwrap();
        bed.topo.path(i).restore_routes().unwrap();
        route_service(&bed.topo, i);
    }
    // The client's writes fail when its session ends; past 10 s the test stops it.
    while !bed.client.is_finished() && back.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let ended = back.elapsed();
    eprintln!("path manager: {:?}", bed.manager_state.lock().unwrap());
    bed.stop.store(true, Ordering::Relaxed);
    let end = bed.client.join().unwrap();
    let why = end.error.expect("the session failed").to_string();
    eprintln!("ended {ended:?} after the interfaces came back: {why}");
    assert!(why.contains("the server refused the rejoin"), "{why}");
    assert!(why.contains("no longer knows this session"), "{why}");
    assert!(ended < Duration::from_secs(10), "ended {ended:?} after the interfaces came back (not the 60 s tolerance)");
}
