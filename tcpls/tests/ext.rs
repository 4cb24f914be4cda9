//! The extension frames on real loopback sockets: RTT probe, the peer's TCP_INFO, NAT detection,
//! congestion control and user timeout requests, rate limits.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::Pki;
use tcpls::{server_name_for, Session, TcplsConnector, TcplsListener};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

/// A server that hands its sessions to the test and sends an endless stream on every stream the
/// client opens (after reading its first byte).
async fn server(pki: &Pki) -> (std::net::SocketAddr, mpsc::UnboundedReceiver<Session>) {
    let listener = TcplsListener::bind("127.0.0.1:0".parse().unwrap(), pki.server()).await.unwrap();
    let addr = listener.local_addr();
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some((session, _)) = listener.accept().await {
            let _ = tx.send(session.clone());
            tokio::spawn(async move {
                while let Some((mut send, mut recv)) = session.accept_stream().await {
                    tokio::spawn(async move {
                        let mut one = [0u8; 1];
                        recv.read_exact(&mut one).await.unwrap();
                        let chunk = vec![0xa5u8; 256 << 10];
                        while send.write_all(&chunk).await.is_ok() {}
                    });
                }
            });
        }
    });
    (addr, rx)
}

async fn connect(pki: &Pki, addr: std::net::SocketAddr) -> Session {
    TcplsConnector::new(pki.client()).connect(addr, server_name_for("localhost").unwrap()).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rtt_peer_tcp_info_and_nat_on_loopback() {
    let pki = Pki::new();
    let (addr, _sessions) = server(&pki).await;
    let session = connect(&pki, addr).await;
    let rtt = session.probe_rtt(0).await.unwrap();
    assert!(rtt > Duration::ZERO && rtt < Duration::from_millis(200), "loopback RTT {rtt:?}");
    let peer = session.peer_tcp_info(0).await.unwrap();
    assert!(peer.cwnd >= 1 && peer.rtt_us > 0 && peer.rtt_us < 200_000, "{peer:?}");
    let local = session.local_tcp_info(0).unwrap();
    assert!(local.rtt_us < 200_000, "{local:?}");
    let nat = session.probe_nat(0).await.unwrap();
    assert!(!nat.nat_detected, "{nat:?}");
    assert_eq!(Some(nat.seen_by_peer), session.connections()[0].local);
    assert!(session.probe_rtt(9).await.is_err(), "no connection 9");
}

/// Waits until the server session reports the outcome of a socket option request.
async fn outcome(server: &Session, option: &str) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        for applied in server.poll_socket_options() {
            if applied.option == option {
                return applied.result;
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("no outcome for {option}");
}

/// Keeps the name and data of every traced event (no samples).
#[derive(Default)]
struct Collect(std::sync::Mutex<Vec<(String, serde_json::Value)>>);

impl tcpls::TraceSink for Collect {
    fn record(&self, record: &tcpls::TraceRecord<'_>) {
        self.0.lock().unwrap().push(tcpls::describe_trace_event(&record.event));
    }

    fn sample_interval(&self) -> Option<Duration> {
        None
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_congestion_control_is_applied_within_policy_and_user_timeout_on_both_sides() {
    let pki = Pki::new();
    let (addr, mut sessions) = server(&pki).await;
    let session = connect(&pki, addr).await;
    let server_session = sessions.recv().await.unwrap();
    let trace = std::sync::Arc::new(Collect::default());
    server_session.set_trace(trace.clone());

    session.request_peer_congestion_control(0, "reno").unwrap();
    assert_eq!(outcome(&server_session, "congestion_control").await, Ok(()));
    assert_eq!(server_session.congestion_control(0).unwrap(), "reno");

    session.request_peer_congestion_control(0, "vegas").unwrap();
    let refused = outcome(&server_session, "congestion_control").await;
    assert!(refused.unwrap_err().contains("policy"));
    assert_eq!(server_session.congestion_control(0).unwrap(), "reno", "unchanged");

    session.set_user_timeout(0, Duration::from_millis(4000)).unwrap();
    assert_eq!(session.user_timeout(0).unwrap(), 4000);
    assert_eq!(outcome(&server_session, "user_timeout").await, Ok(()));
    assert_eq!(server_session.user_timeout(0).unwrap(), 4000);

    // A peer may not make our socket give up at the slightest delay.
    session.set_user_timeout(0, Duration::from_millis(5)).unwrap();
    let refused = outcome(&server_session, "user_timeout").await;
    assert!(refused.unwrap_err().contains("range"));
    assert_eq!(server_session.user_timeout(0).unwrap(), 4000, "unchanged");

    // Each outcome is traced too, with its option, value and error.
    let traced: Vec<_> = trace
        .0
        .lock()
        .unwrap()
        .iter()
        .filter(|(name, _)| name == "socket_option_applied")
        .map(|(_, data)| {
            let error = data["error"].as_str().map(|e| e.split_whitespace().any(|w| w == "policy" || w == "range"));
            (data["option"].as_str().unwrap().to_string(), data["value"].as_str().unwrap().to_string(), error)
        })
        .collect();
    let expected = [
        ("congestion_control", "reno", None),
        ("congestion_control", "vegas", Some(true)),
        ("user_timeout", "4000", None),
        ("user_timeout", "5", Some(true)),
    ];
    let expected: Vec<_> = expected.iter().map(|(o, v, e)| (o.to_string(), v.to_string(), *e)).collect();
    assert_eq!(traced, expected);
    assert!(server_session.poll_socket_options().is_empty(), "every outcome was read once");
}

/// Bytes received on `recv` during `time`.
async fn receive_for(recv: &mut tcpls::RecvStream, time: Duration) -> u64 {
    let mut buf = vec![0u8; 256 << 10];
    let mut total = 0;
    let deadline = tokio::time::Instant::now() + time;
    while let Ok(r) = tokio::time::timeout_at(deadline, recv.read(&mut buf)).await {
        let n = r.unwrap();
        assert!(n > 0, "the stream does not end");
        total += n as u64;
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_mid_transfer_drops_goodput_to_the_limit() {
    let pki = Pki::new();
    let (addr, _sessions) = server(&pki).await;
    let session = connect(&pki, addr).await;
    let (mut send, mut recv) = session.open_stream().unwrap();
    send.write_all(b"go").await.unwrap();
    let unlimited = receive_for(&mut recv, Duration::from_millis(500)).await as f64 * 2.0;
    let limit = 4_000_000u64; // 32 Mbit/s
    session.set_peer_rate_limit(0, limit).unwrap();
    receive_for(&mut recv, Duration::from_millis(300)).await; // what was in flight drains
    let limited = receive_for(&mut recv, Duration::from_secs(1)).await as f64;
    // The limit holds: never more than 15 % above it. Below it is the machine, not the limit: on
    // a loaded machine the paced sender wakes up late and falls short (3.2 MB/s of 4 seen with
    // a parallel build), so only a rate far under the limit fails.
    let shown = format!("limited goodput {limited:.0} B/s for a limit of {limit} B/s (unlimited {unlimited:.0})");
    assert!(limited < 1.15 * limit as f64, "{shown}");
    assert!(limited > 0.5 * limit as f64, "{shown}");
    assert!(unlimited > 2.0 * limit as f64, "loopback without limit: {unlimited:.0} B/s");
    session.set_peer_rate_limit(0, 0).unwrap();
    receive_for(&mut recv, Duration::from_millis(200)).await;
    let lifted = receive_for(&mut recv, Duration::from_millis(500)).await as f64 * 2.0;
    assert!(lifted > 2.0 * limit as f64, "limit lifted: {lifted:.0} B/s");
}
