//! The session events a binding's application pulls (`tcpls_next_event`): streams opened by the
//! peer, paths up and down, failover, migration, the end of the session.

use tcpls::Event;

/// Most events kept for an application that does not pull them; the newest are dropped beyond
/// (the session-closed event always gets through: the pump waits for room for it).
pub const MAX_QUEUED_EVENTS: usize = 1024;

/// What happened. The numbers are the C API's `TCPLS_EVENT_*` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// The peer opened a stream: `stream` is its ID; accept it with `tcpls_stream_accept`.
    StreamOpened = 1,
    /// A TCP connection (path) added after the first can carry data: `conn`.
    PathUp = 2,
    /// A TCP connection ended: `conn`; `detail` says why ("" after a clean close).
    PathDown = 3,
    /// A connection failed with data in flight; it is being re-sent on the others: `conn`.
    Failover = 4,
    /// A stream moved to another connection: `stream`, `conn` (0 with `detail` "scheduler" when
    /// it is spread over all of them again).
    Migration = 5,
    /// Every connection was lost; the session waits for a path to come back.
    AllPathsLost = 6,
    /// The session is over; `detail` is its error ("" after a clean close). The last event.
    SessionClosed = 7,
}

/// One event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppEvent {
    pub kind: EventKind,
    pub conn: u32,
    pub stream: u32,
    pub detail: String,
}

impl AppEvent {
    pub fn new(kind: EventKind) -> Self {
        Self { kind, conn: 0, stream: 0, detail: String::new() }
    }

    /// The application event of a core event, for the events an application of the bindings
    /// can act on (the others stay inside the library).
    pub fn from_core(event: &Event) -> Option<AppEvent> {
        let mut e = match event {
            Event::ConnectionEstablished { conn } => AppEvent { conn: *conn, ..AppEvent::new(EventKind::PathUp) },
            Event::ConnectionClosed { conn, error } => AppEvent {
                conn: *conn,
                detail: error.as_ref().map(|e| e.to_string()).unwrap_or_default(),
                ..AppEvent::new(EventKind::PathDown)
            },
            Event::FailedOver { conn } => AppEvent { conn: *conn, ..AppEvent::new(EventKind::Failover) },
            Event::StreamSteered { stream, conn } => AppEvent {
                stream: *stream,
                conn: conn.unwrap_or(0),
                detail: if conn.is_none() { "scheduler".into() } else { String::new() },
                ..AppEvent::new(EventKind::Migration)
            },
            Event::AllConnectionsLost => AppEvent::new(EventKind::AllPathsLost),
            Event::Closed { error } => AppEvent {
                detail: error.as_ref().map(|e| e.to_string()).unwrap_or_default(),
                ..AppEvent::new(EventKind::SessionClosed)
            },
            _ => return None,
        };
        truncate_on_char(&mut e.detail, MAX_DETAIL);
        Some(e)
    }
}

/// Longest `detail` kept (the C event struct has a fixed buffer).
pub(crate) const MAX_DETAIL: usize = 200;

/// Cuts `s` to at most `max` bytes, on a character boundary.
pub(crate) fn truncate_on_char(s: &mut String, max: usize) {
    if s.len() > max {
        let cut = (0..=max).rev().find(|i| s.is_char_boundary(*i)).unwrap_or(0);
        s.truncate(cut);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_details_are_cut_on_a_character_boundary() {
        let mut s = "é".repeat(MAX_DETAIL);
        truncate_on_char(&mut s, MAX_DETAIL + 1);
        assert_eq!(s.len(), MAX_DETAIL);
        assert!(s.chars().all(|c| c == 'é'));
    }
}
