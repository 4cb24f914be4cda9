//! Cheap read-only views for traces and metrics (`tcpls::TraceSink`, `tcpls serve --metrics`):
//! what the session holds in memory, and how far each stream got. Nothing here changes state.

use crate::event::{ConnId, StreamId};

use super::Session;

/// Memory the session holds for its streams and sent records, against its budget.
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
    /// Buffer memory a quiet session can give back ([`Session::releasable_memory`]); the tokio
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

impl Session {
    /// Memory use against the budget; O(streams + connections).
    pub fn memory_use(&self) -> MemoryUse {
        let mut m = MemoryUse {
            receive_budget: self.core.config.receive_budget,
            releasable: self.releasable_memory() as u64,
            ..Default::default()
        };
        for s in self.core.streams.values() {
            m.receive_credit += s.recv.outstanding();
            m.receive_allocated += s.recv.allocated() as u64;
            m.send_buffered += s.send.buffered() as u64;
        }
        for c in &self.conns {
            m.unacked_records += c.sent.len() as u64;
            m.unacked_control_bytes += c.sent.control_bytes() as u64;
        }
        m
    }

    /// Sent records of `conn` not yet acknowledged (kept for failover).
    pub fn connection_unacked_records(&self, conn: ConnId) -> usize {
        self.conns.get(conn).map_or(0, |c| c.sent.len())
    }

    /// Calls `f` with the progress of every open stream (no allocation).
    pub fn for_each_stream_progress(&self, mut f: impl FnMut(StreamProgress)) {
        for (stream, s) in self.core.streams.iter() {
            f(StreamProgress {
                stream,
                written: s.send.write_offset(),
                sent: s.send.sent_offset(),
                acked: s.send.acked_offset(),
                max_data: s.send.max_data(),
                blocked: s.send.is_blocked(),
                received: s.recv.read_offset() + s.recv.readable() as u64,
                peer_final_size: s.recv.final_size(),
                peer_reset: s.recv_state.peer_reset(),
            });
        }
    }
}
