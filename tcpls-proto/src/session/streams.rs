//! Stream state inside a session, and the application's stream calls.

use crate::error::StreamError;
use crate::event::{Event, StreamId};
use crate::frame::Frame;
use crate::stream::{RecvBuf, SendBuf, INITIAL_MAX_STREAM_DATA};

use super::{Core, Session, Side};

/// What a stream's own state costs (its entry, buffers' bookkeeping, queue slots; measured
/// ~1.3 KB with the allocator in `tests/hostile_memory.rs`), charged against the receive budget
/// with its data, so that the budget bounds all the memory a peer's streams hold.
const STREAM_STATE_CHARGE: u64 = 2048;

/// What a newly opened stream is charged: its 64 KiB initial window and its state.
pub(crate) const NEW_STREAM_CHARGE: u64 = INITIAL_MAX_STREAM_DATA + STREAM_STATE_CHARGE;

/// Smallest Max Stream Data increase granted out of the receive budget (one full record).
const MIN_GRANT: u64 = crate::record::MAX_PLAINTEXT as u64;

/// Stream Reset code when the receiver refuses a stream over its concurrency limit.
pub const RESET_REFUSED: u32 = 0x1;

#[derive(Debug)]
pub(crate) struct Stream {
    pub(crate) send: SendBuf,
    pub(crate) recv: RecvBuf,
    /// We reset our sending half.
    pub(crate) send_reset: bool,
    /// The peer reset its sending half with this code.
    pub(crate) recv_reset: Option<u32>,
    /// The application will not read any more: data is dropped, credit still granted.
    pub(crate) recv_stopped: bool,
    /// The application saw the end (EOF or reset) of the receiving half.
    pub(crate) recv_observed_end: bool,
    /// In `Core::ready`.
    pub(crate) queued: bool,
    /// A StreamReadable event is pending and not yet followed by a read.
    pub(crate) read_notified: bool,
    /// The application found the send buffer full.
    pub(crate) write_blocked: bool,
    /// In `Core::budget_blocked`: the session's send budget, not this stream's buffer, held
    /// back its last write.
    pub(crate) budget_waiting: bool,
    /// The application's last write did not fit (it has more for this stream): the scheduler
    /// need not cut a short record of what is queued (`packetize.rs`, `holds_short_tail`).
    pub(crate) more_coming: bool,
    pub(crate) peer_initiated: bool,
    /// The connection this stream's records go on (stream steering); None: any.
    pub(crate) steer: Option<crate::event::ConnId>,
}

impl Stream {
    fn new(core: &Core, peer_initiated: bool) -> Self {
        let mut send = SendBuf::new(core.config.stream_send_buffer);
        // With failover, sealed data stays until the peer acknowledges it.
        send.set_retain_unacked(core.config.failover);
        if core.life.is_fallback() {
            // The plain TLS byte stream has no Max Stream Data and no ACKs: TCP does flow control
            // and delivery. Without this a fallback sender stalls after the initial 64 KiB credit.
            send.set_max_data(u64::MAX);
            send.set_retain_unacked(false);
        } else {
            send.set_account(core.send_account.clone());
        }
        Self {
            send,
            recv: RecvBuf::new(core.config.stream_receive_window),
            send_reset: false,
            recv_reset: None,
            recv_stopped: false,
            recv_observed_end: false,
            queued: false,
            read_notified: false,
            write_blocked: false,
            budget_waiting: false,
            more_coming: false,
            peer_initiated,
            steer: None,
        }
    }

    /// What this stream's receiving half counts against the session's receive budget: the
    /// credit the peer may still fill, and never less than the 64 KiB of a new stream's initial
    /// window (the peer may fill that without asking), so that floors are paid for too. A half
    /// whose data is dropped (reset, or the application stopped reading) holds no data; a
    /// finished one holds what is left to read. Every stream also pays for its own state.
    pub(crate) fn receive_charge(&self) -> u64 {
        let data = if self.recv_reset.is_some() || self.recv_stopped {
            0
        } else {
            match self.recv.final_size() {
                Some(end) => end.saturating_sub(self.recv.read_offset()),
                None => self.recv.outstanding().max(INITIAL_MAX_STREAM_DATA),
            }
        };
        data + STREAM_STATE_CHARGE
    }

    fn send_done(&self) -> bool {
        self.send_reset || self.send.is_done()
    }

