//! A path that goes silent (no RST, no FIN: its bytes just stop moving) over in-memory pipes:
//! loss detection from record ACKs suspects it, re-sends its records on the other connection,
//! takes it back when it acknowledges again, and gives it up after `silence_timeout`. Every
//! transfer is checked by content.
#![allow(clippy::unwrap_used)]

mod util;

use std::time::Duration;

use tcpls_proto::{ConnId, Error, Event, SessionConfig};
use util::multi::MultiPair;
use util::{payload, test_config};

const LEN: usize = 3 << 20;

/// A session with two connections that has carried data both ways (so each side has seen the
/// other acknowledge: detection starts then).
fn two_paths(settings: SessionConfig) -> (MultiPair, ConnId) {
    let mut p = MultiPair::new(settings);
    let second = p.join().unwrap();
    warm_up(&mut p);
    (p, second)
}

fn warm_up(p: &mut MultiPair) {
    let data = payload(256 << 10, 99);
    let id = p.client.open_stream().unwrap();
    assert!(p.transfer(id, &data, |_, _| {}) == data);
    let id = p.server.open_stream().unwrap();
    p.server.write(id, b"warm").unwrap();
    p.server.finish(id).unwrap();
    p.drive();
    assert_eq!(p.read_to_end_client(id), b"warm");
}

fn suspected(events: &[Event], conn: ConnId) -> bool {
    events.contains(&Event::PathSuspected { conn })
}

/// Upload over two paths; path 0 goes silent both ways after a few rounds. The client suspects
/// it, its records go out again on the other path, and the transfer completes intact; when the
/// path comes back, it acknowledges again, recovers, and its late copies are dropped as
/// duplicates by the server.
#[test]
fn upload_survives_a_silent_path_which_recovers_when_it_comes_back() {
    let (mut p, second) = two_paths(test_config());
    let data = payload(LEN, 1);
    let id = p.client.open_stream().unwrap();
    p.cut.insert(0);
    let got = p.transfer(id, &data, |_, _| {});
    assert!(got == data, "the upload arrived intact");
    assert!(suspected(&p.client_events, 0), "the client suspected the silent path");
    assert!(!suspected(&p.client_events, second), "the live path was not suspected");
    let stats = p.client.stats();
    assert!(stats.paths_suspected >= 1 && stats.records_resent > 0, "{stats:?}");
    assert_eq!(stats.connections_lost, 0, "a suspect is not given up before silence_timeout");

    // The path comes back: what it held arrives late, and is acknowledged.
    p.cut.remove(&0);
    p.drive();
    assert!(p.client_events.contains(&Event::PathRecovered { conn: 0 }));
    assert_eq!(p.client.stats().paths_recovered, 1);
    assert!(p.server.stats().duplicate_bytes_received > 0, "the late copies were dropped by offset");
    // ... and carries data again.
    let before = p.client.connection_stats(0).unwrap().records_sent;
    let again = payload(LEN, 2);
    let id = p.client.open_stream().unwrap();
    assert!(p.transfer(id, &again, |_, _| {}) == again);
    assert!(p.client.connection_stats(0).unwrap().records_sent > before + 8, "path 0 carries data again");
}

/// Download over two paths, path 0 silent in the server-to-client direction only: the server
/// detects it (the client cannot: nothing of its own waits there), and the client's ACKs and
/// credit, which must not go down the broken path, keep the download going.
#[test]
fn download_survives_a_path_silent_in_one_direction() {
    for client_to_server in [false, true] {
        let (mut p, second) = two_paths(test_config());
        let data = payload(LEN, 3);
        let id = p.server.open_stream().unwrap();
        let mut off = 0;
        let mut got = Vec::new();
        let mut buf = vec![0u8; 1 << 20];
        for round in 0..100_000 {
            if round == 0 {
                p.cut_one_way.insert((0, client_to_server));
            }
            if off < data.len() {
                off += p.server.write(id, &data[off..]).unwrap();
                if off == data.len() {
                    p.server.finish(id).unwrap();
                }
            }
            p.drive();
            while p.client.accept_stream().is_some() {}
            match p.client.read(id, &mut buf) {
                Ok(Some(0)) => break,
                Ok(Some(n)) => got.extend_from_slice(&buf[..n]),
                Ok(None) | Err(tcpls_proto::StreamError::UnknownStream(_)) => {}
                Err(e) => panic!("{e}"),
            }
        }
        assert!(got == data, "the download arrived intact (cut client to server: {client_to_server})");
        assert!(suspected(&p.server_events, 0), "the server suspected path 0 ({client_to_server})");
        assert!(!suspected(&p.server_events, second), "the server kept the live path ({client_to_server})");
        assert!(!suspected(&p.client_events, second), "the client kept the live path ({client_to_server})");
    }
}

