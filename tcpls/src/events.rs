//! The events a session keeps for its application, and the one event the IO layer makes itself.
//!
//! The core's events ([`tcpls_proto::Event`]) come out of `Session::poll_event` inside the
//! driver; those the application may want are queued here for [`Session::poll_events`]. The
//! IO layer acts on some of them with system calls the core cannot make (socket options): their
//! outcomes are this crate's own [`SocketOptionApplied`], queued apart for
//! [`Session::poll_socket_options`], so the core's `Event` stays free of anything only an IO
//! layer can produce and `poll_events` keeps its type.
//!
//! [`Session::poll_events`]: crate::Session::poll_events
//! [`Session::poll_socket_options`]: crate::Session::poll_socket_options

use std::collections::VecDeque;

use tcpls_proto::ConnId;

/// Most events a queue keeps for an application that does not poll them: the oldest go first,
/// so a session nobody polls holds a bounded amount of memory.
pub(crate) const MAX_APP_EVENTS: usize = 1024;

/// Events waiting for the application, oldest first, at most [`MAX_APP_EVENTS`].
#[derive(Debug)]
pub(crate) struct EventQueue<T>(VecDeque<T>);

impl<T> Default for EventQueue<T> {
    fn default() -> Self {
        Self(VecDeque::new())
    }
}

impl<T> EventQueue<T> {
    /// Queues `event`, dropping the oldest one when the queue is full.
    pub(crate) fn push(&mut self, event: T) {
        if self.0.len() == MAX_APP_EVENTS {
            self.0.pop_front();
        }
        self.0.push_back(event);
    }

    /// Every queued event, oldest first; the queue is left empty.
    pub(crate) fn drain(&mut self) -> Vec<T> {
        self.0.drain(..).collect()
    }
}

/// The IO layer acted on a peer's request to change a socket option of one of our connections
/// (User Timeout and Congestion Control frames, PROTOCOL.md §7). Reported on the side that
/// received the request, by [`Session::poll_socket_options`](crate::Session::poll_socket_options).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocketOptionApplied {
    pub conn: ConnId,
    /// `"congestion_control"` or `"user_timeout"`.
    pub option: &'static str,
    /// The congestion control's name, or the timeout in milliseconds.
    pub value: String,
    /// Ok when applied; otherwise why not (our policy, or the kernel's error).
    pub result: Result<(), String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_queue_drops_its_oldest_events() {
        let mut queue = EventQueue::default();
        for i in 0..MAX_APP_EVENTS + 3 {
            queue.push(i);
        }
        let kept = queue.drain();
        assert_eq!(kept.len(), MAX_APP_EVENTS);
        assert_eq!(kept.first(), Some(&3), "the three oldest went");
        assert_eq!(kept.last(), Some(&(MAX_APP_EVENTS + 2)));
        assert!(queue.drain().is_empty(), "drained");
    }
}
