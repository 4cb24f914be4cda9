//! TCPLS frames: the units carried inside the plaintext of TLS 1.3 application_data records.
//!
//! Every frame ends with its type byte and its fields are laid out so that they can be read from
//! right to left (docs/PROTOCOL.md §2, §7). This lets a sender put a Stream frame's data at offset 0
//! of the record and append the frame header and control frames *after* it, so the receiver can
//! decrypt the data straight into the stream buffer. Decoding is therefore a tail cursor
//! ([`FrameReader`]) over the decrypted plaintext; frames borrow from it and nothing is copied or
//! allocated per frame.
//!
//! Each frame group lives in its own file (`stream`, `control`, `multipath`, `ext`); this file holds
//! the frame model and its encoder, whose field order is the wire order left to right.

use std::net::SocketAddr;

use crate::coding::{put_u32, put_u64, put_u8};

mod control;
mod error;
mod ext;
mod kind;
mod multipath;
mod reader;
mod stream;

#[cfg(test)]
mod bad_input;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod vectors;

pub use error::FrameError;
pub use kind::FrameType;
pub use reader::FrameReader;
pub use stream::{encode_stream_trailer, write_stream_trailer};

/// Bytes a Stream frame adds after its data: Length(2) + Offset(8) + Stream ID(4) + Type(1).
pub const STREAM_FRAME_OVERHEAD: usize = 15;

/// Size of the single-use tokens of New Token and Join.
pub const TOKEN_LEN: usize = 32;

/// Size of the session reference of a Rejoin frame.
pub const SESSION_REF_LEN: usize = 16;

/// Size of the proof (HMAC-SHA256) of a Rejoin frame.
pub const REJOIN_PROOF_LEN: usize = 32;

/// Longest congestion control name: its length travels in one byte.
pub const MAX_CC_NAME_LEN: usize = 255;

/// The peer's kernel view of one TCP connection (TCP Info frame), so a side can schedule on
/// measurements it cannot take itself, such as the peer's congestion window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PeerTcpInfo {
    /// Smoothed round-trip time, in microseconds.
    pub rtt_us: u32,
    /// Round-trip time variation, in microseconds.
    pub rttvar_us: u32,
    /// Congestion window, in segments.
    pub cwnd: u32,
    /// Retransmitted segments since the connection started.
    pub total_retrans: u32,
    /// Delivery rate estimate, in bytes per second.
    pub delivery_rate: u64,
    /// Bytes acknowledged by the peer's TCP.
    pub bytes_acked: u64,
}

/// One decoded (or to be encoded) frame. Variable-length payloads borrow the record plaintext.
///
/// Field order in each variant is not the wire order; see docs/PROTOCOL.md §7 for that.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame<'a> {
    /// One byte of filler; lets a sender hide record lengths. Not ack-eliciting.
    Padding,
    /// Liveness check; the peer answers with an ACK.
    Ping,
    /// Bytes of a stream at an explicit offset, so any record may travel on any connection.
    Stream {
        stream_id: u32,
        offset: u64,
        /// Last bytes of this direction of the stream (type 0x03).
        fin: bool,
        data: &'a [u8],
    },
    /// Highest record sequence number decrypted on a connection. Not ack-eliciting.
    Ack { connection_id: u32, highest_record_seq: u64 },
    /// A token the client may spend to join a connection whose Connection ID will be `sequence`.
    NewToken { sequence: u32, token: [u8; TOKEN_LEN] },
    /// The sender saw this connection fail; the receiver fails its records over.
    ConnectionReset { connection_id: u32 },
    /// Another address of the sender that the peer may connect to.
    NewAddress { address_id: u8, addr: SocketAddr },
    /// Withdraws an address announced with New Address.
    RemoveAddress { address_id: u8 },
    /// Which stream and offset the next record on this connection carries, so the receiver can
    /// decrypt it in place.
    StreamChange { next_stream_id: u32, next_offset: u64 },
    /// Binds a new TCP connection to a session; spends a token.
    Join { token: [u8; TOKEN_LEN] },
    /// Aborts one direction of a stream.
    StreamReset { stream_id: u32, final_size: u64, error_code: u32 },
    /// Raises the sender's credit for a stream to `maximum_offset`.
    MaxStreamData { stream_id: u32, maximum_offset: u64 },
    /// Asks the peer to use this TCP_USER_TIMEOUT.
    UserTimeout { timeout_ms: u32 },
    /// Round-trip measurement request, echoed back verbatim.
    RttProbe { connection_id: u32, timestamp_us: u64 },
    /// Echo of an RTT Probe.
    RttEcho { connection_id: u32, timestamp_us: u64 },
    /// Asks for a TCP Info frame about a connection.
    TcpInfoRequest { connection_id: u32 },
    /// The sender's kernel statistics for a connection.
    TcpInfo { connection_id: u32, info: PeerTcpInfo },
    /// Asks which address and port the peer sees for a connection (NAT detection).
    AddressProbe { connection_id: u32 },
    /// Answer to an Address Probe.
    AddressEcho { connection_id: u32, addr: SocketAddr },
    /// Caps the peer's send rate on a connection; 0 removes the cap.
    RateLimit { connection_id: u32, bytes_per_second: u64 },
    /// Asks the peer to use this TCP congestion control (1..=255 ASCII graphic bytes).
    CongestionControl { connection_id: u32, name: &'a [u8] },
    /// Asks the peer to send this stream's data on that connection.
    StreamSteer { stream_id: u32, connection_id: u32 },
    /// Marks a connection as a backup path (no stream data while a regular one is usable) or
    /// as a regular one again (MPTCP's MP_PRIO).
    PathPriority { connection_id: u32, backup: bool },
    /// Binds a new TCP connection to a session without a token (PROTOCOL.md §3): the session is
    /// named by a reference and the client proves it knows the session's secret.
    Rejoin { connection_id: u32, session_ref: [u8; SESSION_REF_LEN], proof: [u8; REJOIN_PROOF_LEN] },
}

