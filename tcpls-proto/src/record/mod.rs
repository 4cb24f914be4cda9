//! The TLS 1.3 record layer that TCPLS runs after the handshake (PROTOCOL.md §2).
//!
//! rustls performs the handshake; from then on every record of a TCPLS connection is protected
//! and parsed here: [`deframer`] finds whole records in a connection's receive buffer,
//! [`cipher`] seals and opens them, [`buf`] holds the per-connection byte buffers that sockets
//! are read into and written from in large chunks.

pub mod buf;
pub mod cipher;
pub mod deframer;

pub use buf::{RxBuf, TxBuf};
pub use cipher::{plaintext_len, RecordKey};
pub use deframer::{next_record, RecordSpan};

/// Outer and inner content types (RFC 8446 §5.1).
pub const CT_CHANGE_CIPHER_SPEC: u8 = 20;
pub const CT_ALERT: u8 = 21;
pub const CT_HANDSHAKE: u8 = 22;
pub const CT_APPLICATION_DATA: u8 = 23;

/// Record header: type(1) legacy_version(2) length(2).
pub const HEADER_LEN: usize = 5;
/// Largest plaintext content of one record.
pub const MAX_PLAINTEXT: usize = 1 << 14;
/// Largest ciphertext (`length` field) a receiver accepts.
pub const MAX_CIPHERTEXT: usize = MAX_PLAINTEXT + 256;
/// AEAD tag of every TLS 1.3 cipher suite.
pub const TAG_LEN: usize = 16;
/// Wire bytes a record adds to its content: header, inner content type, tag.
pub const RECORD_OVERHEAD: usize = HEADER_LEN + 1 + TAG_LEN;

/// Handshake message types carried after the handshake (inner type 22).
pub const HS_NEW_SESSION_TICKET: u8 = 4;
pub const HS_KEY_UPDATE: u8 = 24;
