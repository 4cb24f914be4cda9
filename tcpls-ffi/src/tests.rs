//! The C API called as C calls it, bad input first: every misuse the header names returns its
//! error code (and a message), never a crash.
#![allow(unsafe_code, clippy::unwrap_used)]

use std::ffi::{c_char, c_void, CStr, CString};
use std::path::PathBuf;
use std::ptr::{null, null_mut};
use std::time::Duration;

use super::*;

fn last_error() -> String {
    // SAFETY: tcpls_last_error never returns NULL and its string lives until the next failure.
    unsafe { CStr::from_ptr(tcpls_last_error()) }.to_string_lossy().into_owned()
}

fn c(s: &str) -> CString {
    CString::new(s).unwrap()
}

/// A directory with a fresh self-signed certificate for localhost and 127.0.0.1.
struct Certs {
    dir: PathBuf,
}

impl Certs {
    fn new(tag: &str) -> Certs {
        let pki = tcpls_test::Pki::new();
        let dir = std::env::temp_dir().join(format!("tcpls-ffi-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("cert.pem"), &pki.cert_pem).unwrap();
        std::fs::write(dir.join("key.pem"), &pki.key_pem).unwrap();
        Certs { dir }
    }

    fn path(&self, name: &str) -> CString {
        c(self.dir.join(name).to_str().unwrap())
    }
}

impl Drop for Certs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A handle value that only C code could hold.
struct Sendable<T>(*mut T);
// SAFETY: handles are keys, not pointers to memory; any thread may pass them back to the library.
unsafe impl<T> Send for Sendable<T> {}

/// An echo server on 127.0.0.1 made with the C API; returns its address.
fn echo_server(certs: &Certs) -> String {
    let cfg = tcpls_config_new();
    // SAFETY: valid C strings.
    unsafe {
        assert_eq!(
            tcpls_config_set_certificate(cfg, certs.path("cert.pem").as_ptr(), certs.path("key.pem").as_ptr()),
            0
        );
    }
    let mut listener = null_mut();
    // SAFETY: valid C string and out-pointer.
    assert_eq!(unsafe { tcpls_listen(cfg, c("127.0.0.1:0").as_ptr(), &mut listener) }, 0, "{}", last_error());
    tcpls_config_free(cfg);
    let port = tcpls_listener_port(listener, 0);
    assert!(port > 0);
    let listener = Sendable(listener);
    std::thread::spawn(move || {
        let listener = listener;
        loop {
            let mut session = null_mut();
            // SAFETY: valid out-pointer.
            if unsafe { tcpls_accept(listener.0, -1, &mut session) } != 0 {
                return;
            }
            let session = Sendable(session);
            std::thread::spawn(move || {
                let session = session;
                loop {
                    let mut stream = null_mut();
                    // SAFETY: valid out-pointer.
                    if unsafe { tcpls_stream_accept(session.0, -1, &mut stream) } != 0 {
                        tcpls_session_free(session.0);
                        return;
                    }
                    let stream = Sendable(stream);
                    std::thread::spawn(move || {
                        let stream = stream;
                        let mut buf = vec![0u8; 65536];
                        loop {
                            // SAFETY: buf has buf.len() writable bytes.
                            let n = unsafe { tcpls_stream_read(stream.0, buf.as_mut_ptr().cast(), buf.len(), -1) };
                            if n <= 0 {
                                break;
                            }
                            // SAFETY: n bytes of buf are initialised.
                            let w = unsafe { tcpls_stream_write(stream.0, buf.as_ptr().cast(), n as usize, -1) };
                            assert_eq!(w, n);
                        }
                        tcpls_stream_shutdown(stream.0);
                        tcpls_stream_free(stream.0);
                    });
                }
            });
        }
    });
    format!("127.0.0.1:{port}")
}

/// A client session trusting `certs`.
fn connect(certs: &Certs, addr: &str) -> *mut tcpls_session {
    let cfg = tcpls_config_new();
    // SAFETY: valid C string.
    assert_eq!(unsafe { tcpls_config_set_ca_file(cfg, certs.path("cert.pem").as_ptr()) }, 0);
    let mut session = null_mut();
    // SAFETY: valid C strings and out-pointer.
    let rc = unsafe { tcpls_connect(cfg, c(addr).as_ptr(), c("localhost").as_ptr(), 10_000, &mut session) };
    assert_eq!(rc, 0, "{}", last_error());
    tcpls_config_free(cfg);
    session
}

fn write_all(stream: *mut tcpls_stream, data: &[u8]) {
    // SAFETY: data has data.len() readable bytes.
    let n = unsafe { tcpls_stream_write(stream, data.as_ptr().cast(), data.len(), 10_000) };
    assert_eq!(n, data.len() as i64, "{}", last_error());
}

fn read_to_end(stream: *mut tcpls_stream) -> Vec<u8> {
    let mut out = Vec::new();
    let mut buf = vec![0u8; 100_000];
    loop {
        // SAFETY: buf has buf.len() writable bytes.
        let n = unsafe { tcpls_stream_read(stream, buf.as_mut_ptr().cast(), buf.len(), 10_000) };
        assert!(n >= 0, "read failed: {}", last_error());
        if n == 0 {
            return out;
        }
        out.extend_from_slice(&buf[..n as usize]);
    }
}

#[test]
fn error_constants_match_the_shared_error_kinds() {
    let constants = [
        TCPLS_ERR_NULL,
        TCPLS_ERR_INVALID_ARGUMENT,
        TCPLS_ERR_INVALID_HANDLE,
        TCPLS_ERR_CLOSED,
        TCPLS_ERR_BUSY,
        TCPLS_ERR_TIMEOUT,
        TCPLS_ERR_WOULD_BLOCK,
        TCPLS_ERR_TLS,
        TCPLS_ERR_CONNECT,
        TCPLS_ERR_IO,
        TCPLS_ERR_RESET,
        TCPLS_ERR_SESSION_ENDED,
        TCPLS_ERR_CONFIG,
        TCPLS_ERR_INTERNAL,
    ];
    for (kind, constant) in ErrorKind::ALL.iter().zip(constants) {
        assert_eq!(kind.code(), constant, "{kind:?}");
        // SAFETY: tcpls_error_name returns a static NUL-terminated string.
        let name = unsafe { CStr::from_ptr(tcpls_error_name(i64::from(constant))) };
        assert_eq!(name.to_str().unwrap(), kind.name());
    }
    assert_eq!(TCPLS_MAX_IO_LEN, tcpls_bindings::MAX_IO_LEN);
    assert_eq!(tcpls_bindings::EventKind::SessionClosed as i32, TCPLS_EVENT_SESSION_CLOSED);
    assert_eq!(tcpls_bindings::EventKind::StreamOpened as i32, TCPLS_EVENT_STREAM_OPENED);
}

#[test]
fn null_pointers_are_errors_with_a_message() {
    let cfg = tcpls_config_new();
    assert!(!cfg.is_null());
    // SAFETY (all calls below): every pointer is NULL or valid; NULL is what is tested.
    unsafe {
        assert_eq!(tcpls_config_set_ca_file(null_mut(), c("x").as_ptr()), TCPLS_ERR_NULL);
        assert!(last_error().contains("TCPLS_ERR_NULL"), "{}", last_error());
        assert_eq!(tcpls_config_set_ca_file(cfg, null()), TCPLS_ERR_NULL);
        assert!(last_error().contains("path is NULL"), "{}", last_error());
        assert_eq!(tcpls_config_set_insecure(null_mut(), 1), TCPLS_ERR_NULL);
        assert_eq!(tcpls_config_set_certificate(cfg, null(), c("k").as_ptr()), TCPLS_ERR_NULL);
        let mut session = null_mut();
        assert_eq!(tcpls_connect(null(), c("127.0.0.1:1").as_ptr(), null(), 100, &mut session), TCPLS_ERR_NULL);
        assert_eq!(tcpls_connect(cfg, null(), null(), 100, &mut session), TCPLS_ERR_NULL);
        assert_eq!(tcpls_connect(cfg, c("127.0.0.1:1").as_ptr(), null(), 100, null_mut()), TCPLS_ERR_NULL);
        let mut stream = null_mut();
        assert_eq!(tcpls_stream_open(null_mut(), &mut stream), TCPLS_ERR_NULL);
        assert_eq!(tcpls_stream_accept(null_mut(), 0, &mut stream), TCPLS_ERR_NULL);
        let mut buf = [0u8; 8];
        assert_eq!(tcpls_stream_write(null_mut(), buf.as_ptr().cast(), 8, 0), i64::from(TCPLS_ERR_NULL));
        assert_eq!(tcpls_stream_read(null_mut(), buf.as_mut_ptr().cast(), 8, 0), i64::from(TCPLS_ERR_NULL));
        assert_eq!(tcpls_stream_try_read(null_mut(), buf.as_mut_ptr().cast(), 8), i64::from(TCPLS_ERR_NULL));
        assert_eq!(tcpls_stream_try_write(null_mut(), buf.as_ptr().cast(), 8), i64::from(TCPLS_ERR_NULL));
        assert_eq!(tcpls_stream_shutdown(null_mut()), TCPLS_ERR_NULL);
        assert_eq!(tcpls_stream_free(null_mut()), TCPLS_ERR_NULL);
        assert_eq!(tcpls_session_close(null_mut()), TCPLS_ERR_NULL);
        assert_eq!(tcpls_session_free(null_mut()), TCPLS_ERR_NULL);
        assert_eq!(tcpls_session_fd(null_mut()), TCPLS_ERR_NULL);
        assert_eq!(tcpls_next_event(null_mut(), null_mut(), 0), TCPLS_ERR_NULL);
        assert_eq!(tcpls_session_connections(null_mut(), null_mut(), 0), i64::from(TCPLS_ERR_NULL));
        assert_eq!(tcpls_listen(cfg, null(), null_mut()), TCPLS_ERR_NULL);
        assert_eq!(tcpls_accept(null_mut(), 0, null_mut()), TCPLS_ERR_NULL);
        assert_eq!(tcpls_listener_free(null_mut()), TCPLS_ERR_NULL);
        assert_eq!(tcpls_config_free(null_mut()), TCPLS_ERR_NULL);
    }
    assert_eq!(tcpls_config_free(cfg), 0);
}

#[test]
fn forged_freed_and_mistyped_handles_are_errors() {
    let forged = std::ptr::without_provenance_mut::<tcpls_session>(0xdead_bee0);
    assert_eq!(tcpls_session_close(forged), TCPLS_ERR_INVALID_HANDLE);
    assert!(last_error().contains("not a live tcpls_session handle"), "{}", last_error());
    let cfg = tcpls_config_new();
    assert_eq!(tcpls_session_close(cfg.cast()), TCPLS_ERR_INVALID_HANDLE, "a config is not a session");
    assert!(last_error().contains("tcpls_config handle was passed"), "{}", last_error());
    assert_eq!(tcpls_config_free(cfg), 0);
    assert_eq!(tcpls_config_free(cfg), TCPLS_ERR_INVALID_HANDLE, "double free");
    assert_eq!(tcpls_config_set_insecure(cfg, 1), TCPLS_ERR_INVALID_HANDLE, "use after free");
    let mut session = null_mut();
    // SAFETY: valid strings and out-pointer; the config handle is the freed one.
    let rc = unsafe { tcpls_connect(cfg, c("127.0.0.1:1").as_ptr(), null(), 100, &mut session) };
    assert_eq!(rc, TCPLS_ERR_INVALID_HANDLE);
    assert!(session.is_null(), "nothing stored on failure");
}

#[test]
fn bad_arguments_are_errors() {
    let cfg = tcpls_config_new();
    let mut session = null_mut();
    // SAFETY (all calls): valid strings and out-pointers.
    unsafe {
        for bad in ["", "localhost", "127.0.0.1", "127.0.0.1:99999", ":80"] {
            assert_eq!(
                tcpls_connect(cfg, c(bad).as_ptr(), null(), 100, &mut session),
                TCPLS_ERR_INVALID_ARGUMENT,
                "{bad:?}"
            );
            assert!(last_error().contains("HOST:PORT"), "{}", last_error());
        }
        let not_utf8 = [0xffu8, 0xfe, 0];
        assert_eq!(tcpls_connect(cfg, not_utf8.as_ptr().cast(), null(), 100, &mut session), TCPLS_ERR_INVALID_ARGUMENT);
        let mut listener = null_mut();
        assert_eq!(tcpls_listen(cfg, c("127.0.0.1:0").as_ptr(), &mut listener), TCPLS_ERR_CONFIG, "no certificate");
        assert!(last_error().contains("tcpls_config_set_certificate"), "{}", last_error());
        assert_eq!(tcpls_config_set_ca_file(cfg, c("/nonexistent/ca.pem").as_ptr()), 0, "read when used");
        assert_eq!(tcpls_connect(cfg, c("127.0.0.1:1").as_ptr(), null(), 100, &mut session), TCPLS_ERR_CONFIG);
        assert!(last_error().contains("/nonexistent/ca.pem"), "{}", last_error());
    }
    tcpls_config_free(cfg);
}

#[test]
fn a_refused_connection_is_a_connect_error() {
    let closed = tcpls_test::net::closed_port().unwrap();
    let cfg = tcpls_config_new();
    tcpls_config_set_insecure(cfg, 1);
    let mut session = null_mut();
    // SAFETY: valid strings and out-pointer.
    let rc = unsafe { tcpls_connect(cfg, c(&closed.to_string()).as_ptr(), null(), 5000, &mut session) };
    assert_eq!(rc, TCPLS_ERR_CONNECT, "{}", last_error());
    assert!(last_error().contains(&closed.to_string()), "{}", last_error());
    tcpls_config_free(cfg);
}

#[test]
fn a_wrong_ca_is_a_tls_error_that_says_what_to_do() {
    let server_certs = Certs::new("wrong-ca-server");
    let other = Certs::new("wrong-ca-other");
    let addr = echo_server(&server_certs);
    let cfg = tcpls_config_new();
    // SAFETY: valid strings and out-pointer.
    unsafe {
        assert_eq!(tcpls_config_set_ca_file(cfg, other.path("cert.pem").as_ptr()), 0);
        let mut session = null_mut();
        let rc = tcpls_connect(cfg, c(&addr).as_ptr(), c("localhost").as_ptr(), 10_000, &mut session);
        assert_eq!(rc, TCPLS_ERR_TLS, "{}", last_error());
    }
    // Both certificates are self-signed for the same names: rustls finds the issuer by name and
    // then the signature wrong.
    let message = last_error();
    assert!(message.contains("UnknownIssuer") || message.contains("BadSignature"), "{message}");
    assert!(message.contains("tcpls_config_set_ca_file"), "says what to set: {message}");
    tcpls_config_free(cfg);
}

#[test]
fn echo_events_stats_and_handles_after_close() {
    let certs = Certs::new("echo");
    let addr = echo_server(&certs);
    let session = connect(&certs, &addr);
    assert_eq!(tcpls_session_is_fallback(session), 0);
    let mut stream = null_mut();
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { tcpls_stream_open(session, &mut stream) }, 0);
    assert!(tcpls_stream_id(stream) >= 0);
    let data = tcpls_test::payload(3 << 20, 7);
    let writer = {
        let (stream, data) = (Sendable(stream), data.clone());
        std::thread::spawn(move || {
            let stream = stream;
            write_all(stream.0, &data);
            assert_eq!(tcpls_stream_shutdown(stream.0), 0);
            // SAFETY: a valid buffer; the stream is shut down.
            let again = unsafe { tcpls_stream_write(stream.0, b"x".as_ptr().cast(), 1, 0) };
            assert_eq!(again, i64::from(TCPLS_ERR_CLOSED), "write after shutdown");
        })
    };
    let echoed = read_to_end(stream);
    writer.join().unwrap();
    assert!(echoed == data, "the echo differs from what was sent ({} of {} bytes)", echoed.len(), data.len());

    let mut stats: Vec<tcpls_conn_stats> = Vec::with_capacity(4);
    // SAFETY: room for 4 stats.
    let n = unsafe { tcpls_session_connections(session, stats.as_mut_ptr(), 4) };
    assert_eq!(n, 1, "{}", last_error());
    // SAFETY: the library initialised the first n entries.
    unsafe { stats.set_len(1) };
    assert_eq!(stats[0].usable, 1);
    assert!(stats[0].bytes_sent > 3 << 20 && stats[0].bytes_received > 3 << 20);
    assert!(stats[0].rtt_us > 0 && stats[0].cwnd > 0, "TCP_INFO is read");
    // SAFETY: the library NUL-terminates the address.
    let remote = unsafe { CStr::from_ptr(stats[0].remote.as_ptr()) };
    assert_eq!(remote.to_str().unwrap(), addr);

    assert_eq!(tcpls_stream_free(stream), 0);
    assert_eq!(tcpls_stream_free(stream), TCPLS_ERR_INVALID_HANDLE, "a freed stream");
    let mut orphan = null_mut();
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { tcpls_stream_open(session, &mut orphan) }, 0);
    assert_eq!(tcpls_session_close(session), 0, "{}", last_error());
    // A stream of a closed session: errors, at once, whatever the timeout.
    let mut buf = [0u8; 16];
    // SAFETY: 16 readable and writable bytes.
    unsafe {
        let wrote = tcpls_stream_write(orphan, buf.as_ptr().cast(), 16, -1);
        assert!(wrote < 0, "a write after the session closed: {wrote}");
        let read = tcpls_stream_read(orphan, buf.as_mut_ptr().cast(), 16, -1);
        assert!(read < 0, "a read after the session closed: {read}");
        assert!(tcpls_stream_try_read(orphan, buf.as_mut_ptr().cast(), 16) < 0);
    }
    assert_eq!(tcpls_stream_free(orphan), 0);
    assert_eq!(tcpls_session_close(session), TCPLS_ERR_CLOSED, "closed twice");
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { tcpls_stream_open(session, &mut stream) }, TCPLS_ERR_CLOSED);
    assert!(last_error().contains("closed by the application"), "{}", last_error());
    let mut event = std::mem::MaybeUninit::<tcpls_event>::uninit();
    let mut kinds = Vec::new();
    loop {
        // SAFETY: room for one event.
        let rc = unsafe { tcpls_next_event(session, event.as_mut_ptr(), 5000) };
        if rc != 0 {
            assert_eq!(rc, TCPLS_ERR_SESSION_ENDED, "{}", last_error());
            break;
        }
        // SAFETY: filled by the library on success.
        kinds.push(unsafe { event.assume_init_ref() }.kind);
    }
    assert_eq!(kinds.last(), Some(&TCPLS_EVENT_SESSION_CLOSED), "{kinds:?}");
    assert_eq!(tcpls_session_free(session), 0);
    assert_eq!(tcpls_session_free(session), TCPLS_ERR_INVALID_HANDLE);
}

