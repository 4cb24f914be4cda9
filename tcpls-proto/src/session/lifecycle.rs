//! The session's own life, apart from its connections': handshaking, established (TCPLS or
//! plain TLS fallback), closing, orphaned (every connection lost, waiting for a rejoin) and
//! closed, with the error that ended it.
//!
//! ```text
//! Open ──> Closing ──> Closed          (the application closes, or the peer did and we are done)
//!  │ ^                  ^
//!  v │ rejoined         │ timeout, close, abort, refused rejoin
//! Orphaned ─────────────┘
//! ```
//!
//! Whether the first handshake completed (and how) is a fact beside the state: a session is
//! established from then on, whatever happens next.

use std::time::Instant;

use crate::error::Error;

/// What the first handshake negotiated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Tcpls,
    /// The peer does not speak TCPLS: one plain TLS byte stream (PROTOCOL.md §1.3).
    Fallback,
}

#[derive(Debug)]
enum State {
    /// Handshaking or carrying streams.
    Open,
    /// The application asked to close (or the idle timeout did): close_notify goes out once
    /// everything queued is sent.
    Closing,
    /// Every connection was lost at `since`; the session waits for a rejoin. `first_loss` is
    /// its error if none comes.
    Orphaned {
        since: Instant,
        first_loss: Option<Error>,
    },
    Closed,
}

#[derive(Debug)]
pub(crate) struct Lifecycle {
    mode: Option<Mode>,
    state: State,
    /// Why the session failed, if it did (kept once closed).
    error: Option<Error>,
    /// Client: what the IO layer's last rejoin attempts said (per path), for the final error.
    rejoin_note: Option<String>,
    /// `Event::PeerClosed` went out.
    peer_close_reported: bool,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Self { mode: None, state: State::Open, error: None, rejoin_note: None, peer_close_reported: false }
    }
}

impl Lifecycle {
    /// The first handshake completed (true from then on).
    pub(crate) fn is_established(&self) -> bool {
        self.mode.is_some()
    }

    pub(crate) fn is_fallback(&self) -> bool {
        self.mode == Some(Mode::Fallback)
    }

    /// The first handshake completed: TCPLS or plain TLS.
    pub(crate) fn establish(&mut self, tcpls: bool) {
        self.mode = Some(if tcpls { Mode::Tcpls } else { Mode::Fallback });
    }

    pub(crate) fn is_closing(&self) -> bool {
        matches!(self.state, State::Closing)
    }

    pub(crate) fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed)
    }

    /// Neither closing nor closed: new connections (joins, rejoins) and tokens are welcome.
    pub(crate) fn accepts_connections(&self) -> bool {
        matches!(self.state, State::Open | State::Orphaned { .. })
    }

    /// Closed, or failed (an error is set before the close is complete).
    pub(crate) fn is_over(&self) -> bool {
        self.is_closed() || self.error.is_some()
    }

    pub(crate) fn error(&self) -> Option<&Error> {
        self.error.as_ref()
    }

    /// Records why the session failed, unless an earlier reason is known.
    pub(crate) fn fail_with(&mut self, error: Error) {
        self.error.get_or_insert(error);
    }

    /// Records why the session failed, replacing an earlier reason.
    pub(crate) fn set_error(&mut self, error: Option<Error>) {
        self.error = error;
    }

    /// Open -> Closing (a session orphaned or already closing or closed stays as it is).
    pub(crate) fn begin_closing(&mut self) {
        if matches!(self.state, State::Open) {
            self.state = State::Closing;
        }
    }

    /// The session is over (its `Closed` event is the core's to send).
    pub(crate) fn end(&mut self) {
        self.state = State::Closed;
    }

    pub(crate) fn orphaned_since(&self) -> Option<Instant> {
        match self.state {
            State::Orphaned { since, .. } => Some(since),
            _ => None,
        }
    }

    /// Every connection was lost at `since` (an orphaned session keeps its first loss).
    pub(crate) fn orphan(&mut self, since: Instant, first_loss: Option<Error>) {
        if matches!(self.state, State::Open) {
            self.state = State::Orphaned { since, first_loss };
        }
    }

    /// A connection joined again: no longer orphaned, and earlier attempts are forgotten.
    pub(crate) fn rejoined(&mut self) {
        if matches!(self.state, State::Orphaned { .. }) {
            self.state = State::Open;
        }
        self.rejoin_note = None;
    }

    /// Leaves the orphaned state (to end the session): its first loss, or `None` when the
    /// session was not orphaned.
    pub(crate) fn take_orphan(&mut self) -> Option<Option<Error>> {
        match std::mem::replace(&mut self.state, State::Open) {
            State::Orphaned { first_loss, .. } => Some(first_loss),
            other => {
                self.state = other;
                None
            }
        }
    }

    pub(crate) fn set_rejoin_note(&mut self, note: String) {
        self.rejoin_note = Some(note);
    }

    pub(crate) fn take_rejoin_note(&mut self) -> Option<String> {
        self.rejoin_note.take()
    }

    /// True the first time: `Event::PeerClosed` is reported once.
    pub(crate) fn report_peer_close(&mut self) -> bool {
        !std::mem::replace(&mut self.peer_close_reported, true)
    }
}
