//! TCPLS on tokio: a secure transport with many streams over TCP and TLS 1.3.
//!
//! * [`TcplsConnector`] / [`TcplsListener`] open and accept [`Session`]s, built from rustls
//!   configs. Servers also serve plain TLS clients (a fallback session with one stream), and
//!   clients fall back against plain TLS servers: [`Session::is_fallback`] says so.
//! * A [`Session`] opens and accepts streams: [`SendStream`] (`AsyncWrite`, `shutdown` = FIN)
//!   and [`RecvStream`] (`AsyncRead`, 0 bytes = peer's FIN).
//!
//! One driver task per session owns its sockets and the sans-IO core (`tcpls-proto`); the
//! handles reach it through a mutex and wakers.
//!
//! See `examples/echo.rs` for a complete client and server.

mod admission;
mod connector;
mod danger;
mod driver;
mod ext;
pub mod fallback;
mod listener;
mod registry;
mod session;
mod shared;
mod socket;
mod sockopt;
mod stream;
mod tcp_info;

pub use admission::{FIRST_BYTE_TIMEOUT, MAX_AWAITING_HELLO, MAX_AWAITING_PER_SOURCE, MAX_HANDSHAKES_PER_SOURCE};
pub use connector::{server_name_for, HappyEyeballs, TcplsConnector};
pub use ext::{NatReport, PROBE_TIMEOUT};
pub use fallback::{ConnectOutcome, FallbackMemory};
pub use listener::{TcplsListener, HANDSHAKE_TIMEOUT, MAX_PENDING_HANDSHAKES};
pub use registry::JoinRegistry;
pub use session::{ConnectionInfo, Session};
pub use socket::fast_open_listener;
pub use stream::{RecvStream, SendStream};
pub use tcp_info::TcpInfo;
pub use tcpls_proto::{
    self as proto, crypto_provider, ConnId, Error, Event, FnScheduler, LowestRtt, PathView, RoundRobin, Scheduler,
    SessionConfig, StreamError, StreamId, Weighted,
};
