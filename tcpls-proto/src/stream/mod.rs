//! Per-stream buffers: the sending half ([`SendBuf`]) and the receiving half ([`RecvBuf`]) of a
//! TCPLS stream (PROTOCOL.md §4).
//!
//! Stream frames carry explicit offsets, so any record of a stream may travel on any TCP
//! connection of the session: the receive half reassembles by offset and never delivers a byte
//! twice, and the send half keeps every byte until it is acknowledged, so that the ranges of a
//! failed connection can be sent again on another one (PROTOCOL.md §5). Both halves enforce
//! per-stream flow control (Max Stream Data). Neither knows about frames, records or
//! connections: the session maps those onto offsets.

mod ranges;
mod recv;
mod send;
mod sparse;

pub use ranges::RangeSet;
pub use recv::{RecvBuf, RecvError};
pub use send::{SendAccount, SendBuf};

/// Flow control credit each side grants the other for every stream, in each direction, before
/// any Max Stream Data frame (a protocol constant).
pub const INITIAL_MAX_STREAM_DATA: u64 = 65536;

/// Stream Reset code when the receiver refuses a stream (defined beside [`StreamError`], whose
/// message explains it).
///
/// [`StreamError`]: crate::error::StreamError
pub use crate::error::RESET_REFUSED;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod tests_sparse;
