//! End-to-end tests of `tcpls tm3 rp` / `tcpls tm3 lp` (docs/CLI.md): real processes on
//! loopback, a TCP echo server in the test as the destination, every byte verified.
//! Every wait has a deadline and every child is killed when its `Proc` is dropped.

#![allow(clippy::unwrap_used)]

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::time::Instant;

use support::{free_port, payload, run, tcpls, Proc, LOCALHOST_V4, SHORT, TIMEOUT};

const PIPES: &str = "4";

/// A TCP echo server on 127.0.0.1 (a thread per connection); lives until the test process ends.
fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind((LOCALHOST_V4, 0)).unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            std::thread::spawn(move || {
                let _ = conn.set_read_timeout(Some(TIMEOUT));
                let _ = conn.set_write_timeout(Some(TIMEOUT));
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    match conn.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => {
                            if conn.write_all(&buf[..n]).is_err() {
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    addr
}

/// Starts `make(port)` on fresh ports until `ready` shows on stderr.
fn start(what: &str, ready: &[u8], make: impl Fn(u16) -> std::process::Command) -> (Proc, u16) {
    support::start_on_free_port(what, ready, make)
}

/// `tcpls tm3 rp 4 --port P`; returns it and P.
fn start_rp() -> (Proc, u16) {
    start_rp_with(&[])
}

/// `tcpls tm3 rp 4 --port P EXTRA...`; returns it and P.
fn start_rp_with(extra: &'static [&'static str]) -> (Proc, u16) {
    start("tcpls tm3 rp", b"tm3 remote proxy listening on", move |port| {
        let mut cmd = tcpls();
        cmd.args(["tm3", "rp", PIPES, "--port", &port.to_string()]).args(extra);
        cmd
    })
}

/// `tcpls tm3 lp 127.0.0.1:RP 4 FLAG VALUE(port)`; returns it and the port it accepts on.
fn start_lp(rp_port: u16, flag: &'static str, value: impl Fn(u16) -> String) -> (Proc, u16) {
    start("tcpls tm3 lp", b"tm3 local proxy", |port| {
        let mut cmd = tcpls();
        cmd.args(["tm3", "lp", &format!("127.0.0.1:{rp_port}"), PIPES, flag, &value(port)]);
        cmd
    })
}

/// Sends `data` on `stream` (from a second thread, so large payloads cannot deadlock) and
/// reads the echo back; the echo must equal `data` byte for byte.
fn echo_roundtrip(stream: TcpStream, data: Vec<u8>) -> Result<(), String> {
    stream.set_read_timeout(Some(TIMEOUT)).map_err(|e| e.to_string())?;
    stream.set_write_timeout(Some(TIMEOUT)).map_err(|e| e.to_string())?;
    let mut writer_stream = stream.try_clone().map_err(|e| e.to_string())?;
    let len = data.len();
    let expected = data.clone();
    let writer = std::thread::spawn(move || writer_stream.write_all(&data).map_err(|e| format!("send: {e}")));
    let mut got = vec![0u8; len];
    let mut read = 0;
    let mut reader = &stream;
    while read < len {
        match reader.read(&mut got[read..]) {
            Ok(0) => return Err(format!("connection closed after {read} of {len} echoed bytes")),
            Ok(n) => read += n,
            Err(e) => return Err(format!("receive after {read} of {len} echoed bytes: {e}")),
        }
    }
    writer.join().map_err(|_| "the sending thread panicked".to_string())??;
    if let Some(i) = got.iter().zip(&expected).position(|(a, b)| a != b) {
        return Err(format!("echo differs at byte {i} of {len}"));
    }
    Ok(())
}

/// Runs `clients` concurrent connections made by `connect(i)`, each echoing pseudo-random data
/// of a different size; fails (with the proxies' output) on any error or after TIMEOUT.
fn concurrent_echoes(
    clients: usize,
    connect: impl Fn(usize) -> Result<TcpStream, String> + Send + Sync + 'static,
    procs: &mut [&mut Proc],
) {
    const SIZES: [usize; 10] = [1, 7, 1000, 4095, 4096, 4097, 65_536, 100_003, 500_000, 1 << 20];
    let connect = std::sync::Arc::new(connect);
    let (tx, rx) = mpsc::channel();
    for i in 0..clients {
        let (tx, connect) = (tx.clone(), connect.clone());
        std::thread::spawn(move || {
            let size = SIZES[i % SIZES.len()] + i;
            let result = connect(i).and_then(|s| echo_roundtrip(s, payload(size, 0x5eed + i as u64)));
            let _ = tx.send((i, size, result));
        });
    }
    drop(tx);
    let deadline = Instant::now() + TIMEOUT;
    let mut failures = Vec::new();
    for _ in 0..clients {
        match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok((_, _, Ok(()))) => {}
            Ok((i, size, Err(e))) => failures.push(format!("client {i} ({size} bytes): {e}")),
            Err(_) => {
                failures.push(format!("timed out after {TIMEOUT:?} waiting for the clients"));
                break;
            }
        }
    }
    if !failures.is_empty() {
        let diag: Vec<String> = procs.iter_mut().map(|p| p.diagnostics()).collect();
        panic!("{}\n\n{}", failures.join("\n"), diag.join("\n\n"));
    }
    for p in procs.iter_mut() {
        if let Some(status) = p.try_status() {
            panic!("a proxy ended unexpectedly with {status}\n{}", p.diagnostics());
        }
    }
}

fn connect_local(port: u16) -> Result<TcpStream, String> {
    let addr = SocketAddr::new(LOCALHOST_V4, port);
    TcpStream::connect_timeout(&addr, SHORT).map_err(|e| format!("connect to {addr}: {e}"))
}

#[test]
fn forward_20_concurrent_echo_clients() {
    let echo = echo_server();
    let (mut rp, rp_port) = start_rp();
    let (mut lp, lp_port) = start_lp(rp_port, "--forward", move |p| format!("127.0.0.1:{p}={echo}"));
    concurrent_echoes(20, move |_| connect_local(lp_port), &mut [&mut rp, &mut lp]);
    // The traffic really went through one TM3 session of 4 pipes.
    rp.stderr.wait_for(b"all 4 pipes established, session started", SHORT).unwrap();
}

/// SOCKS5 (RFC 1928) greeting without authentication and CONNECT to `dst`; returns the reply
/// code (0 = succeeded).
fn socks5_connect(stream: &mut TcpStream, atyp: u8, addr: &[u8], port: u16) -> Result<u8, String> {
    stream.set_read_timeout(Some(SHORT)).map_err(|e| e.to_string())?;
    stream.write_all(&[5, 1, 0]).map_err(|e| format!("SOCKS greeting: {e}"))?;
    let mut choice = [0u8; 2];
    stream.read_exact(&mut choice).map_err(|e| format!("SOCKS method choice: {e}"))?;
    if choice != [5, 0] {
        return Err(format!("SOCKS method choice {choice:?}, expected [5, 0]"));
    }
    let mut req = vec![5, 1, 0, atyp];
    req.extend_from_slice(addr);
    req.extend_from_slice(&port.to_be_bytes());
    stream.write_all(&req).map_err(|e| format!("SOCKS request: {e}"))?;
    let mut head = [0u8; 4];
    stream.read_exact(&mut head).map_err(|e| format!("SOCKS reply: {e}"))?;
    if head[0] != 5 {
        return Err(format!("SOCKS reply version {}", head[0]));
    }
    let rest = match head[3] {
        1 => 4 + 2,
        4 => 16 + 2,
        t => return Err(format!("SOCKS reply address type {t}")),
    };
    let mut bound = vec![0u8; rest];
    stream.read_exact(&mut bound).map_err(|e| format!("SOCKS reply address: {e}"))?;
    Ok(head[1])
}

#[test]
fn socks5_concurrent_echo_clients() {
    let echo = echo_server();
    let (mut rp, rp_port) = start_rp();
    let (mut lp, socks_port) = start_lp(rp_port, "--socks", |p| format!("127.0.0.1:{p}"));
    let SocketAddr::V4(echo_v4) = echo else { unreachable!() };
    concurrent_echoes(
        10,
        move |_| {
            let mut s = connect_local(socks_port)?;
            match socks5_connect(&mut s, 1, &echo_v4.ip().octets(), echo_v4.port())? {
                0 => Ok(s),
                code => Err(format!("SOCKS CONNECT refused with reply {code}")),
            }
        },
        &mut [&mut rp, &mut lp],
    );
    // Domain names cannot be carried by the TM3 SYN: reply 0x08 (address type not supported).
    let mut s = connect_local(socks_port).unwrap();
    let name = b"localhost";
    let mut addr = vec![name.len() as u8];
    addr.extend_from_slice(name);
    assert_eq!(socks5_connect(&mut s, 3, &addr, echo_v4.port()), Ok(8), "{}", lp.diagnostics());
}

#[test]
fn help_shows_examples() {
    for sub in [&["tm3", "--help"][..], &["tm3", "rp", "--help"], &["tm3", "lp", "--help"]] {
        let done = run(tcpls().args(sub), None, SHORT).success();
        assert!(
            done.stdout_text().contains("Example"),
            "`tcpls {}` shows no example: {}",
            sub.join(" "),
            done.describe()
        );
    }
    let done = run(tcpls().args(["tm3", "lp", "--help"]), None, SHORT).success();
    assert!(done.stdout_text().contains("iptables"), "lp --help should show the REDIRECT rule: {}", done.describe());
}

#[test]
fn errors_are_one_line() {
    // Nothing listens on a freshly released port: the pipes cannot be opened.
    let dead = free_port(LOCALHOST_V4);
    let listen = free_port(LOCALHOST_V4);
    run(
        tcpls().args(["tm3", "lp", &format!("127.0.0.1:{dead}"), PIPES, "--forward", &format!("{listen}=127.0.0.1:9")]),
        None,
        SHORT,
    )
    .one_line_error("remote proxy");
    run(tcpls().args(["tm3", "lp", "127.0.0.1:6000", PIPES, "--forward", "nonsense"]), None, SHORT)
        .one_line_error("LISTEN=TARGET");
    run(tcpls().args(["tm3", "rp", "0"]), None, SHORT).one_line_error("1..=1024");
    // The remote proxy's port is taken.
    let taken = TcpListener::bind("0.0.0.0:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    run(tcpls().args(["tm3", "rp", PIPES, "--port", &port.to_string()]), None, SHORT).one_line_error("cannot listen");
}

/// The remote proxy connects anywhere by default, as the TM3 specification says (and warns
/// about it); `--safe-dest` makes it refuse its own loopback like the tunnel concentrator: the
/// application's connection is reset and the destination never sees a connection.
#[test]
fn safe_dest_refuses_the_remote_proxys_loopback() {
    let (mut open_rp, _) = start_rp();
    open_rp.stderr.wait_for(b"WARNING", SHORT).unwrap_or_else(|e| panic!("{e}\n{}", open_rp.diagnostics()));
    drop(open_rp);

    let (mut rp, rp_port) = start_rp_with(&["--safe-dest", "--deny-dest", "192.0.2.0/24"]);
    let dest = TcpListener::bind((LOCALHOST_V4, 0)).unwrap();
    dest.set_nonblocking(true).unwrap();
    let target = dest.local_addr().unwrap();
    let (mut lp, lp_port) = start_lp(rp_port, "--forward", move |p| format!("127.0.0.1:{p}={target}"));
    let r = connect_local(lp_port).map_err(std::io::Error::other).and_then(|mut s| {
        s.set_read_timeout(Some(SHORT))?;
        let _ = s.write_all(b"hello");
        s.read(&mut [0u8; 8])
    });
    assert!(
        matches!(&r, Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset),
        "reset expected, got {r:?}\n{}\n{}",
        rp.diagnostics(),
        lp.diagnostics()
    );
    rp.stderr.wait_for(b"is loopback", SHORT).unwrap_or_else(|e| panic!("{e}\n{}", rp.diagnostics()));
    assert_eq!(dest.accept().unwrap_err().kind(), std::io::ErrorKind::WouldBlock, "nothing connected to it");
    assert!(!rp.stderr.text().contains("WARNING"), "no open-proxy warning with --safe-dest");
    // --allow-dest only lifts --safe-dest's refusals.
    let done = run(tcpls().args(["tm3", "rp", PIPES, "--allow-dest", "127.0.0.0/8"]), None, SHORT);
    assert!(!done.status.success() && done.stderr.contains("--safe-dest"), "{}", done.describe());
    run(tcpls().args(["tm3", "rp", PIPES, "--deny-dest", "300.0.0.0/8"]), None, SHORT).one_line_error("--deny-dest");
}
