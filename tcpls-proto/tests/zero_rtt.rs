//! Session resumption and 0-RTT in memory: real rustls handshakes and tickets, byte-exact checks
//! of what each side receives and of which flight carries it.
#![allow(clippy::unwrap_used)]

mod util;

use std::sync::Arc;

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ServerConfig};
use tcpls_proto::{tcpls_client_config, tcpls_server_config, Accepted, Session, MAX_EARLY_STREAM_BYTES};
use util::{payload, test_config, Pair, Pki};

fn configs(pki: &Pki) -> (Arc<ClientConfig>, ServerConfig) {
    let mut client = tcpls_client_config(&pki.client_config(&[]));
    client.enable_early_data = true;
    let mut server = pki.server_config(&[]);
    server.max_early_data_size = 16384;
    let server = tcpls_server_config(&server);
    (Arc::new(client), server)
}

fn name() -> ServerName<'static> {
    ServerName::try_from("localhost").unwrap()
}

/// A first, full session whose tickets land in the client config's session cache.
fn warm_up(client: &Arc<ClientConfig>, server: &Arc<ServerConfig>) -> Pair {
    let mut p = Pair::from_arcs(client.clone(), server.clone(), test_config());
    p.drive();
    assert!(p.client.is_established() && !p.client.handshake_info().unwrap().resumed);
    p
}

fn pair_of(client: Session, server: Session) -> Pair {
    Pair {
        client,
        server,
        now: std::time::Instant::now(),
        client_events: vec![],
        server_events: vec![],
        client_writes: vec![],
        server_writes: vec![],
    }
}

fn flush(from: &mut Session, to: &mut Session, now: std::time::Instant) -> usize {
    from.prepare_transmit(now);
    let data = from.transmit_data(0).to_vec();
    from.transmit_advance(0, data.len());
    to.handle_data(0, &data, now);
    data.len()
}

