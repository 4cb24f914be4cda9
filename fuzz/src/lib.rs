//! The bodies of the fuzz targets, as plain functions of the input bytes.
//!
//! `fuzz_targets/*.rs` hand them libFuzzer's inputs; `tcpls-proto/tests/fuzz_soak.rs` includes
//! this very file (`#[path]`) and runs them over pseudo-random inputs, so CI exercises the same
//! code paths on stable Rust without cargo-fuzz. Every body panics (and so reports a crash)
//! only when the code under test breaks one of the properties asserted here.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
#![allow(dead_code)]

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_128_GCM};
use rustls::crypto::{ActiveKeyExchange, SharedSecret, SupportedKxGroup};
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::sign::{CertifiedKey, Signer, SigningKey, SingleCertAndKey};
use rustls::{ClientConfig, NamedGroup, ServerConfig, SignatureAlgorithm, SignatureScheme};
use tcpls_proto::frame::FrameReader;
use tcpls_proto::insecure::AcceptAnyServerCertificate;
use tcpls_proto::record::{
    next_record, RecordKey, RxBuf, TxBuf, CT_ALERT, CT_APPLICATION_DATA, CT_HANDSHAKE, HEADER_LEN, MAX_CIPHERTEXT,
    MAX_PLAINTEXT, TAG_LEN,
};
use tcpls_proto::{tcpls_client_config, tcpls_server_config, AlertCode, Error, Event, Session, SessionConfig};

// ---------------------------------------------------------------------------------- deframer

/// Walks the records of `data` with `next_record`: every span it returns must be a whole,
/// well-sized record of the buffer, "incomplete" must really be incomplete, and an error must
/// carry one of the two alerts a bad header deserves. The same bytes arriving in pieces through
/// a connection's receive buffer must yield the same records and the same end.
pub fn deframer(data: &[u8]) {
    let mut spans = Vec::new();
    let mut rest = data;
    let end = loop {
        match next_record(rest) {
            Ok(Some(span)) => {
                let body = usize::from(u16::from_be_bytes([rest[3], rest[4]]));
                assert_eq!(span.content_type, rest[0]);
                assert_eq!(span.len, HEADER_LEN + body);
                assert!(body <= MAX_CIPHERTEXT, "{span:?} exceeds the ciphertext limit");
                assert!(span.len <= rest.len());
                spans.push(span);
                rest = &rest[span.len..];
            }
            Ok(None) => {
                if let Some(header) = rest.get(..HEADER_LEN) {
                    let body = usize::from(u16::from_be_bytes([header[3], header[4]]));
                    assert!(body <= MAX_CIPHERTEXT, "waiting for an oversized record");
                    assert!(HEADER_LEN + body > rest.len(), "a whole record reported incomplete");
                }
                break None;
            }
            Err(e) => {
                assert!(
                    matches!(e.alert, AlertCode::DecodeError | AlertCode::RecordOverflow),
                    "header error with alert {:?}: {e}",
                    e.alert
                );
                break Some(e.alert);
            }
        }
    };

    let mut rx = RxBuf::default();
    let mut incremental = Vec::new();
    let mut incremental_end = None;
    let mut fed = 0;
    let mut i = 0;
    'feed: while fed < data.len() {
        // Piece sizes come from the data itself: 1 to ~3000 bytes.
        let size = 1 + usize::from(data[i % data.len()]) * 12;
        i += 1;
        let piece = &data[fed..(fed + size).min(data.len())];
        fed += piece.len();
        rx.extend(piece);
        loop {
            match next_record(rx.data()) {
                Ok(Some(span)) => {
                    incremental.push(span);
                    rx.consume(span.len);
                }
                Ok(None) => break,
                Err(e) => {
                    incremental_end = Some(e.alert);
                    break 'feed;
                }
            }
        }
    }
    assert_eq!(incremental, spans);
    assert_eq!(incremental_end, end);
}

// ------------------------------------------------------------------------------- record_open

const KEY: [u8; 16] = *b"tcpls fuzz key!!";
const IV: [u8; 12] = *b"fuzz the iv.";

