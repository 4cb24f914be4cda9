//! The TM3 remote proxy against peers that leave, flood and aim at the proxy host
//! (docs/SECURITY.md): abandoned partial pipe groups are closed on a timer, data for connections
//! whose connect is pending is bounded per connection and per session, and the optional
//! destination policy resets refused connections without connecting. Real sockets on loopback.

#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tcpls_tunnel::frontend::Target;
use tcpls_tunnel::rp::Session;
use tcpls_tunnel::{Config, DestPolicy, Frontend, LocalProxy, RemoteProxy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::timeout;

const T: Duration = Duration::from_secs(20);

/// A remote proxy with `cfg` and `n` pipes; returns its address and its sessions as they start.
async fn remote_proxy(n: usize, cfg: Config) -> (SocketAddr, Arc<Mutex<Vec<Session>>>) {
    if std::env::var_os("TM3_LOG").is_some() {
        let _ = tracing_subscriber::fmt().with_max_level(tracing::Level::DEBUG).with_test_writer().try_init();
    }
    let rp = RemoteProxy::bind("127.0.0.1:0".parse().unwrap(), n, cfg).await.unwrap();
    let addr = rp.local_addr().unwrap();
    let sessions = Arc::new(Mutex::new(Vec::new()));
    let s2 = sessions.clone();
    tokio::spawn(rp.run_with(move |s| s2.lock().unwrap().push(s)));
    (addr, sessions)
}

/// A local proxy forwarding a fresh loopback port to `target`; returns that port's address.
async fn forward(lp: &LocalProxy, target: SocketAddr) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a = l.local_addr().unwrap();
    let lp = lp.clone();
    tokio::spawn(async move { lp.serve(l, Frontend::Forward(Target::Addr(target))).await });
    a
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_partial_groups_are_closed_on_a_timer() {
    let cfg = Config { group_timeout: Duration::from_millis(300), ..Config::default() };
    let (rp, sessions) = remote_proxy(3, cfg).await;
    // Two of three pipes, then nothing more from this address: before, they stayed open until
    // the next pipe from the same address arrived (sockets left in CLOSE_WAIT).
    let mut partial = Vec::new();
    for _ in 0..2 {
        partial.push(TcpStream::connect(rp).await.unwrap());
    }
    let started = Instant::now();
    for mut p in partial {
        let r = timeout(T, p.read(&mut [0u8; 1])).await.expect("the partial group's pipe was never closed");
        assert!(matches!(r, Ok(0) | Err(_)), "closed, not data: {r:?}");
    }
    assert!(started.elapsed() >= Duration::from_millis(250), "not before the group timeout");
    // The address is not blocked: a complete group still forms a session.
    let lp = timeout(T, LocalProxy::connect(rp, 3, Config::default())).await.unwrap().unwrap();
    let echo = echo_server().await;
    let fwd = forward(&lp, echo).await;
    let mut s = TcpStream::connect(fwd).await.unwrap();
    s.write_all(b"ping").await.unwrap();
    let mut b = [0u8; 4];
    timeout(T, s.read_exact(&mut b)).await.unwrap().unwrap();
    assert_eq!(&b, b"ping");
    // The proxy reports a session from its own task, which may run after the data went
    // through: wait for it (bounded) rather than race it.
    let deadline = Instant::now() + T;
    while sessions.lock().unwrap().is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let formed = sessions.lock().unwrap().len();
    assert_eq!(formed, 1, "one session formed from the complete group");
}

async fn echo_server() -> SocketAddr {
    tcpls_test::net::tcp_echo_server("127.0.0.1:0".parse().unwrap()).await.unwrap()
}

/// A loopback destination whose connects stay pending: a listener with a backlog of 0 whose
/// one queue place is taken (the kernel drops further SYNs). Keep the returned values alive.
fn blackhole() -> (std::net::TcpListener, std::net::TcpStream, SocketAddr) {
    let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    sock.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into()).unwrap();
    sock.listen(0).unwrap();
    let l: std::net::TcpListener = sock.into();
    let addr = l.local_addr().unwrap();
    let filler = std::net::TcpStream::connect(addr).unwrap();
    (l, filler, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_for_pending_connects_is_bounded() {
    const PER_CONN: usize = 64 << 10;
    const TOTAL: usize = 128 << 10;
    const PIPES: usize = 4;
    let cfg = Config {
        pending_connect_bytes: PER_CONN,
        pending_connect_bytes_total: TOTAL,
        connect_timeout: Duration::from_millis(3000),
        ..Config::default()
    };
    let (rp, sessions) = remote_proxy(PIPES, cfg).await;
    let (_l, _filler, hole) = blackhole();
    let lp = timeout(T, LocalProxy::connect(rp, PIPES, Config::default())).await.unwrap().unwrap();
    let fwd = forward(&lp, hole).await;
    // Six connections whose connects hang, each pushing 1 MiB: without the bounds the remote
    // proxy queued up to 1 MiB for each (6 MiB).
    let mut apps = Vec::new();
    for i in 0..6u8 {
        apps.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(fwd).await.unwrap();
            let _ = timeout(Duration::from_secs(5), s.write_all(&vec![i; 1 << 20])).await;
            s
        }));
    }
    let session = timeout(T, async {
        loop {
            if let Some(s) = sessions.lock().unwrap().first().cloned() {
                return s;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap();
    // While the connects hang, sample what the session holds: until the cap is reached (on a
    // loaded machine the six writers take a while), then a little longer to see it hold.
    let (mut max_ready, mut max_pending) = (0, 0);
    let reached = |pending: usize| pending >= TOTAL - PIPES * 4096;
    let until = Instant::now() + Duration::from_millis(2500);
    let mut hold_until = None;
    while Instant::now() < until && hold_until.is_none_or(|h| Instant::now() < h) {
        let (ready, pending) = session.queued_bytes();
        max_ready = max_ready.max(ready);
        max_pending = max_pending.max(pending);
        if reached(max_pending) && hold_until.is_none() {
            hold_until = Some(Instant::now() + Duration::from_millis(300));
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // The per-session cap, plus what a pipe reader may release at once from a connection's
    // reorder buffer (itself under the per-connection cap).
    let bound = TOTAL + PIPES * PER_CONN;
    eprintln!("held for pending connects: at most {max_pending} bytes (in order: {max_ready}); bound {bound}");
    // Each of the six connections filled its share: the session's cap is what held them.
    assert!(reached(max_pending), "the test did not reach the cap: {max_pending}");
    assert!(max_pending <= bound && max_ready <= bound, "{max_pending} / {max_ready} bytes > {bound}");
    // The connects time out: the connections are reset and everything is released.
    let deadline = Instant::now() + T;
    while session.queued_bytes() != (0, 0) {
        assert!(Instant::now() < deadline, "still held: {:?}", session.queued_bytes());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for a in apps {
        let mut s = a.await.unwrap();
        let mut rest = Vec::new();
        let r = timeout(T, s.read_to_end(&mut rest)).await.unwrap();
        assert!(r.is_err() || rest.is_empty(), "the application's connection is reset, not answered");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn safe_dest_policy_resets_loopback_connections_without_connecting() {
    let mut policy = DestPolicy::safe();
    policy.deny("192.0.2.0/24".parse().unwrap());
    let (rp, sessions) = remote_proxy(2, Config { dest_policy: policy, ..Config::default() }).await;
    let lp = timeout(T, LocalProxy::connect(rp, 2, Config::default())).await.unwrap().unwrap();
    let dest = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let fwd = forward(&lp, dest.local_addr().unwrap()).await;
    let r = async {
        let mut s = TcpStream::connect(fwd).await?;
        let _ = s.write_all(b"hello").await;
        s.read(&mut [0u8; 8]).await
    };
    let r = timeout(T, r).await.unwrap();
    assert!(matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset), "reset expected: {r:?}");
    assert!(timeout(Duration::from_millis(300), dest.accept()).await.is_err(), "nothing connected to it");
    let session = sessions.lock().unwrap().first().cloned().unwrap();
    assert_eq!(session.stats().snapshot().refused_dest, 1);
}
