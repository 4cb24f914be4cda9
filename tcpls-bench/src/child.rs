//! The two ends of one measured transfer, each run in its own process by `compare`.
//!
//! Server: binds 127.0.0.1:0 (or `--listen`), prints `{"port":..}`, accepts one connection or
//! session, counts the bytes it receives (content is verified only with `--verify`), notes the time and its CPU use when the
//! last expected byte has been read, waits for the end of the data and closes gracefully,
//! then prints its [`SideReport`].
//!
//! Client: connects and completes the handshake, notes the time and CPU, writes the bytes in
//! 256 KiB pieces of the payload (`tcpls-pattern`), closes its sending side and waits for the server's close
//! (so that everything it had to send and encrypt is counted), then prints its report.

use std::net::SocketAddr;
use std::sync::Arc;

use tcpls::{server_name_for, TcplsConnector, TcplsListener};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::pki::{Pki, SERVER_NAME};
use crate::proto::{peak_rss_kib, share, Proto, SideReport, TcplsReceiverStats, IO_SIZE};
use crate::side::{announce, localhost, write_payload, Counter, ReceiverChecks, StreamCheck, TimelineSampler, DONE};
use crate::sys::{monotonic_ns, Cpu};
use crate::Res;

/// With `TCPLS_BENCH_DEBUG` set, prints the state of a TCPLS transfer to stderr every second
/// (to find out where a transfer that does not finish is stuck).
fn debug_ticker(side: &'static str, session: &tcpls::Session, progress: impl Fn() -> String + Send + 'static) {
    if std::env::var_os("TCPLS_BENCH_DEBUG").is_none() {
        return;
    }
    let session = session.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            let conns: Vec<_> = session.connections().iter().map(|c| (c.bytes_sent, c.bytes_received)).collect();
            eprintln!("[{side}] {} stats {:?} conns (sent, received) {conns:?}", progress(), session.stats());
        }
    });
}

/// Reads into a 256 KiB buffer until EOF.
async fn read_to_eof<R: AsyncRead + Unpin>(r: &mut R, counter: &Counter, checks: ReceiverChecks) -> Res<()> {
    let mut check = StreamCheck::new(checks);
    let mut buf = vec![0u8; IO_SIZE];
    loop {
        let n = r.read(&mut buf).await?;
        if n == 0 {
            return check.finish();
        }
        check.feed(&buf[..n]);
        counter.add(n);
    }
}

/// Consumes a TCPLS stream in place until its FIN; returns its bytes and when the last one
/// was read (CLOCK_MONOTONIC ns).
async fn chunks_to_eof(recv: &mut tcpls::RecvStream, counter: &Counter, checks: ReceiverChecks) -> Res<(u64, u64)> {
    let mut check = StreamCheck::new(checks);
    let mut total = 0u64;
    let mut last = monotonic_ns();
    loop {
        let n = recv
            .read_chunk_with(|chunk| {
                check.feed(chunk);
                chunk.len()
            })
            .await?;
        if n == 0 {
            check.finish()?;
            return Ok((total, last));
        }
        total += n as u64;
        last = monotonic_ns();
        counter.add(n);
    }
}

/// The TLS receiver over `io` (a TcpStream, or one behind a BufReader).
async fn tls_server<IO>(pki: &Pki, io: IO, counter: &Counter, checks: ReceiverChecks) -> Res<SideReport>
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(pki.server_config()?));
    let mut tls = acceptor.accept(io).await?;
    let cpu0 = Cpu::now();
    read_to_eof(&mut tls, counter, checks).await?;
    tls.shutdown().await?;
    Ok(counter.finish(cpu0))
}

/// The receiving end, listening on `listen` (port 0: any; the bound port is announced).
pub async fn server(proto: Proto, bytes: u64, listen: SocketAddr, checks: ReceiverChecks) -> Res<SideReport> {
    let pki = Pki::from_env()?;
    let counter = Counter::new(bytes);
    let sampler = TimelineSampler::start(counter.clone(), checks.timeline)?;
    let mut report = match proto {
        Proto::Tcp | Proto::Tls | Proto::TlsBufread => {
            let listener = TcpListener::bind(listen).await?;
            announce(listener.local_addr()?.port())?;
            let (tcp, _) = listener.accept().await?;
            tcp.set_nodelay(true)?;
            if proto == Proto::Tcp {
                let mut tcp = tcp;
                let cpu0 = Cpu::now();
                read_to_eof(&mut tcp, &counter, checks).await?;
                drop(tcp);
                counter.finish(cpu0)
            } else if proto == Proto::Tls {
                tls_server(&pki, tcp, &counter, checks).await?
            } else {
                tls_server(&pki, tokio::io::BufReader::with_capacity(IO_SIZE, tcp), &counter, checks).await?
            }
        }
        Proto::Quic | Proto::Quic9k => {
            if listen != localhost() || checks.verify {
                return Err("the QUIC server listens on 127.0.0.1 only and does not verify content".into());
            }
            crate::quic::server(proto, &pki, &counter).await?
        }
        Proto::Tcpls
        | Proto::TcplsNoack
        | Proto::TcplsAgg2
        | Proto::TcplsNozc
        | Proto::TcplsTrace
        | Proto::TcplsRead
        | Proto::Tcpls64
        | Proto::Tcpls1000
        | Proto::TcplsFixed
        | Proto::Tcpls64Fixed
        | Proto::Tcpls1000Fixed => tcpls_server(proto, &pki, listen, &counter, checks).await?,
    };
    report.timeline = sampler.finish(&counter);
    Ok(report)
}

