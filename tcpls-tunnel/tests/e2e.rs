//! End-to-end tests: local proxy + remote proxy with 4 pipes on 127.0.0.1, and raw pipe-protocol
//! peers injecting messages directly. Every wait has a timeout.
#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use std::io::ErrorKind;
use std::net::{SocketAddr, SocketAddrV4};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tcpls_test::payload;
use tcpls_tunnel::codec::{self, Message, REASON_FIN, REASON_RST};
use tcpls_tunnel::frontend::Target;
use tcpls_tunnel::{Config, Frontend, LocalProxy, RemoteProxy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::time::timeout;

const T: Duration = Duration::from_secs(20);

fn v4(a: SocketAddr) -> SocketAddrV4 {
    match a {
        SocketAddr::V4(v) => v,
        SocketAddr::V6(_) => panic!("IPv6"),
    }
}

/// Download pattern: the `tcpls-pattern` stream of this seed (its period is not a multiple of
/// 4096, so misplaced 4096-byte messages are detected).
const SEED: u64 = 77;

/// Whether `data` is the download pattern from `offset` on.
fn check_pattern(offset: u64, data: &[u8]) -> bool {
    tcpls_pattern::verify(SEED, offset, data)
}

async fn echo_server() -> SocketAddr {
    tcpls_test::net::tcp_echo_server("127.0.0.1:0".parse().unwrap()).await.unwrap()
}

/// Reads an 8-byte little-endian count, sends that many pattern bytes, closes. Reports write
/// failures (bytes sent before the failure) on `events`.
async fn bulk_server(events: Option<mpsc::UnboundedSender<u64>>) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let ev = events.clone();
            tokio::spawn(async move {
                let mut n = [0u8; 8];
                if s.read_exact(&mut n).await.is_err() {
                    return;
                }
                let total = u64::from_le_bytes(n);
                let mut sent = 0u64;
                while sent < total {
                    let n = ((total - sent) as usize).min(64 * 1024);
                    let chunk = tcpls_pattern::chunk(SEED, sent, n);
                    if s.write_all(chunk).await.is_err() {
                        if let Some(ev) = &ev {
                            let _ = ev.send(sent);
                        }
                        return;
                    }
                    sent += chunk.len() as u64;
                }
                let _ = s.shutdown().await;
            });
        }
    });
    a
}

fn init_log() {
    if std::env::var_os("TM3_LOG").is_some() {
        let _ = tracing_subscriber::fmt().with_max_level(tracing::Level::DEBUG).with_test_writer().try_init();
    }
}

fn test_config() -> Config {
    init_log();
    Config { gap_timeout: Duration::from_secs(2), linger: Duration::from_secs(3), ..Config::default() }
}

struct Setup {
    lp: LocalProxy,
}

async fn setup(n: usize) -> Setup {
    let rp = RemoteProxy::bind("127.0.0.1:0".parse().unwrap(), n, test_config()).await.unwrap();
    let rp_addr = rp.local_addr().unwrap();
    tokio::spawn(rp.run());
    let lp = timeout(T, LocalProxy::connect(rp_addr, n, test_config())).await.unwrap().unwrap();
    Setup { lp }
}

impl Setup {
    async fn forward(&self, target: SocketAddr) -> SocketAddr {
        // The product's listener (a 4096-connection accept queue): tokio's `bind` queues 1024,
        // and a burst of 300 connects on a busy loopback lost SYNs there (1 s each) or got a
        // connection reset.
        let l = tcpls_tunnel::frontend::listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let a = l.local_addr().unwrap();
        let lp = self.lp.clone();
        tokio::spawn(async move { lp.serve(l, Frontend::Forward(Target::Addr(target))).await });
        a
    }
}

