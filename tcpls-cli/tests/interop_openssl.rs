//! Interoperability with the real OpenSSL command line tool (`openssl s_client` / `s_server`):
//! our server serves plain TLS clients through fallback, negotiates tcpls/1 with clients that
//! offer it, and `tcpls connect` falls back to plain TLS against a plain TLS server.
//!
//! These tests need `openssl` on PATH and fail (not skip) without it.

#![allow(clippy::unwrap_used)]

mod support;

use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

use support::{
    free_port, make_cert, openssl, run, serve_with_cert, tcpls, Proc, Server, TempDir, LOCALHOST_V4, SHORT, TIMEOUT,
};

fn echo_server(cert: &Path, key: &Path, extra: &[&str]) -> Server {
    serve_with_cert(LOCALHOST_V4, cert, key, &[&["--mode", "echo"], extra].concat())
}

/// `openssl s_client -connect TARGET ARGS...` with stdin kept open.
fn s_client(target: &str, args: &[&str]) -> Proc {
    Proc::spawn(openssl().args(["s_client", "-connect", target]).args(args), true)
}

/// Sends a line through `s_client` and waits for the server's echo of it.
fn expect_echo(client: &mut Proc, line: &str) {
    client.write(format!("{line}\n").as_bytes());
    if let Err(e) = client.stdout.wait_for(line.as_bytes(), SHORT) {
        panic!("no echo: {e}\n{}", client.diagnostics());
    }
}

fn wait_stdout(p: &mut Proc, needle: &str) {
    if let Err(e) = p.stdout.wait_for(needle.as_bytes(), SHORT) {
        panic!("{e}\n{}", p.diagnostics());
    }
}

#[test]
fn s_client_without_alpn_gets_plain_tls_echo() {
    let dir = TempDir::new("sclient-plain");
    let (cert, key) = make_cert(dir.path(), "c");
    let mut server = echo_server(&cert, &key, &["--json"]);
    let mut client = s_client(&server.target(), &["-quiet"]);
    expect_echo(&mut client, "hello from openssl s_client through fallback");
    expect_echo(&mut client, "and a second line");
    drop(client);
    // The server saw a plain TLS client (its session ends when s_client is killed).
    let report = server.session_report(1);
    assert_eq!(report["fallback"], serde_json::Value::Bool(true), "{report:#}");
    server.expect_running();
}

#[test]
fn s_client_with_alpn_http11_gets_plain_tls_echo() {
    let dir = TempDir::new("sclient-h11");
    let (cert, key) = make_cert(dir.path(), "c");
    let mut server = echo_server(&cert, &key, &["--alpn", "http/1.1", "--json"]);
    // Not -quiet, so that s_client prints the negotiated protocol.
    let mut client = s_client(&server.target(), &["-alpn", "http/1.1"]);
    wait_stdout(&mut client, "ALPN protocol: http/1.1");
    expect_echo(&mut client, "hello with ALPN http/1.1");
    drop(client);
    let report = server.session_report(1);
    assert_eq!(report["fallback"], serde_json::Value::Bool(true), "{report:#}");
    server.expect_running();
}

#[test]
fn s_client_chacha20_and_tls12_get_plain_tls_echo() {
    let dir = TempDir::new("sclient-chacha");
    let (cert, key) = make_cert(dir.path(), "c");
    let mut server = echo_server(&cert, &key, &[]);

    let mut client = s_client(&server.target(), &["-tls1_3", "-ciphersuites", "TLS_CHACHA20_POLY1305_SHA256"]);
    wait_stdout(&mut client, "TLS_CHACHA20_POLY1305_SHA256");
    expect_echo(&mut client, "hello over chacha20");
    drop(client);

    // Plain TLS 1.2 clients are served through fallback as well.
    let mut client = s_client(&server.target(), &["-tls1_2"]);
    wait_stdout(&mut client, "TLSv1.2");
    expect_echo(&mut client, "hello over TLS 1.2");
    drop(client);
    server.expect_running();
}

