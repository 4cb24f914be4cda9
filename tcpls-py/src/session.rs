//! `tcpls._native.Session` and `connect`.

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyDict;
use tcpls_bindings::{ConfigSpec, SessionCore, Wait};

use crate::errors::IntoPy;
use crate::stream::Stream;

/// A TCPLS session (blocking calls; the GIL is released while they wait).
#[pyclass(module = "tcpls._native", frozen)]
pub struct Session {
    pub(crate) core: Arc<SessionCore>,
}

/// Connects to `addr` ("HOST:PORT") and completes the handshake within `timeout` seconds.
#[pyfunction]
#[pyo3(signature = (addr, ca=None, insecure=false, server_name=None, cert=None, key=None, timeout=None))]
#[allow(clippy::too_many_arguments)]
pub fn connect(
    py: Python<'_>,
    addr: &str,
    ca: Option<PathBuf>,
    insecure: bool,
    server_name: Option<&str>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    timeout: Option<f64>,
) -> PyResult<Session> {
    let spec = ConfigSpec { ca_file: ca, insecure, cert_file: cert, key_file: key };
    let wait = Wait::from_secs(timeout).py()?;
    let core = py.allow_threads(|| SessionCore::connect(&spec, addr, server_name, wait)).py()?;
    Ok(Session { core })
}

#[pymethods]
impl Session {
    /// Opens a stream.
    fn open_stream(&self) -> PyResult<Stream> {
        Ok(Stream::new(self.core.open_stream().py()?, self.core.clone()))
    }

    /// The next stream the peer opened (waits at most `timeout` seconds; None: no limit).
    #[pyo3(signature = (timeout=None))]
    fn accept_stream(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Stream> {
        let wait = Wait::from_secs(timeout).py()?;
        let core = self.core.clone();
        let stream = py.allow_threads(|| core.accept_stream(wait)).py()?;
        Ok(Stream::new(stream, self.core.clone()))
    }

    /// Adds a path "[LOCAL@]HOST:PORT"; returns its connection ID.
    #[pyo3(signature = (path, timeout=Some(10.0)))]
    fn add_path(&self, py: Python<'_>, path: &str, timeout: Option<f64>) -> PyResult<u32> {
        let wait = Wait::from_secs(timeout).py()?;
        let core = self.core.clone();
        py.allow_threads(|| core.add_path(path, wait)).py()
    }

    /// The next event as (kind, conn, stream, detail); kind is one of "stream_opened",
    /// "path_up", "path_down", "failover", "migration", "all_paths_lost", "session_closed".
    #[pyo3(signature = (timeout=None))]
    fn next_event(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<(&'static str, u32, u32, String)> {
        let wait = Wait::from_secs(timeout).py()?;
        let core = self.core.clone();
        let e = py.allow_threads(|| core.next_event(wait)).py()?;
        use tcpls_bindings::EventKind as K;
        let kind = match e.kind {
            K::StreamOpened => "stream_opened",
            K::PathUp => "path_up",
            K::PathDown => "path_down",
            K::Failover => "failover",
            K::Migration => "migration",
            K::AllPathsLost => "all_paths_lost",
            K::SessionClosed => "session_closed",
        };
        Ok((kind, e.conn, e.stream, e.detail))
    }

    /// Every TCP connection (path) with its statistics, as dicts.
    fn connections<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, PyDict>>> {
        self.core
            .connections()
            .into_iter()
            .map(|c| {
                let d = PyDict::new(py);
                d.set_item("id", c.id)?;
                d.set_item("usable", c.usable)?;
                d.set_item("local", c.local.map(|a| a.to_string()))?;
                d.set_item("remote", c.remote.map(|a| a.to_string()))?;
                d.set_item("bytes_sent", c.bytes_sent)?;
                d.set_item("bytes_received", c.bytes_received)?;
                d.set_item("rtt_us", c.rtt_us)?;
                d.set_item("rttvar_us", c.rttvar_us)?;
                d.set_item("cwnd", c.cwnd)?;
                d.set_item("total_retrans", c.total_retrans)?;
                d.set_item("delivery_rate", c.delivery_rate)?;
                Ok(d)
            })
            .collect()
    }

    /// Drops path `conn` at once as if it had failed (its data in flight goes on the others).
    fn abandon_path(&self, conn: u32) -> PyResult<()> {
        self.core.abandon_path(conn).py()
    }

    /// Moves the streams steered to `from_conn` to `to_conn` and closes `from_conn`.
    fn migrate(&self, from_conn: u32, to_conn: u32) -> PyResult<()> {
        self.core.migrate(from_conn, to_conn).py()
    }

    /// Spreads unsteered data over every path in turn (True) or by lowest RTT (False).
    fn set_round_robin(&self, round_robin: bool) -> PyResult<()> {
        self.core.set_round_robin(round_robin).py()
    }

    #[getter]
    fn is_fallback(&self) -> bool {
        self.core.is_fallback()
    }

    #[getter]
    fn closed(&self) -> bool {
        self.core.is_closed()
    }

    /// The readiness descriptor (see tcpls.aio).
    fn fd(&self) -> i32 {
        self.core.readiness().fd()
    }

    fn clear_fd(&self) {
        self.core.readiness().clear();
    }

    /// Graceful close (waits for the peer, 10 s at most).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let core = self.core.clone();
        py.allow_threads(|| core.close()).py()
    }

    /// Ends the session at once.
    fn abort(&self) {
        self.core.abort();
    }
}
