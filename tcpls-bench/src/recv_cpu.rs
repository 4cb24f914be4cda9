//! `recv-cpu`: the CPU cost of TCPLS' receive path, on the sans-IO core, without sockets.
//!
//! A client and a server `tcpls_proto::Session` are joined in memory (as in
//! tcpls-proto/tests/util). The server sends `--bytes` (64 MiB) on one stream; the client
//! receives them with `zero_copy` on or off. Only the client's receive processing is measured,
//! in three non-inlined functions whose names start with `measured_`:
//! * `measured_handle_read`: `Session::handle_read` on bytes already in the read buffer (as
//!   the tokio layer does after a socket read: records decrypted, frames handled, stream bytes
//!   placed), then the events drained;
//! * `measured_next_chunk`: `recv_chunk`, as `RecvStream::read_chunk_with` does;
//! * `measured_consume`: `consume` (credit granted).
//!
//! Not measured: the server writing and sealing the records, the copy of the sealed bytes into
//! the client's read buffer (`socket_copy`: in a real process the kernel's `recv` makes it),
//! the check of every received byte against the payload (`tcpls_pattern::verify`), and delivering the client's
//! ACKs and credit back to the server. Under callgrind, `scripts/recv-cpu.sh` collects only
//! inside `measured_*` (`--toggle-collect`); without callgrind, the wall-clock time spent in
//! them is reported.
//!
//! The server produces records in batches (as much as flow control and its send buffer allow,
//! about 4 MiB); each batch is fully generated before the client processes it, so sealing and
//! opening never interleave inside the measured region.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use serde::Serialize;
use tcpls_proto::{tcpls_client_config, tcpls_server_config, Event, Session, SessionConfig, StreamId};

use crate::pki::{Pki, SERVER_NAME};
use crate::proto::{IO_SIZE, PAYLOAD_SEED};
use crate::Res;

#[derive(clap::Args)]
pub struct Options {
    /// Receive path of the client: on (SessionConfig::zero_copy = true) or off (copying path).
    #[arg(long, value_parser = parse_on_off, action = clap::ArgAction::Set, value_name = "on|off")]
    zero_copy: bool,
    /// Stream bytes to receive (binary multiples).
    #[arg(long, value_parser = crate::compare::parse_size, default_value = "64M")]
    bytes: u64,
    /// Print the result as JSON.
    #[arg(long)]
    json: bool,
}

fn parse_on_off(s: &str) -> Result<bool, String> {
    match s {
        "on" | "true" | "yes" => Ok(true),
        "off" | "false" | "no" => Ok(false),
        _ => Err(format!("expected on or off, got {s:?}")),
    }
}

#[derive(Debug, Serialize)]
pub struct RecvCpuReport {
    pub zero_copy: bool,
    pub bytes: u64,
    /// Sealed bytes (records, headers and tags included) the client processed.
    pub wire_bytes: u64,
    pub records_batches: u32,
    /// From the client's `SessionStats`.
    pub zero_copy_bytes: u64,
    pub copied_bytes: u64,
    /// Wall-clock time in the `measured_*` functions (meaningless under valgrind; use the
    /// instruction count there).
    pub measured_ns: u64,
    pub ns_per_byte: f64,
    /// Every byte matched the payload.
    pub verified: bool,
}

pub fn run(opts: Options) -> Res<()> {
    let report = measure(opts.zero_copy, opts.bytes)?;
    if opts.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        println!(
            "recv-cpu zero_copy={} bytes={} wire_bytes={} zero_copy_bytes={} copied_bytes={} measured {:.3} ms ({:.3} ns/byte) verified={}",
            if report.zero_copy { "on" } else { "off" },
            report.bytes,
            report.wire_bytes,
            report.zero_copy_bytes,
            report.copied_bytes,
            report.measured_ns as f64 / 1e6,
            report.ns_per_byte,
            report.verified,
        );
    }
    if !report.verified {
        return Err("received bytes differ from the payload".into());
    }
    Ok(())
}

