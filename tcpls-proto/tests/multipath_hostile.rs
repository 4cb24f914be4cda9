//! Hostile and edge-case input against the multipath machinery (joins, tokens, frames naming
//! connections, steering), over in-memory pipes. Tests marked `#[ignore = "bug: ..."]` state
//! the CORRECT behaviour and currently fail; see the review report.
#![allow(clippy::unwrap_used)]

mod util;

use std::time::Duration;

use tcpls_proto::frame::Frame;
use tcpls_proto::{Accepted, ConnId, Error, Session, SessionConfig};
use util::multi::MultiPair;
use util::{payload, test_config};

const CT_APPLICATION_DATA: u8 = 23;

fn encode(frames: &[Frame<'_>]) -> Vec<u8> {
    let mut out = Vec::new();
    for f in frames {
        f.encode(&mut out);
    }
    out
}

/// Runs the TLS handshake of client connection `id` against a fresh pending server session
/// (as a listener does), WITHOUT letting the client seal its own first record; then the client
/// sends `first` as its first TCPLS record. Returns the pending server session.
fn hostile_first_record(p: &mut MultiPair, id: ConnId, first: &[u8]) -> Session {
    let mut pending = Session::server(p.server_config.clone(), p.settings.clone()).unwrap();
    for _ in 0..100 {
        p.now += Duration::from_micros(10);
        let up = p.client.transmit_data(id).to_vec();
        p.client.transmit_advance(id, up.len());
        pending.handle_data(0, &up, p.now);
        let down = pending.transmit_data(0).to_vec();
        pending.transmit_advance(0, down.len());
        p.client.handle_data(id, &down, p.now);
        if p.client.is_connection_established(id) && up.is_empty() && down.is_empty() {
            break;
        }
    }
    assert!(p.client.is_connection_established(id), "handshake of the hostile connection");
    p.client.danger_seal_raw(id, CT_APPLICATION_DATA, first).unwrap();
    let up = p.client.transmit_data(id).to_vec();
    p.client.transmit_advance(id, up.len());
    pending.handle_data(0, &up, p.now);
    pending
}

/// Hands a pending session that asked to join over to the real server session.
fn attach(p: &mut MultiPair, pending: &mut Session) -> Result<ConnId, ()> {
    let joining = pending.take_joining_connection().unwrap();
    p.server.attach_joining_connection(joining, p.now).map_err(|refused| {
        let _ = Session::refuse_join(refused);
    })
}

/// The client forgets a connection of its own (as after a RST), and the harness stops piping it.
fn drop_client_conn(p: &mut MultiPair, id: ConnId) {
    p.cut.insert(id);
    p.client.handle_io_error(id, "test", p.now);
    p.drive();
}

fn assert_session_healthy(p: &mut MultiPair) {
    assert!(p.client.error().is_none() && !p.client.is_closed(), "client: {:?}", p.client.error());
    assert!(p.server.error().is_none() && !p.server.is_closed(), "server: {:?}", p.server.error());
    let s = p.client.open_stream().unwrap();
    let data = payload(50_000, 77);
    assert!(p.transfer(s, &data, |_, _| {}) == data);
}

// ------------------------------------------------------------------ first records

#[test]
fn a_first_record_of_padding_only_opens_a_new_session() {
    let mut p = MultiPair::default_pair();
    // Any token will do: the client's automatic Join record is never sealed here.
    p.client.danger_add_connection_with_token(700, [0; 32]).unwrap();
    let pending = hostile_first_record(&mut p, 700, &encode(&[Frame::Padding]));
    assert_eq!(pending.accepted(), Accepted::NewSession);
    assert_eq!(pending.tokens().len(), 4, "a new session gets its tokens");
}

#[test]
fn an_empty_first_record_opens_a_new_session() {
    let mut p = MultiPair::default_pair();
    p.client.danger_add_connection_with_token(700, [0; 32]).unwrap();
    let pending = hostile_first_record(&mut p, 700, &[]);
    assert_eq!(pending.accepted(), Accepted::NewSession);
}

#[test]
fn a_join_that_is_not_the_first_frame_is_refused_before_any_session_exists() {
    let mut p = MultiPair::default_pair();
    let (_, token) = p.client.tokens()[0];
    p.client.danger_add_connection_with_token(700, token).unwrap();
    // Padding first, Join second (wire order).
    let pending = hostile_first_record(&mut p, 700, &encode(&[Frame::Padding, Frame::Join { token }]));
    assert_eq!(pending.accepted(), Accepted::Failed);
    assert!(matches!(pending.error(), Some(Error::Local(e)) if e.alert as u8 == 10), "{:?}", pending.error());
    drop_client_conn(&mut p, 700);
    // The token was not spent and the real session is unharmed.
    assert!(p.server.tokens().iter().any(|(_, t)| *t == token));
    assert_session_healthy(&mut p);
}

#[test]
fn join_followed_by_padding_and_ping_joins() {
    let mut p = MultiPair::default_pair();
    let (seq, token) = p.client.tokens()[0];
    p.client.danger_add_connection_with_token(seq, token).unwrap();
    let first = encode(&[Frame::Join { token }, Frame::Padding, Frame::Ping, Frame::Padding]);
    let mut pending = hostile_first_record(&mut p, seq, &first);
    assert_eq!(pending.accepted(), Accepted::Join);
    assert_eq!(attach(&mut p, &mut pending), Ok(seq));
    assert!(p.server.is_connection_usable(seq));
    assert!(p.server.danger_control_queue_entries() > 0, "the Ping's ACK and fresh tokens are queued");
    // (The harness client would now seal its own Join on this connection: drop it.)
    p.server.handle_io_error(seq, "test", p.now);
    drop_client_conn(&mut p, seq);
    assert_session_healthy(&mut p);
}

#[test]
fn a_second_join_after_the_first_fails_only_the_joining_connection() {
    let mut p = MultiPair::default_pair();
    let (seq, token) = p.client.tokens()[0];
    let (_, other) = p.client.tokens()[1];
    p.client.danger_add_connection_with_token(seq, token).unwrap();
    let first = encode(&[Frame::Join { token }, Frame::Join { token: other }]);
    let mut pending = hostile_first_record(&mut p, seq, &first);
    assert_eq!(pending.accepted(), Accepted::Join);
    // Bound (the token was valid), then failed by the frames after the Join.
    assert_eq!(attach(&mut p, &mut pending), Ok(seq));
    assert!(p.server.is_connection_finished(seq));
    assert!(!p.server.tokens().iter().any(|(_, t)| *t == token), "the first token is spent");
    drop_client_conn(&mut p, seq);
    assert_session_healthy(&mut p);
}

#[test]
fn frames_after_a_forged_join_are_never_processed() {
    let mut p = MultiPair::default_pair();
    p.client.danger_add_connection_with_token(700, [9; 32]).unwrap();
    // A ConnectionReset of the initial connection rides behind a forged token.
    let first = encode(&[Frame::Join { token: [9; 32] }, Frame::ConnectionReset { connection_id: 0 }]);
    let mut pending = hostile_first_record(&mut p, 700, &first);
    assert_eq!(pending.accepted(), Accepted::Join);
    assert_eq!(attach(&mut p, &mut pending), Err(()));
    drop_client_conn(&mut p, 700);
    assert!(p.server.is_connection_usable(0), "the reset behind the forged join was ignored");
    assert_session_healthy(&mut p);
}

// ------------------------------------------------------------------ tokens

#[test]
fn a_token_of_one_session_cannot_join_another() {
    let mut a = MultiPair::default_pair();
    // Not test_config's deterministic source: both sessions would issue the very same tokens.
    let mut b = MultiPair::new(SessionConfig { random: tcpls_proto::system_random(), ..test_config() });
    let (seq_a, token_a) = a.client.tokens()[0];
    b.client.danger_add_connection_with_token(900, token_a).unwrap();
    assert!(b.join_conn(900).is_err(), "session B refuses session A's token");
    // Session A still honours it.
    a.client.danger_add_connection_with_token(seq_a, token_a).unwrap();
    assert_eq!(a.join_conn(seq_a).ok(), Some(seq_a));
    assert_session_healthy(&mut b);
}

/// Runs a join handshake of `client`'s connection `id` (which seals its Join by itself) against a
/// fresh pending session of `server_config`, until the pending session decides.
fn pump_join(
    client: &mut Session,
    id: ConnId,
    server_config: &std::sync::Arc<rustls::ServerConfig>,
    settings: &SessionConfig,
    now: &mut std::time::Instant,
) -> Session {
    let mut pending = Session::server(server_config.clone(), settings.clone()).unwrap();
    for _ in 0..100 {
        *now += Duration::from_micros(10);
        client.prepare_transmit(*now);
        let up = client.transmit_data(id).to_vec();
        client.transmit_advance(id, up.len());
        pending.handle_data(0, &up, *now);
        let down = pending.transmit_data(0).to_vec();
        pending.transmit_advance(0, down.len());
        client.handle_data(id, &down, *now);
        if pending.accepted() != Accepted::Pending {
            break;
        }
    }
    pending
}

#[test]
fn joins_are_refused_once_the_session_is_closing_or_closed() {
    let pki = util::Pki::new();
    let mut p = MultiPair::with_configs(pki.client_config(&[]), pki.server_config(&[]), test_config());
    let mut q = MultiPair::with_configs(pki.client_config(&[]), pki.server_config(&[]), test_config());
    let (_, t1) = p.client.tokens()[0];
    let (_, t2) = p.client.tokens()[1];
    p.server.close();
    p.client.danger_add_connection_with_token(900, t1).unwrap();
    assert!(p.join_conn(900).is_err(), "refused while closing");
    p.drive();
    assert!(p.server.is_closed() && p.server.error().is_none(), "{:?}", p.server.error());
    // Another client presents an unused token of the closed session.
    q.client.danger_add_connection_with_token(901, t2).unwrap();
    let mut now = q.now;
    let mut pending = pump_join(&mut q.client, 901, &p.server_config, &p.settings, &mut now);
    assert_eq!(pending.accepted(), Accepted::Join);
    let before = p.server.connection_ids();
    assert!(p.server.attach_joining_connection(pending.take_joining_connection().unwrap(), now).is_err());
    assert_eq!(p.server.connection_ids(), before, "nothing attached to a closed session");
}

// ------------------------------------------------------------------ frames naming connections

#[test]
fn frames_naming_connections_that_do_not_exist_are_harmless() {
    let mut p = MultiPair::default_pair();
    let second = p.join().unwrap();
    let s = p.client.open_stream().unwrap();
    p.client.write(s, b"x").unwrap();
    p.drive();
    let frames = encode(&[
        Frame::Ack { connection_id: u32::MAX, highest_record_seq: u64::MAX },
        Frame::RttProbe { connection_id: u32::MAX, timestamp_us: u64::MAX },
        Frame::RttEcho { connection_id: u32::MAX, timestamp_us: u64::MAX },
        Frame::AddressProbe { connection_id: u32::MAX },
        Frame::TcpInfoRequest { connection_id: u32::MAX },
        Frame::RateLimit { connection_id: u32::MAX, bytes_per_second: u64::MAX },
        Frame::CongestionControl { connection_id: u32::MAX, name: b"bbr" },
        Frame::StreamSteer { stream_id: s, connection_id: u32::MAX },
        Frame::ConnectionReset { connection_id: u32::MAX },
        Frame::UserTimeout { timeout_ms: u32::MAX },
    ]);
    for conn in [0, second] {
        p.client.danger_seal_raw(conn, CT_APPLICATION_DATA, &frames).unwrap();
    }
    p.drive();
    assert_eq!(p.server.stream_steering(s), None, "steer to a missing connection ignored");
    assert_eq!(p.server.danger_control_queue_entries(), 0, "nothing stuck in the control queue");
    assert!(p.server.is_connection_usable(0) && p.server.is_connection_usable(second));
    assert_session_healthy(&mut p);
}

#[test]
fn stream_steer_for_a_stream_the_receiver_never_opened_is_illegal_parameter() {
    let mut p = MultiPair::default_pair();
    // Stream 1 is a server stream the server never opened.
    p.client
        .danger_seal_raw(0, CT_APPLICATION_DATA, &encode(&[Frame::StreamSteer { stream_id: 1, connection_id: 0 }]))
        .unwrap();
    p.drive();
    assert!(
        matches!(p.server.connection_error(0), Some(Error::Local(e)) if e.alert as u8 == 47),
        "{:?}",
        p.server.connection_error(0)
    );
    assert!(matches!(p.client.connection_error(0), Some(Error::PeerAlert(47))));
}

#[test]
fn stream_steer_to_a_dead_connection_is_ignored() {
    let mut p = MultiPair::default_pair();
    let second = p.join().unwrap();
    let sid = p.server.open_stream().unwrap();
    p.server.write(sid, b"hi").unwrap();
    p.drive();
    p.kill(second);
    p.client.request_steer(sid, second);
    p.drive();
    assert_eq!(p.server.stream_steering(sid), None);
    assert_session_healthy(&mut p);
}

#[test]
fn connection_reset_from_the_peer_ends_only_that_connection() {
    let mut p = MultiPair::default_pair();
    let second = p.join().unwrap();
    p.client
        .danger_seal_raw(0, CT_APPLICATION_DATA, &encode(&[Frame::ConnectionReset { connection_id: second }]))
        .unwrap();
    p.drive();
    assert!(p.server.is_connection_finished(second));
    drop_client_conn(&mut p, second);
    assert_session_healthy(&mut p);
}

// ------------------------------------------------------------------ bugs (correct expectations)

/// A control frame bound to one connection (here a Stream Steer request, which travels on the
/// connection the stream is steered to) must not outlive that connection: otherwise
/// `all_sent()` stays false forever and a graceful close never sends close_notify.
#[test]
fn a_control_frame_bound_to_a_dead_connection_does_not_block_close() {
    let mut p = MultiPair::default_pair();
    let second = p.join().unwrap();
    let s = p.client.open_stream().unwrap();
    p.client.steer_stream(s, Some(second)).unwrap();
    p.client.write(s, b"hello").unwrap();
    p.client.finish(s).unwrap();
    p.drive();
    p.kill(second);
    // The request is bound to `second` (the stream's steering), which is gone.
    p.client.request_steer(s, 0);
    p.client.close();
    p.drive();
    assert_eq!(p.client.danger_control_queue_entries(), 0, "nothing may wait for a dead connection");
    assert!(p.server_events.contains(&tcpls_proto::Event::PeerClosed), "the client's close_notify went out");
}

/// A peer fills the control queue with answers bound to a connection (Address Echo goes back on
/// the connection the probe came on), then lets that connection die. The answers can never be
/// sent; past MAX_QUEUED_CONTROL (4096) entries `read_buffer` returns an empty slice for EVERY
/// connection, forever: the session is wedged (and graceful close is blocked, as above).
#[test]
fn probes_on_a_connection_that_then_fails_do_not_wedge_the_session() {
    let mut p = MultiPair::default_pair();
    let second = p.join().unwrap();
    p.server.set_addresses(second, None, Some("192.0.2.1:4000".parse().unwrap()));
    let probe = encode(&[Frame::AddressProbe { connection_id: second }]);
    let record: Vec<u8> = probe.iter().copied().cycle().take(probe.len() * 3000).collect();
    for _ in 0..2 {
        p.client.danger_seal_raw(second, CT_APPLICATION_DATA, &record).unwrap();
    }
    let wire = p.client.transmit_data(second).to_vec();
    p.client.transmit_advance(second, wire.len());
    p.server.handle_data(second, &wire, p.now);
    // The connection dies before the server had a chance to send its answers.
    p.kill(second);
    assert!(p.server.danger_control_queue_entries() < 4096, "{}", p.server.danger_control_queue_entries());
    assert!(!p.server.read_buffer(0).is_empty(), "the surviving connection must still be read");
}

/// Client connection IDs are the sequence numbers of the server's tokens. A (buggy or hostile)
/// server that sends a New Token with sequence 0, or re-sends the sequence of a token already
/// used, gives the client two connections with the same ID; the client must not accept such a
/// token.
#[test]
fn the_client_never_gets_two_connections_with_the_same_id() {
    let mut p = MultiPair::default_pair();
    let used = p.join().unwrap();
    let frames =
        encode(&[Frame::NewToken { sequence: 0, token: [1; 32] }, Frame::NewToken { sequence: used, token: [2; 32] }]);
    p.server.danger_seal_raw(0, CT_APPLICATION_DATA, &frames).unwrap();
    p.drive();
    while p.client.add_connection().is_ok() {}
    let mut ids = p.client.connection_ids();
    let n = ids.len();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), n, "duplicate connection IDs: {:?}", p.client.connection_ids());
}

