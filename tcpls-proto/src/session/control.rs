//! Control frames waiting for a record.
//!
//! Frames are encoded when queued (they are small and rare next to stream data) and placed
//! after the stream data of the next record that has room, so they rarely need a record of
//! their own.

use std::collections::VecDeque;

use crate::event::{ConnId, StreamId};
use crate::frame::{Frame, FrameType};

use crate::stream::RESET_REFUSED;

#[derive(Debug)]
struct Queued {
    /// Must travel on this connection (e.g. RTT Echo); None: any connection.
    conn: Option<ConnId>,
    bytes: Vec<u8>,
}

#[derive(Debug, Default)]
pub(super) struct ControlQueue {
    frames: VecDeque<Queued>,
    // The two kinds of frames below answer a peer's frames one for one, so a hostile peer
    // could have us queue them by the million: they are kept compact, and encoded only when a
    // record has room for them.
    /// ACKs to send, at most one per connection: only the highest sequence number matters, so a
    /// flood of Pings costs one entry.
    /// The flag says the ACK must travel on the connection it acknowledges (it answers a Ping:
    /// a keepalive proves only the connection it came back on).
    acks: Vec<(ConnId, u64, bool)>,
    /// Peer streams refused over our concurrency limit (PROTOCOL.md §4.3), as ranges
    /// `(first, last)` of IDs of one parity, each owed a Stream Reset 0x1. A single Stream
    /// frame may refuse thousands of streams (every lower ID it opens).
    refused: VecDeque<(StreamId, StreamId)>,
    /// Answers to the peer's probes (RTT Echo, Address Echo, TCP Info), at most one per kind
    /// and connection asked about: a newer answer replaces the queued one, so a flood of probes
    /// costs one answer per record we send, never one per probe (no amplifier).
    answers: Vec<Answer>,
    /// Connections that carry the ACKs of their own records (`Session::route_acks`); the ACKs
    /// of any other connection travel on any connection.
    ack_homes: Vec<ConnId>,
}

#[derive(Debug)]
struct Answer {
    /// Frame type and the connection the answer is about.
    key: (FrameType, ConnId),
    conn: Option<ConnId>,
    bytes: Vec<u8>,
}

impl ControlQueue {
    pub(super) fn push(&mut self, frame: &Frame<'_>, conn: Option<ConnId>) {
        let mut bytes = Vec::with_capacity(frame.encoded_len());
        frame.encode(&mut bytes);
        self.frames.push_back(Queued { conn, bytes });
    }

    /// Queues an answer to a probe about connection `about`, to travel on `conn` (or any),
    /// replacing a queued answer of the same kind about the same connection.
    pub(super) fn push_answer(&mut self, frame: &Frame<'_>, about: ConnId, conn: Option<ConnId>) {
        let mut bytes = Vec::with_capacity(frame.encoded_len());
        frame.encode(&mut bytes);
        let key = (frame.frame_type(), about);
        match self.answers.iter_mut().find(|a| a.key == key) {
            Some(a) => *a = Answer { key, conn, bytes },
            None => self.answers.push(Answer { key, conn, bytes }),
        }
    }

    /// Queues an ACK of record `seq` of connection `conn` (answering a Ping), or raises the one
    /// already queued for that connection.
    pub(super) fn push_ack(&mut self, conn: ConnId, seq: u64) {
        self.push_ack_bound(conn, seq, false);
    }

    /// Same, for an ACK that must go back on `conn` itself (the answer to a Ping).
    pub(super) fn push_ack_bound(&mut self, conn: ConnId, seq: u64, bound: bool) {
        match self.acks.iter_mut().find(|(c, _, _)| *c == conn) {
            Some((_, highest, b)) => {
                *highest = (*highest).max(seq);
                *b |= bound;
            }
            None => self.acks.push((conn, seq, bound)),
        }
    }

    /// Queues Stream Reset 0x1 (refused) for the peer streams `first..=last` (one parity).
    pub(super) fn push_refused(&mut self, first: StreamId, last: StreamId) {
        match self.refused.back_mut() {
            Some((_, end)) if end.checked_add(2) == Some(first) => *end = last,
            _ => self.refused.push_back((first, last)),
        }
    }

    /// Entries held (a range of refusals or a coalesced ACK counts as one): what the queue's
    /// memory grows with.
    pub(super) fn entries(&self) -> usize {
        self.frames.len() + self.acks.len() + self.refused.len() + self.answers.len()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.frames.is_empty() && self.acks.is_empty() && self.refused.is_empty() && self.answers.is_empty()
    }

    /// Sets the connections that carry their own ACKs.
    pub(super) fn set_ack_homes(&mut self, homes: impl Iterator<Item = ConnId>) {
        self.ack_homes.clear();
        self.ack_homes.extend(homes);
    }

