//! The sending half of one stream.
//!
//! Application bytes are copied once into a ring buffer that holds every byte from the lowest
//! unacknowledged offset to the write offset, never more than the stream's capacity. Records refer to ranges of it rather than
//! copying them, so that when a connection fails its unacknowledged ranges can be queued with
//! [`SendBuf::retransmit`] and sent again, re-encrypted, on another connection (PROTOCOL.md §5).

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::ranges::RangeSet;
use super::INITIAL_MAX_STREAM_DATA;

/// Storage larger than this is freed when everything has been acknowledged, so that idle
/// streams do not pin the memory of their last burst.
const RETAIN: usize = INITIAL_MAX_STREAM_DATA as usize;

/// Where the ring wraps inside a record's worth of data, a first part shorter than this is
/// completed with the bytes from the ring's start (copied); a longer one is sent as it is.
const SPLIT_COPY_BELOW: usize = 8192;

/// A writer held back by the session's send budget is woken once it may write this much
/// ([`SendBuf::worth_waking`]): a full record's worth.
const WAKE_AT: usize = crate::record::MAX_PLAINTEXT;

/// Smallest allocation, so that small writes do not regrow the buffer each time.
const MIN_ALLOC: usize = 4096;

/// The session-wide send budget shared by its streams' send buffers: what they hold in total,
/// and how many hold anything. Each buffer keeps its own entry up to date (write, release,
/// reset, drop), so the totals are exact without the session summing its streams. The budget
/// itself moves: the session sets it from what its paths carry (`session/send_budget.rs`),
/// within `SessionConfig::send_budget`. Atomics only because a session is `Send`; one thread
/// uses them.
#[derive(Debug)]
pub struct SendAccount {
    budget: AtomicUsize,
    floor: usize,
    bytes: AtomicUsize,
    active: AtomicUsize,
}

impl SendAccount {
    /// `budget`: the most bytes all streams together may hold beyond their floors; `floor`:
    /// what every stream may always hold, however many share the budget.
    pub fn new(budget: usize, floor: usize) -> Arc<Self> {
        Arc::new(Self {
            budget: AtomicUsize::new(budget),
            floor,
            bytes: AtomicUsize::new(0),
            active: AtomicUsize::new(0),
        })
    }

    /// The most bytes all streams together may hold now (beyond their floors).
    pub fn budget(&self) -> usize {
        self.budget.load(Ordering::Relaxed)
    }

    /// Moves the budget. Lowering it below what the streams hold takes nothing back: writes
    /// wait until acknowledgements bring the total under it.
    pub fn set_budget(&self, budget: usize) {
        self.budget.store(budget, Ordering::Relaxed);
    }

    /// Bytes held by all the streams' send buffers.
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Streams holding at least one byte.
    pub fn active(&self) -> usize {
        self.active.load(Ordering::Relaxed)
    }

    /// A buffer went from holding `before` bytes to `after`.
    fn update(&self, before: usize, after: usize) {
        if after >= before {
            self.bytes.fetch_add(after - before, Ordering::Relaxed);
        } else {
            self.bytes.fetch_sub(before - after, Ordering::Relaxed);
        }
        match (before == 0, after == 0) {
            (true, false) => {
                self.active.fetch_add(1, Ordering::Relaxed);
            }
            (false, true) => {
                self.active.fetch_sub(1, Ordering::Relaxed);
            }
            _ => {}
        }
    }

    /// Bytes a stream holding `buffered` may add: up to its fair share (the budget split over
    /// the streams holding data, counting this one, but never less than the floor) as long as
    /// the budget has room, and up to the floor in any case.
    fn room(&self, buffered: usize) -> usize {
        let (by_share, by_total) = self.limits(buffered);
        by_share.min(by_total).max(self.floor_now(self.streams_counting(buffered)).saturating_sub(buffered))
    }

    /// What a stream holding `buffered` may add by its fair share, and by the budget's total.
    fn limits(&self, buffered: usize) -> (usize, usize) {
        let active = self.streams_counting(buffered);
        let budget = self.budget();
        let share = (budget / active).max(self.floor_now(active));
        (share.saturating_sub(buffered), budget.saturating_sub(self.bytes()))
    }

