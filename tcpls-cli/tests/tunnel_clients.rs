//! The concentrator's per-client policy (docs/TUNNEL.md "Per-client policy"): real
//! `tcpls tunnel server` / `tcpls tunnel client` processes on loopback, clients told apart by
//! the CN of certificates signed by one test CA (`tcpls_test::TestCa`). A destination thread serves a
//! pseudo-random payload; every download is compared byte for byte.

#![allow(clippy::unwrap_used)]

mod support;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use support::{free_port, make_cert, payload, tcpls, Proc, TempDir, LOCALHOST_V4, SHORT, TIMEOUT};

/// A CA and client certificates signed by it, one per CN, written as DIR/NAME.pem and
/// DIR/NAME.key; DIR/ca.pem is the CA.
struct Pki {
    dir: PathBuf,
}

impl Pki {
    fn new(dir: &Path, names: &[&str]) -> Pki {
        let ca = tcpls_test::TestCa::new("tunnel test CA").unwrap();
        std::fs::write(dir.join("ca.pem"), &ca.cert.cert_pem).unwrap();
        for name in names {
            let id = ca.client_cert(name, &[&format!("{name}.clients.test")]).unwrap();
            std::fs::write(dir.join(format!("{name}.pem")), &id.cert_pem).unwrap();
            std::fs::write(dir.join(format!("{name}.key")), &id.key_pem).unwrap();
        }
        Pki { dir: dir.to_path_buf() }
    }

    fn cert(&self, name: &str) -> (PathBuf, PathBuf) {
        (self.dir.join(format!("{name}.pem")), self.dir.join(format!("{name}.key")))
    }
}

/// A destination on 127.0.0.1 that sends `payload` to every connection, then closes.
fn destination(payload: Vec<u8>) -> u16 {
    let l = TcpListener::bind((LOCALHOST_V4, 0)).unwrap();
    let port = l.local_addr().unwrap().port();
    let payload = std::sync::Arc::new(payload);
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { continue };
            let payload = payload.clone();
            std::thread::spawn(move || {
                let _ = s.write_all(&payload);
            });
        }
    });
    port
}

/// Everything a connection to `port` receives until EOF (Err: a reset, or a timeout).
fn download(port: u16) -> std::io::Result<Vec<u8>> {
    let mut s = TcpStream::connect((LOCALHOST_V4, port))?;
    s.set_read_timeout(Some(TIMEOUT))?;
    let mut got = Vec::new();
    s.read_to_end(&mut got)?;
    Ok(got)
}

/// A download that the tunnel refused: reset, or closed with nothing.
fn assert_refused(port: u16, what: &str, client: &mut Proc) {
    match download(port) {
        Ok(got) if !got.is_empty() => panic!("{what}: {} bytes arrived\n{}", got.len(), client.diagnostics()),
        _ => {}
    }
}

/// `GET /metrics`: series (name with labels) -> value.
fn scrape(addr: SocketAddr) -> BTreeMap<String, f64> {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(SHORT)).unwrap();
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (_, body) = response.split_once("\r\n\r\n").unwrap();
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap();
            (series.to_string(), value.parse().unwrap())
        })
        .collect()
}

struct Bed {
    _dir: TempDir,
    pki: Pki,
    server_cert: PathBuf,
    port: u16,
    config: PathBuf,
}

impl Bed {
    fn new(tag: &str) -> Bed {
        let dir = TempDir::new(tag);
        let pki = Pki::new(dir.path(), &["alice", "bob", "carol"]);
        let (server_cert, _) = make_cert(dir.path(), "server");
        let config = dir.path().join("tunnel.toml");
        Bed { port: free_port(LOCALHOST_V4), _dir: dir, pki, server_cert, config }
    }

    /// Writes the configuration: a [server] table on `port`, then `clients` (TOML tables).
    fn write_config(&self, clients: &str) {
        let text = format!(
            "[server]\nlisten = [\"127.0.0.1:{}\"]\ncert = \"server/cert.pem\"\nkey = \"server/key.pem\"\n\
             client-ca = \"ca.pem\"\nallow-dest = [\"127.0.0.0/8\"]\n\n{clients}",
            self.port
        );
        std::fs::write(&self.config, text).unwrap();
    }

