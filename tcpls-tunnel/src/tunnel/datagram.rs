//! What plain and redundant UDP flows share: the largest datagram carried and the idle clock of
//! a flow.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Largest datagram carried (the Length field's range; an IPv4 UDP payload is at most 65,507).
pub const MAX_DATAGRAM: usize = u16::MAX as usize;

/// Time since `start` in milliseconds, for an idle clock shared by two directions.
pub(super) fn millis(start: Instant) -> u64 {
    u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// Resolves when nothing was recorded in `last` for `idle`.
pub(super) async fn idle_for(start: Instant, last: &AtomicU64, idle: Duration) {
    let idle_ms = u64::try_from(idle.as_millis()).unwrap_or(u64::MAX);
    loop {
        let quiet = millis(start).saturating_sub(last.load(Ordering::Relaxed));
        if quiet >= idle_ms {
            return;
        }
        tokio::time::sleep(Duration::from_millis(idle_ms - quiet)).await;
    }
}
