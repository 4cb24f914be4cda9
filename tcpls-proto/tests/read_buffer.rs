//! The read buffer a connection asks the IO layer to fill: small when idle (what an idle
//! session keeps allocated), large while a bulk transfer fills it (few syscalls).
#![allow(clippy::unwrap_used)]

mod util;

use tcpls_proto::{Session, MIN_READ_CHUNK, READ_CHUNK};
use util::{payload, Pair};

/// Moves up to what `to` offers as its read buffer from `from`'s transmit buffer; returns the
/// offered size, or None when nothing was pending.
fn socket_read(from: &mut Session, to: &mut Session, p_now: std::time::Instant) -> Option<usize> {
    from.prepare_transmit(p_now);
    let pending = from.transmit_data(0).len();
    if pending == 0 {
        return None;
    }
    let buf = to.read_buffer(0);
    let offered = buf.len();
    let n = pending.min(offered);
    buf[..n].copy_from_slice(&from.transmit_data(0)[..n]);
    from.transmit_advance(0, n);
    to.handle_read(0, n, p_now);
    Some(offered)
}

#[test]
fn reads_grow_for_bulk_and_shrink_back_when_idle() {
    let mut p = Pair::established();
    let idle = p.server.read_buffer(0).len();
    assert!(idle <= 2 * MIN_READ_CHUNK, "an idle connection offers {idle} bytes");

    let id = p.client.open_stream().unwrap();
    let data = payload(8 << 20, 1);
    let (mut off, mut got, mut largest) = (0, Vec::new(), 0);
    let mut buf = vec![0u8; 1 << 20];
    while got.len() < data.len() {
        if off < data.len() {
            off += p.client.write(id, &data[off..]).unwrap();
        }
        while let Some(offered) = socket_read(&mut p.client, &mut p.server, p.now) {
            largest = largest.max(offered);
        }
        while p.server.accept_stream().is_some() {}
        while let Ok(Some(n)) = p.server.read(id, &mut buf) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        // Credit and ACKs back to the client, by the same socket reads (the data must keep
        // coming through `socket_read`, whose offers are what this test measures).
        while socket_read(&mut p.server, &mut p.client, p.now).is_some() {}
    }
    assert!(got == data, "content differs");
    assert!(largest >= READ_CHUNK, "bulk reads offered at most {largest} bytes");

    // Small exchanges afterwards: the buffer returns to its idle size.
    for i in 0..8u8 {
        p.client.write(id, &[i; 100]).unwrap();
        while socket_read(&mut p.client, &mut p.server, p.now).is_some() {}
        while let Ok(Some(n)) = p.server.read(id, &mut buf) {
            if n == 0 {
                break;
            }
        }
        p.drive();
    }
    let after = p.server.read_buffer(0).len();
    assert!(after <= 2 * MIN_READ_CHUNK, "after the bulk transfer the connection offers {after} bytes");
}
