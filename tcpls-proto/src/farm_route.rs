//! Join routing for a server farm behind a load balancer that sees only what is in the clear
//! (docs/TUNNEL.md, "Farm", mode b; the analysis in docs/SECURITY.md).
//!
//! A node mints each join token as `label (16) || secret (16)`, where
//! `label = nonce (8 random bytes) || HMAC-SHA256(route key, "tcpls farm route" || nonce || node)[..8]`.
//! A client configured with a farm domain sends each join's TLS server name as
//! `<hex(label)>.<domain>`; the balancer (tools/haproxy/tcpls-farm.lua, with haproxy's own HMAC)
//! finds the node whose MAC matches and routes the join there. The label is fresh for every
//! token and pseudorandom without the key, so a passive observer cannot link joins to a node
//! or to each other; the token's other 16 bytes stay secret (they travel in the encrypted Join
//! frame only) and are what authenticates the join.

use aws_lc_rs::hmac;
use rustls::pki_types::ServerName;

use crate::config::{system_random, JoinServerName, RandomSource};

const CONTEXT: &[u8] = b"tcpls farm route";
/// Bytes of a route label at the start of a token.
pub const LABEL_LEN: usize = 16;
const NONCE_LEN: usize = 8;
const TOKEN_LEN: usize = 32;

/// The farm's route key, shared by the nodes and the balancer (not the ticket keys: the
/// balancer must not be able to decrypt session tickets).
#[derive(Clone)]
pub struct RouteKey(hmac::Key);

impl std::fmt::Debug for RouteKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RouteKey(..)")
    }
}

impl RouteKey {
    /// A key file's text: one line of 64 hex digits (`openssl rand -hex 32`).
    pub fn parse(text: &str) -> Result<Self, String> {
        let line = text.trim();
        let ok = line.len() == 64 && line.bytes().all(|b| b.is_ascii_hexdigit());
        if !ok {
            return Err("a route key is one line of 64 hex digits (make one with `openssl rand -hex 32`)".into());
        }
        let raw: Vec<u8> = (0..64).step_by(2).filter_map(|i| u8::from_str_radix(&line[i..i + 2], 16).ok()).collect();
        Ok(Self(hmac::Key::new(hmac::HMAC_SHA256, &raw)))
    }

    fn mac(&self, nonce: &[u8], node: u8) -> [u8; LABEL_LEN - NONCE_LEN] {
        let mut ctx = hmac::Context::with_key(&self.0);
        ctx.update(CONTEXT);
        ctx.update(nonce);
        ctx.update(&[node]);
        let tag = ctx.sign();
        let mut out = [0u8; LABEL_LEN - NONCE_LEN];
        out.copy_from_slice(&tag.as_ref()[..LABEL_LEN - NONCE_LEN]);
        out
    }

    /// A fresh label naming `node`.
    pub fn label(&self, node: u8, random: &dyn Fn(&mut [u8])) -> [u8; LABEL_LEN] {
        let mut label = [0u8; LABEL_LEN];
        random(&mut label[..NONCE_LEN]);
        let mac = self.mac(&label[..NONCE_LEN], node);
        label[NONCE_LEN..].copy_from_slice(&mac);
        label
    }

    /// The node among `1..=nodes` that `label` names, if any (what the balancer computes).
    pub fn node_of(&self, label: &[u8], nodes: u8) -> Option<u8> {
        if label.len() != LABEL_LEN {
            return None;
        }
        let (nonce, mac) = label.split_at(NONCE_LEN);
        (1..=nodes).find(|n| {
            let expected = self.mac(nonce, *n);
            // Not secret-dependent timing worth hiding: the balancer tries every node anyway.
            expected.as_slice() == mac
        })
    }
}

/// Server, node `node` of a farm: the session's token source (`SessionConfig::random`, which
/// the session uses for tokens only) makes tokens that start with a label naming this node.
pub fn token_source(key: RouteKey, node: u8) -> RandomSource {
    let system = system_random();
    std::sync::Arc::new(move |buf: &mut [u8]| {
        system(buf);
        if buf.len() == TOKEN_LEN {
            let label = key.label(node, system.as_ref());
            buf[..LABEL_LEN].copy_from_slice(&label);
        }
    })
}

/// Client of a farm: each join's server name is `<hex(label)>.<domain>`, the label being the
/// first bytes of the token it spends (under a wildcard certificate for `*.<domain>`).
pub fn join_server_name(domain: &str) -> Result<JoinServerName, String> {
    let domain = domain.trim_matches('.').to_ascii_lowercase();
    let probe = format!("{}.{domain}", "0".repeat(2 * LABEL_LEN));
    ServerName::try_from(probe).map_err(|e| format!("'{domain}' is not a domain name: {e}"))?;
    Ok(std::sync::Arc::new(move |token: &[u8; 32]| {
        let hex: String = token[..LABEL_LEN].iter().map(|b| format!("{b:02x}")).collect();
        ServerName::try_from(format!("{hex}.{domain}")).ok()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

    #[test]
    fn tokens_name_their_node_and_only_with_the_key() {
        let key = RouteKey::parse(KEY).unwrap();
        let other = RouteKey::parse(&"ab".repeat(32)).unwrap();
        for node in 1..=5u8 {
            let source = token_source(key.clone(), node);
            let mut token = [0u8; 32];
            source(&mut token);
            assert_eq!(key.node_of(&token[..LABEL_LEN], 5), Some(node));
            assert_eq!(other.node_of(&token[..LABEL_LEN], 5), None);
            let mut again = [0u8; 32];
            source(&mut again);
            assert_ne!(token[..LABEL_LEN], again[..LABEL_LEN], "a fresh label per token");
            assert_ne!(token[LABEL_LEN..], again[LABEL_LEN..]);
        }
        assert_eq!(key.node_of(&[0u8; 15], 5), None);
    }

    #[test]
    fn the_join_server_name_carries_the_label() {
        let f = join_server_name("Farm.Example.").unwrap();
        let mut token = [7u8; 32];
        token[0] = 0xab;
        let name = f(&token).unwrap();
        assert_eq!(name.to_str(), format!("ab{}.farm.example", "07".repeat(15)));
        assert!(join_server_name("not a domain").is_err());
        assert!(RouteKey::parse("12").is_err());
    }
}