    /// Streams holding data, counting one holding `buffered` (at least 1).
    fn streams_counting(&self, buffered: usize) -> usize {
        (self.active() + usize::from(buffered == 0)).max(1)
    }

    /// What every one of `active` streams may always hold: the floor, lowered toward one
    /// record's worth ([`WAKE_AT`]) once that many floors would exceed the budget. Many streams
    /// on a small budget (a short path's) then hold one record each, not two: 1000 streams
    /// hold 16 MiB beyond the budget, not 32.
    fn floor_now(&self, active: usize) -> usize {
        (self.budget() / active).clamp(self.floor.min(WAKE_AT), self.floor)
    }
}

/// The sending half of one stream.
#[derive(Debug)]
pub struct SendBuf {
    /// The stream bytes `head..write_offset`, as a ring: released bytes leave the front without
    /// moving the rest, and the storage never exceeds the stream's capacity.
    buf: VecDeque<u8>,
    /// Lowest offset not yet acknowledged; everything below is released.
    head: u64,
    write_offset: u64,
    /// End of the bytes sent at least once.
    sent: u64,
    capacity: usize,
    max_data: u64,
    /// Acknowledged ranges above `head` (acks may arrive out of order).
    acked: RangeSet,
    /// Lost ranges to send again: a subset of `head..sent` minus `acked`.
    lost: RangeSet,
    finished: bool,
    /// The FIN must be (re)sent.
    fin_pending: bool,
    /// The FIN was sent at least once.
    fin_sent: bool,
    fin_acked: bool,
    retain_unacked: bool,
    reset: bool,
    /// The session's send budget, if any.
    account: Option<Arc<SendAccount>>,
}

impl Drop for SendBuf {
    fn drop(&mut self) {
        if let Some(account) = &self.account {
            account.update(self.buffered(), 0);
        }
    }
}

impl SendBuf {
    /// `capacity`: the most bytes the application may have buffered (written but not yet
    /// released by an acknowledgement).
    pub fn new(capacity: usize) -> Self {
        Self {
            buf: VecDeque::new(),
            head: 0,
            write_offset: 0,
            sent: 0,
            capacity,
            max_data: INITIAL_MAX_STREAM_DATA,
            acked: RangeSet::new(),
            lost: RangeSet::new(),
            finished: false,
            fin_pending: false,
            fin_sent: false,
            fin_acked: false,
            retain_unacked: true,
            reset: false,
            account: None,
        }
    }

    /// Shares the session's send budget: [`writable`](Self::writable) is also bounded by this
    /// stream's share of it. Call before the first write.
    pub fn set_account(&mut self, account: Arc<SendAccount>) {
        debug_assert_eq!(self.buffered(), 0, "set_account after writes");
        self.account = Some(account);
    }

    /// The session's send budget, not this stream's own capacity, is what limits writes now.
    pub fn budget_limited(&self) -> bool {
        let own = self.own_room();
        self.account.as_ref().is_some_and(|a| a.room(self.buffered()) < own)
    }

    /// The budget's total (the other streams' bytes), not this stream's share or its own
    /// capacity, is what limits writes now: room comes back when any stream is acknowledged.
    /// A stream held back by its share alone gets room back only from acknowledgements of its
    /// own bytes, so the session need not look at it on anyone else's.
    pub fn total_limited(&self) -> bool {
        self.budget_limited()
            && self.account.as_ref().is_some_and(|a| {
                let (by_share, by_total) = a.limits(self.buffered());
                by_total < by_share
            })
    }

    /// Reports a change of `buffered()` from `before` to the session's account.
    fn account_update(&self, before: usize) {
        if let Some(account) = &self.account {
            account.update(before, self.buffered());
        }
    }

