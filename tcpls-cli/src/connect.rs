//! `tcpls connect`: stdin to stream 0, stream 0 to stdout (like `openssl s_client -quiet`).

use std::net::SocketAddr;
use std::sync::Arc;

use rustls::pki_types::ServerName;
use tcpls::TcplsConnector;
use tokio::io::AsyncWriteExt;

use crate::logging;
use crate::perf::protocol::NOT_A_PERF_REQUEST;
use crate::session_info::{describe, Trust};

/// `show`: print the negotiated session on stderr (`-v`, `--show-session`).
pub async fn run(
    addr: SocketAddr,
    server_name: ServerName<'static>,
    tls: rustls::ClientConfig,
    show: Option<Trust<'_>>,
    paths: crate::Paths,
) -> Result<(), String> {
    let started = std::time::Instant::now();
    let (session, outcome) = TcplsConnector::new(Arc::new(tls))
        .with_path(paths.bind.clone())
        .connect_detailed(addr, server_name)
        .await
        .map_err(|e| format!("cannot connect to {addr}: {}", crate::tlsconf::explain(&e)))?;
    // Extra paths: joined once each, or kept up by a path manager.
    let _manager = if session.is_fallback() {
        if !paths.paths.is_empty() || paths.manager.is_some() {
            logging::warn("connect", "plain TLS has one connection: --path and --path-manager are ignored");
        }
        None
    } else if let Some(policy) = paths.manager {
        let (m, _) = crate::args::start_path_manager("connect", &session, addr, policy, paths.bind, &paths.paths).await;
        Some(m)
    } else {
        for (remote, local) in &paths.paths {
            session.join_with(*remote, local).await.map_err(|e| format!("--path {local}{remote}: {e}"))?;
        }
        None
    };
    if let Some(trust) = show {
        logging::info("connect", &format!("connected to {addr}"));
        eprintln!("{}", describe(&session, &outcome, trust, started.elapsed()));
    } else if session.is_fallback() {
        let alpn = session
            .handshake_info()
            .and_then(|i| i.alpn)
            .map(|a| String::from_utf8_lossy(&a).into_owned())
            .unwrap_or_else(|| "none".into());
        logging::info("connect", &format!("{addr} does not speak TCPLS; using plain TLS (ALPN: {alpn})"));
    }
    let (mut send, mut recv) = session.open_stream().map_err(|e| format!("cannot open a stream: {e}"))?;
    let upload = tokio::spawn(async move {
        let mut stdin = tokio::io::stdin();
        let r = tokio::io::copy(&mut stdin, &mut send).await;
        let _ = send.shutdown().await;
        r
    });
    let mut stdout = tokio::io::stdout();
    let copied = tokio::io::copy(&mut recv, &mut stdout).await;
    let _ = stdout.flush().await;
    if copied.is_err() {
        // Close properly (close_notify) so the server ends the session now, not at a timeout.
        upload.abort();
        if tokio::time::timeout(std::time::Duration::from_secs(1), session.close()).await.is_err() {
            session.abort();
        }
    }
    copied.map_err(|e| match reset_code(&e) {
        Some(NOT_A_PERF_REQUEST) => format!(
            "{addr} is a `tcpls serve --mode perf` server: it answers `tcpls perf` only (use `tcpls perf {addr}`, \
             or a server started with --mode echo or discard)"
        ),
        Some(code) => format!("the server reset the stream (error code {code:#x})"),
        None => format!("receiving failed: {e}"),
    })?;
    // The peer finished its side; stop reading stdin (it may never end, e.g. a terminal).
    if !upload.is_finished() {
        upload.abort();
        session.abort();
        return Ok(());
    }
    if let Ok(Err(e)) = upload.await {
        return Err(format!("sending failed: {e}"));
    }
    match session.close().await {
        None => Ok(()),
        Some(e) => Err(format!("session ended with an error: {e}")),
    }
}

/// The peer's Stream Reset error code, if that is what ended the stream.
fn reset_code(e: &std::io::Error) -> Option<u32> {
    match e.get_ref()?.downcast_ref::<tcpls::StreamError>()? {
        tcpls::StreamError::Reset(code) => Some(*code),
        _ => None,
    }
}
