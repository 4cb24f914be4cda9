//! The stream map's hasher: keyed per session, cheap for `u32` stream IDs.

use std::hash::{BuildHasher, Hasher, RandomState};

/// Hashes the stream map's keys (stream IDs, `u32`): two folded 64x64->128-bit multiplies with
/// keys drawn per session from std's `RandomState` (one alone left some key draws with all of
/// 64 sequential IDs in 2 of 64 buckets: ~2% of sessions, ~7% for IDs differing in high bits). The map is looked up a dozen times per
/// record sealed or acknowledged, and SipHash (std's default) was 3% of a 64-stream sender's
/// CPU. HashDoS: the peer chooses its stream IDs (in order, at most `max_concurrent_streams`
/// open), but without the session's random keys it cannot tell which ones collide; the
/// multiply folds every bit of the ID into the low (bucket) and high (tag) bits alike.
#[derive(Clone, Copy, Debug)]
pub(in crate::session) struct StreamIdHash {
    k0: u64,
    k1: u64,
    k2: u64,
    k3: u64,
}

impl StreamIdHash {
    pub(in crate::session) fn new() -> Self {
        let random = RandomState::new();
        // An odd multiplier: the product is then a bijection of the ID.
        Self {
            k0: random.hash_one(0x7463_706c_u64),
            k1: random.hash_one(0x7374_7265_u64) | 1,
            k2: random.hash_one(0x616d_6964_u64),
            k3: random.hash_one(0x6861_7368_u64) | 1,
        }
    }
}

impl BuildHasher for StreamIdHash {
    type Hasher = StreamIdHasher;
    fn build_hasher(&self) -> StreamIdHasher {
        StreamIdHasher { k: *self, h: 0 }
    }
}

pub(in crate::session) struct StreamIdHasher {
    k: StreamIdHash,
    h: u64,
}

impl Hasher for StreamIdHasher {
    fn write(&mut self, bytes: &[u8]) {
        // Not used by `u32` keys; any other input still mixes every byte in.
        for b in bytes {
            self.write_u64(u64::from(*b));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        let fold = |a: u64, b: u64| {
            let x = u128::from(a) * u128::from(b);
            (x as u64) ^ ((x >> 64) as u64)
        };
        self.h = fold(fold(self.h ^ n ^ self.k.k0, self.k.k1) ^ self.k.k2, self.k.k3);
    }

    fn finish(&self) -> u64 {
        self.h
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::event::StreamId;

    #[test]
    fn stream_id_hash_is_keyed_per_session_and_spreads_ids() {
        // Many sessions (key draws): the spread must hold for every one, not on average.
        for _ in 0..500 {
            let (a, b) = (StreamIdHash::new(), StreamIdHash::new());
            for ids in [(0..64).map(|i| i << 20).collect::<Vec<u32>>(), (0..64).map(|i| i * 4).collect()] {
                spreads(a, b, &ids);
            }
        }
    }

    fn spreads(a: StreamIdHash, b: StreamIdHash, ids: &[u32]) {
        // Two sessions hash the same IDs differently (random keys).
        assert!(ids.iter().any(|id| a.hash_one(id) != b.hash_one(id)));
        // Sequential IDs, and IDs that differ only in their high bits, land in different buckets
        // of a small table: the multiplies bring every bit into the low ones (about 40 of 64 buckets
        // are used for random hashes; 20 is 6 standard deviations below).
        let buckets: std::collections::HashSet<u64> = ids.iter().map(|id| a.hash_one(id) & 63).collect();
        assert!(buckets.len() > 20, "{} buckets of 64 for 64 IDs", buckets.len());
        let mut map: HashMap<StreamId, u32, StreamIdHash> = HashMap::with_hasher(a);
        for id in ids {
            map.insert(*id, id.wrapping_mul(3));
        }
        assert!(ids.iter().all(|id| map.get(id) == Some(&id.wrapping_mul(3))));
    }
}
