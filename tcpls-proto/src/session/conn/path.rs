//! Where a connection goes: its addresses, its role (regular or backup) and what the IO layer
//! tells of its path (TCP_INFO), for the scheduler.

use std::net::SocketAddr;

use crate::session::sched::PathInfo;

#[derive(Debug, Default)]
pub(in crate::session) struct ConnPath {
    pub(in crate::session) local: Option<SocketAddr>,
    pub(in crate::session) remote: Option<SocketAddr>,
    /// Path information from the IO layer (TCP_INFO), for the scheduler.
    pub(in crate::session) tcp: PathInfo,
    /// A backup path (Path Priority, PROTOCOL.md §3): no unsteered stream data while a regular
    /// connection can carry it.
    pub(in crate::session) backup: bool,
}
