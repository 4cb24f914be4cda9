//! TLS-terminating proxies that do not know TCPLS, in the router namespace: nginx `stream` with
//! `ssl` (and `proxy_ssl on` to re-encrypt towards the server), and haproxy with `bind ... ssl`
//! and `server ... ssl`. The proxy answers the client's ClientHello itself without selecting the
//! `tcpls/1` ALPN, so the client falls back to plain TLS (`ConnectOutcome::ServerPlainTls`,
//! `Session::is_fallback`); the proxy's own ClientHello to the TCPLS server offers no
//! `tcpls/1` either, so the server serves plain TLS. The application must still work.

use std::net::SocketAddr;

use tcpls::{server_name_for, ConnectOutcome, TcplsConnector};
use tcpls_netem::{PathSpec, Side, Topology};

use super::bed::{self, Daemon, EchoServer, Pki, TempDir, PROXY_PORT, SERVER_PORT};
use super::tcp_proxy::router_addr;
use super::{scenario, Outcome, Ran, ScenarioResult, Trouble};

/// Debian's dynamic stream module (package libnginx-mod-stream).
const NGINX_STREAM_MODULE: &str = "/usr/lib/nginx/modules/ngx_stream_module.so";

pub fn nginx(quick: bool) -> ScenarioResult {
    let software = bed::version("nginx", &["-v"]);
    scenario("tls-proxy-nginx", "TLS-terminating proxy (nginx stream ssl, re-encrypting)", software, || {
        body(quick, start_nginx)
    })
}

pub fn haproxy(quick: bool) -> ScenarioResult {
    let software = bed::version("haproxy", &["-v"]);
    scenario("tls-proxy-haproxy", "TLS-terminating proxy (haproxy ssl, re-encrypting)", software, || {
        body(quick, start_haproxy)
    })
}

fn start_nginx(
    topo: &Topology,
    dir: &TempDir,
    pki: &Pki,
    listen: SocketAddr,
    server: SocketAddr,
) -> Result<Daemon, Trouble> {
    let nginx = bed::require("nginx", "nginx")?;
    // Built in (some builds) or Debian's dynamic module.
    let load = if std::path::Path::new(NGINX_STREAM_MODULE).is_file() {
        format!("load_module {NGINX_STREAM_MODULE};\n")
    } else {
        String::new()
    };
    let cert = dir.write("cert.pem", &pki.cert_pem)?;
    let key = dir.write("key.pem", &pki.key_pem)?;
    let d = dir.0.display();
    let cfg = dir.write(
        "nginx.conf",
        &format!(
            "{load}daemon off;\nmaster_process off;\npid {d}/nginx.pid;\nerror_log {d}/error.log info;\n\
             events {{ worker_connections 64; }}\nstream {{\n  server {{\n    listen {listen} ssl;\n    \
             ssl_certificate {};\n    ssl_certificate_key {};\n    ssl_protocols TLSv1.2 TLSv1.3;\n    \
             proxy_pass {server};\n    proxy_ssl on;\n    proxy_ssl_protocols TLSv1.2 TLSv1.3;\n  }}\n}}\n",
            cert.display(),
            key.display()
        ),
    )?;
    let mut cmd = topo.command(Side::Router(0), nginx);
    cmd.arg("-e").arg(dir.0.join("error.log")).arg("-p").arg(&dir.0).arg("-c").arg(cfg);
    match Daemon::start(topo, Side::Router(0), cmd, dir.0.join("nginx.out"), listen.port()) {
        Err(e) if e.contains("unknown directive \"stream\"") => {
            Err(Trouble::Skip(format!("nginx has no stream module (Debian package libnginx-mod-stream): {e}")))
        }
        other => Ok(other?),
    }
}

fn start_haproxy(
    topo: &Topology,
    dir: &TempDir,
    pki: &Pki,
    listen: SocketAddr,
    server: SocketAddr,
) -> Result<Daemon, Trouble> {
    let haproxy = bed::require("haproxy", "haproxy")?;
    let pem = dir.write("haproxy.pem", &format!("{}{}", pki.cert_pem, pki.key_pem))?;
    let cfg = dir.write(
        "haproxy.cfg",
        &format!(
            "global\n  maxconn 256\ndefaults\n  mode tcp\n  timeout connect 5s\n  timeout client 60s\n  \
             timeout server 60s\nfrontend fe\n  bind {listen} ssl crt {}\n  default_backend be\nbackend be\n  \
             server tcpls {server} ssl verify none\n",
            pem.display()
        ),
    )?;
    let mut cmd = topo.command(Side::Router(0), haproxy);
    cmd.arg("-f").arg(cfg).arg("-db");
    Ok(Daemon::start(topo, Side::Router(0), cmd, dir.0.join("haproxy.log"), listen.port())?)
}

type StartProxy = fn(&Topology, &TempDir, &Pki, SocketAddr, SocketAddr) -> Result<Daemon, Trouble>;

fn body(quick: bool, start_proxy: StartProxy) -> Result<Ran, Trouble> {
    let dir = TempDir::new("tls-proxy")?;
    let topo = Topology::builder().path(PathSpec::new(5.0, 100.0)).build().map_err(|e| e.to_string())?;
    let info = topo.path(0).info().clone();
    let server = SocketAddr::new(info.server_addr().ok_or("no server address")?, SERVER_PORT);
    let listen_ip = router_addr(info.client_v4).ok_or_else(|| Trouble::Skip("the path has no IPv4".into()))?;
    let proxy = SocketAddr::new(listen_ip.into(), PROXY_PORT);

    let pki = Pki::try_new()?;
    let echo = EchoServer::start(&topo, &[server], pki.server())?;
    let daemon = start_proxy(&topo, &dir, &pki, proxy, server)?;
    // The proxy presents the same "localhost" certificate: the client verifies it normally.
    let connector = TcplsConnector::new(pki.client());
    let len = if quick { 1 << 20 } else { 8 << 20 };
    let (outcome, alpn, bytes) = bed::in_client(&topo, async move {
        let name = server_name_for("localhost").map_err(|e| e.to_string())?;
        let (session, outcome) =
            connector.connect_detailed(proxy, name).await.map_err(|e| format!("connect through the proxy: {e}"))?;
        let alpn = session.handshake_info().and_then(|h| h.alpn).map(|a| String::from_utf8_lossy(&a).into_owned());
        let bytes = bed::round_trip(&session, len, 1, None).await?;
        session.close().await;
        Ok((outcome, alpn, bytes))
    })
    .map_err(|e| format!("{e} (proxy log: {})", daemon.log_tail()))?;
    let accepted = echo.accepted();
    let backend_plain = !accepted.is_empty() && accepted.iter().all(|a| a.fallback);
    let expected = outcome == ConnectOutcome::ServerPlainTls && backend_plain;
    Ok(Ran {
        outcome: if expected { Outcome::Fallback } else { Outcome::Failed },
        detail: format!(
            "client: {outcome}, ALPN {}; the TCPLS server got the proxy's own ClientHello and served {}; \
             the echo crossed the proxy's two TLS sessions",
            alpn.as_deref().unwrap_or("none"),
            if backend_plain { "plain TLS" } else { "TCPLS (unexpected)" }
        ),
        bytes_verified: bytes,
    })
}
