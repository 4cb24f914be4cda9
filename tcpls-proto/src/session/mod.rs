//! A TCPLS session: streams multiplexed over one or more TCP connections (sans-IO).
//!
//! The contract follows quinn-proto: the IO layer feeds what its sockets read
//! ([`Session::read_buffer`] + [`Session::handle_read`], or [`Session::handle_data`]) and
//! socket events ([`Session::handle_eof`]), calls [`Session::prepare_transmit`] and writes
//! [`Session::transmit_data`] out, and drains [`Session::poll_event`]. Applications use the
//! stream calls (`open_stream`, `write`, `read`, ...). Nothing here blocks, sleeps or does IO;
//! `now` is passed in where time matters.

mod ack;
mod conn;
mod connections;
mod control;
mod credit;
mod danger;
mod early;
mod events;
mod ext;
mod frames;
mod lifecycle;
mod multipath;
mod observe;
mod packetize;
mod paths;
mod placement;
pub mod sched;
mod stream_api;
mod streams;
mod timers;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ServerConfig};

pub use conn::ConnStats;
pub(crate) use conn::{Connection, Inbound, Loss, RecordSink};
pub(crate) use control::ControlQueue;
pub use early::MAX_EARLY_STREAM_BYTES;
pub use multipath::{Accepted, JoiningConnection, REJOIN_ID_BASE};
pub use observe::{MemoryUse, StreamProgress};

use crate::config::SessionConfig;
use crate::error::{AlertCode, Error, TransportError};
use crate::event::{ConnId, Event};
use crate::tls::{Handshake, HandshakeInfo, ALPN_TCPLS};

/// Which end of the session we are: clients open connections and even-numbered streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Client,
    Server,
}

/// Most bytes one socket read asks for, once a connection is busy (large reads: fewer
/// syscalls). Reads start at [`MIN_READ_CHUNK`] and grow while they fill the buffer.
pub const READ_CHUNK: usize = 256 * 1024;

/// Smallest read size, and the one an idle connection returns to: what it keeps allocated.
pub const MIN_READ_CHUNK: usize = 16 * 1024;

/// Read size before a connection's handshake completes (a handshake flight fits easily).
pub const HANDSHAKE_READ_CHUNK: usize = 16 * 1024;

/// Queued control frames beyond which we stop reading (see [`Session::read_buffer`]).
const MAX_QUEUED_CONTROL: usize = 4096;

/// Everything of a session except its connections, so frame handling can borrow both. Each
/// part owns its state (private fields) in its own file; the methods of `Core` in the other
/// files coordinate them.
pub(crate) struct Core {
    pub(crate) side: Side,
    pub(crate) config: SessionConfig,
    /// The session's own life: established, closing, orphaned, closed (`lifecycle.rs`).
    pub(crate) life: lifecycle::Lifecycle,
    /// The one clock (`timers.rs`).
    pub(crate) clock: timers::Clock,
    /// Streams, their IDs, ready queue and budgets (`streams.rs`).
    pub(crate) streams: streams::Streams,
    /// Tokens, peer addresses, join state and the scheduler (`paths.rs`).
    pub(crate) paths: paths::Paths,
    /// Control frames waiting for a record (`control.rs`).
    pub(crate) control: ControlQueue,
    /// Events waiting for the application (`events.rs`).
    pub(crate) events: events::Events,
    /// Receive-side acknowledgement state per connection (`ack.rs`).
    pub(crate) acks: ack::Acks,
    /// Send-rate caps per connection (`ext.rs`).
    pub(crate) ext: ext::ExtState,
    /// 0-RTT state (`early.rs`).
    pub(crate) early: early::EarlyState,
    pub(crate) stats: SessionStats,
    /// Frame consequences that need the connection table, run after each batch of records
    /// (`receive.rs`).
    pub(crate) actions: Vec<frames::ConnAction>,
    /// Reused buffer for the trailing frames of the record being built (`packetize.rs`).
    pub(crate) scratch: Vec<u8>,
}

