//! `tcpls probe`, and the extension options of `tcpls perf` and `tcpls serve`: RTT probes, the
//! peer's TCP_INFO, NAT detection, rate limits, congestion control and user timeout requests.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use rustls::pki_types::ServerName;
use serde::Serialize;
use tcpls::{ConnId, Session, SessionConfig, SocketOptionApplied, TcpInfo, TcplsConnector};

use crate::units::{Amount, Format, Rate};

#[derive(Args)]
pub struct ProbeArgs {
    /// Server address: HOST:PORT, [V6]:PORT or HOST (port 4443).
    pub addr: String,
    /// Measure each connection's RTT with RTT Probe / RTT Echo.
    #[arg(long)]
    pub rtt: bool,
    /// Ask the server for its tcp_info view of each connection (and show ours).
    #[arg(long)]
    pub tcp_info: bool,
    /// Detect NAT: compare the address the server sees with our socket's.
    #[arg(long)]
    pub nat: bool,
    /// RTT probes per connection (the report gives the smallest and all samples).
    #[arg(long, default_value_t = 3)]
    pub count: u32,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Serialize)]
pub struct TcpInfoReport {
    pub rtt_us: u32,
    pub rttvar_us: u32,
    pub cwnd: u32,
    pub total_retrans: u32,
    pub delivery_rate: u64,
    pub bytes_acked: u64,
}

impl From<TcpInfo> for TcpInfoReport {
    fn from(i: TcpInfo) -> Self {
        Self {
            rtt_us: i.rtt_us,
            rttvar_us: i.rttvar_us,
            cwnd: i.cwnd,
            total_retrans: i.total_retrans,
            delivery_rate: i.delivery_rate,
            bytes_acked: i.bytes_acked,
        }
    }
}

#[derive(Debug, Serialize)]
pub struct ConnectionProbe {
    pub id: ConnId,
    pub local: Option<String>,
    pub remote: Option<String>,
    /// Smallest application-level RTT sample (µs).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rtt_us: Option<u64>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub rtt_samples_us: Vec<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peer_tcp_info: Option<TcpInfoReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_tcp_info: Option<TcpInfoReport>,
    /// The address and port the server sees for our end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seen_by_peer: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nat_detected: Option<bool>,
}

#[derive(Debug, Serialize)]
pub struct ProbeReport {
    pub server: String,
    pub connections: Vec<ConnectionProbe>,
}

pub async fn run(
    a: ProbeArgs,
    addr: SocketAddr,
    name: ServerName<'static>,
    tls: rustls::ClientConfig,
) -> Result<(), String> {
    // Without a selection, probe everything.
    let all = !(a.rtt || a.tcp_info || a.nat);
    let session = TcplsConnector::new(Arc::new(tls))
        .connect(addr, name)
        .await
        .map_err(|e| format!("cannot connect to {addr}: {}", crate::tlsconf::explain(&e)))?;
    if session.is_fallback() {
        return Err(format!("{addr} speaks plain TLS only: the probes need a TCPLS server (`tcpls serve`)"));
    }
    let mut connections = Vec::new();
    for c in session.connections().into_iter().filter(|c| c.usable) {
        let mut report = ConnectionProbe {
            id: c.id,
            local: c.local.map(|a| a.to_string()),
            remote: c.remote.map(|a| a.to_string()),
            rtt_us: None,
            rtt_samples_us: Vec::new(),
            peer_tcp_info: None,
            local_tcp_info: None,
            seen_by_peer: None,
            nat_detected: None,
        };
        if a.rtt || all {
            for _ in 0..a.count.max(1) {
                let rtt =
                    session.probe_rtt(c.id).await.map_err(|e| format!("RTT probe on connection {}: {e}", c.id))?;
                report.rtt_samples_us.push(rtt.as_micros() as u64);
            }
            report.rtt_us = report.rtt_samples_us.iter().copied().min();
        }
        if a.tcp_info || all {
            let info = session
                .peer_tcp_info(c.id)
                .await
                .map_err(|e| format!("TCP Info request on connection {}: {e}", c.id))?;
            report.peer_tcp_info = Some(info.into());
            report.local_tcp_info = session.local_tcp_info(c.id).map(Into::into);
        }
        if a.nat || all {
            let nat =
                session.probe_nat(c.id).await.map_err(|e| format!("address probe on connection {}: {e}", c.id))?;
            report.seen_by_peer = Some(nat.seen_by_peer.to_string());
            report.nat_detected = Some(nat.nat_detected);
        }
        connections.push(report);
    }
    session.close().await;
    let report = ProbeReport { server: addr.to_string(), connections };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?);
    } else {
        print_human(&report);
    }
    Ok(())
}

