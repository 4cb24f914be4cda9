//! The client of a `scale` run: the three phases (handshakes, many sessions, all alive), each
//! started by a "go" line on stdin and reported as one JSON line on stdout.

use std::io::{BufRead, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use tcpls::{server_name_for, TcplsConnector};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use super::{ClientPhase, ScaleProto, IDLE, IN_FLIGHT, SOURCES, WARM_UP};
use crate::pki::{Pki, SERVER_NAME};
use crate::sys::{raise_fd_limit, rss_bytes, Cpu};
use crate::Res;

/// Waits for the parent's "go" line.
async fn wait_go() -> Res<()> {
    let line = tokio::task::spawn_blocking(|| {
        let mut l = String::new();
        std::io::stdin().lock().read_line(&mut l).map(|_| l)
    })
    .await??;
    if line.trim() != "go" {
        return Err("the parent went away".into());
    }
    Ok(())
}

fn report(phase: &ClientPhase) -> Res<()> {
    println!("{}", serde_json::to_string(phase)?);
    std::io::stdout().flush()?;
    Ok(())
}

/// One open connection or session, with the stream it echoes on.
enum Open {
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
    Tcpls(tcpls::Session, tcpls::SendStream, tcpls::RecvStream),
}

impl Open {
    async fn ping(&mut self, byte: u8) -> Res<()> {
        let mut got = [0u8; 1];
        match self {
            Open::Tls(s) => {
                s.write_all(&[byte]).await?;
                s.read_exact(&mut got).await?;
            }
            Open::Tcpls(_, send, recv) => {
                send.write_all(&[byte]).await?;
                recv.read_exact(&mut got).await?;
            }
        }
        if got[0] != byte {
            return Err(format!("echo returned {} instead of {byte}", got[0]).into());
        }
        Ok(())
    }

    async fn close(self) -> Res<()> {
        match self {
            Open::Tls(mut s) => {
                s.shutdown().await?;
                let mut sink = [0u8; 64];
                while s.read(&mut sink).await? != 0 {}
            }
            // The same exchange as TLS: close_notify both ways (`Session::close` waits for the
            // peer's), after which the streams are over. Finishing the stream first and waiting
            // for the server's FIN would add a round trip that the TLS client does not make
            // (until 2026-11-26 the benchmark did that: PERFORMANCE-HISTORY.md, handshakes).
            Open::Tcpls(session, send, recv) => {
                let closed = session.close().await;
                drop((send, recv));
                if let Some(e) = closed {
                    return Err(format!("TCPLS session failed: {e}").into());
                }
            }
        }
        Ok(())
    }
}

struct Dialer {
    proto: ScaleProto,
    addr: SocketAddr,
    tls: tokio_rustls::TlsConnector,
    tcpls: TcplsConnector,
}

impl Dialer {
    /// Connects from `source` (port chosen by the kernel), handshakes and opens the stream.
    async fn open(&self, source: Ipv4Addr) -> Res<Open> {
        let socket = TcpSocket::new_v4()?;
        socket.bind(SocketAddr::new(IpAddr::V4(source), 0))?;
        let tcp = socket.connect(self.addr).await?;
        tcp.set_nodelay(true)?;
        match self.proto {
            ScaleProto::Tls => Ok(Open::Tls(Box::new(self.tls.connect(server_name_for(SERVER_NAME)?, tcp).await?))),
            ScaleProto::Tcpls | ScaleProto::TcplsPerCore => {
                let session = self.tcpls.connect_with(tcp, server_name_for(SERVER_NAME)?).await?;
                if session.is_fallback() {
                    return Err("server did not negotiate TCPLS".into());
                }
                let (send, recv) = session.open_stream()?;
                Ok(Open::Tcpls(session, send, recv))
            }
        }
    }
}

fn source(i: u32) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, 2 + (i % u32::from(SOURCES)) as u8)
}

pub async fn client(proto: ScaleProto, port: u16, sessions: u32, handshakes: u32) -> Res<()> {
    raise_fd_limit();
    let pki = Pki::from_env()?;
    let mut config = pki.client_config()?;
    // Every handshake a full one, as for a new client.
    config.resumption = rustls::client::Resumption::disabled();
    let config = Arc::new(config);
    let dialer = Arc::new(Dialer {
        proto,
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
        tls: tokio_rustls::TlsConnector::from(config.clone()),
        tcpls: TcplsConnector::new(config),
    });
    let phase = |name: &str| ClientPhase {
        phase: name.into(),
        proto,
        count: 0,
        seconds: 0.0,
        cpu_ns: 0,
        rss_before: 0,
        rss_after: 0,
        heap_before: 0,
        heap_after: 0,
        allocs: 0,
        ttfb_us: Vec::new(),
        alive: 0,
    };

    // Warm-up, unmeasured: first-use costs (lazy initialisation, allocator growth) of both ends.
    let mut warm = phase("warm-up");
    for i in 0..WARM_UP {
        let mut open = dialer.open(source(i)).await?;
        open.ping(0).await?;
        open.close().await?;
        warm.count += 1;
    }
    report(&warm)?;

    // Phase 1: sequential handshakes.
    wait_go().await?;
    let mut hs = phase("handshakes");
    let (t0, cpu0, allocs0) = (Instant::now(), Cpu::now(), crate::heap::snapshot().1);
    for i in 0..handshakes {
        let start = Instant::now();
        let mut open = dialer.open(source(i)).await?;
        open.ping(i as u8).await?;
        hs.ttfb_us.push(start.elapsed().as_secs_f64() * 1e6);
        open.close().await?;
        hs.count += 1;
    }
    let cpu = Cpu::now().since(cpu0);
    hs.cpu_ns = cpu.user_ns + cpu.sys_ns;
    hs.allocs = crate::heap::snapshot().1 - allocs0;
    hs.seconds = t0.elapsed().as_secs_f64();
    report(&hs)?;

    // Phase 2: many sessions at once, then idle.
    wait_go().await?;
    let mut open_phase = phase("open");
    open_phase.rss_before = rss_bytes();
    open_phase.heap_before = crate::heap::snapshot().0;
    let t0 = Instant::now();
    let permits = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..sessions {
        let dialer = dialer.clone();
        let permits = permits.clone();
        tasks.spawn(async move {
            let permit = permits.acquire_owned().await.map_err(|e| e.to_string())?;
            let mut open = dialer.open(source(i)).await.map_err(|e| format!("session {i}: {e}"))?;
            open.ping(1).await.map_err(|e| format!("session {i}: {e}"))?;
            drop(permit);
            Ok::<Open, String>(open)
        });
    }
    let mut all = Vec::with_capacity(sessions as usize);
    while let Some(r) = tasks.join_next().await {
        all.push(r??);
    }
    open_phase.seconds = t0.elapsed().as_secs_f64();
    open_phase.count = all.len() as u32;
    tokio::time::sleep(IDLE).await;
    open_phase.rss_after = rss_bytes();
    open_phase.heap_after = crate::heap::snapshot().0;
    report(&open_phase)?;

    // Phase 3: every session still answers, then all close.
    wait_go().await?;
    let mut alive = phase("alive");
    let t0 = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for mut open in all {
        tasks.spawn(async move {
            let ok = open.ping(2).await.is_ok();
            let closed = open.close().await.is_ok();
            ok && closed
        });
    }
    while let Some(r) = tasks.join_next().await {
        alive.alive += u32::from(r.unwrap_or(false));
        alive.count += 1;
    }
    alive.seconds = t0.elapsed().as_secs_f64();
    report(&alive)?;
    Ok(())
}
