//! Helpers for the end-to-end tests: real `tcpls` (and `openssl`) processes on loopback.
//!
//! Every child process is owned by a [`Proc`], which kills it when dropped (also when a test
//! panics), and every wait has a deadline, so a broken build fails instead of hanging CI.

#![allow(dead_code, clippy::unwrap_used)]

use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Upper bound for any single process run or wait in these tests.
pub const TIMEOUT: Duration = Duration::from_secs(30);
/// For things that should happen at once (errors, startup, echoes).
pub const SHORT: Duration = Duration::from_secs(10);

pub const LOCALHOST_V4: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
pub const LOCALHOST_V6: IpAddr = IpAddr::V6(Ipv6Addr::LOCALHOST);

/// A `tcpls` command (the binary built for these tests).
pub fn tcpls() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tcpls"))
}

/// An `openssl` command; fails the test with a clear message if OpenSSL is not installed.
pub fn openssl() -> Command {
    static FOUND: OnceLock<Result<String, String>> = OnceLock::new();
    let found = FOUND.get_or_init(|| match Command::new("openssl").arg("version").output() {
        Ok(out) if out.status.success() => Ok(String::from_utf8_lossy(&out.stdout).trim().to_string()),
        Ok(out) => Err(format!("`openssl version` failed: {}", String::from_utf8_lossy(&out.stderr).trim())),
        Err(e) => Err(format!("cannot run `openssl`: {e}")),
    });
    if let Err(e) = found {
        panic!(
            "{e}\nThese tests need the OpenSSL command line tool: install openssl \
             (e.g. `apt-get install openssl`) and run them again."
        );
    }
    Command::new("openssl")
}

/// A free TCP port on `ip` and on the wildcard address, outside the kernel's ephemeral range
/// (`tcpls_test::free_port`); callers retry the start of what binds it on a lost race.
pub fn free_port(ip: IpAddr) -> u16 {
    tcpls_test::free_port(ip)
}

/// Whether `::1` can be used on this machine.
pub fn ipv6_available() -> bool {
    TcpListener::bind(SocketAddr::new(LOCALHOST_V6, 0)).is_ok()
}

/// A directory removed when dropped (the workspace's test kit).
#[allow(unused_imports)] // not every test file writes files
pub use tcpls_test::TempDir;

/// `tcpls cert --out DIR/NAME`: returns (cert.pem, key.pem).
pub fn make_cert(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let out = dir.join(name);
    let done = run(tcpls().arg("cert").arg("--out").arg(&out), None, SHORT);
    assert!(done.status.success(), "tcpls cert failed: {}", done.describe());
    (out.join("cert.pem"), out.join("key.pem"))
}

/// One output pipe of a child, read by a thread so the child never blocks on it.
pub struct Pipe {
    rx: Receiver<Vec<u8>>,
    buf: Vec<u8>,
    eof: bool,
}

impl Pipe {
    fn new<R: Read + Send + 'static>(mut reader: R) -> Self {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut chunk = vec![0u8; 64 * 1024];
            loop {
                match reader.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if tx.send(chunk[..n].to_vec()).is_err() {
                            break;
                        }
                    }
                }
            }
        });
        Self { rx, buf: Vec::new(), eof: false }
    }

    /// Waits for one more chunk until `deadline`; false on timeout or end of file.
    fn pump(&mut self, deadline: Instant) -> bool {
        if self.eof {
            return false;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        match self.rx.recv_timeout(left) {
            Ok(chunk) => {
                self.buf.extend_from_slice(&chunk);
                true
            }
            Err(RecvTimeoutError::Timeout) => false,
            Err(RecvTimeoutError::Disconnected) => {
                self.eof = true;
                false
            }
        }
    }

    /// Takes in whatever has arrived so far.
    fn drain(&mut self) {
        loop {
            match self.rx.try_recv() {
                Ok(chunk) => self.buf.extend_from_slice(&chunk),
                Err(mpsc::TryRecvError::Empty) => return,
                Err(mpsc::TryRecvError::Disconnected) => {
                    self.eof = true;
                    return;
                }
            }
        }
    }

    /// Reads until `needle` has arrived (anywhere in the output so far).
    pub fn wait_for(&mut self, needle: &[u8], timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        loop {
            self.drain();
            if contains(&self.buf, needle) {
                return Ok(());
            }
            if !self.pump(deadline) {
                self.drain();
                if contains(&self.buf, needle) {
                    return Ok(());
                }
                let why = if self.eof { "the pipe was closed" } else { "timed out" };
                return Err(format!(
                    "{why} waiting for {:?}; got so far: {:?}",
                    String::from_utf8_lossy(needle),
                    tail(&self.buf)
                ));
            }
        }
    }

    /// Reads until the end of file; false on timeout.
    pub fn wait_eof(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while !self.eof {
            if !self.pump(deadline) && !self.eof {
                return false;
            }
        }
        true
    }

    pub fn bytes(&mut self) -> &[u8] {
        self.drain();
        &self.buf
    }

    pub fn text(&mut self) -> String {
        String::from_utf8_lossy(self.bytes()).into_owned()
    }
}

