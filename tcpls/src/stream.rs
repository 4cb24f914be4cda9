//! Stream halves as tokio `AsyncWrite` / `AsyncRead`.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::shared::Shared;
use tcpls_proto::{StreamError, StreamId};

/// The core's stream error as the `io::Error` tokio's traits return (the kind says what
/// happened; the core's error is kept as the source).
pub(crate) fn stream_error(e: StreamError) -> io::Error {
    let kind = match e {
        StreamError::Reset(_) => io::ErrorKind::ConnectionReset,
        StreamError::SessionClosed => io::ErrorKind::NotConnected,
        StreamError::Finished => io::ErrorKind::BrokenPipe,
        StreamError::TooManyStreams | StreamError::Fallback => io::ErrorKind::Unsupported,
        StreamError::UnknownStream(_) => io::ErrorKind::NotFound,
    };
    io::Error::new(kind, e)
}

/// Writes up to this size are sealed and written from the writer's task when the session has
/// nothing else waiting to be written (`SessionState::transmit_now`): requests and answers
/// leave without waking the driver. Larger (bulk) writes go to the driver, which batches them.
const WRITE_THROUGH_MAX: usize = 4096;

/// The sending half of a stream. `shutdown()` sends FIN; dropping it does too.
pub struct SendStream {
    shared: Shared,
    id: StreamId,
    finished: bool,
}

impl SendStream {
    pub(crate) fn new(shared: Shared, id: StreamId) -> Self {
        Self { shared, id, finished: false }
    }

    pub fn id(&self) -> StreamId {
        self.id
    }

    /// Sends this stream's data on connection `conn` from now on (stream steering); `None`
    /// lets the session's scheduler spread it over all connections (aggregation).
    pub fn steer(&self, conn: Option<tcpls_proto::ConnId>) -> io::Result<()> {
        let mut inner = self.shared.lock();
        inner.proto.steer_stream(self.id, conn).map_err(stream_error)?;
        inner.wake_driver();
        Ok(())
    }

    /// The connection this stream's data is steered to (set by [`SendStream::steer`] or by the
    /// peer's Stream Steer); None: the scheduler spreads it.
    pub fn steering(&self) -> Option<tcpls_proto::ConnId> {
        self.shared.lock().proto.stream_steering(self.id)
    }

    /// Aborts the stream: queued bytes are dropped and the peer's reader gets `error_code`.
    pub fn reset(&mut self, error_code: u32) -> io::Result<()> {
        self.finished = true;
        let mut inner = self.shared.lock();
        inner.proto.reset_stream(self.id, error_code).map_err(stream_error)?;
        inner.trace_stream(self.id, "reset", Some(error_code));
        inner.wake_driver();
        Ok(())
    }

    /// Sends FIN after the queued bytes (same as `shutdown()`).
    pub fn finish(&mut self) -> io::Result<()> {
        if self.finished {
            return Ok(());
        }
        self.finished = true;
        let mut inner = self.shared.lock();
        inner.proto.finish(self.id).map_err(stream_error)?;
        inner.trace_stream(self.id, "finished", None);
        inner.transmit_now();
        Ok(())
    }
}

impl AsyncWrite for SendStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let mut inner = self.shared.lock();
        match inner.proto.write(self.id, buf) {
            Ok(0) if !buf.is_empty() => {
                inner.wait_writable(self.id, cx);
                inner.wake_driver();
                Poll::Pending
            }
            Ok(n) => {
                if buf.len() <= WRITE_THROUGH_MAX {
                    inner.transmit_now();
                } else {
                    inner.wake_driver();
                }
                Poll::Ready(Ok(n))
            }
            Err(e) => Poll::Ready(Err(stream_error(e))),
        }
    }

    /// Bytes handed to `poll_write` are already queued in the session, which sends them as fast
    /// as flow control and the socket allow; there is nothing more to flush.
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.finish())
    }
}

impl Drop for SendStream {
    fn drop(&mut self) {
        if !self.finished {
            let mut inner = self.shared.lock();
            if inner.proto.finish(self.id).is_ok() {
                inner.trace_stream(self.id, "finished", None);
            }
            inner.forget_waiter(self.id, false);
            inner.wake_driver();
        }
    }
}

/// The receiving half of a stream. Reading 0 bytes means the peer finished the stream.
pub struct RecvStream {
    shared: Shared,
    id: StreamId,
    done: bool,
}

impl RecvStream {
    pub(crate) fn new(shared: Shared, id: StreamId) -> Self {
        Self { shared, id, done: false }
    }

    /// How many bytes the peer sent on this stream in all, once its FIN or Stream Reset has
    /// arrived (a reset's final size counts bytes that were in flight and dropped); None before,
    /// or once the stream is forgotten.
    pub fn final_size(&self) -> Option<u64> {
        self.shared.lock().proto.stream_final_size(self.id)
    }

    pub fn id(&self) -> StreamId {
        self.id
    }

    /// Asks the peer to send this stream's data on connection `conn` (Stream Steer frame):
    /// receiver-driven steering, e.g. to move a download to another path.
    pub fn request_steer(&self, conn: tcpls_proto::ConnId) {
        let mut inner = self.shared.lock();
        inner.proto.request_steer(self.id, conn);
        inner.wake_driver();
    }

    /// Reads without an intermediate buffer: `f` sees the contiguous bytes available (empty at
    /// the end of the stream) and returns how many it consumed.
    pub async fn read_chunk_with<F: FnMut(&[u8]) -> usize>(&mut self, mut f: F) -> io::Result<usize> {
        std::future::poll_fn(|cx| {
            if self.done {
                return Poll::Ready(Ok(0));
            }
            let mut inner = self.shared.lock();
            match inner.proto.recv_chunk(self.id) {
                Ok(Some([])) => {
                    self.done = true;
                    Poll::Ready(Ok(0))
                }
                Ok(Some(chunk)) => {
                    let n = f(chunk).min(chunk.len());
                    inner.proto.consume(self.id, n);
                    if inner.proto.wants_transmit() {
                        inner.wake_driver();
                    }
                    Poll::Ready(Ok(n))
                }
                Ok(None) => {
                    inner.wait_readable(self.id, cx);
                    Poll::Pending
                }
                Err(e) => {
                    self.done = true;
                    Poll::Ready(Err(stream_error(e)))
                }
            }
        })
        .await
    }
}

impl AsyncRead for RecvStream {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        if self.done {
            return Poll::Ready(Ok(()));
        }
        let id = self.id;
        let mut inner = self.shared.lock();
        let out = buf.initialize_unfilled();
        match inner.proto.read(id, out) {
            Ok(Some(0)) => {
                drop(inner);
                self.done = true;
                Poll::Ready(Ok(()))
            }
            Ok(Some(n)) => {
                buf.advance(n);
                // Only a credit update (Max Stream Data) needs the driver after a read.
                if inner.proto.wants_transmit() {
                    inner.wake_driver();
                }
                Poll::Ready(Ok(()))
            }
            Ok(None) => {
                inner.wait_readable(id, cx);
                Poll::Pending
            }
            Err(e) => {
                drop(inner);
                self.done = true;
                Poll::Ready(Err(stream_error(e)))
            }
        }
    }
}

impl Drop for RecvStream {
    fn drop(&mut self) {
        let mut inner = self.shared.lock();
        inner.forget_waiter(self.id, true);
        if !self.done {
            inner.proto.stop_reading(self.id);
            inner.wake_driver();
        }
    }
}
