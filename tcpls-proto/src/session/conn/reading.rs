//! The receive side of a connection: how much each socket read asks for, where the next stream
//! record is expected to go (zero-copy placement), and what has been opened so far.

use crate::frame::Frame;
use crate::record::RxBuf;
use crate::session::placement::Expectation;

/// Most bytes one socket read asks for, once a connection is busy (large reads: fewer
/// syscalls). Reads start at [`MIN_READ_CHUNK`] and grow while they fill the buffer.
pub const READ_CHUNK: usize = 256 * 1024;

/// Smallest read size, the one an idle connection returns to. An idle connection keeps no
/// read buffer: the core frees an empty one after a read at this size that drained the socket.
pub const MIN_READ_CHUNK: usize = 16 * 1024;

/// Read size before a connection's handshake completes (a handshake flight fits easily).
pub(in crate::session) const HANDSHAKE_READ_CHUNK: usize = 16 * 1024;

#[derive(Debug)]
pub(in crate::session) struct Reading {
    /// How much the next socket read asks for: grows while reads fill the buffer (bulk), and
    /// shrinks back when they do not, so an idle connection does not hold a bulk-sized buffer.
    pub(in crate::session) chunk: usize,
    /// Length of the last [`Session::read_buffer`](crate::session::Session::read_buffer)
    /// handed out.
    pub(in crate::session) last_spare: usize,
    /// Zero-copy receive: where the next stream record is expected to go (`placement.rs`).
    pub(super) expect: Expectation,
    /// A record decrypted into a stream's buffer but belonging elsewhere, moved here to take
    /// the ordinary path (stream data is copied only then).
    pub(super) scratch: Vec<u8>,
    /// The frames behind the leading Stream frame of a record decrypted into a stream's buffer,
    /// as decoded once by `placement::read_direct` (values: they borrow nothing).
    pub(super) rest: Vec<Frame<'static>>,
    /// Records decrypted on this connection (for ACK frames; the next expected sequence).
    pub(in crate::session) records_opened: u64,
    /// TCPLS records (content type 23) received: the first one may carry a Join.
    pub(in crate::session) app_records: u64,
    /// Stop processing received records until the session decides (a Join waits for its
    /// target session).
    pub(in crate::session) paused: bool,
    /// Server: accepted early-data plaintexts, for the session (see `early.rs`).
    pub(in crate::session) early_received: Vec<Vec<u8>>,
}

impl Default for Reading {
    fn default() -> Self {
        Self {
            chunk: MIN_READ_CHUNK,
            last_spare: 0,
            expect: Expectation::default(),
            scratch: Vec::new(),
            rest: Vec::new(),
            records_opened: 0,
            app_records: 0,
            paused: false,
            early_received: Vec::new(),
        }
    }
}

impl Reading {
    /// A read of `n` bytes came in: a full buffer means more is waiting (read more next time,
    /// up to [`READ_CHUNK`]); a small read means the connection is not busy.
    pub(in crate::session) fn adapt_chunk(&mut self, n: usize) {
        if n > 0 && n >= self.last_spare {
            self.chunk = (self.chunk * 4).min(READ_CHUNK);
        } else if n < self.chunk / 8 {
            self.chunk = (self.chunk / 2).max(MIN_READ_CHUNK);
        }
    }

    /// Frees a receive buffer that holds nothing after a read of `n` bytes when it is much
    /// larger than reads need now, or when the connection is quiet (reads at their smallest)
    /// and this read drained the socket (it returned less than asked): an idle connection
    /// holds no buffer, and the next read allocates one (a busy one keeps its buffer).
    pub(in crate::session) fn release_idle(&self, rx: &mut RxBuf, n: usize) {
        let drained = n < self.last_spare && self.chunk == MIN_READ_CHUNK;
        if rx.is_empty() && (rx.capacity() > 2 * self.chunk || drained) {
            rx.shrink();
        }
    }
}
