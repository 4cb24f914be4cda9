//! The receiving half of one stream: reassembly by offset, flow control, final size.
//!
//! The storage is one `Vec<u8>` addressed by stream offset (index = offset - base), so that
//! the in-order readable bytes are always one slice ([`RecvBuf::chunk`]) and a record can be
//! decrypted straight to its place ([`RecvBuf::direct_slot`], see ARCHITECTURE.md, "The
//! receive path"). Which bytes past the in-order prefix have arrived is tracked by a
//! [`Bitmap`] over the same indices, whose size a hostile peer cannot inflate.
//!
//! The storage grows only as far as data justifies: up to bytes that continue the in-order
//! prefix, or up to twice what is buffered. Bytes that arrive further ahead (one byte at the
//! far edge of the window, say) are kept in [`Sparse`] segments sized to them, and moved into
//! the storage when it reaches them. So memory follows what arrived, never the window alone
//! (PROTOCOL.md §4.2, ARCHITECTURE.md "Memory model").

use std::fmt;
use std::time::{Duration, Instant};

use super::ranges::Bitmap;
use super::sparse::Sparse;
use super::INITIAL_MAX_STREAM_DATA;
use RecvError::{BeyondFinalSize, FinalSize, FlowControl};

/// Storage larger than this is freed when the stream drains, so that idle streams do not pin
/// the memory of their last burst. A reader that keeps up stays below it and never reallocates;
/// one that lets more pile up and then drains it all pays a few allocations per such cycle,
/// i.e. amortised over more than this many bytes.
const RETAIN: usize = INITIAL_MAX_STREAM_DATA as usize;

/// Smallest allocation (storage then doubles), so that the first bytes do not grow it byte by
/// byte; small, because a peer can make every stream allocate it with one byte.
const MIN_ALLOC: usize = 64;

/// A peer violated the stream's flow control or final size rules (a fatal protocol error).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecvError {
    /// Data (or a final size) beyond the limit we advertised.
    FlowControl { limit: u64, end: u64 },
    /// A final size different from the one already known.
    FinalSize { known: u64, got: u64 },
    /// Data beyond the final size, or a final size below data already received.
    BeyondFinalSize { final_size: u64, end: u64 },
}

impl fmt::Display for RecvError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FlowControl { limit, end } => {
                write!(f, "stream data up to {end} exceeds the limit {limit}")
            }
            FinalSize { known, got } => write!(f, "stream final size {got} contradicts {known}"),
            BeyondFinalSize { final_size, end } => {
                write!(f, "stream data up to {end} exceeds the final size {final_size}")
            }
        }
    }
}

impl std::error::Error for RecvError {}

/// The receiving half of one stream.
#[derive(Debug)]
pub struct RecvBuf {
    /// `buf[i]` holds stream offset `read_offset - start + i`; its length is the allocated
    /// (and zero-initialised) region.
    buf: Vec<u8>,
    /// Index of `read_offset` in `buf`.
    start: usize,
    read_offset: u64,
    /// End of the bytes received in order from `read_offset`.
    contig_end: u64,
    /// End of the highest byte received (>= `contig_end`).
    max_end: u64,
    /// Distinct bytes ever received, so `buffered()` is exact and O(1).
    received: u64,
    /// Received bytes at or past `contig_end`, by index into `buf`. Bits below `contig_end`
    /// are kept clear, so a stream received in order never touches it.
    ooo: Bitmap,
    /// Received bytes past the storage's end (`span_end`); none below it.
    sparse: Sparse,
    final_size: Option<u64>,
    /// Limit advertised to the peer.
    limit: u64,
    /// How far past the read offset an advertisement reaches now: it grows, up to
    /// `max_window`, while the application reads a window's worth in little time
    /// ([`RecvBuf::grow_window`]).
    window: u64,
    max_window: u64,
    /// When the last advertisement was recorded (None: never, or its time was not known).
    adv_at: Option<Instant>,
    /// `read_offset` and `limit - read_offset` at the last advertisement.
    adv_from: u64,
    adv_window: u64,
    reset: bool,
    /// `(offset, len)` handed out by the last `direct_slot`, until `commit_direct`. Any other
    /// mutation forgets it, since it may move or drop the slot's bytes.
    slot: Option<(u64, usize)>,
}

impl RecvBuf {
    /// `window`: how far past the read offset the advertised limit may go once the application
    /// reads, always. The initial limit is [`INITIAL_MAX_STREAM_DATA`] whatever the window.
    pub fn new(window: u64) -> Self {
        Self::growing(window, window)
    }

