//! tcpls_stream_*: opening, reading, writing, finishing and freeing streams.
// C entry points: `#[no_mangle]`, raw pointer arguments; the unsafe work is in raw.rs.
#![allow(unsafe_code)]

use std::ffi::{c_int, c_void};

use tcpls_bindings::{Error, ErrorKind, Wait};

use crate::{guard, handles, raw, tcpls_session, tcpls_stream};

/// Opens a stream on the session; stores it in `*stream`. The peer learns of it with its first
/// byte (or FIN).
///
/// # Safety
/// `stream` is NULL or points to room for a handle.
#[no_mangle]
pub unsafe extern "C" fn tcpls_stream_open(session: *mut tcpls_session, stream: *mut *mut tcpls_stream) -> c_int {
    guard::status("tcpls_stream_open", || {
        if stream.is_null() {
            return Err(Error::new(ErrorKind::NullPointer, "stream is NULL"));
        }
        let core = handles::session(session)?.open_stream()?;
        let handle = handles::insert(handles::Object::Stream(core));
        // SAFETY: the caller's promise on `stream`.
        unsafe { raw::write_out(stream, handle, "stream") }
    })
}

/// Takes the next stream the peer opened, waiting at most `timeout_ms` (0: TCPLS_ERR_WOULD_BLOCK
/// if none; negative: no limit); stores it in `*stream`. TCPLS_ERR_SESSION_ENDED when the
/// session is over and none is left.
///
/// # Safety
/// `stream` is NULL or points to room for a handle.
#[no_mangle]
pub unsafe extern "C" fn tcpls_stream_accept(
    session: *mut tcpls_session,
    timeout_ms: i64,
    stream: *mut *mut tcpls_stream,
) -> c_int {
    guard::status("tcpls_stream_accept", || {
        if stream.is_null() {
            return Err(Error::new(ErrorKind::NullPointer, "stream is NULL"));
        }
        let core = handles::session(session)?.accept_stream(Wait::from_millis(timeout_ms))?;
        let handle = handles::insert(handles::Object::Stream(core));
        // SAFETY: the caller's promise on `stream`.
        unsafe { raw::write_out(stream, handle, "stream") }
    })
}

/// Writes `len` bytes of `buf`, waiting at most `timeout_ms` for room (negative: no limit).
/// Returns the bytes written: `len`, or fewer if the time ran out after some; or a negative
/// code (TCPLS_ERR_TIMEOUT if none could be written).
///
/// # Safety
/// `buf` is NULL or points to `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn tcpls_stream_write(
    stream: *mut tcpls_stream,
    buf: *const c_void,
    len: usize,
    timeout_ms: i64,
) -> i64 {
    guard::count("tcpls_stream_write", || {
        // SAFETY: the caller's promise on `buf`.
        let data = unsafe { raw::bytes(buf.cast(), len, "buf") }?;
        handles::stream(stream)?.write(data, Wait::from_millis(timeout_ms))
    })
}

/// Reads up to `cap` bytes into `buf`, waiting at most `timeout_ms` for the first one
/// (negative: no limit). Returns the bytes read, 0 at the end of the stream (the peer's FIN),
/// or a negative code (TCPLS_ERR_TIMEOUT, TCPLS_ERR_RESET, ...).
///
/// # Safety
/// `buf` is NULL or points to `cap` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn tcpls_stream_read(
    stream: *mut tcpls_stream,
    buf: *mut c_void,
    cap: usize,
    timeout_ms: i64,
) -> i64 {
    guard::count("tcpls_stream_read", || {
        // SAFETY: the caller's promise on `buf`.
        let out = unsafe { raw::bytes_mut(buf.cast(), cap, "buf") }?;
        handles::stream(stream)?.read(out, Wait::from_millis(timeout_ms))
    })
}

