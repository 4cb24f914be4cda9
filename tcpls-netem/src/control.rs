//! Runtime control of a running `tcpls-netem up` over a Unix socket
//! (`/run/tcpls-netem/<prefix>.sock`), one text command per connection:
//!
//! `set <path> <both|c2s|s2c> <key> <value>` with keys `blackhole on|off`, `up on|off`,
//! `rate <Mbit/s>`, `delay <ms>`, `loss <p>`, `queue <packets>`; `stats`; `describe`.
//! The reply is `ok ...` or `err ...`.

use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::{Dir, Topology};

/// Directory of the control sockets.
pub const CONTROL_DIR: &str = "/run/tcpls-netem";

/// Socket path of a topology.
pub fn socket_path(prefix: &str) -> PathBuf {
    PathBuf::from(CONTROL_DIR).join(format!("{prefix}.sock"))
}

/// Prefixes of all topologies with a control socket.
pub fn list_sockets() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(CONTROL_DIR)
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().into_string().ok())
                .filter_map(|n| n.strip_suffix(".sock").map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn on_off(v: &str) -> Result<bool, String> {
    match v {
        "on" | "true" | "1" | "yes" => Ok(true),
        "off" | "false" | "0" | "no" => Ok(false),
        _ => Err(format!("expected on|off, got {v:?}")),
    }
}

fn num(v: &str) -> Result<f64, String> {
    v.parse::<f64>().map_err(|_| format!("not a number: {v:?}"))
}

/// Apply one command to the topology; returns the reply text.
pub fn apply(topo: &Topology, line: &str) -> Result<String, String> {
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        ["describe"] => Ok(topo.describe()),
        ["stats"] => {
            let mut s = String::new();
            for p in topo.paths() {
                for d in [Dir::ClientToServer, Dir::ServerToClient] {
                    s += &format!("path {} {:?}: {:?}\n", p.info().index, d, p.stats(d));
                }
            }
            Ok(s)
        }
        ["set", path, dir, key, value] => {
            let i: usize = path.parse().map_err(|_| format!("bad path index {path:?}"))?;
            let p = topo.paths().get(i).ok_or_else(|| format!("no path {i}"))?;
            let dirs: &[Dir] = match *dir {
                "both" => &[Dir::ClientToServer, Dir::ServerToClient],
                "c2s" | "up" => &[Dir::ClientToServer],
                "s2c" | "down" => &[Dir::ServerToClient],
                _ => return Err(format!("bad direction {dir:?} (both|c2s|s2c)")),
            };
            if *key == "up" {
                if dirs.len() != 2 {
                    return Err("up/down applies to both directions".into());
                }
                p.set_up(on_off(value)?).map_err(|e| e.to_string())?;
                return Ok(format!("path {i} up={value}"));
            }
            let v = *value;
            let f: Box<dyn Fn(&mut crate::LinkParams)> = match *key {
                "blackhole" => {
                    let b = on_off(v)?;
                    Box::new(move |lp| lp.blackhole = b)
                }
                "rate" => {
                    let r = (num(v)?.max(0.0) * 1e6) as u64;
                    Box::new(move |lp| lp.rate_bps = r)
                }
                "delay" => {
                    let d = Duration::from_secs_f64(num(v)?.max(0.0) / 1000.0);
                    Box::new(move |lp| lp.delay = d)
                }
                "loss" => {
                    let l = num(v)?.clamp(0.0, 1.0);
                    Box::new(move |lp| lp.loss = l)
                }
                "queue" => {
                    let q = num(v)?.max(0.0) as usize;
                    Box::new(move |lp| lp.queue_packets = q)
                }
                _ => return Err(format!("unknown key {key:?}")),
            };
            for d in dirs {
                p.direction(*d).update(&f);
            }
            Ok(format!("path {i} {dir} {key}={v}"))
        }
        _ => Err(format!("unknown command {line:?}")),
    }
}

/// A running control server; stops (and removes the socket) on drop.
pub struct ControlServer {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    path: PathBuf,
}

impl ControlServer {
    /// Listen on [`socket_path`] of the topology.
    pub fn start(topo: Arc<Topology>) -> io::Result<ControlServer> {
        std::fs::create_dir_all(CONTROL_DIR)?;
        let path = socket_path(topo.prefix());
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path)?;
        listener.set_nonblocking(true)?;
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new().name("netem-control".into()).spawn(move || {
            while !stop2.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((conn, _)) => {
                        let _ = handle(&topo, conn);
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(Duration::from_millis(50)),
                    Err(_) => std::thread::sleep(Duration::from_millis(50)),
                }
            }
        })?;
        Ok(ControlServer { stop, thread: Some(thread), path })
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn handle(topo: &Topology, conn: UnixStream) -> io::Result<()> {
    conn.set_nonblocking(false)?;
    conn.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut line = String::new();
    BufReader::new(&conn).read_line(&mut line)?;
    let reply = match apply(topo, line.trim()) {
        Ok(s) => format!("ok {s}\n"),
        Err(e) => format!("err {e}\n"),
    };
    (&conn).write_all(reply.as_bytes())
}

/// Send one command to the topology `prefix`; returns the reply.
pub fn send(prefix: &str, command: &str) -> io::Result<String> {
    let conn = UnixStream::connect(socket_path(prefix))?;
    (&conn).write_all(format!("{command}\n").as_bytes())?;
    conn.shutdown(std::net::Shutdown::Write)?;
    let mut reply = String::new();
    io::Read::read_to_string(&mut &conn, &mut reply)?;
    Ok(reply)
}
