//! Parsing of the command line's value formats: sizes (`64K`, `2G`) and addresses.

use std::net::{SocketAddr, ToSocketAddrs};

/// Default TCPLS port (CLI.md).
pub const DEFAULT_PORT: u16 = 4443;

/// A byte count: `1500`, `64K`, `256M`, `1.5G`, `2T`. Binary multiples, as iperf3's `-n`
/// (K = 1024); a trailing `B` or `iB` changes nothing (`1GB` = `1GiB` = `1G` = 2^30 bytes).
/// A session's send budget (`--send-budget`): a size of at least two records.
pub fn parse_send_budget(s: &str) -> Result<usize, String> {
    let n = parse_size(s)?;
    let floor = tcpls::proto::SEND_FLOOR;
    match usize::try_from(n) {
        Ok(n) if n >= floor => Ok(n),
        _ => Err(format!("{s} is too small: the send budget must hold at least two records ({}K)", floor >> 10)),
    }
}

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
    let invalid = || format!("invalid size {s:?} (examples: 1500, 64K, 256M, 1.5G)");
    let digits = digits.trim();
    if let Ok(n) = digits.parse::<u64>() {
        return n.checked_mul(mult).ok_or_else(|| format!("size {s:?} is too large"));
    }
    let n: f64 = digits.parse().map_err(|_| invalid())?;
    if !n.is_finite() || n < 0.0 {
        return Err(invalid());
    }
    let bytes = (n * mult as f64).round();
    if bytes >= u64::MAX as f64 {
        return Err(format!("size {s:?} is too large"));
    }
    Ok(bytes as u64)
}

