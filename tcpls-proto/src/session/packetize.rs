//! Turns queued stream data and control frames into sealed records (PROTOCOL.md §2).
//!
//! Each record carries at most one Stream frame, placed first, so its data starts at offset 0
//! of the plaintext (the receiver can decrypt it in place into the stream buffer); control
//! frames follow it. The stream data is encrypted straight out of the stream's send buffer into
//! the connection's transmit buffer: no staging copy.

use std::time::Instant;

use crate::error::Error;
use crate::event::{ConnId, StreamId};
use crate::frame::{write_stream_trailer, Frame, FrameReader, STREAM_FRAME_OVERHEAD};
use crate::record::{CT_APPLICATION_DATA, MAX_PLAINTEXT};

use super::conn::Connection;
use super::high_water::HighWater;
use super::sched::PathView;
use super::streams::Stream;
use super::{Core, Session};

/// Below this many bytes of room, a record is not worth starting with stream data.
const MIN_STREAM_CHUNK: usize = 64;

/// Encoded size of a Stream Change frame: stream ID, offset, type.
const STREAM_CHANGE_LEN: usize = 4 + 8 + 1;

impl Session {
    /// Seals what can be sent into the connections' transmit buffers. Call after every batch of
    /// input or application writes, then write [`Session::transmit_data`].
    pub fn prepare_transmit(&mut self, now: Instant) {
        self.core.clock.advance(now);
        self.run_actions();
        if !self.core.life.is_established() {
            // Server with accepted early data: answer at half-RTT (early.rs).
            self.seal_half_rtt();
            return;
        }
        self.core.flush_delayed_acks(now);
        self.check_orphan_timeout(now);
        self.check_keepalive(now);
        self.check_silent_paths(now);
        self.check_idle(now);
        if self.core.life.is_closed() {
            return;
        }
        let mut failed = false;
        if self.core.life.is_fallback() {
            for c in &mut self.conns {
                if c.is_usable() {
                    if let Err(e) = self.core.fill_fallback(c) {
                        c.fail(e);
                        failed = true;
                    }
                }
            }
        } else {
            self.route_acks();
            failed |= self.seal_join_records();
            failed |= self.fill_streams();
            failed |= self.fill_control_and_first_records();
            self.answer_connection_closes();
        }
        // The peer is done (close_notify on every connection) and so are all our streams:
        // answer with our close_notify so the session ends on both sides.
        if self.peer_closed() && self.core.all_send_halves_finished() {
            self.core.life.begin_closing();
        }
        let gave_up = self.core.life.is_closing() && self.give_up_suspects_at_close();
        if self.core.life.is_closing() && self.core.all_sent() && !gave_up {
            for c in &mut self.conns {
                if let Err(e) = c.send_close_notify() {
                    c.fail(e);
                    failed = true;
                }
            }
        }
        if failed || self.core.life.is_closing() {
            self.after_connection_change();
        }
    }

    /// A joining connection's first record starts with its Join frame (PROTOCOL.md §3).
    fn seal_join_records(&mut self) -> bool {
        let mut failed = false;
        for c in &mut self.conns {
            if !c.is_usable() {
                continue;
            }
            let frame = if let Some(token) = c.join.token.take() {
                Frame::Join { token }
            } else if let Some(creds) = c.join.rejoin.take() {
                match c.rejoin_frame(&creds) {
                    Some(frame) => frame,
                    None => continue,
                }
            } else {
                continue;
            };
            let mut plaintext = Vec::with_capacity(frame.encoded_len() + 1);
            frame.encode(&mut plaintext);
            plaintext.push(CT_APPLICATION_DATA);
            if let Some((key, tx)) = c.tcpls_tx() {
                match key.seal_scatter(&[], &plaintext, tx) {
                    Ok(_) => c.stats.records_sent += 1,
                    Err(e) => {
                        c.fail(e.into());
                        failed = true;
                    }
                }
            }
        }
        failed
    }