/// Client-side state of the measurement.
struct Receiver {
    session: Session,
    stream: Option<StreamId>,
    received: u64,
    fin: bool,
    verified: bool,
    /// Wall-clock time spent in the measured functions.
    measured: Duration,
    now: Instant,
}

pub fn measure(zero_copy: bool, bytes: u64) -> Res<RecvCpuReport> {
    let pki = Pki::generate()?;
    let client_tls = Arc::new(tcpls_client_config(&pki.client_config()?));
    let server_tls = Arc::new(tcpls_server_config(&pki.server_config()?));
    let server_name = ServerName::try_from(SERVER_NAME)?.to_owned();
    let mut client = Session::client(client_tls, server_name, SessionConfig { zero_copy, ..SessionConfig::default() })?;
    let mut server = Session::server(server_tls, SessionConfig::default())?;
    let mut now = Instant::now();
    handshake(&mut client, &mut server, &mut now)?;

    let stream = server.open_stream()?;
    let mut rx = Receiver {
        session: client,
        stream: None,
        received: 0,
        fin: false,
        verified: true,
        measured: Duration::ZERO,
        now,
    };
    let mut sent = 0u64;
    let mut finished = false;
    let mut wire = Vec::new();
    let mut wire_bytes = 0u64;
    let mut batches = 0u32;
    let mut idle_rounds = 0;
    while !rx.fin {
        // Outside the measured region: the server writes what it can and seals it all.
        wire.clear();
        loop {
            let before = wire.len();
            while sent < bytes {
                let piece = tcpls_pattern::chunk(PAYLOAD_SEED, sent, (bytes - sent).min(IO_SIZE as u64) as usize);
                let taken = server.write(stream, piece)?;
                if taken == 0 {
                    break;
                }
                sent += taken as u64;
            }
            if sent == bytes && !finished {
                server.finish(stream)?;
                finished = true;
            }
            rx.now += Duration::from_micros(10);
            server.prepare_transmit(rx.now);
            let out = server.transmit_data(0);
            wire.extend_from_slice(out);
            let n = out.len();
            server.transmit_advance(0, n);
            if wire.len() == before {
                break;
            }
        }
        let consumed = receive_batch(&mut rx, &wire);
        wire_bytes += consumed as u64;
        if consumed < wire.len() {
            return Err(format!("the client stopped reading ({} of {} bytes of a batch)", consumed, wire.len()).into());
        }
        if let Some(e) = rx.session.error() {
            return Err(format!("client session failed: {e}").into());
        }
        batches += u32::from(!wire.is_empty());
        // Outside again: the client's ACKs and credit go back to the server.
        rx.session.prepare_transmit(rx.now);
        let back = rx.session.transmit_data(0).to_vec();
        rx.session.transmit_advance(0, back.len());
        server.handle_data(0, &back, rx.now);
        while server.poll_event().is_some() {}
        if wire.is_empty() && back.is_empty() {
            // Nothing moved: let timers (delayed ACKs) fire, a few times at most.
            idle_rounds += 1;
            if idle_rounds > 10 {
                return Err(format!("transfer stalled after {} of {bytes} bytes", rx.received).into());
            }
            rx.now += Duration::from_millis(30);
        } else {
            idle_rounds = 0;
        }
    }
    let stats = rx.session.stats();
    Ok(RecvCpuReport {
        zero_copy,
        bytes,
        wire_bytes,
        records_batches: batches,
        zero_copy_bytes: stats.zero_copy_bytes,
        copied_bytes: stats.copied_bytes,
        measured_ns: rx.measured.as_nanos() as u64,
        ns_per_byte: rx.measured.as_nanos() as f64 / bytes as f64,
        verified: rx.verified && rx.received == bytes,
    })
}

