//! The task that owns a session's TCP sockets and moves bytes between them and the core.
//!
//! Reads go straight into the core's connection buffers, as much as the socket has (up to
//! 256 KiB at a time); writes hand the kernel everything sealed so far. The driver runs until
//! every connection is finished and flushed.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use std::os::fd::AsRawFd;
use tokio::io::{AsyncWrite, ReadBuf};

use tokio::net::TcpStream;

use crate::session::Session;
use crate::shared::{NewSocket, SessionState, Shared};
use tcpls_proto::ConnId;

struct Socket {
    id: ConnId,
    stream: Option<TcpStream>,
    write_shut: bool,
}

pub(crate) struct Driver {
    shared: Shared,
    sockets: Vec<Socket>,
    trim: TrimClock,
    /// Last time the scheduler and the send budget were told each path's TCP_INFO (None: not
    /// yet; the first poll does, so a session's budget follows its path from the start).
    last_path_info: Option<Instant>,
    /// Wakes the driver when the core asks to be polled again (rate-limit tokens).
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    /// A task is adding a connection to this orphaned client session.
    rejoining: bool,
}

/// When the driver gives back the memory of drained buffers.
struct TrimClock {
    /// Last time idle stream and connection buffers were given back.
    last_trim: Instant,
    /// Last time the driver looked at how much memory a trim would give back (a walk over
    /// every stream: at most once per TRIM_CHECK, not at every poll of a busy session).
    trim_checked: Instant,
    /// What that look found: enough to be worth a wake-up when the trim is due.
    trim_wanted: bool,
}

/// How often the scheduler learns each connection's RTT and congestion window from TCP_INFO.
const PATH_INFO_INTERVAL: std::time::Duration = std::time::Duration::from_millis(100);

/// Feeds TCP_INFO (RTT, congestion window, delivery rate, unsent bytes) of every connection to
/// the core's scheduler.
fn update_path_info(inner: &mut SessionState) {
    let conns: Vec<_> = inner.fds().map(|(conn, _)| conn).collect();
    for conn in conns {
        if let Some(info) = inner.path_info(conn) {
            inner.proto.set_path(conn, info);
            inner.tune_notsent_lowat(conn, info.delivery_rate);
        }
    }
}

/// How often a quiet session returns the memory of drained buffers.
const TRIM_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);
/// Least memory worth a wake-up of a quiet session to release it (a few bytes of scratch after
/// a keepalive are not).
const TRIM_WORTH: usize = 4096;
/// How often a polled session with many streams works out what a trim would release.
const TRIM_CHECK: std::time::Duration = std::time::Duration::from_millis(50);
/// Streams up to which that is cheap enough to do at every poll (no extra timer).
const TRIM_CHECK_ALWAYS: usize = 64;

/// Rounds of read/transmit per poll before yielding to other tasks (fairness between sessions).
const ROUNDS_PER_POLL: usize = 16;

impl Driver {
    pub(crate) fn new(shared: Shared, conn: ConnId, stream: TcpStream) -> Self {
        shared.lock().add_fd(conn, stream.as_raw_fd());
        Self {
            shared,
            sockets: vec![Socket { id: conn, stream: Some(stream), write_shut: false }],
            trim: TrimClock { last_trim: Instant::now(), trim_checked: Instant::now(), trim_wanted: false },
            last_path_info: None,
            rejoining: false,
            timer: None,
        }
    }
}

