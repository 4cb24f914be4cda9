//! `tcpls._native.Stream`.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyBytes;
use tcpls_bindings::{Error, ErrorKind, SessionCore, StreamCore, Wait, MAX_IO_LEN};

use crate::errors::{to_py, IntoPy};

/// Reads of `read(-1)` go by chunks of this size.
const READ_CHUNK: usize = 1 << 20;

/// A bidirectional stream (blocking calls; the GIL is released while they wait).
#[pyclass(module = "tcpls._native", frozen)]
pub struct Stream {
    core: Arc<StreamCore>,
    /// Keeps the session alive as long as one of its streams is.
    _session: Arc<SessionCore>,
}

impl Stream {
    pub fn new(core: Arc<StreamCore>, session: Arc<SessionCore>) -> Self {
        Self { core, _session: session }
    }
}

/// The buffer size of a read of `n` bytes.
fn read_len(n: i64) -> PyResult<usize> {
    match usize::try_from(n) {
        Ok(0) => Err(to_py(Error::invalid("read(0): ask for at least one byte (or -1 for all)"))),
        Ok(n) if n > MAX_IO_LEN => {
            Err(to_py(Error::invalid(format!("read({n}): at most {MAX_IO_LEN} bytes per call"))))
        }
        Ok(n) => Ok(n),
        Err(_) => Ok(READ_CHUNK),
    }
}

#[pymethods]
impl Stream {
    #[getter]
    fn id(&self) -> u32 {
        self.core.id()
    }

    /// Writes all of `data` (bytes), waiting at most `timeout` seconds for room.
    #[pyo3(signature = (data, timeout=None))]
    fn write(&self, py: Python<'_>, data: &[u8], timeout: Option<f64>) -> PyResult<usize> {
        let wait = Wait::from_secs(timeout).py()?;
        let core = self.core.clone();
        let mut done = 0;
        for chunk in data.chunks(MAX_IO_LEN) {
            let n = py.allow_threads(|| core.write(chunk, wait)).py()?;
            done += n;
            if n < chunk.len() {
                return Err(to_py(Error::new(
                    ErrorKind::Timeout,
                    format!("wrote {done} of {} bytes in time", data.len()),
                )));
            }
        }
        Ok(done)
    }

    /// Up to `n` bytes (b"" at the end of the stream); `n` = -1 reads to the end.
    #[pyo3(signature = (n=-1, timeout=None))]
    fn read<'py>(&self, py: Python<'py>, n: i64, timeout: Option<f64>) -> PyResult<Bound<'py, PyBytes>> {
        let wait = Wait::from_secs(timeout).py()?;
        let len = read_len(n)?;
        let core = self.core.clone();
        let data = py.allow_threads(|| -> Result<Vec<u8>, Error> {
            let mut out = Vec::new();
            let mut buf = vec![0u8; len];
            loop {
                let got = core.read(&mut buf, wait)?;
                if n >= 0 {
                    buf.truncate(got);
                    return Ok(buf);
                }
                if got == 0 {
                    return Ok(out);
                }
                out.extend_from_slice(&buf[..got]);
            }
        });
        Ok(PyBytes::new(py, &data.py()?))
    }

    /// Non-blocking read: bytes (b"" at the end), or None when nothing has arrived.
    fn try_read<'py>(&self, py: Python<'py>, n: i64) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let mut buf = vec![0u8; read_len(n)?];
        match self.core.try_read(&mut buf) {
            Ok(got) => Ok(Some(PyBytes::new(py, &buf[..got]))),
            Err(e) if e.kind == ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(to_py(e)),
        }
    }

    /// Non-blocking write: how many bytes were queued, or None when none fit now.
    fn try_write(&self, data: &[u8]) -> PyResult<Option<usize>> {
        match self.core.try_write(&data[..data.len().min(MAX_IO_LEN)]) {
            Ok(n) => Ok(Some(n)),
            Err(e) if e.kind == ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(to_py(e)),
        }
    }

    /// Sends this stream's data on connection `conn` from now on; None: the scheduler decides.
    #[pyo3(signature = (conn))]
    fn steer(&self, conn: Option<u32>) -> PyResult<()> {
        self.core.steer(conn).py()
    }

    /// Sends FIN after what was written; writing afterwards raises ClosedError.
    fn finish(&self) -> PyResult<()> {
        self.core.shutdown().py()
    }

    /// Aborts the sending side; the peer's reads raise StreamResetError.
    #[pyo3(signature = (code=0))]
    fn reset(&self, code: u32) -> PyResult<()> {
        self.core.reset(code).py()
    }

    /// Closes both sides (FIN if not finished); later calls raise ClosedError.
    fn close(&self) {
        self.core.close();
    }
}
