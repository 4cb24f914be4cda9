//! End-to-end tests of the `tcpls` command line (docs/CLI.md): real
//! `tcpls serve` and `tcpls perf` / `tcpls connect` processes talking over loopback.

#![allow(clippy::unwrap_used)]

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{
    free_port, ipv6_available, make_cert, openssl, payload, run, serve, serve_with_cert, tcpls, Proc, Server, TempDir,
    LOCALHOST_V4, LOCALHOST_V6, SHORT, TIMEOUT,
};

const MIB: u64 = 1 << 20;

/// The summary keys CLI.md promises for `tcpls perf --json`.
const PERF_KEYS: [&str; 12] = [
    "bytes",
    "seconds",
    "goodput_bps",
    "verified",
    "fallback",
    "cipher",
    "failovers",
    "resumed",
    "early_data_accepted",
    "zero_copy_bytes",
    "copied_bytes",
    "connections",
];
const CONNECTION_KEYS: [&str; 5] = ["id", "local", "remote", "bytes_sent", "bytes_received"];

/// `tcpls perf TARGET --ca CERT ARGS... --json`, which must succeed; returns its summary.
fn perf_json(server: &Server, ca: &std::path::Path, args: &[&str]) -> Value {
    let done =
        run(tcpls().arg("perf").arg(server.target()).arg("--ca").arg(ca).args(args).arg("--json"), None, TIMEOUT);
    done.success().json()
}

fn u64_of(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} is not an unsigned integer in {v:#}"))
}

/// Checks a perf summary: keys, verification, exact byte count, plausible per-connection counts.
fn check_report(v: &Value, download: bool, streams: u64, bytes: u64, server: SocketAddr) {
    for key in PERF_KEYS {
        assert!(v.get(key).is_some(), "key {key:?} missing from the perf summary: {v:#}");
    }
    assert_eq!(v["verified"], Value::Bool(true), "not verified: {v:#}");
    assert_eq!(u64_of(v, "bytes"), bytes, "byte count: {v:#}");
    assert!(v["goodput_bps"].as_f64().is_some_and(|g| g > 0.0), "goodput: {v:#}");
    assert!(v["seconds"].as_f64().is_some_and(|s| s > 0.0), "seconds: {v:#}");
    assert_eq!(v["fallback"], Value::Bool(false), "fallback: {v:#}");
    assert_eq!(u64_of(v, "failovers"), 0, "failovers: {v:#}");
    assert_eq!(v["resumed"], Value::Bool(false), "resumed: {v:#}");
    assert_eq!(v["early_data_accepted"], Value::Bool(false), "early data: {v:#}");
    if let Some(d) = v.get("direction") {
        assert_eq!(d.as_str(), Some(if download { "download" } else { "upload" }), "direction: {v:#}");
    }
    if let Some(s) = v.get("streams") {
        assert_eq!(s.as_u64(), Some(streams), "streams: {v:#}");
    }
    let received_stream_bytes = u64_of(v, "zero_copy_bytes") + u64_of(v, "copied_bytes");
    if download {
        assert_eq!(received_stream_bytes, bytes, "zero_copy_bytes + copied_bytes on a download: {v:#}");
    } else {
        // Only the server's per-stream reports come back on an upload.
        assert!(received_stream_bytes < 1024 * streams, "zero_copy_bytes + copied_bytes on an upload: {v:#}");
    }

    let conns = v["connections"].as_array().unwrap_or_else(|| panic!("connections is not an array: {v:#}"));
    assert!(!conns.is_empty(), "no connections reported: {v:#}");
    for c in conns {
        for key in CONNECTION_KEYS {
            assert!(c.get(key).is_some(), "key {key:?} missing from a connection: {v:#}");
        }
    }
    let c0 = &conns[0];
    assert_eq!(c0["remote"].as_str(), Some(server.to_string().as_str()), "remote address: {v:#}");
    let local: SocketAddr =
        c0["local"].as_str().and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("local is not an address: {v:#}"));
    assert_eq!(local.ip(), server.ip(), "local address: {v:#}");
    let (sent, received) = (u64_of(c0, "bytes_sent"), u64_of(c0, "bytes_received"));
    let (payload_way, other_way) = if download { (received, sent) } else { (sent, received) };
    // TLS records and TCPLS frames add well under 5 %.
    assert!(payload_way >= bytes && payload_way < bytes + bytes / 20 + MIB, "bytes on the payload side: {v:#}");
    assert!(other_way < MIB + 4096 * streams, "bytes on the quiet side: {v:#}");
}

