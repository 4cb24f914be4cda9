#![cfg(feature = "danger")]
//! Dangerous hooks for tests and fuzzing: they let a session behave like a hostile peer.
//!
//! Nothing here is needed to run TCPLS, and nothing here is safe to use in a real application:
//! [`Session::danger_seal_raw`] puts any record on the wire with the connection's real keys,
//! bypassing every rule the packetizer follows. The names carry `danger` (the rustls
//! convention) and the items are hidden from the documentation. They exist so that
//! `tests/bad_input.rs` and the fuzz targets can hand a victim session well-encrypted but
//! ill-formed records, which is the only way to reach the frame and session checks behind the
//! AEAD.

use crate::error::{Error, TransportError};
use crate::event::ConnId;

use super::Session;

impl Session {
    /// **Dangerous, for tests and fuzzing only.** Seals one record whose inner plaintext is
    /// `plaintext || content_type` with the current sending key of connection `conn` (the next
    /// record sequence number is used up) and appends it to that connection's transmit buffer.
    /// Nothing is checked: the content may be any bytes, `content_type` any value (0 with an
    /// all-zero `plaintext` makes a record without a content type).
    ///
    /// Fails when `conn` is unknown, not a TCPLS connection with keys (handshaking, fallback,
    /// failed), or when the inner plaintext exceeds what one record may carry (2^14 + 1 bytes).
    #[doc(hidden)]
    pub fn danger_seal_raw(&mut self, conn: ConnId, content_type: u8, plaintext: &[u8]) -> Result<(), Error> {
        let c = self
            .conns
            .get_mut(conn)
            .ok_or_else(|| TransportError::internal(format!("danger_seal_raw: no connection {conn}")))?;
        let Some((key, tx)) = c.tcpls_tx() else {
            return Err(TransportError::internal("danger_seal_raw: the connection has no TCPLS record layer").into());
        };
        key.seal(content_type, plaintext, tx)?;
        c.stats.records_sent += 1;
        Ok(())
    }

    /// **For tests and fuzzing.** Bytes of memory held by the receive halves of all streams
    /// (storage plus out-of-order bookkeeping), to check that a hostile peer cannot make them
    /// grow past what flow control allows.
    #[doc(hidden)]
    pub fn danger_buffered_bytes(&self) -> usize {
        self.core.streams.values().map(|s| s.recv.allocated()).sum()
    }

    /// **For tests and fuzzing.** Entries in the queue of control frames waiting for a record
    /// (a range of refused streams or a coalesced ACK counts as one), to check that frames a
    /// hostile peer makes us answer do not pile up one by one.
    #[doc(hidden)]
    pub fn danger_control_queue_entries(&self) -> usize {
        self.core.control.entries()
    }

    /// **For tests and fuzzing.** What the sent-record logs (kept for failover until the peer
    /// acknowledges) hold at most on one connection: (records, bytes of control frames). Bounded
    /// by `SessionConfig::max_unacked_records` and `max_unacked_control`.
    #[doc(hidden)]
    pub fn danger_retained(&self) -> (usize, usize) {
        let records = self.conns.iter().map(|c| c.sent.len()).max().unwrap_or(0);
        let control = self.conns.iter().map(|c| c.sent.control_bytes()).max().unwrap_or(0);
        (records, control)
    }

    /// **For tests and fuzzing.** Events not yet polled (ordinary ones and answers to probes).
    #[doc(hidden)]
    pub fn danger_queued_events(&self) -> usize {
        self.core.events.len()
    }

    /// **Dangerous, for tests only.** A client session whose handshake offers `content` (any
    /// bytes, meant as TCPLS frames) as its TLS early data, to test what a server accepts
    /// before the client Finished.
    #[doc(hidden)]
    pub fn danger_client_with_early_content(
        config: std::sync::Arc<rustls::ClientConfig>,
        server_name: rustls::pki_types::ServerName<'static>,
        settings: crate::SessionConfig,
        content: Vec<u8>,
    ) -> Result<Self, Error> {
        let mut session = Self::new(super::side::Side::Client, settings);
        session.core.paths.set_client_tls(config.clone(), server_name.clone());
        let handshake = crate::tls::Handshake::client_with_early_data(config, server_name, content)?;
        session.conns.add(super::Connection::new(0, handshake));
        session.drive_handshakes();
        Ok(session)
    }

    /// **Dangerous, for tests only.** Starts a joining connection that presents `token`, used
    /// or not, under connection ID `id` (to replay or forge tokens against a server).
    #[doc(hidden)]
    pub fn danger_add_connection_with_token(&mut self, id: ConnId, token: [u8; 32]) -> Result<ConnId, Error> {
        let Some((config, name)) = self.core.paths.client_tls() else {
            return Err(TransportError::internal("not a client session").into());
        };
        let mut conn = super::Connection::new(id, crate::tls::Handshake::client(config, name)?);
        conn.join.token = Some(token);
        self.conns.add(conn);
        self.drive_handshakes();
        Ok(id)
    }

    /// **Dangerous, for tests only.** Starts a connection that rejoins without a token under
    /// connection ID `id` (any, even outside the rejoin space), with this session reference
    /// and proof instead of the real ones when given (to forge or replay rejoins).
    #[doc(hidden)]
    pub fn danger_add_connection_with_rejoin(
        &mut self,
        id: ConnId,
        session_ref: Option<[u8; 16]>,
        proof: Option<[u8; 32]>,
    ) -> Result<ConnId, Error> {
        let Some((config, name)) = self.core.paths.client_tls() else {
            return Err(TransportError::internal("not a client session").into());
        };
        let mut creds =
            self.rejoin_credentials().ok_or_else(|| TransportError::internal("no initial connection secret"))?;
        if let Some(r) = session_ref {
            creds.session_ref = r;
        }
        creds.forged_proof = proof;
        let mut conn = super::Connection::new(id, crate::tls::Handshake::client(config, name)?);
        conn.join.rejoin = Some(creds);
        self.conns.add(conn);
        self.drive_handshakes();
        Ok(id)
    }

    /// **Dangerous, for tests only.** The proof a Rejoin with Connection ID `for_id` would carry
    /// on connection `conn` (bound to its TLS secret), to replay it on another connection.
    #[doc(hidden)]
    pub fn danger_rejoin_proof(&self, conn: ConnId, for_id: ConnId) -> Option<[u8; 32]> {
        let creds = self.rejoin_credentials()?;
        let c = self.conns.get(conn)?;
        match c.rejoin_frame_with_id(&creds, for_id)? {
            crate::frame::Frame::Rejoin { proof, .. } => Some(proof),
            _ => None,
        }
    }
}