    /// A window that starts at `start` and may grow up to `max` ([`RecvBuf::grow_window`]).
    pub fn growing(start: u64, max: u64) -> Self {
        Self {
            buf: Vec::new(),
            start: 0,
            read_offset: 0,
            contig_end: 0,
            max_end: 0,
            received: 0,
            ooo: Bitmap::default(),
            sparse: Sparse::default(),
            final_size: None,
            limit: INITIAL_MAX_STREAM_DATA,
            window: start.min(max),
            max_window: max,
            adv_at: None,
            adv_from: 0,
            adv_window: INITIAL_MAX_STREAM_DATA,
            reset: false,
            slot: None,
        }
    }

    /// End of the bytes received in order (everything below it has arrived).
    pub fn contiguous_end(&self) -> u64 {
        self.contig_end
    }

    /// Stores `data` at `offset`. Bytes already received are ignored, so nothing is delivered
    /// twice. After a reset, data is dropped but the final size rules are still checked.
    pub fn insert(&mut self, offset: u64, data: &[u8], fin: bool) -> Result<(), RecvError> {
        self.slot = None;
        let end = self.check(offset, data.len(), fin)?;
        if self.reset {
            return Ok(());
        }
        if fin {
            self.final_size = Some(end);
        }
        if data.is_empty() || end <= self.contig_end {
            return Ok(());
        }
        if self.may_grow_to(offset, end, data.len()) {
            self.reserve(self.grow_end(end, data.len()))?;
        } else {
            self.compact_towards(end)?;
        }
        // What the storage spans goes there; the rest is kept sparse.
        let split = self.span_end().clamp(offset, end);
        let mut pos = offset.max(self.contig_end);
        while pos < split {
            let from = self.next_clear(pos, split);
            if from >= split {
                break;
            }
            let to = self.next_set(from, split);
            let src = &data[(from - offset) as usize..(to - offset) as usize];
            let dst = self.index(from);
            self.buf[dst..dst + src.len()].copy_from_slice(src);
            self.mark(from, to);
            pos = to.max(self.contig_end);
        }
        if split < end {
            let from = split.max(self.contig_end);
            let new = self.sparse.insert(from, &data[(from - offset) as usize..]);
            self.received += new;
            self.max_end = self.max_end.max(end);
            self.densify_if_cheaper()?;
        }
        self.absorb_sparse()
    }

    /// Whether the storage may grow to span `..end` for bytes at `offset` (plus `extra` bytes
    /// about to arrive): for bytes that continue the in-order prefix, or when the storage would
    /// be no larger than what is held (so out-of-order data near the prefix, as multipath
    /// reordering brings, goes straight to its place once some arrived).
    fn may_grow_to(&self, offset: u64, end: u64, extra: usize) -> bool {
        // Out of order, the storage grows over the sparse segments too (or not at all), so
        // that held memory is never counted twice.
        let end = end.max(self.sparse.last_end().unwrap_or(0));
        offset <= self.contig_end || end - self.read_offset <= self.held(extra)
    }

    /// How far to grow the storage for bytes ending at `end` (plus `extra` arriving): also over
    /// the sparse segments, if what is held pays for spanning them.
    fn grow_end(&self, end: u64, extra: usize) -> u64 {
        match self.sparse.last_end() {
            Some(last) if last > end && last - self.read_offset <= self.held(extra) => last,
            _ => end,
        }
    }

    /// Memory the data held justifies: buffered bytes (plus `extra` arriving) and what the
    /// sparse segments cost.
    fn held(&self, extra: usize) -> u64 {
        (self.buffered() + extra + self.sparse.allocated()) as u64
    }

    /// Moves the sparse segments into the storage once spanning them costs no more than they
    /// do (many tiny segments cost more than the storage over them).
    fn densify_if_cheaper(&mut self) -> Result<(), RecvError> {
        let Some(last) = self.sparse.last_end() else { return Ok(()) };
        if last - self.read_offset <= self.held(0) {
            self.reserve(last)?;
        }
        Ok(())
    }

    /// Moves into the storage the sparse segment that the in-order prefix reached.
    fn absorb_sparse(&mut self) -> Result<(), RecvError> {
        while let Some(first) = self.sparse.first_offset() {
            if first != self.contig_end {
                break;
            }
            let upto = self.sparse.segment_end(first).unwrap_or(first);
            self.reserve(upto)?;
        }
        Ok(())
    }

    /// Stream offset just past the storage.
    fn span_end(&self) -> u64 {
        self.read_offset + (self.buf.len() - self.start) as u64
    }

    /// The in-order readable bytes, all of them, as one slice.
    pub fn chunk(&self) -> &[u8] {
        &self.buf[self.start..self.index(self.contig_end)]
    }