/// Seals `inner` (a whole TLSInnerPlaintext: content, type, padding) as record number `seq`,
/// with no limit on its size, the way a hostile peer holding the keys could.
fn seal_inner(inner: &[u8], seq: u64) -> Vec<u8> {
    let key = LessSafeKey::new(UnboundKey::new(&AES_128_GCM, &KEY).unwrap());
    let mut nonce = IV;
    for (b, s) in nonce[4..].iter_mut().zip(seq.to_be_bytes()) {
        *b ^= s;
    }
    let body = inner.len() + TAG_LEN;
    let len = u16::try_from(body).unwrap();
    let header = [CT_APPLICATION_DATA, 3, 3, (len >> 8) as u8, len as u8];
    let mut sealed = inner.to_vec();
    key.seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(header), &mut sealed).unwrap();
    let mut record = header.to_vec();
    record.extend_from_slice(&sealed);
    record
}

/// `RecordKey::open_in_place` on attacker bytes. Mode bit 0 of the first byte: the rest is a
/// whole record as received (it almost never authenticates; whatever happens must be
/// consistent), or the rest is a TLSInnerPlaintext that we seal with the right key first, so
/// that the checks behind the AEAD (content type, padding, size) are reached and their verdict
/// can be predicted exactly. Bit 1 flips one byte of the sealed record.
pub fn record_open(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let seq = u64::from(mode >> 2);
    let mut opener = RecordKey::from_raw(&AES_128_GCM, &KEY, &IV, seq).unwrap();
    if mode & 1 == 0 {
        let mut record = rest.to_vec();
        match opener.open_in_place(&mut record) {
            Ok((content_type, range)) => {
                assert_ne!(content_type, 0);
                assert!(range.start == HEADER_LEN && range.end <= record.len());
                assert!(range.len() <= MAX_PLAINTEXT);
                assert_eq!(opener.seq(), seq + 1);
            }
            Err(e) => assert!(
                matches!(
                    e.alert,
                    AlertCode::DecodeError
                        | AlertCode::UnexpectedMessage
                        | AlertCode::BadRecordMac
                        | AlertCode::RecordOverflow
                ),
                "{e}"
            ),
        }
        return;
    }
    // Keep the record length expressible in the 16-bit header.
    let inner = &rest[..rest.len().min(usize::from(u16::MAX) - TAG_LEN)];
    let mut record = seal_inner(inner, seq);
    if mode & 2 != 0 {
        let at = usize::from(mode) * 7919 % record.len();
        record[at] ^= 1 << (mode % 8);
        let e = opener.open_in_place(&mut record).expect_err("a tampered record opened");
        let expected = if at == 0 {
            AlertCode::UnexpectedMessage // the outer type is no longer application_data
        } else {
            AlertCode::BadRecordMac
        };
        assert_eq!(e.alert, expected, "{e}");
        return;
    }
    let result = opener.open_in_place(&mut record);
    let type_pos = inner.iter().rposition(|&b| b != 0);
    match (result, type_pos) {
        (Err(e), _) if inner.len() > MAX_PLAINTEXT + 1 => {
            assert_eq!(e.alert, AlertCode::RecordOverflow, "{e}");
        }
        (Err(e), None) => assert_eq!(e.alert, AlertCode::UnexpectedMessage, "{e}"),
        (Ok((content_type, range)), Some(pos)) if inner.len() <= MAX_PLAINTEXT + 1 => {
            assert_eq!(content_type, inner[pos]);
            assert_eq!(&record[range], &inner[..pos]);
            // Without padding, our own sealer must produce exactly these bytes.
            if pos + 1 == inner.len() {
                let mut sealer = RecordKey::from_raw(&AES_128_GCM, &KEY, &IV, seq).unwrap();
                let mut tx = TxBuf::default();
                sealer.seal(inner[pos], &inner[..pos], &mut tx).unwrap();
                assert_eq!(tx.data(), &seal_inner(inner, seq)[..]);
            }
        }
        (result, _) => panic!("{} inner bytes: unexpected {result:?}", inner.len()),
    }
    assert_eq!(opener.seq(), seq + 1, "an authentic record uses up its sequence number");
}

