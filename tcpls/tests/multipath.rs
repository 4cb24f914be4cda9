//! Several TCP connections per session over real loopback sockets: 127.0.0.1, 127.0.0.2 and
//! ::1 stand for separate paths. Everything is verified by content.
#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{payload, round_trip, Pki};
use tcpls::{server_name_for, HappyEyeballs, JoinRegistry, RoundRobin, SessionConfig, TcplsConnector, TcplsListener};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A sink server on several addresses sharing one join registry; returns their addresses.
async fn sink_server(pki: &Pki, addrs: &[&str]) -> Vec<SocketAddr> {
    let registry = JoinRegistry::new();
    let mut bound = Vec::new();
    for a in addrs {
        let listener = match TcplsListener::bind_with_registry(
            a.parse().unwrap(),
            pki.server(),
            SessionConfig::default(),
            registry.clone(),
        )
        .await
        {
            Ok(l) => l,
            Err(e) => {
                eprintln!("SKIPPED address {a}: {e}");
                continue;
            }
        };
        bound.push(listener.local_addr());
        tokio::spawn(async move {
            while let Some((session, _)) = listener.accept().await {
                tokio::spawn(async move {
                    while let Some((mut send, mut recv)) = session.accept_stream().await {
                        tokio::spawn(async move {
                            // Echo a digest-free copy: read all, send it back (verifies both ways).
                            let mut all = Vec::new();
                            recv.read_to_end(&mut all).await.unwrap();
                            send.write_all(&all).await.unwrap();
                            send.shutdown().await.unwrap();
                        });
                    }
                });
            }
        });
    }
    bound
}

