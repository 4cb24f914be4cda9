//! A farm of three `tcpls tunnel server` nodes behind haproxy (mode tcp) on loopback addresses
//! (docs/TUNNEL.md, "Farm"): thirty tunnel clients with two paths each, joins at the address
//! their node advertises (`--join-advertised`), shared ticket keys; curl through every client,
//! then one node killed (SIGKILL) while the other clients' curl loops run. Needs haproxy, curl
//! and python3 (CI installs them); prints SKIPPED without haproxy.

#![allow(clippy::unwrap_used)]

mod support;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::{free_port, make_cert, tcpls, Proc, TempDir, LOCALHOST_V4, SHORT};

const NODES: usize = 3;
const CLIENTS: usize = 30;
/// The file fetched through every client (compared byte for byte).
const FILE_SIZE: usize = 64 * 1024;
/// The clients of a killed node must be served again within this (the bound).
const FAILOVER_BOUND: Duration = Duration::from_secs(2);
/// Between two fetches of a client's curl loop.
const CURL_PACE: Duration = Duration::from_millis(100);

fn available(program: &str, arg: &str) -> bool {
    Command::new(program).arg(arg).output().is_ok_and(|o| o.status.success())
}

/// `python3 -m http.server` on 127.0.0.1 serving `dir`.
fn web(dir: &std::path::Path) -> (Proc, u16) {
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

/// Node `i` on 127.0.0.(11+i), announcing its own address to its clients.
fn start_node(i: usize, dir: &TempDir, cert: &std::path::Path, key: &std::path::Path) -> Node {
    let ip = format!("127.0.0.{}", 11 + i);
    let (mut proc, port) = support::start_on_free_port("tcpls tunnel server", b"clients join at", |port| {
        let mut cmd = tcpls();
        cmd.args(["tunnel", "server", "--listen", &format!("{ip}:{port}"), "--advertise", &format!("{ip}:{port}")])
            .args(["--allow-dest", "127.0.0.0/8", "--metrics", &format!("{ip}:0"), "--ticket-keys"])
            .arg(dir.path().join("ticket.keys"))
            .arg("--cert")
            .arg(cert)
            .arg("--key")
            .arg(key);
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

/// haproxy in mode tcp on 127.0.0.10, round robin over the nodes; a connection a dead node
/// refuses is dispatched to another one (tools/haproxy/tcpls-farm.cfg).
fn start_haproxy(dir: &TempDir, nodes: &[Node]) -> (Proc, SocketAddr) {
    for _ in 0..5 {
        let vip: SocketAddr = format!("127.0.0.10:{}", free_port(LOCALHOST_V4)).parse().unwrap();
        let servers: String = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| format!("  server node{i} {} check inter 250ms fall 1 rise 2\n", n.addr))
            .collect();
        let cfg = dir.path().join("haproxy.cfg");
        std::fs::write(
            &cfg,
            format!(
                "global\n  maxconn 1024\ndefaults\n  mode tcp\n  timeout connect 500ms\n  timeout client 60s\n  \
                 timeout server 60s\n  retries 3\n  option redispatch 1\nfrontend farm\n  bind {vip}\n  \
                 default_backend nodes\nbackend nodes\n  balance roundrobin\n{servers}"
            ),
        )
        .unwrap();
        let mut proc = Proc::spawn(Command::new("haproxy").arg("-f").arg(&cfg).arg("-db"), false);
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
    /// The node serving the client now (its last "served by" line).
    fn node(&mut self) -> Option<SocketAddr> {
        let text = self.proc.stderr.text();
        text.lines()
            .filter_map(|l| l.split("served by the concentrator at ").nth(1))
            .filter_map(|rest| rest.split_whitespace().next())
            .filter_map(|a| a.parse().ok())
            .next_back()
    }
}

fn start_client(vip: SocketAddr, web_port: u16) -> Client {
    let (proc, port) = support::start_on_free_port("tcpls tunnel client", b"accepting on", |port| {
        let mut cmd = tcpls();
        cmd.args(["tunnel", "client", "--insecure", "--join-advertised", "--reconnect-wait", "5"])
            .args(["--concentrator", &vip.to_string(), "--path", &vip.to_string()])
            .args(["--forward", &format!("127.0.0.1:{port}=127.0.0.1:{web_port}")]);
        cmd
    });
    Client { proc, port }
}

/// One curl through a client's forward; true if the file came back byte for byte.
fn fetch(port: u16, expected: &[u8], max_time: &str) -> bool {
    let out = Command::new("curl")
        .args(["-sS", "--fail", "--max-time", max_time, &format!("http://127.0.0.1:{port}/file")])
        .output()
        .unwrap();
    out.status.success() && out.stdout == expected
}

#[test]
fn farm_of_three_nodes_behind_haproxy_joins_resumes_and_survives_a_killed_node() {
    for (program, arg) in [("haproxy", "-v"), ("curl", "--version"), ("python3", "--version")] {
        if !available(program, arg) {
            println!("SKIPPED: {program} is not installed (apt-get install {program})");
            return;
        }
    }
    let started = Instant::now();
    let dir = TempDir::new("tunnel-farm");
    let (cert, key) = make_cert(dir.path(), "farm");
    let out = Command::new("openssl").args(["rand", "-hex", "32"]).output().unwrap();
    std::fs::write(dir.path().join("ticket.keys"), &out.stdout).unwrap();
    let file = support::payload(FILE_SIZE, 34);
    std::fs::write(dir.path().join("file"), &file).unwrap();
    let (_web, web_port) = web(dir.path());

    let mut nodes: Vec<Node> = (0..NODES).map(|i| start_node(i, &dir, &cert, &key)).collect();
    let (_haproxy, vip) = start_haproxy(&dir, &nodes);
    let mut clients: Vec<Client> = (0..CLIENTS).map(|_| start_client(vip, web_port)).collect();

    // Every client is served by a node it names, and two connections (paths) each.
    let mut by_node: BTreeMap<SocketAddr, Vec<usize>> = BTreeMap::new();
    for (i, c) in clients.iter_mut().enumerate() {
        let node = c.node().unwrap_or_else(|| panic!("client {i} names no node\n{}", c.proc.diagnostics()));
        assert!(nodes.iter().any(|n| n.addr == node), "client {i}: {node} is not a node");
        by_node.entry(node).or_default().push(i);
        assert!(
            c.proc.stderr.text().contains("(2 connection(s))"),
            "client {i} has two paths\n{}",
            c.proc.diagnostics()
        );
    }
    println!("clients per node: {:?}", by_node.iter().map(|(n, c)| (n.to_string(), c.len())).collect::<Vec<_>>());
    assert_eq!(by_node.len(), NODES, "haproxy spread the sessions over every node");

    // A curl through every client.
    for (i, c) in clients.iter().enumerate() {
        assert!(fetch(c.port, &file, "10"), "curl through client {i}");
    }
    let mut joins = 0;
    for n in &nodes {
        let m = scrape(&n.metrics);
        assert_eq!(metric(&m, "tcpls_refusals_total{reason=\"join_token\"}"), 0, "wrong-node joins on {}", n.addr);
        joins += metric(&m, "tcpls_handshakes_total{outcome=\"join\"}");
    }
    assert!(joins >= CLIENTS as u64, "every client joined its second path at its node: {joins} joins");

    // Kill the node with the most clients while the other clients fetch in loops.
    let (victim_addr, victims) = by_node.iter().max_by_key(|(_, c)| c.len()).map(|(a, c)| (*a, c.clone())).unwrap();
    let survivors: Vec<usize> = (0..CLIENTS).filter(|i| !victims.contains(i)).collect();
    let resumed_before: u64 = nodes
        .iter()
        .filter(|n| n.addr != victim_addr)
        .map(|n| metric(&scrape(&n.metrics), "tcpls_farm_tickets_total{outcome=\"resumed\"}"))
        .sum();
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let loops: Vec<_> = survivors
        .iter()
        .map(|&i| {
            let (port, file, stop, ok, failed) =
                (clients[i].port, file.clone(), stop.clone(), ok.clone(), failed.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let counter = if fetch(port, &file, "10") { &ok } else { &failed };
                    counter.fetch_add(1, Ordering::Relaxed);
                    // Paced, not a tight loop: twenty of these must leave the two cores to the
                    // failover being measured.
                    std::thread::sleep(CURL_PACE);
                }
            })
        })
        .collect();
    // Let every loop get going before the kill.
    let deadline = Instant::now() + SHORT;
    while ok.load(Ordering::Relaxed) < survivors.len() as u64 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    let victim = nodes.iter().position(|n| n.addr == victim_addr).unwrap();
    let killed = Instant::now();
    let status = Command::new("kill").args(["-KILL", &nodes[victim].proc.id().to_string()]).status().unwrap();
    assert!(status.success());
    let recovery: Vec<_> = victims
        .iter()
        .map(|&i| {
            let (port, file) = (clients[i].port, file.clone());
            std::thread::spawn(move || {
                while killed.elapsed() < SHORT {
                    if fetch(port, &file, "5") {
                        return Some(killed.elapsed());
                    }
                    // A curl that failed (its stream was opened on the dead session) is retried
                    // soon, without spinning.
                    std::thread::sleep(Duration::from_millis(20));
                }
                None
            })
        })
        .collect();
    let times: Vec<Option<Duration>> = recovery.into_iter().map(|t| t.join().unwrap()).collect();
    stop.store(true, Ordering::Relaxed);
    for l in loops {
        l.join().unwrap();
    }
    let outages: Vec<String> = victims
        .iter()
        .filter_map(|&i| {
            let text = clients[i].proc.stderr.text();
            text.split("re-established after an outage of ").nth(1).and_then(|r| r.split(' ').next()).map(String::from)
        })
        .collect();
    println!("outages as the clients saw them (s, from noticing the loss): {outages:?}");
    let mut ms: Vec<u128> = times.iter().map(|t| t.map_or(u128::MAX, |d| d.as_millis())).collect();
    ms.sort_unstable();
    println!(
        "node {victim_addr} killed: its {} clients served again after (ms) {ms:?}; the other {} clients' curls: {} ok, {} failed",
        victims.len(),
        survivors.len(),
        ok.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed)
    );
    assert_eq!(failed.load(Ordering::Relaxed), 0, "the other clients' curl loops see no failure");
    for (&i, t) in victims.iter().zip(&times) {
        let t = t.unwrap_or_else(|| panic!("client {i} not served again\n{}", clients[i].proc.diagnostics()));
        assert!(t <= FAILOVER_BOUND, "client {i} back after {t:?}\n{}", clients[i].proc.diagnostics());
    }

    // The killed node's clients resumed their tickets (issued by it) on the other nodes, and
    // joined their second path there: no join reached a node without its session.
    let mut resumed_after = 0;
    for n in nodes.iter().filter(|n| n.addr != victim_addr) {
        let m = scrape(&n.metrics);
        assert_eq!(metric(&m, "tcpls_refusals_total{reason=\"join_token\"}"), 0, "wrong-node joins on {}", n.addr);
        resumed_after += metric(&m, "tcpls_farm_tickets_total{outcome=\"resumed\"}");
    }
    // Each reconnected client says whether its new session resumed; its tickets all came from
    // the killed node (its first connection and its path were there).
    let mut resumed = 0;
    for &i in &victims {
        let node = clients[i].node().unwrap();
        assert_ne!(node, victim_addr, "client {i} moved to a surviving node");
        let text = clients[i].proc.stderr.text();
        let last = text.lines().rfind(|l| l.contains("served by the concentrator at ")).unwrap_or_default();
        resumed += usize::from(last.contains("resumed a session ticket"));
    }
    println!(
        "reconnecting clients: {}, resumed on another node than the issuer: {resumed} (resumptions counted by the \
         surviving nodes, second paths included: {})",
        victims.len(),
        resumed_after - resumed_before
    );
    assert!(resumed * 100 >= victims.len() * 95, "{resumed} of {} resumed", victims.len());
    nodes.remove(victim);
    println!("farm test took {:.1} s", started.elapsed().as_secs_f64());
}
