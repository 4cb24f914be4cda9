//! Errors as a binding reports them: a kind (a C error code, a Python exception class) and a
//! message saying what failed and, for the usual mistakes, what to do.

use std::fmt;
use std::io;

/// What went wrong, coarsely: each kind is one negative C error code and one Python exception
/// class. The codes are part of the C API and never change meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// A required pointer argument was NULL.
    NullPointer,
    /// An argument is malformed or out of range (an address, a length, a string).
    InvalidArgument,
    /// A handle that is not a live handle of the expected type (freed, forged, or of another
    /// type).
    InvalidHandle,
    /// The handle, or the side of the stream used, was closed by the application.
    Closed,
    /// The object is in use by another thread where the rules allow only one at a time.
    Busy,
    /// Nothing happened within the timeout.
    Timeout,
    /// A non-blocking call could not make progress now: wait for the readiness descriptor.
    WouldBlock,
    /// The TLS handshake failed (certificate, alert, not TLS).
    Tls,
    /// The TCP connection could not be made.
    Connect,
    /// Another I/O error.
    Io,
    /// The peer reset the stream.
    Reset,
    /// The session is over (closed by the peer, failed, or lost all its connections).
    SessionEnded,
    /// The configuration is unusable (a missing or malformed certificate, key or CA file).
    Config,
    /// A bug in the library (a caught panic); the message says where.
    Internal,
}

impl ErrorKind {
    /// Every kind, in the order of their codes.
    pub const ALL: [ErrorKind; 14] = [
        ErrorKind::NullPointer,
        ErrorKind::InvalidArgument,
        ErrorKind::InvalidHandle,
        ErrorKind::Closed,
        ErrorKind::Busy,
        ErrorKind::Timeout,
        ErrorKind::WouldBlock,
        ErrorKind::Tls,
        ErrorKind::Connect,
        ErrorKind::Io,
        ErrorKind::Reset,
        ErrorKind::SessionEnded,
        ErrorKind::Config,
        ErrorKind::Internal,
    ];

    /// The C error code: -1 for the first kind, -2 for the next, and so on.
    pub fn code(self) -> i32 {
        let index = Self::ALL.iter().position(|k| *k == self).unwrap_or(Self::ALL.len() - 1);
        -(i32::try_from(index).unwrap_or(i32::MAX - 1) + 1)
    }

    /// The kind of a C error code, if it is one.
    pub fn from_code(code: i32) -> Option<ErrorKind> {
        let index = usize::try_from(code.checked_neg()?.checked_sub(1)?).ok()?;
        Self::ALL.get(index).copied()
    }

    /// The C macro's name, e.g. `TCPLS_ERR_TIMEOUT`.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::NullPointer => "TCPLS_ERR_NULL",
            ErrorKind::InvalidArgument => "TCPLS_ERR_INVALID_ARGUMENT",
            ErrorKind::InvalidHandle => "TCPLS_ERR_INVALID_HANDLE",
            ErrorKind::Closed => "TCPLS_ERR_CLOSED",
            ErrorKind::Busy => "TCPLS_ERR_BUSY",
            ErrorKind::Timeout => "TCPLS_ERR_TIMEOUT",
            ErrorKind::WouldBlock => "TCPLS_ERR_WOULD_BLOCK",
            ErrorKind::Tls => "TCPLS_ERR_TLS",
            ErrorKind::Connect => "TCPLS_ERR_CONNECT",
            ErrorKind::Io => "TCPLS_ERR_IO",
            ErrorKind::Reset => "TCPLS_ERR_RESET",
            ErrorKind::SessionEnded => "TCPLS_ERR_SESSION_ENDED",
            ErrorKind::Config => "TCPLS_ERR_CONFIG",
            ErrorKind::Internal => "TCPLS_ERR_INTERNAL",
        }
    }
}