/// Session-wide counters.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SessionStats {
    pub stream_bytes_sent: u64,
    pub stream_bytes_received: u64,
    pub streams_opened: u64,
    pub streams_accepted: u64,
    pub streams_refused: u64,
    /// Connections that failed with unacknowledged records, which were re-sent on others.
    pub failovers: u64,
    /// Stream bytes decrypted straight into their stream's receive buffer (zero-copy path).
    pub zero_copy_bytes: u64,
    /// Stream bytes decrypted elsewhere and then copied into their stream's receive buffer.
    pub copied_bytes: u64,
    /// Sent records released unacknowledged because the peer let more than
    /// `SessionConfig::max_unacked_records` (or `max_unacked_control` bytes) pile up: their
    /// failover guarantee is lost.
    pub unacked_released: u64,
    /// Records of failed connections whose content was queued again for the others (failover).
    pub records_resent: u64,
    /// Stream bytes of those records (sent again, re-encrypted, on another connection).
    pub stream_bytes_resent: u64,
}

pub struct Session {
    pub(crate) conns: connections::Connections,
    pub(crate) core: Core,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("side", &self.core.side)
            .field("conns", &self.conns.len())
            .field("streams", &self.core.streams.len())
            .field("fallback", &self.core.life.is_fallback())
            .finish_non_exhaustive()
    }
}

/// Adds `tcpls/1` first to the ALPN list and enables the secret extraction we rely on.
pub fn tcpls_client_config(config: &ClientConfig) -> ClientConfig {
    let mut config = config.clone();
    config.alpn_protocols.retain(|p| p != ALPN_TCPLS);
    config.alpn_protocols.insert(0, ALPN_TCPLS.to_vec());
    config.enable_secret_extraction = true;
    config
}

/// Same for a server: `tcpls/1` is preferred; the other listed protocols (and clients that offer
/// no ALPN) are served as plain TLS. A server that accepts early data (`max_early_data_size` > 0)
/// accepts at least one record of it ([`crate::tls::MAX_EARLY_DATA`], what TCPLS clients
/// offer) and answers at half-RTT (PROTOCOL.md §1.7).
pub fn tcpls_server_config(config: &ServerConfig) -> ServerConfig {
    let mut config = config.clone();
    config.alpn_protocols.retain(|p| p != ALPN_TCPLS);
    config.alpn_protocols.insert(0, ALPN_TCPLS.to_vec());
    config.enable_secret_extraction = true;
    if config.max_early_data_size > 0 {
        config.max_early_data_size = config.max_early_data_size.max(crate::tls::MAX_EARLY_DATA as u32);
        config.send_half_rtt_data = true;
    }
    config
}

impl Session {
    /// A client session whose initial connection (ID 0) starts its handshake now. `config`
    /// must come from [`tcpls_client_config`] (the tokio layer does this for you).
    pub fn client(
        config: Arc<ClientConfig>,
        server_name: ServerName<'static>,
        settings: SessionConfig,
    ) -> Result<Self, Error> {
        let mut session = Self::new(Side::Client, settings);
        session.core.paths.set_client_tls(config.clone(), server_name.clone());
        session.conns.add(Connection::new(0, Handshake::client(config, server_name)?));
        session.drive_handshakes();
        Ok(session)
    }

    /// A server session for one accepted TCP connection (ID 0).
    pub fn server(config: Arc<ServerConfig>, settings: SessionConfig) -> Result<Self, Error> {
        let mut session = Self::new(Side::Server, settings);
        session.conns.add(Connection::new(0, Handshake::server(config)?));
        Ok(session)
    }

    fn new(side: Side, config: SessionConfig) -> Self {
        Self {
            conns: Default::default(),
            core: Core {
                side,
                streams: streams::Streams::new(side, &config),
                config,
                life: Default::default(),
                clock: Default::default(),
                paths: Default::default(),
                control: Default::default(),
                events: Default::default(),
                acks: Default::default(),
                ext: Default::default(),
                early: Default::default(),
                stats: SessionStats::default(),
                actions: Vec::new(),
                scratch: Vec::with_capacity(crate::record::MAX_PLAINTEXT + 64),
            },
        }
    }

