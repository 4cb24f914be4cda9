//! What a received frame asks of the connection table, done after each batch of records (the
//! frame handlers borrow the core, not the connections).

use crate::event::{ConnId, StreamId};

/// Work a frame asks for that needs the connection table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ConnAction {
    /// The peer says this connection failed.
    Reset(ConnId),
    /// Answer an Address Probe about `about` on connection `on`.
    EchoAddress { on: ConnId, about: ConnId },
    /// The peer acknowledged records of connection `conn` up to `highest`.
    Ack { conn: ConnId, highest: u64 },
    /// The peer asks that `stream` be sent on `conn` (receiver-driven steering).
    Steer { stream: StreamId, conn: ConnId },
    /// Answer an RTT Probe on the probed connection, if we have it.
    EchoRtt { conn: ConnId, timestamp_us: u64 },
    /// The peer marked `conn` as a backup path (or a regular one again).
    SetBackup { conn: ConnId, backup: bool },
}