#[test]
fn cert_writes_key_and_certificate_with_all_names() {
    let dir = TempDir::new("cert");
    let out = dir.path().join("c");
    let done = run(tcpls().arg("cert").arg("--out").arg(&out).args(["--name", "foo.example"]), None, SHORT).success();
    let (cert, key) = (out.join("cert.pem"), out.join("key.pem"));
    assert!(cert.is_file() && key.is_file(), "cert.pem and key.pem not written: {}", done.describe());

    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&key).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "key.pem must be private, mode is {mode:o}");

    let sans = run(openssl().args(["x509", "-noout", "-ext", "subjectAltName", "-in"]).arg(&cert), None, SHORT)
        .success()
        .stdout_text();
    for name in ["DNS:localhost", "DNS:foo.example", "IP Address:127.0.0.1"] {
        assert!(sans.contains(name), "{name} missing from the subjectAltName: {sans}");
    }
    assert!(
        sans.contains("IP Address:0:0:0:0:0:0:0:1") || sans.contains("IP Address:::1"),
        "::1 missing from the subjectAltName: {sans}"
    );

    // The key belongs to the certificate.
    let cert_pub = run(openssl().args(["x509", "-noout", "-pubkey", "-in"]).arg(&cert), None, SHORT).success();
    let key_pub = run(openssl().args(["pkey", "-pubout", "-in"]).arg(&key), None, SHORT).success();
    assert_eq!(cert_pub.stdout_text(), key_pub.stdout_text(), "key.pem does not match cert.pem");
}

#[test]
fn perf_upload_64m_verified_and_server_json() {
    let dir = TempDir::new("upload");
    let (cert, key) = make_cert(dir.path(), "c");
    let mut server = serve_with_cert(LOCALHOST_V4, &cert, &key, &["--mode", "perf", "--sessions", "1", "--json"]);
    let v = perf_json(&server, &cert, &["--bytes", "64M"]);
    check_report(&v, false, 1, 64 * MIB, server.addr);
    assert!(v["cipher"].as_str().unwrap_or("").contains("AES_128_GCM"), "default cipher: {v:#}");

    // The server ends after its one session and reports it as one JSON object per line.
    server.expect_exit();
    let out = server.proc.stdout.text();
    let line = out.lines().find(|l| !l.trim().is_empty()).unwrap_or_else(|| panic!("no JSON from serve: {out:?}"));
    let s: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("serve --json line is not JSON ({e}): {line}"));
    assert_eq!(s["fallback"], Value::Bool(false), "{s:#}");
    assert_eq!(s["streams"].as_u64(), Some(1), "{s:#}");
    assert!(s["error"].is_null(), "the session ended with an error: {s:#}");
    assert!(s["bytes_received"].as_u64().is_some_and(|b| b >= 64 * MIB), "{s:#}");
}

#[test]
fn perf_download_64m_verified() {
    let dir = TempDir::new("download");
    let (cert, key) = make_cert(dir.path(), "c");
    let mut server = serve_with_cert(LOCALHOST_V4, &cert, &key, &["--mode", "perf", "--sessions", "1"]);
    let v = perf_json(&server, &cert, &["--bytes", "64M", "--download"]);
    check_report(&v, true, 1, 64 * MIB, server.addr);
    assert!(v["cipher"].as_str().unwrap_or("").contains("AES_128_GCM"), "default cipher: {v:#}");
    server.expect_exit();
}

