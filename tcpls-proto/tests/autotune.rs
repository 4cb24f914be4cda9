//! Budgets that follow the path and the reader (`SessionConfig::send_autotune`,
//! `SessionConfig::receive_autotune`): the send budget is twice what the connections carry
//! (from the IO layer's path reports), between its floor and the configured maximum, and a
//! writer it held back is told when it grows; a receive window grows only while its reader
//! takes half of it within two RTTs. Content is checked byte for byte.
#![allow(clippy::unwrap_used)]

mod util;

use std::time::Duration;

use tcpls_proto::{Event, PathInfo, SessionConfig, StreamError, SEND_BUDGET_FLOOR};
use util::{payload, test_config, Pair, Pki};

/// `test_config` with the budgets following the path (the in-memory pipes have no TCP_INFO:
/// the tests report paths themselves).
fn autotuned() -> SessionConfig {
    SessionConfig { send_autotune: true, ..test_config() }
}

fn pair(client: SessionConfig, server: SessionConfig) -> Pair {
    let pki = Pki::new();
    let mut p = Pair::with_settings(pki.client_config(&[]), pki.server_config(&[]), client, server);
    p.drive();
    p
}

/// A report of a path carrying `mbit` Mbit/s at `rtt_ms`.
fn report(mbit: u64, rtt_ms: u32) -> PathInfo {
    PathInfo {
        rtt_us: Some(rtt_ms * 1000),
        cwnd: Some(10),
        delivery_rate: Some(mbit * 1_000_000 / 8),
        kernel_unsent: Some(0),
        mss: Some(1448),
        unacked: Some(10),
        min_rtt_us: Some(rtt_ms * 1000),
    }
}

/// The client's send budget after `reports` of its one connection.
fn budget_after(reports: &[PathInfo]) -> usize {
    let mut p = pair(autotuned(), autotuned());
    for r in reports {
        p.client.set_path(0, *r);
    }
    p.client.send_budget()
}

#[test]
fn the_send_budget_follows_the_path_reports() {
    // Before any report: the floor (TCP starts slowly).
    assert_eq!(budget_after(&[]), SEND_BUDGET_FLOOR);
    // A loopback-like path: tiny bandwidth-delay product, the floor.
    let loopback = PathInfo { min_rtt_us: Some(50), ..report(16_000, 0) };
    assert_eq!(budget_after(&[loopback]), SEND_BUDGET_FLOOR);
    // A loaded host's loopback: the smoothed RTT counts the peer's wait to run, the path's own
    // delay is still tiny.
    let loaded = PathInfo { rtt_us: Some(5000), min_rtt_us: Some(20), ..report(16_000, 0) };
    assert_eq!(budget_after(&[loaded]), SEND_BUDGET_FLOOR);
    // 100 Mbit/s at 100 ms: twice (1.25 MB in flight + the receiver's 16-record batch).
    assert_eq!(budget_after(&[report(100, 100)]), 2 * (1_250_000 + 16 * 16384));
    // 1 Gbit/s at 100 ms: 25.5 MB, within the default 32 MiB...
    assert_eq!(budget_after(&[report(1000, 100)]), 2 * (12_500_000 + 16 * 16384));
    // ...and 10 Gbit/s wants 250 MB: the configured budget is the most.
    assert_eq!(budget_after(&[report(10_000, 100)]), 32 << 20);
    // The peak of the last reports counts: one slow sample does not shrink it...
    assert_eq!(budget_after(&[report(100, 100), report(10, 100)]), 2 * (1_250_000 + 16 * 16384));
    // ...ten do (the peak's window is 0.5 to 1 s of the IO layer's 100 ms reports).
    let slow = [report(100, 100)].into_iter().chain([report(10, 100); 10]).collect::<Vec<_>>();
    assert_eq!(budget_after(&slow), SEND_BUDGET_FLOOR);
    // In slow start what is in flight leads the rate samples: 1000 segments of 1448 B.
    let slow_start = PathInfo { unacked: Some(1000), ..report(10, 100) };
    assert_eq!(budget_after(&[slow_start]), 2 * (1000 * 1448 + 31_250));
}

#[test]
fn a_fixed_budget_ignores_the_reports() {
    let fixed = SessionConfig { send_autotune: false, send_budget: 8 << 20, ..autotuned() };
    let mut p = pair(fixed, test_config());
    p.client.set_path(0, PathInfo { min_rtt_us: Some(50), ..report(16_000, 0) });
    assert_eq!(p.client.send_budget(), 8 << 20);
}

