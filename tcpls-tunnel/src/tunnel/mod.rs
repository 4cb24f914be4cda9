//! The TCPLS tunnel (PROTOCOL.md §8.1): application TCP connections carried over one TCPLS
//! session, one stream each, from a local proxy ([`TunnelClient`]) to a concentrator
//! ([`Concentrator`]) that opens the connections to their destinations.
//!
//! Every stream starts with TLV messages ([`tlv`]): the client's TCP Connect (or Connect by
//! Name) and End, the concentrator's Connect OK or Error and End; then bytes are relayed both
//! ways ([`relay`]). A FIN becomes the stream's FIN, a TCP RST a Stream Reset with code 0x2 and
//! back. The session can have several TCP connections (`paths`): streams are spread over them
//! round-robin and fail over to the others when one dies.
//!
//! Head-of-line blocking between tunneled connections is avoided at two levels: per-stream
//! flow control in the session (a slow destination only stops its own stream) and late
//! multiplexing (a small `transmit_high_water` plus TCP_NOTSENT_LOWAT keep the bytes committed
//! to a TCP connection few, so a small response is not queued behind a bulk transfer).
//!
//! ```no_run
//! # async fn demo(server_tls: rustls::ServerConfig, client_tls: rustls::ClientConfig) -> std::io::Result<()> {
//! use std::sync::Arc;
//! use tcpls_tunnel::tunnel::{Concentrator, Frontend, TunnelClient, TunnelConfig};
//! let conc = Concentrator::bind(&["127.0.0.1:4443".parse().unwrap()], Arc::new(server_tls), TunnelConfig::default()).await?;
//! tokio::spawn(conc.run(|_summary| {}));
//! let name = tcpls::server_name_for("localhost")?;
//! let client = TunnelClient::connect("127.0.0.1:4443".parse().unwrap(), name, Arc::new(client_tls), &[], TunnelConfig::default()).await?;
//! let socks = tokio::net::TcpListener::bind("127.0.0.1:1080").await?;
//! client.serve(socks, Frontend::Socks).await
//! # }
//! ```

pub mod bond;
mod client;
mod datagram;
mod dial;
mod farm;
mod order;
pub mod rate;
pub mod reconnect;
pub mod redundant;
pub mod relay;
mod reverse;
mod server;
mod stats;
pub mod tlv;
pub mod udp;

use std::time::Duration;

/// How long a session may be without any usable connection (rejoining by itself) before the
/// client opens a new one alongside (`TunnelClient::keep_connected`).
pub const ORPHAN_GRACE: Duration = Duration::from_secs(1);

pub use crate::clients::{ClientPolicy, ClientRule};
pub use crate::frontend::Frontend;
pub use crate::frontend::Target;
pub use crate::policy::DestPolicy;
pub use client::{OpenError, TunnelClient};
pub use reconnect::Backoff;
pub use server::{ClientStats, Concentrator, ConcentratorControl, SessionHook, SessionSummary};
pub use stats::{Stats, StatsSnapshot};

/// Tunables of both ends.
#[derive(Debug, Clone)]
pub struct TunnelConfig {
    /// Settings of the TCPLS session. The default is late multiplexing: `transmit_high_water`
    /// 64 KiB and TCP_NOTSENT_LOWAT (`notsent_lowat`) 64 KiB on every connection; and a
    /// per-stream receive window of 2 MiB, within the session's `receive_budget` ([`RECEIVE_BUDGET`]).
    pub session: tcpls::SessionConfig,
    /// Concentrator: timeout of the connection to a destination (name resolution included).
    pub connect_timeout: Duration,
    /// Time allowed for a stream's TLVs (concentrator) or the answer to them (client) and for
    /// a SOCKS5 request.
    pub handshake_timeout: Duration,
    /// Concentrator: which destinations it connects to, checked on every address a name
    /// resolves to (default: [`DestPolicy::safe`], no loopback, link-local, unspecified,
    /// multicast or broadcast destination).
    pub dest_policy: DestPolicy,
    /// Concentrator: sessions served at once; a session beyond it is closed right after its
    /// handshake (counted in [`StatsSnapshot::sessions_refused`]).
    pub max_sessions: usize,
    /// Concentrator: tunneled connections (peer-opened streams) per session at once; the
    /// session refuses more with Stream Reset 0x1 (`SessionConfig::max_concurrent_streams`).
    /// The session's `receive_budget` keeps room for them all as long as it is at least twice
    /// what they are charged at their initial window (66 KiB each: [`RECEIVE_BUDGET`] for the
    /// default 1024); with a smaller budget it caps them too (64 MiB admits about 990, fewer
    /// while streams hold large windows).
    pub max_streams_per_session: usize,
    /// Concentrator: name lookups in progress at once over all sessions (each holds a thread
    /// of the blocking pool until the resolver answers); more wait, within `connect_timeout`.
    pub max_lookups: usize,
    /// Client: how long a new connection waits for the session while it is being re-established
    /// ([`TunnelClient::keep_connected`]); then it is refused (SOCKS5 reply 0x01, HTTP 503, a
    /// forwarded connection reset).
    pub reconnect_wait: Duration,
    /// Both ends: a UDP flow with no datagram either way for this long ends.
    pub udp_idle_timeout: Duration,
    /// Client: UDP flows at once per `--forward-udp` listener or SOCKS5 UDP association; a
    /// datagram that would open one more is dropped.
    pub max_udp_flows: usize,
    /// Concentrator: the addresses clients may ask it to listen on (reverse forwards, Reverse
    /// Bind); empty (default): none.
    pub reverse_allowed: Vec<std::net::SocketAddr>,
    /// Client: the local side of the session's first connection (a local address or an
    /// interface); default: the kernel's choice.
    pub bind: tcpls::PathOptions,
    /// Client: keep the first connection and the extra paths up with a path manager of this
    /// policy (re-joined when lost, interface events followed, outages of every path survived
    /// for [`tcpls::DEFAULT_OUTAGE_TOLERANCE`]); None (default): each path is joined once.
    pub path_manager: Option<tcpls::PathPolicy>,
    /// Concentrator: per-client destinations, rate and sessions, by client certificate name
    /// ([`crate::clients`]); default: none (every client gets the server-wide policy).
    pub client_policy: ClientPolicy,
    /// Client: bond every tunneled TCP connection, i.e. spread its stream over every usable
    /// path in both directions ([`bond`]) instead of steering it to one; default false
    /// (per-forward: [`TunnelClient::bonded`]).
    pub bond: bool,
    /// Client: UDP flows (`--forward-udp`, SOCKS5 UDP ASSOCIATE) are redundant: each datagram
    /// goes on every usable path and the first copy to arrive is delivered ([`redundant`]);
    /// default false (per-forward: [`TunnelClient::with_redundant`]).
    pub redundant: bool,
    /// Client: concentrators tried after the first one, in order, when opening or re-opening
    /// the session (a farm's nodes, standbys); default: none.
    pub other_concentrators: Vec<std::net::SocketAddr>,
    /// Client: the session's further connections (paths, rejoins) go to the address the
    /// concentrator advertised (New Address) rather than the one dialed: for a farm behind a
    /// load balancer, whose address may lead to another node; default: false.
    pub join_advertised: bool,
    /// Concentrator: serve per core ([`tcpls::ServerBuilder`]: a listener and a single-threaded
    /// runtime on each of this many cores, 0: one per CPU; every session kept on its core), or
    /// None (default): listeners on the runtime that calls [`Concentrator::run`].
    pub server_cores: Option<usize>,
}

