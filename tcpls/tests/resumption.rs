//! Session resumption and 0-RTT over real loopback TCP: tickets, early data accepted and
//! answered at half-RTT, early data rejected and re-sent; contents compared byte for byte.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{payload, Pki};
use rustls::{ClientConfig, ServerConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const TIMEOUT: Duration = Duration::from_secs(20);

fn early_configs(pki: &Pki) -> (Arc<ClientConfig>, Arc<ServerConfig>) {
    let mut client = (*pki.client()).clone();
    client.enable_early_data = true;
    let mut server = (*pki.server()).clone();
    server.max_early_data_size = 16384;
    (Arc::new(client), Arc::new(server))
}

/// Server loop: for each session, echo `reply(request)` on every stream, and report whether the
/// request arrived as early data before the handshake completed.
async fn serve(listener: tcpls::TcplsListener, report: tokio::sync::mpsc::UnboundedSender<(bool, bool, Vec<u8>)>) {
    while let Some((session, _)) = listener.accept().await {
        let report = report.clone();
        tokio::spawn(async move {
            let early = session.early_data_accepted();
            let established_at_accept = session.is_established();
            while let Some((mut send, mut recv)) = session.accept_stream().await {
                let mut request = Vec::new();
                recv.read_to_end(&mut request).await.unwrap();
                let _ = report.send((early, established_at_accept, request.clone()));
                send.write_all(&reply(&request)).await.unwrap();
                send.shutdown().await.unwrap();
            }
        });
    }
}

fn reply(request: &[u8]) -> Vec<u8> {
    let mut r = b"re:".to_vec();
    r.extend(request.iter().rev());
    r
}

async fn listener(server: Arc<ServerConfig>) -> tcpls::TcplsListener {
    tcpls::TcplsListener::bind("127.0.0.1:0".parse().unwrap(), server).await.unwrap()
}

async fn request_early(
    connector: &tcpls::TcplsConnector,
    addr: std::net::SocketAddr,
    request: &[u8],
) -> (tcpls::Session, Vec<u8>) {
    let name = tcpls::server_name_for("localhost").unwrap();
    let (session, mut send, mut recv) = connector.connect_with_early_data(addr, name, request).await.unwrap();
    send.shutdown().await.unwrap();
    let mut response = Vec::new();
    recv.read_to_end(&mut response).await.unwrap();
    (session, response)
}

#[tokio::test]
async fn second_session_resumes_and_its_early_data_is_accepted() {
    tokio::time::timeout(TIMEOUT, async {
        let pki = Pki::new();
        let (client, server) = early_configs(&pki);
        let l = listener(server).await;
        let addr = l.local_addr();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(serve(l, tx));
        let connector = tcpls::TcplsConnector::new(client);

        // First session: full handshake, no ticket yet, so the request goes after Finished.
        let first_request = payload(1000, 1);
        let (first, response) = request_early(&connector, addr, &first_request).await;
        assert_eq!(response, reply(&first_request));
        let info = first.handshake_info().unwrap();
        assert!(!info.resumed && !info.early_data_accepted, "{info:?}");
        assert_eq!(rx.recv().await.unwrap(), (false, true, first_request));
        first.close().await;

        // Second session: resumed, request in early data, delivered before the handshake ended.
        let request = payload(5000, 2);
        let (second, response) = request_early(&connector, addr, &request).await;
        assert_eq!(response, reply(&request), "response content");
        let info = second.handshake_info().unwrap();
        assert!(info.resumed && info.early_data_accepted, "{info:?}");
        assert!(second.early_data_accepted());
        let (early, established, got) = rx.recv().await.unwrap();
        assert!(early, "server saw early data");
        assert!(!established, "the server session was handed out on the early data, before Finished");
        assert_eq!(got, request, "request content, received once");
        second.close().await;
    })
    .await
    .unwrap();
}

#[tokio::test]
async fn early_data_rejected_by_a_server_with_a_fresh_ticket_store_is_resent() {
    tokio::time::timeout(TIMEOUT, async {
        let pki = Pki::new();
        let (client, server) = early_configs(&pki);
        let connector = tcpls::TcplsConnector::new(client);
        let l1 = listener(server).await;
        let addr1 = l1.local_addr();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(serve(l1, tx.clone()));
        let (warm, _) = request_early(&connector, addr1, b"warm-up").await;
        rx.recv().await.unwrap();
        warm.close().await;

        // Same certificate and name, new process state: the ticket is unknown there.
        let (_, fresh) = early_configs(&pki);
        let l2 = listener(fresh).await;
        let addr2 = l2.local_addr();
        tokio::spawn(serve(l2, tx));
        let request = payload(3000, 3);
        let (session, response) = request_early(&connector, addr2, &request).await;
        assert_eq!(response, reply(&request), "response content");
        let info = session.handshake_info().unwrap();
        assert!(!info.resumed && !info.early_data_accepted, "{info:?}");
        assert_eq!(rx.recv().await.unwrap(), (false, true, request), "re-sent after Finished, byte-exact");
        session.close().await;
    })
    .await
    .unwrap();
}

/// Joins resume too: the join's handshake uses a ticket from the session's first connection.
#[tokio::test]
async fn joins_resume_the_tls_session() {
    tokio::time::timeout(TIMEOUT, async {
        let pki = Pki::new();
        let listeners = common::listen_on(&pki, &["127.0.0.1:0"]).await;
        let addr = listeners[0].local_addr();
        let l = listeners.into_iter().next().unwrap();
        tokio::spawn(async move { while l.accept().await.is_some() {} });
        let session = tcpls::TcplsConnector::new(pki.client())
            .connect(addr, tcpls::server_name_for("localhost").unwrap())
            .await
            .unwrap();
        assert!(!session.handshake_info().unwrap().resumed);
        let id = session.join(addr).await.unwrap();
        let joined = session.connections().into_iter().find(|c| c.id == id).unwrap();
        // A full handshake sends the certificate; a resumed one is far smaller than it.
        assert!(
            joined.bytes_received < pki.cert.len() as u64 + 400,
            "join received {} bytes: no certificate (resumed)",
            joined.bytes_received
        );
        let first = session.connections().into_iter().find(|c| c.id == 0).unwrap();
        assert!(first.bytes_received > pki.cert.len() as u64, "the full handshake carried the certificate");
        session.close().await;
    })
    .await
    .unwrap();
}

/// A client that sends its ClientHello with early data and then never finishes the handshake:
/// the listener hands the session out on its early data, and the handshake timeout still ends
/// it (otherwise such clients would hold sessions forever).
#[tokio::test]
async fn a_client_stalling_after_its_early_data_is_timed_out() {
    tokio::time::timeout(TIMEOUT + tcpls::HANDSHAKE_TIMEOUT, async {
        let pki = Pki::new();
        let (client, server) = early_configs(&pki);
        let l = listener(server).await;
        let addr = l.local_addr();
        let connector = tcpls::TcplsConnector::new(client.clone());
        // A first session, to get a ticket that allows early data.
        let name = tcpls::server_name_for("localhost").unwrap();
        let (first, mut send, mut recv) = connector.connect_with_early_data(addr, name.clone(), b"hi").await.unwrap();
        let (served, _) = l.accept().await.unwrap();
        let echo = tokio::spawn(async move {
            let (mut s, mut r) = served.accept_stream().await.unwrap();
            let mut req = Vec::new();
            r.read_to_end(&mut req).await.unwrap();
            s.write_all(&req).await.unwrap();
            s.shutdown().await.unwrap();
        });
        send.shutdown().await.unwrap();
        let mut back = Vec::new();
        recv.read_to_end(&mut back).await.unwrap();
        assert_eq!(back, b"hi");
        echo.await.unwrap();
        first.close().await;

        // The stalling client: its first flight only, by hand.
        let settings = tcpls::SessionConfig::default();
        // The same session store as the connector's (the ticket), with the TCPLS ALPN.
        let config = Arc::new(tcpls::proto::tcpls_client_config(&client));
        let (mut proto, _) =
            tcpls::proto::Session::client_with_early_data(config, name, settings, b"GET /idempotent").unwrap();
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        proto.prepare_transmit(std::time::Instant::now());
        tcp.write_all(proto.transmit_data(0)).await.unwrap();
        let reader = tokio::spawn(async move {
            let mut sink = vec![0u8; 65536];
            while matches!(tcp.read(&mut sink).await, Ok(n) if n > 0) {}
        });

        let (session, _) = l.accept().await.unwrap();
        assert!(session.early_data_accepted(), "handed out on its early data");
        assert!(!session.is_established());
        let started = std::time::Instant::now();
        let error = session.closed().await;
        let waited = started.elapsed();
        assert!(!session.is_established());
        assert!(waited <= tcpls::HANDSHAKE_TIMEOUT + Duration::from_secs(2), "ended after {waited:?}");
        eprintln!("stalled session ended after {waited:?}: {error:?}");
        reader.abort();
    })
    .await
    .expect("test timed out");
}
