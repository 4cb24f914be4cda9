//! Network tests in namespaces. They need root, `ip netns` and `/dev/net/tun`; otherwise each
//! prints `SKIPPED: <reason>` to stderr and returns. They run one at a time (global lock) so
//! that timing measurements are not disturbed by each other.

#![allow(clippy::unwrap_used)] // test helpers outside #[test] functions

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tcpls_netem::{skip_unless_supported, Dir, PathSpec, Side, Topology};
use tcpls_proto::sync::LockExt;

static LOCK: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    LOCK.lock_unpoisoned()
}

/// IPv4 TCP with timestamps: 1448 payload bytes per 1500-byte IP packet.
const V4_GOODPUT_FACTOR: f64 = 1448.0 / 1500.0;

/// Listener in the server namespace that accepts connections and counts received bytes.
struct Sink {
    addr: SocketAddr,
    bytes: Arc<AtomicU64>,
    first_byte: Arc<Mutex<Option<Instant>>>,
    _thread: JoinHandle<()>,
}

fn sink(topo: &Topology, ip: IpAddr) -> Sink {
    let listener = topo.run_in(Side::Server, || TcpListener::bind(SocketAddr::new(ip, 0))).unwrap().unwrap();
    let addr = listener.local_addr().unwrap();
    let bytes = Arc::new(AtomicU64::new(0));
    let first_byte = Arc::new(Mutex::new(None));
    let (b, f) = (bytes.clone(), first_byte.clone());
    let thread = std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let (b, f) = (b.clone(), f.clone());
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 256 * 1024];
                while let Ok(n) = conn.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    f.lock().unwrap().get_or_insert_with(Instant::now);
                    b.fetch_add(n as u64, Ordering::SeqCst);
                }
            });
        }
    });
    Sink { addr, bytes, first_byte, _thread: thread }
}

/// A client thread (in the client namespace) sending as fast as possible until `stop`.
fn source(topo: &Topology, to: SocketAddr, stop: Arc<AtomicBool>) -> JoinHandle<u64> {
    topo.spawn_in(Side::Client, move || {
        let mut s = TcpStream::connect_timeout(&to, Duration::from_secs(5)).unwrap();
        s.set_write_timeout(Some(Duration::from_millis(200))).unwrap();
        let chunk = vec![0xa5u8; 64 * 1024];
        let mut sent = 0u64;
        while !stop.load(Ordering::SeqCst) {
            match s.write(&chunk) {
                Ok(n) => sent += n as u64,
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                Err(e) => panic!("write: {e}"),
            }
        }
        sent
    })
    .unwrap()
}

