//! Joins and happy eyeballs over real loopback sockets, at their edges: cancelled joins, raced
//! attempts. Tests marked `#[ignore = "bug: ..."]` state the CORRECT behaviour and currently
//! fail; see the review report.
#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::Pki;
use tcpls::{server_name_for, JoinRegistry, SessionConfig, TcplsConnector, TcplsListener};

/// Listeners sharing a registry; every accepted session is counted, and counted again when it
/// ends. `close_after` makes the server close each session after that delay.
async fn counting_server(
    pki: &Pki,
    addrs: &[&str],
    close_after: Option<Duration>,
) -> (Vec<SocketAddr>, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let registry = JoinRegistry::new();
    let (accepted, ended) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut bound = Vec::new();
    for a in addrs {
        let listener = TcplsListener::bind_with_registry(
            a.parse().unwrap(),
            pki.server(),
            SessionConfig::default(),
            registry.clone(),
        )
        .await
        .unwrap();
        bound.push(listener.local_addr());
        let (accepted, ended) = (accepted.clone(), ended.clone());
        tokio::spawn(async move {
            while let Some((session, _)) = listener.accept().await {
                accepted.fetch_add(1, Ordering::SeqCst);
                let ended = ended.clone();
                tokio::spawn(async move {
                    if let Some(d) = close_after {
                        tokio::time::sleep(d).await;
                        let _ = tokio::time::timeout(Duration::from_secs(30), session.close()).await;
                    } else {
                        session.closed().await;
                    }
                    ended.fetch_add(1, Ordering::SeqCst);
                });
            }
        });
    }
    (bound, accepted, ended)
}

/// A listening address whose accept queue is full: SYNs to it are dropped, connect() hangs.
fn black_hole(ip: &str) -> (SocketAddr, Vec<socket2::Socket>) {
    let dead = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    dead.bind(&format!("{ip}:0").parse::<SocketAddr>().unwrap().into()).unwrap();
    dead.listen(0).unwrap();
    let addr = dead.local_addr().unwrap().as_socket().unwrap();
    let mut keep = vec![dead];
    for _ in 0..4 {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        s.set_nonblocking(true).unwrap();
        let _ = s.connect(&addr.into());
        keep.push(s);
    }
    (addr, keep)
}

async fn wait_tokens(session: &tcpls::Session) {
    for _ in 0..200 {
        if session.token_count() > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("no tokens");
}

/// A join whose future is dropped while its TCP connect is pending (a caller's timeout, a
/// `select!`) leaves a connection in the core that never handshakes and never fails: the
/// session then never sees the peer's close as complete (`peer_closed` needs every connection
/// closed or finished), never answers with close_notify, and neither side ever ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_join_does_not_keep_the_session_from_closing() {
    let pki = Pki::new();
    let (addrs, _accepted, ended) = counting_server(&pki, &["127.0.0.1:0"], Some(Duration::from_millis(300))).await;
    let (hole, _keep) = black_hole("127.0.0.4");
    let session =
        TcplsConnector::new(pki.client()).connect(addrs[0], server_name_for("localhost").unwrap()).await.unwrap();
    wait_tokens(&session).await;
    let cancelled = tokio::time::timeout(Duration::from_millis(100), session.join(hole)).await;
    assert!(cancelled.is_err(), "the join was still connecting when cancelled");
    // The server closes the session at 300 ms; the client must answer and end.
    let closed = tokio::time::timeout(Duration::from_secs(5), session.closed()).await;
    assert!(closed.is_ok(), "the client session never ended after the server closed it");
    // The server's task counts its session's end right after its own close returns.
    for _ in 0..200 {
        if ended.load(Ordering::SeqCst) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(ended.load(Ordering::SeqCst), 1, "the server session ended");
}

/// Same zombie without any cancellation: nothing bounds the TCP connect of a join, so a join
/// to an address that drops SYNs blocks for the kernel's SYN retries (about two minutes), and
/// the session cannot close in the meantime. `HappyEyeballs { keep_others: true }` does
/// exactly this for every address that lost the race.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_join_to_a_black_hole_gives_up_within_the_handshake_timeout() {
    let pki = Pki::new();
    let (addrs, _accepted, _ended) = counting_server(&pki, &["127.0.0.1:0"], None).await;
    let (hole, _keep) = black_hole("127.0.0.5");
    let session =
        TcplsConnector::new(pki.client()).connect(addrs[0], server_name_for("localhost").unwrap()).await.unwrap();
    wait_tokens(&session).await;
    let limit = tcpls::HANDSHAKE_TIMEOUT + Duration::from_secs(2);
    let result = tokio::time::timeout(limit, session.join(hole)).await;
    assert!(matches!(result, Ok(Err(_))), "join should fail by itself within the handshake timeout");
}

/// Lock-in: a session's tokens leave the registry when it ends, whatever the number of joins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joined_sessions_leave_nothing_in_the_registry() {
    let pki = Pki::new();
    let listeners = common::listen_on(&pki, &["127.0.0.1:0", "127.0.0.2:0"]).await;
    let registry = listeners[0].registry().clone();
    let mut addrs = Vec::new();
    for l in listeners {
        addrs.push(l.local_addr());
        tokio::spawn(async move {
            while let Some((s, _)) = l.accept().await {
                tokio::spawn(async move { s.closed().await });
            }
        });
    }
    let session =
        TcplsConnector::new(pki.client()).connect(addrs[0], server_name_for("localhost").unwrap()).await.unwrap();
    wait_tokens(&session).await;
    for _ in 0..2 {
        session.join(addrs[1]).await.unwrap();
    }
    for _ in 0..200 {
        if session.usable_connections().len() == 3 && registry.len() == 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(session.usable_connections().len(), 3);
    assert_eq!(registry.len(), 4, "the budget still has room: 4 unused tokens stay registered");
    assert_eq!(session.close().await, None);
    for _ in 0..400 {
        if registry.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(registry.is_empty(), "{} tokens outlived their session", registry.len());
}
