//! The TLV messages that begin every tunnel stream (PROTOCOL.md §8.1):
//! `Type(8) Length(8) Value(Length bytes)`, read left to right, up to End.

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};

use tokio::io::{AsyncRead, AsyncReadExt};

use crate::frontend::Target;

pub const TYPE_CONNECT: u8 = 0x00;
pub const TYPE_CONNECT_OK: u8 = 0x01;
pub const TYPE_ERROR: u8 = 0x02;
pub const TYPE_CONNECT_BY_NAME: u8 = 0x03;
/// This project's addition: a UDP flow (PROTOCOL.md §8.1), value as TCP Connect.
pub const TYPE_UDP_ASSOCIATE: u8 = 0x04;
/// This project's addition: a UDP flow to a name, value as TCP Connect by Name.
pub const TYPE_UDP_ASSOCIATE_BY_NAME: u8 = 0x05;
/// This project's addition: the client asks the concentrator to listen on this address and
/// send it the connections (a reverse forward); value as TCP Connect.
pub const TYPE_REVERSE_BIND: u8 = 0x06;
/// This project's addition: the concentrator's stream for one connection accepted by a reverse
/// forward's listener; value: the bind's address, as TCP Connect.
pub const TYPE_REVERSE_CONNECTION: u8 = 0x07;
/// This project's addition: after UDP Associate (by Name), asks for the redundant mode: this
/// stream is one copy of the flow with this Flow ID (64 bits) and its datagrams are numbered
/// ([`super::redundant`]).
pub const TYPE_REDUNDANT_FLOW: u8 = 0x08;
pub const TYPE_END: u8 = 0xFF;

/// Error codes of the Error message.
pub const ERR_PROTOCOL_VIOLATION: u16 = 0x0000;
pub const ERR_MALFORMED_TLV: u16 = 0x0001;
pub const ERR_CONNECTION_FAILURE: u16 = 0x0002;
/// This project's addition: the concentrator's destination policy refuses the destination
/// (every address it resolves to); nothing was connected.
pub const ERR_DESTINATION_REFUSED: u16 = 0x0003;
/// This project's addition: the session is refused by the concentrator's per-client policy
/// because this client already has its `max-sessions` sessions; nothing was connected.
pub const ERR_CLIENT_SESSIONS: u16 = 0x0004;
/// This project's addition: the concentrator's per-client policy has no entry for this
/// client's certificate name and refuses unknown clients; nothing was connected.
pub const ERR_CLIENT_UNKNOWN: u16 = 0x0005;

/// Stream Reset error code for a TCP RST on either side (§8.1, §4.4).
pub const RESET_CODE: u32 = 0x2;

/// One message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tlv {
    /// TCP Connect; an IPv4 address travels IPv4-mapped.
    Connect(SocketAddr),
    ConnectOk,
    Error(u16),
    /// TCP Connect by Name: host name and port, resolved by the concentrator.
    ConnectByName(String, u16),
    /// UDP Associate: the stream carries datagrams to and from this address (§8.1).
    UdpAssociate(SocketAddr),
    /// UDP Associate by Name.
    UdpAssociateByName(String, u16),
    /// Reverse Bind: listen on this address of the concentrator (§8.1).
    ReverseBind(SocketAddr),
    /// Reverse Connection: a connection accepted on this bound address.
    ReverseConnection(SocketAddr),
    /// Redundant Flow: this UDP stream is a copy of the flow with this ID (§8.1).
    RedundantFlow(u64),
    End,
}

/// What a stream carries after its request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// A TCP connection's bytes.
    Tcp,
    /// Datagrams, each `Length(16)` + payload ([`super::udp`]).
    Udp,
    /// A reverse forward's control stream: nothing after End; its end closes the listener.
    ReverseBind,
    /// A connection accepted by a reverse forward (concentrator → client): a TCP connection's
    /// bytes, the target being the bind's address.
    ReverseConnection,
}

/// Why the bytes at the start of a stream are not a valid TLV sequence; the code to answer with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TlvError {
    /// Unknown type, wrong length, a host name that is not one.
    Malformed(String),
    /// Valid messages in an order or place they may not appear.
    Violation(String),
}

impl TlvError {
    pub fn code(&self) -> u16 {
        match self {
            TlvError::Malformed(_) => ERR_MALFORMED_TLV,
            TlvError::Violation(_) => ERR_PROTOCOL_VIOLATION,
        }
    }
}

impl fmt::Display for TlvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlvError::Malformed(m) => write!(f, "malformed TLV: {m}"),
            TlvError::Violation(m) => write!(f, "protocol violation: {m}"),
        }
    }
}

