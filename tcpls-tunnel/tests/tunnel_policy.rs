//! The concentrator as an attacker sees it (docs/SECURITY.md): its destination policy
//! (no loopback, link-local, unspecified... unless allowed), and its limits on sessions and
//! streams per session. Real sockets on loopback; a destination proves it was never connected
//! to by having nothing to accept.

#![allow(clippy::unwrap_used)]

mod tunnel_support;

use std::net::SocketAddr;

use tcpls_tunnel::frontend::reply;
use tcpls_tunnel::policy::parse_cidr;
use tcpls_tunnel::tunnel::{DestPolicy, Frontend, Target, TunnelClient, TunnelConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::timeout;
use tunnel_support::*;

/// A destination that must never be connected to: a listener whose accept queue we check.
struct Untouched(TcpListener);

impl Untouched {
    async fn on(addr: &str) -> Option<Untouched> {
        TcpListener::bind(addr).await.ok().map(Untouched)
    }

    fn addr(&self) -> SocketAddr {
        self.0.local_addr().unwrap()
    }

    /// Nothing reached it (a connection completed by the kernel would be in the queue).
    async fn assert_untouched(&self) {
        let r = timeout(std::time::Duration::from_millis(200), self.0.accept()).await;
        assert!(r.is_err(), "the concentrator connected to {} although its policy refuses it", self.addr());
    }
}

fn own_address() -> Option<std::net::IpAddr> {
    let udp = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    udp.connect("192.0.2.200:9").or_else(|_| udp.connect("198.51.100.1:9")).ok()?;
    Some(udp.local_addr().ok()?.ip()).filter(|ip| !ip.is_loopback() && !ip.is_unspecified())
}

async fn socks_reply(socks: SocketAddr, target: &Target) -> u8 {
    let mut s = TcpStream::connect(socks).await.unwrap();
    timeout(T, socks5_connect(&mut s, target)).await.unwrap().unwrap()
}

/// A forwarded connection whose destination is refused is reset (pipelined: the client's
/// bytes went out before the answer).
async fn assert_forward_reset(fwd: SocketAddr) {
    let r = async {
        // The reset can be so quick that it is already the connect's result.
        let mut app = TcpStream::connect(fwd).await?;
        let _ = app.write_all(b"GET / HTTP/1.0\r\n\r\n").await;
        app.read(&mut [0u8; 16]).await
    };
    let r = timeout(T, r).await.unwrap();
    assert!(matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset), "expected a reset, got {r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_policy_refuses_loopback_link_local_and_names_resolving_to_them() {
    let t = Tunnel::start_with(&["127.0.0.1:0"], TunnelConfig::default()).await;
    let socks = t.listen(Frontend::Socks).await;
    let v4 = Untouched::on("127.0.0.1:0").await.unwrap();
    let port = v4.addr().port();
    let mut refused = vec![
        Target::Addr(v4.addr()),
        Target::Addr(SocketAddr::from(([127, 1, 2, 3], port))),
        // "localhost" resolves to loopback: checked after resolution.
        Target::Name("localhost".into(), port),
        // An IPv4-mapped IPv6 address is the IPv4 address.
        Target::Addr(format!("[::ffff:127.0.0.1]:{port}").parse().unwrap()),
        Target::Addr("0.0.0.0:80".parse().unwrap()),
        // Cloud metadata and link-local: refused before any packet goes out (no timeout).
        Target::Addr("169.254.169.254:80".parse().unwrap()),
        Target::Addr("[fe80::1]:80".parse().unwrap()),
        Target::Addr("224.0.0.1:80".parse().unwrap()),
    ];
    // This host's own non-loopback address (its default route's source; no packet is sent): a
    // service bound to 0.0.0.0 answers there as on loopback.
    let own = own_address();
    let any = Untouched::on("0.0.0.0:0").await.unwrap();
    match own {
        Some(ip) => refused.push(Target::Addr(SocketAddr::new(ip, any.addr().port()))),
        None => eprintln!("SKIPPED (part): no non-loopback address here: own address not tested"),
    }
    let v6 = Untouched::on("[::1]:0").await;
    match &v6 {
        Some(l) => refused.push(Target::Addr(l.addr())),
        None => eprintln!("no IPv6 loopback here: [::1] not tested"),
    }
    for target in &refused {
        assert_eq!(socks_reply(socks, target).await, reply::NOT_ALLOWED, "SOCKS5 CONNECT {target}");
    }
    // --forward: the application's connection is reset.
    let fwd = t.forward(v4.addr()).await;
    assert_forward_reset(fwd).await;
    v4.assert_untouched().await;
    any.assert_untouched().await;
    if let Some(l) = &v6 {
        l.assert_untouched().await;
    }
    let n = refused.len() as u64 + 1;
    wait_for(|| t.server_stats.snapshot().refused_dest == n).await;
    let snap = t.server_stats.snapshot();
    assert_eq!((snap.connected, snap.connect_failed), (0, 0), "{snap:?}");
    assert_eq!(t.client.stats().snapshot().refused_dest, n);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_dest_permits_loopback_and_only_what_it_names() {
    let mut policy = DestPolicy::safe();
    policy.allow(parse_cidr("127.0.0.0/8").unwrap());
    let t = Tunnel::start_with(&["127.0.0.1:0"], TunnelConfig { dest_policy: policy, ..Default::default() }).await;
    let socks = t.listen(Frontend::Socks).await;
    let echo = echo_server("127.0.0.1:0").await;
    // "localhost" may resolve to ::1 first: that address is skipped, 127.0.0.1 is used.
    for (i, target) in [Target::Addr(echo), Target::Name("localhost".into(), echo.port())].iter().enumerate() {
        let mut s = TcpStream::connect(socks).await.unwrap();
        assert_eq!(timeout(T, socks5_connect(&mut s, target)).await.unwrap().unwrap(), reply::SUCCEEDED, "{target}");
        echo_roundtrip(s, payload(100_000, i as u64)).await.unwrap();
    }
    let fwd = t.forward(echo).await;
    echo_roundtrip(TcpStream::connect(fwd).await.unwrap(), payload(70_000, 9)).await.unwrap();
    // Still refused: IPv6 loopback and link-local.
    if let Some(v6) = Untouched::on("[::1]:0").await {
        assert_eq!(socks_reply(socks, &Target::Addr(v6.addr())).await, reply::NOT_ALLOWED);
        v6.assert_untouched().await;
    }
    assert_eq!(socks_reply(socks, &Target::Addr("169.254.169.254:80".parse().unwrap())).await, reply::NOT_ALLOWED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_beyond_max_sessions_are_closed_and_counted() {
    let cfg = TunnelConfig { max_sessions: 1, ..loopback_allowed() };
    let t = Tunnel::start_with(&["127.0.0.1:0"], cfg.clone()).await;
    let name = tcpls::server_name_for("localhost").unwrap();
    // The second session completes its handshake, then the concentrator closes it.
    let second = TunnelClient::connect(t.addrs[0], name.clone(), t.pki.client(), &[], cfg.clone()).await;
    if let Ok(c) = &second {
        timeout(T, c.session().closed()).await.expect("the session over the limit is closed");
    }
    wait_for(|| t.server_stats.snapshot().sessions_refused == 1).await;
    // The first one is still served.
    let echo = echo_server("127.0.0.1:0").await;
    let fwd = t.forward(echo).await;
    echo_roundtrip(TcpStream::connect(fwd).await.unwrap(), payload(50_000, 1)).await.unwrap();
    // Once it is gone, its place is free again.
    let _ = timeout(T, t.client.session().close()).await.unwrap();
    let mut served = false;
    for _ in 0..50 {
        let c = TunnelClient::connect(t.addrs[0], name.clone(), t.pki.client(), &[], cfg.clone()).await.unwrap();
        let l = tcpls_tunnel::frontend::listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let via = l.local_addr().unwrap();
        let c2 = c.clone();
        tokio::spawn(async move { c2.serve(l, Frontend::Forward(Target::Addr(echo))).await });
        if echo_roundtrip(TcpStream::connect(via).await.unwrap(), payload(1000, 2)).await.is_ok() {
            served = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(served, "a new session is served once the first one ended: {:?}", t.server_stats.snapshot());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_beyond_max_streams_per_session_are_refused() {
    let cfg = TunnelConfig { max_streams_per_session: 2, ..loopback_allowed() };
    let t = Tunnel::start_with(&["127.0.0.1:0"], cfg).await;
    let echo = echo_server("127.0.0.1:0").await;
    let fwd = t.forward(echo).await;
    // Two connections held open, each proven relayed.
    let mut held = Vec::new();
    for i in 0..2u8 {
        let mut s = TcpStream::connect(fwd).await.unwrap();
        s.write_all(&[i]).await.unwrap();
        let mut b = [0u8; 1];
        timeout(T, s.read_exact(&mut b)).await.unwrap().unwrap();
        assert_eq!(b[0], i);
        held.push(s);
    }
    // A third is refused by the session (Stream Reset): the application sees a reset.
    assert_forward_reset(fwd).await;
    // Closing one frees its place.
    let s = held.pop().unwrap();
    echo_roundtrip(s, Vec::new()).await.unwrap();
    let mut ok = false;
    for _ in 0..50 {
        if let Ok(s) = TcpStream::connect(fwd).await {
            if echo_roundtrip(s, payload(10_000, 3)).await.is_ok() {
                ok = true;
                break;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(ok, "a stream is accepted again once one closed");
}
