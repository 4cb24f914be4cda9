//! `TcplsListener::stats()`: what the listeners of a server did with the connections they
//! accepted (the numbers behind the servers' metrics): a new session, an accepted join, a join
//! refused for its token, a failed handshake.
#![allow(clippy::unwrap_used)]

mod common;

use std::io::Write;
use std::time::Duration;

use common::Pki;
use tcpls::{server_name_for, ListenerStats, SessionConfig, TcplsConnector, TcplsListener};

async fn wait_for(listener: &TcplsListener, what: &str, done: impl Fn(&ListenerStats) -> bool) {
    for _ in 0..1000 {
        if done(&listener.stats()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{what}: {:?}", listener.stats());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_stats_count_sessions_joins_refusals_and_failures() {
    let pki = Pki::new();
    let any = "127.0.0.1:0".parse().unwrap();
    // Two listeners with separate registries: tokens of one are unknown to the other.
    let server = TcplsListener::bind_with(any, pki.server(), SessionConfig::default()).await.unwrap();
    let stranger = TcplsListener::bind_with(any, pki.server(), SessionConfig::default()).await.unwrap();
    let (addr, stranger_addr) = (server.local_addr(), stranger.local_addr());
    let accept = tokio::spawn(async move {
        let (session, _) = server.accept().await.unwrap();
        (server, session)
    });
    let session = TcplsConnector::new(pki.client()).connect(addr, server_name_for("localhost").unwrap()).await.unwrap();
    let (server, _served) = accept.await.unwrap();

    let refused = session.join(stranger_addr).await;
    assert!(refused.is_err(), "a token of another server's session is refused");
    wait_for(&stranger, "refused join", |s| s.joins_refused_token == 1).await;
    assert_eq!(stranger.stats(), ListenerStats { joins_refused_token: 1, ..ListenerStats::default() });

    session.join(addr).await.unwrap();
    wait_for(&server, "join", |s| s.joins == 1).await;

    let mut garbage = std::net::TcpStream::connect(addr).unwrap();
    garbage.write_all(b"GET / HTTP/1.0\r\n\r\n").unwrap();
    wait_for(&server, "failed handshake", |s| s.handshakes_failed == 1).await;
    assert_eq!(
        server.stats(),
        ListenerStats { sessions: 1, joins: 1, handshakes_failed: 1, ..ListenerStats::default() }
    );
    assert_eq!(server.failed_handshakes(), 1, "the older counter agrees");
}
