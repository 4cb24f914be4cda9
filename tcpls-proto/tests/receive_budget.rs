//! The session-wide receive budget (`SessionConfig::receive_budget`): what a peer can make a
//! session buffer is bounded over all streams, and a stream that is not read never stalls the
//! others.
#![allow(clippy::unwrap_used)]

mod util;

use tcpls_proto::{SessionConfig, StreamError};
use util::{payload, test_config, Pair, Pki};

const STREAMS: usize = 64;
const WINDOW: u64 = 1 << 20;

/// A client that keeps `STREAMS` streams full, against a server whose application reads the
/// first 40 KiB of each (enough to be granted a whole window) and then stops. Returns the
/// server's stream buffer memory once nothing moves any more.
fn buffered_with_budget(budget: u64) -> usize {
    let pki = Pki::new();
    let server = SessionConfig { stream_receive_window: WINDOW, receive_budget: budget, ..test_config() };
    let mut p = Pair::with_settings(pki.client_config(&[]), pki.server_config(&[]), test_config(), server);
    p.drive();
    let ids: Vec<u32> = (0..STREAMS).map(|_| p.client.open_stream().unwrap()).collect();
    let data = payload(64 << 10, 1);
    let mut read = vec![0usize; STREAMS];
    let mut buf = vec![0u8; 4096];
    for _ in 0..400 {
        for id in &ids {
            let _ = p.client.write(*id, &data);
        }
        p.drive();
        while p.server.accept_stream().is_some() {}
        for (i, id) in ids.iter().enumerate() {
            while read[i] < 40 << 10 {
                match p.server.read(*id, &mut buf) {
                    Ok(Some(n)) if n > 0 => read[i] += n,
                    Ok(_) | Err(StreamError::UnknownStream(_)) => break,
                    Err(e) => panic!("{e}"),
                }
            }
        }
    }
    assert!(p.server.error().is_none(), "{:?}", p.server.error());
    p.server.danger_buffered_bytes()
}

#[test]
fn a_peer_cannot_make_the_session_buffer_more_than_the_budget() {
    let budget = 4 << 20;
    let bounded = buffered_with_budget(budget);
    let unbounded = buffered_with_budget(u64::MAX);
    eprintln!("buffered: {bounded} bytes with a budget of {budget}, {unbounded} without");
    // Budget, plus the 64 KiB floor each stream keeps, plus allocation rounding.
    let bound = budget as usize + STREAMS * (64 << 10);
    assert!(bounded <= bound * 2, "buffered {bounded} with a budget of {budget} (bound {bound})");
    // The same load without the budget: every stream fills its window (the test can fail).
    assert!(unbounded >= STREAMS * WINDOW as usize / 2, "without a budget only {unbounded}");
    assert!(unbounded > bounded * 4, "bounded {bounded} vs unbounded {unbounded}");
}

#[test]
fn an_unread_stream_holding_the_budget_does_not_stall_another() {
    let pki = Pki::new();
    let server = SessionConfig { receive_budget: 1 << 20, ..test_config() };
    let mut p = Pair::with_settings(pki.client_config(&[]), pki.server_config(&[]), test_config(), server);
    p.drive();
    let hog = p.client.open_stream().unwrap();
    let fill = payload(1 << 20, 2);
    // The hog is read just enough to be granted the whole budget (half its initial window),
    // then never again.
    let mut buf = vec![0u8; 1 << 16];
    let mut hog_read = 0;
    for _ in 0..50 {
        let _ = p.client.write(hog, &fill);
        p.drive();
        while p.server.accept_stream().is_some() {}
        while hog_read < 32 << 10 {
            match p.server.read(hog, &mut buf[..4096]) {
                Ok(Some(n)) if n > 0 => hog_read += n,
                _ => break,
            }
        }
    }
    let id = p.client.open_stream().unwrap();
    let data = payload(6 << 20, 3);
    let (mut off, mut got) = (0, Vec::new());
    for _ in 0..100_000 {
        if off < data.len() {
            off += p.client.write(id, &data[off..]).unwrap();
            if off == data.len() {
                p.client.finish(id).unwrap();
            }
        }
        p.drive();
        while p.server.accept_stream().is_some() {}
        match p.server.read(id, &mut buf) {
            Ok(Some(0)) => break,
            Ok(Some(n)) => got.extend_from_slice(&buf[..n]),
            Ok(None) | Err(StreamError::UnknownStream(_)) => {}
            Err(e) => panic!("{e}"),
        }
    }
    assert!(got == data, "the read stream got {} of {} bytes", got.len(), data.len());
}