    /// Copies as much of `data` as fits; returns the number of bytes taken (0 when full,
    /// finished or reset).
    pub fn write(&mut self, data: &[u8]) -> usize {
        let writable = self.writable();
        let n = data.len().min(writable);
        if n == 0 {
            return 0;
        }
        let before = self.buffered();
        let need = self.buf.len() + n;
        if need > self.buf.capacity() {
            // Grow by doubling, but never past what the stream may hold now: its capacity, and
            // its share of the session's send budget (`need` is within both). Doubling past
            // the share left each of 1000 streams a ring of up to twice it, which the budget
            // did not count.
            let limit = self.buf.len() + writable;
            let target = (2 * self.buf.capacity()).max(MIN_ALLOC).min(self.capacity).min(limit).max(need);
            self.buf.reserve_exact(target - self.buf.len());
        }
        self.buf.extend(&data[..n]);
        self.write_offset += n as u64;
        self.account_update(before);
        n
    }

    /// Marks the end of the stream. Idempotent.
    pub fn finish(&mut self) {
        if !self.finished && !self.reset {
            self.finished = true;
            self.fin_pending = true;
        }
    }

    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// Raises the peer's flow control limit (lower values are stale and ignored).
    pub fn set_max_data(&mut self, max: u64) {
        self.max_data = self.max_data.max(max);
    }

    pub fn max_data(&self) -> u64 {
        self.max_data
    }

    /// Bytes that could be sent now: lost bytes (which were within flow control when first
    /// sent, so are not limited again) plus new bytes allowed by flow control.
    pub fn sendable(&self) -> usize {
        let new = self.new_end().saturating_sub(self.sent);
        (self.lost.covered() + new) as usize
    }

    /// New data is waiting only for the peer's flow control credit.
    pub fn is_blocked(&self) -> bool {
        !self.reset && self.sent < self.write_offset && self.sent >= self.max_data
    }

    /// Everything written (and the FIN, if finished) has been sent at least once and nothing is
    /// waiting for retransmission, whatever the flow-control credit. A graceful close waits for
    /// this: data blocked on credit is not "sent".
    pub fn is_all_sent(&self) -> bool {
        self.reset || (self.lost.is_empty() && self.sent >= self.write_offset && !self.fin_pending)
    }

    /// Whether [`next_chunk`](Self::next_chunk) would return something (for `max_len > 0`).
    pub fn has_pending(&self) -> bool {
        !self.lost.is_empty() || self.sent < self.new_end() || self.fin_only()
    }

    /// The next chunk to put in a record: `(offset, bytes, fin)`, with at most `max_len` bytes.
    /// Lost ranges come first, lowest offset first, then new data, then a FIN-only chunk.
    /// `fin` is set when the chunk ends at the final size and the FIN still has to be sent.
    /// Changes nothing: call [`mark_sent`](Self::mark_sent) once the record is sealed, so a
    /// failed seal loses nothing.
    pub fn next_chunk(&self, max_len: usize) -> Option<(u64, &[u8], bool)> {
        let range = if let Some(lost) = self.lost.first() {
            lost
        } else if self.sent < self.new_end() {
            self.sent..self.new_end()
        } else if self.fin_only() {
            return Some((self.write_offset, &[], true));
        } else {
            return None;
        };
        let len = (range.end - range.start).min(max_len as u64);
        let end = range.start + len;
        let fin = self.fin_pending && end == self.write_offset;
        if len == 0 && !fin {
            return None;
        }
        // The ring's two halves: a chunk stops where the first one ends (the caller asks again).
        let from = (range.start - self.head) as usize;
        let (front, back) = self.buf.as_slices();
        let bytes = if from < front.len() {
            &front[from..(from + len as usize).min(front.len())]
        } else {
            let at = from - front.len();
            back.get(at..at + len as usize).unwrap_or_default()
        };
        let end = range.start + bytes.len() as u64;
        let fin = fin && end == self.write_offset;
        Some((range.start, bytes, fin))
    }

