//! The session's streams: each stream's state ([`Stream`]) and the part that owns them all
//! ([`Streams`]): the map, stream IDs, the accept queue, the ready queue of the deficit round
//! robin (`packetize.rs`), the shared send budget and the receive budget's bookkeeping.
//!
//! What streams tell the application (events) is in `stream_api.rs`, with the application's
//! stream calls; credit and the receive budget's rules are in `credit.rs`.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use crate::config::SessionConfig;
use crate::event::StreamId;
use crate::stream::{RangeSet, SendAccount, INITIAL_MAX_STREAM_DATA};

use super::send_budget::SendBudgetRule;
use super::side::Side;
use id_hash::StreamIdHash;
pub(super) use stream::Stream;
use stream::{Marks, STREAM_STATE_CHARGE};

mod id_hash;
mod stream;

/// What a newly opened stream is charged: its 64 KiB initial window and its state.
pub(super) const NEW_STREAM_CHARGE: u64 = INITIAL_MAX_STREAM_DATA + STREAM_STATE_CHARGE;

/// Most ranges of refused stream IDs remembered until a frame for one of them is answered;
/// beyond, the lowest range is forgotten (its streams then get no Stream Reset: only a peer
/// that opened far more streams than allowed, in a scattered order, gets there).
const MAX_REFUSED_RANGES: usize = 4096;

/// Every stream of the session and the queues and budgets over them.
#[derive(Debug)]
pub(super) struct Streams {
    side: Side,
    map: HashMap<StreamId, Stream, StreamIdHash>,
    /// Next stream ID we open.
    next_local: StreamId,
    /// Lowest peer stream ID not seen yet (peer streams open in order, PROTOCOL.md §4).
    next_peer: u64,
    /// Peer-initiated streams open now (the concurrency limit counts these).
    peer_open: usize,
    /// Peer streams not yet accepted by the application.
    accept_queue: VecDeque<StreamId>,
    /// Streams that may have something to send, in round-robin order.
    ready: VecDeque<StreamId>,
    /// Deficit round robin (`packetize.rs`): the stream at the front of `ready` and the stream
    /// bytes sealed for it in its current turn.
    turn: (StreamId, usize),
    /// The streams' shared send budget (`SessionConfig::send_budget`).
    send_account: Arc<SendAccount>,
    /// Streams whose writes the send budget held back, told when it frees up.
    budget_blocked: VecDeque<StreamId>,
    /// Streams due for credit that the receive budget held back (`credit.rs`).
    credit_starved: BTreeSet<StreamId>,
    /// Peer stream IDs refused over our limits whose Stream Reset is not sent yet (each is
    /// answered when a frame names it).
    refused: RangeSet,
    /// Bytes of plain TLS application data received (the offset of fallback stream 0).
    fallback_received: u64,
    /// The receive budget in use ([`Streams::receive_charged`]), as of the last count of each
    /// stream: streams handed out mutably since (`Charge::dirty`, listed in `dirty`, or all of
    /// them after `values_mut`) are counted again at the next call, so that the sum costs
    /// what changed rather than every stream on every read (1000 streams: 11% of a receiver).
    charged: u64,
    dirty: Vec<StreamId>,
    all_dirty: bool,
}

impl Streams {
    pub(super) fn new(side: Side, config: &SessionConfig) -> Self {
        let (next_local, next_peer) = match side {
            Side::Client => (0, 1),
            Side::Server => (1, 0),
        };
        Self {
            side,
            map: HashMap::with_hasher(StreamIdHash::new()),
            next_local,
            next_peer,
            peer_open: 0,
            accept_queue: VecDeque::new(),
            ready: VecDeque::new(),
            turn: (0, 0),
            send_account: SendAccount::new(SendBudgetRule::new(config).initial(), crate::config::SEND_FLOOR),
            budget_blocked: VecDeque::new(),
            credit_starved: BTreeSet::new(),
            refused: RangeSet::new(),
            fallback_received: 0,
            charged: 0,
            dirty: Vec::new(),
            all_dirty: false,
        }
    }

    // ---------------------------------------------------------------- the streams

