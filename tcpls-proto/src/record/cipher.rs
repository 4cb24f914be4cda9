//! Record protection for one direction of one connection (RFC 8446 §5.2-5.3) with aws-lc-rs.

use std::ops::Range;

use aws_lc_rs::aead::{Aad, Algorithm, LessSafeKey, Nonce, UnboundKey, AES_128_GCM, AES_256_GCM, CHACHA20_POLY1305};
use rustls::ConnectionTrafficSecrets;

use super::{TxBuf, CT_APPLICATION_DATA, HEADER_LEN, MAX_PLAINTEXT, TAG_LEN};
use crate::error::{AlertCode, TransportError};

/// Records sealed under one key before we rotate it with KeyUpdate. The AES-GCM
/// confidentiality limit of TLS 1.3 is 2^24.5 full-size records (RFC 8446 §5.5); we update
/// well before it. ChaCha20-Poly1305 has no practical limit, we rotate at the same point.
pub const DEFAULT_KEY_UPDATE_RECORDS: u64 = 1 << 23;

/// One direction's AEAD key, static IV and record sequence number.
pub struct RecordKey {
    key: LessSafeKey,
    iv: [u8; 12],
    seq: u64,
}

impl std::fmt::Debug for RecordKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordKey").field("seq", &self.seq).finish_non_exhaustive()
    }
}

impl RecordKey {
    /// Builds a key from secrets that rustls handed over, starting at sequence number `seq`.
    pub fn new(secrets: &ConnectionTrafficSecrets, seq: u64) -> Result<Self, TransportError> {
        let (alg, key, iv): (&'static Algorithm, &[u8], &[u8]) = match secrets {
            ConnectionTrafficSecrets::Aes128Gcm { key, iv } => (&AES_128_GCM, key.as_ref(), iv.as_ref()),
            ConnectionTrafficSecrets::Aes256Gcm { key, iv } => (&AES_256_GCM, key.as_ref(), iv.as_ref()),
            ConnectionTrafficSecrets::Chacha20Poly1305 { key, iv } => (&CHACHA20_POLY1305, key.as_ref(), iv.as_ref()),
            _ => return Err(TransportError::internal("negotiated cipher suite is not a TLS 1.3 AEAD we support")),
        };
        Self::from_raw(alg, key, iv, seq)
    }

    pub fn from_raw(alg: &'static Algorithm, key: &[u8], iv: &[u8], seq: u64) -> Result<Self, TransportError> {
        let iv: [u8; 12] = iv.try_into().map_err(|_| TransportError::internal("traffic IV is not 12 bytes"))?;
        let key = UnboundKey::new(alg, key).map_err(|_| TransportError::internal("bad traffic key length"))?;
        Ok(Self { key: LessSafeKey::new(key), iv, seq })
    }

    /// Sequence number of the next record.
    pub fn seq(&self) -> u64 {
        self.seq
    }

    fn nonce(&self) -> Nonce {
        let mut n = self.iv;
        for (b, s) in n[4..].iter_mut().zip(self.seq.to_be_bytes()) {
            *b ^= s;
        }
        Nonce::assume_unique_for_key(n)
    }

    fn next_seq(&mut self) -> Result<(), TransportError> {
        // A key is rotated long before this; wrapping would reuse a nonce, so refuse instead.
        self.seq =
            self.seq.checked_add(1).ok_or_else(|| TransportError::internal("record sequence number exhausted"))?;
        Ok(())
    }

    /// Seals one record whose inner plaintext is `payload || trailer` into `tx`, where `trailer`
    /// already ends with the inner content type. `payload` (stream data) is encrypted straight
    /// from where it lies, so it is never copied into a staging buffer. Returns the wire length.
    pub fn seal_scatter(&mut self, payload: &[u8], trailer: &[u8], tx: &mut TxBuf) -> Result<usize, TransportError> {
        let inner = payload.len() + trailer.len();
        if trailer.is_empty() || inner > MAX_PLAINTEXT + 1 {
            return Err(TransportError::internal(format!("record plaintext of {inner} bytes")));
        }
        let body = inner + TAG_LEN;
        let total = HEADER_LEN + body;
        let header = [CT_APPLICATION_DATA, 3, 3, (body >> 8) as u8, body as u8];
        let nonce = self.nonce();
        let out = tx.reserve(total);
        out[..HEADER_LEN].copy_from_slice(&header);
        let (ct, extra) = out[HEADER_LEN..].split_at_mut(payload.len());
        self.key
            .seal_out_of_place_scatter(nonce, Aad::from(header), payload, ct, trailer, extra)
            .map_err(|_| TransportError::internal("AEAD seal failed"))?;
        tx.commit(total);
        self.next_seq()?;
        Ok(total)
    }

