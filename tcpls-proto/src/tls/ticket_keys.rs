//! Session tickets that every server of a farm can decrypt (RESUMPTION.md, "Farm tickets").
//!
//! The servers share a key file: the current key first, then the previous ones. A ticket is
//! `key id (8) || nonce (12) || AES-256-GCM(issue time (8) || rustls' session state)`, the key
//! id being the AEAD's additional data, so a ticket issued under a key that has since become a
//! previous one still decrypts, and one whose key left the file is refused (a full handshake,
//! never an error). Tickets carry the state, so any node resumes them.
//!
//! rustls never accepts early data with such (stateless) tickets: a ticket that any node can
//! decrypt any number of times could replay 0-RTT data (RFC 8446 §8.1). So a farm resumes in
//! one round trip on any node and never accepts early data anywhere, which also rules out a
//! replay being accepted twice across nodes.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use aws_lc_rs::digest;
use aws_lc_rs::rand::{SecureRandom, SystemRandom};
use rustls::server::ProducesTickets;

use crate::sync::RwLockExt;

/// Bytes of a key in the file (hex: twice as many characters).
pub const TICKET_KEY_LEN: usize = 32;
/// Keys a file may hold (the current one and the previous ones still honoured).
pub const MAX_TICKET_KEYS: usize = 16;
const KEY_ID_LEN: usize = 8;
const TIME_LEN: usize = 8;
/// Tickets larger than this are not ours (rustls' session state is a few hundred bytes).
const MAX_TICKET_LEN: usize = 16 * 1024;

/// One key: its id (derived from the key, so every node computes the same) and the AEAD key.
struct TicketKey {
    id: [u8; KEY_ID_LEN],
    aead: LessSafeKey,
}

/// The keys of a key file, current first.
pub struct TicketKeys {
    keys: Vec<TicketKey>,
}

impl std::fmt::Debug for TicketKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Key ids only: never the keys.
        let ids: Vec<String> = self.keys.iter().map(|k| hex(&k.id)).collect();
        f.debug_struct("TicketKeys").field("ids", &ids).finish()
    }
}

impl TicketKeys {
    /// Parses a key file: one key per line as 64 hex digits (`openssl rand -hex 32`), the
    /// current key first; blank lines and lines starting with `#` are ignored.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut keys: Vec<TicketKey> = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let raw = unhex(line).ok_or_else(|| {
                format!(
                    "line {}: not a key: expected {} hex digits (make one with `openssl rand -hex {TICKET_KEY_LEN}`)",
                    n + 1,
                    2 * TICKET_KEY_LEN
                )
            })?;
            if raw.len() != TICKET_KEY_LEN {
                return Err(format!(
                    "line {}: a key is {} hex digits, this one has {} (make one with `openssl rand -hex {TICKET_KEY_LEN}`)",
                    n + 1,
                    2 * TICKET_KEY_LEN,
                    line.len()
                ));
            }
            let key = TicketKey::new(&raw)?;
            if keys.iter().any(|k| k.id == key.id) {
                return Err(format!("line {}: the same key appears twice", n + 1));
            }
            if keys.len() == MAX_TICKET_KEYS {
                return Err(format!("more than {MAX_TICKET_KEYS} keys: drop the oldest (last) ones"));
            }
            keys.push(key);
        }
        if keys.is_empty() {
            return Err(format!(
                "no key: the file needs at least one line of {} hex digits (`openssl rand -hex {TICKET_KEY_LEN}`)",
                2 * TICKET_KEY_LEN
            ));
        }
        Ok(Self { keys })
    }

    /// Keys in the file.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The current key's id, in hex (for logs: it names the key without revealing it).
    pub fn current_id(&self) -> String {
        self.keys.first().map(|k| hex(&k.id)).unwrap_or_default()
    }
}

impl TicketKey {
    fn new(raw: &[u8]) -> Result<Self, String> {
        let mut ctx = digest::Context::new(&digest::SHA256);
        ctx.update(b"tcpls ticket key id\0");
        ctx.update(raw);
        let hash = ctx.finish();
        let mut id = [0u8; KEY_ID_LEN];
        id.copy_from_slice(&hash.as_ref()[..KEY_ID_LEN]);
        let unbound = UnboundKey::new(&AES_256_GCM, raw).map_err(|_| "the AEAD refused the key".to_string())?;
        Ok(Self { id, aead: LessSafeKey::new(unbound) })
    }
}

