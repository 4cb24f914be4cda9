//! Several TCP connections per session over in-memory pipes: joins, tokens, steering,
//! aggregation and migration, all verified by content.
#![allow(clippy::unwrap_used)]

mod util;

use tcpls_proto::{Error, Event, RoundRobin, SessionConfig};
use util::multi::MultiPair;
use util::{payload, test_config};

#[test]
fn join_uses_a_token_and_the_server_replenishes_it() {
    let mut p = MultiPair::default_pair();
    assert_eq!(p.client.tokens().len(), 4);
    let first = p.client.tokens()[0].0;
    let id = p.join().unwrap();
    assert_eq!(id, first, "the connection ID is the token's sequence number");
    assert_eq!(p.client.connection_ids(), vec![0, id]);
    assert_eq!(p.server.connection_ids(), vec![0, id]);
    assert!(p.server.tokens().iter().all(|(s, _)| *s != id), "the used token is forgotten");
    assert_eq!(p.client.tokens().len(), 4, "a fresh token replaced the used one");
    assert!(p.client_events.contains(&Event::ConnectionEstablished { conn: id }));
}

#[test]
fn replayed_and_forged_tokens_are_refused_and_the_session_continues() {
    let mut p = MultiPair::default_pair();
    let (_, token) = p.client.tokens()[0];
    p.join().unwrap();
    // Replay: the same token again.
    p.client.danger_add_connection_with_token(900, token).unwrap();
    assert!(p.join_conn(900).is_err());
    // Forged: a token the server never issued.
    p.client.danger_add_connection_with_token(901, [7u8; 32]).unwrap();
    assert!(p.join_conn(901).is_err());
    let refused: Vec<_> = p
        .client_events
        .iter()
        .filter_map(|e| match e {
            Event::ConnectionClosed { conn, error: Some(Error::PeerAlert(49)) } => Some(*conn),
            _ => None,
        })
        .collect();
    assert_eq!(refused, vec![900, 901], "access_denied for both");
    // The session is unharmed.
    let s = p.client.open_stream().unwrap();
    let data = payload(300_000, 1);
    assert!(p.transfer(s, &data, |_, _| {}) == data);
    assert!(p.client.error().is_none() && p.server.error().is_none());
}

