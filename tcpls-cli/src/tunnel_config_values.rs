//! The addresses, CIDRs and forwards of a tunnel configuration file, each with where it is
//! written, checked when the file is read: a bad one is an error naming its line
//! (`tunnel.toml: line 7: [client] socks: '127.0.0.1:99999': bad port`) rather than a failure
//! later, when the proxy starts or a rule is applied. The keys and their types are checked by
//! [`crate::tunnel_config::FileConfig`]; this view reads only the values that have a syntax of
//! their own, parsed into the types the commands use (`SocketAddr`, `IpNet`, [`Target`]).

use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};
use std::ops::Range;

use serde::Deserialize;
use tcpls_tunnel::frontend::{split_forward, Target};
use toml::Spanned;

type Text = Spanned<String>;

#[derive(Default, Deserialize)]
pub struct Values {
    #[serde(default)]
    server: Option<ServerValues>,
    #[serde(default)]
    client: Option<ClientValues>,
    #[serde(default)]
    clients: BTreeMap<String, ClientEntryValues>,
}

#[derive(Default, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
struct ServerValues {
    listen: Vec<Text>,
    allow_dest: Vec<Text>,
    deny_dest: Vec<Text>,
    allow_reverse: Vec<Text>,
    advertise: Vec<Text>,
    metrics: Option<Text>,
}

#[derive(Default, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
struct ClientValues {
    concentrator: Option<Text>,
    path: Vec<Text>,
    bind: Option<Text>,
    path_manager: Option<Text>,
    socks: Option<Text>,
    http: Option<Text>,
    forward: Vec<Text>,
    forward_udp: Vec<Text>,
    reverse: Vec<Text>,
    metrics: Option<Text>,
}

/// `[clients."NAME"]` (snake_case keys are accepted too, as in the full table).
#[derive(Default, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
struct ClientEntryValues {
    #[serde(alias = "allow_dest")]
    allow_dest: Vec<Text>,
    #[serde(alias = "deny_dest")]
    deny_dest: Vec<Text>,
    #[serde(alias = "only_dest")]
    only_dest: Vec<Text>,
}

/// A value's error: where it is written, and the message.
pub type ValueError = (Range<usize>, String);

impl Values {
    /// The first bad value, if any.
    pub fn check(&self) -> Result<(), ValueError> {
        if let Some(s) = &self.server {
            each("[server] listen", &s.listen, |v| host_port(v, Some(4443)))?;
            each("[server] allow-dest", &s.allow_dest, cidr)?;
            each("[server] deny-dest", &s.deny_dest, cidr)?;
            each("[server] allow-reverse", &s.allow_reverse, ip_port)?;
            each("[server] advertise", &s.advertise, ip_port)?;
            each("[server] metrics", s.metrics.iter(), |v| host_port(v, None))?;
        }
        if let Some(c) = &self.client {
            each("[client] concentrator", c.concentrator.iter(), |v| {
                v.split(',').try_for_each(|one| host_port(one.trim(), Some(4443)))
            })?;
            each("[client] path", &c.path, path)?;
            each("[client] bind", c.bind.iter(), |v| crate::args::parse_local(v).map(drop))?;
            each("[client] path-manager", c.path_manager.iter(), |v| crate::args::parse_policy(v).map(drop))?;
            each("[client] socks", c.socks.iter(), listen)?;
            each("[client] http", c.http.iter(), listen)?;
            each("[client] forward", &c.forward, |v| forward_with_options(v, "--forward"))?;
            each("[client] forward-udp", &c.forward_udp, |v| forward_with_options(v, "--forward-udp"))?;
            each("[client] reverse", &c.reverse, reverse)?;
            each("[client] metrics", c.metrics.iter(), |v| host_port(v, None))?;
        }
        for (name, entry) in &self.clients {
            // As the policy's own errors name them: `[clients] client "alice": only-dest: ...`.
            each(&format!("[clients] client \"{name}\": allow-dest"), &entry.allow_dest, cidr)?;
            each(&format!("[clients] client \"{name}\": deny-dest"), &entry.deny_dest, cidr)?;
            each(&format!("[clients] client \"{name}\": only-dest"), &entry.only_dest, cidr)?;
        }
        Ok(())
    }
}

fn each<'a>(
    key: &str,
    values: impl IntoIterator<Item = &'a Text>,
    check: impl Fn(&str) -> Result<(), String>,
) -> Result<(), ValueError> {
    for v in values {
        check(v.get_ref()).map_err(|e| (v.span(), format!("{key}: {e}")))?;
    }
    Ok(())
}

