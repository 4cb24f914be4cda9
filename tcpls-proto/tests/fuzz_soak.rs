//! A deterministic soak over the bodies of the fuzz targets (`fuzz/src/lib.rs`, included as
//! is), so that CI exercises the same code paths on stable Rust without cargo-fuzz: ~20k
//! pseudo-random inputs from the workspace's seeded generator (`tcpls_test::Rng`), biased towards the structures each target
//! parses (record headers, inner plaintexts, frames) so that they get past the first check.
//! Any panic is a failure; the properties checked are those of the fuzz targets.
#![allow(clippy::unwrap_used)]

#[path = "../../fuzz/src/lib.rs"]
mod fuzz;

use std::net::SocketAddr;

use tcpls_proto::frame::{Frame, PeerTcpInfo};
use tcpls_proto::record::{CT_ALERT, CT_APPLICATION_DATA, CT_HANDSHAKE, MAX_CIPHERTEXT};
use tcpls_test::Rng;

/// What the fuzz paths draw beyond the workspace's generator (`tcpls_test::Rng`, xorshift64*).
trait Draw {
    fn u8(&mut self) -> u8;
    /// `bytes` of a random length below `n`.
    fn some_bytes(&mut self, n: usize) -> Vec<u8>;
    /// A length that is usually small and sometimes near the interesting limits.
    fn len(&mut self, max: usize) -> usize;
}

impl Draw for Rng {
    fn u8(&mut self) -> u8 {
        self.next_u64() as u8
    }
    fn some_bytes(&mut self, n: usize) -> Vec<u8> {
        let len = self.below(n);
        self.bytes(len)
    }
    fn len(&mut self, max: usize) -> usize {
        match self.below(8) {
            0 => max,
            1 => self.below(max + 1),
            _ => self.below(64.min(max) + 1),
        }
    }
}

/// Random edits: flip, overwrite, insert or remove a byte, or cut the tail.
fn mutate(rng: &mut Rng, data: &mut Vec<u8>) {
    for _ in 0..rng.below(3) {
        if data.is_empty() {
            data.push(rng.u8());
            continue;
        }
        let at = rng.below(data.len());
        match rng.below(5) {
            0 => data[at] ^= 1 << rng.below(8),
            1 => data[at] = rng.u8(),
            2 => data.insert(at, rng.u8()),
            3 => {
                data.remove(at);
            }
            _ => data.truncate(at),
        }
    }
}

fn deframer_input(rng: &mut Rng) -> Vec<u8> {
    let mut out = Vec::new();
    for _ in 0..rng.below(6) {
        let content_type = match rng.below(6) {
            0 => rng.u8(),
            1 => CT_ALERT,
            2 => CT_HANDSHAKE,
            _ => CT_APPLICATION_DATA,
        };
        let body = match rng.below(6) {
            0 => MAX_CIPHERTEXT,
            1 => MAX_CIPHERTEXT + 1 + rng.below(0xffff - MAX_CIPHERTEXT),
            2 => rng.below(MAX_CIPHERTEXT),
            _ => rng.below(100),
        };
        let version = if rng.chance(10) { rng.u8() } else { 3 };
        out.extend_from_slice(&[content_type, version, rng.u8(), (body >> 8) as u8, body as u8]);
        let have = if rng.chance(4) { rng.below(body + 1) } else { body };
        out.extend(rng.bytes(have.min(2000)));
        out.resize(out.len() + have.saturating_sub(2000), 0);
    }
    if rng.chance(3) {
        mutate(rng, &mut out);
    }
    out
}

fn record_open_input(rng: &mut Rng) -> Vec<u8> {
    let mode = rng.u8();
    let mut out = vec![mode];
    if mode & 1 == 0 {
        // Bytes as received: a header (mostly right) and a body.
        let body = rng.len(300);
        out.extend_from_slice(&[CT_APPLICATION_DATA, 3, 3, (body >> 8) as u8, body as u8]);
        out.extend(rng.bytes(body));
        mutate(rng, &mut out);
        return out;
    }
    // An inner plaintext: content, type, zero padding; sizes around the 2^14 + 1 limit.
    let content = match rng.below(4) {
        0 => (1 << 14) - 2 + rng.below(5),
        1 => rng.below(1 << 14),
        _ => rng.below(200),
    };
    let padding = match rng.below(4) {
        0 => rng.below(400),
        1 => rng.below(5),
        _ => 0,
    };
    out.extend(rng.bytes(content));
    out.push(match rng.below(8) {
        0 => 0,
        1 => rng.u8(),
        _ => CT_APPLICATION_DATA,
    });
    out.resize(out.len() + padding, 0);
    out
}

