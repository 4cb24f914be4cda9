//! Outbound connections in stream order.
//!
//! A concentrator serves each stream in a task of its own, so without care the connections to
//! destinations would be opened in whatever order those tasks run. Some applications tell their
//! connections apart by the order in which the server accepts them: iperf3's server gives the
//! first data connection of a `--bidir` test the receiving role and the second the sending role,
//! and crossed roles stall the test. Each stream therefore takes a ticket when it is accepted,
//! and starts its connection (sends the SYN) only after every earlier stream has started its own
//! or given up, or after a short wait, so that one slow stream (a slow name lookup, a request
//! that never comes) delays the others by at most that.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tcpls_proto::sync::LockExt;
use tokio::sync::watch;

/// How long a stream waits for earlier streams to start their connections.
pub(crate) const MAX_ORDER_WAIT: Duration = Duration::from_millis(100);

/// The tickets of one session.
pub(crate) struct ConnectOrder {
    next_ticket: Mutex<Tickets>,
    /// Lowest ticket whose connection has not started: every ticket below it has.
    lowest_waiting: watch::Sender<u64>,
}

#[derive(Default)]
struct Tickets {
    next: u64,
    /// Tickets released before a lower one (kept until the lower ones are released too; at
    /// most one per stream in progress).
    released_early: BTreeSet<u64>,
}

impl ConnectOrder {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self { next_ticket: Mutex::new(Tickets::default()), lowest_waiting: watch::Sender::new(0) })
    }

    /// The next stream's place, in the order of this call.
    pub(crate) fn ticket(self: &Arc<Self>) -> Turn {
        let mut t = self.next_ticket.lock_unpoisoned();
        let ticket = t.next;
        t.next += 1;
        Turn { order: self.clone(), ticket }
    }

    fn release(&self, ticket: u64) {
        let mut t = self.next_ticket.lock_unpoisoned();
        let mut lowest = *self.lowest_waiting.borrow();
        if ticket != lowest {
            t.released_early.insert(ticket);
            return;
        }
        lowest += 1;
        while t.released_early.remove(&lowest) {
            lowest += 1;
        }
        self.lowest_waiting.send_replace(lowest);
    }
}

/// One stream's place in the order; dropping it lets the later streams go.
pub(crate) struct Turn {
    order: Arc<ConnectOrder>,
    ticket: u64,
}

impl Turn {
    /// Waits until every earlier stream has started its connection or dropped its turn, or for
    /// `max` at most.
    pub(crate) async fn wait(&self, max: Duration) {
        let mut rx = self.order.lowest_waiting.subscribe();
        let _ = tokio::time::timeout(max, rx.wait_for(|lowest| *lowest >= self.ticket)).await;
    }
}

impl Drop for Turn {
    fn drop(&mut self) {
        self.order.release(self.ticket);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn later_tickets_wait_for_earlier_ones_up_to_the_limit() {
        let order = ConnectOrder::new();
        let (first, second, third) = (order.ticket(), order.ticket(), order.ticket());
        // The first goes at once.
        let started = tokio::time::Instant::now();
        first.wait(MAX_ORDER_WAIT).await;
        assert_eq!(started.elapsed(), Duration::ZERO);
        // The third waits for the second, which is released early: then at once.
        let waiting = tokio::spawn(async move {
            let started = tokio::time::Instant::now();
            third.wait(MAX_ORDER_WAIT).await;
            started.elapsed()
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        drop(second);
        tokio::time::sleep(Duration::from_millis(10)).await;
        drop(first);
        assert_eq!(waiting.await.unwrap(), Duration::from_millis(20));
        // A ticket behind one that never goes waits for the limit only.
        let stuck = order.ticket();
        let next = order.ticket();
        let started = tokio::time::Instant::now();
        next.wait(MAX_ORDER_WAIT).await;
        assert_eq!(started.elapsed(), MAX_ORDER_WAIT);
        drop(stuck);
        drop(next);
        assert_eq!(*order.lowest_waiting.borrow(), 5);
        assert!(order.next_ticket.lock().unwrap().released_early.is_empty());
    }
}
