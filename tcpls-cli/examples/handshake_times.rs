//! Cold and warm handshake times of one client process, for docs/PERFORMANCE.md ("Cold
//! start"): the first handshake of a fresh process (which starts the crypto library) and the
//! next ones, with the TCPLS connector or with a plain tokio-rustls client, against
//! `tcpls serve` (which serves plain TLS clients too).
//!
//! ```text
//! cargo run --release -p tcpls-cli --example handshake_times -- tcpls|tokio-rustls ADDR CA.pem [N] [--warm-up]
//! ```
//!
//! Prints one JSON line: process_to_first_ms (from `main` to the first handshake's end),
//! first_ms (the first TCP connect + handshake), warm_median_ms (the median of the next N-1).
//! `--warm-up` starts the crypto library on a thread first, as `tcpls` does.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::pki_types::{pem::PemObject, CertificateDer, ServerName};

fn main() {
    let start = Instant::now();
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        eprintln!("usage: handshake_times tcpls|tokio-rustls ADDR CA.pem [N] [--warm-up]");
        std::process::exit(2);
    }
    let warm_up = args.iter().any(|a| a == "--warm-up");
    if warm_up {
        std::thread::spawn(|| {
            let mut b = [0u8; 32];
            let _ = rustls::crypto::aws_lc_rs::default_provider().secure_random.fill(&mut b);
        });
    }
    let client = args[1].clone();
    let addr: SocketAddr = args[2].parse().unwrap();
    let n: usize = args.get(4).and_then(|a| a.parse().ok()).unwrap_or(20);
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(&args[3]).unwrap() {
        roots.add(cert.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let mut process_to_first = Duration::ZERO;
    let times: Vec<Duration> = runtime.block_on(async {
        let mut times = Vec::new();
        for _ in 0..n.max(1) {
            let t = Instant::now();
            match client.as_str() {
                "tcpls" => {
                    // A new connector each time: no ticket, a full handshake every time.
                    let connector = tcpls::TcplsConnector::new(Arc::new(config.clone()));
                    let session = connector.connect(addr, tcpls::server_name_for("localhost").unwrap()).await.unwrap();
                    times.push(t.elapsed());
                    session.close().await;
                }
                "tokio-rustls" => {
                    let connector = tokio_rustls::TlsConnector::from(Arc::new(config.clone()));
                    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
                    tcp.set_nodelay(true).unwrap();
                    let name = ServerName::try_from("localhost").unwrap();
                    let mut tls = connector.connect(name, tcp).await.unwrap();
                    times.push(t.elapsed());
                    use tokio::io::AsyncWriteExt;
                    let _ = tls.shutdown().await;
                }
                other => panic!("unknown client {other}"),
            }
            if times.len() == 1 {
                process_to_first = start.elapsed();
            }
        }
        times
    });
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mut warm: Vec<f64> = times[1..].iter().map(|d| ms(*d)).collect();
    warm.sort_by(f64::total_cmp);
    let median = warm.get(warm.len() / 2).copied().unwrap_or(f64::NAN);
    println!(
        "{{\"client\":\"{client}\",\"warm_up\":{warm_up},\"process_to_first_ms\":{:.2},\"first_ms\":{:.2},\
         \"warm_median_ms\":{median:.2},\"n\":{}}}",
        ms(process_to_first),
        ms(times[0]),
        times.len()
    );
}