    /// The settings this session was created with.
    pub fn settings(&self) -> &SessionConfig {
        &self.core.config
    }

    pub fn side(&self) -> Side {
        self.core.side
    }

    /// The handshake completed and streams can flow.
    pub fn is_established(&self) -> bool {
        self.core.life.is_established()
    }

    /// The peer does not speak TCPLS: one plain TLS byte stream (stream 0), PROTOCOL.md §1.3.
    pub fn is_fallback(&self) -> bool {
        self.core.life.is_fallback()
    }

    /// Every connection is finished (clean close or failure).
    pub fn is_closed(&self) -> bool {
        self.core.life.is_closed()
    }

    /// Why the session failed, if it did.
    pub fn error(&self) -> Option<&Error> {
        self.core.life.error()
    }

    /// The initial connection's handshake facts (ALPN, cipher suite, resumption).
    pub fn handshake_info(&self) -> Option<&HandshakeInfo> {
        self.conns.initial().and_then(|c| c.info.as_ref())
    }

    pub fn stats(&self) -> SessionStats {
        self.core.stats
    }

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

    /// Join tokens received from the server (client side) or issued (server side).
    pub fn tokens(&self) -> &[(u32, [u8; 32])] {
        self.core.paths.tokens()
    }

    /// Addresses the peer advertised with New Address.
    pub fn peer_addresses(&self) -> &[(u8, SocketAddr)] {
        self.core.paths.peer_addresses()
    }

    /// Tells the core the socket addresses of a connection (for Address Echo and reports).
    pub fn set_addresses(&mut self, conn: ConnId, local: Option<SocketAddr>, remote: Option<SocketAddr>) {
        if let Some(c) = self.conns.get_mut(conn) {
            c.local = local;
            c.remote = remote;
        }
    }

    pub fn addresses(&self, conn: ConnId) -> (Option<SocketAddr>, Option<SocketAddr>) {
        self.conns.get(conn).map(|c| (c.local, c.remote)).unwrap_or_default()
    }

    // ------------------------------------------------------------------ IO layer

    /// Free space to read socket bytes of `conn` into; report how many with [`Session::handle_read`].
    /// Empty when the connection should not be read now (finished, or backpressure).
    pub fn read_buffer(&mut self, conn: ConnId) -> &mut [u8] {
        // Stop reading while answers to the peer pile up (it sends probes or KeyUpdate requests
        // but does not read): TCP then pushes back on it instead of our memory growing.
        let replies_backed_up = self.core.control.entries() > MAX_QUEUED_CONTROL || self.core.events.backed_up();
        let backpressure = replies_backed_up || (self.core.life.is_fallback() && self.core.fallback_stream_full());
        let tx_cap = 2 * self.core.config.transmit_high_water;
        match self.conns.get_mut(conn) {
            Some(c) if !c.is_finished() && !c.close_received() && !backpressure && c.tx.len() < tx_cap => {
                // Small until the handshake is done: a peer that only connects costs little.
                let chunk = if c.is_established() { c.read_chunk } else { c.read_chunk.min(HANDSHAKE_READ_CHUNK) };
                let spare = c.rx.spare(chunk);
                c.last_spare = spare.len();
                spare
            }
            _ => &mut [],
        }
    }

    /// `n` bytes were read into [`Session::read_buffer`].
    pub fn handle_read(&mut self, conn: ConnId, n: usize, now: Instant) {
        if let Some(c) = self.conns.get_mut(conn) {
            c.rx.commit(n);
            c.stats.bytes_received += n as u64;
            c.adapt_read_chunk(n);
        }
        self.process(conn, now);
        if let Some(c) = self.conns.get_mut(conn) {
            c.release_idle_rx();
        }
    }

