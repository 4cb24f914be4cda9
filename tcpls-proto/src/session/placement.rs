//! Zero-copy receive placement (ARCHITECTURE.md, "The receive path"; PROTOCOL.md §2.3).
//!
//! To decrypt a record straight into its stream's receive buffer, the receiver must know where
//! the record's data goes *before* it decrypts it. Each connection therefore keeps an
//! expectation: the stream and offset that the next stream record on it will carry. It is
//! learnt from the records themselves:
//!
//! * continuation: after stream `s`'s bytes `o..o + n`, the next record carries `s` at `o + n`;
//! * Stream Change: the sender announces the next record's stream and offset when it switches.
//!
//! The sender announces a switch in the record before it: when it seals a record of one stream
//! and another stream's record is due next on the same connection (round robin), the record
//! ends with a Stream Change naming it (`packetize.rs`).
//!
//! A record whose leading Stream frame matches the expectation is committed where it was
//! decrypted (counted in `zero_copy_bytes`); any other record is handled by the ordinary path,
//! which copies (`copied_bytes`). After a miss, records are decrypted in the connection's
//! buffer until the expectation proves right again, so a sender that never announces its
//! switches (e.g. one stream spread over several connections) costs one copy, as without
//! zero-copy, and not two.

use crate::event::StreamId;
use crate::frame::{Frame, FrameReader};

/// A Stream frame that starts at byte 0 of its record's content (the zero-copy layout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct LeadStream {
    pub(super) id: StreamId,
    pub(super) offset: u64,
    pub(super) len: usize,
    pub(super) fin: bool,
}

/// What a record's frames say about placement, gathered while they are read for delivery
/// ([`Scan::note`]), so that no record is decoded once for placement and again for delivery.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Scan {
    pub(super) lead: Option<LeadStream>,
    /// The Stream Change frame, if any (the last one on the wire if several).
    pub(super) change: Option<(StreamId, u64)>,
}

impl Scan {
    /// Notes one frame of the record, `remaining` being [`FrameReader::remaining`] right after
    /// the reader returned it (0: the frame starts the record).
    pub(super) fn note(&mut self, frame: &Frame<'_>, remaining: usize) {
        match *frame {
            Frame::Stream { stream_id, offset, fin, data } if remaining == 0 => {
                self.lead = Some(LeadStream { id: stream_id, offset, len: data.len(), fin });
            }
            // Frames come last first: the first Stream Change read is the last one sent.
            Frame::StreamChange { next_stream_id, next_offset } if self.change.is_none() => {
                self.change = Some((next_stream_id, next_offset));
            }
            _ => {}
        }
    }
}

/// Reads the frames of a record decrypted straight into a stream's buffer, once: its placement
/// facts, and in `rest` the frames other than the leading Stream frame (which stays where it
/// was decrypted), in the order the reader yields them. `None` (the record then takes the
/// copying path) when a frame does not parse, there is no leading Stream frame, or a trailing
/// frame borrows bytes of the record (a second Stream frame, Congestion Control: our sender
/// puts neither behind stream data), since those bytes live in the stream's buffer.
pub(super) fn read_direct(content: &[u8], rest: &mut Vec<Frame<'static>>) -> Option<Scan> {
    // A record may hold thousands of one-byte frames; the list kept per connection must stay
    // small (memory a peer could make every connection hold), so such a record takes the
    // copying path, which reads its frames one by one without keeping them.
    const MAX_TRAILING_FRAMES: usize = 64;
    rest.clear();
    let mut scan = Scan::default();
    let mut reader = FrameReader::new(content);
    while let Some(frame) = reader.next() {
        let frame = frame.ok()?;
        scan.note(&frame, reader.remaining());
        if reader.remaining() == 0 && scan.lead.is_some() {
            break;
        }
        match frame {
            // Padding does nothing on receipt: not kept.
            Frame::Padding => {}
            _ if rest.len() == MAX_TRAILING_FRAMES => return None,
            other => rest.push(owned(other)?),
        }
    }
    scan.lead.map(|_| scan)
}

/// The frame as a value that borrows nothing, if it is one.
fn owned(frame: Frame<'_>) -> Option<Frame<'static>> {
    Some(match frame {
        Frame::Stream { .. } | Frame::CongestionControl { .. } => return None,
        Frame::Padding => Frame::Padding,
        Frame::Ping => Frame::Ping,
        Frame::Ack { connection_id, highest_record_seq } => Frame::Ack { connection_id, highest_record_seq },
        Frame::NewToken { sequence, token } => Frame::NewToken { sequence, token },
        Frame::ConnectionReset { connection_id } => Frame::ConnectionReset { connection_id },
        Frame::NewAddress { address_id, addr } => Frame::NewAddress { address_id, addr },
        Frame::RemoveAddress { address_id } => Frame::RemoveAddress { address_id },
        Frame::StreamChange { next_stream_id, next_offset } => Frame::StreamChange { next_stream_id, next_offset },
        Frame::Join { token } => Frame::Join { token },
        Frame::StreamReset { stream_id, final_size, error_code } => {
            Frame::StreamReset { stream_id, final_size, error_code }
        }
        Frame::MaxStreamData { stream_id, maximum_offset } => Frame::MaxStreamData { stream_id, maximum_offset },
        Frame::UserTimeout { timeout_ms } => Frame::UserTimeout { timeout_ms },
        Frame::RttProbe { connection_id, timestamp_us } => Frame::RttProbe { connection_id, timestamp_us },
        Frame::RttEcho { connection_id, timestamp_us } => Frame::RttEcho { connection_id, timestamp_us },
        Frame::TcpInfoRequest { connection_id } => Frame::TcpInfoRequest { connection_id },
        Frame::TcpInfo { connection_id, info } => Frame::TcpInfo { connection_id, info },
        Frame::AddressProbe { connection_id } => Frame::AddressProbe { connection_id },
        Frame::AddressEcho { connection_id, addr } => Frame::AddressEcho { connection_id, addr },
        Frame::RateLimit { connection_id, bytes_per_second } => Frame::RateLimit { connection_id, bytes_per_second },
        Frame::StreamSteer { stream_id, connection_id } => Frame::StreamSteer { stream_id, connection_id },
        Frame::PathPriority { connection_id, backup } => Frame::PathPriority { connection_id, backup },
        Frame::Rejoin { connection_id, session_ref, proof } => Frame::Rejoin { connection_id, session_ref, proof },
    })
}

/// The receiver's expectation for the next stream record of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Expectation {
    next: Option<(StreamId, u64)>,
    /// The last stream record matched (or nothing contradicted it yet): worth decrypting the
    /// next one straight into place.
    trusted: bool,
}

