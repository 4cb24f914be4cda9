//! User Timeout on an emulated path (tcpls-netem, root only): with a 1 s TCP user timeout on
//! both ends, a path that goes silent (blackhole) fails the connection in about a second instead
//! of TCP's minutes of retransmissions. Without namespaces: prints `SKIPPED: reason`, returns.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::Pki;
use tcpls::{server_name_for, TcplsConnector, TcplsListener};
use tcpls_netem::{skip_unless_supported, PathSpec, Side, Topology};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[test]
fn a_silent_path_fails_the_connection_after_the_user_timeout() {
    skip_unless_supported!("netns_user_timeout::a_silent_path_fails_the_connection_after_the_user_timeout");
    let topo = Topology::builder().path(PathSpec::new(5.0, 50.0)).build().unwrap();
    let server_addr = std::net::SocketAddr::new(topo.path(0).info().server_addr().unwrap(), 4443);
    let pki = Pki::new();
    let (server_tls, client_tls) = (pki.server(), pki.client());

    let (listening_tx, listening_rx) = mpsc::channel();
    let _server = topo
        .spawn_in(Side::Server, move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                let listener = TcplsListener::bind(server_addr, server_tls).await.unwrap();
                listening_tx.send(()).unwrap();
                let serve = async {
                    while let Some((session, _)) = listener.accept().await {
                        tokio::spawn(async move {
                            while let Some((_send, mut recv)) = session.accept_stream().await {
                                tokio::spawn(async move {
                                    let mut buf = vec![0u8; 64 << 10];
                                    while matches!(recv.read(&mut buf).await, Ok(n) if n > 0) {}
                                });
                            }
                        });
                    }
                };
                let _ = tokio::time::timeout(Duration::from_secs(20), serve).await;
            })
        })
        .unwrap();
    listening_rx.recv_timeout(Duration::from_secs(10)).unwrap();

    let (flowing_tx, flowing_rx) = mpsc::channel();
    let (blackholed_tx, blackholed_rx) = mpsc::channel::<Instant>();
    let client = topo
        .spawn_in(Side::Client, move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                // The session ends with its connection (no rejoin): what is measured is how fast
                // the user timeout detects the silent path.
                let settings = tcpls::SessionConfig { rejoin_timeout: Duration::ZERO, ..Default::default() };
                let session = TcplsConnector::new(client_tls)
                    .with_settings(settings)
                    .connect(server_addr, server_name_for("localhost").unwrap())
                    .await
                    .unwrap();
                session.set_user_timeout(0, Duration::from_millis(1000)).unwrap();
                assert_eq!(session.user_timeout(0).unwrap(), 1000);
                let (mut send, _recv) = session.open_stream().unwrap();
                tokio::spawn(async move {
                    let chunk = vec![1u8; 64 << 10];
                    while send.write_all(&chunk).await.is_ok() {}
                });
                tokio::time::sleep(Duration::from_millis(300)).await;
                assert!(session.connections()[0].bytes_sent > 100_000, "data flows before the blackhole");
                flowing_tx.send(()).unwrap();
                let since = tokio::task::spawn_blocking(move || blackholed_rx.recv().unwrap()).await.unwrap();
                let error = tokio::time::timeout(Duration::from_secs(10), session.closed()).await;
                (since.elapsed(), error)
            })
        })
        .unwrap();
    flowing_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    topo.path(0).set_blackhole(true);
    blackholed_tx.send(Instant::now()).unwrap();
    let (elapsed, error) = client.join().unwrap();
    let error = error.expect("the connection failed within 10 s");
    assert!(error.is_some(), "a failure, not a clean close");
    assert!(
        elapsed >= Duration::from_millis(800) && elapsed < Duration::from_secs(4),
        "failed {elapsed:?} after the path went silent (user timeout 1 s): {error:?}"
    );
    eprintln!("user timeout 1 s: connection failed {elapsed:?} after the blackhole: {error:?}");
}
