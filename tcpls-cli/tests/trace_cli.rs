//! `--trace FILE` on the command line: `tcpls demo` (a server and a client in one process) traces
//! both sides of its sessions into one file, qlog-style JSON lines; `tcpls serve` and `tcpls
//! perf` over two connections each write their side; an unwritable path is refused up front.
#![allow(clippy::unwrap_used)]

mod support;

use serde_json::Value;
use support::{run, serve, tcpls, TempDir, LOCALHOST_V4, TIMEOUT};

fn events(path: &std::path::Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut lines = text.lines();
    let header: Value = serde_json::from_str(lines.next().expect("the header line")).unwrap();
    assert_eq!(header["qlog_format"], "JSON-LINES", "{header}");
    lines.map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"))).collect()
}

fn count(events: &[Value], name: &str, side: &str) -> usize {
    events.iter().filter(|e| e["name"] == name && e["side"] == side).count()
}

#[test]
fn demo_traces_both_sides_of_every_session() {
    let dir = TempDir::new("trace-demo");
    let file = dir.path().join("demo.jsonl");
    run(tcpls().args(["demo", "--bytes", "2M", "--trace"]).arg(&file), None, TIMEOUT).success();
    let ev = events(&file);
    // Three sessions (upload, download, 64 streams), each seen by its client and its server.
    for side in ["client", "server"] {
        assert_eq!(count(&ev, "tcpls:established", side), 3, "{side}");
        assert_eq!(count(&ev, "tcpls:closed", side), 3, "{side}");
        assert!(count(&ev, "tcpls:connection_sample", side) >= 3, "{side}: samples");
    }
    let opened = |by: &str| ev.iter().filter(|e| e["name"] == "tcpls:stream_opened" && e["data"]["by"] == by).count();
    // Each run also opens a stream at its end to ask for the server's statistics.
    assert_eq!(
        (opened("local"), opened("peer")),
        (69, 69),
        "1 + 1 + 64 streams and 3 stats streams, opened and accepted"
    );
    let sessions: std::collections::BTreeSet<u64> = ev.iter().map(|e| e["group_id"].as_u64().unwrap()).collect();
    assert_eq!(sessions.len(), 6, "{sessions:?}");
}

#[test]
fn serve_and_perf_trace_their_sides_of_a_two_connection_session() {
    let dir = TempDir::new("trace-perf");
    let (server_file, client_file) = (dir.path().join("server.jsonl"), dir.path().join("client.jsonl"));
    let mut server = serve(LOCALHOST_V4, &["--mode", "perf", "--trace", server_file.to_str().unwrap()]);
    let target = server.target();
    run(
        tcpls().args(["perf", &target, "--insecure", "--path", &target, "--bytes", "8M", "--trace"]).arg(&client_file),
        None,
        TIMEOUT,
    )
    .success();
    let client = events(&client_file);
    assert_eq!(count(&client, "tcpls:connection_joined", "client"), 1);
    let conns: std::collections::BTreeSet<u64> = client
        .iter()
        .filter(|e| e["name"] == "tcpls:connection_sample")
        .map(|e| e["data"]["conn"].as_u64().unwrap())
        .collect();
    assert_eq!(conns.into_iter().collect::<Vec<_>>(), [0, 1], "samples of both connections");
    let sent: u64 = [0, 1]
        .iter()
        .filter_map(|c| client.iter().rfind(|e| e["name"] == "tcpls:connection_sample" && e["data"]["conn"] == *c))
        .map(|e| e["data"]["bytes_sent"].as_u64().unwrap())
        .sum();
    assert!(sent > 8 << 20, "the 8 MiB upload in the last samples: {sent}");
    // The server writes its file every second; it is still running.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let ev = events(&server_file);
        if count(&ev, "tcpls:closed", "server") == 1 {
            assert_eq!(count(&ev, "tcpls:connection_joined", "server"), 1);
            break;
        }
        assert!(std::time::Instant::now() < deadline, "server trace: {ev:?}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    server.expect_running();
}

#[test]
fn an_unwritable_trace_file_is_refused() {
    let done = run(tcpls().args(["demo", "--bytes", "1M", "--trace", "/nonexistent-dir/t.jsonl"]), None, TIMEOUT);
    assert!(!done.status.success());
    done.one_line_error("cannot create the trace file /nonexistent-dir/t.jsonl");
}