/// A client that joins and drops connections in a loop (each drop gives it a fresh token) must
/// not grow the server's connection table: finished connections are forgotten, except the few
/// most recent ones kept for reports (8).
#[test]
fn finished_connections_are_forgotten() {
    let settings = SessionConfig { tokens: 2, ..test_config() };
    let mut p = MultiPair::new(settings);
    for _ in 0..20 {
        let id = p.join().unwrap();
        p.kill(id);
    }
    let n = p.server.connection_ids().len();
    assert!(n <= 1 + 2 + 8, "the server holds {n} connection entries after 20 join/drop cycles");
}

/// Gives client stream `id` a large credit: a little data, read by the server application,
/// which then raises the stream's limit with Max Stream Data.
fn open_credited_stream(p: &mut MultiPair) -> (u32, Vec<u8>) {
    let id = p.client.open_stream().unwrap();
    // More than half the initial 64 KiB credit, so reading it triggers Max Stream Data.
    let head = payload(40_000, 5);
    p.client.write(id, &head).unwrap();
    p.drive();
    while p.server.accept_stream().is_some() {}
    let mut buf = vec![0u8; 65536];
    let mut read = 0;
    while read < head.len() {
        read += p.server.read(id, &mut buf).unwrap().unwrap();
    }
    p.drive();
    (id, head)
}

