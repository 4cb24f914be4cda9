//! The one tokio runtime the bindings run every session on, and blocking calls with a timeout.
//!
//! One shared multi-thread runtime rather than one per session or config: a session's driver is
//! a task like any other, so a server with many sessions needs no thread per session, and a
//! client's sessions share the worker threads as they would in an async Rust program (the CLI
//! runs the same way).
//!
//! Worker threads: half the cores (at least one), or `TCPLS_WORKER_THREADS`. The application's
//! own threads make the calls, and the reading, copying and verifying happen on them; the
//! runtime drives the sockets and the crypto. With a worker per core, each core also had an
//! application thread to run and the two woke each other across cores: on 2 cores, with one
//! worker instead of two, 8 GiB over 4 streams uploaded 28-30 % faster (a third fewer context
//! switches) and downloaded 4-8 % faster (docs/PERFORMANCE.md, "C and Python bindings").

use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use tokio::runtime::Runtime;

use crate::error::{Error, ErrorKind, Result};

/// The bindings' runtime, started on first use.
pub fn runtime() -> Result<&'static Runtime> {
    static RUNTIME: OnceLock<std::result::Result<Runtime, String>> = OnceLock::new();
    let built = RUNTIME.get_or_init(|| {
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        let half_the_cores = std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1));
        let workers = std::env::var("TCPLS_WORKER_THREADS").ok().and_then(|v| v.parse::<usize>().ok());
        builder.worker_threads(workers.unwrap_or(half_the_cores).max(1));
        builder
            .thread_name("tcpls-worker")
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the library's runtime threads: {e}"))
    });
    built.as_ref().map_err(|e| Error::new(ErrorKind::Internal, e.clone()))
}

/// How long a call may block: the C API's `timeout_ms` (negative: forever; 0: not at all, the
/// call only does what it can at once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    Forever,
    For(Duration),
}

impl Wait {
    pub fn from_millis(timeout_ms: i64) -> Wait {
        match u64::try_from(timeout_ms) {
            Ok(ms) => Wait::For(Duration::from_millis(ms)),
            Err(_) => Wait::Forever,
        }
    }

    /// A timeout in seconds (Python's convention: `None` is forever).
    pub fn from_secs(timeout: Option<f64>) -> Result<Wait> {
        match timeout {
            None => Ok(Wait::Forever),
            Some(s) if s.is_finite() && s >= 0.0 => Ok(Wait::For(Duration::from_secs_f64(s.min(1e9)))),
            Some(s) => Err(Error::invalid(format!("timeout must be a number of seconds >= 0 or None, not {s}"))),
        }
    }
}

/// Runs `future` on the runtime from a thread outside it, for at most `wait`; `what` names the
/// operation in the timeout's message. The future is polled at least once, so with a zero wait
/// whatever is ready at once still happens.
pub fn block_on<F: Future>(wait: Wait, what: &str, future: F) -> Result<F::Output> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err(Error::new(
            ErrorKind::Busy,
            format!("{what}: a blocking call was made from one of the library's own runtime threads"),
        ));
    }
    let rt = runtime()?;
    match wait {
        Wait::Forever => Ok(rt.block_on(future)),
        Wait::For(limit) => rt
            .block_on(async { tokio::time::timeout(limit, future).await })
            .map_err(|_| Error::new(ErrorKind::Timeout, format!("{what}: nothing happened within {limit:?}"))),
    }
}
