//! tcpls_listen, tcpls_accept, tcpls_listener_*: the server side.
// C entry points: `#[no_mangle]`, raw pointer arguments; the unsafe work is in raw.rs.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int};

use tcpls_bindings::{Error, ErrorKind, ListenerCore, Wait};

use crate::{config, guard, handles, raw, tcpls_config, tcpls_listener, tcpls_session};

/// Listens on `addr` ("IP:PORT"; port 0 picks a free one, see tcpls_listener_address) with the
/// certificate of `cfg` (tcpls_config_set_certificate). Answers TCPLS clients, and plain TLS
/// clients as fallback sessions. Stores the listener in `*listener`.
///
/// # Safety
/// `addr` is NULL or a NUL-terminated string; `listener` is NULL or points to room for a handle.
#[no_mangle]
pub unsafe extern "C" fn tcpls_listen(
    cfg: *const tcpls_config,
    addr: *const c_char,
    listener: *mut *mut tcpls_listener,
) -> c_int {
    guard::status("tcpls_listen", || {
        // SAFETY: the caller's promise on `addr`.
        let addr = unsafe { raw::string(addr, "addr") }?;
        if listener.is_null() {
            return Err(Error::new(ErrorKind::NullPointer, "listener is NULL"));
        }
        let core = ListenerCore::bind(&config::spec(cfg)?, addr)?;
        let handle = handles::insert(handles::Object::Listener(core));
        // SAFETY: the caller's promise on `listener`.
        unsafe { raw::write_out(listener, handle, "listener") }
    })
}

/// Listens on one more address for the same sessions: a client's extra paths (joins) may reach
/// its session through any of the listener's addresses (e.g. 127.0.0.1 and 127.0.0.2).
///
/// # Safety
/// `addr` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn tcpls_listener_add_address(listener: *mut tcpls_listener, addr: *const c_char) -> c_int {
    guard::status("tcpls_listener_add_address", || {
        // SAFETY: the caller's promise on `addr`.
        let addr = unsafe { raw::string(addr, "addr") }?;
        handles::listener(listener)?.add_address(addr).map(drop)
    })
}

/// The `index`th address listened on ("IP:PORT", the port resolved), into `buf` (`cap` bytes,
/// NUL-terminated). Returns the string's length, or a negative code (TCPLS_ERR_INVALID_ARGUMENT
/// if `index` is out of range or `buf` too small).
///
/// # Safety
/// `buf` is NULL or points to `cap` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn tcpls_listener_address(
    listener: *mut tcpls_listener,
    index: usize,
    buf: *mut c_char,
    cap: usize,
) -> i64 {
    guard::count("tcpls_listener_address", || {
        let addresses = handles::listener(listener)?.addresses();
        let addr = addresses
            .get(index)
            .ok_or_else(|| Error::invalid(format!("the listener has {} addresses, no #{index}", addresses.len())))?
            .to_string();
        // SAFETY: the caller's promise on `buf`.
        let out = unsafe { raw::bytes_mut(buf.cast(), cap, "buf") }?;
        if addr.len() >= out.len() {
            return Err(Error::invalid(format!("buf is too small for {addr} ({} bytes with its NUL)", addr.len() + 1)));
        }
        out[..addr.len()].copy_from_slice(addr.as_bytes());
        out[addr.len()] = 0;
        Ok(addr.len())
    })
}

/// The port of the `index`th address listened on, or a negative code.
#[no_mangle]
pub extern "C" fn tcpls_listener_port(listener: *mut tcpls_listener, index: usize) -> c_int {
    let mut port = 0;
    let status = guard::status("tcpls_listener_port", || {
        let addresses = handles::listener(listener)?.addresses();
        port = addresses
            .get(index)
            .ok_or_else(|| Error::invalid(format!("the listener has {} addresses, no #{index}", addresses.len())))?
            .port();
        Ok(())
    });
    if status < 0 {
        status
    } else {
        c_int::from(port)
    }
}

/// The next established session, waiting at most `timeout_ms` (0: TCPLS_ERR_WOULD_BLOCK if
/// none; negative: no limit); stores it in `*session`. One thread at a time per listener.
///
/// # Safety
/// `session` is NULL or points to room for a handle.
#[no_mangle]
pub unsafe extern "C" fn tcpls_accept(
    listener: *mut tcpls_listener,
    timeout_ms: i64,
    session: *mut *mut tcpls_session,
) -> c_int {
    guard::status("tcpls_accept", || {
        if session.is_null() {
            return Err(Error::new(ErrorKind::NullPointer, "session is NULL"));
        }
        let core = handles::listener(listener)?.accept(Wait::from_millis(timeout_ms))?;
        let handle = handles::insert(handles::Object::Session(core));
        // SAFETY: the caller's promise on `session`.
        unsafe { raw::write_out(session, handle, "session") }
    })
}

/// Stops listening and frees the listener; accepted sessions go on. A thread waiting in
/// tcpls_accept on it returns TCPLS_ERR_CLOSED.
#[no_mangle]
pub extern "C" fn tcpls_listener_free(listener: *mut tcpls_listener) -> c_int {
    guard::status("tcpls_listener_free", || {
        handles::remove_listener(listener)?.close();
        Ok(())
    })
}
