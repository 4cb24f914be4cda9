//! Sets of stream offsets.
//!
//! Two representations, chosen by who controls the shape of the set:
//!
//! * [`RangeSet`] is sparse (one map entry per maximal range). It suits state that *we* shape:
//!   acknowledged and lost ranges of our own records, whose number is bounded by the number of
//!   records in flight.
//! * [`Bitmap`] is dense (one bit per byte). It suits the receive side, where a hostile peer
//!   chooses the fragmentation: with a range map, one received byte out of two would cost tens of
//!   bytes of map per byte of window, while a bitmap costs one eighth of the buffer it
//!   describes, whatever the peer does.

use std::collections::btree_map;
use std::collections::BTreeMap;
use std::ops::Range;

/// A set of `u64` offsets, stored as disjoint, non-adjacent half-open ranges.
///
/// Operations cost O(log n) plus the number of ranges merged or split.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RangeSet {
    /// start -> end of each maximal range.
    map: BTreeMap<u64, u64>,
    /// Sum of the lengths of all ranges, so that totals are O(1).
    covered: u64,
}

impl RangeSet {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Number of disjoint ranges.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Number of offsets in the set.
    pub fn covered(&self) -> u64 {
        self.covered
    }

    /// Adds `range`, merging with overlapping or adjacent ranges. Returns how many offsets were
    /// not in the set before.
    pub fn insert(&mut self, range: Range<u64>) -> u64 {
        if range.is_empty() {
            return 0;
        }
        let (mut start, mut end) = (range.start, range.end);
        let mut absorbed = 0;
        if let Some((&s, &e)) = self.map.range(..=start).next_back() {
            if e >= end {
                return 0;
            }
            if e >= start {
                self.map.remove(&s);
                absorbed += e - s;
                start = s;
            }
        }
        while let Some((&s, &e)) = self.map.range(start..=end).next() {
            self.map.remove(&s);
            absorbed += e - s;
            end = end.max(e);
        }
        self.map.insert(start, end);
        let added = (end - start) - absorbed;
        self.covered += added;
        added
    }

    /// Removes `range`, splitting ranges that straddle its ends. Returns how many offsets were
    /// removed.
    pub fn remove(&mut self, range: Range<u64>) -> u64 {
        if range.is_empty() {
            return 0;
        }
        let mut removed = 0;
        if let Some((&s, &e)) = self.map.range(..range.start).next_back() {
            if e > range.start {
                self.map.insert(s, range.start);
                removed += e.min(range.end) - range.start;
                if e > range.end {
                    self.map.insert(range.end, e);
                }
            }
        }
        while let Some((&s, &e)) = self.map.range(range.start..range.end).next() {
            self.map.remove(&s);
            if e > range.end {
                self.map.insert(range.end, e);
                removed += range.end - s;
            } else {
                removed += e - s;
            }
        }
        self.covered -= removed;
        removed
    }

    pub fn contains(&self, offset: u64) -> bool {
        self.map.range(..=offset).next_back().is_some_and(|(_, &e)| e > offset)
    }

    #[cfg(test)]
    /// Whether any offset of `range` is in the set.
    pub fn overlaps(&self, range: Range<u64>) -> bool {
        !range.is_empty() && self.gaps(range.clone()).next() != Some(range)
    }

    /// The lowest range.
    pub fn first(&self) -> Option<Range<u64>> {
        self.map.first_key_value().map(|(&s, &e)| s..e)
    }

    #[cfg(test)]
    /// The highest range.
    pub fn last(&self) -> Option<Range<u64>> {
        self.map.last_key_value().map(|(&s, &e)| s..e)
    }

    pub fn pop_first(&mut self) -> Option<Range<u64>> {
        let (s, e) = self.map.pop_first()?;
        self.covered -= e - s;
        Some(s..e)
    }

    pub fn clear(&mut self) {
        self.map.clear();
        self.covered = 0;
    }

    #[cfg(test)]
    /// The ranges in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = Range<u64>> + '_ {
        self.map.iter().map(|(&s, &e)| s..e)
    }

    /// The parts of `range` that are *not* in the set, in increasing order.
    pub fn gaps(&self, range: Range<u64>) -> Gaps<'_> {
        let mut cursor = range.start;
        if let Some((_, &e)) = self.map.range(..=cursor).next_back() {
            cursor = cursor.max(e);
        }
        let end = range.end;
        // `BTreeMap::range` panics on a reversed range: clamp the lower bound.
        let iter = self.map.range(cursor.min(end)..end);
        Gaps { iter, cursor, end }
    }
}

