//! What every TLS handshake of this crate shares, client (`connector.rs`) and server
//! (`listener.rs`) alike, and the default deadline of a path's connect (`path.rs`).

use std::io;
use std::time::Duration;

/// Handshakes that take longer are abandoned (slowloris protection).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// A session that failed before its handshake completed, as an `io::Error`: a lost connection
/// is `ConnectionAborted`, anything else (alerts, bad certificates, garbage) `InvalidData`.
pub(crate) fn handshake_error(e: tcpls_proto::Error) -> io::Error {
    let kind = match &e {
        tcpls_proto::Error::ConnectionLost(_) => io::ErrorKind::ConnectionAborted,
        _ => io::ErrorKind::InvalidData,
    };
    io::Error::new(kind, e)
}
