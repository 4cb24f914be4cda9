//! Where a connection is in its life, with the state each phase needs: the handshake while it
//! runs, the keys once it is done, the error once it failed.
//!
//! ```text
//! Handshaking ─┬─> Established { AwaitingJoinAck } ─┐
//!              └─> Established { Open } ────────────┴─> Established { Closing { sent, received } }
//! any ─> Failed (fatal error, alert queued; no keys)
//! any ─> Gone (socket ended or given up; keys kept to open what was already received)
//! ```
//!
//! `Failed`, `Gone` and a close_notify both ways are the finished states. [`PhaseKind`] names
//! the phases without their data; [`PhaseKind::after`] is the table of legal transitions, and
//! every transition of a [`Phase`] is checked against it in debug builds.

use crate::error::Error;
use crate::tls::handshake_exposed::Exposed;
use crate::tls::{FallbackTls, Handshake};

use super::record_layer::RecordLayer;

/// The keys of an established connection.
#[derive(Debug)]
pub(in crate::session) enum Keys {
    /// Boxed: the keys are large next to the other phases.
    Tcpls(Box<RecordLayer>),
    Fallback(FallbackTls),
}

/// An established connection's life, from the handshake's end to both close_notify.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::session) enum Life {
    /// Client, joining connection: the handshake is done but the server has not answered on it
    /// yet, so it may still refuse the join: stream data waits (it would be lost with it).
    AwaitingJoinAck,
    /// Carries records both ways.
    Open,
    /// close_notify went out, came in, or both.
    Closing { sent: bool, received: bool },
}

impl Life {
    pub(super) fn close_sent(self) -> bool {
        matches!(self, Life::Closing { sent: true, .. })
    }

    pub(super) fn close_received(self) -> bool {
        matches!(self, Life::Closing { received: true, .. })
    }

    /// After the peer's close_notify (TCPLS alert, or the end of a fallback TLS stream).
    pub(super) fn after_close_received(self) -> Life {
        Life::Closing { sent: self.close_sent(), received: true }
    }

    /// After our close_notify.
    pub(super) fn after_close_sent(self) -> Life {
        Life::Closing { sent: true, received: self.close_received() }
    }

    /// After a record from the server on a joining connection: it accepted the join (a
    /// refusal is an alert).
    pub(super) fn after_join_answer(self) -> Life {
        match self {
            Life::AwaitingJoinAck => Life::Open,
            other => other,
        }
    }

    /// The life `event` leads to (unchanged by events that are not about an established life).
    pub(super) fn after(self, event: PhaseEvent) -> Life {
        match event {
            PhaseEvent::JoinAnswered => self.after_join_answer(),
            PhaseEvent::CloseSent => self.after_close_sent(),
            PhaseEvent::CloseReceived => self.after_close_received(),
            _ => self,
        }
    }
}

#[derive(Debug)]
pub(in crate::session) enum Phase {
    Handshaking(Handshake, Exposed),
    /// The handshake is done: records flow as `life` allows.
    Established {
        keys: Keys,
        life: Life,
    },
    /// A fatal error: its alert was queued if keys allowed; nothing more is sealed or read.
    Failed(Error),
    /// The socket reached EOF or failed, or we gave up on it: nothing more is written. The keys
    /// stay so that records already received can still be opened. `error` is none for a clean
    /// end (EOF after the peer's close_notify).
    Gone {
        keys: Option<Keys>,
        error: Option<Error>,
    },
}

/// A phase without its data, for the transition table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::session) enum PhaseKind {
    Handshaking,
    Established(Life),
    Failed,
    Gone,
}

/// What moves a connection from one phase to another.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::session) enum PhaseEvent {
    /// The handshake completed; `joining`: a client connection whose Join the server has not
    /// answered yet.
    HandshakeDone {
        joining: bool,
    },
    JoinAnswered,
    CloseSent,
    CloseReceived,
    Fail,
    Lose,
}

