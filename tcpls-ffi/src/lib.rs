//! The C API of TCPLS (`include/tcpls.h`, generated from this crate by cbindgen; see
//! cbindgen.toml for the header's preamble, which states the threading rules).
//!
//! Layout: `handles.rs` (what C holds), `guard.rs` (no panic crosses, last error), `raw.rs`
//! (the unsafe pointer reads and writes), and one file per object: `config.rs`, `session.rs`,
//! `stream.rs`, `listener.rs`. The work itself is `tcpls-bindings`, shared with the Python
//! package.

// C names (tcpls_session) for the C types.
#![allow(non_camel_case_types)]

mod config;
mod guard;
mod handles;
mod listener;
mod raw;
mod session;
mod stream;

#[cfg(test)]
mod tests;

use std::ffi::{c_char, c_void};

use tcpls_bindings::ErrorKind;

pub use config::*;
pub use listener::*;
pub use session::*;
pub use stream::*;

/// Success.
pub const TCPLS_OK: i32 = 0;
/// A required pointer argument is NULL.
pub const TCPLS_ERR_NULL: i32 = -1;
/// An argument is malformed or out of range: an address, a string, a length above
/// TCPLS_MAX_IO_LEN, a capacity of 0.
pub const TCPLS_ERR_INVALID_ARGUMENT: i32 = -2;
/// Not a live handle of the expected type: freed already, never returned by this library, or a
/// handle of another type.
pub const TCPLS_ERR_INVALID_HANDLE: i32 = -3;
/// The handle (or the stream's side used) was closed by the application: a session after
/// tcpls_session_close, a write after tcpls_stream_shutdown.
pub const TCPLS_ERR_CLOSED: i32 = -4;
/// Another thread is using the object where the threading rules allow one thread at a time.
pub const TCPLS_ERR_BUSY: i32 = -5;
/// Nothing happened within the timeout.
pub const TCPLS_ERR_TIMEOUT: i32 = -6;
/// A non-blocking call cannot make progress now: poll tcpls_session_fd, then try again.
pub const TCPLS_ERR_WOULD_BLOCK: i32 = -7;
/// The TLS handshake failed (certificate, alert, not TLS): tcpls_last_error says what to do.
pub const TCPLS_ERR_TLS: i32 = -8;
/// The TCP connection could not be made (refused, unreachable, no such host).
pub const TCPLS_ERR_CONNECT: i32 = -9;
/// Another I/O error.
pub const TCPLS_ERR_IO: i32 = -10;
/// The peer reset the stream.
pub const TCPLS_ERR_RESET: i32 = -11;
/// The session is over: closed by the peer, failed, or out of connections.
pub const TCPLS_ERR_SESSION_ENDED: i32 = -12;
/// The configuration cannot be used: a missing or malformed certificate, key or CA file.
pub const TCPLS_ERR_CONFIG: i32 = -13;
/// A bug in the library was caught at the boundary; tcpls_last_error says where.
pub const TCPLS_ERR_INTERNAL: i32 = -14;

/// The largest length one read or write takes (1 GiB); larger ones fail with
/// TCPLS_ERR_INVALID_ARGUMENT.
pub const TCPLS_MAX_IO_LEN: usize = 1 << 30;

/// Event kinds (tcpls_event.kind).
/// The peer opened a stream (`stream`); accept it with tcpls_stream_accept.
pub const TCPLS_EVENT_STREAM_OPENED: i32 = 1;
/// A path added after the first (tcpls_session_add_path; on a server, a client's join) can
/// carry data: `conn` is its connection ID.
pub const TCPLS_EVENT_PATH_UP: i32 = 2;
/// A path (`conn`) ended; `detail` says why, empty after a clean close.
pub const TCPLS_EVENT_PATH_DOWN: i32 = 3;
/// A path (`conn`) failed with data in flight, which is re-sent on the others.
pub const TCPLS_EVENT_FAILOVER: i32 = 4;
/// A stream (`stream`) moved to path `conn` (a migration or steering).
pub const TCPLS_EVENT_MIGRATION: i32 = 5;
/// Every path was lost; the session waits for one to come back.
pub const TCPLS_EVENT_ALL_PATHS_LOST: i32 = 6;
/// The session is over; `detail` is its error, empty after a clean close. The last event.
pub const TCPLS_EVENT_SESSION_CLOSED: i32 = 7;

/// Schedulers (tcpls_session_set_scheduler): unsteered data goes to the path with the lowest
/// RTT (the default) ...
pub const TCPLS_SCHEDULER_LOWEST_RTT: i32 = 0;
/// ... or to every path in turn.
pub const TCPLS_SCHEDULER_ROUND_ROBIN: i32 = 1;

/// Bytes of tcpls_event.detail (NUL included).
pub const TCPLS_EVENT_DETAIL_LEN: usize = 256;
/// Bytes of the address strings of tcpls_conn_stats (NUL included).
pub const TCPLS_ADDR_LEN: usize = 64;

/// A configuration: trust (CA file, insecure) and identity (certificate and key). Shared by the
/// sessions and listeners made from it; changing it later does not affect them.
pub struct tcpls_config {
    _opaque: [u8; 0],
}

