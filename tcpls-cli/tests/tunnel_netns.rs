//! The tunnel as a deployment uses it, end to end in network namespaces (tcpls-netem, root only): a client
//! namespace, a concentrator namespace joined to it by an emulated path (1 ms, 1 Gbit/s), and
//! a target namespace behind the concentrator (a veth pair, 10.200.0.0/24) holding the web
//! server and the DNS resolver. In one run:
//! - DNS over UDP: `dig` in the client namespace → `--forward-udp` → dnsmasq in the target one;
//! - HTTP CONNECT: `curl --proxytunnel --proxy http://...` (a real CONNECT), byte-exact;
//! - a reverse forward reached from the concentrator's side (curl in the target namespace →
//!   the concentrator's 10.200.0.1:8022 → a web server in the client namespace), byte-exact;
//! - a config reload (SIGHUP) that denies the target: new connections refused, the download in
//!   flight finishes byte-exact on the same session (no reconnection);
//! - the concentrator restarted during traffic (the connection in flight ends with an error at
//!   once) and while idle: each time new downloads work again within [`RECONNECT_BOUND`].
//!
//! Prints `SKIPPED: reason` and passes when it cannot run (not root, no namespaces, or dig,
//! dnsmasq, curl or python3 missing).

#![allow(clippy::unwrap_used)]

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use support::{payload, run, Proc, TempDir, SHORT, TIMEOUT};
use tcpls_netem::{print_skipped, skip_unless_supported, PathSpec, Side, Topology};

const NAME: &str = "tunnel_netns::dns_connect_reverse_reload_and_restarts_across_namespaces";

/// The client's backoff is capped at 1 s (`--reconnect-max 1`): after a restart new connections
/// work within ~1.5 s; the bound leaves room for a loaded 2-core machine.
const RECONNECT_BOUND: Duration = Duration::from_secs(8);

/// The concentrator's address towards the target namespace, and the target's.
const CONC_LAN: &str = "10.200.0.1";
const TARGET: &str = "10.200.0.2";

/// A namespace behind the concentrator, deleted on drop (its name starts with the topology's
/// prefix, so tcpls-netem's stale cleanup also removes it after a killed run).
struct TargetNs {
    name: String,
}