    /// Stream records, deficit round robin over streams (each turn seals up to
    /// `SessionConfig::stream_quantum` bytes of one stream, in full records); each goes on its
    /// steered connection or where the scheduler puts it, as long as some connection has room.
    /// A record is not cut short while more of its stream's data may come in time: a tail
    /// shorter than a record waits while its connection still has bytes to write (autocorking),
    /// so that bulk writers' records stay full (zero-copy placement, fewer records).
    fn fill_streams(&mut self) -> bool {
        let high = self.high_water();
        let mut failed = false;
        let mut skipped = 0;
        let mut views = Vec::new();
        // With one connection for all unsteered streams, the round robin's next stream is
        // known, so the record before a switch can announce it (Stream Change).
        // Backup paths carry no unsteered data while a regular connection can (PROTOCOL.md §3).
        let regular_usable = self.conns.iter().any(|c| !c.path.backup && c.carries_streams());
        let carries_unsteered = |c: &Connection| c.carries_streams() && !(c.path.backup && regular_usable);
        let sole_carrier = self.conns.iter().filter(|c| carries_unsteered(c)).count() == 1;
        if let Some(now) = self.core.clock.now() {
            self.core.ext.refill(now);
        }
        while let Some(id) = self.core.streams.next_ready() {
            if skipped > self.core.streams.ready_len() {
                break;
            }
            // No connection can take a record: stop here, so that the next pass starts with
            // this stream, as the last record's Stream Change announced.
            if !self.conns.iter().any(|c| c.carries_streams() && high.has_room(c)) {
                break;
            }
            if self.core.holds_short_tail(id) {
                // All it has is a short tail that the application's next write will complete:
                // let the others go first. It leaves the queue when an event of its own is sure
                // to schedule it again: the acknowledgement of its bytes in flight, or the next
                // write of a writer that was told it may write (even a write that takes
                // nothing schedules). Otherwise (a blocked writer, nothing in flight) whether
                // it may wait depends on the session's budget, so it stays.
                if self.core.streams.get(id).is_some_and(|s| s.send.in_flight() > 0 || !s.write_blocked()) {
                    self.core.streams.park_front();
                } else {
                    // Its writer waits with room enough to be woken, room that came without an
                    // event of its own (others' streams went quiet and its share or floor
                    // grew): wake it, or tail and writer would wait for each other for ever.
                    self.core.notify_writable_if_blocked(id);
                    skipped += 1;
                    self.core.streams.skip_front();
                }
                continue;
            }
            let steer = self.core.streams.get(id).and_then(|s| s.steer);
            let steer = steer.filter(|c| self.conns.get(*c).is_some_and(Connection::carries_streams));
            let target = match steer {
                Some(conn) => {
                    self.conns.get(conn).filter(|c| high.has_room(c) && self.core.ext.may_send(c.id)).map(|c| c.id)
                }
                None => {
                    // A scheduler that may wait for a fast path rather than send on a slow one
                    // sees every carrier, those without room too (`Scheduler::pick_any`).
                    let all = self.core.paths.scheduler().waits_for_paths();
                    let stream_backlog = self
                        .core
                        .streams
                        .get(id)
                        .map_or(0, |s| s.send.write_offset().saturating_sub(s.send.sent_offset()));
                    views.clear();
                    views.extend(
                        self.conns
                            .iter()
                            .filter(|c| carries_unsteered(c) && self.core.ext.may_send(c.id))
                            .map(|c| PathView { room: high.has_room(c), stream_backlog, ..Session::path_view(c) })
                            .filter(|v| all || v.room),
                    );
                    if !views.iter().any(|v| v.room) {
                        None
                    } else {
                        let scheduler = self.core.paths.scheduler();
                        let pick = if all { scheduler.pick_any(id, &views) } else { scheduler.pick(id, &views) };
                        pick.filter(|c| views.iter().any(|v| v.conn == *c && v.room))
                    }
                }
            };
            let Some(conn) = target else {
                // This stream's connection is full: let the others go first.
                skipped += 1;
                self.core.streams.skip_front();
                continue;
            };
            skipped = 0;
            let Some(c) = self.conns.get_mut(conn) else { break };
            let before = c.tx.len();
            if let Err(e) = self.core.seal_stream_record(c, id, sole_carrier) {
                c.fail(e);
                failed = true;
            }
            self.core.ext.charge(conn, c.tx.len().saturating_sub(before));
        }
        failed
    }

