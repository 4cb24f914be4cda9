//! A "TCPLS-hostile" middlebox (paper §5.2): iptables in the router namespace matches the
//! `tcpls/1` ALPN bytes of the ClientHello (`-m string --algo bm --string tcpls/1`) and resets
//! the connection (REJECT --reject-with tcp-reset) or drops the packet; plain TLS passes. The
//! client uses `TcplsConnector::with_fallback_retry`: it must retry with a plain ClientHello,
//! the application must work, and the next connection must go plain at once (remembered).
//! A second, unfiltered path carries a TCPLS session; its join through the filtered path must be
//! cancelled with a clear error (`Session::join_within`) while the session carries on.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tcpls::{server_name_for, ConnectOutcome, TcplsConnector};
use tcpls_netem::{PathSpec, Side, Topology};

use super::bed::{self, EchoServer, Pki, SERVER_PORT};
use super::{scenario, Outcome, Ran, ScenarioResult, Trouble};

/// How long the TCPLS ClientHello may go unanswered before the plain retry.
pub const RETRY_AFTER: Duration = Duration::from_secs(1);

pub fn reset(quick: bool) -> ScenarioResult {
    let software = bed::version("iptables", &["-V"]);
    let what = "ClientHello filter: string tcpls/1 → REJECT tcp-reset";
    scenario("alpn-filter-rst", what, software, || body(quick, &["-j", "REJECT", "--reject-with", "tcp-reset"]))
}

pub fn drop(quick: bool) -> ScenarioResult {
    let software = bed::version("iptables", &["-V"]);
    scenario("alpn-filter-drop", "ClientHello filter: string tcpls/1 → DROP", software, || {
        body(quick, &["-j", "DROP"])
    })
}

fn body(quick: bool, action: &[&str]) -> Result<Ran, Trouble> {
    bed::require("iptables", "iptables")?;
    let topo = Topology::builder()
        .path(PathSpec::new(5.0, 100.0))
        .path(PathSpec::new(5.0, 100.0))
        .build()
        .map_err(|e| e.to_string())?;
    let server = SocketAddr::new(topo.path(0).info().server_addr().ok_or("no server address")?, SERVER_PORT);
    let clean = SocketAddr::new(topo.path(1).info().server_addr().ok_or("no server address")?, SERVER_PORT);
    let mut rule = vec!["-A", "FORWARD", "-i", "toc", "-p", "tcp", "--dport", "4443", "-m", "string"];
    rule.extend(["--algo", "bm", "--string", "tcpls/1"]);
    rule.extend(action);
    bed::iptables(&topo, Side::Router(0), &rule)
        .map_err(|e| Trouble::Skip(format!("no iptables string match: {e}")))?;

    let pki = Pki::try_new()?;
    let echo = EchoServer::start(&topo, &[server, clean], pki.server())?;
    let connector = TcplsConnector::new(pki.client()).with_fallback_retry(RETRY_AFTER);
    let len = if quick { 1 << 20 } else { 4 << 20 };
    let runs = bed::in_client(&topo, async move {
        let name = server_name_for("localhost").map_err(|e| e.to_string())?;
        let mut runs = Vec::new();
        for seed in [1, 2] {
            let started = Instant::now();
            let (session, outcome) =
                connector.connect_detailed(server, name.clone()).await.map_err(|e| format!("connect: {e}"))?;
            let took = started.elapsed();
            let bytes = bed::round_trip(&session, len, seed, None).await?;
            session.close().await;
            runs.push((outcome, took, bytes));
        }
        // TCPLS on the clean path; a join through the filter is cancelled, the session goes on.
        let (session, outcome) =
            connector.connect_detailed(clean, name).await.map_err(|e| format!("connect {clean}: {e}"))?;
        if outcome != ConnectOutcome::Tcpls {
            return Err(format!("the unfiltered path gave {outcome}"));
        }
        let started = Instant::now();
        let join = match session.join_within(server, RETRY_AFTER).await {
            Ok(id) => return Err(format!("a join through the filter succeeded (connection {id})")),
            Err(e) => format!("a TCPLS join through the filter was cancelled after {:.2?} ({e})", started.elapsed()),
        };
        let bytes = bed::round_trip(&session, len, 3, None).await?;
        session.close().await;
        Ok((runs, join, bytes))
    })?;
    let (runs, join, b3) = runs;
    let [(first, first_took, b1), (second, second_took, b2)] = <[_; 2]>::try_from(runs).map_err(|_| "two runs")?;
    let hits = bed::rule_packets(&topo, Side::Router(0), "filter", "FORWARD", "STRING").unwrap_or(0);
    let accepted = echo.accepted();
    // The sessions that came through the filtered path (the one on the clean path is TCPLS).
    let filtered_client = topo.path(0).info().client_addr();
    let through_filter: Vec<_> = accepted.iter().filter(|a| Some(a.peer.ip()) == filtered_client).collect();
    let server_plain = !through_filter.is_empty() && through_filter.iter().all(|a| a.fallback);
    let expected = matches!(first, ConnectOutcome::RetriedPlain { .. })
        && matches!(second, ConnectOutcome::RememberedPlain { .. })
        && server_plain;
    Ok(Ran {
        outcome: if expected { Outcome::Fallback } else { Outcome::Failed },
        detail: format!(
            "1st connection: {first}, in {first_took:.2?}; 2nd: {second}, in {second_took:.2?}; \
             the filter matched {hits} packets; the server served plain TLS: {server_plain}; {join}, \
             the session carried on over the unfiltered path"
        ),
        bytes_verified: b1 + b2 + b3,
    })
}
