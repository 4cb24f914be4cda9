//! Which destinations a proxy may connect to: the tunnel concentrator's and the TM3 remote
//! proxy's `--allow-dest` / `--deny-dest` (docs/CLI.md, docs/SECURITY.md).
//!
//! A proxy that connects wherever its clients ask is, by default, a way into the proxy host
//! itself (its loopback services) and into what only that host can reach (cloud metadata at
//! 169.254.169.254). So the *safe* policy refuses a few built-in ranges — loopback,
//! link-local, unspecified ("this network"), multicast and broadcast — and allows the rest.
//!
//! The safe policy also refuses the host's *own* addresses (and the broadcast addresses of its
//! networks) as its routing table sees them at connect time: a service bound to 0.0.0.0 answers
//! on the host's public address as on loopback ([`DestPolicy::check_on_this_host`]).
//!
//! Precedence, simple on purpose: a `--deny-dest` match refuses; otherwise an `--allow-dest`
//! match allows (it lifts the built-in refusals); otherwise a built-in range refuses (safe
//! policy only); otherwise the destination is allowed. Rules are checked against the address
//! as given and, for an IPv4-mapped IPv6 address (`::ffff:127.0.0.1`), against the IPv4
//! address it carries, so a mapped address is never a way around an IPv4 rule.

use std::fmt;
use std::net::IpAddr;

use ipnet::IpNet;

/// Why a built-in range is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Category {
    Loopback,
    LinkLocal,
    Unspecified,
    Multicast,
    Broadcast,
    /// One of this host's own addresses (its route is local).
    HostAddress,
}

impl fmt::Display for Category {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Category::Loopback => "loopback",
            Category::LinkLocal => "link-local",
            Category::Unspecified => "unspecified (this host)",
            Category::Multicast => "multicast",
            Category::Broadcast => "broadcast",
            Category::HostAddress => "one of this host's own addresses",
        })
    }
}

/// The ranges the safe policy refuses unless `--allow-dest` lifts them.
pub const BUILT_IN_REFUSALS: &[(&str, Category)] = &[
    ("0.0.0.0/8", Category::Unspecified),
    ("127.0.0.0/8", Category::Loopback),
    ("169.254.0.0/16", Category::LinkLocal),
    ("224.0.0.0/4", Category::Multicast),
    ("255.255.255.255/32", Category::Broadcast),
    ("::/128", Category::Unspecified),
    ("::1/128", Category::Loopback),
    ("fe80::/10", Category::LinkLocal),
    ("ff00::/8", Category::Multicast),
];

/// Why a destination was refused (for the log line).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub addr: IpAddr,
    pub why: Why,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Why {
    /// In a built-in range of the safe policy.
    BuiltIn(Category, IpNet),
    /// The host's routing table says the address is local (or a broadcast address).
    Route(Category),
    /// In a `--deny-dest` range.
    Denied(IpNet),
    /// The per-client policy of this client (its name, the rule) refuses it.
    Client(String, String),
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.why {
            Why::BuiltIn(c, net) => {
                write!(f, "destination {} is {c} ({net}, refused unless --allow-dest permits it)", self.addr)
            }
            Why::Denied(net) => write!(f, "destination {} is in --deny-dest {net}", self.addr),
            Why::Route(c) => write!(f, "destination {} is {c} (refused unless --allow-dest permits it)", self.addr),
            Why::Client(name, rule) => write!(f, "destination {} is refused for client \"{name}\" ({rule})", self.addr),
        }
    }
}

impl std::error::Error for Refusal {}

/// A destination policy; [`DestPolicy::check`] decides.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DestPolicy {
    built_in: Vec<(IpNet, Category)>,
    allow: Vec<IpNet>,
    deny: Vec<IpNet>,
}

impl Default for DestPolicy {
    /// The safe policy.
    fn default() -> Self {
        DestPolicy::safe()
    }
}

/// Parses `--allow-dest` / `--deny-dest`: `ADDR/PREFIX` (host bits are ignored) or a bare
/// address (a single host).
pub fn parse_cidr(s: &str) -> Result<IpNet, String> {
    let s = s.trim();
    s.parse::<IpNet>()
        .map(|n| n.trunc())
        .or_else(|_| s.parse::<IpAddr>().map(IpNet::from))
        .map_err(|_| format!("'{s}' is not a CIDR range (e.g. 10.0.0.0/8, fd00::/8) or an IP address"))
}

