//! How much each connection may hold sealed and not yet written.

use super::conn::Connection;

/// While several connections are up, each seals ahead what its path delivers in this long
/// (`HighWater::of`), at least [`MULTIPATH_HIGH_WATER`].
pub const MULTIPATH_QUEUE_TIME: std::time::Duration = std::time::Duration::from_millis(20);

/// The least a connection may seal ahead while several are up.
pub const MULTIPATH_HIGH_WATER: usize = 128 << 10;

/// How much each connection may hold sealed and not yet written (`transmit_high_water`),
/// decided once per `prepare_transmit`.
#[derive(Debug, Clone, Copy)]
pub(super) struct HighWater {
    configured: usize,
    multipath: bool,
}

impl HighWater {
    pub(super) fn new(configured: usize, multipath: bool) -> Self {
        Self { configured, multipath }
    }

    /// With one connection, what is configured. With several, about [`MULTIPATH_QUEUE_TIME`]
    /// of what the connection's path delivers (TCP_INFO's delivery rate), between
    /// [`MULTIPATH_HIGH_WATER`] and what is configured: what is sealed is committed to its
    /// connection (records cannot move once encrypted), so a deep queue on a slow path delays
    /// the re-sending of a path that goes silent and the ACKs that wait behind it, while a
    /// fast path (loopback, a LAN) keeps its large queue and its few large writes.
    pub(super) fn of(&self, c: &Connection) -> usize {
        if !self.multipath {
            return self.configured;
        }
        match c.path.tcp.delivery_rate {
            Some(rate) => {
                let time_worth = rate.saturating_mul(MULTIPATH_QUEUE_TIME.as_millis() as u64) / 1000;
                (time_worth as usize).clamp(MULTIPATH_HIGH_WATER.min(self.configured), self.configured)
            }
            None => self.configured,
        }
    }

    pub(super) fn has_room(&self, c: &Connection) -> bool {
        c.tx.len() < self.of(c)
    }
}
