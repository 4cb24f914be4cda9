//! The TCPLS download server of [`crate::tcpls_run`] on 127.0.0.1, for the experiments that
//! measure CPU rather than a network (no namespaces, no root).

use std::net::SocketAddr;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

use rustls::ServerConfig;
use tcpls::{SessionConfig, TcplsListener};

use crate::tcpls_run::serve_session;

/// A running server on its own thread and tokio runtime; stops when dropped.
pub struct LoopbackServer {
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl LoopbackServer {
    /// Listens on 127.0.0.1 (a free port) and serves every session and stream.
    pub fn start(tls: Arc<ServerConfig>, settings: SessionConfig) -> Result<LoopbackServer, String> {
        let (ready_tx, ready_rx) = mpsc::channel::<Result<SocketAddr, String>>();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let thread = std::thread::spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = ready_tx.send(Err(format!("tokio runtime: {e}")));
                    return;
                }
            };
            rt.block_on(async move {
                let any: SocketAddr = ([127, 0, 0, 1], 0).into();
                let listener = match TcplsListener::bind_with(any, tls, settings).await {
                    Ok(l) => l,
                    Err(e) => {
                        let _ = ready_tx.send(Err(format!("cannot listen on 127.0.0.1: {e}")));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(listener.local_addr()));
                let accept = async {
                    while let Some((session, _)) = listener.accept().await {
                        tokio::spawn(serve_session(session));
                    }
                };
                tokio::select! {
                    () = accept => {}
                    _ = stop_rx => {}
                }
            });
        });
        let addr =
            ready_rx.recv_timeout(Duration::from_secs(10)).map_err(|_| "the loopback server did not start")??;
        Ok(LoopbackServer { addr, stop: Some(stop_tx), thread: Some(thread) })
    }
}

impl Drop for LoopbackServer {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
