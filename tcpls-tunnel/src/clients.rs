//! The concentrator's per-client policy (docs/TUNNEL.md "Per-client policy"): with mutual TLS
//! (`--client-ca`) every client has a certificate, and its *name* is the certificate subject's
//! common name (CN), or else its first DNS subject alternative name. An entry for a name gives
//! that client
//! - destination rules layered over the server-wide policy: its `deny-dest` refuses, its
//!   `allow-dest` allows (lifting the server-wide refusals, `--deny-dest` included), its
//!   `only-dest`, when set, refuses everything outside it; otherwise the server-wide policy
//!   decides;
//! - a `rate` in bytes per second over all its relayed traffic, both directions, all sessions
//!   (a token bucket: TCP waits, UDP drops);
//! - `max-sessions`: sessions of this client at once.
//!
//! A client whose certificate names no entry is *unknown*: refused when any entry exists,
//! unless `unknown-clients = "allow"` (then it gets the server-wide policy and limits only).
//! Without entries the per-client policy is off and every client the CA accepts is served.

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;

use crate::policy::{parse_cidr, DestPolicy, Refusal, Why};

/// The label of every client without an entry, in metrics (bounded cardinality).
pub const OTHER: &str = "other";

/// One client's entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientRule {
    pub allow: Vec<IpNet>,
    pub deny: Vec<IpNet>,
    /// When not empty: only these destinations (still subject to `deny` and, unless `allow`
    /// names them, to the server-wide policy).
    pub only: Vec<IpNet>,
    /// Bytes per second over all the client's relays; None: unlimited.
    pub rate: Option<u64>,
    /// Sessions of this client at once; None: only the server-wide limit.
    pub max_sessions: Option<usize>,
}

/// All entries, and what happens to clients without one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientPolicy {
    pub clients: BTreeMap<String, ClientRule>,
    /// Serve clients without an entry (when there are entries). Default: refuse them.
    pub allow_unknown: bool,
}

impl ClientPolicy {
    /// No entry: every client the CA accepts is served, with the server-wide policy.
    pub fn is_off(&self) -> bool {
        self.clients.is_empty()
    }

    /// The entry for `id`: its CN's, else the first of its DNS names that has one.
    pub fn lookup(&self, id: &ClientId) -> Option<(&str, &ClientRule)> {
        id.names().find_map(|n| self.clients.get_key_value(n)).map(|(k, v)| (k.as_str(), v))
    }

    /// Whether a client without an entry is served.
    pub fn admits_unknown(&self) -> bool {
        self.is_off() || self.allow_unknown
    }
}

impl ClientRule {
    /// Parses the CIDR lists (as `--allow-dest` does), naming `who` in errors.
    pub fn with_dests<S: AsRef<str>>(who: &str, allow: &[S], deny: &[S], only: &[S]) -> Result<ClientRule, String> {
        let parse = |v: &[S], key: &str| {
            v.iter()
                .map(|s| parse_cidr(s.as_ref()).map_err(|e| format!("client \"{who}\": {key}: {e}")))
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(ClientRule {
            allow: parse(allow, "allow-dest")?,
            deny: parse(deny, "deny-dest")?,
            only: parse(only, "only-dest")?,
            ..ClientRule::default()
        })
    }

    /// The client's rules over the server-wide `server` policy (see the module's doc).
    pub fn check(&self, name: &str, server: &DestPolicy, addr: IpAddr) -> Result<(), Refusal> {
        let forms = [addr, addr.to_canonical()];
        let hit = |v: &[IpNet]| v.iter().find(|n| forms.iter().any(|a| n.contains(a))).copied();
        if let Some(net) = hit(&self.deny) {
            return Err(Refusal { addr, why: Why::Client(name.to_string(), format!("deny-dest {net}")) });
        }
        if hit(&self.allow).is_some() {
            return Ok(());
        }
        if !self.only.is_empty() && hit(&self.only).is_none() {
            return Err(Refusal { addr, why: Why::Client(name.to_string(), "not in its only-dest".into()) });
        }
        server.check_on_this_host(addr)
    }
}

impl fmt::Display for ClientRule {
    /// One line for logs and `check-config`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |v: &[IpNet]| v.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(" ");
        let mut parts = Vec::new();
        if !self.allow.is_empty() {
            parts.push(format!("allowed: {}", list(&self.allow)));
        }
        if !self.deny.is_empty() {
            parts.push(format!("denied: {}", list(&self.deny)));
        }
        if !self.only.is_empty() {
            parts.push(format!("only: {}", list(&self.only)));
        }
        if let Some(r) = self.rate {
            parts.push(format!("rate {r} bytes/s"));
        }
        if let Some(m) = self.max_sessions {
            parts.push(format!("at most {m} session(s)"));
        }
        if parts.is_empty() {
            parts.push("server-wide policy".into());
        }
        f.write_str(&parts.join("; "))
    }
}

/// What a client certificate says of its holder.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientId {
    /// The subject's (first) common name.
    pub cn: Option<String>,
    /// The DNS names of its subject alternative names.
    pub dns: Vec<String>,
}