    /// The application consumed `n` bytes of [`chunk`](Self::chunk) (clamped to what is
    /// readable).
    pub fn consume(&mut self, n: usize) {
        self.slot = None;
        let n = n.min(self.readable());
        self.read_offset += n as u64;
        self.start += n;
        if self.read_offset == self.max_end {
            // Drained: restart at index 0 for free instead of compacting later. The storage is
            // kept: a stream being read drains often, and re-growing it each time costs a
            // page-faulting allocation per cycle. `release_if_drained` returns it when idle.
            self.start = 0;
        }
    }

    /// Frees the storage of a drained buffer larger than the initial window (the session calls
    /// this for idle streams, so thousands of quiet streams do not keep their last burst's memory).
    pub fn release_if_drained(&mut self) -> bool {
        if self.releasable() > 0 {
            self.buf = Vec::new();
            self.ooo.release();
            self.start = 0;
            return true;
        }
        false
    }

    /// Bytes [`RecvBuf::release_if_drained`] would free now.
    pub fn releasable(&self) -> usize {
        if self.read_offset == self.max_end && self.buf.len() > RETAIN {
            self.buf.len()
        } else {
            0
        }
    }

    #[cfg(test)]
    /// Copies readable bytes into `out`, consumes them, and returns how many.
    pub fn read(&mut self, out: &mut [u8]) -> usize {
        let chunk = self.chunk();
        let n = chunk.len().min(out.len());
        out[..n].copy_from_slice(&chunk[..n]);
        self.consume(n);
        n
    }

    pub fn readable(&self) -> usize {
        (self.contig_end - self.read_offset) as usize
    }

    /// FIN received and every byte up to it consumed (false after a reset).
    pub fn is_finished(&self) -> bool {
        !self.reset && self.final_size == Some(self.read_offset)
    }

    pub fn final_size(&self) -> Option<u64> {
        self.final_size
    }

    pub fn read_offset(&self) -> u64 {
        self.read_offset
    }

    /// The peer reset the stream: drops all data; later inserts are ignored. Besides the final
    /// size rules, a final size past the advertised limit is a flow control error.
    pub fn reset(&mut self, final_size: u64) -> Result<(), RecvError> {
        self.slot = None;
        // The same rules as a FIN-only frame at `final_size`.
        self.check(final_size, 0, true)?;
        self.final_size = Some(final_size);
        self.reset = true;
        self.buf = Vec::new();
        self.ooo.release();
        self.sparse.clear();
        self.start = 0;
        self.contig_end = self.read_offset;
        self.max_end = self.read_offset;
        self.received = self.read_offset;
        Ok(())
    }

    #[cfg(test)]
    pub fn is_reset(&self) -> bool {
        self.reset
    }

    #[cfg(test)]
    /// Returns a new limit (`read_offset + window`) to advertise in Max Stream Data when the
    /// application has consumed at least half of the last advertised window, and records it.
    /// Half a window keeps the peer from stalling while costing one frame per half window.
    pub fn poll_max_data_update(&mut self) -> Option<u64> {
        let new = self.wanted_limit()?;
        self.advertise(new, None);
        Some(new)
    }

    /// The limit this stream would advertise now (see
    /// [`poll_max_data_update`](Self::poll_max_data_update)), without recording it: the session
    /// may lower it to stay within its memory budget, then calls [`advertise`](Self::advertise).
    pub fn wanted_limit(&self) -> Option<u64> {
        if self.reset || self.final_size.is_some() {
            return None;
        }
        let consumed = self.read_offset - self.adv_from;
        let new = self.read_offset.saturating_add(self.window);
        if consumed.saturating_mul(2) < self.adv_window || new <= self.limit {
            return None;
        }
        Some(new)
    }

    /// Records a limit advertised to the peer at `now` (if known). Values at or below the
    /// current limit are ignored (a limit never goes down).
    pub fn advertise(&mut self, limit: u64, now: Option<Instant>) {
        if limit <= self.limit {
            return;
        }
        self.limit = limit;
        self.adv_from = self.read_offset;
        self.adv_window = limit - self.read_offset;
        self.adv_at = now;
    }

