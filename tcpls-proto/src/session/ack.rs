//! Record acknowledgements and failover (PROTOCOL.md §5).
//!
//! The receiver acknowledges, per connection, the highest record number it has processed: after
//! 16 ack-eliciting records, or 25 ms after the first one not yet acknowledged, on any
//! connection. The sender keeps, per connection, what each unacknowledged record carried (stream
//! ranges by reference, control frames encoded) and releases it on acknowledgement. When a
//! connection fails, its unacknowledged records are re-sent, re-encrypted, on the others; the
//! receiver drops bytes it already has by offset, so nothing is lost or delivered twice.

use std::time::Instant;

use crate::event::{ConnId, Event, StreamId};
use crate::frame::{Frame, FrameReader};

use super::conn::{Connection, SentRecord};
use super::{Core, Session};

/// Receive-side acknowledgement state of one connection.
impl Core {
    /// Record `number` on `conn` carried an ack-eliciting frame.
    pub(super) fn note_ack_eliciting(&mut self, conn: ConnId, number: u64) {
        let every = self.config.ack_every_records.max(1);
        let delay = self.config.ack_delay;
        let state = self.acks.conns.entry(conn).or_default();
        state.highest = state.highest.max(number);
        if state.last_counted == Some(number) {
            return;
        }
        state.last_counted = Some(number);
        state.pending += 1;
        if state.pending >= every {
            state.pending = 0;
            state.deadline = None;
            let highest = state.highest;
            self.control.push_ack(conn, highest);
        } else if state.deadline.is_none() {
            match self.clock.now() {
                Some(now) => state.deadline = Some(now + delay),
                // Records come in through `handle_read`, which sets the clock: without a time
                // there is nothing to delay by, so the ACK goes with the next record.
                None => {
                    state.pending = 0;
                    let highest = state.highest;
                    self.control.push_ack(conn, highest);
                }
            }
        }
    }

    /// Queues the ACKs whose delay has run out.
    pub(super) fn flush_delayed_acks(&mut self, now: Instant) {
        for (conn, state) in &mut self.acks.conns {
            if state.deadline.is_some_and(|d| d <= now) {
                state.deadline = None;
                state.pending = 0;
                self.control.push_ack(*conn, state.highest);
            }
        }
    }

    /// A record of stream data is about to be sealed: the ACKs whose delay is running go with
    /// it (PROTOCOL.md §5: no later than the delay, earlier is allowed), so a request answered
    /// within the delay costs no ACK-only record later. Records of control frames alone (a
    /// receiver's credit updates) do not take them: a bulk sender's records stay acknowledged
    /// every 16 records or 25 ms, as before. Bound ACKs (Ping answers) are queued at once
    /// already.
    pub(super) fn piggyback_acks(&mut self) {
        for (conn, state) in &mut self.acks.conns {
            if state.deadline.take().is_some() {
                state.pending = 0;
                self.control.push_ack(*conn, state.highest);
            }
        }
    }

    /// The earliest pending ACK deadline.
    pub(super) fn next_ack_deadline(&self) -> Option<Instant> {
        self.acks.conns.values().filter_map(|s| s.deadline).min()
    }

    /// Remembers what a record carried, for release on ACK or re-sending on failover.
    pub(super) fn log_sent(
        &mut self,
        c: &mut Connection,
        number: u64,
        stream: Option<(StreamId, u64, usize, bool)>,
        control: &[u8],
    ) {
        if !self.config.failover {
            return;
        }
        // ACKs and Padding are not worth re-sending, nor answers about one connection (probe
        // echoes, TCP Info, Ping), which mean nothing once it failed: keeping them let a peer
        // that probes and never acknowledges grow this log without bound. The rest is kept.
        let mut kept = Vec::new();
        if !control.is_empty() {
            for frame in FrameReader::new(control).flatten() {
                if !matches!(
                    frame,
                    Frame::Ack { .. }
                        | Frame::Padding
                        | Frame::Ping
                        | Frame::RttEcho { .. }
                        | Frame::AddressEcho { .. }
                        | Frame::TcpInfo { .. }
                ) {
                    frame.encode(&mut kept);
                }
            }
        }
        if stream.is_none() && kept.is_empty() {
            return;
        }
        let sent_at = self.clock.now();
        c.loss.on_record_logged(sent_at);
        c.sent.push(SentRecord { number, sent_at, stream, control: kept });
        // Bounded: a peer that reads but does not acknowledge (ACKs are a default, not a duty,
        // PROTOCOL.md §5) must not grow it for ever. The oldest records are released as if
        // acknowledged; only their failover guarantee is lost, and it is counted.
        let (max_records, max_control) = (self.config.max_unacked_records, self.config.max_unacked_control);
        while c.sent.len() > max_records || c.sent.control_bytes() > max_control {
            let Some(record) = c.sent.pop_oldest() else { break };
            self.stats.unacked_released += 1;
            self.release(record);
        }
    }

