//! The payload of every transfer: a deterministic pseudo-random byte stream per seed, so that the
//! receiver checks every byte (value and position) without the sender shipping a hash.
//!
//! Byte `i` of the stream with seed `s` is `TABLE[(i + s * STRIDE) % TABLE_LEN]` (the same scheme
//! as `tcpls perf`). Senders write slices of the table and receivers compare against it, so
//! neither side spends CPU generating data, even in a debug build.

use std::sync::OnceLock;

/// Not a power of two, so records and reads never align with the period.
const TABLE_LEN: usize = (1 << 20) + 4099;
const STRIDE: u64 = 104_729;

fn table() -> &'static [u8] {
    static TABLE: OnceLock<Vec<u8>> = OnceLock::new();
    TABLE.get_or_init(|| {
        let mut x: u64 = 0x243F_6A88_85A3_08D3;
        let mut v: Vec<u8> = (0..TABLE_LEN)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x >> 24) as u8
            })
            .collect();
        // Stored twice so that any window of TABLE_LEN bytes is one contiguous slice.
        v.extend_from_within(..);
        v
    })
}

/// The next at most `max` bytes of stream `seed` from `offset` (a borrow of the table).
pub fn chunk(seed: u64, offset: u64, max: usize) -> &'static [u8] {
    let start = (offset.wrapping_add(seed.wrapping_mul(STRIDE)) % TABLE_LEN as u64) as usize;
    &table()[start..start + max.min(TABLE_LEN)]
}

/// Checks a received stream piece by piece.
#[derive(Debug, Clone)]
pub struct Verifier {
    seed: u64,
    offset: u64,
    ok: bool,
}

impl Verifier {
    pub fn new(seed: u64) -> Verifier {
        Verifier { seed, offset: 0, ok: true }
    }

    /// Feeds the next received bytes.
    pub fn feed(&mut self, mut data: &[u8]) {
        while self.ok && !data.is_empty() {
            let expect = chunk(self.seed, self.offset, data.len());
            self.ok = data[..expect.len()] == *expect;
            self.offset += expect.len() as u64;
            data = &data[expect.len()..];
        }
    }

    /// Bytes fed so far.
    pub fn len(&self) -> u64 {
        self.offset
    }

    pub fn is_empty(&self) -> bool {
        self.offset == 0
    }

    /// Whether every byte fed so far matched, and exactly `expected` bytes were fed.
    pub fn verified(&self, expected: u64) -> bool {
        self.ok && self.offset == expected
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_of_any_size_verify_and_a_flipped_byte_does_not() {
        let seed = 3;
        let mut whole = Vec::new();
        while whole.len() < 3 * TABLE_LEN {
            let c = chunk(seed, whole.len() as u64, 77_777);
            whole.extend_from_slice(c);
        }
        let mut v = Verifier::new(seed);
        for piece in whole.chunks(65_537) {
            v.feed(piece);
        }
        assert!(v.verified(whole.len() as u64));
        whole[TABLE_LEN + 5] ^= 1;
        let mut v = Verifier::new(seed);
        v.feed(&whole);
        assert!(!v.verified(whole.len() as u64));
        // Another seed is another stream.
        let mut v = Verifier::new(seed + 1);
        v.feed(&whole[..100]);
        assert!(!v.verified(100));
    }
}
