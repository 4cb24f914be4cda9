//! A middlebox that blackholes SYNs to the TCPLS port on path 0 (iptables `--syn -j DROP`;
//! established flows pass). Happy eyeballs (`TcplsConnector::connect_any`) races both server
//! addresses, the blackholed one first, and must win on path 1; then a join towards the
//! blackholed address must be cancelled at its deadline (`Session::join_within`) while the
//! session carries on.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tcpls::{server_name_for, HappyEyeballs, TcplsConnector};
use tcpls_netem::{PathSpec, Side, Topology};

use super::bed::{self, EchoServer, Pki, SERVER_PORT};
use super::{scenario, Outcome, Ran, ScenarioResult, Trouble};

const JOIN_DEADLINE: Duration = Duration::from_secs(1);

pub fn run(quick: bool) -> ScenarioResult {
    let software = bed::version("iptables", &["-V"]);
    scenario("syn-blackhole", "SYN blackhole to the TCPLS port on path 0 of 2", software, || body(quick))
}

fn body(quick: bool) -> Result<Ran, Trouble> {
    bed::require("iptables", "iptables")?;
    let topo = Topology::builder()
        .path(PathSpec::new(5.0, 100.0))
        .path(PathSpec::new(5.0, 100.0))
        .build()
        .map_err(|e| e.to_string())?;
    let holed = SocketAddr::new(topo.path(0).info().server_addr().ok_or("no address")?, SERVER_PORT);
    let open = SocketAddr::new(topo.path(1).info().server_addr().ok_or("no address")?, SERVER_PORT);
    let rule: [&[&str]; 1] = [&["-A", "FORWARD", "-i", "toc", "-p", "tcp", "--syn", "--dport", "4443", "-j", "DROP"]];
    bed::iptables_all(&topo, Side::Router(0), &rule).map_err(Trouble::Skip)?;

    let pki = Pki::try_new()?;
    let _echo = EchoServer::start(&topo, &[holed, open], pki.server())?;
    let connector = TcplsConnector::new(pki.client());
    let len = if quick { 1 << 20 } else { 4 << 20 };
    let (remote, took, join_error, join_took, bytes) = bed::in_client(&topo, async move {
        let name = server_name_for("localhost").map_err(|e| e.to_string())?;
        let started = Instant::now();
        let eyeballs = HappyEyeballs { stagger: Duration::from_millis(250), keep_others: false };
        let session =
            connector.connect_any(&[holed, open], name, eyeballs).await.map_err(|e| format!("connect_any: {e}"))?;
        let took = started.elapsed();
        let remote = session.connections().first().and_then(|c| c.remote);
        let mut bytes = bed::round_trip(&session, len, 1, None).await?;
        let started = Instant::now();
        let join_error = match session.join_within(holed, JOIN_DEADLINE).await {
            Ok(id) => return Err(format!("a join through the SYN blackhole succeeded (connection {id})")),
            Err(e) => e.to_string(),
        };
        let join_took = started.elapsed();
        bytes += bed::round_trip(&session, len, 2, None).await?;
        session.close().await;
        Ok((remote, took, join_error, join_took, bytes))
    })?;
    let dropped = bed::rule_packets(&topo, Side::Router(0), "filter", "FORWARD", "DROP").unwrap_or(0);
    if remote != Some(open) {
        return Err(Trouble::Fail(format!("happy eyeballs ended on {remote:?}, expected {open}")));
    }
    Ok(Ran {
        outcome: Outcome::Survived,
        detail: format!(
            "happy eyeballs connected via {open} in {took:.2?} ({dropped} SYNs to {holed} blackholed); \
             a join to {holed} was cancelled after {join_took:.2?} ({join_error}); the session carried on"
        ),
        bytes_verified: bytes,
    })
}