    /// Releases what the peer acknowledged on `c` (records numbered up to `highest`).
    pub(super) fn on_acked(&mut self, c: &mut Connection, highest: u64) {
        let mut newest_sent = None;
        while let Some(record) = c.sent.pop_acknowledged(highest) {
            newest_sent = record.sent_at;
            self.release(record);
        }
        if highest == u64::MAX {
            // A clean close, not an ACK from the peer.
            return;
        }
        self.peer_acknowledges = true;
        let now = self.clock.now();
        let sample = newest_sent.zip(now).map(|(sent, now)| now.saturating_duration_since(sent));
        if c.loss.on_ack(highest, sample, !c.sent.is_empty(), now) {
            self.stats.paths_recovered += 1;
            self.events.push(Event::PathRecovered { conn: c.id });
        }
    }

    fn release(&mut self, record: SentRecord) {
        if let Some((id, offset, len, fin)) = record.stream {
            if let Some(s) = self.streams.get_mut(id) {
                s.send.ack(offset, len, fin);
            }
            // A short tail parked until its bytes in flight were acknowledged may have to go
            // now (`Streams::park_front`). Its writer is normally woken here and schedules it
            // with its next write (the budget's floor leaves a stream holding less than a
            // record room for one); scheduling here too costs a lookup and relies on nothing.
            self.streams.schedule(id);
            self.notify_writable_if_blocked(id);
            self.maybe_remove(id);
        }
    }

    /// `c` failed: everything it carried that the peer did not acknowledge goes out again on
    /// the other connections. Returns whether anything had to be re-sent.
    pub(super) fn fail_over(&mut self, c: &mut Connection) -> bool {
        let resent = self.resend_unacked(c);
        self.acks.conns.remove(&c.id);
        resent
    }

    /// Queues again, for the other connections, everything `c` carried that the peer did not
    /// acknowledge (a failover, or a suspicion: `loss.rs`). Returns whether there was any.
    pub(super) fn resend_unacked(&mut self, c: &mut Connection) -> bool {
        let resent = !c.sent.is_empty();
        for record in c.sent.take_all() {
            self.stats.records_resent += 1;
            if let Some((id, offset, len, fin)) = record.stream {
                self.stats.stream_bytes_resent += len as u64;
                if let Some(s) = self.streams.get_mut(id) {
                    s.send.retransmit(offset, len, fin);
                }
                self.streams.schedule(id);
            }
            for frame in FrameReader::new(&record.control).flatten() {
                self.control.push(&frame, None);
            }
        }
        resent
    }
}

impl Session {
    /// Connection `id` ended. A clean close (close_notify both ways) means the peer processed
    /// everything sent before our close_notify; a failure means re-sending what it did not
    /// acknowledge, and telling the peer (Connection Reset) over the connections left.
    ///
    /// Without failover nothing says what a failed connection carried, either way: its streams'
    /// bytes may be lost, and a stream with a hole would wait for ever. Returns why the whole
    /// session must then end (when it carried stream data, streams are open and other
    /// connections would carry on; a join that failed, or a path that carried only control
    /// frames, loses nothing).
    pub(super) fn on_connection_finished(&mut self, id: ConnId) -> Option<String> {
        let others = self.conns.iter().any(|c| c.id != id && c.is_usable());
        let c = self.conns.get_mut(id)?;
        if c.error().is_none() {
            let highest = u64::MAX;
            self.core.on_acked(c, highest);
            return None;
        }
        if !self.core.config.failover && others && c.sent.carried_streams() && self.core.streams.len() > 0 {
            return Some(format!(
                "connection {id} failed and failover is off: stream bytes it carried may be lost, so the session \
                 ends rather than leave a stream waiting for them (turn failover on to survive a lost connection)"
            ));
        }
        if self.core.fail_over(c) {
            self.core.stats.failovers += 1;
            self.core.events.push(Event::FailedOver { conn: id });
        }
        if others {
            self.core.control.push(&Frame::ConnectionReset { connection_id: id }, None);
        }
        None
    }
}
