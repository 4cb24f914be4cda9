//! Configuration files of `tcpls tunnel` as a user writes them: every flag has a key (the
//! server's `metrics` and `rejoin-timeout` included), and `check-config` refuses a bad address
//! or CIDR with an error naming the file and the line, as the commands themselves do.

#![allow(clippy::unwrap_used)]

mod support;

use std::io::{Read, Write};

use support::{run, tcpls, Proc, TempDir, SHORT};

fn write(dir: &TempDir, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn check_config_refuses_bad_addresses_and_cidrs_with_file_and_line() {
    let dir = TempDir::new("tunnel-config-check");
    for (text, line) in [
        ("[client]\nconcentrator = \"127.0.0.1:4443\"\ninsecure = true\nsocks = \"127.0.0.1:99999\"\n", 4),
        ("[client]\nconcentrator = \"127.0.0.1:4443\"\nhttp = \"127.0.0.1:3128\"\nmetrics = \"::1:9\"\n", 4),
        ("[server]\nlisten = [\"127.0.0.1:4443\"]\nallow-dest = [\"10.0.0.0/8\", \"10.300.0.0/16\"]\n", 3),
        ("[server]\n[clients.\"alice\"]\ndeny-dest = [\"fd00::/129\"]\n", 3),
        ("[client]\nconcentrator = \"127.0.0.1:4443\"\nforward = [\"127.0.0.1:8080=example.org:0x50\"]\n", 3),
    ] {
        let file = write(&dir, "tunnel.toml", text);
        let done = run(tcpls().args(["tunnel", "check-config"]).arg(&file), None, SHORT);
        assert_eq!(done.status.code(), Some(1), "{text:?}: {}", done.describe());
        done.one_line_error(&format!("{}: line {line}: ", file.display()));
    }
}

#[test]
fn server_keys_metrics_and_rejoin_timeout_are_accepted_and_used() {
    let dir = TempDir::new("tunnel-config-keys");
    let file = write(
        &dir,
        "tunnel.toml",
        "[server]\nlisten = [\"127.0.0.1:0\"]\nmetrics = \"127.0.0.1:0\"\nrejoin-timeout = 30\n\
         keylog = \"keys.log\"\ntrace = \"trace.jsonl\"\n",
    );
    let check = run(tcpls().args(["tunnel", "check-config"]).arg(&file), None, SHORT).success();
    assert!(check.stdout_text().contains("[server]: OK"), "{}", check.describe());
    let mut server = Proc::spawn(tcpls().args(["tunnel", "server", "--config"]).arg(&file), false);
    server.stderr.wait_for(b"listening on", SHORT).unwrap_or_else(|e| panic!("{e}\n{}", server.diagnostics()));
    let text = server.stderr.text();
    assert!(text.contains("rejoin timeout 30 s"), "rejoin-timeout from the file\n{}", server.diagnostics());
    let metrics = text
        .lines()
        .find_map(|l| l.split("metrics on http://").nth(1))
        .and_then(|rest| rest.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("the metrics address is printed\n{}", server.diagnostics()))
        .to_string();
    let mut http = std::net::TcpStream::connect(&metrics).unwrap();
    http.set_read_timeout(Some(SHORT)).unwrap();
    http.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut answer = String::new();
    http.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.") && answer.contains(" 200 "), "{answer}");
    assert!(answer.contains("tcpls_"), "Prometheus metrics: {answer}");
    // The global flags' keys, relative to the file's directory: the trace is created at start,
    // the key log gets the secrets of a handshake.
    assert!(dir.path().join("trace.jsonl").exists(), "trace = \"trace.jsonl\"");
    let port = support::listening_port(&mut server, "tcpls tunnel server: listening on ");
    let _ = run(tcpls().args(["connect", &format!("127.0.0.1:{port}"), "--insecure"]), Some(Vec::new()), SHORT);
    let keys = std::fs::read_to_string(dir.path().join("keys.log")).unwrap_or_default();
    assert!(keys.contains("CLIENT_HANDSHAKE_TRAFFIC_SECRET"), "keylog = \"keys.log\": {keys:?}");
}

fn scrape(addr: &str) -> String {
    let mut http = std::net::TcpStream::connect(addr).unwrap();
    http.set_read_timeout(Some(SHORT)).unwrap();
    http.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").unwrap();
    let mut answer = String::new();
    http.read_to_string(&mut answer).unwrap();
    answer
}

/// `ticket-keys` from the file: the farm ticket metrics appear, SIGHUP re-reads the key file
/// (the generation counts it), and a broken key file on SIGHUP changes nothing.
#[test]
fn ticket_keys_are_read_from_the_file_and_reloaded_on_sighup() {
    let dir = TempDir::new("tunnel-config-ticket-keys");
    let first = "# current\n".to_string() + &"ab".repeat(32) + "\n";
    let keys = write(&dir, "ticket.keys", &first);
    let file = write(
        &dir,
        "tunnel.toml",
        "[server]\nlisten = [\"127.0.0.1:0\"]\nmetrics = \"127.0.0.1:0\"\nticket-keys = \"ticket.keys\"\n\
         advertise = [\"127.0.0.1:4443\"]\n",
    );
    let check = run(tcpls().args(["tunnel", "check-config"]).arg(&file), None, SHORT).success();
    assert!(check.stdout_text().contains("[server]: OK"), "{}", check.describe());
    let mut server = Proc::spawn(tcpls().args(["tunnel", "server", "--config"]).arg(&file), false);
    server.stderr.wait_for(b"0-RTT off", SHORT).unwrap_or_else(|e| panic!("{e}\n{}", server.diagnostics()));
    let text = server.stderr.text();
    let metrics = text
        .lines()
        .find_map(|l| l.split("metrics on http://").nth(1))
        .and_then(|rest| rest.strip_suffix("/metrics"))
        .unwrap_or_else(|| panic!("the metrics address is printed\n{}", server.diagnostics()))
        .to_string();
    assert!(scrape(&metrics).contains("tcpls_ticket_key_generation 1"), "{}", scrape(&metrics));
    // A resumption-capable handshake issues a farm ticket.
    let port = support::listening_port(&mut server, "tcpls tunnel server: listening on ");
    let _ = run(tcpls().args(["connect", &format!("127.0.0.1:{port}"), "--insecure"]), Some(Vec::new()), SHORT);

    let hup = |server: &Proc| {
        let status = std::process::Command::new("kill").args(["-HUP", &server.id().to_string()]).status().unwrap();
        assert!(status.success());
    };
    let rotated = "ef".repeat(32) + "\n" + &first;
    std::fs::write(&keys, rotated).unwrap();
    hup(&server);
    server
        .stderr
        .wait_for(b"ticket keys re-read: 2 key(s)", SHORT)
        .unwrap_or_else(|e| panic!("{e}\n{}", server.diagnostics()));
    let answer = scrape(&metrics);
    assert!(answer.contains("tcpls_ticket_key_generation 2"), "{answer}");
    assert!(answer.contains("tcpls_farm_tickets_total{outcome=\"issued\"}"), "{answer}");

    std::fs::write(&keys, "not a key\n").unwrap();
    hup(&server);
    // The whole line: "reload failed, configuration unchanged: --ticket-keys ...: line 1: not a key".
    server.stderr.wait_for(b"line 1: not a key", SHORT).unwrap_or_else(|e| panic!("{e}\n{}", server.diagnostics()));
    assert!(server.stderr.text().contains("reload failed"), "{}", server.diagnostics());
    assert!(scrape(&metrics).contains("tcpls_ticket_key_generation 2"), "a bad file changes nothing");
}
