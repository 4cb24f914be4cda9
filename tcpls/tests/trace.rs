//! Event traces (`TraceSink`, `JsonLinesTrace`): a client and a server session of two
//! connections, one stream echoed, then the second connection ends (reset with `ss -K` when
//! root, which is a failover; closed cleanly otherwise). Both sides' JSON lines must tell it:
//! the join, the stream, the end of connection 1 with its reason, the end of the session; and
//! never a join token.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{pattern, Pki};
use serde_json::Value;
use tcpls::{server_name_for, JsonLinesTrace, TcplsConnector};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(1) == Some("0")))
        .unwrap_or(false)
}

/// Resets the client's sockets to `port` on 127.0.0.2 (an RST to the server); false if `ss`
/// could not.
fn kill_sockets_to(port: u16) -> bool {
    let filter = format!("dport = :{port}");
    std::process::Command::new("ss")
        .args(["-K", "-t", "dst", "127.0.0.2", &filter])
        .output()
        .is_ok_and(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).contains(&format!(":{port}")))
}

fn read_trace(path: &std::path::Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"))).collect()
}

fn find<'a>(trace: &'a [Value], event: &str, conn: Option<u64>) -> Option<&'a Value> {
    trace.iter().find(|e| e["event"] == event && conn.is_none_or(|c| e["conn"] == c))
}

async fn echo(send: &mut tcpls::SendStream, recv: &mut tcpls::RecvStream, data: &[u8]) {
    let (w, r) = tokio::join!(send.write_all(data), async {
        let mut back = vec![0u8; data.len()];
        recv.read_exact(&mut back).await.map(|_| back)
    });
    w.unwrap();
    assert!(r.unwrap() == data, "echoed byte for byte");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_sides_trace_the_join_the_stream_and_the_end_of_a_connection() {
    let dir = std::env::temp_dir().join(format!("tcpls-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (client_path, server_path) = (dir.join("client.jsonl"), dir.join("server.jsonl"));
    let pki = Pki::new();
    let listeners = common::listen_on(&pki, &["127.0.0.1:0", "127.0.0.2:0"]).await;
    let addrs: Vec<_> = listeners.iter().map(|l| l.local_addr()).collect();
    let server_sink = Arc::new(JsonLinesTrace::create(&server_path).unwrap());
    let server_trace = server_sink.clone();
    let mut listeners = listeners.into_iter();
    let first = listeners.next().unwrap();
    let _second = listeners.next().unwrap(); // keeps the join address listening
    let server = tokio::spawn(async move {
        let (session, _) = first.accept().await.unwrap();
        session.set_trace(server_trace);
        while let Some((mut send, mut recv)) = session.accept_stream().await {
            tokio::io::copy(&mut recv, &mut send).await.unwrap();
            send.shutdown().await.unwrap();
        }
        let _ = tokio::time::timeout(Duration::from_secs(10), session.closed()).await;
    });

    let client_sink = Arc::new(JsonLinesTrace::create(&client_path).unwrap());
    let session = TcplsConnector::new(pki.client())
        .with_trace(client_sink.clone())
        .connect(addrs[0], server_name_for("localhost").unwrap())
        .await
        .unwrap();
    assert_eq!(session.join(addrs[1]).await.unwrap(), 1);
    let (mut send, mut recv) = session.open_stream().unwrap();
    echo(&mut send, &mut recv, &pattern(1 << 20, 3)).await;
    let reset = is_root() && kill_sockets_to(addrs[1].port());
    if !reset {
        session.close_connection(1).unwrap();
    }
    for _ in 0..500 {
        if !session.usable_connections().contains(&1) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    echo(&mut send, &mut recv, &pattern(1 << 20, 4)).await;
    send.shutdown().await.unwrap();
    let mut rest = Vec::new();
    recv.read_to_end(&mut rest).await.unwrap();
    let _ = tokio::time::timeout(Duration::from_secs(10), session.close()).await;
    tokio::time::timeout(Duration::from_secs(10), server).await.unwrap().unwrap();
    drop(session);
    client_sink.flush().unwrap();
    server_sink.flush().unwrap();

    let client = read_trace(&client_path);
    let server = read_trace(&server_path);
    eprintln!(
        "{} client and {} server events (connection 1 {})",
        client.len(),
        server.len(),
        if reset { "reset" } else { "closed" }
    );
    for trace in [&client, &server] {
        let times: Vec<u64> = trace.iter().map(|e| e["t_us"].as_u64().unwrap()).collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "time never goes back");
        assert!(trace.iter().all(|e| e["event"] != "StreamReadable" && e["event"] != "StreamWritable"));
    }
    assert!(client.iter().all(|e| e["side"] == "client") && server.iter().all(|e| e["side"] == "server"));
    assert!(find(&client, "Established", None).is_some(), "client: the handshake");
    assert!(find(&client, "TokensReceived", None).is_some(), "client: tokens");
    assert!(find(&client, "ConnectionEstablished", Some(1)).is_some(), "client: the join");
    assert!(find(&server, "StreamOpened", None).is_some_and(|e| e["stream"] == 0), "server: the stream");
    assert!(find(&server, "ConnectionEstablished", Some(1)).is_some(), "server: the join");
    assert!(find(&server, "TokenUsed", None).is_some(), "server: the token spent by the join");
    let closed = find(&client, "ConnectionClosed", Some(1)).unwrap_or_else(|| panic!("client: end of 1: {client:?}"));
    if reset {
        assert!(closed["error"].is_string(), "a reset connection ends with an error: {closed}");
    } else {
        assert!(closed["error"].is_null(), "a clean close has no error: {closed}");
    }
    assert!(find(&server, "ConnectionClosed", Some(1)).is_some(), "server: end of connection 1");
    assert!(find(&client, "Closed", None).is_some(), "client: the end of the session");
    let text = std::fs::read_to_string(&client_path).unwrap() + &std::fs::read_to_string(&server_path).unwrap();
    assert!(!text.contains("\"token\""), "join tokens are never traced");
    // TCPLS_KEEP_TRACE=1 keeps the two files (docs/OBSERVABILITY.md shows them).
    if std::env::var_os("TCPLS_KEEP_TRACE").is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
}
