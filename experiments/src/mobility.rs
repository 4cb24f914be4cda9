//! `experiments mobility`: a phone or laptop with Wi-Fi and LTE downloads from a
//! server with ONE address. Wi-Fi (path 0: 30 Mbit/s, 10 ms one way) is the primary path, LTE
//! (path 1: 10 Mbit/s, 30 ms) a backup. Mid-transfer the Wi-Fi interface goes down (`ip link
//! set wifi down` in the client: a handover, the link and its routes are gone), and later comes
//! back (link up, routes restored).
//!
//! * TCPLS: the client's path manager (`fullmesh`, endpoints `wifi` and `lte` bound with
//!   SO_BINDTODEVICE, `lte` a backup path marked with Path Priority) follows rtnetlink: it drops
//!   the Wi-Fi connection as soon as the interface goes down (its records fail over to LTE) and
//!   joins over Wi-Fi again when it returns (the backup then stops carrying data).
//! * MPTCP: the kernel's in-kernel path manager, same topology, `ip mptcp endpoint` `subflow`
//!   on Wi-Fi and `subflow backup` on LTE.
//!
//! Measured: goodput at the receiver over time (handover marked), the longest pause after Wi-Fi
//! goes down, and how long after Wi-Fi returns the goodput is back above the LTE rate.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use tcpls::proto::sync::LockExt;
use tcpls::{
    server_name_for, Endpoint, PathManager, PathManagerConfig, PathOptions, PathPolicy, SessionConfig, TcplsConnector,
};
use tcpls_netem::{Side, Topology};

use crate::output::{round, write_all};
use crate::pki::Pki;
use crate::plot::{Marker, Panel, Series, XAxis};
use crate::tcpls_run::{self, TcplsServer};
use crate::trace::{goodput_series, last_read, mean_mbps, recovery_between, secs_between, Meter};
use crate::{mptcp_run, note, path, sleep_until, topology, wait_started, Opts, Summary, BIN};

pub const NAME: &str = "mobility";
const WIFI_MBPS: f64 = 30.0;
const WIFI_DELAY_MS: f64 = 10.0;
const LTE_MBPS: f64 = 10.0;
const LTE_DELAY_MS: f64 = 30.0;
/// The server's only address (on its loopback interface), reached over both paths.
const SERVICE: Ipv4Addr = Ipv4Addr::new(10, 99, 0, 1);
const PORT: u16 = 4443;
const SEED: u64 = 15;
/// "Back on Wi-Fi": the goodput over this window exceeds the LTE rate by half.
const BACK_WINDOW_S: f64 = 0.5;

struct Params {
    bytes: u64,
    wifi_down_at: f64,
    wifi_up_at: f64,
}

impl Params {
    fn new(quick: bool) -> Params {
        if quick {
            // ≈ 1.5 s on Wi-Fi, 2.5 s on LTE, then Wi-Fi again: ≈ 6 s.
            Params { bytes: 16_000_000, wifi_down_at: 1.5, wifi_up_at: 4.0 }
        } else {
            // ≈ 4 s on Wi-Fi, 6 s on LTE, then Wi-Fi again: ≈ 15 s.
            Params { bytes: 40_000_000, wifi_down_at: 4.0, wifi_up_at: 10.0 }
        }
    }
}

struct Run {
    reads: Vec<(f64, u64)>,
    down_t: f64,
    up_t: f64,
    bytes: u64,
    verified: bool,
    detail: serde_json::Value,
}

impl Run {
    /// Longest pause in the data after Wi-Fi went down (ms).
    fn handover_gap_ms(&self) -> Option<f64> {
        recovery_between(&self.reads, self.down_t, self.up_t).map(|s| round(s * 1e3, 1))
    }

    /// Seconds after Wi-Fi returned until the goodput is above 1.5 × the LTE rate again.
    fn back_on_wifi_s(&self) -> Option<f64> {
        let end = last_read(&self.reads);
        let mut t = self.up_t;
        while t + BACK_WINDOW_S <= end {
            if mean_mbps(&self.reads, t, t + BACK_WINDOW_S) > 1.5 * LTE_MBPS {
                return Some(round(t - self.up_t, 2));
            }
            t += BIN;
        }
        None
    }

    fn phases(&self) -> serde_json::Value {
        let end = last_read(&self.reads);
        json!({
            "before_mbps": round(mean_mbps(&self.reads, 0.5_f64.min(self.down_t), self.down_t), 2),
            "on_lte_mbps": round(mean_mbps(&self.reads, self.down_t + 0.5, self.up_t), 2),
            "after_mbps": round(mean_mbps(&self.reads, self.up_t + 1.0, end), 2),
        })
    }