#[test]
fn oversized_lengths_and_empty_buffers_are_errors() {
    let certs = Certs::new("oversized");
    let addr = echo_server(&certs);
    let session = connect(&certs, &addr);
    let mut stream = null_mut();
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { tcpls_stream_open(session, &mut stream) }, 0);
    let mut small = [0u8; 16];
    // SAFETY: the lengths lie; the library must reject them before touching the buffer.
    unsafe {
        for len in [usize::MAX, isize::MAX as usize, TCPLS_MAX_IO_LEN + 1] {
            assert_eq!(
                tcpls_stream_write(stream, small.as_ptr().cast(), len, 0),
                i64::from(TCPLS_ERR_INVALID_ARGUMENT)
            );
            assert!(last_error().contains("more than one call takes"), "{}", last_error());
            assert_eq!(
                tcpls_stream_read(stream, small.as_mut_ptr().cast(), len, 0),
                i64::from(TCPLS_ERR_INVALID_ARGUMENT)
            );
            assert_eq!(
                tcpls_stream_try_write(stream, small.as_ptr().cast(), len),
                i64::from(TCPLS_ERR_INVALID_ARGUMENT)
            );
            assert_eq!(
                tcpls_stream_try_read(stream, small.as_mut_ptr().cast(), len),
                i64::from(TCPLS_ERR_INVALID_ARGUMENT)
            );
            let many = tcpls_session_connections(session, small.as_mut_ptr().cast(), len);
            assert_eq!(many, i64::from(TCPLS_ERR_INVALID_ARGUMENT));
        }
        assert_eq!(tcpls_stream_read(stream, small.as_mut_ptr().cast(), 0, 0), i64::from(TCPLS_ERR_INVALID_ARGUMENT));
        assert_eq!(tcpls_stream_write(stream, null::<c_void>(), 0, 0), 0, "an empty write is fine");
        assert_eq!(tcpls_stream_write(stream, null::<c_void>(), 5, 0), i64::from(TCPLS_ERR_NULL));
        let mut addr_buf = [0 as c_char; 4];
        let listener_addr = tcpls_listener_address(null_mut(), 0, addr_buf.as_mut_ptr(), 4);
        assert_eq!(listener_addr, i64::from(TCPLS_ERR_NULL));
    }
    tcpls_stream_free(stream);
    tcpls_session_close(session);
    tcpls_session_free(session);
}

