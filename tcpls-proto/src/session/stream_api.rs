//! The application's stream calls, and what streams tell the application (events).

use crate::error::StreamError;
use crate::event::{Event, StreamId};
use crate::frame::Frame;

use super::side::Side;
use super::streams::Stream;
use super::{Core, Session};

impl Core {
    pub(super) fn create_stream(&mut self, id: StreamId, peer_initiated: bool) {
        let stream = Stream::new(&self.config, self.streams.send_account(), self.life.is_fallback(), peer_initiated);
        self.streams.insert(id, stream);
        if peer_initiated {
            self.stats.streams_accepted += 1;
            self.events.push(Event::StreamOpened(id));
        } else {
            self.stats.streams_opened += 1;
        }
    }

    pub(super) fn notify_readable(&mut self, id: StreamId) {
        if let Some(s) = self.streams.get_mut(id) {
            if s.note_readable() {
                self.events.push(Event::StreamReadable(id));
            }
        }
    }

    /// Tells the application it can write `id` again if it found it full, then (since `id`
    /// may just have released some of the session's send budget) the streams the budget held
    /// back that fit now.
    pub(super) fn notify_writable_if_blocked(&mut self, id: StreamId) {
        if let Some(s) = self.streams.get_mut(id) {
            if s.take_writable_wake() {
                self.events.push(Event::StreamWritable(id));
            }
        }
        let events = &mut self.events;
        self.streams.wake_budget_blocked(|id| events.push(Event::StreamWritable(id)));
    }

    /// Forgets a stream once both halves are over.
    pub(super) fn maybe_remove(&mut self, id: StreamId) {
        self.streams.remove_if_done(id);
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
        if core.life.is_fallback() && (core.side == Side::Server || core.streams.next_local_id() != 0) {
            return Err(StreamError::Fallback);
        }
        if core.streams.local_open() >= core.config.max_concurrent_streams {
            return Err(StreamError::TooManyStreams);
        }
        let id = core.streams.allocate_local().ok_or(StreamError::TooManyStreams)?;
        core.create_stream(id, false);
        Ok(id)
    }

    /// A stream the peer opened, if any is waiting.
    pub fn accept_stream(&mut self) -> Option<StreamId> {
        self.core.streams.accept()
    }

    fn stream_mut(&mut self, id: StreamId) -> Result<&mut Stream, StreamError> {
        self.core.streams.get_mut(id).ok_or(StreamError::UnknownStream(id))
    }

    /// Queues bytes on a stream; returns how many were taken (0 when its buffer is full: wait
    /// for [`Event::StreamWritable`]).
    pub fn write(&mut self, id: StreamId, data: &[u8]) -> Result<usize, StreamError> {
        self.core.check_open()?;
        let s = self.stream_mut(id)?;
        if s.send_reset() || s.send.is_finished() {
            return Err(StreamError::Finished);
        }
        let n = s.send.write(data);
        s.note_write(n, data.len());
        if n < data.len() {
            // Held back by its share, the stream is told when its own bytes are acknowledged
            // (`notify_writable_if_blocked`); by the budget's total, when anyone's are.
            if s.send.total_limited() {
                self.core.streams.block_on_budget(id);
            }
        }
        self.core.stats.stream_bytes_sent += n as u64;
        self.core.streams.schedule(id);
        Ok(n)
    }

    /// Bytes [`Session::write`] would take now.
    pub fn writable(&self, id: StreamId) -> usize {
        self.core.streams.get(id).map_or(0, |s| s.send.writable())
    }

    /// Ends the sending half (FIN after the queued bytes).
    pub fn finish(&mut self, id: StreamId) -> Result<(), StreamError> {
        let s = self.stream_mut(id)?;
        if s.send_reset() {
            return Err(StreamError::Finished);
        }
        s.send.finish();
        self.core.streams.schedule(id);
        Ok(())
    }

    /// Aborts the sending half: queued bytes are dropped and the peer gets Stream Reset.
    pub fn reset_stream(&mut self, id: StreamId, error_code: u32) -> Result<(), StreamError> {
        let s = self.stream_mut(id)?;
        if s.send_reset() || s.send.is_done() {
            return Ok(());
        }
        s.send_state = s.send_state.on_reset();
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
        let Some(s) = self.core.streams.get_mut(id) else {
            return Err(StreamError::UnknownStream(id));
        };
        s.note_read();
        let ended = match s.recv_state.peer_reset() {
            Some(code) => Err(StreamError::Reset(code)),
            None if s.recv.is_finished() && s.recv.readable() == 0 => Ok(Some(&[][..])),
            None => {
                if s.recv.readable() == 0 {
                    return if closed { Err(StreamError::SessionClosed) } else { Ok(None) };
                }
                // Re-borrowed: the borrow returned must not outlive the branches that remove.
                let s = self.core.streams.get_mut(id).ok_or(StreamError::UnknownStream(id))?;
                return Ok(Some(s.recv.chunk()));
            }
        };
        // The caller sees the end (or the reset): that may be the last thing the stream waited
        // for, its sending half finished and acknowledged already. Forget it now, since a
        // caller that saw the end has no reason to call `consume`.
        s.recv_state = s.recv_state.on_end_observed();
        self.core.maybe_remove(id);
        ended
    }

    /// Marks `n` bytes of [`Session::recv_chunk`] as read (and grants the peer more credit).
    pub fn consume(&mut self, id: StreamId, n: usize) {
        if let Some(s) = self.core.streams.get_mut(id) {
            s.recv.consume(n);
        }
        self.core.update_credit(id);
        self.core.maybe_remove(id);
    }

    /// The application will not read this stream any more (its reader was dropped): bytes that
    /// arrive are discarded while the peer keeps getting credit, so it never blocks on us.
    pub fn stop_reading(&mut self, id: StreamId) {
        if let Some(s) = self.core.streams.get_mut(id) {
            s.recv_state = s.recv_state.on_stop();
            let n = s.recv.readable();
            s.recv.consume(n);
        }
        self.core.update_credit(id);
        self.core.maybe_remove(id);
    }

    /// Bytes [`Session::release_idle_memory`] would free now (buffers that are empty and larger
    /// than what an idle session keeps). The IO layer calls `release_idle_memory` when this is
    /// not zero and the session went quiet, so that a session idle after a bulk transfer does not
    /// keep its large buffers until its next activity.
    pub fn releasable_memory(&self) -> usize {
        let streams: usize = self.core.streams.values().map(|s| s.recv.releasable() + s.send.releasable()).sum();
        let conns: usize = self.conns.iter().map(|c| c.rx.releasable() + c.tx.releasable()).sum();
        streams + conns + self.core.scratch.capacity()
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
        self.core.scratch = Vec::new();
    }

    /// The final size of the peer's direction of a stream, once its FIN or Stream Reset arrived:
    /// how many bytes the peer sent on it (after a reset, more than were delivered).
    pub fn stream_final_size(&self, id: StreamId) -> Option<u64> {
        self.core.streams.get(id).and_then(|s| s.recv.final_size())
    }

    /// Bytes held by this session's stream send buffers (written and not yet acknowledged):
    /// what `SessionConfig::send_budget` bounds.
    pub fn send_buffered(&self) -> usize {
        self.core.streams.send_buffered()
    }

    /// Number of streams currently known (open in at least one direction).
    pub fn stream_count(&self) -> usize {
        self.core.streams.len()
    }
}