impl Future for Driver {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        let mut inner = this.shared.lock();
        let added = inner.take_new_sockets();
        for new in added {
            let id = new.id;
            match adopt(new) {
                Ok(stream) => {
                    inner.add_fd(id, stream.as_raw_fd());
                    this.sockets.push(Socket { id, stream: Some(stream), write_shut: false });
                }
                Err(e) => {
                    let why = format!("cannot move the joined connection to its session's runtime: {e}");
                    inner.proto.handle_io_error(id, &why, Instant::now());
                }
            }
        }
        if this.last_path_info.is_none_or(|at| at.elapsed() >= PATH_INFO_INTERVAL) {
            this.last_path_info = Some(Instant::now());
            update_path_info(&mut inner);
        }
        let mut busy = true;
        for _ in 0..ROUNDS_PER_POLL {
            let now = Instant::now();
            if !move_bytes_once(&mut inner, &mut this.sockets, cx, now) {
                busy = false;
                this.trim.release_if_due(&mut inner, now);
                break;
            }
        }
        inner.trace_sample(false);
        // An orphaned session (every connection lost) lives on until a rejoin or its deadline.
        if this.sockets.iter().all(|s| s.stream.is_none()) && !inner.proto.is_orphaned() {
            inner.driver_finished();
            return Poll::Ready(());
        }
        rejoin_if_orphaned(&inner, &this.shared, &mut this.rejoining);
        inner.set_driver_waker(cx.waker());
        let trim_at = this.trim.next_wake(&inner);
        let wake_at = match (inner.proto.poll_timeout(), trim_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        if let Some(at) = wake_at {
            if arm_timer(&mut this.timer, at, cx) {
                busy = true;
            }
        }
        drop(inner);
        if busy {
            // Still work to do: let other tasks run, then come back.
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }
}

/// A joined connection's socket, registered with this driver's runtime. One accepted by a
/// listener of another runtime (per-core serving: the kernel spreads connections over the
/// cores' listeners, joins included) leaves that runtime's reactor for this one's, so the
/// session's every connection is polled on the core that owns it.
fn adopt(new: NewSocket) -> io::Result<TcpStream> {
    if !new.foreign {
        return Ok(new.stream);
    }
    TcpStream::from_std(new.stream.into_std()?)
}

/// One round: every socket read into the core, the core's records sealed, every socket
/// written and shut down or closed as the core says. Whether anything moved.
fn move_bytes_once(inner: &mut SessionState, sockets: &mut [Socket], cx: &mut Context<'_>, now: Instant) -> bool {
    let mut progress = false;
    for sock in sockets.iter_mut() {
        progress |= sock.read_into(inner, cx, now);
    }
    inner.proto.prepare_transmit(now);
    // Events before writing: tokens about to go out must be in the join registry first.
    inner.dispatch_events();
    inner.publish_new_tokens();
    for sock in sockets.iter_mut() {
        progress |= sock.write_from(inner, cx, now);
    }
    inner.dispatch_events();
    inner.publish_new_tokens();
    progress
}

impl Socket {
    /// Reads what the socket has into the core. Whether anything happened (bytes, EOF, error).
    fn read_into(&mut self, inner: &mut SessionState, cx: &mut Context<'_>, now: Instant) -> bool {
        let Some(stream) = self.stream.as_mut() else { return false };
        let mut progress = false;
        // Readiness first: a socket with nothing to read does not make the core allocate a read
        // buffer (an idle connection holds none; a short read clears tokio's readiness, so this
        // costs no syscall).
        loop {
            if stream.poll_read_ready(cx).is_pending() {
                break;
            }
            let buf = inner.proto.read_buffer(self.id);
            if buf.is_empty() {
                break;
            }
            let mut rb = ReadBuf::new(buf);
            match Pin::new(&mut *stream).poll_read_priv(cx, &mut rb) {
                Poll::Ready(Ok(0)) => {
                    inner.proto.handle_eof(self.id, now);
                    progress = true;
                    break;
                }
                Poll::Ready(Ok(n)) => {
                    inner.proto.handle_read(self.id, n, now);
                    progress = true;
                }
                Poll::Ready(Err(e)) => {
                    inner.proto.handle_io_error(self.id, &e.to_string(), now);
                    progress = true;
                    break;
                }
                Poll::Pending => break,
            }
        }
        progress
    }