/// An error of a binding call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub kind: ErrorKind,
    pub message: String,
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }

    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorKind::InvalidArgument, message)
    }

    /// A failed `connect`, join or handshake: the kind says whether TCP or TLS failed.
    pub fn connecting(what: &str, e: &io::Error) -> Self {
        let kind = if session_error(e).is_some() {
            match session_error(e) {
                Some(tcpls_proto::Error::Tls(_) | tcpls_proto::Error::PeerAlert(_) | tcpls_proto::Error::Local(_)) => {
                    ErrorKind::Tls
                }
                _ => ErrorKind::Io,
            }
        } else {
            match e.kind() {
                io::ErrorKind::TimedOut => ErrorKind::Timeout,
                io::ErrorKind::InvalidInput => ErrorKind::InvalidArgument,
                _ => ErrorKind::Connect,
            }
        };
        Self::new(kind, format!("{what}: {}", explain(e)))
    }

    /// A failed stream or session operation.
    pub fn io(what: &str, e: &io::Error) -> Self {
        let kind = match e.kind() {
            io::ErrorKind::ConnectionReset => ErrorKind::Reset,
            io::ErrorKind::NotConnected => ErrorKind::SessionEnded,
            io::ErrorKind::BrokenPipe => ErrorKind::Closed,
            io::ErrorKind::TimedOut => ErrorKind::Timeout,
            io::ErrorKind::InvalidInput => ErrorKind::InvalidArgument,
            _ => ErrorKind::Io,
        };
        Self::new(kind, format!("{what}: {e}"))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Error {}

fn session_error(e: &io::Error) -> Option<&tcpls_proto::Error> {
    e.get_ref().and_then(|inner| inner.downcast_ref::<tcpls_proto::Error>())
}

/// A connection error as a user should read it: what failed and, for the usual TLS mistakes,
/// what to do about it (the advice of the CLI's messages, naming the bindings' settings).
pub fn explain(e: &io::Error) -> String {
    use rustls::{CertificateError, Error as Tls};
    use tcpls_proto::Error as Session;
    let Some(session_error) = session_error(e) else {
        return e.to_string();
    };
    let advice = match session_error {
        Session::Tls(Tls::InvalidCertificate(CertificateError::UnknownIssuer)) => {
            "the server's certificate is not signed by a CA we trust (UnknownIssuer): pass the server's \
             certificate or its CA as the CA file (C: tcpls_config_set_ca_file; Python: ca=FILE; CLI: --ca FILE), \
             or set insecure for a test"
        }
        Session::Tls(Tls::InvalidCertificate(CertificateError::BadSignature)) => {
            "the server's certificate does not verify against the CA file (BadSignature): pass the right CA file \
             for this server (C: tcpls_config_set_ca_file; Python: ca=FILE; CLI: --ca FILE), or set insecure for a test"
        }
        Session::Tls(Tls::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        )) => {
            "the server's certificate does not name this host (NotValidForName): pass a server name it has \
             (C: the server_name argument; Python: server_name=NAME)"
        }
        Session::Tls(Tls::InvalidCertificate(CertificateError::Expired | CertificateError::ExpiredContext { .. })) => {
            "the server's certificate has expired"
        }
        Session::Tls(Tls::InvalidMessage(_)) => {
            "the server does not speak TLS (its first bytes are not a TLS record): check the address and port"
        }
        Session::PeerAlert(116) => {
            "the server requires a client certificate (CertificateRequired): set one \
             (C: tcpls_config_set_certificate; Python: cert=FILE, key=FILE)"
        }
        _ => return e.to_string(),
    };
    format!("TLS handshake failed: {advice}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_negative_distinct_and_round_trip() {
        let mut seen = std::collections::HashSet::new();
        for kind in ErrorKind::ALL {
            let code = kind.code();
            assert!(code < 0, "{kind:?}");
            assert!(seen.insert(code), "{kind:?} shares {code}");
            assert_eq!(ErrorKind::from_code(code), Some(kind));
        }
        assert_eq!(ErrorKind::from_code(0), None);
        assert_eq!(ErrorKind::from_code(1), None);
        assert_eq!(ErrorKind::from_code(i32::MIN), None);
        assert_eq!(ErrorKind::NullPointer.code(), -1);
        assert_eq!(ErrorKind::Internal.code(), -14);
    }
}
