//! Checks the test vectors of docs/PROTOCOL.md §10 against the codec, both ways, so the normative
//! document and the code cannot drift apart.

use std::collections::BTreeSet;
use std::net::SocketAddr;

use super::{Frame, FrameError, FrameReader, FrameType, PeerTcpInfo};

const DOC: &str = include_str!("../../../docs/PROTOCOL.md");

/// One vector as written in the document.
#[derive(Debug)]
pub(super) struct DocVector {
    pub(super) name: String,
    pub(super) frames: Vec<String>,
    pub(super) bytes: Vec<u8>,
}

/// Collects the `vector:` / `frame:` / `hex:` lines of every fenced block.
pub(super) fn doc_vectors() -> Vec<DocVector> {
    let mut vectors: Vec<DocVector> = Vec::new();
    let mut in_fence = false;
    for line in DOC.lines() {
        let line = line.trim();
        if line.starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if !in_fence {
            continue;
        }
        if let Some(name) = line.strip_prefix("vector:") {
            vectors.push(DocVector { name: name.trim().to_owned(), frames: Vec::new(), bytes: Vec::new() });
        } else if let Some(frame) = line.strip_prefix("frame:") {
            let v = vectors.last_mut().expect("frame: line before any vector: line");
            v.frames.push(frame.trim().to_owned());
        } else if let Some(hex) = line.strip_prefix("hex:") {
            let v = vectors.last_mut().expect("hex: line before any vector: line");
            assert!(v.bytes.is_empty(), "vector {} has two hex lines", v.name);
            v.bytes = parse_hex(hex);
        }
    }
    vectors
}

fn parse_hex(s: &str) -> Vec<u8> {
    let digits: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    assert!(digits.len() % 2 == 0, "odd number of hex digits in {s:?}");
    digits
        .chunks(2)
        .map(|pair| {
            let pair = std::str::from_utf8(pair).expect("hex digits are ASCII");
            u8::from_str_radix(pair, 16).expect("invalid hex digit")
        })
        .collect()
}

fn token(first: u8) -> [u8; 32] {
    std::array::from_fn(|i| first.wrapping_add(i as u8))
}

fn addr(s: &str) -> SocketAddr {
    s.parse().expect("test address")
}

/// The frames each vector must decode to, in reader order (last frame of the record first).
pub(super) fn expected(name: &str) -> Option<Vec<Frame<'static>>> {
    let one = |f: Frame<'static>| Some(vec![f]);
    match name {
        "padding" => one(Frame::Padding),
        "ping" => one(Frame::Ping),
        "stream" => one(Frame::Stream { stream_id: 2, offset: 0, fin: false, data: b"abc" }),
        "stream-fin" => one(Frame::Stream { stream_id: 4, offset: 65536, fin: true, data: b"hello" }),
        "ack" => one(Frame::Ack { connection_id: 1, highest_record_seq: 0x1234 }),
        "new-token" => one(Frame::NewToken { sequence: 1, token: token(0x00) }),
        "connection-reset" => one(Frame::ConnectionReset { connection_id: 2 }),
        "new-address-v4" => one(Frame::NewAddress { address_id: 1, addr: addr("192.0.2.10:443") }),
        "new-address-v6" => one(Frame::NewAddress { address_id: 2, addr: addr("[2001:db8::1]:8443") }),
        "remove-address" => one(Frame::RemoveAddress { address_id: 1 }),
        "stream-change" => one(Frame::StreamChange { next_stream_id: 6, next_offset: 16384 }),
        "join" => one(Frame::Join { token: token(0xa0) }),
        "stream-reset" => one(Frame::StreamReset { stream_id: 8, final_size: 1000, error_code: 2 }),
        "max-stream-data" => one(Frame::MaxStreamData { stream_id: 4, maximum_offset: 131072 }),
        "user-timeout" => one(Frame::UserTimeout { timeout_ms: 30000 }),
        "rtt-probe" => one(Frame::RttProbe { connection_id: 1, timestamp_us: 1_000_000 }),
        "rtt-echo" => one(Frame::RttEcho { connection_id: 1, timestamp_us: 1_000_000 }),
        "tcp-info-request" => one(Frame::TcpInfoRequest { connection_id: 0 }),
        "tcp-info" => one(Frame::TcpInfo {
            connection_id: 1,
            info: PeerTcpInfo {
                rtt_us: 20_000,
                rttvar_us: 5_000,
                cwnd: 10,
                total_retrans: 3,
                delivery_rate: 1_250_000,
                bytes_acked: 1_048_576,
            },
        }),
        "address-probe" => one(Frame::AddressProbe { connection_id: 1 }),
        "address-echo-v4" => one(Frame::AddressEcho { connection_id: 1, addr: addr("198.51.100.7:50000") }),
        "address-echo-v6" => one(Frame::AddressEcho { connection_id: 2, addr: addr("[2001:db8:1::2]:50001") }),
        "rate-limit" => one(Frame::RateLimit { connection_id: 1, bytes_per_second: 12_500_000 }),
        "congestion-control" => one(Frame::CongestionControl { connection_id: 1, name: b"bbr" }),
        "stream-steer" => one(Frame::StreamSteer { stream_id: 4, connection_id: 1 }),
        "stream-steer-any" => one(Frame::StreamSteer { stream_id: 4, connection_id: 0xFFFF_FFFF }),
        "path-priority" => one(Frame::PathPriority { connection_id: 1, backup: true }),
        "rejoin" => one(Frame::Rejoin {
            connection_id: 0x8000_0000,
            session_ref: std::array::from_fn(|i| 0xc0 + i as u8),
            proof: token(0xd0),
        }),
        "record-stream-max-stream-data-padding" => Some(vec![
            Frame::Padding,
            Frame::MaxStreamData { stream_id: 1, maximum_offset: 131072 },
            Frame::Stream { stream_id: 0, offset: 0, fin: false, data: b"hi" },
        ]),
        _ => None,
    }
}