/// The acceptance criterion: 64 streams, 256 MiB downloaded, verified. About 2 s in a
/// debug build on a laptop-class machine.
#[test]
fn perf_64_streams_256m_download_acceptance() {
    let dir = TempDir::new("streams64");
    let (cert, key) = make_cert(dir.path(), "c");
    let mut server = serve_with_cert(LOCALHOST_V4, &cert, &key, &["--mode", "perf", "--sessions", "2"]);
    let v = perf_json(&server, &cert, &["--streams", "64", "--bytes", "256M", "--download"]);
    check_report(&v, true, 64, 256 * MIB, server.addr);
    // Uneven split: the remainder must not get lost.
    let odd = 32 * MIB + 63;
    let v = perf_json(&server, &cert, &["--streams", "64", "--bytes", &odd.to_string()]);
    check_report(&v, false, 64, odd, server.addr);
    server.expect_exit();
}

/// A small send budget on both ends (the server's for the download, the client's for the
/// upload) still moves every byte of 64 streams, verified; a budget below two records is refused
/// with a message that says the minimum.
#[test]
fn perf_64_streams_with_a_small_send_budget() {
    let dir = TempDir::new("send-budget");
    let (cert, key) = make_cert(dir.path(), "c");
    let mut server =
        serve_with_cert(LOCALHOST_V4, &cert, &key, &["--mode", "perf", "--sessions", "2", "--send-budget", "64K"]);
    let odd = 16 * MIB + 63;
    let v = perf_json(&server, &cert, &["--streams", "64", "--bytes", &odd.to_string(), "--download"]);
    check_report(&v, true, 64, odd, server.addr);
    let v = perf_json(&server, &cert, &["--streams", "64", "--bytes", &odd.to_string(), "--send-budget", "64K"]);
    check_report(&v, false, 64, odd, server.addr);
    server.expect_exit();
    let refused = run(tcpls().args(["perf", "127.0.0.1:1", "--send-budget", "16K"]), None, TIMEOUT);
    assert!(!refused.status.success() && refused.stderr.contains("at least two records (32K)"), "{}", refused.stderr);
}

#[test]
fn perf_time_runs_about_one_second() {
    let dir = TempDir::new("time");
    let (cert, key) = make_cert(dir.path(), "c");
    let mut server = serve_with_cert(LOCALHOST_V4, &cert, &key, &["--mode", "perf", "--sessions", "1"]);
    let done = run(
        tcpls().arg("perf").arg(server.target()).arg("--ca").arg(&cert).args(["--time", "1", "--json"]),
        None,
        TIMEOUT,
    )
    .success();
    let wall = done.elapsed.as_secs_f64();
    assert!((0.8..5.0).contains(&wall), "--time 1 took {wall:.2} s of wall time: {}", done.describe());
    let v = done.json();
    assert_eq!(v["verified"], Value::Bool(true), "{v:#}");
    assert!(u64_of(&v, "bytes") > 0, "{v:#}");
    let secs = v["seconds"].as_f64().unwrap_or(0.0);
    assert!((0.8..5.0).contains(&secs), "--time 1 reports {secs} s: {v:#}");
    server.expect_exit();
}

#[test]
fn perf_cipher_aes256_and_chacha20() {
    let dir = TempDir::new("cipher");
    let (cert, key) = make_cert(dir.path(), "c");
    let mut server = serve_with_cert(LOCALHOST_V4, &cert, &key, &["--mode", "perf", "--sessions", "2"]);
    for (cipher, expect) in [("aes256", "AES_256_GCM"), ("chacha20", "CHACHA20_POLY1305")] {
        let v = perf_json(&server, &cert, &["--bytes", "16M", "--cipher", cipher]);
        check_report(&v, false, 1, 16 * MIB, server.addr);
        let got = v["cipher"].as_str().unwrap_or("");
        assert!(got.contains(expect), "--cipher {cipher} negotiated {got:?}: {v:#}");
    }
    server.expect_exit();
}

#[test]
fn perf_record_size() {
    let dir = TempDir::new("record");
    let (cert, key) = make_cert(dir.path(), "c");
    let mut server = serve_with_cert(LOCALHOST_V4, &cert, &key, &["--mode", "perf", "--sessions", "2"]);
    let v = perf_json(&server, &cert, &["--bytes", "16M", "--record-size", "1400"]);
    check_report(&v, false, 1, 16 * MIB, server.addr);
    let v = perf_json(&server, &cert, &["--bytes", "16M", "--record-size", "1400", "--download"]);
    check_report(&v, true, 1, 16 * MIB, server.addr);
    server.expect_exit();

    let done = run(
        tcpls().arg("perf").arg(server.target()).arg("--ca").arg(&cert).args(["--bytes", "1M", "--record-size", "10"]),
        None,
        SHORT,
    );
    done.one_line_error("record-size");
}