#[test]
fn a_second_reader_on_another_thread_is_busy_and_nonblocking_reads_wake_the_fd() {
    let certs = Certs::new("busy");
    let addr = echo_server(&certs);
    let session = connect(&certs, &addr);
    let mut stream = null_mut();
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { tcpls_stream_open(session, &mut stream) }, 0);
    // A reader waiting (nothing was sent, so nothing comes back) ...
    let reader = {
        let stream = Sendable(stream);
        std::thread::spawn(move || {
            let stream = stream;
            let mut buf = [0u8; 16];
            loop {
                // SAFETY: 16 writable bytes.
                let rc = unsafe { tcpls_stream_read(stream.0, buf.as_mut_ptr().cast(), 16, 4000) };
                // The main thread's quick attempts may hold the reading side for a moment.
                if rc != i64::from(TCPLS_ERR_BUSY) {
                    return rc;
                }
            }
        })
    };
    // ... so a second reader is refused, as the header says; retried until the first one is
    // surely inside its call.
    let mut buf = [0u8; 16];
    let deadline = std::time::Instant::now() + Duration::from_secs(4);
    loop {
        // SAFETY: 16 writable bytes.
        let rc = unsafe { tcpls_stream_read(stream, buf.as_mut_ptr().cast(), 16, 0) };
        if rc == i64::from(TCPLS_ERR_BUSY) {
            assert!(last_error().contains("one reader and one writer"), "{}", last_error());
            break;
        }
        assert_eq!(rc, i64::from(TCPLS_ERR_TIMEOUT), "{}", last_error());
        assert!(std::time::Instant::now() < deadline, "the first reader never got in");
        std::thread::yield_now();
    }
    assert_eq!(reader.join().unwrap(), i64::from(TCPLS_ERR_TIMEOUT));

    // Non-blocking: nothing to read, then the descriptor says when there is.
    // SAFETY: 16 writable bytes.
    assert_eq!(unsafe { tcpls_stream_try_read(stream, buf.as_mut_ptr().cast(), 16) }, i64::from(TCPLS_ERR_WOULD_BLOCK));
    let fd = tcpls_session_fd(session);
    assert!(fd >= 0);
    assert_eq!(tcpls_session_clear_fd(session), 0);
    write_all(stream, b"ping");
    let mut got = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while got.len() < 4 {
        assert!(std::time::Instant::now() < deadline, "the echo never came");
        let mut pfd = [PollFd { fd, events: POLLIN, revents: 0 }];
        poll(&mut pfd, 1000);
        tcpls_session_clear_fd(session);
        // SAFETY: 16 writable bytes.
        let n = unsafe { tcpls_stream_try_read(stream, buf.as_mut_ptr().cast(), 16) };
        if n == i64::from(TCPLS_ERR_WOULD_BLOCK) {
            continue;
        }
        assert!(n > 0, "{}", last_error());
        got.extend_from_slice(&buf[..n as usize]);
    }
    assert_eq!(got, b"ping");
    tcpls_stream_free(stream);
    tcpls_session_close(session);
    tcpls_session_free(session);
}

