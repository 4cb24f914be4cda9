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
use crate::frame::{Frame, FrameReader, STREAM_FRAME_OVERHEAD};

/// A Stream frame that starts at byte 0 of its record's content (the zero-copy layout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LeadStream {
    pub(crate) id: StreamId,
    pub(crate) offset: u64,
    pub(crate) len: usize,
    pub(crate) fin: bool,
}

impl LeadStream {
    /// Where the record's other frames start in its content: after the data and the Stream
    /// frame's own fields.
    pub(crate) fn rest_start(&self) -> usize {
        self.len + STREAM_FRAME_OVERHEAD
    }
}

/// What a record's frames say about placement.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Scan {
    pub(crate) lead: Option<LeadStream>,
    /// The Stream Change frame, if any (the last one on the wire if several).
    pub(crate) change: Option<(StreamId, u64)>,
}

/// Reads the placement facts of one record content. Frames that do not parse yield what was
/// found before the error: the session reports the error itself when it processes the record.
pub(crate) fn scan(content: &[u8]) -> Scan {
    let mut out = Scan::default();
    let mut reader = FrameReader::new(content);
    while let Some(Ok(frame)) = reader.next() {
        match frame {
            Frame::Stream { stream_id, offset, fin, data } if reader.remaining() == 0 => {
                out.lead = Some(LeadStream { id: stream_id, offset, len: data.len(), fin });
            }
            // Frames come last first: the first Stream Change read is the last one sent.
            Frame::StreamChange { next_stream_id, next_offset } if out.change.is_none() => {
                out.change = Some((next_stream_id, next_offset));
            }
            _ => {}
        }
    }
    out
}

/// The receiver's expectation for the next stream record of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Expectation {
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
    pub(crate) fn target(&self) -> Option<(StreamId, u64)> {
        self.next.filter(|_| self.trusted)
    }

    /// Learns from a record that was opened (wherever it was). Records without stream data
    /// (ACKs, other control frames) leave the expectation as it was.
    pub(crate) fn observe(&mut self, scan: &Scan) {
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
    use crate::frame::write_stream_trailer;

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
        let s = scan(&r);
        assert_eq!(s.lead, Some(LeadStream { id: 2, offset: 1000, len: 5, fin: false }));
        assert_eq!(s.change, Some((4, 99)));
        assert_eq!(&r[s.lead.unwrap().rest_start()..], {
            let mut v = Vec::new();
            Frame::Ping.encode(&mut v);
            change.encode(&mut v);
            v
        });
    }

    #[test]
    fn a_stream_frame_not_at_the_start_is_not_a_lead() {
        let mut r = vec![0u8; 3]; // Padding first
        r.extend(record(2, 0, b"abc", false, &[]));
        assert_eq!(scan(&r).lead, None);
        // Garbage: nothing found, no panic.
        assert_eq!(scan(&[0xff, 0x01]), Scan::default());
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
