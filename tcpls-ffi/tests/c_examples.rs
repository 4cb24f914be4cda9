//! The C examples (examples/c/client.c and server.c), compiled with `cc` against libtcpls, with
//! the Rust CLI on the other side, both ways: the C client with `tcpls serve`, and `tcpls perf` /
//! `tcpls connect` with the C server. The bulk tests move 100 MB over 4 streams and two paths
//! (127.0.0.1 and 127.0.0.2), drop one path in the middle, and check every byte. Without `cc`
//! they print SKIPPED.
#![allow(clippy::unwrap_used)]

mod support;

use std::process::Command;

use support::*;

const BULK: &str = "100M";
const BULK_BYTES: u64 = 100 << 20;
/// Where the second path is dropped: in the middle.
const HALF: &str = "50M";

fn skip(test: &str) -> Option<&'static Examples> {
    match examples() {
        Ok(ex) => Some(ex),
        Err(why) => {
            eprintln!("SKIPPED: {test}: {why}");
            None
        }
    }
}

/// The C client against `tcpls serve` over two paths, the second dropped halfway.
fn c_client_bulk(ex: &Examples, serve_args: &[&str], mode: &str) {
    let (server, first, second) = tcpls_serve(
        &[&["--cert", ex.cert().to_str().unwrap(), "--key", ex.key().to_str().unwrap()], serve_args].concat(),
    );
    let out = run(
        Command::new(&ex.client)
            .arg("--ca")
            .arg(ex.cert())
            .args(["--server-name", "localhost", "--path", &format!("127.0.0.2@{second}")])
            .args(["--streams", "4", "--bytes", BULK, "--mode", mode, "--round-robin", "--abandon-path-at", HALF])
            .arg("--json")
            .arg(&first),
        b"",
    );
    assert!(out.status.success(), "{}\n--- server:\n{}", describe(&out), server.stderr_text());
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains(&format!("\"bytes\": {BULK_BYTES}")) && report.contains("\"verified\": true"), "{report}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("abandoned path 1 after"), "the second path was dropped mid-transfer: {stderr}");
    assert!(report.contains("\"paths_down\": 1"), "the client saw the path go down: {report}");
}

#[test]
fn c_client_uploads_100_mb_to_tcpls_serve_which_verifies_every_byte_across_a_lost_path() {
    let Some(ex) = skip("c_client_uploads_100_mb") else { return };
    // `tcpls serve` (perf mode) checks each stream against the pattern and reports; the client
    // fails unless every stream's report says all its bytes arrived verified.
    c_client_bulk(ex, &[], "upload");
}

#[test]
fn c_client_downloads_100_mb_from_tcpls_serve_and_verifies_every_byte_across_a_lost_path() {
    let Some(ex) = skip("c_client_downloads_100_mb") else { return };
    c_client_bulk(ex, &[], "download");
}

#[test]
fn c_client_gets_100_mb_echoed_by_tcpls_serve_byte_for_byte_across_a_lost_path() {
    let Some(ex) = skip("c_client_gets_100_mb_echoed") else { return };
    c_client_bulk(ex, &["--mode", "echo"], "echo");
}

/// `tcpls perf` against the C server (perf mode) over two paths; the server drops the second
/// one halfway.
fn perf_against_c_server(ex: &Examples, download: bool) {
    let (server, first, second) = c_server(ex, &["--mode", "perf", "--abandon-path-at", HALF]);
    let mut cmd = tcpls();
    cmd.args(["perf", &first, "--path", &format!("127.0.0.2@{second}"), "--streams", "4", "--bytes", BULK])
        .arg("--ca")
        .arg(ex.cert())
        .args(["--server-name", "localhost", "--json"]);
    if download {
        cmd.arg("--download");
    }
    let out = run(&mut cmd, b"");
    assert!(out.status.success(), "{}\n--- C server:\n{}", describe(&out), server.stderr_text());
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["verified"], true, "{report}");
    assert_eq!(report["bytes"], BULK_BYTES, "{report}");
    assert_eq!(report["connections"].as_array().map(|c| c.len()), Some(2), "two paths: {report}");
    let log = server.stderr_text();
    assert!(log.contains("abandoned path 1 after"), "the C server dropped the second path: {log}");
}

