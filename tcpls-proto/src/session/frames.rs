//! What the session does with each received frame (PROTOCOL.md §7).
//!
//! Frames of services that need several connections (join, failover, steering) are decoded and
//! checked here and reported as events; the multipath machinery acts on them.

use crate::error::TransportError;
use crate::event::{ConnId, Event, StreamId};
use crate::frame::{Frame, FrameError, FrameReader};
use crate::stream::RecvError;

use super::conn::Flow;
use super::conn_action::ConnAction;
use super::joining::{JoinKey, JoinRequest, JOIN_FRAME_LEN};
use super::placement::{LeadStream, Scan};
use super::side::Side;
use super::{Core, Inbound, RecordSink};

/// Every frame of a record, decoded (last on the wire first), each with the number of bytes
/// that precede it; the first frame that does not parse is the error.
pub(super) fn decode_all(plaintext: &[u8]) -> Result<Vec<(Frame<'_>, usize)>, TransportError> {
    let mut reader = FrameReader::new(plaintext);
    let mut frames = Vec::new();
    while let Some(frame) = reader.next() {
        frames.push((frame.map_err(frame_error)?, reader.remaining()));
    }
    Ok(frames)
}

fn frame_error(e: FrameError) -> TransportError {
    TransportError::decode(format!("frame: {e}"))
}

fn recv_error(id: StreamId, e: RecvError) -> TransportError {
    TransportError::illegal(format!("stream {id}: {e:?}"))
}

impl Core {
    pub(super) fn on_inbound(
        &mut self,
        conn: ConnId,
        seq: u64,
        inbound: Inbound<'_>,
        scan: &mut Scan,
    ) -> Result<Flow, TransportError> {
        match inbound {
            Inbound::PlainData(data) => self.on_plain_data(data).map(|()| Flow::Continue),
            Inbound::Frames { plaintext, first } if first && self.side == Side::Server => {
                self.on_first_record(conn, seq, plaintext, scan)
            }
            Inbound::Frames { plaintext, .. } => {
                self.on_frames(conn, seq, plaintext, scan)?;
                Ok(Flow::Continue)
            }
            Inbound::Direct { lead, rest } => {
                // The stream data first: its slot must not be disturbed by the other frames
                // (a Stream Reset of the same stream, say) before it is committed.
                self.note_ack_eliciting(conn, seq);
                self.on_direct_stream(lead)?;
                for frame in rest {
                    self.on_frame(conn, seq, frame.clone())?;
                }
                Ok(Flow::Continue)
            }
        }
    }

    /// Stream data that was decrypted straight into place (`RecordSink::direct_slot`): the
    /// same rules as [`Core::on_stream_frame`], without the copy.
    fn on_direct_stream(&mut self, lead: LeadStream) -> Result<(), TransportError> {
        let id = lead.id;
        self.check_stream_id(id)?;
        let Some(s) = self.streams.get_mut(id) else {
            return Err(TransportError::internal(format!("stream {id} vanished under a direct record")));
        };
        let before = s.recv.readable();
        s.recv.commit_direct(lead.offset, lead.len, lead.fin).map_err(|e| recv_error(id, e))?;
        let after = s.recv.readable();
        let new = (after - before.min(after)) as u64;
        self.stats.stream_bytes_received += new;
        self.stats.zero_copy_bytes += new;
        if after > before || s.recv.is_finished() {
            self.notify_readable(id);
        }
        Ok(())
    }

    /// Reads a record's frames (once) and acts on each, noting their placement facts in `scan`.
    pub(super) fn on_frames(
        &mut self,
        conn: ConnId,
        seq: u64,
        plaintext: &[u8],
        scan: &mut Scan,
    ) -> Result<(), TransportError> {
        let mut reader = FrameReader::new(plaintext);
        while let Some(frame) = reader.next() {
            let frame = frame.map_err(frame_error)?;
            scan.note(&frame, reader.remaining());
            self.on_frame(conn, seq, frame)?;
        }
        Ok(())
    }

    /// The client's first record on a connection tells the server what the connection is
    /// (PROTOCOL.md §3): a Join first means it belongs to another session; anything else makes
    /// it the initial connection of a new session, which now gets its join tokens. Its frames
    /// are decoded once, all before any is acted on (a Join must be seen first).
    fn on_first_record(
        &mut self,
        conn: ConnId,
        seq: u64,
        plaintext: &[u8],
        scan: &mut Scan,
    ) -> Result<Flow, TransportError> {
        let frames = decode_all(plaintext)?;
        self.on_first_frames(conn, seq, plaintext, frames, scan)
    }

