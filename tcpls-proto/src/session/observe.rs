//! Cheap read-only views for traces and metrics (`tcpls::TraceSink`, `tcpls serve --metrics`):
//! what the session holds in memory, and how far each stream got. Nothing here changes state.

use crate::event::ConnId;

use super::snapshots::{MemoryUse, StreamProgress};
use super::Session;

/// Memory the session holds for its streams and sent records, against its budget.
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
