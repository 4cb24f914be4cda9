//! One stream: its two halves, each a buffer and a state, and the marks by which [`Streams`]
//! queues and wakes it.
//!
//! A half's state says where it is in its life; its buffer (`crate::stream`) holds the bytes,
//! offsets, FIN and credit. The marks are [`Streams`]' bookkeeping (which queue holds the stream,
//! which event is pending): only `streams/` can change them, and the rest of the session asks
//! through the methods of [`Stream`] that name what happened.
//!
//! [`Streams`]: super::streams::Streams

use std::sync::Arc;

use crate::config::{SessionConfig, RECEIVE_WINDOW_START};
use crate::event::ConnId;
use crate::stream::{RecvBuf, SendAccount, SendBuf, INITIAL_MAX_STREAM_DATA};

/// What a stream's own state costs (its entry, buffers' bookkeeping, queue slots; measured
/// ~1.3 KB with the allocator in `tests/hostile_memory.rs`), charged against the receive budget
/// with its data, so that the budget bounds all the memory a peer's streams hold.
pub(in crate::session) const STREAM_STATE_CHARGE: u64 = 2048;

/// Our sending half. Transitions (checked by `send_transitions` below):
///
/// ```text
/// Sending ──reset──> ResetSent
/// ```
///
/// FIN and acknowledgements are the buffer's: a `Sending` half may be finished (FIN queued) and
/// done (everything acknowledged); a reset drops whatever it held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::session) enum SendState {
    Sending,
    /// We sent Stream Reset: nothing more goes out and writes fail.
    ResetSent,
}

impl SendState {
    /// After [`Session::reset_stream`](super::Session::reset_stream).
    pub(in crate::session) fn on_reset(self) -> Self {
        SendState::ResetSent
    }
}

/// The peer's sending half, as we receive it. Transitions (checked by `recv_transitions`):
///
/// ```text
/// Receiving ─┬─peer reset──> ResetReceived ─┬─stop──────> Stopped { reset: Some }
///            │                              └─end read──> EndObserved { reset: Some }
///            ├─stop──────> Stopped { reset: None } ──peer reset──> Stopped { reset: Some }
///            └─end read──> EndObserved { reset: None }
/// ```
///
/// `EndObserved` is final: a reset that arrives after the application read the end changes
/// nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::session) enum RecvState {
    /// Bytes arrive and are read (the buffer knows whether the FIN came).
    Receiving,
    /// The peer reset its half with this code; the application has not seen it yet.
    ResetReceived(u32),
    /// The application will not read any more: data is dropped, credit still granted.
    Stopped { reset: Option<u32> },
    /// The application saw the end of the half: its FIN, or the peer's reset.
    EndObserved { reset: Option<u32> },
}

impl RecvState {
    /// The peer's Stream Reset arrived.
    pub(in crate::session) fn on_peer_reset(self, code: u32) -> Self {
        match self {
            RecvState::Receiving => RecvState::ResetReceived(code),
            RecvState::Stopped { reset: None } => RecvState::Stopped { reset: Some(code) },
            other => other,
        }
    }

    /// The application stopped reading.
    pub(in crate::session) fn on_stop(self) -> Self {
        match self {
            RecvState::Receiving => RecvState::Stopped { reset: None },
            RecvState::ResetReceived(code) => RecvState::Stopped { reset: Some(code) },
            other => other,
        }
    }

    /// The application read the end (or was told of the reset).
    pub(in crate::session) fn on_end_observed(self) -> Self {
        match self {
            RecvState::Receiving => RecvState::EndObserved { reset: None },
            RecvState::ResetReceived(code) => RecvState::EndObserved { reset: Some(code) },
            other => other,
        }
    }

    /// The code of the peer's reset, if it reset the half.
    pub(in crate::session) fn peer_reset(self) -> Option<u32> {
        match self {
            RecvState::Receiving => None,
            RecvState::ResetReceived(code) => Some(code),
            RecvState::Stopped { reset } | RecvState::EndObserved { reset } => reset,
        }
    }

    /// Received data is dropped rather than kept for the application.
    pub(in crate::session) fn drops_data(self) -> bool {
        matches!(self, RecvState::ResetReceived(_) | RecvState::Stopped { .. })
            || matches!(self, RecvState::EndObserved { reset: Some(_) })
    }

    pub(in crate::session) fn is_stopped(self) -> bool {
        matches!(self, RecvState::Stopped { .. })
    }
}

/// [`Streams`](super::streams::Streams)' marks on one stream: which of its queues holds it and
/// which notification is pending. A set of bits, visible to `streams/` only, so that one part
/// owns them; the rest of the session goes through [`Stream`]'s methods.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Marks(u8);