/// Reads stream `id` on the server for a bounded number of rounds: Ok(all bytes) once it ended,
/// Err(bytes so far) if it stalled or failed.
fn server_read_bounded(p: &mut MultiPair, id: u32, mut got: Vec<u8>) -> Result<Vec<u8>, (Vec<u8>, String)> {
    let mut buf = vec![0u8; 1 << 20];
    for _ in 0..300 {
        p.drive();
        loop {
            match p.server.read(id, &mut buf) {
                Ok(Some(0)) => return Ok(got),
                Ok(Some(n)) => got.extend_from_slice(&buf[..n]),
                Ok(None) => break,
                Err(e) => return Err((got, format!("stream error {e:?}"))),
            }
        }
        if let Some(e) = p.server.error().or(p.client.error()) {
            return Err((got, format!("session error {e}")));
        }
    }
    Err((got, "stalled".into()))
}

/// Without failover, records sealed on a connection that then fails are lost: the receiving
/// stream waits forever for the missing offsets and neither side reports anything.
#[test]
fn losing_a_connection_mid_transfer_loses_no_data_or_reports_an_error() {
    let mut p = MultiPair::default_pair();
    let second = p.join().unwrap();
    p.client.set_scheduler(Box::new(tcpls_proto::RoundRobin::default()));
    let (id, mut expect) = open_credited_stream(&mut p);
    let data = payload(2 << 20, 11);
    assert_eq!(p.client.write(id, &data).unwrap(), data.len());
    p.client.finish(id).unwrap();
    expect.extend_from_slice(&data);
    p.client.prepare_transmit(p.now);
    let in_flight = p.client.transmit_data(second).len();
    assert!(in_flight > 100_000, "records sealed on the connection about to fail: {in_flight}");
    p.kill(second);
    // Failover re-sends what the dead connection carried: everything arrives, once, in order.
    match server_read_bounded(&mut p, id, Vec::new()) {
        Ok(got) => assert!(got == expect[40_000..], "complete and in order"),
        Err((got, why)) => {
            panic!("{why} with {} of {} bytes ({in_flight} were on the failed connection)", got.len(), data.len())
        }
    }
}