fn print_human(r: &ProbeReport) {
    println!("probe of {}", r.server);
    for c in &r.connections {
        println!(
            "  connection {}: {} -> {}",
            c.id,
            c.local.as_deref().unwrap_or("?"),
            c.remote.as_deref().unwrap_or("?")
        );
        if let Some(rtt) = c.rtt_us {
            let samples: Vec<String> = c.rtt_samples_us.iter().map(|us| format!("{:.3}", *us as f64 / 1e3)).collect();
            println!("    rtt (TCPLS probe): {:.3} ms (samples: {} ms)", rtt as f64 / 1e3, samples.join(", "));
        }
        if let Some(i) = &c.peer_tcp_info {
            println!(
                "    server's tcp_info: rtt {:.3} ms, rttvar {:.3} ms, cwnd {} segments, {} retransmits, delivery \
                 rate {}, {} acknowledged",
                i.rtt_us as f64 / 1e3,
                i.rttvar_us as f64 / 1e3,
                i.cwnd,
                i.total_retrans,
                Rate(i.delivery_rate as f64 * 8.0, Format::Auto),
                Amount(i.bytes_acked, Format::Auto)
            );
        }
        if let Some(i) = &c.local_tcp_info {
            println!("    our tcp_info:      rtt {:.3} ms, cwnd {} segments", i.rtt_us as f64 / 1e3, i.cwnd);
        }
        if let (Some(seen), Some(nat)) = (&c.seen_by_peer, c.nat_detected) {
            println!("    server sees us as {seen}: {}", if nat { "NAT detected" } else { "no NAT" });
        }
    }
}

/// The extension options of `tcpls perf`.
#[derive(Debug, Clone, Default)]
pub struct PerfExt {
    /// Cap on the sender's rate per connection, bits per second.
    pub rate_limit_bps: Option<u64>,
    /// Congestion control the server should use.
    pub peer_cc: Option<String>,
    /// TCP user timeout for both sides.
    pub user_timeout: Option<Duration>,
}

impl PerfExt {
    /// Whether any option is set.
    pub fn is_empty(&self) -> bool {
        self.rate_limit_bps.is_none() && self.peer_cc.is_none() && self.user_timeout.is_none()
    }

    /// Applies the options to the session's connections before the transfer starts. The rate
    /// limit paces our own sending (`we_send`) and asks the server to pace its (`peer_sends`).
    pub fn apply(&self, session: &Session, conns: &[ConnId], we_send: bool, peer_sends: bool) -> Result<(), String> {
        for &conn in conns {
            if let Some(bps) = self.rate_limit_bps {
                let bytes = (bps / 8).max(1);
                if we_send {
                    session.set_send_rate_limit(conn, bytes);
                }
                if peer_sends {
                    session.set_peer_rate_limit(conn, bytes).map_err(|e| format!("--rate-limit: {e}"))?;
                }
            }
            if let Some(name) = &self.peer_cc {
                session.request_peer_congestion_control(conn, name).map_err(|e| format!("--peer-cc: {e}"))?;
            }
            if let Some(t) = self.user_timeout {
                session.set_user_timeout(conn, t).map_err(|e| format!("--user-timeout: {e}"))?;
            }
        }
        Ok(())
    }

    /// Applies the options to every connection the session gets later (a path manager's joins
    /// and re-joins), for as long as the session lives; `applied` are those that have them.
    pub fn follow(
        self,
        session: Session,
        mut applied: Vec<ConnId>,
        we_send: bool,
        peer_sends: bool,
    ) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(50));
            while !session.is_closed() {
                tick.tick().await;
                let new: Vec<ConnId> = session
                    .connections()
                    .iter()
                    .filter(|c| c.usable && !applied.contains(&c.id))
                    .map(|c| c.id)
                    .collect();
                for conn in new {
                    if let Err(e) = self.apply(&session, &[conn], we_send, peer_sends) {
                        crate::logging::warn("perf", &format!("connection {conn}: {e}"));
                    }
                    applied.push(conn);
                }
            }
        })
    }
}

/// Server side: reports the outcome of the client's socket-option requests (congestion
/// control, user timeout) on stderr while the session lives.
pub fn watch_socket_options(session: Session, quiet: bool) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        loop {
            tick.tick().await;
            log_socket_options(&session, quiet);
            if session.connections().iter().all(|c| !c.usable) {
                break;
            }
        }
    })
}

/// Logs the socket-option outcomes reported so far (also called once more when the session
/// ended, so a short session's outcomes are not lost).
pub fn log_socket_options(session: &Session, quiet: bool) {
    for SocketOptionApplied { conn, option, value, result } in session.poll_socket_options() {
        if quiet {
            continue;
        }
        match result {
            Ok(()) => eprintln!("tcpls serve: connection {conn}: {option} set to {value} at the client's request"),
            Err(e) => eprintln!("tcpls serve: connection {conn}: {option} {value} refused: {e}"),
        }
    }
}

/// Session settings of `tcpls serve` for the extension frames: the congestion controls a
/// client may ask for.
pub fn serve_settings(settings: SessionConfig, allow_cc: &[String]) -> SessionConfig {
    if allow_cc.is_empty() {
        return settings;
    }
    SessionConfig { congestion_control_allowed: allow_cc.to_vec(), ..settings }
}
