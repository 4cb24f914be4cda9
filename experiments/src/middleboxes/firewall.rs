//! A strict stateful firewall (iptables + conntrack) in the router namespace: FORWARD policy
//! DROP, conntrack INVALID dropped, no mid-stream pickup (`nf_conntrack_tcp_loose=0`, no
//! `be_liberal`), only new connections to the TCPLS port (SYN) let in. TCPLS is ordinary TLS over
//! TCP to it: expected native, including a second (joined) connection.

use std::net::SocketAddr;
use std::time::Duration;

use tcpls::{server_name_for, ConnectOutcome, TcplsConnector};
use tcpls_netem::{PathSpec, Side, Topology};

use super::bed::{self, EchoServer, Pki, SERVER_PORT};
use super::{scenario, Outcome, Ran, ScenarioResult, Trouble};

pub fn run(quick: bool) -> ScenarioResult {
    let software = bed::version("iptables", &["-V"]);
    scenario("firewall", "stateful firewall: conntrack, INVALID dropped, policy DROP", software, || body(quick))
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

fn body(quick: bool) -> Result<Ran, Trouble> {
    bed::require("iptables", "iptables")?;
    let topo = Topology::builder().path(PathSpec::new(5.0, 100.0)).build().map_err(|e| e.to_string())?;
    let server_ip = topo.path(0).info().server_addr().ok_or("no server address")?;
    let server = SocketAddr::new(server_ip, SERVER_PORT);
    let router = Side::Router(0);
    bed::iptables_all(&topo, router, &bed::TRACK_ONE_PASS).map_err(Trouble::Skip)?;
    bed::iptables_all(&topo, router, &RULES).map_err(Trouble::Skip)?;
    bed::sysctl(&topo, router, "net.netfilter.nf_conntrack_tcp_loose", "0")?;
    bed::sysctl(&topo, router, "net.netfilter.nf_conntrack_tcp_be_liberal", "0")?;

    let pki = Pki::new()?;
    let _server = EchoServer::start(&topo, &[server], pki.server()?)?;
    let connector = TcplsConnector::new(pki.client()?);
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
    let new = bed::rule_packets(&topo, router, "filter", "FORWARD", "ctstate NEW").unwrap_or(0);
    let invalid = bed::rule_packets(&topo, router, "filter", "FORWARD", "ctstate INVALID").unwrap_or(0);
    let dropped = bed::rule_packets(&topo, router, "filter", "FORWARD", "default-drop").unwrap_or(0);
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
