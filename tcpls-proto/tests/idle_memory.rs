//! What an idle session keeps allocated (the goal: at most 16 KiB per idle session, docs/PERFORMANCE.md): after
//! a handshake and a one-byte echo on a stream, moved through the IO layer's path
//! (`read_buffer` / `handle_read`, `transmit_data` / `transmit_advance`) with reads that drain
//! the socket, a session holds no empty read, transmit, send or scratch buffer. Measured with
//! the counting allocator, over many pairs.
#![allow(clippy::unwrap_used)]

#[path = "util/counting_alloc.rs"]
mod counting_alloc;
mod util;

use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use tcpls_proto::{tcpls_client_config, tcpls_server_config, Session};
use util::{test_config, Pki};

/// One "socket read" of `to` from what `from` has sealed: at most what `to` offers as its read
/// buffer, like a socket read of a nonblocking socket that then has nothing more. Returns
/// whether any byte moved.
fn socket(from: &mut Session, to: &mut Session, now: Instant) -> bool {
    from.prepare_transmit(now);
    let pending = from.transmit_data(0).len();
    if pending == 0 {
        return false;
    }
    let buf = to.read_buffer(0);
    let n = pending.min(buf.len());
    buf[..n].copy_from_slice(&from.transmit_data(0)[..n]);
    from.transmit_advance(0, n);
    to.handle_read(0, n, now);
    true
}

/// Moves bytes both ways until nothing moves, honouring near timers (delayed ACKs).
fn settle(client: &mut Session, server: &mut Session, now: &mut Instant) {
    let mut timers = 0;
    for _ in 0..10_000 {
        *now += Duration::from_micros(10);
        let a = socket(client, server, *now);
        let b = socket(server, client, *now);
        while client.poll_event().is_some() {}
        while server.poll_event().is_some() {}
        if !a && !b && !util::advance_to_next_timer(now, [&*client, &*server], &mut timers) {
            return;
        }
    }
    panic!("the pair did not settle");
}

/// A pair after a handshake and a one-byte echo on a client stream, settled.
fn echoed_pair(client_config: &Arc<rustls::ClientConfig>, server_config: &Arc<rustls::ServerConfig>) -> [Session; 2] {
    let name = ServerName::try_from("localhost").unwrap();
    let mut client = Session::client(client_config.clone(), name, test_config()).unwrap();
    let mut server = Session::server(server_config.clone(), test_config()).unwrap();
    let mut now = Instant::now();
    settle(&mut client, &mut server, &mut now);
    assert!(client.is_established() && server.is_established());
    let id = client.open_stream().unwrap();
    assert_eq!(client.write(id, b"x").unwrap(), 1);
    settle(&mut client, &mut server, &mut now);
    assert_eq!(server.accept_stream(), Some(id));
    let mut byte = [0u8; 1];
    assert_eq!(server.read(id, &mut byte).unwrap(), Some(1));
    assert_eq!(server.write(id, &byte).unwrap(), 1);
    settle(&mut client, &mut server, &mut now);
    assert_eq!(client.read(id, &mut byte).unwrap(), Some(1));
    assert_eq!(&byte, b"x", "the echo differs");
    settle(&mut client, &mut server, &mut now);
    [client, server]
}

#[test]
fn an_idle_session_holds_no_empty_buffers() {
    let pki = Pki::new();
    let client_config = Arc::new(tcpls_client_config(&pki.client_config(&[])));
    let server_config = Arc::new(tcpls_server_config(&pki.server_config(&[])));
    // First use (lazy statics, the configs' caches) before measuring.
    drop(echoed_pair(&client_config, &server_config));

    const PAIRS: usize = 32;
    let before = counting_alloc::live();
    let pairs: Vec<[Session; 2]> = (0..PAIRS).map(|_| echoed_pair(&client_config, &server_config)).collect();
    let per_session = counting_alloc::live().saturating_sub(before) / (2 * PAIRS);
    // Before the buffers were released when idle: 55 044 bytes (16 KiB scratch, 16 KiB read buffer, 8 KiB transmit buffer,
    // 4 KiB stream send buffer and the rest); after: 7 493 (the sessions' own state).
    assert!(per_session <= 16 * 1024, "an idle session holds {per_session} bytes");
    eprintln!("an idle session holds {per_session} bytes (core only, no IO layer)");
    drop(pairs);
}
