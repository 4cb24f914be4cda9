//! The records a connection sealed that the peer has not acknowledged yet: what a failover or
//! a suspicion re-sends elsewhere (kept only with failover on).

use std::collections::VecDeque;

/// What one sealed record carried, by reference: a stream range and retransmittable control
/// frames (encoded; ACKs are not kept, they are stale once lost).
#[derive(Debug)]
pub(in crate::session) struct SentRecord {
    /// Record number on its connection (see `RecordLayer::tx_base`).
    pub(in crate::session) number: u64,
    /// When it was sealed: its acknowledgement is an RTT sample (`loss.rs`).
    pub(in crate::session) sent_at: Option<std::time::Instant>,
    pub(in crate::session) stream: Option<(crate::event::StreamId, u64, usize, bool)>,
    pub(in crate::session) control: Vec<u8>,
}

/// Unacknowledged records, oldest first, and the bytes of control frames they hold.
#[derive(Debug, Default)]
pub(in crate::session) struct SentLog {
    records: VecDeque<SentRecord>,
    control_bytes: usize,
    /// Stream data went out or came in on the connection: without failover, losing it may lose
    /// stream bytes (`on_connection_finished`).
    carried_streams: bool,
}

impl SentLog {
    pub(in crate::session) fn push(&mut self, record: SentRecord) {
        self.control_bytes += record.control.len();
        self.records.push_back(record);
    }

    /// The oldest record, removed.
    pub(in crate::session) fn pop_oldest(&mut self) -> Option<SentRecord> {
        let record = self.records.pop_front()?;
        self.control_bytes -= record.control.len();
        Some(record)
    }

    /// The oldest record if the peer acknowledged it (`highest` and below), removed.
    pub(in crate::session) fn pop_acknowledged(&mut self, highest: u64) -> Option<SentRecord> {
        if self.records.front().is_some_and(|r| r.number <= highest) {
            self.pop_oldest()
        } else {
            None
        }
    }

    /// Every record, oldest first, to be re-sent elsewhere.
    pub(in crate::session) fn take_all(&mut self) -> VecDeque<SentRecord> {
        self.control_bytes = 0;
        std::mem::take(&mut self.records)
    }

    pub(in crate::session) fn len(&self) -> usize {
        self.records.len()
    }

    pub(in crate::session) fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Bytes of control frames held.
    pub(in crate::session) fn control_bytes(&self) -> usize {
        self.control_bytes
    }

    pub(in crate::session) fn note_stream_data(&mut self) {
        self.carried_streams = true;
    }

    /// Stream data went out or came in on this connection.
    pub(in crate::session) fn carried_streams(&self) -> bool {
        self.carried_streams
    }
}
