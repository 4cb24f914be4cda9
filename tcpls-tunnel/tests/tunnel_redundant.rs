//! Redundant UDP flows (`TunnelConfig::redundant`): every datagram travels on both paths of the
//! session, yet the destination gets each exactly once and so does the application for each
//! answer, through a UDP forward and through SOCKS5 UDP ASSOCIATE; when one path is killed (RST
//! with `ss -K`) in the middle of a 50 datagrams/s stream, none is lost; a concentrator from
//! before the redundant mode gets single-copy flows.

#![allow(clippy::unwrap_used)]

mod tunnel_support;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tcpls_tunnel::tunnel::{Target, TunnelConfig};
use tokio::net::UdpSocket;
use tokio::time::timeout;
use tunnel_support::*;

/// A UDP echo server that also counts how many times it received each payload.
async fn counting_echo() -> (SocketAddr, Arc<Mutex<HashMap<Vec<u8>, u32>>>) {
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = sock.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(HashMap::new()));
    let counts = seen.clone();
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65536];
        while let Ok((n, from)) = sock.recv_from(&mut buf).await {
            *counts.lock().unwrap().entry(buf[..n].to_vec()).or_insert(0) += 1;
            let _ = sock.send_to(&buf[..n], from).await;
        }
    });
    (addr, seen)
}

/// The tunnel on two loopback paths, redundant, with a UDP forward to a counting echo server;
/// the forward's address.
async fn redundant_tunnel() -> (Tunnel, SocketAddr, Arc<Mutex<HashMap<Vec<u8>, u32>>>) {
    let cfg = TunnelConfig { redundant: true, ..loopback_allowed() };
    let t = Tunnel::start_with(&["127.0.0.1:0", "127.0.0.1:0"], cfg).await;
    assert_eq!(t.client.session().usable_connections().len(), 2, "the second path was joined");
    let (echo, seen) = counting_echo().await;
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let fwd = sock.local_addr().unwrap();
    let client = t.client.clone();
    tokio::spawn(async move { client.serve_udp(sock, Target::Addr(echo)).await });
    (t, fwd, seen)
}

/// Datagram `i`: its number and a pattern, so that content (not length) is checked.
fn datagram(i: u32) -> Vec<u8> {
    [format!("datagram {i:05} ").into_bytes(), payload(200, u64::from(i))].concat()
}