async fn tcpls_server(
    proto: Proto,
    pki: &Pki,
    listen: SocketAddr,
    counter: &Arc<Counter>,
    checks: ReceiverChecks,
) -> Res<SideReport> {
    let config = Arc::new(pki.server_config()?);
    let mut listener = TcplsListener::bind_with(listen, config, proto.tcpls_settings()).await?;
    let trace = crate::proto::trace_sink(proto, "server")?;
    if let Some(sink) = &trace {
        listener = listener.with_trace(sink.clone());
    }
    announce(listener.local_addr().port())?;
    let (session, _) = listener.accept().await.ok_or("TCPLS listener failed")?;
    if session.is_fallback() {
        return Err("client did not negotiate TCPLS".into());
    }
    let c = counter.clone();
    debug_ticker("server", &session, move || format!("received {}", c.bytes()));
    let cpu0 = Cpu::now();
    let mut sends = Vec::new();
    let mut per_stream = Vec::new();
    if proto.streams() == 1 {
        let (send, mut recv) = session.accept_stream().await.ok_or("session ended before a stream")?;
        sends.push(send);
        if proto == Proto::TcplsRead {
            read_to_eof(&mut recv, counter, checks).await?;
        } else {
            chunks_to_eof(&mut recv, counter, checks).await?;
        }
    } else {
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..proto.streams() {
            let (send, mut recv) = session.accept_stream().await.ok_or("session ended early")?;
            sends.push(send);
            let counter = counter.clone();
            tasks.spawn(async move { chunks_to_eof(&mut recv, &counter, checks).await.map_err(|e| e.to_string()) });
        }
        while let Some(r) = tasks.join_next().await {
            per_stream.push(r??);
        }
    }
    // Tell the client everything arrived (see `client`), on the client's first stream.
    if let Some(send) = sends.iter_mut().find(|s| s.id() == 0) {
        send.write_all(DONE).await?;
        send.shutdown().await?;
    }
    let mut report = counter.finish(cpu0);
    report.tcpls = Some(receiver_stats(&session));
    report.streams = per_stream;
    if let Some(e) = session.close().await {
        return Err(format!("TCPLS session failed: {e}").into());
    }
    Ok(report)
}

fn receiver_stats(session: &tcpls::Session) -> TcplsReceiverStats {
    let stats = session.stats();
    TcplsReceiverStats {
        zero_copy_bytes: stats.zero_copy_bytes,
        copied_bytes: stats.copied_bytes,
        connection_bytes: session.connections().iter().map(|c| c.bytes_received).collect(),
    }
}

/// Waits for the peer's end of the connection, discarding whatever it sends.
async fn wait_eof<R: AsyncRead + Unpin>(r: &mut R) -> Res<()> {
    let mut sink = [0u8; 4096];
    while r.read(&mut sink).await? != 0 {}
    Ok(())
}

/// Sets the congestion control of a TCP stream, if one was asked for; returns what it reports.
fn tcp_congestion(tcp: &TcpStream, cc: Option<&str>) -> Res<Option<String>> {
    match cc {
        None => Ok(None),
        Some(name) => crate::sys::set_congestion_control(tcp, name)
            .map(Some)
            .map_err(|e| format!("cannot set congestion control {name:?}: {e}").into()),
    }
}

