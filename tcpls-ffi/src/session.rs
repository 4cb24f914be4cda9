//! tcpls_connect, tcpls_session_*: a session's life, paths, events and statistics.
// C entry points: `#[no_mangle]`, raw pointer arguments; the unsafe work is in raw.rs.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int};

use tcpls_bindings::{SessionCore, Wait};

use crate::{
    config, fill_c_string, guard, handles, raw, tcpls_config, tcpls_conn_stats, tcpls_event, tcpls_session,
    TCPLS_ADDR_LEN, TCPLS_EVENT_DETAIL_LEN,
};

/// Connects to `addr` ("HOST:PORT"; a name is resolved, its addresses raced) and completes the
/// TLS handshake within `timeout_ms` (negative: no limit). `server_name` is the name the
/// server's certificate must have (NULL: HOST). On success stores the session in `*session`.
/// A server that speaks only TLS gives a fallback session (tcpls_session_is_fallback).
///
/// # Safety
/// `addr` and `server_name` are NULL or NUL-terminated strings; `session` is NULL or points to
/// room for a handle.
#[no_mangle]
pub unsafe extern "C" fn tcpls_connect(
    cfg: *const tcpls_config,
    addr: *const c_char,
    server_name: *const c_char,
    timeout_ms: i64,
    session: *mut *mut tcpls_session,
) -> c_int {
    guard::status("tcpls_connect", || {
        // SAFETY: the caller's promises on the strings are this function's.
        let addr = unsafe { raw::string(addr, "addr") }?;
        // SAFETY: as above.
        let server_name = unsafe { raw::optional_string(server_name, "server_name") }?;
        if session.is_null() {
            return Err(tcpls_bindings::Error::new(tcpls_bindings::ErrorKind::NullPointer, "session is NULL"));
        }
        let spec = config::spec(cfg)?;
        let core = SessionCore::connect(&spec, addr, server_name, Wait::from_millis(timeout_ms))?;
        let handle = handles::insert(handles::Object::Session(core));
        // SAFETY: the caller's promise on `session`.
        unsafe { raw::write_out(session, handle, "session") }
    })
}

/// Adds a path: a TCP connection to `path` ("[LOCAL@]REMOTE": LOCAL a local address such as
/// 127.0.0.2 or an interface dev:NAME, REMOTE "HOST:PORT", e.g. another address of the
/// server), joined to the session within `timeout_ms`. Stores its connection ID in `*conn` if
/// `conn` is not NULL.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string; `conn` is NULL or points to a uint32_t.
#[no_mangle]
pub unsafe extern "C" fn tcpls_session_add_path(
    session: *mut tcpls_session,
    path: *const c_char,
    timeout_ms: i64,
    conn: *mut u32,
) -> c_int {
    guard::status("tcpls_session_add_path", || {
        // SAFETY: the caller's promise on `path`.
        let path = unsafe { raw::string(path, "path") }?;
        let id = handles::session(session)?.add_path(path, Wait::from_millis(timeout_ms))?;
        if !conn.is_null() {
            // SAFETY: not NULL, and the caller's promise on `conn`.
            unsafe { raw::write_out(conn, id, "conn") }?;
        }
        Ok(())
    })
}

/// The next event of the session into `*event`, waiting at most `timeout_ms` (0: do not wait,
/// TCPLS_ERR_WOULD_BLOCK if none; negative: no limit). After TCPLS_EVENT_SESSION_CLOSED:
/// TCPLS_ERR_SESSION_ENDED. One thread at a time per session (TCPLS_ERR_BUSY otherwise).
///
/// # Safety
/// `event` is NULL or points to a tcpls_event.
#[no_mangle]
pub unsafe extern "C" fn tcpls_next_event(
    session: *mut tcpls_session,
    event: *mut tcpls_event,
    timeout_ms: i64,
) -> c_int {
    guard::status("tcpls_next_event", || {
        if event.is_null() {
            return Err(tcpls_bindings::Error::new(tcpls_bindings::ErrorKind::NullPointer, "event is NULL"));
        }
        let next = handles::session(session)?.next_event(Wait::from_millis(timeout_ms))?;
        let mut out = tcpls_event {
            kind: next.kind as i32,
            conn: next.conn,
            stream: next.stream,
            detail: [0; TCPLS_EVENT_DETAIL_LEN],
        };
        fill_c_string(&mut out.detail, &next.detail);
        // SAFETY: the caller's promise on `event`.
        unsafe { raw::write_out(event, out, "event") }
    })
}

