//! The native module `tcpls._native`: the blocking API over `tcpls-bindings`, with the GIL
//! released while a call waits. The Python modules `tcpls` (blocking) and `tcpls.aio`
//! (asyncio, over the non-blocking calls and the readiness descriptor) build on it.

mod errors;
mod listener;
mod session;
mod stream;

use pyo3::prelude::*;

/// The native module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<session::Session>()?;
    m.add_class::<stream::Stream>()?;
    m.add_class::<listener::Listener>()?;
    m.add_function(wrap_pyfunction!(session::connect, m)?)?;
    m.add_function(wrap_pyfunction!(listener::listen, m)?)?;
    m.add("MAX_IO_LEN", tcpls_bindings::MAX_IO_LEN)?;
    Ok(())
}
