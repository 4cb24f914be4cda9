//! A client and a server namespace joined by two paths, and the ways to make path 0 go silent
//! (no RST, no FIN: the packets just stop) and come back. Two kinds of paths:
//! - plain veth pairs between the two namespaces (no emulator: line rate, microsecond RTT);
//! - tcpls-netem's emulated paths (a router namespace per path, 10 ms each way).
//!
//! Path i (k = i + 1): client 10.k.1.2 on interface p<i>, server 10.k.2.2 on its p<i>, the
//! addressing of tcpls-netem, so the same commands work on both kinds.

#![allow(dead_code, clippy::unwrap_used)]

use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use tcpls_netem::{PathSpec, Side, Topology, NS_PREFIX};

/// What the two paths are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Net {
    Veth,
    /// tcpls-netem paths: 10 ms each way, this rate.
    Emulated {
        mbps: u32,
    },
}

impl Net {
    pub fn name(self) -> &'static str {
        match self {
            Net::Veth => "veth",
            Net::Emulated { .. } => "emulated 20 ms",
        }
    }

    /// The paths' round-trip time without queueing.
    pub fn rtt(self) -> Duration {
        match self {
            Net::Veth => Duration::ZERO,
            Net::Emulated { .. } => Duration::from_millis(20),
        }
    }
}

/// How path 0 goes silent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Silence {
    /// `ip link set p0 down` in the client (the routes through it go too).
    LinkDown,
    /// iptables DROP of everything in and out of the server's p0.
    DropBoth,
    /// iptables DROP of what arrives at the server's p0 only (client → server): the server's
    /// packets still reach the client, the client's (data or ACKs) are lost.
    DropClientToServer,
}

impl Silence {
    pub const ALL: [Silence; 3] = [Silence::LinkDown, Silence::DropBoth, Silence::DropClientToServer];

    pub fn name(self) -> &'static str {
        match self {
            Silence::LinkDown => "link down",
            Silence::DropBoth => "drop both ways",
            Silence::DropClientToServer => "drop client->server",
        }
    }

    /// The server's iptables rules (without the -I/-D verb).
    fn rules(self) -> &'static [&'static [&'static str]] {
        match self {
            Silence::LinkDown => &[],
            Silence::DropBoth => &[&["INPUT", "-i", "p0", "-j", "DROP"], &["OUTPUT", "-o", "p0", "-j", "DROP"]],
            Silence::DropClientToServer => &[&["INPUT", "-i", "p0", "-j", "DROP"]],
        }
    }
}

pub fn client_ip(path: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, path as u8 + 1, 1, 2)
}

pub fn server_ip(path: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, path as u8 + 1, 2, 2)
}

/// Runs `ip ARGS`; the error says which command failed and why.
pub fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("cannot run ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// Two namespaces joined by two veth pairs; deleted on drop. The names follow tcpls-netem's
/// pattern (`tn<pid>x<n>-...`), so its stale cleanup also removes them after a killed run.
struct Veth {
    client: String,
    server: String,
}

impl Veth {
    fn new() -> Result<Veth, String> {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let prefix = format!("{NS_PREFIX}{}x{}", std::process::id(), 9000 + COUNTER.fetch_add(1, Ordering::SeqCst));
        let bed = Veth { client: format!("{prefix}-c"), server: format!("{prefix}-s") };
        for ns in [&bed.client, &bed.server] {
            ip(&["netns", "add", ns])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        for i in 0..2 {
            let dev = format!("p{i}");
            let (cmac, smac) = (format!("02:00:00:{:02x}:01:02", i + 1), format!("02:00:00:{:02x}:02:02", i + 1));
            ip(&[
                "-n",
                &bed.client,
                "link",
                "add",
                &dev,
                "address",
                &cmac,
                "type",
                "veth",
                "peer",
                "name",
                &dev,
                "address",
                &smac,
                "netns",
                &bed.server,
            ])?;
            ip(&["-n", &bed.client, "addr", "add", &format!("{}/24", client_ip(i)), "dev", &dev])?;
            ip(&["-n", &bed.server, "addr", "add", &format!("{}/24", server_ip(i)), "dev", &dev])?;
            ip(&["-n", &bed.client, "link", "set", &dev, "up"])?;
            ip(&["-n", &bed.server, "link", "set", &dev, "up"])?;
            bed.routes(i)?;
        }
        Ok(bed)
    }

    /// Each side reaches the other's subnet of path i through p<i>, without ARP; a socket
    /// bound to the client's path-i address leaves through p<i> whatever its destination (as
    /// tcpls-netem's source routing does).
    fn routes(&self, i: usize) -> Result<(), String> {
        let dev = format!("p{i}");
        let (c, s) = (self.client.as_str(), self.server.as_str());
        let (cmac, smac) = (format!("02:00:00:{:02x}:01:02", i + 1), format!("02:00:00:{:02x}:02:02", i + 1));
        let table = (1000 + i).to_string();
        ip(&[
            "-n",
            c,
            "neigh",
            "replace",
            &server_ip(i).to_string(),
            "lladdr",
            &smac,
            "dev",
            &dev,
            "nud",
            "permanent",
        ])?;
        ip(&[
            "-n",
            s,
            "neigh",
            "replace",
            &client_ip(i).to_string(),
            "lladdr",
            &cmac,
            "dev",
            &dev,
            "nud",
            "permanent",
        ])?;
        let server_net = format!("10.{}.2.0/24", i + 1);
        let client_net = format!("10.{}.1.0/24", i + 1);
        let via_server = server_ip(i).to_string();
        ip(&["-n", c, "route", "replace", &server_net, "dev", &dev])?;
        ip(&["-n", s, "route", "replace", &client_net, "dev", &dev])?;
        ip(&["-n", c, "route", "replace", "default", "via", &via_server, "dev", &dev, "onlink", "table", &table])?;
        // Idempotent: the rule may exist already (after a link went down and came back).
        let _ = ip(&["-n", c, "rule", "del", "from", &client_ip(i).to_string(), "table", &table]);
        ip(&["-n", c, "rule", "add", "from", &client_ip(i).to_string(), "table", &table, "pref", &table])
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.client]);
        let _ = ip(&["netns", "del", &self.server]);
    }
}