    /// [`Core::on_first_record`] once its frames are decoded (`frames` with, for each, the bytes
    /// that precede it in `plaintext`).
    pub(super) fn on_first_frames<'a>(
        &mut self,
        conn: ConnId,
        seq: u64,
        plaintext: &'a [u8],
        frames: Vec<(Frame<'a>, usize)>,
        scan: &mut Scan,
    ) -> Result<Flow, TransportError> {
        // Frames are read back to front; the Join, if any, is the last one read.
        let key = match frames.last() {
            Some((Frame::Join { token }, 0)) => Some((JoinKey::Token(*token), JOIN_FRAME_LEN)),
            Some((f @ Frame::Rejoin { connection_id, session_ref, proof }, 0)) => Some((
                JoinKey::Rejoin { connection_id: *connection_id, session_ref: *session_ref, proof: *proof },
                f.encoded_len(),
            )),
            _ => None,
        };
        if let Some((key, len)) = key {
            if conn != 0 || self.paths.initial_seen() {
                return Err(TransportError::unexpected("Join on a connection of an established session"));
            }
            // Frames after the Join belong to the session the token names: keep them for it.
            let rest = plaintext.get(len..).unwrap_or_default().to_vec();
            self.paths.set_join_request(JoinRequest { key, seq, rest });
            self.events.push(Event::JoinRequested);
            return Ok(Flow::Pause);
        }
        if conn == 0 && !self.paths.initial_seen() {
            self.paths.see_initial();
            self.issue_initial_frames(conn);
        }
        for (frame, remaining) in frames {
            scan.note(&frame, remaining);
            self.on_frame(conn, seq, frame)?;
        }
        Ok(Flow::Continue)
    }

    pub(super) fn on_frame(&mut self, conn: ConnId, seq: u64, frame: Frame<'_>) -> Result<(), TransportError> {
        if frame.is_ack_eliciting() {
            self.note_ack_eliciting(conn, seq);
        }
        match frame {
            Frame::Padding | Frame::StreamChange { .. } => {}
            Frame::Ping => self.control.push_ack_bound(conn, seq, true),
            Frame::Stream { stream_id, offset, fin, data } => self.on_stream_frame(stream_id, offset, data, fin)?,
            Frame::Ack { connection_id, highest_record_seq } => {
                self.actions.push(ConnAction::Ack { conn: connection_id, highest: highest_record_seq });
            }
            Frame::NewToken { sequence, token } => {
                if self.side == Side::Server {
                    return Err(TransportError::unexpected("New Token sent by a client"));
                }
                let total = self.paths.receive_token(sequence, token);
                self.events.push(Event::TokensReceived { total });
            }
            Frame::ConnectionReset { connection_id } => self.actions.push(ConnAction::Reset(connection_id)),
            Frame::NewAddress { address_id, addr } => {
                if self.paths.add_peer_address(address_id, addr) {
                    self.events.push(Event::PeerAddressAdded { address_id, addr });
                }
            }
            Frame::RemoveAddress { address_id } => {
                self.paths.remove_peer_address(address_id);
                self.events.push(Event::PeerAddressRemoved { address_id });
            }
            Frame::Join { .. } | Frame::Rejoin { .. } => {
                return Err(TransportError::unexpected(match self.side {
                    Side::Client => "Join sent by a server",
                    Side::Server => "Join on an established connection",
                }));
            }
            Frame::StreamReset { stream_id, final_size, error_code } => {
                self.check_stream_id(stream_id)?;
                self.open_peer_streams(stream_id)?;
                if let Some(s) = self.streams.get_mut(stream_id) {
                    s.recv.reset(final_size).map_err(|e| recv_error(stream_id, e))?;
                    s.recv_state = s.recv_state.on_peer_reset(error_code);
                    self.notify_readable(stream_id);
                    self.maybe_remove(stream_id);
                } else {
                    self.answer_refused(stream_id);
                }
            }
            Frame::MaxStreamData { stream_id, maximum_offset } => {
                self.check_stream_id(stream_id)?;
                self.open_peer_streams(stream_id)?;
                if let Some(s) = self.streams.get_mut(stream_id) {
                    s.send.set_max_data(maximum_offset);
                    self.streams.schedule(stream_id);
                } else {
                    self.answer_refused(stream_id);
                }
            }
            Frame::UserTimeout { timeout_ms } => {
                self.events.push_answer(Event::UserTimeoutRequested { conn, timeout_ms })
            }
            Frame::RttProbe { connection_id, timestamp_us } => {
                // The echo must come back on the probed connection for the RTT to mean anything.
                // Queued only if that connection exists: one bound to a connection we do not
                // have would never leave the queue (a leak per hostile probe).
                self.actions.push(ConnAction::EchoRtt { conn: connection_id, timestamp_us });
            }
            Frame::RttEcho { connection_id, timestamp_us } => {
                let now_us = self.clock.micros_since_start();
                if let Some(rtt_us) = now_us.checked_sub(timestamp_us) {
                    self.events.push_answer(Event::RttMeasured { conn: connection_id, rtt_us });
                }
            }
            Frame::TcpInfoRequest { connection_id } => {
                self.events.push_answer(Event::TcpInfoRequested { conn: connection_id });
            }
            Frame::TcpInfo { connection_id, info } => {
                self.events.push_answer(Event::PeerTcpInfo { conn: connection_id, info })
            }
            Frame::AddressProbe { connection_id } => {
                self.actions.push(ConnAction::EchoAddress { on: conn, about: connection_id })
            }
            Frame::AddressEcho { connection_id, addr } => {
                self.events.push_answer(Event::AddressEchoed { conn: connection_id, addr });
            }
            Frame::RateLimit { connection_id, bytes_per_second } => {
                // Frames come in through `handle_read`, which sets the clock.
                if let Some(now) = self.clock.now() {
                    self.ext.set_rate(connection_id, bytes_per_second, now);
                }
                self.events.push_answer(Event::RateLimited { conn: connection_id, bytes_per_second });
            }
            Frame::CongestionControl { connection_id, name } => {
                let name = String::from_utf8_lossy(name).into_owned();
                self.events.push_answer(Event::CongestionControlRequested { conn: connection_id, name });
            }
            Frame::StreamSteer { stream_id, connection_id } => {
                self.check_stream_id(stream_id)?;
                self.open_peer_streams(stream_id)?;
                self.events.push(Event::SteerRequested { stream: stream_id, conn: connection_id });
                self.actions.push(ConnAction::Steer { stream: stream_id, conn: connection_id });
            }
            Frame::PathPriority { connection_id, backup } => {
                self.actions.push(ConnAction::SetBackup { conn: connection_id, backup });
            }
        }
        Ok(())
    }

