//! The thesis extensions over in-memory pipes: RTT probes, address probes, rate limits (with a
//! virtual clock), user timeout and congestion control requests.
#![allow(clippy::unwrap_used)]

mod util;

use std::time::Duration;

use tcpls_proto::Event;
use util::Pair;

#[test]
fn rtt_probe_is_echoed_and_measured_with_the_session_clock() {
    let mut p = Pair::established();
    let sent_at = p.now;
    p.client.probe_rtt(0, sent_at).unwrap();
    p.drive();
    let rtt: Vec<u64> = p
        .client_events
        .iter()
        .filter_map(|e| match e {
            Event::RttMeasured { conn: 0, rtt_us } => Some(*rtt_us),
            _ => None,
        })
        .collect();
    assert_eq!(rtt.len(), 1, "{:?}", p.client_events);
    // Drive advances the clock 10 µs per step: one round trip is a few steps.
    let elapsed = p.now.duration_since(sent_at).as_micros() as u64;
    assert!(rtt[0] > 0 && rtt[0] <= elapsed, "rtt {} µs, elapsed {elapsed} µs", rtt[0]);
    assert!(p.client.probe_rtt(7, p.now).is_err(), "no connection 7");
}

#[test]
fn address_probe_reports_what_the_peer_sees() {
    let mut p = Pair::established();
    let client_local = "10.0.0.2:40000".parse().unwrap();
    let seen_by_server = "198.51.100.7:61000".parse().unwrap();
    p.client.set_addresses(0, Some(client_local), Some("192.0.2.1:4443".parse().unwrap()));
    p.server.set_addresses(0, Some("192.0.2.1:4443".parse().unwrap()), Some(seen_by_server));
    p.client.probe_address(0).unwrap();
    p.drive();
    assert!(p.client_events.contains(&Event::AddressEchoed { conn: 0, addr: seen_by_server }));
}

#[test]
fn user_timeout_and_congestion_control_requests_reach_the_peer() {
    let mut p = Pair::established();
    p.client.request_user_timeout(0, 5000).unwrap();
    p.client.request_congestion_control(0, "reno").unwrap();
    assert!(p.client.request_congestion_control(0, "no spaces").is_err());
    p.drive();
    assert!(p.server_events.contains(&Event::UserTimeoutRequested { conn: 0, timeout_ms: 5000 }));
    assert!(p.server_events.contains(&Event::CongestionControlRequested { conn: 0, name: "reno".into() }));
    assert!(p.server.congestion_control_allowed("reno"));
    assert!(!p.server.congestion_control_allowed("vegas"));
}

/// Moves bytes both ways once at `p.now`; the server reads everything of stream `id`.
fn step(p: &mut Pair, id: u32, received: &mut u64) {
    for _ in 0..4 {
        p.client.prepare_transmit(p.now);
        let data = p.client.transmit_data(0).to_vec();
        p.client.transmit_advance(0, data.len());
        p.server.handle_data(0, &data, p.now);
        let mut buf = vec![0u8; 1 << 16];
        while let Ok(Some(n)) = p.server.read(id, &mut buf) {
            if n == 0 {
                break;
            }
            *received += n as u64;
        }
        p.server.prepare_transmit(p.now);
        let back = p.server.transmit_data(0).to_vec();
        p.server.transmit_advance(0, back.len());
        p.client.handle_data(0, &back, p.now);
        while let Some(e) = p.client.poll_event() {
            p.client_events.push(e);
        }
        while p.server.poll_event().is_some() {}
    }
}

/// Goodput (stream bytes per second) of a client that always has data to send, measured over
/// `secs` seconds of virtual time moving in 1 ms ticks.
fn paced_goodput(p: &mut Pair, id: u32, secs: u64, received: &mut u64) -> f64 {
    let chunk = vec![0x5au8; 1 << 20];
    let start = *received;
    for _ in 0..secs * 1000 {
        while p.client.write(id, &chunk).unwrap() > 0 {}
        p.now += Duration::from_millis(1);
        step(p, id, received);
    }
    (*received - start) as f64 / secs as f64
}

#[test]
fn a_rate_limit_paces_the_sender_and_zero_removes_it() {
    let mut p = Pair::established();
    let id = p.client.open_stream().unwrap();
    p.client.write(id, b"x").unwrap();
    p.drive();
    assert_eq!(p.server.accept_stream(), Some(id));
    let mut received = 0;
    let limit = 2_000_000u64; // 16 Mbit/s
    p.server.set_rate_limit(0, limit).unwrap();
    step(&mut p, id, &mut received);
    assert_eq!(p.client.send_rate_limit(0), Some(limit));
    assert!(p.client_events.contains(&Event::RateLimited { conn: 0, bytes_per_second: limit }));
    // Warm up (the bucket's first burst), then measure one second.
    paced_goodput(&mut p, id, 1, &mut received);
    let rate = paced_goodput(&mut p, id, 1, &mut received);
    let error = (rate - limit as f64).abs() / limit as f64;
    assert!(error < 0.15, "goodput {rate:.0} B/s against a limit of {limit} B/s");
    // The sender waits for tokens: the IO layer is told when to come back.
    p.client.write(id, &[1; 100_000]).unwrap_or(0);
    p.client.prepare_transmit(p.now);
    let wake = p.client.poll_timeout();
    assert!(wake.is_some_and(|t| t > p.now && t <= p.now + Duration::from_millis(20)), "{wake:?}");

    // A lower limit mid-transfer drops goodput to it (thesis Fig. 4.9).
    p.server.set_rate_limit(0, limit / 4).unwrap();
    step(&mut p, id, &mut received);
    paced_goodput(&mut p, id, 1, &mut received);
    let rate = paced_goodput(&mut p, id, 1, &mut received);
    assert!((rate - (limit / 4) as f64).abs() / ((limit / 4) as f64) < 0.15, "goodput {rate:.0} B/s");

    // 0 removes the cap: far more than the limit goes through.
    p.server.set_rate_limit(0, 0).unwrap();
    step(&mut p, id, &mut received);
    assert_eq!(p.client.send_rate_limit(0), None);
    let rate = paced_goodput(&mut p, id, 1, &mut received);
    assert!(rate > 4.0 * limit as f64, "uncapped goodput {rate:.0} B/s");
    // Once delayed ACKs went out, nothing waits on a timer: no pacing is left.
    p.drive();
    assert_eq!(p.client.poll_timeout(), None);
}

#[test]
fn rate_limits_for_connections_by_the_million_cost_bounded_memory_and_keep_the_session_alive() {
    let mut p = Pair::established();
    let mut content = Vec::new();
    for c in 1..=1000u32 {
        tcpls_proto::frame::Frame::RateLimit { connection_id: c * 7, bytes_per_second: 1 }.encode(&mut content);
    }
    p.server.danger_seal_raw(0, 23, &content).unwrap();
    p.drive();
    assert_eq!(p.client.error(), None);
    let kept = (1..=1000u32).filter(|c| p.client.send_rate_limit(c * 7).is_some()).count();
    assert!(kept > 0 && kept <= 64, "caps for at most 64 connections are kept, not {kept}");
    // Data still flows on connection 0, which has no cap.
    let id = p.client.open_stream().unwrap();
    p.client.write(id, &[9; 100_000]).unwrap();
    p.client.finish(id).unwrap();
    p.drive();
    assert_eq!(p.server.accept_stream(), Some(id));
    assert_eq!(p.read_to_end(true, id).len(), 100_000);
}