    fn summary(&self) -> serde_json::Value {
        json!({
            "verified": self.verified,
            "bytes": self.bytes,
            "wifi_down_at_s": round(self.down_t, 3),
            "wifi_up_at_s": round(self.up_t, 3),
            "completed_s": round(last_read(&self.reads), 3),
            "handover_gap_ms": self.handover_gap_ms(),
            "back_on_wifi_s": self.back_on_wifi_s(),
            "goodput": self.phases(),
            "detail": self.detail,
        })
    }
}

/// Wi-Fi and LTE; the server's one address routed over both, Wi-Fi first.
fn build() -> Result<Topology, String> {
    let topo = topology(vec![path(WIFI_DELAY_MS, WIFI_MBPS), path(LTE_DELAY_MS, LTE_MBPS)])?;
    topo.ip(Side::Server, &["addr", "add", &format!("{SERVICE}/32"), "dev", "lo"])
        .map_err(|e| format!("server address: {e}"))?;
    for i in 0..2 {
        route_service(&topo, i)?;
    }
    Ok(topo)
}

/// The route to the service over path `i` (metric: Wi-Fi preferred).
fn route_service(topo: &Topology, i: usize) -> Result<(), String> {
    let info = topo.path(i).info();
    let via = match info.client_v4.ok_or("path without IPv4")?.octets() {
        [a, b, c, _] => format!("{a}.{b}.{c}.1"),
    };
    let metric = (100 * (i + 1)).to_string();
    let service = SERVICE.to_string();
    topo.ip(Side::Client, &["route", "replace", &service, "via", &via, "dev", &info.client_iface, "metric", &metric])
        .map(drop)
        .map_err(|e| format!("route to the service over path {i}: {e}"))
}

/// Wi-Fi goes down: the client's interface, as a handover or a lost association.
fn wifi_down(topo: &Topology) -> Result<Instant, String> {
    let at = Instant::now();
    let wifi = topo.path(0).info().client_iface.clone();
    topo.ip(Side::Client, &["link", "set", &wifi, "down"]).map_err(|e| format!("wifi down: {e}"))?;
    Ok(at)
}

/// Wi-Fi comes back: link up, then its routes (as DHCP would restore them).
fn wifi_up(topo: &Topology) -> Result<Instant, String> {
    let at = Instant::now();
    let wifi = topo.path(0).info().client_iface.clone();
    topo.ip(Side::Client, &["link", "set", &wifi, "up"]).map_err(|e| format!("wifi up: {e}"))?;
    topo.path(0).restore_routes().map_err(|e| format!("wifi routes: {e}"))?;
    route_service(topo, 0)?;
    Ok(at)
}

/// Runs the handover while the transfer started at `t0` goes on.
fn handover(topo: &Topology, t0: Instant, p: &Params) -> Result<(Instant, Instant), String> {
    sleep_until(t0, p.wifi_down_at);
    let down = wifi_down(topo)?;
    sleep_until(t0, p.wifi_up_at);
    let up = wifi_up(topo)?;
    Ok((down, up))
}

/// Late multiplexing on the server (`notsent_lowat` and `transmit_high_water`): bytes the
/// sender keeps queued per connection beyond what is in flight.
const LOWAT: u32 = 64 << 10;