    /// As [`next_chunk`](Self::next_chunk), but a chunk that the ring's wrap-around would cut
    /// goes on in a second slice (`offset`, first part, second part, `fin`), so that a record
    /// is not cut short where the storage happens to wrap.
    pub fn next_chunk_split(&self, max_len: usize) -> Option<(u64, &[u8], &[u8], bool)> {
        let (offset, first, fin) = self.next_chunk(max_len)?;
        let wanted =
            if let Some(lost) = self.lost.first() { lost.end - offset } else { self.new_end().saturating_sub(offset) }
                .min(max_len as u64) as usize;
        // A first part of half a record or more goes alone (a record a little short costs
        // less than copying the rest); a smaller one is completed from the ring's start.
        if fin || first.len() >= wanted || first.len() >= SPLIT_COPY_BELOW {
            return Some((offset, first, &[], fin));
        }
        let (front, back) = self.buf.as_slices();
        let from = (offset - self.head) as usize;
        if from + first.len() != front.len() {
            return Some((offset, first, &[], fin));
        }
        let second = &back[..(wanted - first.len()).min(back.len())];
        let end = offset + (first.len() + second.len()) as u64;
        let fin = self.fin_pending && end == self.write_offset;
        Some((offset, first, second, fin))
    }

    /// The chunk `offset..offset + len` (with `fin`) was sealed into a record.
    pub fn mark_sent(&mut self, offset: u64, len: usize, fin: bool) {
        if self.reset {
            return;
        }
        let range = self.clip(offset, len, self.write_offset);
        debug_assert!(range.start <= self.sent, "mark_sent past unsent bytes");
        self.lost.remove(range.clone());
        self.sent = self.sent.max(range.end);
        if fin && self.finished && range.end == self.write_offset {
            self.fin_pending = false;
            self.fin_sent = true;
        }
        if !self.retain_unacked {
            self.ack(offset, len, fin);
        }
    }

    /// The range was acknowledged. Acks may arrive in any order; storage is released as the
    /// lowest unacknowledged offset advances.
    pub fn ack(&mut self, offset: u64, len: usize, fin: bool) {
        if self.reset {
            return;
        }
        let range = self.clip(offset, len, self.sent);
        if !range.is_empty() {
            self.lost.remove(range.clone());
            self.acked.insert(range);
            if let Some(first) = self.acked.first().filter(|r| r.start == self.head) {
                self.acked.pop_first();
                self.release(first.end);
            }
        }
        if fin && self.fin_sent {
            self.fin_acked = true;
            self.fin_pending = false;
        }
    }

    /// With `false` (sessions without ACKs), sent bytes are released at once: `mark_sent` also
    /// acknowledges. Default `true`.
    pub fn set_retain_unacked(&mut self, retain: bool) {
        self.retain_unacked = retain;
    }

    /// The range was lost with its connection: queues the parts not yet acknowledged for
    /// sending again, and the FIN too if `fin` and it was not acknowledged.
    pub fn retransmit(&mut self, offset: u64, len: usize, fin: bool) {
        if self.reset {
            return;
        }
        let range = self.clip(offset, len, self.sent);
        for gap in self.acked.gaps(range) {
            self.lost.insert(gap);
        }
        if fin && self.fin_sent && !self.fin_acked {
            self.fin_pending = true;
        }
    }

    /// Bytes the application may write now (0 once finished or reset): within the stream's
    /// capacity and, with a session account, within its share of the send budget.
    pub fn writable(&self) -> usize {
        let own = self.own_room();
        match &self.account {
            Some(account) if own > 0 => own.min(account.room(self.buffered())),
            _ => own,
        }
    }

    /// Whether a writer that found this buffer full should be told it may write again: once
    /// it can take a record's worth ([`WAKE_AT`]), or everything its own capacity allows (the
    /// session's budget is not what limits it). A bulk writer held back by the budget is
    /// woken once per record or more, not for every acknowledged sliver. A stream holding
    /// less than a record with nothing in flight is always worth waking: the budget's floor
    /// (two records) leaves it more than a record of room.
    pub fn worth_waking(&self) -> bool {
        let writable = self.writable();
        writable > 0 && (writable >= WAKE_AT || writable >= self.own_room())
    }

    fn own_room(&self) -> usize {
        if self.finished || self.reset {
            return 0;
        }
        self.capacity.saturating_sub(self.buffered())
    }

    /// New bytes are held back by the peer's flow control: only its credit lets them go.
    pub fn credit_limited(&self) -> bool {
        self.write_offset > self.max_data
    }

    /// Lost bytes wait to be sent again.
    pub fn has_lost(&self) -> bool {
        !self.lost.is_empty()
    }