impl DestPolicy {
    /// Refuses the [`BUILT_IN_REFUSALS`], allows the rest: the tunnel concentrator's default.
    pub fn safe() -> Self {
        let built_in = BUILT_IN_REFUSALS.iter().filter_map(|(s, c)| Some((s.parse().ok()?, *c))).collect();
        DestPolicy { built_in, allow: Vec::new(), deny: Vec::new() }
    }

    /// Allows everything: the TM3 remote proxy's default (its specification connects anywhere).
    pub fn open() -> Self {
        DestPolicy { built_in: Vec::new(), allow: Vec::new(), deny: Vec::new() }
    }

    /// Allows everything in everything: the `--allow-dest` of tests that relay to loopback.
    pub fn allow_all() -> Self {
        let mut p = DestPolicy::safe();
        p.allow.extend(["0.0.0.0/0", "::/0"].iter().filter_map(|s| s.parse::<IpNet>().ok()));
        p
    }

    /// `base` plus the command line's ranges (strings as [`parse_cidr`] reads them).
    pub fn with_rules<S: AsRef<str>>(mut base: DestPolicy, allow: &[S], deny: &[S]) -> Result<Self, String> {
        for a in allow {
            base.allow.push(parse_cidr(a.as_ref()).map_err(|e| format!("--allow-dest: {e}"))?);
        }
        for d in deny {
            base.deny.push(parse_cidr(d.as_ref()).map_err(|e| format!("--deny-dest: {e}"))?);
        }
        Ok(base)
    }

    /// Adds an `--allow-dest` range.
    pub fn allow(&mut self, net: IpNet) -> &mut Self {
        self.allow.push(net);
        self
    }

    /// Adds a `--deny-dest` range.
    pub fn deny(&mut self, net: IpNet) -> &mut Self {
        self.deny.push(net);
        self
    }

    /// Whether connecting to `addr` is allowed; the reason if not.
    pub fn check(&self, addr: IpAddr) -> Result<(), Refusal> {
        // The address as given and, if it is IPv4-mapped, the IPv4 address it reaches.
        let canonical = addr.to_canonical();
        let forms = [addr, canonical];
        let refuse = |why| Err(Refusal { addr, why });
        if let Some(net) = self.deny.iter().find(|n| forms.iter().any(|a| n.contains(a))) {
            return refuse(Why::Denied(*net));
        }
        if self.allow.iter().any(|n| forms.iter().any(|a| n.contains(a))) {
            return Ok(());
        }
        if let Some((net, c)) = self.built_in.iter().find(|(n, _)| n.contains(&canonical)) {
            return refuse(Why::BuiltIn(*c, *net));
        }
        Ok(())
    }

    /// [`DestPolicy::check`], and for the safe policy also what this host's routing table says
    /// of an address not explicitly allowed: one of its own addresses, or a broadcast address
    /// of one of its networks, is refused like loopback. Costs a few system calls (no packet).
    pub fn check_on_this_host(&self, addr: IpAddr) -> Result<(), Refusal> {
        self.check(addr)?;
        let canonical = addr.to_canonical();
        let explicit = self.allow.iter().any(|n| n.contains(&addr) || n.contains(&canonical));
        if self.built_in.is_empty() || explicit {
            return Ok(());
        }
        match local_route(canonical) {
            Some(c) => Err(Refusal { addr, why: Why::Route(c) }),
            None => Ok(()),
        }
    }

    /// Refuses nothing (no built-in ranges, no `--deny-dest`).
    pub fn is_open(&self) -> bool {
        self.deny.is_empty() && (self.built_in.is_empty() || self.allows_everything())
    }

    fn allows_everything(&self) -> bool {
        let all = |v4: bool| self.allow.iter().any(|n| n.prefix_len() == 0 && matches!(n, IpNet::V4(_)) == v4);
        all(true) && all(false)
    }
}