/// Reading a TLV failed: the stream itself (reset, session closed, early FIN) or its content.
#[derive(Debug)]
pub enum ReadError {
    Io(io::Error),
    Bad(TlvError),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::Io(e) => write!(f, "{e}"),
            ReadError::Bad(e) => write!(f, "{e}"),
        }
    }
}

impl From<io::Error> for ReadError {
    fn from(e: io::Error) -> Self {
        ReadError::Io(e)
    }
}

impl From<TlvError> for ReadError {
    fn from(e: TlvError) -> Self {
        ReadError::Bad(e)
    }
}

impl Tlv {
    /// The request for `target`.
    pub fn connect_to(target: &Target) -> Tlv {
        Tlv::request(target, Transport::Tcp)
    }

    /// The request for `target` over `transport`.
    pub fn request(target: &Target, transport: Transport) -> Tlv {
        match (target, transport) {
            (Target::Addr(a), Transport::Tcp) => Tlv::Connect(*a),
            (Target::Name(h, p), Transport::Tcp) => Tlv::ConnectByName(h.clone(), *p),
            (Target::Addr(a), Transport::Udp) => Tlv::UdpAssociate(*a),
            (Target::Name(h, p), Transport::Udp) => Tlv::UdpAssociateByName(h.clone(), *p),
            // Reverse requests name an address of the concentrator; a name cannot be bound.
            (Target::Addr(a), Transport::ReverseBind) => Tlv::ReverseBind(*a),
            (Target::Addr(a), Transport::ReverseConnection) => Tlv::ReverseConnection(*a),
            (Target::Name(_, p), Transport::ReverseBind) => Tlv::ReverseBind(SocketAddr::from(([0u8; 4], *p))),
            (Target::Name(_, p), Transport::ReverseConnection) => {
                Tlv::ReverseConnection(SocketAddr::from(([0u8; 4], *p)))
            }
        }
    }

    /// Appends the wire form. A host name longer than the 253 bytes that fit is cut (callers
    /// check names first: [`valid_host_name`]).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Tlv::Connect(a) | Tlv::UdpAssociate(a) | Tlv::ReverseBind(a) | Tlv::ReverseConnection(a) => {
                let ip = match a.ip() {
                    IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                    IpAddr::V6(v6) => v6,
                };
                let ty = match self {
                    Tlv::Connect(_) => TYPE_CONNECT,
                    Tlv::UdpAssociate(_) => TYPE_UDP_ASSOCIATE,
                    Tlv::ReverseBind(_) => TYPE_REVERSE_BIND,
                    _ => TYPE_REVERSE_CONNECTION,
                };
                out.extend_from_slice(&[ty, 18]);
                out.extend_from_slice(&a.port().to_be_bytes());
                out.extend_from_slice(&ip.octets());
            }
            Tlv::ConnectOk => out.extend_from_slice(&[TYPE_CONNECT_OK, 0]),
            Tlv::Error(code) => {
                out.extend_from_slice(&[TYPE_ERROR, 2]);
                out.extend_from_slice(&code.to_be_bytes());
            }
            Tlv::ConnectByName(host, port) | Tlv::UdpAssociateByName(host, port) => {
                let host = &host.as_bytes()[..host.len().min(253)];
                let ty = if matches!(self, Tlv::ConnectByName(..)) {
                    TYPE_CONNECT_BY_NAME
                } else {
                    TYPE_UDP_ASSOCIATE_BY_NAME
                };
                out.extend_from_slice(&[ty, (2 + host.len()) as u8]);
                out.extend_from_slice(&port.to_be_bytes());
                out.extend_from_slice(host);
            }
            Tlv::RedundantFlow(id) => {
                out.extend_from_slice(&[TYPE_REDUNDANT_FLOW, 8]);
                out.extend_from_slice(&id.to_be_bytes());
            }
            Tlv::End => out.extend_from_slice(&[TYPE_END, 0]),
        }
    }

    /// Parses one message from its type and value.
    pub fn decode(ty: u8, value: &[u8]) -> Result<Tlv, TlvError> {
        let want = |n: usize, what: &str| {
            if value.len() == n {
                Ok(())
            } else {
                Err(TlvError::Malformed(format!("{what} has length {}, expected {n}", value.len())))
            }
        };
        match ty {
            TYPE_CONNECT | TYPE_UDP_ASSOCIATE | TYPE_REVERSE_BIND | TYPE_REVERSE_CONNECTION => {
                want(18, "an address message")?;
                let port = u16::from_be_bytes([value[0], value[1]]);
                let mut ip = [0u8; 16];
                ip.copy_from_slice(&value[2..18]);
                let ip = Ipv6Addr::from(ip);
                let ip = match ip.to_ipv4_mapped() {
                    Some(v4) => IpAddr::V4(v4),
                    None => IpAddr::V6(ip),
                };
                let a = SocketAddr::new(ip, port);
                Ok(match ty {
                    TYPE_CONNECT => Tlv::Connect(a),
                    TYPE_UDP_ASSOCIATE => Tlv::UdpAssociate(a),
                    TYPE_REVERSE_BIND => Tlv::ReverseBind(a),
                    _ => Tlv::ReverseConnection(a),
                })
            }
            TYPE_CONNECT_OK => want(0, "TCP Connect OK").map(|_| Tlv::ConnectOk),
            TYPE_ERROR => {
                want(2, "Error")?;
                Ok(Tlv::Error(u16::from_be_bytes([value[0], value[1]])))
            }
            TYPE_CONNECT_BY_NAME | TYPE_UDP_ASSOCIATE_BY_NAME => {
                if value.len() < 3 {
                    return Err(TlvError::Malformed("Connect by Name without a host name".into()));
                }
                let port = u16::from_be_bytes([value[0], value[1]]);
                let host = std::str::from_utf8(&value[2..])
                    .ok()
                    .filter(|h| valid_host_name(h))
                    .ok_or_else(|| TlvError::Malformed("Connect by Name: not a host name".into()))?;
                Ok(if ty == TYPE_CONNECT_BY_NAME {
                    Tlv::ConnectByName(host.to_string(), port)
                } else {
                    Tlv::UdpAssociateByName(host.to_string(), port)
                })
            }
            TYPE_REDUNDANT_FLOW => {
                want(8, "Redundant Flow")?;
                let mut id = [0u8; 8];
                id.copy_from_slice(value);
                Ok(Tlv::RedundantFlow(u64::from_be_bytes(id)))
            }
            TYPE_END => want(0, "End").map(|_| Tlv::End),
            t => Err(TlvError::Malformed(format!("unknown TLV type {t:#04x}"))),
        }
    }
}

