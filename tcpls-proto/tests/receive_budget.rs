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
    // Fixed windows: the budget, not the windows' growth (which follows the reader), is what
    // this measures.
    let server = SessionConfig {
        stream_receive_window: WINDOW,
        receive_autotune: false,
        receive_budget: budget,
        ..test_config()
    };
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

/// A budget that holds every stream the concurrency limit allows (at its initial window, with
/// room to spare) keeps room for all of them: busy streams whose windows grew never make the
/// session refuse a stream below the limit.
#[test]
fn a_budget_sized_for_the_stream_limit_admits_every_stream_up_to_it_despite_grown_windows() {
    const LIMIT: usize = 40;
    // 2.5 times what LIMIT new streams are charged (64 KiB window + 2 KiB state each).
    let budget = (LIMIT as u64 * (66 << 10)) * 5 / 2;
    let pki = Pki::new();
    let server = SessionConfig {
        stream_receive_window: 8 << 20,
        receive_budget: budget,
        max_concurrent_streams: LIMIT,
        ..test_config()
    };
    let mut p = Pair::with_settings(pki.client_config(&[]), pki.server_config(&[]), test_config(), server);
    p.drive();
    // Four busy streams, read as fast as they come: their windows grow as far as they may.
    let busy: Vec<u32> = (0..4).map(|_| p.client.open_stream().unwrap()).collect();
    let data = payload(256 << 10, 2);
    let mut buf = vec![0u8; 64 << 10];
    let mut received = 0usize;
    for _ in 0..1000 {
        for id in &busy {
            let _ = p.client.write(*id, &data);
        }
        p.drive();
        while p.server.accept_stream().is_some() {}
        for id in &busy {
            while let Ok(Some(n)) = p.server.read(*id, &mut buf) {
                if n == 0 {
                    break;
                }
                received += n;
            }
        }
    }
    let grown = p.server.memory_use().receive_credit;
    assert!(grown > 2 << 20, "the busy streams' windows grew to {grown} bytes of credit (test can fail)");
    // Then the rest of the limit, each with a little data, all at once.
    let late: Vec<u32> = (0..LIMIT - 4).map(|_| p.client.open_stream().unwrap()).collect();
    for (i, id) in late.iter().enumerate() {
        p.client.write(*id, &payload(1000, i as u64)).unwrap();
        p.client.finish(*id).unwrap();
    }
    p.drive();
    let mut accepted = 0;
    while p.server.accept_stream().is_some() {
        accepted += 1;
    }
    for (i, id) in late.iter().enumerate() {
        let mut got = Vec::new();
        loop {
            match p.server.read(*id, &mut buf) {
                Ok(Some(0)) => break,
                Ok(Some(n)) => got.extend_from_slice(&buf[..n]),
                other => panic!("stream {id}: {other:?} after {} bytes", got.len()),
            }
        }
        assert_eq!(got, payload(1000, i as u64), "stream {id}");
    }
    assert_eq!(p.server.stats().streams_refused, 0, "no stream below the limit refused");
    assert!(accepted >= LIMIT - 4, "accepted {accepted}");
    assert!(p.server.memory_use().receive_credit <= budget, "within the budget");
    eprintln!("busy streams moved {received} bytes with {grown} bytes of credit; {accepted} late streams admitted");
}
