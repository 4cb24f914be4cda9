//! A stream as a binding holds it: both halves, each usable by one thread at a time, with
//! blocking calls (a timeout) and non-blocking ones (the session's readiness descriptor).

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::task::{Context, Poll};

use tcpls::{RecvStream, SendStream};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::error::{Error, ErrorKind, Result};
use crate::readiness::Readiness;
use crate::runtime::{block_on, runtime, Wait};

/// The largest buffer one read or write takes (1 GiB): a larger length is taken for a caller's
/// mistake (a negative number cast to size_t, a wrong variable) rather than trusted.
pub const MAX_IO_LEN: usize = 1 << 30;

/// Most bytes one zero-copy read hands to its callback before it returns.
pub const READ_WITH_BUDGET: usize = 4 << 20;

/// A stream: its sending half (until shut down) and its receiving half.
pub struct StreamCore {
    id: u32,
    send: Mutex<Option<SendStream>>,
    recv: Mutex<Option<RecvStream>>,
    readiness: Arc<Readiness>,
    /// The session was closed by the application: every call fails with `Closed`.
    session_closed: Arc<AtomicBool>,
}

/// One half, taken for a call; `Busy` if another thread has it.
fn take<'a, T>(half: &'a Mutex<Option<T>>, what: &str) -> Result<MutexGuard<'a, Option<T>>> {
    match half.try_lock() {
        Ok(guard) => Ok(guard),
        Err(TryLockError::WouldBlock) => Err(Error::new(
            ErrorKind::Busy,
            format!("another thread is {what} this stream: one reader and one writer at a time"),
        )),
        Err(TryLockError::Poisoned(p)) => Ok(p.into_inner()),
    }
}

fn check_len(len: usize) -> Result<()> {
    if len > MAX_IO_LEN {
        return Err(Error::invalid(format!(
            "a length of {len} bytes is more than one call takes ({MAX_IO_LEN}): pass a smaller buffer"
        )));
    }
    Ok(())
}

impl StreamCore {
    pub(crate) fn new(
        send: SendStream,
        recv: RecvStream,
        readiness: Arc<Readiness>,
        session_closed: Arc<AtomicBool>,
    ) -> Arc<StreamCore> {
        Arc::new(StreamCore {
            id: send.id(),
            send: Mutex::new(Some(send)),
            recv: Mutex::new(Some(recv)),
            readiness,
            session_closed,
        })
    }