/// Counters of a [`FarmTicketer`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FarmTicketStats {
    /// Tickets issued (under the current key).
    pub issued: u64,
    /// Tickets decrypted for a resumption (under any key of the file).
    pub resumed: u64,
    /// Tickets decrypted under a previous key.
    pub resumed_previous_key: u64,
    /// Tickets refused: unknown key, forged or corrupted, or expired (a full handshake followed).
    pub refused: u64,
}

/// rustls' ticket producer for a farm: the shared keys, replaceable while running (SIGHUP).
pub struct FarmTicketer {
    keys: RwLock<Arc<TicketKeys>>,
    lifetime: Duration,
    /// 1 for the keys given at start, plus one per replacement.
    generation: AtomicU64,
    issued: AtomicU64,
    resumed: AtomicU64,
    resumed_previous_key: AtomicU64,
    refused: AtomicU64,
    rng: SystemRandom,
}

impl std::fmt::Debug for FarmTicketer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FarmTicketer")
            .field("keys", &*self.keys.read_unpoisoned())
            .field("generation", &self.generation())
            .finish()
    }
}

impl FarmTicketer {
    /// Tickets valid for `lifetime` (at most 7 days, RFC 8446 §4.6.1).
    pub fn new(keys: TicketKeys, lifetime: Duration) -> Self {
        Self {
            keys: RwLock::new(Arc::new(keys)),
            lifetime: lifetime.min(Duration::from_secs(7 * 86_400)),
            generation: AtomicU64::new(1),
            issued: AtomicU64::new(0),
            resumed: AtomicU64::new(0),
            resumed_previous_key: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            rng: SystemRandom::new(),
        }
    }

    /// Replaces the keys (a reloaded file): new tickets use its first key, tickets under any of
    /// its keys still resume, tickets under keys no longer in it get full handshakes.
    pub fn replace(&self, keys: TicketKeys) {
        *self.keys.write_unpoisoned() = Arc::new(keys);
        self.generation.fetch_add(1, Ordering::Relaxed);
    }

    /// How many key sets this ticketer has used (1 at start, +1 per [`FarmTicketer::replace`]).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }

    /// The current keys.
    pub fn keys(&self) -> Arc<TicketKeys> {
        self.keys.read_unpoisoned().clone()
    }

    pub fn stats(&self) -> FarmTicketStats {
        FarmTicketStats {
            issued: self.issued.load(Ordering::Relaxed),
            resumed: self.resumed.load(Ordering::Relaxed),
            resumed_previous_key: self.resumed_previous_key.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
        }
    }

    fn refuse(&self) -> Option<Vec<u8>> {
        self.refused.fetch_add(1, Ordering::Relaxed);
        None
    }
}

fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

