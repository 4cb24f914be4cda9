//! The server side of an HTTP proxy request (RFC 9110 §9.3.6 CONNECT, and absolute-form
//! requests such as `GET http://host/path`), for the tunnel client's `--http` front end.
//!
//! The request head is parsed with `httparse`, within [`MAX_HEAD`] bytes (the caller bounds the
//! time). A CONNECT is answered `200` once the tunnel is open and then carries raw bytes; an
//! absolute-form request is rewritten to origin form with `Connection: close` (one request per
//! proxied connection, so a keep-alive client cannot send its next request, maybe for another
//! host, to this one's server).

use std::fmt;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::frontend::{valid_host_name, Target};

/// Largest request head accepted (request line and headers); larger is answered 431.
pub const MAX_HEAD: usize = 16 << 10;
/// Headers accepted in a request head.
const MAX_HEADERS: usize = 64;

/// A parsed proxy request.
#[derive(Debug, PartialEq, Eq)]
pub struct ProxyRequest {
    pub target: Target,
    /// CONNECT (answered 200, then raw bytes) or a request to forward.
    pub connect: bool,
    /// For a forwarded request: its head rewritten to origin form. Empty for CONNECT.
    pub head: Vec<u8>,
    /// Bytes that followed the head (a request body, or a pipelined TLS ClientHello).
    pub rest: Vec<u8>,
}

/// Why a request is answered with an error status.
#[derive(Debug, PartialEq, Eq)]
pub struct HttpError {
    pub status: u16,
    pub why: String,
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}: {}", self.status, reason(self.status), self.why)
    }
}

fn bad(status: u16, why: impl Into<String>) -> HttpError {
    HttpError { status, why: why.into() }
}

/// Reason phrase of the statuses this proxy sends.
pub fn reason(status: u16) -> &'static str {
    match status {
        200 => "Connection established",
        400 => "Bad Request",
        403 => "Forbidden",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        431 => "Request Header Fields Too Large",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Error",
    }
}

/// Sends a status line without a body, and `Connection: close` for errors.
pub async fn respond<S: AsyncWrite + Unpin>(s: &mut S, status: u16) -> std::io::Result<()> {
    let text = if status == 200 {
        "HTTP/1.1 200 Connection established\r\n\r\n".to_string()
    } else {
        format!("HTTP/1.1 {status} {}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", reason(status))
    };
    s.write_all(text.as_bytes()).await?;
    s.flush().await
}

/// Reads and parses one request head. A connection closed before a complete head is a 400 (the
/// answer will not be read, but it is harmless).
pub async fn read_request<S: AsyncRead + Unpin>(s: &mut S) -> Result<ProxyRequest, HttpError> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(req) = parse(&buf)? {
            return Ok(req);
        }
        if buf.len() >= MAX_HEAD {
            return Err(bad(431, format!("request head over {MAX_HEAD} bytes")));
        }
        let room = (MAX_HEAD - buf.len()).min(chunk.len());
        let n = s.read(&mut chunk[..room]).await.map_err(|e| bad(400, format!("reading the request: {e}")))?;
        if n == 0 {
            return Err(bad(400, "connection closed before the end of the request head"));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Parses `buf` if it holds a complete head: `Ok(None)` when more bytes are needed.
pub fn parse(buf: &[u8]) -> Result<Option<ProxyRequest>, HttpError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(bad(431, format!("more than {MAX_HEADERS} headers"))),
        Err(e) => return Err(bad(400, format!("malformed request: {e}"))),
    };
    let (Some(method), Some(path), Some(version)) = (req.method, req.path, req.version) else {
        return Err(bad(400, "incomplete request line"));
    };
    let rest = buf[len..].to_vec();
    if method.eq_ignore_ascii_case("CONNECT") {
        let target = authority(path, None)?;
        return Ok(Some(ProxyRequest { target, connect: true, head: Vec::new(), rest }));
    }
    let Some(after_scheme) = strip_prefix_ignore_case(path, "http://") else {
        return Err(bad(
            400,
            format!("'{path}' is not an absolute http:// URI (use CONNECT for https and other protocols)"),
        ));
    };
    let split = after_scheme.find(['/', '?']).unwrap_or(after_scheme.len());
    let (auth, origin) = after_scheme.split_at(split);
    let auth = auth.rsplit_once('@').map_or(auth, |(_, host)| host);
    let target = authority(auth, Some(80))?;
    let origin = match origin {
        "" => "/".to_string(),
        o if o.starts_with('?') => format!("/{o}"),
        o => o.to_string(),
    };
    let mut head = format!("{method} {origin} HTTP/1.{version}\r\n").into_bytes();
    let mut has_host = false;
    for h in req.headers.iter() {
        let name = h.name.to_ascii_lowercase();
        if matches!(name.as_str(), "proxy-connection" | "proxy-authorization" | "connection" | "keep-alive") {
            continue;
        }
        has_host |= name == "host";
        head.extend_from_slice(h.name.as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(h.value);
        head.extend_from_slice(b"\r\n");
    }
    if !has_host {
        head.extend_from_slice(format!("Host: {auth}\r\n").as_bytes());
    }
    head.extend_from_slice(b"Connection: close\r\n\r\n");
    Ok(Some(ProxyRequest { target, connect: false, head, rest }))
}

fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix).then(|| &s[prefix.len()..])
}

/// `host:port`, `[v6]:port`, or with `default_port` also `host` and `[v6]`.
fn authority(s: &str, default_port: Option<u16>) -> Result<Target, HttpError> {
    if let Ok(t) = Target::parse(s) {
        if let Target::Name(h, p) = &t {
            // "[::1]:80" is parsed as an address above; anything else in brackets is bad.
            if h.starts_with('[') || !valid_host_name(h) {
                return Err(bad(400, format!("'{s}' is not a host name")));
            }
            return Ok(Target::Name(h.clone(), *p));
        }
        return Ok(t);
    }
    let Some(port) = default_port else {
        return Err(bad(400, format!("CONNECT target '{s}' is not HOST:PORT")));
    };
    let host = s.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(s);
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return Ok(Target::Addr(std::net::SocketAddr::new(ip, port)));
    }
    if host.contains(':') || !valid_host_name(host) {
        return Err(bad(400, format!("'{s}' is not a host name")));
    }
    Ok(Target::Name(host.to_string(), port))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ok(bytes: &[u8]) -> ProxyRequest {
        parse(bytes).unwrap().unwrap()
    }

    #[test]
    fn connect_requests() {
        let r = ok(b"CONNECT example.org:443 HTTP/1.1\r\nHost: example.org:443\r\n\r\n\x16\x03\x01");
        assert_eq!(r.target, Target::Name("example.org".into(), 443));
        assert!(r.connect);
        assert_eq!(r.rest, b"\x16\x03\x01");
        assert_eq!(ok(b"CONNECT [::1]:8443 HTTP/1.1\r\n\r\n").target, Target::Addr("[::1]:8443".parse().unwrap()));
        assert_eq!(ok(b"CONNECT 10.0.0.1:22 HTTP/1.0\r\n\r\n").target, Target::Addr("10.0.0.1:22".parse().unwrap()));
        assert_eq!(parse(b"CONNECT example.org:443 HTTP/1.1\r\nHost: x\r\n").unwrap(), None);
        for bad_target in ["example.org", "example.org:99999", "ex ample:1", "[x]:1", ":80"] {
            let req = format!("CONNECT {bad_target} HTTP/1.1\r\n\r\n");
            assert_eq!(parse(req.as_bytes()).unwrap_err().status, 400, "{bad_target}");
        }
    }

    #[test]
    fn absolute_form_is_rewritten() {
        let r = ok(b"GET http://127.0.0.1:8080/a/b?c=1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nProxy-Connection: Keep-Alive\r\nAccept: */*\r\n\r\n");
        assert_eq!(r.target, Target::Addr("127.0.0.1:8080".parse().unwrap()));
        assert!(!r.connect);
        assert_eq!(
            String::from_utf8(r.head).unwrap(),
            "GET /a/b?c=1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        );
        let r = ok(b"POST HTTP://Example.org HTTP/1.0\r\nContent-Length: 2\r\n\r\nhi");
        assert_eq!(r.target, Target::Name("Example.org".into(), 80));
        assert_eq!(
            String::from_utf8(r.head).unwrap(),
            "POST / HTTP/1.0\r\nContent-Length: 2\r\nHost: Example.org\r\nConnection: close\r\n\r\n"
        );
        assert_eq!(r.rest, b"hi");
        assert_eq!(ok(b"GET http://[::1]/ HTTP/1.1\r\n\r\n").target, Target::Addr("[::1]:80".parse().unwrap()));
        assert!(ok(b"GET http://h?q HTTP/1.1\r\n\r\n").head.starts_with(b"GET /?q HTTP/1.1\r\n"));
    }

    #[test]
    fn hostile_heads_are_errors() {
        assert_eq!(parse(b"GET /index.html HTTP/1.1\r\n\r\n").unwrap_err().status, 400);
        assert_eq!(parse(b"GET https://example.org/ HTTP/1.1\r\n\r\n").unwrap_err().status, 400);
        assert_eq!(parse(b"\x00\x01\x02 garbage\r\n\r\n").unwrap_err().status, 400);
        assert_eq!(parse(b"GET http://a b/ HTTP/1.1\r\n\r\n").unwrap_err().status, 400);
        let mut many = b"CONNECT a:1 HTTP/1.1\r\n".to_vec();
        for i in 0..100 {
            many.extend_from_slice(format!("X-{i}: y\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert_eq!(parse(&many).unwrap_err().status, 431);
    }

    #[tokio::test]
    async fn head_size_is_bounded() {
        let (mut a, mut b) = tokio::io::duplex(MAX_HEAD * 2);
        let mut long = b"CONNECT a:1 HTTP/1.1\r\nX: ".to_vec();
        long.resize(MAX_HEAD + 100, b'y');
        b.write_all(&long).await.unwrap();
        assert_eq!(read_request(&mut a).await.unwrap_err().status, 431);
        let (mut a, mut b) = tokio::io::duplex(64);
        b.write_all(b"CONNECT a:1 HTTP/1.1\r\n").await.unwrap();
        drop(b);
        assert_eq!(read_request(&mut a).await.unwrap_err().status, 400);
    }
}
