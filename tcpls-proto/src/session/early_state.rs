//! 0-RTT state: what the client offered as early data, what the server accepted, and the
//! server's half-RTT data.

use crate::event::StreamId;
use crate::frame::STREAM_FRAME_OVERHEAD;
use crate::tls::MAX_EARLY_DATA;

pub const MAX_EARLY_STREAM_BYTES: usize = MAX_EARLY_DATA - STREAM_FRAME_OVERHEAD;

/// The session's 0-RTT state.
#[derive(Debug, Default)]
pub(super) struct EarlyState {
    /// Client: stream bytes [0, n) of stream 0 offered as early data.
    pub(super) offered: Option<(StreamId, usize)>,
    /// Server: early-data bytes accepted and delivered.
    pub(super) received: usize,
    /// Server: stream bytes sealed at half-RTT.
    pub(super) half_rtt_sent: usize,
}
