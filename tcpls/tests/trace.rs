//! Event traces (`TraceSink`, `JsonLinesTrace`): a client and a server session of two
//! connections, one stream echoed, then the second connection ends (reset with `ss -K` when
//! root, which is a failover; closed cleanly otherwise). Both sides' JSON lines must tell it:
//! the join, the stream, the end of connection 1 with its reason, the end of the session; and
//! never a join token.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{payload, Pki};
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

/// The events of a trace file (the header line checked and left out).
fn read_trace(path: &std::path::Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let header: Value = serde_json::from_str(lines.next().expect("a header line")).unwrap();
    assert_eq!(header["qlog_format"], "JSON-LINES", "header: {header}");
    lines.map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"))).collect()
}

fn find<'a>(trace: &'a [Value], name: &str, conn: Option<u64>) -> Option<&'a Value> {
    let name = format!("tcpls:{name}");
    trace.iter().find(|e| e["name"] == name.as_str() && conn.is_none_or(|c| e["data"]["conn"] == c))
}

fn all<'a>(trace: &'a [Value], name: &str) -> Vec<&'a Value> {
    let name = format!("tcpls:{name}");
    trace.iter().filter(|e| e["name"] == name.as_str()).collect()
}

fn time(e: &Value) -> f64 {
    e["time"].as_f64().unwrap()
}