#[test]
fn perf_error_nothing_listening() {
    let dir = TempDir::new("refused");
    let (cert, _) = make_cert(dir.path(), "c");
    let target = format!("127.0.0.1:{}", free_port(LOCALHOST_V4));
    let done = run(tcpls().args(["perf", &target, "--bytes", "1M", "--ca"]).arg(&cert), None, SHORT);
    done.one_line_error(&target);
    assert!(
        done.stderr.to_lowercase().contains("refused"),
        "should say the connection was refused: {}",
        done.describe()
    );
}

#[test]
fn perf_error_wrong_ca_is_a_tls_verification_error() {
    let dir = TempDir::new("wrongca");
    let (cert, key) = make_cert(dir.path(), "server");
    let (other, _) = make_cert(dir.path(), "other");
    let mut server = serve_with_cert(LOCALHOST_V4, &cert, &key, &["--mode", "perf", "--sessions", "1"]);
    let done =
        run(tcpls().arg("perf").arg(server.target()).arg("--ca").arg(&other).args(["--bytes", "1M"]), None, SHORT);
    done.one_line_error("certificate");
    // The server survives the failed handshake and serves the next client.
    server.expect_running();
    let v = perf_json(&server, &cert, &["--bytes", "1M"]);
    check_report(&v, false, 1, MIB, server.addr);
    server.expect_exit();
}

#[test]
fn perf_help_does_not_advertise_session_cache() {
    // --session-cache could never work (rustls cannot serialize client tickets): hidden from
    // --help, and refused with its reason for scripts that pass it.
    let done = run(tcpls().args(["perf", "--help"]), None, SHORT).success();
    assert!(!done.stdout_text().contains("--session-cache"), "{}", done.describe());
    let target = format!("127.0.0.1:{}", free_port(LOCALHOST_V4));
    let done = run(tcpls().args(["perf", &target, "--insecure", "--session-cache", "/tmp/tickets"]), None, SHORT);
    done.one_line_error("not supported");
}

#[test]
fn connect_echo_one_mib_round_trip() {
    let dir = TempDir::new("echo");
    let (cert, key) = make_cert(dir.path(), "c");
    let mut server = serve_with_cert(LOCALHOST_V4, &cert, &key, &["--mode", "echo", "--sessions", "1"]);
    let data = payload(1 << 20, 0x0074_6370_6c73);
    let done = run(tcpls().arg("connect").arg(server.target()).arg("--ca").arg(&cert), Some(data.clone()), TIMEOUT);
    assert!(done.status.success(), "tcpls connect failed: {}", done.describe());
    assert_eq!(done.stdout.len(), data.len(), "echoed length differs: {}", done.describe());
    let first_difference = done.stdout.iter().zip(&data).position(|(a, b)| a != b);
    assert_eq!(first_difference, None, "echoed bytes differ from what was sent");
    assert!(
        !done.stderr.contains("plain TLS"),
        "a TCPLS server must not be reported as plain TLS: {}",
        done.describe()
    );
    server.expect_exit();
}

/// `connect --bind LOCAL --path LOCAL@REMOTE --path-manager`: two connections from the local
/// sides asked for (127.0.0.2 and 127.0.0.3 stand for two interfaces' addresses), shown by
/// `-v`, and the echo comes back byte-exact.
#[test]
fn connect_from_two_local_sides() {
    let dir = TempDir::new("echo-paths");
    let (cert, key) = make_cert(dir.path(), "c");
    let mut server = serve_with_cert(LOCALHOST_V4, &cert, &key, &["--mode", "echo", "--sessions", "1"]);
    let data = payload(256 << 10, 0x15);
    let second = format!("127.0.0.3@{}", server.target());
    let done = run(
        tcpls().arg("connect").arg(server.target()).arg("--ca").arg(&cert).args([
            "--bind",
            "127.0.0.2",
            "--path",
            &second,
            "--path-manager",
            "manual",
            "-v",
        ]),
        Some(data.clone()),
        TIMEOUT,
    );
    assert!(done.status.success(), "tcpls connect failed: {}", done.describe());
    assert!(done.stdout == data, "echoed bytes differ: {}", done.describe());
    assert!(done.stderr.contains("Connections : 2"), "{}", done.describe());
    for local in ["0: 127.0.0.2:", "1: 127.0.0.3:"] {
        assert!(done.stderr.contains(local), "{local}: {}", done.describe());
    }
    server.expect_exit();
    // A local side that cannot exist: the error names it.
    let done = run(tcpls().args(["connect", &server.target(), "--insecure", "--bind", "dev:"]), None, SHORT);
    done.one_line_error("--bind dev:");
}

