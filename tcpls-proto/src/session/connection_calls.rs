//! The application's calls about single connections: closing one, its addresses, path
//! information from the IO layer, its role (backup or regular), its error.

use std::net::SocketAddr;
use std::time::Duration;

use crate::error::{Error, TransportError};
use crate::event::{ConnId, Event};
use crate::frame::Frame;

use super::conn::{ConnStats, Connection};
use super::sched::PathView;
use super::send_budget::SendBudgetRule;
use super::Session;

impl Session {
    /// Connection IDs, including finished ones until the session forgets them.
    pub fn connection_ids(&self) -> Vec<ConnId> {
        self.conns.iter().map(|c| c.id).collect()
    }

    pub fn connection_stats(&self, conn: ConnId) -> Option<ConnStats> {
        self.conns.get(conn).map(|c| c.stats)
    }

    /// KeyUpdates sent and received on a connection.
    pub fn key_updates(&self, conn: ConnId) -> (u64, u64) {
        self.conns.get(conn).map(|c| c.key_updates()).unwrap_or_default()
    }

    /// Rotates our sending key on `conn` (TLS KeyUpdate); with `request_peer` the peer rotates
    /// its key too. Keys also rotate by themselves before the AEAD usage limit.
    pub fn update_keys(&mut self, conn: ConnId, request_peer: bool) -> Result<(), Error> {
        let c = self.conns.get_mut(conn).ok_or_else(|| Error::ConnectionLost(format!("no connection {conn}")))?;
        c.update_key(request_peer).map_err(Error::Local)
    }

    /// Tells the core the socket addresses of a connection (for Address Echo and reports).
    pub fn set_addresses(&mut self, conn: ConnId, local: Option<SocketAddr>, remote: Option<SocketAddr>) {
        if let Some(c) = self.conns.get_mut(conn) {
            c.path.local = local;
            c.path.remote = remote;
        }
    }

    pub fn addresses(&self, conn: ConnId) -> (Option<SocketAddr>, Option<SocketAddr>) {
        self.conns.get(conn).map(|c| (c.path.local, c.path.remote)).unwrap_or_default()
    }
}

impl Session {
    /// Closes one connection gracefully (close_notify after what is already sealed on it).
    /// Streams steered to it move to the other connections.
    pub fn close_connection(&mut self, conn: ConnId) -> Result<(), Error> {
        let c = self.conns.get_mut(conn).ok_or_else(|| Error::ConnectionLost(format!("no connection {conn}")))?;
        c.send_close_notify()?;
        self.after_connection_change();
        Ok(())
    }

    /// Tells the scheduler a connection's RTT and congestion window (from TCP_INFO).
    pub fn set_path_info(&mut self, conn: ConnId, rtt_us: Option<u32>, cwnd: Option<u32>) {
        if let Some(c) = self.conns.get_mut(conn) {
            c.path.tcp.rtt_us = rtt_us;
            c.path.tcp.cwnd = cwnd;
        }
    }

    /// Tells the scheduler all it may use of a connection's TCP_INFO (RTT, congestion window,
    /// delivery rate, bytes the kernel holds unsent).
    /// The send budget follows what these reports say the connections carry
    /// (`SessionConfig::send_autotune`).
    pub fn set_path(&mut self, conn: ConnId, info: crate::session::sched::PathInfo) {
        if let Some(c) = self.conns.get_mut(conn) {
            c.path.report(info);
        }
        self.retune_to_paths();
    }