/// The sending end. `cc`: the TCP congestion control of its sockets, set right after the
/// connection (the session's connections) opened, before any data.
pub async fn client(
    proto: Proto,
    addr: SocketAddr,
    bytes: u64,
    close_early: bool,
    cc: Option<&str>,
) -> Res<SideReport> {
    let pki = Pki::from_env()?;
    let ((t0, cpu0), congestion_control) = match proto {
        Proto::Tcp | Proto::Tls | Proto::TlsBufread => {
            let tcp = TcpStream::connect(addr).await?;
            tcp.set_nodelay(true)?;
            let used = tcp_congestion(&tcp, cc)?;
            if proto == Proto::Tcp {
                let mut tcp = tcp;
                let start = (monotonic_ns(), Cpu::now());
                write_payload(&mut tcp, bytes).await?;
                tcp.shutdown().await?;
                wait_eof(&mut tcp).await?;
                (start, used)
            } else {
                let connector = tokio_rustls::TlsConnector::from(Arc::new(pki.client_config()?));
                let mut tls = connector.connect(server_name_for(SERVER_NAME)?, tcp).await?;
                let start = (monotonic_ns(), Cpu::now());
                write_payload(&mut tls, bytes).await?;
                tls.shutdown().await?;
                wait_eof(&mut tls).await?;
                (start, used)
            }
        }
        Proto::Quic | Proto::Quic9k => {
            if cc.is_some() {
                return Err("QUIC runs its own congestion control (no TCP socket to set)".into());
            }
            (crate::quic::client(proto, &pki, addr, bytes).await?, None)
        }
        Proto::Tcpls
        | Proto::TcplsNoack
        | Proto::TcplsAgg2
        | Proto::TcplsNozc
        | Proto::TcplsTrace
        | Proto::TcplsRead
        | Proto::Tcpls64
        | Proto::Tcpls1000
        | Proto::TcplsFixed
        | Proto::Tcpls64Fixed
        | Proto::Tcpls1000Fixed => tcpls_client(proto, &pki, addr, bytes, close_early, cc).await?,
    };
    let cpu = Cpu::now().since(cpu0);
    Ok(SideReport {
        bytes,
        t_ns: t0,
        cpu_user_ns: cpu.user_ns,
        cpu_sys_ns: cpu.sys_ns,
        tcpls: None,
        peak_rss_kib: peak_rss_kib(),
        streams: Vec::new(),
        timeline: Vec::new(),
        congestion_control,
    })
}

/// Sets the congestion control of every connection of the session; returns what they report
/// (an error if they disagree).
fn session_congestion(session: &tcpls::Session, cc: Option<&str>) -> Res<Option<String>> {
    let Some(name) = cc else {
        return Ok(None);
    };
    let mut used: Option<String> = None;
    for conn in session.connections() {
        session
            .set_congestion_control(conn.id, name)
            .map_err(|e| format!("cannot set congestion control {name:?}: {e}"))?;
        let now = session.congestion_control(conn.id)?;
        if used.as_ref().is_some_and(|u| *u != now) {
            return Err(format!("the session's connections use {used:?} and {now:?}").into());
        }
        used = Some(now);
    }
    Ok(used)
}

/// TCPLS: unless `close_early`, the client waits for the server's "done" on stream 0 before
/// `Session::close()`. Closing right after the last `write_all` (`close_early`) can hang: the
/// session sends close_notify while stream data still waits for flow-control credit (see
/// README.md, "Known issue").
async fn tcpls_client(
    proto: Proto,
    pki: &Pki,
    addr: SocketAddr,
    bytes: u64,
    close_early: bool,
    cc: Option<&str>,
) -> Res<((u64, Cpu), Option<String>)> {
    let mut connector = TcplsConnector::new(Arc::new(pki.client_config()?)).with_settings(proto.tcpls_settings());
    let trace = crate::proto::trace_sink(proto, "client")?;
    if let Some(sink) = &trace {
        connector = connector.with_trace(sink.clone());
    }
    let session = connector.connect(addr, server_name_for(SERVER_NAME)?).await?;
    if session.is_fallback() {
        return Err("server did not negotiate TCPLS".into());
    }
    // Extra connections to the same server address (its tokens); streams are not
    // steered, so the session's scheduler spreads their records over all connections.
    for _ in 1..proto.connections() {
        session.join(addr).await.map_err(|e| format!("cannot join a second connection: {e}"))?;
    }
    let used = session_congestion(&session, cc)?;
    let streams = proto.streams();
    let mut pairs = Vec::new();
    for _ in 0..streams {
        pairs.push(session.open_stream()?);
    }
    let done = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let d = done.clone();
    debug_ticker("client", &session, move || {
        format!("writers done {}/{streams}", d.load(std::sync::atomic::Ordering::Relaxed))
    });
    let start = (monotonic_ns(), Cpu::now());
    let mut tasks = tokio::task::JoinSet::new();
    let mut keep = Vec::new();
    for (i, (mut send, recv)) in pairs.into_iter().enumerate() {
        keep.push(recv);
        let n = share(bytes, streams, i as u32);
        let done = done.clone();
        tasks.spawn(async move {
            write_payload(&mut send, n).await.map_err(|e| e.to_string())?;
            send.shutdown().await.map_err(|e| e.to_string())?;
            done.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok::<(), String>(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    if !close_early {
        let mut reply = Vec::new();
        keep.first_mut().ok_or("no stream")?.read_to_end(&mut reply).await?;
        if reply != DONE {
            return Err(format!("server replied {reply:?} instead of \"done\"").into());
        }
    }
    if let Some(e) = session.close().await {
        return Err(format!("TCPLS session failed: {e}").into());
    }
    Ok((start, used))
}
