//! Whole sessions over in-memory pipes: handshake, streams, flow control, close, fallback.
#![allow(clippy::unwrap_used)]

mod util;

use tcpls_proto::{Event, StreamError};
use util::{payload, Pair, Pki};

#[test]
fn handshake_switches_to_tcpls_and_server_sends_tokens() {
    let mut p = Pair::default_pair();
    p.drive();
    assert!(p.client.is_established() && p.server.is_established());
    assert!(!p.client.is_fallback() && !p.server.is_fallback());
    assert_eq!(p.client.handshake_info().unwrap().alpn.as_deref(), Some(&b"tcpls/1"[..]));
    assert_eq!(p.client.tokens().len(), 4);
    assert_eq!(p.client.tokens(), p.server.tokens());
    assert!(p.client_events.contains(&Event::Established { fallback: false }));
}

#[test]
fn client_first_record_shares_the_segment_with_finished() {
    let mut p = Pair::default_pair();
    // Queue data before the handshake completes: it must leave with the client's Finished.
    let id = p.client.open_stream().unwrap();
    assert_eq!(p.client.write(id, b"hello").unwrap(), 5);
    p.drive();
    // Writes: ClientHello, then Finished + first TCPLS record in one write.
    let second = &p.client_writes[1];
    let mut records = vec![];
    let mut rest = &second[..];
    while rest.len() >= 5 {
        let len = 5 + u16::from_be_bytes([rest[3], rest[4]]) as usize;
        records.push(rest[0]);
        rest = &rest[len..];
    }
    assert!(records.len() >= 2, "Finished and a TCPLS record in one write: {records:?}");
    let sid = p.server.accept_stream().unwrap();
    assert_eq!(sid, id);
    let mut buf = [0u8; 16];
    assert_eq!(p.server.read(sid, &mut buf).unwrap(), Some(5));
    assert_eq!(&buf[..5], b"hello");
}

#[test]
fn streams_both_directions_verified_by_content() {
    let mut p = Pair::default_pair();
    p.drive();
    let up = payload(3 << 20, 1);
    let down = payload(2 << 20, 2);
    let c = p.client.open_stream().unwrap();
    let mut off = 0;
    let mut server_stream = None;
    let mut down_off = 0;
    let mut got_up = vec![];
    let mut got_down = vec![];
    let (mut up_done, mut down_done) = (false, false);
    let mut buf = vec![0u8; 65536];
    for _ in 0..100_000 {
        if off < up.len() {
            off += p.client.write(c, &up[off..]).unwrap();
            if off == up.len() {
                p.client.finish(c).unwrap();
            }
        }
        p.drive();
        if server_stream.is_none() {
            server_stream = p.server.accept_stream();
        }
        if let Some(s) = server_stream {
            if down_off < down.len() {
                down_off += p.server.write(s, &down[down_off..]).unwrap();
                if down_off == down.len() {
                    p.server.finish(s).unwrap();
                }
            }
            while !up_done {
                match p.server.read(s, &mut buf).unwrap() {
                    Some(0) => up_done = true,
                    Some(n) => got_up.extend_from_slice(&buf[..n]),
                    None => break,
                }
            }
        }
        while !down_done {
            match p.client.read(c, &mut buf).unwrap() {
                Some(0) => down_done = true,
                Some(n) => got_down.extend_from_slice(&buf[..n]),
                None => break,
            }
        }
        if up_done && down_done {
            break;
        }
    }
    assert!(got_up == up, "upload corrupted or incomplete: {} of {}", got_up.len(), up.len());
    assert!(got_down == down, "download corrupted or incomplete");
}

#[test]
fn an_unread_stream_does_not_stall_others() {
    let mut p = Pair::default_pair();
    p.drive();
    let stalled = p.client.open_stream().unwrap();
    let busy = p.client.open_stream().unwrap();
    // The server never reads `stalled`: the client can only put the initial credit on the wire.
    let blob = payload(16 << 20, 3);
    let mut written = 0;
    for _ in 0..100 {
        written += p.client.write(stalled, &blob[written..]).unwrap();
        p.drive();
    }
    // The stream's send buffer plus the initial credit (64 KiB), no more.
    let send_buffer = tcpls_proto::SessionConfig::default().stream_send_buffer;
    assert!(written <= send_buffer + 65536, "flow control must stop the writer: {written}");
    let data = payload(5 << 20, 4);
    let mut off = 0;
    let mut got = vec![];
    let mut buf = vec![0u8; 65536];
    let mut sid = None;
    for _ in 0..100_000 {
        if off < data.len() {
            off += p.client.write(busy, &data[off..]).unwrap();
            if off == data.len() {
                p.client.finish(busy).unwrap();
            }
        }
        p.drive();
        while sid.is_none() {
            match p.server.accept_stream() {
                Some(id) if id == busy => sid = Some(id),
                Some(_) => {}
                None => break,
            }
        }
        if let Some(s) = sid {
            while let Some(n) = p.server.read(s, &mut buf).unwrap() {
                if n == 0 {
                    break;
                }
                got.extend_from_slice(&buf[..n]);
            }
        }
        if got.len() == data.len() {
            break;
        }
    }
    assert!(got == data);
}