    /// Sets the streams' send budget from what the connections that carry them report
    /// (`send_budget.rs`), and tells the writers it held back if it grew; keeps their longest
    /// RTT for the growth of receive windows (`credit.rs`).
    fn retune_to_paths(&mut self) {
        let carriers = self.conns.iter().filter(|c| c.carries_streams());
        self.core.credit_rtt =
            carriers.filter_map(|c| c.path.tcp.rtt_us).max().map(|us| Duration::from_micros(u64::from(us)));
        let rule = SendBudgetRule::new(&self.core.config);
        if !rule.autotuned() {
            return;
        }
        let carried = self.conns.iter().filter(|c| c.carries_streams()).filter_map(|c| c.path.carry());
        let active = self.core.streams.send_account().active();
        let Some(mut budget) = rule.target(carried, active) else { return };
        // A scheduler that weighs waiting for a fast path against sending on a slow one
        // (`EarliestArrival`, bonding) decides by the stream's backlog: a budget held to the
        // paths' product hides it, and the slow path is seldom worth it (a bonded 4 MiB
        // download over 40 and 10 Mbit/s paths put 7.8-11.7 % on the slow one, against
        // 12.5-15.6 % with the configured budget). Over several paths it gets the configured
        // budget.
        if self.carriers() >= 2 && self.core.paths.scheduler().waits_for_paths() {
            budget = self.core.config.send_budget;
        }
        let account = self.core.streams.send_account();
        let grew = budget > account.budget();
        account.set_budget(budget);
        if grew {
            let events = &mut self.core.events;
            self.core.streams.wake_writers_after_growth(|id| events.push(Event::StreamWritable(id)));
        }
    }

    /// Connections that carry streams now.
    fn carriers(&self) -> usize {
        self.conns.iter().filter(|c| c.carries_streams()).count()
    }

    /// The streams' send budget in use now: `SessionConfig::send_budget`, or less while it
    /// follows the paths (`SessionConfig::send_autotune`).
    pub fn send_budget(&self) -> usize {
        self.core.streams.send_account().budget()
    }

    /// The connection ended (closed or failed).
    pub fn is_connection_finished(&self, conn: ConnId) -> bool {
        self.conns.get(conn).is_none_or(Connection::is_finished)
    }

    /// Why a connection failed, if it did.
    pub fn connection_error(&self, conn: ConnId) -> Option<&Error> {
        self.conns.get(conn).and_then(|c| c.error())
    }

    /// The connection's TLS handshake is complete and it has not finished (it may still be
    /// refused as a join).
    pub fn is_connection_established(&self, conn: ConnId) -> bool {
        self.conns.get(conn).is_some_and(Connection::is_established)
    }

    /// The connection can carry stream data (handshake done, join accepted, not closing, not
    /// failed), suspect of silence or not: a suspect connection is still up (the path manager
    /// must not replace it) but takes no new data until it acknowledges again
    /// ([`Session::is_connection_suspect`]).
    pub fn is_connection_usable(&self, conn: ConnId) -> bool {
        self.conns.get(conn).is_some_and(Connection::is_up)
    }

    /// The connection is suspect of silence: up, but its records went unacknowledged past its
    /// retransmission deadline, so it carries no new data until it acknowledges again
    /// (PROTOCOL.md §5, "Silent paths").
    pub fn is_connection_suspect(&self, conn: ConnId) -> bool {
        self.conns.get(conn).is_some_and(Connection::is_suspect)
    }

    /// Marks `conn` as a backup path (`true`) or a regular one (`false`), here and, with a Path
    /// Priority frame, at the peer (PROTOCOL.md §3): while a regular connection is usable,
    /// neither side sends unsteered stream data on a backup one.
    pub fn set_connection_backup(&mut self, conn: ConnId, backup: bool) -> Result<(), Error> {
        let c = self.conns.get_mut(conn).ok_or_else(|| TransportError::internal(format!("no connection {conn}")))?;
        if c.path.backup != backup {
            c.path.backup = backup;
            self.core.control.push(&Frame::PathPriority { connection_id: conn, backup }, None);
        }
        Ok(())
    }

    /// Whether `conn` is a backup path (set by either side).
    pub fn is_connection_backup(&self, conn: ConnId) -> bool {
        self.conns.get(conn).is_some_and(|c| c.path.backup)
    }

    pub(super) fn path_view(c: &Connection) -> PathView {
        PathView {
            conn: c.id,
            rtt_us: c.path.tcp.rtt_us,
            cwnd: c.path.tcp.cwnd,
            queued: c.tx.len(),
            bytes_sent: c.stats.bytes_sent,
            room: true,
            delivery_rate: c.path.tcp.delivery_rate,
            kernel_unsent: c.path.tcp.kernel_unsent,
            stream_backlog: 0,
        }
    }

    pub(super) fn fail_conn(&mut self, conn: ConnId, error: Error) {
        if let Some(c) = self.conns.get_mut(conn) {
            c.fail(error);
        }
        self.after_connection_change();
    }
}
