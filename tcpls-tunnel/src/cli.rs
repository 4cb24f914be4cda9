//! Entry points for the command line (`tm3 ...` here, `tcpls tm3 ...` in the CLI crate): the
//! argument strings of CLI.md in, a one-line error out.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, SocketAddrV4};

use crate::frontend::Target;
use crate::{Config, DestPolicy, Frontend, LocalProxy, RemoteProxy, DEFAULT_PORT};

/// Front-end of `lp`, as given on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LpMode {
    /// `--socks ADDR`: listening address of the SOCKS5 server.
    Socks(String),
    /// `--forward LISTEN=TARGET`.
    Forward(String),
    /// `--transparent PORT`.
    Transparent(u16),
}

/// `rp N [--port PORT] [--safe-dest] [--allow-dest CIDR]... [--deny-dest CIDR]...`: runs the
/// remote proxy on all addresses until an error. `dest_policy`: see [`DestPolicy`] (the TM3
/// default is [`DestPolicy::open`]).
pub async fn rp_main(n: usize, port: u16, dest_policy: DestPolicy) -> Result<(), String> {
    let addr = SocketAddr::from((IpAddr::V4(Ipv4Addr::UNSPECIFIED), port));
    let cfg = Config { dest_policy: dest_policy.clone(), ..Config::default() };
    let rp = RemoteProxy::bind(addr, n, cfg).await.map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    eprintln!("tm3 remote proxy: destinations: {dest_policy}");
    if dest_policy.is_open() {
        eprintln!(
            "tm3 remote proxy: WARNING: anyone who can reach port {port} can make this host connect anywhere, \
             its own loopback included (TM3 has no authentication); see --safe-dest and --deny-dest"
        );
    }
    eprintln!("tm3 remote proxy listening on {addr}, {n} pipe(s) per local proxy");
    rp.run().await.map_err(|e| e.to_string())
}

/// `lp RP_ADDR N MODE`: runs the local proxy until every pipe is gone.
pub async fn lp_main(rp_addr: &str, n: usize, mode: LpMode) -> Result<(), String> {
    let rp = resolve(rp_addr, Some(DEFAULT_PORT)).await?;
    let (listen, frontend) = match mode {
        LpMode::Socks(a) => (resolve(&a, None).await?, Frontend::Socks),
        LpMode::Forward(f) => {
            let (l, t) = crate::frontend::split_forward(&f)?;
            (resolve(l, None).await?, Frontend::Forward(Target::Addr(SocketAddr::V4(resolve_v4(t).await?))))
        }
        LpMode::Transparent(p) => (SocketAddr::from((Ipv4Addr::UNSPECIFIED, p)), Frontend::Transparent),
    };
    let listener =
        tokio::net::TcpListener::bind(listen).await.map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let lp = LocalProxy::connect(rp, n, Config::default())
        .await
        .map_err(|e| format!("{e} (is `tm3 rp {n}` running there?)"))?;
    eprintln!("tm3 local proxy: {n} pipe(s) to {rp}, accepting on {listen} ({frontend:?})");
    lp.serve(listener, frontend).await.map_err(|e| e.to_string())
}

/// `HOST:PORT`, `[V6]:PORT`, a bare `PORT` (127.0.0.1), or `HOST` with `default_port`.
pub async fn resolve(s: &str, default_port: Option<u16>) -> Result<SocketAddr, String> {
    if let Ok(p) = s.parse::<u16>() {
        return Ok(SocketAddr::from((Ipv4Addr::LOCALHOST, p)));
    }
    let with_port = if s.parse::<SocketAddr>().is_ok() || s.rsplit_once(':').is_some_and(|(h, _)| !h.contains(':')) {
        s.to_string()
    } else if let Some(p) = default_port {
        if s.contains(':') && !s.starts_with('[') {
            format!("[{s}]:{p}")
        } else {
            format!("{s}:{p}")
        }
    } else {
        return Err(format!("'{s}': expected HOST:PORT"));
    };
    let mut addrs = tokio::net::lookup_host(&with_port).await.map_err(|e| format!("cannot resolve '{s}': {e}"))?;
    addrs.next().ok_or_else(|| format!("'{s}' resolves to no address"))
}

/// An IPv4 destination (the TM3 SYN carries IPv4 only).
pub async fn resolve_v4(s: &str) -> Result<SocketAddrV4, String> {
    let addrs = tokio::net::lookup_host(s).await.map_err(|e| format!("cannot resolve '{s}': {e}"))?;
    for a in addrs {
        if let SocketAddr::V4(v4) = a {
            return Ok(v4);
        }
    }
    Err(format!("'{s}' has no IPv4 address (the TM3 SYN carries IPv4 only)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn addresses() {
        assert_eq!(resolve("8080", None).await.unwrap(), "127.0.0.1:8080".parse().unwrap());
        assert_eq!(resolve("10.0.0.1", Some(6000)).await.unwrap(), "10.0.0.1:6000".parse().unwrap());
        assert_eq!(resolve("10.0.0.1:7000", Some(6000)).await.unwrap(), "10.0.0.1:7000".parse().unwrap());
        assert_eq!(resolve("::1", Some(6000)).await.unwrap(), "[::1]:6000".parse().unwrap());
        assert_eq!(resolve("[::1]:5", None).await.unwrap(), "[::1]:5".parse().unwrap());
        assert!(resolve("10.0.0.1", None).await.is_err());
        assert_eq!(resolve_v4("127.0.0.1:80").await.unwrap(), "127.0.0.1:80".parse().unwrap());
        assert!(resolve_v4("[::1]:80").await.is_err());
        assert!(lp_main("127.0.0.1:1", 1, LpMode::Forward("nonsense".into())).await.is_err());
    }
}