fn wait_first_byte(s: &Sink) -> Instant {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(t) = *s.first_byte.lock().unwrap() {
            return t;
        }
        assert!(Instant::now() < deadline, "no data arrived");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Median handshake RTT from the client to `to` over `n` connections: the kernel's RTT sample
/// of SYN → SYN/ACK (`TCP_INFO`, independent of this thread's scheduling), and the user-space
/// connect() time for comparison.
fn handshake_rtt(topo: &Topology, to: SocketAddr, n: usize) -> (Duration, Duration) {
    let (mut kernel, mut user): (Vec<Duration>, Vec<Duration>) = topo
        .run_in(Side::Client, move || {
            (0..n)
                .map(|_| {
                    let t = Instant::now();
                    let s = TcpStream::connect_timeout(&to, Duration::from_secs(2)).unwrap();
                    let d = t.elapsed();
                    let k = tcpls_netem::tcp_rtt(&s).unwrap();
                    drop(s);
                    std::thread::sleep(Duration::from_millis(10));
                    (k, d)
                })
                .unzip()
        })
        .unwrap();
    kernel.sort();
    user.sort();
    (kernel[n / 2], user[n / 2])
}

fn connect_rtt(topo: &Topology, to: SocketAddr, n: usize) -> Duration {
    handshake_rtt(topo, to, n).1
}

#[test]
fn rtt_matches_configured_delay() {
    let _g = serial();
    skip_unless_supported!("rtt_matches_configured_delay");
    let topo = Topology::builder()
        .paths(vec![PathSpec { delay_ms: 20.0, rate_mbps: 50.0, ipv6: true, ..PathSpec::default() }])
        .build()
        .unwrap();
    let info = topo.path(0).info().clone();
    for ip in [IpAddr::V4(info.server_v4.unwrap()), IpAddr::V6(info.server_v6.unwrap())] {
        let s = sink(&topo, ip);
        let (k, u) = handshake_rtt(&topo, s.addr, 9);
        let (ms, ums) = (k.as_secs_f64() * 1000.0, u.as_secs_f64() * 1000.0);
        eprintln!("measured RTT {ip}: {ms:.2} ms (kernel TCP_INFO), connect() {ums:.2} ms (configured 2 x 20 ms)");
        assert!((ms - 40.0).abs() <= 4.0, "RTT {ms:.2} ms not within 10% of 40 ms");
    }
    // Changing the delay at runtime takes effect.
    topo.path(0).set_delay_ms(5.0);
    let s = sink(&topo, IpAddr::V4(info.server_v4.unwrap()));
    let (k, u) = handshake_rtt(&topo, s.addr, 5);
    let ms = k.as_secs_f64() * 1000.0;
    eprintln!("measured RTT after set_delay_ms(5): {ms:.2} ms (kernel), connect() {:.2} ms", u.as_secs_f64() * 1000.0);
    assert!((ms - 10.0).abs() <= 1.0, "RTT {ms:.2} ms not within 10% of 10 ms");
}

#[test]
fn rate_matches_configured_rate() {
    let _g = serial();
    skip_unless_supported!("rate_matches_configured_rate");
    let rate = 50.0;
    let topo = Topology::builder()
        .paths(vec![PathSpec { delay_ms: 20.0, rate_mbps: rate, queue_packets: 500, ..PathSpec::default() }])
        .build()
        .unwrap();
    let s = sink(&topo, IpAddr::V4(topo.path(0).info().server_v4.unwrap()));
    let stop = Arc::new(AtomicBool::new(false));
    let src = source(&topo, s.addr, stop.clone());
    let t0 = wait_first_byte(&s);
    // Skip slow start: measure from 1 s to 3 s after the first byte.
    std::thread::sleep((t0 + Duration::from_secs(1)).saturating_duration_since(Instant::now()));
    let (a, ta, la) = (s.bytes.load(Ordering::SeqCst), Instant::now(), topo.path(0).stats(Dir::ClientToServer));
    std::thread::sleep(Duration::from_secs(2));
    let (b, tb, lb) = (s.bytes.load(Ordering::SeqCst), Instant::now(), topo.path(0).stats(Dir::ClientToServer));
    stop.store(true, Ordering::SeqCst);
    src.join().unwrap();
    let secs = (tb - ta).as_secs_f64();
    let goodput = (b - a) as f64 * 8.0 / secs / 1e6;
    let ip_rate = (lb.tx_bytes - la.tx_bytes) as f64 * 8.0 / secs / 1e6;
    let expected = rate * V4_GOODPUT_FACTOR;
    eprintln!(
        "configured {rate} Mbit/s (IP bytes): goodput {goodput:.2} Mbit/s (expected {expected:.2}), IP-level {ip_rate:.2} Mbit/s, drops {}",
        lb.drop_queue
    );
    assert!((goodput - expected).abs() <= 0.1 * expected, "goodput {goodput:.2} not within 10% of {expected:.2}");
    assert!((ip_rate - rate).abs() <= 0.1 * rate, "IP rate {ip_rate:.2} not within 10% of {rate}");
}

#[test]
fn blackhole_stops_and_resumes_transfer() {
    let _g = serial();
    skip_unless_supported!("blackhole_stops_and_resumes_transfer");
    let topo = Topology::builder().paths(vec![PathSpec::new(5.0, 20.0)]).build().unwrap();
    let s = sink(&topo, IpAddr::V4(topo.path(0).info().server_v4.unwrap()));
    let stop = Arc::new(AtomicBool::new(false));
    let src = source(&topo, s.addr, stop.clone());
    let t0 = wait_first_byte(&s);
    std::thread::sleep((t0 + Duration::from_millis(500)).saturating_duration_since(Instant::now()));
    topo.path(0).set_blackhole(true);
    std::thread::sleep(Duration::from_millis(100)); // let the receiver drain what it already has
    let before = s.bytes.load(Ordering::SeqCst);
    std::thread::sleep(Duration::from_secs(1));
    let during = s.bytes.load(Ordering::SeqCst);
    assert_eq!(before, during, "bytes arrived through a blackhole");
    assert!(topo.path(0).stats(Dir::ClientToServer).drop_blackhole > 0);
    topo.path(0).set_blackhole(false);
    let off = Instant::now();
    while s.bytes.load(Ordering::SeqCst) == during {
        assert!(off.elapsed() < Duration::from_secs(8), "transfer did not resume");
        std::thread::sleep(Duration::from_millis(10));
    }
    eprintln!("blackhole: {} bytes before, none for 1 s, resumed {:?} after blackhole off", before, off.elapsed());
    stop.store(true, Ordering::SeqCst);
    src.join().unwrap();
}

#[test]
fn two_disjoint_paths_updown_and_cleanup() {
    let _g = serial();
    skip_unless_supported!("two_disjoint_paths_updown_and_cleanup");
    let spec = PathSpec { delay_ms: 2.0, rate_mbps: 100.0, ipv4: true, ipv6: true, ..PathSpec::default() };
    let topo = Topology::builder().paths(vec![spec.clone(), spec]).build().unwrap();
    let names: Vec<String> = topo.namespaces().to_vec();
    assert_eq!(names.len(), 4);
    for i in 0..2 {
        let info = topo.path(i).info().clone();
        for ip in [IpAddr::V4(info.server_v4.unwrap()), IpAddr::V6(info.server_v6.unwrap())] {
            let s = sink(&topo, ip);
            let before = [topo.path(0).stats(Dir::ClientToServer), topo.path(1).stats(Dir::ClientToServer)];
            let rtt = connect_rtt(&topo, s.addr, 1);
            let after = [topo.path(0).stats(Dir::ClientToServer), topo.path(1).stats(Dir::ClientToServer)];
            eprintln!("path {i} {ip}: reachable, RTT {rtt:?}");
            assert!(after[i].tx_packets > before[i].tx_packets, "traffic to {ip} did not use path {i}");
            assert_eq!(after[1 - i].rx_packets, before[1 - i].rx_packets, "traffic to {ip} used the other path");
        }
    }
    // A socket bound to the path-1 client address reaches the path-0 server address via path 1.
    let s0 = sink(&topo, IpAddr::V4(topo.path(0).info().server_v4.unwrap()));
    let c1 = topo.path(1).info().client_v4.unwrap();
    let before = topo.path(1).stats(Dir::ClientToServer).tx_packets;
    let to = s0.addr;
    topo.run_in(Side::Client, move || {
        let sock = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        sock.bind(&SocketAddr::new(IpAddr::V4(c1), 0).into()).unwrap();
        sock.connect_timeout(&to.into(), Duration::from_secs(2)).unwrap();
    })
    .unwrap();
    assert!(topo.path(1).stats(Dir::ClientToServer).tx_packets > before, "source routing did not pick path 1");

    // RST injection: `ss -K` in the client aborts the connection, the server sees a reset.
    let to = s0.addr;
    let conn =
        topo.run_in(Side::Client, move || TcpStream::connect_timeout(&to, Duration::from_secs(2))).unwrap().unwrap();
    let killed = topo.kill_tcp_sockets(Side::Client, &["dst", &to.ip().to_string()]).unwrap();
    assert!(killed.contains(&to.ip().to_string()), "{killed}");
    let mut c = conn;
    assert!(c.write_all(b"x").is_err(), "socket still usable after ss -K");

    // Down: connection attempts over path 1 fail; client interface has no carrier. Up: works again.
    let s1 = sink(&topo, IpAddr::V4(topo.path(1).info().server_v4.unwrap()));
    topo.path(1).set_up(false).unwrap();
    let link = topo.ip(Side::Client, &["link", "show", "p1"]).unwrap();
    assert!(link.contains("NO-CARRIER"), "{link}");
    let to = s1.addr;
    let r = topo.run_in(Side::Client, move || TcpStream::connect_timeout(&to, Duration::from_millis(500))).unwrap();
    assert!(r.is_err(), "connected over a down path");
    topo.path(1).set_up(true).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let rtt = connect_rtt(&topo, s1.addr, 1);
    eprintln!("path 1 after down/up: RTT {rtt:?}");

    drop(topo);
    let list = std::process::Command::new("ip").args(["netns", "list"]).output().unwrap();
    let list = String::from_utf8_lossy(&list.stdout);
    for n in &names {
        assert!(!list.lines().any(|l| l.split_whitespace().next() == Some(n.as_str())), "{n} still exists");
    }
}

#[test]
fn mptcp_transfer_over_two_paths() {
    let _g = serial();
    skip_unless_supported!("mptcp_transfer_over_two_paths");
    if !std::path::Path::new("/proc/sys/net/mptcp/enabled").exists() {
        tcpls_netem::print_skipped(
            "mptcp_transfer_over_two_paths",
            "kernel without MPTCP (/proc/sys/net/mptcp/enabled missing)",
        );
        return;
    }
    let rate = 20.0;
    let topo = Topology::builder().paths(vec![PathSpec::new(5.0, rate), PathSpec::new(5.0, rate)]).build().unwrap();
    topo.mptcp_setup(false).unwrap();
    let server = topo.path(0).info().server_v4.unwrap();
    let peer = env!("CARGO_BIN_EXE_mptcp-peer");
    let mut srv = topo
        .command(Side::Server, peer)
        .args(["server", "--once", "--listen", &format!("{server}:5201")])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let bytes = 8_000_000u64;
    let out = topo
        .command(Side::Client, peer)
        .args(["client", &format!("{server}:5201"), "--bytes", &bytes.to_string(), "--json", "--timeout", "20"])
        .output()
        .unwrap();
    let _ = srv.kill();
    let _ = srv.wait();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "client failed: {stdout} {}", String::from_utf8_lossy(&out.stderr));
    let rep: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    assert_eq!(rep["confirmed"].as_u64(), Some(bytes));
    let p0 = topo.path(0).stats(Dir::ClientToServer).tx_bytes;
    let p1 = topo.path(1).stats(Dir::ClientToServer).tx_bytes;
    eprintln!(
        "mptcp: {} Mbit/s over 2 x {rate} Mbit/s, extra subflows (mptcp_info) {}, IP bytes path0 {p0} path1 {p1}",
        rep["mbps"], rep["max_subflows"]
    );
    assert!(p1 > bytes / 10, "second path was not used by MPTCP (path1 carried {p1} bytes)");
}