    fn server(&self, extra: &[&str]) -> Proc {
        let mut server =
            Proc::spawn(tcpls().args(["tunnel", "server", "--config"]).arg(&self.config).args(extra), false);
        server.stderr.wait_for(b"listening on", SHORT).unwrap_or_else(|e| panic!("{e}\n{}", server.diagnostics()));
        server
    }

    /// A client with `name`'s certificate forwarding a local port to 127.0.0.1:`dest`.
    fn client(&self, name: &str, dest: u16) -> (Proc, u16) {
        let (cert, key) = self.pki.cert(name);
        support::start_on_free_port("tcpls tunnel client", b"tcpls tunnel client: session to", |local| {
            let mut cmd = tcpls();
            cmd.args(["tunnel", "client", "--concentrator", &format!("127.0.0.1:{}", self.port)]);
            cmd.args(["--server-name", "localhost", "--ca"]).arg(&self.server_cert);
            cmd.arg("--cert").arg(&cert).arg("--key").arg(&key);
            cmd.args(["--forward", &format!("127.0.0.1:{local}=127.0.0.1:{dest}")]);
            cmd
        })
    }
}

/// One concentrator, four clients: alice (rate 2 MB/s, one session at most) downloads 4 MiB
/// byte-exact in no less than ~1.5 s; bob's entry denies the destination alice reaches, so his
/// connection is refused; a second alice session is refused with the max-sessions error the
/// client prints; carol has no entry and is refused as unknown. Log lines and metrics name the
/// clients; carol, unconfigured, is only ever "other".
#[test]
fn per_client_destinations_rate_sessions_logs_and_metrics() {
    let payload = payload(4 << 20, 19);
    let dest = destination(payload.clone());
    let bed = Bed::new("tunnel-clients");
    bed.write_config(
        "[clients.\"alice\"]\nrate = \"2M\"\nmax-sessions = 1\n\n\
         [clients.\"bob\"]\ndeny-dest = [\"127.0.0.1\"]\n",
    );
    let check = support::run(tcpls().args(["tunnel", "check-config"]).arg(&bed.config), None, SHORT).success();
    let summary = check.stdout_text();
    assert!(
        summary.contains("[clients]: OK: per-client policy: 2 client(s)")
            && summary.contains("alice: rate 2000000 bytes/s; at most 1 session(s)")
            && summary.contains("unknown clients refused"),
        "{summary}"
    );
    // Mistakes are one-line errors naming the client or the key.
    let bad = bed.config.with_file_name("bad.toml");
    for (text, says) in [
        ("[server]\nclient-ca = \"ca.pem\"\nunknown-clients = \"maybe\"\n", "unknown-clients: 'maybe'"),
        ("[server]\nlisten = [\"127.0.0.1:1\"]\n[clients.alice]\nrate = 5\n", "need client-ca"),
        (
            "[server]\nclient-ca = \"ca.pem\"\n[clients.alice]\nonly-dest = [\"nowhere\"]\n",
            "client \"alice\": only-dest",
        ),
    ] {
        std::fs::write(&bad, text).unwrap();
        support::run(tcpls().args(["tunnel", "check-config"]).arg(&bad), None, SHORT).one_line_error(says);
    }
    let mut server = bed.server(&["--metrics", "127.0.0.1:0"]);
    let err = server.stderr.text();
    let metrics: SocketAddr =
        err.split("metrics on http://").nth(1).and_then(|r| r.split("/metrics").next()).unwrap().parse().unwrap();
    let before = scrape(metrics);
    for name in ["alice", "bob", "other"] {
        let series = format!("tcpls_tunnel_client_sessions_active{{client=\"{name}\"}}");
        assert_eq!(before.get(&series), Some(&0.0), "configured names are there from the start: {before:#?}");
    }

    // alice: through, at her rate.
    let (mut alice, alice_port) = bed.client("alice", dest);
    let started = Instant::now();
    let got = download(alice_port).unwrap_or_else(|e| panic!("alice: {e}\n{}", alice.diagnostics()));
    let took = started.elapsed();
    assert!(got == payload, "alice's download differs ({} of {} bytes)", got.len(), payload.len());
    eprintln!("alice: {} bytes at a 2 MB/s limit in {:.2} s", got.len(), took.as_secs_f64());
    assert!(took >= Duration::from_millis(1500), "4 MiB at 2 MB/s took only {took:?}: the rate is not applied");
    assert!(took < Duration::from_secs(8), "4 MiB at 2 MB/s took {took:?}");

    // bob: his entry denies 127.0.0.1; alice reached it.
    let (mut bob, bob_port) = bed.client("bob", dest);
    assert_refused(bob_port, "bob", &mut bob);
    bob.stderr
        .wait_for(b"destination policy refuses this destination", SHORT)
        .unwrap_or_else(|e| panic!("{e}\n{}", bob.diagnostics()));
    server.stderr.wait_for(b"(client bob) stream", SHORT).unwrap_or_else(|e| panic!("{e}\n{}", server.diagnostics()));
    assert!(
        server.stderr.text().contains("refused for client \"bob\" (deny-dest 127.0.0.1/32)"),
        "{}",
        server.diagnostics()
    );

    // A second session of alice while the first is up: refused, and the client says why.
    let (mut alice2, alice2_port) = bed.client("alice", dest);
    assert_refused(alice2_port, "alice's second session", &mut alice2);
    alice2
        .stderr
        .wait_for(b"already has as many sessions as its max-sessions allows", SHORT)
        .unwrap_or_else(|e| panic!("{e}\n{}", alice2.diagnostics()));
    server
        .stderr
        .wait_for(b"refused: client \"alice\" already has 1 session(s) (its max-sessions)", SHORT)
        .unwrap_or_else(|e| panic!("{e}\n{}", server.diagnostics()));
    // The first session is untouched.
    assert!(download(alice_port).unwrap() == payload, "alice's first session still works");

    // carol: no entry, unknown clients refused.
    let (mut carol, carol_port) = bed.client("carol", dest);
    assert_refused(carol_port, "carol", &mut carol);
    carol
        .stderr
        .wait_for(b"no entry for this certificate's name", SHORT)
        .unwrap_or_else(|e| panic!("{e}\n{}", carol.diagnostics()));
    server
        .stderr
        .wait_for(b"(client carol) refused: no per-client entry", SHORT)
        .unwrap_or_else(|e| panic!("{e}\n{}", server.diagnostics()));

    let m = scrape(metrics);
    let get = |name: &str, client: &str| m.get(&format!("{name}{{client=\"{client}\"}}")).copied().unwrap_or(-1.0);
    assert_eq!(get("tcpls_tunnel_client_sessions_total", "alice"), 1.0, "{m:#?}");
    assert_eq!(get("tcpls_tunnel_client_sessions_active", "alice"), 1.0, "{m:#?}");
    assert_eq!(get("tcpls_tunnel_client_sessions_refused_total", "alice"), 1.0, "{m:#?}");
    assert_eq!(get("tcpls_tunnel_client_bytes_down_total", "alice"), 2.0 * payload.len() as f64, "{m:#?}");
    assert_eq!(get("tcpls_tunnel_client_refused_dest_total", "bob"), 1.0, "{m:#?}");
    assert_eq!(get("tcpls_tunnel_client_sessions_refused_total", "other"), 1.0, "carol counts as other: {m:#?}");
    assert!(!m.keys().any(|k| k.contains("carol")), "an unconfigured name never becomes a label: {m:#?}");
}

