//! The payload of `tcpls perf`, the benchmarks and the experiments: a deterministic
//! pseudo-random byte stream per seed, so that a receiver checks every byte (its value and its
//! position) without the sender shipping a hash.
//!
//! Byte `i` of the stream with seed `s` is `TABLE[(i + s * STRIDE) % TABLE_LEN]`. The table is
//! generated once; senders write slices of it and receivers compare against it, so neither side
//! spends CPU generating data, even in a debug build. The table length is not a power of two,
//! so records and reads never align with its period.

use std::sync::OnceLock;

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
        // Stored twice so any window of TABLE_LEN bytes is one contiguous slice.
        v.extend_from_within(..);
        v
    })
}

/// Position of the stream's pattern at byte `offset`.
fn start(seed: u64, offset: u64) -> usize {
    ((offset.wrapping_add(seed.wrapping_mul(STRIDE))) % TABLE_LEN as u64) as usize
}

/// The next at most `max` pattern bytes from `offset` (a borrow of the table, no copy).
pub fn chunk(seed: u64, offset: u64, max: usize) -> &'static [u8] {
    let s = start(seed, offset);
    let t = table();
    &t[s..s + max.min(TABLE_LEN)]
}

/// `len` pattern bytes from `offset` as an owned buffer (any length: the table repeats), for
/// tests that build a whole message and compare what came back.
pub fn to_vec(seed: u64, offset: u64, len: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    while out.len() < len {
        out.extend_from_slice(chunk(seed, offset + out.len() as u64, len - out.len()));
    }
    out
}

/// Whether `data` is the pattern at `offset`.
pub fn verify(seed: u64, offset: u64, data: &[u8]) -> bool {
    let mut done = 0;
    while done < data.len() {
        let expect = chunk(seed, offset + done as u64, data.len() - done);
        if data[done..done + expect.len()] != *expect {
            return false;
        }
        done += expect.len();
    }
    true
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
    fn chunks_verify_and_detect_errors() {
        let mut stream = Vec::new();
        while stream.len() < 3 * TABLE_LEN {
            stream.extend_from_slice(chunk(3, stream.len() as u64, 70_000));
        }
        assert!(verify(3, 0, &stream));
        assert!(verify(3, 12345, &stream[12345..200_000]));
        assert!(!verify(4, 0, &stream[..1000]), "another stream's pattern differs");
        assert!(!verify(3, 1, &stream[..1000]), "a shifted position differs");
        let mut bad = stream[..5000].to_vec();
        bad[4321] ^= 1;
        assert!(!verify(3, 0, &bad));
    }

    #[test]
    fn to_vec_is_the_stream() {
        let v = to_vec(5, 100, 3 * TABLE_LEN);
        assert_eq!(v.len(), 3 * TABLE_LEN);
        assert!(verify(5, 100, &v));
        assert_eq!(to_vec(5, 150, 10), v[50..60]);
    }

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
