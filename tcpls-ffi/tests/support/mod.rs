//! What the C tests need: the library and the `tcpls` binary built for this profile, the C
//! examples compiled with `cc` against the library, certificates, and child processes that die
//! with the test.
#![allow(dead_code, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Upper bound of any one program run here.
pub const TIMEOUT: Duration = Duration::from_secs(120);

/// The workspace root.
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The target directory of this profile (target/debug or target/release), from the test
/// binary's own path (target/PROFILE/deps/NAME).
pub fn target_dir() -> PathBuf {
    std::env::current_exe().unwrap().parent().unwrap().parent().unwrap().to_path_buf()
}

/// Why the C tests cannot run here, if they cannot: no C compiler.
pub fn missing_cc() -> Option<String> {
    match Command::new("cc").arg("--version").output() {
        Ok(out) if out.status.success() => None,
        _ => Some("no C compiler: `cc` is not installed (apt-get install gcc)".into()),
    }
}

/// Builds libtcpls and the `tcpls` binary for this profile (`cargo test` builds neither: the
/// library is a cdylib, the binary belongs to another package); once per test process.
///
/// The whole workspace with all its targets, not only those two packages: that resolves the
/// features as `cargo test --workspace` does (dev-dependencies included), so after it the
/// build only links the library. Two packages alone would resolve them without the
/// dev-dependencies' features and rebuild the crates they share.
pub fn build_rust_parts() -> &'static Result<(), String> {
    static BUILT: OnceLock<Result<(), String>> = OnceLock::new();
    BUILT.get_or_init(|| {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.current_dir(workspace()).args(["build", "--workspace", "--all-targets"]);
        if target_dir().ends_with("release") {
            cmd.arg("--release");
        }
        let out = cmd.output().map_err(|e| format!("cannot run cargo: {e}"))?;
        if !out.status.success() {
            return Err(format!("cargo build failed:\n{}", String::from_utf8_lossy(&out.stderr)));
        }
        Ok(())
    })
}

/// The `tcpls` command.
pub fn tcpls() -> Command {
    Command::new(target_dir().join("tcpls"))
}

/// Compiles `sources` (relative to tcpls-ffi/) into `out` with `cc`, against the library of this
/// profile, warnings as errors.
pub fn compile_c(sources: &[&str], out: &Path) -> Result<(), String> {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = target_dir();
    let output = Command::new("cc")
        .args(["-O2", "-Wall", "-Wextra", "-Werror", "-std=c11", "-D_POSIX_C_SOURCE=200809L", "-pthread"])
        .arg("-I")
        .arg(crate_dir.join("include"))
        .args(sources.iter().map(|s| crate_dir.join(s)))
        .arg("-L")
        .arg(&lib)
        .arg("-ltcpls")
        .arg(format!("-Wl,-rpath,{}", lib.display()))
        .arg("-o")
        .arg(out)
        .output()
        .map_err(|e| format!("cannot run cc: {e}"))?;
    if !output.status.success() {
        return Err(format!("cc failed:\n{}", String::from_utf8_lossy(&output.stderr)));
    }
    Ok(())
}

/// The C example programs, compiled once per test process into a temporary directory.
pub struct Examples {
    pub client: PathBuf,
    pub server: PathBuf,
    pub dir: PathBuf,
}

/// Builds everything, or says why the tests must be skipped (no `cc`); a build failure fails.
pub fn examples() -> Result<&'static Examples, String> {
    if let Some(why) = missing_cc() {
        return Err(why);
    }
    if let Err(e) = build_rust_parts() {
        panic!("{e}");
    }
    static EXAMPLES: OnceLock<Examples> = OnceLock::new();
    Ok(EXAMPLES.get_or_init(|| {
        // Kept for the test binary's life (a static is never dropped): one fixed directory per
        // test binary, replaced by the next run.
        let dir =
            PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("tcpls-ffi-examples-{}", env!("CARGO_CRATE_NAME")));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let client = dir.join("tcpls-client");
        let server = dir.join("tcpls-server");
        compile_c(&["examples/c/client.c"], &client).unwrap_or_else(|e| panic!("{e}"));
        compile_c(&["examples/c/server.c"], &server).unwrap_or_else(|e| panic!("{e}"));
        // `tcpls cert` for the certificates every test uses.
        let certs = dir.join("cert");
        let out = tcpls().arg("cert").arg("--out").arg(&certs).output().unwrap();
        assert!(out.status.success(), "tcpls cert: {}", String::from_utf8_lossy(&out.stderr));
        Examples { client, server, dir }
    }))
}

