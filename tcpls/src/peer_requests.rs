//! The peer's requests to change the options of our sockets (User Timeout and Congestion Control
//! frames, PROTOCOL.md §7): checked against our policy, applied to the connection's socket
//! (`sockopt.rs`), and their outcome reported as a [`SocketOptionApplied`]. The core decodes the
//! requests; only the IO layer, which owns the sockets, can act on them.

use std::ops::RangeInclusive;
use std::os::fd::RawFd;

use tcpls_proto::{ConnId, Event};

use crate::events::SocketOptionApplied;
use crate::sockopt;

/// User timeouts a peer may ask us to apply (TCP_USER_TIMEOUT, milliseconds). A peer may tune
/// failure detection, not make our sockets fail at the slightest delay nor hang for hours.
pub(crate) const PEER_USER_TIMEOUT_MS: RangeInclusive<u32> = 100..=600_000;

/// Applies `event` if it is a peer's socket-option request, to the socket `fd` finds for its
/// connection; returns the outcome, or None for any other event.
pub(crate) fn apply(
    event: &Event,
    proto: &tcpls_proto::Session,
    fd: impl Fn(ConnId) -> Option<RawFd>,
) -> Option<SocketOptionApplied> {
    let no_socket = |conn: ConnId| format!("no open socket for connection {conn}");
    match event {
        Event::UserTimeoutRequested { conn, timeout_ms } => {
            // 0 restores the system default.
            let result = if *timeout_ms != 0 && !PEER_USER_TIMEOUT_MS.contains(timeout_ms) {
                Err(format!("{timeout_ms} ms is outside the accepted range {PEER_USER_TIMEOUT_MS:?} ms"))
            } else {
                match fd(*conn) {
                    Some(fd) => sockopt::set_user_timeout(fd, *timeout_ms).map_err(|e| e.to_string()),
                    None => Err(no_socket(*conn)),
                }
            };
            Some(SocketOptionApplied { conn: *conn, option: "user_timeout", value: timeout_ms.to_string(), result })
        }
        Event::CongestionControlRequested { conn, name } => {
            let result = if !proto.congestion_control_allowed(name) {
                Err(format!("congestion control {name:?} is not allowed by our policy"))
            } else {
                match fd(*conn) {
                    Some(fd) => sockopt::set_congestion(fd, name).map_err(|e| e.to_string()),
                    None => Err(no_socket(*conn)),
                }
            };
            Some(SocketOptionApplied { conn: *conn, option: "congestion_control", value: name.clone(), result })
        }
        _ => None,
    }
}
