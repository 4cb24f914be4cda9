//! Per-connection byte buffers, sized for large socket reads and writes.
//!
//! Both keep their storage initialised once (no zeroing per record) and move the live bytes to
//! the front only when the free tail gets too small, so the steady state of a bulk transfer does
//! no allocation and no copy besides the kernel's.

/// Bytes read from the socket, not yet processed: `buf[start..end]`.
#[derive(Debug, Default)]
pub struct RxBuf {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl RxBuf {
    /// Unprocessed bytes.
    pub fn data(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..self.end]
    }
    pub fn len(&self) -> usize {
        self.end - self.start
    }
    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }
    /// Bytes of storage held.
    pub fn capacity(&self) -> usize {
        self.buf.len()
    }
    /// Drops `n` processed bytes from the front.
    pub fn consume(&mut self, n: usize) {
        self.start = (self.start + n).min(self.end);
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }
    /// Free space of at least `min` bytes at the tail, for the socket to read into.
    pub fn spare(&mut self, min: usize) -> &mut [u8] {
        if self.buf.len() - self.end < min {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if self.buf.len() - self.end < min {
                self.buf.resize(self.end + min, 0);
            }
        }
        &mut self.buf[self.end..]
    }
    /// `n` bytes were written into the slice returned by [`RxBuf::spare`].
    pub fn commit(&mut self, n: usize) {
        self.end = (self.end + n).min(self.buf.len());
    }
    /// Copies bytes in (tests and callers without their own read buffer).
    pub fn extend(&mut self, data: &[u8]) {
        let spare = self.spare(data.len());
        spare[..data.len()].copy_from_slice(data);
        self.commit(data.len());
    }
    /// Releases memory of an idle connection.
    pub fn shrink(&mut self) {
        if self.releasable() > 0 {
            self.buf = Vec::new();
        }
    }
    /// Bytes [`RxBuf::shrink`] would free now.
    pub fn releasable(&self) -> usize {
        if self.is_empty() {
            self.buf.len()
        } else {
            0
        }
    }
}

/// Sealed bytes waiting for the socket: `buf[start..end]`.
#[derive(Debug, Default)]
pub struct TxBuf {
    buf: Vec<u8>,
    start: usize,
    end: usize,
}

impl TxBuf {
    /// Bytes to write to the socket.
    pub fn data(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }
    pub fn len(&self) -> usize {
        self.end - self.start
    }
    pub fn is_empty(&self) -> bool {
        self.start == self.end
    }
    /// The socket accepted `n` bytes.
    pub fn advance(&mut self, n: usize) {
        self.start = (self.start + n).min(self.end);
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }
    /// A writable region of exactly `len` bytes at the tail; call [`TxBuf::commit`] with how
    /// many of them were filled.
    pub fn reserve(&mut self, len: usize) -> &mut [u8] {
        if self.buf.len() - self.end < len {
            if self.start > 0 && self.start >= self.len() {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            if self.buf.len() - self.end < len {
                // Small to start (a handshake flight or a short record is written and the
                // buffer freed at once, `release_if_small`): zero-filling 4 KiB for each
                // 40-byte record was most of the cost of sending it. Doubling keeps a bulk
                // sender's reallocations few.
                let want = (self.end + len).max(self.buf.len() * 2).max(TX_MIN);
                self.buf.resize(want, 0);
            }
        }
        &mut self.buf[self.end..self.end + len]
    }
    pub fn commit(&mut self, n: usize) {
        self.end = (self.end + n).min(self.buf.len());
    }
    /// Appends bytes (handshake flights, small records).
    pub fn extend(&mut self, data: &[u8]) {
        self.reserve(data.len()).copy_from_slice(data);
        self.commit(data.len());
    }
    /// Releases memory of an idle connection.
    pub fn shrink(&mut self) {
        if self.releasable() > 0 {
            self.buf = Vec::new();
        }
    }
    /// Bytes [`TxBuf::shrink`] would free now.
    pub fn releasable(&self) -> usize {
        if self.is_empty() && self.buf.len() > 64 * 1024 {
            self.buf.len()
        } else {
            0
        }
    }
    /// Frees the storage once everything was written if it is small (at most 16 KiB): what
    /// handshake flights and occasional small records leave. A bulk sender's buffer is larger
    /// and kept ([`TxBuf::shrink`] frees it when the connection is quiet).
    pub fn release_if_small(&mut self) {
        if self.is_empty() && self.buf.len() <= TX_SMALL {
            self.buf = Vec::new();
        }
    }
}

/// The smallest storage a transmit buffer takes (see [`TxBuf::reserve`]).
const TX_MIN: usize = 512;

/// See [`TxBuf::release_if_small`].
const TX_SMALL: usize = 16 * 1024;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rx_compacts_and_keeps_partial_record() {
        let mut rx = RxBuf::default();
        rx.extend(b"abcdef");
        rx.consume(4);
        assert_eq!(rx.data(), b"ef");
        let s = rx.spare(100);
        assert!(s.len() >= 100);
        s[..3].copy_from_slice(b"ghi");
        rx.commit(3);
        assert_eq!(rx.data(), b"efghi");
        rx.consume(5);
        assert!(rx.is_empty());
    }

    #[test]
    fn tx_reserve_commit_advance() {
        let mut tx = TxBuf::default();
        tx.extend(b"hello");
        tx.reserve(3).copy_from_slice(b"xyz");
        tx.commit(2);
        assert_eq!(tx.data(), b"helloxy");
        tx.advance(5);
        assert_eq!(tx.data(), b"xy");
        tx.advance(10);
        assert!(tx.is_empty());
    }
}
