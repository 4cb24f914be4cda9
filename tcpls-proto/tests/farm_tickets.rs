//! Farm tickets in memory: several servers sharing a ticket key file resume each other's
//! tickets, and none of them ever accepts early data, so a replayed 0-RTT ClientHello gets no
//! early data on any node (RESUMPTION.md, "Farm tickets").
#![allow(clippy::unwrap_used)]

mod util;

use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ServerConfig};
use tcpls_proto::{tcpls_client_config, tcpls_server_config, FarmTicketer, Session, TicketKeys};
use util::{payload, test_config, Pair, Pki};

const KEYS: &str = "6b1c0e2f6d1f4a3b8c9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d\n";

fn client(pki: &Pki) -> Arc<ClientConfig> {
    let mut client = tcpls_client_config(&pki.client_config(&[]));
    client.enable_early_data = true;
    Arc::new(client)
}

/// One node of a farm: its own ticketer (its own process), the farm's key file. Early data
/// stays configured, as an operator might leave it: the farm ticketer must still rule it out.
fn node(pki: &Pki, keys: &str) -> (Arc<ServerConfig>, Arc<FarmTicketer>) {
    let ticketer = Arc::new(FarmTicketer::new(TicketKeys::parse(keys).unwrap(), Duration::from_secs(3600)));
    let mut server = pki.server_config(&[]);
    server.max_early_data_size = 16384;
    server.ticketer = ticketer.clone();
    (Arc::new(tcpls_server_config(&server)), ticketer)
}

/// A server outside any farm: stateful tickets, 0-RTT allowed.
fn standalone(pki: &Pki) -> Arc<ServerConfig> {
    let mut server = pki.server_config(&[]);
    server.max_early_data_size = 16384;
    Arc::new(tcpls_server_config(&server))
}

fn name() -> ServerName<'static> {
    ServerName::try_from("localhost").unwrap()
}

fn session_on(client: &Arc<ClientConfig>, server: &Arc<ServerConfig>) -> Pair {
    let mut p = Pair::from_arcs(client.clone(), server.clone(), test_config());
    p.drive();
    assert!(p.client.is_established());
    p
}

/// The client's first flight of a session that offers `request` as early data (if its ticket
/// allows it).
fn zero_rtt_flight(client: &Arc<ClientConfig>, request: &[u8]) -> Vec<u8> {
    let (mut session, _) = Session::client_with_early_data(client.clone(), name(), test_config(), request).unwrap();
    session.prepare_transmit(Instant::now());
    session.transmit_data(0).to_vec()
}

#[test]
fn a_ticket_from_one_node_resumes_on_another() {
    let pki = Pki::new();
    let client = client(&pki);
    let (a, ticketer_a) = node(&pki, KEYS);
    let (b, ticketer_b) = node(&pki, KEYS);
    let first = session_on(&client, &a);
    assert!(!first.client.handshake_info().unwrap().resumed);
    assert!(ticketer_a.stats().issued >= 1);
    let second = session_on(&client, &b);
    assert!(second.client.handshake_info().unwrap().resumed, "node B resumes node A's ticket");
    assert_eq!(ticketer_b.stats().resumed, 1);
    assert!(!second.client.early_data_accepted());
}

#[test]
fn a_node_with_other_keys_falls_back_to_a_full_handshake() {
    let pki = Pki::new();
    let client = client(&pki);
    let (a, _) = node(&pki, KEYS);
    let other = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
    let (b, ticketer_b) = node(&pki, other);
    let _first = session_on(&client, &a);
    let second = session_on(&client, &b);
    assert!(!second.client.handshake_info().unwrap().resumed);
    assert_eq!(ticketer_b.stats().refused, 1);
}

/// A genuine 0-RTT ClientHello (its ticket from a standalone server, which accepts it: the
/// control) replayed to two farm nodes, and the resuming ClientHello of a farm ticket replayed
/// to both nodes: no node delivers early data or opens a stream from it.
#[test]
fn replayed_zero_rtt_client_hellos_get_no_early_data_on_any_node() {
    let pki = Pki::new();
    let request = payload(300, 5);
    let (a, _) = node(&pki, KEYS);
    let (b, _) = node(&pki, KEYS);

    let stateful_client = client(&pki);
    let lone = standalone(&pki);
    let _warm = session_on(&stateful_client, &lone);
    let flight = zero_rtt_flight(&stateful_client, &request);
    let mut control = Session::server(lone, test_config()).unwrap();
    control.handle_data(0, &flight, Instant::now());
    assert!(control.early_data_accepted(), "the captured flight really carries accepted early data");
    for server in [&a, &b] {
        let mut replay = Session::server(server.clone(), test_config()).unwrap();
        replay.handle_data(0, &flight, Instant::now());
        assert!(!replay.early_data_accepted());
        assert_eq!(replay.accept_stream(), None);
    }

    let farm_client = client(&pki);
    let _warm = session_on(&farm_client, &a);
    let flight = zero_rtt_flight(&farm_client, &request);
    for server in [&a, &b, &a] {
        let mut replay = Session::server(server.clone(), test_config()).unwrap();
        replay.handle_data(0, &flight, Instant::now());
        assert!(!replay.early_data_accepted());
        assert_eq!(replay.accept_stream(), None);
    }
}