    /// Writes what the core has sealed for this connection, then shuts the write side down or
    /// closes the socket when the core says so. Whether anything happened.
    fn write_from(&mut self, inner: &mut SessionState, cx: &mut Context<'_>, now: Instant) -> bool {
        let Some(stream) = self.stream.as_mut() else { return false };
        let mut progress = false;
        loop {
            let data = inner.proto.transmit_data(self.id);
            if data.is_empty() {
                break;
            }
            match Pin::new(&mut *stream).poll_write(cx, data) {
                Poll::Ready(Ok(n)) if n > 0 => {
                    inner.proto.transmit_advance(self.id, n);
                    progress = true;
                }
                Poll::Ready(Ok(_)) => {
                    inner.proto.handle_io_error(self.id, "socket accepted no bytes", now);
                    break;
                }
                Poll::Ready(Err(e)) => {
                    inner.proto.handle_io_error(self.id, &e.to_string(), now);
                    progress = true;
                    break;
                }
                Poll::Pending => break,
            }
        }
        if !self.write_shut && inner.proto.should_shutdown_write(self.id) {
            // TCP FIN after our close_notify, as TLS over TCP does.
            if Pin::new(&mut *stream).poll_shutdown(cx).is_ready() {
                self.write_shut = true;
            }
        }
        if inner.proto.should_close_socket(self.id) {
            // Under the lock: nobody reads TCP_INFO from a descriptor being closed.
            inner.remove_fd(self.id);
            self.stream = None;
            progress = true;
        }
        progress
    }
}

/// A client session whose every connection is lost, and that no path manager keeps, starts
/// one rejoin task (and another once a rejoin brought it back and it is orphaned again).
fn rejoin_if_orphaned(inner: &SessionState, shared: &Shared, rejoining: &mut bool) {
    let own_rejoin = inner.proto.side() == tcpls_proto::Side::Client && !inner.managed;
    if inner.proto.is_orphaned() && own_rejoin && !*rejoining {
        *rejoining = true;
        let session = Session::new(shared.clone());
        let origin = inner.origin;
        tokio::spawn(async move { session.rejoin(origin).await });
    } else if !inner.proto.is_orphaned() {
        *rejoining = false;
    }
}

/// Sets the driver's timer to `at`. Whether it has already fired (the driver is due again).
fn arm_timer(timer: &mut Option<Pin<Box<tokio::time::Sleep>>>, at: Instant, cx: &mut Context<'_>) -> bool {
    let deadline = tokio::time::Instant::from_std(at);
    match timer.as_mut() {
        Some(t) if t.deadline() == deadline => {}
        Some(t) => t.as_mut().reset(deadline),
        None => *timer = Some(Box::pin(tokio::time::sleep_until(deadline))),
    }
    timer.as_mut().is_some_and(|t| t.as_mut().poll(cx).is_ready())
}

impl TrimClock {
    /// A quiet round: gives back idle buffers if the last trim is TRIM_INTERVAL old.
    fn release_if_due(&mut self, inner: &mut SessionState, now: Instant) {
        if now.duration_since(self.last_trim) >= TRIM_INTERVAL {
            self.last_trim = now;
            inner.proto.release_idle_memory();
        }
    }

    /// When the driver should wake for a trim, if at all. A session that went quiet holding
    /// large buffers (after a bulk transfer) is polled once more when the trim is due, instead
    /// of keeping them until its next activity. Working that out walks every stream: a session
    /// with many does it once per TRIM_CHECK, and when it did not look this time, it looks
    /// again once the check is due.
    fn next_wake(&mut self, inner: &SessionState) -> Option<Instant> {
        let now = Instant::now();
        let looked =
            inner.proto.stream_count() <= TRIM_CHECK_ALWAYS || now.duration_since(self.trim_checked) >= TRIM_CHECK;
        if looked {
            self.trim_checked = now;
            self.trim_wanted = inner.proto.releasable_memory() >= TRIM_WORTH;
        }
        match (self.trim_wanted, looked) {
            (true, _) => Some(self.last_trim + TRIM_INTERVAL),
            (false, false) => Some(self.trim_checked + TRIM_CHECK),
            (false, true) => None,
        }
    }
}

/// If the driver ends for any reason, a panic included, the session's waiters must learn it
/// rather than wait forever.
impl Drop for Driver {
    fn drop(&mut self) {
        self.shared.lock().driver_finished();
    }
}

/// `AsyncRead::poll_read` under a name that does not clash with our imports.
trait PollReadPriv {
    fn poll_read_priv(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<usize>>;
}

impl PollReadPriv for TcpStream {
    fn poll_read_priv(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<usize>> {
        let before = buf.filled().len();
        match tokio::io::AsyncRead::poll_read(self, cx, buf) {
            Poll::Ready(Ok(())) => Poll::Ready(Ok(buf.filled().len() - before)),
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => Poll::Pending,
        }
    }
}
