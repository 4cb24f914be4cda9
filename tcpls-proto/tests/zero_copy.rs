//! The zero-copy receive path (ARCHITECTURE.md "The receive path", PROTOCOL.md §2.3): records
//! decrypted straight into their stream's buffer, Stream Change announcements, and the copy
//! path for everything unexpected. Content is checked byte for byte; the counters
//! (`zero_copy_bytes`, `copied_bytes`) are checked against what each case must produce.
#![allow(clippy::unwrap_used)]

mod util;

use tcpls_proto::frame::Frame;
use tcpls_proto::{Session, SessionConfig, StreamError};
use util::multi::MultiPair;
use util::{payload, test_config, Pair, Pki};

fn pair_with(server_zero_copy: bool) -> Pair {
    let pki = Pki::new();
    let server = SessionConfig { zero_copy: server_zero_copy, ..test_config() };
    let mut p = Pair::with_settings(pki.client_config(&[]), pki.server_config(&[]), test_config(), server);
    p.drive();
    p
}

/// Uploads every payload on its own client stream, all at once (the sender's round robin
/// interleaves them on the one connection), and returns what the server read of each.
fn upload(p: &mut Pair, payloads: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let ids: Vec<u32> = payloads.iter().map(|_| p.client.open_stream().unwrap()).collect();
    let mut sent = vec![0usize; payloads.len()];
    let mut got = vec![Vec::new(); payloads.len()];
    let mut done = vec![false; payloads.len()];
    let mut buf = vec![0u8; 1 << 20];
    for _ in 0..100_000 {
        for (i, data) in payloads.iter().enumerate() {
            if sent[i] < data.len() {
                sent[i] += p.client.write(ids[i], &data[sent[i]..]).unwrap();
                if sent[i] == data.len() {
                    p.client.finish(ids[i]).unwrap();
                }
            }
        }
        p.drive();
        while p.server.accept_stream().is_some() {}
        for (i, id) in ids.iter().enumerate() {
            while !done[i] {
                match p.server.read(*id, &mut buf) {
                    Ok(Some(0)) => done[i] = true,
                    Ok(Some(n)) => got[i].extend_from_slice(&buf[..n]),
                    Ok(None) | Err(StreamError::UnknownStream(_)) => break,
                    Err(e) => panic!("stream {id}: {e}"),
                }
            }
        }
        if done.iter().all(|d| *d) {
            return got;
        }
    }
    panic!("upload did not finish");
}

#[test]
fn a_single_stream_is_placed_without_copies() {
    let mut p = pair_with(true);
    let data = payload(8 << 20, 1);
    let got = upload(&mut p, std::slice::from_ref(&data));
    assert!(got[0] == data, "content differs");
    let stats = p.server.stats();
    assert_eq!(stats.zero_copy_bytes + stats.copied_bytes, data.len() as u64);
    // Only the first records of the stream, before the expectation is learnt, may be copied.
    assert!(stats.copied_bytes * 100 <= data.len() as u64, "copied {} of {}", stats.copied_bytes, data.len());
}

#[test]
fn zero_copy_off_copies_everything_and_delivers_the_same() {
    let mut p = pair_with(false);
    let data = payload(4 << 20, 2);
    let got = upload(&mut p, std::slice::from_ref(&data));
    assert!(got[0] == data, "content differs");
    let stats = p.server.stats();
    assert_eq!((stats.zero_copy_bytes, stats.copied_bytes), (0, data.len() as u64));
}

#[test]
fn interleaved_streams_are_announced_and_placed() {
    let mut p = pair_with(true);
    let payloads: Vec<Vec<u8>> = (0..8).map(|i| payload((1 << 20) + i * 1000, 10 + i as u64)).collect();
    let got = upload(&mut p, &payloads);
    for (i, (g, d)) in got.iter().zip(&payloads).enumerate() {
        assert!(g == d, "stream {i}: content differs");
    }
    let total: u64 = payloads.iter().map(|d| d.len() as u64).sum();
    let stats = p.server.stats();
    assert_eq!(stats.zero_copy_bytes + stats.copied_bytes, total);
    // Round robin switches stream at every record: without Stream Change nearly everything
    // would be copied.
    assert!(stats.zero_copy_bytes * 10 >= total * 9, "zero-copy {} of {total}", stats.zero_copy_bytes);
}

#[test]
fn a_stream_spread_over_two_connections_arrives_exactly_once() {
    let mut p = MultiPair::default_pair();
    p.join().unwrap();
    let id = p.client.open_stream().unwrap();
    let data = payload(3 << 20, 3);
    let got = p.transfer(id, &data, |_, _| {});
    assert!(got == data, "content differs");
    let stats = p.server.stats();
    assert_eq!(stats.zero_copy_bytes + stats.copied_bytes, data.len() as u64);
}

