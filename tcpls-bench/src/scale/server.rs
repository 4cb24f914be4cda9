//! The server of a `scale` run: a TcplsListener on the process's (work-stealing) runtime, a
//! per-core TCPLS server (`tcpls::ServerBuilder`) and a tokio-rustls listener that echo what
//! they receive, and answer "stats" lines on stdin with their CPU time, RSS and session counts.

use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tcpls::TcplsListener;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;

use super::{ServerReady, ServerStats};
use crate::pki::Pki;
use crate::sys::{raise_fd_limit, rss_bytes, Cpu};
use crate::Res;

/// Echoes every byte until EOF.
async fn echo<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(r: &mut R, w: &mut W) -> std::io::Result<()> {
    let mut buf = [0u8; 64];
    loop {
        let n = r.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        w.write_all(&buf[..n]).await?;
    }
}

struct Counters {
    open: AtomicU64,
    accepted: AtomicU64,
}

/// Echoes every stream of a TCPLS session, counting it open until it ends.
async fn serve_tcpls(session: tcpls::Session, c: Arc<Counters>) {
    c.accepted.fetch_add(1, Ordering::Relaxed);
    c.open.fetch_add(1, Ordering::Relaxed);
    while let Some((mut send, mut recv)) = session.accept_stream().await {
        tokio::spawn(async move {
            if echo(&mut recv, &mut send).await.is_ok() {
                let _ = send.shutdown().await;
            }
        });
    }
    session.closed().await;
    c.open.fetch_sub(1, Ordering::Relaxed);
}

/// `cores`: the per-core TCPLS server's (`tcpls::ServerBuilder`) cores; the work-stealing
/// listeners share the process's runtime.
pub async fn server(cores: usize) -> Res<()> {
    raise_fd_limit();
    let pki = Pki::from_env()?;
    let any = SocketAddr::from(([127, 0, 0, 1], 0));
    let tls_listener = TcpListener::bind(any).await?;
    let tcpls_listener = TcplsListener::bind(any, Arc::new(pki.server_config()?)).await?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(pki.server_config()?));
    let counters = Arc::new(Counters { open: AtomicU64::new(0), accepted: AtomicU64::new(0) });
    let c = counters.clone();
    let per_core = tcpls::ServerBuilder::new(Arc::new(pki.server_config()?))
        .cores(cores)
        .serve(&[any], move |session, _| serve_tcpls(session, c.clone()))?;
    let ready = ServerReady {
        tls_port: tls_listener.local_addr()?.port(),
        tcpls_port: tcpls_listener.local_addr().port(),
        tcpls_per_core_port: per_core.local_addrs().first().map_or(0, |a| a.port()),
    };
    println!("{}", serde_json::to_string(&ready)?);
    std::io::stdout().flush()?;

    let c = counters.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = tls_listener.accept().await {
            let acceptor = acceptor.clone();
            let c = c.clone();
            tokio::spawn(async move {
                let _ = tcp.set_nodelay(true);
                c.accepted.fetch_add(1, Ordering::Relaxed);
                c.open.fetch_add(1, Ordering::Relaxed);
                if let Ok(tls) = acceptor.accept(tcp).await {
                    let (mut r, mut w) = tokio::io::split(tls);
                    if echo(&mut r, &mut w).await.is_ok() {
                        let _ = w.shutdown().await;
                    }
                }
                c.open.fetch_sub(1, Ordering::Relaxed);
            });
        }
    });
    let c = counters.clone();
    tokio::spawn(async move {
        while let Some((session, _)) = tcpls_listener.accept().await {
            tokio::spawn(serve_tcpls(session, c.clone()));
        }
    });
    // Answer "stats" on stdin until EOF.
    let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(1);
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            match line {
                Ok(l) if l.trim() == "stats" => {
                    if tx.blocking_send(()).is_err() {
                        break;
                    }
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
    });
    while rx.recv().await.is_some() {
        let cpu = Cpu::now();
        let stats = ServerStats {
            cpu_ns: cpu.user_ns + cpu.sys_ns,
            rss_bytes: rss_bytes(),
            heap_bytes: crate::heap::snapshot().0,
            allocs: crate::heap::snapshot().1,
            open: counters.open.load(Ordering::Relaxed),
            accepted: counters.accepted.load(Ordering::Relaxed),
        };
        println!("{}", serde_json::to_string(&stats)?);
        std::io::stdout().flush()?;
    }
    Ok(())
}
