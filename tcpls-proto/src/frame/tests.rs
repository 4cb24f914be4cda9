//! Round trips of the frame codec over samples of every variant. Bad input is tested in
//! `bad_input.rs`, and the byte-exact vectors of docs/PROTOCOL.md in `vectors.rs`.

use std::net::SocketAddr;

use super::*;

/// At least one frame of every variant, with edge values where the wire has limits.
pub(super) fn samples(buf: &[u8]) -> Vec<Frame<'_>> {
    let v4: SocketAddr = "203.0.113.5:65535".parse().expect("addr");
    let v6: SocketAddr = "[fe80::1:2:3:4]:1".parse().expect("addr");
    let info = PeerTcpInfo {
        rtt_us: u32::MAX,
        rttvar_us: 1,
        cwnd: 2,
        total_retrans: 3,
        delivery_rate: u64::MAX,
        bytes_acked: 5,
    };
    vec![
        Frame::Padding,
        Frame::Ping,
        Frame::Stream { stream_id: 0, offset: 0, fin: false, data: &[] },
        Frame::Stream { stream_id: 7, offset: 1 << 40, fin: true, data: &[] },
        Frame::Stream { stream_id: u32::MAX, offset: 3, fin: false, data: buf },
        Frame::Stream { stream_id: 2, offset: u64::MAX - 300, fin: true, data: buf },
        Frame::Ack { connection_id: u32::MAX, highest_record_seq: u64::MAX },
        Frame::NewToken { sequence: 9, token: [0xee; TOKEN_LEN] },
        Frame::ConnectionReset { connection_id: 3 },
        Frame::NewAddress { address_id: 0, addr: v4 },
        Frame::NewAddress { address_id: 255, addr: v6 },
        Frame::RemoveAddress { address_id: 255 },
        Frame::StreamChange { next_stream_id: 1, next_offset: 2 },
        Frame::Join { token: [0x11; TOKEN_LEN] },
        Frame::Rejoin { connection_id: 0x8000_0001, session_ref: [0x22; 16], proof: [0x33; 32] },
        Frame::StreamReset { stream_id: 5, final_size: 6, error_code: 0x100 },
        Frame::MaxStreamData { stream_id: 5, maximum_offset: 65536 },
        Frame::UserTimeout { timeout_ms: 0 },
        Frame::RttProbe { connection_id: 1, timestamp_us: 2 },
        Frame::RttEcho { connection_id: 3, timestamp_us: 4 },
        Frame::TcpInfoRequest { connection_id: 8 },
        Frame::TcpInfo { connection_id: 9, info },
        Frame::AddressProbe { connection_id: 10 },
        Frame::AddressEcho { connection_id: 11, addr: v4 },
        Frame::AddressEcho { connection_id: 12, addr: v6 },
        Frame::RateLimit { connection_id: 13, bytes_per_second: 0 },
        Frame::CongestionControl { connection_id: 14, name: b"cubic" },
        Frame::CongestionControl { connection_id: 15, name: &[b'~'; MAX_CC_NAME_LEN] },
        Frame::StreamSteer { stream_id: 16, connection_id: 17 },
        Frame::PathPriority { connection_id: 18, backup: true },
        Frame::PathPriority { connection_id: 19, backup: false },
    ]
}

pub(super) fn sample_data() -> Vec<u8> {
    (0..300u16).map(|i| (i % 251) as u8).collect()
}

pub(super) fn encode(frame: &Frame<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    frame.encode(&mut out);
    out
}

#[test]
fn every_variant_round_trips() {
    let data = sample_data();
    for frame in samples(&data) {
        let bytes = encode(&frame);
        assert_eq!(bytes.len(), frame.encoded_len(), "{frame:?}");
        assert_eq!(bytes.last(), Some(&(frame.frame_type() as u8)));
        let mut reader = FrameReader::new(&bytes);
        assert_eq!(reader.next(), Some(Ok(frame.clone())));
        assert_eq!(reader.remaining(), 0);
        assert_eq!(reader.next(), None);
    }
}

#[test]
fn samples_cover_every_frame_type() {
    let data = sample_data();
    let frames = samples(&data);
    for t in FrameType::ALL {
        assert!(frames.iter().any(|f| f.frame_type() == t), "{t:?}");
        assert_eq!(FrameType::from_u8(t as u8), Some(t));
        assert_eq!(u8::from(t), t as u8);
    }
}

