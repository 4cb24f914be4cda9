//! iperf3 through the tunnel: an application nobody here wrote, whose tests end by
//! closing data sockets with unread bytes (an RST), so tunnel streams are reset while data is
//! queued in both directions. Ten tests in a row (parallel streams, reverse, bidirectional) must
//! all go through one tunnel session, which stays up without a protocol error.
//! Needs iperf3 (CI package `iperf3`); SKIPPED without it.

#![allow(clippy::unwrap_used)]

mod support;

use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use support::{free_port, run, tcpls, Proc, LOCALHOST_V4, SHORT, TIMEOUT};

fn have_iperf3() -> bool {
    Command::new("iperf3").arg("--version").output().is_ok_and(|o| o.status.success())
}

/// Starts `make(port)` on fresh ports until `ready` shows on stderr.
fn start(what: &str, ready: &[u8], make: impl Fn(u16) -> std::process::Command) -> (Proc, u16) {
    support::start_on_free_port(what, ready, make)
}

fn start_iperf3_server() -> (Proc, u16) {
    for _ in 0..5 {
        let port = free_port(LOCALHOST_V4);
        let mut cmd = Command::new("iperf3");
        cmd.args(["-s", "--forceflush", "--idle-timeout", "3", "-B", "127.0.0.1", "-p", &port.to_string()]);
        let proc = Proc::spawn(&mut cmd, false);
        let deadline = Instant::now() + SHORT;
        while Instant::now() < deadline {
            if TcpStream::connect((LOCALHOST_V4, port)).is_ok() {
                return (proc, port);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    panic!("iperf3 -s did not start");
}

#[test]
fn ten_iperf3_tests_through_one_tunnel_session() {
    if !have_iperf3() {
        eprintln!(
            "SKIPPED: ten_iperf3_tests_through_one_tunnel_session: iperf3 is not installed (apt-get install iperf3)"
        );
        return;
    }
    let (mut iperf, iperf_port) = start_iperf3_server();
    let (mut server, tunnel_port) = start("tcpls tunnel server", b"tcpls tunnel server: listening on", |p| {
        let mut cmd = tcpls();
        // The iperf3 server is on this host's loopback, which the concentrator refuses by default.
        cmd.args(["tunnel", "server", "--json", "--allow-dest", "127.0.0.0/8", "--listen", &format!("127.0.0.1:{p}")]);
        cmd
    });
    let (mut client, local) = start("tcpls tunnel client", b"tcpls tunnel client: session to", |p| {
        let mut cmd = tcpls();
        cmd.args(["tunnel", "client", "-v", "--insecure", "--concentrator", &format!("127.0.0.1:{tunnel_port}")]);
        cmd.args(["--forward", &format!("127.0.0.1:{p}=127.0.0.1:{iperf_port}")]);
        cmd
    });
    let runs: [&[&str]; 10] = [
        &[],
        &["-P", "4"],
        &["-R"],
        &["--bidir"],
        &["-P", "4", "-R"],
        &[],
        &["-P", "2", "--bidir"],
        &["-R"],
        &["-P", "4"],
        &["--bidir"],
    ];
    // iperf3's server takes one test at a time and refuses (closing the control connection
    // unread, an RST) a client that comes while it still winds the last one up: each run waits
    // for the server's next "Server listening" line, as a person would before typing the next
    // command. A run refused as "busy" (the server saw another connection first) waits for the
    // line after that and tries again; --idle-timeout restarts a server stuck on a connection
    // that never sends its cookie.
    let banners = |iperf: &mut Proc| iperf.stdout.text().matches("Server listening on").count();
    let mut need = 1;
    for (i, extra) in runs.iter().enumerate() {
        let mut attempt = 0;
        let done = loop {
            let deadline = Instant::now() + SHORT;
            while banners(&mut iperf) < need {
                assert!(Instant::now() < deadline, "iperf3 -s is not ready for run {i}\n{}", iperf.diagnostics());
                std::thread::sleep(Duration::from_millis(20));
            }
            need = banners(&mut iperf) + 1;
            let mut cmd = Command::new("iperf3");
            cmd.args(["-c", "127.0.0.1", "-p", &local.to_string(), "-t", "1", "-J"]).args(*extra);
            let done = run(&mut cmd, None, TIMEOUT);
            let busy = done.stdout_text().contains("the server is busy");
            if busy && attempt < 3 {
                eprintln!("iperf3 run {i}: the iperf3 server was busy; trying again");
                attempt += 1;
                continue;
            }
            break done;
        };
        assert!(done.status.success(), "iperf3 run {i} {extra:?}: {}\n{}", done.describe(), client.diagnostics());
        let report = done.json();
        assert!(report.get("error").is_none(), "iperf3 run {i} {extra:?}: {report}");
        let end = &report["end"];
        let received = end["sum_received"]["bytes"].as_u64().unwrap_or(0);
        // Even a loaded CI machine moves megabytes in a second over loopback.
        assert!(received > 1_000_000, "iperf3 run {i} {extra:?}: only {received} bytes\n{end}");
        if extra.contains(&"--bidir") {
            let reverse = end["sum_received_bidir_reverse"]["bytes"].as_u64().unwrap_or(0);
            assert!(reverse > 1_000_000, "iperf3 run {i} {extra:?}: reverse only {reverse} bytes\n{end}");
        }
        assert!(client.try_status().is_none(), "the tunnel client exited after run {i}\n{}", client.diagnostics());
    }
    let log = server.stderr.text() + &server.stdout.text();
    assert!(!log.contains("protocol error"), "the concentrator reported a protocol error:\n{log}");
    let client_log = client.stderr.text();
    assert!(!client_log.contains("session to the concentrator ended"), "{client_log}");
}