/// Reads without a copy: calls `callback(userdata, data, len)` with the bytes that have arrived,
/// in the library's own buffer, waiting at most `timeout_ms` for the first one. The callback
/// returns how many bytes it used (1 to `len`); the rest is offered again by the next read.
/// Returns the bytes used, 0 at the end of the stream (the callback is not called), or a
/// negative code. The callback runs on the calling thread with the session locked: it must not
/// call the library for the same session, keep `data`, or leave by longjmp.
///
/// # Safety
/// `callback` honours the contract above; `userdata` is whatever it expects.
#[no_mangle]
pub unsafe extern "C" fn tcpls_stream_read_with(
    stream: *mut tcpls_stream,
    callback: crate::tcpls_read_callback,
    userdata: *mut c_void,
    timeout_ms: i64,
) -> i64 {
    guard::count("tcpls_stream_read_with", || {
        let callback = callback.ok_or_else(|| Error::new(ErrorKind::NullPointer, "callback is NULL"))?;
        handles::stream(stream)?.read_with(Wait::from_millis(timeout_ms), |chunk| {
            // SAFETY: the caller's promise on `callback`.
            unsafe { raw::call_read_callback(callback, userdata, chunk) }
        })
    })
}

/// Non-blocking write: queues what fits now and returns how much, or TCPLS_ERR_WOULD_BLOCK
/// when nothing fits (tcpls_session_fd becomes readable when there is room).
///
/// # Safety
/// `buf` is NULL or points to `len` readable bytes.
#[no_mangle]
pub unsafe extern "C" fn tcpls_stream_try_write(stream: *mut tcpls_stream, buf: *const c_void, len: usize) -> i64 {
    guard::count("tcpls_stream_try_write", || {
        // SAFETY: the caller's promise on `buf`.
        let data = unsafe { raw::bytes(buf.cast(), len, "buf") }?;
        handles::stream(stream)?.try_write(data)
    })
}

/// Non-blocking read: returns what has arrived (up to `cap`), 0 at the end of the stream, or
/// TCPLS_ERR_WOULD_BLOCK when nothing has (tcpls_session_fd becomes readable when it does).
///
/// # Safety
/// `buf` is NULL or points to `cap` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn tcpls_stream_try_read(stream: *mut tcpls_stream, buf: *mut c_void, cap: usize) -> i64 {
    guard::count("tcpls_stream_try_read", || {
        // SAFETY: the caller's promise on `buf`.
        let out = unsafe { raw::bytes_mut(buf.cast(), cap, "buf") }?;
        handles::stream(stream)?.try_read(out)
    })
}

/// Finishes the sending side (FIN after the bytes written); reading goes on. Writing
/// afterwards: TCPLS_ERR_CLOSED.
#[no_mangle]
pub extern "C" fn tcpls_stream_shutdown(stream: *mut tcpls_stream) -> c_int {
    guard::status("tcpls_stream_shutdown", || handles::stream(stream)?.shutdown())
}

/// Sends the stream's data on path `conn` from now on (steering); a negative `conn` gives it
/// back to the session's scheduler. tcpls_session_migrate moves steered streams.
#[no_mangle]
pub extern "C" fn tcpls_stream_steer(stream: *mut tcpls_stream, conn: i64) -> c_int {
    guard::status("tcpls_stream_steer", || {
        let conn = match conn {
            c if c < 0 => None,
            c => Some(u32::try_from(c).map_err(|_| Error::invalid(format!("{c} is not a connection ID")))?),
        };
        handles::stream(stream)?.steer(conn)
    })
}

/// Aborts the sending side: unsent bytes are dropped and the peer's reads fail with
/// TCPLS_ERR_RESET (`code` is the application's reason).
#[no_mangle]
pub extern "C" fn tcpls_stream_reset(stream: *mut tcpls_stream, code: u32) -> c_int {
    guard::status("tcpls_stream_reset", || handles::stream(stream)?.reset(code))
}

/// The stream's ID (>= 0), or a negative code.
#[no_mangle]
pub extern "C" fn tcpls_stream_id(stream: *mut tcpls_stream) -> i64 {
    guard::count("tcpls_stream_id", || Ok(handles::stream(stream)?.id() as usize))
}

/// Frees the stream: FIN if it was not shut down, and no more reading. The handle is invalid
/// afterwards (TCPLS_ERR_INVALID_HANDLE).
#[no_mangle]
pub extern "C" fn tcpls_stream_free(stream: *mut tcpls_stream) -> c_int {
    guard::status("tcpls_stream_free", || {
        handles::remove_stream(stream)?.close();
        Ok(())
    })
}
