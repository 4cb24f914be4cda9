//! Addresses as users write them: `HOST:PORT`, and a path `[LOCAL@]REMOTE` as the CLI's
//! `--path` takes it (LOCAL a local address or `dev:NAME`).

use std::net::{IpAddr, SocketAddr, ToSocketAddrs};

use tcpls::PathOptions;

use crate::error::{Error, ErrorKind, Result};

/// The addresses of `HOST:PORT` (a literal address, or a name the system resolves).
pub fn resolve(spec: &str) -> Result<Vec<SocketAddr>> {
    if let Ok(addr) = spec.parse::<SocketAddr>() {
        return Ok(vec![addr]);
    }
    if spec.rsplit_once(':').is_none_or(|(host, port)| host.is_empty() || port.parse::<u16>().is_err()) {
        return Err(Error::invalid(format!("'{spec}' is not HOST:PORT (e.g. 127.0.0.1:4443 or localhost:4443)")));
    }
    let addrs: Vec<SocketAddr> = spec
        .to_socket_addrs()
        .map_err(|e| Error::new(ErrorKind::Connect, format!("cannot resolve {spec}: {e}")))?
        .collect();
    if addrs.is_empty() {
        return Err(Error::new(ErrorKind::Connect, format!("{spec} resolved to no address")));
    }
    Ok(addrs)
}

/// A path: `[LOCAL@]REMOTE`, LOCAL a local address (`127.0.0.2`) or an interface (`dev:eth1`).
pub fn parse_path(spec: &str) -> Result<(SocketAddr, PathOptions)> {
    let (local, remote) = match spec.split_once('@') {
        Some((local, remote)) => (Some(local), remote),
        None => (None, spec),
    };
    let remote = resolve(remote)?[0];
    let options = match local.map(|l| (l, l.strip_prefix("dev:"))) {
        None => PathOptions::new(),
        Some((_, Some(""))) => return Err(Error::invalid("`dev:` needs an interface name, e.g. dev:wlan0")),
        Some((_, Some(dev))) => PathOptions::new().device(dev),
        Some((l, None)) => {
            let ip: IpAddr = l.trim_start_matches('[').trim_end_matches(']').parse().map_err(|_| {
                Error::invalid(format!(
                    "path {spec}: '{l}' is neither a local address (10.0.0.2) nor an interface (dev:wlan0)"
                ))
            })?;
            PathOptions::new().local(ip)
        }
    };
    Ok((remote, options))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_parse_like_the_cli() {
        let (remote, options) = parse_path("127.0.0.2@127.0.0.1:4443").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(remote, "127.0.0.1:4443".parse().unwrap_or_else(|e| panic!("{e}")));
        assert_eq!(options.local_address().map(|a| a.ip().to_string()).as_deref(), Some("127.0.0.2"));
        let (_, options) = parse_path("dev:lo@[::1]:1").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(options.device_name(), Some("lo"));
        for bad in ["", "nohost", "127.0.0.1", "wlan0@127.0.0.1:1", "dev:@127.0.0.1:1", "1.2.3.4:99999"] {
            assert_eq!(parse_path(bad).map(|_| ()).map_err(|e| e.kind), Err(ErrorKind::InvalidArgument), "{bad:?}");
        }
    }
}