/// Completes the handshake of the in-memory pair (bounded).
fn handshake(client: &mut Session, server: &mut Session, now: &mut Instant) -> Res<()> {
    for _ in 0..1000 {
        *now += Duration::from_micros(10);
        let a = pump(client, server, *now);
        let b = pump(server, client, *now);
        while client.poll_event().is_some() {}
        while server.poll_event().is_some() {}
        if !a && !b && client.is_established() && server.is_established() {
            return Ok(());
        }
    }
    Err(format!("handshake did not complete: client {:?}, server {:?}", client.error(), server.error()).into())
}

fn pump(from: &mut Session, to: &mut Session, now: Instant) -> bool {
    from.prepare_transmit(now);
    let data = from.transmit_data(0).to_vec();
    if data.is_empty() {
        return false;
    }
    from.transmit_advance(0, data.len());
    to.handle_data(0, &data, now);
    true
}

/// Hands `wire` (sealed records) to the client piece by piece and reads the stream out.
/// Returns how many bytes of `wire` the client took. Only the `measured_*` functions it calls
/// count (see the module comment): this function itself only loops.
#[inline(never)]
fn receive_batch(rx: &mut Receiver, wire: &[u8]) -> usize {
    let mut pos = 0;
    while pos < wire.len() {
        let n = socket_copy(&mut rx.session, &wire[pos..]);
        if n == 0 {
            break;
        }
        pos += n;
        let t = Instant::now();
        measured_handle_read(rx, n);
        rx.measured += t.elapsed();
        let Some(id) = rx.stream else { continue };
        loop {
            let t = Instant::now();
            let next = measured_next_chunk(rx, id);
            rx.measured += t.elapsed();
            let Some(len) = next else { break };
            if len == 0 {
                rx.fin = true;
                break;
            }
            // Outside the measured functions: look at the same chunk again to check it.
            if let Ok(Some(chunk)) = rx.session.recv_chunk(id) {
                rx.verified &= tcpls_pattern::verify(PAYLOAD_SEED, rx.received, &chunk[..len]);
            }
            let t = Instant::now();
            measured_consume(rx, id, len);
            rx.measured += t.elapsed();
        }
    }
    pos
}

/// Measured: the records are processed (decrypted, frames handled, stream bytes placed), and
/// the events drained as the tokio layer does.
#[inline(never)]
fn measured_handle_read(rx: &mut Receiver, n: usize) {
    rx.session.handle_read(0, n, rx.now);
    while let Some(event) = rx.session.poll_event() {
        if let Event::StreamOpened(_) = event {
            rx.stream = rx.session.accept_stream().or(rx.stream);
        }
    }
}

/// Measured: the length of the next readable chunk (`Some(0)` at the end of the stream), as
/// `RecvStream::read_chunk_with` gets it.
#[inline(never)]
fn measured_next_chunk(rx: &mut Receiver, id: StreamId) -> Option<usize> {
    match rx.session.recv_chunk(id) {
        Ok(Some(chunk)) => Some(chunk.len()),
        Ok(None) | Err(_) => None,
    }
}

/// Measured: the application is done with `len` bytes (credit is granted).
#[inline(never)]
fn measured_consume(rx: &mut Receiver, id: StreamId, len: usize) {
    rx.received += len as u64;
    rx.session.consume(id, len);
}

/// Stands for the kernel's copy of socket bytes into the read buffer (not user-space receive
/// work): not measured.
#[inline(never)]
fn socket_copy(session: &mut Session, from: &[u8]) -> usize {
    let buf = session.read_buffer(0);
    let n = buf.len().min(from.len());
    buf[..n].copy_from_slice(&from[..n]);
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receives_and_verifies_both_paths() {
        for zero_copy in [true, false] {
            let r = measure(zero_copy, 3 << 20).expect("measure");
            assert!(r.verified, "{r:?}");
            assert_eq!(r.zero_copy_bytes + r.copied_bytes, 3 << 20, "{r:?}");
            if !zero_copy {
                assert_eq!(r.zero_copy_bytes, 0, "{r:?}");
            }
            assert!(r.wire_bytes > r.bytes, "{r:?}");
        }
    }
}
