//! Multihoming as users have it: a server with ONE address, a client with two
//! interfaces, "wifi" (path 0: 10 ms one way, 40 Mbit/s) and "lte" (path 1: 25 ms, 20 Mbit/s).
//! The path manager opens one connection per interface (SO_BINDTODEVICE), follows rtnetlink,
//! and when the wifi interface is set down mid-transfer the traffic continues on lte within a
//! second, every byte verified; when wifi returns, the manager joins over it again.
//! Root and namespaces only (tcpls-netem); otherwise SKIPPED.
#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{payload, Pki};
use tcpls::{
    server_name_for, Endpoint, PathManager, PathManagerConfig, PathOptions, PathPolicy, TcplsConnector, TcplsListener,
};
use tcpls_netem::{skip_unless_supported, PathSpec, Side, Topology};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The server's only address, on its loopback interface, reached over both paths.
const SERVICE: &str = "10.99.0.1";
const BYTES: usize = 24 << 20;

/// Routes to the service address over each path (the topology only routes each path's own
/// subnets): the wifi route first by metric, so unbound sockets use wifi.
fn route_service(topo: &Topology, path: usize) {
    let info = topo.path(path).info();
    let via = match info.client_v4.unwrap().octets() {
        [a, b, c, _] => format!("{a}.{b}.{c}.1"),
    };
    let metric = (100 * (path + 1)).to_string();
    topo.ip(Side::Client, &["route", "replace", SERVICE, "via", &via, "dev", &info.client_iface, "metric", &metric])
        .unwrap();
}

