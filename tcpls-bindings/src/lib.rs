//! What the C API (`tcpls-ffi`) and the Python package (`tcpls-py`) share: a facade over the
//! `tcpls` crate for callers that are not async Rust.
//!
//! * Every call blocks its caller at most for a given [`Wait`], on one tokio runtime owned by
//!   this crate ([`runtime`]), or does not block at all (the `try_*` calls), in which case a
//!   session's [`Readiness`] descriptor becomes readable when it is worth trying again.
//! * Errors are an [`Error`]: a [`ErrorKind`] (a C error code, a Python exception class) and a
//!   message that says what to do, worded as the CLI words it.
//! * Objects are `Send + Sync` and safe to share; the rules on which calls may run at once on
//!   one object are checked (a second concurrent reader of one stream gets [`ErrorKind::Busy`]).

mod config;
mod error;
mod events;
mod listener;
mod pathspec;
mod readiness;
mod runtime;
mod session;
mod stream;

pub use config::ConfigSpec;
pub use error::{explain, Error, ErrorKind, Result};
pub use events::{AppEvent, EventKind, MAX_QUEUED_EVENTS};
pub use listener::ListenerCore;
pub use pathspec::{parse_path, resolve};
pub use readiness::Readiness;
pub use runtime::{runtime, Wait};
pub use session::{ConnectionStats, SessionCore};
pub use stream::{StreamCore, MAX_IO_LEN};