    /// One half for a call: `Closed` once the application closed the session, `Busy` if
    /// another thread has it.
    fn half<'a, T>(&self, half: &'a Mutex<Option<T>>, what: &str) -> Result<MutexGuard<'a, Option<T>>> {
        if self.session_closed.load(Ordering::Acquire) {
            return Err(Error::new(ErrorKind::Closed, "the stream's session was closed by the application"));
        }
        take(half, what)
    }

    pub fn id(&self) -> u32 {
        self.id
    }

    /// Writes all of `buf` within `wait`. Returns how many bytes were queued: all of them, or
    /// fewer when the time ran out after some (none: `Timeout`).
    pub fn write(&self, buf: &[u8], wait: Wait) -> Result<usize> {
        check_len(buf.len())?;
        let mut guard = self.half(&self.send, "writing to")?;
        let send = guard.as_mut().ok_or_else(write_closed)?;
        let mut written = 0;
        let all = block_on(
            wait,
            "writing",
            poll_fn(|cx| {
                while written < buf.len() {
                    match Pin::new(&mut *send).poll_write(cx, &buf[written..]) {
                        Poll::Ready(Ok(n)) => written += n,
                        Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                        Poll::Pending => return Poll::Pending,
                    }
                }
                Poll::Ready(Ok(()))
            }),
        );
        match all {
            Ok(Ok(())) => Ok(written),
            Ok(Err(e)) => Err(Error::io("writing failed", &e)),
            Err(e) if e.kind == ErrorKind::Timeout && written > 0 => Ok(written),
            Err(e) => Err(e),
        }
    }

    /// Reads what has arrived (waiting at most `wait` for the first byte), up to `buf`'s size;
    /// 0 at the end of the stream.
    pub fn read(&self, buf: &mut [u8], wait: Wait) -> Result<usize> {
        check_len(buf.len())?;
        if buf.is_empty() {
            return Err(Error::invalid("a read needs room for at least one byte"));
        }
        let mut guard = self.half(&self.recv, "reading from")?;
        let recv = guard.as_mut().ok_or_else(read_closed)?;
        let read = block_on(
            wait,
            "reading",
            poll_fn(|cx| {
                // Everything that has arrived, in as many pieces as it takes: one call (one
                // wake-up of the caller) per burst rather than per piece.
                let mut filled = 0;
                while filled < buf.len() {
                    let mut out = ReadBuf::new(&mut buf[filled..]);
                    match Pin::new(&mut *recv).poll_read(cx, &mut out) {
                        Poll::Ready(Ok(())) if out.filled().is_empty() => break, // the end
                        Poll::Ready(Ok(())) => filled += out.filled().len(),
                        Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                        Poll::Pending if filled == 0 => return Poll::Pending,
                        Poll::Pending => break,
                    }
                }
                Poll::Ready(Ok(filled))
            }),
        )?;
        read.map_err(|e| Error::io("reading failed", &e))
    }

    /// Reads without a copy: `consume` sees the bytes that have arrived, in the session's own
    /// buffer, piece by piece, and returns how many of each piece it used (at least one). Waits
    /// at most `wait` for the first byte; returns the count used (up to about
    /// `READ_WITH_BUDGET`, 4 MiB, per call), 0 at the end of the stream (`consume` not called).
    pub fn read_with(&self, wait: Wait, mut consume: impl FnMut(&[u8]) -> usize) -> Result<usize> {
        let mut guard = self.half(&self.recv, "reading from")?;
        let recv = guard.as_mut().ok_or_else(read_closed)?;
        let used = block_on(
            wait,
            "reading",
            poll_fn(|cx| {
                // The pieces that have arrived, one after the other, until none is left, the
                // callback leaves some of one, or the budget is spent: one call (one wake-up of
                // the caller) per burst rather than per piece.
                let mut total = 0;
                while total < READ_WITH_BUDGET {
                    let offered = std::cell::Cell::new(0);
                    let mut piece = std::pin::pin!(recv.read_chunk_with(|chunk| {
                        offered.set(chunk.len());
                        consume(chunk)
                    }));
                    match piece.as_mut().poll(cx) {
                        Poll::Ready(Ok(0)) if offered.get() > 0 => {
                            return Poll::Ready(Err(Error::invalid(
                                "the read callback used none of the bytes offered: it must use at least one",
                            )))
                        }
                        Poll::Ready(Ok(0)) => break, // the end of the stream (again next call)
                        Poll::Ready(Ok(n)) => {
                            total += n;
                            if n < offered.get() {
                                break;
                            }
                        }
                        Poll::Ready(Err(e)) => return Poll::Ready(Err(Error::io("reading failed", &e))),
                        Poll::Pending if total == 0 => return Poll::Pending,
                        Poll::Pending => break,
                    }
                }
                Poll::Ready(Ok(total))
            }),
        )??;
        Ok(used)
    }

    /// Queues what fits of `buf` now, without blocking; `WouldBlock` when nothing does (the
    /// readiness descriptor is signalled once there is room).
    pub fn try_write(&self, buf: &[u8]) -> Result<usize> {
        check_len(buf.len())?;
        let mut guard = self.half(&self.send, "writing to")?;
        let send = guard.as_mut().ok_or_else(write_closed)?;
        let waker = self.readiness.waker();
        let mut cx = Context::from_waker(&waker);
        let _entered = runtime()?.enter();
        match Pin::new(send).poll_write(&mut cx, buf) {
            Poll::Ready(Ok(n)) => Ok(n),
            Poll::Ready(Err(e)) => Err(Error::io("writing failed", &e)),
            Poll::Pending => Err(Error::new(ErrorKind::WouldBlock, "no room to write now: wait for the readiness fd")),
        }
    }

    /// Reads what has arrived, without blocking; `WouldBlock` when nothing has (the readiness
    /// descriptor is signalled when something does); 0 at the end of the stream.
    pub fn try_read(&self, buf: &mut [u8]) -> Result<usize> {
        check_len(buf.len())?;
        if buf.is_empty() {
            return Err(Error::invalid("a read needs room for at least one byte"));
        }
        let mut guard = self.half(&self.recv, "reading from")?;
        let recv = guard.as_mut().ok_or_else(read_closed)?;
        let waker = self.readiness.waker();
        let mut cx = Context::from_waker(&waker);
        let _entered = runtime()?.enter();
        let mut out = ReadBuf::new(buf);
        match Pin::new(recv).poll_read(&mut cx, &mut out) {
            Poll::Ready(Ok(())) => Ok(out.filled().len()),
            Poll::Ready(Err(e)) => Err(Error::io("reading failed", &e)),
            Poll::Pending => Err(Error::new(ErrorKind::WouldBlock, "nothing to read now: wait for the readiness fd")),
        }
    }

    /// Sends this stream's data on connection `conn` from now on (steering); `None` gives it
    /// back to the session's scheduler.
    pub fn steer(&self, conn: Option<u32>) -> Result<()> {
        let guard = self.half(&self.send, "writing to")?;
        let send = guard.as_ref().ok_or_else(write_closed)?;
        let _entered = runtime()?.enter();
        send.steer(conn).map_err(|e| Error::io("cannot steer the stream", &e))
    }

    /// Sends FIN after the queued bytes; the sending half is gone afterwards (writes: `Closed`).
    pub fn shutdown(&self) -> Result<()> {
        let mut guard = self.half(&self.send, "writing to")?;
        let mut send = guard.take().ok_or_else(write_closed)?;
        let _entered = runtime()?.enter();
        send.finish().map_err(|e| Error::io("cannot finish the stream", &e))
    }

    /// Aborts the sending half: queued bytes are dropped, the peer's reader gets `code`.
    pub fn reset(&self, code: u32) -> Result<()> {
        let mut guard = self.half(&self.send, "writing to")?;
        let mut send = guard.take().ok_or_else(write_closed)?;
        let _entered = runtime()?.enter();
        send.reset(code).map_err(|e| Error::io("cannot reset the stream", &e))
    }

    /// Drops both halves (FIN if not shut down yet, stop reading). Later calls: `Closed`. A
    /// half another thread is using goes when that call returns and the last reference drops.
    pub fn close(&self) {
        let _entered = runtime().map(|rt| rt.enter());
        if let Ok(mut send) = self.send.try_lock() {
            send.take();
        }
        if let Ok(mut recv) = self.recv.try_lock() {
            recv.take();
        }
    }
}

fn write_closed() -> Error {
    Error::new(ErrorKind::Closed, "the stream's sending side is shut down (or the stream was closed)")
}

fn read_closed() -> Error {
    Error::new(ErrorKind::Closed, "the stream was closed")
}
