//! The extension probes on an emulated path (tcpls-netem namespaces, root only): RTT and the
//! server's tcp_info against a known delay, and NAT detection through a router namespace that
//! masquerades (iptables). Without namespaces the test prints `SKIPPED: reason` and returns.
#![allow(clippy::unwrap_used)]

mod support;

use std::time::Duration;

use serde_json::Value;
use support::*;
use tcpls_netem::{print_skipped, skip_unless_supported, PathSpec, Side, Topology};

const TIMEOUT: Duration = Duration::from_secs(60);
const NAME: &str = "netns_ext::probe_on_an_emulated_path_and_through_a_nat";

fn probe(topo: &Topology, target: &str) -> Value {
    run(
        topo.command(Side::Client, env!("CARGO_BIN_EXE_tcpls")).args([
            "probe",
            target,
            "--insecure",
            "--rtt",
            "--tcp-info",
            "--nat",
            "--count",
            "5",
            "--json",
        ]),
        None,
        TIMEOUT,
    )
    .success()
    .json()
}

fn iptables(topo: &Topology, args: &[&str]) -> Result<(), String> {
    let out = topo
        .command(Side::Router(0), "iptables")
        .args(args)
        .output()
        .map_err(|e| format!("cannot run iptables: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("iptables {args:?}: {}", String::from_utf8_lossy(&out.stderr).trim()))
    }
}

#[test]
fn probe_on_an_emulated_path_and_through_a_nat() {
    skip_unless_supported!(NAME);
    // 10 ms each way: a 20 ms round trip.
    let topo = Topology::builder().path(PathSpec::new(10.0, 100.0)).build().unwrap();
    let server_ip = topo.path(0).info().server_v4.unwrap();
    let client_ip = topo.path(0).info().client_v4.unwrap();
    let target = format!("{server_ip}:4443");
    let mut server = Proc::spawn(
        topo.command(Side::Server, env!("CARGO_BIN_EXE_tcpls")).args(["serve", "--listen", &target]),
        false,
    );
    server.stderr.wait_for(b"listening on", SHORT).unwrap();

    let v = probe(&topo, &target);
    let c = &v["connections"][0];
    let rtt = c["rtt_us"].as_u64().unwrap();
    assert!((19_000..=30_000).contains(&rtt), "TCPLS RTT {rtt} µs on a 20 ms path: {v:#}");
    let peer_rtt = c["peer_tcp_info"]["rtt_us"].as_u64().unwrap();
    assert!((19_000..=40_000).contains(&peer_rtt), "server's kernel RTT {peer_rtt} µs: {v:#}");
    assert_eq!(c["nat_detected"], Value::Bool(false), "{v:#}");
    assert_eq!(c["seen_by_peer"].as_str().unwrap().split(':').next(), Some(client_ip.to_string().as_str()));
    eprintln!("netns probe: TCPLS RTT {rtt} µs, server tcp_info RTT {peer_rtt} µs (path: 2 x 10 ms)");

    // A 40 Mbit/s cap on a 100 Mbit/s, 20 ms path: goodput follows the cap, not the path.
    let v = run(
        topo.command(Side::Client, env!("CARGO_BIN_EXE_tcpls")).args([
            "perf",
            &target,
            "--insecure",
            "--download",
            "--rate-limit",
            "40M",
            "--time",
            "3",
            "--json",
        ]),
        None,
        TIMEOUT,
    )
    .success()
    .json();
    let goodput = v["goodput_bps"].as_f64().unwrap();
    eprintln!("netns perf --rate-limit 40M on a 100 Mbit/s path: {:.2} Mbit/s", goodput / 1e6);
    assert!((goodput - 40e6).abs() / 40e6 < 0.15, "{goodput:.0} bit/s for a 40 Mbit/s cap: {v:#}");

    // The router masquerades what leaves towards the server. Packets cross the router twice
    // (in from the veth, and back from the emulator's TUN device): only the second pass is
    // tracked, so the NAT decision is taken there.
    let nat = iptables(&topo, &["-t", "raw", "-A", "PREROUTING", "-i", "toc", "-j", "NOTRACK"])
        .and_then(|()| iptables(&topo, &["-t", "raw", "-A", "PREROUTING", "-i", "tundn", "-j", "NOTRACK"]))
        .and_then(|()| iptables(&topo, &["-t", "nat", "-A", "POSTROUTING", "-o", "tos", "-j", "MASQUERADE"]));
    if let Err(why) = nat {
        print_skipped(&format!("{NAME} (NAT part)"), &why);
        return;
    }
    let v = probe(&topo, &target);
    let c = &v["connections"][0];
    assert_eq!(c["nat_detected"], Value::Bool(true), "{v:#}");
    let seen = c["seen_by_peer"].as_str().unwrap();
    assert!(seen.starts_with("10.1.2.1:"), "the server sees the router's address: {v:#}");
}
