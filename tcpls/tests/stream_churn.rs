//! Many streams come and go on one session through the tokio API, ending in every way an
//! application ends them (read to the end with `read` or `read_chunk_with`, reader dropped
//! early, writer reset part way): once they are all over, neither end holds receive credit,
//! send buffers or unacknowledged records for them. A stream left behind would keep its credit
//! counted against the session's receive budget for the session's life (the tunnel's long-lived
//! session would run out of budget one stream at a time).
#![allow(clippy::unwrap_used)]

mod common;

use std::time::{Duration, Instant};

use common::{payload, Pki};
use tcpls::{server_name_for, Session, TcplsConnector, TcplsListener};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;

/// An echo server whose session the test can inspect.
async fn echo_server(pki: &Pki) -> (std::net::SocketAddr, oneshot::Receiver<Session>) {
    let listener = TcplsListener::bind("127.0.0.1:0".parse().unwrap(), pki.server()).await.unwrap();
    let addr = listener.local_addr();
    let (tx, rx) = oneshot::channel();
    tokio::spawn(async move {
        let (session, _) = listener.accept().await.unwrap();
        let _ = tx.send(session.clone());
        while let Some((mut send, mut recv)) = session.accept_stream().await {
            tokio::spawn(async move {
                // A reset by the client ends the copy with an error; dropping `send` then
                // finishes the echo's half.
                if tokio::io::copy(&mut recv, &mut send).await.is_ok() {
                    let _ = send.shutdown().await;
                }
            });
        }
    });
    (addr, rx)
}

/// Writes `data` and finishes the stream, in a task of its own (the echo comes back meanwhile).
fn write_and_finish(mut send: tcpls::SendStream, data: Vec<u8>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        send.write_all(&data).await.unwrap();
        send.shutdown().await.unwrap();
    })
}

async fn one_stream(session: &Session, i: u64) {
    let (mut send, mut recv) = session.open_stream().unwrap();
    let data = payload(1 + (i as usize * 7_919) % 90_000, i);
    match i % 4 {
        // Read to the end with AsyncRead.
        0 => {
            let writer = write_and_finish(send, data.clone());
            let mut got = Vec::new();
            recv.read_to_end(&mut got).await.unwrap();
            writer.await.unwrap();
            assert!(got == data, "stream {i}: echo corrupted");
        }
        // Read to the end without a copy (the tunnel's way).
        1 => {
            let writer = write_and_finish(send, data.clone());
            let mut got = Vec::new();
            while recv
                .read_chunk_with(|chunk| {
                    got.extend_from_slice(chunk);
                    chunk.len()
                })
                .await
                .unwrap()
                > 0
            {}
            writer.await.unwrap();
            assert!(got == data, "stream {i}: echo corrupted (read_chunk_with)");
        }
        // The reader goes away before the echo arrives.
        2 => {
            drop(recv);
            send.write_all(&data).await.unwrap();
            send.shutdown().await.unwrap();
        }
        // The writer resets part way; what comes back is a prefix of what was written.
        _ => {
            let half = data.len() / 2;
            send.write_all(&data[..half]).await.unwrap();
            send.reset(9).unwrap();
            let mut got = Vec::new();
            let _ = recv.read_to_end(&mut got).await;
            assert!(data.starts_with(&got), "stream {i}: echo is not a prefix of what was written");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_that_ended_leave_nothing_behind() {
    let pki = Pki::new();
    let (addr, server) = echo_server(&pki).await;
    let client = TcplsConnector::new(pki.client()).connect(addr, server_name_for("localhost").unwrap()).await.unwrap();
    let server = server.await.unwrap();
    // 400 streams, 16 at a time.
    let mut next = 0u64;
    let mut running = tokio::task::JoinSet::new();
    while next < 400 || !running.is_empty() {
        while next < 400 && running.len() < 16 {
            let session = client.clone();
            let i = next;
            running.spawn(async move { one_stream(&session, i).await });
            next += 1;
        }
        running.join_next().await.unwrap().unwrap();
    }
    // The last acknowledgements take a delayed-ACK period; streams the server still echoes
    // into a dropped reader end soon after.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (c, s) = (client.memory_use(), server.memory_use());
        let clean =
            |m: &tcpls_proto::MemoryUse| m.receive_credit == 0 && m.send_buffered == 0 && m.unacked_records == 0;
        if clean(&c) && clean(&s) {
            break;
        }
        assert!(Instant::now() < deadline, "streams left behind: client {c:?}, server {s:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(client.close().await, None);
}
