//! Frames of the thesis extensions, carried as frames: RTT Probe/Echo, TCP Info Request/TCP Info,
//! Rate Limit, Congestion Control.
//!
//! Decoders get the reader positioned just before the type byte and read the fields right to left,
//! i.e. in reverse of the wire order given in each doc comment.

use super::error::BodyError;
use super::{Frame, PeerTcpInfo};
use crate::coding::{put_u32, put_u64, TailReader};

/// RTT Probe 0x14 / RTT Echo 0x15: Timestamp in µs(64), Connection ID(32), Type.
pub(super) fn decode_rtt<'a>(r: &mut TailReader<'a>, echo: bool) -> Result<Frame<'a>, BodyError> {
    let connection_id = r.u32()?;
    let timestamp_us = r.u64()?;
    Ok(if echo {
        Frame::RttEcho { connection_id, timestamp_us }
    } else {
        Frame::RttProbe { connection_id, timestamp_us }
    })
}

/// TCP Info Request 0x16: Connection ID(32), Type.
pub(super) fn decode_tcp_info_request<'a>(r: &mut TailReader<'a>) -> Result<Frame<'a>, BodyError> {
    let connection_id = r.u32()?;
    Ok(Frame::TcpInfoRequest { connection_id })
}

/// Writes rtt(32), rttvar(32), cwnd(32), total retrans(32), delivery rate(64), bytes acked(64).
pub(super) fn put_tcp_info(out: &mut Vec<u8>, info: &PeerTcpInfo) {
    put_u32(out, info.rtt_us);
    put_u32(out, info.rttvar_us);
    put_u32(out, info.cwnd);
    put_u32(out, info.total_retrans);
    put_u64(out, info.delivery_rate);
    put_u64(out, info.bytes_acked);
}

/// TCP Info 0x17: rtt µs(32), rttvar µs(32), cwnd segs(32), total retrans(32), delivery rate
/// B/s(64), bytes acked(64), Connection ID(32), Type.
pub(super) fn decode_tcp_info<'a>(r: &mut TailReader<'a>) -> Result<Frame<'a>, BodyError> {
    let connection_id = r.u32()?;
    let bytes_acked = r.u64()?;
    let delivery_rate = r.u64()?;
    let total_retrans = r.u32()?;
    let cwnd = r.u32()?;
    let rttvar_us = r.u32()?;
    let rtt_us = r.u32()?;
    Ok(Frame::TcpInfo {
        connection_id,
        info: PeerTcpInfo { rtt_us, rttvar_us, cwnd, total_retrans, delivery_rate, bytes_acked },
    })
}

/// Rate Limit 0x1A: Bytes per second(64), Connection ID(32), Type.
pub(super) fn decode_rate_limit<'a>(r: &mut TailReader<'a>) -> Result<Frame<'a>, BodyError> {
    let connection_id = r.u32()?;
    let bytes_per_second = r.u64()?;
    Ok(Frame::RateLimit { connection_id, bytes_per_second })
}

/// Congestion Control 0x1B: Name(Name Length bytes), Name Length(8), Connection ID(32), Type.
///
/// The name is checked here, not by the session, so that no caller ever passes an empty name or
/// one with control characters, spaces or non-ASCII bytes to a `setsockopt(TCP_CONGESTION)` or a
/// log line.
pub(super) fn decode_congestion_control<'a>(r: &mut TailReader<'a>) -> Result<Frame<'a>, BodyError> {
    let connection_id = r.u32()?;
    let len = r.u8()?;
    if len == 0 {
        return Err(BodyError::Malformed("empty congestion control name"));
    }
    let name = r
        .bytes(usize::from(len))
        .map_err(|_| BodyError::Malformed("congestion control name length exceeds the record"))?;
    if !name.iter().all(u8::is_ascii_graphic) {
        return Err(BodyError::Malformed("congestion control name is not ASCII graphic"));
    }
    Ok(Frame::CongestionControl { connection_id, name })
}