impl ClientId {
    /// Reads the leaf certificate (DER); an unparseable one names nobody.
    pub fn from_der(der: &[u8]) -> ClientId {
        use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};
        let Ok((_, cert)) = X509Certificate::from_der(der) else { return ClientId::default() };
        let cn = cert.subject().iter_common_name().next().and_then(|a| a.as_str().ok()).map(str::to_string);
        let dns = match cert.subject_alternative_name() {
            Ok(Some(san)) => san
                .value
                .general_names
                .iter()
                .filter_map(|n| match n {
                    GeneralName::DNSName(d) => Some(d.to_string()),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        ClientId { cn, dns }
    }

    /// The names an entry may be keyed by, in order: CN, then DNS names.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.cn.iter().chain(&self.dns).map(String::as_str)
    }

    /// For log lines: the CN, else the first DNS name, else "(no name)". Control characters
    /// of a hostile certificate are escaped.
    pub fn display_name(&self) -> String {
        self.names().next().map(|n| n.escape_debug().to_string()).unwrap_or_else(|| "(no name)".into())
    }
}

/// Parses a rate in bytes per second: `2000000`, `500K`, `2M`, `1.5G` (powers of 1000), `4Mi`
/// (powers of 1024); an optional `B` or `B/s` after the unit.
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let t = t.strip_suffix("/s").unwrap_or(t);
    let t = t.strip_suffix('B').unwrap_or(t);
    let (num, mult) = [
        ("Ki", 1u64 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("K", 1000),
        ("k", 1000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
    ]
    .iter()
    .find_map(|(suffix, m)| t.strip_suffix(suffix).map(|n| (n, *m)))
    .unwrap_or((t, 1));
    match num.trim().parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 1.0 && x * (mult as f64) < 1e15 => Ok((x * mult as f64) as u64),
        _ => Err(format!("'{s}' is not a rate in bytes per second (e.g. 2000000, 500K, 50M, 1G, 4Mi)")),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate("2000000").unwrap(), 2_000_000);
        assert_eq!(parse_rate("50M").unwrap(), 50_000_000);
        assert_eq!(parse_rate("50MB/s").unwrap(), 50_000_000);
        assert_eq!(parse_rate("1.5G").unwrap(), 1_500_000_000);
        assert_eq!(parse_rate("4Mi").unwrap(), 4 << 20);
        assert_eq!(parse_rate("500k").unwrap(), 500_000);
        for bad in ["", "0", "-1M", "fast", "1X", "nanM", "1e20"] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn client_rules_layer_over_the_server_policy() {
        let server = DestPolicy::with_rules(DestPolicy::safe(), &["127.0.0.0/8"], &["10.9.0.0/16"]).unwrap();
        let none = ClientRule::default();
        assert!(none.check("a", &server, ip("127.0.0.1")).is_ok());
        assert!(none.check("a", &server, ip("10.9.0.1")).is_err());
        assert!(none.check("a", &server, ip("169.254.169.254")).is_err());
        // deny wins; allow lifts the server's refusals (its deny-dest and built-in ranges).
        let r = ClientRule::with_dests("bob", &["10.9.1.0/24", "169.254.169.254"], &["127.0.0.2"], &[]).unwrap();
        let e = r.check("bob", &server, ip("127.0.0.2")).unwrap_err();
        assert!(e.to_string().contains("client \"bob\"") && e.to_string().contains("deny-dest 127.0.0.2/32"), "{e}");
        assert!(r.check("bob", &server, ip("::ffff:127.0.0.2")).is_err());
        assert!(r.check("bob", &server, ip("127.0.0.1")).is_ok());
        assert!(r.check("bob", &server, ip("10.9.1.7")).is_ok());
        assert!(r.check("bob", &server, ip("10.9.2.7")).is_err());
        assert!(r.check("bob", &server, ip("169.254.169.254")).is_ok());
        // only-dest: nothing outside, and the server-wide refusals still apply inside.
        let o = ClientRule::with_dests("o", &[], &[], &["127.0.0.0/8", "10.0.0.0/8"]).unwrap();
        assert!(o.check("o", &server, ip("127.0.0.1")).is_ok());
        assert!(o.check("o", &server, ip("10.9.0.1")).is_err());
        let e = o.check("o", &server, ip("192.0.2.1")).unwrap_err();
        assert!(e.to_string().contains("only-dest"), "{e}");
        assert!(ClientRule::with_dests("x", &["nope"], &[], &[]).unwrap_err().contains("client \"x\": allow-dest"));
    }

    #[test]
    fn names_from_certificates_and_lookup() {
        let cert = tcpls_test::Identity::self_signed(Some("alice"), &["alice.example", "a2.example"]).unwrap();
        let id = ClientId::from_der(&cert.cert);
        assert_eq!(id.cn.as_deref(), Some("alice"));
        assert_eq!(id.dns, ["alice.example", "a2.example"]);
        let mut p = ClientPolicy::default();
        assert!(p.is_off() && p.admits_unknown());
        p.clients.insert("a2.example".into(), ClientRule::default());
        assert_eq!(p.lookup(&id).unwrap().0, "a2.example");
        p.clients.insert("alice".into(), ClientRule::default());
        assert_eq!(p.lookup(&id).unwrap().0, "alice");
        assert!(!p.admits_unknown());
        assert_eq!(ClientId::from_der(b"junk"), ClientId::default());
        assert_eq!(ClientId::default().display_name(), "(no name)");
        let weird = ClientId { cn: Some("a\nb".into()), dns: vec![] };
        assert_eq!(weird.display_name(), "a\\nb");
    }
}