#[test]
fn cleanup_of_dead_pid_namespaces() {
    let _g = serial();
    skip_unless_supported!("cleanup_of_dead_pid_namespaces");
    // A namespace named like ours with a pid that cannot exist is removed by cleanup_stale.
    let name = "tn4194305x0-c";
    let ok = std::process::Command::new("ip").args(["netns", "add", name]).status().unwrap().success();
    assert!(ok);
    let removed = tcpls_netem::cleanup_stale();
    assert!(removed.iter().any(|n| n == name), "{removed:?}");
}

/// UDP receiver in the server namespace counting datagrams.
fn udp_pair(topo: &Topology, server: IpAddr) -> (std::net::UdpSocket, std::net::UdpSocket, SocketAddr) {
    let rx = topo.run_in(Side::Server, move || std::net::UdpSocket::bind(SocketAddr::new(server, 0))).unwrap().unwrap();
    let to = rx.local_addr().unwrap();
    let tx = topo.run_in(Side::Client, || std::net::UdpSocket::bind("0.0.0.0:0")).unwrap().unwrap();
    rx.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    (tx, rx, to)
}

/// Count datagrams on a thread (so the socket buffer never overflows) until 300 ms of silence.
fn count_received(rx: std::net::UdpSocket) -> JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut buf = [0u8; 2048];
        let mut n = 0;
        let start = Instant::now();
        loop {
            if rx.recv(&mut buf).is_ok() {
                n += 1;
            } else if n > 0 || start.elapsed() > Duration::from_secs(3) {
                return n;
            }
        }
    })
}