#[test]
fn a_join_flood_cannot_exceed_the_token_budget() {
    let settings = SessionConfig { tokens: 2, ..test_config() };
    let mut p = MultiPair::new(settings);
    let (mut joined, mut refused) = (0, 0);
    for _ in 0..10 {
        match p.client.add_connection() {
            Ok(id) => match p.join_conn(id) {
                Ok(_) => joined += 1,
                Err(_) => refused += 1,
            },
            Err(Error::NoToken) => break,
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(joined, 2, "1 initial + 2 tokens = 3 connections at most");
    assert!((1..=2).contains(&refused), "joins over the budget are refused and burn their token: {refused}");
    assert!(p.client.tokens().is_empty());
    assert_eq!(p.server.connection_ids().len(), 3);
    assert!(p.server.tokens().is_empty(), "no token while the budget is used");
}

#[test]
fn streams_steered_over_two_connections() {
    let mut p = MultiPair::default_pair();
    let second = p.join().unwrap();
    let mut streams = Vec::new();
    for i in 0..8u32 {
        let id = p.client.open_stream().unwrap();
        p.client.steer_stream(id, Some(if i % 2 == 0 { 0 } else { second })).unwrap();
        streams.push((id, payload(200_000 + i as usize * 1000, i.into())));
    }
    let before =
        [p.client.connection_stats(0).unwrap().bytes_sent, p.client.connection_stats(second).unwrap().bytes_sent];
    for (id, data) in &streams {
        assert!(p.transfer(*id, data, |_, _| {}) == *data, "stream {id}");
    }
    let sent0 = p.client.connection_stats(0).unwrap().bytes_sent - before[0];
    let sent1 = p.client.connection_stats(second).unwrap().bytes_sent - before[1];
    let total: u64 = streams.iter().map(|(_, d)| d.len() as u64).sum();
    assert!(sent0 > total / 3 && sent1 > total / 3, "both connections carried their streams: {sent0} {sent1}");
}

#[test]
fn one_stream_aggregated_over_two_connections() {
    let mut p = MultiPair::default_pair();
    let second = p.join().unwrap();
    p.client.set_scheduler(Box::new(RoundRobin::default()));
    let id = p.client.open_stream().unwrap();
    let data = payload(4 << 20, 3);
    let before =
        [p.client.connection_stats(0).unwrap().bytes_sent, p.client.connection_stats(second).unwrap().bytes_sent];
    assert!(p.transfer(id, &data, |_, _| {}) == data);
    let sent0 = p.client.connection_stats(0).unwrap().bytes_sent - before[0];
    let sent1 = p.client.connection_stats(second).unwrap().bytes_sent - before[1];
    let share = sent0 as f64 / (sent0 + sent1) as f64;
    assert!((0.35..=0.65).contains(&share), "fair share expected, got {share:.2} ({sent0} / {sent1})");
}

#[test]
fn migration_mid_transfer_loses_nothing_and_closes_the_old_connection() {
    let mut p = MultiPair::default_pair();
    let second = p.join().unwrap();
    let id = p.client.open_stream().unwrap();
    p.client.steer_stream(id, Some(0)).unwrap();
    let data = payload(6 << 20, 4);
    let mut migrated = false;
    let got = p.transfer(id, &data, |p, round| {
        if round == 1 && !migrated {
            p.client.migrate(0, second).unwrap();
            migrated = true;
        }
    });
    assert!(migrated);
    assert!(got == data, "content verified across the migration");
    let on0 = p.server.connection_stats(0).unwrap().bytes_received;
    let on1 = p.server.connection_stats(second).unwrap().bytes_received;
    assert!(on0 > 100_000 && on1 > 1_000_000, "both connections carried the stream: {on0} {on1}");
    assert!(!p.client.is_connection_usable(0) && !p.server.is_connection_usable(0), "old connection closed");
    assert!(p.client.error().is_none() && p.server.error().is_none());
    assert!(p.server_events.contains(&Event::ConnectionClosed { conn: 0, error: None }), "{:?}", p.server_events);
}

#[test]
fn losing_one_of_two_connections_is_not_a_session_error() {
    let mut p = MultiPair::default_pair();
    let second = p.join().unwrap();
    p.kill(second);
    assert!(p.client.error().is_none() && !p.client.is_closed());
    let id = p.client.open_stream().unwrap();
    let data = payload(100_000, 5);
    assert!(p.transfer(id, &data, |_, _| {}) == data);
}

#[test]
fn a_receiver_can_steer_what_its_peer_sends() {
    let mut p = MultiPair::default_pair();
    let second = p.join().unwrap();
    let sid = p.server.open_stream().unwrap();
    p.server.write(sid, b"hello").unwrap();
    p.drive();
    // The client asks the server to send this stream on the second connection.
    p.client.request_steer(sid, second);
    p.drive();
    assert_eq!(p.server.stream_steering(sid), Some(second));
    assert!(p.server_events.contains(&Event::SteerRequested { stream: sid, conn: second }));
    let before = p.server.connection_stats(second).unwrap().bytes_sent;
    let data = payload(1 << 20, 8);
    p.server.write(sid, &data).unwrap();
    p.server.finish(sid).unwrap();
    p.drive();
    let mut expect = b"hello".to_vec();
    expect.extend_from_slice(&data);
    assert!(p.read_to_end_client(sid) == expect);
    assert!(p.server.connection_stats(second).unwrap().bytes_sent - before > 1 << 20);
}

#[test]
fn a_receiver_can_ask_its_peer_to_spread_a_steered_stream_over_every_connection() {
    let mut p = MultiPair::default_pair();
    let second = p.join().unwrap();
    let sid = p.server.open_stream().unwrap();
    p.server.steer_stream(sid, Some(0)).unwrap();
    p.server.write(sid, b"hello").unwrap();
    p.drive();
    // "Any": the server stops steering the stream; its scheduler spreads it.
    p.client.request_steer(sid, tcpls_proto::STEER_ANY);
    p.drive();
    assert_eq!(p.server.stream_steering(sid), None);
    assert!(p.server_events.contains(&Event::SteerRequested { stream: sid, conn: tcpls_proto::STEER_ANY }));
    let before = [0, second].map(|c| p.server.connection_stats(c).unwrap().bytes_sent);
    p.server.set_scheduler(Box::new(tcpls_proto::RoundRobin::default()));
    let data = payload(1 << 20, 9);
    p.server.write(sid, &data).unwrap();
    p.server.finish(sid).unwrap();
    p.drive();
    let mut expect = b"hello".to_vec();
    expect.extend_from_slice(&data);
    assert!(p.read_to_end_client(sid) == expect);
    let after = [0, second].map(|c| p.server.connection_stats(c).unwrap().bytes_sent);
    assert!(after[0] - before[0] > 100_000 && after[1] - before[1] > 100_000, "{before:?} -> {after:?}");
}

/// What an older peer does with "any" (it does not know the value): a Stream Steer naming no
/// connection of the session is ignored, the stream stays where it was and its data flows.
#[test]
fn a_steer_request_for_an_unknown_connection_is_ignored() {
    let mut p = MultiPair::default_pair();
    let _second = p.join().unwrap();
    let sid = p.server.open_stream().unwrap();
    p.server.steer_stream(sid, Some(0)).unwrap();
    p.server.write(sid, b"hello").unwrap();
    p.drive();
    p.client.request_steer(sid, 0x7000_0000);
    p.drive();
    assert_eq!(p.server.stream_steering(sid), Some(0));
    assert!(p.client.error().is_none() && p.server.error().is_none());
    let data = payload(100_000, 3);
    p.server.write(sid, &data).unwrap();
    p.server.finish(sid).unwrap();
    p.drive();
    let mut expect = b"hello".to_vec();
    expect.extend_from_slice(&data);
    assert!(p.read_to_end_client(sid) == expect);
}

/// Reads every stream in `ids` to its end on the given side, driving the pair (bounded).
fn read_all(p: &mut MultiPair, server_side: bool, ids: &[u32]) -> Vec<Vec<u8>> {
    let mut out = vec![Vec::new(); ids.len()];
    let mut done = vec![false; ids.len()];
    let mut buf = vec![0u8; 1 << 20];
    for _ in 0..10_000 {
        let s = if server_side { &mut p.server } else { &mut p.client };
        while s.accept_stream().is_some() {}
        for (i, id) in ids.iter().enumerate() {
            while !done[i] {
                match s.read(*id, &mut buf).unwrap() {
                    Some(0) => done[i] = true,
                    Some(n) => out[i].extend_from_slice(&buf[..n]),
                    None => break,
                }
            }
        }
        if done.iter().all(|d| *d) {
            return out;
        }
        p.drive();
    }
    panic!("streams did not end: {:?}", out.iter().map(Vec::len).collect::<Vec<_>>());
}

#[test]
fn failover_resends_what_a_failed_connection_carried_in_both_directions() {
    let mut p = MultiPair::default_pair();
    let second = p.join().unwrap();
    p.client.set_scheduler(Box::new(RoundRobin::default()));
    p.server.set_scheduler(Box::new(RoundRobin::default()));
    let mut up = Vec::new();
    let mut down = Vec::new();
    for i in 0..4u32 {
        let c = p.client.open_stream().unwrap();
        let data = payload(60_000, u64::from(100 + i));
        assert_eq!(p.client.write(c, &data).unwrap(), data.len());
        p.client.finish(c).unwrap();
        up.push((c, data));
        let s = p.server.open_stream().unwrap();
        let data = payload(60_000, u64::from(200 + i));
        assert_eq!(p.server.write(s, &data).unwrap(), data.len());
        p.server.finish(s).unwrap();
        down.push((s, data));
    }
    // Seal records on both connections, deliver only some, then the second connection dies
    // with records in flight in both directions.
    p.client.prepare_transmit(p.now);
    p.server.prepare_transmit(p.now);
    assert!(!p.client.transmit_data(second).is_empty() && !p.server.transmit_data(second).is_empty());
    p.kill(second);
    let ids: Vec<u32> = up.iter().map(|(id, _)| *id).collect();
    let got = read_all(&mut p, true, &ids);
    for ((id, data), got) in up.iter().zip(&got) {
        assert!(got == data, "upload stream {id}: {} of {} bytes, content checked", got.len(), data.len());
    }
    let ids: Vec<u32> = down.iter().map(|(id, _)| *id).collect();
    let got = read_all(&mut p, false, &ids);
    for ((id, data), got) in down.iter().zip(&got) {
        assert!(got == data, "download stream {id}: {} of {} bytes", got.len(), data.len());
    }
    assert!(p.client.stats().failovers >= 1 && p.server.stats().failovers >= 1);
    assert!(p.client_events.contains(&Event::FailedOver { conn: second }));
    assert!(p.client.error().is_none() && p.server.error().is_none());
}

#[test]
fn acknowledged_data_is_released_and_not_resent() {
    let mut p = MultiPair::default_pair();
    let second = p.join().unwrap();
    let id = p.client.open_stream().unwrap();
    p.client.steer_stream(id, Some(second)).unwrap();
    let data = payload(300_000, 7);
    let got = p.transfer(id, &data, |_, _| {});
    assert!(got == data);
    p.server.finish(id).unwrap();
    p.drive();
    assert_eq!(p.read_to_end_client(id), b"");
    // Everything was acknowledged (delayed ACKs included): the stream is forgotten, and losing
    // the connection afterwards re-sends nothing.
    p.drive();
    assert_eq!(p.client.stream_count(), 0, "the stream's data was acknowledged and released");
    let before = p.client.stats().failovers;
    p.kill(second);
    assert_eq!(p.client.stats().failovers, before, "nothing unacknowledged was left to re-send");
}

#[test]
fn without_failover_nothing_is_retained() {
    let settings = tcpls_proto::SessionConfig { failover: false, ..test_config() };
    let mut p = MultiPair::new(settings);
    let id = p.client.open_stream().unwrap();
    let data = payload(200_000, 9);
    assert!(p.transfer(id, &data, |_, _| {}) == data);
    p.server.finish(id).unwrap();
    p.drive();
    assert_eq!(p.read_to_end_client(id), b"");
    assert_eq!(p.client.stream_count(), 0, "released as soon as sealed, no ACK needed");
}

#[test]
fn losing_the_only_connection_twice_is_survived_by_rejoining() {
    let mut p = MultiPair::default_pair();
    let id = p.client.open_stream().unwrap();
    let data = payload(3 << 20, 12);
    assert_eq!(p.client.write(id, &data[..1 << 20]).unwrap(), 1 << 20);
    let mut written = 1 << 20;
    let mut current = 0;
    let mut got = Vec::new();
    let mut buf = vec![0u8; 1 << 20];
    for round in 0..2 {
        // The server's credit reaches the client, which seals records; then the only
        // connection dies with them in flight.
        p.server.prepare_transmit(p.now);
        let down = p.server.transmit_data(current).to_vec();
        p.server.transmit_advance(current, down.len());
        p.client.handle_data(current, &down, p.now);
        p.client.prepare_transmit(p.now);
        assert!(
            !p.client.transmit_data(current).is_empty(),
            "round {round}: records in flight when the connection dies"
        );
        let failovers = p.client.stats().failovers;
        p.kill(current);
        assert_eq!(
            p.client.stats().failovers,
            failovers + 1,
            "round {round}: the lost records are kept for re-sending"
        );
        assert!(p.client.is_orphaned() && p.server.is_orphaned(), "round {round}: both sides wait for a rejoin");
        assert!(!p.client.is_closed() && !p.server.is_closed());
        assert!(p.client_events.contains(&Event::AllConnectionsLost));
        // Break-before-make: the client joins a new connection with a spare token.
        current = p.join().unwrap();
        assert!(!p.client.is_orphaned() && !p.server.is_orphaned());
        written += p.client.write(id, &data[written..written + (1 << 20)]).unwrap();
        while p.server.accept_stream().is_some() {}
        while let Some(n) = p.server.read(id, &mut buf).unwrap() {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
    }
    assert_eq!(written, data.len());
    p.client.finish(id).unwrap();
    p.drive();
    got.extend(p.transfer(id, &[], |_, _| {}));
    assert!(got == data, "{} of {} bytes, content checked, nothing twice", got.len(), data.len());
    assert!(p.client.error().is_none() && p.server.error().is_none());
}

#[test]
fn an_orphaned_session_ends_when_no_rejoin_comes() {
    let mut p = MultiPair::default_pair();
    p.kill(0);
    assert!(p.server.is_orphaned());
    let deadline = p.server.poll_timeout().expect("the rejoin deadline is a timer");
    p.now = deadline;
    p.server.prepare_transmit(p.now);
    assert!(p.server.is_closed());
    assert!(matches!(p.server.error(), Some(Error::ConnectionLost(_))), "{:?}", p.server.error());
    let why = p.server.error().unwrap().to_string();
    assert!(why.contains("every connection was lost and none rejoined within 10.0 s"), "{why}");
}

/// A path manager's outage tolerance (set_rejoin_timeout), the reasons it notes for the final
/// error (set_rejoin_note), and ending the wait at once when the server refused the rejoin
/// (end_orphaned).
#[test]
fn the_rejoin_wait_follows_the_tolerance_and_can_end_at_once() {
    let mut p = MultiPair::default_pair();
    p.client.set_rejoin_timeout(std::time::Duration::from_secs(60));
    p.kill(0);
    assert!(p.client.is_orphaned() && p.client.orphaned_since().is_some());
    let deadline = p.client.poll_timeout().expect("the rejoin deadline is a timer");
    assert_eq!(deadline - p.client.orphaned_since().unwrap(), std::time::Duration::from_secs(60));
    p.client.set_rejoin_note("2 path(s) tried, connecting via wlan0: Network is unreachable".into());
    p.now = deadline;
    p.client.prepare_transmit(p.now);
    let why = p.client.error().unwrap().to_string();
    assert!(why.contains("none rejoined within 60.0 s"), "{why}");
    assert!(why.contains("last attempts: 2 path(s) tried, connecting via wlan0: Network is unreachable"), "{why}");

    let mut p = MultiPair::default_pair();
    p.kill(0);
    p.client.end_orphaned(Error::ConnectionLost("the server refused the rejoin".into()));
    assert!(p.client.is_closed() && !p.client.is_orphaned());
    assert!(p.client.error().unwrap().to_string().contains("the server refused the rejoin"));
    // Not orphaned: nothing happens.
    let mut p = MultiPair::default_pair();
    p.client.end_orphaned(Error::ConnectionLost("x".into()));
    assert!(!p.client.is_closed() && p.client.error().is_none());
}

#[test]
fn aborting_an_orphaned_session_ends_it_at_once() {
    let mut p = MultiPair::default_pair();
    p.kill(0);
    assert!(p.client.is_orphaned() && p.server.is_orphaned());
    let now = p.now;
    for s in [&mut p.client, &mut p.server] {
        s.abort(now);
        assert!(s.is_closed() && !s.is_orphaned(), "not waiting for the rejoin deadline");
        assert!(matches!(s.error(), Some(Error::SessionClosed)), "{:?}", s.error());
    }
}

#[test]
fn an_unanswered_keepalive_ping_fails_a_silent_connection_over() {
    let settings = tcpls_proto::SessionConfig {
        keepalive: Some(std::time::Duration::from_millis(50)),
        ping_timeout: std::time::Duration::from_millis(50),
        ..test_config()
    };
    let mut p = MultiPair::new(settings);
    let second = p.join().unwrap();
    let id = p.client.open_stream().unwrap();
    p.client.steer_stream(id, Some(second)).unwrap();
    // The second path goes silent: no RST, no FIN, packets just vanish.
    p.cut.insert(second);
    let data = payload(200_000, 13);
    let got = p.transfer(id, &data, |p, _| {
        // Let time pass as it would (keepalive timers fire within a few rounds).
        p.now += std::time::Duration::from_millis(30);
    });
    assert!(got == data, "the silent connection's records failed over, content checked");
    assert!(matches!(p.client.connection_error(second), Some(Error::ConnectionLost(why)) if why.contains("Ping")));
    assert!(p.client.is_connection_usable(0), "the healthy connection answered its Pings");
    assert!(p.client.stats().failovers >= 1);
}

#[test]
fn ack_thresholds_are_configurable() {
    // A short transfer (a few records) with a delayed-ACK timer far beyond what the pair lets
    // pass and nothing sent back: only an ACK-every-record policy releases the sent records
    // without the timer.
    let slow_timer = std::time::Duration::from_secs(10);
    for (every, released) in [(1, true), (16, false)] {
        let settings = tcpls_proto::SessionConfig { ack_every_records: every, ack_delay: slow_timer, ..test_config() };
        let mut p = MultiPair::new(settings);
        let id = p.client.open_stream().unwrap();
        let data = payload(40_000, 14);
        assert!(p.transfer(id, &data, |_, _| {}) == data);
        p.drive();
        let unacked = p.client.memory_use().unacked_records;
        assert_eq!(unacked == 0, released, "ack_every_records = {every}: {unacked} records unacknowledged");
    }
}

#[test]
fn a_reply_carries_the_delayed_ack() {
    // Same slow timer: the server's answer (here its FIN) carries the ACK that was waiting for
    // its delay, so the client's records are released and the stream forgotten without an
    // ACK-only record or the timer.
    let slow_timer = std::time::Duration::from_secs(10);
    let settings = tcpls_proto::SessionConfig { ack_delay: slow_timer, ..test_config() };
    let mut p = MultiPair::new(settings);
    let id = p.client.open_stream().unwrap();
    let data = payload(40_000, 14);
    assert!(p.transfer(id, &data, |_, _| {}) == data);
    p.drive();
    assert!(p.client.memory_use().unacked_records > 0, "nothing acknowledged before the reply");
    p.server.finish(id).unwrap();
    p.drive();
    assert_eq!(p.read_to_end_client(id), b"");
    p.drive();
    assert_eq!(p.client.memory_use().unacked_records, 0, "the FIN's record acknowledged the data");
    assert_eq!(p.client.stream_count(), 0, "both halves done and acknowledged: stream forgotten");
}

#[test]
fn an_abrupt_close_fails_over_like_a_reset() {
    // EOF without close_notify (the peer's process died, a middlebox closed the connection).
    let mut p = MultiPair::default_pair();
    let second = p.join().unwrap();
    p.client.set_scheduler(Box::new(RoundRobin::default()));
    let id = p.client.open_stream().unwrap();
    let data = payload(1 << 20, 15);
    assert_eq!(p.client.write(id, &data).unwrap(), data.len());
    p.client.finish(id).unwrap();
    p.client.prepare_transmit(p.now);
    assert!(!p.client.transmit_data(second).is_empty(), "records in flight on the closing connection");
    p.cut.insert(second);
    p.client.handle_eof(second, p.now);
    p.server.handle_eof(second, p.now);
    let got = p.transfer(id, &[], |_, _| {});
    assert!(got == data, "content checked after the abrupt close");
    assert!(p.client.stats().failovers >= 1);
}

/// Bytes each side has sent on `conn` so far.
fn sent_on(p: &MultiPair, conn: u32) -> (u64, u64) {
    let c = p.client.connection_stats(conn).map_or(0, |s| s.bytes_sent);
    let s = p.server.connection_stats(conn).map_or(0, |s| s.bytes_sent);
    (c, s)
}

/// A backup path (Path Priority, PROTOCOL.md §3) carries no stream data in either direction
/// while the regular one is up, even with a round-robin scheduler, and takes over when the
/// regular one fails, with every byte delivered.
#[test]
fn a_backup_path_carries_nothing_until_the_regular_one_fails() {
    let mut p = MultiPair::default_pair();
    let backup = p.join().unwrap();
    p.client.set_scheduler(Box::new(RoundRobin::default()));
    p.server.set_scheduler(Box::new(RoundRobin::default()));
    // The client marks it; the server learns it from the frame.
    p.client.set_connection_backup(backup, true).unwrap();
    p.drive();
    assert!(p.client.is_connection_backup(backup) && p.server.is_connection_backup(backup));
    let before = sent_on(&p, backup);
    let up = p.client.open_stream().unwrap();
    let data = payload(2 << 20, 41);
    assert!(p.transfer(up, &data, |_, _| {}) == data);
    let down = p.server.open_stream().unwrap();
    let data = payload(2 << 20, 42);
    assert_eq!(p.server.write(down, &data).unwrap(), data.len());
    p.server.finish(down).unwrap();
    p.drive();
    assert!(p.read_to_end_client(down) == data);
    let after = sent_on(&p, backup);
    // ACKs and other control frames may use it; 1% of the 4 MiB moved is far above those.
    let (up_bytes, down_bytes) = (after.0 - before.0, after.1 - before.1);
    assert!(up_bytes < 40_000 && down_bytes < 40_000, "backup carried {up_bytes} up / {down_bytes} down");

    // The regular connection dies after the first round of a transfer (about half of it has
    // moved): the backup carries the rest, failover included.
    let id = p.client.open_stream().unwrap();
    let data = payload(4 << 20, 43);
    let got = p.transfer(id, &data, |p, round| {
        if round == 0 {
            p.kill(0);
        }
    });
    assert!(got == data, "content after failover to the backup path");
    let moved = sent_on(&p, backup).0 - after.0;
    assert!(moved > 1 << 20, "the backup path took over: {moved} bytes");
    assert!(p.client.error().is_none() && p.server.error().is_none());
}

#[test]
fn path_priority_for_an_unknown_connection_is_ignored_and_marks_can_be_undone() {
    let mut p = MultiPair::default_pair();
    let second = p.join().unwrap();
    assert!(p.client.set_connection_backup(99, true).is_err(), "no such connection here");
    p.client.set_connection_backup(second, true).unwrap();
    p.drive();
    p.client.set_connection_backup(second, false).unwrap();
    p.drive();
    assert!(!p.server.is_connection_backup(second));
    // A hostile or stale frame naming a connection the server does not have changes nothing.
    let mut raw = Vec::new();
    tcpls_proto::frame::Frame::PathPriority { connection_id: 7, backup: true }.encode(&mut raw);
    p.client.danger_seal_raw(0, 23, &raw).unwrap();
    p.drive();
    assert!(p.server.error().is_none());
    assert!(!p.server.is_connection_backup(0) && !p.server.is_connection_backup(second));
}

#[test]
fn seeing_the_end_through_recv_chunk_forgets_a_finished_stream() {
    // The tunnel and the tokio layer's zero-copy reads see a stream's end through `recv_chunk`,
    // and call nothing after it. When the peer's FIN arrives after the ACK of our own FIN (one
    // ACK per record here), seeing the end is the stream's last step: it must be forgotten then,
    // or its receive credit stays counted for the session's life.
    let settings = tcpls_proto::SessionConfig { ack_every_records: 1, ..test_config() };
    let mut p = MultiPair::new(settings);
    let id = p.client.open_stream().unwrap();
    let data = payload(40_000, 15);
    assert!(p.transfer(id, &data, |_, _| {}) == data);
    p.drive();
    assert_eq!(p.client.memory_use().unacked_records, 0, "the client's data and FIN acknowledged");
    p.server.finish(id).unwrap();
    p.drive();
    assert_eq!(p.client.stream_count(), 1, "the end is not seen yet");
    let chunk = p.client.recv_chunk(id).unwrap().map(<[u8]>::to_vec);
    assert_eq!(chunk.as_deref(), Some(&[][..]), "the end of the stream");
    assert_eq!(p.client.stream_count(), 0, "both halves over: the stream is forgotten");
    assert_eq!(p.client.memory_use().receive_credit, 0, "no credit left counted for it");
}

#[test]
fn resetting_a_queued_stream_whose_end_was_read_forgets_it() {
    // The stream's receiving half is over (its end read) and its sending half is reset while
    // data waits in the round robin: the reset is the stream's last step, taken while it is
    // still queued. It must be forgotten once the scheduler drops it from its queue.
    let mut p = MultiPair::new(test_config());
    let id = p.client.open_stream().unwrap();
    assert_eq!(p.client.write(id, b"hello").unwrap(), 5);
    p.drive();
    while p.server.accept_stream().is_some() {}
    p.server.finish(id).unwrap();
    p.drive();
    assert!(p.read_to_end_client(id).is_empty(), "the server sent only its FIN");
    assert!(p.client.write(id, &payload(10_000, 16)).unwrap() > 0, "queued, not sealed yet");
    p.client.reset_stream(id, 7).unwrap();
    p.drive();
    assert_eq!(p.client.stream_count(), 0, "reset and read to the end: the stream is forgotten");
}

#[test]
fn without_failover_losing_a_connection_that_may_carry_stream_data_ends_the_session() {
    // Nothing says what a failed connection carried when records are not acknowledged: a
    // stream could be left waiting for bytes that will never come. The session ends on both
    // sides with an error that says why, instead of carrying on over the other connection.
    let settings = tcpls_proto::SessionConfig { failover: false, ..test_config() };
    let mut p = MultiPair::new(settings);
    let second = p.join().unwrap();
    let id = p.client.open_stream().unwrap();
    p.client.steer_stream(id, Some(0)).unwrap();
    assert_eq!(p.client.write(id, &payload(30_000, 17)).unwrap(), 30_000);
    p.client.prepare_transmit(p.now);
    p.kill(0);
    let client_error = p.client.error().map(ToString::to_string).unwrap_or_default();
    assert!(client_error.contains("failover is off"), "client: {client_error:?}");
    assert!(p.server.error().is_some(), "the server's session ends too");
    assert!(p.client_events.iter().any(|e| matches!(e, Event::Closed { error: Some(_) })));
    assert!(p.server_events.iter().any(|e| matches!(e, Event::Closed { error: Some(_) })));
    assert!(p.client.connection_ids().iter().all(|c| *c == 0 || *c == second));
    let mut buf = [0u8; 16];
    assert!(p.client.read(id, &mut buf).is_err(), "a read says the session is over, it does not wait");
}

#[test]
fn without_failover_a_session_without_streams_survives_a_lost_connection() {
    let settings = tcpls_proto::SessionConfig { failover: false, ..test_config() };
    let mut p = MultiPair::new(settings);
    let second = p.join().unwrap();
    p.kill(0);
    assert!(p.client.error().is_none() && p.server.error().is_none());
    let id = p.client.open_stream().unwrap();
    p.client.steer_stream(id, Some(second)).unwrap();
    let data = payload(50_000, 18);
    assert!(p.transfer(id, &data, |_, _| {}) == data, "the other connection carries on");
}

#[test]
fn without_failover_losing_a_connection_that_carried_no_stream_data_is_survived() {
    // A path that carried only control frames, or a join that failed during its handshake,
    // lost no stream bytes: the session goes on, its streams intact.
    let settings = tcpls_proto::SessionConfig { failover: false, ..test_config() };
    let mut p = MultiPair::new(settings);
    let id = p.client.open_stream().unwrap();
    p.client.steer_stream(id, Some(0)).unwrap();
    let second = p.join().unwrap();
    let data = payload(60_000, 19);
    // Its data went on connection 0 only; the server's half stays open.
    assert!(p.transfer(id, &data, |_, _| {}) == data);
    assert!(p.client.stream_count() == 1 && p.server.stream_count() == 1);
    p.kill(second);
    assert!(p.client.error().is_none() && p.server.error().is_none(), "{:?}", p.client.error());
    // A join whose connection dies before its handshake completes.
    let joining = p.client.add_connection().unwrap();
    p.cut.insert(joining);
    p.client.handle_io_error(joining, "connection refused (test)", p.now);
    p.drive();
    assert!(p.client.error().is_none(), "{:?}", p.client.error());
    let id = p.client.open_stream().unwrap();
    assert!(p.transfer(id, &data, |_, _| {}) == data, "the session goes on");
}