fn bytes_sent_per_path(t: &Tunnel) -> Vec<u64> {
    t.client.session().connections().iter().map(|c| c.bytes_sent).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_datagram_is_delivered_once_though_it_travels_on_both_paths() {
    const N: u32 = 200;
    let (t, fwd, seen) = redundant_tunnel().await;
    let app = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    app.connect(fwd).await.unwrap();
    let before = bytes_sent_per_path(&t);
    let mut buf = vec![0u8; 65536];
    // One at a time: on loopback nothing is lost, so every answer must come back, once.
    for i in 0..N {
        app.send(&datagram(i)).await.unwrap();
        let n = timeout(T, app.recv(&mut buf)).await.expect("the answer came back").unwrap();
        assert_eq!(buf[..n], datagram(i), "answer {i}");
    }
    // No duplicate follows: the next thing received is the answer to a fresh datagram.
    app.send(b"last").await.unwrap();
    let n = timeout(T, app.recv(&mut buf)).await.unwrap().unwrap();
    assert_eq!(&buf[..n], b"last", "a duplicate answer reached the application");
    let seen = seen.lock().unwrap().clone();
    for i in 0..N {
        assert_eq!(seen.get(&datagram(i)), Some(&1), "the destination got datagram {i} once");
    }
    // Both paths carried every datagram (each path's bytes exceed the datagrams' total).
    let sent: Vec<u64> = bytes_sent_per_path(&t).iter().zip(before).map(|(a, b)| a - b).collect();
    let total = u64::from(N) * datagram(0).len() as u64;
    eprintln!("bytes sent per path {sent:?} for {total} bytes of datagrams");
    assert!(sent.iter().all(|s| *s >= total), "a path did not carry every datagram: {sent:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_path_killed_mid_stream_loses_no_datagram() {
    const NAME: &str = "a_path_killed_mid_stream_loses_no_datagram";
    if let Err(why) = can_kill_sockets() {
        eprintln!("SKIPPED: {NAME}: {why}");
        return;
    }
    const N: u32 = 150; // 3 s at 50 datagrams/s
    let (t, fwd, seen) = redundant_tunnel().await;
    let session = t.client.session();
    let app = Arc::new(UdpSocket::bind("127.0.0.1:0").await.unwrap());
    app.connect(fwd).await.unwrap();
    let answers = Arc::new(Mutex::new(HashMap::<Vec<u8>, u32>::new()));
    let (rx_app, rx_answers) = (app.clone(), answers.clone());
    tokio::spawn(async move {
        let mut buf = vec![0u8; 65536];
        while let Ok(n) = rx_app.recv(&mut buf).await {
            *rx_answers.lock().unwrap().entry(buf[..n].to_vec()).or_insert(0) += 1;
        }
    });
    let mut tick = tokio::time::interval(Duration::from_millis(20));
    for i in 0..N {
        tick.tick().await;
        app.send(&datagram(i)).await.unwrap();
        if i == N / 3 {
            // The first path (which also carried the flow's opening) dies.
            let first = session.connections().into_iter().min_by_key(|c| c.id).unwrap();
            let killed = kill_sockets_to_port(first.remote.unwrap().port());
            assert!(killed >= 1, "ss -K found the first path's socket");
            eprintln!("killed path {} after {i} datagrams", first.id);
        }
    }
    wait_for(|| answers.lock().unwrap().len() == N as usize).await;
    let seen = seen.lock().unwrap().clone();
    let answers = answers.lock().unwrap().clone();
    for i in 0..N {
        assert_eq!(seen.get(&datagram(i)), Some(&1), "the destination got datagram {i} once");
        assert_eq!(answers.get(&datagram(i)), Some(&1), "the application got answer {i} once");
    }
    assert_eq!(session.usable_connections().len(), 1, "the killed path is gone");
}

/// The UDP side of a concentrator from before the redundant mode: its parser answers the
/// unknown Redundant Flow message with Error 0x0001 (malformed TLV); a plain UDP Associate gets
/// Connect OK and its datagrams (plain framing) echoed back.
async fn old_concentrator(pki: &Pki) -> SocketAddr {
    use tcpls_tunnel::tunnel::{tlv, udp};
    use tokio::io::AsyncWriteExt;
    let l = tcpls::TcplsListener::bind("127.0.0.1:0".parse().unwrap(), pki.server()).await.unwrap();
    let addr = l.local_addr();
    tokio::spawn(async move {
        while let Some((session, _)) = l.accept().await {
            tokio::spawn(async move {
                while let Some((mut send, mut recv)) = session.accept_stream().await {
                    tokio::spawn(async move {
                        let Ok(tlv::Tlv::UdpAssociate(_)) = tlv::read_tlv(&mut recv).await else { return };
                        if !matches!(tlv::read_tlv(&mut recv).await, Ok(tlv::Tlv::End)) {
                            let refusal = [tlv::Tlv::Error(tlv::ERR_MALFORMED_TLV), tlv::Tlv::End];
                            let _ = send.write_all(&tlv::encode_all(&refusal)).await;
                            let _ = send.finish();
                            return;
                        }
                        let _ = send.write_all(&tlv::encode_all(&[tlv::Tlv::ConnectOk, tlv::Tlv::End])).await;
                        let mut buf = Vec::new();
                        while let Ok(true) = udp::read_datagram(&mut recv, &mut buf).await {
                            let _ = send.write_all(&udp::frame(&buf)).await;
                        }
                    });
                }
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_concentrator_gets_single_copy_flows() {
    let pki = Pki::new();
    let conc = old_concentrator(&pki).await;
    let cfg = TunnelConfig { redundant: true, ..loopback_allowed() };
    let name = tcpls::server_name_for("localhost").unwrap();
    let client = tcpls_tunnel::tunnel::TunnelClient::connect(conc, name, pki.client(), &[], cfg).await.unwrap();
    let sock = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let fwd = sock.local_addr().unwrap();
    tokio::spawn(async move { client.serve_udp(sock, Target::Addr("127.0.0.1:9".parse().unwrap())).await });
    let app = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    app.connect(fwd).await.unwrap();
    let mut buf = vec![0u8; 65536];
    // Numbered datagrams would come back with the plain echo's framing wrong: content differs.
    for i in 0..20 {
        app.send(&datagram(i)).await.unwrap();
        let n = timeout(T, app.recv(&mut buf)).await.expect("the answer came back").unwrap();
        assert_eq!(buf[..n], datagram(i), "answer {i}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn socks5_udp_associate_is_redundant_too() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    const N: u32 = 50;
    let cfg = TunnelConfig { redundant: true, ..loopback_allowed() };
    let t = Tunnel::start_with(&["127.0.0.1:0", "127.0.0.1:0"], cfg).await;
    assert_eq!(t.client.session().usable_connections().len(), 2, "the second path was joined");
    let (echo, seen) = counting_echo().await;
    let socks = t.listen(tcpls_tunnel::tunnel::Frontend::Socks).await;
    let mut control = tokio::net::TcpStream::connect(socks).await.unwrap();
    control.write_all(&[5, 1, 0]).await.unwrap();
    let mut greeting = [0u8; 2];
    control.read_exact(&mut greeting).await.unwrap();
    control.write_all(&[5, 3, 0, 1, 0, 0, 0, 0, 0, 0]).await.unwrap();
    let mut reply = [0u8; 10];
    control.read_exact(&mut reply).await.unwrap();
    assert_eq!(reply[..4], [5, 0, 0, 1], "UDP ASSOCIATE succeeded, IPv4 relay address");
    let relay = SocketAddr::from(([reply[4], reply[5], reply[6], reply[7]], u16::from_be_bytes([reply[8], reply[9]])));
    let app = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    app.connect(relay).await.unwrap();
    let header = [&[0u8, 0, 0, 1, 127, 0, 0, 1][..], &echo.port().to_be_bytes()].concat();
    let before = bytes_sent_per_path(&t);
    let mut buf = vec![0u8; 65536];
    for i in 0..N {
        app.send(&[header.clone(), datagram(i)].concat()).await.unwrap();
        let n = timeout(T, app.recv(&mut buf)).await.expect("the answer came back").unwrap();
        assert_eq!(buf[..n], [header.clone(), datagram(i)].concat(), "answer {i}, from the echo server");
    }
    let seen = seen.lock().unwrap().clone();
    for i in 0..N {
        assert_eq!(seen.get(&datagram(i)), Some(&1), "the destination got datagram {i} once");
    }
    let sent: Vec<u64> = bytes_sent_per_path(&t).iter().zip(before).map(|(a, b)| a - b).collect();
    let total = u64::from(N) * datagram(0).len() as u64;
    assert!(sent.iter().all(|s| *s >= total), "a path did not carry every datagram: {sent:?}");
}
