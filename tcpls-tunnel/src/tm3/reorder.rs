//! Per-connection, per-direction reorder buffer.
//!
//! Messages of one connection and direction carry sequence numbers 0, 1, 2, ... (SYN and FIN
//! consume one each). They may arrive out of order across pipes; this buffer holds the early
//! ones and releases messages strictly in sequence order.
//!
//! Bounds (a peer cannot make it grow without limit): a message is accepted only if its sequence
//! number is less than `window` messages ahead of the next expected one, and the buffered
//! out-of-order messages may not cost more than `max_bytes` (each message costs its size plus
//! [`ENTRY_OVERHEAD`]). Any violation is returned as an error; the caller resets the connection.
//! Sequence numbers compare modulo 2^32.

use std::collections::HashMap;
use std::fmt;

/// Accounting cost of one buffered entry on top of its payload size.
pub const ENTRY_OVERHEAD: usize = 64;

/// Why a message was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReorderError {
    /// Sequence number already delivered (duplicate or replay).
    Stale { seq: u32, expected: u32 },
    /// Sequence number too far ahead of the expected one.
    TooFarAhead { seq: u32, expected: u32, window: u32 },
    /// Sequence number already buffered.
    Duplicate { seq: u32 },
    /// A message after the connection's FIN, or a FIN before an already received message.
    AfterFin { seq: u32, fin_seq: u32 },
    /// Buffered out-of-order bytes would exceed the bound.
    Overflow { bytes: usize, max: usize },
}

impl fmt::Display for ReorderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReorderError::Stale { seq, expected } => {
                write!(f, "sequence number {seq} already delivered (expecting {expected})")
            }
            ReorderError::TooFarAhead { seq, expected, window } => {
                write!(f, "sequence number {seq} is {window} or more messages ahead of expected {expected}")
            }
            ReorderError::Duplicate { seq } => write!(f, "duplicate sequence number {seq}"),
            ReorderError::AfterFin { seq, fin_seq } => {
                write!(f, "message with sequence number {seq} conflicts with FIN at {fin_seq}")
            }
            ReorderError::Overflow { bytes, max } => {
                write!(f, "reorder buffer would hold {bytes} bytes (bound {max})")
            }
        }
    }
}

impl std::error::Error for ReorderError {}

/// The reorder buffer.
#[derive(Debug)]
pub struct Reorder<T> {
    expected: u32,
    pending: HashMap<u32, (T, usize)>,
    pending_bytes: usize,
    fin_seq: Option<u32>,
    window: u32,
    max_bytes: usize,
}

impl<T> Reorder<T> {
    /// A buffer expecting `first` next.
    pub fn new(first: u32, window: u32, max_bytes: usize) -> Self {
        Reorder { expected: first, pending: HashMap::new(), pending_bytes: 0, fin_seq: None, window, max_bytes }
    }

    /// Next sequence number to be delivered.
    pub fn expected(&self) -> u32 {
        self.expected
    }

    /// Bytes (with overhead) of buffered out-of-order messages.
    pub fn pending_bytes(&self) -> usize {
        self.pending_bytes
    }

    /// Number of buffered out-of-order messages.
    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// Drops all buffered messages; returns the bytes freed.
    pub fn clear(&mut self) -> usize {
        self.pending.clear();
        std::mem::take(&mut self.pending_bytes)
    }