/// SIGHUP with a changed entry: alice's download in flight (rate 500 kB/s) goes on byte-exact on
/// the same session and speeds up once the reload lifts her rate; her next connection follows
/// the new entry (its deny-dest refuses the destination), without a reconnection.
#[test]
fn reload_changes_a_clients_policy_without_dropping_its_session() {
    let payload = payload(3 << 20, 7);
    let dest = destination(payload.clone());
    let bed = Bed::new("tunnel-clients-reload");
    bed.write_config("[clients.\"alice\"]\nrate = \"500K\"\n");
    let mut server = bed.server(&[]);
    let (mut alice, alice_port) = bed.client("alice", dest);
    let started = Instant::now();
    let downloading = std::thread::spawn(move || download(alice_port));
    std::thread::sleep(Duration::from_millis(700));
    bed.write_config("[clients.\"alice\"]\ndeny-dest = [\"127.0.0.1\"]\n");
    let hup = Command::new("kill").args(["-HUP", &server.id().to_string()]).status().unwrap();
    assert!(hup.success());
    server
        .stderr
        .wait_for(b"reloaded: destinations", SHORT)
        .unwrap_or_else(|e| panic!("{e}\n{}", server.diagnostics()));
    assert!(server.stderr.text().contains("alice: denied: 127.0.0.1/32"), "{}", server.diagnostics());
    let got = downloading.join().unwrap().unwrap_or_else(|e| panic!("download: {e}\n{}", alice.diagnostics()));
    let took = started.elapsed();
    assert!(got == payload, "the download in flight differs ({} of {} bytes)", got.len(), payload.len());
    eprintln!("3 MiB, rate 500 kB/s lifted after 0.7 s: {:.2} s (6.3 s at the old rate)", took.as_secs_f64());
    assert!(took < Duration::from_secs(4), "the new rate (none) did not apply to the live relay: {took:?}");
    assert_refused(alice_port, "alice after the reload", &mut alice);
    alice
        .stderr
        .wait_for(b"destination policy refuses", SHORT)
        .unwrap_or_else(|e| panic!("{e}\n{}", alice.diagnostics()));
    let text = alice.stderr.text();
    assert!(!text.contains("lost") && !text.contains("reconnect"), "no reconnection: {text}");
}