fn bytes_per_conn(session: &tcpls::Session) -> Vec<(u32, u64)> {
    session.connections().iter().map(|c| (c.id, c.bytes_sent)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregation_over_two_paths_shares_fairly() {
    let pki = Pki::new();
    let addrs = sink_server(&pki, &["127.0.0.1:0", "127.0.0.2:0"]).await;
    assert_eq!(addrs.len(), 2, "127.0.0.2 is a loopback address on Linux");
    let session =
        TcplsConnector::new(pki.client()).connect(addrs[0], server_name_for("localhost").unwrap()).await.unwrap();
    let second = session.join(addrs[1]).await.unwrap();
    assert_eq!(session.usable_connections(), vec![0, second]);
    session.set_scheduler(Box::new(RoundRobin::default()));
    let (mut send, mut recv) = session.open_stream().unwrap();
    let data = payload(64 << 20, 1);
    assert!(round_trip(&mut send, &mut recv, &data).await == data, "content verified");
    let per = bytes_per_conn(&session);
    let total: u64 = per.iter().map(|(_, b)| b).sum();
    for (id, b) in &per {
        let share = *b as f64 / total as f64;
        assert!((0.3..=0.7).contains(&share), "connection {id} carried {share:.2} of the bytes: {per:?}");
    }
    assert!(session.connections().iter().any(|c| c.remote.map(|r| r.ip().to_string()) == Some("127.0.0.2".into())));
    assert_eq!(session.close().await, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregation_with_the_default_scheduler_uses_both_paths() {
    let pki = Pki::new();
    let addrs = sink_server(&pki, &["127.0.0.1:0", "127.0.0.2:0"]).await;
    let session =
        TcplsConnector::new(pki.client()).connect(addrs[0], server_name_for("localhost").unwrap()).await.unwrap();
    session.join(addrs[1]).await.unwrap();
    let (mut send, mut recv) = session.open_stream().unwrap();
    let data = payload(64 << 20, 11);
    assert!(round_trip(&mut send, &mut recv, &data).await == data, "content verified");
    let per = bytes_per_conn(&session);
    assert!(per.iter().all(|(_, b)| *b > 8 << 20), "every path carried a real share: {per:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_streams_steered_over_two_connections_including_ipv6() {
    let pki = Pki::new();
    let addrs = sink_server(&pki, &["127.0.0.1:0", "[::1]:0"]).await;
    if addrs.len() < 2 {
        eprintln!("SKIPPED: ::1 is not available here");
        return;
    }
    let session =
        TcplsConnector::new(pki.client()).connect(addrs[0], server_name_for("localhost").unwrap()).await.unwrap();
    let second = session.join(addrs[1]).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..8u64 {
        let (mut send, mut recv) = session.open_stream().unwrap();
        send.steer(Some(if i % 2 == 0 { 0 } else { second })).unwrap();
        let data = payload(1 << 20, i);
        tasks.push(tokio::spawn(async move { round_trip(&mut send, &mut recv, &data).await == data }));
    }
    for t in tasks {
        assert!(t.await.unwrap(), "a steered stream was corrupted");
    }
    let per = bytes_per_conn(&session);
    assert!(per.iter().all(|(_, b)| *b > 3 << 20), "each connection carried its four streams: {per:?}");
    assert!(session.connections().iter().any(|c| c.remote.is_some_and(|r| r.is_ipv6())));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migration_mid_transfer_uses_both_connections() {
    let pki = Pki::new();
    let addrs = sink_server(&pki, &["127.0.0.1:0", "127.0.0.2:0"]).await;
    let session =
        TcplsConnector::new(pki.client()).connect(addrs[0], server_name_for("localhost").unwrap()).await.unwrap();
    let second = session.join(addrs[1]).await.unwrap();
    let (mut send, mut recv) = session.open_stream().unwrap();
    send.steer(Some(0)).unwrap();
    let data = payload(64 << 20, 2);
    let expect = data.clone();
    let s = session.clone();
    let writer = tokio::spawn(async move {
        for (i, chunk) in data.chunks(1 << 20).enumerate() {
            send.write_all(chunk).await.unwrap();
            if i == 16 {
                s.migrate(0, second).unwrap();
            }
        }
        send.shutdown().await.unwrap();
    });
    let mut got = Vec::with_capacity(expect.len());
    recv.read_to_end(&mut got).await.unwrap();
    writer.await.unwrap();
    assert!(got == expect, "content verified across the migration");
    let conns = session.connections();
    let sent: Vec<u64> = conns.iter().map(|c| c.bytes_sent).collect();
    assert!(sent.iter().all(|b| *b > 4 << 20), "both connections carried data: {sent:?}");
    assert_eq!(session.usable_connections(), vec![second], "the old connection closed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn happy_eyeballs_skips_an_address_that_drops_syns() {
    let pki = Pki::new();
    let good = sink_server(&pki, &["127.0.0.1:0"]).await[0];
    // A listener whose accept queue is full drops further SYNs, like a black hole.
    let dead = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    dead.bind(&"127.0.0.3:0".parse::<SocketAddr>().unwrap().into()).unwrap();
    dead.listen(0).unwrap();
    let dead_addr = dead.local_addr().unwrap().as_socket().unwrap();
    let mut fillers = Vec::new();
    for _ in 0..4 {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        s.set_nonblocking(true).unwrap();
        let _ = s.connect(&dead_addr.into());
        fillers.push(s);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let probe = tokio::time::timeout(Duration::from_millis(300), tokio::net::TcpStream::connect(dead_addr)).await;
    assert!(probe.is_err(), "the dead address must not answer: the test setup is broken");
    let start = Instant::now();
    let options = HappyEyeballs { stagger: Duration::from_millis(50), keep_others: false };
    let session = TcplsConnector::new(pki.client())
        .connect_any(&[dead_addr, good], server_name_for("localhost").unwrap(), options)
        .await
        .unwrap();
    let took = start.elapsed();
    assert_eq!(session.connections()[0].remote, Some(good));
    assert!(took < Duration::from_secs(2), "the working address won after the stagger: {took:?}");
    let (mut send, mut recv) = session.open_stream().unwrap();
    let data = payload(100_000, 9);
    assert!(round_trip(&mut send, &mut recv, &data).await == data);
    drop((dead, fillers));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn happy_eyeballs_can_keep_the_other_addresses_as_joined_connections() {
    let pki = Pki::new();
    let addrs = sink_server(&pki, &["127.0.0.1:0", "127.0.0.2:0"]).await;
    let options = HappyEyeballs { stagger: Duration::from_millis(50), keep_others: true };
    let session = TcplsConnector::new(pki.client())
        .connect_any(&addrs, server_name_for("localhost").unwrap(), options)
        .await
        .unwrap();
    for _ in 0..200 {
        if session.usable_connections().len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(session.usable_connections().len(), 2, "the other address was joined");
    let _ = Arc::new(());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_expire_with_their_session() {
    let pki = Pki::new();
    let listener = TcplsListener::bind("127.0.0.1:0".parse().unwrap(), pki.server()).await.unwrap();
    let addr = listener.local_addr();
    let registry = listener.registry().clone();
    tokio::spawn(async move {
        let (session, _) = listener.accept().await.unwrap();
        session.closed().await;
    });
    let session = TcplsConnector::new(pki.client()).connect(addr, server_name_for("localhost").unwrap()).await.unwrap();
    for _ in 0..200 {
        if session.token_count() == 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(registry.len(), 4, "the live session's tokens are joinable");
    assert_eq!(session.close().await, None);
    for _ in 0..200 {
        if registry.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(registry.is_empty(), "an ended session's tokens can no longer be used to join");
}