    /// Whether the ACK of `acked`'s records may travel on `conn`: on its own connection, or
    /// anywhere when that cannot carry it (or must not: `bound` to it, it answers a Ping).
    fn ack_may_travel(&self, acked: ConnId, bound: bool, conn: ConnId) -> bool {
        acked == conn || (!bound && !self.ack_homes.contains(&acked))
    }

    /// Whether a frame bound to `conn` is waiting (what a suspect connection carries: its probe
    /// and the answers that must travel on it).
    pub(super) fn has_bound_for(&self, conn: ConnId) -> bool {
        self.acks.iter().any(|(c, _, bound)| *bound && *c == conn)
            || self.frames.iter().any(|f| f.conn == Some(conn))
            || self.answers.iter().any(|a| a.conn == Some(conn))
    }

    /// Whether something is waiting that `conn` may carry.
    pub(super) fn has_for(&self, conn: ConnId) -> bool {
        self.acks.iter().any(|(c, _, bound)| self.ack_may_travel(*c, *bound, conn))
            || !self.refused.is_empty()
            || self.frames.iter().any(|f| f.conn.is_none_or(|c| c == conn))
            || self.answers.iter().any(|a| a.conn.is_none_or(|c| c == conn))
    }

    /// Appends to `out` the queued frames `conn` may carry, in order, while they fit in
    /// `budget` bytes. Returns the number of bytes appended.
    pub(super) fn take_into(&mut self, conn: ConnId, budget: usize, out: &mut Vec<u8>) -> usize {
        self.take_into_filtered(conn, budget, out, false)
    }

    /// Same, only the frames bound to `conn` when `bound_only`.
    pub(super) fn take_into_filtered(
        &mut self,
        conn: ConnId,
        budget: usize,
        out: &mut Vec<u8>,
        bound_only: bool,
    ) -> usize {
        let mut used = 0;
        // ACKs and refusals may travel on any connection.
        let mut i = 0;
        while i < self.acks.len() {
            let (connection_id, highest_record_seq, bound) = self.acks[i];
            let ack = Frame::Ack { connection_id, highest_record_seq };
            let allowed = if bound_only {
                bound && connection_id == conn
            } else {
                self.ack_may_travel(connection_id, bound, conn)
            };
            if !allowed || used + ack.encoded_len() > budget {
                i += 1;
                continue;
            }
            used += ack.encoded_len();
            ack.encode(out);
            self.acks.swap_remove(i);
        }
        while let Some((first, last)) = self.refused.front_mut().filter(|_| !bound_only) {
            let reset = Frame::StreamReset { stream_id: *first, final_size: 0, error_code: RESET_REFUSED };
            if used + reset.encoded_len() > budget {
                break;
            }
            used += reset.encoded_len();
            reset.encode(out);
            match first.checked_add(2) {
                Some(next) if next <= *last => *first = next,
                _ => {
                    self.refused.pop_front();
                }
            }
        }
        let mut i = 0;
        while i < self.answers.len() {
            let a = &self.answers[i];
            let allowed = if bound_only { a.conn == Some(conn) } else { a.conn.is_none_or(|c| c == conn) };
            if allowed && used + a.bytes.len() <= budget {
                used += a.bytes.len();
                out.extend_from_slice(&a.bytes);
                self.answers.swap_remove(i);
            } else {
                i += 1;
            }
        }
        let mut i = 0;
        while i < self.frames.len() {
            let f = &self.frames[i];
            let allowed = if bound_only { f.conn == Some(conn) } else { f.conn.is_none_or(|c| c == conn) };
            if allowed && used + f.bytes.len() <= budget {
                used += f.bytes.len();
                out.extend_from_slice(&f.bytes);
                self.frames.remove(i);
            } else {
                i += 1;
            }
        }
        used
    }

    /// A connection ended: frames bound to it either move to any connection (those that say
    /// something about the session: New Token, Stream Steer) or are dropped (answers that only
    /// mean something on that connection: RTT Echo, Address Echo, Join). Without this, a frame
    /// waiting for a dead connection would keep `close` from finishing and count against the
    /// backlog limit for ever.
    pub(super) fn forget_conn(&mut self, conn: ConnId) {
        self.acks.retain(|(c, _, bound)| !(*bound && *c == conn));
        self.answers.retain(|a| a.conn != Some(conn) && a.key.1 != conn);
        self.frames.retain_mut(|f| {
            if f.conn != Some(conn) {
                return true;
            }
            match f.bytes.last().copied().and_then(FrameType::from_u8) {
                Some(
                    FrameType::NewToken | FrameType::StreamSteer | FrameType::MaxStreamData | FrameType::StreamReset,
                ) => {
                    f.conn = None;
                    true
                }
                _ => false,
            }
        });
    }
}
