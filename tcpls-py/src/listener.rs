//! `tcpls._native.Listener` and `listen`.

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::prelude::*;
use tcpls_bindings::{ConfigSpec, ListenerCore, Wait};

use crate::errors::IntoPy;
use crate::session::Session;

/// A server's listening addresses and the sessions they accept.
#[pyclass(module = "tcpls._native", frozen)]
pub struct Listener {
    core: Arc<ListenerCore>,
}

/// Listens on `addr` ("IP:PORT", port 0 for any) with the certificate `cert` and key `key`.
#[pyfunction]
#[pyo3(signature = (addr, cert, key))]
pub fn listen(py: Python<'_>, addr: &str, cert: PathBuf, key: PathBuf) -> PyResult<Listener> {
    let spec = ConfigSpec { cert_file: Some(cert), key_file: Some(key), ..ConfigSpec::default() };
    let core = py.allow_threads(|| ListenerCore::bind(&spec, addr)).py()?;
    Ok(Listener { core })
}

#[pymethods]
impl Listener {
    /// Listens on one more address for the same sessions (their paths may join through it).
    fn add_address(&self, py: Python<'_>, addr: &str) -> PyResult<String> {
        let core = self.core.clone();
        Ok(py.allow_threads(|| core.add_address(addr)).py()?.to_string())
    }

    /// The addresses listened on, "IP:PORT", ports resolved.
    #[getter]
    fn addresses(&self) -> Vec<String> {
        self.core.addresses().iter().map(|a| a.to_string()).collect()
    }

    /// The next established session (waits at most `timeout` seconds; None: no limit).
    #[pyo3(signature = (timeout=None))]
    fn accept(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Session> {
        let wait = Wait::from_secs(timeout).py()?;
        let core = self.core.clone();
        let session = py.allow_threads(|| core.accept(wait)).py()?;
        Ok(Session { core: session })
    }

    /// Stops listening; accepted sessions go on.
    fn close(&self) {
        self.core.close();
    }
}
