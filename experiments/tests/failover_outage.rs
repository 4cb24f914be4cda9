//! `experiments failover-outage --quick` in the namespace test bed (root): after a RST on the
//! active path TCPLS resumes within a few RTTs; after a blackhole within the 250 ms user timeout
//! plus the time Linux takes to notice it (it checks TCP_USER_TIMEOUT only when a retransmission
//! timer fires, see docs/PERFORMANCE.md "blackhole"), and within 250 ms plus a few RTTs when
//! TCPLS's own keepalive detects it (100 ms + 150 ms Ping timeout); MPTCP is measured next to it; every
//! transfer is content-verified; the CSV/PNG/JSON are written.
//! Without namespaces or MPTCP: prints `SKIPPED: reason` and returns.
#![allow(clippy::unwrap_used)]

mod support;

#[test]
fn tcpls_recovers_from_a_rst_and_a_blackhole() {
    if !support::supported("failover_outage::tcpls_recovers_from_a_rst_and_a_blackhole", true) {
        return;
    }
    let out = support::OutDir::new("failover-outage");
    let trace = out.0.join("trace.jsonl");
    let s = support::run_quick_with("failover-outage", &out.0, &["--trace".as_ref(), trace.as_os_str()]);
    eprintln!("{s:#}");
    support::check_outputs(&out.0, "failover-outage", &s, &["TCPLS (user timeout 250 ms)", "MPTCP (backup subflow)"]);
    assert_eq!(s["verified"], true, "every transfer verified byte by byte");
    for k in ["tcpls_rst", "tcpls_blackhole", "tcpls_blackhole_keepalive", "mptcp_rst", "mptcp_blackhole"] {
        assert_eq!(s[k]["verified"], true, "{k}");
        assert_eq!(s[k]["bytes"], s["bytes"], "{k} received everything");
    }
    for k in ["tcpls_rst", "tcpls_blackhole", "tcpls_blackhole_keepalive"] {
        assert!(s[k]["detail"]["sender_failovers"].as_u64().unwrap() >= 1, "{k}: the sender failed over");
    }
    // Paths: 10 ms one way, so RTT 20 ms idle, up to ≈ 70 ms with a full 100-packet queue;
    // measured 50-160 ms on a busy machine. The bound is about four loaded RTTs.
    let rst = s["tcpls_recovery_ms_rst"].as_f64().unwrap();
    assert!(rst < 300.0, "RST recovery {rst} ms: expected a few RTTs");
    let blackhole = s["tcpls_recovery_ms_blackhole"].as_f64().unwrap();
    assert!(
        (250.0..1500.0).contains(&blackhole),
        "blackhole recovery {blackhole} ms: expected the 250 ms user timeout plus up to the next RTO (≈ 660 ms measured)"
    );
    // The kernel gave up on the blackholed socket (user timeout) before data resumed.
    let failed = &s["tcpls_blackhole"]["detail"]["sender_socket_failed_ms_between"];
    assert!(failed[1].as_f64().unwrap() <= blackhole + 200.0, "socket failed {failed} ms, data resumed {blackhole} ms");
    // TCPLS keepalive: about 250 ms of silence, then the re-sent records cross the other path
    // (measured ≈ 300 ms); the bound allows a loaded machine.
    let keepalive = s["tcpls_recovery_ms_blackhole_keepalive"].as_f64().unwrap();
    assert!(
        (200.0..500.0).contains(&keepalive),
        "blackhole recovery with keepalive {keepalive} ms: expected ≈ 250 ms + a few RTTs"
    );
    assert!(s["mptcp_recovery_ms_rst"].is_number() && s["mptcp_recovery_ms_blackhole"].is_number(), "{s}");
    check_trace(&trace);
}

/// The `--trace` file: the three TCPLS runs, each a client and a server session. Every sender
/// (server) lost connection 0, failed over with records re-sent, and its connection 1 carried
/// bytes after the loss; each session's time goes forward.
fn check_trace(path: &std::path::Path) {
    let sessions = experiments::trace_plot::read(path).unwrap();
    let sides: Vec<&str> = sessions.values().map(|s| s.side.as_str()).collect();
    assert_eq!(sides, ["client", "server", "client", "server", "client", "server"], "three TCPLS runs");
    for s in sessions.values().filter(|s| s.side == "server") {
        let find = |name: &str| s.events.iter().find(|e| e.1 == name);
        let lost = find("connection_lost").unwrap_or_else(|| panic!("session {}: no connection_lost", s.session));
        assert_eq!(lost.2["conn"], 0, "the active path's connection was lost");
        let failover = find("failed_over").unwrap_or_else(|| panic!("session {}: no failed_over", s.session));
        assert!(failover.2["records_resent_total"].as_u64().unwrap() > 0, "records re-sent: {:?}", failover.2);
        let conn1 = |e: &&(f64, String, serde_json::Value)| e.1 == "connection_sample" && e.2["conn"] == 1;
        let sent = |e: &(f64, String, serde_json::Value)| e.2["bytes_sent"].as_u64().unwrap();
        let before = s.events.iter().filter(conn1).filter(|e| e.0 <= lost.0).map(sent).max().unwrap_or(0);
        let after = s.events.iter().filter(conn1).map(sent).max().unwrap();
        assert!(
            after > before + 1_000_000,
            "session {}: connection 1 carried the rest: {before} then {after}",
            s.session
        );
        assert!(s.events.windows(2).all(|w| w[0].0 <= w[1].0), "session {}: time goes forward", s.session);
    }
}
