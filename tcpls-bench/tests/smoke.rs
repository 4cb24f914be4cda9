//! The benchmark subcommands run end to end on small sizes and report consistent numbers:
//! real processes, real sockets (TCP and UDP on loopback), real rustls and quinn.
#![allow(clippy::unwrap_used)]

use std::process::Command;

use serde_json::Value;

fn bench(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_tcpls-bench")).args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "tcpls-bench {args:?} failed: {stderr}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("bad JSON from {args:?}: {e}\n{stderr}"))
}

fn u64_at(v: &Value, key: &str) -> u64 {
    v[key].as_u64().unwrap_or_else(|| panic!("{key} missing in {v:#}"))
}

#[test]
fn compare_runs_quic_and_every_tcpls_variant() {
    const BYTES: u64 = 16 << 20;
    let report = bench(&[
        "compare",
        "--bytes",
        "16M",
        "--reps",
        "1",
        "--timeout",
        "60",
        "--protos",
        "tls,quic,tcpls,tcpls-noack,tcpls-agg2,tcpls-nozc",
        "--json",
    ]);
    let results = report["results"].as_array().unwrap();
    let names: Vec<&str> = results.iter().map(|r| r["protocol"].as_str().unwrap()).collect();
    assert_eq!(names, ["tls", "quic", "tcpls", "tcpls-noack", "tcpls-agg2", "tcpls-nozc"]);
    for r in results {
        assert!(r["median_gbit_s"].as_f64().unwrap() > 0.0, "{r:#}");
        assert!(r["ratio_to_tls"].as_f64().unwrap() > 0.0, "{r:#}");
        assert!(r["ratio_to_quic"].as_f64().unwrap() > 0.0, "{r:#}");
        assert!(r["cpu_s_per_gib"]["total"].as_f64().unwrap() > 0.0, "{r:#}");
        let name = r["protocol"].as_str().unwrap();
        if !name.starts_with("tcpls") {
            assert!(r.get("zero_copy_bytes").is_none(), "{r:#}");
            continue;
        }
        // Every stream byte was received either in place or by copy, exactly once.
        assert_eq!(u64_at(r, "zero_copy_bytes") + u64_at(r, "copied_bytes"), BYTES, "{r:#}");
        let sample = &r["samples"][0]["receiver_tcpls"];
        let conns = sample["connection_bytes"].as_array().unwrap();
        match name {
            "tcpls-nozc" => assert_eq!(u64_at(r, "zero_copy_bytes"), 0, "{r:#}"),
            "tcpls-agg2" => {
                assert_eq!(conns.len(), 2, "{r:#}");
                let total: u64 = conns.iter().map(|c| c.as_u64().unwrap()).sum();
                assert!(total > BYTES, "records carry at least the stream bytes: {r:#}");
            }
            _ => assert_eq!(conns.len(), 1, "{r:#}"),
        }
    }
}

#[test]
fn scale_holds_every_session() {
    let report = bench(&["scale", "--sessions", "300", "--handshakes", "20", "--json"]);
    assert_eq!(report["sessions_limited_by_fd"].as_bool(), Some(false), "{report:#}");
    let results = report["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    for r in results {
        assert_eq!(u64_at(r, "handshakes"), 20, "{r:#}");
        assert_eq!(u64_at(r, "sessions"), 300, "{r:#}");
        assert_eq!(u64_at(r, "sessions_open_at_server"), 300, "{r:#}");
        assert_eq!(u64_at(r, "sessions_alive"), 300, "{r:#}");
        assert!(r["server_cpu_us_per_handshake"].as_f64().unwrap() > 0.0, "{r:#}");
        assert!(r["ttfb_median_us"].as_f64().unwrap() > 0.0, "{r:#}");
        assert!(r["ttfb_p90_us"].as_f64().unwrap() >= r["ttfb_median_us"].as_f64().unwrap(), "{r:#}");
    }
}

#[test]
fn scale_sessions_follow_the_open_file_limit() {
    // A hard limit of 700 open files (bash's `ulimit -n` sets both limits; nobody may raise the
    // hard one again): --sessions 5000 is lowered to 700 - 256 kept for the rest, and every one
    // of those sessions is held and answers.
    let bin = env!("CARGO_BIN_EXE_tcpls-bench");
    let script = format!("ulimit -n 700 && exec '{bin}' scale --sessions 5000 --handshakes 5 --protos tcpls --json");
    let out = Command::new("bash").args(["-c", &script]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("--sessions 5000 lowered to 444"), "{stderr}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(u64_at(&report, "sessions_fd_limit"), 700, "{report:#}");
    assert_eq!(report["sessions_limited_by_fd"].as_bool(), Some(true), "{report:#}");
    let r = &report["results"][0];
    for key in ["sessions", "sessions_open_at_server", "sessions_alive"] {
        assert_eq!(u64_at(r, key), 444, "{key}: {r:#}");
    }
}

#[test]
fn recv_cpu_counts_both_paths() {
    for (mode, zero_copy) in [("on", true), ("off", false)] {
        let r = bench(&["recv-cpu", "--zero-copy", mode, "--bytes", "4M", "--json"]);
        assert_eq!(r["zero_copy"].as_bool(), Some(zero_copy));
        assert_eq!(r["verified"].as_bool(), Some(true), "{r:#}");
        assert_eq!(u64_at(&r, "zero_copy_bytes") + u64_at(&r, "copied_bytes"), 4 << 20, "{r:#}");
        if !zero_copy {
            assert_eq!(u64_at(&r, "zero_copy_bytes"), 0, "{r:#}");
        }
    }
}
