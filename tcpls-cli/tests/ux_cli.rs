//! What a user sees when something is not right: errors that say what to do, Ctrl-C on the
//! servers and the tunnel client, `connect` to a perf server, `cert` over existing files.
#![allow(clippy::unwrap_used)]

mod support;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

use support::{make_cert, run, serve, serve_with_cert, tcpls, Proc, TempDir, LOCALHOST_V4, SHORT};

#[test]
fn cert_refuses_to_overwrite_without_force() {
    let dir = TempDir::new("cert-force");
    let (cert, key) = make_cert(dir.path(), "c");
    let before = std::fs::read(&key).unwrap();
    let out = cert.parent().unwrap();
    let done = run(tcpls().arg("cert").arg("--out").arg(out), None, SHORT);
    done.one_line_error("--force");
    assert_eq!(std::fs::read(&key).unwrap(), before, "the key was overwritten");
    run(tcpls().arg("cert").arg("--out").arg(out).arg("--force"), None, SHORT).success();
    assert_ne!(std::fs::read(&key).unwrap(), before, "--force writes a new key");
}

#[test]
fn connect_to_a_perf_server_says_what_is_wrong() {
    let mut server = serve(LOCALHOST_V4, &["--mode", "perf", "--sessions", "1"]);
    let done = run(tcpls().args(["connect", &server.target(), "--insecure"]), Some(b"hello\n".to_vec()), SHORT);
    done.one_line_error("tcpls perf");
    assert!(done.stderr.contains("--mode echo"), "{}", done.describe());
    server.expect_exit();
}

#[test]
fn unknown_issuer_says_to_pass_ca_or_insecure() {
    let mut server = serve(LOCALHOST_V4, &["--mode", "echo", "--sessions", "1"]);
    // An ephemeral self-signed certificate, checked against the system's roots.
    let done = run(tcpls().args(["connect", &server.target()]), Some(b"x".to_vec()), SHORT);
    done.one_line_error("--ca FILE");
    assert!(done.stderr.contains("--insecure"), "{}", done.describe());
    server.expect_running();
    let done = run(tcpls().args(["connect", &server.target(), "--insecure"]), Some(b"x".to_vec()), SHORT).success();
    assert_eq!(done.stdout, b"x");
}

/// A closed port: the address once, and what to check. The port is held by a socket that is
/// bound but does not listen, so every connection to it is refused (no port race).
#[test]
fn a_closed_port_is_named_once_with_a_hint() {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.bind(&std::net::SocketAddr::from(([127, 0, 0, 1], 0)).into()).unwrap();
    let addr = socket.local_addr().unwrap().as_socket().unwrap().to_string();
    for args in [
        vec!["connect", &addr, "--insecure"],
        vec!["perf", &addr, "--insecure", "-t", "1"],
        vec!["probe", &addr, "--insecure"],
        vec!["tunnel", "client", "--concentrator", &addr, "--insecure", "--socks", "127.0.0.1:0"],
    ] {
        let done = run(tcpls().args(&args), Some(Vec::new()), SHORT);
        done.one_line_error("connection refused");
        assert_eq!(done.stderr.matches(addr.as_str()).count(), 1, "the address once: {}", done.describe());
        assert!(done.stderr.contains("is the server running there?"), "a hint: {}", done.describe());
        assert!(!done.stderr.contains("os error"), "{}", done.describe());
    }
}

/// The tunnel client gives the same advice as `connect` for an untrusted certificate.
#[test]
fn tunnel_client_unknown_issuer_says_to_pass_ca_or_insecure() {
    let (_server, port) = support::start_on_free_port("tcpls tunnel server", b"listening on", |port| {
        let mut cmd = tcpls();
        cmd.args(["tunnel", "server", "--listen", &format!("127.0.0.1:{port}")]);
        cmd
    });
    let done = run(
        tcpls().args(["tunnel", "client", "--concentrator", &format!("127.0.0.1:{port}"), "--socks", "127.0.0.1:0"]),
        None,
        SHORT,
    );
    done.one_line_error("UnknownIssuer");
    assert!(done.stderr.contains("--ca FILE") && done.stderr.contains("--insecure"), "{}", done.describe());
}

/// `tcpls cert`: valid for a year by default (not until the year 4096), `--days N` otherwise.
#[test]
fn cert_is_valid_for_a_year_unless_days_says_otherwise() {
    let dir = TempDir::new("cert-days");
    let validity = |out: &str, extra: &[&str]| {
        let done = run(tcpls().arg("cert").arg("--out").arg(dir.path().join(out)).args(extra), None, SHORT).success();
        assert!(done.stdout_text().contains("valid for"), "{}", done.describe());
        let pem = std::fs::read(dir.path().join(out).join("cert.pem")).unwrap();
        let (_, pem) = x509_parser::pem::parse_x509_pem(&pem).unwrap();
        let cert = pem.parse_x509().unwrap();
        let v = cert.validity();
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
        assert!(v.not_before.timestamp() <= now, "valid now: {v:?}");
        (v.not_after.timestamp() - now) as f64 / 86_400.0
    };
    let days = validity("default", &[]);
    assert!((364.9..=365.1).contains(&days), "a year by default: {days} days");
    let days = validity("short", &["--days", "30"]);
    assert!((29.9..=30.1).contains(&days), "--days 30: {days} days");
    let done = run(tcpls().args(["cert", "--days", "0"]).arg("--out").arg(dir.path().join("zero")), None, SHORT);
    assert_eq!(done.status.code(), Some(2), "--days 0 is a usage error: {}", done.describe());
}