    /// Records of control frames alone, and the client's first record on its initial
    /// connection, which it always sends right after Finished so the server knows the
    /// connection opens a new session (PROTOCOL.md §1).
    fn fill_control_and_first_records(&mut self) -> bool {
        let mut failed = false;
        let high = self.high_water();
        // The control frames that may travel anywhere go first where they are most likely to
        // arrive.
        let preferred = self.control_carrier();
        if let Some(c) = preferred.and_then(|id| self.conns.get_mut(id)) {
            failed |= self.core.seal_control_on(c, high);
        }
        for c in &mut self.conns {
            if Some(c.id) != preferred {
                failed |= self.core.seal_control_on(c, high);
            }
        }
        failed
    }

    /// How much each connection may hold sealed ahead now ([`HighWater`]).
    fn high_water(&self) -> HighWater {
        let multipath = self.conns.iter().filter(|c| c.is_up()).take(2).count() > 1;
        HighWater::new(self.core.config.transmit_high_water, multipath)
    }

    /// The connection that takes first the control frames that may travel on any: the one that
    /// heard from the peer last (the most likely to reach it), not a suspect one (its records
    /// may be lost: `loss.rs`). None with a single connection (it takes them anyway).
    fn control_carrier(&self) -> Option<ConnId> {
        if self.conns.len() < 2 {
            return None;
        }
        self.conns
            .iter()
            .filter(|c| c.is_usable() && c.is_tcpls() && !c.join_pending() && !c.is_suspect())
            .max_by_key(|c| (c.keepalive.last_rx, std::cmp::Reverse(c.id)))
            .map(|c| c.id)
    }

    /// Tells the control queue which connections carry their own ACKs: an ACK goes back on the
    /// connection it acknowledges, so that a path that went silent loses only its own ACKs
    /// (and is then suspected by the peer), never those of the paths that work. The ACKs of a
    /// connection that cannot carry them (closing, failed, suspect) go on any other.
    fn route_acks(&mut self) {
        let homes = self.conns.iter().filter(|c| c.is_usable() && c.is_tcpls() && !c.is_suspect()).map(|c| c.id);
        self.core.control.set_ack_homes(homes);
    }

    /// When the peer closes one of several connections, we close it too; its streams carry on
    /// over the others (not over a suspect one: when the peer closed all but that one, the
    /// session is closing, see `peer_closed`).
    fn answer_connection_closes(&mut self) {
        let others_usable =
            self.conns.iter().filter(|c| c.is_usable() && !c.close_received() && !c.is_suspect()).count();
        if others_usable == 0 {
            return;
        }
        for c in &mut self.conns {
            if c.close_received() && !c.close_sent() {
                if let Err(e) = c.send_close_notify() {
                    c.fail(e);
                }
            }
        }
    }

    /// The peer sent close_notify on every live connection: it will open no more streams. A
    /// connection we suspect of silence (`loss.rs`) is not waited for (its close_notify may
    /// never arrive) as long as one of the others brought one.
    pub fn peer_closed(&self) -> bool {
        self.core.life.is_established()
            && self.core.life.orphaned_since().is_none()
            && self.conns.iter().all(|c| c.close_received() || c.is_finished() || c.is_suspect())
            && (self.conns.iter().any(|c| c.close_received()) || self.conns.iter().all(|c| !c.is_suspect()))
    }

    /// Something is queued that the next `prepare_transmit` would seal (the IO layer uses this
    /// to decide whether an application call needs to wake the driver).
    pub fn wants_transmit(&self) -> bool {
        (self.core.life.is_established()
            && (!self.core.control.is_empty() || self.core.streams.has_ready() || self.core.life.is_closing()))
            || self.half_rtt_possible()
    }

    /// Anything sealed and not yet written, on any connection.
    pub fn has_transmit(&self) -> bool {
        self.conns.iter().any(|c| !c.is_gone() && !c.tx.is_empty())
    }
}

impl Core {
    /// All queued stream bytes (and FINs) are sealed, including bytes still waiting for the
    /// peer's credit, and no control frame waits.
    pub(super) fn all_sent(&self) -> bool {
        self.control.is_empty() && self.streams.values().all(|s| s.send_reset() || s.send.is_all_sent())
    }

