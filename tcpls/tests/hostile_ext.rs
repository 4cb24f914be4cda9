//! A hostile server floods a client's tokio layer with unsolicited answers (RTT Echo, TCP
//! Info, Address Echo) about connection IDs it made up. The answers
//! used to be kept per ID for ever (5 M echoes: +353 MiB); now only connections that exist are
//! recorded, and a closed connection's entries go. Memory is measured with a counting global
//! allocator over the whole process.
#![allow(clippy::unwrap_used)]

mod common;
#[path = "../../tcpls-proto/tests/util/counting_alloc.rs"]
mod counting_alloc;

use std::time::Duration;

use common::Pki;
use tcpls::proto::frame::{Frame, PeerTcpInfo};
use tcpls::{server_name_for, TcplsConnector, TcplsListener};

/// One record's worth of unsolicited answers about connection IDs `first..`.
fn flood_record(first: u32) -> Vec<u8> {
    let mut out = Vec::new();
    let addr = "192.0.2.1:443".parse().unwrap();
    let info = PeerTcpInfo { rtt_us: 1, cwnd: 10, ..PeerTcpInfo::default() };
    let mut id = first;
    while out.len() < 16_000 {
        Frame::RttEcho { connection_id: id, timestamp_us: 1 }.encode(&mut out);
        Frame::AddressEcho { connection_id: id, addr }.encode(&mut out);
        Frame::TcpInfo { connection_id: id, info }.encode(&mut out);
        id += 1;
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsolicited_answers_about_made_up_connections_are_not_kept() {
    let pki = Pki::new();
    let listener = TcplsListener::bind("127.0.0.1:0".parse().unwrap(), pki.server()).await.unwrap();
    let addr = listener.local_addr();
    let connector = TcplsConnector::new(pki.client());
    let (client, accepted) =
        tokio::join!(connector.connect(addr, server_name_for("localhost").unwrap()), listener.accept());
    let client = client.unwrap();
    let (server, _) = accepted.unwrap();
    // Warm up (first probe allocates the maps), then measure.
    client.probe_rtt(0).await.unwrap();
    let before = counting_alloc::live();
    let records = 400u32;
    let mut frames = 0;
    for r in 0..records {
        let content = flood_record(1 + r * 1000);
        frames += content.len() / 20;
        server.danger_seal_raw(0, &content).unwrap();
        // Let the driver write it (the record layer's transmit buffer is bounded too).
        while server.danger_transmit_pending(0) > 1 << 20 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    // Everything sent was processed once an RTT probe (sent after it) comes back.
    client.probe_rtt(0).await.unwrap();
    let grown = counting_alloc::live().saturating_sub(before);
    let entries = client.danger_probe_answer_entries();
    eprintln!("{records} records (~{frames} answers about made-up IDs): {entries} entries, heap +{grown} bytes");
    assert!(entries <= 3, "answers kept for connections that do not exist: {entries}");
    // About 800,000 answers (6 MB): kept, they were tens of MiB.
    assert!(grown < 4 << 20, "the heap grew by {grown} bytes");
    // The client still works.
    let (mut send, _recv) = client.open_stream().unwrap();
    tokio::io::AsyncWriteExt::write_all(&mut send, b"still here").await.unwrap();
}
