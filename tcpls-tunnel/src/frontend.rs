//! What the TM3 local proxy and the TCPLS tunnel client share: the SOCKS5 server side, the
//! original destination of a transparently redirected connection, and `--forward` parsing.
//!
//! Each proxy decides what it can carry: the TM3 SYN holds an IPv4 address only, the TCPLS
//! tunnel's TCP Connect (by Name) holds anything.

use std::fmt;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// How a local proxy learns where an accepted connection goes: the one front-end type of the
/// TCPLS tunnel client ([`crate::tunnel::TunnelClient::serve`]) and the TM3 local proxy
/// ([`crate::LocalProxy::serve`]), which carries less (see each variant).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frontend {
    /// SOCKS5 CONNECT. Tunnel: to IPv4, IPv6 or a domain name (resolved by the concentrator);
    /// the reply is sent once the concentrator answered: success, 0x05 when the destination
    /// refused or could not be reached, 0x02 when the concentrator's policy refuses the
    /// destination, 0x01 for any other failure. TM3: to an IPv4 address only (the TM3 SYN
    /// carries IPv4), IPv6 and names refused with 0x08, other commands with 0x07, success sent
    /// at once; no authentication in either.
    Socks,
    /// Every connection goes to this target. Tunnel: pipelined (the application's bytes follow
    /// the request without waiting for the answer; an Error answer resets the connection).
    /// TM3: an IPv4 address only.
    Forward(Target),
    /// Connections redirected by iptables (`-j REDIRECT`): the destination from
    /// `getsockopt(SO_ORIGINAL_DST)` (Linux only). Tunnel: pipelined like `Forward`. TM3: IPv4
    /// only.
    Transparent,
    /// HTTP proxy ([`crate::http_proxy`]), tunnel only: CONNECT to any port, and absolute-form
    /// `http://` requests (one per connection). Answered once the concentrator answered: 200
    /// (CONNECT) or the server's response; 502 when the destination could not be reached, 403
    /// when the concentrator's policy refuses it, 400/431 for a bad request, 408 when the head
    /// does not arrive within the handshake timeout. No proxy authentication (never 407).
    Http,
}

/// Letters, digits, `-`, `.`, `_` (and `:` for a literal IPv6 address), at most 253 bytes.
pub fn valid_host_name(h: &str) -> bool {
    !h.is_empty() && h.len() <= 253 && h.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._:".contains(&b))
}

/// Where an application connection should go.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    Addr(SocketAddr),
    /// A host name to resolve on the far side (SOCKS5 address type 3, `--forward` to a name).
    Name(String, u16),
}

impl Target {
    /// `HOST:PORT`, `[V6]:PORT` or `IP:PORT` without resolving names (the far side resolves).
    pub fn parse(s: &str) -> Result<Target, String> {
        if let Ok(a) = s.parse::<SocketAddr>() {
            return Ok(Target::Addr(a));
        }
        let (host, port) = s.rsplit_once(':').ok_or_else(|| format!("'{s}': expected HOST:PORT"))?;
        let port: u16 = port.parse().map_err(|_| format!("'{s}': bad port"))?;
        if host.is_empty() || host.contains(':') || host.len() > 255 {
            return Err(format!("'{s}': bad host name"));
        }
        Ok(Target::Name(host.to_string(), port))
    }

    pub fn port(&self) -> u16 {
        match self {
            Target::Addr(a) => a.port(),
            Target::Name(_, p) => *p,
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Addr(a) => write!(f, "{a}"),
            Target::Name(h, p) => write!(f, "{h}:{p}"),
        }
    }
}

/// `--forward LISTEN=TARGET` split in its two halves (not resolved).
pub fn split_forward(s: &str) -> Result<(&str, &str), String> {
    match s.split_once('=') {
        Some((l, t)) if !l.is_empty() && !t.is_empty() => Ok((l, t)),
        _ => Err(format!("--forward expects LISTEN=TARGET, not '{s}'")),
    }
}

/// Accept queue of the proxies' listening sockets (the kernel caps it at `net.core.somaxconn`).
/// Large: a burst of connections beyond the queue loses SYNs (a second of delay each) and, with
/// SYN cookies, can even end in resets.
pub const LISTEN_BACKLOG: u32 = 4096;