    /// Every stream's sending half is finished or reset (its data may still be queued).
    pub(super) fn all_send_halves_finished(&self) -> bool {
        self.streams.values().all(|s| s.send_reset() || s.send.is_finished())
    }

    /// Stream bytes per turn of the deficit round robin (at least one record's worth).
    fn quantum(&self) -> usize {
        self.config.stream_quantum.max(1)
    }

    /// All that stream `id` has to send now is new data short of a full record that the
    /// application's next write will complete (its last write did not fit, and no FIN, lost
    /// bytes or flow control limit ends it): sealing it now would cut a short record. It waits
    /// only while that write is sure to come: the stream has sealed bytes whose acknowledgement
    /// will make room, or has room enough that its writer is woken (`SendBuf::worth_waking`; the
    /// application was told, or is writing).
    pub(super) fn holds_short_tail(&self, id: StreamId) -> bool {
        self.streams.get(id).is_some_and(|s| {
            self.completed_by_writer(s, s.send.sendable()) && (s.send.in_flight() > 0 || s.send.worth_waking())
        })
    }

    /// `pending` bytes of `s` (short of a record) are a tail its writer will complete.
    fn completed_by_writer(&self, s: &Stream, pending: usize) -> bool {
        let full = self.record_size() - STREAM_FRAME_OVERHEAD;
        s.more_coming()
            && pending < full
            && !s.send.is_finished()
            && !s.send_reset()
            && !s.send.has_lost()
            && !s.send.credit_limited()
    }

    /// After a record of up to `room` bytes of stream `id`, whether the stream's next record
    /// goes out right after it (it has more that is not a tail waiting for its writer).
    fn goes_on(&self, id: StreamId, room: usize) -> bool {
        self.streams.get(id).is_some_and(|s| {
            let left = s.send.sendable().saturating_sub(room);
            left > 0 && !self.completed_by_writer(s, left)
        })
    }

    /// After sealing `len` more bytes of stream `id` in this turn: whether its next record
    /// comes right after (its turn goes on).
    fn turn_goes_on(&self, id: StreamId, len: usize) -> bool {
        let (turn, sealed) = self.streams.turn();
        turn == id && sealed + len < self.quantum() && self.goes_on(id, len)
    }

    fn record_size(&self) -> usize {
        self.config.record_size.clamp(STREAM_FRAME_OVERHEAD + MIN_STREAM_CHUNK + 1, MAX_PLAINTEXT)
    }

    /// The stream whose record round robin will put on connection `conn` after the current one
    /// (the front of the ready queue), and its next offset: what a Stream Change announces so
    /// the receiver can decrypt that record in place (PROTOCOL.md §2.3). `None` when it is the
    /// current stream again, or not known (only a few queued streams are looked at).
    fn next_on_connection(
        &self,
        conn: crate::event::ConnId,
        sole_carrier: bool,
        current: StreamId,
        room: usize,
    ) -> Option<(StreamId, u64)> {
        const LOOKAHEAD: usize = 8;
        if self.turn_goes_on(current, room) {
            return None;
        }
        let candidate = |next: &StreamId, holding_ok: bool| {
            let s = self.streams.get(*next)?;
            let here = match s.steer {
                Some(steer) => steer == conn,
                None => sole_carrier,
            };
            // A short tail waits for its writer: the streams after it go first in this pass.
            if !here || s.send_reset() || !s.send.has_pending() || (!holding_ok && self.holds_short_tail(*next)) {
                return None;
            }
            s.send.next_chunk(1).map(|(offset, _, _)| (*next, offset))
        };
        let queued = || self.streams.ready_after_front().take(LOOKAHEAD);
        if let Some(next) = queued().find_map(|next| candidate(next, false)) {
            return Some(next);
        }
        // Every other one waits for its writer: the current stream goes on if it has full
        // records left, else the next pass starts with the first of them.
        if self.goes_on(current, room) {
            return None;
        }
        queued().find_map(|next| candidate(next, true))
    }

