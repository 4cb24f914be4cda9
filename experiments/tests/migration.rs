//! `experiments migration --quick` in the namespace test bed (root): a download migrated from
//! path 0 to path 1 and back (on a third connection) arrives complete and byte-exact, each
//! connection carried its share, and goodput stays at the link rate in every phase.
//! Without namespaces or MPTCP: prints `SKIPPED: reason` and returns.
#![allow(clippy::unwrap_used)]

mod support;

#[test]
fn a_download_migrated_there_and_back_loses_nothing_and_keeps_its_rate() {
    if !support::supported("migration::a_download_migrated_there_and_back_loses_nothing_and_keeps_its_rate", false) {
        return;
    }
    let out = support::OutDir::new("migration");
    let s = support::run_quick("migration", &out.0);
    eprintln!("{s:#}");
    support::check_outputs(&out.0, "migration", &s, &["TCPLS"]);
    assert_eq!(s["verified"], true, "the download was verified byte by byte");
    let bytes = s["bytes"].as_u64().unwrap();
    let per_conn: Vec<u64> =
        s["bytes_received_per_connection"].as_array().unwrap().iter().map(|c| c["bytes"].as_u64().unwrap()).collect();
    assert_eq!(per_conn.len(), 3, "two migrations, each to a new connection: {per_conn:?}");
    assert!(per_conn.iter().all(|b| *b > bytes / 10), "every connection carried a share: {per_conn:?}");
    // 30 Mbit/s of IP bytes = 28.96 Mbit/s of TCP payload; no phase may collapse.
    let link_payload = 30.0 * 1448.0 / 1500.0;
    for phase in s["phase_mbps"].as_array().unwrap() {
        let v = phase.as_f64().unwrap();
        assert!(v > 0.8 * link_payload, "phase goodput {v} Mbit/s: {}", s["phase_mbps"]);
    }
    assert!(s["mean_mbps"].as_f64().unwrap() > 0.8 * link_payload);
}