/// The client schedules stream records on a joining connection right after its Join, before the
/// server has accepted the token. When the server refuses the join (expired or over-budget
/// token, a session that is closing), those records are lost with the connection and the
/// stream stalls; nothing reports it.
#[test]
fn data_sent_on_a_refused_join_is_not_lost() {
    let mut p = MultiPair::default_pair();
    let (id, _) = open_credited_stream(&mut p);
    let data = payload(2 << 20, 21);
    assert_eq!(p.client.write(id, &data).unwrap(), data.len());
    p.client.finish(id).unwrap();
    // A join with a token the server does not honour, while the stream has data queued.
    p.client.danger_add_connection_with_token(900, [5; 32]).unwrap();
    assert!(p.join_conn(900).is_err());
    let sent_on_900 = p.client.connection_stats(900).unwrap().bytes_sent;
    match server_read_bounded(&mut p, id, Vec::new()) {
        Ok(got) => assert!(got == data, "complete and in order"),
        Err((got, why)) => panic!(
            "{why}: received {} of {} bytes ({sent_on_900} bytes went out on the refused connection)",
            got.len(),
            data.len()
        ),
    }
}

/// Every accepted TCP connection gets a server session before a single byte arrives, and its
/// first `read_buffer` allocates (and zero-fills) READ_CHUNK = 256 KiB. The listener has no
/// limit on pending handshakes, so each bare TCP connection costs the server 256 KiB of RSS
/// for up to HANDSHAKE_TIMEOUT (10 s): 10,000 idle connections pin 2.5 GiB.
#[test]
fn a_pending_server_session_reads_into_a_small_buffer() {
    let p = MultiPair::default_pair();
    let mut pending = Session::server(p.server_config.clone(), p.settings.clone()).unwrap();
    let len = pending.read_buffer(0).len();
    assert!(len <= 32 * 1024, "{len} bytes reserved for a connection that sent nothing");
}
