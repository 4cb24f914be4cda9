//! The local side of a path (multihomed clients): connections of one session that leave from different
//! local addresses or interfaces towards a server with a single address, happy eyeballs over
//! local sides, clear errors for a path that cannot exist, and joins over a path that cannot
//! connect costing no token. On loopback, 127.0.0.2 and 127.0.0.3 stand for two interfaces'
//! addresses and `lo` for an interface.
#![allow(clippy::unwrap_used)]

mod common;

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use common::{payload, Pki};
use tcpls::{server_name_for, HappyEyeballs, JoinRegistry, PathOptions, SessionConfig, TcplsConnector, TcplsListener};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// An echo server on one address; returns it and the peer addresses its sessions' connections
/// came from (as the server saw them), sent on `seen` as each session ends.
async fn echo_server(pki: &Pki) -> (SocketAddr, tokio::sync::mpsc::UnboundedReceiver<Vec<SocketAddr>>) {
    let listener = TcplsListener::bind_with_registry(
        "127.0.0.1:0".parse().unwrap(),
        pki.server(),
        SessionConfig::default(),
        JoinRegistry::new(),
    )
    .await
    .unwrap();
    let addr = listener.local_addr();
    let (seen_tx, seen) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some((session, _)) = listener.accept().await {
            let seen_tx = seen_tx.clone();
            tokio::spawn(async move {
                while let Some((mut send, mut recv)) = session.accept_stream().await {
                    let peers: Vec<SocketAddr> = session.connections().iter().filter_map(|c| c.remote).collect();
                    let _ = seen_tx.send(peers);
                    tokio::spawn(async move {
                        let mut all = Vec::new();
                        recv.read_to_end(&mut all).await.unwrap();
                        send.write_all(&all).await.unwrap();
                        send.shutdown().await.unwrap();
                    });
                }
            });
        }
    });
    (addr, seen)
}