#[test]
fn tcpls_perf_downloads_100_mb_from_the_c_server_verifying_every_byte_across_a_lost_path() {
    let Some(ex) = skip("tcpls_perf_downloads_100_mb") else { return };
    perf_against_c_server(ex, true);
}

#[test]
fn tcpls_perf_uploads_100_mb_to_the_c_server_which_verifies_every_byte_across_a_lost_path() {
    let Some(ex) = skip("tcpls_perf_uploads_100_mb") else { return };
    // The C server checks every byte against the pattern and reports; `tcpls perf` fails on a
    // report that is not verified.
    perf_against_c_server(ex, false);
}

#[test]
fn tcpls_connect_gets_its_input_echoed_by_the_c_server_over_two_paths() {
    let Some(ex) = skip("tcpls_connect_gets_its_input_echoed") else { return };
    let (server, first, second) = c_server(ex, &["--mode", "echo"]);
    let input = tcpls_test::payload(3 << 20, 11);
    let out = run(
        tcpls()
            .args(["connect", &first, "--path", &second])
            .arg("--ca")
            .arg(ex.cert())
            .args(["--server-name", "localhost"]),
        &input,
    );
    assert!(out.status.success(), "{}\n--- C server:\n{}", describe(&out), server.stderr_text());
    assert!(out.stdout == input, "the echo differs: {} bytes back of {}", out.stdout.len(), input.len());
}

#[test]
fn the_c_client_says_what_to_do_about_a_wrong_ca() {
    let Some(ex) = skip("the_c_client_says_what_to_do_about_a_wrong_ca") else { return };
    let (_server, first, _) = tcpls_serve(&[]); // its own self-signed certificate
    let out = run(Command::new(&ex.client).arg("--ca").arg(ex.cert()).arg(&first), b"");
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("TCPLS_ERR_TLS") && stderr.contains("tcpls_config_set_ca_file"), "{stderr}");
}

#[test]
fn the_pkg_config_file_points_at_the_header_and_the_release_library() {
    if Command::new("pkg-config").arg("--version").output().is_err() {
        eprintln!(
            "SKIPPED: the_pkg_config_file_points_at_the_header_and_the_release_library: pkg-config is not installed"
        );
        return;
    }
    let crate_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("pkg-config")
        .env("PKG_CONFIG_PATH", crate_dir)
        .args(["--cflags", "--libs", "tcpls"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", describe(&out));
    let flags = String::from_utf8_lossy(&out.stdout).into_owned();
    let include = flags.split_whitespace().find_map(|f| f.strip_prefix("-I")).unwrap();
    assert!(std::path::Path::new(include).join("tcpls.h").is_file(), "{flags}");
    let libdir = flags.split_whitespace().find_map(|f| f.strip_prefix("-L")).unwrap();
    assert_eq!(
        std::fs::canonicalize(libdir).ok(),
        std::fs::canonicalize(workspace().join("target/release")).ok(),
        "{flags}"
    );
    assert!(flags.contains("-ltcpls"), "{flags}");
}

/// Why `ss -K` cannot reset connections here, if it cannot (it needs root and a kernel with
/// socket destroy support; without CAP_NET_ADMIN it silently does nothing).
fn cannot_kill_sockets() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let root = status.lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"));
    if !root {
        return Some("not root: `ss -K` needs CAP_NET_ADMIN".into());
    }
    match Command::new("ss").args(["-K", "dst", "127.0.0.254"]).output() {
        Ok(out) if out.status.success() => None,
        Ok(out) => Some(format!("ss -K failed: {}", String::from_utf8_lossy(&out.stderr).trim())),
        Err(e) => Some(format!("ss is not installed: {e}")),
    }
}

/// Bytes the kernel says were acknowledged on the TCP connections to `dst` (`ss -tin`).
fn bytes_acked_to(dst: &str) -> u64 {
    let (ip, port) = dst.rsplit_once(':').unwrap();
    let out = Command::new("ss").args(["-tinH", "dst", ip, "dport", "=", &format!(":{port}")]).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("bytes_acked:"))
        .filter_map(|n| n.parse::<u64>().ok())
        .sum()
}