#[test]
fn a_server_that_does_not_speak_tls_is_named_as_such() {
    // A plain HTTP server: it answers the ClientHello with an HTTP error.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        if let Ok((mut s, _)) = listener.accept() {
            let mut buf = [0u8; 512];
            let _ = s.read(&mut buf);
            let _ = s.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
        }
    });
    let done = run(tcpls().args(["connect", &addr.to_string(), "--insecure"]), Some(Vec::new()), SHORT);
    done.one_line_error("does not speak TLS");
}

/// `serve` and `tunnel server` end with status 130 on Ctrl-C, like `perf`.
#[test]
fn servers_exit_130_on_ctrl_c() {
    let mut server = serve(LOCALHOST_V4, &["--mode", "perf"]);
    server.proc.interrupt();
    assert_eq!(server.proc.wait(SHORT).code(), Some(130), "{}", server.proc.diagnostics());

    let mut conc = Proc::spawn(tcpls().args(["tunnel", "server", "--listen", "127.0.0.1:0"]), false);
    conc.stderr.wait_for(b"listening on", SHORT).unwrap_or_else(|e| panic!("{e}\n{}", conc.diagnostics()));
    conc.interrupt();
    assert_eq!(conc.wait(SHORT).code(), Some(130), "{}", conc.diagnostics());
}

/// Ctrl-C on `tunnel client` closes the session with close_notify: the concentrator ends it
/// at once instead of timing out a connection closed without close_notify.
#[test]
fn tunnel_client_ctrl_c_closes_the_session() {
    // Port 0: the concentrator says which port it got.
    let mut conc = Proc::spawn(tcpls().args(["tunnel", "server", "--json", "--listen", "127.0.0.1:0"]), false);
    let port = support::listening_port(&mut conc, "tcpls tunnel server: listening on ");
    let forward = "127.0.0.1:0=127.0.0.1:9";
    let mut client = Proc::spawn(
        tcpls()
            .args(["tunnel", "client", "--insecure", "--concentrator", &format!("127.0.0.1:{port}")])
            .args(["--forward", forward]),
        false,
    );
    client.stderr.wait_for(b"accepting on", SHORT).unwrap_or_else(|e| panic!("{e}\n{}", client.diagnostics()));
    client.interrupt();
    assert_eq!(client.wait(SHORT).code(), Some(130), "{}", client.diagnostics());
    // The session report comes within a few seconds, without an error.
    conc.stdout.wait_for(b"\n", Duration::from_secs(5)).unwrap_or_else(|e| panic!("{e}\n{}", conc.diagnostics()));
    let line = conc.stdout.text();
    let v: serde_json::Value = serde_json::from_str(line.trim()).unwrap();
    assert!(v["error"].is_null(), "the session ended with an error: {v:#}\n{}", conc.diagnostics());
}

/// `connect -v` shows the session as `openssl s_client` does; `--keylog FILE` (client and
/// server) and SSLKEYLOGFILE (the perf client) write the NSS key log of the same handshakes.
#[test]
fn show_session_and_keylog() {
    let dir = TempDir::new("keylog");
    let (cert, key) = make_cert(dir.path(), "c");
    let (client_keys, server_keys) = (dir.path().join("client.keys"), dir.path().join("server.keys"));
    let mut server = serve_with_cert(
        LOCALHOST_V4,
        &cert,
        &key,
        &["--mode", "echo", "--sessions", "2", "--keylog", server_keys.to_str().unwrap()],
    );
    let mut connect = tcpls();
    connect.args(["connect", &server.target(), "-v", "--ca"]).arg(&cert).arg("--keylog").arg(&client_keys);
    let done = run(&mut connect, Some(b"hi".to_vec()), SHORT).success();
    assert_eq!(done.stdout, b"hi");
    for needle in [
        "Protocol    : TCPLS (tcpls/1) over TLS 1.3",
        "Cipher      : TLS13_AES_128_GCM_SHA256",
        "ALPN        : tcpls/1",
        "no (full handshake)",
        "names     : localhost, 127.0.0.1, ::1",
        "expires in",
        "verified against --ca",
        "Connections : 1",
    ] {
        assert!(done.stderr.contains(needle), "{needle:?} missing: {}", done.describe());
    }
    assert!(!done.stderr.contains("Some("), "Debug text in the output: {}", done.describe());

    let lines = |path: &std::path::Path| -> Vec<(String, String)> {
        let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        text.lines()
            .map(|l| {
                let parts: Vec<&str> = l.split(' ').collect();
                assert_eq!(parts.len(), 3, "not an NSS key log line: {l}");
                assert_eq!(parts[1].len(), 64, "client random of 32 bytes: {l}");
                assert!(parts[1..].iter().all(|p| p.chars().all(|c| c.is_ascii_hexdigit())), "{l}");
                (parts[0].to_string(), parts[1].to_string())
            })
            .collect()
    };
    let client = lines(&client_keys);
    assert!(client.iter().any(|(label, _)| label == "CLIENT_TRAFFIC_SECRET_0"), "{client:?}");
    // A perf run with SSLKEYLOGFILE appends to the same file: a second client random.
    let mut perf = tcpls();
    perf.env("SSLKEYLOGFILE", &client_keys).args(["perf", &server.target(), "--insecure", "--bytes", "1M"]);
    let done = run(&mut perf, None, SHORT);
    // The server is in echo mode: perf fails, but its handshake was logged.
    assert!(!done.status.success());
    server.expect_exit();
    let client = lines(&client_keys);
    let randoms: std::collections::BTreeSet<&String> = client.iter().map(|(_, r)| r).collect();
    assert_eq!(randoms.len(), 2, "two handshakes logged: {client:?}");
    let server_side = lines(&server_keys);
    for r in randoms {
        assert!(server_side.iter().any(|(_, s)| s == r), "the server logged the same handshake {r}");
    }
}
