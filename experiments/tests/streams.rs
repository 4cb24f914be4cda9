//! `experiments streams --quick` (loopback, no root needed): every transfer over 1..1000
//! streams arrives byte-exact in every sending order, each record costs exactly one decryption
//! (v2 framing; TCPLS v1 needed up to one per stream), goodput and CPU are measured, and the
//! CSV/PNG/JSON are written.
#![allow(clippy::unwrap_used)]

mod support;

#[test]
fn one_decryption_per_record_whatever_the_number_of_streams_and_their_order() {
    let out = support::OutDir::new("streams");
    let s = support::run_quick("streams", &out.0);
    eprintln!("{s:#}");
    let orders = [
        "sequential (one stream after the other)",
        "round-robin from the first stream",
        "round-robin from the last stream",
    ];
    support::check_outputs(&out.0, "streams", &s, &orders);
    assert_eq!(s["verified"], true, "every transfer verified byte by byte");
    let counts: Vec<u64> = s["stream_counts"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    assert!(counts.contains(&1) && counts.contains(&1000), "{counts:?}");
    for key in ["sequential", "rr_first", "rr_last"] {
        let points = s["results"][key].as_array().unwrap();
        assert_eq!(points.len(), counts.len(), "{key}");
        for p in points {
            let n = p["streams"].as_u64().unwrap();
            assert_eq!(p["verified"], true, "{key}, {n} streams");
            // Counted: every record sent was decrypted once, none failed.
            assert_eq!(p["failed_decryptions"], 0, "{key}, {n} streams");
            assert_eq!(p["records_decrypted"], p["records_sent"], "{key}, {n} streams");
            assert_eq!(p["decryptions_per_record"].as_f64().unwrap(), 1.0, "{key}, {n} streams");
            // At least one record per stream went out (the count covered every stream).
            assert!(p["records_sent"].as_u64().unwrap() >= n, "{key}, {n} streams: {p}");
            assert!(p["goodput_gbps"].as_f64().unwrap() > 0.0, "{key}, {n} streams");
            let cpu = p["cpu_s_per_gib"].as_f64();
            assert!(cpu.is_none_or(|c| c > 0.0), "{key}, {n} streams: CPU {cpu:?}");
        }
        assert_eq!(points[0]["time_relative_to_1_stream"].as_f64().unwrap(), 1.0);
    }
    assert_eq!(s["max_decryptions_per_record"].as_f64().unwrap(), 1.0);
}