impl PhaseKind {
    /// The table of legal transitions: the phase `event` leads to from `self` (unchanged when
    /// the event does not apply there).
    pub(in crate::session) fn after(self, event: PhaseEvent) -> PhaseKind {
        use PhaseEvent as E;
        use PhaseKind as K;
        match (self, event) {
            (K::Handshaking, E::HandshakeDone { joining: true }) => K::Established(Life::AwaitingJoinAck),
            (K::Handshaking, E::HandshakeDone { joining: false }) => K::Established(Life::Open),
            (K::Established(life), E::JoinAnswered | E::CloseSent | E::CloseReceived) => {
                K::Established(life.after(event))
            }
            (K::Gone, E::Fail | E::Lose) => K::Gone,
            (K::Failed, E::Lose) => K::Gone,
            (_, E::Lose) => K::Gone,
            (_, E::Fail) => K::Failed,
            (other, _) => other,
        }
    }

    /// Both close_notify went, or the connection failed or is gone.
    pub(in crate::session) fn is_finished(self) -> bool {
        matches!(
            self,
            PhaseKind::Failed | PhaseKind::Gone | PhaseKind::Established(Life::Closing { sent: true, received: true })
        )
    }
}

impl Phase {
    pub(in crate::session) fn kind(&self) -> PhaseKind {
        match self {
            Phase::Handshaking(..) => PhaseKind::Handshaking,
            Phase::Established { life, .. } => PhaseKind::Established(*life),
            Phase::Failed(_) => PhaseKind::Failed,
            Phase::Gone { .. } => PhaseKind::Gone,
        }
    }

    /// The established life, if the connection is established and not gone or failed.
    pub(super) fn life(&self) -> Option<Life> {
        match self {
            Phase::Established { life, .. } => Some(*life),
            _ => None,
        }
    }

    /// We sent close_notify, or failed, or the socket is gone: nothing more may be sealed.
    pub(super) fn close_sent(&self) -> bool {
        match self {
            Phase::Handshaking(..) => false,
            Phase::Established { life, .. } => life.close_sent(),
            Phase::Failed(_) | Phase::Gone { .. } => true,
        }
    }

    pub(super) fn close_received(&self) -> bool {
        self.life().is_some_and(Life::close_received)
    }

    pub(super) fn keys(&self) -> Option<&Keys> {
        match self {
            Phase::Established { keys, .. } | Phase::Gone { keys: Some(keys), .. } => Some(keys),
            _ => None,
        }
    }

    pub(super) fn keys_mut(&mut self) -> Option<&mut Keys> {
        match self {
            Phase::Established { keys, .. } | Phase::Gone { keys: Some(keys), .. } => Some(keys),
            _ => None,
        }
    }

    pub(super) fn error(&self) -> Option<&Error> {
        match self {
            Phase::Failed(error) => Some(error),
            Phase::Gone { error, .. } => error.as_ref(),
            _ => None,
        }
    }

    /// Applies a change of the established life (join answered, close_notify either way).
    pub(super) fn change_life(&mut self, event: PhaseEvent) {
        if let Phase::Established { life, .. } = self {
            *life = life.after(event);
        }
    }

    /// A fatal error: the keys go; the first error is kept. A connection already gone stays
    /// gone (nothing more is written either way).
    pub(super) fn fail(&mut self, error: Error) {
        let before = self.kind();
        *self = match std::mem::replace(self, Phase::Gone { keys: None, error: None }) {
            Phase::Gone { error: first, .. } => Phase::Gone { keys: None, error: first.or(Some(error)) },
            Phase::Failed(first) => Phase::Failed(first),
            _ => Phase::Failed(error),
        };
        debug_assert_eq!(self.kind(), before.after(PhaseEvent::Fail));
    }