    /// A locally-initiated ID we never opened cannot appear in a peer's frame.
    fn check_stream_id(&self, id: StreamId) -> Result<(), TransportError> {
        if self.streams.never_opened(id) {
            return Err(TransportError::illegal(format!("frame for stream {id}, which we never opened")));
        }
        Ok(())
    }

    /// Peer streams open in order: a frame for stream N opens every lower peer stream not yet
    /// seen (they may arrive later on another connection). Beyond our limit, or beyond what
    /// the receive budget can hold, they are refused.
    fn open_peer_streams(&mut self, id: StreamId) -> Result<(), TransportError> {
        let first = self.streams.next_peer();
        if self.streams.is_local(id) || u64::from(id) < first {
            return Ok(());
        }
        let max = self.config.max_concurrent_streams;
        let count = (u64::from(id) - first) / 2 + 1;
        if count > max as u64 {
            return Err(TransportError::illegal(format!(
                "stream {id} skips more than the {max} streams we allow at once"
            )));
        }
        let mut next = first;
        // A stream is admitted while the concurrency limit and the receive budget allow: each
        // new stream's 64 KiB initial window is memory the peer can fill at once, so a peer
        // that opens streams must not take us past the budget.
        let mut charged = self.streams.receive_charged();
        while next <= u64::from(id) && self.streams.peer_open() < max && self.peer_stream_fits(charged) {
            self.create_stream(next as StreamId, true);
            charged = charged.saturating_add(super::streams::NEW_STREAM_CHARGE);
            next += 2;
        }
        if next <= u64::from(id) {
            // The rest is refused. Each refused stream gets its Stream Reset when a frame naming
            // it arrives (this one now, the others when their own frames come), so that we send
            // one reset per frame received: answering every ID at once made one 15-byte frame
            // cost 4096 resets sent and kept for failover (an amplifier).
            self.stats.streams_refused += (u64::from(id) - next) / 2 + 1;
            self.streams.refuse(next..u64::from(id) + 1);
        }
        self.streams.set_next_peer(u64::from(id) + 2);
        Ok(())
    }