/// Iterator returned by [`RangeSet::gaps`].
pub struct Gaps<'a> {
    iter: btree_map::Range<'a, u64, u64>,
    cursor: u64,
    end: u64,
}

impl Iterator for Gaps<'_> {
    type Item = Range<u64>;

    fn next(&mut self) -> Option<Range<u64>> {
        while self.cursor < self.end {
            match self.iter.next() {
                Some((&s, &e)) if s > self.cursor => {
                    let gap = self.cursor..s;
                    self.cursor = e;
                    return Some(gap);
                }
                Some((_, &e)) => self.cursor = self.cursor.max(e),
                None => {
                    let gap = self.cursor..self.end;
                    self.cursor = self.end;
                    return Some(gap);
                }
            }
        }
        None
    }
}

/// A dense set of small indices, one bit each. Indices past the allocated words are clear, so
/// an empty bitmap allocates nothing.
///
/// Scans work a word at a time, so their cost is 1/64 of the bytes they describe.
#[derive(Debug, Clone, Default)]
pub(crate) struct Bitmap {
    words: Vec<u64>,
}

impl Bitmap {
    /// Bytes allocated.
    pub(crate) fn allocated(&self) -> usize {
        self.words.capacity() * 8
    }

    /// Frees the storage. Only valid when every bit is already clear (or meant to be).
    pub(crate) fn release(&mut self) {
        self.words = Vec::new();
    }

    /// Sets the bits of `from..to`.
    pub(crate) fn set(&mut self, from: usize, to: usize) {
        if from >= to {
            return;
        }
        let need = to.div_ceil(64);
        if self.words.len() < need {
            // Exact, not doubling: the caller's storage already grows geometrically, and
            // this keeps the bitmap at an eighth of it.
            self.words.reserve_exact(need - self.words.len());
            self.words.resize(need, 0);
        }
        let mut i = from;
        while i < to {
            let (w, b) = (i / 64, i % 64);
            let n = (64 - b).min(to - i);
            self.words[w] |= mask(b, n);
            i += n;
        }
    }

    /// Index of the first set bit in `from..to`, or `to` if none.
    pub(crate) fn next_set(&self, from: usize, to: usize) -> usize {
        self.scan(from, to, |w| w)
    }

    /// Index of the first clear bit in `from..to`, or `to` if none.
    pub(crate) fn next_clear(&self, from: usize, to: usize) -> usize {
        self.scan(from, to, |w| !w)
    }

    /// Finds the first index in `from..to` whose bit is set in `map(word)`.
    fn scan(&self, from: usize, to: usize, map: impl Fn(u64) -> u64) -> usize {
        let mut i = from;
        while i < to {
            let (w, b) = (i / 64, i % 64);
            if w >= self.words.len() && map(0) == 0 {
                return to; // Only clear bits beyond the words, and we look for a set one.
            }
            let word = map(self.words.get(w).copied().unwrap_or(0)) >> b;
            if word != 0 {
                return (i + word.trailing_zeros() as usize).min(to);
            }
            i += 64 - b;
        }
        to
    }

    /// Clears the run of set bits that starts at `from` and returns its length (0 if the bit at
    /// `from` is clear).
    pub(crate) fn take_run(&mut self, from: usize) -> usize {
        let mut i = from;
        while let Some(word) = self.words.get_mut(i / 64) {
            let b = i % 64;
            let ones = ((*word >> b).trailing_ones() as usize).min(64 - b);
            *word &= !mask(b, ones);
            i += ones;
            if b + ones < 64 {
                break;
            }
        }
        i - from
    }

    /// Moves every bit down by `k` positions (bit `k` becomes bit 0), dropping bits below `k`.
    /// Used when the storage the bitmap describes is compacted.
    pub(crate) fn shift_down(&mut self, k: usize) {
        let (ws, bs) = (k / 64, k % 64);
        let n = self.words.len();
        for i in 0..n {
            let lo = self.words.get(i + ws).map_or(0, |w| w >> bs);
            let hi = match self.words.get(i + ws + 1) {
                Some(w) if bs != 0 => w << (64 - bs),
                _ => 0,
            };
            self.words[i] = lo | hi;
        }
    }
}

/// `n` ones starting at bit `b` (`b + n <= 64`).
fn mask(b: usize, n: usize) -> u64 {
    if n >= 64 {
        !0
    } else {
        ((1u64 << n) - 1) << b
    }
}
