//! `tcpls tunnel client` around the concentrator's restarts and its own stop (docs/TUNNEL.md
//! §5): a restarted concentrator is found within a second of listening again with the default
//! backoff, and SIGINT or SIGTERM closes the session with close_notify, once, without ever
//! reconnecting.

#![allow(clippy::unwrap_used)]

mod support;

use std::time::{Duration, Instant};

use support::{start_on_free_port, tcpls, Proc, SHORT};

/// The destinations are on loopback, which the concentrator refuses by default.
const ALLOW_LOOPBACK: [&str; 2] = ["--allow-dest", "127.0.0.0/8"];

/// A restarted concentrator is found within this much of listening again: the client retries
/// a refused connection at least once a second (its backoff while nothing listens is capped at
/// 1 s, jittered within [0.5 s, 1 s]), plus 1 s of slack for the attempt itself (TCP and a full
/// TLS handshake of a debug build on a loaded 2-core machine) and for reading the log line.
const FOUND_WITHIN: Duration = Duration::from_secs(2);

/// How long the concentrator stays down: long enough for an uncapped exponential backoff to
/// have grown to several seconds (0.2 s doubling: 3.2-6.4 s by then).
const OUTAGE: Duration = Duration::from_secs(8);

fn server_on(port: u16, extra: &[&str]) -> Proc {
    let mut p = Proc::spawn(
        tcpls()
            .args(["tunnel", "server", "--json", "--listen", &format!("127.0.0.1:{port}")])
            .args(ALLOW_LOOPBACK)
            .args(extra),
        false,
    );
    p.stderr.wait_for(b"listening on", SHORT).unwrap_or_else(|e| panic!("{e}\n{}", p.diagnostics()));
    p
}

fn start_server(extra: &[&str]) -> (Proc, u16) {
    start_on_free_port("tcpls tunnel server", b"listening on", |port| {
        let mut cmd = tcpls();
        cmd.args(["tunnel", "server", "--json", "--listen", &format!("127.0.0.1:{port}")])
            .args(ALLOW_LOOPBACK)
            .args(extra);
        cmd
    })
}

fn start_client(server_port: u16, verbose: bool) -> Proc {
    start_on_free_port("tcpls tunnel client", b"tcpls tunnel client: session to", |socks| {
        let mut cmd = tcpls();
        if verbose {
            cmd.args(["tunnel", "-v"]); // logs every reconnection attempt with the next delay
        } else {
            cmd.arg("tunnel");
        }
        cmd.args(["client", "--insecure", "--concentrator", &format!("127.0.0.1:{server_port}")])
            .args(["--socks", &format!("127.0.0.1:{socks}")]);
        cmd
    })
    .0
}