impl Default for Expectation {
    fn default() -> Self {
        Self { next: None, trusted: true }
    }
}

impl Expectation {
    /// Where to decrypt the next record, if anywhere but the connection's buffer.
    pub(super) fn target(&self) -> Option<(StreamId, u64)> {
        self.next.filter(|_| self.trusted)
    }

    /// Learns from a record that was opened (wherever it was). Records without stream data
    /// (ACKs, other control frames) leave the expectation as it was.
    pub(super) fn observe(&mut self, scan: &Scan) {
        if let Some(lead) = scan.lead {
            self.trusted = self.next.is_none_or(|next| next == (lead.id, lead.offset));
            self.next = (!lead.fin).then(|| (lead.id, lead.offset.saturating_add(lead.len as u64)));
        }
        if let Some(change) = scan.change {
            self.next = Some(change);
            self.trusted = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{write_stream_trailer, STREAM_FRAME_OVERHEAD};

    fn record(id: StreamId, offset: u64, data: &[u8], fin: bool, tail: &[Frame<'_>]) -> Vec<u8> {
        let mut out = data.to_vec();
        let mut fields = [0u8; STREAM_FRAME_OVERHEAD];
        write_stream_trailer(&mut fields, id, offset, data.len() as u16, fin);
        out.extend_from_slice(&fields);
        for f in tail {
            f.encode(&mut out);
        }
        out
    }

    #[test]
    fn scan_finds_the_leading_stream_and_the_change() {
        let change = Frame::StreamChange { next_stream_id: 4, next_offset: 99 };
        let r = record(2, 1000, b"hello", false, &[Frame::Ping, change.clone()]);
        let mut rest = Vec::new();
        let s = read_direct(&r, &mut rest).expect("a leading Stream frame");
        assert_eq!(rest, vec![change.clone(), Frame::Ping], "the other frames, last first");
        assert_eq!(s.lead, Some(LeadStream { id: 2, offset: 1000, len: 5, fin: false }));
        assert_eq!(s.change, Some((4, 99)));
    }

    #[test]
    fn a_stream_frame_not_at_the_start_is_not_a_lead() {
        let mut r = vec![0u8; 3]; // Padding first
        r.extend(record(2, 0, b"abc", false, &[]));
        assert_eq!(read_direct(&r, &mut Vec::new()), None);
        // Garbage: nothing found, no panic.
        assert_eq!(read_direct(&[0xff, 0x01], &mut Vec::new()), None);
        // Too many trailing frames to keep: the copying path, and the list stays small.
        let pings = vec![Frame::Ping; 65];
        let mut rest = Vec::new();
        assert_eq!(read_direct(&record(2, 0, b"abc", false, &pings), &mut rest), None);
        assert!(rest.capacity() <= 64, "{}", rest.capacity());
        assert!(read_direct(&record(2, 0, b"abc", false, &pings[..64]), &mut rest).is_some());
        // A frame that borrows bytes behind the stream data: the copying path.
        let cc = Frame::CongestionControl { connection_id: 0, name: b"bbr" };
        assert_eq!(read_direct(&record(2, 0, b"abc", false, &[cc]), &mut Vec::new()), None);
    }

    #[test]
    fn expectation_follows_continuation_changes_and_misses() {
        let mut e = Expectation::default();
        assert_eq!(e.target(), None);
        let lead = |id, offset, len| Scan { lead: Some(LeadStream { id, offset, len, fin: false }), change: None };
        e.observe(&lead(0, 0, 100));
        assert_eq!(e.target(), Some((0, 100)));
        // A control-only record changes nothing.
        e.observe(&Scan::default());
        assert_eq!(e.target(), Some((0, 100)));
        // A miss: not trusted until a record matches again.
        e.observe(&lead(0, 300, 100));
        assert_eq!(e.target(), None);
        e.observe(&lead(0, 400, 100));
        assert_eq!(e.target(), Some((0, 500)));
        // Stream Change is trusted at once.
        e.observe(&lead(0, 900, 10));
        e.observe(&Scan { lead: None, change: Some((6, 7)) });
        assert_eq!(e.target(), Some((6, 7)));
        // FIN: nothing more expected on that stream.
        e.observe(&Scan { lead: Some(LeadStream { id: 6, offset: 7, len: 3, fin: true }), change: None });
        assert_eq!(e.target(), None);
    }
}
