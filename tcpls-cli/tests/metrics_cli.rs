//! `tcpls serve --metrics ADDR`: the Prometheus endpoint scraped over plain HTTP during a
//! transfer, its values checked against the client session's own counters (every stream byte
//! the client sent is one the server received, both TCP connections, the join), then after a
//! session refused by --max-sessions and after the session ended (totals kept; memory gauges
//! back to 0). The tunnel server's and the tunnel client's endpoints too: the client's counters
//! must mirror the concentrator's.
#![allow(clippy::unwrap_used)]

mod support;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::{make_cert, payload, serve, TempDir, LOCALHOST_V4};
use tcpls::{server_name_for, Session, TcplsConnector};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `GET /metrics`; returns the samples, series (name with labels) -> value.
fn scrape(addr: SocketAddr) -> BTreeMap<String, f64> {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    stream.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "scrape answered {head}");
    assert!(head.contains("text/plain; version=0.0.4"), "Prometheus text format: {head}");
    // A sample line is `series value`; the series has no spaces in our label values.
    body.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap();
            (series.to_string(), value.parse().unwrap())
        })
        .collect()
}

/// What the server's metrics must say about the client's session at a quiet moment.
fn expected(session: &Session) -> BTreeMap<&'static str, f64> {
    let stats = session.stats();
    let conns = session.connections();
    BTreeMap::from([
        ("tcpls_stream_bytes_received_total", stats.stream_bytes_sent as f64),
        ("tcpls_stream_bytes_sent_total", stats.stream_bytes_received as f64),
        ("tcpls_bytes_received_total", conns.iter().map(|c| c.bytes_sent).sum::<u64>() as f64),
        ("tcpls_bytes_sent_total", conns.iter().map(|c| c.bytes_received).sum::<u64>() as f64),
        ("tcpls_connections_total", conns.len() as f64),
    ])
}

/// Scrapes until the values match the client's counters (delayed ACK records may still be on
/// their way at first); returns the last scrape, failing with the difference after 10 s.
fn scrape_until_consistent(addr: SocketAddr, session: &Session, fixed: &[(&str, f64)]) -> BTreeMap<String, f64> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got = scrape(addr);
        let mut want: BTreeMap<&str, f64> = expected(session);
        want.extend(fixed.iter().copied());
        let wrong: Vec<String> = want
            .iter()
            .filter(|(k, v)| got.get(**k) != Some(v))
            .map(|(k, v)| format!("{k}: metrics {:?}, session {v}", got.get(*k)))
            .collect();
        if wrong.is_empty() {
            return got;
        }
        assert!(Instant::now() < deadline, "metrics disagree with the session: {wrong:#?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn client_config(cert: &std::path::Path) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(cert).unwrap();
    for c in rustls_pemfile::certs(&mut pem.as_slice()) {
        roots.add(c.unwrap()).unwrap();
    }
    Arc::new(rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth())
}

