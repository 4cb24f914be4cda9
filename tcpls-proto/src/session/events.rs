//! Events for the application, waiting to be polled (`Session::poll_event`).
//!
//! Two queues, both bounded against peers that make us report things: ordinary events in the
//! order they happened, and answers to probes and per-connection requests, of which only the
//! latest of each kind per connection is kept.

use std::collections::VecDeque;

use crate::event::Event;

/// Events not yet polled beyond which the session stops reading: most events answer a peer's
/// frame one for one, so an IO layer that polls them only between reads must not see them pile
/// up (`Session::read_buffer`).
const MAX_QUEUED_EVENTS: usize = 4096;

/// Most answers to our probes and per-connection requests waiting to be polled.
const MAX_ANSWER_EVENTS: usize = 64;

#[derive(Debug, Default)]
pub(super) struct Events {
    queue: VecDeque<Event>,
    /// Answers to probes and per-connection requests, handed out after `queue`.
    answers: Vec<Event>,
}

impl Events {
    pub(super) fn push(&mut self, event: Event) {
        self.queue.push_back(event);
    }

    /// Reports an answer to one of our probes, or a peer's request about one connection (TCP
    /// Info, User Timeout, Congestion Control, Rate Limit). They come as many as the peer likes
    /// and about any connection ID, and only the latest of each kind matters: at most one per
    /// kind and connection is kept until the application polls it (the newest), and at most
    /// [`MAX_ANSWER_EVENTS`] in all. So a flood costs one event (and, in the IO layer, one
    /// socket call) per kind and connection, not one per frame.
    pub(super) fn push_answer(&mut self, event: Event) {
        let key = |e: &Event| match e {
            Event::RttMeasured { conn, .. } => Some((0, *conn)),
            Event::PeerTcpInfo { conn, .. } => Some((1, *conn)),
            Event::AddressEchoed { conn, .. } => Some((2, *conn)),
            Event::TcpInfoRequested { conn } => Some((3, *conn)),
            Event::UserTimeoutRequested { conn, .. } => Some((4, *conn)),
            Event::CongestionControlRequested { conn, .. } => Some((5, *conn)),
            Event::RateLimited { conn, .. } => Some((6, *conn)),
            _ => None,
        };
        let k = key(&event);
        if let Some(slot) = self.answers.iter_mut().find(|e| key(e) == k) {
            *slot = event;
        } else if self.answers.len() < MAX_ANSWER_EVENTS {
            self.answers.push(event);
        }
    }

    pub(super) fn poll(&mut self) -> Option<Event> {
        if let Some(event) = self.queue.pop_front() {
            return Some(event);
        }
        if self.queue.capacity() > MAX_QUEUED_EVENTS {
            // A burst of peer-triggered events is over: do not keep its memory.
            self.queue = VecDeque::new();
        }
        self.answers.pop()
    }

    /// So many events wait that the session should stop reading until they are polled.
    pub(super) fn backed_up(&self) -> bool {
        self.queue.len() > MAX_QUEUED_EVENTS
    }

    /// Events of both queues waiting to be polled (`Session::danger_queued_events`).
    #[cfg(feature = "danger")]
    pub(super) fn len(&self) -> usize {
        self.queue.len() + self.answers.len()
    }
}