    /// An advertisement is due ([`RecvBuf::wanted_limit`]) at `now`: if the application read
    /// half of the last one within `fast` of it (twice the path's RTT), the window, not the
    /// reader, is what holds the peer back, so it doubles (up to its most), as QUIC stacks and
    /// Linux's receive-buffer autotuning do. A reader slower than the path keeps the window it
    /// has, and the memory the peer may fill stays near what it reads. Returns whether it grew.
    pub fn grow_window(&mut self, now: Option<Instant>, fast: Duration) -> bool {
        let quick = match (now, self.adv_at) {
            (Some(now), Some(at)) => now.saturating_duration_since(at) < fast,
            // The first advertisement: no time to compare with yet.
            (Some(_), None) => false,
            // A session without a clock (driven without time): nothing says the reader is
            // slow, so the window grows as a fixed one would have been.
            (None, _) => true,
        };
        if !quick || self.window >= self.max_window {
            return false;
        }
        self.window = self.window.saturating_mul(2).min(self.max_window);
        true
    }

    /// Credit the peer holds and the application has not consumed: what this stream may still
    /// have to buffer (`limit - read_offset`).
    pub fn outstanding(&self) -> u64 {
        self.limit.saturating_sub(self.read_offset)
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Raises the limit without an advertisement, for a byte stream whose flow control is done
    /// elsewhere (a plain TLS fallback stream relies on TCP's). Lower values are ignored.
    pub fn raise_limit(&mut self, limit: u64) {
        self.limit = self.limit.max(limit);
    }

    /// Received bytes not yet consumed, out-of-order ones included.
    pub fn buffered(&self) -> usize {
        (self.received - self.read_offset) as usize
    }

    /// Bytes of memory allocated (storage, out-of-order bitmap, sparse segments). Storage
    /// never exceeds `limit - read_offset` at the time it grows (a direct slot's slack past the
    /// limit must already be there), nor about twice what arrived; the bitmap adds at most an
    /// eighth of it.
    pub fn allocated(&self) -> usize {
        self.buf.capacity() + self.ooo.allocated() + self.sparse.allocated()
    }

    /// A writable window of the storage for stream bytes `offset..offset + len`, so a
    /// decryptor can open a whole record there; bytes past the data it then commits are
    /// scratch. `slack` lets the record's trailing frames run past the flow control limit.
    /// `None` if `offset` was already consumed, the range exceeds `limit + slack`, or it
    /// overlaps received bytes (the caller then decrypts elsewhere and uses `insert`).
    pub fn direct_slot(&mut self, offset: u64, len: usize, slack: usize) -> Option<&mut [u8]> {
        self.slot = None;
        let end = offset.checked_add(len as u64)?;
        if self.reset || offset < self.read_offset || end > self.limit.checked_add(slack as u64)? {
            return None;
        }
        if len == 0 {
            // Nothing to place (a FIN alone): no storage needed.
            self.slot = Some((offset, 0));
            return Some(&mut []);
        }
        if offset < self.contig_end {
            return None;
        }
        if self.start + (end - self.read_offset) as usize > self.buf.len() {
            if !self.may_grow_to(offset, end, len) {
                return None;
            }
            // The storage grows up to the credit, never into the slack for a record's trailing
            // bytes (tag, other frames): a record that would need that goes through the
            // copying path, so that a stream's memory stays within its credit
            // (otherwise every stream filled to its 64 KiB window held 81 KiB).
            self.reserve(self.grow_end(end, len).min(self.limit)).ok()?;
            if self.start + (end - self.read_offset) as usize > self.buf.len() {
                return None;
            }
        }
        if self.next_set(offset, end) < end {
            return None;
        }
        self.slot = Some((offset, len));
        let i = self.index(offset);
        Some(&mut self.buf[i..i + len])
    }

    /// Marks the first `data_len` bytes of the last [`direct_slot`](Self::direct_slot) as
    /// received, with the same checks as [`insert`](Self::insert). Committing anything but a
    /// prefix of that slot, or after another mutation, is a caller bug: it is ignored (and
    /// asserts in debug builds).
    pub fn commit_direct(&mut self, offset: u64, data_len: usize, fin: bool) -> Result<(), RecvError> {
        let slot = self.slot.take();
        let end = self.check(offset, data_len, fin)?;
        if self.reset {
            return Ok(());
        }
        let valid = slot.is_some_and(|(o, l)| o == offset && data_len <= l);
        debug_assert!(valid, "commit_direct outside slot {slot:?}");
        if !valid {
            return Ok(());
        }
        if fin {
            self.final_size = Some(end);
        }
        if data_len > 0 {
            self.mark(offset, end);
        }
        self.absorb_sparse()
    }

    /// Checks `offset..offset + len` (with `fin`) against the final size and flow control
    /// rules, without changing anything; returns the end offset.
    fn check(&self, offset: u64, len: usize, fin: bool) -> Result<u64, RecvError> {
        let sum = offset.checked_add(len as u64);
        let end = sum.unwrap_or(u64::MAX);
        match self.final_size {
            Some(known) if fin && end != known => return Err(FinalSize { known, got: end }),
            Some(final_size) if end > final_size => return Err(BeyondFinalSize { final_size, end }),
            None if fin && end < self.max_end => {
                let (final_size, end) = (end, self.max_end);
                return Err(BeyondFinalSize { final_size, end });
            }
            _ => {}
        }
        let limit = self.limit;
        match sum {
            Some(end) if end <= limit => Ok(end),
            _ => Err(FlowControl { limit, end }),
        }
    }

    /// Records the new bytes `from..to` (none of them received before) as received.
    fn mark(&mut self, from: u64, to: u64) {
        self.received += to - from;
        self.place(from, to);
    }

    /// Records that the storage holds the received bytes `from..to`.
    fn place(&mut self, from: u64, to: u64) {
        self.max_end = self.max_end.max(to);
        if from == self.contig_end {
            self.contig_end = to;
            if self.max_end > to {
                // Absorb out-of-order bytes that now follow in order.
                let run = self.ooo.take_run(self.index(to));
                self.contig_end += run as u64;
            }
        } else {
            let (i, j) = (self.index(from), self.index(to));
            self.ooo.set(i, j);
        }
    }

    /// First offset in `from..to` (both >= `contig_end`) received out of order, or `to`.
    fn next_set(&self, from: u64, to: u64) -> u64 {
        // Nothing at or past `max_end` was received (and this looks at the storage only).
        let upto = to.min(self.max_end).min(self.span_end());
        if from >= upto {
            return to;
        }
        let (i, j) = (self.index(from), self.index(upto));
        match self.ooo.next_set(i, j) {
            k if k < j => from + (k - i) as u64,
            _ => to,
        }
    }

    /// First offset in `from..to` (both >= `contig_end`) not yet received, or `to`.
    fn next_clear(&self, from: u64, to: u64) -> u64 {
        let upto = to.min(self.max_end).min(self.span_end());
        if from >= upto {
            return from.min(to);
        }
        let i = self.index(from);
        // Past `max_end` everything is clear, so "none in range" means `upto`.
        from + (self.ooo.next_clear(i, self.index(upto)) - i) as u64
    }

    /// Index in `buf` of `offset` (which must lie in the storage's span).
    fn index(&self, offset: u64) -> usize {
        self.start + (offset - self.read_offset) as usize
    }

    /// Makes the storage span `..end`, by compacting and/or growing, never past
    /// `limit - read_offset` bytes at allocation time; sparse segments it now spans move in.
    fn reserve(&mut self, end: u64) -> Result<(), RecvError> {
        self.make_room(end, true)
    }

    /// [`reserve`](Self::reserve) without growing: compacts if that brings `end` (or closer
    /// to it) into the storage, so consumed bytes at its front are reused before anything is
    /// kept sparse.
    fn compact_towards(&mut self, end: u64) -> Result<(), RecvError> {
        if self.start == 0 {
            return Ok(());
        }
        self.make_room(end, false)
    }

    fn make_room(&mut self, end: u64, grow: bool) -> Result<(), RecvError> {
        let limit = self.limit;
        let too_big = || FlowControl { limit, end };
        let need = usize::try_from(end - self.read_offset).map_err(|_| too_big())?;
        let bound = usize::try_from(self.limit - self.read_offset).map_err(|_| too_big())?;
        if self.start + need <= self.buf.len() {
            return Ok(());
        }
        let live = (self.max_end.min(self.span_end()) - self.read_offset) as usize;
        // Compact when it moves no more than what was consumed since the last compaction
        // (amortised O(1) per byte), or when growing in place would exceed the bound.
        if self.start > 0 && (self.start >= live || self.start + need > bound || !grow) {
            self.compact(live);
        }
        if grow && self.start + need > self.buf.len() {
            let target = (2 * self.buf.len()).max(MIN_ALLOC).min(bound).max(self.start + need);
            self.buf.reserve_exact(target - self.buf.len());
            self.buf.resize(target, 0);
        }
        if !self.sparse.is_empty() {
            for (at, bytes) in self.sparse.take_below(self.span_end()) {
                let i = self.index(at);
                self.buf[i..i + bytes.len()].copy_from_slice(&bytes);
                self.place(at, at + bytes.len() as u64);
            }
        }
        Ok(())
    }

    /// Moves the `live` bytes at `start` to the front of the storage.
    fn compact(&mut self, live: usize) {
        self.buf.copy_within(self.start..self.start + live, 0);
        if self.max_end > self.contig_end {
            self.ooo.shift_down(self.start);
        }
        self.start = 0;
    }
}
