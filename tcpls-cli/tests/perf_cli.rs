//! `tcpls perf` as an iperf3 user drives it (docs/CLI.md, "iperf3 → tcpls perf"): short
//! options, durations and sizes with units, interval lines without a terminal, the JSON's
//! intervals and summary (read into typed structs, so a missing or mistyped key fails), Ctrl-C,
//! and timed runs that end at their deadline even when paced.
#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use serde::Deserialize;
use support::{
    free_port, make_cert, run, serve, serve_with_cert, tcpls, Proc, Server, TempDir, LOCALHOST_V4, SHORT, TIMEOUT,
};

/// The JSON of `tcpls perf --json`, as far as these tests rely on it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct Report {
    direction: String,
    streams: u32,
    bytes: u64,
    seconds: f64,
    goodput_bps: f64,
    verified: bool,
    interrupted: bool,
    signal: Option<String>,
    ended_at_deadline: bool,
    undelivered: Vec<String>,
    error: Option<String>,
    client_stats: PathStats,
    server_stats: Option<PathStats>,
    server_stats_error: Option<String>,
    omit_seconds: f64,
    start_unix_seconds: f64,
    fallback: bool,
    cipher: String,
    failovers: u64,
    resumed: bool,
    early_data_accepted: bool,
    zero_copy_bytes: u64,
    copied_bytes: u64,
    handshake_ms: f64,
    migration: Option<Migration>,
    summary: Vec<DirectionSummary>,
    intervals: Vec<Interval>,
    connections: Vec<Connection>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct PathStats {
    failovers: u64,
    connections_lost: u64,
    records_resent: u64,
    stream_bytes_resent: u64,
    paths_suspected: u64,
    paths_recovered: u64,
    duplicate_bytes_received: u64,
    longest_stall_ms: Option<f64>,
    longest_stream_stall_ms: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct Migration {
    at_seconds: f64,
    from: u32,
    to: u32,
    error: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct DirectionSummary {
    direction: String,
    sender: End,
    receiver: End,
    verified: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct End {
    bytes: Option<u64>,
    seconds: f64,
    bits_per_second: Option<f64>,
    retransmits: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct Interval {
    start: f64,
    end: f64,
    omitted: bool,
    bytes: u64,
    bits_per_second: f64,
    upload_bytes: Option<u64>,
    download_bytes: Option<u64>,
    connections: Vec<IntervalConnection>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct IntervalConnection {
    id: u32,
    bytes_sent: u64,
    bytes_received: u64,
    bits_per_second: f64,
    payload_bytes: Option<u64>,
    payload_bits_per_second: Option<f64>,
    retransmits: Option<u64>,
    cwnd_segments: Option<u32>,
    rtt_us: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(dead_code)]
struct Connection {
    id: u32,
    local: Option<String>,
    remote: Option<String>,
    bytes_sent: u64,
    bytes_received: u64,
    open: bool,
}

fn report(stdout: &[u8]) -> Report {
    serde_json::from_slice(stdout)
        .unwrap_or_else(|e| panic!("not the perf JSON ({e}): {}", String::from_utf8_lossy(stdout)))
}

/// A perf server with an ephemeral certificate (clients use --insecure), kept for `sessions`.
fn perf_server(sessions: u32) -> Server {
    serve(LOCALHOST_V4, &["--mode", "perf", "--sessions", &sessions.to_string()])
}

fn perf(server: &Server) -> std::process::Command {
    let mut cmd = tcpls();
    cmd.arg("perf").arg(server.target()).arg("--insecure");
    cmd
}

/// The bug: `--rate-limit 1M --time 1` ran for 35 s, draining the 4 MiB queued in the
/// session at the paced rate after the deadline. 4 Mbit/s with 4 MiB queued took 8 s before the
/// fix; now the sender resets its streams at the deadline.
#[test]
fn paced_timed_runs_end_near_their_deadline_both_ways() {
    let mut server = perf_server(2);
    for way in ["--download", "--upload"] {
        let done = run(perf(&server).args([way, "--rate-limit", "4M", "--time", "1", "--json"]), None, TIMEOUT);
        let wall = done.elapsed.as_secs_f64();
        assert!(done.status.success(), "{}", done.describe());
        assert!(wall < 5.0, "{way} --rate-limit 4M --time 1 took {wall:.2} s: {}", done.describe());
        let r = report(&done.stdout);
        assert!(r.verified, "{r:#?}");
        // About 0.5 MB/s for a second, allowing for the pacer's burst and a slow machine.
        assert!(r.bytes > 100_000 && r.bytes < 2_000_000, "{way}: {} bytes in 1 s at 4 Mbit/s: {r:#?}", r.bytes);
        let bps = r.summary[0].receiver.bits_per_second.unwrap();
        assert!(bps < 6e6, "{way}: the receiver saw {bps} bit/s with --rate-limit 4M: {r:#?}");
    }
    server.expect_exit();
}

/// A timed run whose deadline falls on an interval boundary (`-t 1 -i 0.5`) ends a moment after
/// that boundary: the moment is no interval of its own (a 1 ms slice with 0 bytes), its bytes
/// are in the last interval, and the intervals still add up.
#[test]
fn a_timed_run_ends_without_a_sliver_of_an_interval() {
    let mut server = perf_server(3);
    for args in [["-t", "1", "-i", "0.5"], ["-t", "1", "-i", "0.25"], ["-t", "0.5", "-i", "0.5"]] {
        let done = run(perf(&server).args(args).arg("--json"), None, TIMEOUT).success();
        let r = report(&done.stdout);
        let i: f64 = args[3].parse().unwrap();
        for interval in &r.intervals {
            assert!(interval.end - interval.start >= 0.1 * i, "{args:?}: a sliver: {:#?}", r.intervals);
        }
        let last = r.intervals.last().unwrap();
        assert!(last.end >= 0.9 * args[1].parse::<f64>().unwrap(), "{args:?}: the run's end: {:#?}", r.intervals);
        for pair in r.intervals.windows(2) {
            assert!((pair[1].start - pair[0].end).abs() < 1e-6, "contiguous: {:#?}", r.intervals);
        }
    }
    server.expect_exit();
}

/// iperf3's spelling: -c ADDR -p PORT -t -P -R -J -i -O, durations with units.
#[test]
fn iperf3_short_options_and_json_intervals() {
    let mut server = perf_server(1);
    let port = server.addr.port().to_string();
    let done = run(
        tcpls()
            .args(["perf", "-c", "127.0.0.1", "-p", &port, "--insecure"])
            .args(["-t", "1.5s", "-P", "2", "-R", "-J", "-i", "500ms", "-O", "0.5"]),
        None,
        TIMEOUT,
    )
    .success();
    let r = report(&done.stdout);
    assert_eq!(r.direction, "download");
    assert_eq!(r.streams, 2);
    assert!(r.verified && !r.interrupted, "{r:#?}");
    assert!((0.4..2.0).contains(&r.omit_seconds), "omit: {r:#?}");
    assert!((0.5..8.0).contains(&r.seconds), "the measured time excludes the omitted 0.5 s: {r:#?}");
    // 0.5 s omitted (one interval), then 1.5 s in intervals of 0.5 s (and the end's remainder).
    let omitted = r.intervals.iter().filter(|i| i.omitted).count();
    let measured = r.intervals.iter().filter(|i| !i.omitted).count();
    assert_eq!(omitted, 1, "{:#?}", r.intervals);
    assert!((2..=8).contains(&measured), "{:#?}", r.intervals);
    for pair in r.intervals.windows(2) {
        assert!((pair[1].start - pair[0].end).abs() < 1e-6, "intervals are contiguous: {:#?}", r.intervals);
    }
    // The last interval may be a short remainder.
    for i in &r.intervals[..r.intervals.len() - 1] {
        assert!(i.bytes > 0 && i.bits_per_second > 0.0, "{i:#?}");
        let c = &i.connections[0];
        assert!(c.bytes_received >= i.bytes / 2, "the connection carried the payload: {i:#?}");
    }
    for i in &r.intervals {
        // One connection: its goodput is all of the interval's payload.
        assert_eq!(i.connections[0].payload_bytes, Some(i.bytes), "{i:#?}");
    }
    // On a download the sender's TCP figures are the server's (TCP Info frame, answered within
    // 200 ms, or left out of that interval).
    let with_tcp_info = r.intervals.iter().map(|i| &i.connections[0]).filter(|c| {
        c.rtt_us.is_some_and(|rtt| rtt > 0) && c.cwnd_segments.is_some_and(|w| w > 0) && c.retransmits.is_some()
    });
    assert!(with_tcp_info.count() >= 2, "the server's TCP_INFO in the intervals: {:#?}", r.intervals);
    let s = &r.summary[0];
    assert_eq!(s.direction, "download");
    let received = s.receiver.bytes.unwrap();
    let in_intervals: u64 = r.intervals.iter().filter(|i| !i.omitted).map(|i| i.bytes).sum();
    assert_eq!(received, in_intervals, "the summary is the sum of the measured intervals: {r:#?}");
    assert!(received < r.bytes, "the omitted second is left out of the summary: {r:#?}");
    // The server's sender line: what its streams' final sizes say it sent, at least what
    // arrived (in-flight bytes at the deadline are sent but not received).
    let sent = s.sender.bytes.unwrap_or_else(|| panic!("no sender bytes on a download: {r:#?}"));
    assert!(sent >= received && sent <= received + (64 << 20), "sent {sent}, received {received}");
    server.expect_exit();
}

/// Interval lines go to stdout when it is a pipe, one per connection and a [SUM], every -i.
#[test]
fn interval_lines_without_a_terminal_and_the_summary_lines() {
    let mut server = perf_server(1);
    let done = run(perf(&server).args(["--time", "1", "-i", "0.25", "-f", "m"]), None, TIMEOUT).success();
    let out = done.stdout_text();
    let sums = out.lines().filter(|l| l.starts_with("[SUM]") && l.contains("payload, verified")).count();
    assert!((3..=6).contains(&sums), "about four interval lines expected: {out}");
    assert!(out.lines().any(|l| l.starts_with("[  0]") && l.contains(" sec ")), "per-connection lines: {out}");
    let sender = out.lines().find(|l| l.ends_with(" sender")).unwrap_or_else(|| panic!("no sender line: {out}"));
    let receiver = out.lines().find(|l| l.contains(" receiver")).unwrap_or_else(|| panic!("no receiver line: {out}"));
    for line in [sender, receiver] {
        assert!(line.contains("Mbits/sec"), "-f m gives Mbits/sec: {line}");
    }
    assert!(receiver.contains("verified byte for byte"), "{out}");
    assert!(!out.contains("0.00 Gbits"), "{out}");
    server.expect_exit();
}

/// --bidir runs both directions; --bytes takes decimals (binary units); --logfile takes the output.
#[test]
fn bidir_with_a_fractional_size_into_a_logfile() {
    let dir = TempDir::new("perf-logfile");
    let log = dir.path().join("perf.json");
    let mut server = perf_server(1);
    let done = run(
        perf(&server).args(["--bidir", "--bytes", "1.5M", "-P", "2", "--json", "--logfile"]).arg(&log),
        None,
        TIMEOUT,
    )
    .success();
    assert!(done.stdout.is_empty(), "--logfile takes the output: {}", done.describe());
    let r = report(&std::fs::read(&log).unwrap());
    assert_eq!(r.direction, "bidir");
    assert_eq!(r.summary.len(), 2, "{r:#?}");
    let expected = 3 << 19; // 1.5 MiB per direction
    for s in &r.summary {
        assert!(s.verified, "{r:#?}");
        assert_eq!(s.receiver.bytes, Some(expected), "{} received: {r:#?}", s.direction);
    }
    assert_eq!(r.bytes, 2 * expected, "{r:#?}");
    server.expect_exit();
}

#[test]
fn bind_address_and_client_port() {
    let mut server = perf_server(2);
    let cport = free_port(LOCALHOST_V4);
    let done = run(
        perf(&server).args(["-B", "127.0.0.1", "--cport", &cport.to_string(), "--bytes", "1M", "--json"]),
        None,
        TIMEOUT,
    )
    .success();
    let r = report(&done.stdout);
    assert_eq!(r.connections[0].local.as_deref(), Some(format!("127.0.0.1:{cport}").as_str()), "{r:#?}");
    assert!(r.verified);
    // An interface instead of an address (SO_BINDTODEVICE), as for connect --bind.
    let done = run(perf(&server).args(["-B", "dev:lo", "--bytes", "1M", "--json"]), None, TIMEOUT).success();
    let r = report(&done.stdout);
    assert!(r.connections[0].local.as_deref().is_some_and(|l| l.starts_with("127.0.0.1:")), "{r:#?}");
    assert!(r.verified);
    server.expect_exit();
}

/// Ctrl-C prints what was done (and the JSON), exit status 130. Without --time or --bytes the
/// run would last 10 s.
#[test]
fn ctrl_c_prints_the_summary_and_exits_130() {
    let mut server = perf_server(2);
    for (json, way) in [(false, "--upload"), (true, "--download")] {
        let mut cmd = perf(&server);
        cmd.arg(way);
        if json {
            cmd.arg("--json");
        }
        let mut p = Proc::spawn(&mut cmd, false);
        if !json {
            p.stdout.wait_for(b"[SUM]", SHORT).unwrap_or_else(|e| panic!("{e}\n{}", p.diagnostics()));
        } else {
            // No output until the end: wait until the download is under way (a megabyte
            // received on the connection to the server), however slow the machine.
            downloading(server.addr.port(), &mut p);
        }
        p.interrupt();
        let status = p.wait(SHORT);
        assert_eq!(status.code(), Some(130), "exit status after Ctrl-C: {}", p.diagnostics());
        assert!(p.elapsed() < Duration::from_secs(8), "ended long after Ctrl-C: {}", p.diagnostics());
        // All of the output: the pipe's reader may lag behind the exit on a loaded machine.
        assert!(p.stdout.wait_eof(SHORT), "stdout did not end: {}", p.diagnostics());
        let out = p.stdout.text();
        if json {
            let r = report(out.as_bytes());
            assert!(r.interrupted && r.verified && r.bytes > 0, "{r:#?}");
        } else {
            assert!(out.contains(" receiver") && out.contains("interrupted"), "{}", p.diagnostics());
        }
    }
    server.expect_exit();
}

/// Waits until a connection to `port` on loopback has received a megabyte (`ss -ti`).
fn downloading(port: u16, p: &mut Proc) {
    let deadline = std::time::Instant::now() + SHORT;
    loop {
        let filter = format!("( dport = :{port} )");
        let out = std::process::Command::new("ss").args(["-Htni", "state", "established", &filter]).output();
        let text = out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
        let received = text
            .split_whitespace()
            .filter_map(|w| w.strip_prefix("bytes_received:"))
            .filter_map(|n| n.parse::<u64>().ok())
            .max()
            .unwrap_or(0);
        if received > 1 << 20 {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "no download under way: {text}\n{}", p.diagnostics());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn usage_errors_and_iperf3_hints_are_one_line() {
    let target = format!("127.0.0.1:{}", free_port(LOCALHOST_V4));
    for (args, needle) in [
        (vec!["--bytes", "0"], "--bytes must be above 0"),
        (vec!["-n", "0"], "--bytes must be above 0"),
        (vec!["-t", "0"], "--time must be above 0"),
        (vec!["-P", "0"], "--streams must be at least 1"),
        (vec!["--record-size", "100"], "--record-size 100 is out of range"),
    ] {
        let done = run(tcpls().args(["perf", &target, "--insecure"]).args(&args), None, SHORT);
        done.one_line_error(needle);
        assert_eq!(done.status.code(), Some(2), "a bad value is a usage error (docs/CLI.md): {}", done.describe());
    }
    for (args, needle) in [
        (vec!["-b", "10M"], "--rate-limit"),
        (vec!["-u"], "UDP"),
        (vec!["-l", "1400"], "--record-size"),
        (vec!["-C", "bbr"], "--peer-cc"),
    ] {
        let done = run(tcpls().args(["perf", "-c", "127.0.0.1"]).args(&args), None, SHORT);
        done.one_line_error(needle);
        assert_eq!(done.status.code(), Some(2), "a usage error: {}", done.describe());
        assert_eq!(done.stderr.matches(args[0]).count(), 1, "the option is named once: {}", done.describe());
    }
    let done = run(tcpls().args(["perf", &target, "--time", "soon"]), None, SHORT);
    assert_eq!(done.status.code(), Some(2), "{}", done.describe());
    assert!(done.stderr.contains("500ms"), "the error shows valid durations: {}", done.describe());
}

#[test]
fn migrate_at_beyond_the_run_warns() {
    let dir = TempDir::new("perf-migrate");
    let (cert, key) = make_cert(dir.path(), "c");
    let second = std::net::SocketAddr::new(
        std::net::IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 2)),
        free_port(std::net::IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 2))),
    );
    let mut server = serve_with_cert(LOCALHOST_V4, &cert, &key, &["--listen", &second.to_string(), "--sessions", "2"]);
    let base = |args: &[&str]| {
        let mut cmd = tcpls();
        cmd.arg("perf").arg(server.target()).arg("--ca").arg(&cert).args(["--path", &second.to_string()]).args(args);
        cmd
    };
    // Before the end: the report says when, and the first connection is closed.
    let done =
        run(&mut base(&["--migrate-at", "0.5", "--time", "1.5", "-i", "0.25", "--json"]), None, TIMEOUT).success();
    let r = report(&done.stdout);
    let m = r.migration.as_ref().unwrap_or_else(|| panic!("no migration reported: {r:#?}"));
    assert!(m.error.is_none() && (m.from, m.to) == (0, 1), "{r:#?}");
    assert!((0.4..1.5).contains(&m.at_seconds), "{r:#?}");
    assert!(!r.connections[0].open && r.connections[1].open, "connection 0 closed after the migration: {r:#?}");
    // The goodput moves from connection 0 to connection 1.
    let payload =
        |i: &Interval, id: u32| i.connections.iter().find(|c| c.id == id).and_then(|c| c.payload_bytes).unwrap_or(0);
    let first = &r.intervals[0];
    assert!(payload(first, 0) > 0, "{:#?}", r.intervals);
    let last = r.intervals.iter().rev().find(|i| i.bytes > 0).unwrap();
    assert!(payload(last, 1) > 0 && payload(last, 0) == 0, "{:#?}", r.intervals);
    assert!(r.verified);
    // After the end: a warning, and no migration in the report.
    let done = run(&mut base(&["--migrate-at", "5", "--time", "0.5", "--json"]), None, TIMEOUT).success();
    assert!(done.stderr.contains("warning") && done.stderr.contains("--migrate-at"), "{}", done.describe());
    assert!(report(&done.stdout).migration.is_none());
    server.expect_exit();
}

/// Both ends' path statistics: the server's come on a stats stream at the end of the run. On a
/// healthy loopback nothing fails over; each receiving end measured its longest stall (the
/// client's downloads, the server's uploads).
#[test]
fn both_ends_report_their_path_statistics() {
    let mut server = perf_server(1);
    let done = run(perf(&server).args(["--bidir", "--time", "1", "-P", "2", "--json"]), None, TIMEOUT).success();
    let r = report(&done.stdout);
    assert!(r.verified && r.undelivered.is_empty() && !r.ended_at_deadline && r.error.is_none(), "{r:#?}");
    let server_stats = r.server_stats.as_ref().unwrap_or_else(|| panic!("no server stats: {r:#?}"));
    assert!(r.server_stats_error.is_none(), "{r:#?}");
    for s in [&r.client_stats, server_stats] {
        assert_eq!((s.failovers, s.connections_lost, s.paths_suspected), (0, 0, 0), "{r:#?}");
        let stall = s.longest_stall_ms.unwrap_or_else(|| panic!("no stall measured: {r:#?}"));
        let one_stream = s.longest_stream_stall_ms.unwrap_or_else(|| panic!("no stream stall measured: {r:#?}"));
        assert!(stall > 0.0 && stall <= one_stream && one_stream < 1000.0, "{r:#?}");
    }
    // The stats stream is not a transfer: the server's session report does not count it.
    server.expect_exit();
}

/// SIGTERM ends a run as Ctrl-C does: the summary is printed, the exit status is 143 (128 +
/// SIGTERM), and the run says so.
#[test]
fn sigterm_prints_the_summary_and_exits_143() {
    let mut server = perf_server(1);
    let mut p = Proc::spawn(perf(&server).args(["--upload", "-i", "0.2"]), false);
    p.stdout.wait_for(b"[SUM]", SHORT).unwrap_or_else(|e| panic!("{e}\n{}", p.diagnostics()));
    let status = std::process::Command::new("kill").args(["-TERM", &p.id().to_string()]).status();
    assert!(status.is_ok_and(|s| s.success()), "cannot send SIGTERM");
    let status = p.wait(SHORT);
    assert_eq!(status.code(), Some(143), "exit status after SIGTERM: {}", p.diagnostics());
    assert!(p.elapsed() < Duration::from_secs(8), "ended long after SIGTERM: {}", p.diagnostics());
    let out = p.stdout.text();
    assert!(
        out.contains(" receiver  (verified byte for byte)") && out.contains("interrupted (SIGTERM)"),
        "{}",
        p.diagnostics()
    );
    server.expect_exit();
}

/// A server that stops answering mid-run (SIGSTOP: its sockets stay open, nothing moves): a
/// timed run still ends within its time plus 2 s, prints its summary with what was not
/// delivered, and fails with one line that says why.
#[test]
fn a_timed_run_ends_at_its_deadline_when_the_server_stops_answering() {
    let server = perf_server(1);
    const TIME: Duration = Duration::from_secs(2);
    let mut p = Proc::spawn(perf(&server).args(["--bidir", "-i", "0.2", "--time", "2"]), false);
    p.stdout.wait_for(b"[ RX]", SHORT).unwrap_or_else(|e| panic!("{e}\n{}", p.diagnostics()));
    let stop = |signal: &str| {
        let status = std::process::Command::new("kill").args([signal, &server.proc.id().to_string()]).status();
        assert!(status.is_ok_and(|s| s.success()), "cannot send {signal} to the server");
    };
    stop("-STOP");
    let status = p.wait(TIMEOUT);
    stop("-CONT");
    assert!(p.elapsed() <= TIME + Duration::from_secs(2), "ended after {:?}: {}", p.elapsed(), p.diagnostics());
    assert_eq!(status.code(), Some(1), "{}", p.diagnostics());
    let (out, err) = (p.stdout.text(), p.stderr.text());
    assert!(out.contains("not delivered: stream 0 (upload)") && out.contains(" receiver"), "{}", p.diagnostics());
    assert!(out.contains("server stats unavailable"), "{}", p.diagnostics());
    let last = err.trim().lines().last().unwrap_or_default();
    assert!(last.starts_with("tcpls: the run ended at its deadline"), "{}", p.diagnostics());
}
