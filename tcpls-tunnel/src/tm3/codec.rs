//! Encoding and decoding of TM3 pipe messages.
//!
//! Every pipe message starts with an 8-byte header whose fields are all little-endian:
//! `connID(16) seq(32) len(16)`.
//!
//! * Data: `len` counts the header and lies in `9..=4104` (1 to 4096 payload bytes).
//! * SYN: `seq` is 0, `len` is `0xFFFF`, followed by the destination IPv4 address (4 bytes, network
//!   byte order as stored in a `sockaddr_in`) and the destination port (2 bytes, little-endian).
//! * FIN: `len` is `0xFFFE`, followed by one reason byte: [`REASON_FIN`] (0x88) or [`REASON_RST`]
//!   (0x99).
//!
//! Decoding never panics. Errors come in two classes:
//! * [`FramingError`]: the byte stream of the pipe can no longer be delimited (impossible length
//!   field) or is not from a well-behaved peer (connection ID 0); the pipe must be dropped.
//! * [`MessageError`] (from [`Message::check`]): the message is delimited correctly but violates
//!   the protocol; only the connection it names is affected.

use std::fmt;
use std::net::{Ipv4Addr, SocketAddrV4};

use bytes::{BufMut, Bytes, BytesMut};

/// Size of the header of every pipe message.
pub const HEADER_LEN: usize = 8;
/// Largest payload of a data message.
pub const MAX_PAYLOAD: usize = 4096;
/// Largest value of the length field of a data message.
pub const MAX_DATA_LEN: u16 = (HEADER_LEN + MAX_PAYLOAD) as u16;
/// Length field value that marks a SYN message.
pub const LEN_SYN: u16 = 0xFFFF;
/// Length field value that marks a FIN message.
pub const LEN_FIN: u16 = 0xFFFE;
/// FIN reason: the connection was closed with a FIN.
pub const REASON_FIN: u8 = 0x88;
/// FIN reason: the connection was closed with a RST (or failed).
pub const REASON_RST: u8 = 0x99;
/// Total size of a SYN message.
pub const SYN_LEN: usize = HEADER_LEN + 6;
/// Total size of a FIN message.
pub const FIN_LEN: usize = HEADER_LEN + 1;

/// A decoded pipe message.
#[derive(Clone, PartialEq, Eq)]
pub enum Message {
    /// User data of one connection (1 to 4096 bytes when well-formed).
    Data { conn_id: u16, seq: u32, payload: Bytes },
    /// Opening of a connection towards `dst`.
    Syn { conn_id: u16, seq: u32, dst: SocketAddrV4 },
    /// Closing of a connection; `reason` is 0x88 (FIN) or 0x99 (RST) when well-formed.
    Fin { conn_id: u16, seq: u32, reason: u8 },
}

impl fmt::Debug for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Message::Data { conn_id, seq, payload } => {
                write!(f, "Data(conn {conn_id}, seq {seq}, {} bytes)", payload.len())
            }
            Message::Syn { conn_id, seq, dst } => write!(f, "Syn(conn {conn_id}, seq {seq}, dst {dst})"),
            Message::Fin { conn_id, seq, reason } => write!(f, "Fin(conn {conn_id}, seq {seq}, reason {reason:#04x})"),
        }
    }
}

/// The pipe's byte stream cannot be trusted any more.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FramingError {
    /// The length field is neither a data length (9..=4104, or 8 which is an empty data message)
    /// nor 0xFFFE/0xFFFF: message boundaries are lost.
    BadLength { conn_id: u16, seq: u32, len: u16 },
    /// Connection ID 0 is not a valid connection ID.
    ZeroConnId { seq: u32, len: u16 },
}

impl fmt::Display for FramingError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FramingError::BadLength { conn_id, seq, len } => write!(
                f,
                "ill-formed pipe message header (conn {conn_id}, seq {seq}): length field {len} is not in 9..=4104 \
                 nor 0xFFFE (FIN) nor 0xFFFF (SYN)"
            ),
            FramingError::ZeroConnId { seq, len } => {
                write!(f, "ill-formed pipe message header (seq {seq}, length {len}): connection ID 0 is invalid")
            }
        }
    }
}

impl std::error::Error for FramingError {}

/// A delimited message that violates the protocol (affects only its connection).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageError {
    /// A data message without payload (length field 8).
    EmptyData,
    /// A SYN whose sequence number is not 0.
    SynSeqNotZero(u32),
    /// A FIN whose reason is neither 0x88 nor 0x99.
    BadFinReason(u8),
}