pub fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    needle.is_empty() || haystack.windows(needle.len()).any(|w| w == needle)
}

/// Some output for failure messages: all of it, or its beginning and end if it is long.
fn tail(buf: &[u8]) -> String {
    const KEEP: usize = 1500;
    if buf.len() <= 2 * KEEP {
        return String::from_utf8_lossy(buf).into_owned();
    }
    format!(
        "{}\n[... {} bytes ...]\n{}",
        String::from_utf8_lossy(&buf[..KEEP]),
        buf.len() - 2 * KEEP,
        String::from_utf8_lossy(&buf[buf.len() - KEEP..])
    )
}

/// A running child process, killed when dropped.
pub struct Proc {
    pub name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    pub stdout: Pipe,
    pub stderr: Pipe,
    started: Instant,
}

impl Proc {
    /// Spawns `cmd` with stdout and stderr captured and stdin piped (or closed).
    pub fn spawn(cmd: &mut Command, piped_stdin: bool) -> Self {
        let name = format!("{cmd:?}");
        cmd.stdin(if piped_stdin { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let started = Instant::now();
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {name}: {e}"));
        let stdout = Pipe::new(child.stdout.take().unwrap());
        let stderr = Pipe::new(child.stderr.take().unwrap());
        let stdin = child.stdin.take();
        Self { name, child, stdin, stdout, stderr, started }
    }

    /// Writes to the child's stdin (which must be piped and still open).
    pub fn write(&mut self, data: &[u8]) {
        let stdin = self.stdin.as_mut().unwrap_or_else(|| panic!("stdin of {} is not open", self.name));
        stdin.write_all(data).and_then(|()| stdin.flush()).unwrap_or_else(|e| panic!("writing to {}: {e}", self.name));
    }

    pub fn take_stdin(&mut self) -> Option<ChildStdin> {
        self.stdin.take()
    }

    pub fn close_stdin(&mut self) {
        self.stdin = None;
    }

    /// The exit status if the child has ended.
    pub fn try_status(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().unwrap_or_else(|e| panic!("waiting for {}: {e}", self.name))
    }

    /// Waits for the child to end; on timeout kills it and fails the test. Its output is then
    /// read to the end: the pipes' reader threads can lag behind the exit on a loaded machine,
    /// and what it printed last is what a test reads after this.
    pub fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.try_status() {
                // Bounded: a grandchild holding a pipe open must not hang the test.
                self.stdout.wait_eof(SHORT);
                self.stderr.wait_eof(SHORT);
                return status;
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("did not end within {timeout:?}: {}", self.diagnostics());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The child's process ID (to send it a signal).
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Sends SIGINT, as Ctrl-C in a terminal does.
    pub fn interrupt(&self) {
        let status = Command::new("kill").args(["-INT", &self.child.id().to_string()]).status();
        assert!(status.is_ok_and(|s| s.success()), "cannot send SIGINT to {}", self.name);
    }

    /// What the child printed so far (for failure messages).
    pub fn diagnostics(&mut self) -> String {
        let (out, err) = (tail(self.stdout.bytes()), tail(self.stderr.bytes()));
        format!("{}\n--- stdout:\n{out}\n--- stderr:\n{err}", self.name)
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.stdin = None;
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// A finished process run.
pub struct Finished {
    pub name: String,
    pub status: ExitStatus,
    pub stdout: Vec<u8>,
    pub stderr: String,
    pub elapsed: Duration,
}

impl Finished {
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    pub fn describe(&self) -> String {
        format!(
            "{}\n  status: {}\n--- stdout:\n{}\n--- stderr:\n{}",
            self.name,
            self.status,
            tail(&self.stdout),
            self.stderr
        )
    }

    /// stdout parsed as one JSON document.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.stdout).unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", self.describe()))
    }

    /// Asserts success (exit status 0).
    pub fn success(self) -> Self {
        assert!(self.status.success(), "expected success: {}", self.describe());
        self
    }

    /// Asserts the CLI contract for failures: non-zero exit and exactly one line on stderr that
    /// mentions `needle` (case-insensitive), and no panic.
    pub fn one_line_error(&self, needle: &str) {
        assert!(!self.status.success(), "expected a failure: {}", self.describe());
        assert!(self.status.code().is_some(), "killed by a signal, not a clean exit: {}", self.describe());
        let err = self.stderr.trim();
        assert!(!err.contains("panicked"), "the process panicked: {}", self.describe());
        assert_eq!(err.lines().count(), 1, "expected exactly one line on stderr: {}", self.describe());
        assert!(
            err.to_lowercase().contains(&needle.to_lowercase()),
            "the error should mention {needle:?}: {}",
            self.describe()
        );
    }
}

/// Runs `cmd` to completion (feeding `stdin` if given) within `timeout`.
pub fn run(cmd: &mut Command, stdin: Option<Vec<u8>>, timeout: Duration) -> Finished {
    let mut p = Proc::spawn(cmd, stdin.is_some());
    let writer = match (stdin, p.take_stdin()) {
        (Some(data), Some(mut w)) => Some(std::thread::spawn(move || {
            let _ = w.write_all(&data);
        })),
        _ => None,
    };
    let status = p.wait(timeout);
    let elapsed = p.elapsed();
    // The pipes close when the process ends (it has no children).
    assert!(p.stdout.wait_eof(SHORT) && p.stderr.wait_eof(SHORT), "output of {} did not end", p.name);
    if let Some(w) = writer {
        let _ = w.join();
    }
    Finished {
        name: p.name.clone(),
        status,
        stdout: std::mem::take(&mut p.stdout.buf),
        stderr: String::from_utf8_lossy(&p.stderr.buf).into_owned(),
        elapsed,
    }
}

/// A `tcpls serve` process listening on `addr`.
pub struct Server {
    pub proc: Proc,
    pub addr: SocketAddr,
}

/// Starts `tcpls serve --listen IP:PORT ARGS...` on a free port and waits until it listens.
pub fn serve(ip: IpAddr, args: &[&str]) -> Server {
    serve_os(ip, args.iter().map(OsStr::new))
}

/// [`serve`] with the certificate `cert` and its key `key` (from [`make_cert`]): `tcpls serve
/// --listen IP:PORT --cert CERT --key KEY ARGS...`, the server of most end-to-end tests.
pub fn serve_with_cert(ip: IpAddr, cert: &Path, key: &Path, args: &[&str]) -> Server {
    let pem = [OsStr::new("--cert"), cert.as_os_str(), OsStr::new("--key"), key.as_os_str()];
    serve_os(ip, pem.into_iter().chain(args.iter().map(OsStr::new)))
}

fn serve_os<'a>(ip: IpAddr, args: impl Iterator<Item = &'a OsStr> + Clone) -> Server {
    for attempt in 0.. {
        let addr = SocketAddr::new(ip, free_port(ip));
        let mut proc =
            Proc::spawn(tcpls().arg("serve").arg("--listen").arg(addr.to_string()).args(args.clone()), false);
        match proc.stderr.wait_for(b"listening on", SHORT) {
            Ok(()) => return Server { proc, addr },
            // Someone took the port between free_port and the bind: try another one.
            Err(_) if attempt < 5 && proc.stderr.text().contains("cannot listen") => continue,
            Err(e) => panic!("tcpls serve did not start: {e}\n{}", proc.diagnostics()),
        }
    }
    unreachable!()
}

impl Server {
    /// `HOST:PORT` as given on a command line.
    pub fn target(&self) -> String {
        self.addr.to_string()
    }

    /// Waits for a server started with `--sessions N` to end by itself, successfully.
    pub fn expect_exit(&mut self) {
        let status = self.proc.wait(SHORT);
        assert!(status.success(), "tcpls serve ended with {status}\n{}", self.proc.diagnostics());
    }

    /// With `--json`: waits for the `n`th session report (a line on stdout) and returns it.
    pub fn session_report(&mut self, n: usize) -> serde_json::Value {
        let deadline = Instant::now() + SHORT;
        loop {
            let text = self.proc.stdout.text();
            let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
            if text.ends_with('\n') && lines.len() >= n {
                let line = lines[n - 1];
                return serde_json::from_str(line)
                    .unwrap_or_else(|e| panic!("tcpls serve --json printed a line that is not JSON ({e}): {line}"));
            }
            if !self.proc.stdout.pump(deadline) {
                panic!("no session report #{n} from tcpls serve --json\n{}", self.proc.diagnostics());
            }
        }
    }

    /// Asserts that the server is still running (no crash).
    pub fn expect_running(&mut self) {
        if let Some(status) = self.proc.try_status() {
            panic!("tcpls serve ended unexpectedly with {status}\n{}", self.proc.diagnostics());
        }
    }
}

/// Deterministic pseudo-random test data: the workspace's one generator (`tcpls-test`, on
/// `tcpls-pattern`).
#[allow(unused_imports)]
pub use tcpls_test::payload;

/// The port of the address printed after `prefix` on `p`'s stderr (a server started on port 0
/// says which port it got: `tcpls tunnel server: listening on 127.0.0.1:41234`).
pub fn listening_port(p: &mut Proc, prefix: &str) -> u16 {
    p.stderr.wait_for(prefix.as_bytes(), SHORT).unwrap_or_else(|e| panic!("{e}\n{}", p.diagnostics()));
    let deadline = Instant::now() + SHORT;
    loop {
        let text = p.stderr.text();
        let line = text.lines().find(|l| l.contains(prefix) && text.contains(&format!("{l}\n")));
        if let Some(addr) = line.and_then(|l| l.split(prefix).nth(1)) {
            let addr = addr.split_whitespace().next().unwrap_or(addr);
            let parsed: SocketAddr =
                addr.parse().unwrap_or_else(|_| panic!("not an address after {prefix:?}: {addr:?}"));
            return parsed.port();
        }
        assert!(Instant::now() < deadline, "no complete line after {prefix:?}\n{}", p.diagnostics());
        p.stderr.pump(deadline);
    }
}

/// Spawns `make(port)` on a fresh port until its stderr shows `ready`; retries with another port
/// when someone else took it between `free_port` and the bind ("cannot listen").
pub fn start_on_free_port(what: &str, ready: &[u8], make: impl Fn(u16) -> Command) -> (Proc, u16) {
    for attempt in 0.. {
        let port = free_port(LOCALHOST_V4);
        let mut proc = Proc::spawn(&mut make(port), false);
        match proc.stderr.wait_for(ready, SHORT) {
            Ok(()) => return (proc, port),
            Err(_) if attempt < 5 && proc.stderr.text().contains("cannot listen") => continue,
            Err(e) => panic!("{what} did not start: {e}\n{}", proc.diagnostics()),
        }
    }
    unreachable!()
}