    /// Seals a record carrying `content` with inner content type `content_type`.
    pub fn seal(&mut self, content_type: u8, content: &[u8], tx: &mut TxBuf) -> Result<usize, TransportError> {
        self.seal_scatter(content, &[content_type], tx)
    }

    /// Opens one whole record (`record` = header + body) in place. Returns the inner content type
    /// and the range of the content within `record`. Nothing of the plaintext is exposed when the
    /// tag does not verify.
    pub fn open_in_place(&mut self, record: &mut [u8]) -> Result<(u8, Range<usize>), TransportError> {
        let header = check_header(record)?;
        let nonce = self.nonce();
        let plain_len =
            self.key.open_in_place(nonce, Aad::from(header), &mut record[HEADER_LEN..]).map_err(|_| bad_mac())?.len();
        self.next_seq()?;
        let type_pos = content_end(&record[HEADER_LEN..HEADER_LEN + plain_len])?;
        Ok((record[HEADER_LEN + type_pos], HEADER_LEN..HEADER_LEN + type_pos))
    }

    /// Opens one whole record (`record` = header + body) into `out`, which must be exactly as long
    /// as the record's plaintext ([`plaintext_len`]): the zero-copy receive path decrypts straight
    /// into a stream's receive buffer this way. Returns the inner content type and the length of
    /// the content at the start of `out`. When the tag does not verify, `out` holds unspecified
    /// bytes that the caller must not use (it fails the connection).
    pub fn open_into(&mut self, record: &[u8], out: &mut [u8]) -> Result<(u8, usize), TransportError> {
        let header = check_header(record)?;
        let body = &record[HEADER_LEN..];
        let (ciphertext, tag) = body.split_at(body.len() - TAG_LEN);
        if out.len() != ciphertext.len() {
            return Err(TransportError::internal("open_into: output length differs from the plaintext length"));
        }
        let nonce = self.nonce();
        self.key.open_separate_gather(nonce, Aad::from(header), ciphertext, tag, out).map_err(|_| bad_mac())?;
        self.next_seq()?;
        let type_pos = content_end(out)?;
        Ok((out[type_pos], type_pos))
    }
}

/// Length of the TLSInnerPlaintext of a whole record (`record` = header + body), as
/// [`RecordKey::open_into`] wants its output; `None` if it is too short to hold a tag.
pub fn plaintext_len(record: &[u8]) -> Option<usize> {
    record.len().checked_sub(HEADER_LEN + TAG_LEN)
}

/// The checks every protected record passes before decryption; returns its header (the AAD).
fn check_header(record: &[u8]) -> Result<[u8; HEADER_LEN], TransportError> {
    // A body of just a tag may be authentic: its empty plaintext lacks a content type, which
    // is unexpected_message below, as for an all-zero one (RFC 8446 §5.4).
    if record.len() < HEADER_LEN + TAG_LEN {
        return Err(TransportError::decode("record too short to hold a tag"));
    }
    let mut header = [0u8; HEADER_LEN];
    header.copy_from_slice(&record[..HEADER_LEN]);
    if header[0] != CT_APPLICATION_DATA {
        return Err(TransportError::unexpected(format!("protected record with outer content type {}", header[0])));
    }
    Ok(header)
}

fn bad_mac() -> TransportError {
    TransportError::new(AlertCode::BadRecordMac, "record authentication failed")
}