/// `IP:PORT`, `[V6]:PORT` or `HOST:PORT` (a name is resolved when used, not here), or, with a
/// default port, an address or host without one.
fn host_port(s: &str, default_port: Option<u16>) -> Result<(), String> {
    if s.parse::<SocketAddr>().is_ok() {
        return Ok(());
    }
    if default_port.is_some() {
        let bare = s.strip_prefix('[').and_then(|r| r.strip_suffix(']')).unwrap_or(s);
        if bare.parse::<IpAddr>().is_ok() {
            return Ok(());
        }
        if !s.contains(':') {
            return host_name(s, s);
        }
    }
    let Some((host, port)) = s.rsplit_once(':') else {
        return Err(format!("'{s}': expected HOST:PORT"));
    };
    port.parse::<u16>().map_err(|_| format!("'{s}': bad port '{port}' (a port is 0 to 65535)"))?;
    if host.starts_with('[') {
        // `[V6]:PORT` with a valid port did not parse: the address is wrong.
        return Err(format!("'{s}': bad IPv6 address '{host}'"));
    }
    host_name(s, host)
}

fn host_name(s: &str, host: &str) -> Result<(), String> {
    let ok = !host.is_empty()
        && host.len() <= 253
        && host.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(format!("'{s}': bad host '{host}'"))
    }
}

/// A listening address: `HOST:PORT`, `[V6]:PORT` or a bare `PORT` (on 127.0.0.1).
fn listen(s: &str) -> Result<(), String> {
    if s.parse::<u16>().is_ok() {
        return Ok(());
    }
    if s.chars().all(|c| c.is_ascii_digit()) && !s.is_empty() {
        return Err(format!("'{s}': bad port (a port is 0 to 65535)"));
    }
    host_port(s, None)
}

/// `IP:PORT` only (a reverse forward's address on the concentrator's host).
fn ip_port(s: &str) -> Result<(), String> {
    match s.parse::<SocketAddr>() {
        Ok(_) => Ok(()),
        Err(_) => host_port(s, None).and_then(|()| Err(format!("'{s}' is not IP:PORT (an address, not a name)"))),
    }
}

fn cidr(s: &str) -> Result<(), String> {
    tcpls_tunnel::policy::parse_cidr(s).map(drop)
}

/// `[LOCAL@]ADDR`.
fn path(s: &str) -> Result<(), String> {
    let remote = match s.split_once('@') {
        Some((local, remote)) => {
            crate::args::parse_local(local)?;
            remote
        }
        None => s,
    };
    host_port(remote, Some(4443))
}

/// `LISTEN=TARGET`.
fn forward(s: &str) -> Result<(), String> {
    let (l, t) = split_forward(s)?;
    listen(l)?;
    target(t)
}

/// `LISTEN=TARGET[,OPTION]...` (`crate::tunnel_forward`).
fn forward_with_options(s: &str, what: &str) -> Result<(), String> {
    forward(crate::tunnel_forward::split_options(s, what)?.0)
}

/// `REMOTE=LOCAL`: REMOTE an `IP:PORT` of the concentrator's host, LOCAL a `HOST:PORT`.
fn reverse(s: &str) -> Result<(), String> {
    let (remote, local) = split_forward(s)?;
    ip_port(remote)?;
    target(local)
}

fn target(s: &str) -> Result<(), String> {
    host_port(s, None)?;
    Target::parse(s).map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses() {
        for ok in ["127.0.0.1:1080", "[::1]:4443", "localhost:80", "tunnel.example.org:4443"] {
            assert_eq!(host_port(ok, None), Ok(()), "{ok}");
        }
        for ok in ["203.0.113.5", "[2001:db8::1]", "2001:db8::1", "tunnel.example.org"] {
            assert_eq!(host_port(ok, Some(4443)), Ok(()), "{ok}");
        }
        for bad in ["127.0.0.1:99999", "127.0.0.1", "localhost:", ":80", "[::1:80", "a b:80", "127.0.0.1:-1"] {
            assert!(host_port(bad, None).is_err(), "{bad}");
        }
        assert!(host_port("127.0.0.1:99999", Some(4443)).unwrap_err().contains("bad port"));
        assert_eq!(listen("1080"), Ok(()));
        assert!(listen("99999").is_err());
        assert!(ip_port("localhost:8022").is_err());
        assert!(ip_port("127.0.0.1:8022").is_ok());
    }

    #[test]
    fn forwards_and_paths() {
        assert_eq!(forward("127.0.0.1:8080=example.org:80"), Ok(()));
        assert_eq!(forward("5353=9.9.9.9:53"), Ok(()));
        assert_eq!(forward_with_options("8080=example.org:80,bond", "--forward"), Ok(()));
        assert!(forward_with_options("8080=example.org:80,bond", "--forward-udp").is_err());
        assert_eq!(forward_with_options("5353=9.9.9.9:53,redundant", "--forward-udp"), Ok(()));
        assert!(forward("127.0.0.1:8080=example.org:800000").is_err());
        assert!(forward("127.0.0.1:80800=example.org:80").is_err());
        assert!(forward("127.0.0.1:8080").is_err());
        assert_eq!(reverse("127.0.0.1:8022=127.0.0.1:22"), Ok(()));
        assert!(reverse("host:8022=127.0.0.1:22").is_err());
        assert_eq!(path("dev:wwan0@203.0.113.5:4443"), Ok(()));
        assert_eq!(path("10.0.0.2@203.0.113.5"), Ok(()));
        assert!(path("wwan0@203.0.113.5:4443").is_err());
        assert!(cidr("10.0.0.0/33").is_err());
    }
}