impl Frame<'_> {
    /// The type byte this frame is encoded with.
    pub fn frame_type(&self) -> FrameType {
        match self {
            Self::Padding => FrameType::Padding,
            Self::Ping => FrameType::Ping,
            Self::Stream { fin: false, .. } => FrameType::Stream,
            Self::Stream { fin: true, .. } => FrameType::StreamFin,
            Self::Ack { .. } => FrameType::Ack,
            Self::NewToken { .. } => FrameType::NewToken,
            Self::ConnectionReset { .. } => FrameType::ConnectionReset,
            Self::NewAddress { .. } => FrameType::NewAddress,
            Self::RemoveAddress { .. } => FrameType::RemoveAddress,
            Self::StreamChange { .. } => FrameType::StreamChange,
            Self::Join { .. } => FrameType::Join,
            Self::StreamReset { .. } => FrameType::StreamReset,
            Self::MaxStreamData { .. } => FrameType::MaxStreamData,
            Self::UserTimeout { .. } => FrameType::UserTimeout,
            Self::RttProbe { .. } => FrameType::RttProbe,
            Self::RttEcho { .. } => FrameType::RttEcho,
            Self::TcpInfoRequest { .. } => FrameType::TcpInfoRequest,
            Self::TcpInfo { .. } => FrameType::TcpInfo,
            Self::AddressProbe { .. } => FrameType::AddressProbe,
            Self::AddressEcho { .. } => FrameType::AddressEcho,
            Self::RateLimit { .. } => FrameType::RateLimit,
            Self::CongestionControl { .. } => FrameType::CongestionControl,
            Self::StreamSteer { .. } => FrameType::StreamSteer,
            Self::PathPriority { .. } => FrameType::PathPriority,
            Self::Rejoin { .. } => FrameType::Rejoin,
        }
    }

    /// Exact number of bytes [`Frame::encode`] appends, so a packetizer can check that a frame fits
    /// in the record before writing anything.
    pub fn encoded_len(&self) -> usize {
        let body = match self {
            Self::Padding | Self::Ping => 0,
            Self::Stream { data, .. } => return data.len() + STREAM_FRAME_OVERHEAD,
            Self::Ack { .. } => 8 + 4,
            Self::NewToken { .. } => TOKEN_LEN + 4,
            Self::ConnectionReset { .. } => 4,
            Self::NewAddress { addr, .. } => multipath::address_len(addr) + 1,
            Self::RemoveAddress { .. } => 1,
            Self::StreamChange { .. } => 4 + 8,
            Self::Join { .. } => TOKEN_LEN,
            Self::StreamReset { .. } => 4 + 8 + 4,
            Self::MaxStreamData { .. } => 8 + 4,
            Self::UserTimeout { .. } => 4,
            Self::RttProbe { .. } | Self::RttEcho { .. } => 8 + 4,
            Self::TcpInfoRequest { .. } => 4,
            Self::TcpInfo { .. } => 4 * 4 + 8 + 8 + 4,
            Self::AddressProbe { .. } => 4,
            Self::AddressEcho { addr, .. } => multipath::address_len(addr) + 4,
            Self::RateLimit { .. } => 8 + 4,
            Self::CongestionControl { name, .. } => name.len() + 1 + 4,
            Self::StreamSteer { .. } => 4 + 4,
            Self::PathPriority { .. } => 1 + 4,
            Self::Rejoin { .. } => 4 + SESSION_REF_LEN + REJOIN_PROOF_LEN,
        };
        body + 1
    }

    /// Appends the frame's wire bytes, type byte last.
    ///
    /// A frame that obeys the decoding rules (PROTOCOL.md §7.2) decodes back to itself, except that
    /// IPv6 flow info and scope id are not on the wire and come back as 0. A frame that breaks
    /// them (say, an empty congestion control name) is still written as given, so tests can build
    /// bad input with the real encoder.
    ///
    /// # Panics
    /// If a Stream frame carries more than `u16::MAX` bytes or a Congestion Control name is longer
    /// than [`MAX_CC_NAME_LEN`]: their length fields cannot express it, and writing a wrong length
    /// would corrupt the whole record. Records are at most 2^14 bytes, so this is a caller bug.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.reserve(self.encoded_len());
        // Each arm writes the fields in wire order, left to right; the type byte follows.
        match *self {
            Self::Padding | Self::Ping => {}
            Self::Stream { stream_id, offset, fin: _, data } => {
                let len = u16::try_from(data.len()).expect("Stream frame data exceeds u16::MAX");
                out.extend_from_slice(data);
                stream::put_trailer_fields(out, stream_id, offset, len);
            }
            Self::Ack { connection_id, highest_record_seq } => {
                put_u64(out, highest_record_seq);
                put_u32(out, connection_id);
            }
            Self::NewToken { sequence, token } => {
                out.extend_from_slice(&token);
                put_u32(out, sequence);
            }
            Self::ConnectionReset { connection_id }
            | Self::TcpInfoRequest { connection_id }
            | Self::AddressProbe { connection_id } => put_u32(out, connection_id),
            Self::NewAddress { address_id, addr } => {
                multipath::put_address(out, &addr);
                put_u8(out, address_id);
            }
            Self::RemoveAddress { address_id } => put_u8(out, address_id),
            Self::StreamChange { next_stream_id, next_offset } => {
                put_u32(out, next_stream_id);
                put_u64(out, next_offset);
            }
            Self::Join { token } => out.extend_from_slice(&token),
            Self::StreamReset { stream_id, final_size, error_code } => {
                put_u32(out, error_code);
                put_u64(out, final_size);
                put_u32(out, stream_id);
            }
            Self::MaxStreamData { stream_id, maximum_offset } => {
                put_u64(out, maximum_offset);
                put_u32(out, stream_id);
            }
            Self::UserTimeout { timeout_ms } => put_u32(out, timeout_ms),
            Self::RttProbe { connection_id, timestamp_us } | Self::RttEcho { connection_id, timestamp_us } => {
                put_u64(out, timestamp_us);
                put_u32(out, connection_id);
            }
            Self::TcpInfo { connection_id, info } => {
                ext::put_tcp_info(out, &info);
                put_u32(out, connection_id);
            }
            Self::AddressEcho { connection_id, addr } => {
                multipath::put_address(out, &addr);
                put_u32(out, connection_id);
            }
            Self::RateLimit { connection_id, bytes_per_second } => {
                put_u64(out, bytes_per_second);
                put_u32(out, connection_id);
            }
            Self::CongestionControl { connection_id, name } => {
                let len = u8::try_from(name.len()).expect("congestion control name too long");
                out.extend_from_slice(name);
                put_u8(out, len);
                put_u32(out, connection_id);
            }
            Self::StreamSteer { stream_id, connection_id } => {
                put_u32(out, connection_id);
                put_u32(out, stream_id);
            }
            Self::PathPriority { connection_id, backup } => {
                put_u8(out, u8::from(backup));
                put_u32(out, connection_id);
            }
            Self::Rejoin { connection_id, session_ref, proof } => {
                put_u32(out, connection_id);
                out.extend_from_slice(&session_ref);
                out.extend_from_slice(&proof);
            }
        }
        put_u8(out, self.frame_type() as u8);
    }

    /// Whether receiving this frame obliges the peer to send an ACK eventually. Padding and ACK
    /// carry nothing worth retransmitting on failover, and acknowledging ACKs would never end.
    pub fn is_ack_eliciting(&self) -> bool {
        self.frame_type().is_ack_eliciting()
    }
}