    /// Copies received bytes in (tests, or IO layers without their own buffer).
    pub fn handle_data(&mut self, conn: ConnId, data: &[u8], now: Instant) {
        if let Some(c) = self.conns.get_mut(conn) {
            c.rx.extend(data);
            c.stats.bytes_received += data.len() as u64;
        }
        self.process(conn, now);
    }

    /// The socket returned EOF: without a close_notify before it, the connection is lost.
    pub fn handle_eof(&mut self, conn: ConnId, now: Instant) {
        self.core.clock.advance(now);
        self.lose_connection(conn, Loss::Eof);
    }

    /// The socket failed (reset, timeout, ...).
    pub fn handle_io_error(&mut self, conn: ConnId, reason: &str, now: Instant) {
        self.core.clock.advance(now);
        self.lose_connection(conn, Loss::Io(reason));
    }

    /// Connection `conn` is lost (its socket ended or failed, or we gave up on it): the one
    /// way a connection is marked lost. What it carried unacknowledged fails over.
    pub(crate) fn lose_connection(&mut self, conn: ConnId, loss: Loss<'_>) {
        if let Some(c) = self.conns.get_mut(conn) {
            c.lose(loss);
        }
        self.after_connection_change();
    }

    /// Sealed bytes to write on `conn`'s socket; call [`Session::transmit_advance`] with how many
    /// were written.
    pub fn transmit_data(&self, conn: ConnId) -> &[u8] {
        match self.conns.get(conn) {
            Some(c) if !c.is_gone() => c.tx.data(),
            _ => &[],
        }
    }

    pub fn transmit_advance(&mut self, conn: ConnId, n: usize) {
        if let Some(c) = self.conns.get_mut(conn) {
            c.tx.advance(n);
            c.stats.bytes_sent += n as u64;
            if c.tx.is_empty() && c.is_finished() {
                c.tx.shrink();
                c.rx.shrink();
            }
        }
    }

    /// The connection is over and its last bytes are written: close the socket.
    pub fn should_close_socket(&self, conn: ConnId) -> bool {
        self.conns.get(conn).is_none_or(|c| c.is_finished() && (c.is_gone() || c.tx.is_empty()))
    }

    /// We sent close_notify and everything before it is written: the IO layer may shut down its
    /// write half (TCP FIN), as TLS over TCP does.
    pub fn should_shutdown_write(&self, conn: ConnId) -> bool {
        self.conns.get(conn).is_some_and(|c| c.close_sent() && c.tx.is_empty())
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.core.events.poll()
    }

    /// Runs the handshake or record layer of `conn` over what it has buffered.
    fn process(&mut self, conn: ConnId, now: Instant) {
        self.core.clock.advance(now);
        self.drive_handshakes();
        let Some(c) = self.conns.get_mut(conn) else {
            return;
        };
        let core = &mut self.core;
        let was_awaiting_join_ack = c.awaiting_join_ack();
        let opened_before = c.records_opened;
        let result = c.read_records(core);
        if c.records_opened != opened_before {
            // The connection is alive: whatever keepalive Ping was pending is answered.
            c.last_rx = Some(now);
            c.ping_sent = None;
        }
        if was_awaiting_join_ack && !c.awaiting_join_ack() {
            // The server answered on a joining connection: it is part of the session now.
            core.events.push(Event::ConnectionEstablished { conn: c.id });
            core.life.rejoined();
        }
        if let Err(e) = result {
            c.fail(e);
        }
        if core.life.is_fallback() && c.close_received() {
            core.on_fallback_peer_closed();
        }
        if self.peer_closed() && self.core.life.report_peer_close() {
            self.core.events.push(Event::PeerClosed);
        }
        self.run_actions();
        self.after_connection_change();
    }

