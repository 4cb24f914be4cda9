//! Failover after a blackhole on an emulated path (tcpls-netem, root only), the paper's Fig. 8
//! situation: two paths (10 ms one way, 100 Mbit/s), a stream sent on the first, TCP user timeout
//! 250 ms. The first path goes silent mid-transfer; the sender's socket times out, its
//! unacknowledged records are re-sent on the second path. Measures the recovery time (printed)
//! and checks every byte. Without namespaces: prints `SKIPPED: reason` and returns.
#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use common::{payload, Pki};
use tcpls::{server_name_for, JoinRegistry, SessionConfig, TcplsConnector, TcplsListener};
use tcpls_netem::{skip_unless_supported, PathSpec, Side, Topology};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const BYTES: usize = 24 << 20;

#[test]
fn recovery_after_a_blackhole_with_a_250_ms_user_timeout() {
    skip_unless_supported!("netns_failover::recovery_after_a_blackhole_with_a_250_ms_user_timeout");
    let topo = Topology::builder().path(PathSpec::new(10.0, 100.0)).path(PathSpec::new(10.0, 100.0)).build().unwrap();
    let first = SocketAddr::new(topo.path(0).info().server_addr().unwrap(), 4443);
    let second = SocketAddr::new(topo.path(1).info().server_addr().unwrap(), 4443);
    let pki = Pki::new();
    let (server_tls, client_tls) = (pki.server(), pki.client());

    // Server: reads the stream, timestamps every read, checks the content.
    let (ready_tx, ready_rx) = mpsc::channel();
    let (result_tx, result_rx) = mpsc::channel::<(Vec<(Instant, usize)>, bool)>();
    let _server = topo
        .spawn_in(Side::Server, move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                let registry = JoinRegistry::new();
                let mut listeners = Vec::new();
                for addr in [first, second] {
                    let l = TcplsListener::bind_with_registry(
                        addr,
                        server_tls.clone(),
                        SessionConfig::default(),
                        registry.clone(),
                    )
                    .await
                    .unwrap();
                    listeners.push(l);
                }
                ready_tx.send(()).unwrap();
                let (session, _) = listeners[0].accept().await.unwrap();
                let (send, mut recv) = session.accept_stream().await.unwrap();
                let expect = payload(BYTES, 8);
                let mut got = Vec::with_capacity(BYTES);
                let mut reads = Vec::new();
                let mut buf = vec![0u8; 64 << 10];
                loop {
                    let n = tokio::time::timeout(Duration::from_secs(30), recv.read(&mut buf)).await.unwrap().unwrap();
                    if n == 0 {
                        break;
                    }
                    reads.push((Instant::now(), n));
                    got.extend_from_slice(&buf[..n]);
                }
                result_tx.send((reads, got == expect)).unwrap();
                drop(send);
                let _ = tokio::time::timeout(Duration::from_secs(30), session.close()).await;
                drop(listeners);
            })
        })
        .unwrap();
    ready_rx.recv_timeout(Duration::from_secs(10)).unwrap();

    // Client: two connections, user timeout 250 ms on both, the stream on the first path.
    let (flowing_tx, flowing_rx) = mpsc::channel();
    let client = topo
        .spawn_in(Side::Client, move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                let session = TcplsConnector::new(client_tls)
                    .connect(first, server_name_for("localhost").unwrap())
                    .await
                    .unwrap();
                let extra = session.join(second).await.unwrap();
                for conn in [0, extra] {
                    session.set_user_timeout(conn, Duration::from_millis(250)).unwrap();
                }
                let (mut send, _recv) = session.open_stream().unwrap();
                send.steer(Some(0)).unwrap();
                let data = payload(BYTES, 8);
                let mut signalled = false;
                for chunk in data.chunks(64 << 10) {
                    send.write_all(chunk).await.unwrap();
                    if !signalled && session.connections()[0].bytes_sent > 4 << 20 {
                        signalled = true;
                        flowing_tx.send(()).unwrap();
                    }
                }
                send.shutdown().await.unwrap();
                // Wait until everything is delivered and the server closed too.
                let error = tokio::time::timeout(Duration::from_secs(30), session.close()).await.unwrap();
                assert_eq!(error, None, "the session ended cleanly");
                session.stats()
            })
        })
        .unwrap();
    flowing_rx.recv_timeout(Duration::from_secs(20)).unwrap();
    let blackhole = Arc::new(Mutex::new(Instant::now()));
    topo.path(0).set_blackhole(true);
    *blackhole.lock().unwrap() = Instant::now();
    let stats = client.join().unwrap();
    let (reads, verified) = result_rx.recv_timeout(Duration::from_secs(60)).unwrap();
    assert!(verified, "every byte arrived once, in order, after the failover");
    let at = *blackhole.lock().unwrap();
    // The receive gap that spans the blackhole: from the last read before it to the first after.
    let resumed = reads.iter().map(|(t, _)| *t).find(|t| *t > at + Duration::from_millis(30)).expect("data resumed");
    let recovery = resumed.duration_since(at);
    eprintln!(
        "blackhole recovery with a 250 ms user timeout: {recovery:?} (paths: 10 ms one way); failovers: {}, \
         paths suspected: {}, records re-sent: {}",
        stats.failovers, stats.paths_suspected, stats.records_resent
    );
    // Whichever comes first, the socket's user timeout (a failover) or the silence of the
    // record ACKs (a suspicion, `loss.rs`), re-sends the records on the second path.
    assert!(stats.failovers + stats.paths_suspected >= 1 && stats.records_resent > 0, "the sender re-sent: {stats:?}");
    assert!(
        recovery >= Duration::from_millis(200) && recovery < Duration::from_secs(2),
        "recovery {recovery:?} should be about the user timeout plus a few RTT"
    );
}
