//! `tcpls probe` and the extension options of `tcpls perf` (`--rate-limit`, `--peer-cc`,
//! `--user-timeout`) against `tcpls serve` on loopback.
#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use serde_json::Value;
use support::*;

const TIMEOUT: Duration = Duration::from_secs(60);

fn server(dir: &TempDir) -> (Server, std::path::PathBuf) {
    let (cert, key) = make_cert(dir.path(), "c");
    let server = serve_with_cert(LOCALHOST_V4, &cert, &key, &[]);
    (server, cert)
}

#[test]
fn probe_json_reports_rtt_peer_tcp_info_and_no_nat_on_loopback() {
    let dir = TempDir::new("probe");
    let (server, cert) = server(&dir);
    let v = run(
        tcpls().arg("probe").arg(server.target()).arg("--ca").arg(&cert).args([
            "--rtt",
            "--tcp-info",
            "--nat",
            "--json",
        ]),
        None,
        TIMEOUT,
    )
    .success()
    .json();
    let conns = v["connections"].as_array().unwrap();
    assert_eq!(conns.len(), 1, "{v:#}");
    let c = &conns[0];
    let rtt = c["rtt_us"].as_u64().unwrap();
    assert!(rtt > 0 && rtt < 200_000, "loopback RTT {rtt} µs: {v:#}");
    let peer_rtt = c["peer_tcp_info"]["rtt_us"].as_u64().unwrap();
    assert!(peer_rtt > 0 && peer_rtt < 200_000, "{v:#}");
    assert!(c["peer_tcp_info"]["cwnd"].as_u64().unwrap() >= 1, "{v:#}");
    assert_eq!(c["nat_detected"], Value::Bool(false), "{v:#}");
    assert_eq!(c["seen_by_peer"], c["local"], "{v:#}");
}

fn perf(server: &Server, cert: &std::path::Path, args: &[&str]) -> Value {
    run(tcpls().arg("perf").arg(server.target()).arg("--ca").arg(cert).args(args).arg("--json"), None, TIMEOUT)
        .success()
        .json()
}

#[test]
fn perf_rate_limit_200m_runs_within_25_percent_both_ways() {
    let dir = TempDir::new("ratelimit");
    let (server, cert) = server(&dir);
    for direction in ["--download", "--upload"] {
        let v = perf(&server, &cert, &["--rate-limit", "200M", "--time", "2", direction]);
        assert_eq!(v["verified"], Value::Bool(true), "{v:#}");
        let goodput = v["goodput_bps"].as_f64().unwrap();
        // goodput_bps is what the receiver verified within the 2 s (a timed run ends at its
        // deadline); on a loaded 2-core machine the pacer delivers 5-10 % below its rate.
        let error = (goodput - 200e6).abs() / 200e6;
        assert!(error < 0.25, "{direction}: {goodput:.0} bit/s for a 200 Mbit/s limit");
    }
}

#[test]
fn perf_peer_cc_is_applied_by_the_server_and_refused_outside_its_policy() {
    let dir = TempDir::new("peercc");
    let (mut server, cert) = server(&dir);
    let v = perf(&server, &cert, &["--peer-cc", "reno", "--user-timeout", "5000", "--bytes", "16M", "--download"]);
    assert_eq!(v["verified"], Value::Bool(true), "{v:#}");
    server.proc.stderr.wait_for(b"congestion_control set to reno", SHORT).unwrap();
    server.proc.stderr.wait_for(b"user_timeout set to 5000", SHORT).unwrap();
    let v = perf(&server, &cert, &["--peer-cc", "vegas", "--bytes", "1M"]);
    assert_eq!(v["verified"], Value::Bool(true), "a refused request does not fail the transfer: {v:#}");
    server.proc.stderr.wait_for(b"congestion_control vegas refused", SHORT).unwrap();
}

#[test]
fn perf_rejects_a_zero_rate_limit_and_a_bad_cc_name() {
    let dir = TempDir::new("badext");
    let (server, cert) = server(&dir);
    let out =
        run(tcpls().arg("perf").arg(server.target()).arg("--ca").arg(&cert).args(["--rate-limit", "0"]), None, TIMEOUT);
    out.one_line_error("--rate-limit");
    let out = run(
        tcpls().arg("perf").arg(server.target()).arg("--ca").arg(&cert).args(["--peer-cc", "no such"]),
        None,
        TIMEOUT,
    );
    out.one_line_error("--peer-cc");
}
