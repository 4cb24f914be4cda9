//! 0-RTT: the client's first stream bytes as TLS early data, and the server's half-RTT answer
//! (PROTOCOL.md §1.7, RESUMPTION.md).
//!
//! Client: the early-data record carries the same Stream frame the first record after Finished
//! would carry (stream 0, offset 0). The bytes stay unsent in the stream's send buffer until
//! the handshake says the server accepted them; if it did not (or we cannot tell), the normal
//! packetizer sends them after Finished, and the receiver ignores stream ranges it already has.
//!
//! Server: accepted early records are handed to the session like the connection's first
//! records (before the client Finished, once rustls has checked the ticket's binder and its
//! single use), and stream data the application writes before the handshake completes is sealed
//! by rustls as half-RTT data, so the answer leaves with the server's flight: one round trip
//! earlier than after the client Finished. Those records are not kept for failover.

use std::sync::Arc;

use rustls::pki_types::ServerName;
use rustls::ClientConfig;

use crate::config::SessionConfig;
use crate::error::{Error, TransportError};
use crate::frame::{write_stream_trailer, Frame, STREAM_FRAME_OVERHEAD};
use crate::tls::Handshake;

use super::conn::Connection;
use super::early_state::MAX_EARLY_STREAM_BYTES;
use super::frames::decode_all;
use super::placement::Scan;
use super::side::Side;
use super::{Core, Session};

/// Most stream bytes a client puts in its early data (one record with the Stream frame).
impl Session {
    /// A client session whose handshake offers the first bytes of `data`, written on stream 0,
    /// as TLS early data (0-RTT). Without a ticket that allows early data (or if the server
    /// rejects it) the bytes are sent after Finished instead; [`Session::early_data_accepted`]
    /// tells which happened once the session is established. Returns the session and how many
    /// bytes of `data` stream 0 took (the rest is for the caller to write later).
    pub fn client_with_early_data(
        config: Arc<ClientConfig>,
        server_name: ServerName<'static>,
        settings: SessionConfig,
        data: &[u8],
    ) -> Result<(Self, usize), Error> {
        let mut session = Self::new(Side::Client, settings);
        session.core.paths.set_client_tls(config.clone(), server_name.clone());
        let stream = session.open_stream().map_err(|e| TransportError::internal(format!("early stream: {e}")))?;
        let taken = session.write(stream, data).map_err(|e| TransportError::internal(format!("early data: {e}")))?;
        let offered = taken.min(MAX_EARLY_STREAM_BYTES);
        let mut plaintext = Vec::with_capacity(offered + STREAM_FRAME_OVERHEAD);
        plaintext.extend_from_slice(&data[..offered]);
        let mut fields = [0u8; STREAM_FRAME_OVERHEAD];
        // `offered` fits in u16: MAX_EARLY_DATA is one record.
        write_stream_trailer(&mut fields, stream, 0, offered as u16, false);
        plaintext.extend_from_slice(&fields);
        let handshake = Handshake::client_with_early_data(config, server_name, plaintext)?;
        session.core.early.offered = Some((stream, offered));
        session.conns.add(Connection::new(0, handshake));
        session.drive_handshakes();
        Ok((session, taken))
    }

    /// Client: the server accepted our early data (known once established). Server: early data
    /// was accepted and delivered; it may be a replay (RESUMPTION.md), so an application that
    /// reads before [`Session::is_established`] must only act on idempotent requests.
    pub fn early_data_accepted(&self) -> bool {
        match self.core.side {
            Side::Client => self.handshake_info().is_some_and(|i| i.early_data_accepted),
            Side::Server => self.core.early.received > 0,
        }
    }