fn read_all(s: &mut Session, id: u32) -> Vec<u8> {
    let mut out = vec![];
    let mut buf = vec![0u8; 65536];
    while let Some(n) = s.read(id, &mut buf).unwrap() {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    out
}

#[test]
fn resumed_handshake_sends_no_certificate() {
    let pki = Pki::new();
    let (client, server) = configs(&pki);
    let server = Arc::new(server);
    let first = warm_up(&client, &server);
    let full_flight = first.server_writes[0].len();
    let mut second = Pair::from_arcs(client, server, test_config());
    second.drive();
    assert!(second.client.handshake_info().unwrap().resumed);
    let resumed_flight = second.server_writes[0].len();
    // The full flight carries the certificate (and its signature); the resumed one does not.
    assert!(full_flight > pki.cert.len(), "full flight {full_flight} vs certificate {}", pki.cert.len());
    assert!(
        resumed_flight + pki.cert.len() <= full_flight,
        "resumed flight {resumed_flight} should lack the {}-byte certificate of the full one ({full_flight})",
        pki.cert.len()
    );
}

#[test]
fn early_data_is_accepted_delivered_at_once_and_answered_at_half_rtt() {
    let pki = Pki::new();
    let (client_cfg, server_cfg) = configs(&pki);
    let server_cfg = Arc::new(server_cfg);
    let _first = warm_up(&client_cfg, &server_cfg);

    let request = payload(3000, 7);
    let (client, taken) = Session::client_with_early_data(client_cfg, name(), test_config(), &request).unwrap();
    assert_eq!(taken, request.len());
    let server = Session::server(server_cfg, test_config()).unwrap();
    let mut p = pair_of(client, server);
    let now = p.now;

    // Flight 1: ClientHello + early data. The server has the request before any reply went out.
    flush(&mut p.client, &mut p.server, now);
    assert!(p.server.early_data_accepted(), "server accepted the early data");
    assert!(!p.server.is_established(), "no client Finished yet");
    assert_eq!(p.server.accepted(), Accepted::NewSession, "early data makes the session known");
    let id = p.server.accept_stream().expect("stream 0 opened by early data");
    assert_eq!(id, 0);
    assert_eq!(read_all(&mut p.server, id), request, "early data content");

    // The server answers at once: half-RTT data in the same flight as its Finished.
    let response = payload(5000, 9);
    assert_eq!(p.server.write(id, &response).unwrap(), response.len());
    p.server.finish(id).unwrap();
    flush(&mut p.server, &mut p.client, now);
    assert!(p.client.is_established());
    let info = p.client.handshake_info().unwrap().clone();
    assert!(info.resumed && info.early_data_accepted, "{info:?}");
    assert!(p.client.early_data_accepted());
    let mut got = vec![0u8; 10_000];
    let n = p.client.read(0, &mut got).unwrap().expect("half-RTT response readable before our Finished left");
    assert_eq!(&got[..n], &response[..n]);

    // The rest of the session: the request is not sent twice, everything closes cleanly.
    p.client.finish(0).unwrap();
    p.drive();
    assert!(p.server.is_established());
    assert!(p.server.handshake_info().unwrap().early_data_accepted);
    let mut rest = got[..n].to_vec();
    rest.extend(p.read_to_end(false, 0));
    assert_eq!(rest, response, "response content");
    assert_eq!(p.read_to_end(true, 0), Vec::<u8>::new(), "no duplicate of the request after the FIN");
    assert_eq!(p.server.stats().stream_bytes_received, request.len() as u64, "request received exactly once");
}

/// Early data offered to a server that does not know the ticket (a fresh ticket store): rustls
/// skips it, the handshake is a full one, and the bytes go after Finished.
#[test]
fn rejected_early_data_is_sent_again_after_the_handshake() {
    let pki = Pki::new();
    let (client_cfg, server_cfg) = configs(&pki);
    let _first = warm_up(&client_cfg, &Arc::new(server_cfg.clone()));
    let (_, fresh) = configs(&pki); // same certificate, new ticket store
    check_rejected(client_cfg, Arc::new(fresh), false);
}

/// A server that resumes the ticket but accepts no early data (max_early_data_size 0).
#[test]
fn early_data_refused_by_a_resuming_server_is_sent_again() {
    let pki = Pki::new();
    let (client_cfg, server_cfg) = configs(&pki);
    let _first = warm_up(&client_cfg, &Arc::new(server_cfg.clone()));
    let mut no_early = server_cfg.clone();
    no_early.max_early_data_size = 0;
    no_early.send_half_rtt_data = false;
    check_rejected(client_cfg, Arc::new(no_early), true);
}

fn check_rejected(client_cfg: Arc<ClientConfig>, server_cfg: Arc<ServerConfig>, resumes: bool) {
    let request = payload(2500, 3);
    let (client, _) = Session::client_with_early_data(client_cfg, name(), test_config(), &request).unwrap();
    let server = Session::server(server_cfg, test_config()).unwrap();
    let mut p = pair_of(client, server);
    let now = p.now;
    flush(&mut p.client, &mut p.server, now);
    assert!(!p.server.early_data_accepted());
    assert_eq!(p.server.accept_stream(), None, "nothing delivered before the handshake");
    p.client.finish(0).unwrap();
    p.drive();
    let info = p.client.handshake_info().unwrap().clone();
    assert_eq!(info.resumed, resumes, "{info:?}");
    assert!(!info.early_data_accepted, "{info:?}");
    assert!(!p.server.handshake_info().unwrap().early_data_accepted);
    assert_eq!(p.server.accept_stream(), Some(0));
    assert_eq!(p.read_to_end(true, 0), request, "request re-sent after Finished, byte-exact");
}

/// Without a ticket there is nothing to offer early data with: the bytes go after Finished.
#[test]
fn early_data_without_a_ticket_goes_after_finished() {
    let pki = Pki::new();
    let (client_cfg, server_cfg) = configs(&pki);
    let request = payload(100, 5);
    let (client, _) = Session::client_with_early_data(client_cfg, name(), test_config(), &request).unwrap();
    let server = Session::server(Arc::new(server_cfg), test_config()).unwrap();
    let mut p = pair_of(client, server);
    p.client.finish(0).unwrap();
    p.drive();
    assert!(!p.client.early_data_accepted());
    assert_eq!(p.server.accept_stream(), Some(0));
    assert_eq!(p.read_to_end(true, 0), request);
}

/// A request larger than one record: the first record goes as early data, the rest after
/// Finished; the server reassembles it byte-exact.
#[test]
fn large_request_is_split_between_early_data_and_the_first_records() {
    let pki = Pki::new();
    let (client_cfg, server_cfg) = configs(&pki);
    let server_cfg = Arc::new(server_cfg);
    let _first = warm_up(&client_cfg, &server_cfg);
    let request = payload(3 * MAX_EARLY_STREAM_BYTES + 17, 11);
    let (client, taken) = Session::client_with_early_data(client_cfg, name(), test_config(), &request).unwrap();
    assert_eq!(taken, request.len());
    let server = Session::server(server_cfg, test_config()).unwrap();
    let mut p = pair_of(client, server);
    let now = p.now;
    flush(&mut p.client, &mut p.server, now);
    assert!(p.server.early_data_accepted());
    assert_eq!(p.server.accept_stream(), Some(0));
    assert_eq!(read_all(&mut p.server, 0), request[..MAX_EARLY_STREAM_BYTES], "first record as early data");
    p.client.finish(0).unwrap();
    p.drive();
    assert!(p.client.early_data_accepted());
    assert_eq!(p.read_to_end(true, 0), request[MAX_EARLY_STREAM_BYTES..]);
}

/// A captured ClientHello with early data, replayed to the same server: the stateful ticket was
/// taken by the first handshake, so the replay gets a full handshake and its early data is
/// skipped (never delivered).
#[test]
fn replayed_early_data_is_not_accepted_twice() {
    let pki = Pki::new();
    let (client_cfg, server_cfg) = configs(&pki);
    let server_cfg = Arc::new(server_cfg);
    let _first = warm_up(&client_cfg, &server_cfg);
    let request = payload(200, 13);
    let (mut client, _) = Session::client_with_early_data(client_cfg, name(), test_config(), &request).unwrap();
    client.prepare_transmit(std::time::Instant::now());
    let flight = client.transmit_data(0).to_vec();
    let now = std::time::Instant::now();
    let mut original = Session::server(server_cfg.clone(), test_config()).unwrap();
    original.handle_data(0, &flight, now);
    assert!(original.early_data_accepted());
    let mut replay = Session::server(server_cfg, test_config()).unwrap();
    replay.handle_data(0, &flight, now);
    assert!(!replay.early_data_accepted(), "a replayed ClientHello must not deliver early data");
    assert_eq!(replay.accept_stream(), None);
}

fn with_store(pki: &Pki, store: Arc<tcpls_proto::TicketStore>) -> Arc<ServerConfig> {
    let mut server = pki.server_config(&[]);
    server.max_early_data_size = 16384;
    server.session_storage = store;
    Arc::new(tcpls_server_config(&server))
}

/// TicketStore: tickets work once, expire after their lifetime, and rotation forgets them.
#[test]
fn ticket_store_lifetime_rotation_and_single_use() {
    use tcpls_proto::TicketStore;
    let pki = Pki::new();
    let (client_cfg, _) = configs(&pki);
    let store = Arc::new(TicketStore::new(64, std::time::Duration::from_secs(3600)));
    let server = with_store(&pki, store.clone());
    let _first = warm_up(&client_cfg, &server);
    let issued = store.stats().issued;
    assert!(issued >= 1, "{:?}", store.stats());
    let mut second = Pair::from_arcs(client_cfg.clone(), server.clone(), test_config());
    second.drive();
    assert!(second.client.handshake_info().unwrap().resumed);
    assert_eq!(store.stats().resumed, 1);

    // Rotation: every ticket the client holds is refused; the handshake is a full one.
    store.rotate();
    let mut third = Pair::from_arcs(client_cfg.clone(), server, test_config());
    third.drive();
    assert!(third.client.is_established() && !third.client.handshake_info().unwrap().resumed);
    assert!(store.stats().refused >= 1);

    // Lifetime: a store whose tickets expire at once never resumes.
    let expired = Arc::new(TicketStore::new(64, std::time::Duration::ZERO));
    let server = with_store(&pki, expired.clone());
    let (client_cfg, _) = configs(&pki);
    let _first = warm_up(&client_cfg, &server);
    let mut again = Pair::from_arcs(client_cfg, server, test_config());
    again.drive();
    assert!(again.client.is_established() && !again.client.handshake_info().unwrap().resumed);
    assert_eq!(expired.stats().resumed, 0);
}

/// PROTOCOL.md §1.7: early data carries Stream frames only. Anything else (here a Rate Limit,
/// a Stream Reset, a Congestion Control request or a Join next to the Stream frame) is a
/// protocol violation: the server fails the connection with unexpected_message before acting
/// on any of it (such frames would otherwise be acted on before the client Finished proves the
/// handshake).
#[test]
fn early_data_with_anything_but_stream_frames_is_a_protocol_violation() {
    use tcpls_proto::frame::Frame;
    use tcpls_proto::{AlertCode, Error};
    let pki = Pki::new();
    let (client_cfg, server_cfg) = configs(&pki);
    let server_cfg = Arc::new(server_cfg);
    let extras: [Frame<'_>; 4] = [
        Frame::RateLimit { connection_id: 0, bytes_per_second: 1 },
        Frame::StreamReset { stream_id: 0, final_size: 5, error_code: 9 },
        Frame::CongestionControl { connection_id: 0, name: b"reno" },
        Frame::Ping,
    ];
    for extra in extras {
        refresh_tickets(&client_cfg, &server_cfg);
        let mut content = Vec::new();
        Frame::Stream { stream_id: 0, offset: 0, fin: false, data: b"GET /" }.encode(&mut content);
        extra.encode(&mut content);
        let client =
            Session::danger_client_with_early_content(client_cfg.clone(), name(), test_config(), content).unwrap();
        let server = Session::server(server_cfg.clone(), test_config()).unwrap();
        let mut p = pair_of(client, server);
        let now = p.now;
        flush(&mut p.client, &mut p.server, now);
        match p.server.error() {
            Some(Error::Local(e)) => assert_eq!(e.alert, AlertCode::UnexpectedMessage, "{extra:?}: {e:?}"),
            other => panic!("{extra:?} in early data: expected a protocol violation, got {other:?}"),
        }
        assert_eq!(p.server.send_rate_limit(0), None, "{extra:?}: nothing was acted on");
        assert_eq!(p.server.accept_stream(), None, "{extra:?}: not even the Stream frame");
    }
    // Stream frames alone are fine.
    refresh_tickets(&client_cfg, &server_cfg);
    let mut content = Vec::new();
    Frame::Stream { stream_id: 0, offset: 0, fin: false, data: b"GET /" }.encode(&mut content);
    let client = Session::danger_client_with_early_content(client_cfg, name(), test_config(), content).unwrap();
    let server = Session::server(server_cfg, test_config()).unwrap();
    let mut p = pair_of(client, server);
    let now = p.now;
    flush(&mut p.client, &mut p.server, now);
    assert_eq!(p.server.error(), None);
    assert!(p.server.early_data_accepted());
    assert_eq!(p.server.accept_stream(), Some(0));
}

/// A session that leaves fresh (single-use) tickets in the client config's cache.
fn refresh_tickets(client: &Arc<ClientConfig>, server: &Arc<ServerConfig>) {
    let mut p = Pair::from_arcs(client.clone(), server.clone(), test_config());
    p.drive();
    assert!(p.client.is_established());
}
