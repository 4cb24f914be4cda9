//! Per-core serving (`tcpls::ServerBuilder`): one listener and one current-thread runtime per
//! core. Joins that the kernel gives another core's listener are handed over to the core of
//! their session; many sessions spread over the cores; the listener's protections and
//! statistics hold over all cores; shutdown ends everything. Content is verified byte for byte.
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{payload, round_trip, Pki};
use tcpls::{server_name_for, PerCoreServer, ServerBuilder, Session, TcplsConnector};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Generous bound for anything that should take milliseconds, on a loaded machine.
const PATIENCE: Duration = Duration::from_secs(30);

/// Echoes every stream of `session`; notes the thread (core) that served it.
async fn echo_session(session: Session, cores_seen: Arc<Mutex<BTreeSet<String>>>) {
    let name = std::thread::current().name().unwrap_or("unnamed").to_string();
    cores_seen.lock().unwrap().insert(name);
    while let Some((mut send, mut recv)) = session.accept_stream().await {
        tokio::spawn(async move {
            let mut all = Vec::new();
            if recv.read_to_end(&mut all).await.is_ok() {
                let _ = send.write_all(&all).await;
                let _ = send.shutdown().await;
            }
        });
    }
}

fn echo_server(pki: &Pki, cores: usize) -> (PerCoreServer, Arc<Mutex<BTreeSet<String>>>) {
    let seen = Arc::new(Mutex::new(BTreeSet::new()));
    let s = seen.clone();
    let server = ServerBuilder::new(pki.server())
        .cores(cores)
        .serve(&["127.0.0.1:0".parse().unwrap()], move |session, _| echo_session(session, s.clone()))
        .unwrap();
    (server, seen)
}

/// Sends `data` on a new stream and checks the echo is the same bytes.
async fn echo_checked(session: &Session, data: &[u8]) {
    let (mut send, mut recv) = session.open_stream().unwrap();
    let got = round_trip(&mut send, &mut recv, data).await;
    assert!(got == data, "echo differs: {} bytes back for {}", got.len(), data.len());
}

async fn connect(pki: &Pki, addr: SocketAddr) -> Session {
    TcplsConnector::new(pki.client()).connect(addr, server_name_for("localhost").unwrap()).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joins_reaching_another_core_are_handed_over() {
    let pki = Pki::new();
    let (server, seen) = echo_server(&pki, 2);
    let addr = server.local_addrs()[0];
    // The kernel picks the listener by a hash of the 4-tuple: each join reaches the other core
    // with probability 1/2. New sessions until one did (40 tries: a miss is 2^-40).
    let mut handed_over = 0;
    for round in 0..40u64 {
        let session = connect(&pki, addr).await;
        let joined = tokio::time::timeout(PATIENCE, session.join(addr)).await.unwrap().unwrap();
        // Everything from now on goes over the joined connection.
        session.migrate(0, joined).unwrap();
        echo_checked(&session, &payload(300_000, round)).await;
        assert!(session.usable_connections().contains(&joined), "the joined connection stays up");
        session.close().await;
        handed_over = server.stats().joins_handed_over;
        if handed_over > 0 && round >= 3 {
            break;
        }
    }
    let stats = server.stats();
    assert!(handed_over > 0, "no join reached the other core in 40 sessions: {stats:?}");
    assert!(stats.joins >= stats.joins_handed_over && stats.joins >= 4, "{stats:?}");
    assert_eq!(stats.joins_refused_token + stats.joins_refused_budget, 0, "{stats:?}");
    let seen = seen.lock().unwrap().clone();
    assert!(seen.iter().all(|n| n.starts_with("tcpls-core-")), "handlers run on the cores: {seen:?}");
    server.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_sessions_spread_over_the_cores() {
    let pki = Pki::new();
    let (server, seen) = echo_server(&pki, 4);
    let addr = server.local_addrs()[0];
    let mut tasks = tokio::task::JoinSet::new();
    for seed in 0..48u64 {
        let client = pki.client();
        tasks.spawn(async move {
            let session =
                TcplsConnector::new(client).connect(addr, server_name_for("localhost").unwrap()).await.unwrap();
            echo_checked(&session, &payload(20_000 + seed as usize * 997, seed)).await;
            echo_checked(&session, &payload(1_000, seed + 1000)).await;
            session.close().await;
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    assert_eq!(server.stats().sessions, 48, "{:?}", server.stats());
    assert_eq!(server.failed_handshakes(), 0);
    let seen = seen.lock().unwrap().clone();
    // 48 connections hashed over 4 listeners all landing on one: 4 * 4^-48.
    assert!(seen.len() >= 2, "sessions were served by one core only: {seen:?}");
    server.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protections_and_counters_hold_over_the_cores() {
    let pki = Pki::new();
    let (server, _) = echo_server(&pki, 2);
    let addr = server.local_addrs()[0];
    // Garbage instead of a ClientHello fails its handshake, on whichever core took it.
    for _ in 0..4 {
        let mut garbage = tokio::net::TcpStream::connect(addr).await.unwrap();
        garbage.write_all(b"GET / HTTP/1.0\r\n\r\n").await.unwrap();
        let mut rest = Vec::new();
        // The server closes it (after an alert, or at once).
        let _ = tokio::time::timeout(PATIENCE, garbage.read_to_end(&mut rest)).await.unwrap();
    }
    // A join naming a session another server issued is refused (access_denied).
    let (stranger, _) = echo_server(&pki, 1);
    let session = connect(&pki, stranger.local_addrs()[0]).await;
    assert!(session.join(addr).await.is_err(), "a token of another server's session is refused");
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while (server.failed_handshakes() < 5 || server.stats().joins_refused_token < 1)
        && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let stats = server.stats();
    assert_eq!(stats.handshakes_failed, 4, "{stats:?}");
    assert_eq!(stats.joins_refused_token, 1, "{stats:?}");
    assert_eq!(server.failed_handshakes(), 5, "every core's failures (the refused join too), summed");
    assert_eq!(server.connections_awaiting_hello(), 0);
    // The stranger's session still works after the refused join.
    echo_checked(&session, &payload(10_000, 7)).await;
    session.close().await;
    stranger.shutdown();
    server.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_ends_sessions_and_closes_the_listeners() {
    let pki = Pki::new();
    let (server, _) = echo_server(&pki, 2);
    let addr = server.local_addrs()[0];
    let session = connect(&pki, addr).await;
    echo_checked(&session, &payload(5_000, 1)).await;
    // `shutdown` joins the cores' threads: off the runtime's worker.
    tokio::task::spawn_blocking(move || server.shutdown()).await.unwrap();
    // The server's end closed the connection: the client loses it at once (and would then try
    // to rejoin for its rejoin timeout, refused since nothing listens).
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !session.usable_connections().is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "the connection outlived its server");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let refused = tokio::net::TcpStream::connect(addr).await;
    assert!(refused.is_err(), "no core listens after shutdown");
}