/// A path that stays silent is given up after `silence_timeout`: closed with an error that
/// says so, the peer told with Connection Reset over the other path; the session goes on.
#[test]
fn a_path_silent_past_the_silence_timeout_is_given_up() {
    let settings = SessionConfig { silence_timeout: Some(Duration::from_secs(2)), ..test_config() };
    let (mut p, second) = two_paths(settings);
    let data = payload(LEN, 4);
    let id = p.client.open_stream().unwrap();
    p.cut.insert(0);
    let got = p.transfer(id, &data, |_, _| {});
    assert!(got == data);
    p.now += Duration::from_secs(3);
    p.drive();
    let closed = p.client_events.iter().find_map(|e| match e {
        Event::ConnectionClosed { conn: 0, error } => Some(error.clone()),
        _ => None,
    });
    let Some(Some(Error::ConnectionLost(why))) = closed else { panic!("path 0 not given up: {closed:?}") };
    assert!(why.contains("went silent"), "{why}");
    assert_eq!(p.client.stats().connections_lost, 1);
    assert!(
        p.server_events.iter().any(|e| matches!(e, Event::ConnectionClosed { conn: 0, error: Some(_) })),
        "the server learnt it with Connection Reset"
    );
    assert!(!p.client.is_orphaned() && p.client.connection_ids().contains(&second));
    let again = payload(1 << 20, 5);
    let id = p.client.open_stream().unwrap();
    assert!(p.transfer(id, &again, |_, _| {}) == again, "the session goes on over the other path");
}

/// With a single connection there is nowhere to re-send: silence is detected after
/// `silence_timeout` and the session is orphaned (the client then rejoins, break-before-make),
/// keeping what was not acknowledged.
#[test]
fn a_single_silent_connection_orphans_the_session_after_the_silence_timeout() {
    let mut p = MultiPair::new(test_config());
    warm_up(&mut p);
    let id = p.client.open_stream().unwrap();
    let data = payload(256 << 10, 6);
    p.cut.insert(0);
    let mut off = 0;
    while off < data.len() {
        off += p.client.write(id, &data[off..]).unwrap();
        p.drive();
    }
    // Below the timeout nothing happens: no other connection, so no suspicion either.
    p.now += Duration::from_secs(4);
    p.drive();
    assert!(!p.client.is_orphaned());
    assert!(p.client_events.iter().all(|e| !matches!(e, Event::PathSuspected { .. })));
    p.now += Duration::from_secs(2);
    p.drive();
    assert!(p.client.is_orphaned(), "{:?}", p.client_events);
    assert!(p.client_events.contains(&Event::AllConnectionsLost));
}

/// A path that is only slow for a moment (its bytes held for 300 ms, then delivered) is
/// suspected at most once, recovers, and nothing is lost or delivered twice to the application.
#[test]
fn a_slow_moment_costs_one_suspicion_and_no_loss() {
    let (mut p, _) = two_paths(test_config());
    let data = payload(LEN, 7);
    let id = p.client.open_stream().unwrap();
    p.cut.insert(0);
    let held_since = Some(p.now);
    let got = p.transfer(id, &data, |p, _| {
        if held_since.is_some_and(|t| p.now >= t + Duration::from_millis(300)) {
            p.cut.remove(&0);
        }
    });
    p.cut.clear();
    p.drive();
    assert!(got == data);
    let stats = p.client.stats();
    assert!(stats.paths_suspected <= 1, "{stats:?}");
    assert_eq!(stats.paths_suspected, stats.paths_recovered, "{stats:?}");
    assert_eq!(stats.connections_lost, 0);
}

/// Loss detection needs failover (which keeps what records carried): with it off, a silent
/// path is never suspected.
#[test]
fn no_detection_without_failover_or_when_turned_off() {
    for settings in [
        SessionConfig { failover: false, ..test_config() },
        SessionConfig { loss_detection: false, silence_timeout: None, ..test_config() },
    ] {
        let (mut p, _) = two_paths(settings);
        let id = p.client.open_stream().unwrap();
        p.cut.insert(0);
        p.client.write(id, &payload(1 << 20, 8)).unwrap();
        for _ in 0..20 {
            p.now += Duration::from_millis(500);
            p.drive();
        }
        assert_eq!(p.client.stats().paths_suspected, 0);
    }
}