async fn echo_on(session: &tcpls::Session, conn: u32, data: &[u8]) -> Vec<u8> {
    let (mut send, mut recv) = session.open_stream().unwrap();
    send.steer(Some(conn)).unwrap();
    let (_, got) = tokio::join!(
        async {
            send.write_all(data).await.unwrap();
            send.shutdown().await.unwrap();
        },
        async {
            let mut got = Vec::new();
            recv.read_to_end(&mut got).await.unwrap();
            got
        }
    );
    got
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_leave_from_the_local_side_asked_for() {
    let pki = Pki::new();
    let (server, mut seen) = echo_server(&pki).await;
    let connector = TcplsConnector::new(pki.client()).with_path(PathOptions::new().local(ip("127.0.0.2")));
    let session = connector.connect(server, server_name_for("localhost").unwrap()).await.unwrap();
    let second = session.join_with(server, &PathOptions::new().local(ip("127.0.0.3")).device("lo")).await.unwrap();
    let locals: Vec<Option<IpAddr>> = session.connections().iter().map(|c| c.local.map(|a| a.ip())).collect();
    assert_eq!(locals, [Some(ip("127.0.0.2")), Some(ip("127.0.0.3"))]);
    // Both paths carry verified data to the one server address.
    for (conn, seed) in [(0, 1), (second, 2)] {
        let data = payload(2 << 20, seed);
        assert!(echo_on(&session, conn, &data).await == data, "connection {conn}: content differs");
    }
    let per: Vec<u64> = session.connections().iter().map(|c| c.bytes_sent).collect();
    assert!(per.iter().all(|b| *b >= 2 << 20), "each path carried its stream: {per:?}");
    // The server saw the two connections come from the two local addresses.
    let mut peers = Vec::new();
    while let Ok(p) = seen.try_recv() {
        peers = p;
    }
    let mut ips: Vec<IpAddr> = peers.iter().map(|a| a.ip()).collect();
    ips.sort();
    assert_eq!(ips, [ip("127.0.0.2"), ip("127.0.0.3")], "as seen by the server");
    assert_eq!(session.close().await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_that_cannot_exist_says_why() {
    let pki = Pki::new();
    let (server, _) = echo_server(&pki).await;
    let name = server_name_for("localhost").unwrap();
    let cases = [
        (PathOptions::new().local(ip("192.0.2.1")), "not an address of this host"),
        (PathOptions::new().device("nosuchif0"), "no such interface"),
        (PathOptions::new().local(ip("::1")), "not of the same family"),
    ];
    for (path, why) in cases {
        let e = TcplsConnector::new(pki.client()).with_path(path.clone()).connect(server, name.clone()).await;
        let e = e.err().unwrap_or_else(|| panic!("{path:?} connected"));
        assert!(e.to_string().contains(why), "{path:?}: {e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joins_that_cannot_connect_cost_no_token() {
    let pki = Pki::new();
    let (server, _) = echo_server(&pki).await;
    let session =
        TcplsConnector::new(pki.client()).connect(server, server_name_for("localhost").unwrap()).await.unwrap();
    // Tokens come with the server's first record.
    for _ in 0..200 {
        if session.token_count() > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let tokens = session.token_count();
    assert!(tokens > 0, "the server gave no token");
    // A refused port, and an address that is not ours: as during an outage or a handover.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    for _ in 0..3 * tokens {
        assert!(session.join(closed).await.is_err());
        assert!(session.join_with(server, &PathOptions::new().local(ip("192.0.2.1"))).await.is_err());
    }
    assert_eq!(session.token_count(), tokens, "failed TCP connects burnt tokens");
    let joined = session.join(server).await.unwrap();
    let data = payload(1 << 20, 5);
    assert!(echo_on(&session, joined, &data).await == data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn happy_eyeballs_over_local_sides_keeps_the_others() {
    let pki = Pki::new();
    let (server, _) = echo_server(&pki).await;
    let paths = [
        (server, PathOptions::new().local(ip("192.0.2.1"))), // cannot exist: fails at once
        (server, PathOptions::new().local(ip("127.0.0.2"))),
        (server, PathOptions::new().local(ip("127.0.0.3"))),
    ];
    let options = HappyEyeballs { stagger: Duration::from_millis(200), keep_others: true };
    let session = TcplsConnector::new(pki.client())
        .connect_any_path(&paths, server_name_for("localhost").unwrap(), options)
        .await
        .unwrap();
    // The winner plus the other usable local side, joined in the background.
    let mut locals = Vec::new();
    for _ in 0..300 {
        locals = session.connections().iter().filter_map(|c| c.local.map(|a| a.ip())).collect::<Vec<_>>();
        if locals.len() >= 2 && session.usable_connections().len() >= 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    locals.sort();
    assert_eq!(locals, [ip("127.0.0.2"), ip("127.0.0.3")]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_path_stays_idle_while_the_primary_is_up() {
    let pki = Pki::new();
    let (server, _) = echo_server(&pki).await;
    let connector = TcplsConnector::new(pki.client()).with_path(PathOptions::new().local(ip("127.0.0.2")));
    let session = connector.connect(server, server_name_for("localhost").unwrap()).await.unwrap();
    let backup = session.join_with(server, &PathOptions::new().local(ip("127.0.0.3"))).await.unwrap();
    session.set_backup(backup, true).unwrap();
    assert!(session.is_backup(backup));
    session.set_scheduler(Box::new(tcpls::RoundRobin::default()));
    let before = session.connections().iter().find(|c| c.id == backup).map(|c| c.bytes_sent).unwrap();
    // An unsteered echo: round robin would split it over both paths, the backup gets nothing.
    let (mut send, mut recv) = session.open_stream().unwrap();
    let data = payload(8 << 20, 9);
    let (_, got) = tokio::join!(
        async {
            send.write_all(&data).await.unwrap();
            send.shutdown().await.unwrap();
        },
        async {
            let mut got = Vec::new();
            recv.read_to_end(&mut got).await.unwrap();
            got
        }
    );
    assert!(got == data);
    let on_backup = session.connections().iter().find(|c| c.id == backup).map(|c| c.bytes_sent).unwrap() - before;
    assert!(on_backup < (8 << 20) / 100, "the backup path carried {on_backup} bytes (< 1% expected)");
}

/// Waits (bounded) until `cond` holds.
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..500 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{what}: not within 5 s");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_path_manager_keeps_a_fullmesh_up_and_replaces_lost_paths() {
    use tcpls::{Endpoint, PathManager, PathManagerConfig, PathPolicy};
    let pki = Pki::new();
    let (server, _) = echo_server(&pki).await;
    let wifi = PathOptions::new().local(ip("127.0.0.2"));
    let lte = PathOptions::new().local(ip("127.0.0.3"));
    // The path manager's decisions go to the session's trace.
    let trace = std::sync::Arc::new(Capture::default());
    let connector = TcplsConnector::new(pki.client()).with_path(wifi.clone()).with_trace(trace.clone());
    let session = connector.connect(server, server_name_for("localhost").unwrap()).await.unwrap();
    let config = PathManagerConfig {
        policy: PathPolicy::Fullmesh,
        endpoints: vec![Endpoint::new(wifi.clone()), Endpoint::backup(lte.clone())],
        initial: wifi.clone(),
        ..Default::default()
    };
    let manager = PathManager::start(&session, server, config);
    eventually("both paths up", || {
        let paths = manager.paths();
        paths.len() == 2 && paths.iter().all(|p| p.conn.is_some())
    })
    .await;
    let lte_conn = manager.paths().iter().find(|p| p.endpoint.backup).and_then(|p| p.conn).unwrap();
    assert!(session.is_backup(lte_conn), "the backup endpoint's connection is marked");
    assert_eq!(manager.paths().iter().find(|p| !p.endpoint.backup).and_then(|p| p.conn), Some(0));

    // A transfer runs while the Wi-Fi path is lost twice; the manager replaces it each time and
    // every byte arrives.
    let (mut send, mut recv) = session.open_stream().unwrap();
    let data = payload(32 << 20, 21);
    let writer = {
        let data = data.clone();
        tokio::spawn(async move {
            for chunk in data.chunks(1 << 20) {
                send.write_all(chunk).await.unwrap();
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            send.shutdown().await.unwrap();
        })
    };
    let reader = tokio::spawn(async move {
        let mut got = Vec::new();
        recv.read_to_end(&mut got).await.unwrap();
        got
    });
    for round in 0..2 {
        tokio::time::sleep(Duration::from_millis(60)).await;
        let wifi_conn = manager.paths().iter().find(|p| !p.endpoint.backup).and_then(|p| p.conn).unwrap();
        manager.interface_down(None, Some(ip("127.0.0.2")));
        eventually("the wifi path replaced", || {
            manager.paths().iter().any(|p| !p.endpoint.backup && p.conn.is_some_and(|c| c != wifi_conn))
        })
        .await;
        eprintln!("round {round}: wifi connection {wifi_conn} replaced");
    }
    writer.await.unwrap();
    let got = reader.await.unwrap();
    assert!(got == data, "content after two path losses");
    assert!(session.stats().failovers >= 1, "{:?}", session.stats());
    manager.stop();
    let path_states: Vec<String> = trace
        .events()
        .into_iter()
        .filter(|(name, _)| name == "path_updated")
        .map(|(_, data)| data["state"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(path_states.iter().filter(|s| *s == "dropped").count(), 2, "{path_states:?}");
    assert!(path_states.iter().filter(|s| *s == "up").count() >= 3, "lte once, wifi twice: {path_states:?}");
}

/// A trace sink keeping (name, data) of every event.
#[derive(Default)]
struct Capture(std::sync::Mutex<Vec<(String, serde_json::Value)>>);

impl Capture {
    fn events(&self) -> Vec<(String, serde_json::Value)> {
        self.0.lock().unwrap().clone()
    }
}

impl tcpls::TraceSink for Capture {
    fn record(&self, record: &tcpls::TraceRecord<'_>) {
        self.0.lock().unwrap().push(tcpls::describe_trace_event(&record.event));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_path_manager_retries_a_refused_path_until_it_works_without_burning_tokens() {
    use tcpls::{Endpoint, PathManager, PathManagerConfig};
    let pki = Pki::new();
    // One server, two listening addresses sharing a registry; the second is not listening yet.
    let registry = JoinRegistry::new();
    // The second address uses the first one's port, which something else (another test's
    // connection from 127.0.0.4) may hold: reserve it with a bound socket that does not listen
    // (connects to it are refused, as to a closed port), and take another port if it is taken.
    let (first, reservation) = loop {
        let first = TcplsListener::bind_with_registry(
            "127.0.0.1:0".parse().unwrap(),
            pki.server(),
            SessionConfig::default(),
            registry.clone(),
        )
        .await
        .unwrap();
        let later: SocketAddr = format!("127.0.0.4:{}", first.local_addr().port()).parse().unwrap();
        let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        if socket.bind(&later.into()).is_ok() {
            break (first, socket);
        }
    };
    let origin = first.local_addr();
    let later_addr: SocketAddr = format!("127.0.0.4:{}", origin.port()).parse().unwrap();
    tokio::spawn(async move { while first.accept().await.is_some() {} });
    let session =
        TcplsConnector::new(pki.client()).connect(origin, server_name_for("localhost").unwrap()).await.unwrap();
    eventually("tokens", || session.token_count() > 0).await;
    let tokens = session.token_count();
    let config = PathManagerConfig {
        paths: vec![(later_addr, Endpoint::new(PathOptions::new()))],
        first_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(200),
        ..Default::default()
    };
    let manager = PathManager::start(&session, origin, config);
    // The manager keeps the path the session was opened over too (as connection 0).
    let later = || manager.paths().into_iter().find(|p| p.remote == later_addr);
    eventually("a few refused attempts", || later().is_some_and(|p| p.failures >= 3)).await;
    assert_eq!(session.token_count(), tokens, "refused connects cost no token");
    assert!(later().unwrap().conn.is_none());
    assert_eq!(manager.paths().iter().find(|p| p.remote == origin).unwrap().conn, Some(0));
    // The address comes up: the manager joins over it within its backoff.
    drop(reservation);
    let second =
        TcplsListener::bind_with_registry(later_addr, pki.server(), SessionConfig::default(), registry).await.unwrap();
    tokio::spawn(async move { while second.accept().await.is_some() {} });
    eventually("the path joined once its address answers", || later().is_some_and(|p| p.conn.is_some())).await;
    let remotes: Vec<_> = session.connections().iter().filter_map(|c| c.remote).collect();
    assert!(remotes.contains(&later_addr), "{remotes:?}");
}
