//! Parsing of the command line's value formats: sizes (`64K`, `2G`) and addresses.

use std::net::{SocketAddr, ToSocketAddrs};

/// Default TCPLS port (CLI.md).
pub const DEFAULT_PORT: u16 = 4443;

/// `1500`, `64K`, `256M`, `2G`, `1T` (binary multiples; a trailing `B`/`iB` is accepted).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let t = t.strip_suffix("iB").or_else(|| t.strip_suffix('B')).unwrap_or(t);
    let (digits, mult) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('m' | 'M') => (&t[..t.len() - 1], 1 << 20),
        Some('g' | 'G') => (&t[..t.len() - 1], 1 << 30),
        Some('t' | 'T') => (&t[..t.len() - 1], 1 << 40),
        _ => (t, 1),
    };
    let n: u64 = digits.trim().parse().map_err(|_| format!("invalid size {s:?} (examples: 1500, 64K, 256M, 2G)"))?;
    n.checked_mul(mult).ok_or_else(|| format!("size {s:?} is too large"))
}

/// A rate in bits per second: `100M` = 100,000,000 (decimal, like iperf).
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let t = s.trim().trim_end_matches("bps").trim_end_matches("bit/s");
    let (digits, mult) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 1_000u64),
        Some('m' | 'M') => (&t[..t.len() - 1], 1_000_000),
        Some('g' | 'G') => (&t[..t.len() - 1], 1_000_000_000),
        _ => (t, 1),
    };
    let n: f64 = digits.trim().parse().map_err(|_| format!("invalid rate {s:?} (examples: 200M, 1G)"))?;
    if !(n.is_finite() && n >= 0.0) {
        return Err(format!("invalid rate {s:?}"));
    }
    Ok((n * mult as f64) as u64)
}

/// The host part of `HOST:PORT` / `[V6]:PORT` / `HOST` (for the TLS server name).
pub fn host_of(addr: &str) -> String {
    if let Some(rest) = addr.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest).to_string();
    }
    match addr.rsplit_once(':') {
        Some((host, port)) if port.parse::<u16>().is_ok() && !host.contains(':') => host.to_string(),
        _ => addr.to_string(),
    }
}

/// Resolves `HOST:PORT`, `[V6]:PORT`, or `HOST` (default port 4443) to socket addresses.
pub fn resolve(addr: &str) -> Result<Vec<SocketAddr>, String> {
    if let Ok(sa) = addr.parse::<SocketAddr>() {
        return Ok(vec![sa]);
    }
    let has_port = match addr.rsplit_once(':') {
        Some((host, port)) => port.parse::<u16>().is_ok() && (!host.contains(':') || host.ends_with(']')),
        None => false,
    };
    let target = if has_port {
        addr.to_string()
    } else if addr.contains(':') && !addr.starts_with('[') {
        format!("[{addr}]:{DEFAULT_PORT}")
    } else {
        format!("{addr}:{DEFAULT_PORT}")
    };
    let list: Vec<SocketAddr> =
        target.to_socket_addrs().map_err(|e| format!("cannot resolve {addr:?}: {e}"))?.collect();
    if list.is_empty() {
        return Err(format!("{addr:?} resolved to no address"));
    }
    Ok(list)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("1500").unwrap(), 1500);
        assert_eq!(parse_size("64K").unwrap(), 65536);
        assert_eq!(parse_size("256M").unwrap(), 256 << 20);
        assert_eq!(parse_size("2G").unwrap(), 2 << 30);
        assert_eq!(parse_size("2GiB").unwrap(), 2 << 30);
        assert!(parse_size("x").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate("200M").unwrap(), 200_000_000);
        assert_eq!(parse_rate("1.5G").unwrap(), 1_500_000_000);
        assert!(parse_rate("fast").is_err());
    }

    #[test]
    fn addresses() {
        assert_eq!(resolve("127.0.0.1:5000").unwrap()[0].port(), 5000);
        assert_eq!(resolve("127.0.0.1").unwrap()[0].port(), DEFAULT_PORT);
        assert_eq!(resolve("[::1]:7").unwrap()[0].port(), 7);
        assert_eq!(resolve("::1").unwrap()[0].port(), DEFAULT_PORT);
        assert_eq!(host_of("[::1]:7"), "::1");
        assert_eq!(host_of("localhost:4443"), "localhost");
        assert_eq!(host_of("example.org"), "example.org");
    }
}