/// Sends `data` and reads exactly as many bytes back, without half-closing: a FIN ends a TM3
/// connection in both directions (`tcpls_test::net::echo_roundtrip` half-closes first).
async fn echo_roundtrip(addr: SocketAddr, data: Vec<u8>) -> Result<(), String> {
    let s = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let (mut r, mut w) = s.into_split();
    let n = data.len();
    let sent = data.clone();
    let wt = tokio::spawn(async move {
        w.write_all(&sent).await?;
        Ok::<_, std::io::Error>(w)
    });
    let mut got = vec![0u8; n];
    r.read_exact(&mut got).await.map_err(|e| format!("read: {e}"))?;
    let _w = wt.await.map_err(|e| e.to_string())?.map_err(|e| e.to_string())?;
    if got != data {
        return Err(format!("echo mismatch on {n} bytes"));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_300_connections_random_sizes() {
    let st = setup(4).await;
    let fwd = st.forward(echo_server().await).await;
    let start = Instant::now();
    let mut tasks = Vec::new();
    for i in 0..300u64 {
        tasks.push(tokio::spawn(async move {
            let seed = i * 7919 + 13;
            // The connection's size (its bytes come from `payload`).
            let size = tcpls_test::Rng::new(seed).below(96 * 1024) + if i % 10 == 0 { 0 } else { 1 };
            echo_roundtrip(fwd, payload(size, seed)).await
        }));
    }
    for (i, t) in tasks.into_iter().enumerate() {
        let r = timeout(T * 2, t).await.expect("timeout").unwrap();
        assert!(r.is_ok(), "connection {i}: {r:?}");
    }
    // All 300 were concurrently open at the remote proxy at some point: IDs beyond 256 used.
    assert!(st.lp.stats().snapshot().streams >= 300);
    eprintln!("300 connections in {:?}", start.elapsed());
}

/// Raw pipes to a remote proxy; every received message comes out of the channel with its pipe.
async fn raw_pipes(
    rp: SocketAddr,
    n: usize,
) -> (Vec<tokio::net::tcp::OwnedWriteHalf>, mpsc::UnboundedReceiver<(usize, Option<Message>)>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let mut writers = Vec::new();
    for i in 0..n {
        let s = TcpStream::connect(rp).await.unwrap();
        let (mut r, w) = s.into_split();
        writers.push(w);
        let tx = tx.clone();
        tokio::spawn(async move {
            let mut buf = BytesMut::with_capacity(64 * 1024);
            loop {
                while let Ok(Some(m)) = codec::decode(&mut buf) {
                    let _ = tx.send((i, Some(m)));
                }
                match r.read_buf(&mut buf).await {
                    Ok(0) | Err(_) => {
                        let _ = tx.send((i, None)); // pipe closed
                        return;
                    }
                    Ok(_) => {}
                }
            }
        });
    }
    (writers, rx)
}

async fn next_msg(rx: &mut mpsc::UnboundedReceiver<(usize, Option<Message>)>) -> (usize, Option<Message>) {
    timeout(T, rx.recv()).await.expect("timeout waiting for a pipe message").expect("channel closed")
}

/// Collects downlink data of `conn` (in sequence order) until `want` bytes, and returns the
/// pipes used.
async fn collect_data(
    rx: &mut mpsc::UnboundedReceiver<(usize, Option<Message>)>,
    conn: u16,
    next_seq: &mut u32,
    want: usize,
) -> (Vec<u8>, Vec<usize>) {
    let mut got = std::collections::BTreeMap::new();
    let mut out = Vec::new();
    let mut pipes = Vec::new();
    while out.len() < want {
        let (p, m) = next_msg(rx).await;
        match m {
            Some(Message::Data { conn_id, seq, payload }) if conn_id == conn => {
                pipes.push(p);
                got.insert(seq, payload);
                while let Some(b) = got.remove(next_seq) {
                    out.extend_from_slice(&b);
                    *next_seq += 1;
                }
            }
            Some(other) => panic!("unexpected {other:?} on pipe {p}"),
            None => {}
        }
    }
    (out, pipes)
}

async fn send(w: &mut tokio::net::tcp::OwnedWriteHalf, m: &Message) {
    w.write_all(&m.to_bytes().unwrap()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_order_across_pipes_delivered_in_order() {
    let echo = echo_server().await;
    let rp = RemoteProxy::bind("127.0.0.1:0".parse().unwrap(), 4, test_config()).await.unwrap();
    let rp_addr = rp.local_addr().unwrap();
    tokio::spawn(rp.run());
    let (mut pipes, mut rx) = raw_pipes(rp_addr, 4).await;
    let id = 4242;
    // SYN (seq 0) and data seq 1..=6, sent in reverse order, each on a different pipe.
    let chunks: Vec<Bytes> = (1..=6u8).map(|i| Bytes::from(vec![b'a' + i; 1000 + usize::from(i)])).collect();
    let mut msgs = vec![Message::Syn { conn_id: id, seq: 0, dst: v4(echo) }];
    for (i, c) in chunks.iter().enumerate() {
        msgs.push(Message::Data { conn_id: id, seq: i as u32 + 1, payload: c.clone() });
    }
    for (k, m) in msgs.iter().rev().enumerate() {
        send(&mut pipes[k % 4], m).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let expect: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
    let mut down_seq = 0;
    let (got, _) = collect_data(&mut rx, id, &mut down_seq, expect.len()).await;
    assert_eq!(got, expect, "echoed bytes must be in sequence order");
    // Close: FIN 0x88 with seq 7 (the next sequence number) is answered by the remote proxy's FIN.
    send(&mut pipes[2], &Message::Fin { conn_id: id, seq: 7, reason: REASON_FIN }).await;
    loop {
        match next_msg(&mut rx).await {
            (_, Some(Message::Fin { conn_id, seq, reason })) if conn_id == id => {
                assert_eq!(seq, down_seq, "FIN takes the next downlink sequence number");
                assert_eq!(reason, REASON_FIN);
                break;
            }
            (_, Some(Message::Data { conn_id, .. })) if conn_id == id => {}
            (p, m) => panic!("unexpected {m:?} on pipe {p}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_proxy_wire_format() {
    // The test plays the remote proxy.
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let rp_addr = l.local_addr().unwrap();
    let accept = tokio::spawn(async move {
        let mut v = Vec::new();
        for _ in 0..2 {
            v.push(l.accept().await.unwrap().0);
        }
        v
    });
    let lp = timeout(T, LocalProxy::connect(rp_addr, 2, test_config())).await.unwrap().unwrap();
    let pipes = timeout(T, accept).await.unwrap().unwrap();
    let fl = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let fwd = fl.local_addr().unwrap();
    let target: SocketAddrV4 = "10.1.2.3:6001".parse().unwrap();
    let lp2 = lp.clone();
    tokio::spawn(async move { lp2.serve(fl, Frontend::Forward(Target::Addr(target.into()))).await });
    let mut ws = Vec::new();
    let (tx, mut rx) = mpsc::unbounded_channel();
    for (i, p) in pipes.into_iter().enumerate() {
        let (mut r, w) = p.into_split();
        ws.push(w);
        let tx = tx.clone();
        tokio::spawn(async move {
            let mut buf = BytesMut::new();
            loop {
                while let Ok(Some(m)) = codec::decode(&mut buf) {
                    let _ = tx.send((i, Some(m)));
                }
                if !matches!(r.read_buf(&mut buf).await, Ok(n) if n > 0) {
                    let _ = tx.send((i, None));
                    return;
                }
            }
        });
    }
    let mut client = TcpStream::connect(fwd).await.unwrap();
    client.write_all(b"hello").await.unwrap();
    let mut seen = Vec::new();
    while seen.len() < 2 {
        if let (_, Some(m)) = next_msg(&mut rx).await {
            seen.push(m);
        }
    }
    seen.sort_by_key(|m| m.seq());
    let id = seen[0].conn_id();
    assert!(id != 0);
    assert_eq!(seen[0], Message::Syn { conn_id: id, seq: 0, dst: target });
    assert_eq!(seen[1], Message::Data { conn_id: id, seq: 1, payload: Bytes::from_static(b"hello") });
    // Raw bytes of that SYN: IP in network order, port little-endian.
    let raw = seen[0].to_bytes().unwrap();
    assert_eq!(&raw[6..], &[0xFF, 0xFF, 10, 1, 2, 3, 0x71, 0x17]);
    // Downlink: data seq 0 then FIN seq 1 (sent in reverse order on different pipes).
    send(&mut ws[0], &Message::Fin { conn_id: id, seq: 1, reason: REASON_FIN }).await;
    tokio::time::sleep(Duration::from_millis(30)).await;
    send(&mut ws[1], &Message::Data { conn_id: id, seq: 0, payload: Bytes::from_static(b"world") }).await;
    let mut got = Vec::new();
    timeout(T, client.read_to_end(&mut got)).await.unwrap().unwrap();
    assert_eq!(got, b"world");
    // The local proxy answers with its FIN: next uplink sequence number (2).
    loop {
        if let (_, Some(m)) = next_msg(&mut rx).await {
            assert_eq!(m, Message::Fin { conn_id: id, seq: 2, reason: REASON_FIN });
            break;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_connect_failure_resets_only_that_connection() {
    let st = setup(4).await;
    let echo = st.forward(echo_server().await).await;
    // A port that refuses connections: bound (so nobody else gets it) but not listening.
    let reserved = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    reserved.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into()).unwrap();
    let dead = reserved.local_addr().unwrap().as_socket().unwrap();
    let bad = st.forward(dead).await;
    // A connection that stays open across the failure.
    let mut keep = TcpStream::connect(echo).await.unwrap();
    keep.write_all(b"ping").await.unwrap();
    let mut b = [0u8; 4];
    timeout(T, keep.read_exact(&mut b)).await.unwrap().unwrap();
    for _ in 0..5 {
        // The reset may even come before connect() returns.
        let mut c = match TcpStream::connect(bad).await {
            Ok(c) => c,
            Err(e) if e.kind() == ErrorKind::ConnectionReset => continue,
            Err(e) => panic!("connect: {e}"),
        };
        let _ = c.write_all(b"data right after the SYN").await;
        let mut buf = [0u8; 16];
        let r = timeout(T, c.read(&mut buf)).await.expect("failed connection must be closed");
        match r {
            Err(e) => assert_eq!(e.kind(), ErrorKind::ConnectionReset),
            Ok(n) => assert_eq!(n, 0),
        }
    }
    keep.write_all(b"pong").await.unwrap();
    timeout(T, keep.read_exact(&mut b)).await.unwrap().unwrap();
    assert_eq!(&b, b"pong");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closes_mid_transfer_from_either_side() {
    let st = setup(4).await;
    let (ev_tx, mut ev_rx) = mpsc::unbounded_channel();
    let bulk = st.forward(bulk_server(Some(ev_tx)).await).await;
    let echo = st.forward(echo_server().await).await;

    // Client closes in the middle of a 1 GiB download: the server must see its connection die.
    let mut c = TcpStream::connect(bulk).await.unwrap();
    c.write_all(&(1u64 << 30).to_le_bytes()).await.unwrap();
    let mut buf = vec![0u8; 1 << 20];
    timeout(T, c.read_exact(&mut buf)).await.unwrap().unwrap();
    assert!(check_pattern(0, &buf));
    drop(c);
    let sent = timeout(T, ev_rx.recv()).await.expect("server never saw the close").unwrap();
    assert!(sent < 1 << 30);

    // Server resets in the middle of a response: the client sees the data then a reset/EOF.
    let rst = {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let _ = s.write_all(&vec![7u8; 100_000]).await;
                tokio::time::sleep(Duration::from_millis(50)).await;
                let _ = socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO));
                drop(s);
            }
        });
        st.forward(a).await
    };
    let mut c = TcpStream::connect(rst).await.unwrap();
    let mut total = 0;
    let end = timeout(T, async {
        loop {
            match c.read(&mut buf).await {
                Ok(0) => return Ok(()),
                Ok(n) => total += n,
                Err(e) => return Err(e),
            }
        }
    })
    .await
    .expect("client must see the server's reset");
    assert!(total <= 100_000);
    if let Err(e) = end {
        assert_eq!(e.kind(), ErrorKind::ConnectionReset);
    }

    // Server closes gracefully while the client is still uploading.
    let closer = {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                let mut b = vec![0u8; 10_000];
                let _ = s.read_exact(&mut b).await;
                let _ = s.shutdown().await;
                drop(s);
            }
        });
        st.forward(a).await
    };
    let c = TcpStream::connect(closer).await.unwrap();
    let (mut r, mut w) = c.into_split();
    let up = tokio::spawn(async move {
        let chunk = vec![1u8; 64 * 1024];
        for _ in 0..2000 {
            if w.write_all(&chunk).await.is_err() {
                return;
            }
        }
    });
    let mut sink = Vec::new();
    let _ = timeout(T, r.read_to_end(&mut sink)).await.expect("client must see the close");
    timeout(T, up).await.expect("upload must stop").unwrap();

    // Everything else still works.
    timeout(T, echo_roundtrip(echo, payload(300_000, 5))).await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn download_200_mib_verified() {
    let st = setup(4).await;
    let bulk = st.forward(bulk_server(None).await).await;
    let total: u64 = 200 << 20;
    let start = Instant::now();
    let mut c = TcpStream::connect(bulk).await.unwrap();
    c.write_all(&total.to_le_bytes()).await.unwrap();
    let mut buf = vec![0u8; 256 * 1024];
    let mut off = 0u64;
    timeout(Duration::from_secs(50), async {
        loop {
            let n = c.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            assert!(check_pattern(off, &buf[..n]), "corrupt data at offset {off}");
            off += n as u64;
        }
    })
    .await
    .expect("download timed out");
    assert_eq!(off, total);
    eprintln!("200 MiB in {:?}", start.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_thousand_short_connections() {
    let st = setup(4).await;
    let echo = st.forward(echo_server().await).await;
    let start = Instant::now();
    timeout(Duration::from_secs(50), async {
        for i in 0..2000u64 {
            let data = payload(100, i + 1);
            echo_roundtrip(echo, data).await.unwrap_or_else(|e| panic!("connection {i}: {e}"));
        }
    })
    .await
    .expect("timed out");
    eprintln!("2000 connections in {:?}", start.elapsed());
}

/// The front-end type is shared with the TCPLS tunnel: what the TM3 SYN cannot carry (an HTTP
/// proxy, a forward to IPv6 or to a name) is refused at once, and the proxy still serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frontends_tm3_cannot_carry_are_refused() {
    let st = setup(2).await;
    for frontend in [
        Frontend::Http,
        Frontend::Forward(Target::Addr("[::1]:80".parse().unwrap())),
        Frontend::Forward(Target::Name("example.org".into(), 80)),
    ] {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let e = timeout(T, st.lp.serve(l, frontend.clone())).await.unwrap().unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{frontend:?}: {e}");
    }
    let fwd = st.forward(echo_server().await).await;
    echo_roundtrip(fwd, payload(10_000, 3)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socks5_ipv4_ok_names_refused() {
    let st = setup(2).await;
    let echo = echo_server().await;
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let socks = l.local_addr().unwrap();
    let lp = st.lp.clone();
    tokio::spawn(async move { lp.serve(l, Frontend::Socks).await });
    let mut c = TcpStream::connect(socks).await.unwrap();
    c.write_all(&[5, 1, 0]).await.unwrap();
    let mut b = [0u8; 2];
    timeout(T, c.read_exact(&mut b)).await.unwrap().unwrap();
    assert_eq!(b, [5, 0]);
    let e = v4(echo);
    let mut req = vec![5, 1, 0, 1];
    req.extend_from_slice(&e.ip().octets());
    req.extend_from_slice(&e.port().to_be_bytes());
    c.write_all(&req).await.unwrap();
    let mut rep = [0u8; 10];
    timeout(T, c.read_exact(&mut rep)).await.unwrap().unwrap();
    assert_eq!(rep[1], 0);
    c.write_all(b"socks").await.unwrap();
    let mut b5 = [0u8; 5];
    timeout(T, c.read_exact(&mut b5)).await.unwrap().unwrap();
    assert_eq!(&b5, b"socks");
    // Domain name: address type not supported (0x08).
    let mut c = TcpStream::connect(socks).await.unwrap();
    c.write_all(&[5, 1, 0]).await.unwrap();
    timeout(T, c.read_exact(&mut b)).await.unwrap().unwrap();
    c.write_all(&[5, 1, 0, 3, 9, b'l', b'o', b'c', b'a', b'l', b'h', b'o', b's', b't', 0, 80]).await.unwrap();
    timeout(T, c.read_exact(&mut rep)).await.unwrap().unwrap();
    assert_eq!(rep[1], 0x08);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_pipe_is_dropped_others_continue() {
    let echo = echo_server().await;
    let rp = RemoteProxy::bind("127.0.0.1:0".parse().unwrap(), 4, test_config()).await.unwrap();
    let rp_addr = rp.local_addr().unwrap();
    let sessions = Arc::new(Mutex::new(Vec::new()));
    let s2 = sessions.clone();
    tokio::spawn(rp.run_with(move |s| s2.lock().unwrap().push(s)));
    let (mut pipes, mut rx) = raw_pipes(rp_addr, 4).await;
    let a = 7;
    let b = 300;
    send(&mut pipes[0], &Message::Syn { conn_id: a, seq: 0, dst: v4(echo) }).await;
    send(&mut pipes[0], &Message::Data { conn_id: a, seq: 1, payload: Bytes::from_static(b"one") }).await;
    let mut down_a = 0;
    let (got, _) = collect_data(&mut rx, a, &mut down_a, 3).await;
    assert_eq!(got, b"one");

    // Connection-level error: a FIN with an unknown reason resets only that connection.
    send(&mut pipes[3], &Message::Syn { conn_id: b, seq: 0, dst: v4(echo) }).await;
    send(&mut pipes[3], &Message::Fin { conn_id: b, seq: 1, reason: 0x42 }).await;
    match next_msg(&mut rx).await {
        (_, Some(Message::Fin { conn_id, seq: 0, reason })) if conn_id == b => assert_eq!(reason, REASON_RST),
        (p, m) => panic!("unexpected {m:?} on pipe {p}"),
    }

    // Pipe 1 sends garbage (length field 3): it is closed and never used again.
    pipes[1].write_all(&[1, 0, 0, 0, 0, 0, 3, 0, 0xde, 0xad]).await.unwrap();
    match next_msg(&mut rx).await {
        (1, None) => {}
        (p, m) => panic!("unexpected {m:?} on pipe {p}"),
    }
    // Connection `a` goes on over the remaining pipes.
    for seq in 2..40u32 {
        let p = [0, 2, 3][seq as usize % 3];
        send(&mut pipes[p], &Message::Data { conn_id: a, seq, payload: Bytes::from(vec![seq as u8; 2000]) }).await;
    }
    let (got, used) = collect_data(&mut rx, a, &mut down_a, 38 * 2000).await;
    assert_eq!(got.len(), 38 * 2000);
    assert!(!used.contains(&1), "the untrusted pipe must not be used");
    let stats = sessions.lock().unwrap()[0].clone();
    assert_eq!(stats.stats().snapshot().pipes_dropped, 1);
    assert_eq!(stats.stats().snapshot().rejected, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_message_gap_resets_connection() {
    // A message that never arrives (as when its pipe was dropped) resets its connection after
    // the gap timeout; the other connections are untouched.
    let echo = echo_server().await;
    let rp = RemoteProxy::bind("127.0.0.1:0".parse().unwrap(), 2, test_config()).await.unwrap();
    let rp_addr = rp.local_addr().unwrap();
    tokio::spawn(rp.run());
    let (mut pipes, mut rx) = raw_pipes(rp_addr, 2).await;
    send(&mut pipes[0], &Message::Syn { conn_id: 1, seq: 0, dst: v4(echo) }).await;
    send(&mut pipes[0], &Message::Data { conn_id: 1, seq: 2, payload: Bytes::from_static(b"late") }).await;
    let t0 = Instant::now();
    match next_msg(&mut rx).await {
        (_, Some(Message::Fin { conn_id: 1, seq: 0, reason })) => assert_eq!(reason, REASON_RST),
        (p, m) => panic!("unexpected {m:?} on pipe {p}"),
    }
    assert!(t0.elapsed() >= Duration::from_millis(1500));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transparent_mode_refuses_connections_that_were_not_redirected() {
    let st = setup(2).await;
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a = l.local_addr().unwrap();
    // SO_ORIGINAL_DST itself: the local address when conntrack tracks the connection, else an
    // error; never a panic.
    let probe = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let pa = probe.local_addr().unwrap();
    let _c = TcpStream::connect(pa).await.unwrap();
    let (s, _) = probe.accept().await.unwrap();
    match tcpls_tunnel::original_dst(&s) {
        Ok(d) => assert_eq!(SocketAddr::V4(d), pa),
        Err(e) => eprintln!("SO_ORIGINAL_DST unavailable here: {e}"),
    }
    let lp = st.lp.clone();
    tokio::spawn(async move { lp.serve(l, Frontend::Transparent).await });
    let mut c = TcpStream::connect(a).await.unwrap();
    let mut b = [0u8; 1];
    let r = timeout(T, c.read(&mut b)).await.expect("not-redirected connection must be closed");
    assert!(matches!(r, Ok(0) | Err(_)));
    assert_eq!(st.lp.stats().snapshot().streams, 0);
}

fn spawn_pipe_reader(
    i: usize,
    mut r: tokio::net::tcp::OwnedReadHalf,
    tx: mpsc::UnboundedSender<(usize, Option<Message>)>,
) {
    tokio::spawn(async move {
        let mut buf = BytesMut::with_capacity(64 * 1024);
        loop {
            while let Ok(Some(m)) = codec::decode(&mut buf) {
                let _ = tx.send((i, Some(m)));
            }
            if !matches!(r.read_buf(&mut buf).await, Ok(n) if n > 0) {
                let _ = tx.send((i, None));
                return;
            }
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduler_skips_a_blocked_pipe() {
    // The test plays the local proxy and does not read pipe 0: the remote proxy must go on
    // sending on the other pipes (a message is never split across pipes).
    let bulk = bulk_server(None).await;
    let rp = RemoteProxy::bind("127.0.0.1:0".parse().unwrap(), 4, test_config()).await.unwrap();
    let rp_addr = rp.local_addr().unwrap();
    tokio::spawn(rp.run());
    let (tx, mut rx) = mpsc::unbounded_channel();
    let mut ws = Vec::new();
    let mut stalled = None;
    for i in 0..4 {
        let (r, w) = TcpStream::connect(rp_addr).await.unwrap().into_split();
        ws.push(w);
        if i == 0 {
            stalled = Some(r);
        } else {
            spawn_pipe_reader(i, r, tx.clone());
        }
    }
    let total: usize = 32 << 20;
    send(&mut ws[1], &Message::Syn { conn_id: 9, seq: 0, dst: v4(bulk) }).await;
    let req = Bytes::copy_from_slice(&(total as u64).to_le_bytes());
    send(&mut ws[2], &Message::Data { conn_id: 9, seq: 1, payload: req }).await;
    let mut got = std::collections::BTreeMap::new();
    let mut fin = None;
    let mut bytes_on_others = 0;
    while bytes_on_others < 24 << 20 {
        match next_msg(&mut rx).await {
            (p, Some(Message::Data { conn_id: 9, seq, payload })) => {
                assert_ne!(p, 0);
                bytes_on_others += payload.len();
                got.insert(seq, payload);
            }
            (_, Some(Message::Fin { conn_id: 9, seq, reason })) => fin = Some((seq, reason)),
            (p, m) => panic!("unexpected {m:?} on pipe {p}"),
        }
    }
    // Now drain pipe 0 too and check the whole download in sequence order.
    spawn_pipe_reader(0, stalled.take().unwrap(), tx.clone());
    let mut next = 0u32;
    let mut off = 0u64;
    loop {
        while let Some(b) = got.remove(&next) {
            assert!(check_pattern(off, &b), "corrupt data at offset {off}");
            off += b.len() as u64;
            next += 1;
        }
        if off == total as u64 {
            break;
        }
        match next_msg(&mut rx).await {
            (_, Some(Message::Data { conn_id: 9, seq, payload })) => {
                got.insert(seq, payload);
            }
            (_, Some(Message::Fin { conn_id: 9, seq, reason })) => fin = Some((seq, reason)),
            (p, m) => panic!("unexpected {m:?} on pipe {p}"),
        }
    }
    // The server closed after the download: FIN 0x88 with the next sequence number.
    while fin.is_none() {
        match next_msg(&mut rx).await {
            (_, Some(Message::Fin { conn_id: 9, seq, reason })) => fin = Some((seq, reason)),
            (p, m) => panic!("unexpected {m:?} on pipe {p}"),
        }
    }
    assert_eq!(fin, Some((next, REASON_FIN)));
}
