//! Explicit fallback (paper §5.2) against a real "TCPLS-hostile" middlebox: iptables in the router
//! namespace of a tcpls-netem path matches the `tcpls/1` ALPN bytes of the ClientHello
//! (`-m string --algo bm --string tcpls/1`) and either resets the connection (REJECT
//! --reject-with tcp-reset) or drops the packet. With `with_fallback_retry`, the client retries
//! with a plain TLS ClientHello, remembers the server, and a join through that path is
//! cancelled with a clear error while the session goes on. Every transfer is checked byte by
//! byte. Root only: without namespaces or iptables the test prints `SKIPPED: reason`.
#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{payload, Pki};
use tcpls::{
    server_name_for, ConnectOutcome, Event, JoinRegistry, Session, SessionConfig, TcplsConnector, TcplsListener,
};
use tcpls_netem::{print_skipped, skip_unless_supported, PathSpec, Side, Topology};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const NAME: &str = "fallback_retry::plain_retry_through_an_alpn_filter";
const RETRY_AFTER: Duration = Duration::from_secs(1);

fn iptables(topo: &Topology, args: &[&str]) -> Result<(), String> {
    let out = topo
        .command(Side::Router(0), "iptables")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run iptables: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("iptables {args:?}: {}", String::from_utf8_lossy(&out.stderr).trim()))
    }
}

/// The ClientHello filter on path 0 (first pass through the router, from the client's veth).
fn filter<'a>(action: &[&'a str]) -> Vec<&'a str> {
    let mut rule = vec!["-A", "FORWARD", "-i", "toc", "-p", "tcp", "--dport", "4443", "-m", "string", "--algo", "bm"];
    rule.extend(["--string", "tcpls/1"]);
    rule.extend(action);
    rule
}

/// Server side of the echo: a length, then that many bytes, sent back.
async fn echo(session: Session) {
    while let Some((mut send, mut recv)) = session.accept_stream().await {
        tokio::spawn(async move {
            let mut len = [0u8; 8];
            if recv.read_exact(&mut len).await.is_err() {
                return;
            }
            let mut data = vec![0u8; u64::from_be_bytes(len) as usize];
            if recv.read_exact(&mut data).await.is_ok() {
                let _ = send.write_all(&data).await;
                let _ = send.shutdown().await;
            }
        });
    }
}

/// Client side: sends a pattern and checks the echo byte for byte.
async fn round_trip(session: &Session, len: usize, seed: u64) {
    let (mut send, mut recv) = session.open_stream().unwrap();
    let data = payload(len, seed);
    send.write_all(&(len as u64).to_be_bytes()).await.unwrap();
    send.write_all(&data).await.unwrap();
    let mut back = vec![0u8; len];
    tokio::time::timeout(Duration::from_secs(20), recv.read_exact(&mut back)).await.unwrap().unwrap();
    assert!(back == data, "the echo is byte-exact");
}

