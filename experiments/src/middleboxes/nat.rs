//! NAT on one of two paths: path 1's router masquerades (iptables MASQUERADE with port
//! rewriting into 20000-29999), path 0 is not NATed. A session starts on one path and joins the
//! other, both ways round; NAT detection (Address Echo, `Session::probe_nat`) must report the
//! NAT on the NATed connection only, and data steered to each connection is checked.

use std::net::{Ipv4Addr, SocketAddr};

use tcpls::{server_name_for, ConnectOutcome, TcplsConnector};
use tcpls_netem::{PathSpec, Side, Topology};

use super::bed::{self, EchoServer, Pki, SERVER_PORT};
use super::{scenario, Outcome, Ran, ScenarioResult, Trouble};

/// The source ports MASQUERADE rewrites to: outside Linux's ephemeral range (32768-60999), so
/// every port is rewritten (NAT keeps a port that already lies in the range).
const NAT_PORTS: std::ops::RangeInclusive<u16> = 20000..=29999;

pub fn run(quick: bool) -> ScenarioResult {
    let software = bed::version("iptables", &["-V"]);
    scenario("nat", "NAT (MASQUERADE + port rewriting) on path 1 of 2", software, || body(quick))
}

fn body(quick: bool) -> Result<Ran, Trouble> {
    bed::require("iptables", "iptables")?;
    let topo = Topology::builder()
        .path(PathSpec::new(5.0, 100.0))
        .path(PathSpec::new(5.0, 100.0))
        .build()
        .map_err(|e| e.to_string())?;
    let plain = SocketAddr::new(topo.path(0).info().server_addr().ok_or("no address")?, SERVER_PORT);
    let natted = SocketAddr::new(topo.path(1).info().server_addr().ok_or("no address")?, SERVER_PORT);
    // The NAT's outside address: the router's server-side address 10.2.2.1.
    let outside = topo.path(1).info().server_v4.map(|a| Ipv4Addr::new(a.octets()[0], a.octets()[1], 2, 1));
    let ports = format!("{}-{}", NAT_PORTS.start(), NAT_PORTS.end());
    let masquerade: [&[&str]; 1] =
        [&["-t", "nat", "-A", "POSTROUTING", "-o", "tos", "-p", "tcp", "-j", "MASQUERADE", "--to-ports", &ports]];
    bed::iptables_all(&topo, Side::Router(1), &bed::TRACK_ONE_PASS).map_err(Trouble::Skip)?;
    bed::iptables_all(&topo, Side::Router(1), &masquerade).map_err(Trouble::Skip)?;

    let pki = Pki::try_new()?;
    let server = EchoServer::start(&topo, &[plain, natted], pki.server())?;
    let connector = TcplsConnector::new(pki.client());
    let len = if quick { 1 << 20 } else { 4 << 20 };
    let (details, bytes) = bed::in_client(&topo, async move {
        let name = server_name_for("localhost").map_err(|e| e.to_string())?;
        let mut details = Vec::new();
        let mut bytes = 0;
        for (first, second) in [(plain, natted), (natted, plain)] {
            let (session, outcome) =
                connector.connect_detailed(first, name.clone()).await.map_err(|e| format!("connect {first}: {e}"))?;
            if outcome != ConnectOutcome::Tcpls {
                return Err(format!("connect {first}: {outcome}"));
            }
            let joined = session.join(second).await.map_err(|e| format!("join {second} after {first}: {e}"))?;
            for (conn, target) in [(0, first), (joined, second)] {
                let report = session.probe_nat(conn).await.map_err(|e| format!("probe_nat on {target}: {e}"))?;
                let expect_nat = target == natted;
                if report.nat_detected != expect_nat {
                    return Err(format!("connection to {target}: NAT detected {report:?}, expected {expect_nat}"));
                }
                if expect_nat && !NAT_PORTS.contains(&report.seen_by_peer.port()) {
                    return Err(format!("the NAT did not rewrite the port into {NAT_PORTS:?}: {report:?}"));
                }
                let local = report.local.map(|a| a.to_string()).unwrap_or_default();
                let nat = if report.nat_detected { "detected" } else { "none" };
                details.push(format!("{target}: local {local} seen as {} (NAT {nat})", report.seen_by_peer));
                bytes += bed::round_trip(&session, len, u64::from(conn) + 10, Some(conn)).await?;
            }
            session.close().await;
        }
        Ok((details, bytes))
    })?;
    let seen: Vec<String> = server.accepted().iter().map(|a| a.peer.to_string()).collect();
    let via_nat = outside.is_some_and(|a| seen.iter().any(|s| s.starts_with(&format!("{a}:"))));
    if !via_nat {
        return Err(Trouble::Fail(format!("the server never saw the NAT's address {outside:?}: {seen:?}")));
    }
    Ok(Ran {
        outcome: Outcome::Native,
        detail: format!("TCPLS; joins across the NATed and non-NATed paths, both ways; {}", details.join("; ")),
        bytes_verified: bytes,
    })
}