/// Waits until `needle` has been printed `n` times on the client's stderr.
fn wait_count(p: &mut Proc, needle: &str, n: usize, within: Duration) -> Result<(), String> {
    let deadline = Instant::now() + within;
    while p.stderr.text().matches(needle).count() < n {
        if Instant::now() >= deadline {
            return Err(format!("{needle:?} not printed {n} time(s) within {within:?}"));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(())
}

#[test]
fn a_restarted_concentrator_is_found_within_a_second_of_listening() {
    let (server, port) = start_server(&[]);
    let mut client = start_client(port, true);
    drop(server); // killed: the client's connection is reset, it reconnects
    wait_count(&mut client, "lost (", 1, SHORT).unwrap_or_else(|e| panic!("{e}\n{}", client.diagnostics()));
    std::thread::sleep(OUTAGE); // the outage itself, not a wait for an event
    let _server = server_on(port, &[]);
    let listening = Instant::now();
    wait_count(&mut client, "re-established after an outage of", 1, SHORT)
        .unwrap_or_else(|e| panic!("{e}\n{}", client.diagnostics()));
    let found = listening.elapsed();
    eprintln!("re-established {found:?} after the concentrator listened again (outage {OUTAGE:?})");
    assert!(
        found <= FOUND_WITHIN,
        "the client came back {found:?} after the concentrator listened again (at most {FOUND_WITHIN:?})\n{}",
        client.diagnostics()
    );
    // Every delay between refused attempts was within the cap, however long the outage.
    let log = client.stderr.text();
    let delays: Vec<Duration> = log.lines().filter_map(|l| l.split("; next in ").nth(1)).map(duration).collect();
    assert!(delays.len() >= 5, "attempts logged at debug level:\n{log}");
    let longest = delays.iter().max().unwrap();
    assert!(*longest <= Duration::from_secs(1), "a delay of {longest:?} between attempts: {delays:?}");
}

/// A `Duration`'s Debug form as the client logs it: `612.5ms`, `1.2s`, `800µs`.
fn duration(text: &str) -> Duration {
    let text = text.trim();
    for (unit, scale) in [("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9), ("s", 1.0)] {
        if let Some(n) = text.strip_suffix(unit).and_then(|n| n.parse::<f64>().ok()) {
            return Duration::from_secs_f64(n * scale);
        }
    }
    panic!("not a duration: {text:?}")
}

/// SIGINT (exit 130) and SIGTERM (exit 143): one log line saying the session is closed, no
/// outage logged, and the concentrator ends the session at once (close_notify) rather than
/// keeping it for its 30 s rejoin timeout.
#[test]
fn sigint_and_sigterm_close_the_session_once_without_reconnecting() {
    for (signal, status) in [("-INT", 130), ("-TERM", 143)] {
        let (mut server, port) = start_server(&["--rejoin-timeout", "30"]);
        let mut client = start_client(port, false);
        let sent = Instant::now();
        let kill = std::process::Command::new("kill").args([signal, &client.id().to_string()]).status().unwrap();
        assert!(kill.success());
        let code = client.wait(SHORT).code();
        assert_eq!(code, Some(status), "{signal}: exit status\n{}", client.diagnostics());
        server.stdout.wait_for(b"\"peer\"", SHORT).unwrap_or_else(|e| panic!("{e}\n{}", server.diagnostics()));
        let ended = sent.elapsed();
        assert!(ended < Duration::from_secs(5), "{signal}: the session ended {ended:?} after the signal, not at once");
        let log = client.stderr.text();
        let after_ready: Vec<&str> = log.lines().skip_while(|l| !l.contains("session to")).skip(1).collect();
        assert_eq!(after_ready.len(), 1, "{signal}: one line when stopping:\n{log}");
        assert!(after_ready[0].contains("closing the session") && after_ready[0].contains("not reconnecting"), "{log}");
        assert!(!log.contains("lost (") && !log.contains("re-established"), "{signal}: no reconnection:\n{log}");
        let summary = server.stdout.text();
        assert!(summary.contains("\"error\":null"), "{signal}: a clean end (close_notify): {summary}");
        // The concentrator's log line for the session is a sentence, not a debug struct.
        server.stderr.wait_for(b"ended after", SHORT).unwrap_or_else(|e| panic!("{e}\n{}", server.diagnostics()));
        let log = server.stderr.text();
        let ended = log.lines().find(|l| l.contains("ended after")).unwrap();
        assert!(ended.contains(": 0 connections (0 connected, 0 failed, 0 refused by policy"), "{ended}");
        assert!(!ended.contains('{') && !ended.contains("StatsSnapshot"), "{ended}");
    }
}

/// A stop during an outage (the client is reconnecting): it exits at once, without a word about
/// the session coming back.
#[test]
fn a_stop_while_reconnecting_does_not_reconnect() {
    let (server, port) = start_server(&[]);
    let mut client = start_client(port, false);
    drop(server);
    wait_count(&mut client, "lost (", 1, SHORT).unwrap_or_else(|e| panic!("{e}\n{}", client.diagnostics()));
    let _server = server_on(port, &[]); // back: a reconnection attempt now would succeed
    client.interrupt();
    assert_eq!(client.wait(SHORT).code(), Some(130), "{}", client.diagnostics());
    let log = client.stderr.text();
    let stopped = log.find("not reconnecting").unwrap_or_else(|| panic!("the stop is logged:\n{log}"));
    assert!(!log[stopped..].contains("re-established"), "no reconnection after SIGINT:\n{log}");
    assert_eq!(log.matches("not reconnecting").count(), 1, "{log}");
}