/// Default of [`TunnelConfig::max_sessions`].
pub const MAX_SESSIONS: usize = 256;
/// Default of [`TunnelConfig::max_streams_per_session`].
pub const MAX_STREAMS_PER_SESSION: usize = 1024;
/// Default of [`TunnelConfig::max_lookups`].
pub const MAX_LOOKUPS: usize = 32;

/// Sealed bytes kept ready per TCP connection by the tunnel's sessions.
pub const TRANSMIT_HIGH_WATER: usize = 64 << 10;
/// Receive window of each tunneled connection's stream (enough for ~330 Mbit/s per connection
/// at 50 ms RTT; the session carries many).
pub const STREAM_RECEIVE_WINDOW: u64 = 2 << 20;
/// Receive window of a bonded connection's stream (`TunnelConfig::bond`): the bytes that the
/// fast path delivers while the slow path's are still on their way wait in it, so it must hold
/// the fast path's rate times the paths' delay difference, queues included (40 Mbit/s × 150 ms
/// ≈ 750 KB), on top of a path's bandwidth-delay product. Fixed (`receive_autotune` off): a
/// window that starts small and grows with the reader let the scheduler see too little of the
/// stream to be worth the slow path (a bonded 4 MiB download put 2.7 % on the 10 Mbit/s path).
pub const BOND_RECEIVE_WINDOW: u64 = 8 << 20;
/// Default TCP_NOTSENT_LOWAT of the tunnel's TCP connections.
pub const NOTSENT_LOWAT: u32 = 64 << 10;
/// Receive budget of the tunnel's sessions (`SessionConfig::receive_budget`): sized so that
/// [`MAX_STREAMS_PER_SESSION`] tunneled connections at their initial 64 KiB window (plus 2 KiB
/// of state) take at most half of it. The session then always keeps room for the connections
/// still to come, so a concentrator refuses a connection only beyond the limit, however large
/// the busy connections' windows grew (the library default of 64 MiB holds ~990 idle streams).
/// The most a client's session can make the concentrator buffer.
pub const RECEIVE_BUDGET: u64 = 160 << 20;

impl Default for TunnelConfig {
    fn default() -> Self {
        TunnelConfig {
            session: tcpls::SessionConfig {
                transmit_high_water: TRANSMIT_HIGH_WATER,
                stream_receive_window: STREAM_RECEIVE_WINDOW,
                receive_budget: RECEIVE_BUDGET,
                notsent_lowat: Some(NOTSENT_LOWAT),
                ..Default::default()
            },
            connect_timeout: Duration::from_secs(10),
            handshake_timeout: Duration::from_secs(10),
            dest_policy: DestPolicy::safe(),
            max_sessions: MAX_SESSIONS,
            max_streams_per_session: MAX_STREAMS_PER_SESSION,
            max_lookups: MAX_LOOKUPS,
            reconnect_wait: Duration::from_secs(10),
            udp_idle_timeout: Duration::from_secs(60),
            max_udp_flows: 256,
            reverse_allowed: Vec::new(),
            bind: tcpls::PathOptions::new(),
            path_manager: None,
            client_policy: ClientPolicy::default(),
            bond: false,
            redundant: false,
            other_concentrators: Vec::new(),
            join_advertised: false,
            server_cores: None,
        }
    }
}

/// Default TCPLS port of the concentrator (CLI.md).
pub const DEFAULT_PORT: u16 = 4443;