/// A listening socket with [`LISTEN_BACKLOG`] (tokio's `bind` uses 1024) and SO_REUSEADDR.
pub fn listen(addr: SocketAddr) -> io::Result<tokio::net::TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// SOCKS5 reply codes (RFC 1928 §6).
pub mod reply {
    pub const SUCCEEDED: u8 = 0x00;
    pub const GENERAL_FAILURE: u8 = 0x01;
    pub const NOT_ALLOWED: u8 = 0x02;
    pub const HOST_UNREACHABLE: u8 = 0x04;
    pub const CONNECTION_REFUSED: u8 = 0x05;
    pub const COMMAND_NOT_SUPPORTED: u8 = 0x07;
    pub const ADDRESS_TYPE_NOT_SUPPORTED: u8 = 0x08;
}

/// Sends a SOCKS5 reply (bound address 0.0.0.0:0: clients do not need it for CONNECT).
pub async fn socks5_reply<S: AsyncWrite + Unpin>(s: &mut S, rep: u8) -> io::Result<()> {
    s.write_all(&[5, rep, 0, 1, 0, 0, 0, 0, 0, 0]).await
}

/// SOCKS5 commands (RFC 1928 §4).
pub mod command {
    pub const CONNECT: u8 = 1;
    pub const UDP_ASSOCIATE: u8 = 3;
}

/// Server side of a SOCKS5 greeting and request (RFC 1928, method "no authentication"), up to
/// and excluding the reply, which the caller sends once it knows the outcome. Unsupported
/// commands are answered (0x07) here and give an error.
pub async fn socks5_request<S: AsyncRead + AsyncWrite + Unpin>(s: &mut S) -> io::Result<Target> {
    socks5_request_for(s, &[command::CONNECT]).await.map(|(_, t)| t)
}

/// [`socks5_request`] accepting the `commands` listed; returns the command and its address
/// (for UDP ASSOCIATE, where the client will send from, often 0.0.0.0:0).
pub async fn socks5_request_for<S: AsyncRead + AsyncWrite + Unpin>(
    s: &mut S,
    commands: &[u8],
) -> io::Result<(u8, Target)> {
    let mut h = [0u8; 2];
    s.read_exact(&mut h).await?;
    if h[0] != 5 {
        return Err(invalid(format!("not SOCKS5 (version byte {})", h[0])));
    }
    let mut methods = vec![0u8; usize::from(h[1])];
    s.read_exact(&mut methods).await?;
    if !methods.contains(&0) {
        s.write_all(&[5, 0xFF]).await?;
        return Err(invalid("SOCKS5 client does not offer 'no authentication'".into()));
    }
    s.write_all(&[5, 0]).await?;
    let mut req = [0u8; 4];
    s.read_exact(&mut req).await?;
    if req[0] != 5 {
        return Err(invalid("bad SOCKS5 request version".into()));
    }
    let target = match req[3] {
        1 => {
            let mut a = [0u8; 6];
            s.read_exact(&mut a).await?;
            let ip = Ipv4Addr::new(a[0], a[1], a[2], a[3]);
            Target::Addr(SocketAddr::new(IpAddr::V4(ip), u16::from_be_bytes([a[4], a[5]])))
        }
        3 => {
            let mut len = [0u8; 1];
            s.read_exact(&mut len).await?;
            let mut name = vec![0u8; usize::from(len[0]) + 2];
            s.read_exact(&mut name).await?;
            let port = u16::from_be_bytes([name[name.len() - 2], name[name.len() - 1]]);
            name.truncate(name.len() - 2);
            match String::from_utf8(name) {
                Ok(host) if !host.is_empty() => Target::Name(host, port),
                _ => {
                    socks5_reply(s, reply::GENERAL_FAILURE).await?;
                    return Err(invalid("SOCKS5 domain name is empty or not UTF-8".into()));
                }
            }
        }
        4 => {
            let mut a = [0u8; 18];
            s.read_exact(&mut a).await?;
            let mut ip = [0u8; 16];
            ip.copy_from_slice(&a[..16]);
            Target::Addr(SocketAddr::new(IpAddr::V6(Ipv6Addr::from(ip)), u16::from_be_bytes([a[16], a[17]])))
        }
        t => {
            socks5_reply(s, reply::ADDRESS_TYPE_NOT_SUPPORTED).await?;
            return Err(invalid(format!("SOCKS5 address type {t} unknown")));
        }
    };
    if !commands.contains(&req[1]) {
        socks5_reply(s, reply::COMMAND_NOT_SUPPORTED).await?;
        return Err(io::Error::new(io::ErrorKind::Unsupported, format!("SOCKS5 command {} not supported", req[1])));
    }
    Ok((req[1], target))
}