/// A UDP sink on 127.0.0.1: counts the distinct datagrams `d(i)` it receives (content checked)
/// until 1.5 s pass without one, from the moment `start` is sent (a thread).
fn udp_sink(d: fn(u32) -> Vec<u8>) -> (u16, std::thread::JoinHandle<usize>) {
    let sock = std::net::UdpSocket::bind((LOCALHOST_V4, 0)).unwrap();
    let port = sock.local_addr().unwrap().port();
    let counting = std::thread::spawn(move || {
        let mut got = std::collections::HashSet::new();
        let mut buf = [0u8; 2048];
        sock.set_read_timeout(Some(SHORT)).unwrap();
        while let Ok(n) = sock.recv(&mut buf) {
            sock.set_read_timeout(Some(Duration::from_millis(1500))).unwrap();
            if &buf[..n] == b"warm-up" {
                continue;
            }
            let i: u32 = std::str::from_utf8(&buf[..5]).unwrap().parse().unwrap();
            assert_eq!(&buf[..n], &d(i)[..], "datagram {i} intact");
            got.insert(i);
        }
        got.len()
    });
    (port, counting)
}

fn datagram(i: u32) -> Vec<u8> {
    let mut d = format!("{i:05} ").into_bytes();
    d.resize(1000, b'a' + (i % 26) as u8);
    d
}

/// UDP under a client's rate drops rather than queues: 200 datagrams of 1000 bytes sent over
/// ~1 s (200 kB/s) through `--forward-udp` with `rate = "100K"` (a 16 KiB burst, then 100 kB/s):
/// about half reach the destination, intact; without a rate all do.
#[test]
fn udp_beyond_a_clients_rate_is_dropped() {
    let bed = Bed::new("tunnel-clients-udp");
    bed.write_config("[clients.\"alice\"]\nrate = \"100K\"\n\n[clients.\"bob\"]\n");
    let _server = bed.server(&[]);
    let through = |name: &str| {
        let (sink, counting) = udp_sink(datagram);
        let (cert, key) = bed.pki.cert(name);
        let (_client, port) = support::start_on_free_port("tcpls tunnel client", b"session to", |local| {
            let mut cmd = tcpls();
            cmd.args(["tunnel", "client", "--concentrator", &format!("127.0.0.1:{}", bed.port)]);
            cmd.args(["--server-name", "localhost", "--ca"]).arg(&bed.server_cert);
            cmd.arg("--cert").arg(&cert).arg("--key").arg(&key);
            cmd.args(["--forward-udp", &format!("127.0.0.1:{local}=127.0.0.1:{sink}")]);
            cmd
        });
        let udp = std::net::UdpSocket::bind((LOCALHOST_V4, 0)).unwrap();
        udp.connect((LOCALHOST_V4, port)).unwrap();
        // The flow's stream opens with the first datagram; then the bucket refills.
        udp.send(b"warm-up").unwrap();
        std::thread::sleep(Duration::from_millis(500));
        for i in 0..200u32 {
            udp.send(&datagram(i)).unwrap();
            std::thread::sleep(Duration::from_millis(5));
        }
        counting.join().unwrap()
    };
    let limited = through("alice");
    let free = through("bob");
    eprintln!("UDP, 200 x 1000 bytes over ~1 s: {limited} arrived at rate 100K, {free} without a rate");
    assert!((20..=170).contains(&limited), "{limited} of 200 arrived through a 100 kB/s rate");
    assert!(free >= 190, "{free} of 200 arrived without a rate");
}
