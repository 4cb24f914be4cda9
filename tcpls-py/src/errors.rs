//! Errors as Python exceptions: each kind of `tcpls_bindings::Error` is a class of
//! `tcpls.errors` (defined in Python, so that they can also derive from the built-in classes
//! such as TimeoutError), raised with the library's message.

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyType;
use tcpls_bindings::{Error, ErrorKind};

/// The `tcpls.errors` class of a kind.
fn class_name(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::NullPointer | ErrorKind::InvalidArgument => "InvalidArgumentError",
        ErrorKind::InvalidHandle | ErrorKind::Closed => "ClosedError",
        ErrorKind::Busy => "BusyError",
        ErrorKind::Timeout => "TimeoutError",
        ErrorKind::WouldBlock => "WouldBlockError",
        ErrorKind::Tls => "TlsError",
        ErrorKind::Connect => "ConnectError",
        ErrorKind::Io => "TransportError",
        ErrorKind::Reset => "StreamResetError",
        ErrorKind::SessionEnded => "SessionEndedError",
        ErrorKind::Config => "ConfigError",
        ErrorKind::Internal => "InternalError",
    }
}

/// The Python exception for `e`.
pub fn to_py(e: Error) -> PyErr {
    Python::with_gil(|py| {
        let class = py
            .import("tcpls.errors")
            .and_then(|m| m.getattr(class_name(e.kind)))
            .and_then(|c| c.downcast_into::<PyType>().map_err(PyErr::from));
        match class {
            Ok(class) => PyErr::from_type(class, e.message),
            Err(_) => PyRuntimeError::new_err(e.message),
        }
    })
}

/// `Result<T, Error>` to `PyResult<T>`.
pub trait IntoPy<T> {
    fn py(self) -> PyResult<T>;
}

impl<T> IntoPy<T> for Result<T, Error> {
    fn py(self) -> PyResult<T> {
        self.map_err(to_py)
    }
}
