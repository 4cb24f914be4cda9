//! Test payloads: the `tcpls-pattern` stream as owned buffers, for tests that write a whole
//! message and compare what came back. One generator for the workspace, so a test's data is
//! the same as `tcpls perf`'s and checkable piece by piece with [`crate::pattern::verify`].

/// `len` bytes of the pattern stream `seed` from its start: what a sender of `len` bytes
/// writes. Different seeds give different streams. (Length first, as the copies it replaced
/// had it.)
pub fn payload(len: usize, seed: u64) -> Vec<u8> {
    tcpls_pattern::to_vec(seed, 0, len)
}

/// `len` bytes of the pattern stream `seed` from byte `offset` on (the continuation of
/// [`payload`]).
pub fn payload_at(len: usize, seed: u64, offset: u64) -> Vec<u8> {
    tcpls_pattern::to_vec(seed, offset, len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_are_the_pattern_and_differ_by_seed() {
        let a = payload(3 << 20, 1);
        assert_eq!(a.len(), 3 << 20);
        assert!(tcpls_pattern::verify(1, 0, &a));
        assert_eq!(payload_at(1000, 1, 12345), a[12345..13345]);
        assert_ne!(payload(1000, 2), a[..1000]);
        assert!(payload(0, 1).is_empty());
    }
}