impl fmt::Display for MessageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MessageError::EmptyData => write!(f, "empty data message (length 8)"),
            MessageError::SynSeqNotZero(s) => write!(f, "SYN with sequence number {s} (must be 0)"),
            MessageError::BadFinReason(r) => write!(f, "FIN with reason {r:#04x} (must be 0x88 or 0x99)"),
        }
    }
}

impl std::error::Error for MessageError {}

/// A message that cannot be encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EncodeError {
    /// Connection ID 0.
    ZeroConnId,
    /// Data payload empty or longer than 4096 bytes.
    BadPayloadLen(usize),
}

impl fmt::Display for EncodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EncodeError::ZeroConnId => write!(f, "connection ID 0 is invalid"),
            EncodeError::BadPayloadLen(n) => write!(f, "data payload of {n} bytes (must be 1..=4096)"),
        }
    }
}

impl std::error::Error for EncodeError {}

/// A parsed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    pub conn_id: u16,
    pub seq: u32,
    pub len: u16,
}

impl Header {
    /// Parses and validates a header; returns the total message length on success.
    pub fn parse(b: &[u8; HEADER_LEN]) -> Result<(Header, usize), FramingError> {
        let conn_id = u16::from_le_bytes([b[0], b[1]]);
        let seq = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
        let len = u16::from_le_bytes([b[6], b[7]]);
        let total = match len {
            LEN_SYN => SYN_LEN,
            LEN_FIN => FIN_LEN,
            l if (HEADER_LEN as u16..=MAX_DATA_LEN).contains(&l) => usize::from(l),
            _ => return Err(FramingError::BadLength { conn_id, seq, len }),
        };
        if conn_id == 0 {
            return Err(FramingError::ZeroConnId { seq, len });
        }
        Ok((Header { conn_id, seq, len }, total))
    }
}

fn put_header(out: &mut BytesMut, conn_id: u16, seq: u32, len: u16) {
    out.put_u16_le(conn_id);
    out.put_u32_le(seq);
    out.put_u16_le(len);
}

impl Message {
    /// Connection ID of the message.
    pub fn conn_id(&self) -> u16 {
        match self {
            Message::Data { conn_id, .. } | Message::Syn { conn_id, .. } | Message::Fin { conn_id, .. } => *conn_id,
        }
    }

    /// Sequence number of the message.
    pub fn seq(&self) -> u32 {
        match self {
            Message::Data { seq, .. } | Message::Syn { seq, .. } | Message::Fin { seq, .. } => *seq,
        }
    }

    /// Size of the message on the wire.
    pub fn wire_len(&self) -> usize {
        match self {
            Message::Data { payload, .. } => HEADER_LEN + payload.len(),
            Message::Syn { .. } => SYN_LEN,
            Message::Fin { .. } => FIN_LEN,
        }
    }

    /// Protocol checks that only concern the message's connection.
    pub fn check(&self) -> Result<(), MessageError> {
        match self {
            Message::Data { payload, .. } if payload.is_empty() => Err(MessageError::EmptyData),
            Message::Syn { seq, .. } if *seq != 0 => Err(MessageError::SynSeqNotZero(*seq)),
            Message::Fin { reason, .. } if *reason != REASON_FIN && *reason != REASON_RST => {
                Err(MessageError::BadFinReason(*reason))
            }
            _ => Ok(()),
        }
    }

    /// Appends the wire form of the message to `out`.
    pub fn encode(&self, out: &mut BytesMut) -> Result<(), EncodeError> {
        if self.conn_id() == 0 {
            return Err(EncodeError::ZeroConnId);
        }
        match self {
            Message::Data { conn_id, seq, payload } => {
                if payload.is_empty() || payload.len() > MAX_PAYLOAD {
                    return Err(EncodeError::BadPayloadLen(payload.len()));
                }
                out.reserve(HEADER_LEN + payload.len());
                put_header(out, *conn_id, *seq, (HEADER_LEN + payload.len()) as u16);
                out.put_slice(payload);
            }
            Message::Syn { conn_id, seq, dst } => {
                out.reserve(SYN_LEN);
                put_header(out, *conn_id, *seq, LEN_SYN);
                out.put_slice(&dst.ip().octets());
                out.put_u16_le(dst.port());
            }
            Message::Fin { conn_id, seq, reason } => {
                out.reserve(FIN_LEN);
                put_header(out, *conn_id, *seq, LEN_FIN);
                out.put_u8(*reason);
            }
        }
        Ok(())
    }

