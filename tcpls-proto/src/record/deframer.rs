//! Finds whole TLS records in a receive buffer without trusting their lengths.

use super::{HEADER_LEN, MAX_CIPHERTEXT};
use crate::error::{AlertCode, TransportError};

/// Where one complete record sits in a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordSpan {
    pub content_type: u8,
    /// Total length, header included.
    pub len: usize,
}

/// Looks at the start of `buf`: `Ok(None)` when the record there is not complete yet,
/// `Ok(Some(span))` when it is, and an error for a header no TLS 1.3 peer would send.
///
/// The length is checked before waiting for the body, so a lying length never makes the
/// receiver buffer more than one maximum-size record.
pub fn next_record(buf: &[u8]) -> Result<Option<RecordSpan>, TransportError> {
    let Some(header) = buf.get(..HEADER_LEN) else {
        return Ok(None);
    };
    let content_type = header[0];
    if !(20..=23).contains(&content_type) {
        return Err(TransportError::decode(format!("invalid record content type {content_type}")));
    }
    if header[1] != 3 {
        return Err(TransportError::decode(format!("invalid record version {:02x}{:02x}", header[1], header[2])));
    }
    let body = u16::from_be_bytes([header[3], header[4]]) as usize;
    if body > MAX_CIPHERTEXT {
        return Err(TransportError::new(
            AlertCode::RecordOverflow,
            format!("record length {body} exceeds {MAX_CIPHERTEXT}"),
        ));
    }
    let len = HEADER_LEN + body;
    Ok((buf.len() >= len).then_some(RecordSpan { content_type, len }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_and_whole_records() {
        assert_eq!(next_record(&[]).unwrap(), None);
        assert_eq!(next_record(&[23, 3, 3]).unwrap(), None);
        assert_eq!(next_record(&[23, 3, 3, 0, 2, 9]).unwrap(), None);
        let span = next_record(&[23, 3, 3, 0, 2, 9, 9, 7]).unwrap().unwrap();
        assert_eq!(span, RecordSpan { content_type: 23, len: 7 });
    }

    #[test]
    fn hostile_headers_are_errors() {
        assert_eq!(next_record(&[0x47, 0x45, 0x54, 0x20, 0x2f]).unwrap_err().alert, AlertCode::DecodeError);
        assert_eq!(next_record(&[23, 2, 0, 0, 1]).unwrap_err().alert, AlertCode::DecodeError);
        let e = next_record(&[23, 3, 3, 0xff, 0xff]).unwrap_err();
        assert_eq!(e.alert, AlertCode::RecordOverflow);
    }
}
