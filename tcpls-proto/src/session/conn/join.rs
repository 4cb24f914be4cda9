//! How a connection joins its session (PROTOCOL.md §3): the token or rejoin credentials its
//! first record carries, and the TLS secret that binds a Rejoin's proof to the connection.

use crate::event::ConnId;
use crate::frame::{Frame, REJOIN_PROOF_LEN, SESSION_REF_LEN};
use crate::tls::ConnSecret;

/// What a connection needs to join a session, or to let others rejoin it.
#[derive(Debug, Default)]
pub(in crate::session) struct JoinCredentials {
    /// Client side of a joining connection: the token its first record must carry.
    pub(in crate::session) token: Option<[u8; 32]>,
    /// Client side of a connection rejoining without a token: its Rejoin frame's session
    /// reference and rejoin key (the proof is computed once the handshake is done).
    pub(in crate::session) rejoin: Option<RejoinCredentials>,
    /// TCPLS connections: the secret of this TLS connection (for rejoin, PROTOCOL.md §3).
    pub(in crate::session) secret: Option<ConnSecret>,
}

/// Labels of the values derived from a connection's secret ([`ConnSecret`]).
pub(in crate::session) const LABEL_REJOIN_KEY: &[u8] = b"EXPORTER-tcpls rejoin key";
pub(in crate::session) const LABEL_SESSION_REF: &[u8] = b"EXPORTER-tcpls session ref";
pub(in crate::session) const LABEL_REJOIN_PROOF: &[u8] = b"EXPORTER-tcpls rejoin proof";

/// Client: what a connection rejoining without a token needs for its Rejoin frame, taken from
/// the session's initial connection.
#[derive(Clone)]
pub(in crate::session) struct RejoinCredentials {
    pub(in crate::session) key: [u8; 32],
    pub(in crate::session) session_ref: [u8; SESSION_REF_LEN],
    /// Tests only (`danger_add_connection_with_rejoin`): sent instead of the real proof.
    pub(in crate::session) forged_proof: Option<[u8; REJOIN_PROOF_LEN]>,
}

impl std::fmt::Debug for RejoinCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RejoinCredentials(..)")
    }
}

/// The rejoin key and session reference of a session whose initial connection has `secret`.
pub(in crate::session) fn session_secrets(secret: &ConnSecret) -> RejoinCredentials {
    let mut key = [0u8; 32];
    secret.derive(LABEL_REJOIN_KEY, &mut key);
    let mut session_ref = [0u8; SESSION_REF_LEN];
    secret.derive(LABEL_SESSION_REF, &mut session_ref);
    RejoinCredentials { key, session_ref, forged_proof: None }
}

/// Proof = HMAC-SHA256(rejoin key, proof input of the new connection || Connection ID).
pub(in crate::session) fn rejoin_proof(key: &[u8; 32], new_conn: &ConnSecret, id: ConnId) -> [u8; REJOIN_PROOF_LEN] {
    let mut input = [0u8; 32];
    new_conn.derive(LABEL_REJOIN_PROOF, &mut input);
    let key = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, key);
    let mut ctx = aws_lc_rs::hmac::Context::with_key(&key);
    ctx.update(&input);
    ctx.update(&id.to_be_bytes());
    let mut proof = [0u8; REJOIN_PROOF_LEN];
    proof.copy_from_slice(ctx.sign().as_ref());
    proof
}

impl super::Connection {
    /// Client: the Rejoin frame of this connection, once its handshake is done.
    pub(in crate::session) fn rejoin_frame(&self, creds: &RejoinCredentials) -> Option<Frame<'static>> {
        self.rejoin_frame_with_id(creds, self.id)
    }

    /// The Rejoin frame this connection would send under Connection ID `id`.
    pub(in crate::session) fn rejoin_frame_with_id(
        &self,
        creds: &RejoinCredentials,
        id: ConnId,
    ) -> Option<Frame<'static>> {
        let secret = self.join.secret.as_ref()?;
        Some(Frame::Rejoin {
            connection_id: id,
            session_ref: creds.session_ref,
            proof: creds.forged_proof.unwrap_or_else(|| rejoin_proof(&creds.key, secret, id)),
        })
    }

    /// Client: the first record of this joining connection must still carry a Join or Rejoin.
    pub(in crate::session) fn join_pending(&self) -> bool {
        self.join.token.is_some() || self.join.rejoin.is_some()
    }
}