/// What the routing table says of `ip`, found without sending anything: a UDP socket
/// "connected" to an address takes the route's source address, which for a local route is the
/// address itself; the route to a broadcast address refuses the connect (EACCES without
/// SO_BROADCAST). None: a route elsewhere, or none at all (the TCP connect will fail anyway).
pub fn local_route(ip: IpAddr) -> Option<Category> {
    let bind: std::net::SocketAddr = match ip {
        IpAddr::V4(_) => (std::net::Ipv4Addr::UNSPECIFIED, 0).into(),
        IpAddr::V6(_) => (std::net::Ipv6Addr::UNSPECIFIED, 0).into(),
    };
    let udp = std::net::UdpSocket::bind(bind).ok()?;
    match udp.connect((ip, 9)) {
        Ok(()) => udp.local_addr().ok().filter(|l| l.ip() == ip).map(|_| Category::HostAddress),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Some(Category::Broadcast),
        Err(_) => None,
    }
}

impl fmt::Display for DestPolicy {
    /// One line for the start-up banner.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |v: &[IpNet]| v.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(" ");
        if self.built_in.is_empty() {
            f.write_str("any destination")?;
        } else {
            f.write_str(
                "refusing loopback, link-local, unspecified, multicast, broadcast and this host's own addresses",
            )?;
        }
        if !self.allow.is_empty() {
            write!(f, "; allowed: {}", list(&self.allow))?;
        }
        if !self.deny.is_empty() {
            write!(f, "; denied: {}", list(&self.deny))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn category(p: &DestPolicy, s: &str) -> Option<Category> {
        match p.check(ip(s)) {
            Ok(()) => None,
            Err(Refusal { why: Why::BuiltIn(c, _), .. }) => Some(c),
            Err(r) => panic!("{s}: unexpected {r}"),
        }
    }

    #[test]
    fn built_in_table_parses() {
        assert_eq!(DestPolicy::safe().built_in.len(), BUILT_IN_REFUSALS.len());
    }

    #[test]
    fn safe_refuses_special_ranges() {
        let p = DestPolicy::safe();
        use Category::*;
        for (a, c) in [
            ("127.0.0.1", Loopback),
            ("127.255.1.2", Loopback),
            ("::1", Loopback),
            ("169.254.169.254", LinkLocal),
            ("fe80::1", LinkLocal),
            ("febf::1", LinkLocal),
            ("0.0.0.0", Unspecified),
            ("0.1.2.3", Unspecified),
            ("::", Unspecified),
            ("224.0.0.1", Multicast),
            ("239.255.255.250", Multicast),
            ("ff02::1", Multicast),
            ("255.255.255.255", Broadcast),
        ] {
            assert_eq!(category(&p, a), Some(c), "{a}");
        }
        for a in ["8.8.8.8", "10.0.0.1", "192.168.1.1", "172.16.0.1", "2001:db8::1", "fd00::1", "fec0::1", "128.0.0.1"]
        {
            assert_eq!(category(&p, a), None, "{a}");
        }
    }

    #[test]
    fn ipv4_mapped_addresses_follow_the_ipv4_rules() {
        let p = DestPolicy::safe();
        assert_eq!(category(&p, "::ffff:127.0.0.1"), Some(Category::Loopback));
        assert_eq!(category(&p, "::ffff:169.254.169.254"), Some(Category::LinkLocal));
        assert_eq!(category(&p, "::ffff:0.0.0.0"), Some(Category::Unspecified));
        assert_eq!(category(&p, "::ffff:8.8.8.8"), None);
        let denied = DestPolicy::with_rules(DestPolicy::open(), &[] as &[&str], &["10.0.0.0/8"]).unwrap();
        assert!(denied.check(ip("::ffff:10.1.2.3")).is_err());
        let allowed = DestPolicy::with_rules(DestPolicy::safe(), &["127.0.0.0/8"], &[]).unwrap();
        assert!(allowed.check(ip("::ffff:127.0.0.1")).is_ok());
        // ::1 is IPv6 loopback, not covered by an IPv4 rule.
        assert!(allowed.check(ip("::1")).is_err());
    }

    #[test]
    fn allow_lifts_built_in_and_deny_wins() {
        let p =
            DestPolicy::with_rules(DestPolicy::safe(), &["127.0.0.0/8", "10.0.0.0/8"], &["127.0.0.2", "10.9.0.0/16"])
                .unwrap();
        assert!(p.check(ip("127.0.0.1")).is_ok());
        assert_eq!(p.check(ip("127.0.0.2")).unwrap_err().why, Why::Denied(parse_cidr("127.0.0.2/32").unwrap()));
        assert!(p.check(ip("10.1.0.1")).is_ok());
        assert!(p.check(ip("10.9.0.1")).is_err());
        assert!(p.check(ip("169.254.169.254")).is_err());
        let msg = p.check(ip("10.9.0.1")).unwrap_err().to_string();
        assert!(msg.contains("--deny-dest 10.9.0.0/16"), "{msg}");
        let msg = p.check(ip("169.254.169.254")).unwrap_err().to_string();
        assert!(msg.contains("link-local"), "{msg}");
    }

    #[test]
    fn open_policy_allows_everything_but_deny() {
        let p = DestPolicy::open();
        assert!(p.is_open());
        for a in ["127.0.0.1", "::1", "169.254.169.254", "0.0.0.0", "224.0.0.1"] {
            assert!(p.check(ip(a)).is_ok(), "{a}");
        }
        let p = DestPolicy::with_rules(DestPolicy::open(), &[] as &[&str], &["169.254.169.254/32"]).unwrap();
        assert!(!p.is_open());
        assert!(p.check(ip("169.254.169.254")).is_err());
        assert!(p.check(ip("169.254.169.253")).is_ok());
    }

    #[test]
    fn allow_all_lifts_every_built_in_range() {
        let p = DestPolicy::allow_all();
        assert!(p.is_open());
        assert!(!DestPolicy::safe().is_open());
        for (net, _) in BUILT_IN_REFUSALS {
            let n: IpNet = net.parse().unwrap();
            assert!(p.check(n.network()).is_ok(), "{net}");
        }
    }

    /// This host's address on its default route (no packet is sent), if it has one.
    fn own_address() -> Option<IpAddr> {
        let udp = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
        udp.connect("192.0.2.200:9").or_else(|_| udp.connect("198.51.100.1:9")).ok()?;
        Some(udp.local_addr().ok()?.ip()).filter(|ip| !ip.is_loopback() && !ip.is_unspecified())
    }

    #[test]
    fn the_hosts_own_addresses_are_refused_unless_allowed() {
        let Some(me) = own_address() else {
            eprintln!("SKIPPED: the_hosts_own_addresses_are_refused_unless_allowed: no non-loopback address");
            return;
        };
        assert_eq!(local_route(me), Some(Category::HostAddress), "{me}");
        let safe = DestPolicy::safe();
        assert!(safe.check(me).is_ok(), "not in a built-in range");
        let r = safe.check_on_this_host(me).unwrap_err();
        assert_eq!(r.why, Why::Route(Category::HostAddress));
        assert!(r.to_string().contains("this host's own addresses"), "{r}");
        if let IpAddr::V4(v4) = me {
            assert!(safe.check_on_this_host(IpAddr::V6(v4.to_ipv6_mapped())).is_err());
        }
        assert!(DestPolicy::with_rules(DestPolicy::safe(), &[me.to_string()], &[])
            .unwrap()
            .check_on_this_host(me)
            .is_ok());
        assert!(DestPolicy::open().check_on_this_host(me).is_ok());
        // Not local: documentation addresses are routed elsewhere (or nowhere).
        assert_eq!(local_route(ip("203.0.113.77")), None);
        assert!(safe.check_on_this_host(ip("203.0.113.77")).is_ok());
    }

    #[test]
    fn cidr_syntax() {
        assert_eq!(parse_cidr("10.0.0.0/8").unwrap().to_string(), "10.0.0.0/8");
        assert_eq!(parse_cidr("10.1.2.3/8").unwrap().to_string(), "10.0.0.0/8");
        assert_eq!(parse_cidr(" 10.1.2.3 ").unwrap().to_string(), "10.1.2.3/32");
        assert_eq!(parse_cidr("fe80::/10").unwrap().to_string(), "fe80::/10");
        assert_eq!(parse_cidr("::1").unwrap().to_string(), "::1/128");
        for bad in ["", "10.0.0.0/33", "localhost", "10.0.0/8", "::/129", "1.2.3.4/-1"] {
            assert!(parse_cidr(bad).is_err(), "{bad}");
        }
        let e = DestPolicy::with_rules(DestPolicy::safe(), &["nonsense"], &[]).unwrap_err();
        assert!(e.starts_with("--allow-dest:"), "{e}");
    }
}