#[test]
fn wifi_down_mid_transfer_continues_on_lte_and_wifi_rejoins() {
    skip_unless_supported!("netns_multihoming::wifi_down_mid_transfer_continues_on_lte_and_wifi_rejoins");
    let topo = Topology::builder().path(PathSpec::new(10.0, 40.0)).path(PathSpec::new(25.0, 20.0)).build().unwrap();
    topo.ip(Side::Server, &["addr", "add", &format!("{SERVICE}/32"), "dev", "lo"]).unwrap();
    // Each router forwards to the server by its default route; the server answers the
    // client's per-path subnets by the routes the topology set up.
    for i in 0..2 {
        route_service(&topo, i);
    }
    let (wifi, lte) = (topo.path(0).info().client_iface.clone(), topo.path(1).info().client_iface.clone());
    let server_addr: SocketAddr = format!("{SERVICE}:4443").parse().unwrap();
    let pki = Pki::new();
    let (server_tls, client_tls) = (pki.server(), pki.client());

    // Server: receives the stream, timestamps reads, checks the content.
    let (ready_tx, ready_rx) = mpsc::channel();
    let (result_tx, result_rx) = mpsc::channel::<(Vec<(Instant, usize)>, bool)>();
    let _server = topo
        .spawn_in(Side::Server, move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                let listener = TcplsListener::bind(server_addr, server_tls).await.unwrap();
                ready_tx.send(()).unwrap();
                let (session, _) = listener.accept().await.unwrap();
                let (send, mut recv) = session.accept_stream().await.unwrap();
                let expect = payload(BYTES, 15);
                let mut got = Vec::with_capacity(BYTES);
                let mut reads = Vec::new();
                let mut buf = vec![0u8; 64 << 10];
                loop {
                    let n = tokio::time::timeout(Duration::from_secs(30), recv.read(&mut buf)).await.unwrap().unwrap();
                    if n == 0 {
                        break;
                    }
                    reads.push((Instant::now(), n));
                    got.extend_from_slice(&buf[..n]);
                }
                result_tx.send((reads, got == expect)).unwrap();
                drop(send);
                // The client ends the session once wifi has rejoined.
                let _ = tokio::time::timeout(Duration::from_secs(60), session.closed()).await;
            })
        })
        .unwrap();
    ready_rx.recv_timeout(Duration::from_secs(10)).unwrap();

    // Client: the path manager keeps one connection per interface; the transfer is paced in
    // chunks so that it is still running when wifi goes down.
    let (events_tx, events_rx) = mpsc::channel::<&'static str>();
    let (wifi_c, lte_c) = (wifi.clone(), lte.clone());
    let client = topo
        .spawn_in(Side::Client, move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                let wifi_path = PathOptions::new().device(wifi_c.clone());
                let lte_path = PathOptions::new().device(lte_c.clone());
                let connector = TcplsConnector::new(client_tls).with_path(wifi_path.clone());
                let session = connector.connect(server_addr, server_name_for("localhost").unwrap()).await.unwrap();
                let config = PathManagerConfig {
                    policy: PathPolicy::Fullmesh,
                    endpoints: vec![Endpoint::new(wifi_path.clone()), Endpoint::new(lte_path)],
                    initial: wifi_path,
                    ..Default::default()
                };
                let manager = PathManager::start(&session, server_addr, config);
                manager.follow_interfaces().unwrap();
                let both_up = |m: &PathManager| m.paths().len() == 2 && m.paths().iter().all(|p| p.conn.is_some());
                let deadline = Instant::now() + Duration::from_secs(10);
                while !both_up(&manager) {
                    assert!(Instant::now() < deadline, "both paths up: {:?}", manager.paths());
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                let (mut send, _recv) = session.open_stream().unwrap();
                let data = payload(BYTES, 15);
                let mut signalled = false;
                for chunk in data.chunks(256 << 10) {
                    send.write_all(chunk).await.unwrap();
                    let sent: u64 = session.connections().iter().map(|c| c.bytes_sent).sum();
                    if !signalled && sent > 8 << 20 {
                        signalled = true;
                        events_tx.send("flowing").unwrap();
                    }
                }
                send.shutdown().await.unwrap();
                let per_path: Vec<(Option<String>, u64)> =
                    session.connections().iter().map(|c| (c.local.map(|a| a.ip().to_string()), c.bytes_sent)).collect();
                eprintln!("bytes per connection: {per_path:?}");
                // Aggregation before the outage: both interfaces carried a real share.
                assert!(per_path.len() >= 2 && per_path.iter().all(|(_, b)| *b > 1 << 20), "{per_path:?}");
                // Wifi comes back: the manager (told by rtnetlink) joins over it again.
                events_tx.send("sent").unwrap();
                let deadline = Instant::now() + Duration::from_secs(25);
                while !both_up(&manager) {
                    assert!(Instant::now() < deadline, "wifi rejoined: {:?}", manager.paths());
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                events_tx.send("rejoined").unwrap();
                let error = tokio::time::timeout(Duration::from_secs(30), session.close()).await.unwrap();
                assert_eq!(error, None, "the session ended cleanly");
                session.stats().failovers
            })
        })
        .unwrap();
    assert_eq!(events_rx.recv_timeout(Duration::from_secs(30)).unwrap(), "flowing");
    let down_at = Instant::now();
    topo.ip(Side::Client, &["link", "set", &wifi, "down"]).unwrap();
    assert_eq!(events_rx.recv_timeout(Duration::from_secs(60)).unwrap(), "sent");
    topo.ip(Side::Client, &["link", "set", &wifi, "up"]).unwrap();
    topo.path(0).restore_routes().unwrap();
    route_service(&topo, 0);
    assert_eq!(events_rx.recv_timeout(Duration::from_secs(30)).unwrap(), "rejoined");
    let failovers = client.join().unwrap();
    let (reads, verified) = result_rx.recv_timeout(Duration::from_secs(60)).unwrap();
    assert!(verified, "every byte arrived once, in order");
    assert!(failovers >= 1, "the records on wifi failed over");
    // The longest pause in the data after wifi went down.
    let after: Vec<Instant> = reads.iter().map(|(t, _)| *t).filter(|t| *t > down_at).collect();
    let mut gap = after.first().map_or(Duration::MAX, |t| t.duration_since(down_at));
    for w in after.windows(2) {
        gap = gap.max(w[1].duration_since(w[0]));
    }
    eprintln!("wifi down: longest pause in the data {gap:?}, failovers {failovers}");
    assert!(gap < Duration::from_secs(1), "traffic continued on lte within 1 s (longest pause {gap:?})");
}
