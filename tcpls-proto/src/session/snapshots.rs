//! Read-only snapshots of a session for traces and metrics (filled by `observe.rs`).

use crate::event::StreamId;

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct MemoryUse {
    /// Flow-control credit granted to the peer and not yet read by the application, over all
    /// streams: what `SessionConfig::receive_budget` bounds.
    pub receive_credit: u64,
    /// `SessionConfig::receive_budget`.
    pub receive_budget: u64,
    /// Bytes allocated by the streams' receive buffers.
    pub receive_allocated: u64,
    /// Stream bytes held for sending: written by the application and not yet acknowledged.
    pub send_buffered: u64,
    /// Sent records kept for failover until acknowledged, over all connections.
    pub unacked_records: u64,
    /// Bytes of control frames held in those records.
    pub unacked_control_bytes: u64,
    /// Buffer memory a quiet session can give back ([`Session::releasable_memory`](crate::Session::releasable_memory)); the tokio
    /// layer releases it within about a second once the session is quiet.
    pub releasable: u64,
}

/// How far one stream got, in both directions.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct StreamProgress {
    pub stream: StreamId,
    /// Bytes the application wrote.
    pub written: u64,
    /// End of the bytes sent at least once.
    pub sent: u64,
    /// Every byte below this was acknowledged by the peer.
    pub acked: u64,
    /// The peer's flow-control limit (Max Stream Data).
    pub max_data: u64,
    /// New data waits only for the peer's credit (flow-control blocked).
    pub blocked: bool,
    /// Bytes received in order (read by the application or readable).
    pub received: u64,
    /// The peer's FIN or Stream Reset arrived: the size of its direction.
    pub peer_final_size: Option<u64>,
    /// The peer reset its direction with this code.
    pub peer_reset: Option<u32>,
}
