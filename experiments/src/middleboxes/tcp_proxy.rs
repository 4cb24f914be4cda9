//! TCP-splitting proxies that relay bytes (haproxy in `mode tcp`, socat), running in the router
//! namespace on the router's client-side address and connecting to the server: two TCP
//! connections, the bytes relayed unchanged. TCPLS is expected to run natively end to end,
//! including a join through the proxy (the proxy opens a second backend connection and the
//! server matches the join token).

use std::net::{Ipv4Addr, SocketAddr};

use tcpls::{server_name_for, ConnectOutcome, TcplsConnector};
use tcpls_netem::{PathSpec, Side, Topology};

use super::bed::{self, Daemon, EchoServer, Pki, TempDir, PROXY_PORT, SERVER_PORT};
use super::{scenario, Outcome, Ran, ScenarioResult, Trouble};

pub fn haproxy(quick: bool) -> ScenarioResult {
    let software = bed::version("haproxy", &["-v"]);
    scenario("tcp-proxy-haproxy", "TCP-splitting proxy (haproxy mode tcp)", software, || body(quick, start_haproxy))
}

pub fn socat(quick: bool) -> ScenarioResult {
    let software = bed::version("socat", &["-V"]);
    scenario("tcp-proxy-socat", "TCP relay (socat TCP-LISTEN,fork → TCP)", software, || body(quick, start_socat))
}

fn start_haproxy(topo: &Topology, dir: &TempDir, listen: SocketAddr, server: SocketAddr) -> Result<Daemon, Trouble> {
    let haproxy = bed::require("haproxy", "haproxy")?;
    let cfg = dir.write(
        "haproxy.cfg",
        &format!(
            "global\n  maxconn 256\ndefaults\n  mode tcp\n  timeout connect 5s\n  timeout client 60s\n  \
             timeout server 60s\nfrontend fe\n  bind {listen}\n  default_backend be\nbackend be\n  \
             server tcpls {server}\n"
        ),
    )?;
    let mut cmd = topo.command(Side::Router(0), haproxy);
    cmd.arg("-f").arg(cfg).arg("-db");
    Ok(Daemon::start(topo, Side::Router(0), cmd, dir.0.join("haproxy.log"), listen.port())?)
}

fn start_socat(topo: &Topology, dir: &TempDir, listen: SocketAddr, server: SocketAddr) -> Result<Daemon, Trouble> {
    let socat = bed::require("socat", "socat")?;
    let mut cmd = topo.command(Side::Router(0), socat);
    cmd.arg(format!("TCP-LISTEN:{},bind={},reuseaddr,fork", listen.port(), listen.ip())).arg(format!("TCP:{server}"));
    Ok(Daemon::start(topo, Side::Router(0), cmd, dir.0.join("socat.log"), listen.port())?)
}

type StartProxy = fn(&Topology, &TempDir, SocketAddr, SocketAddr) -> Result<Daemon, Trouble>;

/// The router's address on a path subnet (10.k.net.1).
pub(crate) fn router_addr(host: Option<Ipv4Addr>) -> Option<Ipv4Addr> {
    host.map(|h| Ipv4Addr::new(h.octets()[0], h.octets()[1], h.octets()[2], 1))
}

fn body(quick: bool, start_proxy: StartProxy) -> Result<Ran, Trouble> {
    let dir = TempDir::new("tcp-proxy")?;
    let topo = Topology::builder().path(PathSpec::new(5.0, 100.0)).build().map_err(|e| e.to_string())?;
    let info = topo.path(0).info().clone();
    let server = SocketAddr::new(info.server_addr().ok_or("no server address")?, SERVER_PORT);
    let listen_ip = router_addr(info.client_v4).ok_or_else(|| Trouble::Skip("the path has no IPv4".into()))?;
    let backend_side = router_addr(info.server_v4).map(|a| a.to_string()).unwrap_or_default();
    let proxy = SocketAddr::new(listen_ip.into(), PROXY_PORT);

    let pki = Pki::try_new()?;
    let echo = EchoServer::start(&topo, &[server], pki.server())?;
    let daemon = start_proxy(&topo, &dir, proxy, server)?;
    let connector = TcplsConnector::new(pki.client());
    let len = if quick { 1 << 20 } else { 8 << 20 };
    let (outcome, bytes) = bed::in_client(&topo, async move {
        let name = server_name_for("localhost").map_err(|e| e.to_string())?;
        let (session, outcome) =
            connector.connect_detailed(proxy, name).await.map_err(|e| format!("connect through the proxy: {e}"))?;
        let mut bytes = bed::round_trip(&session, len, 1, Some(0)).await?;
        if outcome == ConnectOutcome::Tcpls {
            let joined = session.join(proxy).await.map_err(|e| format!("join through the proxy: {e}"))?;
            bytes += bed::round_trip(&session, len, 2, Some(joined)).await?;
        }
        session.close().await;
        Ok((outcome, bytes))
    })
    .map_err(|e| format!("{e} (proxy log: {})", daemon.log_tail()))?;
    let seen: Vec<String> = echo.accepted().iter().map(|a| a.peer.to_string()).collect();
    if seen.is_empty() || !seen.iter().all(|p| p.starts_with(&format!("{backend_side}:"))) {
        return Err(Trouble::Fail(format!("the server's peers {seen:?} are not the proxy ({backend_side})")));
    }
    Ok(Ran {
        outcome: if outcome == ConnectOutcome::Tcpls { Outcome::Native } else { Outcome::Failed },
        detail: format!(
            "{outcome} through the proxy at {proxy} (the server saw {}); initial connection and a join relayed",
            seen.join(", ")
        ),
        bytes_verified: bytes,
    })
}
