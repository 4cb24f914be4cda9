//! `experiments aggregation --quick` in the namespace test bed (root): TCPLS aggregates two
//! 25 Mbit/s paths to at least 90 % of their sum once the second path is up, MPTCP is measured
//! next to it, every transfer is content-verified, and the CSV/PNG/JSON are written.
//! Without namespaces or MPTCP: prints `SKIPPED: reason` and returns.
#![allow(clippy::unwrap_used)]

mod support;

#[test]
fn tcpls_aggregates_two_paths_to_90_percent_of_their_sum() {
    if !support::supported("aggregation::tcpls_aggregates_two_paths_to_90_percent_of_their_sum", true) {
        return;
    }
    let out = support::OutDir::new("aggregation");
    let s = support::run_quick("aggregation", &out.0);
    eprintln!("{s:#}");
    support::check_outputs(&out.0, "aggregation", &s, &["MPTCP", "TCPLS 16 KiB records", "TCPLS 1500 B records"]);
    assert_eq!(s["verified"], true, "every transfer verified byte by byte");
    for k in ["mptcp", "tcpls", "tcpls_1500"] {
        assert_eq!(s[k]["verified"], true, "{k}");
        assert_eq!(s[k]["bytes"], s["bytes"], "{k} received everything");
    }
    let links: f64 = s["link_mbps"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).sum();
    let tcpls = s["tcpls_mbps"].as_f64().unwrap();
    assert!(tcpls >= 0.9 * links, "TCPLS reached {tcpls} Mbit/s of {links}");
    // Both connections carried a fair share (the scheduler really spread the stream).
    let per_conn: Vec<u64> = s["tcpls"]["detail"]["bytes_received_per_connection"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert_eq!(per_conn.len(), 2, "{per_conn:?}");
    assert!(per_conn[1] > s["bytes"].as_u64().unwrap() / 5, "second connection carried {per_conn:?}");
    // Sanity: the single-path phase is about one link, and MPTCP aggregates too (no threshold:
    // it is the reference, not the system under test).
    let single = s["tcpls"]["single_path_mbps"].as_f64().unwrap();
    assert!(single < 0.6 * links, "before the second path: {single} Mbit/s");
    assert!(s["mptcp_mbps"].as_f64().unwrap() > 0.0);
}