    /// Server: seals stream data the application wrote before the client Finished as half-RTT
    /// data, when early data was accepted. Bounded by the transmit high-water mark.
    pub(super) fn seal_half_rtt(&mut self) {
        if self.core.side != Side::Server || self.core.early.received == 0 {
            return;
        }
        let limit = self.core.config.transmit_high_water;
        let record_size = self.core.config.record_size.clamp(STREAM_FRAME_OVERHEAD + 1, crate::record::MAX_PLAINTEXT);
        let Some(c) = self.conns.get_mut(0) else { return };
        let Some((hs, stats, sent)) = c.handshake_mut() else { return };
        if !hs.half_rtt_writable() {
            // rustls would not seal it (no `send_half_rtt_data`): it goes after the handshake.
            return;
        }
        let core = &mut self.core;
        let mut queued = false;
        while core.early.half_rtt_sent < limit {
            let Some(id) = core.streams.next_ready() else { break };
            let Some(s) = core.streams.get_mut(id) else { break };
            let room = (record_size - STREAM_FRAME_OVERHEAD).min(limit - core.early.half_rtt_sent);
            let Some((offset, data, fin)) = s.send.next_chunk(room) else {
                // Blocked (no credit): nothing more at half-RTT.
                break;
            };
            let len = data.len();
            let mut plaintext = Vec::with_capacity(len + STREAM_FRAME_OVERHEAD);
            plaintext.extend_from_slice(data);
            let mut fields = [0u8; STREAM_FRAME_OVERHEAD];
            write_stream_trailer(&mut fields, id, offset, len as u16, fin);
            plaintext.extend_from_slice(&fields);
            hs.queue_half_rtt(plaintext);
            // Not retained for failover: the records leave before the session has a second
            // connection, and rustls, not our layer, seals them.
            s.send.mark_sent(offset, len, fin);
            s.send.ack(offset, len, fin);
            core.early.half_rtt_sent += len;
            stats.records_sent += 1;
            sent.note_stream_data();
            queued = true;
            core.streams.requeue_front(id);
            core.notify_writable_if_blocked(id);
            core.maybe_remove(id);
        }
        if queued {
            // rustls seals the queued records in its WriteTraffic state.
            self.drive_handshakes();
        }
    }

    /// Stream data written before the handshake completed can go out at half-RTT.
    pub(super) fn half_rtt_possible(&self) -> bool {
        self.core.side == Side::Server && self.core.early.received > 0 && self.core.streams.has_ready()
    }
}

impl Core {
    /// Server: hands a connection's accepted early-data records to the session, as its first
    /// TCPLS records. Early data carries Stream frames only (PROTOCOL.md §1.7): anything else
    /// (a Join, which must not be replayable, or frames that would act on the session, such as
    /// Rate Limit or Stream Reset, before the client proved it holds the handshake keys) is a
    /// protocol violation, checked before any frame of the record is acted on.
    pub(super) fn deliver_early_data(&mut self, c: &mut Connection) -> Result<(), Error> {
        if c.reading.early_received.is_empty() {
            return Ok(());
        }
        for plaintext in std::mem::take(&mut c.reading.early_received) {
            // Decoded once: checked whole, then acted on.
            let frames = decode_all(&plaintext).map_err(|e| TransportError::decode(format!("early data: {e}")))?;
            if let Some((other, _)) = frames.iter().find(|(f, _)| !matches!(f, Frame::Stream { .. })) {
                let kind = other.frame_type();
                return Err(TransportError::unexpected(format!("{kind:?} frame in early data")).into());
            }
            let first = c.reading.app_records == 0;
            c.reading.app_records += 1;
            self.early.received += plaintext.len();
            let mut scan = Scan::default();
            if first {
                self.on_first_frames(c.id, 0, &plaintext, frames, &mut scan)?;
            } else {
                for (frame, _) in frames {
                    self.on_frame(c.id, 0, frame)?;
                }
            }
            if self.paths.has_join_request() {
                return Err(TransportError::unexpected("Join in early data").into());
            }
        }
        // Early data is not a record of our record layer: nothing to acknowledge (PROTOCOL.md
        // §1.7). Before the first handshake completes there is no other ACK state to keep.
        if !self.life.is_established() {
            self.acks = Default::default();
        }
        Ok(())
    }

    /// Client, handshake complete: accepted early bytes count as sent and delivered (the server
    /// has them); otherwise they stay queued and go out now.
    pub(super) fn settle_early_data(&mut self, accepted: bool) {
        let Some((id, n)) = self.early.offered.take() else { return };
        if !accepted {
            return;
        }
        if let Some(s) = self.streams.get_mut(id) {
            s.send.mark_sent(0, n, false);
            s.send.ack(0, n, false);
        }
    }
}