impl Examples {
    pub fn cert(&self) -> PathBuf {
        self.dir.join("cert/cert.pem")
    }

    pub fn key(&self) -> PathBuf {
        self.dir.join("cert/key.pem")
    }
}

/// A fresh directory under the target directory's scratch space, removed when dropped (the
/// binaries a test links can be 100 MB: left behind, every run would add them up).
pub fn temp_dir(tag: &str) -> TempDir {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("tcpls-ffi-test-{tag}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    TempDir(dir)
}

/// A directory removed with everything in it when dropped.
pub struct TempDir(PathBuf);

impl std::ops::Deref for TempDir {
    type Target = std::path::Path;
    fn deref(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child process killed when dropped; its stderr goes to a file read on demand.
pub struct Proc {
    pub child: Child,
    pub stderr: PathBuf,
    _dir: TempDir,
}

impl Proc {
    pub fn spawn(cmd: &mut Command, tag: &str) -> Proc {
        let dir = temp_dir(tag);
        let stderr = dir.join("stderr");
        let file = std::fs::File::create(&stderr).unwrap();
        let child = cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(file).spawn().unwrap();
        Proc { child, stderr, _dir: dir }
    }

    pub fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Waits until stderr has a line for every needle (e.g. "listening on"), within 20 s.
    pub fn wait_for(&mut self, needle: &str, count: usize) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let text = self.stderr_text();
            if text.matches(needle).count() >= count {
                return text;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("the process ended ({status}) before printing {needle:?}: {text}");
            }
            assert!(Instant::now() < deadline, "no {needle:?} within 20 s: {text}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `cmd` to completion within [`TIMEOUT`] (killed after), feeding `stdin`.
pub fn run(cmd: &mut Command, stdin: &[u8]) -> Output {
    use std::io::Write;
    let mut child = cmd.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let mut input = child.stdin.take().unwrap();
    let data = stdin.to_vec();
    let feeder = std::thread::spawn(move || {
        let _ = input.write_all(&data);
    });
    let pid = child.id();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = match rx.recv_timeout(TIMEOUT) {
        Ok(out) => out.unwrap(),
        Err(_) => {
            let _ = Command::new("kill").arg("-9").arg(pid.to_string()).status();
            panic!("{cmd:?} did not end within {TIMEOUT:?}");
        }
    };
    let _ = feeder.join();
    out
}

pub fn describe(out: &Output) -> String {
    format!(
        "status {}\n--- stdout:\n{}\n--- stderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A `tcpls serve` on 127.0.0.1 and 127.0.0.2 (ports picked by the kernel are not known to the
/// CLI's caller, so free ports are tried until one pair binds); returns it and its addresses.
pub fn tcpls_serve(args: &[&str]) -> (Proc, String, String) {
    for _ in 0..10 {
        let a = format!("127.0.0.1:{}", free_port("127.0.0.1"));
        let b = format!("127.0.0.2:{}", free_port("127.0.0.2"));
        let mut p = Proc::spawn(tcpls().args(["serve", "--listen", &a, "--listen", &b]).args(args), "serve");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let text = p.stderr_text();
            if text.matches("listening on").count() >= 2 {
                return (p, a, b);
            }
            if text.contains("cannot listen") || p.child.try_wait().ok().flatten().is_some() {
                break; // a port was taken meanwhile: another pair
            }
            assert!(Instant::now() < deadline, "tcpls serve did not start: {text}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    panic!("tcpls serve could not bind a pair of free ports in 10 tries");
}

fn free_port(ip: &str) -> u16 {
    std::net::TcpListener::bind((ip, 0)).unwrap().local_addr().unwrap().port()
}

/// The C server on 127.0.0.1 and 127.0.0.2 (port 0: it prints the ports it got).
pub fn c_server(ex: &Examples, args: &[&str]) -> (Proc, String, String) {
    let mut p = Proc::spawn(
        std::process::Command::new(&ex.server)
            .arg("--cert")
            .arg(ex.cert())
            .arg("--key")
            .arg(ex.key())
            .args(["--listen", "127.0.0.1:0", "--listen", "127.0.0.2:0"])
            .args(args),
        "c-server",
    );
    let text = p.wait_for("listening on", 2);
    let addrs: Vec<String> =
        text.lines().filter_map(|l| l.strip_prefix("listening on ")).map(|s| s.trim().to_string()).collect();
    (p, addrs[0].clone(), addrs[1].clone())
}