#[repr(C)]
struct PollFd {
    fd: i32,
    events: i16,
    revents: i16,
}

const POLLIN: i16 = 1;

extern "C" {
    #[link_name = "poll"]
    fn c_poll(fds: *mut PollFd, n: u64, timeout_ms: i32) -> i32;
}

fn poll(fds: &mut [PollFd], timeout_ms: i32) -> i32 {
    // SAFETY: `fds` is a valid array of pollfd for its length.
    unsafe { c_poll(fds.as_mut_ptr(), fds.len() as u64, timeout_ms) }
}

extern "C" fn collect(userdata: *mut c_void, data: *const u8, len: usize) -> usize {
    // SAFETY: userdata is the Vec passed by the test below; data has len readable bytes.
    let (out, chunk) = unsafe { (&mut *userdata.cast::<Vec<u8>>(), std::slice::from_raw_parts(data, len)) };
    let take = len.min(1000); // uses part of what is offered: the rest must come again
    out.extend_from_slice(&chunk[..take]);
    take
}

extern "C" fn use_nothing(_: *mut c_void, _: *const u8, _: usize) -> usize {
    0
}

#[test]
fn zero_copy_reads_get_every_byte_once_and_refuse_a_callback_that_uses_none() {
    let certs = Certs::new("read-with");
    let addr = echo_server(&certs);
    let session = connect(&certs, &addr);
    let mut stream = null_mut();
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { tcpls_stream_open(session, &mut stream) }, 0);
    let data = tcpls_test::payload(200_000, 3);
    write_all(stream, &data);
    // SAFETY (all calls): the callbacks honour the contract; userdata is what they expect.
    unsafe {
        assert_eq!(tcpls_stream_read_with(stream, None, null_mut(), 1000), i64::from(TCPLS_ERR_NULL));
        let rc = tcpls_stream_read_with(stream, Some(use_nothing), null_mut(), 10_000);
        assert_eq!(rc, i64::from(TCPLS_ERR_INVALID_ARGUMENT), "{}", last_error());
        assert_eq!(tcpls_stream_shutdown(stream), 0);
        let mut got: Vec<u8> = Vec::new();
        loop {
            let n = tcpls_stream_read_with(stream, Some(collect), (&mut got as *mut Vec<u8>).cast(), 10_000);
            assert!(n >= 0, "{}", last_error());
            if n == 0 {
                break;
            }
            assert!(n <= 1000);
        }
        assert!(got == data, "{} bytes back of {}", got.len(), data.len());
    }
    tcpls_stream_free(stream);
    tcpls_session_close(session);
    tcpls_session_free(session);
}