/// Fills `stats[0..cap]` with the session's connections (paths), and returns how many the
/// session has (more than `cap` if the array was too small), or a negative code. `stats` may be
/// NULL when `cap` is 0, to count them.
///
/// # Safety
/// `stats` is NULL or points to `cap` tcpls_conn_stats.
#[no_mangle]
pub unsafe extern "C" fn tcpls_session_connections(
    session: *mut tcpls_session,
    stats: *mut tcpls_conn_stats,
    cap: usize,
) -> i64 {
    guard::count("tcpls_session_connections", || {
        let all = handles::session(session)?.connections();
        let total = all.len();
        let items = all
            .into_iter()
            .map(|c| {
                let mut out = tcpls_conn_stats {
                    id: c.id,
                    usable: i32::from(c.usable),
                    bytes_sent: c.bytes_sent,
                    bytes_received: c.bytes_received,
                    rtt_us: c.rtt_us,
                    rttvar_us: c.rttvar_us,
                    cwnd: c.cwnd,
                    total_retrans: c.total_retrans,
                    delivery_rate: c.delivery_rate,
                    local: [0; TCPLS_ADDR_LEN],
                    remote: [0; TCPLS_ADDR_LEN],
                };
                fill_c_string(&mut out.local, &c.local.map(|a| a.to_string()).unwrap_or_default());
                fill_c_string(&mut out.remote, &c.remote.map(|a| a.to_string()).unwrap_or_default());
                out
            })
            .collect();
        // SAFETY: the caller's promise on `stats`.
        unsafe { raw::write_array(stats, cap, items, "stats") }?;
        Ok(total)
    })
}

/// Drops path `conn` at once, as if it had failed (its data in flight is re-sent on the other
/// paths): for a path known to be dead.
#[no_mangle]
pub extern "C" fn tcpls_session_abandon_path(session: *mut tcpls_session, conn: u32) -> c_int {
    guard::status("tcpls_session_abandon_path", || handles::session(session)?.abandon_path(conn))
}

/// Moves the streams steered to path `from` over to path `to` and closes `from` gracefully.
#[no_mangle]
pub extern "C" fn tcpls_session_migrate(session: *mut tcpls_session, from: u32, to: u32) -> c_int {
    guard::status("tcpls_session_migrate", || handles::session(session)?.migrate(from, to))
}

/// How streams that are not steered spread over the session's paths:
/// TCPLS_SCHEDULER_LOWEST_RTT (the default) or TCPLS_SCHEDULER_ROUND_ROBIN (every path carries
/// data).
#[no_mangle]
pub extern "C" fn tcpls_session_set_scheduler(session: *mut tcpls_session, scheduler: c_int) -> c_int {
    guard::status("tcpls_session_set_scheduler", || {
        let round_robin = match scheduler {
            crate::TCPLS_SCHEDULER_LOWEST_RTT => false,
            crate::TCPLS_SCHEDULER_ROUND_ROBIN => true,
            other => return Err(tcpls_bindings::Error::invalid(format!("{other} is not a TCPLS_SCHEDULER_* value"))),
        };
        handles::session(session)?.set_round_robin(round_robin)
    })
}

/// 1 if the peer speaks plain TLS only (one stream, one path), 0 if TCPLS, or a negative code.
#[no_mangle]
pub extern "C" fn tcpls_session_is_fallback(session: *mut tcpls_session) -> c_int {
    let mut fallback = false;
    let status = guard::status("tcpls_session_is_fallback", || {
        fallback = handles::session(session)?.is_fallback();
        Ok(())
    });
    if status < 0 {
        status
    } else {
        c_int::from(fallback)
    }
}

/// A descriptor that becomes readable when a non-blocking call of this session (try_read,
/// try_write, an accept or an event with timeout 0) that returned TCPLS_ERR_WOULD_BLOCK is
/// worth trying again. Call tcpls_session_clear_fd before trying again. Valid until the
/// session is freed; do not close it. A negative code on error.
#[no_mangle]
pub extern "C" fn tcpls_session_fd(session: *mut tcpls_session) -> c_int {
    let mut fd = -1;
    let status = guard::status("tcpls_session_fd", || {
        fd = handles::session(session)?.readiness().fd();
        Ok(())
    });
    if status < 0 {
        status
    } else {
        fd
    }
}

/// Makes tcpls_session_fd unreadable until the next readiness. Call it after poll says the
/// descriptor is readable and before the non-blocking calls, so a readiness during them is
/// not lost.
#[no_mangle]
pub extern "C" fn tcpls_session_clear_fd(session: *mut tcpls_session) -> c_int {
    guard::status("tcpls_session_clear_fd", || {
        handles::session(session)?.readiness().clear();
        Ok(())
    })
}

/// Closes the session gracefully: what was written is delivered, then close_notify; waits for
/// the peer's (10 s at most, then aborts). Returns 0, or the session's error if it failed. The
/// handle stays valid (calls on it return TCPLS_ERR_CLOSED) until tcpls_session_free.
#[no_mangle]
pub extern "C" fn tcpls_session_close(session: *mut tcpls_session) -> c_int {
    guard::status("tcpls_session_close", || handles::session(session)?.close())
}

/// Ends the session at once, dropping what is not sent yet.
#[no_mangle]
pub extern "C" fn tcpls_session_abort(session: *mut tcpls_session) -> c_int {
    guard::status("tcpls_session_abort", || {
        handles::session(session)?.abort();
        Ok(())
    })
}

/// Frees the session handle (aborting the session if it was not closed). Free its streams
/// first: their calls fail once the session is gone.
#[no_mangle]
pub extern "C" fn tcpls_session_free(session: *mut tcpls_session) -> c_int {
    guard::status("tcpls_session_free", || handles::remove_session(session).map(drop))
}