/// One frame with fields near what a session cares about. `own` is the parity of the stream
/// IDs the sender may open (0 client, 1 server).
fn frame_bytes(rng: &mut Rng, own: u32, out: &mut Vec<u8>) {
    let len = rng.len(1200);
    let data = rng.bytes(len);
    // Mostly legal values, so that sessions live long enough to reach deeper states.
    let stream_id = match rng.below(30) {
        0 => rng.next_u64() as u32,
        1 => own ^ 1, // a stream of the receiver's, maybe never opened
        _ => 2 * rng.below(24) as u32 + own,
    };
    let offset = match rng.below(30) {
        0 => rng.next_u64(),
        1 => 65536 + rng.below(100) as u64,
        2..=5 => 65536 - rng.below(2000) as u64,
        _ => rng.below(3000) as u64,
    };
    let connection_id = if rng.chance(4) { rng.next_u64() as u32 } else { 0 };
    let addr: SocketAddr =
        if rng.chance(2) { "192.0.2.1:443".parse().unwrap() } else { "[2001:db8::1]:8443".parse().unwrap() };
    let token = [rng.u8(); 32];
    let name: &[u8] = match rng.below(3) {
        0 => b"bbr",
        1 => b"",
        _ => b"cubic",
    };
    let frame = match rng.below(40) {
        24..=39 | 0..=6 => Frame::Stream { stream_id, offset, fin: rng.chance(8), data: &data },
        7 => Frame::Padding,
        8 => Frame::Ping,
        9 => Frame::Ack { connection_id, highest_record_seq: rng.next_u64() },
        10 if own == 1 || rng.chance(4) => Frame::NewToken { sequence: rng.below(100) as u32, token },
        11 => Frame::ConnectionReset { connection_id: connection_id | 1 },
        12 => Frame::NewAddress { address_id: rng.u8(), addr },
        13 => Frame::RemoveAddress { address_id: rng.u8() },
        14 => Frame::StreamChange { next_stream_id: stream_id, next_offset: offset },
        15 if rng.chance(8) => Frame::Rejoin { connection_id, session_ref: [rng.u8(); 16], proof: token },
        15 if rng.chance(4) => Frame::Join { token },
        16 => Frame::StreamReset { stream_id, final_size: offset, error_code: rng.next_u64() as u32 },
        17 => Frame::MaxStreamData { stream_id, maximum_offset: offset },
        18 => Frame::UserTimeout { timeout_ms: rng.next_u64() as u32 },
        19 => Frame::RttProbe { connection_id, timestamp_us: rng.next_u64() },
        20 => Frame::RttEcho { connection_id, timestamp_us: rng.next_u64() },
        21 => Frame::TcpInfo { connection_id, info: PeerTcpInfo::default() },
        22 => Frame::CongestionControl { connection_id, name },
        23 if rng.chance(2) => Frame::PathPriority { connection_id, backup: rng.chance(2) },
        _ => Frame::StreamSteer { stream_id, connection_id },
    };
    frame.encode(out);
}

fn frames_input(rng: &mut Rng) -> Vec<u8> {
    let mut out = Vec::new();
    for _ in 0..1 + rng.below(6) {
        let own = rng.below(2) as u32;
        frame_bytes(rng, own, &mut out);
    }
    if rng.chance(3) {
        mutate(rng, &mut out);
    }
    out
}

/// Input of `fuzz::session`: flags, then `sel len content` chunks (see its documentation).
fn session_input(rng: &mut Rng) -> Vec<u8> {
    let mut flags = rng.u8();
    // Bit 3 feeds the body as raw socket bytes: the sealed records reach deeper, so they get
    // three inputs in four.
    if !rng.chance(4) {
        flags &= !8;
    }
    let own = u32::from(flags & 1 == 0) ^ 1; // the attacker's stream parity
    let mut out = vec![flags];
    for _ in 0..1 + rng.below(8) {
        let (sel, content) = match rng.below(16) {
            0 if rng.chance(2) => (5, vec![2, rng.u8()]),
            0 => (5, rng.some_bytes(4)),
            // KeyUpdate (maybe with a bad byte), a NewSessionTicket stub, or garbage.
            1 => match rng.below(3) {
                0 => (6, vec![24, 0, 0, 1, rng.u8() % 3]),
                1 => (6, vec![4, 0, 0, 2, 1, 2]),
                _ => (6, rng.bytes(6)),
            },
            2 => {
                let sel = 7 | (rng.u8() & 0x78);
                (sel, rng.some_bytes(20))
            }
            _ => {
                let mut frames = Vec::new();
                for _ in 0..1 + rng.below(5) {
                    frame_bytes(rng, own, &mut frames);
                }
                if rng.chance(8) {
                    mutate(rng, &mut frames);
                }
                frames.truncate(1 << 14);
                (rng.below(5) as u8 | (rng.u8() & 0x80), frames)
            }
        };
        let len = content.len() as u16;
        out.push(sel);
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&content);
    }
    out
}

#[test]
fn deframer_soak() {
    let mut rng = Rng::new(1);
    for _ in 0..6000 {
        fuzz::deframer(&deframer_input(&mut rng));
    }
}

#[test]
fn record_open_soak() {
    let mut rng = Rng::new(2);
    for _ in 0..6000 {
        fuzz::record_open(&record_open_input(&mut rng));
    }
}

#[test]
fn frames_soak() {
    let mut rng = Rng::new(3);
    for _ in 0..6000 {
        fuzz::frames(&frames_input(&mut rng));
    }
}

#[test]
fn session_soak() {
    let mut rng = Rng::new(4);
    for _ in 0..2000 {
        fuzz::session(&session_input(&mut rng));
    }
}

/// Writes small seed corpora for the fuzz targets from the generators above:
/// `TCPLS_WRITE_SEEDS=1 cargo test -p tcpls-proto --test fuzz_soak -- --ignored`.
#[test]
#[ignore = "writes files into fuzz/corpus; run by hand"]
fn write_seed_corpora() {
    if std::env::var_os("TCPLS_WRITE_SEEDS").is_none() {
        return;
    }
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus");
    type Generator = fn(&mut Rng) -> Vec<u8>;
    let generators: [(&str, Generator); 3] =
        [("deframer", deframer_input), ("record_open", record_open_input), ("session", session_input)];
    for (target, generate) in generators {
        let dir = root.join(target);
        std::fs::create_dir_all(&dir).unwrap();
        let mut rng = Rng::new(99);
        for i in 0..12 {
            std::fs::write(dir.join(format!("seed-{i:02}")), generate(&mut rng)).unwrap();
        }
    }
}
