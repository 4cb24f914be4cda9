//! Fuzz target bodies for the parsers of `tcpls-tunnel`: the TM3 pipe message decoder, the
//! TCPLS tunnel's TLVs (PROTOCOL.md §8.1), the SOCKS5 request reader, the HTTP proxy request
//! reader and the UDP framings (SOCKS5 UDP header, tunnel datagrams). Included by the
//! cargo-fuzz targets `tm3_codec`, `tunnel_tlv`, `socks5`, `http_proxy`, `udp` and, as is, by
//! `tcpls-tunnel/tests/fuzz_soak.rs` (stable Rust, CI). Every input comes from a hostile peer:
//! nothing may panic, read past what the format allows, or decode to something that does not
//! re-encode to the same bytes.

use std::sync::OnceLock;

use bytes::BytesMut;
use tcpls_tunnel::codec;
use tcpls_tunnel::frontend::{socks5_address, socks5_request, socks5_udp_header};
use tcpls_tunnel::http_proxy;
use tcpls_tunnel::tunnel::tlv::{read_request, read_response, Tlv};
use tcpls_tunnel::tunnel::udp;

/// Largest SOCKS5 greeting + request: 2 + 255 methods, then 4 + 1 + 255 name bytes + 2.
const SOCKS5_MAX: usize = 2 + 255 + 4 + 1 + 255 + 2;
/// Two TLVs of at most 2 + 255 bytes.
const TLV_PAIR_MAX: usize = 2 * (2 + 255);

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread().build().expect("a current-thread runtime (fuzz harness)")
    })
}

/// TM3 pipe messages, fed in pieces whose sizes come from the input's first byte: decoding
/// never panics; a message that passes `check` re-encodes to the bytes it was decoded from.
pub fn tm3_codec(data: &[u8]) {
    let Some((&step, data)) = data.split_first() else { return };
    let step = usize::from(step).max(1);
    let mut buf = BytesMut::new();
    let mut fed = 0;
    let mut consumed = 0;
    while fed < data.len() || !buf.is_empty() {
        let end = (fed + step).min(data.len());
        buf.extend_from_slice(&data[fed..end]);
        fed = end;
        loop {
            let before = buf.len();
            match codec::decode(&mut buf) {
                Ok(Some(msg)) => {
                    let used = before - buf.len();
                    let original = &data[consumed..consumed + used];
                    consumed += used;
                    if msg.check().is_ok() {
                        if let Ok(bytes) = msg.to_bytes() {
                            assert_eq!(&bytes[..], original, "{msg:?} re-encodes differently");
                        }
                    }
                }
                Ok(None) => break,
                // The pipe is not trusted any more: a real proxy closes it here.
                Err(_) => return,
            }
        }
        if fed == data.len() {
            return;
        }
    }
}

/// Tunnel TLVs: one message from `type, length, value` round-trips exactly when it decodes;
/// the request and response readers never panic and never read past two messages.
pub fn tunnel_tlv(data: &[u8]) {
    if let [ty, len, rest @ ..] = data {
        if let Some(value) = rest.get(..usize::from(*len)) {
            if let Ok(tlv) = Tlv::decode(*ty, value) {
                let mut out = Vec::new();
                tlv.encode(&mut out);
                assert_eq!(out, &data[..2 + value.len()], "{tlv:?} re-encodes differently");
            }
        }
    }
    let mut r = data;
    let _ = runtime().block_on(read_request(&mut r));
    assert!(data.len() - r.len() <= TLV_PAIR_MAX, "read_request read {} bytes", data.len() - r.len());
    let mut r = data;
    let _ = runtime().block_on(read_response(&mut r));
    assert!(data.len() - r.len() <= TLV_PAIR_MAX, "read_response read {} bytes", data.len() - r.len());
}

/// The SOCKS5 server side: any client bytes give a target or an error, reading at most one
/// greeting and one request.
pub fn socks5(data: &[u8]) {
    let mut reader = data;
    let mut replies = Vec::new();
    {
        let mut stream = tokio::io::join(&mut reader, &mut replies);
        let _ = runtime().block_on(socks5_request(&mut stream));
    }
    assert!(data.len() - reader.len() <= SOCKS5_MAX, "read {} bytes", data.len() - reader.len());
}

/// The HTTP proxy's request head: any bytes give a request or an error status, never a panic,
/// reading at most `MAX_HEAD` bytes; a parsed target is a valid host or address.
pub fn http_proxy(data: &[u8]) {
    if let Ok(Some(req)) = http_proxy::parse(data) {
        assert!(req.rest.len() <= data.len());
        assert!(req.connect || req.head.ends_with(b"Connection: close\r\n\r\n"));
    }
    let mut reader = data;
    let _ = runtime().block_on(http_proxy::read_request(&mut reader));
    assert!(data.len() - reader.len() <= http_proxy::MAX_HEAD, "read {} bytes", data.len() - reader.len());
}

/// UDP: a SOCKS5 UDP header that parses re-encodes to the same address bytes; the tunnel's
/// datagram framing reads whole datagrams or errors, never more than the input.
pub fn udp(data: &[u8]) {
    if let Some((target, at)) = socks5_udp_header(data) {
        assert!(at <= data.len());
        assert_eq!(socks5_address(&target), &data[3..at], "{target} re-encodes differently");
    }
    let mut r = data;
    let mut buf = Vec::new();
    let mut total = 0;
    while let Ok(true) = runtime().block_on(udp::read_datagram(&mut r, &mut buf)) {
        total += 2 + buf.len();
        assert_eq!(udp::frame(&buf).len(), 2 + buf.len());
    }
    assert!(total <= data.len());
}
