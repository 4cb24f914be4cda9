//! `tcpls perf` against a perf server that predates the stats request (PROTOCOL.md §8.3): it
//! answers transfers but resets a stream with an unknown direction (`NOT_A_PERF_REQUEST`). The
//! run succeeds and reports the server's statistics as unavailable, saying why. The old server
//! is played in this process with the protocol as it was: 32-byte request, download = the
//! pattern then FIN, anything else reset.
#![allow(clippy::unwrap_used)]

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use support::{run, tcpls, TIMEOUT};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const NOT_A_PERF_REQUEST: u32 = 0x7045_5251;

/// Serves one session as a server without the stats request did; returns its address.
fn old_server() -> SocketAddr {
    let pki = tcpls_test::Pki::new();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async move {
            let listener = tcpls::TcplsListener::bind("127.0.0.1:0".parse().unwrap(), pki.server()).await.unwrap();
            tx.send(listener.local_addr()).unwrap();
            let (session, _) = listener.accept().await.unwrap();
            while let Some((mut send, mut recv)) = session.accept_stream().await {
                tokio::spawn(async move {
                    let mut request = [0u8; 32];
                    recv.read_exact(&mut request).await.unwrap();
                    if &request[..8] != b"TCPLSPF1" || request[8] != 2 {
                        let _ = send.reset(NOT_A_PERF_REQUEST);
                        return;
                    }
                    let (seed, bytes) = (
                        u32::from_be_bytes(request[12..16].try_into().unwrap()),
                        u64::from_be_bytes(request[16..24].try_into().unwrap()),
                    );
                    send.write_all(&tcpls_pattern::to_vec(seed.into(), 0, bytes as usize)).await.unwrap();
                    send.shutdown().await.unwrap();
                    let mut rest = Vec::new();
                    let _ = recv.read_to_end(&mut rest).await;
                });
            }
        });
    });
    rx.recv_timeout(Duration::from_secs(10)).unwrap()
}

#[test]
fn an_old_server_without_stats_is_reported_as_unavailable() {
    let addr = old_server();
    let done = run(
        tcpls().args(["perf", &addr.to_string(), "--insecure", "--download", "--bytes", "1M", "--json"]),
        None,
        TIMEOUT,
    )
    .success();
    let v = done.json();
    assert_eq!(v["verified"], true, "{v:#}");
    assert!(v["server_stats"].is_null(), "{v:#}");
    let why = v["server_stats_error"].as_str().unwrap_or_default();
    assert!(why.contains("older tcpls serve"), "{v:#}");
    assert!(v["client_stats"]["longest_stall_ms"].is_number(), "{v:#}");
}
