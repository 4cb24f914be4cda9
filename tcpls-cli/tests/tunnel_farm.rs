//! A farm of three `tcpls tunnel server` nodes behind haproxy (mode tcp, the shipped
//! tools/haproxy/tcpls-farm.cfg and tcpls-farm.lua) on loopback addresses (docs/TUNNEL.md,
//! "Farm"), in both join modes: (a) direct, clients join at the address their node advertises;
//! (b) through the balancer only, which routes each join by the encrypted label in its server
//! name. Thirty tunnel clients with two paths each and shared ticket keys; curl through every
//! client, then one node killed (SIGKILL) while every client's curl loop runs. Needs haproxy,
//! curl and python3 (CI installs them); prints SKIPPED without them.

#![allow(clippy::unwrap_used)]

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::{free_port, make_cert, tcpls, Proc, TempDir, LOCALHOST_V4, SHORT};

const NODES: usize = 3;
const CLIENTS: usize = 30;
/// The file fetched through every client (compared byte for byte).
const FILE_SIZE: usize = 64 * 1024;
/// The clients of a killed node must be served again within this (from the SIGKILL to the end
/// of their first successful curl).
const FAILOVER_BOUND: Duration = Duration::from_secs(2);
/// Between two fetches of a client's curl loop: thirty loops must leave the two cores of a CI
/// machine to the failover being measured.
const CURL_PACE: Duration = Duration::from_millis(150);
/// The farm's server name; mode (b) joins use `<label>.farm.test`.
const FARM_DOMAIN: &str = "farm.test";

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Direct,
    Balancer,
}

fn available(program: &str, arg: &str) -> bool {
    Command::new(program).arg(arg).output().is_ok_and(|o| o.status.success())
}

fn tools_haproxy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tools/haproxy")
}