#[test]
fn a_record_of_all_samples_reads_back_in_reverse() {
    let data = sample_data();
    let frames = samples(&data);
    let mut record = Vec::new();
    for f in &frames {
        f.encode(&mut record);
    }
    let decoded: Result<Vec<_>, _> = FrameReader::new(&record).collect();
    let mut decoded = decoded.expect("valid record");
    decoded.reverse();
    assert_eq!(decoded, frames);
}

#[test]
fn stream_trailer_helpers_match_encode() {
    let data = sample_data();
    for (fin, offset) in [(false, 0), (true, 0x0102_0304_0506_0708)] {
        let frame = Frame::Stream { stream_id: 0xa0b0_c0d0, offset, fin, data: &data };
        let len = u16::try_from(data.len()).expect("short data");

        let mut zero_copy = data.clone();
        encode_stream_trailer(&mut zero_copy, 0xa0b0_c0d0, offset, len, fin);
        assert_eq!(zero_copy, encode(&frame));

        let mut fixed = [0u8; STREAM_FRAME_OVERHEAD];
        write_stream_trailer(&mut fixed, 0xa0b0_c0d0, offset, len, fin);
        assert_eq!(&zero_copy[data.len()..], &fixed[..]);
    }
}

#[test]
fn remaining_points_at_stream_data() {
    let data = b"payload";
    let stream = Frame::Stream { stream_id: 4, offset: 10, fin: false, data };
    let msd = Frame::MaxStreamData { stream_id: 1, maximum_offset: 1 << 20 };

    // Zero-copy layout: data at byte 0.
    let mut record = Vec::new();
    stream.encode(&mut record);
    msd.encode(&mut record);
    Frame::Padding.encode(&mut record);
    let mut reader = FrameReader::new(&record);
    assert_eq!(reader.next(), Some(Ok(Frame::Padding)));
    assert_eq!(reader.next(), Some(Ok(msd.clone())));
    assert_eq!(reader.next(), Some(Ok(stream.clone())));
    assert_eq!(reader.remaining(), 0);

    // A control frame before the stream frame shifts the data.
    let mut record = Vec::new();
    Frame::Ping.encode(&mut record);
    stream.encode(&mut record);
    let mut reader = FrameReader::new(&record);
    assert_eq!(reader.next(), Some(Ok(stream)));
    assert_eq!(reader.remaining(), 1);
    assert_eq!(&record[1..1 + data.len()], data);
}

#[test]
fn control_only_records_and_padding_anywhere() {
    let mut record = vec![0u8; 3];
    Frame::Ping.encode(&mut record);
    record.extend_from_slice(&[0, 0]);
    Frame::RemoveAddress { address_id: 7 }.encode(&mut record);
    record.push(0);
    let decoded: Result<Vec<_>, _> = FrameReader::new(&record).collect();
    let expect = [
        vec![Frame::Padding, Frame::RemoveAddress { address_id: 7 }],
        vec![Frame::Padding; 2],
        vec![Frame::Ping],
        vec![Frame::Padding; 3],
    ]
    .concat();
    assert_eq!(decoded, Ok(expect));
}

#[test]
fn ack_eliciting_is_all_but_padding_and_ack() {
    let data = sample_data();
    for frame in samples(&data) {
        let expected = !matches!(frame, Frame::Padding | Frame::Ack { .. });
        assert_eq!(frame.is_ack_eliciting(), expected, "{frame:?}");
    }
}

#[test]
fn errors_display_their_type() {
    assert_eq!(FrameError::UnknownType(0x1f).to_string(), "unknown frame type 0x1f");
    let e = FrameError::Malformed { frame_type: 0x07, what: "address version is not 4 or 6" };
    assert_eq!(e.frame_type(), 0x07);
    assert!(e.to_string().contains("0x07") && e.to_string().contains("version"));
    assert!(FrameError::Truncated { frame_type: 2 }.to_string().contains("0x02"));
}

#[test]
fn path_priority_is_zero_or_one() {
    for (byte, expected) in [(0u8, Some(false)), (1, Some(true)), (2, None), (0xFF, None)] {
        let wire = [byte, 0, 0, 0, 7, 0x1D];
        let mut reader = FrameReader::new(&wire);
        match (reader.next(), expected) {
            (Some(Ok(Frame::PathPriority { connection_id: 7, backup })), Some(b)) => assert_eq!(backup, b),
            (Some(Err(FrameError::Malformed { frame_type: 0x1D, .. })), None) => {}
            (got, _) => panic!("byte {byte}: {got:?}"),
        }
    }
}
