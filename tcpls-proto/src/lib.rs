//! Sans-IO core of TCPLS: TCP connections secured by TLS 1.3 (handshake by rustls, record
//! layer of our own) carrying many streams, as specified in `docs/PROTOCOL.md`.
//!
//! Nothing here touches a socket or a clock: the `tcpls` crate drives a [`Session`] with real
//! TCP sockets on tokio, tests drive it with in-memory buffers.
//!
//! # Cargo features
//!
//! - `danger` (off by default): opens the wire-level modules `frame` (frame codec) and `record`
//!   (record layer: sealing, opening, deframing) and the `Session::danger_*` hooks that let a
//!   session act as a hostile peer (seal any record with its real keys, forge joins and
//!   rejoins) or report its internal queue sizes. For fuzz targets, benches and hostile-peer
//!   tests only; never enable it in a product build.

// The public API is what this file re-exports below; the modules are implementation detail.
// The `danger` feature (off by default; for fuzzing, benches and hostile-peer tests) also opens
// the wire-level modules (frames, records) and the `danger_*` hooks of `Session`.
mod coding;
mod config;
mod error;
mod event;
pub mod farm_route;
#[cfg(feature = "danger")]
pub mod frame;
#[cfg(not(feature = "danger"))]
#[allow(dead_code, unused_imports)] // what only the danger API (fuzzing, tests) uses
mod frame;
/// The one accept-any server-certificate verifier (tests, fuzzing, the CLI's `--insecure`).
pub mod insecure;
#[cfg(feature = "danger")]
pub mod record;
#[cfg(not(feature = "danger"))]
#[allow(dead_code, unused_imports)] // what only the danger API (fuzzing, tests) uses
mod record;
mod session;
mod stream;
#[doc(hidden)]
pub mod sync;
mod tls;
mod wire_enum;

pub use config::{system_random, JoinServerName, RandomSource, SessionConfig, RECEIVE_WINDOW_START, SEND_FLOOR};
pub use error::{AlertCode, Error, StreamError, TransportError};
pub use event::{ConnId, Event, StreamId};
pub use frame::{PeerTcpInfo, SESSION_REF_LEN};
pub use session::sched::{
    EarliestArrival, FnScheduler, LowestRtt, PathInfo, PathView, RoundRobin, Scheduler, Weighted,
};
pub use session::MAX_EARLY_STREAM_BYTES;
pub use session::{
    tcpls_client_config, tcpls_server_config, Accepted, ConnStats, JoiningConnection, MemoryUse, Session, SessionStats,
    Side, StreamProgress, MIN_READ_CHUNK, READ_CHUNK, REJOIN_ID_BASE, STEER_ANY,
};
pub use session::{MULTIPATH_HIGH_WATER, MULTIPATH_QUEUE_TIME, SEND_BUDGET_FLOOR};
pub use tls::{
    crypto_provider, FarmTicketStats, FarmTicketer, HandshakeInfo, TicketKeys, TicketStats, TicketStore, ALPN_TCPLS,
    MAX_EARLY_DATA, MAX_TICKET_KEYS, TICKET_KEY_LEN,
};
