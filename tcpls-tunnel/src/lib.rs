//! Multiplexing TCP proxies: TM3 speaking the original TM3 pipe protocol (CSCI-P 538,
//! project 3) over plain TCP pipes, and the TCPLS tunnel ([`tunnel`], PROTOCOL.md §8.1) that
//! carries each connection on a stream of one TCPLS session.
//!
//! A local proxy ([`LocalProxy`]) accepts application TCP connections (SOCKS5, fixed forwards or
//! transparent interception) and multiplexes them over N long-lived TCP *pipes* to a remote proxy
//! ([`RemoteProxy`]), which opens the connections to their destinations. See `README.md` for the
//! protocol details and the bounds.
//!
//! ```no_run
//! # async fn demo() -> std::io::Result<()> {
//! use tcpls_tunnel::{Config, Frontend, LocalProxy, RemoteProxy};
//! let rp = RemoteProxy::bind("127.0.0.1:6000".parse().unwrap(), 4, Config::default()).await?;
//! tokio::spawn(rp.run());
//! let lp = LocalProxy::connect("127.0.0.1:6000".parse().unwrap(), 4, Config::default()).await?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:1080").await?;
//! lp.serve(listener, Frontend::Socks).await
//! # }
//! ```

pub mod cli;
pub mod clients;
pub mod frontend;
pub mod http_proxy;
pub mod policy;
pub mod tm3;
pub mod tunnel;

// The TM3 modules other crates (the fuzz targets, the tests) name from the crate root.
pub use tm3::{codec, reorder, rp};

use std::time::Duration;

pub use frontend::Frontend;
pub use policy::DestPolicy;
pub use tm3::lp::{original_dst, LocalProxy};
pub use tm3::rp::RemoteProxy;
pub use tunnel::{Stats, StatsSnapshot};

/// Default port of the remote proxy.
pub const DEFAULT_PORT: u16 = 6000;

/// Tunables and bounds (see README.md).
#[derive(Debug, Clone)]
pub struct Config {
    /// A message is refused (connection reset) if its sequence number is this many messages or
    /// more ahead of the next expected one.
    pub reorder_window: u32,
    /// Bound on the out-of-order bytes buffered for one connection and direction.
    pub reorder_bytes_per_conn: usize,
    /// Bound on the out-of-order bytes buffered over all connections of one proxy session.
    pub reorder_bytes_total: usize,
    /// In-order bytes waiting to be written to a connection's TCP socket above which the pipe
    /// readers stop reading (back-pressure onto the pipes).
    pub ready_high_water: usize,
    /// Bytes queued on a pipe at which its write side counts as blocked.
    pub pipe_queue_limit: usize,
    /// How long a connection ID stays reserved after our FIN when the peer does not answer
    /// with its own FIN.
    pub linger: Duration,
    /// A connection whose next message is missing for this long while later ones are buffered
    /// is reset (its message was lost with a dropped pipe).
    pub gap_timeout: Duration,
    /// Remote proxy: timeout of the connection to the destination.
    pub connect_timeout: Duration,
    /// Remote proxy: data for a connection whose connection to the destination is not up yet
    /// (its SYN was delivered, the connect is in progress) is held up to this many bytes per
    /// connection; beyond it the pipe reader waits for the connect (at most `connect_timeout`).
    pub pending_connect_bytes: usize,
    /// ... and up to this many bytes over all connections of a session.
    pub pending_connect_bytes_total: usize,
    /// In-order bytes waiting to be written to the TCP connections of a session, all
    /// connections together; beyond it the pipe readers wait (as for `ready_high_water`).
    pub ready_bytes_total: usize,
    /// Remote proxy: a partial group of pipes (fewer than N from one address) is closed after
    /// waiting this long for the rest.
    pub group_timeout: Duration,
    /// Remote proxy: which destinations it connects to. Default: any
    /// ([`DestPolicy::open`]), as the TM3 specification says.
    pub dest_policy: DestPolicy,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            reorder_window: 65_536,
            reorder_bytes_per_conn: 16 << 20,
            reorder_bytes_total: 256 << 20,
            ready_high_water: 1 << 20,
            pipe_queue_limit: 256 << 10,
            linger: Duration::from_secs(10),
            gap_timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(10),
            pending_connect_bytes: 256 << 10,
            pending_connect_bytes_total: 4 << 20,
            ready_bytes_total: 64 << 20,
            group_timeout: Duration::from_secs(10),
            dest_policy: DestPolicy::open(),
        }
    }
}