#[test]
fn s_client_alpn_tcpls_negotiates_then_gets_an_alert_while_perf_runs() {
    let dir = TempDir::new("sclient-tcpls");
    let (cert, key) = make_cert(dir.path(), "c");
    // Two sessions: the perf runs. The s_client connection never becomes a session: a server
    // decides what a connection is from the client's first TCPLS record (PROTOCOL.md §1), and
    // s_client's first record is not one; it fails during accept, with an alert.
    let mut server = serve_with_cert(LOCALHOST_V4, &cert, &key, &["--mode", "perf", "--sessions", "2"]);
    let mut client = s_client(&server.target(), &["-alpn", "tcpls/1"]);
    wait_stdout(&mut client, "ALPN protocol: tcpls/1");
    let text = client.stdout.text();
    assert!(text.contains("TLSv1.3"), "tcpls/1 must be negotiated over TLS 1.3: {text}\n{}", client.stderr.text());

    // While that session is open, a real TCPLS client is served normally.
    let target = server.target();
    let perf = |label: &str| {
        let done = run(
            tcpls().arg("perf").arg(&target).arg("--ca").arg(&cert).args(["--bytes", "8M", "--json"]),
            None,
            TIMEOUT,
        );
        let v = done.success().json();
        assert_eq!(v["verified"], serde_json::Value::Bool(true), "{label}: {v:#}");
        assert_eq!(v["bytes"].as_u64(), Some(8 << 20), "{label}: {v:#}");
    };
    perf("perf during the s_client session");

    // OpenSSL cannot speak TCPLS frames: what it sends is not a frame, and the server must close
    // the connection with an alert (not crash, not hang).
    client.write(b"junk that is not a TCPLS frame\n");
    let status = client.wait(SHORT);
    let err = client.stderr.text();
    assert!(err.to_lowercase().contains("alert"), "s_client ({status}) saw no alert: {err}");
    server.expect_running();

    perf("perf after the s_client session");
    server.expect_exit();
}

/// Starts `openssl s_server -quiet` on a free port and waits until it accepts connections.
fn s_server(cert: &Path, key: &Path, extra: &[&str]) -> (Proc, String) {
    for attempt in 0.. {
        let port = free_port(LOCALHOST_V4);
        let mut server = Proc::spawn(
            openssl()
                .args(["s_server", "-accept", &port.to_string(), "-cert"])
                .arg(cert)
                .arg("-key")
                .arg(key)
                .arg("-quiet")
                .args(extra),
            true,
        );
        let target = format!("127.0.0.1:{port}");
        // s_server -quiet says nothing when ready: probe with a TCP connection (s_server logs a
        // failed handshake for it and goes on accepting).
        let deadline = Instant::now() + SHORT;
        let mut ready = false;
        while !ready && server.try_status().is_none() && Instant::now() < deadline {
            ready = TcpStream::connect(&target).is_ok();
            if !ready {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        // If the bind failed, the probe may have reached whoever holds the port.
        std::thread::sleep(Duration::from_millis(100));
        match server.try_status() {
            None if ready => return (server, target),
            // Lost a race for the port: try another one.
            Some(_) if attempt < 5 => continue,
            _ => panic!("openssl s_server did not start\n{}", server.diagnostics()),
        }
    }
    unreachable!()
}

fn connect_to_plain_tls_server(s_server_args: &[&str], connect_args: &[&str], expect_note: &str) {
    let dir = TempDir::new("sserver");
    let (cert, key) = make_cert(dir.path(), "c");
    let (mut server, target) = s_server(&cert, &key, s_server_args);
    let mut client = Proc::spawn(tcpls().args(["connect", &target, "--ca"]).arg(&cert).args(connect_args), true);

    client.write(b"from tcpls connect\n");
    if let Err(e) = server.stdout.wait_for(b"from tcpls connect\n", SHORT) {
        panic!(
            "s_server did not receive the data: {e}\n{}\ntcpls connect:\n{}",
            server.diagnostics(),
            client.diagnostics()
        );
    }
    server.write(b"from openssl s_server\n");
    if let Err(e) = client.stdout.wait_for(b"from openssl s_server\n", SHORT) {
        panic!(
            "tcpls connect did not print the data: {e}\n{}\ns_server:\n{}",
            client.diagnostics(),
            server.diagnostics()
        );
    }
    if let Err(e) = client.stderr.wait_for(expect_note.as_bytes(), SHORT) {
        panic!("tcpls connect printed no fallback note: {e}");
    }
    let note = client.stderr.text();
    assert!(note.contains("plain TLS"), "the note should mention plain TLS: {note}");

    // End of stdin: tcpls connect closes its side (close_notify), s_server closes too, and
    // tcpls connect exits successfully.
    client.close_stdin();
    let status = client.wait(SHORT);
    assert!(status.success(), "tcpls connect ended with {status}\n{}", client.diagnostics());
    let _ = server.stdout.text();
}

#[test]
fn connect_falls_back_to_plain_tls_against_s_server() {
    connect_to_plain_tls_server(&[], &[], "does not speak TCPLS");
}

#[test]
fn connect_falls_back_with_alpn_against_s_server() {
    connect_to_plain_tls_server(&["-alpn", "http/1.1"], &["--alpn", "http/1.1"], "ALPN: http/1.1");
}
