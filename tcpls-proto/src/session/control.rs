//! Control frames waiting for a record.
//!
//! Frames are encoded when queued (they are small and rare next to stream data) and placed
//! after the stream data of the next record that has room, so they rarely need a record of
//! their own.

use std::collections::VecDeque;

use crate::event::ConnId;
use crate::frame::Frame;

#[derive(Debug)]
struct Queued {
    /// Must travel on this connection (e.g. RTT Echo); None: any connection.
    conn: Option<ConnId>,
    bytes: Vec<u8>,
}

#[derive(Debug, Default)]
pub(crate) struct ControlQueue {
    frames: VecDeque<Queued>,
}

impl ControlQueue {
    pub(crate) fn push(&mut self, frame: &Frame<'_>, conn: Option<ConnId>) {
        let mut bytes = Vec::with_capacity(frame.encoded_len());
        frame.encode(&mut bytes);
        self.frames.push_back(Queued { conn, bytes });
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.frames.is_empty()
    }

    /// Whether something is waiting that `conn` may carry.
    pub(crate) fn has_for(&self, conn: ConnId) -> bool {
        self.frames.iter().any(|f| f.conn.is_none_or(|c| c == conn))
    }

    /// Appends to `out` the queued frames `conn` may carry, in order, while they fit in
    /// `budget` bytes. Returns the number of bytes appended.
    pub(crate) fn take_into(&mut self, conn: ConnId, budget: usize, out: &mut Vec<u8>) -> usize {
        let mut used = 0;
        let mut i = 0;
        while i < self.frames.len() {
            let f = &self.frames[i];
            if f.conn.is_none_or(|c| c == conn) && used + f.bytes.len() <= budget {
                used += f.bytes.len();
                out.extend_from_slice(&f.bytes);
                self.frames.remove(i);
            } else {
                i += 1;
            }
        }
        used
    }
}