    /// A frame named a peer stream we refused and did not answer yet: Stream Reset 0x1 for it
    /// (PROTOCOL.md §4.3), once.
    fn answer_refused(&mut self, id: StreamId) {
        if self.streams.answer_refused(id) {
            self.control.push_refused(id, id);
        }
    }

    fn on_stream_frame(&mut self, id: StreamId, offset: u64, data: &[u8], fin: bool) -> Result<(), TransportError> {
        self.check_stream_id(id)?;
        self.open_peer_streams(id)?;
        let Some(s) = self.streams.get_mut(id) else {
            // Closed and forgotten, or refused: late bytes are dropped.
            self.answer_refused(id);
            return Ok(());
        };
        if s.recv_state.peer_reset().is_some() {
            // The data is dropped, but the final size the reset stated still binds (PROTOCOL.md
            // §4.1): `insert` checks it and stores nothing after a reset.
            return s.recv.insert(offset, data, fin).map_err(|e| recv_error(id, e));
        }
        let before = s.recv.readable();
        // Bytes below the in-order end are copies (a record re-sent after a failover or a
        // suspicion whose original arrived after all): dropped by `insert`, counted here.
        let duplicate = (offset + data.len() as u64).min(s.recv.contiguous_end()).saturating_sub(offset);
        self.stats.duplicate_bytes_received += duplicate;
        s.recv.insert(offset, data, fin).map_err(|e| recv_error(id, e))?;
        if s.recv_state.is_stopped() {
            let n = s.recv.readable();
            s.recv.consume(n);
            self.update_credit(id);
            self.maybe_remove(id);
            return Ok(());
        }
        let after = s.recv.readable();
        self.stats.stream_bytes_received += (after - before.min(after)) as u64;
        self.stats.copied_bytes += (after - before.min(after)) as u64;
        if after > before || s.recv.is_finished() {
            self.notify_readable(id);
        }
        Ok(())
    }

    /// Plain TLS bytes: the one stream of a fallback session.
    fn on_plain_data(&mut self, data: &[u8]) -> Result<(), TransportError> {
        let offset = self.streams.fallback_received();
        let Some(s) = self.streams.get_mut(0) else {
            return Ok(());
        };
        s.recv.raise_limit(offset + data.len() as u64);
        s.recv.insert(offset, data, false).map_err(|e| recv_error(0, e))?;
        self.streams.add_fallback_received(data.len());
        self.stats.stream_bytes_received += data.len() as u64;
        self.stats.copied_bytes += data.len() as u64;
        self.notify_readable(0);
        Ok(())
    }

    /// A fallback stream has no flow control of its own: stop reading the socket (TCP pushes
    /// back) while the application has a window's worth unread.
    pub(super) fn fallback_stream_full(&self) -> bool {
        self.streams.get(0).is_some_and(|s| s.recv.buffered() as u64 >= self.config.stream_receive_window)
    }

    pub(super) fn on_fallback_peer_closed(&mut self) {
        let end = self.streams.fallback_received();
        if let Some(s) = self.streams.get_mut(0) {
            let _ = s.recv.insert(end, &[], true);
            self.notify_readable(0);
        }
    }

    /// The server's first frames on a new session's initial connection: join tokens and the
    /// other addresses clients may join (PROTOCOL.md §1.5).
    fn issue_initial_frames(&mut self, conn: ConnId) {
        for _ in 0..self.config.tokens {
            self.issue_token(Some(conn));
        }
        for (i, addr) in self.config.advertise.clone().into_iter().enumerate() {
            let address_id = u8::try_from(i).unwrap_or(u8::MAX);
            self.control.push(&Frame::NewAddress { address_id, addr }, Some(conn));
        }
    }
}

impl RecordSink for Core {
    fn deliver(
        &mut self,
        conn: ConnId,
        seq: u64,
        inbound: Inbound<'_>,
        scan: &mut Scan,
    ) -> Result<Flow, TransportError> {
        self.on_inbound(conn, seq, inbound, scan)
    }

    fn direct_slot(&mut self, id: StreamId, offset: u64, len: usize) -> Option<&mut [u8]> {
        if !self.config.zero_copy || self.life.is_fallback() {
            return None;
        }
        let s = self.streams.get_mut(id)?;
        if s.recv_state.drops_data() {
            return None;
        }
        // Slack `len`: the record's trailing frames may run past the flow control limit; the
        // data itself is checked against it when committed.
        s.recv.direct_slot(offset, len, len)
    }
}