/// Position of the inner content type in a verified TLSInnerPlaintext, i.e. the length of the
/// content: the last non-zero byte, after the zero padding is stripped.
fn content_end(plain: &[u8]) -> Result<usize, TransportError> {
    // The limit is on the whole TLSInnerPlaintext, zero padding included (RFC 8446 §5.4,
    // PROTOCOL.md §2.2): checking only the content let a peer pad a record past it.
    if plain.len() > MAX_PLAINTEXT + 1 {
        return Err(TransportError::new(AlertCode::RecordOverflow, "record plaintext too long"));
    }
    plain.iter().rposition(|&b| b != 0).ok_or_else(|| TransportError::unexpected("record without a content type"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(alg: &'static Algorithm, key_len: usize) -> (RecordKey, RecordKey) {
        let key = vec![7u8; key_len];
        let iv = [9u8; 12];
        (RecordKey::from_raw(alg, &key, &iv, 0).unwrap(), RecordKey::from_raw(alg, &key, &iv, 0).unwrap())
    }

    #[test]
    fn seal_open_all_suites() {
        for (alg, len) in [(&AES_128_GCM, 16), (&AES_256_GCM, 32), (&CHACHA20_POLY1305, 32)] {
            let (mut tx_key, mut rx_key) = pair(alg, len);
            let mut tx = TxBuf::default();
            tx_key.seal_scatter(b"stream data", b"frames\x17", &mut tx).unwrap();
            tx_key.seal(21, &[1, 0], &mut tx).unwrap();
            let mut wire = tx.data().to_vec();
            let first = 5 + 11 + 7 + 16;
            let (ct, range) = rx_key.open_in_place(&mut wire[..first]).unwrap();
            assert_eq!((ct, &wire[range]), (23, &b"stream dataframes"[..]));
            let (ct, range) = rx_key.open_in_place(&mut wire[first..]).unwrap();
            assert_eq!(ct, 21);
            assert_eq!(&wire[first..][range], &[1, 0]);
            assert_eq!(rx_key.seq(), 2);
        }
    }

    #[test]
    fn open_into_matches_open_in_place() {
        for (alg, len) in [(&AES_128_GCM, 16), (&AES_256_GCM, 32), (&CHACHA20_POLY1305, 32)] {
            let (mut tx_key, mut rx_key) = pair(alg, len);
            let (_, mut rx_copy) = pair(alg, len);
            let mut tx = TxBuf::default();
            tx_key.seal_scatter(b"stream data", b"frames\x17\0\0", &mut tx).unwrap();
            let wire = tx.data().to_vec();
            let mut out = vec![0u8; plaintext_len(&wire).unwrap()];
            let (ct, content_len) = rx_key.open_into(&wire, &mut out).unwrap();
            assert_eq!((ct, &out[..content_len]), (23, &b"stream dataframes"[..]));
            let mut in_place = wire.clone();
            let (ct2, range) = rx_copy.open_in_place(&mut in_place).unwrap();
            assert_eq!((ct2, &in_place[range]), (ct, &out[..content_len]));
            // A wrong output length is refused before anything is decrypted.
            assert!(rx_key.open_into(&wire, &mut [0u8; 3]).is_err());
            let mut flipped = wire.clone();
            flipped[9] ^= 1;
            let (_, mut rx3) = pair(alg, len);
            assert_eq!(rx3.open_into(&flipped, &mut out).unwrap_err().alert, AlertCode::BadRecordMac);
        }
    }

    #[test]
    fn tampering_and_reordering_fail() {
        let (mut tx_key, mut rx_key) = pair(&AES_128_GCM, 16);
        let mut tx = TxBuf::default();
        tx_key.seal(23, b"one", &mut tx).unwrap();
        tx_key.seal(23, b"two", &mut tx).unwrap();
        let wire = tx.data().to_vec();
        let (first, second) = wire.split_at(wire.len() / 2);
        // Second record first: wrong nonce.
        let e = rx_key.open_in_place(&mut second.to_vec()).unwrap_err();
        assert_eq!(e.alert, AlertCode::BadRecordMac);
        let mut flipped = first.to_vec();
        flipped[7] ^= 1;
        let (mut _t, mut rx2) = pair(&AES_128_GCM, 16);
        assert_eq!(rx2.open_in_place(&mut flipped).unwrap_err().alert, AlertCode::BadRecordMac);
    }

    #[test]
    fn padding_is_stripped_and_all_zero_rejected() {
        let (mut tx_key, mut rx_key) = pair(&AES_128_GCM, 16);
        let mut tx = TxBuf::default();
        tx_key.seal_scatter(b"x", &[23, 0, 0, 0], &mut tx).unwrap();
        tx_key.seal_scatter(b"", &[0, 0], &mut tx).unwrap();
        let mut wire = tx.data().to_vec();
        let (a, b) = wire.split_at_mut(5 + 5 + 16);
        let (ct, r) = rx_key.open_in_place(a).unwrap();
        assert_eq!((ct, &a[r]), (23, &b"x"[..]));
        assert_eq!(rx_key.open_in_place(b).unwrap_err().alert, AlertCode::UnexpectedMessage);
    }
}