#[test]
fn freeing_a_listener_ends_an_accept_waiting_on_another_thread() {
    let certs = Certs::new("listener-free");
    let cfg = tcpls_config_new();
    let mut listener = null_mut();
    // SAFETY: valid strings and out-pointer.
    unsafe {
        assert_eq!(
            tcpls_config_set_certificate(cfg, certs.path("cert.pem").as_ptr(), certs.path("key.pem").as_ptr()),
            0
        );
        assert_eq!(tcpls_listen(cfg, c("127.0.0.1:0").as_ptr(), &mut listener), 0, "{}", last_error());
    }
    tcpls_config_free(cfg);
    let waiting = {
        let listener = Sendable(listener);
        std::thread::spawn(move || {
            let listener = listener;
            let mut session = null_mut();
            // SAFETY: valid out-pointer.
            let rc = unsafe { tcpls_accept(listener.0, 20_000, &mut session) };
            (rc, last_error())
        })
    };
    // Whether the accept is already waiting or not yet started, it must end with an error
    // (closed, or the handle gone), well before its 20 s timeout.
    assert_eq!(tcpls_listener_free(listener), 0);
    let started = std::time::Instant::now();
    let (rc, message) = waiting.join().unwrap();
    assert!(rc == TCPLS_ERR_CLOSED || rc == TCPLS_ERR_INVALID_HANDLE, "{rc}: {message}");
    assert!(started.elapsed() < Duration::from_secs(10), "the accept waited for its timeout");
}