    fn recv_done(&self) -> bool {
        self.recv_observed_end
            || (self.recv_stopped
                && (self.recv_reset.is_some() || self.recv.final_size().is_some_and(|f| self.recv.read_offset() >= f)))
    }
}

impl Core {
    pub(crate) fn is_local(&self, id: StreamId) -> bool {
        (id % 2 == 0) == (self.side == Side::Client)
    }

    pub(crate) fn create_stream(&mut self, id: StreamId, peer_initiated: bool) {
        let stream = Stream::new(self, peer_initiated);
        self.streams.insert(id, stream);
        if peer_initiated {
            self.peer_streams_open += 1;
            self.stats.streams_accepted += 1;
            self.accept_queue.push_back(id);
            self.events.push(Event::StreamOpened(id));
        } else {
            self.stats.streams_opened += 1;
        }
    }

    /// Puts a stream in the round-robin of streams with something to send.
    pub(crate) fn schedule(&mut self, id: StreamId) {
        if let Some(s) = self.streams.get_mut(&id) {
            if !s.queued && s.send.has_pending() {
                s.queued = true;
                self.ready.push_back(id);
            }
        }
    }

    pub(crate) fn notify_readable(&mut self, id: StreamId) {
        if let Some(s) = self.streams.get_mut(&id) {
            if !s.read_notified {
                s.read_notified = true;
                self.events.push(Event::StreamReadable(id));
            }
        }
    }

    /// Tells the application it can write `id` again if it found it full, then (since `id`
    /// may just have released some of the session's send budget) the streams the budget held
    /// back that fit now.
    pub(crate) fn notify_writable_if_blocked(&mut self, id: StreamId) {
        if let Some(s) = self.streams.get_mut(&id) {
            if s.write_blocked && (s.send.writable() > 0 || s.send_reset) {
                s.write_blocked = false;
                self.events.push(Event::StreamWritable(id));
            }
        }
        self.wake_budget_blocked();
    }

    /// Streams held back by the send budget, oldest first: those that may write now are told
    /// (`StreamWritable`); a few that still may not go to the back, so that one stream over its
    /// share does not hold up the others. Bounded work per call.
    fn wake_budget_blocked(&mut self) {
        const LOOK: usize = 8;
        // A stream waits here only once it holds at least its floor, so while the budget is
        // spent none of them may write (the common case under load: no lookups).
        if self.budget_blocked.is_empty() || self.send_account.bytes() >= self.config.send_budget {
            return;
        }
        let mut looked = 0;
        while looked < LOOK {
            let Some(&id) = self.budget_blocked.front() else { return };
            looked += 1;
            let Some(s) = self.streams.get_mut(&id) else {
                self.budget_blocked.pop_front();
                continue;
            };
            if !s.write_blocked || s.send.writable() > 0 || s.send_reset {
                self.budget_blocked.pop_front();
                s.budget_waiting = false;
                if s.write_blocked {
                    s.write_blocked = false;
                    self.events.push(Event::StreamWritable(id));
                }
            } else {
                self.budget_blocked.rotate_left(1);
            }
        }
    }

    /// Sends Max Stream Data when the application freed enough of the window, within the
    /// session's receive budget; then retries the streams the budget held back, since reading
    /// this one may have freed some of it.
    pub(crate) fn update_credit(&mut self, id: StreamId) {
        if self.life.is_fallback() {
            return;
        }
        // The budget in use over all streams: summed once per call (only if some stream is
        // due), then kept up to date by each grant, so retrying many starved streams stays
        // linear in the number of streams.
        let mut charged = None;
        self.grant_credit(id, &mut charged);
        if !self.credit_starved.is_empty() {
            for starved in std::mem::take(&mut self.credit_starved) {
                self.grant_credit(starved, &mut charged);
            }
        }
    }

    /// The receive budget in use: the sum of every stream's [`Stream::receive_charge`].
    pub(crate) fn receive_charged(&self) -> u64 {
        self.streams.values().map(Stream::receive_charge).sum()
    }

    /// Part of the receive budget that window growth leaves free for new streams (a quarter:
    /// 16 MiB, 256 initial windows, by default), so that a few busy streams holding large
    /// windows do not make the session refuse the next ones.
    fn admission_reserve(&self) -> u64 {
        self.config.receive_budget / 4
    }

    /// Whether a new peer stream fits in the receive budget, `charged` being in use: its
    /// initial 64 KiB window and its state are charged from the moment it opens. The first one
    /// always fits.
    pub(crate) fn peer_stream_fits(&self, charged: u64) -> bool {
        self.peer_streams_open == 0 || charged.saturating_add(NEW_STREAM_CHARGE) <= self.config.receive_budget
    }

