//! A small deterministic pseudo-random generator for tests that explore many cases from a
//! seed (soaks, randomized lifecycles): xorshift64*, no dependencies, the same sequence on
//! every machine, so a failing seed can be run again alone.

/// xorshift64*. Not for anything but tests.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed` (any value; nearby seeds give unrelated sequences).
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (near enough), `n > 0`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n.max(1) as u64) as usize
    }

    /// True once in `one_in` on average.
    pub fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::Rng;

    #[test]
    fn a_seed_gives_the_same_sequence_and_seeds_differ() {
        let (mut a, mut b, mut c) = (Rng::new(7), Rng::new(7), Rng::new(8));
        let (x, y, z): (Vec<u64>, Vec<u64>, Vec<u64>) = (0..16).fold((vec![], vec![], vec![]), |mut v, _| {
            v.0.push(a.next_u64());
            v.1.push(b.next_u64());
            v.2.push(c.next_u64());
            v
        });
        assert_eq!(x, y);
        assert_ne!(x, z);
        let mut r = Rng::new(1);
        let hits = (0..10_000).filter(|_| r.chance(4)).count();
        assert!((2_000..3_000).contains(&hits), "one in four: {hits} of 10 000");
        assert!((0..1000).all(|_| r.below(10) < 10));
    }
}