#[test]
fn thousands_of_streams() {
    let mut p = Pair::default_pair();
    p.drive();
    let n = 2000u32;
    let mut ids = vec![];
    for i in 0..n {
        let id = p.client.open_stream().unwrap();
        let msg = payload(100 + (i as usize % 300), i.into());
        assert_eq!(p.client.write(id, &msg).unwrap(), msg.len());
        p.client.finish(id).unwrap();
        ids.push((id, msg));
    }
    p.drive();
    let mut accepted = 0;
    while p.server.accept_stream().is_some() {
        accepted += 1;
    }
    assert_eq!(accepted, n);
    for (id, msg) in ids {
        assert_eq!(p.read_to_end(true, id), msg, "stream {id}");
    }
}

#[test]
fn reset_reaches_the_reader() {
    let mut p = Pair::default_pair();
    p.drive();
    let id = p.client.open_stream().unwrap();
    p.client.write(id, b"partial").unwrap();
    p.drive();
    p.client.reset_stream(id, 0x1234).unwrap();
    p.drive();
    let sid = p.server.accept_stream().unwrap();
    let mut buf = [0u8; 64];
    assert_eq!(p.server.read(sid, &mut buf), Err(StreamError::Reset(0x1234)));
}

#[test]
fn graceful_close_delivers_everything_then_closes() {
    let mut p = Pair::default_pair();
    p.drive();
    let id = p.client.open_stream().unwrap();
    let data = payload(200_000, 9);
    let mut off = 0;
    while off < data.len() {
        off += p.client.write(id, &data[off..]).unwrap();
        p.drive();
        let _ = p.server.accept_stream();
        let mut sink = vec![0u8; 1 << 20];
        while let Some(n) = p.server.read(id, &mut sink).unwrap() {
            if n == 0 {
                break;
            }
        }
    }
    p.client.finish(id).unwrap();
    p.client.close();
    p.drive();
    p.server.close();
    p.drive();
    assert!(p.client.is_closed() && p.server.is_closed());
    assert!(p.client.error().is_none() && p.server.error().is_none(), "{:?} {:?}", p.client.error(), p.server.error());
}