/// The host names a Connect by Name may carry (defined with [`Target`], which the HTTP proxy
/// front end checks too).
pub use crate::frontend::valid_host_name;

/// Reads one message (at most 257 bytes, so a hostile peer cannot make us buffer more).
pub async fn read_tlv<R: AsyncRead + Unpin>(r: &mut R) -> Result<Tlv, ReadError> {
    let mut head = [0u8; 2];
    r.read_exact(&mut head).await?;
    let mut value = [0u8; 255];
    let value = &mut value[..usize::from(head[1])];
    r.read_exact(value).await?;
    Ok(Tlv::decode(head[0], value)?)
}

/// Concentrator: the request at the start of a client's stream, `Connect`, `ConnectByName`,
/// `UdpAssociate` or `UdpAssociateByName`, followed by `End`.
pub async fn read_request<R: AsyncRead + Unpin>(r: &mut R) -> Result<(Target, Transport), ReadError> {
    match read_request_with_flow(r).await? {
        (target, transport, None) => Ok((target, transport)),
        (_, _, Some(_)) => Err(TlvError::Violation("Redundant Flow where it is not supported".into()).into()),
    }
}

/// [`read_request`] that also takes a UDP request's Redundant Flow (before End): its flow ID.
pub async fn read_request_with_flow<R: AsyncRead + Unpin>(
    r: &mut R,
) -> Result<(Target, Transport, Option<u64>), ReadError> {
    let target = match read_tlv(r).await? {
        Tlv::Connect(a) => (Target::Addr(a), Transport::Tcp),
        Tlv::ConnectByName(h, p) => (Target::Name(h, p), Transport::Tcp),
        Tlv::UdpAssociate(a) => (Target::Addr(a), Transport::Udp),
        Tlv::UdpAssociateByName(h, p) => (Target::Name(h, p), Transport::Udp),
        Tlv::ReverseBind(a) => (Target::Addr(a), Transport::ReverseBind),
        Tlv::ReverseConnection(a) => (Target::Addr(a), Transport::ReverseConnection),
        other => return Err(TlvError::Violation(format!("stream starts with {other:?}, not a TCP Connect")).into()),
    };
    let (flow, last) = match (read_tlv(r).await?, target.1) {
        (Tlv::RedundantFlow(id), Transport::Udp) => (Some(id), read_tlv(r).await?),
        (other, _) => (None, other),
    };
    match last {
        Tlv::End => Ok((target.0, target.1, flow)),
        other => Err(TlvError::Violation(format!("{other:?} after the request, expected End")).into()),
    }
}

