#![allow(dead_code, clippy::unwrap_used)]

/// The workspace's test certificate and payload (the `tcpls-test` kit).
#[allow(unused_imports)] // not every test file uses both
pub use tcpls_test::{payload, Pki};

/// Listeners on several loopback addresses (e.g. 127.0.0.1 and 127.0.0.2 as two paths) sharing
/// one join registry, as a multi-address server has them.
pub async fn listen_on(pki: &Pki, addrs: &[&str]) -> Vec<tcpls::TcplsListener> {
    let registry = tcpls::JoinRegistry::new();
    let mut listeners = Vec::new();
    for a in addrs {
        let l = tcpls::TcplsListener::bind_with_registry(
            a.parse().unwrap(),
            pki.server(),
            tcpls::SessionConfig::default(),
            registry.clone(),
        )
        .await
        .unwrap();
        listeners.push(l);
    }
    listeners
}

/// Writes `data` on a stream and finishes it while reading the other half to its end; returns
/// what was read (an echo server sends `data` back).
pub async fn round_trip(send: &mut tcpls::SendStream, recv: &mut tcpls::RecvStream, data: &[u8]) -> Vec<u8> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (w, r) = tokio::join!(
        async {
            send.write_all(data).await.unwrap();
            send.shutdown().await.unwrap();
        },
        async {
            let mut got = Vec::with_capacity(data.len());
            recv.read_to_end(&mut got).await.unwrap();
            got
        }
    );
    let () = w;
    r
}
