//! A strict stateful firewall (conntrack) in the router namespace, written once with iptables and
//! once as a native nftables ruleset: forward policy drop, conntrack INVALID dropped, no
//! mid-stream pickup (`nf_conntrack_tcp_loose=0`, no `be_liberal`), only new connections to the
//! TCPLS port (SYN) let in. TCPLS is ordinary TLS over TCP to it: expected native, including a
//! second (joined) connection.

use std::net::SocketAddr;
use std::time::Duration;

use tcpls::{server_name_for, ConnectOutcome, TcplsConnector};
use tcpls_netem::{PathSpec, Side, Topology};

use super::bed::{self, EchoServer, Pki, SERVER_PORT};
use super::{scenario, Outcome, Ran, ScenarioResult, Trouble};

pub fn run(quick: bool) -> ScenarioResult {
    let software = bed::version("iptables", &["-V"]);
    let what = "stateful firewall (iptables): conntrack, INVALID dropped, policy DROP";
    scenario("firewall", what, software, || body(quick, &Iptables))
}

pub fn run_nft(quick: bool) -> ScenarioResult {
    let software = bed::version("nft", &["--version"]);
    let what = "stateful firewall (nftables ruleset): ct state invalid dropped, policy drop";
    scenario("firewall-nft", what, software, || body(quick, &Nftables))
}

/// One way of installing the firewall, and of reading its counters.
trait Firewall {
    fn install(&self, topo: &Topology) -> Result<(), Trouble>;
    /// Packets counted by the rule marked `needle` ("ctstate NEW", "ctstate INVALID", "default-drop").
    fn packets(&self, topo: &Topology, needle: &str) -> Option<u64>;
}

struct Iptables;

impl Firewall for Iptables {
    fn install(&self, topo: &Topology) -> Result<(), Trouble> {
        bed::require("iptables", "iptables")?;
        bed::iptables_all(topo, Side::Router(0), &bed::TRACK_ONE_PASS).map_err(Trouble::Skip)?;
        bed::iptables_all(topo, Side::Router(0), &RULES).map_err(Trouble::Skip)
    }

    fn packets(&self, topo: &Topology, needle: &str) -> Option<u64> {
        bed::rule_packets(topo, Side::Router(0), "filter", "FORWARD", needle)
    }
}

struct Nftables;

/// The same policy as `RULES`, in nftables' own language; the comments name the counters.
const NFT_RULESET: &str = r#"table inet middlebox {
    chain raw {
        type filter hook prerouting priority raw;
        iifname { "toc", "tundn" } notrack
    }
    chain forward {
        type filter hook forward priority filter; policy drop;
        iifname "toc" oifname "tunup" accept
        iifname "tundn" oifname "toc" accept
        ct state invalid counter drop comment "ctstate INVALID"
        ct state established,related accept
        iifname "tunup" oifname "tos" tcp dport 4443 tcp flags & (syn | ack) == syn ct state new counter accept comment "ctstate NEW"
        counter drop comment "default-drop"
    }
}
"#;

impl Firewall for Nftables {
    fn install(&self, topo: &Topology) -> Result<(), Trouble> {
        let nft = bed::require("nft", "nftables")?;
        let dir = bed::TempDir::new("nft")?;
        let file = dir.write("ruleset.nft", NFT_RULESET)?;
        bed::run(topo.command(Side::Router(0), nft).arg("-f").arg(file)).map(drop).map_err(Trouble::Skip)
    }

    fn packets(&self, topo: &Topology, needle: &str) -> Option<u64> {
        let out =
            bed::run(topo.command(Side::Router(0), "nft").args(["list", "chain", "inet", "middlebox", "forward"]));
        let out = out.ok()?;
        let line = out.lines().find(|l| l.contains(&format!("comment \"{needle}\"")))?;
        line.split("packets ").nth(1)?.split_whitespace().next()?.parse().ok()
    }
}