/// The records_sent of connection `conn` in its last sample at or before `t` (ms), and in its
/// last sample of the whole trace.
fn records_sent_around(trace: &[Value], conn: u64, t: f64) -> (u64, u64) {
    let samples: Vec<_> = all(trace, "connection_sample").into_iter().filter(|e| e["data"]["conn"] == conn).collect();
    let at = samples.iter().filter(|e| time(e) <= t).map(|e| e["data"]["records_sent"].as_u64().unwrap()).next_back();
    let end = samples.last().map(|e| e["data"]["records_sent"].as_u64().unwrap());
    (at.unwrap_or(0), end.unwrap_or(0))
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
    // Samples every 5 ms: the transfer takes some 50 ms.
    let every = Some(Duration::from_millis(5));
    let server_sink = Arc::new(JsonLinesTrace::with_sample_interval(&server_path, every).unwrap());
    let mut listeners = listeners.into_iter();
    // The listener traces its sessions from the end of their first handshake.
    let first = listeners.next().unwrap().with_trace(server_sink.clone());
    let _second = listeners.next().unwrap(); // keeps the join address listening
    let server = tokio::spawn(async move {
        let (session, _) = first.accept().await.unwrap();
        while let Some((mut send, mut recv)) = session.accept_stream().await {
            tokio::io::copy(&mut recv, &mut send).await.unwrap();
            send.shutdown().await.unwrap();
        }
        let _ = tokio::time::timeout(Duration::from_secs(10), session.closed()).await;
    });

    let client_sink = Arc::new(JsonLinesTrace::with_sample_interval(&client_path, every).unwrap());
    let session = TcplsConnector::new(pki.client())
        .with_trace(client_sink.clone())
        .connect(addrs[0], server_name_for("localhost").unwrap())
        .await
        .unwrap();
    assert_eq!(session.join(addrs[1]).await.unwrap(), 1);
    let (mut send, mut recv) = session.open_stream().unwrap();
    echo(&mut send, &mut recv, &payload(1 << 20, 3)).await;
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
    echo(&mut send, &mut recv, &payload(1 << 20, 4)).await;
    // Samples come every 5 ms and a stream that ends between two of them is reported with its
    // last sampled progress: give the samples time to see the second echo (with the batching
    // scheduler it can complete, and the stream end, within one interval).
    tokio::time::sleep(Duration::from_millis(50)).await;
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
        let times: Vec<f64> = trace.iter().map(time).collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "time never goes back");
        assert!(trace.iter().all(|e| e["name"].as_str().is_some_and(|n| n.starts_with("tcpls:"))));
        assert!(trace.iter().all(|e| e["data"].is_object()), "every event has data");
        assert!(find(trace, "connection_sample", Some(0)).is_some(), "samples of connection 0");
        assert!(find(trace, "connection_sample", Some(1)).is_some(), "samples of connection 1");
    }
    assert!(client.iter().all(|e| e["side"] == "client") && server.iter().all(|e| e["side"] == "server"));
    assert!(find(&client, "established", None).is_some(), "client: the handshake");
    assert!(find(&client, "tokens_received", None).is_some(), "client: tokens");
    assert!(find(&client, "connection_joined", Some(1)).is_some(), "client: the join");
    assert!(find(&server, "stream_opened", None).is_some_and(|e| e["data"]["stream"] == 0), "server: the stream");
    let opened = find(&client, "stream_opened", None).unwrap_or_else(|| panic!("client: stream opened: {client:?}"));
    assert_eq!(opened["data"], serde_json::json!({ "stream": 0, "by": "local", "error_code": null }));
    assert!(find(&client, "stream_finished", None).is_some(), "client: its FIN");
    assert!(find(&server, "stream_finished", None).is_some(), "server: its FIN");
    // The client's FIN is seen at a sample (stream_peer_ended), or the stream ended before the
    // next one (stream_closed).
    let end = find(&server, "stream_peer_ended", None).or_else(|| find(&server, "stream_closed", None));
    assert!(end.is_some_and(|e| e["data"]["stream"] == 0), "server: the end of stream 0: {server:?}");
    assert!(find(&server, "connection_joined", Some(1)).is_some(), "server: the join");
    assert!(find(&server, "token_used", None).is_some(), "server: the token spent by the join");
    // Stream 0's progress grows in the samples (each echo is 1 MiB each way).
    let progress: Vec<u64> = all(&client, "stream_progress")
        .into_iter()
        .filter(|e| e["data"]["stream"] == 0)
        .map(|e| e["data"]["received"].as_u64().unwrap())
        .collect();
    assert!(progress.windows(2).all(|w| w[0] <= w[1]), "{progress:?}");
    assert!(progress.last().is_some_and(|r| *r > 1 << 20), "the second echo in the samples: {progress:?}");
    let end = if reset { "connection_lost" } else { "connection_closed" };
    let closed = find(&client, end, Some(1)).unwrap_or_else(|| panic!("client: {end} of 1: {client:?}"));
    if reset {
        assert!(closed["data"]["error"].is_string(), "a reset connection ends with its reason: {closed}");
        assert!(find(&server, "connection_lost", Some(1)).is_some(), "server: connection 1 lost");
        // Whoever failed over (had unacknowledged records on connection 1) says so, counts
        // the records re-sent, and its connection 0 carried records after the loss.
        let failed: Vec<_> =
            [&client, &server].into_iter().filter(|t| find(t, "failed_over", Some(1)).is_some()).collect();
        eprintln!("{} side(s) failed over", failed.len());
        for trace in failed {
            let failover = find(trace, "failed_over", Some(1)).unwrap();
            assert!(failover["data"]["records_resent_total"].as_u64().unwrap() > 0, "{failover}");
            let t = time(failover);
            let resent =
                all(trace, "session_sample").iter().map(|e| e["data"]["records_resent"].as_u64().unwrap()).max();
            assert!(resent.unwrap_or(0) > 0, "records re-sent after the failover");
            let (before, after) = records_sent_around(trace, 0, t);
            assert!(after > before, "connection 0 carried records after the loss: {before} then {after}");
        }
    } else {
        assert!(closed["data"]["error"].is_null(), "a clean close has no error: {closed}");
        assert!(find(&server, "connection_closed", Some(1)).is_some(), "server: end of connection 1");
    }
    // After connection 1 ended, the second echo went over connection 0 only.
    let t1 = time(closed);
    let (before, after) = records_sent_around(&client, 0, t1);
    assert!(after > before + 32, "client: connection 0 carried the second MiB: {before} then {after} records");
    assert!(find(&client, "closed", None).is_some(), "client: the end of the session");
    let text = std::fs::read_to_string(&client_path).unwrap() + &std::fs::read_to_string(&server_path).unwrap();
    assert!(!text.contains("\"token\""), "join tokens are never traced");
    // TCPLS_KEEP_TRACE=1 keeps the two files (docs/OBSERVABILITY.md shows them).
    if std::env::var_os("TCPLS_KEEP_TRACE").is_none() {
        let _ = std::fs::remove_dir_all(&dir);
    }
}
