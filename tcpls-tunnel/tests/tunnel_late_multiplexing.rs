//! Late multiplexing (TM3 paper §4.2, Type-S blocking): behind a bottleneck between the client
//! and the concentrator, a 4 KB object fetched during a bulk download through the same tunnel
//! must not wait behind the megabytes of bulk data a sender would otherwise commit to its
//! socket. Compared with the same tunnel without TCP_NOTSENT_LOWAT and with TCPLS's default
//! transmit high water; every byte verified.

#![allow(clippy::unwrap_used)]

mod tunnel_support;

use std::time::{Duration, Instant};

use tcpls_tunnel::tunnel::TunnelConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tunnel_support::*;

const LINK_BPS: u64 = 200_000_000;

/// Median load time of 4 KB objects while a bulk download runs through the tunnel.
async fn object_time_under_bulk(cfg: TunnelConfig) -> Duration {
    let t = Tunnel::start_full(&["127.0.0.1:0"], cfg, Some(LINK_BPS)).await;
    let fwd = t.forward(pattern_server().await).await;
    let bulk = tokio::spawn(async move {
        let mut s = TcpStream::connect(fwd).await.unwrap();
        let mut req = u64::MAX.to_be_bytes().to_vec();
        req.extend_from_slice(&0u64.to_be_bytes());
        s.write_all(&req).await.unwrap();
        let mut buf = vec![0u8; 64 << 10];
        while s.read(&mut buf).await.is_ok_and(|n| n > 0) {}
    });
    // Let the bulk transfer fill the queues on its way.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut times = Vec::new();
    for i in 0..15 {
        let started = Instant::now();
        fetch(fwd, 4000, i + 1).await.unwrap();
        times.push(started.elapsed());
    }
    bulk.abort();
    times.sort();
    times[times.len() / 2]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_object_is_not_stuck_behind_a_bulk_download() {
    let late = object_time_under_bulk(loopback_allowed()).await;
    let early = TunnelConfig { session: tcpls::SessionConfig::default(), ..loopback_allowed() };
    let early = object_time_under_bulk(early).await;
    eprintln!(
        "4 KB object under bulk behind {} Mbit/s: {late:?} with late multiplexing, {early:?} without",
        LINK_BPS / 1_000_000
    );
    assert!(late * 3 < early, "late multiplexing should cut the wait: {late:?} vs {early:?}");
    assert!(late < Duration::from_millis(150), "a 4 KB object took {late:?} next to the bulk download");
}