#[test]
fn c_client_upload_survives_the_kernel_resetting_one_path_mid_transfer() {
    let Some(ex) = skip("c_client_upload_survives_the_kernel_resetting_one_path") else { return };
    if let Some(why) = cannot_kill_sockets() {
        eprintln!("SKIPPED: c_client_upload_survives_the_kernel_resetting_one_path: {why}");
        return;
    }
    let (server, first, second) =
        tcpls_serve(&["--cert", ex.cert().to_str().unwrap(), "--key", ex.key().to_str().unwrap()]);
    let mut client = Command::new(&ex.client);
    client
        .arg("--ca")
        .arg(ex.cert())
        .args(["--server-name", "localhost", "--path", &format!("127.0.0.2@{second}")])
        .args(["--streams", "4", "--bytes", BULK, "--mode", "upload", "--round-robin", "--json", &first]);
    let client = std::thread::spawn(move || run(&mut client, b""));
    // Once the second path carried 10 MB, the kernel resets it (an RST both ways), as a dying
    // middlebox or interface would; the transfer must finish over the first path, verified.
    let deadline = std::time::Instant::now() + TIMEOUT;
    while bytes_acked_to(&second) < 10 << 20 {
        assert!(std::time::Instant::now() < deadline && !client.is_finished(), "the second path never carried 10 MB");
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    let (ip, port) = second.rsplit_once(':').unwrap();
    let killed = Command::new("ss").args(["-K", "dst", ip, "dport", "=", &format!(":{port}")]).output().unwrap();
    assert!(killed.status.success(), "ss -K: {}", String::from_utf8_lossy(&killed.stderr));
    let out = client.join().unwrap();
    assert!(out.status.success(), "{}\n--- server:\n{}", describe(&out), server.stderr_text());
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains(&format!("\"bytes\": {BULK_BYTES}")) && report.contains("\"verified\": true"), "{report}");
    assert!(report.contains("\"paths_down\": 1"), "the reset path went down: {report}");
}

#[test]
fn the_static_library_links_with_the_pc_files_private_libs_and_works() {
    let Some(ex) = skip("the_static_library_links") else { return };
    // The system libraries a static link needs, as tcpls.pc lists them for `pkg-config --static`.
    let pc = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tcpls.pc")).unwrap();
    let private: Vec<&str> =
        pc.lines().find_map(|l| l.strip_prefix("Libs.private:")).unwrap().split_whitespace().collect();
    let dir = temp_dir("static");
    let binary = dir.join("tcpls-client");
    let crate_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new("cc")
        .args(["-O2", "-std=c11", "-D_POSIX_C_SOURCE=200809L", "-pthread", "-I"])
        .arg(crate_dir.join("include"))
        .arg(crate_dir.join("examples/c/client.c"))
        .arg(target_dir().join("libtcpls.a"))
        .args(&private)
        .arg("-o")
        .arg(&binary)
        .output()
        .unwrap();
    assert!(out.status.success(), "static link: {}", describe(&out));
    let (_server, first, _) =
        tcpls_serve(&["--mode", "echo", "--cert", ex.cert().to_str().unwrap(), "--key", ex.key().to_str().unwrap()]);
    let out = run(
        Command::new(&binary).arg("--ca").arg(ex.cert()).args(["--server-name", "localhost", "--streams", "2", &first]),
        b"",
    );
    assert!(out.status.success(), "{}", describe(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("verified 1048576 bytes on 2 streams"),
        "{}",
        describe(&out)
    );
}