#[test]
fn random_loss_and_queue_limit() {
    let _g = serial();
    skip_unless_supported!("random_loss_and_queue_limit");
    let topo = Topology::builder().paths(vec![PathSpec::new(1.0, 0.0)]).build().unwrap();
    let server = IpAddr::V4(topo.path(0).info().server_v4.unwrap());

    // Loss: 20 % on client→server; 3000 paced datagrams.
    topo.path(0).direction(Dir::ClientToServer).update(|p| p.loss = 0.2);
    let (tx, rx, to) = udp_pair(&topo, server);
    let counter = count_received(rx);
    let sent = 3000u64;
    for i in 0..sent {
        tx.send_to(&[0u8; 100], to).unwrap();
        if i % 20 == 19 {
            std::thread::sleep(Duration::from_micros(500));
        }
    }
    let got = counter.join().unwrap();
    let loss = 1.0 - got as f64 / sent as f64;
    let st = topo.path(0).stats(Dir::ClientToServer);
    eprintln!(
        "loss: configured 0.20, measured {loss:.3} ({got}/{sent} received; emulator: {} of {} dropped)",
        st.drop_loss, st.rx_packets
    );
    assert!((loss - 0.2).abs() < 0.03, "measured loss {loss:.3}");
    topo.path(0).set_loss(0.0);

    // Queue: 10 Mbit/s with a 20-packet queue; a back-to-back burst of 200 x 1000 bytes.
    topo.path(0).set_rate_mbps(10.0);
    topo.path(0).set_queue_packets(20);
    let before = topo.path(0).stats(Dir::ClientToServer);
    let (tx, rx, to) = udp_pair(&topo, server);
    let counter = count_received(rx);
    for _ in 0..200 {
        tx.send_to(&[0u8; 1000], to).unwrap();
    }
    let got = counter.join().unwrap();
    let after = topo.path(0).stats(Dir::ClientToServer);
    let dropped = after.drop_queue - before.drop_queue;
    eprintln!("queue: 200-packet burst into a 20-packet queue at 10 Mbit/s: {got} delivered, {dropped} dropped");
    assert_eq!(got + dropped, 200);
    assert!((20..=60).contains(&got), "delivered {got}");
}