/// Hand-made records from the client: `frames` encoded in order, sealed as one record.
fn raw(p: &mut Pair, frames: &[Frame<'_>]) {
    let mut content = Vec::new();
    for f in frames {
        f.encode(&mut content);
    }
    p.client.danger_seal_raw(0, 23, &content).unwrap();
    p.drive();
}

fn stream(id: u32, offset: u64, data: &[u8]) -> Frame<'_> {
    Frame::Stream { stream_id: id, offset, fin: false, data }
}

fn read_all(server: &mut Session, id: u32) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = [0u8; 65536];
    while let Ok(Some(n)) = server.read(id, &mut buf) {
        if n == 0 {
            break;
        }
        out.extend_from_slice(&buf[..n]);
    }
    out
}

#[test]
fn lying_stream_changes_cost_a_copy_never_the_content() {
    let mut p = pair_with(true);
    let id = p.client.open_stream().unwrap();
    let data = payload(40_000, 4);
    // In order: the expectation is learnt (0..10000 then 10000..).
    raw(&mut p, &[stream(id, 0, &data[..10_000])]);
    raw(&mut p, &[stream(id, 10_000, &data[10_000..20_000])]);
    // A Stream Change pointing into the window where the next record is not going.
    raw(
        &mut p,
        &[stream(id, 20_000, &data[20_000..25_000]), Frame::StreamChange { next_stream_id: id, next_offset: 35_000 }],
    );
    raw(&mut p, &[stream(id, 25_000, &data[25_000..30_000])]);
    // Stream Changes to a stream that does not exist, and past any window.
    raw(
        &mut p,
        &[stream(id, 30_000, &data[30_000..32_000]), Frame::StreamChange { next_stream_id: 4001, next_offset: 0 }],
    );
    raw(
        &mut p,
        &[
            stream(id, 32_000, &data[32_000..34_000]),
            Frame::StreamChange { next_stream_id: id, next_offset: u64::MAX - 5 },
        ],
    );
    // A record whose Stream frame is not first (Padding before it): the copy path.
    raw(&mut p, &[Frame::Padding, stream(id, 34_000, &data[34_000..37_000])]);
    raw(&mut p, &[stream(id, 37_000, &data[37_000..])]);
    assert!(p.server.error().is_none(), "{:?}", p.server.error());
    while p.server.accept_stream().is_some() {}
    assert!(read_all(&mut p.server, id) == data, "content differs");
    let stats = p.server.stats();
    assert_eq!(stats.zero_copy_bytes + stats.copied_bytes, data.len() as u64);
    assert!(stats.zero_copy_bytes > 0 && stats.copied_bytes > 0, "{stats:?}");
}

#[test]
fn out_of_order_data_is_not_overwritten_by_a_placed_record() {
    let mut p = pair_with(true);
    let id = p.client.open_stream().unwrap();
    let data = payload(30_000, 5);
    raw(&mut p, &[stream(id, 0, &data[..5_000])]);
    // A later range first (as after a failover), in a record whose Stream frame is not first,
    // so the expectation stays at 5000, trusted. The gap's record would then be decrypted at
    // 5000..12016 (data, Stream frame fields, content type), over bytes already received: the
    // slot must be refused and the record copied instead.
    raw(&mut p, &[Frame::Padding, stream(id, 12_000, &data[12_000..26_000])]);
    raw(&mut p, &[stream(id, 5_000, &data[5_000..12_000])]);
    raw(&mut p, &[stream(id, 26_000, &data[26_000..])]);
    while p.server.accept_stream().is_some() {}
    assert!(read_all(&mut p.server, id) == data, "content differs");
    assert!(p.server.error().is_none());
}

#[test]
fn a_reset_in_the_record_of_placed_data_is_handled() {
    let mut p = pair_with(true);
    let id = p.client.open_stream().unwrap();
    let data = payload(20_000, 6);
    raw(&mut p, &[stream(id, 0, &data[..10_000])]);
    raw(
        &mut p,
        &[stream(id, 10_000, &data[10_000..]), Frame::StreamReset { stream_id: id, error_code: 7, final_size: 20_000 }],
    );
    assert!(p.server.error().is_none(), "{:?}", p.server.error());
    while p.server.accept_stream().is_some() {}
    let mut buf = [0u8; 100];
    assert_eq!(p.server.read(id, &mut buf), Err(StreamError::Reset(7)));
}

#[test]
fn placed_data_past_the_window_is_a_flow_control_error() {
    let mut p = pair_with(true);
    let id = p.client.open_stream().unwrap();
    let chunk = payload(16_000, 7);
    // The server application reads nothing: the initial 64 KiB window is all there is.
    for i in 0..5u64 {
        raw(&mut p, &[stream(id, i * 16_000, &chunk)]);
    }
    let err = p.server.error().expect("a flow control violation must fail the session");
    assert!(format!("{err}").contains("limit"), "{err}");
}
