//! `experiments silent-path --quick` in the namespace test bed (root): path 0 of two is
//! dropped both ways during an upload; TCPLS and MPTCP both deliver every byte (verified), the
//! longest stall and the total time of each are measured, the CSV/PNG/JSON are written.
//! Without namespaces or MPTCP: prints `SKIPPED: reason` and returns.
#![allow(clippy::unwrap_used)]

mod support;

#[test]
fn tcpls_and_mptcp_deliver_everything_when_a_path_goes_silent() {
    if !support::supported("silent_path::tcpls_and_mptcp_deliver_everything_when_a_path_goes_silent", true) {
        return;
    }
    let out = support::OutDir::new("silent-path");
    let s = support::run_quick("silent-path", &out.0);
    eprintln!("{s:#}");
    support::check_outputs(
        &out.0,
        "silent-path",
        &s,
        &["TCPLS (loss detection from record ACKs)", "MPTCP (two subflows; default scheduler)"],
    );
    assert_eq!(s["verified"], true, "every transfer verified byte by byte");
    for k in ["tcpls", "mptcp"] {
        assert_eq!(s[k]["bytes"], s["bytes"], "{k} delivered everything");
        let stall = s[format!("{k}_longest_stall_ms")].as_f64().unwrap();
        assert!(stall > 0.0, "{k}: a stall was measured");
    }
    // TCPLS gives the silent path up on its own record ACKs: the stall stays within a second
    // (the netns_silent_path tests bound it per scenario).
    let tcpls = s["tcpls_longest_stall_ms"].as_f64().unwrap();
    assert!(tcpls <= 1000.0, "TCPLS stalled {tcpls} ms after the path went silent");
}