/// Writes `data` on the stream and reads its echo back.
async fn echo(send: &mut tcpls::SendStream, recv: &mut tcpls::RecvStream, data: &[u8]) {
    let (w, r) = tokio::join!(send.write_all(data), async {
        let mut back = vec![0u8; data.len()];
        recv.read_exact(&mut back).await.map(|_| back)
    });
    w.unwrap();
    assert!(r.unwrap() == data, "the echo is the data");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_match_the_session_counters_during_and_after_a_transfer() {
    let dir = TempDir::new("metrics");
    let (cert, key) = make_cert(dir.path(), "server");
    let (cert_s, key_s) = (cert.to_str().unwrap(), key.to_str().unwrap());
    let args = ["--mode", "echo", "--cert", cert_s, "--key", key_s, "--metrics", "127.0.0.1:0", "--max-sessions", "1"];
    let mut server = serve(LOCALHOST_V4, &args);
    let stderr = server.proc.stderr.text();
    let metrics: SocketAddr = stderr
        .split("metrics on http://")
        .nth(1)
        .and_then(|rest| rest.split("/metrics").next())
        .unwrap_or_else(|| panic!("no metrics address on stderr: {stderr}"))
        .parse()
        .unwrap();
    let idle = scrape(metrics);
    assert_eq!(idle.get("tcpls_sessions_active"), Some(&0.0));

    let connector = TcplsConnector::new(client_config(&cert));
    let session = connector.connect(server.addr, server_name_for("localhost").unwrap()).await.unwrap();
    session.join(server.addr).await.unwrap();
    let mut streams = vec![session.open_stream().unwrap(), session.open_stream().unwrap()];

    // Mid-transfer: each stream has echoed its first part and stays open.
    for (i, (send, recv)) in streams.iter_mut().enumerate() {
        echo(send, recv, &payload(300_000 + i * 50_000, 1 + i as u64)).await;
    }
    let live = [
        ("tcpls_sessions_active", 1.0),
        ("tcpls_sessions_total", 1.0),
        ("tcpls_connections_active", 2.0),
        ("tcpls_streams_total{opened_by=\"peer\"}", 2.0),
        ("tcpls_streams_total{opened_by=\"server\"}", 0.0),
        ("tcpls_handshakes_total{outcome=\"session\"}", 1.0),
        ("tcpls_handshakes_total{outcome=\"join\"}", 1.0),
        ("tcpls_failovers_total", 0.0),
    ];
    let first = scrape_until_consistent(metrics, &session, &live);
    assert!(first["tcpls_stream_bytes_received_total"] >= 650_000.0, "{first:?}");
    // Memory: one live session's budget; each open stream holds credit within it.
    let budget = tcpls::SessionConfig::default().receive_budget as f64;
    assert_eq!(first["tcpls_receive_budget_bytes"], budget);
    let credit = first["tcpls_receive_credit_bytes"];
    assert!(credit >= 2.0 * 65536.0 && credit <= budget, "two streams' credit within the budget: {credit}");
    assert_eq!(first["tcpls_records_resent_total"], 0.0);

    // A second session while the first is served: refused by --max-sessions 1.
    if let Ok(other) = connector.connect(server.addr, server_name_for("localhost").unwrap()).await {
        let _ = tokio::time::timeout(Duration::from_secs(10), other.closed()).await;
    }
    let refused =
        [("tcpls_refusals_total{reason=\"max_sessions\"}", 1.0), ("tcpls_handshakes_total{outcome=\"session\"}", 2.0)];
    let live_then_refused: Vec<(&str, f64)> =
        live.iter().copied().filter(|(k, _)| !k.contains("session\"}")).chain(refused).collect();

    // More of the transfer: the counters follow.
    for (i, (send, recv)) in streams.iter_mut().enumerate() {
        echo(send, recv, &payload(200_000, 10 + i as u64)).await;
    }
    let second = scrape_until_consistent(metrics, &session, &live_then_refused);
    assert_eq!(
        second["tcpls_stream_bytes_received_total"] - first["tcpls_stream_bytes_received_total"],
        400_000.0,
        "exactly the bytes sent since the first scrape"
    );

    // The end: streams finished, session closed; the totals stay.
    for (mut send, mut recv) in streams {
        send.shutdown().await.unwrap();
        let mut rest = Vec::new();
        recv.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
    }
    let _ = tokio::time::timeout(Duration::from_secs(10), session.close()).await;
    let ended = [("tcpls_sessions_active", 0.0), ("tcpls_sessions_total", 1.0), ("tcpls_connections_active", 0.0)];
    let last = scrape_until_consistent(metrics, &session, &ended);
    assert_eq!(last["tcpls_stream_bytes_received_total"], second["tcpls_stream_bytes_received_total"]);
    for gauge in ["tcpls_receive_credit_bytes", "tcpls_receive_budget_bytes", "tcpls_unacked_records"] {
        assert_eq!(last[gauge], 0.0, "{gauge} after the session ended");
    }
    server.expect_running();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tunnel_server_metrics_count_its_sessions() {
    let dir = TempDir::new("metrics-tunnel");
    let (cert, key) = make_cert(dir.path(), "server");
    let mut started = None;
    for _ in 0..5 {
        let addr = SocketAddr::new(LOCALHOST_V4, support::free_port(LOCALHOST_V4));
        let mut cmd = support::tcpls();
        cmd.args(["tunnel", "server", "--listen", &addr.to_string(), "--metrics", "127.0.0.1:0", "--cert"])
            .arg(&cert)
            .arg("--key")
            .arg(&key);
        let mut proc = support::Proc::spawn(&mut cmd, false);
        if proc.stderr.wait_for(b"listening on", support::SHORT).is_ok() {
            started = Some((proc, addr));
            break;
        }
    }
    let (mut proc, addr) = started.expect("tcpls tunnel server did not start");
    let stderr = proc.stderr.text();
    let metrics: SocketAddr =
        stderr.split("metrics on http://").nth(1).and_then(|r| r.split("/metrics").next()).unwrap().parse().unwrap();

    let session =
        TcplsConnector::new(client_config(&cert)).connect(addr, server_name_for("localhost").unwrap()).await.unwrap();
    let live = [
        ("tcpls_sessions_active", 1.0),
        ("tcpls_connections_active", 1.0),
        ("tcpls_handshakes_total{outcome=\"session\"}", 1.0),
    ];
    scrape_until_consistent(metrics, &session, &live);
    let _ = tokio::time::timeout(Duration::from_secs(10), session.close()).await;
    let ended = [("tcpls_sessions_active", 0.0), ("tcpls_sessions_total", 1.0), ("tcpls_connections_active", 0.0)];
    scrape_until_consistent(metrics, &session, &ended);
    assert!(proc.try_status().is_none(), "the tunnel server keeps running");
}

/// A TCP echo server on 127.0.0.1 (one thread per connection).
fn echo_server() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut reader = conn.try_clone().unwrap();
                let mut writer = conn;
                let _ = std::io::copy(&mut reader, &mut writer);
            });
        }
    });
    addr
}

