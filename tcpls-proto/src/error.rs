//! Errors of the TCPLS core, and the TLS alert each one is reported with.
//!
//! Every failure caused by bytes from the network becomes a [`TransportError`]: the connection
//! that carried the bytes sends the matching fatal alert and closes. Nothing here panics.

use std::fmt;

use crate::wire_enum::wire_enum;

wire_enum! {
    /// TLS alert descriptions (RFC 8446 §6) that TCPLS uses. A received description outside this
    /// list ([`AlertCode::from_u8`] is `None`) is kept as its raw value by the caller.
    pub enum AlertCode {
        CloseNotify = 0,
        UnexpectedMessage = 10,
        BadRecordMac = 20,
        RecordOverflow = 22,
        HandshakeFailure = 40,
        IllegalParameter = 47,
        AccessDenied = 49,
        DecodeError = 50,
        InternalError = 80,
        NoApplicationProtocol = 120,
    }
}

/// A fatal error detected locally on one TCP connection: we send `alert`, then close it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportError {
    pub alert: AlertCode,
    pub reason: String,
}

impl TransportError {
    pub fn new(alert: AlertCode, reason: impl Into<String>) -> Self {
        Self { alert, reason: reason.into() }
    }
    pub fn decode(reason: impl Into<String>) -> Self {
        Self::new(AlertCode::DecodeError, reason)
    }
    pub fn unexpected(reason: impl Into<String>) -> Self {
        Self::new(AlertCode::UnexpectedMessage, reason)
    }
    pub fn illegal(reason: impl Into<String>) -> Self {
        Self::new(AlertCode::IllegalParameter, reason)
    }
    pub fn internal(reason: impl Into<String>) -> Self {
        Self::new(AlertCode::InternalError, reason)
    }
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (alert {:?})", self.reason, self.alert)
    }
}

/// Why a connection or a session ended abnormally.
#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    /// We detected a protocol violation and sent a fatal alert.
    Local(TransportError),
    /// The peer sent a fatal alert (raw description byte).
    PeerAlert(u8),
    /// The TLS handshake failed inside rustls.
    Tls(rustls::Error),
    /// The TCP connection ended (EOF or socket error) without a close_notify.
    ConnectionLost(String),
    /// The session was closed by the application; the operation is no longer possible.
    SessionClosed,
    /// No unused join token is left (the server's limit on this session's connections) while a
    /// connection of the session lives (when none does, a client rejoins without a token).
    NoToken,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Local(e) => write!(f, "protocol error: {e}"),
            // rustls knows every TLS alert's name (ours are a subset), e.g. CertificateRequired.
            Error::PeerAlert(d) => write!(f, "peer sent fatal alert {:?} ({d})", rustls::AlertDescription::from(*d)),
            Error::Tls(e) => write!(f, "TLS handshake failed: {e}"),
            Error::ConnectionLost(why) => write!(f, "connection lost: {why}"),
            Error::SessionClosed => f.write_str("session closed"),
            Error::NoToken => f.write_str("no join token left: the server allows no more connections for now"),
        }
    }
}

impl std::error::Error for Error {}

impl From<TransportError> for Error {
    fn from(e: TransportError) -> Self {
        Error::Local(e)
    }
}

/// Errors of stream operations called by the application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamError {
    /// No such stream (never opened, or already fully closed and forgotten).
    UnknownStream(u32),
    /// The peer reset the stream with this error code.
    Reset(u32),
    /// The write side was already finished or reset.
    Finished,
    /// The session is closed or failed.
    SessionClosed,
    /// The local limit on concurrent streams is reached.
    TooManyStreams,
    /// A fallback (plain TLS) session has exactly one stream.
    Fallback,
}

/// Stream Reset code when the receiver refuses a stream over its concurrency limit or receive
/// budget (PROTOCOL.md §4.3).
pub const RESET_REFUSED: u32 = 0x1;

impl fmt::Display for StreamError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StreamError::UnknownStream(id) => write!(f, "unknown stream {id}"),
            StreamError::Reset(RESET_REFUSED) => f.write_str(
                "stream refused by the peer (code 0x1): it has as many streams open as its stream limit or \
                 receive budget allows; open it again once some end, or raise the peer's limit",
            ),
            StreamError::Reset(code) => write!(f, "stream reset by peer (code {code:#x})"),
            StreamError::Finished => f.write_str("stream already finished"),
            StreamError::SessionClosed => f.write_str("session closed"),
            StreamError::TooManyStreams => f.write_str("too many concurrent streams"),
            StreamError::Fallback => f.write_str("plain TLS fallback session has only stream 0"),
        }
    }
}

impl std::error::Error for StreamError {}
