//! Real TCP sockets on loopback, real rustls, through the public tokio API.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{payload, Pki};
use tcpls::{server_name_for, SessionConfig, TcplsConnector, TcplsListener};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn echo_server(pki: &Pki) -> std::net::SocketAddr {
    let listener = TcplsListener::bind("127.0.0.1:0".parse().unwrap(), pki.server()).await.unwrap();
    let addr = listener.local_addr();
    tokio::spawn(async move {
        while let Some((session, _)) = listener.accept().await {
            tokio::spawn(async move {
                while let Some((mut send, mut recv)) = session.accept_stream().await {
                    tokio::spawn(async move {
                        tokio::io::copy(&mut recv, &mut send).await.unwrap();
                        send.shutdown().await.unwrap();
                    });
                }
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn echo_many_streams_verified() {
    let pki = Pki::new();
    let addr = echo_server(&pki).await;
    let session = TcplsConnector::new(pki.client()).connect(addr, server_name_for("localhost").unwrap()).await.unwrap();
    assert!(!session.is_fallback());
    assert_eq!(session.handshake_info().unwrap().alpn.as_deref(), Some(&b"tcpls/1"[..]));
    let mut tasks = vec![];
    for i in 0..64u64 {
        let (mut send, mut recv) = session.open_stream().unwrap();
        let data = payload(10_000 + (i as usize) * 7919, i);
        tasks.push(tokio::spawn(async move {
            let expect = data.clone();
            let writer = tokio::spawn(async move {
                send.write_all(&data).await.unwrap();
                send.shutdown().await.unwrap();
            });
            let mut got = vec![];
            recv.read_to_end(&mut got).await.unwrap();
            writer.await.unwrap();
            assert!(got == expect, "stream {i} corrupted");
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(session.close().await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bulk_transfer_both_ways() {
    let pki = Pki::new();
    let addr = echo_server(&pki).await;
    let session = TcplsConnector::new(pki.client()).connect(addr, server_name_for("localhost").unwrap()).await.unwrap();
    let (mut send, mut recv) = session.open_stream().unwrap();
    let data = payload(64 << 20, 42);
    let expect = data.clone();
    let writer = tokio::spawn(async move {
        for chunk in data.chunks(1 << 20) {
            send.write_all(chunk).await.unwrap();
        }
        send.shutdown().await.unwrap();
    });
    let mut got = Vec::with_capacity(expect.len());
    recv.read_to_end(&mut got).await.unwrap();
    writer.await.unwrap();
    assert_eq!(got.len(), expect.len());
    assert!(got == expect, "64 MiB echo corrupted");
    let conns = session.connections();
    assert_eq!(conns.len(), 1);
    assert!(conns[0].bytes_sent > 64 << 20 && conns[0].bytes_received > 64 << 20);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_opens_streams_too() {
    let pki = Pki::new();
    let listener = TcplsListener::bind("127.0.0.1:0".parse().unwrap(), pki.server()).await.unwrap();
    let addr = listener.local_addr();
    tokio::spawn(async move {
        let (session, _) = listener.accept().await.unwrap();
        let (mut send, _recv) = session.open_stream().unwrap();
        assert_eq!(send.id() % 2, 1, "server streams are odd");
        send.write_all(b"pushed by the server").await.unwrap();
        send.shutdown().await.unwrap();
        session.closed().await;
    });
    let session = TcplsConnector::new(pki.client()).connect(addr, server_name_for("localhost").unwrap()).await.unwrap();
    let (_send, mut recv) = session.accept_stream().await.unwrap();
    let mut got = String::new();
    recv.read_to_string(&mut got).await.unwrap();
    assert_eq!(got, "pushed by the server");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_bad_client_does_not_disturb_another_session() {
    let pki = Pki::new();
    let addr = echo_server(&pki).await;
    let good = TcplsConnector::new(pki.client()).connect(addr, server_name_for("localhost").unwrap()).await.unwrap();
    // A peer that sends garbage instead of a ClientHello, and one that stalls mid-record.
    let mut garbage = tokio::net::TcpStream::connect(addr).await.unwrap();
    garbage.write_all(&[0x16, 0x03, 0x01, 0xff, 0xff, 1, 2, 3]).await.unwrap();
    garbage.write_all(&payload(70_000, 3)).await.unwrap();
    let _stall = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut send, mut recv) = good.open_stream().unwrap();
    send.write_all(b"still fine").await.unwrap();
    send.shutdown().await.unwrap();
    let mut got = vec![];
    tokio::time::timeout(Duration::from_secs(10), recv.read_to_end(&mut got)).await.unwrap().unwrap();
    assert_eq!(got, b"still fine");
    // The garbage connection is closed by the server (alert, then FIN).
    let mut sink = vec![];
    let r = tokio::time::timeout(Duration::from_secs(10), garbage.read_to_end(&mut sink)).await.unwrap();
    assert!(r.is_ok() || r.is_err(), "connection ended");
    assert!(sink.len() < 100, "at most an alert comes back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_records_still_verified() {
    let pki = Pki::new();
    let addr = echo_server(&pki).await;
    let settings = SessionConfig { record_size: 1400, ..SessionConfig::default() };
    let session = TcplsConnector::new(pki.client())
        .with_settings(settings)
        .connect(addr, server_name_for("localhost").unwrap())
        .await
        .unwrap();
    let (mut send, mut recv) = session.open_stream().unwrap();
    let data = payload(3 << 20, 7);
    let expect = data.clone();
    tokio::spawn(async move {
        send.write_all(&data).await.unwrap();
        send.shutdown().await.unwrap();
    });
    let mut got = vec![];
    recv.read_to_end(&mut got).await.unwrap();
    assert!(got == expect);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_report_tcp_info_and_the_peer_answers_tcp_info_requests() {
    let pki = Pki::new();
    let addr = echo_server(&pki).await;
    let session = TcplsConnector::new(pki.client()).connect(addr, server_name_for("localhost").unwrap()).await.unwrap();
    let info = session.connections()[0].tcp_info.expect("TCP_INFO of an open connection");
    assert!(info.cwnd >= 1 && info.rtt_us < 1_000_000, "{info:?}");
    assert!(session.connections()[0].usable);
    session.request_peer_tcp_info(0);
    let mut peer = None;
    for _ in 0..200 {
        peer = session.poll_events().into_iter().find_map(|e| match e {
            tcpls::Event::PeerTcpInfo { conn: 0, info } => Some(info),
            _ => None,
        });
        if peer.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let peer = peer.expect("the server answered with its view of connection 0");
    assert!(peer.cwnd >= 1 && peer.rtt_us < 1_000_000, "{peer:?}");
}

/// A session that goes quiet after a bulk transfer gives its large buffers back within about a
/// second (its driver arms a trim timer), instead of keeping them until its next activity.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quiet_session_releases_bulk_buffers() {
    quiet_session_releases(0).await;
}

/// Same with 100 more streams open (each echoed a byte): a driver with that many streams looks
/// at what a trim would release only every 50 ms, and must still look once the session is quiet.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quiet_session_with_many_streams_releases_bulk_buffers() {
    quiet_session_releases(100).await;
}

async fn quiet_session_releases(idle_streams: usize) {
    let pki = Pki::new();
    let addr = echo_server(&pki).await;
    let session = TcplsConnector::new(pki.client()).connect(addr, server_name_for("localhost").unwrap()).await.unwrap();
    let mut idle = Vec::new();
    for _ in 0..idle_streams {
        let (mut send, mut recv) = session.open_stream().unwrap();
        send.write_all(b"x").await.unwrap();
        let mut one = [0u8; 1];
        recv.read_exact(&mut one).await.unwrap();
        idle.push((send, recv));
    }
    let (mut send, mut recv) = session.open_stream().unwrap();
    let data = payload(16 << 20, 7);
    let expect = data.clone();
    let writer = tokio::spawn(async move {
        send.write_all(&data).await.unwrap();
        send
    });
    let mut got = vec![0u8; expect.len()];
    recv.read_exact(&mut got).await.unwrap();
    assert!(got == expect, "16 MiB echo corrupted");
    // The stream stays open both ways: only idleness may free the buffers.
    let _send = writer.await.unwrap();
    let busy = session.memory_use().releasable;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let quiet = session.memory_use();
    assert!(
        quiet.releasable < 4096,
        "after 2.5 s quiet the session still holds {quiet:?} (just after the transfer: {busy} releasable)"
    );
    assert_eq!(quiet.send_buffered, 0, "{quiet:?}");
}

/// `Session::close` while a stream is still open both ways (the server's echo task waits for
/// more): our FIN and close_notify end the stream and the session on both sides (it used to
/// wait for ever: the server waited for the end of the stream before answering close_notify).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_with_a_stream_still_open() {
    let pki = Pki::new();
    let addr = echo_server(&pki).await;
    let session = TcplsConnector::new(pki.client()).connect(addr, server_name_for("localhost").unwrap()).await.unwrap();
    let (mut send, mut recv) = session.open_stream().unwrap();
    send.write_all(b"x").await.unwrap();
    let mut got = [0u8; 1];
    recv.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"x");
    let closed = tokio::time::timeout(Duration::from_secs(5), session.close()).await;
    assert!(matches!(closed, Ok(None)), "close with an open stream: {closed:?}");
    // The server's echo saw our FIN and finished its half: we read its end, nothing more.
    let mut rest = Vec::new();
    recv.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty(), "{rest:?}");
    assert!(send.write_all(b"y").await.is_err(), "a write after close must fail");
}
