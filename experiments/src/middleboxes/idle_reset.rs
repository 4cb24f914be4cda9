//! A firewall that resets idle connections: conntrack forgets established TCP flows after two
//! seconds (`nf_conntrack_tcp_timeout_established`), does not pick up mid-stream packets
//! (`nf_conntrack_tcp_loose=0`), and answers packets of flows it does not know (INVALID) with a
//! TCP reset. After an idle period the client's next record is reset; the session's failover
//! with rejoin (break-before-make: a new TCP connection joined with a spare token,
//! unacknowledged records re-sent) must carry the session on.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tcpls::{server_name_for, ConnectOutcome, TcplsConnector};
use tcpls_netem::{PathSpec, Side, Topology};

use super::bed::{self, EchoServer, Pki, SERVER_PORT};
use super::{scenario, Outcome, Ran, ScenarioResult, Trouble};

/// conntrack's idle timeout for established TCP flows, in seconds.
const IDLE_TIMEOUT_S: u64 = 2;
/// How long the application stays silent: well past the timeout.
const IDLE: Duration = Duration::from_millis(IDLE_TIMEOUT_S * 1000 + 2000);

pub fn run(quick: bool) -> ScenarioResult {
    let software = bed::version("iptables", &["-V"]);
    let what = "idle-flow reset: conntrack established timeout 2 s, unknown flows get a TCP RST";
    scenario("idle-reset", what, software, || body(quick))
}

const RULES: [&[&str]; 7] = [
    &["-P", "FORWARD", "DROP"],
    &["-A", "FORWARD", "-i", "toc", "-o", "tunup", "-j", "ACCEPT"],
    &["-A", "FORWARD", "-i", "tundn", "-o", "toc", "-j", "ACCEPT"],
    &[
        "-A",
        "FORWARD",
        "-p",
        "tcp",
        "-m",
        "conntrack",
        "--ctstate",
        "INVALID",
        "-j",
        "REJECT",
        "--reject-with",
        "tcp-reset",
    ],
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
    &["-A", "FORWARD", "-j", "DROP"],
];

fn body(quick: bool) -> Result<Ran, Trouble> {
    bed::require("iptables", "iptables")?;
    let topo = Topology::builder().path(PathSpec::new(5.0, 100.0)).build().map_err(|e| e.to_string())?;
    let server = SocketAddr::new(topo.path(0).info().server_addr().ok_or("no server address")?, SERVER_PORT);
    let router = Side::Router(0);
    bed::iptables_all(&topo, router, &bed::TRACK_ONE_PASS).map_err(Trouble::Skip)?;
    bed::iptables_all(&topo, router, &RULES).map_err(Trouble::Skip)?;
    bed::sysctl(&topo, router, "net.netfilter.nf_conntrack_tcp_loose", "0")?;
    bed::sysctl(&topo, router, "net.netfilter.nf_conntrack_tcp_timeout_established", &IDLE_TIMEOUT_S.to_string())?;

    let pki = Pki::try_new()?;
    let _echo = EchoServer::start(&topo, &[server], pki.server())?;
    let connector = TcplsConnector::new(pki.client());
    let len = if quick { 256 << 10 } else { 2 << 20 };
    let (outcome, bytes, failovers, recovery, conns) = bed::in_client(&topo, async move {
        let name = server_name_for("localhost").map_err(|e| e.to_string())?;
        let (session, outcome) = connector.connect_detailed(server, name).await.map_err(|e| format!("connect: {e}"))?;
        let mut bytes = bed::round_trip(&session, len, 1, None).await?;
        tokio::time::sleep(IDLE).await;
        let started = Instant::now();
        bytes += bed::round_trip(&session, len, 2, None)
            .await
            .map_err(|e| format!("after {IDLE:?} idle: {e} (stats {:?})", session.stats()))?;
        let recovery = started.elapsed();
        let conns: Vec<u32> = session.connections().iter().filter(|c| c.usable).map(|c| c.id).collect();
        let failovers = session.stats().failovers;
        session.close().await;
        Ok((outcome, bytes, failovers, recovery, conns))
    })?;
    let resets = bed::rule_packets(&topo, router, "filter", "FORWARD", "ctstate INVALID").unwrap_or(0);
    let replaced = conns.iter().any(|c| *c != 0);
    let (result, why) = match (outcome == ConnectOutcome::Tcpls, resets > 0, replaced) {
        (false, ..) => (Outcome::Failed, "TCPLS was not negotiated"),
        (true, true, true) => (Outcome::Survived, "the reset connection was replaced by a rejoined one"),
        (true, true, false) => (Outcome::Survived, "packets were reset, the initial connection kept working"),
        (true, false, _) => (Outcome::Native, "the middlebox never reset anything (the flow stayed tracked)"),
    };
    Ok(Ran {
        outcome: result,
        detail: format!(
            "{why}: {resets} packets of forgotten flows answered with RST after {IDLE:?} idle; failovers {failovers}, \
             usable connections {conns:?}; the first echo after the idle period took {recovery:.2?}"
        ),
        bytes_verified: bytes,
    })
}