#[test]
fn a_writer_held_back_by_the_budget_is_told_when_it_grows() {
    let mut p = pair(autotuned(), autotuned());
    p.client.set_path(0, PathInfo { min_rtt_us: Some(50), ..report(16_000, 0) });
    let id = p.client.open_stream().unwrap();
    let data = payload(4 << 20, 7);
    // The floor takes 1 MiB; the rest waits (nothing is sent or acknowledged meanwhile).
    let first = p.client.write(id, &data).unwrap();
    assert_eq!(first, SEND_BUDGET_FLOOR);
    assert_eq!(p.client.write(id, &data[first..]).unwrap(), 0);
    p.client_events.clear();
    while p.client.poll_event().is_some() {}
    // A long fat path is reported: the budget grows and the writer hears of it.
    p.client.set_path(0, report(100, 100));
    let mut told = false;
    while let Some(e) = p.client.poll_event() {
        told |= e == Event::StreamWritable(id);
    }
    assert!(told, "no StreamWritable after the budget grew");
    let mut sent = first;
    sent += p.client.write(id, &data[sent..]).unwrap();
    assert!(sent > first, "the grown budget took nothing");
    // Everything arrives, in order.
    while sent < data.len() {
        p.drive();
        sent += p.client.write(id, &data[sent..]).unwrap();
    }
    p.client.finish(id).unwrap();
    p.drive();
    while p.server.accept_stream().is_some() {}
    assert!(p.read_to_end(true, id) == data, "content differs");
}

/// The server's advertised limit for stream `id`, as the client sees it.
fn peer_limit(p: &Pair, id: u32) -> u64 {
    let mut limit = 0;
    p.client.for_each_stream_progress(|s| {
        if s.stream == id {
            limit = s.max_data;
        }
    });
    limit
}

/// Uploads 16 MiB on one stream, the server reading everything it has after each exchange,
/// `pause` of clock time passing between reads. Returns the largest window (limit beyond what
/// was read) the server advertised, and what it read.
fn upload_reading_every(pause: Duration) -> (u64, Vec<u8>) {
    let mut p = pair(autotuned(), autotuned());
    let id = p.client.open_stream().unwrap();
    let data = payload(16 << 20, 9);
    let (mut sent, mut got, mut widest) = (0, Vec::new(), 0);
    let mut buf = vec![0u8; 1 << 20];
    for _ in 0..100_000 {
        if sent < data.len() {
            sent += p.client.write(id, &data[sent..]).unwrap();
            if sent == data.len() {
                p.client.finish(id).unwrap();
            }
        }
        p.drive();
        while p.server.accept_stream().is_some() {}
        p.now += pause;
        loop {
            match p.server.read(id, &mut buf) {
                Ok(Some(0)) | Ok(None) | Err(StreamError::UnknownStream(_)) => break,
                Ok(Some(n)) => got.extend_from_slice(&buf[..n]),
                Err(e) => panic!("{e}"),
            }
        }
        p.drive();
        widest = widest.max(peer_limit(&p, id).saturating_sub(got.len() as u64));
        if got.len() == data.len() {
            break;
        }
    }
    assert!(got == data, "content differs");
    (widest, got)
}

#[test]
fn a_fast_reader_gets_a_wider_window_than_a_slow_one() {
    // No RTT reported: the window assumes 100 ms, so reading every 1 ms is fast and every
    // 300 ms is slow.
    let (fast, _) = upload_reading_every(Duration::from_millis(1));
    let (slow, _) = upload_reading_every(Duration::from_millis(300));
    assert!(fast >= 8 << 20, "a fast reader's window reached only {fast}");
    assert!(slow <= 512 << 10, "a slow reader's window grew to {slow}");
}

#[test]
fn a_fixed_window_is_the_configured_one() {
    let server = SessionConfig { receive_autotune: false, stream_receive_window: 2 << 20, ..test_config() };
    let mut p = pair(autotuned(), server);
    let id = p.client.open_stream().unwrap();
    let data = payload(256 << 10, 3);
    let mut sent = p.client.write(id, &data).unwrap();
    let mut buf = vec![0u8; 1 << 20];
    let mut got = Vec::new();
    while got.len() < data.len() {
        p.drive();
        while p.server.accept_stream().is_some() {}
        while let Ok(Some(n)) = p.server.read(id, &mut buf) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        p.drive();
        sent += p.client.write(id, &data[sent..]).unwrap();
    }
    assert!(got == data, "content differs");
    // Advertised at a read offset at most half a window back: 2 MiB beyond it.
    let beyond = peer_limit(&p, id) - got.len() as u64;
    assert!(beyond > 1 << 20 && beyond <= 2 << 20, "the limit is {beyond} beyond what was read");
}

/// A scheduler that waits for fast paths (bonding) decides by the backlog the budget lets it
/// see: over two connections it gets the configured budget, not the paths' product.
#[test]
fn a_scheduler_that_waits_for_fast_paths_gets_the_configured_budget() {
    for waits in [false, true] {
        let mut p = util::multi::MultiPair::new(autotuned());
        let second = p.join().unwrap();
        if waits {
            p.server.set_scheduler(Box::new(tcpls_proto::EarliestArrival));
        }
        let loopback = PathInfo { min_rtt_us: Some(50), ..report(16_000, 0) };
        p.server.set_path(0, loopback);
        p.server.set_path(second, loopback);
        // Otherwise twice both paths' (100 KB in flight + the 16-record batch).
        let want = if waits { 32 << 20 } else { 2 * 2 * (100_000 + 16 * 16384) };
        assert_eq!(p.server.send_budget(), want, "scheduler waits for paths: {waits}");
    }
}
