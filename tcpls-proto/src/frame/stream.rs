//! Stream frames and the frames that manage a stream: Stream Change, Stream Reset, Max Stream
//! Data, Stream Steer.
//!
//! Decoders get the reader positioned just before the type byte and read the fields right to left,
//! i.e. in reverse of the wire order given in each doc comment.

use super::error::BodyError;
use super::{Frame, FrameType, STREAM_FRAME_OVERHEAD};
use crate::coding::{put_u16, put_u32, put_u64, put_u8, TailReader};

/// Appends the header of a Stream frame *after* its data, which the caller has already placed in
/// `out`, so the packetizer moves stream bytes into the record exactly once.
pub fn encode_stream_trailer(out: &mut Vec<u8>, stream_id: u32, offset: u64, len: u16, fin: bool) {
    put_trailer_fields(out, stream_id, offset, len);
    put_u8(out, stream_type(fin) as u8);
}

/// Like [`encode_stream_trailer`], for a packetizer that reserved the trailer's room in a
/// fixed buffer before the data length was known.
pub fn write_stream_trailer(out: &mut [u8; STREAM_FRAME_OVERHEAD], stream_id: u32, offset: u64, len: u16, fin: bool) {
    let (len_bytes, rest) = out.split_at_mut(2);
    let (offset_bytes, rest) = rest.split_at_mut(8);
    let (id_bytes, type_byte) = rest.split_at_mut(4);
    len_bytes.copy_from_slice(&len.to_be_bytes());
    offset_bytes.copy_from_slice(&offset.to_be_bytes());
    id_bytes.copy_from_slice(&stream_id.to_be_bytes());
    type_byte.copy_from_slice(&[stream_type(fin) as u8]);
}

fn stream_type(fin: bool) -> FrameType {
    if fin {
        FrameType::StreamFin
    } else {
        FrameType::Stream
    }
}

/// Length(16), Offset(64), Stream ID(32): everything of the trailer but the type byte, which
/// [`super::Frame::encode`] appends itself.
pub(super) fn put_trailer_fields(out: &mut Vec<u8>, stream_id: u32, offset: u64, len: u16) {
    put_u16(out, len);
    put_u64(out, offset);
    put_u32(out, stream_id);
}

/// Stream 0x02/0x03: Data(Length bytes), Length(16), Offset(64), Stream ID(32), Type.
///
/// A Length larger than what precedes it is Malformed rather than Truncated: the fixed fields were
/// all there, the frame lies about its size. A range ending past 2^64 is rejected here so the
/// stream layer can add offsets without overflow checks.
pub(super) fn decode_stream<'a>(r: &mut TailReader<'a>, fin: bool) -> Result<Frame<'a>, BodyError> {
    let stream_id = r.u32()?;
    let offset = r.u64()?;
    let len = r.u16()?;
    let data = r.bytes(usize::from(len)).map_err(|_| BodyError::Malformed("stream data length exceeds the record"))?;
    if offset.checked_add(u64::from(len)).is_none() {
        return Err(BodyError::Malformed("stream data ends beyond 2^64"));
    }
    Ok(Frame::Stream { stream_id, offset, fin, data })
}

/// Stream Change 0x09: Next Stream ID(32), Next Offset(64), Type.
pub(super) fn decode_stream_change<'a>(r: &mut TailReader<'a>) -> Result<Frame<'a>, BodyError> {
    let next_offset = r.u64()?;
    let next_stream_id = r.u32()?;
    Ok(Frame::StreamChange { next_stream_id, next_offset })
}

/// Stream Reset 0x11: Error Code(32), Final Size(64), Stream ID(32), Type.
pub(super) fn decode_stream_reset<'a>(r: &mut TailReader<'a>) -> Result<Frame<'a>, BodyError> {
    let stream_id = r.u32()?;
    let final_size = r.u64()?;
    let error_code = r.u32()?;
    Ok(Frame::StreamReset { stream_id, final_size, error_code })
}

/// Max Stream Data 0x12: Maximum Offset(64), Stream ID(32), Type.
pub(super) fn decode_max_stream_data<'a>(r: &mut TailReader<'a>) -> Result<Frame<'a>, BodyError> {
    let stream_id = r.u32()?;
    let maximum_offset = r.u64()?;
    Ok(Frame::MaxStreamData { stream_id, maximum_offset })
}

/// Stream Steer 0x1C: Connection ID(32), Stream ID(32), Type.
pub(super) fn decode_stream_steer<'a>(r: &mut TailReader<'a>) -> Result<Frame<'a>, BodyError> {
    let stream_id = r.u32()?;
    let connection_id = r.u32()?;
    Ok(Frame::StreamSteer { stream_id, connection_id })
}