    /// Carries out what received frames asked of the connection table.
    fn run_actions(&mut self) {
        for action in std::mem::take(&mut self.core.actions) {
            match action {
                frames::ConnAction::Reset(id) => {
                    if let Some(c) = self.conns.get_mut(id) {
                        c.lose(Loss::ReportedByPeer);
                    }
                }
                frames::ConnAction::EchoRtt { conn, timestamp_us } => {
                    if self.conns.get(conn).is_some_and(Connection::is_usable) {
                        let echo = crate::frame::Frame::RttEcho { connection_id: conn, timestamp_us };
                        self.core.control.push_answer(&echo, conn, Some(conn));
                    }
                }
                frames::ConnAction::Ack { conn, highest } => {
                    if let Some(c) = self.conns.get_mut(conn) {
                        self.core.on_acked(c, highest);
                    }
                }
                frames::ConnAction::SetBackup { conn, backup } => {
                    // A connection we do not have (any more) is ignored (PROTOCOL.md §3).
                    if let Some(c) = self.conns.get_mut(conn) {
                        c.backup = backup;
                    }
                }
                frames::ConnAction::Steer { stream, conn } => {
                    // Honoured when that connection can carry data; otherwise the stream stays
                    // where it is (the request may be stale, e.g. the connection just failed).
                    if self.conns.get(conn).is_some_and(Connection::carries_streams) {
                        let _ = self.steer_stream(stream, Some(conn));
                    }
                }
                frames::ConnAction::EchoAddress { on, about } => {
                    if let Some(addr) = self.conns.get(about).and_then(|c| c.remote) {
                        let echo = crate::frame::Frame::AddressEcho { connection_id: about, addr };
                        self.core.control.push_answer(&echo, about, Some(on));
                    }
                }
            }
        }
    }

    pub(crate) fn drive_handshakes(&mut self) {
        for c in &mut self.conns {
            let result = c.drive_handshake();
            // Server: accepted early data goes to the session before the handshake completes.
            if let Err(e) = self.core.deliver_early_data(c) {
                c.fail(e);
                continue;
            }
            match result {
                Ok(None) => {}
                Ok(Some(info)) => {
                    c.last_rx = self.core.clock.now();
                    if !self.core.life.is_established() {
                        self.core.settle_early_data(info.early_data_accepted);
                        self.core.on_established(c.id, &info, c.is_tcpls());
                    } else if !c.is_tcpls() {
                        // A joining connection must speak TCPLS like the session's first one.
                        c.fail(
                            TransportError::new(
                                AlertCode::NoApplicationProtocol,
                                "joined connection did not negotiate tcpls/1",
                            )
                            .into(),
                        );
                    } else if !c.awaiting_join_ack() {
                        self.core.events.push(Event::ConnectionEstablished { conn: c.id });
                    }
                }
                Err(e) => c.fail(e),
            }
        }
    }

    /// Reports finished connections and ends the session when none is left.
    fn after_connection_change(&mut self) {
        let mut last_errors = Vec::new();
        let mut finished = Vec::new();
        for c in &mut self.conns {
            if c.is_finished() && !c.reported {
                c.reported = true;
                let error = c.error.clone();
                last_errors.push(error.clone());
                finished.push(c.id);
                self.core.control.forget_conn(c.id);
                self.core.events.push(Event::ConnectionClosed { conn: c.id, error });
            }
        }
        for id in finished {
            self.on_connection_finished(id);
        }
        let all_finished = self.conns.all_finished();
        if !self.core.life.is_closed() && self.core.life.orphaned_since().is_some() && all_finished {
            // Still waiting for a rejoin: only a join, the deadline or `close` ends this.
            return;
        }
        if !self.core.life.is_closed() && all_finished {
            // The last connection was lost (not closed, not a protocol error): with failover
            // the session waits for the client to rejoin with a spare token (break-before-make).
            let lost =
                !last_errors.is_empty() && last_errors.iter().all(|e| matches!(e, Some(Error::ConnectionLost(_))));
            // (The session has a time: it is established, so input with a time came in.)
            let now = self.core.clock.now();
            if let (true, Some(now)) = (lost && self.can_wait_for_rejoin(), now) {
                if self.core.life.orphaned_since().is_none() {
                    self.core.life.orphan(now, last_errors.into_iter().flatten().next());
                    self.core.events.push(Event::AllConnectionsLost);
                }
                self.replenish_tokens(None);
                return;
            }
            // The session fails only when its last connections fail; earlier losses were
            // events, and the others carried on. A clean close among the last ones is clean.
            if self.core.life.error().is_none() && last_errors.iter().all(Option::is_some) {
                self.core.life.set_error(last_errors.into_iter().flatten().next());
            }
            self.core.on_closed();
        } else {
            // A lost connection frees room in the budget: a fresh token lets the client rejoin.
            self.replenish_tokens(None);
            self.conns.prune_finished();
        }
    }

