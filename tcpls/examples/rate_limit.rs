//! Thesis Fig. 4.9: a Rate Limit frame introduced in the middle of a transfer drops the goodput
//! to the limit, and lifting it (0) restores it. A server streams to the client over loopback;
//! the client prints goodput per 100 ms as CSV (`time_s,goodput_mbps,limit_mbps`).
//!
//! ```text
//! cargo run --release --example rate_limit -p tcpls -- [LIMIT_MBIT=200] [SECONDS=6]
//! ```
//! The limit is set at 1/3 of the run and lifted at 2/3.

use std::time::{Duration, Instant};

use tcpls::{server_name_for, TcplsConnector, TcplsListener};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let limit_mbit: f64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(200.0);
    let seconds: f64 = args.next().map(|a| a.parse()).transpose()?.unwrap_or(6.0); // A throwaway certificate for localhost and configs around it, from the workspace's test
                                                                                   // kit (`tcpls-test`); real deployments load theirs (see `tcpls cert`).
    let pki = tcpls_test::Pki::try_new()?;
    let (server_tls, client_tls) = (pki.server(), pki.client());

    // Server: after the client's first byte, send forever on the stream.
    let listener = TcplsListener::bind("127.0.0.1:0".parse()?, server_tls).await?;
    let addr = listener.local_addr();
    tokio::spawn(async move {
        while let Some((session, _)) = listener.accept().await {
            tokio::spawn(async move {
                while let Some((mut send, mut recv)) = session.accept_stream().await {
                    tokio::spawn(async move {
                        let mut go = [0u8; 1];
                        if recv.read_exact(&mut go).await.is_ok() {
                            let chunk = vec![0x5au8; 256 << 10];
                            while send.write_all(&chunk).await.is_ok() {}
                        }
                    });
                }
            });
        }
    });

    let session = TcplsConnector::new(client_tls).connect(addr, server_name_for("localhost")?).await?;
    let (mut send, mut recv) = session.open_stream()?;
    send.write_all(b"g").await?;
    println!("time_s,goodput_mbps,limit_mbps");
    let start = Instant::now();
    let (set_at, lift_at) = (seconds / 3.0, 2.0 * seconds / 3.0);
    let mut limit = 0.0;
    let mut buf = vec![0u8; 256 << 10];
    let mut tick = start + Duration::from_millis(100);
    let mut bytes = 0u64;
    while start.elapsed().as_secs_f64() < seconds {
        let t = start.elapsed().as_secs_f64();
        if limit == 0.0 && t >= set_at && t < lift_at {
            limit = limit_mbit;
            session.set_peer_rate_limit(0, (limit_mbit * 1e6 / 8.0) as u64)?;
        } else if limit > 0.0 && t >= lift_at {
            limit = 0.0;
            session.set_peer_rate_limit(0, 0)?;
        }
        match tokio::time::timeout_at(tick.into(), recv.read(&mut buf)).await {
            Ok(n) => bytes += n? as u64,
            Err(_) => {
                println!("{:.1},{:.1},{}", t, bytes as f64 * 8.0 / 0.1 / 1e6, limit);
                bytes = 0;
                tick += Duration::from_millis(100);
            }
        }
    }
    session.abort();
    Ok(())
}