    /// The socket ended or failed, or the connection is given up. `error` is what the loss
    /// means, none for a clean end; an earlier error is kept.
    pub(super) fn lose(&mut self, error: Option<Error>) {
        let before = self.kind();
        *self = match std::mem::replace(self, Phase::Gone { keys: None, error: None }) {
            Phase::Established { keys, .. } => Phase::Gone { keys: Some(keys), error },
            Phase::Gone { keys, error: first } => Phase::Gone { keys, error: first.or(error) },
            Phase::Failed(first) => Phase::Gone { keys: None, error: Some(first) },
            Phase::Handshaking(..) => Phase::Gone { keys: None, error },
        };
        debug_assert_eq!(self.kind(), before.after(PhaseEvent::Lose));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIVES: [Life; 6] = [
        Life::AwaitingJoinAck,
        Life::Open,
        Life::Closing { sent: false, received: false },
        Life::Closing { sent: true, received: false },
        Life::Closing { sent: false, received: true },
        Life::Closing { sent: true, received: true },
    ];

    const EVENTS: [PhaseEvent; 7] = [
        PhaseEvent::HandshakeDone { joining: true },
        PhaseEvent::HandshakeDone { joining: false },
        PhaseEvent::JoinAnswered,
        PhaseEvent::CloseSent,
        PhaseEvent::CloseReceived,
        PhaseEvent::Fail,
        PhaseEvent::Lose,
    ];

    fn kinds() -> Vec<PhaseKind> {
        let mut all = vec![PhaseKind::Handshaking, PhaseKind::Failed, PhaseKind::Gone];
        all.extend(LIVES.map(PhaseKind::Established));
        all
    }

    /// The transitions, written out independently of `after`: each (from, event, to), with
    /// every pair not listed leaving the phase as it is.
    #[test]
    fn phase_transition_table() {
        use PhaseEvent as E;
        use PhaseKind as K;
        let closing = |sent, received| K::Established(Life::Closing { sent, received });
        let mut legal = vec![
            (K::Handshaking, E::HandshakeDone { joining: true }, K::Established(Life::AwaitingJoinAck)),
            (K::Handshaking, E::HandshakeDone { joining: false }, K::Established(Life::Open)),
            (K::Established(Life::AwaitingJoinAck), E::JoinAnswered, K::Established(Life::Open)),
            (K::Established(Life::AwaitingJoinAck), E::CloseSent, closing(true, false)),
            (K::Established(Life::AwaitingJoinAck), E::CloseReceived, closing(false, true)),
            (K::Established(Life::Open), E::CloseSent, closing(true, false)),
            (K::Established(Life::Open), E::CloseReceived, closing(false, true)),
            (closing(false, false), E::CloseSent, closing(true, false)),
            (closing(false, false), E::CloseReceived, closing(false, true)),
            (closing(true, false), E::CloseReceived, closing(true, true)),
            (closing(false, true), E::CloseSent, closing(true, true)),
        ];
        for from in kinds() {
            legal.push((from, E::Lose, K::Gone));
            if from != K::Gone {
                legal.push((from, E::Fail, K::Failed));
            }
        }
        for from in kinds() {
            for event in EVENTS {
                let expected = legal.iter().find(|(f, e, _)| *f == from && *e == event).map_or(from, |(_, _, to)| *to);
                assert_eq!(from.after(event), expected, "{from:?} --{event:?}-->");
            }
        }
    }

    /// No path through the table leaves a finished phase for an unfinished one, and the
    /// handshake is never entered again.
    #[test]
    fn finished_phases_stay_finished() {
        for from in kinds() {
            for event in EVENTS {
                let to = from.after(event);
                assert!(!from.is_finished() || to.is_finished(), "{from:?} --{event:?}--> {to:?}");
                assert!(from == PhaseKind::Handshaking || to != PhaseKind::Handshaking);
            }
        }
    }

    #[test]
    fn fail_and_lose_keep_the_first_error() {
        let first = || Error::ConnectionLost("first".into());
        let second = || Error::ConnectionLost("second".into());
        let mut p = Phase::Gone { keys: None, error: None };
        p.fail(first());
        p.lose(Some(second()));
        assert!(matches!(p.error(), Some(Error::ConnectionLost(m)) if m == "first"));
        let mut p = Phase::Failed(first());
        p.lose(Some(second()));
        assert_eq!(p.kind(), PhaseKind::Gone);
        assert!(matches!(p.error(), Some(Error::ConnectionLost(m)) if m == "first"));
        let mut p = Phase::Gone { keys: None, error: None };
        p.lose(None);
        assert!(p.error().is_none(), "a clean end has no error");
    }
}
