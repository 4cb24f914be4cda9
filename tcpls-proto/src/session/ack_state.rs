//! What each connection has received and not acknowledged yet (the receive side of record
//! acknowledgements, PROTOCOL.md §5).

use std::collections::HashMap;
use std::time::Instant;

use crate::event::ConnId;

#[derive(Debug, Default, Clone, Copy)]
pub(super) struct AckState {
    /// Highest record number processed.
    pub(super) highest: u64,
    /// The last record counted (a record with several frames counts once).
    pub(super) last_counted: Option<u64>,
    /// Ack-eliciting records since the last ACK.
    pub(super) pending: u32,
    pub(super) deadline: Option<Instant>,
}

#[derive(Debug, Default)]
pub(super) struct Acks {
    pub(super) conns: HashMap<ConnId, AckState>,
}
