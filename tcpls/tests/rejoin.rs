//! Rejoin without a token (PROTOCOL.md §3): a client whose tokens are gone
//! loses its connections mid-transfer, rejoins with a fresh handshake and a Rejoin frame, and
//! the transfer completes with the right bytes.
#![allow(clippy::unwrap_used)]

mod common;

use std::time::Duration;

use common::{payload, Pki};
use tcpls::{server_name_for, JoinRegistry, SessionConfig, TcplsConnector, TcplsListener};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    for _ in 0..500 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_without_tokens_rejoins_after_losing_every_connection() {
    let pki = Pki::new();
    let registry = JoinRegistry::new();
    // One token: after one join the session is at its budget and the client holds none.
    let settings = SessionConfig { tokens: 1, ..SessionConfig::default() };
    let listener =
        TcplsListener::bind_with_registry("127.0.0.1:0".parse().unwrap(), pki.server(), settings, registry.clone())
            .await
            .unwrap();
    let server = listener.local_addr();
    tokio::spawn(async move {
        while let Some((session, _)) = listener.accept().await {
            tokio::spawn(async move {
                while let Some((mut send, mut recv)) = session.accept_stream().await {
                    tokio::spawn(async move {
                        let mut all = Vec::new();
                        recv.read_to_end(&mut all).await.unwrap();
                        send.write_all(&all).await.unwrap();
                        send.shutdown().await.unwrap();
                    });
                }
            });
        }
    });

    let session =
        TcplsConnector::new(pki.client()).connect(server, server_name_for("localhost").unwrap()).await.unwrap();
    eventually("the server's token", || session.token_count() == 1).await;
    let joined = session.join(server).await.unwrap();
    assert_eq!(joined, 1);
    assert_eq!(session.token_count(), 0, "at the budget, the server sends no new token");
    eventually("the session reference in the registry", || registry.session_refs() == 1).await;

    let data = payload(4 << 20, 31);
    let (mut send, mut recv) = session.open_stream().unwrap();
    let half = data.len() / 2;
    send.write_all(&data[..half]).await.unwrap();
    // Both connections die at once: disconnected, without a token.
    session.abandon_connection(0, "killed by the test");
    session.abandon_connection(joined, "killed by the test");
    let (_, got) = tokio::join!(
        async {
            send.write_all(&data[half..]).await.unwrap();
            send.shutdown().await.unwrap();
        },
        async {
            let mut got = Vec::new();
            tokio::time::timeout(Duration::from_secs(20), recv.read_to_end(&mut got)).await.unwrap().unwrap();
            got
        }
    );
    assert!(got == data, "{} of {} bytes echoed, content checked", got.len(), data.len());
    let ids: Vec<u32> = session.connections().iter().map(|c| c.id).collect();
    assert!(ids.iter().any(|id| *id >= tcpls_proto::REJOIN_ID_BASE), "a rejoined connection: {ids:?}");
    assert!(registry.listener_stats().joins >= 2, "the join and the rejoin are counted");
    assert_eq!(registry.session_refs(), 1, "one reference per live session");
}