/// A TCPLS session: many streams over one or more TCP connections (paths).
pub struct tcpls_session {
    _opaque: [u8; 0],
}

/// A bidirectional stream of a session.
pub struct tcpls_stream {
    _opaque: [u8; 0],
}

/// A server's listening sockets (one or more addresses) and the sessions they accept.
pub struct tcpls_listener {
    _opaque: [u8; 0],
}

/// One event of a session (tcpls_next_event).
#[repr(C)]
pub struct tcpls_event {
    /// A TCPLS_EVENT_* value.
    pub kind: i32,
    /// The path (connection ID) concerned, 0 if none.
    pub conn: u32,
    /// The stream ID concerned, 0 if none.
    pub stream: u32,
    /// Why, for PATH_DOWN and SESSION_CLOSED: NUL-terminated, empty when all went well.
    pub detail: [c_char; TCPLS_EVENT_DETAIL_LEN],
}

/// One TCP connection (path) of a session, with the kernel's view of it (Linux TCP_INFO; 0
/// once its socket is closed).
#[repr(C)]
pub struct tcpls_conn_stats {
    /// The connection ID (0 for the first one).
    pub id: u32,
    /// 1 if it can carry data now.
    pub usable: i32,
    /// Bytes of TLS records sent and received on it.
    pub bytes_sent: u64,
    pub bytes_received: u64,
    /// Smoothed round-trip time and its variation, in microseconds.
    pub rtt_us: u32,
    pub rttvar_us: u32,
    /// Congestion window, in segments.
    pub cwnd: u32,
    /// Retransmitted segments.
    pub total_retrans: u32,
    /// Delivery rate estimate, bytes per second.
    pub delivery_rate: u64,
    /// Local and remote address, "IP:PORT" (NUL-terminated, empty if unknown).
    pub local: [c_char; TCPLS_ADDR_LEN],
    pub remote: [c_char; TCPLS_ADDR_LEN],
}

/// The callback of tcpls_stream_read_with: gets `len` bytes that arrived at `data` (valid only
/// during the call) and returns how many it used, 1 to `len`. (NULL is refused.)
pub type tcpls_read_callback = Option<extern "C" fn(userdata: *mut c_void, data: *const u8, len: usize) -> usize>;

/// Copies `text` into a fixed C string buffer, cut to fit, NUL-terminated.
pub(crate) fn fill_c_string<const N: usize>(out: &mut [c_char; N], text: &str) {
    let mut text = text.to_string();
    while text.len() >= N {
        text.pop();
    }
    for (slot, byte) in out.iter_mut().zip(text.bytes().chain(std::iter::repeat(0))) {
        *slot = byte as c_char;
    }
}

/// The message of the calling thread's last failed call: "TCPLS_ERR_NAME: what happened and
/// what to do". Never NULL (empty before any failure); valid until the thread's next failure.
#[allow(unsafe_code)] // `#[no_mangle]` C entry point
#[no_mangle]
pub extern "C" fn tcpls_last_error() -> *const c_char {
    guard::last_error()
}

/// The macro name of an error code (e.g. "TCPLS_ERR_TIMEOUT"), "TCPLS_OK" for 0, "unknown"
/// otherwise. A static string.
#[allow(unsafe_code)] // `#[no_mangle]` C entry point
#[no_mangle]
pub extern "C" fn tcpls_error_name(code: i64) -> *const c_char {
    let name: &'static [u8] = match i32::try_from(code).ok().and_then(ErrorKind::from_code) {
        _ if code == 0 => b"TCPLS_OK\0",
        Some(ErrorKind::NullPointer) => b"TCPLS_ERR_NULL\0",
        Some(ErrorKind::InvalidArgument) => b"TCPLS_ERR_INVALID_ARGUMENT\0",
        Some(ErrorKind::InvalidHandle) => b"TCPLS_ERR_INVALID_HANDLE\0",
        Some(ErrorKind::Closed) => b"TCPLS_ERR_CLOSED\0",
        Some(ErrorKind::Busy) => b"TCPLS_ERR_BUSY\0",
        Some(ErrorKind::Timeout) => b"TCPLS_ERR_TIMEOUT\0",
        Some(ErrorKind::WouldBlock) => b"TCPLS_ERR_WOULD_BLOCK\0",
        Some(ErrorKind::Tls) => b"TCPLS_ERR_TLS\0",
        Some(ErrorKind::Connect) => b"TCPLS_ERR_CONNECT\0",
        Some(ErrorKind::Io) => b"TCPLS_ERR_IO\0",
        Some(ErrorKind::Reset) => b"TCPLS_ERR_RESET\0",
        Some(ErrorKind::SessionEnded) => b"TCPLS_ERR_SESSION_ENDED\0",
        Some(ErrorKind::Config) => b"TCPLS_ERR_CONFIG\0",
        Some(ErrorKind::Internal) => b"TCPLS_ERR_INTERNAL\0",
        None => b"unknown\0",
    };
    name.as_ptr().cast()
}

/// The library's version, e.g. "0.1.0". A static string.
#[allow(unsafe_code)] // `#[no_mangle]` C entry point
#[no_mangle]
pub extern "C" fn tcpls_version() -> *const c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}