/// Client: the concentrator's answer, `Ok(())` for Connect OK or `Err(code)` for Error, each
/// followed by End.
pub async fn read_response<R: AsyncRead + Unpin>(r: &mut R) -> Result<Result<(), u16>, ReadError> {
    let answer = match read_tlv(r).await? {
        Tlv::ConnectOk => Ok(()),
        Tlv::Error(code) => Err(code),
        other => return Err(TlvError::Violation(format!("answer {other:?} is neither Connect OK nor Error")).into()),
    };
    match read_tlv(r).await? {
        Tlv::End => Ok(answer),
        other => Err(TlvError::Violation(format!("{other:?} after the answer, expected End")).into()),
    }
}

/// Encodes a sequence of messages.
pub fn encode_all(msgs: &[Tlv]) -> Vec<u8> {
    let mut out = Vec::new();
    for m in msgs {
        m.encode(&mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn round_trip(t: Tlv) {
        let bytes = encode_all(std::slice::from_ref(&t));
        assert_eq!(Tlv::decode(bytes[0], &bytes[2..]).unwrap(), t);
        assert_eq!(usize::from(bytes[1]), bytes.len() - 2);
    }

    #[test]
    fn messages_round_trip() {
        round_trip(Tlv::Connect("10.1.2.3:80".parse().unwrap()));
        round_trip(Tlv::Connect("[2001:db8::1]:443".parse().unwrap()));
        round_trip(Tlv::ConnectByName("example.org".into(), 8080));
        round_trip(Tlv::ConnectOk);
        round_trip(Tlv::Error(ERR_CONNECTION_FAILURE));
        round_trip(Tlv::Error(ERR_DESTINATION_REFUSED));
        assert_eq!(encode_all(&[Tlv::Error(ERR_DESTINATION_REFUSED)]), [0x02, 2, 0x00, 0x03]);
        round_trip(Tlv::Error(ERR_CLIENT_SESSIONS));
        assert_eq!(encode_all(&[Tlv::Error(ERR_CLIENT_SESSIONS), Tlv::End]), [0x02, 2, 0x00, 0x04, 0xFF, 0]);
        assert_eq!(encode_all(&[Tlv::Error(ERR_CLIENT_UNKNOWN), Tlv::End]), [0x02, 2, 0x00, 0x05, 0xFF, 0]);
        round_trip(Tlv::End);
        round_trip(Tlv::UdpAssociate("10.1.2.3:53".parse().unwrap()));
        round_trip(Tlv::UdpAssociate("[2001:db8::1]:443".parse().unwrap()));
        round_trip(Tlv::UdpAssociateByName("dns.example".into(), 53));
        round_trip(Tlv::ReverseBind("127.0.0.1:8022".parse().unwrap()));
        round_trip(Tlv::ReverseConnection("[::]:8022".parse().unwrap()));
        round_trip(Tlv::RedundantFlow(0x0102_0304_0506_0708));
        // PROTOCOL.md §8.1 vector: UDP Associate 127.0.0.1:53, Redundant Flow 1, End.
        let mut v = vec![0x04, 18, 0x00, 0x35];
        v.extend_from_slice(&Ipv6Addr::from([0, 0, 0, 0, 0, 0xffff, 0x7f00, 1]).octets());
        v.extend_from_slice(&[0x08, 8, 0, 0, 0, 0, 0, 0, 0, 1, 0xFF, 0]);
        let req = [Tlv::UdpAssociate("127.0.0.1:53".parse().unwrap()), Tlv::RedundantFlow(1), Tlv::End];
        assert_eq!(encode_all(&req), v);
        assert_eq!(encode_all(&[Tlv::ReverseBind("0.0.0.0:8022".parse().unwrap())])[..4], [0x06, 18, 0x1f, 0x56]);
        // PROTOCOL.md §8.1 vectors.
        let mut v = vec![0x04, 18, 0x00, 0x35];
        v.extend_from_slice(&Ipv6Addr::from([0, 0, 0, 0, 0, 0xffff, 0x7f00, 1]).octets());
        assert_eq!(encode_all(&[Tlv::UdpAssociate("127.0.0.1:53".parse().unwrap())]), v);
        assert_eq!(
            encode_all(&[Tlv::UdpAssociateByName("localhost".into(), 53)]),
            [&[0x05, 11, 0x00, 0x35][..], b"localhost"].concat()
        );
    }

    #[test]
    fn ipv4_travels_mapped() {
        let bytes = encode_all(&[Tlv::Connect("127.0.0.1:8080".parse().unwrap())]);
        assert_eq!(bytes.len(), 20);
        assert_eq!(&bytes[..4], &[0x00, 18, 0x1F, 0x90]);
        assert_eq!(&bytes[4..], &Ipv6Addr::from([0, 0, 0, 0, 0, 0xffff, 0x7f00, 1]).octets());
    }

    #[test]
    fn hostile_values_are_errors() {
        assert_eq!(Tlv::decode(0x00, &[0; 17]).unwrap_err().code(), ERR_MALFORMED_TLV);
        assert_eq!(Tlv::decode(0x01, &[0]).unwrap_err().code(), ERR_MALFORMED_TLV);
        assert_eq!(Tlv::decode(0x02, &[]).unwrap_err().code(), ERR_MALFORMED_TLV);
        assert_eq!(Tlv::decode(0x03, &[0, 80]).unwrap_err().code(), ERR_MALFORMED_TLV);
        assert_eq!(Tlv::decode(0x03, &[0, 80, b' ', b'x']).unwrap_err().code(), ERR_MALFORMED_TLV);
        assert_eq!(Tlv::decode(0x03, &[0, 80, 0xff]).unwrap_err().code(), ERR_MALFORMED_TLV);
        assert_eq!(Tlv::decode(0x42, &[]).unwrap_err().code(), ERR_MALFORMED_TLV);
        assert_eq!(Tlv::decode(0xFF, &[1]).unwrap_err().code(), ERR_MALFORMED_TLV);
        assert_eq!(Tlv::decode(0x08, &[0; 7]).unwrap_err().code(), ERR_MALFORMED_TLV);
        // Every type and length: never a panic.
        for ty in 0..=255u8 {
            for len in [0usize, 1, 2, 3, 17, 18, 19, 255] {
                let _ = Tlv::decode(ty, &vec![b'a'; len]);
            }
        }
    }

    #[tokio::test]
    async fn sequences() {
        let req = encode_all(&[Tlv::ConnectByName("localhost".into(), 80), Tlv::End]);
        assert_eq!(read_request(&mut &req[..]).await.unwrap(), (Target::Name("localhost".into(), 80), Transport::Tcp));
        let udp = encode_all(&[Tlv::UdpAssociate("127.0.0.1:53".parse().unwrap()), Tlv::End]);
        assert_eq!(
            read_request(&mut &udp[..]).await.unwrap(),
            (Target::Addr("127.0.0.1:53".parse().unwrap()), Transport::Udp)
        );
        let redundant =
            encode_all(&[Tlv::UdpAssociateByName("dns.example".into(), 53), Tlv::RedundantFlow(7), Tlv::End]);
        assert_eq!(
            read_request_with_flow(&mut &redundant[..]).await.unwrap(),
            (Target::Name("dns.example".into(), 53), Transport::Udp, Some(7))
        );
        // Only a UDP flow can be redundant; twice is a violation; an old reader refuses it.
        let tcp = encode_all(&[Tlv::Connect("127.0.0.1:80".parse().unwrap()), Tlv::RedundantFlow(7), Tlv::End]);
        assert!(matches!(read_request_with_flow(&mut &tcp[..]).await, Err(ReadError::Bad(TlvError::Violation(_)))));
        let twice = encode_all(&[
            Tlv::UdpAssociate("127.0.0.1:53".parse().unwrap()),
            Tlv::RedundantFlow(7),
            Tlv::RedundantFlow(7),
            Tlv::End,
        ]);
        assert!(read_request_with_flow(&mut &twice[..]).await.is_err());
        assert!(read_request(&mut &redundant[..]).await.is_err());
        let bad = encode_all(&[Tlv::End]);
        assert!(matches!(read_request(&mut &bad[..]).await, Err(ReadError::Bad(TlvError::Violation(_)))));
        let twice = encode_all(&[Tlv::ConnectOk, Tlv::ConnectOk]);
        assert!(matches!(read_response(&mut &twice[..]).await, Err(ReadError::Bad(TlvError::Violation(_)))));
        let fail = encode_all(&[Tlv::Error(2), Tlv::End]);
        assert_eq!(read_response(&mut &fail[..]).await.unwrap(), Err(2));
        // A truncated value is an I/O error (early end of stream), not a panic.
        assert!(matches!(read_tlv(&mut &[0x00u8, 18, 1, 2][..]).await, Err(ReadError::Io(_))));
    }
}
