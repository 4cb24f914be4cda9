//! A TCPLS session: streams multiplexed over one or more TCP connections (sans-IO).
//!
//! The contract follows quinn-proto: the IO layer feeds what its sockets read
//! ([`Session::read_buffer`] + [`Session::handle_read`], or [`Session::handle_data`]) and
//! socket events ([`Session::handle_eof`]), calls [`Session::prepare_transmit`] and writes
//! [`Session::transmit_data`] out, and drains [`Session::poll_event`]. Applications use the
//! stream calls (`open_stream`, `write`, `read`, ...). Nothing here blocks, sleeps or does IO;
//! `now` is passed in where time matters.

mod ack;
mod ack_state;
mod clock;
mod conn;
mod conn_action;
mod connection_calls;
mod connections;
mod control;
mod credit;
mod danger;
mod early;
mod early_state;
mod events;
mod extensions;
mod frames;
mod high_water;
mod joining;
mod life;
mod lifecycle;
mod loss;
mod multipath;
mod observe;
mod packetize;
mod paths;
mod placement;
mod rate_caps;
mod receive;
pub mod sched;
mod send_budget;
mod side;
mod snapshots;
mod stream_api;
mod streams;
mod timers;

use std::net::SocketAddr;
use std::sync::Arc;

use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ServerConfig};

pub use conn::{ConnStats, MIN_READ_CHUNK, READ_CHUNK};
use conn::{Connection, Inbound, RecordSink};
use control::ControlQueue;
pub use early_state::MAX_EARLY_STREAM_BYTES;
pub use high_water::{MULTIPATH_HIGH_WATER, MULTIPATH_QUEUE_TIME};
pub use joining::{Accepted, JoiningConnection, REJOIN_ID_BASE, STEER_ANY};
pub use send_budget::SEND_BUDGET_FLOOR;
pub use side::Side;
pub use snapshots::{MemoryUse, StreamProgress};

use crate::config::SessionConfig;
use crate::error::Error;
use crate::tls::{Handshake, HandshakeInfo, ALPN_TCPLS};

/// Queued control frames beyond which we stop reading (see [`Session::read_buffer`]).
const MAX_QUEUED_CONTROL: usize = 4096;

/// Everything of a session except its connections, so frame handling can borrow both. Each
/// part owns its state (private fields) in its own file; the methods of `Core` in the other
/// files coordinate them.
struct Core {
    side: Side,
    config: SessionConfig,
    /// The session's own life: established, closing, orphaned, closed (`lifecycle.rs`).
    life: life::Lifecycle,
    /// The one clock (`timers.rs`).
    clock: clock::Clock,
    /// Streams, their IDs, ready queue and budgets (`streams.rs`).
    streams: streams::Streams,
    /// Tokens, peer addresses, join state and the scheduler (`paths.rs`).
    paths: paths::Paths,
    /// Control frames waiting for a record (`control.rs`).
    control: ControlQueue,
    /// Events waiting for the application (`events.rs`).
    events: events::Events,
    /// Receive-side acknowledgement state per connection (`ack.rs`).
    acks: ack_state::Acks,
    /// Send-rate caps per connection (`ext.rs`).
    ext: rate_caps::ExtState,
    /// 0-RTT state (`early.rs`).
    early: early_state::EarlyState,
    stats: SessionStats,
    /// The peer has acknowledged a record: loss detection may count on its ACKs (`loss.rs`).
    peer_acknowledges: bool,
    /// The longest RTT of the connections that carry streams, as the IO layer reports it
    /// (`Session::set_path`): a reader that takes half its receive window within two of these
    /// gets a larger one (`credit.rs`).
    credit_rtt: Option<std::time::Duration>,
    /// Frame consequences that need the connection table, run after each batch of records
    /// (`receive.rs`).
    actions: Vec<conn_action::ConnAction>,
    /// Reused buffer for the trailing frames of the record being built (`packetize.rs`):
    /// empty until the first record, grown to what records need (usually a few dozen bytes,
    /// a record's worth where a send ring wraps), freed by `release_idle_memory`.
    scratch: Vec<u8>,
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
    /// Connections that ended with an error (RST, EOF without close_notify, a silent path
    /// given up, a keepalive left unanswered, ...), not by a clean close.
    pub connections_lost: u64,
    /// Times a connection went silent past its retransmission deadline while another could
    /// carry its records (loss detection, PROTOCOL.md §5): it became *suspect*, its
    /// unacknowledged records were re-sent elsewhere (counted in `records_resent`).
    pub paths_suspected: u64,
    /// Suspect connections that acknowledged again and carry data once more (the path came
    /// back, or the suspicion was spurious: its records had only been slow).
    pub paths_recovered: u64,
    /// Stream bytes received that were already there: copies re-sent after a failover or a
    /// suspicion, dropped by offset.
    pub duplicate_bytes_received: u64,
}

pub struct Session {
    conns: connections::Connections,
    core: Core,
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
                peer_acknowledges: false,
                credit_rtt: None,
                actions: Vec::new(),
                scratch: Vec::new(),
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

    /// The session is closing (`close` was called, or the peer closed and our streams are
    /// done) or closed: no new connection should join it.
    pub fn is_closing(&self) -> bool {
        self.core.life.is_closing() || self.core.life.is_closed()
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

    /// Join tokens received from the server (client side) or issued (server side).
    pub fn tokens(&self) -> &[(u32, [u8; 32])] {
        self.core.paths.tokens()
    }

    /// Addresses the peer advertised with New Address.
    pub fn peer_addresses(&self) -> &[(u8, SocketAddr)] {
        self.core.paths.peer_addresses()
    }

    // ------------------------------------------------------------------ IO layer
}