/// `late`: the server keeps little unsent data per connection (TCP_NOTSENT_LOWAT), so less is
/// stranded on Wi-Fi when it goes down.
fn run_tcpls(p: &Params, pki: &Pki, late: bool) -> Result<Run, String> {
    let topo = build()?;
    let server_addr = SocketAddr::new(IpAddr::V4(SERVICE), PORT);
    let settings = if late {
        SessionConfig { notsent_lowat: Some(LOWAT), transmit_high_water: LOWAT as usize, ..SessionConfig::default() }
    } else {
        SessionConfig::default()
    };
    let server = TcplsServer::start(&topo, vec![server_addr], pki.server.clone(), settings)?;
    let (wifi, lte) = (topo.path(0).info().client_iface.clone(), topo.path(1).info().client_iface.clone());
    let (started_tx, started_rx) = mpsc::channel();
    let meter = Meter::new();
    let (m, tls, bytes) = (meter.clone(), pki.client.clone(), p.bytes);
    // Set just before Wi-Fi goes down: the client's last sample of bytes per connection before
    // it is what the backup carried while the primary was up.
    let going_down = Arc::new(AtomicBool::new(false));
    let before_down = Arc::new(Mutex::new((0u64, 0u64)));
    let (flag, sample) = (going_down.clone(), before_down.clone());
    let client = tcpls_run::spawn_client(&topo, Duration::from_secs(120), move || async move {
        let name = server_name_for("localhost").map_err(|e| e.to_string())?;
        let wifi_path = PathOptions::new().device(wifi);
        let session = TcplsConnector::new(tls)
            .with_path(wifi_path.clone())
            .connect(server_addr, name)
            .await
            .map_err(|e| format!("connect {server_addr}: {e}"))?;
        let config = PathManagerConfig {
            policy: PathPolicy::Fullmesh,
            endpoints: vec![Endpoint::new(wifi_path.clone()), Endpoint::backup(PathOptions::new().device(lte))],
            initial: wifi_path,
            ..Default::default()
        };
        let manager = PathManager::start(&session, server_addr, config);
        manager.follow_interfaces().map_err(|e| format!("interface events: {e}"))?;
        let paths = manager.wait_for_paths(Duration::from_secs(5)).await;
        if paths.iter().any(|p| p.conn.is_none()) {
            return Err(format!("paths not up: {paths:?}"));
        }
        // Unsteered: the server's scheduler places each record, never on the backup while
        // Wi-Fi is usable.
        let (_send, mut recv) = tcpls_run::request(&session, bytes, SEED, None).await?;
        let _ = started_tx.send(Instant::now());
        let sampler = async {
            while !flag.load(Ordering::SeqCst) {
                let conns = session.connections();
                let on_backup: u64 = conns.iter().filter(|c| session.is_backup(c.id)).map(|c| c.bytes_received).sum();
                let all: u64 = conns.iter().map(|c| c.bytes_received).sum();
                *sample.lock_unpoisoned() = (on_backup, all);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        let (result, ()) = tokio::join!(tcpls_run::receive(&mut recv, SEED, bytes, &m), sampler);
        let per_conn: Vec<serde_json::Value> = session
            .connections()
            .iter()
            .map(|c| {
                json!({
                    "local": c.local.map(|a| a.ip().to_string()),
                    "backup": session.is_backup(c.id),
                    "bytes_received": c.bytes_received,
                })
            })
            .collect();
        let failovers = session.stats().failovers;
        manager.stop();
        tcpls_run::close(&session).await;
        result.map(|(got, ok)| (got, ok, per_conn, failovers))
    })?;
    let t0 = wait_started(&started_rx)?;
    sleep_until(t0, p.wifi_down_at);
    going_down.store(true, Ordering::SeqCst);
    let down = wifi_down(&topo)?;
    sleep_until(t0, p.wifi_up_at);
    let up = wifi_up(&topo)?;
    let (got, verified, per_conn, failovers) = tcpls_run::join(client)?;
    let (backup_before, all_before) = *before_down.lock_unpoisoned();
    drop(server);
    drop(topo);
    // Bytes that came over the backup (LTE) connections, by connection.
    let lte_prefix = "10.2.";
    let on_lte: u64 = per_conn
        .iter()
        .filter(|c| c["local"].as_str().is_some_and(|l| l.starts_with(lte_prefix)))
        .filter_map(|c| c["bytes_received"].as_u64())
        .sum();
    Ok(Run {
        reads: meter.reads_since(t0),
        down_t: secs_between(t0, down),
        up_t: secs_between(t0, up),
        bytes: got,
        verified,
        detail: json!({
            "connections": per_conn,
            "bytes_received_over_lte": on_lte,
            "bytes_received_before_handover": all_before,
            "backup_bytes_received_before_handover": backup_before,
            "backup_share_before_handover": round(backup_before as f64 / all_before.max(1) as f64, 5),
            "client_failovers": failovers,
        }),
    })
}

fn run_mptcp(p: &Params) -> Result<Run, String> {
    let topo = build()?;
    topo.mptcp_limits(Side::Client, 8, 8).map_err(|e| format!("MPTCP limits: {e}"))?;
    topo.mptcp_limits(Side::Server, 8, 8).map_err(|e| format!("MPTCP limits: {e}"))?;
    let endpoint = |i: usize, flags: &[&str]| -> Result<(), String> {
        let info = topo.path(i).info();
        let a = info.client_addr().ok_or("path without an address")?;
        topo.mptcp_endpoint_add(Side::Client, a, &info.client_iface, flags)
            .map_err(|e| format!("ip mptcp endpoint add {a} {flags:?}: {e}"))
    };
    endpoint(0, &["subflow"])?;
    endpoint(1, &["subflow", "backup"])?;
    let addr = SocketAddr::new(IpAddr::V4(SERVICE), PORT);
    let server = mptcp_run::start_server(&topo, addr)?;
    let (started_tx, started_rx) = mpsc::channel();
    let meter = Meter::new();
    let client =
        mptcp_run::start_client(&topo, addr, p.bytes, SEED, meter.clone(), started_tx, Duration::from_secs(60))?;
    let t0 = wait_started(&started_rx)?;
    let (down, up) = handover(&topo, t0, p)?;
    let d = client.join().map_err(|_| "MPTCP client panicked".to_string())??;
    let endpoints = topo.ip(Side::Client, &["mptcp", "endpoint", "show"]).unwrap_or_default();
    let _ = server.join();
    Ok(Run {
        reads: meter.reads_since(t0),
        down_t: secs_between(t0, down),
        up_t: secs_between(t0, up),
        bytes: d.bytes,
        verified: d.verified,
        detail: json!({
            "max_additional_subflows": d.max_subflows,
            "endpoints_after": endpoints.lines().map(str::trim).collect::<Vec<_>>(),
        }),
    })
}

/// Runs the experiment and writes `mobility.{csv,png,json}`.
pub fn run(opts: &Opts) -> Result<Summary, String> {
    if !mptcp_run::supported() {
        return Err("this kernel has no MPTCP (net.mptcp.enabled): the comparison cannot run".into());
    }
    let p = Params::new(opts.quick);
    let pki = Pki::new()?;
    note(&format!("{NAME}: TCPLS (path manager; LTE backup)"));
    let t = run_tcpls(&p, &pki, false)?;
    note(&format!("{NAME}: TCPLS with late multiplexing (notsent_lowat {} KiB)", LOWAT >> 10));
    let l = run_tcpls(&p, &pki, true)?;
    note(&format!("{NAME}: MPTCP (subflow + backup endpoints)"));
    let m = run_mptcp(&p)?;
    let summary = json!({
        "experiment": NAME,
        "quick": opts.quick,
        "paths": [
            {"name": "wifi", "rate_mbps": WIFI_MBPS, "one_way_delay_ms": WIFI_DELAY_MS},
            {"name": "lte (backup)", "rate_mbps": LTE_MBPS, "one_way_delay_ms": LTE_DELAY_MS},
        ],
        "server_addresses": 1,
        "queue_packets": crate::QUEUE_PACKETS,
        "tcp_congestion_control": crate::host_congestion_control(),
        "bytes": p.bytes,
        "tcpls_handover_gap_ms": t.handover_gap_ms(),
        "tcpls_late_handover_gap_ms": l.handover_gap_ms(),
        "tcpls_late_back_on_wifi_s": l.back_on_wifi_s(),
        "mptcp_handover_gap_ms": m.handover_gap_ms(),
        "tcpls_back_on_wifi_s": t.back_on_wifi_s(),
        "mptcp_back_on_wifi_s": m.back_on_wifi_s(),
        "tcpls": t.summary(),
        "tcpls_late": l.summary(),
        "tcpls_late_notsent_lowat": LOWAT,
        "mptcp": m.summary(),
        "verified": t.verified && l.verified && m.verified,
    });
    let fmt = |v: Option<f64>, unit: &str| v.map_or_else(|| "never".into(), |v| format!("{v}{unit}"));
    let panel = Panel {
        title: format!(
            "Wi-Fi down {:.1} s, up {:.1} s — gap: TCPLS {}, late mux {}, MPTCP {}; back on Wi-Fi: {}, {}, {}",
            t.down_t,
            t.up_t,
            fmt(t.handover_gap_ms().map(f64::round), " ms"),
            fmt(l.handover_gap_ms().map(f64::round), " ms"),
            fmt(m.handover_gap_ms().map(f64::round), " ms"),
            fmt(t.back_on_wifi_s(), " s"),
            fmt(l.back_on_wifi_s(), " s"),
            fmt(m.back_on_wifi_s(), " s"),
        ),
        y_label: "goodput (Mbit/s)".into(),
        series: vec![
            Series {
                label: "TCPLS (path manager; LTE backup)".into(),
                points: goodput_series(&t.reads, BIN, last_read(&t.reads) + BIN),
            },
            Series {
                label: "TCPLS late multiplexing (notsent_lowat 64 KiB)".into(),
                points: goodput_series(&l.reads, BIN, last_read(&l.reads) + BIN),
            },
            Series {
                label: "MPTCP (subflow + backup endpoints)".into(),
                points: goodput_series(&m.reads, BIN, last_read(&m.reads) + BIN),
            },
        ],
        markers: vec![
            Marker { label: "Wi-Fi down".into(), t: t.down_t },
            Marker { label: "Wi-Fi up".into(), t: t.up_t },
        ],
        legend_top: true,
        x_axis: XAxis::Time,
        dashed: Vec::new(),
    };
    write_all(opts, NAME, "Mobility: Wi-Fi -> LTE (backup) -> Wi-Fi, one server address", &[panel], &summary)?;
    if !(t.verified && l.verified && m.verified) {
        return Err(format!("{NAME}: a transfer was incomplete or corrupted: {summary}"));
    }
    Ok(summary)
}