    /// One stream's Max Stream Data, lowered to what the budget leaves beyond the admission
    /// reserve (but never below a window of [`INITIAL_MAX_STREAM_DATA`] past what the
    /// application read, which its charge already pays for). A stream that gets nothing is
    /// remembered and retried.
    fn grant_credit(&mut self, id: StreamId, charged: &mut Option<u64>) {
        let Some(wanted) = self.streams.get(&id).and_then(|s| s.recv.wanted_limit()) else { return };
        let total = match *charged {
            Some(total) => total,
            None => self.receive_charged(),
        };
        let room = self.config.receive_budget.saturating_sub(self.admission_reserve()).saturating_sub(total);
        let Some(s) = self.streams.get_mut(&id) else { return };
        let before = s.receive_charge();
        let floor = s.recv.read_offset().saturating_add(INITIAL_MAX_STREAM_DATA);
        let limit = s.recv.limit();
        let granted = wanted.min(limit.saturating_add(room).max(floor));
        // A sliver of credit (the budget's last bytes) would only make the peer seal a short
        // record: wait until a record's worth is free, unless the stream is owed its floor
        // (its limit is below it, so the grant is not only the budget's to give).
        let sliver = granted < wanted && limit >= floor && granted.saturating_sub(limit) < MIN_GRANT;
        if granted <= limit || sliver {
            self.credit_starved.insert(id);
            *charged = Some(total);
            return;
        }
        s.recv.advertise(granted);
        *charged = Some(total.saturating_sub(before).saturating_add(s.receive_charge()));
        self.control.push(&Frame::MaxStreamData { stream_id: id, maximum_offset: granted }, None);
    }

    /// Forgets a stream once both halves are over.
    pub(crate) fn maybe_remove(&mut self, id: StreamId) {
        let Some(s) = self.streams.get(&id) else { return };
        if s.send_done() && s.recv_done() && !s.queued {
            if s.peer_initiated {
                self.peer_streams_open = self.peer_streams_open.saturating_sub(1);
            }
            self.streams.remove(&id);
        }
    }

    fn check_open(&self) -> Result<(), StreamError> {
        if self.life.is_over() {
            return Err(StreamError::SessionClosed);
        }
        Ok(())
    }
}

impl Session {
    /// Opens a new bidirectional stream. The peer learns of it with its first data (or FIN).
    pub fn open_stream(&mut self) -> Result<StreamId, StreamError> {
        let core = &mut self.core;
        core.check_open()?;
        if core.life.is_closing() {
            return Err(StreamError::SessionClosed);
        }
        if core.life.is_fallback() && (core.side == Side::Server || core.next_local_stream != 0) {
            return Err(StreamError::Fallback);
        }
        let local_open = core.streams.values().filter(|s| !s.peer_initiated).count();
        if local_open >= core.config.max_concurrent_streams {
            return Err(StreamError::TooManyStreams);
        }
        let id = core.next_local_stream;
        core.next_local_stream = id.checked_add(2).ok_or(StreamError::TooManyStreams)?;
        core.create_stream(id, false);
        Ok(id)
    }

    /// A stream the peer opened, if any is waiting.
    pub fn accept_stream(&mut self) -> Option<StreamId> {
        self.core.accept_queue.pop_front()
    }

    fn stream_mut(&mut self, id: StreamId) -> Result<&mut Stream, StreamError> {
        self.core.streams.get_mut(&id).ok_or(StreamError::UnknownStream(id))
    }

    /// Queues bytes on a stream; returns how many were taken (0 when its buffer is full: wait
    /// for [`Event::StreamWritable`]).
    pub fn write(&mut self, id: StreamId, data: &[u8]) -> Result<usize, StreamError> {
        self.core.check_open()?;
        let s = self.stream_mut(id)?;
        if s.send_reset || s.send.is_finished() {
            return Err(StreamError::Finished);
        }
        let n = s.send.write(data);
        s.more_coming = n < data.len();
        if n < data.len() {
            s.write_blocked = true;
            if !s.budget_waiting && s.send.budget_limited() {
                s.budget_waiting = true;
                self.core.budget_blocked.push_back(id);
            }
        }
        self.core.stats.stream_bytes_sent += n as u64;
        self.core.schedule(id);
        Ok(n)
    }

