//! A descriptor an event loop polls: it becomes readable when a non-blocking call that could not
//! make progress (a read, a write, an accept, an event) is worth trying again.
//!
//! It is one end of a Unix socket pair; the other end gets a byte whenever a stream or the
//! session's event queue may have become ready. The task waker of a `try_*` call that found
//! nothing to do writes that byte, so no extra task or thread watches the streams.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::task::{Wake, Waker};

use crate::error::{Error, ErrorKind, Result};

/// The readiness descriptor of one session, shared by its streams.
#[derive(Debug)]
pub struct Readiness {
    /// What the application polls.
    polled: UnixStream,
    /// Where a wake-up writes.
    signalled: UnixStream,
}

impl Readiness {
    pub fn new() -> Result<Arc<Readiness>> {
        let (polled, signalled) = UnixStream::pair()
            .map_err(|e| Error::new(ErrorKind::Io, format!("cannot create the readiness descriptor: {e}")))?;
        for end in [&polled, &signalled] {
            end.set_nonblocking(true).map_err(|e| {
                Error::new(ErrorKind::Io, format!("cannot make the readiness descriptor non-blocking: {e}"))
            })?;
        }
        Ok(Arc::new(Readiness { polled, signalled }))
    }

    /// The descriptor to poll for reading (valid as long as the session handle lives).
    pub fn fd(&self) -> RawFd {
        self.polled.as_raw_fd()
    }

    /// Makes the descriptor readable. A full socket buffer means it is readable already.
    pub fn signal(&self) {
        let _ = (&self.signalled).write(&[1]);
    }

    /// Makes the descriptor unreadable until the next wake-up: call it before trying the
    /// non-blocking calls again, so that a wake-up during them is not lost.
    pub fn clear(&self) {
        let mut sink = [0u8; 256];
        while matches!((&self.polled).read(&mut sink), Ok(n) if n > 0) {}
    }

    /// A task waker that signals this descriptor.
    pub fn waker(self: &Arc<Self>) -> Waker {
        Waker::from(Arc::new(Signal(self.clone())))
    }
}

struct Signal(Arc<Readiness>);

impl Wake for Signal {
    fn wake(self: Arc<Self>) {
        self.0.signal();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.signal();
    }
}