    /// The wire form of the message.
    pub fn to_bytes(&self) -> Result<Bytes, EncodeError> {
        let mut b = BytesMut::with_capacity(self.wire_len());
        self.encode(&mut b)?;
        Ok(b.freeze())
    }
}

/// Encodes a data message directly from a payload slice (1..=4096 bytes, conn_id != 0).
pub fn encode_data(conn_id: u16, seq: u32, payload: &[u8]) -> Result<Bytes, EncodeError> {
    if conn_id == 0 {
        return Err(EncodeError::ZeroConnId);
    }
    if payload.is_empty() || payload.len() > MAX_PAYLOAD {
        return Err(EncodeError::BadPayloadLen(payload.len()));
    }
    let mut b = BytesMut::with_capacity(HEADER_LEN + payload.len());
    put_header(&mut b, conn_id, seq, (HEADER_LEN + payload.len()) as u16);
    b.put_slice(payload);
    Ok(b.freeze())
}

/// Decodes one message from the front of `buf`.
///
/// Returns `Ok(None)` when more bytes are needed; otherwise the message, which is removed from
/// `buf`. Data payloads share `buf`'s memory. The returned message may still fail
/// [`Message::check`].
pub fn decode(buf: &mut BytesMut) -> Result<Option<Message>, FramingError> {
    let Some(hdr) = buf.get(..HEADER_LEN) else { return Ok(None) };
    let mut h = [0u8; HEADER_LEN];
    h.copy_from_slice(hdr);
    let (header, total) = Header::parse(&h)?;
    if buf.len() < total {
        return Ok(None);
    }
    let mut msg = buf.split_to(total);
    let body = msg.split_off(HEADER_LEN);
    let Header { conn_id, seq, len } = header;
    Ok(Some(match len {
        LEN_SYN => {
            let ip = Ipv4Addr::new(body[0], body[1], body[2], body[3]);
            let port = u16::from_le_bytes([body[4], body[5]]);
            Message::Syn { conn_id, seq, dst: SocketAddrV4::new(ip, port) }
        }
        LEN_FIN => Message::Fin { conn_id, seq, reason: body[0] },
        _ => Message::Data { conn_id, seq, payload: body.freeze() },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dec_all(bytes: &[u8]) -> Result<Vec<Message>, FramingError> {
        let mut b = BytesMut::from(bytes);
        let mut v = Vec::new();
        while let Some(m) = decode(&mut b)? {
            v.push(m);
        }
        assert!(b.is_empty(), "leftover bytes");
        Ok(v)
    }

    #[test]
    fn syn_vector() {
        // conn 1, seq 0, 0xFFFF, 10.0.0.1 in network order, port 80 little-endian.
        let wire = [0x01, 0x00, 0, 0, 0, 0, 0xFF, 0xFF, 10, 0, 0, 1, 0x50, 0x00];
        let m = Message::Syn { conn_id: 1, seq: 0, dst: "10.0.0.1:80".parse().unwrap() };
        assert_eq!(m.to_bytes().unwrap().as_ref(), &wire);
        assert_eq!(dec_all(&wire).unwrap(), vec![m]);
        // Port 6001 = 0x1771 -> 71 17 on the wire.
        let m = Message::Syn { conn_id: 0x0102, seq: 0, dst: "192.168.1.2:6001".parse().unwrap() };
        assert_eq!(m.to_bytes().unwrap().as_ref(), &[0x02, 0x01, 0, 0, 0, 0, 0xFF, 0xFF, 192, 168, 1, 2, 0x71, 0x17]);
    }

    #[test]
    fn data_vector() {
        // conn 0x0203, seq 0x01000000 + 5, payload "abc": len = 11.
        let wire = [0x03, 0x02, 0x05, 0, 0, 0x01, 0x0B, 0x00, b'a', b'b', b'c'];
        let m = Message::Data { conn_id: 0x0203, seq: 0x0100_0005, payload: Bytes::from_static(b"abc") };
        assert_eq!(m.to_bytes().unwrap().as_ref(), &wire);
        assert_eq!(encode_data(0x0203, 0x0100_0005, b"abc").unwrap().as_ref(), &wire);
        assert_eq!(dec_all(&wire).unwrap(), vec![m]);
        // Maximum size: 4104 = 0x1008.
        let big = encode_data(9, 1, &[7u8; 4096]).unwrap();
        assert_eq!(&big[6..8], &[0x08, 0x10]);
        assert_eq!(dec_all(&big).unwrap().len(), 1);
        assert_eq!(encode_data(9, 1, &[7u8; 4097]), Err(EncodeError::BadPayloadLen(4097)));
        assert_eq!(encode_data(9, 1, &[]), Err(EncodeError::BadPayloadLen(0)));
        assert_eq!(encode_data(0, 1, b"x"), Err(EncodeError::ZeroConnId));
    }

    #[test]
    fn fin_vector() {
        let wire = [0x2A, 0x00, 0x07, 0, 0, 0, 0xFE, 0xFF, 0x99];
        let m = Message::Fin { conn_id: 42, seq: 7, reason: REASON_RST };
        assert_eq!(m.to_bytes().unwrap().as_ref(), &wire);
        assert_eq!(dec_all(&wire).unwrap(), vec![m]);
        let wire = [0x2A, 0x00, 0x07, 0, 0, 0, 0xFE, 0xFF, 0x88];
        assert_eq!(dec_all(&wire).unwrap(), vec![Message::Fin { conn_id: 42, seq: 7, reason: REASON_FIN }]);
    }

    #[test]
    fn partial_input_needs_more() {
        let wire = encode_data(5, 3, b"hello").unwrap();
        for cut in 0..wire.len() {
            let mut b = BytesMut::from(&wire[..cut]);
            assert_eq!(decode(&mut b), Ok(None));
            assert_eq!(b.len(), cut);
        }
    }

    #[test]
    fn framing_errors() {
        for len in [0u16, 1, 7, 4105, 0x8000, 0xFFFD] {
            let mut w = vec![1, 0, 0, 0, 0, 0];
            w.extend_from_slice(&len.to_le_bytes());
            w.extend_from_slice(&[0; 16]);
            let mut b = BytesMut::from(&w[..]);
            assert!(matches!(decode(&mut b), Err(FramingError::BadLength { len: l, .. }) if l == len));
        }
        let mut b = BytesMut::from(&[0, 0, 0, 0, 0, 0, 0x09, 0, 1][..]);
        assert!(matches!(decode(&mut b), Err(FramingError::ZeroConnId { .. })));
    }

    #[test]
    fn message_errors() {
        let m = dec_all(&[1, 0, 0, 0, 0, 0, 8, 0]).unwrap();
        assert_eq!(m[0].check(), Err(MessageError::EmptyData));
        let m = dec_all(&[1, 0, 3, 0, 0, 0, 0xFF, 0xFF, 1, 2, 3, 4, 5, 6]).unwrap();
        assert_eq!(m[0].check(), Err(MessageError::SynSeqNotZero(3)));
        let m = dec_all(&[1, 0, 3, 0, 0, 0, 0xFE, 0xFF, 0x42]).unwrap();
        assert_eq!(m[0].check(), Err(MessageError::BadFinReason(0x42)));
    }

    #[test]
    fn random_soak_never_panics() {
        let mut rng = tcpls_test::Rng::new(1);
        let mut next = move || rng.next_u64();
        for round in 0..3000 {
            let n = (next() % 300) as usize;
            let mut v: Vec<u8> = (0..n).map(|_| next() as u8).collect();
            // Bias some headers towards valid lengths so that decoding goes further.
            if round % 2 == 0 && v.len() >= 8 {
                let l = [9u16, 14, 0xFFFF, 0xFFFE, 8][(next() % 5) as usize];
                v[6..8].copy_from_slice(&l.to_le_bytes());
            }
            let mut b = BytesMut::from(&v[..]);
            while let Ok(Some(m)) = decode(&mut b) {
                let _ = m.check();
                let _ = m.to_bytes();
            }
        }
    }

    #[test]
    fn roundtrip_stream() {
        let msgs = vec![
            Message::Syn { conn_id: 65535, seq: 0, dst: "1.2.3.4:65535".parse().unwrap() },
            Message::Data { conn_id: 65535, seq: 1, payload: Bytes::from(vec![1u8; 4096]) },
            Message::Data { conn_id: 3, seq: u32::MAX, payload: Bytes::from_static(b"z") },
            Message::Fin { conn_id: 65535, seq: 2, reason: REASON_FIN },
        ];
        let mut wire = BytesMut::new();
        for m in &msgs {
            m.encode(&mut wire).unwrap();
        }
        assert_eq!(dec_all(&wire).unwrap(), msgs);
    }
}
