//! Out-of-order stream bytes that arrived beyond the receive buffer's contiguous storage.
//!
//! The contiguous storage of [`RecvBuf`](super::RecvBuf) is addressed by offset, so holding one
//! byte at the far edge of the window in it would cost the whole window. Bytes that arrive
//! too far ahead of what was received are kept here instead, as segments sized to the data
//! (ARCHITECTURE.md, "Memory model"), until the contiguous storage can take them without
//! costing more than what arrived.

use std::collections::BTreeMap;

/// What one segment costs beyond its bytes (its map entry, the `Vec` header, the allocator's
/// rounding), charged so that a peer sending many tiny segments pays for them.
pub(crate) const SEGMENT_OVERHEAD: usize = 96;

/// Received bytes at offsets past the contiguous storage: non-overlapping, non-adjacent
/// segments keyed by their first offset, each one fully received.
#[derive(Debug, Default)]
pub(crate) struct Sparse {
    segments: BTreeMap<u64, Vec<u8>>,
    /// Sum of the segments' capacities.
    bytes: usize,
}

impl Sparse {
    pub(crate) fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }

    /// Memory charged: the bytes plus [`SEGMENT_OVERHEAD`] per segment.
    pub(crate) fn allocated(&self) -> usize {
        self.bytes + self.segments.len() * SEGMENT_OVERHEAD
    }

    pub(crate) fn clear(&mut self) {
        self.segments.clear();
        self.bytes = 0;
    }

    /// First offset held, if any.
    pub(crate) fn first_offset(&self) -> Option<u64> {
        self.segments.keys().next().copied()
    }

    /// End of the segment that starts at `start`, if there is one.
    pub(crate) fn segment_end(&self, start: u64) -> Option<u64> {
        self.segments.get(&start).map(|v| start + v.len() as u64)
    }

    /// End of the last segment, if any.
    pub(crate) fn last_end(&self) -> Option<u64> {
        self.segments.last_key_value().map(|(s, v)| s + v.len() as u64)
    }

    /// Stores `data` at `offset`; bytes already held win (nothing is delivered twice). Returns
    /// how many bytes were new.
    pub(crate) fn insert(&mut self, offset: u64, data: &[u8]) -> u64 {
        if data.is_empty() {
            return 0;
        }
        let end = offset + data.len() as u64;
        // The common case: data extending the segment just before it (records of one stream
        // arriving in order, ahead of a gap), appended in place.
        let next_start = self.segments.range(offset + 1..).next().map(|(s, _)| *s);
        if let Some((&start, seg)) = self.segments.range_mut(..=offset).next_back() {
            let seg_end = start + seg.len() as u64;
            if seg_end >= offset && next_start.is_none_or(|n| n > end) {
                if end <= seg_end {
                    return 0;
                }
                let skip = (seg_end - offset) as usize;
                let before = seg.capacity();
                // Capacity grows by a quarter at least (amortised appends), not by doubling:
                // what a segment holds beyond its bytes stays small.
                let add = data.len() - skip;
                if seg.capacity() - seg.len() < add {
                    seg.reserve_exact(add.max(seg.len() / 4));
                }
                seg.extend_from_slice(&data[skip..]);
                self.bytes = self.bytes - before + seg.capacity();
                return end - seg_end;
            }
        }
        self.merge(offset, data)
    }

    /// General insertion: every segment overlapping or touching `offset..end` is merged with
    /// the new bytes into one.
    fn merge(&mut self, offset: u64, data: &[u8]) -> u64 {
        let end = offset + data.len() as u64;
        let mut start = offset;
        if let Some((&s, seg)) = self.segments.range(..offset).next_back() {
            if s + seg.len() as u64 >= offset {
                start = s;
            }
        }
        let touching: Vec<u64> = self.segments.range(start..=end).map(|(s, _)| *s).collect();
        let old: Vec<(u64, Vec<u8>)> =
            touching.iter().filter_map(|s| self.segments.remove(s).map(|v| (*s, v))).collect();
        let new_end = old.iter().map(|(s, v)| s + v.len() as u64).fold(end, u64::max);
        let mut merged = vec![0u8; (new_end - start) as usize];
        let at = (offset - start) as usize;
        merged[at..at + data.len()].copy_from_slice(data);
        let mut held = 0u64;
        for (s, v) in old {
            // Bytes already held win over the new copy (they are the same in a valid stream).
            let at = (s - start) as usize;
            merged[at..at + v.len()].copy_from_slice(&v);
            held += v.len() as u64;
            self.bytes -= v.capacity();
        }
        self.bytes += merged.capacity();
        self.segments.insert(start, merged);
        (new_end - start) - held
    }

    /// Removes and returns the bytes held below `span_end`, segment by segment, in order. A
    /// segment crossing `span_end` is split: its tail stays.
    pub(crate) fn take_below(&mut self, span_end: u64) -> Vec<(u64, Vec<u8>)> {
        let mut out = Vec::new();
        while let Some(entry) = self.segments.first_entry() {
            let start = *entry.key();
            if start >= span_end {
                break;
            }
            let mut seg = entry.remove();
            self.bytes -= seg.capacity();
            let len = seg.len() as u64;
            if start + len > span_end {
                let tail = seg.split_off((span_end - start) as usize);
                self.bytes += tail.capacity();
                self.segments.insert(span_end, tail);
            }
            out.push((start, seg));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_merge_and_keep_first_bytes() {
        let mut s = Sparse::default();
        assert_eq!(s.insert(100, b"abc"), 3);
        assert_eq!(s.insert(103, b"def"), 3, "appended");
        assert_eq!(s.insert(110, b"xyz"), 3);
        assert_eq!(s.allocated(), s.bytes + 2 * SEGMENT_OVERHEAD);
        // Bridges the two segments, overlapping both: only the 4 missing bytes are new.
        assert_eq!(s.insert(104, b"EF.....Y"), 4);
        assert_eq!(s.last_end(), Some(113));
        let all = s.take_below(u64::MAX);
        assert_eq!(all, vec![(100, b"abcdef....xyz".to_vec())]);
        assert!(s.is_empty());
        assert_eq!(s.allocated(), 0);
    }

    #[test]
    fn take_below_splits_a_crossing_segment() {
        let mut s = Sparse::default();
        s.insert(10, b"0123456789");
        assert_eq!(s.take_below(10), vec![]);
        assert_eq!(s.take_below(14), vec![(10, b"0123".to_vec())]);
        assert_eq!(s.first_offset(), Some(14));
        assert_eq!(s.insert(12, b"xx45"), 2, "14 and 15 are already held");
        assert_eq!(s.insert(16, b"67"), 0);
        assert_eq!(s.take_below(100), vec![(12, b"xx456789".to_vec())]);
    }
}