/// The next event of `session` (5 s at most), as (kind, conn, stream).
fn next_event(session: *mut tcpls_session) -> (i32, u32, u32) {
    let mut event = std::mem::MaybeUninit::<tcpls_event>::uninit();
    // SAFETY: room for one event.
    let rc = unsafe { tcpls_next_event(session, event.as_mut_ptr(), 5000) };
    assert_eq!(rc, 0, "{}", last_error());
    // SAFETY: filled by the library on success.
    let e = unsafe { event.assume_init_ref() };
    (e.kind, e.conn, e.stream)
}

#[test]
fn a_second_path_comes_up_takes_a_migrated_stream_and_the_first_goes_down() {
    let certs = Certs::new("migrate");
    let cfg = tcpls_config_new();
    let mut listener = null_mut();
    // SAFETY: valid strings and out-pointer.
    unsafe {
        assert_eq!(
            tcpls_config_set_certificate(cfg, certs.path("cert.pem").as_ptr(), certs.path("key.pem").as_ptr()),
            0
        );
        assert_eq!(tcpls_listen(cfg, c("127.0.0.1:0").as_ptr(), &mut listener), 0, "{}", last_error());
        assert_eq!(tcpls_listener_add_address(listener, c("127.0.0.2:0").as_ptr()), 0, "{}", last_error());
    }
    tcpls_config_free(cfg);
    let mut second = [0 as c_char; 64];
    // SAFETY: 64 writable bytes.
    assert!(unsafe { tcpls_listener_address(listener, 1, second.as_mut_ptr(), 64) } > 0);
    // SAFETY: NUL-terminated by the library.
    let second = unsafe { CStr::from_ptr(second.as_ptr()) }.to_str().unwrap().to_string();
    let first = format!("127.0.0.1:{}", tcpls_listener_port(listener, 0));
    let server = {
        let listener = Sendable(listener);
        std::thread::spawn(move || {
            let listener = listener;
            let mut session = null_mut();
            // SAFETY: valid out-pointer.
            assert_eq!(unsafe { tcpls_accept(listener.0, 10_000, &mut session) }, 0, "{}", last_error());
            let mut stream = null_mut();
            // SAFETY: valid out-pointer.
            assert_eq!(unsafe { tcpls_stream_accept(session, 10_000, &mut stream) }, 0, "{}", last_error());
            let got = read_to_end(stream);
            tcpls_stream_free(stream);
            tcpls_session_close(session);
            tcpls_session_free(session);
            tcpls_listener_free(listener.0);
            got
        })
    };
    let session = connect(&certs, &first);
    let mut conn = u32::MAX;
    // SAFETY: valid string and out-pointer.
    let rc = unsafe { tcpls_session_add_path(session, c(&format!("127.0.0.2@{second}")).as_ptr(), 10_000, &mut conn) };
    assert_eq!(rc, 0, "{}", last_error());
    assert_eq!(conn, 1);
    assert_eq!(next_event(session), (TCPLS_EVENT_PATH_UP, 1, 0));
    let mut stream = null_mut();
    // SAFETY: valid out-pointer.
    assert_eq!(unsafe { tcpls_stream_open(session, &mut stream) }, 0);
    let id = tcpls_stream_id(stream) as u32;
    assert_eq!(tcpls_stream_steer(stream, 0), 0, "{}", last_error());
    assert_eq!(next_event(session), (TCPLS_EVENT_MIGRATION, 0, id));
    write_all(stream, b"before ");
    assert_eq!(tcpls_session_migrate(session, 0, 1), 0, "{}", last_error());
    assert_eq!(next_event(session), (TCPLS_EVENT_MIGRATION, 1, id));
    write_all(stream, b"after");
    assert_eq!(tcpls_stream_shutdown(stream), 0);
    let (kind, conn, _) = next_event(session);
    assert_eq!((kind, conn), (TCPLS_EVENT_PATH_DOWN, 0), "the first path closed after the migration");
    assert_eq!(server.join().unwrap(), b"before after");
    assert_eq!(tcpls_stream_steer(stream, 1), TCPLS_ERR_CLOSED, "the sending side is shut down");
    tcpls_stream_free(stream);
    tcpls_session_close(session);
    tcpls_session_free(session);
}
