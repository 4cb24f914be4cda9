//! Reverse forwards (PROTOCOL.md §8.1): the client asks the concentrator to listen on an
//! address (Reverse Bind on a stream that stays open as the forward's control); every connection
//! the concentrator accepts there becomes a stream the concentrator opens towards the client
//! (Reverse Connection + End), answered by the client like a TCP Connect once it connected to
//! its local target. The concentrator binds only addresses its operator listed
//! (`TunnelConfig::reverse_allowed`); the listener closes when the control stream or the
//! session ends.

use std::net::SocketAddr;
use std::time::Duration;

use tcpls::{RecvStream, SendStream, Session};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tracing::{debug, info};

use super::relay;
use super::tlv::{self, Tlv, Transport, ERR_CONNECTION_FAILURE, ERR_DESTINATION_REFUSED};
use super::Target;

/// Concentrator: serves one Reverse Bind until its control stream or the session ends.
pub(super) async fn serve_bind(
    session: Session,
    mut send: SendStream,
    mut recv: RecvStream,
    addr: SocketAddr,
    cfg: &super::TunnelConfig,
    peer: &str,
    limiter: std::sync::Arc<super::rate::RateLimiter>,
) {
    let answer_timeout = cfg.handshake_timeout;
    if !cfg.reverse_allowed.contains(&addr) {
        info!("tunnel: {peer} reverse bind {addr}: refused (not in --allow-reverse)");
        let _ = send.write_all(&tlv::encode_all(&[Tlv::Error(ERR_DESTINATION_REFUSED), Tlv::End])).await;
        let _ = send.finish();
        return;
    }
    let listener = match crate::frontend::listen(addr) {
        Ok(l) => l,
        Err(e) => {
            info!("tunnel: {peer} reverse bind {addr}: {e}");
            let _ = send.write_all(&tlv::encode_all(&[Tlv::Error(ERR_CONNECTION_FAILURE), Tlv::End])).await;
            let _ = send.finish();
            return;
        }
    };
    if send.write_all(&tlv::encode_all(&[Tlv::ConnectOk, Tlv::End])).await.is_err() {
        return;
    }
    info!("tunnel: {peer} reverse forward: listening on {addr}");
    let control_ended = async {
        let mut b = [0u8; 64];
        while let Ok(n) = recv.read(&mut b).await {
            if n == 0 {
                break;
            }
        }
    };
    let accepting = async {
        loop {
            let Ok((tcp, from)) = listener.accept().await else {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            };
            let Ok((mut s, r)) = session.open_stream() else { return };
            let request = tlv::encode_all(&[Tlv::ReverseConnection(addr), Tlv::End]);
            let limiter = limiter.clone();
            tokio::spawn(async move {
                if s.write_all(&request).await.is_err() {
                    relay::reset_tcp(tcp);
                    return;
                }
                let _ = tcp.set_nodelay(true);
                let report = relay::relay_pipelined_limited(tcp, s, r, answer_timeout, Some(&*limiter)).await;
                debug!("tunnel: reverse {from} -> {addr}: {:?}", report.outcome);
            });
        }
    };
    tokio::select! {
        _ = control_ended => {}
        _ = accepting => {}
    }
    let _ = send.finish();
    info!("tunnel: {peer} reverse forward on {addr} closed");
}

/// Client: asks for a reverse forward on `remote`; returns the control stream once the
/// concentrator listens (keep it: dropping it ends the forward).
pub(super) async fn bind(
    session: &Session,
    remote: SocketAddr,
    timeout: Duration,
) -> Result<(SendStream, RecvStream), String> {
    let (mut send, mut recv) = session.open_stream().map_err(|e| e.to_string())?;
    send.write_all(&tlv::encode_all(&[Tlv::ReverseBind(remote), Tlv::End])).await.map_err(|e| e.to_string())?;
    match tokio::time::timeout(timeout, tlv::read_response(&mut recv)).await {
        Ok(Ok(Ok(()))) => Ok((send, recv)),
        Ok(Ok(Err(ERR_DESTINATION_REFUSED))) => Err("refused by the concentrator (not in its --allow-reverse)".into()),
        Ok(Ok(Err(code))) => Err(format!("the concentrator could not listen (error {code:#06x})")),
        Ok(Err(e)) => Err(format!("no valid answer: {e}")),
        Err(_) => Err("no answer in time".into()),
    }
}

/// Client: one stream the concentrator opened: a Reverse Connection for one of `forwards`
/// (remote address → local target); connects, answers, relays.
pub(super) async fn serve_connection(
    mut send: SendStream,
    mut recv: RecvStream,
    forwards: &[(SocketAddr, Target)],
    timeout: Duration,
) {
    let addr = match tokio::time::timeout(timeout, tlv::read_request(&mut recv)).await {
        Ok(Ok((Target::Addr(a), Transport::ReverseConnection))) => a,
        _ => {
            let _ = send.write_all(&tlv::encode_all(&[Tlv::Error(tlv::ERR_PROTOCOL_VIOLATION), Tlv::End])).await;
            let _ = send.finish();
            return;
        }
    };
    let Some((_, local)) = forwards.iter().find(|(r, _)| *r == addr) else {
        let _ = send.write_all(&tlv::encode_all(&[Tlv::Error(ERR_DESTINATION_REFUSED), Tlv::End])).await;
        let _ = send.finish();
        return;
    };
    let connected = match local {
        Target::Addr(a) => tokio::time::timeout(timeout, TcpStream::connect(*a)).await,
        Target::Name(h, p) => tokio::time::timeout(timeout, TcpStream::connect((h.as_str(), *p))).await,
    };
    let tcp = match connected {
        Ok(Ok(t)) => t,
        _ => {
            debug!("tunnel: reverse {addr} -> {local}: cannot connect");
            let _ = send.write_all(&tlv::encode_all(&[Tlv::Error(ERR_CONNECTION_FAILURE), Tlv::End])).await;
            let _ = send.finish();
            return;
        }
    };
    if send.write_all(&tlv::encode_all(&[Tlv::ConnectOk, Tlv::End])).await.is_err() {
        relay::reset_tcp(tcp);
        return;
    }
    let _ = tcp.set_nodelay(true);
    let report = relay::relay(tcp, send, recv).await;
    debug!("tunnel: reverse {addr} -> {local}: {:?}", report.outcome);
}
