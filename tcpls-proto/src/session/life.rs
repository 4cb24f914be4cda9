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
//! established from then on, whatever happens next. What moves the session along this diagram
//! (connections ending, the application closing) is in `lifecycle.rs`.

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
pub(super) struct Lifecycle {
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
    pub(super) fn is_established(&self) -> bool {
        self.mode.is_some()
    }

    pub(super) fn is_fallback(&self) -> bool {
        self.mode == Some(Mode::Fallback)
    }

    /// The first handshake completed: TCPLS or plain TLS.
    pub(super) fn establish(&mut self, tcpls: bool) {
        self.mode = Some(if tcpls { Mode::Tcpls } else { Mode::Fallback });
    }

    pub(super) fn is_closing(&self) -> bool {
        matches!(self.state, State::Closing)
    }

    pub(super) fn is_closed(&self) -> bool {
        matches!(self.state, State::Closed)
    }

    /// Neither closing nor closed: new connections (joins, rejoins) and tokens are welcome.
    pub(super) fn accepts_connections(&self) -> bool {
        matches!(self.state, State::Open | State::Orphaned { .. })
    }

    /// Closed, or failed (an error is set before the close is complete).
    pub(super) fn is_over(&self) -> bool {
        self.is_closed() || self.error.is_some()
    }

    pub(super) fn error(&self) -> Option<&Error> {
        self.error.as_ref()
    }

    /// Records why the session failed, unless an earlier reason is known.
    pub(super) fn fail_with(&mut self, error: Error) {
        self.error.get_or_insert(error);
    }

    /// Records why the session failed, replacing an earlier reason.
    pub(super) fn set_error(&mut self, error: Option<Error>) {
        self.error = error;
    }

    /// Open -> Closing (a session orphaned or already closing or closed stays as it is).
    pub(super) fn begin_closing(&mut self) {
        if matches!(self.state, State::Open) {
            self.state = State::Closing;
        }
    }

    /// The session is over (its `Closed` event is the core's to send).
    pub(super) fn end(&mut self) {
        self.state = State::Closed;
    }

    pub(super) fn orphaned_since(&self) -> Option<Instant> {
        match self.state {
            State::Orphaned { since, .. } => Some(since),
            _ => None,
        }
    }

    /// Every connection was lost at `since` (an orphaned session keeps its first loss).
    pub(super) fn orphan(&mut self, since: Instant, first_loss: Option<Error>) {
        if matches!(self.state, State::Open) {
            self.state = State::Orphaned { since, first_loss };
        }
    }

    /// A connection joined again: no longer orphaned, and earlier attempts are forgotten.
    pub(super) fn rejoined(&mut self) {
        if matches!(self.state, State::Orphaned { .. }) {
            self.state = State::Open;
        }
        self.rejoin_note = None;
    }

    /// Leaves the orphaned state (to end the session): its first loss, or `None` when the
    /// session was not orphaned.
    pub(super) fn take_orphan(&mut self) -> Option<Option<Error>> {
        match std::mem::replace(&mut self.state, State::Open) {
            State::Orphaned { first_loss, .. } => Some(first_loss),
            other => {
                self.state = other;
                None
            }
        }
    }

    pub(super) fn set_rejoin_note(&mut self, note: String) {
        self.rejoin_note = Some(note);
    }

    pub(super) fn take_rejoin_note(&mut self) -> Option<String> {
        self.rejoin_note.take()
    }

    /// True the first time: `Event::PeerClosed` is reported once.
    pub(super) fn report_peer_close(&mut self) -> bool {
        !std::mem::replace(&mut self.peer_close_reported, true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum Kind {
        Open,
        Closing,
        Orphaned,
        Closed,
    }

    #[derive(Debug, Clone, Copy)]
    enum Step {
        BeginClosing,
        Orphan,
        Rejoined,
        TakeOrphan,
        End,
    }

    fn kind(life: &Lifecycle) -> Kind {
        match life.state {
            State::Open => Kind::Open,
            State::Closing => Kind::Closing,
            State::Orphaned { .. } => Kind::Orphaned,
            State::Closed => Kind::Closed,
        }
    }

    fn in_state(kind: Kind, at: Instant) -> Lifecycle {
        let mut life = Lifecycle::default();
        match kind {
            Kind::Open => {}
            Kind::Closing => life.begin_closing(),
            Kind::Orphaned => life.orphan(at, Some(Error::ConnectionLost("first".into()))),
            Kind::Closed => life.end(),
        }
        assert_eq!(self::kind(&life), kind);
        life
    }

    /// The legal transitions of the session's life, written out: every (state, step) pair
    /// not listed leaves the state as it is.
    #[test]
    fn lifecycle_transition_table() {
        use Kind::*;
        let legal = [
            (Open, "BeginClosing", Closing),
            (Open, "Orphan", Orphaned),
            (Open, "End", Closed),
            (Closing, "End", Closed),
            (Orphaned, "Rejoined", Open),
            (Orphaned, "TakeOrphan", Open),
            (Orphaned, "End", Closed),
        ];
        let at = Instant::now();
        for from in [Open, Closing, Orphaned, Closed] {
            for step in [Step::BeginClosing, Step::Orphan, Step::Rejoined, Step::TakeOrphan, Step::End] {
                let mut life = in_state(from, at);
                let taken = match step {
                    Step::BeginClosing => {
                        life.begin_closing();
                        None
                    }
                    Step::Orphan => {
                        life.orphan(at, Some(Error::ConnectionLost("second".into())));
                        None
                    }
                    Step::Rejoined => {
                        life.rejoined();
                        None
                    }
                    Step::TakeOrphan => Some(life.take_orphan()),
                    Step::End => {
                        life.end();
                        None
                    }
                };
                let name = format!("{step:?}");
                let expected = legal.iter().find(|(f, s, _)| *f == from && *s == name).map_or(from, |(_, _, to)| *to);
                assert_eq!(kind(&life), expected, "{from:?} --{step:?}-->");
                if let Some(taken) = taken {
                    // Only an orphaned session has a first loss to hand over: the first one.
                    let first = taken.map(|e| e.map(|e| e.to_string()));
                    match from {
                        Orphaned => assert!(matches!(first, Some(Some(m)) if m.contains("first"))),
                        _ => assert_eq!(first, None),
                    }
                }
            }
        }
    }

    #[test]
    fn established_is_for_good_and_the_first_error_is_kept() {
        let mut life = Lifecycle::default();
        assert!(!life.is_established());
        life.establish(false);
        assert!(life.is_established() && life.is_fallback());
        life.fail_with(Error::ConnectionLost("first".into()));
        life.fail_with(Error::ConnectionLost("second".into()));
        assert!(life.error().is_some_and(|e| e.to_string().contains("first")));
        life.end();
        assert!(life.is_over() && life.is_established() && !life.accepts_connections());
        assert!(life.report_peer_close() && !life.report_peer_close(), "PeerClosed is reported once");
    }
}