fn metrics_addr(stderr: &str) -> SocketAddr {
    stderr
        .split("metrics on http://")
        .nth(1)
        .and_then(|r| r.split("/metrics").next())
        .unwrap_or_else(|| panic!("no metrics address on stderr: {stderr}"))
        .parse()
        .unwrap()
}

/// `tcpls tunnel client --metrics`: scraped mid-transfer (1 MB echoed through a --forward,
/// the connection still open), the client's session counters must mirror the concentrator's
/// (its bytes sent are the server's bytes received, both ways, streams and TCP), and the memory
/// gauges show the session's budget; after the tunneled connection closed, the stream is gone
/// from the memory gauges and the totals stay.
#[test]
fn tunnel_client_metrics_mirror_the_concentrators() {
    let dir = TempDir::new("metrics-tunnel-client");
    let (cert, key) = make_cert(dir.path(), "server");
    let echo = echo_server();
    let (mut server, port) = support::start_on_free_port("tcpls tunnel server", b"listening on", |port| {
        let mut cmd = support::tcpls();
        cmd.args(["tunnel", "server", "--listen", &format!("127.0.0.1:{port}"), "--metrics", "127.0.0.1:0"]);
        cmd.args(["--allow-dest", "127.0.0.0/8", "--cert"]).arg(&cert).arg("--key").arg(&key);
        cmd
    });
    let (mut client, forward) =
        support::start_on_free_port("tcpls tunnel client", b"tcpls tunnel client: session to", |local| {
            let mut cmd = support::tcpls();
            cmd.args(["tunnel", "client", "--insecure", "--concentrator", &format!("127.0.0.1:{port}")]);
            cmd.args(["--forward", &format!("127.0.0.1:{local}={echo}"), "--metrics", "127.0.0.1:0"]);
            cmd
        });
    let client_metrics = metrics_addr(&client.stderr.text());
    let server_metrics = metrics_addr(&server.stderr.text());

    let data = payload(1_000_000, 7);
    let mut tcp = TcpStream::connect(("127.0.0.1", forward)).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut writer = tcp.try_clone().unwrap();
    let sent = data.clone();
    let w = std::thread::spawn(move || writer.write_all(&sent).unwrap());
    let mut back = vec![0u8; data.len()];
    tcp.read_exact(&mut back).unwrap();
    w.join().unwrap();
    assert!(back == data, "echoed through the tunnel byte for byte");

    let mirrored = [
        ("tcpls_stream_bytes_sent_total", "tcpls_stream_bytes_received_total"),
        ("tcpls_stream_bytes_received_total", "tcpls_stream_bytes_sent_total"),
        ("tcpls_bytes_sent_total", "tcpls_bytes_received_total"),
        ("tcpls_bytes_received_total", "tcpls_bytes_sent_total"),
        ("tcpls_streams_total{opened_by=\"client\"}", "tcpls_streams_total{opened_by=\"peer\"}"),
        ("tcpls_connections_total", "tcpls_connections_total"),
    ];
    let deadline = Instant::now() + Duration::from_secs(10);
    let (c, s) = loop {
        let (c, s) = (scrape(client_metrics), scrape(server_metrics));
        let wrong: Vec<String> = mirrored
            .iter()
            .filter(|(a, b)| !c.contains_key(*a) || c.get(*a) != s.get(*b))
            .map(|(a, b)| format!("client {a} {:?} vs concentrator {b} {:?}", c.get(*a), s.get(*b)))
            .collect();
        if wrong.is_empty() {
            break (c, s);
        }
        assert!(Instant::now() < deadline, "client and concentrator disagree: {wrong:#?}\n{}", client.diagnostics());
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(c["tcpls_sessions_active"], 1.0);
    assert_eq!(c["tcpls_connections_active"], 1.0);
    assert!(c["tcpls_stream_bytes_sent_total"] >= 1_000_000.0, "{c:?}");
    assert!(!c.keys().any(|k| k.starts_with("tcpls_handshakes")), "no listener families on the client");
    // The tunnel sizes its sessions' budget for its stream limit (TUNNEL.md).
    let budget = tcpls_tunnel::tunnel::RECEIVE_BUDGET as f64;
    for m in [&c, &s] {
        assert_eq!(m["tcpls_receive_budget_bytes"], budget, "one live session's budget");
        let credit = m["tcpls_receive_credit_bytes"];
        assert!(credit > 0.0 && credit <= budget, "credit within the budget: {credit}");
        assert_eq!(m["tcpls_records_resent_total"], 0.0);
    }
    drop(tcp);
    // The stream ends: its buffers and credit leave the gauges, the session stays.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let c = scrape(client_metrics);
        if c["tcpls_receive_credit_bytes"] == 0.0 && c["tcpls_send_buffer_bytes"] == 0.0 {
            assert_eq!(c["tcpls_sessions_active"], 1.0);
            assert!(c["tcpls_stream_bytes_sent_total"] >= 1_000_000.0);
            break;
        }
        assert!(Instant::now() < deadline, "the closed stream still in the memory gauges: {c:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(client.try_status().is_none(), "the tunnel client keeps running");
}
