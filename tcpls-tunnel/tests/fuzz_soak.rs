//! A deterministic soak over the tunnel parsers' fuzz target bodies (`fuzz/src/tunnel.rs`,
//! included as is), so that CI runs the same properties on stable Rust without cargo-fuzz:
//! pseudo-random inputs biased towards each format (valid messages, then mutated) so that they
//! get past the first checks. Any panic is a failure.
#![allow(clippy::unwrap_used)]

#[path = "../../fuzz/src/tunnel.rs"]
mod tunnel;

use tcpls_test::Rng;
use tcpls_tunnel::codec::{encode_data, Message};
use tcpls_tunnel::tunnel::tlv::Tlv;

/// Mutation on top of the workspace's generator (`tcpls_test::Rng`, xorshift64*).
trait Mutate {
    /// Flips, truncates or extends a valid input now and then.
    fn mutate(&mut self, v: Vec<u8>) -> Vec<u8>;
}

impl Mutate for Rng {
    fn mutate(&mut self, mut v: Vec<u8>) -> Vec<u8> {
        match self.below(4) {
            0 => {}
            1 if !v.is_empty() => {
                let i = self.below(v.len());
                v[i] ^= 1 << self.below(8);
            }
            2 => v.truncate(self.below(v.len() + 1)),
            _ => {
                let extra = self.below(40);
                let more = self.bytes(extra);
                v.extend(more);
            }
        }
        v
    }
}

const ROUNDS: usize = 5_000;

#[test]
fn tm3_codec_soak() {
    let mut rng = Rng::new(0x7e37_e447);
    for _ in 0..ROUNDS {
        let mut input = vec![rng.next_u64() as u8];
        for _ in 0..rng.below(6) {
            let conn = rng.below(70_000) as u16;
            let seq = rng.next_u64() as u32;
            let msg = match rng.below(4) {
                0 => Message::Syn { conn_id: conn, seq, dst: "10.0.0.1:80".parse().unwrap() }.to_bytes().ok(),
                1 => Message::Fin { conn_id: conn, seq, reason: [0x88, 0x99, 0x12][rng.below(3)] }.to_bytes().ok(),
                2 => {
                    let n = 1 + rng.below(300);
                    encode_data(conn, seq, &rng.bytes(n)).ok()
                }
                _ => {
                    let n = rng.below(20);
                    Some(rng.bytes(n).into())
                }
            };
            input.extend(rng.mutate(msg.map(|b| b.to_vec()).unwrap_or_default()));
        }
        tunnel::tm3_codec(&input);
    }
}

#[test]
fn tunnel_tlv_soak() {
    let mut rng = Rng::new(0x5eed_0001);
    let msgs = [
        Tlv::Connect("192.0.2.1:443".parse().unwrap()),
        Tlv::Connect("[2001:db8::1]:80".parse().unwrap()),
        Tlv::ConnectByName("example.org".into(), 8080),
        Tlv::ConnectOk,
        Tlv::Error(2),
        Tlv::End,
    ];
    for _ in 0..ROUNDS {
        let mut input = Vec::new();
        for _ in 0..1 + rng.below(3) {
            let mut one = Vec::new();
            msgs[rng.below(msgs.len())].encode(&mut one);
            input.extend(rng.mutate(one));
        }
        if rng.below(8) == 0 {
            let n = rng.below(600);
            input = rng.bytes(n);
        }
        tunnel::tunnel_tlv(&input);
    }
}

#[test]
fn socks5_soak() {
    let mut rng = Rng::new(0x5eed_0002);
    for _ in 0..ROUNDS {
        let mut input = vec![5, 1, 0];
        let request: Vec<u8> = match rng.below(4) {
            0 => vec![5, 1, 0, 1, 10, 0, 0, 1, 0, 80],
            1 => [vec![5, 1, 0, 4], vec![0; 15], vec![1, 1, 187]].concat(),
            2 => {
                let n = rng.below(256);
                let name = rng.bytes(n);
                [vec![5, 1, 0, 3, name.len() as u8], name, vec![0, 80]].concat()
            }
            _ => {
                let n = rng.below(300);
                rng.bytes(n)
            }
        };
        input.extend(request);
        let input = rng.mutate(input);
        tunnel::socks5(&input);
    }
}

#[test]
fn http_proxy_soak() {
    let mut rng = Rng::new(0x5eed_0003);
    for _ in 0..ROUNDS {
        let input: Vec<u8> = match rng.below(4) {
            0 => b"CONNECT example.org:443 HTTP/1.1\r\nHost: example.org:443\r\n\r\n".to_vec(),
            1 => b"GET http://127.0.0.1:8080/a?b HTTP/1.1\r\nHost: x\r\nProxy-Connection: k\r\n\r\nbody".to_vec(),
            2 => b"POST http://[::1]/ HTTP/1.0\r\nContent-Length: 1\r\n\r\nx".to_vec(),
            _ => {
                let n = rng.below(600);
                rng.bytes(n)
            }
        };
        tunnel::http_proxy(&rng.mutate(input));
    }
}

#[test]
fn udp_soak() {
    let mut rng = Rng::new(0x5eed_0004);
    for _ in 0..ROUNDS {
        let input: Vec<u8> = match rng.below(4) {
            0 => vec![0, 0, 0, 1, 10, 0, 0, 1, 0, 53, 1, 2, 3],
            1 => [vec![0, 0, 0, 4], vec![0; 15], vec![1, 1, 187, 9]].concat(),
            2 => [vec![0, 0, 0, 3, 7], b"example".to_vec(), vec![0, 53]].concat(),
            _ => {
                let n = rng.below(300);
                rng.bytes(n)
            }
        };
        tunnel::udp(&rng.mutate(input));
    }
}
