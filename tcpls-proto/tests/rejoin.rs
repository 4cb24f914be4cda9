//! Rejoining a session without a token (PROTOCOL.md §3, Rejoin frame): a client whose tokens
//! are gone while disconnected re-attaches a new TCP connection with a fresh handshake and a
//! proof bound to it; forged, misdirected and replayed proofs are refused with access_denied.
#![allow(clippy::unwrap_used)]

mod util;

use tcpls_proto::{Error, Event, REJOIN_ID_BASE};
use util::multi::MultiPair;
use util::payload;

/// Spends every token of the client on connections that never reach the server (as failed
/// TCP connects would), then loses the initial connection: disconnected, no token.
fn disconnected_without_tokens() -> MultiPair {
    let mut p = MultiPair::default_pair();
    assert_eq!(p.client.tokens().len(), 4);
    let mut spent = Vec::new();
    while !p.client.tokens().is_empty() {
        spent.push(p.client.add_connection().unwrap());
    }
    for id in spent {
        p.cut.insert(id);
        p.client.handle_io_error(id, "connect refused (test)", p.now);
    }
    // While a connection lives, no rejoin: the server keeps the client supplied with tokens.
    assert!(matches!(p.client.add_connection(), Err(Error::NoToken)));
    p.kill(0);
    assert!(
        p.client.is_orphaned() && p.server.is_orphaned(),
        "client {:?} {:?}, server {:?} {:?}",
        p.client.is_closed(),
        p.client.error(),
        p.server.is_closed(),
        p.server.error()
    );
    assert!(p.client.tokens().is_empty());
    p
}

fn access_denied(p: &MultiPair, id: u32) -> bool {
    p.client_events.contains(&Event::ConnectionClosed { conn: id, error: Some(Error::PeerAlert(49)) })
}

#[test]
fn a_client_without_tokens_rejoins_and_its_stream_goes_on() {
    let mut p = disconnected_without_tokens();
    let id = p.client.add_connection().unwrap();
    assert_eq!(id, REJOIN_ID_BASE, "the first rejoin's Connection ID");
    assert_eq!(p.join_conn(id).unwrap(), id);
    assert!(!p.client.is_orphaned() && !p.server.is_orphaned());
    assert!(p.server.connection_ids().contains(&id));
    assert!(p.client.is_connection_usable(id), "the server answered on the rejoined connection");
    // (No fresh token follows: the server still counts the 4 tokens the client burnt on
    // connects that never reached it as unused.)
    let s = p.client.open_stream().unwrap();
    let data = payload(500_000, 21);
    assert!(p.transfer(s, &data, |_, _| {}) == data, "content checked");
    assert!(p.client.connection_stats(id).unwrap().bytes_sent > 400_000, "carried by the rejoined connection");
    assert!(p.client.error().is_none() && p.server.error().is_none());
}

#[test]
fn forged_misdirected_and_replayed_rejoins_are_refused_and_the_session_goes_on() {
    let mut p = MultiPair::default_pair();
    let real_ref = p.client.session_ref().unwrap();
    assert_eq!(p.server.session_ref(), Some(real_ref), "both ends derive the same reference");

    // Unknown session reference (the server's session is found by the test harness anyway:
    // the session itself must refuse it).
    let mut other_ref = real_ref;
    other_ref[0] ^= 1;
    let a = REJOIN_ID_BASE + 10;
    p.client.danger_add_connection_with_rejoin(a, Some(other_ref), None).unwrap();
    assert!(p.join_conn(a).is_err());
    // Wrong proof.
    let b = REJOIN_ID_BASE + 11;
    p.client.danger_add_connection_with_rejoin(b, None, Some([9; 32])).unwrap();
    assert!(p.join_conn(b).is_err());
    // A valid rejoin outside the rejoin space (an ID tokens use) is refused too.
    p.client.danger_add_connection_with_rejoin(7, None, None).unwrap();
    assert!(p.join_conn(7).is_err());

    // A valid rejoin; then a proof made on that TLS connection (for the right ID, session and
    // key) replayed on another one: the proof is bound to the connection it was made for.
    let c = REJOIN_ID_BASE + 12;
    p.client.danger_add_connection_with_rejoin(c, None, None).unwrap();
    assert_eq!(p.join_conn(c).unwrap(), c);
    let e = REJOIN_ID_BASE + 14;
    let copied = p.client.danger_rejoin_proof(c, e).unwrap();
    p.client.danger_add_connection_with_rejoin(e, None, Some(copied)).unwrap();
    assert!(p.join_conn(e).is_err(), "a proof copied from another connection is refused");
    for id in [a, b, 7, e] {
        assert!(access_denied(&p, id), "access_denied for connection {id}");
    }
    // Another rejoin with the real proof on a fresh ID is accepted.
    let d = REJOIN_ID_BASE + 13;
    p.client.danger_add_connection_with_rejoin(d, None, None).unwrap();
    assert_eq!(p.join_conn(d).unwrap(), d);

    // The session is unharmed.
    let s = p.client.open_stream().unwrap();
    let data = payload(300_000, 22);
    assert!(p.transfer(s, &data, |_, _| {}) == data);
    assert!(p.client.error().is_none() && p.server.error().is_none());
}