fn ip(args: &[&str]) -> Result<(), String> {
    let out = Command::new("ip").args(args).output().map_err(|e| format!("ip: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim()))
    }
}

impl TargetNs {
    fn new(topo: &Topology) -> Result<TargetNs, String> {
        let name = format!("{}-t", topo.prefix());
        ip(&["netns", "add", &name])?;
        let ns = TargetNs { name };
        let (s, t) = (topo.ns_name(Side::Server), ns.name.as_str());
        ip(&["-n", s, "link", "add", "lan", "type", "veth", "peer", "name", "lan", "netns", t])?;
        ip(&["-n", s, "addr", "add", &format!("{CONC_LAN}/24"), "dev", "lan"])?;
        ip(&["-n", s, "link", "set", "lan", "up"])?;
        ip(&["-n", t, "addr", "add", &format!("{TARGET}/24"), "dev", "lan"])?;
        ip(&["-n", t, "link", "set", "lan", "up"])?;
        ip(&["-n", t, "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.name, program]);
        cmd
    }
}

impl Drop for TargetNs {
    fn drop(&mut self) {
        let _ = ip(&["netns", "del", &self.name]);
    }
}

fn missing_program() -> Option<&'static str> {
    [("dig", "-v"), ("dnsmasq", "--version"), ("curl", "--version"), ("python3", "--version")]
        .into_iter()
        .find(|(p, arg)| !Command::new(p).arg(arg).output().is_ok_and(|o| o.status.success()))
        .map(|(p, _)| p)
}

/// `python3 -m http.server` on ADDR:PORT in a namespace, serving `dir`.
fn web(mut cmd: Command, bind: &str, port: u16, dir: &Path) -> Proc {
    cmd.args(["-u", "-m", "http.server", &port.to_string(), "--bind", bind, "--directory"]).arg(dir);
    let mut p = Proc::spawn(&mut cmd, false);
    p.stdout.wait_for(b"Serving HTTP", SHORT).unwrap_or_else(|e| panic!("{e}\n{}", p.diagnostics()));
    p
}

/// curl in the client namespace; `via`: the curl arguments that pick the proxy.
fn curl(topo: &Topology, via: &[&str], url: &str, out: &Path) -> support::Finished {
    let mut cmd = topo.command(Side::Client, "curl");
    cmd.args(["-sS", "--fail", "--max-time", "30"]).args(via).arg("-o").arg(out).arg(url);
    run(&mut cmd, None, TIMEOUT + TIMEOUT)
}

fn same(path: &Path, expected: &[u8]) -> bool {
    std::fs::read(path).is_ok_and(|got| got == expected)
}

struct Concentrator {
    config: PathBuf,
    server_ip: String,
}

impl Concentrator {
    fn write(&self, deny: &str) {
        let text = format!(
            "[server]\nlisten = [\"{}:4443\"]\nallow-reverse = [\"{CONC_LAN}:8022\"]\ndeny-dest = [{deny}]\n",
            self.server_ip
        );
        std::fs::write(&self.config, text).unwrap();
    }

    fn start(&self, topo: &Topology) -> Proc {
        let mut cmd = topo.command(Side::Server, env!("CARGO_BIN_EXE_tcpls"));
        cmd.args(["tunnel", "server", "--config"]).arg(&self.config);
        let mut p = Proc::spawn(&mut cmd, false);
        p.stderr.wait_for(b"listening on", SHORT).unwrap_or_else(|e| panic!("{e}\n{}", p.diagnostics()));
        p
    }
}

/// Repeats a download until it succeeds (a session being re-established), within `bound`.
fn download_within(topo: &Topology, via: &[&str], url: &str, out: &Path, expected: &[u8], bound: Duration) -> Duration {
    let start = Instant::now();
    loop {
        let done = curl(topo, via, url, out);
        if done.status.success() && same(out, expected) {
            return start.elapsed();
        }
        assert!(start.elapsed() < bound, "no successful download within {bound:?}: {}", done.describe());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A rate-limited download in the background; returns once `min` bytes arrived.
fn slow_download(topo: &Topology, url: &str, out: &Path, min: u64, rate: &str, client: &mut Proc) -> Proc {
    let mut cmd = topo.command(Side::Client, "curl");
    cmd.args(["-sS", "--fail", "--max-time", "60", "--limit-rate", rate, "--socks5", "127.0.0.1:1080", "-o"])
        .arg(out)
        .arg(url);
    let p = Proc::spawn(&mut cmd, false);
    let deadline = Instant::now() + SHORT;
    while std::fs::metadata(out).map(|m| m.len()).unwrap_or(0) < min {
        assert!(Instant::now() < deadline, "the download did not start\n{}", client.diagnostics());
        std::thread::sleep(Duration::from_millis(20));
    }
    p
}

#[test]
fn dns_connect_reverse_reload_and_restarts_across_namespaces() {
    skip_unless_supported!(NAME);
    if let Some(p) = missing_program() {
        print_skipped(NAME, &format!("{p} is not installed (packages: dnsutils, dnsmasq, curl, python3)"));
        return;
    }
    let started = Instant::now();
    let topo = Topology::builder().path(PathSpec::new(1.0, 1000.0)).build().unwrap();
    let target = TargetNs::new(&topo).unwrap_or_else(|e| panic!("target namespace: {e}"));
    let server_ip = topo.path(0).info().server_v4.unwrap().to_string();
    let files = TempDir::new("tunnel-netns-files");
    let (big, small, rev) = (payload(2_500_000, 1), payload(300_000, 2), payload(700_000, 3));
    std::fs::write(files.path().join("big.bin"), &big).unwrap();
    std::fs::write(files.path().join("small.bin"), &small).unwrap();
    // Large enough that a restart finds it in flight (not all in buffers at the client already).
    std::fs::write(files.path().join("huge.bin"), payload(16_000_000, 4)).unwrap();
    let client_side = TempDir::new("tunnel-netns-client-web");
    std::fs::write(client_side.path().join("rev.bin"), &rev).unwrap();
    let out = TempDir::new("tunnel-netns-out");

    let _target_web = web(target.command("python3"), TARGET, 8080, files.path());
    let _client_web = web(topo.command(Side::Client, "python3"), "127.0.0.1", 8081, client_side.path());
    let mut dns = target.command("dnsmasq");
    dns.args(["--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv", "--no-hosts", "--bind-interfaces"])
        .args([&format!("--listen-address={TARGET}"), "--port=53", "--pid-file=", "--log-facility=-"])
        .arg("--address=/tunnel.test/192.0.2.7");
    let mut dns = Proc::spawn(&mut dns, false);
    std::thread::sleep(Duration::from_millis(300));
    assert!(dns.try_status().is_none(), "dnsmasq did not start: {}", dns.diagnostics());

    let conc = Concentrator { config: out.path().join("tunnel.toml"), server_ip: server_ip.clone() };
    conc.write("");
    let mut server = conc.start(&topo);
    let mut client = Proc::spawn(
        topo.command(Side::Client, env!("CARGO_BIN_EXE_tcpls")).args([
            "tunnel",
            "client",
            "--insecure",
            "--concentrator",
            &format!("{server_ip}:4443"),
            "--reconnect-max",
            "1",
            "--socks",
            "127.0.0.1:1080",
            "--http",
            "127.0.0.1:3128",
            "--forward-udp",
            &format!("127.0.0.1:5353={TARGET}:53"),
            "--reverse",
            &format!("{CONC_LAN}:8022=127.0.0.1:8081"),
        ]),
        false,
    );
    client.stderr.wait_for(b"accepting on", SHORT).unwrap_or_else(|e| panic!("{e}\n{}", client.diagnostics()));
    let socks: &[&str] = &["--socks5", "127.0.0.1:1080"];
    let url = |f: &str| format!("http://{TARGET}:8080/{f}");

    // DNS over UDP through the tunnel.
    let mut dig = topo.command(Side::Client, "dig");
    dig.args(["@127.0.0.1", "-p", "5353", "tunnel.test", "A", "+short", "+tries=3", "+time=3"]);
    let done = run(&mut dig, None, TIMEOUT);
    assert_eq!(done.stdout_text().trim(), "192.0.2.7", "dig: {}\n{}", done.describe(), client.diagnostics());

    // HTTP CONNECT (--proxytunnel makes curl use CONNECT even for http://).
    let dst = out.path().join("connect.bin");
    let done = curl(&topo, &["--proxytunnel", "--proxy", "http://127.0.0.1:3128"], &url("big.bin"), &dst);
    assert!(done.status.success(), "curl CONNECT: {}\n{}", done.describe(), client.diagnostics());
    assert!(same(&dst, &big), "CONNECT download differs");

    // Reverse forward, reached from the concentrator's side (the target namespace).
    server
        .stderr
        .wait_for(format!("reverse forward: listening on {CONC_LAN}:8022").as_bytes(), SHORT)
        .unwrap_or_else(|e| panic!("{e}\n{}", server.diagnostics()));
    let dst = out.path().join("rev.bin");
    let mut cmd = target.command("curl");
    cmd.args(["-sS", "--fail", "--max-time", "30", "-o"]).arg(&dst).arg(format!("http://{CONC_LAN}:8022/rev.bin"));
    let done = run(&mut cmd, None, TIMEOUT);
    assert!(done.status.success(), "reverse: {}\n{}\n{}", done.describe(), client.diagnostics(), server.diagnostics());
    assert!(same(&dst, &rev), "reverse download differs");

    // Reload: the target denied from now on; the download in flight goes on.
    let slow = out.path().join("slow.bin");
    let mut download = slow_download(&topo, &url("big.bin"), &slow, 300_000, "1M", &mut client);
    conc.write(&format!("\"{TARGET}/32\""));
    assert!(Command::new("kill").args(["-HUP", &server.id().to_string()]).status().unwrap().success());
    server
        .stderr
        .wait_for(b"reloaded: destinations", SHORT)
        .unwrap_or_else(|e| panic!("{e}\n{}", server.diagnostics()));
    let done = curl(&topo, socks, &url("small.bin"), &out.path().join("denied.bin"));
    assert!(done.stderr.contains("(2)"), "denied after the reload (SOCKS5 reply 2): {}", done.describe());
    assert!(download.wait(TIMEOUT).success(), "the download in flight survives the reload: {}", download.diagnostics());
    assert!(same(&slow, &big), "the download across the reload differs");
    assert!(!client.stderr.text().contains("lost ("), "no reconnection: {}", client.diagnostics());

    // The target allowed again (a second reload), then a restart during traffic.
    conc.write("");
    assert!(Command::new("kill").args(["-HUP", &server.id().to_string()]).status().unwrap().success());
    let deadline = Instant::now() + SHORT;
    while server.stderr.text().matches("reloaded: destinations").count() < 2 {
        assert!(Instant::now() < deadline, "second reload not done\n{}", server.diagnostics());
        std::thread::sleep(Duration::from_millis(20));
    }
    let slow2 = out.path().join("slow2.bin");
    let mut download = slow_download(&topo, &url("huge.bin"), &slow2, 300_000, "4M", &mut client);
    drop(server);
    let server = conc.start(&topo);
    let restarted = Instant::now();
    // New connections work again (measured from the restart), while the connection in flight
    // ends with an error (not a hang) once what the client had already received is delivered.
    let dst = out.path().join("after-traffic.bin");
    let busy = download_within(&topo, socks, &url("small.bin"), &dst, &small, RECONNECT_BOUND);
    let status = download.wait(RECONNECT_BOUND);
    assert!(!status.success(), "the connection in flight ends with an error: {}", download.diagnostics());
    let in_flight_ended = restarted.elapsed();
    assert!(in_flight_ended < RECONNECT_BOUND, "the connection in flight ended {in_flight_ended:?} after the restart");

    // Restart while idle.
    drop(server);
    std::thread::sleep(Duration::from_millis(500));
    let _server = conc.start(&topo);
    let restarted = Instant::now();
    let dst = out.path().join("after-idle.bin");
    download_within(&topo, socks, &url("small.bin"), &dst, &small, RECONNECT_BOUND);
    let idle = restarted.elapsed();
    let deadline = Instant::now() + SHORT;
    while client.stderr.text().matches("re-established after an outage of").count() < 2 {
        assert!(Instant::now() < deadline, "the outages are not logged\n{}", client.diagnostics());
        std::thread::sleep(Duration::from_millis(50));
    }
    eprintln!(
        "tunnel_netns: restart during traffic: a new download succeeded {:.2} s after the restart, the \
         connection in flight ended (error) after {:.2} s; restart while idle: {:.2} s; whole test {:.1} s",
        busy.as_secs_f64(),
        in_flight_ended.as_secs_f64(),
        idle.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
}