    /// Bytes sealed at least once and not yet acknowledged (released when they are).
    pub fn in_flight(&self) -> usize {
        (self.sent - self.head) as usize
    }

    /// Offset of the next byte the application writes (= bytes written so far).
    pub fn write_offset(&self) -> u64 {
        self.write_offset
    }

    /// Everything written, the FIN sent, and all of it acknowledged. A reset stream is never
    /// done; see [`is_reset`](Self::is_reset).
    pub fn is_done(&self) -> bool {
        self.finished && self.fin_acked && self.head == self.write_offset && !self.reset
    }

    /// Drops everything (a Stream Reset is being sent); returns its final size: the end of
    /// the bytes sent at least once (PROTOCOL.md §4.1). Bytes written but never sent, such as
    /// those held back by the peer's flow control, are not part of the stream: counting them
    /// would state a final size beyond the peer's limit, which it must treat as a fatal
    /// flow-control error.
    pub fn reset(&mut self) -> u64 {
        let before = self.buffered();
        let final_size = self.sent;
        self.reset = true;
        self.buf = VecDeque::new();
        self.write_offset = final_size;
        self.head = final_size;
        self.acked.clear();
        self.lost.clear();
        self.fin_pending = false;
        self.account_update(before);
        final_size
    }

    #[cfg(test)]
    pub fn is_reset(&self) -> bool {
        self.reset
    }

    /// End of the bytes sent at least once (flow control and the scheduler let them out).
    pub fn sent_offset(&self) -> u64 {
        self.sent
    }

    /// Lowest offset not yet acknowledged: every byte below it was acknowledged.
    pub fn acked_offset(&self) -> u64 {
        self.head
    }

    /// Bytes currently held (written and not yet released).
    pub fn buffered(&self) -> usize {
        (self.write_offset - self.head) as usize
    }

    #[cfg(test)]
    /// Bytes of memory allocated for the data.
    pub fn allocated(&self) -> usize {
        self.buf.capacity()
    }

    /// End of the new bytes flow control lets us send.
    fn new_end(&self) -> u64 {
        self.write_offset.min(self.max_data)
    }

    /// A FIN with no data before it left to send.
    fn fin_only(&self) -> bool {
        self.fin_pending && self.sent == self.write_offset
    }

    /// `offset..offset + len` clipped to `head..end`.
    fn clip(&self, offset: u64, len: usize, end: u64) -> Range<u64> {
        let to = offset.saturating_add(len as u64).min(end);
        let from = offset.max(self.head).min(to);
        from..to
    }

    /// Releases the bytes below `new_head`.
    fn release(&mut self, new_head: u64) {
        let before = self.buffered();
        let n = ((new_head - self.head) as usize).min(self.buf.len());
        // Keep the allocation: a bulk writer refills it at once. `release_if_idle` frees it.
        // A small one (small writes) is freed once everything is acknowledged, so that a
        // quiet stream holds none.
        self.buf.drain(..n);
        if self.buf.is_empty() && self.buf.capacity() <= MIN_ALLOC {
            self.buf = VecDeque::new();
        }
        self.head = new_head;
        self.account_update(before);
        // ... unless the stream's share of the send budget has shrunk far below it (a stream
        // that wrote alone at first and now shares the budget with many): give back the rest.
        if let Some(account) = &self.account {
            let buffered = self.buffered();
            let limit = (buffered + account.room(buffered)).min(self.capacity).max(MIN_ALLOC);
            if self.buf.capacity() >= 4 * limit {
                self.buf.shrink_to((2 * limit).max(buffered));
            }
        }
    }

    /// Frees the storage when nothing is buffered and it is larger than the initial window.
    pub fn release_if_idle(&mut self) -> bool {
        if self.releasable() > 0 {
            self.buf = VecDeque::new();
            return true;
        }
        false
    }

    /// Bytes [`SendBuf::release_if_idle`] would free now.
    pub fn releasable(&self) -> usize {
        if self.buf.is_empty() && self.buf.capacity() > RETAIN {
            self.buf.capacity()
        } else {
            0
        }
    }
}