impl ProducesTickets for FarmTicketer {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        u32::try_from(self.lifetime.as_secs()).unwrap_or(u32::MAX)
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let keys = self.keys();
        let key = keys.keys.first()?;
        let mut nonce = [0u8; NONCE_LEN];
        self.rng.fill(&mut nonce).ok()?;
        let mut sealed = Vec::with_capacity(TIME_LEN + plain.len() + AES_256_GCM.tag_len());
        sealed.extend_from_slice(&unix_now().to_be_bytes());
        sealed.extend_from_slice(plain);
        key.aead.seal_in_place_append_tag(Nonce::assume_unique_for_key(nonce), Aad::from(key.id), &mut sealed).ok()?;
        let mut ticket = Vec::with_capacity(KEY_ID_LEN + NONCE_LEN + sealed.len());
        ticket.extend_from_slice(&key.id);
        ticket.extend_from_slice(&nonce);
        ticket.extend_from_slice(&sealed);
        self.issued.fetch_add(1, Ordering::Relaxed);
        Some(ticket)
    }

    fn decrypt(&self, ticket: &[u8]) -> Option<Vec<u8>> {
        if ticket.len() > MAX_TICKET_LEN || ticket.len() < KEY_ID_LEN + NONCE_LEN + TIME_LEN {
            return self.refuse();
        }
        let (id, rest) = ticket.split_at(KEY_ID_LEN);
        let (nonce, sealed) = rest.split_at(NONCE_LEN);
        let keys = self.keys();
        let Some(index) = keys.keys.iter().position(|k| k.id == id) else { return self.refuse() };
        let key = &keys.keys[index];
        let Ok(nonce) = Nonce::try_assume_unique_for_key(nonce) else { return self.refuse() };
        let mut buf = sealed.to_vec();
        let Ok(plain) = key.aead.open_in_place(nonce, Aad::from(key.id), &mut buf) else { return self.refuse() };
        let Some((time, state)) = plain.split_first_chunk::<TIME_LEN>() else { return self.refuse() };
        let age = unix_now().saturating_sub(u64::from_be_bytes(*time));
        if age >= self.lifetime.as_secs() {
            return self.refuse();
        }
        let state = state.to_vec();
        self.resumed.fetch_add(1, Ordering::Relaxed);
        if index > 0 {
            self.resumed_previous_key.fetch_add(1, Ordering::Relaxed);
        }
        Some(state)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 || !s.is_ascii() {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const K1: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";
    const K2: &str = "f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff000102030405060708090a0b0c0d0e0f";

    fn ticketer(text: &str) -> FarmTicketer {
        FarmTicketer::new(TicketKeys::parse(text).unwrap(), Duration::from_secs(3600))
    }

    #[test]
    fn a_ticket_decrypts_on_another_node_with_the_same_file() {
        let (a, b) = (ticketer(K1), ticketer(K1));
        let ticket = a.encrypt(b"session state").unwrap();
        assert_eq!(b.decrypt(&ticket).as_deref(), Some(&b"session state"[..]));
        assert_eq!(b.stats().resumed, 1);
    }

    #[test]
    fn previous_keys_decrypt_and_removed_ones_do_not() {
        let old = ticketer(K1);
        let ticket = old.encrypt(b"state").unwrap();
        let rotated = ticketer(&format!("{K2}\n{K1}\n"));
        assert_eq!(rotated.decrypt(&ticket).as_deref(), Some(&b"state"[..]));
        assert_eq!(rotated.stats().resumed_previous_key, 1);
        rotated.replace(TicketKeys::parse(K2).unwrap());
        assert_eq!(rotated.generation(), 2);
        assert_eq!(rotated.decrypt(&ticket), None);
        assert_eq!(rotated.stats().refused, 1);
    }

    #[test]
    fn tampered_truncated_and_foreign_tickets_are_refused() {
        let t = ticketer(K1);
        let ticket = t.encrypt(b"state").unwrap();
        for i in [0, KEY_ID_LEN, KEY_ID_LEN + NONCE_LEN, ticket.len() - 1] {
            let mut bad = ticket.clone();
            bad[i] ^= 1;
            assert_eq!(t.decrypt(&bad), None, "bit flip at {i}");
        }
        for len in 0..ticket.len() {
            assert_eq!(t.decrypt(&ticket[..len]), None, "truncated to {len}");
        }
        assert_eq!(ticketer(K2).decrypt(&ticket), None);
        assert_eq!(t.decrypt(&vec![0u8; MAX_TICKET_LEN + 1]), None);
    }

    #[test]
    fn expired_tickets_are_refused() {
        let t = FarmTicketer::new(TicketKeys::parse(K1).unwrap(), Duration::ZERO);
        let ticket = t.encrypt(b"state").unwrap();
        assert_eq!(t.decrypt(&ticket), None);
    }

    #[test]
    fn bad_files_say_what_is_wrong() {
        let cases = [
            ("", "no key"),
            ("# only a comment\n", "no key"),
            ("zz", "not a key"),
            ("0011", "64 hex digits"),
            (&format!("{K1}\n{K1}"), "twice"),
        ];
        for (text, expected) in cases {
            let e = TicketKeys::parse(text).unwrap_err();
            assert!(e.contains(expected), "{text:?}: {e}");
        }
        let many: String = (0..=MAX_TICKET_KEYS).map(|i| format!("{:064x}\n", i + 1)).collect();
        assert!(TicketKeys::parse(&many).unwrap_err().contains("more than"));
        let ok = TicketKeys::parse(&format!("# current\n{K2}\n\n{K1}\n")).unwrap();
        assert_eq!(ok.len(), 2);
        assert!(!format!("{ok:?}").contains(K2), "Debug must not print keys");
    }
}
