//! TCPLS on tokio: a secure transport with many streams over TCP and TLS 1.3.
//!
//! * [`TcplsConnector`] / [`TcplsListener`] open and accept [`Session`]s, built from rustls
//!   configs. Servers also serve plain TLS clients (a fallback session with one stream), and
//!   clients fall back against plain TLS servers: [`Session::is_fallback`] says so.
//! * [`ServerBuilder`] serves on several cores: one listener (`SO_REUSEPORT`) and one
//!   current-thread runtime per core, each session (its handshake, driver, joined connections
//!   and handler) kept on the core that accepted it; joins reaching another core's listener are
//!   handed over ([`PerCoreServer`]). A [`TcplsListener`] serves on the application's runtime.
//! * A [`Session`] opens and accepts streams: [`SendStream`] (`AsyncWrite`, `shutdown` = FIN)
//!   and [`RecvStream`] (`AsyncRead`, 0 bytes = peer's FIN).
//!
//! One driver task per session owns its sockets and the sans-IO core (`tcpls-proto`); the
//! handles reach it through a mutex and wakers.
//!
//! See `examples/echo.rs` for a complete client and server.
//!
//! Cargo feature `danger` (off by default, for hostile-peer tests only): the
//! `Session::danger_*` hooks, and `tcpls-proto`'s own `danger` feature (its wire-level modules,
//! reachable as `tcpls::proto::frame` and `tcpls::proto::record`).
//!
//! # Example
//!
//! A client for `tcpls serve --mode echo`, trusting the certificate of `tcpls cert` (the same
//! code as in the README):
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use rustls::pki_types::{pem::PemObject, CertificateDer};
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//!
//! /// A client config that trusts the certificate written by `tcpls cert --out tcpls-cert`.
//! fn client_config() -> Result<rustls::ClientConfig, Box<dyn std::error::Error>> {
//!     let mut roots = rustls::RootCertStore::empty();
//!     for cert in CertificateDer::pem_file_iter("tcpls-cert/cert.pem")? {
//!         roots.add(cert?)?;
//!     }
//!     let config = rustls::ClientConfig::builder_with_provider(Arc::new(tcpls::crypto_provider()))
//!         .with_safe_default_protocol_versions()?
//!         .with_root_certificates(roots)
//!         .with_no_client_auth();
//!     Ok(config)
//! }
//!
//! /// Sends "hello" on a new stream to `tcpls serve --mode echo` and reads the answer.
//! async fn hello() -> Result<Vec<u8>, Box<dyn std::error::Error>> {
//!     let connector = tcpls::TcplsConnector::new(Arc::new(client_config()?));
//!     let name = tcpls::server_name_for("localhost")?;
//!     let session = connector.connect("127.0.0.1:4444".parse()?, name).await?;
//!     let (mut send, mut recv) = session.open_stream()?; // as many streams as you like
//!     send.write_all(b"hello").await?;
//!     send.shutdown().await?; // FIN
//!     let mut reply = Vec::new();
//!     recv.read_to_end(&mut reply).await?;
//!     session.close().await;
//!     Ok(reply)
//! }
//! # fn main() {}
//! ```

mod admission;
mod connector;
#[cfg(feature = "danger")]
mod danger;
mod driver;
mod events;
mod ext;
pub mod fallback;
mod handshake;
#[cfg(target_os = "linux")]
mod interfaces;
mod listener;
mod listener_stats;
mod path;
mod path_manager;
mod peer_requests;
mod per_core;
mod probe_answers;
mod registry;
mod session;
mod shared;
mod socket;
mod sockopt;
mod stream;
mod tcp_info;
mod trace;

pub use admission::{FIRST_BYTE_TIMEOUT, MAX_AWAITING_HELLO, MAX_AWAITING_PER_SOURCE, MAX_HANDSHAKES_PER_SOURCE};
pub use connector::{server_name_for, HappyEyeballs, TcplsConnector};
pub use events::SocketOptionApplied;
pub use ext::{NatReport, PROBE_TIMEOUT};
pub use fallback::{ConnectOutcome, FallbackMemory};
pub use handshake::HANDSHAKE_TIMEOUT;
pub use listener::{TcplsListener, MAX_PENDING_HANDSHAKES};
pub use listener_stats::ListenerStats;
pub use path::PathOptions;
pub use path_manager::{Endpoint, PathManager, PathManagerConfig, PathPolicy, PathReport, DEFAULT_OUTAGE_TOLERANCE};
pub use per_core::{PerCoreBound, PerCoreServer, ServerBuilder};
pub use registry::JoinRegistry;
pub use session::{ConnectionInfo, Session};
pub use socket::fast_open_listener;
pub use stream::{RecvStream, SendStream};
pub use tcp_info::TcpInfo;
pub use tcpls_proto::{
    self as proto, crypto_provider, ConnId, EarliestArrival, Error, Event, FnScheduler, LowestRtt, PathInfo, PathView,
    RoundRobin, Scheduler, SessionConfig, StreamError, StreamId, Weighted, STEER_ANY,
};
pub use tcpls_proto::{MemoryUse, StreamProgress};
pub use trace::{
    describe as describe_trace_event, flush_default_trace, set_default_trace, ConnectionSample, JsonLinesTrace,
    NullTrace, PathEvent, SessionSample, TraceEvent, TraceRecord, TraceSink, DEFAULT_SAMPLE_INTERVAL,
};