/// A SOCKS5 success reply with the bound address (UDP ASSOCIATE: where to send datagrams).
pub async fn socks5_reply_bound<S: AsyncWrite + Unpin>(s: &mut S, bound: SocketAddr) -> io::Result<()> {
    let mut r = vec![5, reply::SUCCEEDED, 0];
    r.extend_from_slice(&socks5_address(&Target::Addr(bound)));
    s.write_all(&r).await
}

/// ATYP, address and port (RFC 1928 §5).
pub fn socks5_address(t: &Target) -> Vec<u8> {
    let mut out = Vec::new();
    match t {
        Target::Addr(SocketAddr::V4(a)) => {
            out.push(1);
            out.extend_from_slice(&a.ip().octets());
        }
        Target::Addr(SocketAddr::V6(a)) => {
            out.push(4);
            out.extend_from_slice(&a.ip().octets());
        }
        Target::Name(h, _) => {
            let h = &h.as_bytes()[..h.len().min(255)];
            out.push(3);
            out.push(h.len() as u8);
            out.extend_from_slice(h);
        }
    }
    out.extend_from_slice(&t.port().to_be_bytes());
    out
}

/// A SOCKS5 UDP request header (RFC 1928 §7): `RSV(16) FRAG(8) ATYP DST.ADDR DST.PORT`, then
/// data. Returns the destination and where the data starts; None for a malformed header or a
/// fragment (FRAG ≠ 0: fragmentation is not supported, such datagrams are dropped).
pub fn socks5_udp_header(d: &[u8]) -> Option<(Target, usize)> {
    if d.len() < 4 || d[0] != 0 || d[1] != 0 || d[2] != 0 {
        return None;
    }
    let port_at = |at: usize| d.get(at..at + 2).map(|p| u16::from_be_bytes([p[0], p[1]]));
    match d[3] {
        1 => {
            let ip: [u8; 4] = d.get(4..8)?.try_into().ok()?;
            Some((Target::Addr(SocketAddr::new(IpAddr::V4(Ipv4Addr::from(ip)), port_at(8)?)), 10))
        }
        4 => {
            let ip: [u8; 16] = d.get(4..20)?.try_into().ok()?;
            Some((Target::Addr(SocketAddr::new(IpAddr::V6(Ipv6Addr::from(ip)), port_at(20)?)), 22))
        }
        3 => {
            let len = usize::from(*d.get(4)?);
            let host = std::str::from_utf8(d.get(5..5 + len)?).ok()?;
            if host.is_empty() {
                return None;
            }
            Some((Target::Name(host.to_string(), port_at(5 + len)?), 7 + len))
        }
        _ => None,
    }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

/// The destination of a connection redirected by iptables REDIRECT/DNAT (`SO_ORIGINAL_DST`,
/// or `IP6T_SO_ORIGINAL_DST` on an IPv6 socket). A connection that was not redirected is
/// refused: tunneling it would bring it back to the proxy in a loop.
pub fn original_dst(s: &tokio::net::TcpStream) -> io::Result<SocketAddr> {
    #[cfg(target_os = "linux")]
    {
        let sock = socket2::SockRef::from(s);
        let local = s.local_addr()?;
        let a = match local {
            SocketAddr::V4(_) => sock.original_dst(),
            SocketAddr::V6(_) => sock.original_dst_ipv6(),
        }
        .map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("SO_ORIGINAL_DST failed ({e}): was the connection redirected by iptables?"),
            )
        })?;
        let dst = a.as_socket().ok_or_else(|| io::Error::other("SO_ORIGINAL_DST returned no IP address"))?;
        if dst == local {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("connection to {dst} was not redirected by iptables (it targets the proxy itself): refused"),
            ));
        }
        Ok(dst)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = s;
        Err(io::Error::new(io::ErrorKind::Unsupported, "transparent mode (SO_ORIGINAL_DST) is only supported on Linux"))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn targets() {
        assert_eq!(Target::parse("1.2.3.4:80").unwrap(), Target::Addr("1.2.3.4:80".parse().unwrap()));
        assert_eq!(Target::parse("[::1]:80").unwrap(), Target::Addr("[::1]:80".parse().unwrap()));
        assert_eq!(Target::parse("example.org:443").unwrap(), Target::Name("example.org".into(), 443));
        assert!(Target::parse("example.org").is_err());
        assert!(Target::parse("::1:80:x").is_err());
        assert_eq!(split_forward("8080=h:80").unwrap(), ("8080", "h:80"));
        assert!(split_forward("8080").is_err());
        assert!(split_forward("=h:1").is_err());
    }

    async fn request_of(bytes: &[u8]) -> (io::Result<Target>, Vec<u8>) {
        let (mut a, mut b) = tokio::io::duplex(1024);
        b.write_all(bytes).await.unwrap();
        drop(b.shutdown().await);
        let r = socks5_request(&mut a).await;
        drop(a);
        let mut out = Vec::new();
        b.read_to_end(&mut out).await.unwrap();
        (r, out)
    }

    #[test]
    fn socks5_udp_headers() {
        for t in [
            Target::Addr("10.0.0.1:53".parse().unwrap()),
            Target::Addr("[2001:db8::1]:443".parse().unwrap()),
            Target::Name("example.org".into(), 53),
        ] {
            let mut d = vec![0, 0, 0];
            d.extend_from_slice(&socks5_address(&t));
            let at = d.len();
            d.extend_from_slice(b"payload");
            assert_eq!(socks5_udp_header(&d), Some((t, at)));
        }
        assert_eq!(socks5_udp_header(&[0, 0, 1, 1, 10, 0, 0, 1, 0, 53]), None, "fragment");
        assert_eq!(socks5_udp_header(&[0, 0, 0, 3, 5, b'a']), None, "truncated name");
        assert_eq!(socks5_udp_header(&[0, 0, 0, 4, 1, 2]), None, "truncated v6");
        assert_eq!(socks5_udp_header(&[0, 0, 0, 9]), None);
        for len in 0..40 {
            let _ = socks5_udp_header(&vec![0u8; len]);
        }
    }

    #[tokio::test]
    async fn socks5_address_types() {
        let (r, _) = request_of(&[5, 1, 0, 5, 1, 0, 1, 10, 0, 0, 1, 0, 80]).await;
        assert_eq!(r.unwrap(), Target::Addr("10.0.0.1:80".parse().unwrap()));
        let mut v6 = vec![5, 1, 0, 5, 1, 0, 4];
        v6.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
        v6.extend_from_slice(&443u16.to_be_bytes());
        assert_eq!(request_of(&v6).await.0.unwrap(), Target::Addr("[::1]:443".parse().unwrap()));
        let mut name = vec![5, 1, 0, 5, 1, 0, 3, 9];
        name.extend_from_slice(b"localhost");
        name.extend_from_slice(&8080u16.to_be_bytes());
        assert_eq!(request_of(&name).await.0.unwrap(), Target::Name("localhost".into(), 8080));
        // UDP ASSOCIATE only where asked for.
        let (mut a, mut b) = tokio::io::duplex(1024);
        b.write_all(&[5, 1, 0, 5, 3, 0, 1, 0, 0, 0, 0, 0, 0]).await.unwrap();
        let (cmd, t) = socks5_request_for(&mut a, &[command::CONNECT, command::UDP_ASSOCIATE]).await.unwrap();
        assert_eq!((cmd, t), (command::UDP_ASSOCIATE, Target::Addr("0.0.0.0:0".parse().unwrap())));
        // BIND is refused with 0x07 after the greeting's answer.
        let (r, out) = request_of(&[5, 1, 0, 5, 2, 0, 1, 10, 0, 0, 1, 0, 80]).await;
        assert!(r.is_err());
        assert_eq!(&out[..4], &[5, 0, 5, reply::COMMAND_NOT_SUPPORTED]);
        // Truncated input and garbage are errors, never panics.
        assert!(request_of(&[5, 1, 0, 5, 1, 0, 3, 200, b'a']).await.0.is_err());
        assert!(request_of(&[4, 1]).await.0.is_err());
        let (r, out) = request_of(&[5, 1, 0, 5, 1, 0, 9]).await;
        assert!(r.is_err());
        assert_eq!(out[3], reply::ADDRESS_TYPE_NOT_SUPPORTED);
    }
}
