//! Bad input: unknown types, truncated and malformed frames, and a random soak. The decoder faces
//! attacker-controlled plaintext, so besides the error kinds what matters is that nothing panics.

use super::tests::{encode, sample_data, samples};
use super::*;

fn first_error(bytes: &[u8]) -> Option<FrameError> {
    FrameReader::new(bytes).find_map(Result::err)
}

#[test]
fn unknown_types_are_rejected() {
    for b in (0x0A..=0x0F).chain(0x1F..=0xFF) {
        assert_eq!(FrameType::from_u8(b), None);
        let record = [0x01, b];
        let mut reader = FrameReader::new(&record);
        assert_eq!(reader.next(), Some(Err(FrameError::UnknownType(b))));
        assert_eq!(reader.next(), None, "iteration must stop after an error");
    }
}

#[test]
fn iteration_stops_at_the_first_error() {
    let mut reader = FrameReader::new(&[0x01, 0xff, 0x00, 0x01]);
    assert_eq!(reader.next(), Some(Ok(Frame::Ping)));
    assert_eq!(reader.next(), Some(Ok(Frame::Padding)));
    assert_eq!(reader.next(), Some(Err(FrameError::UnknownType(0xff))));
    assert_eq!(reader.next(), None);
    assert_eq!(reader.next(), None);
    assert_eq!(FrameReader::new(&[]).next(), None);
}

#[test]
fn malformed_fields_are_rejected() {
    let malformed = |bytes: &[u8], frame_type: u8| match first_error(bytes) {
        Some(FrameError::Malformed { frame_type: t, .. }) => assert_eq!(t, frame_type),
        other => panic!("{bytes:02x?}: expected Malformed, got {other:?}"),
    };
    // Address version 5, in both address frames.
    malformed(&[0, 80, 1, 2, 3, 4, 5, 1, 0x07], 0x07);
    malformed(&[0, 80, 1, 2, 3, 4, 5, 0, 0, 0, 1, 0x19], 0x19);
    // A Stream frame whose Length (3) exceeds the 2 bytes before it.
    malformed(&[b'a', b'b', 0, 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0x02], 0x02);
    // A Stream frame ending beyond 2^64.
    let mut over = vec![b'a', 0, 1];
    over.extend_from_slice(&u64::MAX.to_be_bytes());
    over.extend_from_slice(&[0, 0, 0, 1, 0x03]);
    malformed(&over, 0x03);
    // Congestion Control: empty name, name longer than the record, space, non-ASCII, DEL.
    malformed(&[0, 0, 0, 0, 1, 0x1B], 0x1B);
    malformed(&[b'b', 2, 0, 0, 0, 1, 0x1B], 0x1B);
    malformed(&[b'b', b' ', 2, 0, 0, 0, 1, 0x1B], 0x1B);
    malformed(&[b'b', 0xc3, 2, 0, 0, 0, 1, 0x1B], 0x1B);
    malformed(&[b'b', 0x7f, 2, 0, 0, 0, 1, 0x1B], 0x1B);
}

#[test]
fn short_fixed_fields_are_truncated() {
    let data = sample_data();
    for frame in samples(&data) {
        let bytes = encode(&frame);
        if let Frame::Stream { data, .. } = frame {
            // Cutting into the data is Malformed; only the fixed trailer can be truncated.
            for cut in data.len() + 1..bytes.len() {
                let err = first_error(&bytes[cut..]);
                assert_eq!(err, Some(FrameError::Truncated { frame_type: bytes[bytes.len() - 1] }));
            }
            continue;
        }
        for cut in 1..bytes.len() {
            match first_error(&bytes[cut..]) {
                Some(FrameError::Truncated { frame_type } | FrameError::Malformed { frame_type, .. }) => {
                    assert_eq!(frame_type, frame.frame_type() as u8);
                }
                other => panic!("{frame:?} cut by {cut}: {other:?}"),
            }
        }
    }
}

/// xorshift64*: deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// Whatever the input, decoding must not panic, and every frame it yields must re-encode to
/// exactly the bytes it was parsed from (the wire format has one encoding per frame).
#[test]
fn random_input_soak() {
    let data = sample_data();
    let seeds: Vec<Vec<u8>> = samples(&data[..40]).iter().map(encode).collect();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut input = Vec::with_capacity(64);
    let mut seen = [0usize; 256];
    for _ in 0..200_000 {
        input.clear();
        match rng.next() % 3 {
            // Pure noise.
            0 => {
                let len = (rng.next() % 65) as usize;
                input.extend((0..len).map(|_| rng.next() as u8));
            }
            // Noise ending with a valid type, so every body decoder sees garbage.
            1 => {
                let len = (rng.next() % 64) as usize;
                input.extend((0..len).map(|_| rng.next() as u8));
                input.push(FrameType::ALL[(rng.next() % 23) as usize] as u8);
            }
            // A valid frame with a random prefix cut off and a few bytes flipped.
            _ => {
                let seed = &seeds[(rng.next() % seeds.len() as u64) as usize];
                let cut = (rng.next() % 4) as usize;
                input.extend_from_slice(seed.get(cut..).unwrap_or_default());
                for _ in 0..rng.next() % 3 {
                    let at = (rng.next() % 64) as usize;
                    if let Some(b) = input.get_mut(at) {
                        *b ^= 1 << (rng.next() % 8);
                    }
                }
            }
        }
        let mut reader = FrameReader::new(&input);
        let mut end = input.len();
        while let Some(item) = reader.next() {
            let Ok(frame) = item else { break };
            let start = reader.remaining();
            let reencoded = encode(&frame);
            assert_eq!(reencoded, &input[start..end], "{frame:?}");
            assert_eq!(reencoded.len(), frame.encoded_len());
            end = start;
            seen[usize::from(frame.frame_type() as u8)] += 1;
        }
    }
    for t in FrameType::ALL {
        assert!(seen[usize::from(t as u8)] > 0, "soak never decoded a {t:?}");
    }
}
