//! End-to-end tests of `tcpls tunnel server` / `tcpls tunnel client` (docs/CLI.md): real
//! processes on loopback, curl as the application (SOCKS5 with local and remote name
//! resolution), python3's http.server as the destination; files compared by SHA-256.
//! Needs curl and python3 (CI packages `curl`, `python3`).

#![allow(clippy::unwrap_used)]

mod support;

use std::io::Read;
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use support::{free_port, run, tcpls, Proc, TempDir, LOCALHOST_V4, SHORT, TIMEOUT};

/// `python3 -m http.server` serving a directory of pseudo-random files.
struct Web {
    dir: TempDir,
    _proc: Proc,
    port: u16,
}

impl Web {
    fn start(files: &[(&str, usize)]) -> Web {
        let dir = TempDir::new("tunnel-web");
        for (i, (name, size)) in files.iter().enumerate() {
            std::fs::write(dir.path().join(name), support::payload(*size, i as u64 + 1)).unwrap();
        }
        for _ in 0..5 {
            let port = free_port(LOCALHOST_V4);
            let mut cmd = Command::new("python3");
            cmd.args(["-m", "http.server", &port.to_string(), "--bind", "127.0.0.1", "--directory"]).arg(dir.path());
            let proc = Proc::spawn(&mut cmd, false);
            let deadline = Instant::now() + SHORT;
            while Instant::now() < deadline {
                if TcpStream::connect((LOCALHOST_V4, port)).is_ok() {
                    return Web { dir, _proc: proc, port };
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        panic!("python3 -m http.server did not start (is python3 installed?)");
    }

    fn sha256(&self, name: &str) -> String {
        sha256(&self.dir.path().join(name))
    }
}

fn sha256(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    assert!(out.status.success(), "sha256sum {}", path.display());
    String::from_utf8_lossy(&out.stdout).split_whitespace().next().unwrap().to_string()
}

fn require_curl() {
    match Command::new("curl").arg("--version").output() {
        Ok(o) if o.status.success() => {}
        _ => panic!("these tests need curl: install it (e.g. `apt-get install curl`) and run them again"),
    }
}

/// Starts `make(port)` on fresh ports until `ready` shows on stderr.
fn start(what: &str, ready: &[u8], make: impl Fn(u16) -> std::process::Command) -> (Proc, u16) {
    support::start_on_free_port(what, ready, make)
}

/// The destinations of these tests are on loopback, which the concentrator refuses by default.
const ALLOW_LOOPBACK: &[&str] = &["--allow-dest", "127.0.0.0/8", "--allow-dest", "::1"];

/// `tcpls tunnel server --json` on 127.0.0.1 with `n` listening ports; returns them.
fn start_server(n: usize) -> (Proc, Vec<u16>) {
    start_server_with(n, ALLOW_LOOPBACK)
}

/// [`start_server`] with these arguments instead of [`ALLOW_LOOPBACK`].
fn start_server_with(n: usize, extra: &[&str]) -> (Proc, Vec<u16>) {
    for attempt in 0.. {
        let ports: Vec<u16> = (0..n).map(|_| free_port(LOCALHOST_V4)).collect();
        let mut cmd = tcpls();
        cmd.args(["tunnel", "server", "--json"]).args(extra);
        for p in &ports {
            cmd.args(["--listen", &format!("127.0.0.1:{p}")]);
        }
        let mut proc = Proc::spawn(&mut cmd, false);
        let last = format!("tcpls tunnel server: listening on 127.0.0.1:{}", ports[n - 1]);
        match proc.stderr.wait_for(last.as_bytes(), SHORT) {
            Ok(()) => return (proc, ports),
            Err(_) if attempt < 5 && proc.stderr.text().contains("cannot listen") => continue,
            Err(e) => panic!("tcpls tunnel server did not start: {e}\n{}", proc.diagnostics()),
        }
    }
    unreachable!()
}

/// `tcpls tunnel client --concentrator 127.0.0.1:P [--path ...] --insecure MODE`; `mode(port)`
/// gives the mode's arguments for the local port. Returns it and that port.
fn start_client(ports: &[u16], mode: impl Fn(u16) -> Vec<String>) -> (Proc, u16) {
    start("tcpls tunnel client", b"tcpls tunnel client: session to", |local| {
        let mut cmd = tcpls();
        cmd.args(["tunnel", "client", "-v", "--insecure", "--concentrator", &format!("127.0.0.1:{}", ports[0])]);
        for p in &ports[1..] {
            cmd.args(["--path", &format!("127.0.0.1:{p}")]);
        }
        cmd.args(mode(local));
        cmd
    })
}

fn socks(port: u16) -> Vec<String> {
    vec!["--socks".into(), format!("127.0.0.1:{port}")]
}

/// curl through the SOCKS5 proxy; `remote_names`: --socks5-hostname (the tunnel resolves)
/// rather than --socks5 (curl resolves).
fn curl(socks_port: u16, remote_names: bool, url: &str, out: &Path, extra: &[&str]) -> support::Finished {
    let flag = if remote_names { "--socks5-hostname" } else { "--socks5" };
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "--fail", "--max-time", "60", flag, &format!("127.0.0.1:{socks_port}"), "-o"])
        .arg(out)
        .args(extra)
        .arg(url);
    run(&mut cmd, None, TIMEOUT + TIMEOUT)
}

#[test]
fn curl_through_socks5_byte_exact_and_failures() {
    require_curl();
    let web = Web::start(&[("big.bin", 5_000_000), ("small.txt", 800)]);
    // A session whose client vanished is kept 1 s for a rejoin (default 10 s), then reported.
    let (mut server, ports) = start_server_with(1, &[ALLOW_LOOPBACK, &["--rejoin-timeout", "1"]].concat());
    let (mut client, socks_port) = start_client(&ports, socks);
    let out = TempDir::new("tunnel-curl");
    for (i, (remote, host, file)) in [
        (true, "localhost", "big.bin"),
        (false, "127.0.0.1", "big.bin"),
        (true, "localhost", "small.txt"),
        (false, "localhost", "small.txt"),
    ]
    .into_iter()
    .enumerate()
    {
        let dst = out.path().join(format!("{i}-{file}"));
        let url = format!("http://{host}:{}/{file}", web.port);
        let done = curl(socks_port, remote, &url, &dst, &[]);
        assert!(done.status.success(), "curl {url}: {}\n{}", done.describe(), client.diagnostics());
        assert_eq!(sha256(&dst), web.sha256(file), "{url} through the tunnel is byte-exact");
    }
    // A destination that refuses: the SOCKS5 request fails (curl exit 97, reply 5).
    let closed = free_port(LOCALHOST_V4);
    let done = curl(socks_port, false, &format!("http://127.0.0.1:{closed}/"), &out.path().join("x"), &[]);
    assert_eq!(done.status.code(), Some(97), "SOCKS failure expected: {}", done.describe());
    assert!(done.stderr.contains("(5)"), "reply 5 (connection refused): {}", done.stderr);

    // A forward to a closed port: the local connection is reset.
    let (_fwd, fwd_port) =
        start_client(&ports, |p| vec!["--forward".into(), format!("127.0.0.1:{p}=127.0.0.1:{closed}")]);
    let r = TcpStream::connect((LOCALHOST_V4, fwd_port)).and_then(|mut s| {
        s.set_read_timeout(Some(SHORT))?;
        s.read(&mut [0u8; 1])
    });
    assert_eq!(r.unwrap_err().kind(), std::io::ErrorKind::ConnectionReset, "{}", client.diagnostics());

    // The session's summary (--json) when the client goes away: the server keeps a session
    // whose connections were all lost for a rejoin (--rejoin-timeout 1), then reports it.
    drop(client);
    let deadline = Instant::now() + TIMEOUT;
    let report = loop {
        let text = server.stdout.text();
        let lines: Vec<serde_json::Value> = text.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
        if let Some(r) = lines.iter().find(|r| r["streams"].as_u64() == Some(5)) {
            break r.clone();
        }
        assert!(Instant::now() < deadline, "no --json session summary\n{}", server.diagnostics());
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(report["connected"], 4, "{report}");
    assert_eq!(report["connect_failed"], 1, "{report}");
    assert!(report["bytes_down"].as_u64().unwrap() > 2 * 5_000_000 + 2 * 800, "{report}");
}

/// Two uplinks to a concentrator with ONE address (a multihomed client, a single-homed server): `--path LOCAL@ADDR` adds a
/// connection from another local address (127.0.0.3 stands for a second interface's address);
/// downloads through the tunnel stay byte-exact (its streams go round-robin over the two).
#[test]
fn a_second_uplink_from_another_local_address() {
    require_curl();
    let web = Web::start(&[("a.bin", 4_000_000), ("b.bin", 4_000_000)]);
    let (_server, ports) = start_server(1);
    let concentrator = format!("127.0.0.1:{}", ports[0]);
    let (mut client, socks_port) = start("tcpls tunnel client", b"connection(s)), accepting", |local| {
        let mut cmd = tcpls();
        cmd.args(["tunnel", "client", "-v", "--insecure", "--concentrator", &concentrator]);
        cmd.args(["--path", &format!("127.0.0.3@{concentrator}"), "--socks", &format!("127.0.0.1:{local}")]);
        cmd
    });
    let ready = client.stderr.text();
    assert!(ready.contains("(2 connection(s))"), "two uplinks: {ready}");
    let out = TempDir::new("tunnel-uplinks");
    for file in ["a.bin", "b.bin"] {
        let dst = out.path().join(file);
        let url = format!("http://127.0.0.1:{}/{file}", web.port);
        let done = curl(socks_port, false, &url, &dst, &[]);
        assert!(done.status.success(), "curl {url}: {}\n{}", done.describe(), client.diagnostics());
        assert_eq!(sha256(&dst), web.sha256(file), "{url} byte-exact over two uplinks");
    }
    // A local address this host does not have: the client says which path and why.
    let mut cmd = tcpls();
    cmd.args(["tunnel", "client", "--insecure", "--concentrator", &concentrator, "--no-reconnect"]);
    cmd.args(["--path", &format!("192.0.2.1@{concentrator}"), "--socks", "127.0.0.1:0"]);
    let done = run(&mut cmd, None, TIMEOUT);
    assert!(!done.status.success() && done.stderr.contains("not an address of this host"), "{}", done.describe());
}

/// The same two uplinks under the path manager (`--bind` for the first connection, `--path`
/// for the second, `--path-manager fullmesh`): both come up, downloads stay byte-exact.
#[test]
fn two_uplinks_under_the_path_manager() {
    require_curl();
    let web = Web::start(&[("a.bin", 3_000_000)]);
    let (_server, ports) = start_server(1);
    let concentrator = format!("127.0.0.1:{}", ports[0]);
    let (mut client, socks_port) = start("tcpls tunnel client", b"connection(s)), accepting", |local| {
        let mut cmd = tcpls();
        cmd.args(["tunnel", "client", "-v", "--insecure", "--concentrator", &concentrator, "--bind", "127.0.0.2"]);
        cmd.args(["--path", &format!("127.0.0.3@{concentrator}"), "--path-manager", "fullmesh"]);
        cmd.args(["--socks", &format!("127.0.0.1:{local}")]);
        cmd
    });
    let ready = client.stderr.text();
    assert!(ready.contains("(2 connection(s))"), "two uplinks: {ready}");
    let out = TempDir::new("tunnel-managed");
    let dst = out.path().join("a.bin");
    let url = format!("http://127.0.0.1:{}/a.bin", web.port);
    let done = curl(socks_port, false, &url, &dst, &[]);
    assert!(done.status.success(), "curl {url}: {}\n{}", done.describe(), client.diagnostics());
    assert_eq!(sha256(&dst), web.sha256("a.bin"), "byte-exact under the path manager");
}

/// `--runtime per-core`: the client's two paths (a join) reach whichever core's listener the
/// kernel picks; two downloads at once over the session arrive byte-exact.
#[test]
fn a_per_core_concentrator_serves_two_paths() {
    require_curl();
    const SIZE: usize = 8 << 20;
    let web = Web::start(&[("a.bin", SIZE), ("b.bin", SIZE)]);
    let mut extra = ALLOW_LOOPBACK.to_vec();
    extra.extend(["--runtime", "per-core", "--threads", "2"]);
    let (_server, ports) = start_server_with(2, &extra);
    let (mut client, socks_port) = start_client(&ports, socks);
    let out = TempDir::new("tunnel-per-core");
    let downloads: Vec<_> = ["a.bin", "b.bin"]
        .into_iter()
        .map(|file| {
            let dst = out.path().join(file);
            let url = format!("http://127.0.0.1:{}/{file}", web.port);
            std::thread::spawn(move || (curl(socks_port, true, &url, &dst, &[]), dst))
        })
        .collect();
    for (d, file) in downloads.into_iter().zip(["a.bin", "b.bin"]) {
        let (done, dst) = d.join().unwrap();
        assert!(done.status.success(), "curl {file}: {}\n{}", done.describe(), client.diagnostics());
        assert_eq!(sha256(&dst), web.sha256(file), "{file} is byte-exact");
    }
}

#[test]
fn curl_over_two_paths_survives_killing_one() {
    require_curl();
    if let Err(why) = tcpls_test::sockets::can_kill_sockets() {
        eprintln!("SKIPPED: curl_over_two_paths_survives_killing_one: {why}");
        return;
    }
    const SIZE: usize = 48 << 20;
    let web = Web::start(&[("a.bin", SIZE), ("b.bin", SIZE)]);
    let (_server, ports) = start_server(2);
    let (mut client, socks_port) = start_client(&ports, socks);
    let out = TempDir::new("tunnel-curl-mp");
    // Two downloads at once: streams go round-robin over the two connections, so the killed
    // one is carrying one of them. Rate-limited so that the kill lands mid-transfer.
    let downloads: Vec<_> = ["a.bin", "b.bin"]
        .into_iter()
        .map(|file| {
            let dst = out.path().join(file);
            let url = format!("http://127.0.0.1:{}/{file}", web.port);
            std::thread::spawn(move || (curl(socks_port, true, &url, &dst, &["--limit-rate", "16M"]), dst))
        })
        .collect();
    std::thread::sleep(Duration::from_millis(1200));
    let killed = tcpls_test::sockets::kill_sockets_to_port(ports[1]).unwrap();
    assert!(killed > 0, "ss -K killed no socket to port {}", ports[1]);
    for (d, file) in downloads.into_iter().zip(["a.bin", "b.bin"]) {
        let (done, dst) = d.join().unwrap();
        assert!(done.status.success(), "curl {file}: {}\n{}", done.describe(), client.diagnostics());
        assert!(done.elapsed > Duration::from_millis(1500), "the kill happened mid-transfer");
        assert_eq!(sha256(&dst), web.sha256(file), "{file} is byte-exact after the failover");
    }
}

/// Transparent mode in network namespaces (tcpls-netem): curl in the client namespace fetches
/// `http://SERVER:8080/` directly; iptables REDIRECTs it to `tcpls tunnel client
/// --transparent`, which reads the original destination (SO_ORIGINAL_DST) and tunnels it to the
/// concentrator in the server namespace.
#[test]
fn transparent_mode_with_iptables_redirect() {
    use tcpls_netem::{skip_unless_supported, PathSpec, Side, Topology};
    skip_unless_supported!("tunnel_cli::transparent_mode_with_iptables_redirect");
    require_curl();
    let topo = Topology::builder().path(PathSpec::new(1.0, 1000.0)).build().unwrap();
    let server_ip = topo.path(0).info().server_v4.unwrap().to_string();
    let dir = TempDir::new("tunnel-transparent");
    let data = support::payload(3_000_000, 77);
    std::fs::write(dir.path().join("t.bin"), &data).unwrap();
    let mut web = topo.command(Side::Server, "python3");
    web.args(["-u", "-m", "http.server", "8080", "--bind", &server_ip, "--directory"]).arg(dir.path());
    let mut web = Proc::spawn(&mut web, false);
    web.stdout.wait_for(b"Serving HTTP", SHORT).unwrap_or_else(|e| panic!("{e}\n{}", web.diagnostics()));
    let mut conc = Proc::spawn(
        topo.command(Side::Server, env!("CARGO_BIN_EXE_tcpls")).args([
            "tunnel",
            "server",
            "--listen",
            &format!("{server_ip}:4443"),
            // The web server is on the concentrator's own address (same namespace).
            "--allow-dest",
            &server_ip,
        ]),
        false,
    );
    conc.stderr.wait_for(b"listening on", SHORT).unwrap_or_else(|e| panic!("{e}\n{}", conc.diagnostics()));
    let mut client = Proc::spawn(
        topo.command(Side::Client, env!("CARGO_BIN_EXE_tcpls")).args([
            "tunnel",
            "client",
            "-v",
            "--insecure",
            "--concentrator",
            &format!("{server_ip}:4443"),
            "--transparent",
            "7000",
        ]),
        false,
    );
    client.stderr.wait_for(b"accepting on", SHORT).unwrap_or_else(|e| panic!("{e}\n{}", client.diagnostics()));
    let rule = ["-t", "nat", "-A", "OUTPUT", "-p", "tcp", "-d", &server_ip, "--dport", "8080", "-j", "REDIRECT"];
    let out = topo.command(Side::Client, "iptables").args(rule).args(["--to-ports", "7000"]).output().unwrap();
    assert!(out.status.success(), "iptables: {}", String::from_utf8_lossy(&out.stderr));
    let dst = dir.path().join("fetched.bin");
    let url = format!("http://{server_ip}:8080/t.bin");
    let mut curl = topo.command(Side::Client, "curl");
    curl.args(["-sS", "--fail", "--max-time", "30", "-o"]).arg(&dst).arg(&url);
    let done = run(&mut curl, None, TIMEOUT + TIMEOUT);
    assert!(done.status.success(), "curl {url}: {}\n{}", done.describe(), client.diagnostics());
    assert_eq!(sha256(&dst), sha256(&dir.path().join("t.bin")), "byte-exact through the transparent tunnel");
    // It really went through the tunnel (the client logged the redirected connection).
    client.stderr.wait_for(format!("-> {server_ip}:8080").as_bytes(), SHORT).unwrap();
}

#[test]
fn usage_errors_are_one_line() {
    let closed = free_port(LOCALHOST_V4);
    let concentrator = format!("127.0.0.1:{closed}");
    let client = |mode: &[&str]| {
        let mut cmd = tcpls();
        cmd.args(["tunnel", "client", "--concentrator", &concentrator, "--insecure"]).args(mode);
        run(&mut cmd, None, SHORT)
    };
    client(&["--socks", "127.0.0.1:0"]).one_line_error("cannot open a TCPLS session");
    client(&["--forward", "127.0.0.1:0"]).one_line_error("LISTEN=TARGET");
    client(&["--forward", "127.0.0.1:0=nohostport"]).one_line_error("HOST:PORT");
    let dir = TempDir::new("tunnel-usage");
    let (cert, key) = support::make_cert(dir.path(), "c");
    let mut cmd = tcpls();
    cmd.args(["tunnel", "server", "--listen", "192.0.2.1:4443", "--cert"]).arg(cert).arg("--key").arg(key);
    run(&mut cmd, None, SHORT).one_line_error("cannot listen");
}

/// `tunnel server --client-ca`: a client without a certificate is refused (its session ends
/// with the concentrator's certificate_required alert, and it exits with that error); one with
/// `--cert/--key` gets through, byte-exact.
#[test]
fn mutual_tls_keeps_clients_without_a_certificate_out() {
    require_curl();
    let web = Web::start(&[("file.bin", 300_000)]);
    let dir = TempDir::new("tunnel-mtls");
    let (srv_cert, srv_key) = support::make_cert(dir.path(), "server");
    let (cli_cert, cli_key) = support::make_cert(dir.path(), "client");
    let (mut server, port) = start("tcpls tunnel server", b"tcpls tunnel server: listening on", |p| {
        let mut cmd = tcpls();
        cmd.args(["tunnel", "server", "--listen", &format!("127.0.0.1:{p}"), "--cert"]).arg(&srv_cert);
        cmd.arg("--key").arg(&srv_key).arg("--client-ca").arg(&cli_cert).args(ALLOW_LOOPBACK);
        cmd
    });
    // Without a certificate: TLS 1.3 lets the client finish its handshake before the server
    // checks it, so the client may even start accepting; then its session ends with the
    // server's alert, and it exits with that error.
    let mut cmd = tcpls();
    cmd.args(["tunnel", "client", "--concentrator", &format!("127.0.0.1:{port}"), "--ca"]).arg(&srv_cert);
    cmd.args(socks(free_port(LOCALHOST_V4)));
    let mut stranger = Proc::spawn(&mut cmd, false);
    let status = stranger.wait(TIMEOUT);
    assert!(!status.success(), "a client without a certificate must not keep a session");
    let err = stranger.stderr.text();
    assert!(err.contains("CertificateRequired"), "the error names the cause: {err}");
    let out = TempDir::new("tunnel-mtls-out");
    let url = format!("http://localhost:{}/file.bin", web.port);

    // With the certificate: through, byte-exact.
    let (mut member, member_port) = start("tcpls tunnel client", b"tcpls tunnel client: session to", |local| {
        let mut cmd = tcpls();
        cmd.args(["tunnel", "client", "--concentrator", &format!("127.0.0.1:{port}"), "--ca"]).arg(&srv_cert);
        cmd.arg("--cert").arg(&cli_cert).arg("--key").arg(&cli_key).args(socks(local));
        cmd
    });
    let dst = out.path().join("file.bin");
    let done = curl(member_port, true, &url, &dst, &[]);
    assert!(done.status.success(), "curl: {}\n{}\n{}", done.describe(), member.diagnostics(), server.diagnostics());
    assert_eq!(sha256(&dst), web.sha256("file.bin"));
}

/// The concentrator must not be a way into its own host (an open relay to its loopback would be). By default it refuses its
/// loopback (by address, by a name resolving to it, IPv4-mapped), link-local and cloud
/// metadata destinations: curl through SOCKS5 gets reply 2 ("not allowed by ruleset"), a
/// `--forward` connection is reset; with `--allow-dest 127.0.0.0/8` the same page is served.
#[test]
fn concentrator_refuses_its_own_loopback_unless_allowed() {
    require_curl();
    let web = Web::start(&[("page.html", 20_000)]);
    let (mut server, ports) = start_server_with(1, &[]);
    let (mut client, socks_port) = start_client(&ports, socks);
    let out = TempDir::new("tunnel-policy");
    let refused = [
        (true, format!("http://localhost:{}/page.html", web.port)),
        (true, format!("http://127.0.0.1:{}/page.html", web.port)),
        (false, format!("http://[::ffff:127.0.0.1]:{}/page.html", web.port)),
        (true, "http://169.254.169.254/latest/meta-data/".to_string()),
    ];
    for (remote, url) in &refused {
        let done = curl(socks_port, *remote, url, &out.path().join("x"), &[]);
        assert_eq!(done.status.code(), Some(97), "SOCKS refusal expected for {url}: {}", done.describe());
        assert!(done.stderr.contains("(2)"), "reply 2 (not allowed) for {url}: {}", done.stderr);
    }
    // --forward to the concentrator's loopback: the local connection is reset.
    let (_fwd, fwd_port) =
        start_client(&ports, |p| vec!["--forward".into(), format!("127.0.0.1:{p}=127.0.0.1:{}", web.port)]);
    let r = TcpStream::connect((LOCALHOST_V4, fwd_port)).and_then(|mut s| {
        s.set_read_timeout(Some(SHORT))?;
        std::io::Write::write_all(&mut s, b"GET /page.html HTTP/1.0\r\n\r\n")?;
        s.read(&mut [0u8; 1])
    });
    assert_eq!(r.unwrap_err().kind(), std::io::ErrorKind::ConnectionReset, "{}", client.diagnostics());
    // Each refusal has a reason in the concentrator's log.
    server
        .stderr
        .wait_for(b"169.254.169.254 is link-local", SHORT)
        .unwrap_or_else(|e| panic!("{e}\n{}", server.diagnostics()));
    // The forward's refusal is logged last: wait for it rather than read what arrived so far.
    let deadline = Instant::now() + SHORT;
    while server.stderr.text().matches("is loopback").count() < 4 {
        assert!(Instant::now() < deadline, "one log line per loopback refusal:\n{}", server.diagnostics());
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = server.stderr.text();
    assert!(!log.contains("WARNING"), "no open-proxy warning on loopback:\n{log}");

    // Allowed: the same page, byte-exact.
    let (_allowed, ports) = start_server_with(1, &["--allow-dest", "127.0.0.0/8"]);
    let (mut client, socks_port) = start_client(&ports, socks);
    let dst = out.path().join("page.html");
    let done = curl(socks_port, true, &format!("http://localhost:{}/page.html", web.port), &dst, &[]);
    assert!(done.status.success(), "curl: {}\n{}", done.describe(), client.diagnostics());
    assert_eq!(sha256(&dst), web.sha256("page.html"));
}

/// `--max-sessions 1`: a second client's session is closed after its handshake (the client
/// exits with the error) while the first one keeps working; bad flags are one-line errors;
/// listening beyond loopback without `--client-ca` warns of an open proxy.
#[test]
fn concentrator_limits_and_open_proxy_warning() {
    require_curl();
    let web = Web::start(&[("a.bin", 100_000)]);
    let mut extra = ALLOW_LOOPBACK.to_vec();
    extra.extend(["--max-sessions", "1"]);
    let (mut server, ports) = start_server_with(1, &extra);
    let (mut first, socks_port) = start_client(&ports, socks);
    let mut cmd = tcpls();
    cmd.args([
        "tunnel",
        "client",
        "--insecure",
        "--no-reconnect",
        "--concentrator",
        &format!("127.0.0.1:{}", ports[0]),
    ]);
    cmd.args(socks(free_port(LOCALHOST_V4)));
    let mut second = Proc::spawn(&mut cmd, false);
    let status = second.wait(TIMEOUT);
    assert!(!status.success(), "the session beyond --max-sessions must end: {}", second.diagnostics());
    server.stderr.wait_for(b"--max-sessions", SHORT).unwrap_or_else(|e| panic!("{e}\n{}", server.diagnostics()));
    let out = TempDir::new("tunnel-limits");
    let dst = out.path().join("a.bin");
    let done = curl(socks_port, true, &format!("http://127.0.0.1:{}/a.bin", web.port), &dst, &[]);
    assert!(done.status.success(), "the first session still works: {}\n{}", done.describe(), first.diagnostics());
    assert_eq!(sha256(&dst), web.sha256("a.bin"));

    let mut bad = tcpls();
    bad.args(["tunnel", "server", "--listen", "127.0.0.1:0", "--allow-dest", "127.0.0.0/99"]);
    run(&mut bad, None, SHORT).one_line_error("--allow-dest");
    let mut bad = tcpls();
    bad.args(["tunnel", "server", "--listen", "127.0.0.1:0", "--deny-dest", "example.org"]);
    run(&mut bad, None, SHORT).one_line_error("--deny-dest");

    let (mut open, _) = start("tcpls tunnel server", b"listening on", |p| {
        let mut cmd = tcpls();
        cmd.args(["tunnel", "server", "--listen", &format!("0.0.0.0:{p}")]);
        cmd
    });
    open.stderr.wait_for(b"(an open proxy)", SHORT).unwrap_or_else(|e| panic!("{e}\n{}", open.diagnostics()));
    assert!(open.stderr.text().contains("WARNING: listening on 0.0.0.0:"), "{}", open.diagnostics());
}

/// `openssl s_server -www` on 127.0.0.1 (a TLS destination: its page describes the session).
fn tls_destination(dir: &Path) -> (Proc, u16) {
    let (cert, key) = support::make_cert(dir, "dest");
    for _ in 0..5 {
        let port = free_port(LOCALHOST_V4);
        let mut cmd = support::openssl();
        cmd.args(["s_server", "-www", "-accept", &format!("127.0.0.1:{port}"), "-cert"])
            .arg(&cert)
            .arg("-key")
            .arg(&key);
        let mut proc = Proc::spawn(&mut cmd, true);
        let deadline = Instant::now() + SHORT;
        while proc.try_status().is_none() && Instant::now() < deadline {
            if TcpStream::connect((LOCALHOST_V4, port)).is_ok() {
                return (proc, port);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    panic!("openssl s_server did not start");
}

/// Sends `request` to the HTTP proxy and returns its status line.
fn proxy_status(port: u16, request: &[u8]) -> String {
    let mut s = TcpStream::connect((LOCALHOST_V4, port)).unwrap();
    s.set_read_timeout(Some(TIMEOUT)).unwrap();
    std::io::Write::write_all(&mut s, request).unwrap();
    let mut answer = Vec::new();
    let _ = s.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).lines().next().unwrap_or_default().to_string()
}

/// `--http`: curl through the HTTP proxy, absolute-form (`--proxy`) and CONNECT
/// (`--proxytunnel`, and `https_proxy=` to a TLS server), byte-exact; a closed port is 502, a
/// destination the concentrator's policy refuses is 403, a malformed request 400, an oversized
/// head 431. The same client also serves SOCKS5 (front ends combine).
#[test]
fn curl_through_http_connect_proxy() {
    require_curl();
    let web = Web::start(&[("big.bin", 3_000_000)]);
    let dir = TempDir::new("tunnel-http");
    let (_tls, tls_port) = tls_destination(dir.path());
    let mut extra = ALLOW_LOOPBACK.to_vec();
    extra.extend(["--deny-dest", "127.0.0.2/32"]);
    let (_server, ports) = start_server_with(1, &extra);
    let socks_port = free_port(LOCALHOST_V4);
    let (mut client, http_port) = start_client(&ports, |p| {
        vec!["--http".into(), format!("127.0.0.1:{p}"), "--socks".into(), format!("127.0.0.1:{socks_port}")]
    });
    let proxy = format!("http://127.0.0.1:{http_port}");
    let url = format!("http://127.0.0.1:{}/big.bin", web.port);
    for (i, flags) in [&["--proxy", &proxy][..], &["--proxy", &proxy, "--proxytunnel"][..]].iter().enumerate() {
        let dst = dir.path().join(format!("{i}.bin"));
        let mut cmd = Command::new("curl");
        cmd.args(["-sS", "--fail", "--max-time", "60"]).args(*flags).arg("-o").arg(&dst).arg(&url);
        let done = run(&mut cmd, None, TIMEOUT + TIMEOUT);
        assert!(done.status.success(), "curl {flags:?}: {}\n{}", done.describe(), client.diagnostics());
        assert_eq!(sha256(&dst), web.sha256("big.bin"), "{flags:?} is byte-exact");
    }
    // https_proxy= with a TLS destination: CONNECT, then TLS end to end.
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "--fail", "-k", "--max-time", "60", &format!("https://127.0.0.1:{tls_port}/")])
        .env("https_proxy", &proxy)
        .env_remove("no_proxy")
        .env_remove("NO_PROXY");
    let done = run(&mut cmd, None, TIMEOUT + TIMEOUT);
    assert!(done.status.success(), "curl via https_proxy: {}\n{}", done.describe(), client.diagnostics());
    assert!(done.stdout_text().contains("s_server"), "the TLS server's page: {}", done.stdout_text());
    // SOCKS5 on the same client.
    let dst = dir.path().join("socks.bin");
    let done = curl(socks_port, true, &url, &dst, &[]);
    assert!(done.status.success(), "curl via SOCKS5: {}", done.describe());
    assert_eq!(sha256(&dst), web.sha256("big.bin"));

    let closed = free_port(LOCALHOST_V4);
    let cases: [(Vec<u8>, &str); 5] = [
        (format!("CONNECT 127.0.0.1:{closed} HTTP/1.1\r\n\r\n").into_bytes(), "HTTP/1.1 502"),
        (format!("GET http://127.0.0.1:{closed}/ HTTP/1.1\r\n\r\n").into_bytes(), "HTTP/1.1 502"),
        (format!("CONNECT 127.0.0.2:{} HTTP/1.1\r\n\r\n", web.port).into_bytes(), "HTTP/1.1 403"),
        (b"HELLO\r\n\r\n".to_vec(), "HTTP/1.1 400"),
        // Exactly the 16 KiB limit without the end of the head: all read (no RST), then 431.
        ([b"CONNECT a:1 HTTP/1.1\r\nX: ".to_vec(), vec![b'y'; 16_384 - 25]].concat(), "HTTP/1.1 431"),
    ];
    for (request, want) in cases {
        let got = proxy_status(http_port, &request);
        assert!(
            got.starts_with(want),
            "{}: {got}, expected {want}",
            String::from_utf8_lossy(&request[..request.len().min(30)])
        );
    }
}

/// `tcpls tunnel server` on 127.0.0.1:`port` (a restart on the same port), loopback allowed.
fn server_on(port: u16) -> Proc {
    let mut cmd = tcpls();
    cmd.args(["tunnel", "server", "--listen", &format!("127.0.0.1:{port}")]).args(ALLOW_LOOPBACK);
    let mut proc = Proc::spawn(&mut cmd, false);
    proc.stderr.wait_for(b"listening on", SHORT).unwrap_or_else(|e| panic!("{e}\n{}", proc.diagnostics()));
    proc
}

/// How soon after the concentrator is back new connections must work: the client's backoff is
/// capped at 1 s (`--reconnect-max 1`), a new connection waits up to 10 s for the session
/// (`--reconnect-wait`), so it is served within ~1.5 s; 8 s leaves room for a loaded machine.
const RECONNECT_BOUND: Duration = Duration::from_secs(8);

/// Reconnection: the concentrator is killed and restarted on the same port, once during a
/// download (that connection ends with an error at once, not a hang; the client keeps its
/// SOCKS5 listener) and once while idle; each time a new download through the same client
/// succeeds, byte-exact, within [`RECONNECT_BOUND`] of the restart, and the client logs the
/// outage once with its duration.
#[test]
fn client_reconnects_after_concentrator_restart() {
    require_curl();
    let web = Web::start(&[("big.bin", 20_000_000), ("small.bin", 200_000)]);
    let (server, ports) = start_server(1);
    let (mut client, socks_port) = start_client(&ports, |p| {
        let mut m = socks(p);
        m.extend(["--reconnect-max".into(), "1".into()]);
        m
    });
    let out = TempDir::new("tunnel-reconnect");
    let url = |f: &str| format!("http://127.0.0.1:{}/{f}", web.port);

    // During traffic: a rate-limited download is under way when the concentrator dies.
    let big = out.path().join("big.bin");
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "--fail", "--max-time", "60", "--limit-rate", "2M", "--socks5-hostname"])
        .arg(format!("127.0.0.1:{socks_port}"))
        .arg("-o")
        .arg(&big)
        .arg(url("big.bin"));
    let mut download = Proc::spawn(&mut cmd, false);
    let deadline = Instant::now() + SHORT;
    while std::fs::metadata(&big).map(|m| m.len()).unwrap_or(0) < 1_000_000 {
        assert!(Instant::now() < deadline, "the download did not start\n{}", client.diagnostics());
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(server);
    let server = server_on(ports[0]);
    let restarted = Instant::now();
    let deadline = Instant::now() + RECONNECT_BOUND;
    let status = loop {
        if let Some(s) = download.try_status() {
            break s;
        }
        assert!(Instant::now() < deadline, "the download did not end\n{}", client.diagnostics());
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(!status.success(), "the connection in flight must end with an error: {}", download.diagnostics());
    let small = out.path().join("small.bin");
    let done = curl(socks_port, true, &url("small.bin"), &small, &[]);
    assert!(done.status.success(), "after the restart: {}\n{}", done.describe(), client.diagnostics());
    assert!(restarted.elapsed() < RECONNECT_BOUND, "served {:?} after the restart", restarted.elapsed());
    assert_eq!(sha256(&small), web.sha256("small.bin"));
    client
        .stderr
        .wait_for(b"re-established after an outage of", SHORT)
        .unwrap_or_else(|e| panic!("{e}\n{}", client.diagnostics()));

    // Idle: killed and restarted with no connection open; the next one waits for the session.
    drop(server);
    std::thread::sleep(Duration::from_millis(500));
    let _server = server_on(ports[0]);
    let restarted = Instant::now();
    std::fs::remove_file(&small).unwrap();
    let done = curl(socks_port, true, &url("small.bin"), &small, &[]);
    assert!(done.status.success(), "after the idle restart: {}\n{}", done.describe(), client.diagnostics());
    assert!(restarted.elapsed() < RECONNECT_BOUND, "served {:?} after the restart", restarted.elapsed());
    assert_eq!(sha256(&small), web.sha256("small.bin"));
    let deadline = Instant::now() + SHORT;
    while client.stderr.text().matches("re-established after an outage of").count() < 2 {
        assert!(Instant::now() < deadline, "second outage not logged\n{}", client.diagnostics());
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = client.stderr.text();
    assert_eq!(log.matches("lost (").count(), 2, "each outage logged once when it starts:\n{log}");
}

/// dnsmasq on 127.0.0.1 answering `tunnel.test` with 192.0.2.7 (no upstream, no config file).
fn dnsmasq() -> Option<(Proc, u16)> {
    if Command::new("dnsmasq").arg("--version").output().is_err() {
        return None;
    }
    for _ in 0..5 {
        let port = support::free_port(LOCALHOST_V4);
        let mut cmd = Command::new("dnsmasq");
        cmd.args(["--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv", "--no-hosts", "--bind-interfaces"])
            .args(["--listen-address=127.0.0.1", "--pid-file=", "--log-facility=-", "--address=/tunnel.test/192.0.2.7"])
            .arg(format!("--port={port}"));
        let mut proc = Proc::spawn(&mut cmd, false);
        std::thread::sleep(Duration::from_millis(300));
        if proc.try_status().is_none() {
            return Some((proc, port));
        }
    }
    panic!("dnsmasq did not start");
}

/// A UDP echo server on 127.0.0.1 (a thread; ends with the test process).
fn udp_echo() -> u16 {
    let sock = std::net::UdpSocket::bind((LOCALHOST_V4, 0)).unwrap();
    let port = sock.local_addr().unwrap().port();
    std::thread::spawn(move || {
        let mut buf = [0u8; 65536];
        while let Ok((n, from)) = sock.recv_from(&mut buf) {
            let _ = sock.send_to(&buf[..n], from);
        }
    });
    port
}

/// UDP: a real DNS query (`dig` against dnsmasq) through `--forward-udp`; SOCKS5 UDP ASSOCIATE
/// to a UDP echo server, 200 numbered datagrams, each answer checked and the losses counted
/// (loopback: at most a few); a destination the concentrator's policy refuses gets nothing.
#[test]
fn udp_dns_and_echo_through_the_tunnel() {
    let Some((_dns, dns_port)) = dnsmasq() else {
        eprintln!("SKIPPED: udp_dns_and_echo_through_the_tunnel: dnsmasq is not installed");
        return;
    };
    if Command::new("dig").arg("-v").output().is_err() {
        eprintln!("SKIPPED: udp_dns_and_echo_through_the_tunnel: dig (dnsutils) is not installed");
        return;
    }
    let mut extra = ALLOW_LOOPBACK.to_vec();
    extra.extend(["--deny-dest", "127.0.0.2/32"]);
    let (mut server, ports) = start_server_with(1, &extra);
    let dns_local = free_port(LOCALHOST_V4);
    let (mut client, socks_port) = start_client(&ports, |p| {
        let mut m = socks(p);
        m.extend(["--forward-udp".into(), format!("127.0.0.1:{dns_local}=127.0.0.1:{dns_port}")]);
        m
    });
    let mut dig = Command::new("dig");
    dig.args(["@127.0.0.1", "-p", &dns_local.to_string(), "tunnel.test", "A", "+short", "+tries=3", "+time=3"]);
    let done = run(&mut dig, None, TIMEOUT);
    assert_eq!(done.stdout_text().trim(), "192.0.2.7", "dig: {}\n{}", done.describe(), client.diagnostics());

    // SOCKS5 UDP ASSOCIATE.
    let echo = udp_echo();
    let mut control = TcpStream::connect((LOCALHOST_V4, socks_port)).unwrap();
    control.set_read_timeout(Some(SHORT)).unwrap();
    std::io::Write::write_all(&mut control, &[5, 1, 0, 5, 3, 0, 1, 0, 0, 0, 0, 0, 0]).unwrap();
    let mut answer = [0u8; 12];
    control.read_exact(&mut answer).unwrap();
    assert_eq!(&answer[..6], &[5, 0, 5, 0, 0, 1], "greeting accepted, UDP ASSOCIATE succeeded, IPv4 bound address");
    let relay = std::net::SocketAddr::from((
        [answer[6], answer[7], answer[8], answer[9]],
        u16::from_be_bytes([answer[10], answer[11]]),
    ));
    let udp = std::net::UdpSocket::bind((LOCALHOST_V4, 0)).unwrap();
    udp.set_read_timeout(Some(Duration::from_millis(3000))).unwrap();
    let header = |ip: [u8; 4], port: u16| [&[0u8, 0, 0, 1][..], &ip, &port.to_be_bytes()].concat();
    // The flow's first datagram waits for its stream to open (a round trip to the concentrator);
    // a burst behind it would overflow the flow's bounded queue (64, dropped): warm up first.
    let mut buf = [0u8; 65536];
    udp.send_to(&[header([127, 0, 0, 1], echo), b"warm-up".to_vec()].concat(), relay).unwrap();
    let (n, _) = udp.recv_from(&mut buf).unwrap_or_else(|e| panic!("no echo: {e}\n{}", client.diagnostics()));
    assert_eq!(&buf[10..n], b"warm-up");
    const N: u32 = 200;
    let expected = |i: u32| format!("datagram {i} {}", "x".repeat((i as usize * 37) % 1200));
    // Read while sending: our own socket's receive buffer must not be what drops.
    let reader = udp.try_clone().unwrap();
    let want = header([127, 0, 0, 1], echo);
    let receiving = std::thread::spawn(move || {
        let mut received = std::collections::HashSet::new();
        let mut buf = [0u8; 65536];
        while let Ok((n, _)) = reader.recv_from(&mut buf) {
            let d = &buf[..n];
            assert_eq!(&d[..10], &want[..], "the answer names the echo server");
            let text = String::from_utf8_lossy(&d[10..]).to_string();
            let i: u32 = text.split(' ').nth(1).and_then(|x| x.parse().ok()).unwrap_or_else(|| panic!("{text}"));
            assert_eq!(text, expected(i), "content intact");
            assert!(received.insert(i), "datagram {i} duplicated");
            if received.len() == N as usize {
                break;
            }
        }
        received
    });
    for i in 0..N {
        udp.send_to(&[header([127, 0, 0, 1], echo), expected(i).into_bytes()].concat(), relay).unwrap();
        if i % 20 == 19 {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    let received = receiving.join().unwrap();
    let lost = N as usize - received.len();
    eprintln!("UDP echo through SOCKS5 UDP ASSOCIATE: {N} sent, {} back, {lost} lost", received.len());
    let missing: Vec<u32> = (0..N).filter(|i| !received.contains(i)).collect();
    assert!(lost <= (N / 10) as usize, "{lost} of {N} lost on loopback: {missing:?}\n{}", client.diagnostics());

    // Refused by the concentrator's policy: no answer, a log line with the reason.
    udp.set_read_timeout(Some(Duration::from_millis(1500))).unwrap();
    udp.send_to(&[header([127, 0, 0, 2], echo), b"refused?".to_vec()].concat(), relay).unwrap();
    while let Ok((n, _)) = udp.recv_from(&mut buf) {
        // Only late echoes of the numbered datagrams may still arrive.
        assert!(!buf[..n].ends_with(b"refused?"), "no answer from a refused destination");
    }
    server.stderr.wait_for(b"udp 127.0.0.2", SHORT).unwrap_or_else(|e| panic!("{e}\n{}", server.diagnostics()));
    drop(control);
}

/// Configuration files: `check-config` accepts a good file and names the line of a mistake;
/// server and client run from `--config` alone; SIGHUP after the file changed its destination
/// policy: a new connection to the now denied destination is refused, while a download started
/// before goes on to the end, byte-exact, on the same session (nothing dropped, no reconnection).
#[test]
fn config_file_and_policy_reload_without_dropping_sessions() {
    require_curl();
    let web = Web::start(&[("slow.bin", 4_000_000), ("page.html", 5_000)]);
    let dir = TempDir::new("tunnel-config");
    support::make_cert(dir.path(), "server");
    let port = free_port(LOCALHOST_V4);
    let server_table = |deny: &str| {
        format!(
            "[server]\nlisten = [\"127.0.0.1:{port}\"]\ncert = \"server/cert.pem\"\nkey = \"server/key.pem\"\n\
             allow-dest = [\"127.0.0.0/8\"]\ndeny-dest = [{deny}]\nmax-sessions = 8\n"
        )
    };
    let socks_port = free_port(LOCALHOST_V4);
    let client_table = format!(
        "[client]\nconcentrator = \"127.0.0.1:{port}\"\nserver-name = \"localhost\"\nca = \"server/cert.pem\"\n\
         socks = \"127.0.0.1:{socks_port}\"\nreconnect-max = 1.0\n"
    );
    let file = dir.path().join("tunnel.toml");
    std::fs::write(&file, server_table("") + &client_table).unwrap();
    let check = run(tcpls().args(["tunnel", "check-config"]).arg(&file), None, SHORT).success();
    assert!(check.stdout_text().contains("[server]: OK") && check.stdout_text().contains("[client]: OK"));
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[server]\nlisten = [\"127.0.0.1:1\"]\nallow-dst = [\"127.0.0.0/8\"]\n").unwrap();
    run(tcpls().args(["tunnel", "check-config"]).arg(&bad), None, SHORT).one_line_error("line 3");
    std::fs::write(&bad, "[server]\ndeny-dest = [\"example.org\"]\n").unwrap();
    run(tcpls().args(["tunnel", "check-config"]).arg(&bad), None, SHORT).one_line_error("example.org");

    let mut server = Proc::spawn(tcpls().args(["tunnel", "server", "--config"]).arg(&file), false);
    server.stderr.wait_for(b"listening on", SHORT).unwrap_or_else(|e| panic!("{e}\n{}", server.diagnostics()));
    let mut client = Proc::spawn(tcpls().args(["tunnel", "client", "--config"]).arg(&file), false);
    client.stderr.wait_for(b"session to", SHORT).unwrap_or_else(|e| panic!("{e}\n{}", client.diagnostics()));

    let out = TempDir::new("tunnel-config-out");
    let slow = out.path().join("slow.bin");
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "--fail", "--max-time", "60", "--limit-rate", "1500K", "--socks5"])
        .arg(format!("127.0.0.1:{socks_port}"))
        .arg("-o")
        .arg(&slow)
        .arg(format!("http://127.0.0.1:{}/slow.bin", web.port));
    let mut download = Proc::spawn(&mut cmd, false);
    let deadline = Instant::now() + SHORT;
    while std::fs::metadata(&slow).map(|m| m.len()).unwrap_or(0) < 200_000 {
        assert!(Instant::now() < deadline, "the download did not start\n{}", client.diagnostics());
        std::thread::sleep(Duration::from_millis(20));
    }
    std::fs::write(&file, server_table("\"127.0.0.1/32\"") + &client_table).unwrap();
    let hup = Command::new("kill").args(["-HUP", &server.id().to_string()]).status().unwrap();
    assert!(hup.success());
    server
        .stderr
        .wait_for(b"reloaded: destinations", SHORT)
        .unwrap_or_else(|e| panic!("{e}\n{}", server.diagnostics()));
    assert!(server.stderr.text().contains("127.0.0.1/32"), "the new policy is shown: {}", server.diagnostics());
    let done = curl(socks_port, false, &format!("http://127.0.0.1:{}/page.html", web.port), &out.path().join("x"), &[]);
    assert_eq!(done.status.code(), Some(97), "denied after the reload: {}", done.describe());
    assert!(done.stderr.contains("(2)"), "reply 2 (not allowed): {}", done.stderr);
    let status = download.wait(TIMEOUT);
    assert!(status.success(), "the download in flight survives the reload: {}", download.diagnostics());
    assert_eq!(sha256(&slow), web.sha256("slow.bin"));
    assert!(!client.stderr.text().contains("lost"), "no reconnection: {}", client.diagnostics());

    // A broken file on SIGHUP changes nothing: 127.0.0.2 is still allowed (the web server is not
    // there, so the answer is reply 5, connection refused, not 2, not allowed).
    std::fs::write(&file, "[server]\nlisten = 5\n").unwrap();
    Command::new("kill").args(["-HUP", &server.id().to_string()]).status().unwrap();
    server.stderr.wait_for(b"reload failed", SHORT).unwrap_or_else(|e| panic!("{e}\n{}", server.diagnostics()));
    let done = curl(socks_port, false, &format!("http://127.0.0.2:{}/page.html", web.port), &out.path().join("y"), &[]);
    assert!(done.stderr.contains("(5)"), "127.0.0.2 still allowed: {}", done.describe());
}

/// Reverse forwards: the client asks the concentrator to listen on an address its
/// `--allow-reverse` lists; a download from that address (on the concentrator's side) reaches
/// the web server on the client's side, byte-exact. An address not listed is refused: the client
/// logs the refusal and nothing listens there.
#[test]
fn reverse_forward_reached_from_the_concentrator_side() {
    require_curl();
    let web = Web::start(&[("rev.bin", 2_000_000)]);
    let (allowed, denied) = (free_port(LOCALHOST_V4), free_port(LOCALHOST_V4));
    let allow = format!("127.0.0.1:{allowed}");
    let (mut server, ports) = start_server_with(1, &["--allow-reverse", &allow]);
    let (mut client, _) = start_client(&ports, |_| {
        vec![
            "--reverse".into(),
            format!("{allow}=127.0.0.1:{}", web.port),
            "--reverse".into(),
            format!("127.0.0.1:{denied}=127.0.0.1:{}", web.port),
        ]
    });
    client.stderr.wait_for(b"listening", SHORT).unwrap_or_else(|e| panic!("{e}\n{}", client.diagnostics()));
    client
        .stderr
        .wait_for(b"not in its --allow-reverse", SHORT)
        .unwrap_or_else(|e| panic!("{e}\n{}", client.diagnostics()));
    let out = TempDir::new("tunnel-reverse");
    let dst = out.path().join("rev.bin");
    let mut cmd = Command::new("curl");
    cmd.args(["-sS", "--fail", "--max-time", "60", "-o"]).arg(&dst).arg(format!("http://{allow}/rev.bin"));
    let done = run(&mut cmd, None, TIMEOUT + TIMEOUT);
    assert!(done.status.success(), "curl: {}\n{}\n{}", done.describe(), client.diagnostics(), server.diagnostics());
    assert_eq!(sha256(&dst), web.sha256("rev.bin"));
    assert!(TcpStream::connect((LOCALHOST_V4, denied)).is_err(), "nothing listens on the refused address");
    assert!(server.stderr.text().contains("not in --allow-reverse"), "{}", server.diagnostics());
}

/// A concentrator that goes silent (its only path blackholed: no FIN, no RST): the client's
/// keepalive notices it within seconds, the outage is logged, and once the path is back new
/// downloads work again (on a rejoined or a new session), byte-exact. Needs root (tcpls-netem).
#[test]
fn client_notices_a_silent_concentrator_and_recovers() {
    use tcpls_netem::{skip_unless_supported, PathSpec, Side, Topology};
    skip_unless_supported!("tunnel_cli::client_notices_a_silent_concentrator_and_recovers");
    require_curl();
    let topo = Topology::builder().path(PathSpec::new(1.0, 1000.0)).build().unwrap();
    let server_ip = topo.path(0).info().server_v4.unwrap().to_string();
    let dir = TempDir::new("tunnel-silent");
    std::fs::write(dir.path().join("s.bin"), support::payload(500_000, 9)).unwrap();
    let mut web = topo.command(Side::Server, "python3");
    web.args(["-u", "-m", "http.server", "8080", "--bind", "127.0.0.1", "--directory"]).arg(dir.path());
    let mut web = Proc::spawn(&mut web, false);
    web.stdout.wait_for(b"Serving HTTP", SHORT).unwrap_or_else(|e| panic!("{e}\n{}", web.diagnostics()));
    let mut conc = Proc::spawn(
        topo.command(Side::Server, env!("CARGO_BIN_EXE_tcpls")).args([
            "tunnel",
            "server",
            "--listen",
            &format!("{server_ip}:4443"),
            "--allow-dest",
            "127.0.0.0/8",
        ]),
        false,
    );
    conc.stderr.wait_for(b"listening on", SHORT).unwrap_or_else(|e| panic!("{e}\n{}", conc.diagnostics()));
    let mut client = Proc::spawn(
        topo.command(Side::Client, env!("CARGO_BIN_EXE_tcpls")).args([
            "tunnel",
            "client",
            "--insecure",
            "--concentrator",
            &format!("{server_ip}:4443"),
            "--keepalive",
            "1",
            "--reconnect-max",
            "1",
            "--socks",
            "127.0.0.1:1080",
        ]),
        false,
    );
    client.stderr.wait_for(b"accepting on", SHORT).unwrap_or_else(|e| panic!("{e}\n{}", client.diagnostics()));
    let fetch = |name: &str| {
        let dst = dir.path().join(name);
        let mut curl = topo.command(Side::Client, "curl");
        curl.args(["-sS", "--fail", "--max-time", "30", "--socks5-hostname", "127.0.0.1:1080", "-o"])
            .arg(&dst)
            .arg("http://127.0.0.1:8080/s.bin");
        (run(&mut curl, None, TIMEOUT + TIMEOUT), dst)
    };
    let (done, dst) = fetch("before.bin");
    assert!(done.status.success(), "before: {}\n{}", done.describe(), client.diagnostics());
    assert_eq!(sha256(&dst), sha256(&dir.path().join("s.bin")));

    topo.path(0).set_blackhole(true);
    // Keepalive 1 s + ping timeout 1 s + 1 s without a usable connection, with room for load.
    client.stderr.wait_for(b"lost (", SHORT).unwrap_or_else(|e| panic!("{e}\n{}", client.diagnostics()));
    topo.path(0).set_blackhole(false);
    let back = Instant::now();
    let (done, dst) = fetch("after.bin");
    assert!(done.status.success(), "after: {}\n{}", done.describe(), client.diagnostics());
    assert_eq!(sha256(&dst), sha256(&dir.path().join("s.bin")));
    // A reconnection attempt may be waiting out SYN retransmissions when the path comes back.
    assert!(back.elapsed() < Duration::from_secs(20), "served {:?} after the path came back", back.elapsed());
    client
        .stderr
        .wait_for(b"re-established after an outage of", SHORT)
        .unwrap_or_else(|e| panic!("{e}\n{}", client.diagnostics()));
}

/// `--forward-udp LISTEN=TARGET,redundant` with two paths: every datagram is answered exactly
/// once (the copies on the other path, if joined by then, are dropped at each end) and its
/// content is intact.
#[test]
fn redundant_udp_forward_answers_each_datagram_once() {
    let (_server, ports) = start_server_with(2, ALLOW_LOOPBACK);
    let echo = udp_echo();
    let (mut client, local) =
        start_client(&ports, |p| vec!["--forward-udp".into(), format!("127.0.0.1:{p}=127.0.0.1:{echo},redundant")]);
    // The forward says it is redundant (the paths' copies themselves: tunnel_redundant.rs).
    client.stderr.wait_for(b", redundant)", SHORT).unwrap_or_else(|e| panic!("{e}\n{}", client.diagnostics()));
    let udp = std::net::UdpSocket::bind((LOCALHOST_V4, 0)).unwrap();
    udp.connect((LOCALHOST_V4, local)).unwrap();
    udp.set_read_timeout(Some(TIMEOUT)).unwrap();
    let mut buf = [0u8; 65536];
    let expected = |i: u32| format!("datagram {i} {}", "y".repeat((i as usize * 53) % 900));
    // One at a time: on loopback nothing is lost, so every answer comes back.
    for i in 0..50 {
        udp.send(expected(i).as_bytes()).unwrap();
        let n = udp.recv(&mut buf).unwrap_or_else(|e| panic!("no echo of {i}: {e}\n{}", client.diagnostics()));
        assert_eq!(String::from_utf8_lossy(&buf[..n]), expected(i), "answer {i}");
    }
    // Nothing duplicated is pending: the next answer is the next datagram's.
    udp.send(b"last").unwrap();
    let n = udp.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"last", "a duplicate answer reached the application");
}
