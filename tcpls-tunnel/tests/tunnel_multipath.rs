//! The tunnel over a session with two TCP connections (two concentrator addresses): tunneled
//! connections are spread over both, and survive when one is killed (RST with `ss -K`) in the
//! middle of their transfers; every byte is verified.

#![allow(clippy::unwrap_used)]

mod tunnel_support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tunnel_support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_spread_over_two_paths_and_survive_losing_one() {
    if let Err(why) = can_kill_sockets() {
        eprintln!("SKIPPED: streams_spread_over_two_paths_and_survive_losing_one: {why}");
        return;
    }
    let t = Tunnel::start(&["127.0.0.1:0", "127.0.0.1:0"]).await;
    let session = t.client.session().clone();
    assert_eq!(session.usable_connections().len(), 2, "the path was joined");
    let dest = pattern_server().await;
    let fwd = t.forward(dest).await;
    const N: u64 = 8;
    const SIZE: usize = 16 << 20;
    let progress = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..N).map(|i| tokio::spawn(download(fwd, SIZE, i + 1, progress.clone()))).collect();
    // Both connections carry tunneled data before the kill.
    let deadline = std::time::Instant::now() + T;
    loop {
        let conns = session.connections();
        if conns.iter().all(|c| c.bytes_received > (1 << 20)) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not both paths used: {conns:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let before = progress.load(Ordering::Relaxed);
    let killed = kill_sockets_to_port(t.addrs[1].port());
    assert!(killed >= 1, "ss -K found the second path's socket");
    eprintln!("killed the second path after {before} of {} bytes", N as usize * SIZE);
    assert!(before < N * SIZE as u64 / 2, "the kill happened mid-transfer");
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    assert_eq!(progress.load(Ordering::Relaxed), N * SIZE as u64);
    assert_eq!(session.usable_connections().len(), 1, "the killed path is gone, the other carried on");
    // The relays end when the applications close their sockets, just after their last read.
    wait_for(|| t.client.stats().snapshot().active == 0).await;
    let snap = t.client.stats().snapshot();
    assert_eq!((snap.closed, snap.peer_resets, snap.local_resets), (N, 0, 0), "{snap:?}");
}