    /// Graceful close: queued stream data is sent, then close_notify on every connection.
    pub fn close(&mut self) {
        if let Some(first_loss) = self.core.life.take_orphan() {
            // No connection to send anything on: the session ends here.
            self.core.life.set_error(first_loss);
            self.core.on_closed();
        } else {
            self.core.life.begin_closing();
        }
    }

    /// Waiting for a rejoin after losing every connection makes sense only for an established
    /// TCPLS session that keeps what it sent, is not closing, and whose client can still join.
    fn can_wait_for_rejoin(&self) -> bool {
        let core = &self.core;
        // A client without a token can still rejoin with the initial connection's secret.
        let client_can_join =
            core.side == Side::Server || !core.paths.tokens().is_empty() || self.rejoin_credentials().is_some();
        core.life.is_established()
            && !core.life.is_fallback()
            && core.config.failover
            && !core.config.rejoin_timeout.is_zero()
            && !core.life.is_closing()
            && client_can_join
    }

    /// Every connection was lost and the session waits for a rejoin (see
    /// [`SessionConfig::rejoin_timeout`]); the client's IO layer should add a connection.
    pub fn is_orphaned(&self) -> bool {
        self.core.life.orphaned_since().is_some()
    }

    /// Changes how long this session waits for a rejoin once every connection is lost
    /// ([`SessionConfig::rejoin_timeout`]), e.g. a client's path manager applying its outage
    /// tolerance. Zero: the session ends with its last connection.
    pub fn set_rejoin_timeout(&mut self, timeout: std::time::Duration) {
        self.core.config.rejoin_timeout = timeout;
    }

    /// Since when every connection has been lost (the session waits for a rejoin), if it has.
    pub fn orphaned_since(&self) -> Option<Instant> {
        self.core.life.orphaned_since()
    }

    /// Client: what the last rejoin attempts said (e.g. per path: "wifi: network unreachable"),
    /// quoted in the session's error if no rejoin comes in time.
    pub fn set_rejoin_note(&mut self, note: String) {
        self.core.life.set_rejoin_note(note);
    }

    /// Client: ends a session that waits for a rejoin at once, with `error` (e.g. the server
    /// refused the rejoin: it no longer knows the session). Nothing happens otherwise.
    pub fn end_orphaned(&mut self, error: Error) {
        if self.core.life.take_orphan().is_some() {
            self.core.life.take_rejoin_note();
            self.core.life.set_error(Some(error));
            self.core.on_closed();
        }
    }

    /// Abort: close_notify at once on every connection, queued data is dropped, and the
    /// session ends with [`Error::SessionClosed`].
    pub fn abort(&mut self, now: Instant) {
        self.core.clock.advance(now);
        if self.core.life.take_orphan().is_some() {
            // No connection left to abort and no rejoin wanted any more: it ends here (it used
            // to wait for the rejoin deadline).
            self.core.life.fail_with(Error::SessionClosed);
            self.core.on_closed();
            return;
        }
        for c in &mut self.conns {
            let _ = c.send_close_notify();
            c.fail(Error::SessionClosed);
        }
        self.after_connection_change();
    }
}