#[test]
fn plain_retry_through_an_alpn_filter() {
    skip_unless_supported!(NAME);
    let topo = Topology::builder().path(PathSpec::new(2.0, 100.0)).path(PathSpec::new(2.0, 100.0)).build().unwrap();
    let filtered = SocketAddr::new(topo.path(0).info().server_addr().unwrap(), 4443);
    let clean = SocketAddr::new(topo.path(1).info().server_addr().unwrap(), 4443);
    if let Err(why) = iptables(&topo, &filter(&["-j", "REJECT", "--reject-with", "tcp-reset"])) {
        print_skipped(NAME, &format!("no iptables string match: {why}"));
        return;
    }
    let pki = Pki::new();
    let (server_tls, client_tls) = (pki.server(), pki.client());

    let (ready_tx, ready_rx) = mpsc::channel();
    let _server = topo
        .spawn_in(Side::Server, move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                let registry = JoinRegistry::new();
                for addr in [filtered, clean] {
                    let l = TcplsListener::bind_with_registry(
                        addr,
                        server_tls.clone(),
                        SessionConfig::default(),
                        registry.clone(),
                    )
                    .await
                    .unwrap();
                    tokio::spawn(async move {
                        while let Some((session, _)) = l.accept().await {
                            tokio::spawn(echo(session));
                        }
                    });
                }
                ready_tx.send(()).unwrap();
                std::future::pending::<()>().await
            })
        })
        .unwrap();
    ready_rx.recv_timeout(Duration::from_secs(10)).unwrap();

    let name = server_name_for("localhost").unwrap();
    let connector = TcplsConnector::new(client_tls.clone()).with_fallback_retry(RETRY_AFTER);
    let in_client = |f: std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>| {
        topo.run_in(Side::Client, move || {
            tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(f)
        })
        .unwrap()
    };

    // REJECT: without the retry the connection fails; with it, plain TLS, then remembered.
    let (c, n) = (connector.clone(), name.clone());
    let plain_connector = TcplsConnector::new(client_tls.clone());
    in_client(Box::pin(async move {
        let e = plain_connector.connect(filtered, n.clone()).await.unwrap_err();
        eprintln!("without the retry: {e}");
        let (session, outcome) = c.connect_detailed(filtered, n.clone()).await.unwrap();
        eprintln!("RST filter: {outcome}");
        assert!(matches!(&outcome, ConnectOutcome::RetriedPlain { .. }), "{outcome:?}");
        assert!(session.is_fallback());
        round_trip(&session, 1 << 20, 1).await;
        session.close().await;
        assert!(c.fallback_memory().unwrap().get(filtered).is_some(), "the server is remembered");

        let started = Instant::now();
        let (session, outcome) = c.connect_detailed(filtered, n.clone()).await.unwrap();
        assert!(matches!(&outcome, ConnectOutcome::RememberedPlain { .. }), "{outcome:?}");
        assert!(started.elapsed() < RETRY_AFTER, "no second attempt with tcpls/1");
        round_trip(&session, 256 << 10, 2).await;
        session.close().await;

        // The clean path speaks TCPLS; a join through the filtered path is reset and cancelled.
        let (session, outcome) = c.connect_detailed(clean, n.clone()).await.unwrap();
        assert_eq!(outcome, ConnectOutcome::Tcpls);
        let e = session.join_within(filtered, RETRY_AFTER).await.unwrap_err();
        eprintln!("join through the RST filter: {e}");
        assert!(session.poll_events().iter().any(|e| matches!(e, Event::ConnectionClosed { error: Some(_), .. })));
        round_trip(&session, 1 << 20, 3).await;
        session.close().await;
    }));

    // DROP: the TCPLS ClientHello gets no answer; retry after RETRY_AFTER.
    iptables(&topo, &["-F", "FORWARD"]).unwrap();
    iptables(&topo, &filter(&["-j", "DROP"])).unwrap();
    connector.fallback_memory().unwrap().forget(filtered);
    let (c, n) = (connector.clone(), name.clone());
    in_client(Box::pin(async move {
        let started = Instant::now();
        let (session, outcome) = c.connect_detailed(filtered, n.clone()).await.unwrap();
        let took = started.elapsed();
        eprintln!("DROP filter: {outcome} after {took:?}");
        match &outcome {
            ConnectOutcome::RetriedPlain { reason } => assert!(reason.contains("no answer"), "{reason}"),
            other => panic!("expected a plain retry, got {other:?}"),
        }
        assert!(took >= RETRY_AFTER && took < RETRY_AFTER * 8, "retried after the timeout: {took:?}");
        round_trip(&session, 1 << 20, 4).await;
        session.close().await;

        let (session, _) = c.connect_detailed(clean, n.clone()).await.unwrap();
        let started = Instant::now();
        let e = session.join_within(filtered, RETRY_AFTER).await.unwrap_err();
        eprintln!("join through the DROP filter: {e} after {:?}", started.elapsed());
        assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
        assert!(started.elapsed() < RETRY_AFTER * 4, "the join was cancelled at its deadline");
        round_trip(&session, 1 << 20, 5).await;
        session.close().await;
    }));
}

/// Without namespaces: a remembered server gets a plain ClientHello at once, and a plain TLS
/// (fallback) session carries a few MB both ways (fallback senders once stalled after the
/// initial 64 KiB of TCPLS credit); a normal TCPLS server is unaffected by the retry option.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remembered_server_gets_plain_tls_and_bulk_data_flows() {
    let pki = Pki::new();
    let listener = TcplsListener::bind("127.0.0.1:0".parse().unwrap(), pki.server()).await.unwrap();
    let addr = listener.local_addr();
    tokio::spawn(async move {
        while let Some((session, _)) = listener.accept().await {
            tokio::spawn(echo(session));
        }
    });
    let connector = TcplsConnector::new(pki.client()).with_fallback_retry(RETRY_AFTER);
    let name = server_name_for("localhost").unwrap();
    let (session, outcome) = connector.connect_detailed(addr, name.clone()).await.unwrap();
    assert_eq!(outcome, ConnectOutcome::Tcpls, "nothing blocks TCPLS here");
    assert!(session.poll_events().contains(&Event::Established { fallback: false }));
    round_trip(&session, 1 << 20, 7).await;
    session.close().await;

    connector.fallback_memory().unwrap().remember(addr, "was reset (test)".into(), Duration::from_secs(60));
    let (session, outcome) = connector.connect_detailed(addr, name).await.unwrap();
    assert!(matches!(outcome, ConnectOutcome::RememberedPlain { .. }), "{outcome:?}");
    assert!(session.is_fallback());
    assert!(session.poll_events().contains(&Event::Established { fallback: true }), "the fallback is an event too");
    assert_eq!(session.handshake_info().unwrap().alpn, None, "no tcpls/1 offered, none selected");
    round_trip(&session, 4 << 20, 8).await;
    session.close().await;
}
