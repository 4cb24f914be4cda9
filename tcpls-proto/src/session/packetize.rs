//! Turns queued stream data and control frames into sealed records (PROTOCOL.md §2).
//!
//! Each record carries at most one Stream frame, placed first, so its data starts at offset 0
//! of the plaintext (the receiver can decrypt it in place into the stream buffer); control
//! frames follow it. The stream data is encrypted straight out of the stream's send buffer into
//! the connection's transmit buffer: no staging copy.

use std::time::Instant;

use crate::error::Error;
use crate::event::StreamId;
use crate::frame::{write_stream_trailer, STREAM_FRAME_OVERHEAD};
use crate::record::{CT_APPLICATION_DATA, MAX_PLAINTEXT};

use super::conn::{ConnState, Connection};
use super::{Core, Session};

/// Below this many bytes of room, a record is not worth starting with stream data.
const MIN_STREAM_CHUNK: usize = 64;

impl Session {
    /// Seals what can be sent into the connections' transmit buffers. Call after every batch of
    /// input or application writes, then write [`Session::transmit_data`].
    pub fn prepare_transmit(&mut self, now: Instant) {
        self.core.set_now(now);
        self.run_actions();
        if !self.core.established {
            return;
        }
        let mut failed = false;
        for c in &mut self.conns {
            if !c.is_usable() {
                continue;
            }
            let result = if c.is_tcpls() { self.core.fill_tcpls(c) } else { self.core.fill_fallback(c) };
            if let Err(e) = result {
                c.fail(e);
                failed = true;
            }
        }
        // The peer is done (close_notify on every connection) and so are all our streams:
        // answer with our close_notify so the session ends on both sides.
        if !self.core.closing && self.peer_closed() && self.core.all_send_halves_finished() {
            self.core.closing = true;
        }
        if self.core.closing && self.core.all_sent() {
            for c in &mut self.conns {
                if let Err(e) = c.send_close_notify() {
                    c.fail(e);
                    failed = true;
                }
            }
        }
        if failed || self.core.closing {
            self.after_connection_change();
        }
    }

    /// The peer sent close_notify on every live connection: it will open no more streams.
    pub fn peer_closed(&self) -> bool {
        self.core.established && self.conns.iter().all(|c| c.close_received || c.is_finished())
    }

    /// Something is queued that the next `prepare_transmit` would seal (the IO layer uses this
    /// to decide whether an application call needs to wake the driver).
    pub fn wants_transmit(&self) -> bool {
        self.core.established && (!self.core.control.is_empty() || !self.core.ready.is_empty() || self.core.closing)
    }

    /// Anything sealed and not yet written, on any connection.
    pub fn has_transmit(&self) -> bool {
        self.conns.iter().any(|c| !c.dead && !c.tx.is_empty())
    }
}

impl Core {
    /// All queued stream bytes (and FINs) are sealed, and no control frame waits.
    pub(crate) fn all_sent(&self) -> bool {
        self.control.is_empty() && self.streams.values().all(|s| s.send_reset || !s.send.has_pending())
    }

    /// Every stream's sending half is finished or reset (its data may still be queued).
    pub(crate) fn all_send_halves_finished(&self) -> bool {
        self.streams.values().all(|s| s.send_reset || s.send.is_finished())
    }

    /// The next stream with data it may send now, in round-robin order.
    fn next_ready(&mut self) -> Option<StreamId> {
        while let Some(&id) = self.ready.front() {
            match self.streams.get_mut(&id) {
                Some(s) if s.send.has_pending() && !s.send_reset => return Some(id),
                Some(s) => {
                    s.queued = false;
                    self.ready.pop_front();
                }
                None => {
                    self.ready.pop_front();
                }
            }
        }
        None
    }

    fn fill_tcpls(&mut self, c: &mut Connection) -> Result<(), Error> {
        let record_size = self.config.record_size.clamp(STREAM_FRAME_OVERHEAD + MIN_STREAM_CHUNK + 1, MAX_PLAINTEXT);
        let mut trailer = std::mem::take(&mut self.scratch);
        let result = self.fill_tcpls_records(c, record_size, &mut trailer);
        self.scratch = trailer;
        result
    }

    fn fill_tcpls_records(
        &mut self,
        c: &mut Connection,
        record_size: usize,
        trailer: &mut Vec<u8>,
    ) -> Result<(), Error> {
        {
            while c.tx.len() < self.config.transmit_high_water {
                let stream = self.next_ready();
                if stream.is_none() && !self.control.has_for(c.id) {
                    break;
                }
                trailer.clear();
                let mut budget = record_size;
                if stream.is_some() {
                    budget -= STREAM_FRAME_OVERHEAD + MIN_STREAM_CHUNK;
                }
                let control_len = self.control.take_into(c.id, budget, trailer);
                let ConnState::Tcpls(layer) = &mut c.state else { break };
                match stream.and_then(|id| self.streams.get_mut(&id).map(|s| (id, s))) {
                    Some((id, s)) => {
                        let room = record_size - control_len - STREAM_FRAME_OVERHEAD;
                        let Some((offset, data, fin)) = s.send.next_chunk(room) else { break };
                        let len = data.len();
                        // Stream frame first: its data, then its fields, then the control frames.
                        let mut fields = [0u8; STREAM_FRAME_OVERHEAD];
                        write_stream_trailer(&mut fields, id, offset, len as u16, fin);
                        trailer.splice(0..0, fields);
                        trailer.push(CT_APPLICATION_DATA);
                        layer.tx.seal_scatter(data, trailer, &mut c.tx)?;
                        s.send.mark_sent(offset, len, fin);
                        // Round robin: a stream with more to send goes to the back.
                        self.ready.pop_front();
                        if s.send.has_pending() {
                            self.ready.push_back(id);
                        } else {
                            s.queued = false;
                        }
                        self.notify_writable_if_blocked(id);
                        self.maybe_remove(id);
                    }
                    None => {
                        if control_len == 0 {
                            break;
                        }
                        trailer.push(CT_APPLICATION_DATA);
                        layer.tx.seal_scatter(&[], trailer, &mut c.tx)?;
                    }
                }
                c.stats.records_sent += 1;
                c.maybe_update_key(self.config.key_update_records)?;
            }
            Ok(())
        }
    }

    /// A fallback session sends stream 0's bytes as plain TLS application data.
    fn fill_fallback(&mut self, c: &mut Connection) -> Result<(), Error> {
        let ConnState::Fallback(tls) = &mut c.state else {
            return Ok(());
        };
        let Some(s) = self.streams.get_mut(&0) else {
            return Ok(());
        };
        while c.tx.len() < self.config.transmit_high_water {
            let Some((offset, data, fin)) = s.send.next_chunk(MAX_PLAINTEXT * 4) else { break };
            let len = data.len();
            if len > 0 {
                tls.write(data, &mut c.tx)?;
            }
            s.send.mark_sent(offset, len, fin);
            if fin {
                // TLS has no half-close of its own: close_notify ends our byte stream.
                c.send_close_notify()?;
                break;
            }
        }
        self.notify_writable_if_blocked(0);
        Ok(())
    }
}