#[test]
fn cli_up_set_and_sigkill_cleanup() {
    let _g = serial();
    skip_unless_supported!("cli_up_set_and_sigkill_cleanup");
    use std::io::BufRead;
    let bin = env!("CARGO_BIN_EXE_tcpls-netem");
    let mut child = std::process::Command::new(bin)
        .args(["up", "--paths", "2", "--delay", "1", "--rate", "10"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let prefix = first.strip_prefix("topology ").unwrap().trim().to_string();
    for l in lines.by_ref() {
        if l.unwrap().starts_with("running") {
            break;
        }
    }
    let run = |args: &[&str]| {
        let o = std::process::Command::new(bin).args(args).output().unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let r = run(&["set", "1", "--prefix", &prefix, "--blackhole", "on", "--rate", "20"]);
    assert!(r.contains("ok path 1 both blackhole=on") && r.contains("rate=20"), "{r}");
    let r = run(&["stats", "--prefix", &prefix]);
    assert!(r.contains("path 1 ClientToServer"), "{r}");
    let ours = || {
        let o = std::process::Command::new("ip").args(["netns", "list"]).output().unwrap();
        String::from_utf8_lossy(&o.stdout).lines().filter(|l| l.starts_with(&format!("{prefix}-"))).count()
    };
    assert_eq!(ours(), 4);
    child.kill().unwrap(); // SIGKILL: no chance to clean up itself; the watchdog must do it
    child.wait().unwrap();
    let t = Instant::now();
    while ours() > 0 {
        assert!(t.elapsed() < Duration::from_secs(5), "namespaces of a SIGKILLed run were not removed");
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!("cli: namespaces removed {:?} after SIGKILL", t.elapsed());
    let _ = run(&["cleanup"]); // removes the stale control socket
    assert!(!tcpls_netem::control::socket_path(&prefix).exists());
}
