//! `tcpls perf --zero-rtt` against `tcpls serve --mode perf`, as processes over loopback: the
//! measured session resumes a ticket fetched by a warm-up session and its request goes as early
//! data; the transfer is verified byte for byte.
#![allow(clippy::unwrap_used)]

mod support;

use serde_json::Value;
use support::{make_cert, run, serve_with_cert, tcpls, TempDir, LOCALHOST_V4, TIMEOUT};

fn perf(server: &support::Server, ca: &std::path::Path, args: &[&str]) -> Value {
    let mut cmd = tcpls();
    cmd.arg("perf").arg(server.target()).arg("--ca").arg(ca).args(args).arg("--json");
    run(&mut cmd, None, TIMEOUT).success().json()
}

#[test]
fn perf_zero_rtt_resumes_and_its_early_data_is_accepted() {
    let dir = TempDir::new("zero-rtt");
    let (cert, key) = make_cert(dir.path(), "z");
    let server = serve_with_cert(LOCALHOST_V4, &cert, &key, &["--mode", "perf"]);
    for direction in [&[][..], &["--download"][..]] {
        let mut args = vec!["--zero-rtt", "--bytes", "3M"];
        args.extend_from_slice(direction);
        let v = perf(&server, &cert, &args);
        assert_eq!(v["verified"], Value::Bool(true), "{v:#}");
        assert_eq!(v["bytes"].as_u64(), Some(3 << 20), "{v:#}");
        assert_eq!(v["resumed"], Value::Bool(true), "{v:#}");
        assert_eq!(v["early_data_accepted"], Value::Bool(true), "{v:#}");
    }
    // Without --zero-rtt: a fresh process has no ticket.
    let v = perf(&server, &cert, &["--bytes", "1M"]);
    assert_eq!((&v["resumed"], &v["early_data_accepted"]), (&Value::Bool(false), &Value::Bool(false)), "{v:#}");
}
