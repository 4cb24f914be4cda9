//! Capturing a session with tcpdump and decoding it with tshark and the TCPLS Lua plugin.
#![allow(dead_code, unused_imports, clippy::unwrap_used)]

mod decode;
mod pdu;

pub use decode::{decode, Record, StreamFrame};
pub use pdu::write_exported_pdus;

use std::fs::File;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;

/// Why the capture tests cannot run here, if they cannot.
pub fn missing_prerequisite() -> Option<String> {
    let uid = std::fs::read_to_string("/proc/self/status").ok().and_then(|s| {
        s.lines().find(|l| l.starts_with("Uid:")).and_then(|l| l.split_whitespace().nth(1).map(String::from))
    });
    if uid.as_deref() != Some("0") {
        return Some("not root: capturing on loopback and `ss -K` need it".into());
    }
    for (program, arg) in [("tshark", "-v"), ("tcpdump", "--version"), ("ss", "-V")] {
        match Command::new(program).arg(arg).stdout(Stdio::null()).stderr(Stdio::null()).status() {
            Ok(s) if s.success() => {}
            _ => return Some(format!("{program} is not installed")),
        }
    }
    None
}

/// Why tshark cannot decode here, if it cannot.
pub fn tshark_missing() -> Option<String> {
    match Command::new("tshark").arg("-v").stdout(Stdio::null()).stderr(Stdio::null()).status() {
        Ok(s) if s.success() => None,
        _ => Some("tshark is not installed".into()),
    }
}

/// A fresh directory under the system's temporary directory.
pub fn temp_dir(prefix: &str) -> PathBuf {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    let dir = std::env::temp_dir().join(format!("{prefix}-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The NSS key log format (what `SSLKEYLOGFILE` produces) written to a file: one line per secret,
/// `LABEL <client random hex> <secret hex>`, which Wireshark reads as `tls.keylog_file`.
#[derive(Debug)]
pub struct KeyLogToFile(Mutex<File>);

impl KeyLogToFile {
    pub fn create(path: &Path) -> std::io::Result<Self> {
        Ok(Self(Mutex::new(File::create(path)?)))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl rustls::KeyLog for KeyLogToFile {
    fn log(&self, label: &str, client_random: &[u8], secret: &[u8]) {
        let mut file = self.0.lock().unwrap();
        let _ = writeln!(file, "{label} {} {}", hex(client_random), hex(secret));
        let _ = file.flush();
    }
}

/// tcpdump writing the packets of loopback that match a filter to a pcap file.
pub struct Capture {
    child: Child,
    path: PathBuf,
    stderr: Option<std::thread::JoinHandle<String>>,
}

impl Capture {
    /// Starts tcpdump and waits until it listens, so no packet of what follows is missed.
    pub fn start(filter: &str, path: &Path) -> Result<Self, String> {
        let mut child = Command::new("tcpdump")
            .args(["-i", "lo", "--immediate-mode", "-U", "-s", "0", "-B", "65536", "-w"])
            .arg(path)
            .arg(filter)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot run tcpdump: {e}"))?;
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        loop {
            match lines.next() {
                Some(Ok(line)) if line.contains("listening on") => break,
                Some(Ok(_)) => {}
                _ => {
                    let _ = child.kill();
                    return Err("tcpdump ended before it listened".into());
                }
            }
        }
        let stderr = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>().join("\n"));
        Ok(Self { child, path: path.to_path_buf(), stderr: Some(stderr) })
    }

    /// Waits until tcpdump has written everything (the file stops growing), then stops it: a
    /// stop right after the traffic can lose the packets the kernel still had queued for it.
    pub fn stop_when_quiet(self) -> Result<PathBuf, String> {
        let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0);
        let mut last = size(&self.path);
        for _ in 0..50 {
            std::thread::sleep(std::time::Duration::from_millis(300));
            let now = size(&self.path);
            if now == last {
                break;
            }
            last = now;
        }
        self.stop()
    }

    /// Stops tcpdump (SIGINT, so it writes what it buffered) and returns the capture's path.
    pub fn stop(mut self) -> Result<PathBuf, String> {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-INT", &pid]).status();
        let status = self.child.wait().map_err(|e| e.to_string())?;
        let report = self.stderr.take().map(|h| h.join().unwrap_or_default()).unwrap_or_default();
        if !status.success() {
            return Err(format!("tcpdump: {status}: {report}"));
        }
        let dropped = report.lines().find_map(|l| l.strip_suffix(" packets dropped by kernel"));
        if dropped.is_some_and(|n| n.trim() != "0") {
            return Err(format!("tcpdump dropped packets: {report}"));
        }
        Ok(self.path.clone())
    }
}

impl Drop for Capture {
    fn drop(&mut self) {
        // Stopped already, or a failing test: never leave tcpdump running.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
