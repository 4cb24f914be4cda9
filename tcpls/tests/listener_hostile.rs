//! Hostile clients against the listener (docs/SECURITY.md): idle TCP connections that
//! never send a ClientHello used to hold all 1,024 handshake slots for 10 s each, so a real
//! client and a failover join timed out behind them. Now silent connections wait in a pool of
//! their own, with a short deadline, where the oldest make room for new ones; and a server
//! session that hears nothing for its idle timeout ends.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::Pki;
use tcpls::{server_name_for, SessionConfig, TcplsConnector, TcplsListener};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_do_not_lock_out_a_handshake_or_a_join() {
    let pki = Pki::new();
    let listener = TcplsListener::bind("127.0.0.1:0".parse().unwrap(), pki.server()).await.unwrap();
    let addr = listener.local_addr();
    // Both ends of each idle connection live in this process: 1,100 of them are 2,200 of the
    // 20,000 descriptors CI allows.
    let idle_count = tcpls::MAX_PENDING_HANDSHAKES + 76;
    let mut idle = Vec::with_capacity(idle_count);
    for _ in 0..idle_count {
        idle.push(tokio::net::TcpStream::connect(addr).await.unwrap());
    }
    // Let the listener accept them all.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        listener.connections_awaiting_hello() <= tcpls::MAX_AWAITING_PER_SOURCE,
        "{} silent connections from one address kept",
        listener.connections_awaiting_hello()
    );

    let server = tokio::spawn(async move {
        let (session, _) = listener.accept().await.unwrap();
        let (mut send, mut recv) = session.accept_stream().await.unwrap();
        let mut buf = [0u8; 5];
        recv.read_exact(&mut buf).await.unwrap();
        send.write_all(&buf).await.unwrap();
        send.shutdown().await.unwrap();
        session.closed().await;
        listener
    });
    let started = Instant::now();
    let connector = TcplsConnector::new(pki.client());
    let client =
        tokio::time::timeout(Duration::from_secs(5), connector.connect(addr, server_name_for("localhost").unwrap()))
            .await
            .expect("a legitimate handshake behind 1,100 idle connections")
            .unwrap();
    let handshake = started.elapsed();
    // A join (as a failover rejoin does) behind them too, with more idle connections arriving.
    for _ in 0..100 {
        idle.push(tokio::net::TcpStream::connect(addr).await.unwrap());
    }
    let joined = tokio::time::timeout(Duration::from_secs(5), client.join(addr)).await.expect("join in time").unwrap();
    assert_ne!(joined, 0);
    let (mut send, mut recv) = client.open_stream().unwrap();
    send.write_all(b"hello").await.unwrap();
    send.shutdown().await.unwrap();
    let mut echoed = Vec::new();
    recv.read_to_end(&mut echoed).await.unwrap();
    assert_eq!(echoed, b"hello");
    eprintln!("handshake behind {idle_count} idle connections: {handshake:?}");
    let _ = client.close().await;
    let _listener = server.await.unwrap();
    drop(idle);
}

/// A server session whose client goes silent ends after `idle_timeout` (server default on).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_client_session_ends_after_the_idle_timeout() {
    let pki = Pki::new();
    let settings = SessionConfig { idle_timeout: Some(Duration::from_millis(500)), ..SessionConfig::default() };
    let listener = TcplsListener::bind_with("127.0.0.1:0".parse().unwrap(), pki.server(), settings).await.unwrap();
    let addr = listener.local_addr();
    let connector = TcplsConnector::new(pki.client());
    let (client, accepted) =
        tokio::join!(connector.connect(addr, server_name_for("localhost").unwrap()), listener.accept());
    let (client, (server, _)) = (client.unwrap(), accepted.unwrap());
    let started = Instant::now();
    let error = tokio::time::timeout(Duration::from_secs(10), server.closed()).await.expect("server session ended");
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(400), "ended after {waited:?}");
    assert!(format!("{error:?}").contains("idle timeout"), "{error:?}");
    // The client learns that the session is over (close_notify).
    tokio::time::timeout(Duration::from_secs(10), client.closed()).await.expect("client session ended");
}

/// A client that starts its ClientHello and stalls is dropped after HANDSHAKE_TIMEOUT (one
/// listener-wide deadline queue, `HandshakeDeadlines`), and a handshake behind it is served.
/// Paused time: the 10 s pass at once.
#[tokio::test(start_paused = true)]
async fn a_stalled_handshake_is_dropped_after_the_handshake_timeout() {
    let pki = Pki::new();
    let listener = TcplsListener::bind("127.0.0.1:0".parse().unwrap(), pki.server()).await.unwrap();
    let addr = listener.local_addr();
    let mut stalled = tokio::net::TcpStream::connect(addr).await.unwrap();
    // A handshake record header announcing 512 bytes, then nothing.
    stalled.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00]).await.unwrap();
    let started = tokio::time::Instant::now();
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(tcpls::HANDSHAKE_TIMEOUT * 2, stalled.read(&mut buf)).await;
    assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "the server closed the stalled connection: {read:?}");
    let waited = started.elapsed();
    assert!(
        waited >= tcpls::HANDSHAKE_TIMEOUT && waited < tcpls::HANDSHAKE_TIMEOUT + Duration::from_secs(1),
        "closed after {waited:?}"
    );
    assert_eq!(listener.failed_handshakes(), 1);
    // The listener still serves a real client.
    let accept = tokio::spawn(async move { listener.accept().await.map(|(s, _)| s) });
    let session = TcplsConnector::new(pki.client()).connect(addr, server_name_for("localhost").unwrap()).await.unwrap();
    let served = accept.await.unwrap().unwrap();
    assert!(session.is_established() && served.is_established());
}

/// A handshake in progress when its listener is dropped still times out (the deadlines have a
/// task of their own, which ends after the last one).
#[tokio::test(start_paused = true)]
async fn a_stalled_handshake_times_out_after_its_listener_is_gone() {
    let pki = Pki::new();
    let listener = TcplsListener::bind("127.0.0.1:0".parse().unwrap(), pki.server()).await.unwrap();
    let mut stalled = tokio::net::TcpStream::connect(listener.local_addr()).await.unwrap();
    stalled.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00]).await.unwrap();
    // Let the listener accept it and start the handshake, then drop the listener.
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(listener);
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(tcpls::HANDSHAKE_TIMEOUT * 2, stalled.read(&mut buf)).await;
    assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "the stalled connection was closed: {read:?}");
}
