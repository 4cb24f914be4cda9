//! Sans-IO core of TCPLS: TCP connections secured by TLS 1.3 (handshake by rustls, record
//! layer of our own) carrying many streams, as specified in `docs/PROTOCOL.md`.
//!
//! Nothing here touches a socket or a clock: the `tcpls` crate drives a [`Session`] with real
//! TCP sockets on tokio, tests drive it with in-memory buffers.

pub mod coding;
pub mod config;
pub mod error;
pub mod event;
pub mod frame;
pub mod record;
pub mod session;
pub mod stream;
pub mod tls;
mod wire_enum;

pub use config::{system_random, RandomSource, SessionConfig};
pub use error::{AlertCode, Error, StreamError, TransportError};
pub use event::{ConnId, Event, StreamId};
pub use session::sched::{FnScheduler, LowestRtt, PathView, RoundRobin, Scheduler, Weighted};
pub use session::MAX_EARLY_STREAM_BYTES;
pub use session::{
    tcpls_client_config, tcpls_server_config, Accepted, ConnStats, JoiningConnection, MemoryUse, Session, SessionStats,
    Side, StreamProgress, MIN_READ_CHUNK, READ_CHUNK, REJOIN_ID_BASE,
};
pub use tls::{crypto_provider, HandshakeInfo, ALPN_TCPLS};