    /// One record of stream `id` (the front of the ready queue) on connection `c`, with the
    /// control frames that fit after it, and a Stream Change when another stream is due next
    /// on `c`.
    fn seal_stream_record(&mut self, c: &mut Connection, id: StreamId, sole_carrier: bool) -> Result<(), Error> {
        let record_size = self.record_size();
        let mut trailer = std::mem::take(&mut self.scratch);
        trailer.clear();
        let full_room = record_size - STREAM_FRAME_OVERHEAD;
        let change = self.next_on_connection(c.id, sole_carrier, id, full_room);
        let change_len = if change.is_some() { STREAM_CHANGE_LEN } else { 0 };
        let budget = record_size - STREAM_FRAME_OVERHEAD - MIN_STREAM_CHUNK - change_len;
        // Only when this record will carry data: ACKs taken for a record that is not sealed
        // would go back to the queue and leave in a record of their own, early.
        if c.is_tcpls() && self.streams.get(id).is_some_and(|s| s.send.next_chunk(1).is_some()) {
            self.piggyback_acks();
        }
        let control_len = self.control.take_into(c.id, budget, &mut trailer);
        let number = c.next_tx_number();
        let mut sent = None;
        let mut moved = 0;
        let result: Result<(), Error> = (|| {
            let Some((key, tx)) = c.tcpls_tx() else { return Ok(()) };
            let Some(s) = self.streams.get_mut(id) else { return Ok(()) };
            let room = record_size - control_len - change_len - STREAM_FRAME_OVERHEAD;
            // Where the send buffer's ring wraps, the data's second part is copied after the
            // first (at most one record's worth, once per wrap) so that the record stays full.
            let Some((offset, data, more, fin)) = s.send.next_chunk_split(room) else { return Ok(()) };
            let len = data.len() + more.len();
            // Stream frame first: its data, then its fields, then the control frames, then
            // the Stream Change (not retransmitted: it only describes this connection's order).
            let mut fields = [0u8; STREAM_FRAME_OVERHEAD];
            write_stream_trailer(&mut fields, id, offset, len as u16, fin);
            // In front of the control frames already in `trailer` (memmove, not a byte-wise
            // splice: `more` can be most of a record).
            moved = more.len();
            let controls = trailer.len();
            trailer.resize(controls + moved + STREAM_FRAME_OVERHEAD, 0);
            trailer.copy_within(0..controls, moved + STREAM_FRAME_OVERHEAD);
            trailer[..moved].copy_from_slice(more);
            trailer[moved..moved + STREAM_FRAME_OVERHEAD].copy_from_slice(&fields);
            if let Some((next_stream_id, next_offset)) = change {
                Frame::StreamChange { next_stream_id, next_offset }.encode(&mut trailer);
            }
            trailer.push(CT_APPLICATION_DATA);
            key.seal_scatter(data, &trailer, tx)?;
            s.send.mark_sent(offset, len, fin);
            sent = Some((offset, len, fin));
            Ok(())
        })();
        match sent {
            Some(chunk) => {
                c.stats.records_sent += 1;
                c.sent.note_stream_data();
                let control = &trailer[moved + STREAM_FRAME_OVERHEAD..moved + STREAM_FRAME_OVERHEAD + control_len];
                self.log_sent(c, number, Some((id, chunk.0, chunk.1, chunk.2)), control);
                // Deficit round robin: a stream with more to send keeps its turn until it has
                // sealed a quantum, then goes to the back.
                let sealed = self.streams.add_to_turn(id, chunk.1);
                let pending = self.streams.get(id).is_some_and(|s| s.send.has_pending());
                // A stream left with a tail for its writer to complete ends its turn too.
                if !pending || sealed >= self.quantum() || self.holds_short_tail(id) {
                    self.streams.end_turn();
                    self.streams.requeue_front(id);
                }
                self.notify_writable_if_blocked(id);
                self.maybe_remove(id);
            }
            // Nothing was sealed: the control frames taken for this record go back.
            None => self.requeue_control(&trailer[..control_len]),
        }
        self.scratch = trailer;
        result?;
        c.maybe_update_key(self.config.key_update_records)?;
        Ok(())
    }