impl Marks {
    /// In the ready queue of the round robin.
    pub(super) const QUEUED: Marks = Marks(1);
    /// In the queue of streams the send budget held back.
    pub(super) const BUDGET_WAITING: Marks = Marks(2);
    /// A StreamReadable event is pending and not yet followed by a read.
    pub(super) const READ_NOTIFIED: Marks = Marks(4);
    /// The application found the send buffer full: it gets StreamWritable when there is room.
    pub(super) const WRITE_BLOCKED: Marks = Marks(8);
    /// The application's last write did not fit (it has more for this stream): the scheduler
    /// need not cut a short record of what is queued (`packetize.rs`, `holds_short_tail`).
    pub(super) const MORE_COMING: Marks = Marks(16);

    pub(super) fn has(self, mark: Marks) -> bool {
        self.0 & mark.0 != 0
    }

    /// Sets `mark`; returns whether it was clear.
    pub(super) fn set(&mut self, mark: Marks) -> bool {
        let was_clear = !self.has(mark);
        self.0 |= mark.0;
        was_clear
    }

    /// Clears `mark`; returns whether it was set.
    pub(super) fn clear(&mut self, mark: Marks) -> bool {
        let was_set = self.has(mark);
        self.0 &= !mark.0;
        was_set
    }

    pub(super) fn assign(&mut self, mark: Marks, on: bool) {
        if on {
            self.set(mark);
        } else {
            self.clear(mark);
        }
    }
}

/// The receive budget's count of one stream (see `Streams::receive_charged`).
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Charge {
    /// This stream's [`Stream::receive_charge`] as counted in the running total.
    pub(super) counted: u64,
    /// Handed out mutably since it was counted: it is counted again.
    pub(super) dirty: bool,
}

#[derive(Debug)]
pub(in crate::session) struct Stream {
    pub(in crate::session) send: SendBuf,
    pub(in crate::session) recv: RecvBuf,
    pub(in crate::session) send_state: SendState,
    pub(in crate::session) recv_state: RecvState,
    /// Changed by `Streams` (`streams/`) only, and through the methods below.
    pub(super) marks: Marks,
    pub(in crate::session) peer_initiated: bool,
    /// The connection this stream's records go on (stream steering); None: any.
    pub(in crate::session) steer: Option<ConnId>,
    pub(super) charge: Charge,
}

impl Stream {
    pub(in crate::session) fn new(
        config: &SessionConfig,
        account: &Arc<SendAccount>,
        fallback: bool,
        peer_initiated: bool,
    ) -> Self {
        let mut send = SendBuf::new(config.stream_send_buffer);
        // With failover, sealed data stays until the peer acknowledges it.
        send.set_retain_unacked(config.failover);
        if fallback {
            // The plain TLS byte stream has no Max Stream Data and no ACKs: TCP does flow control
            // and delivery. Without this a fallback sender stalls after the initial 64 KiB credit.
            send.set_max_data(u64::MAX);
            send.set_retain_unacked(false);
        } else {
            send.set_account(account.clone());
        }
        Self {
            send,
            recv: if config.receive_autotune {
                RecvBuf::growing(RECEIVE_WINDOW_START, config.stream_receive_window)
            } else {
                RecvBuf::new(config.stream_receive_window)
            },
            send_state: SendState::Sending,
            recv_state: RecvState::Receiving,
            marks: Marks::default(),
            peer_initiated,
            steer: None,
            charge: Charge::default(),
        }
    }

    /// We reset our sending half.
    pub(in crate::session) fn send_reset(&self) -> bool {
        self.send_state == SendState::ResetSent
    }

    /// A StreamReadable event is due: true unless one is pending already.
    pub(in crate::session) fn note_readable(&mut self) -> bool {
        self.marks.set(Marks::READ_NOTIFIED)
    }

    /// The application reads: its next StreamReadable may go out.
    pub(in crate::session) fn note_read(&mut self) {
        self.marks.clear(Marks::READ_NOTIFIED);
    }

    /// The application wrote `taken` of `offered` bytes: when not all fit, it has more coming
    /// and waits for StreamWritable.
    pub(in crate::session) fn note_write(&mut self, taken: usize, offered: usize) {
        let partial = taken < offered;
        self.marks.assign(Marks::MORE_COMING, partial);
        if partial {
            self.marks.set(Marks::WRITE_BLOCKED);
        }
    }

    /// The application found the send buffer full and waits to be told.
    pub(in crate::session) fn write_blocked(&self) -> bool {
        self.marks.has(Marks::WRITE_BLOCKED)
    }

    /// The writer's last write did not fit: more is coming.
    pub(in crate::session) fn more_coming(&self) -> bool {
        self.marks.has(Marks::MORE_COMING)
    }

    /// A StreamWritable is due if the writer waits and there is room worth waking it for (or
    /// the half was reset, which it must learn); true once.
    pub(in crate::session) fn take_writable_wake(&mut self) -> bool {
        (self.send.worth_waking() || self.send_reset()) && self.marks.clear(Marks::WRITE_BLOCKED)
    }