// ------------------------------------------------------------------------------------ frames

/// Frame codec: decoding arbitrary record plaintext must never panic, and every frame that
/// decodes must re-encode to exactly the bytes it came from and decode back to itself.
pub fn frames(plaintext: &[u8]) {
    let mut reader = FrameReader::new(plaintext);
    let mut end = plaintext.len();
    while let Some(item) = reader.next() {
        let Ok(frame) = item else { break };
        let start = reader.remaining();
        assert!(start <= end);

        let mut encoded = Vec::with_capacity(frame.encoded_len());
        frame.encode(&mut encoded);
        assert_eq!(encoded.len(), frame.encoded_len());
        // One encoding per frame: re-encoding gives back the parsed bytes.
        assert_eq!(&encoded[..], &plaintext[start..end]);

        let mut again = FrameReader::new(&encoded);
        assert_eq!(again.next(), Some(Ok(frame)));
        assert_eq!(again.remaining(), 0);
        assert_eq!(again.next(), None);
        end = start;
    }
}

// ----------------------------------------------------------------------------------- session

/// A fixed self-signed Ed25519 certificate for `localhost` (test material, never used outside
/// fuzzing). Its key is not needed: the server's signature is [`FreeSigningKey`]'s.
#[rustfmt::skip]
const CERT_DER: &[u8] = &[
    0x30, 0x82, 0x01, 0x55, 0x30, 0x82, 0x01, 0x07, 0xa0, 0x03, 0x02, 0x01, 0x02, 0x02, 0x14, 0x54,
    0xd0, 0xd2, 0xe7, 0x54, 0x4d, 0xcb, 0x26, 0x2e, 0xf9, 0x11, 0x20, 0x2a, 0x50, 0x80, 0x9b, 0xde,
    0xa6, 0x74, 0xa0, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x30, 0x14, 0x31, 0x12, 0x30, 0x10,
    0x06, 0x03, 0x55, 0x04, 0x03, 0x0c, 0x09, 0x6c, 0x6f, 0x63, 0x61, 0x6c, 0x68, 0x6f, 0x73, 0x74,
    0x30, 0x20, 0x17, 0x0d, 0x32, 0x36, 0x31, 0x31, 0x32, 0x32, 0x31, 0x30, 0x33, 0x32, 0x30, 0x30,
    0x5a, 0x18, 0x0f, 0x32, 0x31, 0x32, 0x36, 0x31, 0x30, 0x32, 0x39, 0x31, 0x30, 0x33, 0x32, 0x30,
    0x30, 0x5a, 0x30, 0x14, 0x31, 0x12, 0x30, 0x10, 0x06, 0x03, 0x55, 0x04, 0x03, 0x0c, 0x09, 0x6c,
    0x6f, 0x63, 0x61, 0x6c, 0x68, 0x6f, 0x73, 0x74, 0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65,
    0x70, 0x03, 0x21, 0x00, 0x95, 0x0f, 0x7b, 0xdf, 0x60, 0xf3, 0xe7, 0x51, 0xb9, 0x95, 0xa7, 0x34,
    0x9c, 0x2e, 0xa0, 0x9c, 0x6a, 0xee, 0x90, 0x80, 0xee, 0x3e, 0x6d, 0x3a, 0xfa, 0x2e, 0x26, 0xa6,
    0xe3, 0x7a, 0x07, 0xbb, 0xa3, 0x69, 0x30, 0x67, 0x30, 0x1d, 0x06, 0x03, 0x55, 0x1d, 0x0e, 0x04,
    0x16, 0x04, 0x14, 0x94, 0xe1, 0xf6, 0x2c, 0x1d, 0x21, 0x23, 0x01, 0x4b, 0xbf, 0xd4, 0xe2, 0x33,
    0x19, 0x23, 0xaa, 0xb3, 0x7f, 0x9c, 0x4b, 0x30, 0x1f, 0x06, 0x03, 0x55, 0x1d, 0x23, 0x04, 0x18,
    0x30, 0x16, 0x80, 0x14, 0x94, 0xe1, 0xf6, 0x2c, 0x1d, 0x21, 0x23, 0x01, 0x4b, 0xbf, 0xd4, 0xe2,
    0x33, 0x19, 0x23, 0xaa, 0xb3, 0x7f, 0x9c, 0x4b, 0x30, 0x0f, 0x06, 0x03, 0x55, 0x1d, 0x13, 0x01,
    0x01, 0xff, 0x04, 0x05, 0x30, 0x03, 0x01, 0x01, 0xff, 0x30, 0x14, 0x06, 0x03, 0x55, 0x1d, 0x11,
    0x04, 0x0d, 0x30, 0x0b, 0x82, 0x09, 0x6c, 0x6f, 0x63, 0x61, 0x6c, 0x68, 0x6f, 0x73, 0x74, 0x30,
    0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x41, 0x00, 0x76, 0x2c, 0x57, 0xba, 0x17, 0x46, 0x51,
    0xf0, 0x81, 0x0f, 0x57, 0x5c, 0x81, 0x24, 0xc1, 0x70, 0xc2, 0xb3, 0xbf, 0x37, 0x3e, 0xd9, 0x86,
    0x9a, 0xbc, 0x5b, 0x0f, 0xa7, 0xa8, 0x05, 0x88, 0x8c, 0x53, 0xc6, 0xde, 0x0d, 0x89, 0xf2, 0xc0,
    0xb1, 0xb3, 0x63, 0x7f, 0x96, 0x1f, 0xc9, 0x4a, 0x56, 0xc4, 0xa4, 0x39, 0x43, 0x45, 0x93, 0x8a,
    0x84, 0xf9, 0x89, 0xeb, 0x72, 0x36, 0x84, 0xed, 0x08,
];