/// `serve --rejoin-timeout`: a client that vanishes (SIGKILL: its kernel closes the sockets,
/// no close_notify) leaves an orphaned session, kept that long for a rejoin, then reported
/// with an error saying so.
#[test]
fn serve_keeps_an_orphaned_session_for_its_rejoin_timeout() {
    let dir = TempDir::new("rejoin-timeout");
    let (cert, key) = make_cert(dir.path(), "c");
    let args = ["--mode", "echo", "--sessions", "1", "--json", "--rejoin-timeout", "1"];
    let mut server = serve_with_cert(LOCALHOST_V4, &cert, &key, &args);
    let mut client = Proc::spawn(tcpls().arg("connect").arg(server.target()).arg("--ca").arg(&cert), true);
    client.write(b"still here\n");
    client.stdout.wait_for(b"still here", SHORT).unwrap_or_else(|e| panic!("{e}\n{}", client.diagnostics()));
    let killed = std::process::Command::new("kill").args(["-9", &client.id().to_string()]).status().unwrap();
    assert!(killed.success());
    let gone = Instant::now();
    let report = server.session_report(1);
    let waited = gone.elapsed();
    let error = report["error"].as_str().unwrap_or_default();
    assert!(error.contains("none rejoined within 1.0 s"), "{report}");
    assert!(waited < Duration::from_secs(5), "reported {waited:?} after the client vanished (1 s expected)");
    server.expect_exit();
}

#[test]
fn perf_over_ipv6() {
    if !ipv6_available() {
        eprintln!("SKIPPED perf_over_ipv6: ::1 is not available on this machine");
        return;
    }
    let dir = TempDir::new("ipv6");
    let (cert, key) = make_cert(dir.path(), "c");
    let mut server = serve_with_cert(LOCALHOST_V6, &cert, &key, &["--mode", "perf", "--sessions", "2"]);
    assert!(server.target().starts_with("[::1]:"), "{}", server.target());
    let done =
        run(tcpls().arg("perf").arg(server.target()).args(["--insecure", "--bytes", "8M", "--json"]), None, TIMEOUT);
    check_report(&done.success().json(), false, 1, 8 * MIB, server.addr);
    // The certificate names ::1, so verification by IP address works too.
    let v = perf_json(&server, &cert, &["--bytes", "8M", "--download"]);
    check_report(&v, true, 1, 8 * MIB, server.addr);
    server.expect_exit();
}

#[test]
fn help_of_every_subcommand_has_an_example() {
    for sub in ["cert", "serve", "connect", "perf", "demo"] {
        let done = run(tcpls().args([sub, "--help"]), None, SHORT).success();
        assert!(done.stdout_text().contains("Example"), "`tcpls {sub} --help` shows no example: {}", done.describe());
    }
}

#[test]
fn serve_without_sessions_limit_keeps_running_and_is_killed_by_the_guard() {
    // A server without --sessions serves several clients in a row (and the guard ends it).
    let mut server = serve(LOCALHOST_V4, &["--mode", "perf"]);
    for _ in 0..2 {
        let done = run(
            tcpls().arg("perf").arg(server.target()).args(["--insecure", "--bytes", "1M", "--json"]),
            None,
            TIMEOUT,
        );
        check_report(&done.success().json(), false, 1, MIB, server.addr);
    }
    std::thread::sleep(Duration::from_millis(100));
    server.expect_running();
}
