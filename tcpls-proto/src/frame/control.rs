//! Session control frames: ACK, New Token, Connection Reset, Join, User Timeout.
//!
//! Decoders get the reader positioned just before the type byte and read the fields right to left,
//! i.e. in reverse of the wire order given in each doc comment. Which role may send which frame is
//! checked by the session, not here: the codec has no notion of roles.

use super::error::BodyError;
use super::{Frame, REJOIN_PROOF_LEN, SESSION_REF_LEN, TOKEN_LEN};
use crate::coding::TailReader;

/// ACK 0x04: Highest Record Sequence(64), Connection ID(32), Type.
pub(super) fn decode_ack<'a>(r: &mut TailReader<'a>) -> Result<Frame<'a>, BodyError> {
    let connection_id = r.u32()?;
    let highest_record_seq = r.u64()?;
    Ok(Frame::Ack { connection_id, highest_record_seq })
}

/// New Token 0x05: Token(256), Sequence(32), Type.
pub(super) fn decode_new_token<'a>(r: &mut TailReader<'a>) -> Result<Frame<'a>, BodyError> {
    let sequence = r.u32()?;
    let token = *r.array::<TOKEN_LEN>()?;
    Ok(Frame::NewToken { sequence, token })
}

/// Connection Reset 0x06: Connection ID(32), Type.
pub(super) fn decode_connection_reset<'a>(r: &mut TailReader<'a>) -> Result<Frame<'a>, BodyError> {
    let connection_id = r.u32()?;
    Ok(Frame::ConnectionReset { connection_id })
}

/// Join 0x10: Token(256), Type.
pub(super) fn decode_join<'a>(r: &mut TailReader<'a>) -> Result<Frame<'a>, BodyError> {
    let token = *r.array::<TOKEN_LEN>()?;
    Ok(Frame::Join { token })
}

/// Rejoin 0x1E: Connection ID(32), Session Ref(128), Proof(256), Type.
pub(super) fn decode_rejoin<'a>(r: &mut TailReader<'a>) -> Result<Frame<'a>, BodyError> {
    let proof = *r.array::<REJOIN_PROOF_LEN>()?;
    let session_ref = *r.array::<SESSION_REF_LEN>()?;
    let connection_id = r.u32()?;
    Ok(Frame::Rejoin { connection_id, session_ref, proof })
}

/// User Timeout 0x13: Timeout in ms(32), Type.
pub(super) fn decode_user_timeout<'a>(r: &mut TailReader<'a>) -> Result<Frame<'a>, BodyError> {
    let timeout_ms = r.u32()?;
    Ok(Frame::UserTimeout { timeout_ms })
}
