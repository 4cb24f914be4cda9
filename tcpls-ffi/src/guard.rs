//! The boundary: no panic crosses it, and every failure leaves its message for
//! `tcpls_last_error` on the calling thread.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use tcpls_bindings::{Error, ErrorKind, Result};

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Keeps `e`'s message for `tcpls_last_error` and returns its code.
pub(crate) fn fail(e: &Error) -> c_int {
    let text = format!("{}: {}", e.kind.name(), e.message).replace('\0', " ");
    let message = CString::new(text).unwrap_or_default();
    LAST_ERROR.with(|m| *m.borrow_mut() = message);
    e.kind.code()
}

/// The calling thread's last error message (valid until its next failing call).
pub(crate) fn last_error() -> *const c_char {
    LAST_ERROR.with(|m| m.borrow().as_ptr())
}

fn panicked(what: &str, payload: &(dyn std::any::Any + Send)) -> Error {
    let why = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into());
    Error::new(ErrorKind::Internal, format!("{what}: internal error (a bug, please report it): {why}"))
}

/// Runs a call that returns a status: 0 or a negative code.
pub(crate) fn status(what: &str, f: impl FnOnce() -> Result<()>) -> c_int {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => fail(&e),
        Err(payload) => fail(&panicked(what, payload.as_ref())),
    }
}

/// Runs a call that returns a count (bytes, connections): it or a negative code.
pub(crate) fn count(what: &str, f: impl FnOnce() -> Result<usize>) -> i64 {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(n)) => i64::try_from(n).unwrap_or(i64::MAX),
        Ok(Err(e)) => i64::from(fail(&e)),
        Err(payload) => i64::from(fail(&panicked(what, payload.as_ref()))),
    }
}