#[test]
fn key_update_keeps_data_flowing() {
    let pki = Pki::new();
    let mut cfg = util::test_config();
    cfg.key_update_records = 5;
    let mut p = Pair::new(pki.client_config(&[]), pki.server_config(&[]), cfg);
    p.drive();
    let id = p.client.open_stream().unwrap();
    let data = payload(1 << 20, 5);
    let mut off = 0;
    let mut got = vec![];
    let mut buf = vec![0u8; 1 << 20];
    while got.len() < data.len() {
        if off < data.len() {
            off += p.client.write(id, &data[off..]).unwrap();
        }
        p.drive();
        let _ = p.server.accept_stream();
        while let Some(n) = p.server.read(id, &mut buf).unwrap() {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
    }
    assert!(got == data);
    let (sent, _) = p.client.key_updates(0);
    let (_, received) = p.server.key_updates(0);
    assert!(sent >= 10, "client rotated its key {sent} times");
    assert_eq!(sent, received);
}

#[test]
fn fallback_when_server_does_not_speak_tcpls() {
    let pki = Pki::new();
    // A server config that only knows http/1.1 stands for a plain TLS server.
    let plain = pki.server_config(&[b"http/1.1"]);
    let client = pki.client_config(&[b"http/1.1"]);
    let mut p = Pair::new(client, plain.clone(), util::test_config());
    // Replace the server with a plain rustls-only one: no tcpls/1 in its list.
    p.server = plain_server(plain);
    p.drive();
    assert!(p.client.is_fallback());
    let id = p.client.open_stream().unwrap();
    assert_eq!(id, 0);
    assert_eq!(p.client.open_stream(), Err(StreamError::Fallback));
    p.client.write(id, b"GET / HTTP/1.0\r\n\r\n").unwrap();
    p.client.finish(id).unwrap();
    p.drive();
    assert_eq!(p.server.accept_stream(), Some(0));
    assert_eq!(p.read_to_end(true, 0), b"GET / HTTP/1.0\r\n\r\n");
    p.server.write(0, b"HTTP/1.0 200 OK\r\n\r\nbody").unwrap();
    p.server.finish(0).unwrap();
    p.drive();
    assert_eq!(p.read_to_end(false, 0), b"HTTP/1.0 200 OK\r\n\r\nbody");
}

/// A session whose server config was NOT passed through `tcpls_server_config`: it never selects
/// tcpls/1, like any plain TLS server.
fn plain_server(config: rustls::ServerConfig) -> tcpls_proto::Session {
    let mut config = config;
    config.enable_secret_extraction = true;
    tcpls_proto::Session::server(std::sync::Arc::new(config), util::test_config()).unwrap()
}

#[test]
fn key_update_on_request_is_answered() {
    let mut p = Pair::default_pair();
    p.drive();
    p.client.update_keys(0, true).unwrap();
    let id = p.client.open_stream().unwrap();
    p.client.write(id, b"after the update").unwrap();
    p.client.finish(id).unwrap();
    p.drive();
    assert_eq!(p.server.key_updates(0), (1, 1), "server rotated its own key because the client asked");
    assert_eq!(p.client.key_updates(0), (1, 1));
    assert_eq!(p.read_to_end(true, id), b"after the update");
    let sid = p.server.open_stream().unwrap();
    p.server.write(sid, b"server side, new key").unwrap();
    p.server.finish(sid).unwrap();
    p.drive();
    assert_eq!(p.read_to_end(false, sid), b"server side, new key");
}

#[test]
fn all_three_cipher_suites() {
    use rustls::crypto::aws_lc_rs::cipher_suite as cs;
    for suite in [cs::TLS13_AES_128_GCM_SHA256, cs::TLS13_AES_256_GCM_SHA384, cs::TLS13_CHACHA20_POLY1305_SHA256] {
        let pki = Pki::new();
        let mut client = pki.client_config_with_suites(&[suite]);
        client.alpn_protocols.clear();
        let mut p = Pair::new(client, pki.server_config(&[]), util::test_config());
        p.drive();
        let info = p.client.handshake_info().unwrap().clone();
        assert!(info.cipher_suite.contains(&format!("{:?}", suite.suite())), "{info:?}");
        let id = p.client.open_stream().unwrap();
        let data = payload(100_000, 11);
        p.client.write(id, &data).unwrap();
        p.client.finish(id).unwrap();
        p.drive();
        assert!(p.read_to_end(true, id) == data);
    }
}

#[test]
fn tickets_reach_the_client_and_the_next_session_resumes() {
    let pki = Pki::new();
    let client = std::sync::Arc::new(tcpls_proto::tcpls_client_config(&pki.client_config(&[])));
    let server = std::sync::Arc::new(tcpls_proto::tcpls_server_config(&pki.server_config(&[])));
    let mut first = Pair::from_arcs(client.clone(), server.clone(), util::test_config());
    first.drive();
    assert!(!first.client.handshake_info().unwrap().resumed);
    let mut second = Pair::from_arcs(client, server, util::test_config());
    second.drive();
    assert!(second.client.handshake_info().unwrap().resumed, "tickets from the first session were handed to rustls");
    assert!(!second.client.is_fallback());
    // The server's certificate is known after a full and after a resumed handshake; the server
    // has none from a client without client authentication.
    for p in [&first, &second] {
        assert_eq!(p.client.handshake_info().unwrap().peer_certificates, std::slice::from_ref(&pki.cert));
        assert!(p.server.handshake_info().unwrap().peer_certificates.is_empty());
    }
}

/// A client that does not trust the server's certificate fails cleanly: an error, an alert for
/// the server, and no panic (rustls once panicked when its alert was flushed the wrong way).
#[test]
fn untrusted_certificate_fails_with_an_alert_not_a_panic() {
    let server_pki = Pki::new();
    let other = Pki::new();
    let mut p = Pair::new(other.client_config(&[]), server_pki.server_config(&[]), util::test_config());
    p.drive();
    assert!(!p.client.is_established());
    assert!(matches!(p.client.error(), Some(tcpls_proto::Error::Tls(_))), "{:?}", p.client.error());
    assert!(
        matches!(p.server.error(), Some(tcpls_proto::Error::Tls(_))),
        "server got the alert: {:?}",
        p.server.error()
    );
    assert!(p.client.is_closed());
}
