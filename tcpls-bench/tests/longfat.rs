//! `tcpls-bench longfat --quick` end to end, as root: the namespace test bed, the emulated path,
//! the benchmark's processes inside the namespaces, the content checks, the delay jump and the
//! report. Prints `SKIPPED: <reason>` without root, namespaces or TUN.
#![allow(clippy::unwrap_used)]

use std::process::Command;

use serde_json::Value;

fn f64_at(v: &Value, key: &str) -> f64 {
    v[key].as_f64().unwrap_or_else(|| panic!("{key} missing in {v:#}"))
}

#[test]
fn longfat_quick_runs_every_protocol_in_both_scenarios() {
    if let Err(why) = tcpls_netem::check_support() {
        tcpls_netem::print_skipped("longfat_quick_runs_every_protocol_in_both_scenarios", &why);
        return;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_tcpls-bench"))
        .args(["longfat", "--quick", "--json", "--timeout", "60"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "tcpls-bench longfat failed: {stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("bad JSON: {e}\n{stderr}"));
    assert_eq!(report["content_verified"], Value::Bool(true));
    let scenarios = report["scenarios"].as_array().unwrap();
    let names: Vec<&str> = scenarios.iter().map(|s| s["scenario"].as_str().unwrap()).collect();
    assert_eq!(names, ["steady", "jump"]);
    for scenario in scenarios {
        let jump = scenario["scenario"] == "jump";
        let bytes = scenario["bytes"].as_u64().unwrap();
        assert_eq!(scenario["congestion_control"], "cubic");
        let results = scenario["results"].as_array().unwrap();
        let protos: Vec<&str> = results.iter().map(|r| r["protocol"].as_str().unwrap()).collect();
        assert_eq!(protos, ["tcp", "tcpls", "tcpls-64"], "{scenario:#}");
        for r in results {
            assert!(f64_at(r, "median_gbit_s") > 0.0, "{r:#}");
            assert!(f64_at(r, "ratio_to_tcp") > 0.0, "{r:#}");
            assert!(f64_at(r, "median_sender_peak_rss_mib") > 0.0, "{r:#}");
            let sample = &r["samples"][0];
            assert_eq!(sample["verified"], Value::Bool(true), "{r:#}");
            // Every data packet crossed the emulator: at least one per 1500 bytes.
            let packets = sample["emulator"]["delivered_packets"].as_u64().unwrap();
            assert!(packets >= bytes / 1500, "{packets} packets for {bytes} bytes: {r:#}");
            if jump {
                // The delay changed during the transfer, with bytes received on both sides of it.
                assert!(f64_at(sample, "jump_at_s") > 0.0, "{r:#}");
                assert!(f64_at(sample, "before_jump_gbit_s") > 0.0, "{r:#}");
                assert!(f64_at(sample, "after_jump_gbit_s") > 0.0, "{r:#}");
            }
        }
    }
}