/// Receive window of the fuzzed sessions. The application reads only when the input says so,
/// so most streams stay at the initial 64 KiB credit.
const WINDOW: u64 = 128 << 10;

/// Most bytes one stream's receive half may hold: storage over at most its window, the
/// out-of-order bitmap (an eighth of it), and sparse segments for bytes past the storage that
/// cost less than the span they would need (so at most about the window again; see
/// `stream/recv.rs`), plus rounding.
const PER_STREAM_BOUND: usize = 2 * (WINDOW as usize) + (WINDOW as usize) / 8 + 256;

/// Most receive memory per byte the victim received on the wire (`RECV_MEMORY_PER_WIRE_BYTE`
/// in tcpls-proto's stream tests; PROTOCOL.md §4.2), plus a small allocation per stream.
const RECV_MEMORY_PER_WIRE_BYTE: usize = 8;
const PER_STREAM_FLOOR: usize = 256;

/// A key exchange that costs nothing, for fuzzing only: every share is 32 fixed bytes and
/// both sides derive the same fixed secret. The handshake is still rustls' own (messages,
/// transcript, key schedule, Finished checks); only the public-key operations go (this, and
/// [`FreeSigningKey`]), which with two handshakes per input held the target to ~300 inputs per
/// second.
#[derive(Debug)]
struct FreeKeyExchange;

static FREE_KEY_EXCHANGE: FreeKeyExchange = FreeKeyExchange;

impl SupportedKxGroup for FreeKeyExchange {
    fn start(&self) -> Result<Box<dyn ActiveKeyExchange>, rustls::Error> {
        Ok(Box::new(FreeShare))
    }
    fn name(&self) -> NamedGroup {
        NamedGroup::X25519
    }
}

struct FreeShare;

impl ActiveKeyExchange for FreeShare {
    fn complete(self: Box<Self>, peer_pub_key: &[u8]) -> Result<SharedSecret, rustls::Error> {
        if peer_pub_key.len() != 32 {
            return Err(rustls::PeerMisbehaved::InvalidKeyShare.into());
        }
        Ok(SharedSecret::from(&[0x42u8; 32][..]))
    }
    fn pub_key(&self) -> &[u8] {
        &[0x24; 32]
    }
    fn group(&self) -> NamedGroup {
        NamedGroup::X25519
    }
}