    /// Records of control frames on `c` while it has room, and a client's first record.
    /// Returns whether `c` failed.
    fn seal_control_on(&mut self, c: &mut Connection, high: HighWater) -> bool {
        if !c.is_usable() || !c.is_tcpls() || c.join_pending() {
            return false;
        }
        // A suspect connection takes only what is bound to it (its probe): anything else might
        // never arrive.
        let bound_only = c.is_suspect();
        let id = c.id;
        let waiting = |q: &super::ControlQueue| if bound_only { q.has_bound_for(id) } else { q.has_for(id) };
        while high.has_room(c) && waiting(&self.control) {
            match self.seal_control_record(c, bound_only) {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    c.fail(e);
                    return true;
                }
            }
        }
        if self.side == super::side::Side::Client && c.stats.records_sent == 0 && c.is_usable() {
            let padding = [0u8, CT_APPLICATION_DATA];
            if let Some((key, tx)) = c.tcpls_tx() {
                match key.seal_scatter(&[], &padding, tx) {
                    Ok(_) => c.stats.records_sent += 1,
                    Err(e) => {
                        c.fail(e.into());
                        return true;
                    }
                }
            }
        }
        false
    }

    fn requeue_control(&mut self, encoded: &[u8]) {
        for frame in FrameReader::new(encoded).flatten() {
            self.control.push(&frame, None);
        }
    }

    /// A record of control frames only. Returns false when nothing fitted.
    fn seal_control_record(&mut self, c: &mut Connection, bound_only: bool) -> Result<bool, Error> {
        let record_size = self.record_size();
        let mut trailer = std::mem::take(&mut self.scratch);
        trailer.clear();
        let len = self.control.take_into_filtered(c.id, record_size, &mut trailer, bound_only);
        if len == 0 {
            self.scratch = trailer;
            return Ok(false);
        }
        let number = c.next_tx_number();
        trailer.push(CT_APPLICATION_DATA);
        let result = match c.tcpls_tx() {
            Some((key, tx)) => key.seal_scatter(&[], &trailer, tx).map(|_| true),
            None => Ok(false),
        };
        match result {
            Ok(true) => {
                c.stats.records_sent += 1;
                self.log_sent(c, number, None, &trailer[..len]);
            }
            _ => self.requeue_control(&trailer[..len]),
        }
        self.scratch = trailer;
        let sealed = result?;
        c.maybe_update_key(self.config.key_update_records)?;
        Ok(sealed)
    }

    /// A fallback session sends stream 0's bytes as plain TLS application data.
    fn fill_fallback(&mut self, c: &mut Connection) -> Result<(), Error> {
        if c.fallback_tx().is_none() {
            return Ok(());
        }
        let Some(s) = self.streams.get_mut(0) else {
            return Ok(());
        };
        while c.tx.len() < self.config.transmit_high_water {
            let Some((offset, data, fin)) = s.send.next_chunk(MAX_PLAINTEXT * 4) else { break };
            let len = data.len();
            if let (true, Some((tls, tx))) = (len > 0, c.fallback_tx()) {
                tls.write(data, tx)?;
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

impl Session {
    /// Sealed bytes to write on `conn`'s socket; call [`Session::transmit_advance`] with how many
    /// were written.
    pub fn transmit_data(&self, conn: ConnId) -> &[u8] {
        match self.conns.get(conn) {
            Some(c) if !c.is_gone() => c.tx.data(),
            _ => &[],
        }
    }

    pub fn transmit_advance(&mut self, conn: ConnId, n: usize) {
        if let Some(c) = self.conns.get_mut(conn) {
            c.tx.advance(n);
            c.stats.bytes_sent += n as u64;
            if c.tx.is_empty() && c.is_finished() {
                c.tx.shrink();
                c.rx.shrink();
            } else {
                // A small buffer written out (handshake flights, small records) is freed: an
                // idle connection holds none; a bulk sender's large one is kept.
                c.tx.release_if_small();
            }
        }
    }

    /// The connection is over and its last bytes are written: close the socket.
    pub fn should_close_socket(&self, conn: ConnId) -> bool {
        self.conns.get(conn).is_none_or(|c| c.is_finished() && (c.is_gone() || c.tx.is_empty()))
    }

    /// We sent close_notify and everything before it is written: the IO layer may shut down its
    /// write half (TCP FIN), as TLS over TCP does.
    pub fn should_shutdown_write(&self, conn: ConnId) -> bool {
        self.conns.get(conn).is_some_and(|c| c.close_sent() && c.tx.is_empty())
    }
}