    /// Bytes [`Session::write`] would take now.
    pub fn writable(&self, id: StreamId) -> usize {
        self.core.streams.get(&id).map_or(0, |s| s.send.writable())
    }

    /// Ends the sending half (FIN after the queued bytes).
    pub fn finish(&mut self, id: StreamId) -> Result<(), StreamError> {
        let s = self.stream_mut(id)?;
        if s.send_reset {
            return Err(StreamError::Finished);
        }
        s.send.finish();
        self.core.schedule(id);
        Ok(())
    }

    /// Aborts the sending half: queued bytes are dropped and the peer gets Stream Reset.
    pub fn reset_stream(&mut self, id: StreamId, error_code: u32) -> Result<(), StreamError> {
        let s = self.stream_mut(id)?;
        if s.send_reset || s.send.is_done() {
            return Ok(());
        }
        s.send_reset = true;
        let final_size = s.send.reset();
        let frame = Frame::StreamReset { stream_id: id, final_size, error_code };
        self.core.control.push(&frame, None);
        self.core.maybe_remove(id);
        Ok(())
    }

    /// Reads into `buf`: `Some(n)` bytes (0 = end of stream), `None` when nothing is there yet
    /// (wait for [`Event::StreamReadable`]).
    pub fn read(&mut self, id: StreamId, buf: &mut [u8]) -> Result<Option<usize>, StreamError> {
        let n = match self.recv_chunk(id)? {
            None => return Ok(None),
            Some(chunk) => {
                let n = chunk.len().min(buf.len());
                buf[..n].copy_from_slice(&chunk[..n]);
                n
            }
        };
        self.consume(id, n);
        Ok(Some(n))
    }

    /// Borrows the contiguous bytes readable on a stream without copying them: `Some(empty)` at
    /// the end of the stream, `None` when nothing is there yet. Call [`Session::consume`] after.
    pub fn recv_chunk(&mut self, id: StreamId) -> Result<Option<&[u8]>, StreamError> {
        let closed = self.core.life.is_over();
        let Some(s) = self.core.streams.get_mut(&id) else {
            return Err(StreamError::UnknownStream(id));
        };
        s.read_notified = false;
        if let Some(code) = s.recv_reset {
            s.recv_observed_end = true;
            return Err(StreamError::Reset(code));
        }
        if s.recv.readable() > 0 {
            return Ok(Some(s.recv.chunk()));
        }
        if s.recv.is_finished() {
            s.recv_observed_end = true;
            return Ok(Some(&[]));
        }
        if closed {
            return Err(StreamError::SessionClosed);
        }
        Ok(None)
    }

    /// Marks `n` bytes of [`Session::recv_chunk`] as read (and grants the peer more credit).
    pub fn consume(&mut self, id: StreamId, n: usize) {
        if let Some(s) = self.core.streams.get_mut(&id) {
            s.recv.consume(n);
        }
        self.core.update_credit(id);
        self.core.maybe_remove(id);
    }

    /// The application will not read this stream any more (its reader was dropped): bytes that
    /// arrive are discarded while the peer keeps getting credit, so it never blocks on us.
    pub fn stop_reading(&mut self, id: StreamId) {
        if let Some(s) = self.core.streams.get_mut(&id) {
            s.recv_stopped = true;
            let n = s.recv.readable();
            s.recv.consume(n);
        }
        self.core.update_credit(id);
        self.core.maybe_remove(id);
    }

    /// Returns the memory of drained stream buffers and idle connection buffers. Cheap enough
    /// to call about once a second; the tokio layer does so when the session is quiet.
    pub fn release_idle_memory(&mut self) {
        for s in self.core.streams.values_mut() {
            s.recv.release_if_drained();
            s.send.release_if_idle();
        }
        for c in &mut self.conns {
            c.rx.shrink();
            c.tx.shrink();
        }
    }

    /// The final size of the peer's direction of a stream, once its FIN or Stream Reset arrived:
    /// how many bytes the peer sent on it (after a reset, more than were delivered).
    pub fn stream_final_size(&self, id: StreamId) -> Option<u64> {
        self.core.streams.get(&id).and_then(|s| s.recv.final_size())
    }

    /// Bytes held by this session's stream send buffers (written and not yet acknowledged):
    /// what `SessionConfig::send_budget` bounds.
    pub fn send_buffered(&self) -> usize {
        self.core.send_account.bytes()
    }

    /// Number of streams currently known (open in at least one direction).
    pub fn stream_count(&self) -> usize {
        self.core.streams.len()
    }
}