/// A signing key that signs nothing, for fuzzing only (the client accepts any signature): the
/// Ed25519 signature of every handshake was a quarter of the `session` target's time.
#[derive(Debug)]
struct FreeSigningKey;

impl SigningKey for FreeSigningKey {
    fn choose_scheme(&self, offered: &[SignatureScheme]) -> Option<Box<dyn Signer>> {
        offered.contains(&SignatureScheme::ED25519).then(|| Box::new(FreeSigner) as Box<dyn Signer>)
    }
    fn algorithm(&self) -> SignatureAlgorithm {
        SignatureAlgorithm::ED25519
    }
}

#[derive(Debug)]
struct FreeSigner;

impl Signer for FreeSigner {
    fn sign(&self, _message: &[u8]) -> Result<Vec<u8>, rustls::Error> {
        Ok(vec![0; 64])
    }
    fn scheme(&self) -> SignatureScheme {
        SignatureScheme::ED25519
    }
}

struct Configs {
    client: Arc<ClientConfig>,
    server: Arc<ServerConfig>,
}

/// Built once per process: certificate parsing and config building are not what we fuzz.
fn configs() -> &'static Configs {
    static CONFIGS: OnceLock<Configs> = OnceLock::new();
    CONFIGS.get_or_init(|| {
        let mut provider = rustls::crypto::aws_lc_rs::default_provider();
        provider.kx_groups = vec![&FREE_KEY_EXCHANGE];
        // SHA-256 (the default prefers AES-256/SHA-384, whose key schedule cost more).
        provider.cipher_suites = vec![rustls::crypto::aws_lc_rs::cipher_suite::TLS13_AES_128_GCM_SHA256];
        let provider = Arc::new(provider);
        // The fuzzer attacks the record layer and the session, not certificate checks: the
        // client accepts the fixed certificate without looking, and without a signature check
        // (the server signs with a fake key, which also makes the handshakes cheaper).
        let verifier = Arc::new(AcceptAnyServerCertificate::without_signature_checks(&provider));
        let client = ClientConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .dangerous()
            .with_custom_certificate_verifier(verifier)
            .with_no_client_auth();
        let certified = CertifiedKey::new(vec![CertificateDer::from(CERT_DER.to_vec())], Arc::new(FreeSigningKey));
        let server = ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(SingleCertAndKey::from(certified)));
        Configs { client: Arc::new(tcpls_client_config(&client)), server: Arc::new(tcpls_server_config(&server)) }
    })
}

/// Receive budget of the fuzzed sessions: 16 initial stream windows, so that inputs reach
/// the admission of streams by budget as well as the concurrency limit (up to 46 streams).
const RECEIVE_BUDGET: u64 = 1 << 20;

/// Session settings from the input's flag byte: small stream limits, so inputs reach them;
/// bit 2 forces the copying receive path, so both receive paths are fuzzed.
fn settings(flags: u8) -> SessionConfig {
    SessionConfig {
        max_concurrent_streams: 1 + usize::from(flags >> 4) * 3,
        receive_budget: RECEIVE_BUDGET,
        zero_copy: flags & 4 == 0,
        stream_receive_window: WINDOW,
        tokens: 2,
        random: Arc::new(|buf: &mut [u8]| buf.fill(0x5a)),
        ..SessionConfig::default()
    }
}

/// Moves what `from` has to send into `to`; false when there was nothing.
fn pass(from: &mut Session, to: &mut Session, now: Instant) -> bool {
    from.prepare_transmit(now);
    let data = from.transmit_data(0).to_vec();
    if data.is_empty() {
        return false;
    }
    from.transmit_advance(0, data.len());
    to.handle_data(0, &data, now);
    true
}

/// A client and a server session after a real TLS 1.3 handshake on connection 0.
struct Duo {
    client: Session,
    server: Session,
    now: Instant,
}