/// A duration: `10` or `1.5` (seconds, as iperf3's `-t`), `10s`, `500ms`, `2m`.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let t = s.trim();
    let (digits, unit) = if let Some(d) = t.strip_suffix("ms") {
        (d, 1e-3)
    } else if let Some(d) = t.strip_suffix('s') {
        (d, 1.0)
    } else if let Some(d) = t.strip_suffix('m') {
        (d, 60.0)
    } else {
        (t, 1.0)
    };
    let n: f64 =
        digits.trim().parse().map_err(|_| format!("invalid duration {s:?} (examples: 10, 1.5, 10s, 500ms)"))?;
    let secs = n * unit;
    if !secs.is_finite() || !(0.0..=1e9).contains(&secs) {
        return Err(format!("invalid duration {s:?} (examples: 10, 1.5, 10s, 500ms)"));
    }
    Ok(std::time::Duration::from_secs_f64(secs))
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
        assert_eq!(parse_size("1GB").unwrap(), 1 << 30);
        assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
        assert_eq!(parse_size("0.5k").unwrap(), 512);
        assert!(parse_size("x").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn durations() {
        use std::time::Duration;
        assert_eq!(parse_duration("10").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("1.5").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("10s").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("-1").is_err());
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

/// A `--path` value: `[LOCAL@]REMOTE`, where LOCAL is a local address (`10.0.0.2`) or an
/// interface (`dev:wlan0`) and REMOTE a server address as for the first connection. Without
/// LOCAL the kernel picks the source by its routes.
pub fn parse_path(spec: &str) -> Result<(SocketAddr, tcpls::PathOptions), String> {
    let (local, remote) = match spec.split_once('@') {
        Some((local, remote)) => (Some(local), remote),
        None => (None, spec),
    };
    let remote = *resolve(remote)?.first().ok_or_else(|| format!("{remote} resolved to no address"))?;
    let options = match local {
        None => tcpls::PathOptions::new(),
        Some(l) => parse_local(l).map_err(|e| format!("--path {spec}: {e}"))?,
    };
    Ok((remote, options))
}

/// A `--bind` value (or the LOCAL of `--path`): a local address (`10.0.0.2`, `[fe80::1]`) or an
/// interface (`dev:wlan0`).
pub fn parse_local(l: &str) -> Result<tcpls::PathOptions, String> {
    match l.strip_prefix("dev:") {
        Some("") => Err("`dev:` needs an interface name, e.g. dev:wlan0".into()),
        Some(dev) => Ok(tcpls::PathOptions::new().device(dev)),
        None => {
            let ip: std::net::IpAddr = l
                .trim_start_matches('[')
                .trim_end_matches(']')
                .parse()
                .map_err(|_| format!("'{l}' is neither a local address (10.0.0.2) nor an interface (dev:wlan0)"))?;
            Ok(tcpls::PathOptions::new().local(ip))
        }
    }
}

/// A `--path-manager` value.
/// The schedulers `--scheduler` offers for aggregated (unsteered) streams
/// (docs/ARCHITECTURE.md, "Scheduler of aggregated streams").
pub const SCHEDULERS: [&str; 3] = ["earliest-arrival", "lowest-rtt", "round-robin"];

/// The scheduler named `name` (one of [`SCHEDULERS`]).
pub fn scheduler(name: &str) -> Result<Box<dyn tcpls::Scheduler>, String> {
    match name {
        "earliest-arrival" => Ok(Box::new(tcpls::EarliestArrival)),
        "lowest-rtt" => Ok(Box::new(tcpls::LowestRtt)),
        "round-robin" => Ok(Box::new(tcpls::RoundRobin::default())),
        _ => Err(format!("--scheduler {name}: expected one of {}", SCHEDULERS.join(", "))),
    }
}

pub fn parse_policy(p: &str) -> Result<tcpls::PathPolicy, String> {
    match p {
        "manual" => Ok(tcpls::PathPolicy::Manual),
        "fullmesh" => Ok(tcpls::PathPolicy::Fullmesh),
        _ => Err(format!("--path-manager {p}: expected manual or fullmesh")),
    }
}

/// Starts a path manager over `--bind`/`--path` and waits (3 s at most) for its paths; logs
/// those still down (they keep being retried) and returns the connections it added.
pub async fn start_path_manager(
    who: &str,
    session: &tcpls::Session,
    origin: std::net::SocketAddr,
    policy: tcpls::PathPolicy,
    initial: tcpls::PathOptions,
    paths: &[(SocketAddr, tcpls::PathOptions)],
) -> (tcpls::PathManager, Vec<tcpls::ConnId>) {
    let config = tcpls::PathManagerConfig::from_paths(policy, initial, paths);
    let manager = tcpls::PathManager::start(session, origin, config);
    #[cfg(target_os = "linux")]
    if let Err(e) = manager.follow_interfaces() {
        crate::logging::warn(who, &format!("no interface events (paths are still retried): {e}"));
    }
    let paths = manager.wait_for_paths(std::time::Duration::from_secs(3)).await;
    for p in paths.iter().filter(|p| p.conn.is_none()) {
        let why = p.last_error.as_deref().unwrap_or("not connected yet");
        crate::logging::warn(who, &format!("path {}{} is down ({why}); retrying", p.endpoint.path, p.remote));
    }
    let added = paths.iter().filter_map(|p| p.conn).filter(|c| *c != 0).collect();
    (manager, added)
}

#[cfg(test)]
mod path_spec_tests {
    use super::parse_path;

    #[test]
    fn local_sides() {
        let (remote, p) = parse_path("127.0.0.1:4443").unwrap();
        assert_eq!((remote.to_string(), p), ("127.0.0.1:4443".to_string(), tcpls::PathOptions::new()));
        let (_, p) = parse_path("10.0.0.2@127.0.0.1:4443").unwrap();
        assert_eq!(p.local_address().map(|a| a.ip().to_string()), Some("10.0.0.2".into()));
        let (remote, p) = parse_path("dev:wlan0@[::1]:4443").unwrap();
        assert_eq!((remote.to_string(), p.device_name()), ("[::1]:4443".to_string(), Some("wlan0")));
        let (_, p) = parse_path("[fe80::1]@[::1]:4443").unwrap();
        assert!(p.local_address().is_some_and(|a| a.is_ipv6()));
        for bad in ["dev:@127.0.0.1:1", "wlan0@127.0.0.1:1"] {
            let e = parse_path(bad).unwrap_err();
            assert!(e.contains("dev:"), "{bad}: {e}");
        }
    }
}
