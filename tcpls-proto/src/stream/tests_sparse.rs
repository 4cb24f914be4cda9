//! Receive memory follows what arrived (docs/SECURITY.md): bytes far ahead of the
//! in-order prefix are held sparse, never by allocating the window up to them.

use super::recv::RecvBuf;
use super::sparse::SEGMENT_OVERHEAD;
use super::INITIAL_MAX_STREAM_DATA;
use crate::frame::STREAM_FRAME_OVERHEAD;

const WINDOW: u64 = INITIAL_MAX_STREAM_DATA;

/// Most bytes of receive memory per byte a hostile peer sends as Stream frames (data plus the
/// frame's own fields; record overhead not even counted), whatever the pattern: documented in
/// PROTOCOL.md §4.2 and docs/SECURITY.md.
pub(crate) const RECV_MEMORY_PER_WIRE_BYTE: usize = 8;

/// Wire bytes of a Stream frame carrying `len` bytes.
fn wire(len: usize) -> usize {
    len + STREAM_FRAME_OVERHEAD
}

#[test]
fn one_byte_at_the_window_edge_costs_bytes_not_the_window() {
    let mut r = RecvBuf::new(16 << 20);
    r.insert(WINDOW - 1, b"x", false).unwrap();
    assert!(r.allocated() <= 1 + SEGMENT_OVERHEAD + 8, "{} bytes for one byte", r.allocated());
    assert_eq!(r.buffered(), 1);
    // The gap filled in order: the byte joins the storage and everything reads back.
    let data: Vec<u8> = (0..WINDOW - 1).map(|i| i as u8).collect();
    r.insert(0, &data, false).unwrap();
    let mut out = vec![0; WINDOW as usize];
    assert_eq!(r.read(&mut out), WINDOW as usize);
    assert_eq!(&out[..data.len()], &data[..]);
    assert_eq!(out[data.len()], b'x');
}

/// Hostile patterns of tiny frames: memory per wire byte stays under the documented constant,
/// and the bytes come out right once the gaps are filled.
#[test]
fn tiny_frames_cost_a_bounded_multiple_of_their_size() {
    type Pattern = fn(u64) -> Vec<(u64, usize)>;
    let patterns: [(&str, Pattern); 5] = [
        ("every other byte, descending", |w| (0..w / 2).rev().map(|i| (2 * i + 1, 1)).collect()),
        ("every other byte, ascending", |w| (0..w / 2).map(|i| (2 * i + 1, 1)).collect()),
        ("one byte every 97, descending", |w| (1..w / 97).rev().map(|i| (97 * i, 1)).collect()),
        ("one byte every 500", |w| (1..w / 500).map(|i| (500 * i, 1)).collect()),
        ("16-byte runs every 64", |w| (1..w / 64).map(|i| (64 * i, 16)).collect()),
    ];
    for (name, pattern) in patterns {
        let mut r = RecvBuf::new(16 << 20);
        let mut sent = 0;
        let mut peak = 0;
        let full: Vec<u8> = (0..WINDOW).map(|i| (i * 7) as u8).collect();
        for (offset, len) in pattern(WINDOW) {
            let o = offset as usize;
            r.insert(offset, &full[o..o + len], false).unwrap();
            sent += wire(len);
            peak = peak.max(r.allocated());
            assert!(
                r.allocated() <= RECV_MEMORY_PER_WIRE_BYTE * sent + 64,
                "{name}: {} bytes held after {sent} bytes sent",
                r.allocated()
            );
        }
        // Never more than about twice the credit either: storage and bitmap over at most the
        // credit, and sparse segments costing less than the span they would need.
        assert!(peak as u64 <= 2 * WINDOW + WINDOW / 8 + 2 * SEGMENT_OVERHEAD as u64, "{name}: peak {peak}");
        eprintln!("{name}: peak {peak} bytes, {:.1} per wire byte", peak as f64 / sent as f64);
        r.insert(0, &full, false).unwrap();
        let mut out = vec![0; WINDOW as usize];
        assert_eq!(r.read(&mut out), WINDOW as usize, "{name}");
        assert!(out == full, "{name}: bytes differ");
    }
}

/// The zero-copy path of in-order bulk data is unchanged: every record gets its slot.
#[test]
fn in_order_records_always_get_a_direct_slot() {
    let mut r = RecvBuf::new(16 << 20);
    let mut offset = 0u64;
    for i in 0..200u64 {
        let len = 16_000;
        let slot = r.direct_slot(offset, len + 40, len + 40).expect("in-order slot");
        slot[..len].fill(i as u8);
        r.commit_direct(offset, len, false).unwrap();
        offset += len as u64;
        if i % 3 == 0 {
            r.consume(usize::MAX);
        }
        if let Some(limit) = r.poll_max_data_update() {
            assert!(limit > offset);
        }
    }
}

/// Out of order near the prefix (multipath reordering), slots are granted once what arrived
/// justifies the storage; bytes that went sparse are moved in and read back in order.
#[test]
fn reordered_records_are_reassembled() {
    let mut r = RecvBuf::new(16 << 20);
    let len = 1000usize;
    let data: Vec<u8> = (0..40 * len).map(|i| (i / 3) as u8).collect();
    // Odd records first (as if the other connection lagged), then the even ones.
    for k in (1..40).step_by(2).chain((0..40).step_by(2)) {
        let at = k * len;
        match r.direct_slot(at as u64, len, 0) {
            Some(slot) => {
                slot.copy_from_slice(&data[at..at + len]);
                r.commit_direct(at as u64, len, false).unwrap();
            }
            None => r.insert(at as u64, &data[at..at + len], false).unwrap(),
        }
        assert!(r.allocated() <= 4 * r.buffered() + 2 * SEGMENT_OVERHEAD + 64, "{}", r.allocated());
    }
    let mut out = vec![0; data.len()];
    assert_eq!(r.read(&mut out), data.len());
    assert!(out == data);
}