/// The test bed of one scenario.
pub struct Bed {
    pub net: Net,
    veth: Option<Veth>,
    topo: Option<Topology>,
}

impl Bed {
    pub fn new(net: Net) -> Result<Bed, String> {
        match net {
            Net::Veth => Ok(Bed { net, veth: Some(Veth::new()?), topo: None }),
            Net::Emulated { mbps } => {
                let spec = PathSpec { queue_packets: 100, ..PathSpec::new(10.0, f64::from(mbps)) };
                Bed::emulated(net, vec![spec.clone(), spec])
            }
        }
    }

    /// Emulated paths of the given specs.
    pub fn emulated(net: Net, specs: Vec<PathSpec>) -> Result<Bed, String> {
        let topo = Topology::builder().paths(specs).build().map_err(|e| format!("cannot build the topology: {e}"))?;
        Ok(Bed { net, veth: None, topo: Some(topo) })
    }

    pub fn ns(&self, side: Side) -> &str {
        match (&self.veth, &self.topo, side) {
            (Some(v), _, Side::Client) => &v.client,
            (Some(v), _, _) => &v.server,
            (None, Some(t), side) => t.ns_name(side),
            (None, None, _) => unreachable!("a bed has veth pairs or a topology"),
        }
    }

    /// `program` inside a namespace.
    pub fn command(&self, side: Side, program: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", self.ns(side), program]);
        cmd
    }

    fn iptables(&self, verb: &str, rule: &[&str]) -> Result<(), String> {
        let out = self
            .command(Side::Server, "iptables")
            .arg(verb)
            .args(rule)
            .output()
            .map_err(|e| format!("cannot run iptables: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!("iptables {verb} {}: {}", rule.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
        }
    }

    /// Path 0 goes silent.
    pub fn silence(&self, how: Silence) -> Result<(), String> {
        match how {
            Silence::LinkDown => ip(&["-n", self.ns(Side::Client), "link", "set", "p0", "down"]),
            _ => how.rules().iter().try_for_each(|r| self.iptables("-I", r)),
        }
    }

    /// Path 0 comes back: the link up with its routes (as DHCP would put them back), or the
    /// rules removed.
    pub fn restore(&self, how: Silence) -> Result<(), String> {
        match how {
            Silence::LinkDown => {
                ip(&["-n", self.ns(Side::Client), "link", "set", "p0", "up"])?;
                match (&self.veth, &self.topo) {
                    (Some(v), _) => v.routes(0),
                    (None, Some(t)) => t.path(0).restore_routes().map_err(|e| format!("routes of path 0: {e}")),
                    (None, None) => Ok(()),
                }
            }
            _ => how.rules().iter().try_for_each(|r| self.iptables("-D", r)),
        }
    }
}

/// Whether iptables works in a namespace here (the DROP scenarios need it).
pub fn iptables_available() -> Result<(), String> {
    match Command::new("iptables").arg("-V").output() {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!("iptables -V failed: {}", String::from_utf8_lossy(&o.stderr).trim())),
        Err(e) => Err(format!("iptables is not installed ({e})")),
    }
}