impl Duo {
    fn established(settings: &SessionConfig) -> Self {
        let c = configs();
        let name = ServerName::try_from("localhost").unwrap();
        let client = Session::client(c.client.clone(), name, settings.clone()).unwrap();
        let server = Session::server(c.server.clone(), settings.clone()).unwrap();
        let mut duo = Duo { client, server, now: Instant::now() };
        for _ in 0..16 {
            let a = pass(&mut duo.client, &mut duo.server, duo.now);
            let b = pass(&mut duo.server, &mut duo.client, duo.now);
            if !a && !b {
                break;
            }
        }
        assert!(duo.client.is_established() && duo.server.is_established());
        assert!(duo.client.error().is_none() && duo.server.error().is_none());
        while duo.client.poll_event().is_some() {}
        while duo.server.poll_event().is_some() {}
        duo
    }

    /// (victim, attacker)
    fn roles(&mut self, victim_is_server: bool) -> (&mut Session, &mut Session) {
        if victim_is_server {
            (&mut self.server, &mut self.client)
        } else {
            (&mut self.client, &mut self.server)
        }
    }
}

/// What the victim's application and IO layer do between inputs: drain events, read streams
/// when `app_reads` (which grants the attacker more credit), and write out whatever the core
/// sealed. The attacker never reads it: its own state would only get in the way.
fn victim_turn(victim: &mut Session, app_reads: bool, now: Instant) {
    let mut buf = [0u8; 4096];
    while let Some(event) = victim.poll_event() {
        if let (true, Event::StreamReadable(id)) = (app_reads, event) {
            while let Ok(Some(1..)) = victim.read(id, &mut buf) {}
        }
    }
    while victim.accept_stream().is_some() {}
    victim.prepare_transmit(now);
    let n = victim.transmit_data(0).len();
    victim.transmit_advance(0, n);
}

/// What must hold whatever the input: the session goes on, or it ended with an error that
/// says why (or cleanly, after the peer's close_notify), and its stream buffers stay within
/// what flow control allows.
fn check_victim(victim: &Session, handshake_done: bool) {
    match victim.error() {
        None => assert!(
            !victim.is_closed() || victim.peer_closed(),
            "closed with no error and no close_notify: {victim:?}, connection errors {:?}",
            victim.connection_ids().iter().map(|c| victim.connection_error(*c).cloned()).collect::<Vec<_>>()
        ),
        Some(Error::Local(e)) => {
            assert!(
                matches!(
                    e.alert,
                    AlertCode::DecodeError
                        | AlertCode::RecordOverflow
                        | AlertCode::BadRecordMac
                        | AlertCode::UnexpectedMessage
                        | AlertCode::IllegalParameter
                ),
                "hostile input reported as {e}"
            );
            assert!(victim.is_closed(), "failed but not closed: {e}");
        }
        Some(Error::PeerAlert(_) | Error::ConnectionLost(_)) => assert!(victim.is_closed()),
        Some(Error::NoToken) => panic!("NoToken is only returned by add_connection"),
        Some(Error::Tls(e)) => {
            assert!(!handshake_done, "rustls error after the handshake: {e}");
            assert!(victim.is_closed());
        }
        Some(e @ Error::SessionClosed) => panic!("unexpected error {e}"),
    }
    let held = victim.danger_buffered_bytes();
    let bound = victim.stream_count() * PER_STREAM_BOUND;
    assert!(held <= bound, "{held} bytes buffered for {} streams", victim.stream_count());
    // Memory follows what arrived (a peer pays for what we hold): never the window for a byte at
    // its far edge.
    let wire = victim.connection_stats(0).map_or(0, |s| s.bytes_received) as usize;
    let by_wire = RECV_MEMORY_PER_WIRE_BYTE * wire + victim.stream_count() * PER_STREAM_FLOOR;
    assert!(held <= by_wire, "{held} bytes buffered for {wire} bytes received");
    // The receive budget bounds the credit over all streams, so the memory too (storage may
    // be up to twice the credit, see PER_STREAM_BOUND).
    let by_budget =
        2 * RECEIVE_BUDGET as usize + RECEIVE_BUDGET as usize / 8 + victim.stream_count() * PER_STREAM_FLOOR;
    assert!(held <= by_budget, "{held} bytes buffered, over the receive budget of {RECEIVE_BUDGET}");
    // What the victim keeps for failover and what waits to be polled stay bounded.
    let (records, control) = victim.danger_retained();
    let config = victim.settings();
    assert!(records <= config.max_unacked_records && control <= config.max_unacked_control);
    assert!(victim.danger_queued_events() <= 4096 + 64 + 2 * MAX_PLAINTEXT, "events pile up");
    // Control frames waiting for a record: the victim stops reading beyond 4096 entries, so at
    // most what one record's frames (one byte each, at most) add on top.
    assert!(victim.danger_control_queue_entries() <= 4096 + MAX_PLAINTEXT, "control frames pile up");
}

