//! Byte-level helpers shared by the wire codecs.
//!
//! TCPLS frames end with their type byte and are parsed from the end of the record plaintext
//! towards its start (PROTOCOL.md §2), so the decoder is a cursor that consumes bytes from the
//! *tail* of a slice. Every read is checked and returns [`Truncated`] instead of panicking: the
//! input is attacker-controlled plaintext and a missing bounds check must not become a crash.

use std::fmt;

/// A read ran past the start of the input.
///
/// Carries no position: callers attach their own context (which frame, which field), and a
/// zero-sized error keeps the hot decode path free of bookkeeping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Truncated;

impl fmt::Display for Truncated {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("input truncated")
    }
}

impl std::error::Error for Truncated {}

/// Reads big-endian fields right to left from the end of a borrowed slice.
///
/// Values are borrowed from the input, never copied, so a decoded frame can point straight into the
/// decrypted record. A failed read leaves the cursor where it was, which keeps error reporting
/// simple (nothing was half-consumed).
#[derive(Debug, Clone, Copy)]
pub struct TailReader<'a> {
    /// The bytes not read yet; reads take from its end.
    unread: &'a [u8],
}

impl<'a> TailReader<'a> {
    /// Starts with the cursor at the end of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Self { unread: buf }
    }

    /// Number of unread bytes at the front, which is also the cursor's position in the input.
    pub fn remaining(&self) -> usize {
        self.unread.len()
    }

    #[cfg(test)]
    /// True once every byte has been read.
    pub fn is_empty(&self) -> bool {
        self.unread.is_empty()
    }

    #[cfg(test)]
    /// The unread front part of the input.
    pub fn unread(&self) -> &'a [u8] {
        self.unread
    }

    /// Takes the last `N` bytes as a fixed-size array, so fixed-width fields need no length check
    /// at the call site.
    pub fn array<const N: usize>(&mut self) -> Result<&'a [u8; N], Truncated> {
        let (rest, tail) = self.unread.split_last_chunk::<N>().ok_or(Truncated)?;
        self.unread = rest;
        Ok(tail)
    }

    /// Takes the last `n` bytes, in their original (left to right) order.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], Truncated> {
        let at = self.unread.len().checked_sub(n).ok_or(Truncated)?;
        let (rest, tail) = self.unread.split_at_checked(at).ok_or(Truncated)?;
        self.unread = rest;
        Ok(tail)
    }

    /// Reads one byte.
    pub fn u8(&mut self) -> Result<u8, Truncated> {
        self.array::<1>().map(|b| u8::from_be_bytes(*b))
    }

    /// Reads a big-endian `u16` whose last byte is the current last unread byte.
    pub fn u16(&mut self) -> Result<u16, Truncated> {
        self.array().map(|b| u16::from_be_bytes(*b))
    }

    /// Reads a big-endian `u32` whose last byte is the current last unread byte.
    pub fn u32(&mut self) -> Result<u32, Truncated> {
        self.array().map(|b| u32::from_be_bytes(*b))
    }

    /// Reads a big-endian `u64` whose last byte is the current last unread byte.
    pub fn u64(&mut self) -> Result<u64, Truncated> {
        self.array().map(|b| u64::from_be_bytes(*b))
    }
}

/// Appends one byte; exists so encoders read uniformly field by field.
pub fn put_u8(out: &mut Vec<u8>, v: u8) {
    out.push(v);
}

/// Appends a big-endian `u16`.
pub fn put_u16(out: &mut Vec<u8>, v: u16) {
    out.extend_from_slice(&v.to_be_bytes());
}

/// Appends a big-endian `u32`.
pub fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_be_bytes());
}

/// Appends a big-endian `u64`.
pub fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_right_to_left() {
        let buf = [0xaa, 0x01, 0x02, 0x03, 0x04, 0x05, 0x06, 0x07];
        let mut r = TailReader::new(&buf);
        assert_eq!(r.u8(), Ok(0x07));
        assert_eq!(r.u16(), Ok(0x0506));
        assert_eq!(r.u32(), Ok(0x0102_0304));
        assert_eq!(r.remaining(), 1);
        assert_eq!(r.unread(), &[0xaa]);
        assert_eq!(r.bytes(1), Ok(&[0xaa][..]));
        assert!(r.is_empty());
        assert_eq!(r.u8(), Err(Truncated));
        assert_eq!(r.bytes(0), Ok(&[][..]));
    }

    #[test]
    fn failed_read_does_not_move_the_cursor() {
        let buf = [1, 2, 3];
        let mut r = TailReader::new(&buf);
        assert_eq!(r.u32(), Err(Truncated));
        assert_eq!(r.u64(), Err(Truncated));
        assert_eq!(r.bytes(4), Err(Truncated));
        assert_eq!(r.bytes(usize::MAX), Err(Truncated));
        assert_eq!(r.remaining(), 3);
        assert_eq!(r.u16(), Ok(0x0203));
        assert_eq!(r.u64(), Err(Truncated));
        assert_eq!(r.u8(), Ok(1));
    }

    #[test]
    fn writers_are_big_endian() {
        let mut out = Vec::new();
        put_u8(&mut out, 0x01);
        put_u16(&mut out, 0x0203);
        put_u32(&mut out, 0x0405_0607);
        put_u64(&mut out, 0x0809_0a0b_0c0d_0e0f);
        assert_eq!(out, (1..=15).collect::<Vec<u8>>());
        let mut r = TailReader::new(&out);
        assert_eq!(r.u64(), Ok(0x0809_0a0b_0c0d_0e0f));
        assert_eq!(r.u32(), Ok(0x0405_0607));
        assert_eq!(r.u16(), Ok(0x0203));
        assert_eq!(r.u8(), Ok(0x01));
    }
}
