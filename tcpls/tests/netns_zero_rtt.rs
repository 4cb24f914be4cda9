//! Time to first byte on an emulated 50 ms RTT path (tcpls-netem, root only): a resumed session
//! without early data, with 0-RTT, and with 0-RTT plus TCP Fast Open. TTFB runs from the start
//! of the TCP connect to the first byte of the answer to a small request on stream 0. Expected:
//! 3, 2 and 1 RTT. Without namespaces: prints `SKIPPED: reason`, returns.
#![allow(clippy::unwrap_used)]

mod common;

use std::net::SocketAddr;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use common::Pki;
use rustls::{ClientConfig, ServerConfig};
use tcpls::{server_name_for, TcplsConnector, TcplsListener};
use tcpls_netem::{skip_unless_supported, PathSpec, Side, Topology};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ONE_WAY_MS: f64 = 25.0;
const RTT: Duration = Duration::from_millis(50);
const REQUEST_LEN: usize = 64;
const RUNS: usize = 3;

/// X25519 only: the ClientHello (with its PSK and early data) must fit in the SYN for Fast Open;
/// the default hybrid post-quantum key share alone is larger than one segment.
fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    let mut p = tcpls::crypto_provider();
    p.kx_groups = vec![rustls::crypto::aws_lc_rs::kx_group::X25519];
    Arc::new(p)
}

fn configs(pki: &Pki) -> (Arc<ClientConfig>, Arc<ServerConfig>) {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(pki.cert.clone()).unwrap();
    let mut client = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    client.enable_early_data = true;
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(pki.key.clone().into());
    let mut server = ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![pki.cert.clone()], key)
        .unwrap();
    server.max_early_data_size = 16384;
    (Arc::new(client), Arc::new(server))
}

fn enable_fast_open(topo: &Topology, side: Side) {
    let out = topo.command(side, "sh").args(["-c", "echo 3 > /proc/sys/net/ipv4/tcp_fastopen"]).output().unwrap();
    assert!(out.status.success(), "setting net.ipv4.tcp_fastopen: {}", String::from_utf8_lossy(&out.stderr));
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Resumed,
    ZeroRtt,
    ZeroRttFastOpen,
}

/// One request; returns TTFB and whether the session resumed / had early data accepted.
async fn ttfb(client: &Arc<ClientConfig>, addr: SocketAddr, mode: Mode) -> (Duration, bool, bool) {
    let request = vec![b'q'; REQUEST_LEN];
    let connector = TcplsConnector::new(client.clone()).with_fast_open(mode == Mode::ZeroRttFastOpen);
    let name = server_name_for("localhost").unwrap();
    let start = Instant::now();
    let (session, mut recv) = match mode {
        Mode::Resumed => {
            let session = connector.connect(addr, name).await.unwrap();
            let (mut send, recv) = session.open_stream().unwrap();
            send.write_all(&request).await.unwrap();
            (session, recv)
        }
        Mode::ZeroRtt | Mode::ZeroRttFastOpen => {
            let (session, _send, recv) = connector.connect_with_early_data(addr, name, &request).await.unwrap();
            (session, recv)
        }
    };
    let mut first = [0u8; 1];
    recv.read_exact(&mut first).await.unwrap();
    let elapsed = start.elapsed();
    assert_eq!(first[0], b'r');
    let mut rest = vec![0u8; 999];
    recv.read_exact(&mut rest).await.unwrap();
    assert!(rest.iter().all(|b| *b == b'r'), "response content");
    let info = session.handshake_info().unwrap();
    // A graceful close also waits for the session tickets, which a resumed server sends after
    // the client Finished (after its half-RTT answer): the next run resumes with one of them.
    let _ = tokio::time::timeout(Duration::from_secs(5), session.close()).await;
    (elapsed, info.resumed, info.early_data_accepted)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

#[test]
fn zero_rtt_saves_one_round_trip_and_fast_open_another() {
    skip_unless_supported!("netns_zero_rtt::zero_rtt_saves_one_round_trip_and_fast_open_another");
    let topo = Topology::builder().path(PathSpec::new(ONE_WAY_MS, 100.0)).build().unwrap();
    enable_fast_open(&topo, Side::Client);
    enable_fast_open(&topo, Side::Server);
    let server_addr = SocketAddr::new(topo.path(0).info().server_addr().unwrap(), 4443);
    let pki = Pki::new();
    let (client_tls, server_tls) = configs(&pki);

    let (listening_tx, listening_rx) = mpsc::channel();
    let _server = topo
        .spawn_in(Side::Server, move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                let settings = tcpls::SessionConfig::default();
                let listener = TcplsListener::bind_fast_open(server_addr, server_tls, settings, 64).await.unwrap();
                listening_tx.send(()).unwrap();
                let serve = async {
                    while let Some((session, _)) = listener.accept().await {
                        tokio::spawn(async move {
                            while let Some((mut send, mut recv)) = session.accept_stream().await {
                                let mut request = [0u8; REQUEST_LEN];
                                if recv.read_exact(&mut request).await.is_ok() {
                                    let _ = send.write_all(&[b'r'; 1000]).await;
                                    let _ = send.shutdown().await;
                                }
                            }
                        });
                    }
                };
                let _ = tokio::time::timeout(Duration::from_secs(50), serve).await;
            })
        })
        .unwrap();
    listening_rx.recv_timeout(Duration::from_secs(10)).unwrap();

    let client = topo
        .spawn_in(Side::Client, move || {
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(async move {
                // Warm-up: tickets for resumption and the server's Fast Open cookie.
                let (_, resumed, _) = ttfb(&client_tls, server_addr, Mode::ZeroRttFastOpen).await;
                assert!(!resumed);
                let mut results = Vec::new();
                for mode in [Mode::Resumed, Mode::ZeroRtt, Mode::ZeroRttFastOpen] {
                    let mut times = Vec::new();
                    for _ in 0..RUNS {
                        let (t, resumed, early) = ttfb(&client_tls, server_addr, mode).await;
                        assert!(resumed, "{mode:?}: resumed");
                        assert_eq!(early, mode != Mode::Resumed, "{mode:?}: early data accepted");
                        times.push(t);
                    }
                    results.push((mode, median(times.clone()), times));
                }
                results
            })
        })
        .unwrap();
    let results = client.join().unwrap();
    for (mode, median, all) in &results {
        println!(
            "TTFB {mode:?}: median {median:?} (runs {all:?}), {:.2} RTT",
            median.as_secs_f64() / RTT.as_secs_f64()
        );
    }
    let (resumed, zero_rtt, fast_open) = (results[0].1, results[1].1, results[2].1);
    let margin = RTT.mul_f64(0.7);
    assert!(
        resumed.saturating_sub(zero_rtt) >= margin,
        "0-RTT should save about one RTT: resumed {resumed:?}, 0-RTT {zero_rtt:?}"
    );
    assert!(
        zero_rtt.saturating_sub(fast_open) >= margin,
        "TCP Fast Open should save about one more RTT: 0-RTT {zero_rtt:?}, with TFO {fast_open:?}"
    );
}