/// `python3 -m http.server` on 127.0.0.1 serving `dir`.
fn web(dir: &Path) -> (Proc, u16) {
    for _ in 0..5 {
        let port = free_port(LOCALHOST_V4);
        let mut cmd = Command::new("python3");
        cmd.args(["-m", "http.server", &port.to_string(), "--bind", "127.0.0.1", "--directory"]).arg(dir);
        let proc = Proc::spawn(&mut cmd, false);
        let deadline = Instant::now() + SHORT;
        while Instant::now() < deadline {
            if TcpStream::connect((LOCALHOST_V4, port)).is_ok() {
                return (proc, port);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    panic!("python3 -m http.server did not start");
}

struct Node {
    proc: Proc,
    addr: SocketAddr,
    metrics: String,
}

/// Node `i` (haproxy's node{i+1}) on 127.0.0.(11+i).
fn start_node(mode: Mode, i: usize, dir: &Path, cert: &Path, key: &Path) -> Node {
    let ip = format!("127.0.0.{}", 11 + i);
    let (mut proc, port) = support::start_on_free_port("tcpls tunnel server", b"0-RTT off", |port| {
        let mut cmd = tcpls();
        cmd.args(["tunnel", "server", "--listen", &format!("{ip}:{port}")])
            .args(["--allow-dest", "127.0.0.0/8", "--metrics", &format!("{ip}:0"), "--ticket-keys"])
            .arg(dir.join("ticket.keys"))
            .arg("--cert")
            .arg(cert)
            .arg("--key")
            .arg(key);
        match mode {
            Mode::Direct => cmd.args(["--advertise", &format!("{ip}:{port}")]),
            Mode::Balancer => {
                cmd.arg("--farm-route-key").arg(dir.join("route.key")).args(["--farm-node", &(i + 1).to_string()])
            }
        };
        cmd
    });
    let text = proc.stderr.text();
    let metrics = text
        .lines()
        .find_map(|l| l.split("metrics on http://").nth(1))
        .and_then(|rest| rest.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("metrics address\n{}", proc.diagnostics()))
        .to_string();
    Node { proc, addr: format!("{ip}:{port}").parse().unwrap(), metrics }
}

/// The value of one Prometheus series (0 when absent).
fn metric(text: &str, series: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.trim().parse::<f64>().ok()))
        .map(|v| v as u64)
        .unwrap_or(0)
}

fn scrape(addr: &str) -> String {
    let mut http = TcpStream::connect(addr).unwrap();
    http.set_read_timeout(Some(SHORT)).unwrap();
    http.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut answer = String::new();
    http.read_to_string(&mut answer).unwrap();
    answer
}

/// haproxy with the shipped configuration, addresses from the environment, on 127.0.0.10.
fn start_haproxy(dir: &Path, nodes: &[Node]) -> (Proc, SocketAddr) {
    for _ in 0..5 {
        let vip: SocketAddr = format!("127.0.0.10:{}", free_port(LOCALHOST_V4)).parse().unwrap();
        let mut cmd = Command::new("haproxy");
        cmd.arg("-f").arg(tools_haproxy().join("tcpls-farm.cfg")).arg("-db");
        cmd.env("TCPLS_FARM_BIND", vip.to_string())
            .env("TCPLS_FARM_LUA", tools_haproxy().join("tcpls-farm.lua"))
            .env("TCPLS_FARM_ROUTE_KEY_FILE", dir.join("route.key"));
        for (i, n) in nodes.iter().enumerate() {
            cmd.env(format!("TCPLS_NODE{}", i + 1), n.addr.to_string());
        }
        let mut proc = Proc::spawn(&mut cmd, false);
        let deadline = Instant::now() + SHORT;
        while Instant::now() < deadline && proc.try_status().is_none() {
            if TcpStream::connect(vip).is_ok() {
                return (proc, vip);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if proc.try_status().is_none() {
            panic!("haproxy did not listen on {vip}\n{}", proc.diagnostics());
        }
    }
    panic!("haproxy could not bind a port");
}

struct Client {
    proc: Proc,
    port: u16,
}

impl Client {
    fn log(&mut self) -> String {
        self.proc.stderr.text()
    }

    /// Mode (a): the node serving the client now (its last "served by" line).
    fn node(&mut self) -> Option<SocketAddr> {
        self.log()
            .lines()
            .filter_map(|l| l.split("served by the concentrator at ").nth(1))
            .filter_map(|rest| rest.split_whitespace().next())
            .filter_map(|a| a.parse().ok())
            .next_back()
    }

    /// Whether the client's latest session resumed a ticket.
    fn last_session_resumed(&mut self) -> bool {
        let log = self.log();
        let last =
            log.lines().rfind(|l| l.contains("served by the concentrator at ") || l.contains("session opened through"));
        last.is_some_and(|l| l.contains("resumed a session ticket"))
    }
}

fn start_client(mode: Mode, vip: SocketAddr, web_port: u16) -> Client {
    let (proc, port) = support::start_on_free_port("tcpls tunnel client", b"accepting on", |port| {
        let mut cmd = tcpls();
        cmd.args(["tunnel", "client", "--insecure", "--reconnect-wait", "5"])
            .args(["--concentrator", &vip.to_string(), "--path", &vip.to_string()])
            .args(["--server-name", FARM_DOMAIN])
            .args(["--forward", &format!("127.0.0.1:{port}=127.0.0.1:{web_port}")]);
        match mode {
            Mode::Direct => cmd.arg("--join-advertised"),
            Mode::Balancer => cmd.args(["--join-sni-domain", FARM_DOMAIN]),
        };
        cmd
    });
    Client { proc, port }
}

/// One curl through a client's forward; true if the file came back byte for byte.
fn fetch(port: u16, expected: &[u8]) -> bool {
    let out = Command::new("curl")
        .args(["-sS", "--fail", "--max-time", "8", &format!("http://127.0.0.1:{port}/file")])
        .output()
        .unwrap();
    out.status.success() && out.stdout == expected
}

/// A fetch of a curl loop: when it started and ended (from the epoch), and whether it worked.
type Fetch = (Duration, Duration, bool);

#[test]
fn farm_of_three_nodes_behind_haproxy_in_both_join_modes() {
    for (program, arg) in [("haproxy", "-v"), ("curl", "--version"), ("python3", "--version")] {
        if !available(program, arg) {
            println!("SKIPPED: {program} is not installed (apt-get install {program})");
            return;
        }
    }
    // One mode after the other: together they would share the two cores of a CI machine.
    for mode in [Mode::Direct, Mode::Balancer] {
        farm(mode);
    }
}

fn farm(mode: Mode) {
    let started = Instant::now();
    let dir = TempDir::new("tunnel-farm");
    let (cert, key) = make_cert(dir.path(), "farm");
    for file in ["ticket.keys", "route.key"] {
        let out = Command::new("openssl").args(["rand", "-hex", "32"]).output().unwrap();
        std::fs::write(dir.path().join(file), &out.stdout).unwrap();
    }
    let file = support::payload(FILE_SIZE, 34);
    std::fs::write(dir.path().join("file"), &file).unwrap();
    let (_web, web_port) = web(dir.path());

    let mut nodes: Vec<Node> = (0..NODES).map(|i| start_node(mode, i, dir.path(), &cert, &key)).collect();
    let (_haproxy, vip) = start_haproxy(dir.path(), &nodes);
    let mut clients: Vec<Client> = (0..CLIENTS).map(|_| start_client(mode, vip, web_port)).collect();

    for (i, c) in clients.iter_mut().enumerate() {
        assert!(c.log().contains("(2 connection(s))"), "{mode:?}: client {i} has two paths\n{}", c.proc.diagnostics());
        if mode == Mode::Direct {
            let node = c.node().unwrap_or_else(|| panic!("client {i} names no node\n{}", c.proc.diagnostics()));
            assert!(nodes.iter().any(|n| n.addr == node), "client {i}: {node} is not a node");
        }
    }
    for (i, c) in clients.iter().enumerate() {
        assert!(fetch(c.port, &file), "{mode:?}: curl through client {i}");
    }
    // Every join reached the node of its session (second paths: one per client).
    let mut joins = 0;
    let mut active = Vec::new();
    for n in &nodes {
        let m = scrape(&n.metrics);
        assert_eq!(
            metric(&m, "tcpls_refusals_total{reason=\"join_token\"}"),
            0,
            "{mode:?}: wrong-node joins on {}",
            n.addr
        );
        joins += metric(&m, "tcpls_handshakes_total{outcome=\"join\"}");
        active.push(metric(&m, "tcpls_sessions_active"));
    }
    println!("{mode:?}: sessions per node {active:?}, joins {joins}");
    assert!(joins >= CLIENTS as u64, "{mode:?}: {joins} joins for {CLIENTS} clients");
    assert!(active.iter().all(|a| *a > 0), "{mode:?}: haproxy spread the sessions: {active:?}");

    // A paced curl loop through every client; then the node with the most sessions is killed.
    let epoch = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let logs: Vec<Arc<Mutex<Vec<Fetch>>>> = (0..CLIENTS).map(|_| Arc::default()).collect();
    let loops: Vec<_> = clients
        .iter()
        .zip(&logs)
        .map(|(c, log)| {
            let (port, file, stop, log) = (c.port, file.clone(), stop.clone(), log.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let begun = epoch.elapsed();
                    let ok = fetch(port, &file);
                    log.lock().unwrap().push((begun, epoch.elapsed(), ok));
                    std::thread::sleep(if ok { CURL_PACE } else { Duration::from_millis(20) });
                }
            })
        })
        .collect();
    let deadline = Instant::now() + SHORT;
    while logs.iter().any(|l| !l.lock().unwrap().iter().any(|f| f.2)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let victim = (0..NODES).max_by_key(|i| active[*i]).unwrap();
    let victim_addr = nodes[victim].addr;
    let resumed_before: u64 = (0..NODES)
        .filter(|i| *i != victim)
        .map(|i| metric(&scrape(&nodes[i].metrics), "tcpls_farm_tickets_total{outcome=\"resumed\"}"))
        .sum();
    let kill = Command::new("kill").args(["-KILL", &nodes[victim].proc.id().to_string()]).status().unwrap();
    assert!(kill.success());
    let killed = epoch.elapsed();

    // The killed node's clients are the ones that lose their session; wait until each has
    // fetched again (or the deadline), then let every loop run one more round.
    let lost = |c: &mut Client| c.log().contains("lost (");
    let recovered = |log: &Mutex<Vec<Fetch>>| log.lock().unwrap().iter().any(|f| f.0 > killed && f.2);
    let deadline = Instant::now() + SHORT;
    loop {
        let victims: Vec<usize> = (0..CLIENTS).filter(|i| lost(&mut clients[*i])).collect();
        let done = victims.len() as u64 >= active[victim] && victims.iter().all(|i| recovered(&logs[*i]));
        if done || Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(CURL_PACE * 2);
    stop.store(true, Ordering::Relaxed);
    for l in loops {
        l.join().unwrap();
    }

    let victims: Vec<usize> = (0..CLIENTS).filter(|i| lost(&mut clients[*i])).collect();
    assert_eq!(
        victims.len() as u64,
        active[victim],
        "{mode:?}: the killed node's clients, and only they, lost their session"
    );
    let mut back = Vec::new();
    let (mut ok_others, mut failed_others) = (0, 0);
    for i in 0..CLIENTS {
        let log = logs[i].lock().unwrap().clone();
        if victims.contains(&i) {
            let first = log.iter().filter(|f| f.0 > killed && f.2).map(|f| f.1 - killed).min();
            let t = first
                .unwrap_or_else(|| panic!("{mode:?}: client {i} not served again\n{}", clients[i].proc.diagnostics()));
            back.push(t.as_millis());
            // In-flight fetches may break; every fetch begun after it was back works.
            let after = log.iter().filter(|f| f.0 > killed + t);
            assert!(after.clone().all(|f| f.2), "{mode:?}: client {i}: {log:?}");
        } else {
            ok_others += log.iter().filter(|f| f.2).count();
            failed_others += log.iter().filter(|f| !f.2).count();
        }
    }
    back.sort_unstable();
    println!(
        "{mode:?}: node {victim_addr} killed: its {} clients served again after (ms) {back:?}; the other {} clients' curls: {ok_others} ok, {failed_others} failed",
        victims.len(),
        CLIENTS - victims.len(),
    );
    assert_eq!(failed_others, 0, "{mode:?}: the other clients' curl loops see no failure");
    let slowest = Duration::from_millis(back.last().copied().unwrap_or_default() as u64);
    assert!(slowest <= FAILOVER_BOUND, "{mode:?}: the slowest client was back after {slowest:?}");

    // The reconnected clients resumed tickets of the killed node on the others; no join
    // reached a node without its session.
    let resumed = victims.iter().filter(|i| clients[**i].last_session_resumed()).count();
    let mut resumed_after = 0;
    for (i, n) in nodes.iter().enumerate().filter(|(i, _)| *i != victim) {
        let m = scrape(&n.metrics);
        assert_eq!(
            metric(&m, "tcpls_refusals_total{reason=\"join_token\"}"),
            0,
            "{mode:?}: wrong-node joins on node {i}"
        );
        resumed_after += metric(&m, "tcpls_farm_tickets_total{outcome=\"resumed\"}");
    }
    println!(
        "{mode:?}: reconnecting clients {}, resumed on another node than the issuer {resumed} (the surviving nodes count {} resumptions, second paths included)",
        victims.len(),
        resumed_after - resumed_before
    );
    assert!(resumed * 100 >= victims.len() * 95, "{mode:?}: {resumed} of {} resumed", victims.len());
    if mode == Mode::Direct {
        for &i in &victims {
            assert_ne!(clients[i].node(), Some(victim_addr), "client {i} moved to a surviving node");
        }
    }
    nodes.remove(victim);
    println!("{mode:?}: took {:.1} s", started.elapsed().as_secs_f64());
}

/// `--concentrator A,B,C`: A refuses connections, so the session goes to B; when B is killed,
/// the client moves to C (A still refusing), and fetches work again. No balancer involved.
#[test]
fn a_client_with_several_concentrators_uses_the_first_that_answers() {
    for (program, arg) in [("curl", "--version"), ("python3", "--version")] {
        if !available(program, arg) {
            println!("SKIPPED: {program} is not installed (apt-get install {program})");
            return;
        }
    }
    let dir = TempDir::new("tunnel-several");
    let file = support::payload(FILE_SIZE, 35);
    std::fs::write(dir.path().join("file"), &file).unwrap();
    let (_web, web_port) = web(dir.path());
    let server = |ip: &str| {
        let ip = ip.to_string();
        support::start_on_free_port("tcpls tunnel server", b"listening on", move |port| {
            let mut cmd = tcpls();
            cmd.args(["tunnel", "server", "--listen", &format!("{ip}:{port}"), "--allow-dest", "127.0.0.0/8"]);
            cmd
        })
    };
    // Nothing listens on A's port (bound and released: connections to it are refused).
    let dead = format!("127.0.0.21:{}", free_port(LOCALHOST_V4));
    let (b, b_port) = server("127.0.0.22");
    let (_c, c_port) = server("127.0.0.23");
    let list = format!("{dead},127.0.0.22:{b_port},127.0.0.23:{c_port}");
    let (mut client, port) = support::start_on_free_port("tcpls tunnel client", b"accepting on", |port| {
        let mut cmd = tcpls();
        cmd.args(["tunnel", "client", "--insecure", "--concentrator", &list, "--reconnect-wait", "5"])
            .args(["--forward", &format!("127.0.0.1:{port}=127.0.0.1:{web_port}")]);
        cmd
    });
    let log = client.stderr.text();
    assert!(log.contains(&format!("concentrator {dead} failed")), "A was tried first and failed\n{log}");
    assert!(fetch(port, &file), "through B");
    drop(b);
    let deadline = Instant::now() + SHORT;
    while !client.stderr.text().contains("re-established") && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(fetch(port, &file), "through C after B died\n{}", client.diagnostics());
    let log = client.stderr.text();
    assert!(log.contains(&format!("trying 127.0.0.23:{c_port}")), "C took over\n{log}");
}