/// Splits `data` into pieces of varied sizes (a socket's reads).
fn pieces(data: &[u8]) -> impl Iterator<Item = &[u8]> {
    const SIZES: [usize; 8] = [1, 5, 2, 64, 700, 3, 1500, 17000];
    let mut rest = data;
    let mut i = 0;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let (piece, tail) = rest.split_at(SIZES[i % SIZES.len()].min(rest.len()));
        i += 1;
        rest = tail;
        Some(piece)
    })
}

/// A whole session fed attacker input. The first byte holds flags: bit 0 picks the victim
/// (0: server, 1: client), bit 1 makes the victim's application read its streams, bit 2 forces
/// the copying receive path, bit 3 picks how the rest is used (one handshake per input either
/// way), bits 4-7 set the victim's stream limit. The rest is:
///
/// - bit 3 clear: records sealed with the attacker's real keys (`danger_seal_raw`), so they
///   reach the frame and session checks: a sequence of `sel(8) len(16) content(len)`, where
///   `sel & 7` picks the inner content type (0-4 application_data, 5 alert, 6 handshake, 7
///   `sel >> 3`) and `sel & 0x80` keeps the record back to travel with the next one;
/// - bit 3 set: the same bytes as raw socket input, to an established victim and then to a
///   victim still in its handshake.
pub fn session(data: &[u8]) {
    let Some((&flags, body)) = data.split_first() else {
        return;
    };
    if flags & 8 == 0 {
        sealed_records(flags, body);
    } else {
        raw_bytes(flags, body, true);
        raw_bytes(flags, body, false);
    }
}

fn sealed_records(flags: u8, body: &[u8]) {
    let settings = settings(flags);
    let mut duo = Duo::established(&settings);
    let mut now = duo.now;
    let app_reads = flags & 2 != 0;
    let (victim, attacker) = duo.roles(flags & 1 == 0);
    let mut rest = body;
    while let [sel, hi, lo, tail @ ..] = rest {
        let len = usize::from(u16::from_be_bytes([*hi, *lo])).min(tail.len()).min(MAX_PLAINTEXT);
        let (content, next) = tail.split_at(len);
        rest = next;
        let content_type = match sel & 7 {
            0..=4 => CT_APPLICATION_DATA,
            5 => CT_ALERT,
            6 => CT_HANDSHAKE,
            _ => sel >> 3,
        };
        if attacker.danger_seal_raw(0, content_type, content).is_err() {
            break;
        }
        if sel & 0x80 == 0 {
            now += Duration::from_millis(1);
            pass(attacker, victim, now);
            victim_turn(victim, app_reads, now);
        }
    }
    pass(attacker, victim, now);
    victim_turn(victim, app_reads, now);
    check_victim(victim, true);
}

fn raw_bytes(flags: u8, body: &[u8], after_handshake: bool) {
    let settings = settings(flags);
    let victim_is_server = flags & 1 == 0;
    let mut now = Instant::now();
    let mut victim = if after_handshake {
        let duo = Duo::established(&settings);
        now = duo.now;
        if victim_is_server {
            duo.server
        } else {
            duo.client
        }
    } else if victim_is_server {
        Session::server(configs().server.clone(), settings).unwrap()
    } else {
        let name = ServerName::try_from("localhost").unwrap();
        Session::client(configs().client.clone(), name, settings).unwrap()
    };
    for piece in pieces(body) {
        now += Duration::from_millis(1);
        victim.handle_data(0, piece, now);
        victim_turn(&mut victim, flags & 2 != 0, now);
    }
    check_victim(&victim, after_handshake);
}