/// Every vector name `expected` knows, so a vector deleted from the document is noticed.
const NAMES: [&str; 29] = [
    "padding",
    "ping",
    "stream",
    "stream-fin",
    "ack",
    "new-token",
    "connection-reset",
    "new-address-v4",
    "new-address-v6",
    "remove-address",
    "stream-change",
    "join",
    "stream-reset",
    "max-stream-data",
    "user-timeout",
    "rtt-probe",
    "rtt-echo",
    "tcp-info-request",
    "tcp-info",
    "address-probe",
    "address-echo-v4",
    "address-echo-v6",
    "rate-limit",
    "congestion-control",
    "stream-steer",
    "stream-steer-any",
    "path-priority",
    "rejoin",
    "record-stream-max-stream-data-padding",
];

/// The `frame:` notation of the document: Debug, except that byte strings are quoted text and
/// tokens are hex, which is how a reader of the document wants to see them.
fn render(frame: &Frame<'_>) -> String {
    let hex = |t: &[u8]| t.iter().map(|b| format!("{b:02x}")).collect::<String>();
    let text = |b: &[u8]| format!("{:?}", std::str::from_utf8(b).expect("vector bytes are text"));
    match frame {
        Frame::Stream { stream_id, offset, fin, data } => {
            format!("Stream {{ stream_id: {stream_id}, offset: {offset}, fin: {fin}, data: {} }}", text(data))
        }
        Frame::NewToken { sequence, token } => {
            format!("NewToken {{ sequence: {sequence}, token: {} }}", hex(token))
        }
        Frame::Join { token } => format!("Join {{ token: {} }}", hex(token)),
        Frame::Rejoin { connection_id, session_ref, proof } => format!(
            "Rejoin {{ connection_id: {connection_id}, session_ref: {}, proof: {} }}",
            hex(session_ref),
            hex(proof)
        ),
        Frame::CongestionControl { connection_id, name } => {
            format!("CongestionControl {{ connection_id: {connection_id}, name: {} }}", text(name))
        }
        other => format!("{other:?}"),
    }
}

#[test]
fn doc_vectors_match_the_codec() {
    let vectors = doc_vectors();
    let in_doc: BTreeSet<&str> = vectors.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(in_doc.len(), vectors.len(), "duplicate vector names");
    assert_eq!(in_doc, NAMES.into_iter().collect::<BTreeSet<_>>());

    for v in &vectors {
        let want = expected(&v.name).expect("vector without expected frames");
        let decoded: Result<Vec<Frame<'_>>, FrameError> = FrameReader::new(&v.bytes).collect();
        assert_eq!(decoded.as_ref(), Ok(&want), "decoding vector {}", v.name);

        let rendered: Vec<String> = want.iter().map(render).collect();
        assert_eq!(rendered, v.frames, "frame: lines of vector {}", v.name);

        // Wire order is the reverse of reader order.
        let mut encoded = Vec::new();
        for f in want.iter().rev() {
            f.encode(&mut encoded);
        }
        assert_eq!(encoded, v.bytes, "encoding vector {}", v.name);
        let len: usize = want.iter().map(Frame::encoded_len).sum();
        assert_eq!(len, v.bytes.len(), "encoded_len of vector {}", v.name);
    }
}

#[test]
fn vectors_cover_every_frame_type_and_address_family() {
    let frames: Vec<Frame<'static>> = NAMES.into_iter().flat_map(|n| expected(n).expect("named vector")).collect();
    for t in FrameType::ALL {
        assert!(frames.iter().any(|f| f.frame_type() == t), "no vector for {t:?}");
    }
    for v6 in [false, true] {
        assert!(frames.iter().any(|f| matches!(f, Frame::NewAddress { addr, .. } if addr.is_ipv6() == v6)));
        assert!(frames.iter().any(|f| matches!(f, Frame::AddressEcho { addr, .. } if addr.is_ipv6() == v6)));
    }
}

#[test]
fn cut_vectors_fail_or_parse_differently() {
    for v in doc_vectors() {
        let whole: Vec<_> = FrameReader::new(&v.bytes).collect();
        for cut in 1..=v.bytes.len() {
            let parsed: Vec<_> = FrameReader::new(&v.bytes[cut..]).collect();
            assert_ne!(parsed, whole, "vector {} cut by {cut}", v.name);
            for item in &parsed {
                if let Err(e) = item {
                    assert!(
                        matches!(e, FrameError::Truncated { .. } | FrameError::Malformed { .. }),
                        "vector {} cut by {cut}: {e:?}",
                        v.name
                    );
                }
            }
        }
    }
}
