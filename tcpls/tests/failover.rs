//! Failover over real sockets: one of two connections is killed mid-transfer with `ss -K` (the
//! kernel resets it), and every byte still arrives once, in order. Needs root (CAP_NET_ADMIN)
//! and a kernel with socket destroy support; says SKIPPED otherwise.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{payload, Pki};
use tcpls::{server_name_for, RoundRobin, TcplsConnector};
// Killing the client's socket(s) to a port on 127.0.0.1 sends the server an RST.
use tcpls_test::sockets::{can_kill_sockets, kill_sockets_to_port};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Kills every TCP socket whose destination is `ip` (an RST goes to the peer).
fn kill_sockets_to(ip: &str) -> Result<(), String> {
    let out =
        std::process::Command::new("ss").args(["-K", "dst", ip]).output().map_err(|e| format!("cannot run ss: {e}"))?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_reset_mid_transfer_loses_nothing() {
    if let Err(why) = can_kill_sockets() {
        eprintln!("SKIPPED: a_connection_reset_mid_transfer_loses_nothing: {why}");
        return;
    }
    let pki = Pki::new();
    let mut addrs = Vec::new();
    for l in common::listen_on(&pki, &["127.0.0.1:0", "127.0.0.2:0"]).await {
        addrs.push(l.local_addr());
        tokio::spawn(async move {
            while let Some((session, _)) = l.accept().await {
                session.set_scheduler(Box::new(RoundRobin::default()));
                tokio::spawn(async move {
                    while let Some((mut send, mut recv)) = session.accept_stream().await {
                        tokio::spawn(async move {
                            // Echo as it arrives, so both directions have records in flight.
                            tokio::io::copy(&mut recv, &mut send).await.unwrap();
                            send.shutdown().await.unwrap();
                        });
                    }
                });
            }
        });
    }
    let session =
        TcplsConnector::new(pki.client()).connect(addrs[0], server_name_for("localhost").unwrap()).await.unwrap();
    let second = session.join(addrs[1]).await.unwrap();
    session.set_scheduler(Box::new(RoundRobin::default()));
    let (mut send, mut recv) = session.open_stream().unwrap();
    let data = payload(96 << 20, 5);
    let expect = data.clone();
    let writer = tokio::spawn(async move {
        for chunk in data.chunks(256 << 10) {
            send.write_all(chunk).await.unwrap();
        }
        send.shutdown().await.unwrap();
    });
    let killer = {
        let session = session.clone();
        tokio::spawn(async move {
            // Once both connections carry data, reset the second one.
            for _ in 0..1000 {
                let sent: Vec<u64> = session.connections().iter().map(|c| c.bytes_sent).collect();
                if sent.len() == 2 && sent.iter().all(|b| *b > 4 << 20) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            kill_sockets_to("127.0.0.2").unwrap();
        })
    };
    let mut got = Vec::with_capacity(expect.len());
    tokio::time::timeout(Duration::from_secs(60), recv.read_to_end(&mut got)).await.unwrap().unwrap();
    writer.await.unwrap();
    killer.await.unwrap();
    assert_eq!(got.len(), expect.len(), "every byte arrived, none twice");
    assert!(got == expect, "content verified after the failover");
    // Whether records were unacknowledged at the instant of the RST depends on timing; the
    // in-memory tests check the re-sending itself deterministically.
    assert!(!session.usable_connections().contains(&second), "the reset connection is gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_only_connection_reset_twice_is_survived_by_rejoining() {
    if let Err(why) = can_kill_sockets() {
        eprintln!("SKIPPED: the_only_connection_reset_twice_is_survived_by_rejoining: {why}");
        return;
    }
    let pki = Pki::new();
    let listener = common::listen_on(&pki, &["127.0.0.1:0"]).await.remove(0);
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
    let session = TcplsConnector::new(pki.client()).connect(addr, server_name_for("localhost").unwrap()).await.unwrap();
    let (mut send, mut recv) = session.open_stream().unwrap();
    let data = payload(96 << 20, 6);
    let expect = data.clone();
    let writer = tokio::spawn(async move {
        for chunk in data.chunks(256 << 10) {
            send.write_all(chunk).await.unwrap();
            // Keep the transfer long enough for two kills on a fast machine.
            tokio::time::sleep(Duration::from_micros(300)).await;
        }
        send.shutdown().await.unwrap();
    });
    let killer = {
        let session = session.clone();
        tokio::spawn(async move {
            for threshold in [8u64 << 20, 40 << 20] {
                for _ in 0..5000 {
                    let sent: u64 = session.connections().iter().map(|c| c.bytes_sent).sum();
                    if sent > threshold && session.usable_connections().len() == 1 {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                kill_sockets_to_port(addr.port()).unwrap();
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    let mut got = Vec::with_capacity(expect.len());
    tokio::time::timeout(Duration::from_secs(60), recv.read_to_end(&mut got)).await.unwrap().unwrap();
    writer.await.unwrap();
    killer.await.unwrap();
    assert_eq!(got.len(), expect.len(), "every byte arrived, none twice");
    assert!(got == expect, "content verified across two rejoins");
    assert!(session.connections().len() >= 3, "two rejoined connections: {:?}", session.connections());
}