/// The filter rules. Tracked legs: emulator → server side (c→s), server side → emulator (s→c).
const RULES: [&[&str]; 7] = [
    &["-P", "FORWARD", "DROP"],
    // The untracked legs between the client's veth and the emulator (see bed::TRACK_ONE_PASS).
    &["-A", "FORWARD", "-i", "toc", "-o", "tunup", "-j", "ACCEPT"],
    &["-A", "FORWARD", "-i", "tundn", "-o", "toc", "-j", "ACCEPT"],
    &["-A", "FORWARD", "-m", "conntrack", "--ctstate", "INVALID", "-j", "DROP"],
    &["-A", "FORWARD", "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"],
    &[
        "-A",
        "FORWARD",
        "-i",
        "tunup",
        "-o",
        "tos",
        "-p",
        "tcp",
        "--syn",
        "--dport",
        "4443",
        "-m",
        "conntrack",
        "--ctstate",
        "NEW",
        "-j",
        "ACCEPT",
    ],
    &["-A", "FORWARD", "-m", "comment", "--comment", "default-drop", "-j", "DROP"],
];

fn body(quick: bool, firewall: &dyn Firewall) -> Result<Ran, Trouble> {
    let topo = Topology::builder().path(PathSpec::new(5.0, 100.0)).build().map_err(|e| e.to_string())?;
    let server_ip = topo.path(0).info().server_addr().ok_or("no server address")?;
    let server = SocketAddr::new(server_ip, SERVER_PORT);
    let router = Side::Router(0);
    firewall.install(&topo)?;
    bed::sysctl(&topo, router, "net.netfilter.nf_conntrack_tcp_loose", "0")?;
    bed::sysctl(&topo, router, "net.netfilter.nf_conntrack_tcp_be_liberal", "0")?;

    let pki = Pki::try_new()?;
    let _server = EchoServer::start(&topo, &[server], pki.server())?;
    let connector = TcplsConnector::new(pki.client());
    let len = if quick { 1 << 20 } else { 8 << 20 };
    let (outcome, bytes) = bed::in_client(&topo, async move {
        let name = server_name_for("localhost").map_err(|e| e.to_string())?;
        let (session, outcome) = connector.connect_detailed(server, name).await.map_err(|e| format!("connect: {e}"))?;
        let mut bytes = bed::round_trip(&session, len, 1, Some(0)).await?;
        // A second connection through the firewall, joined to the session.
        let joined = session.join(server).await.map_err(|e| format!("join through the firewall: {e}"))?;
        bytes += bed::round_trip(&session, len, 2, Some(joined)).await?;
        session.close().await;
        Ok((outcome, bytes))
    })?;

    // The policy is enforced: a port that is not let in gets no answer (not even a RST).
    let probe = SocketAddr::new(server_ip, 5555);
    let blocked = topo
        .run_in(Side::Client, move || std::net::TcpStream::connect_timeout(&probe, Duration::from_millis(700)))
        .map_err(|e| e.to_string())?;
    let enforced =
        matches!(&blocked, Err(e) if matches!(e.kind(), std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock));
    if !enforced {
        return Err(Trouble::Fail(format!("the firewall is not enforcing its policy: port 5555 gave {blocked:?}")));
    }
    let new = firewall.packets(&topo, "ctstate NEW").unwrap_or(0);
    let invalid = firewall.packets(&topo, "ctstate INVALID").unwrap_or(0);
    let dropped = firewall.packets(&topo, "default-drop").unwrap_or(0);
    let native = outcome == ConnectOutcome::Tcpls;
    Ok(Ran {
        outcome: if native { Outcome::Native } else { Outcome::Failed },
        detail: format!(
            "{outcome}; initial connection + join admitted as NEW ({new} SYNs), {invalid} INVALID packets dropped, \
             {dropped} packets dropped by the default policy (a probe to port 5555 got no answer)"
        ),
        bytes_verified: bytes,
    })
}