    pub(super) fn get(&self, id: StreamId) -> Option<&Stream> {
        self.map.get(&id)
    }

    /// The stream, to change: its receive charge is counted again at the next
    /// [`Streams::receive_charged`].
    pub(super) fn get_mut(&mut self, id: StreamId) -> Option<&mut Stream> {
        let listed_enough = self.dirty.len() > 2 * self.map.len() + 64;
        let s = self.map.get_mut(&id)?;
        if !s.charge.dirty && !self.all_dirty {
            s.charge.dirty = true;
            if listed_enough {
                // Streams removed while listed stay listed until the next count: when that
                // count is long in coming, recount everything instead of growing the list.
                self.dirty.clear();
                self.all_dirty = true;
            } else {
                self.dirty.push(id);
            }
        }
        Some(s)
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (StreamId, &Stream)> {
        self.map.iter().map(|(id, s)| (*id, s))
    }

    pub(super) fn values(&self) -> impl Iterator<Item = &Stream> {
        self.map.values()
    }

    pub(super) fn values_mut(&mut self) -> impl Iterator<Item = &mut Stream> {
        self.all_dirty = true;
        self.map.values_mut()
    }

    pub(super) fn ids(&self) -> Vec<StreamId> {
        self.map.keys().copied().collect()
    }

    pub(super) fn len(&self) -> usize {
        self.map.len()
    }

    /// A new stream enters the session; a peer's also waits to be accepted.
    pub(super) fn insert(&mut self, id: StreamId, mut stream: Stream) {
        if stream.peer_initiated {
            self.peer_open += 1;
            self.accept_queue.push_back(id);
        }
        stream.charge.counted = stream.receive_charge();
        stream.charge.dirty = false;
        self.charged = self.charged.saturating_add(stream.charge.counted);
        if let Some(old) = self.map.insert(id, stream) {
            self.charged = self.charged.saturating_sub(old.charge.counted);
        }
    }

    /// Forgets a stream once both halves are over.
    pub(super) fn remove_if_done(&mut self, id: StreamId) {
        let Some(s) = self.map.get(&id) else { return };
        if s.is_done() {
            if s.peer_initiated {
                self.peer_open = self.peer_open.saturating_sub(1);
            }
            if let Some(s) = self.map.remove(&id) {
                self.charged = self.charged.saturating_sub(s.charge.counted);
            }
        }
    }

    /// A stream the peer opened that the application has not accepted yet.
    pub(super) fn accept(&mut self) -> Option<StreamId> {
        self.accept_queue.pop_front()
    }

    // ---------------------------------------------------------------- stream IDs

    /// `id` is of the kind we open (even for a client, odd for a server).
    pub(super) fn is_local(&self, id: StreamId) -> bool {
        (id % 2 == 0) == (self.side == Side::Client)
    }

    /// A locally-initiated ID we never opened (it cannot appear in a peer's frame).
    pub(super) fn never_opened(&self, id: StreamId) -> bool {
        self.is_local(id) && id >= self.next_local
    }

    /// The ID our next stream gets.
    pub(super) fn next_local_id(&self) -> StreamId {
        self.next_local
    }

    /// Takes the next local stream ID (`None` once they run out).
    pub(super) fn allocate_local(&mut self) -> Option<StreamId> {
        let id = self.next_local;
        self.next_local = id.checked_add(2)?;
        Some(id)
    }

    /// Streams we opened that are still known.
    pub(super) fn local_open(&self) -> usize {
        self.map.values().filter(|s| !s.peer_initiated).count()
    }

    /// Lowest peer stream ID not seen yet.
    pub(super) fn next_peer(&self) -> u64 {
        self.next_peer
    }

    pub(super) fn set_next_peer(&mut self, next: u64) {
        self.next_peer = next;
    }

    pub(super) fn peer_open(&self) -> usize {
        self.peer_open
    }

    /// Peer streams `ids` (one parity) are refused; each is owed a Stream Reset when a frame
    /// names it ([`Streams::answer_refused`]).
    pub(super) fn refuse(&mut self, ids: std::ops::Range<u64>) {
        self.refused.insert(ids);
        while self.refused.len() > MAX_REFUSED_RANGES {
            self.refused.pop_first();
        }
    }

    /// A frame named peer stream `id`: true (once) if it was refused and not answered yet.
    pub(super) fn answer_refused(&mut self, id: StreamId) -> bool {
        let id64 = u64::from(id);
        if !self.is_local(id) && self.refused.contains(id64) {
            self.refused.remove(id64..id64 + 1);
            return true;
        }
        false
    }

    // ---------------------------------------------------------------- the ready queue

    /// Puts a stream in the round robin of streams with something to send.
    pub(super) fn schedule(&mut self, id: StreamId) {
        if let Some(s) = self.map.get_mut(&id) {
            if !s.marks.has(Marks::QUEUED) && s.send.has_pending() {
                s.marks.set(Marks::QUEUED);
                self.ready.push_back(id);
            }
        }
    }

    pub(super) fn has_ready(&self) -> bool {
        !self.ready.is_empty()
    }

    pub(super) fn ready_len(&self) -> usize {
        self.ready.len()
    }

    /// The streams queued after the front one, in order.
    pub(super) fn ready_after_front(&self) -> impl Iterator<Item = &StreamId> {
        self.ready.iter().skip(1)
    }

    /// The next stream with data it may send now, in round-robin order (it stays at the front).
    pub(super) fn next_ready(&mut self) -> Option<StreamId> {
        while let Some(&id) = self.ready.front() {
            match self.map.get_mut(&id) {
                Some(s) if s.send.has_pending() && !s.send_reset() => {
                    if self.turn.0 != id {
                        self.turn = (id, 0);
                    }
                    return Some(id);
                }
                Some(s) => {
                    s.marks.clear(Marks::QUEUED);
                    self.ready.pop_front();
                    // Being queued was all that kept a reset stream whose end was read.
                    self.remove_if_done(id);
                }
                None => {
                    self.ready.pop_front();
                }
            }
        }
        None
    }

    /// The front stream's turn is over (the next one starts afresh).
    pub(super) fn end_turn(&mut self) {
        self.turn.1 = 0;
        if let Some(&next) = self.ready.get(1) {
            self.turn.0 = next;
        }
    }

    /// The front stream leaves the round robin until [`schedule`](Self::schedule) puts it back:
    /// all it has is a short tail that only its own events complete or release (its writer's
    /// next write, the acknowledgement of its bytes in flight, a loss, credit, its FIN), and
    /// each of those schedules it. Kept in the queue instead, every pass would look at it
    /// again: with many such streams each pass became a scan of all of them.
    pub(super) fn park_front(&mut self) {
        self.end_turn();
        if let Some(id) = self.ready.pop_front() {
            if let Some(s) = self.map.get_mut(&id) {
                s.marks.clear(Marks::QUEUED);
            }
        }
    }

    /// The front stream lets the others go first (its turn ends, it goes to the back).
    pub(super) fn skip_front(&mut self) {
        self.end_turn();
        self.ready.rotate_left(1);
    }

    /// The stream whose turn it is, and the bytes sealed for it in this turn.
    pub(super) fn turn(&self) -> (StreamId, usize) {
        self.turn
    }

    /// `len` more bytes of `id` were sealed in its turn; returns the turn's total.
    pub(super) fn add_to_turn(&mut self, id: StreamId, len: usize) -> usize {
        if self.turn.0 == id {
            self.turn.1 += len;
        } else {
            self.turn = (id, len);
        }
        self.turn.1
    }

    /// The front stream (`id`) leaves the front: to the back while it has more to send.
    pub(super) fn requeue_front(&mut self, id: StreamId) {
        self.ready.pop_front();
        if let Some(s) = self.map.get_mut(&id) {
            if s.send.has_pending() {
                self.ready.push_back(id);
            } else {
                s.marks.clear(Marks::QUEUED);
            }
        }
    }

    // ---------------------------------------------------------------- budgets

    /// The send budget shared by the streams' send buffers.
    pub(super) fn send_account(&self) -> &Arc<SendAccount> {
        &self.send_account
    }

    /// Bytes held by the streams' send buffers (what the send budget bounds).
    pub(super) fn send_buffered(&self) -> usize {
        self.send_account.bytes()
    }

    /// The send budget, not the stream's buffer, held back a write of `id`: it is told when
    /// the budget frees up ([`Streams::wake_budget_blocked`]).
    pub(super) fn block_on_budget(&mut self, id: StreamId) {
        if let Some(s) = self.map.get_mut(&id) {
            if s.marks.set(Marks::BUDGET_WAITING) {
                self.budget_blocked.push_back(id);
            }
        }
    }

    /// Streams held back by the send budget, oldest first: `writable` is called for those that
    /// may write now; a few that still may not go to the back, so that one stream over its
    /// share does not hold up the others. Bounded work per call.
    pub(super) fn wake_budget_blocked(&mut self, mut writable: impl FnMut(StreamId)) {
        const LOOK: usize = 8;
        // A stream waits here only once it holds at least its floor, so while the budget is
        // spent none of them may write (the common case under load: no lookups).
        if self.budget_blocked.is_empty() || self.send_account.bytes() >= self.send_account.budget() {
            return;
        }
        let mut looked = 0;
        while looked < LOOK {
            let Some(&id) = self.budget_blocked.front() else { return };
            looked += 1;
            let Some(s) = self.map.get_mut(&id) else {
                self.budget_blocked.pop_front();
                continue;
            };
            if !s.marks.has(Marks::WRITE_BLOCKED) || s.send.worth_waking() || s.send_reset() {
                self.budget_blocked.pop_front();
                s.marks.clear(Marks::BUDGET_WAITING);
                if s.marks.clear(Marks::WRITE_BLOCKED) {
                    writable(id);
                }
            } else {
                self.budget_blocked.rotate_left(1);
            }
        }
    }

    /// The send budget grew: every writer that found its stream full and may now write a
    /// record's worth is told (`writable`), those held back by their share as well as those
    /// held back by the total. A walk over the streams, done only when the budget grows (at
    /// most once per path report).
    /// Those in the budget's queue stay there: it drops them when it finds them writable.
    pub(super) fn wake_writers_after_growth(&mut self, mut writable: impl FnMut(StreamId)) {
        for (id, s) in self.map.iter_mut() {
            if s.take_writable_wake() {
                writable(*id);
            }
        }
    }

    /// The receive budget in use: the sum of every stream's [`Stream::receive_charge`]
    /// (counting again only the streams changed since the last call).
    pub(super) fn receive_charged(&mut self) -> u64 {
        if self.all_dirty {
            self.all_dirty = false;
            self.dirty.clear();
            self.charged = 0;
            for s in self.map.values_mut() {
                s.charge.counted = s.receive_charge();
                s.charge.dirty = false;
                self.charged = self.charged.saturating_add(s.charge.counted);
            }
        } else {
            for id in self.dirty.drain(..) {
                if let Some(s) = self.map.get_mut(&id) {
                    let now = s.receive_charge();
                    self.charged = self.charged.saturating_sub(s.charge.counted).saturating_add(now);
                    s.charge.counted = now;
                    s.charge.dirty = false;
                }
            }
        }
        debug_assert_eq!(self.charged, self.map.values().map(Stream::receive_charge).sum::<u64>());
        self.charged
    }

    /// `id` is due for credit that the receive budget held back.
    pub(super) fn starve(&mut self, id: StreamId) {
        self.credit_starved.insert(id);
    }

    /// The streams held back by the receive budget, to retry.
    pub(super) fn take_starved(&mut self) -> BTreeSet<StreamId> {
        std::mem::take(&mut self.credit_starved)
    }

    // ---------------------------------------------------------------- plain TLS fallback

    /// Bytes of the plain TLS byte stream received so far (stream 0's next offset).
    pub(super) fn fallback_received(&self) -> u64 {
        self.fallback_received
    }

    pub(super) fn add_fallback_received(&mut self, n: usize) {
        self.fallback_received += n as u64;
    }
}