    /// The session ended: every waiting writer is told (its next write fails).
    pub(in crate::session) fn wake_writer(&mut self) {
        self.marks.clear(Marks::WRITE_BLOCKED);
    }

    /// What this stream's receiving half counts against the session's receive budget: the
    /// credit the peer may still fill, and never less than the 64 KiB of a new stream's initial
    /// window (the peer may fill that without asking), so that floors are paid for too. A half
    /// whose data is dropped (reset, or the application stopped reading) holds no data; a
    /// finished one holds what is left to read. Every stream also pays for its own state.
    pub(in crate::session) fn receive_charge(&self) -> u64 {
        let data = if self.recv_state.drops_data() {
            0
        } else {
            match self.recv.final_size() {
                Some(end) => end.saturating_sub(self.recv.read_offset()),
                None => self.recv.outstanding().max(INITIAL_MAX_STREAM_DATA),
            }
        };
        data + STREAM_STATE_CHARGE
    }

    /// Both halves are over and no queue holds it: the stream can be forgotten.
    pub(in crate::session) fn is_done(&self) -> bool {
        self.send_done() && self.recv_done() && !self.marks.has(Marks::QUEUED)
    }

    fn send_done(&self) -> bool {
        self.send_reset() || self.send.is_done()
    }

    fn recv_done(&self) -> bool {
        match self.recv_state {
            RecvState::EndObserved { .. } => true,
            RecvState::Stopped { reset: Some(_) } => true,
            RecvState::Stopped { reset: None } => self.recv.final_size().is_some_and(|f| self.recv.read_offset() >= f),
            RecvState::Receiving | RecvState::ResetReceived(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every send state and event, with the state each must lead to.
    #[test]
    fn send_transitions() {
        for (from, to) in [(SendState::Sending, SendState::ResetSent), (SendState::ResetSent, SendState::ResetSent)] {
            assert_eq!(from.on_reset(), to, "{from:?} --reset-->");
        }
    }

    /// The table of legal receive transitions, checked for every state and event: anything
    /// not listed leaves the state as it is.
    #[test]
    fn recv_transitions() {
        #[derive(Debug, Clone, Copy)]
        enum Ev {
            PeerReset(u32),
            Stop,
            EndRead,
        }
        use RecvState::*;
        let states = [
            Receiving,
            ResetReceived(7),
            Stopped { reset: None },
            Stopped { reset: Some(7) },
            EndObserved { reset: None },
            EndObserved { reset: Some(7) },
        ];
        let legal = [
            (Receiving, Ev::PeerReset(7), ResetReceived(7)),
            (Receiving, Ev::Stop, Stopped { reset: None }),
            (Receiving, Ev::EndRead, EndObserved { reset: None }),
            (ResetReceived(7), Ev::Stop, Stopped { reset: Some(7) }),
            (ResetReceived(7), Ev::EndRead, EndObserved { reset: Some(7) }),
            (Stopped { reset: None }, Ev::PeerReset(7), Stopped { reset: Some(7) }),
        ];
        for from in states {
            for ev in [Ev::PeerReset(7), Ev::Stop, Ev::EndRead] {
                let to = match ev {
                    Ev::PeerReset(code) => from.on_peer_reset(code),
                    Ev::Stop => from.on_stop(),
                    Ev::EndRead => from.on_end_observed(),
                };
                let expected = legal
                    .iter()
                    .find(|(f, e, _)| *f == from && format!("{e:?}") == format!("{ev:?}"))
                    .map_or(from, |(_, _, t)| *t);
                assert_eq!(to, expected, "{from:?} --{ev:?}-->");
            }
        }
        // A reset's code survives every later step; a FIN's end never gains one.
        assert_eq!(ResetReceived(9).on_stop().on_end_observed().peer_reset(), Some(9));
        assert_eq!(Receiving.on_end_observed().on_peer_reset(9).peer_reset(), None);
        // The data of a half that was reset or stopped is dropped; a FIN's is kept.
        assert!(!Receiving.drops_data() && !EndObserved { reset: None }.drops_data());
        assert!(ResetReceived(1).drops_data() && Stopped { reset: None }.drops_data());
    }

    #[test]
    fn marks_are_independent() {
        let mut m = Marks::default();
        assert!(m.set(Marks::QUEUED));
        assert!(!m.set(Marks::QUEUED));
        m.assign(Marks::MORE_COMING, true);
        assert!(m.has(Marks::QUEUED) && m.has(Marks::MORE_COMING) && !m.has(Marks::WRITE_BLOCKED));
        assert!(m.clear(Marks::QUEUED));
        assert!(!m.clear(Marks::QUEUED));
        assert!(m.has(Marks::MORE_COMING));
    }
}
