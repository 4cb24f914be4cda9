//! Iteration over the frames of one record plaintext, from its end towards its start.

use std::iter::FusedIterator;

use super::error::BodyError;
use super::{control, ext, multipath, stream, Frame, FrameError, FrameType};
use crate::coding::TailReader;

/// Yields the frames of one decrypted record plaintext, last frame first.
///
/// Frames come out in reverse wire order because only the end of a frame (its type byte) says
/// how long it is. The first error ends the iteration: the reader cannot locate the frames that
/// precede a frame it failed to parse, and the error is fatal for the connection anyway.
#[derive(Debug, Clone)]
pub struct FrameReader<'a> {
    reader: TailReader<'a>,
    failed: bool,
}

impl<'a> FrameReader<'a> {
    /// Starts at the end of `plaintext` (the record's content, without the inner content type).
    pub fn new(plaintext: &'a [u8]) -> Self {
        Self { reader: TailReader::new(plaintext), failed: false }
    }

    /// Number of bytes not yet parsed at the front of the plaintext.
    ///
    /// Right after [`Iterator::next`] returned a Stream frame this is where that frame's data
    /// starts in the plaintext: 0 for a record built the zero-copy way, which tells the receiver
    /// the data it decrypted in place already sits at the right offset. After an error the value
    /// is unspecified.
    pub fn remaining(&self) -> usize {
        self.reader.remaining()
    }
}

impl<'a> Iterator for FrameReader<'a> {
    type Item = Result<Frame<'a>, FrameError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let type_byte = self.reader.u8().ok()?;
        let result = decode_body(type_byte, &mut self.reader);
        self.failed = result.is_err();
        Some(result)
    }
}

impl FusedIterator for FrameReader<'_> {}

/// Parses the fields that precede `type_byte`, which the caller has already consumed.
fn decode_body<'a>(type_byte: u8, r: &mut TailReader<'a>) -> Result<Frame<'a>, FrameError> {
    let Some(frame_type) = FrameType::from_u8(type_byte) else {
        return Err(FrameError::UnknownType(type_byte));
    };
    let frame: Result<Frame<'a>, BodyError> = match frame_type {
        FrameType::Padding => Ok(Frame::Padding),
        FrameType::Ping => Ok(Frame::Ping),
        FrameType::Stream => stream::decode_stream(r, false),
        FrameType::StreamFin => stream::decode_stream(r, true),
        FrameType::Ack => control::decode_ack(r),
        FrameType::NewToken => control::decode_new_token(r),
        FrameType::ConnectionReset => control::decode_connection_reset(r),
        FrameType::NewAddress => multipath::decode_new_address(r),
        FrameType::RemoveAddress => multipath::decode_remove_address(r),
        FrameType::StreamChange => stream::decode_stream_change(r),
        FrameType::Join => control::decode_join(r),
        FrameType::StreamReset => stream::decode_stream_reset(r),
        FrameType::MaxStreamData => stream::decode_max_stream_data(r),
        FrameType::UserTimeout => control::decode_user_timeout(r),
        FrameType::RttProbe => ext::decode_rtt(r, false),
        FrameType::RttEcho => ext::decode_rtt(r, true),
        FrameType::TcpInfoRequest => ext::decode_tcp_info_request(r),
        FrameType::TcpInfo => ext::decode_tcp_info(r),
        FrameType::AddressProbe => multipath::decode_address_probe(r),
        FrameType::AddressEcho => multipath::decode_address_echo(r),
        FrameType::RateLimit => ext::decode_rate_limit(r),
        FrameType::CongestionControl => ext::decode_congestion_control(r),
        FrameType::StreamSteer => stream::decode_stream_steer(r),
        FrameType::PathPriority => multipath::decode_path_priority(r),
        FrameType::Rejoin => control::decode_rejoin(r),
    };
    frame.map_err(|e| e.with_type(type_byte))
}