    /// Inserts message `seq` of `size` bytes; `terminal` marks the FIN (last message). Messages
    /// that became deliverable are appended to `out` in order.
    pub fn insert(
        &mut self,
        seq: u32,
        item: T,
        size: usize,
        terminal: bool,
        out: &mut Vec<T>,
    ) -> Result<(), ReorderError> {
        let expected = self.expected;
        let off = seq.wrapping_sub(expected);
        if off >= self.window {
            return Err(if off > u32::MAX / 2 {
                ReorderError::Stale { seq, expected }
            } else {
                ReorderError::TooFarAhead { seq, expected, window: self.window }
            });
        }
        if let Some(fin_seq) = self.fin_seq {
            let fin_off = fin_seq.wrapping_sub(expected);
            // fin_off >= window: the FIN was already delivered.
            if terminal || fin_off >= self.window || off >= fin_off {
                return Err(ReorderError::AfterFin { seq, fin_seq });
            }
        } else if terminal {
            if let Some(&max) = self.pending.keys().max_by_key(|k| k.wrapping_sub(expected)) {
                if max.wrapping_sub(expected) > off {
                    return Err(ReorderError::AfterFin { seq: max, fin_seq: seq });
                }
            }
        }
        if off == 0 {
            out.push(item);
            self.expected = self.expected.wrapping_add(1);
            while let Some((it, cost)) = self.pending.remove(&self.expected) {
                self.pending_bytes -= cost;
                out.push(it);
                self.expected = self.expected.wrapping_add(1);
            }
        } else {
            if self.pending.contains_key(&seq) {
                return Err(ReorderError::Duplicate { seq });
            }
            let cost = size + ENTRY_OVERHEAD;
            if self.pending_bytes + cost > self.max_bytes {
                return Err(ReorderError::Overflow { bytes: self.pending_bytes + cost, max: self.max_bytes });
            }
            self.pending_bytes += cost;
            self.pending.insert(seq, (item, cost));
        }
        if terminal {
            self.fin_seq = Some(seq);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_and_reverse() {
        let mut r = Reorder::new(0, 100, 1 << 20);
        let mut out = Vec::new();
        r.insert(0, 'a', 1, false, &mut out).unwrap();
        assert_eq!(out, vec!['a']);
        out.clear();
        for (s, c) in [(4, 'e'), (3, 'd'), (2, 'c')] {
            r.insert(s, c, 1, s == 4, &mut out).unwrap();
            assert!(out.is_empty());
        }
        assert_eq!(r.pending_len(), 3);
        r.insert(1, 'b', 1, false, &mut out).unwrap();
        assert_eq!(out, vec!['b', 'c', 'd', 'e']);
        assert_eq!(r.pending_bytes(), 0);
        assert_eq!(r.expected(), 5);
        // Nothing may follow the FIN.
        assert!(matches!(r.insert(5, 'x', 1, false, &mut out), Err(ReorderError::AfterFin { .. })));
    }

    #[test]
    fn errors() {
        let mut r = Reorder::new(10, 8, 200);
        let mut out = Vec::new();
        assert!(matches!(r.insert(9, (), 1, false, &mut out), Err(ReorderError::Stale { .. })));
        assert!(matches!(r.insert(18, (), 1, false, &mut out), Err(ReorderError::TooFarAhead { .. })));
        r.insert(12, (), 1, false, &mut out).unwrap();
        assert!(matches!(r.insert(12, (), 1, false, &mut out), Err(ReorderError::Duplicate { .. })));
        assert!(matches!(r.insert(13, (), 100, false, &mut out), Err(ReorderError::Overflow { .. })));
        // FIN before an already buffered message.
        assert!(matches!(r.insert(11, (), 1, true, &mut out), Err(ReorderError::AfterFin { .. })));
        r.insert(14, (), 1, true, &mut out).unwrap();
        assert!(matches!(r.insert(15, (), 1, false, &mut out), Err(ReorderError::AfterFin { .. })));
        assert!(matches!(r.insert(13, (), 1, true, &mut out), Err(ReorderError::AfterFin { .. })));
        assert_eq!(r.clear(), 2 * (1 + ENTRY_OVERHEAD));
    }

    #[test]
    fn wraps_around() {
        let mut r = Reorder::new(u32::MAX - 1, 16, 1 << 20);
        let mut out = Vec::new();
        r.insert(1, 3, 1, false, &mut out).unwrap();
        r.insert(0, 2, 1, false, &mut out).unwrap();
        r.insert(u32::MAX, 1, 1, false, &mut out).unwrap();
        assert!(out.is_empty());
        r.insert(u32::MAX - 1, 0, 1, false, &mut out).unwrap();
        assert_eq!(out, vec![0, 1, 2, 3]);
        assert_eq!(r.expected(), 2);
    }
}
