//! Flow-control credit under the session's receive budget: how much each stream may receive
//! (Max Stream Data), and whether a new peer stream fits at all (PROTOCOL.md §4.2; the memory
//! model in ARCHITECTURE.md).

use crate::event::StreamId;
use crate::frame::Frame;
use crate::stream::INITIAL_MAX_STREAM_DATA;

use super::streams::NEW_STREAM_CHARGE;
use super::Core;

/// Smallest Max Stream Data increase granted out of the receive budget (one full record).
const MIN_GRANT: u64 = crate::record::MAX_PLAINTEXT as u64;

/// The RTT a receive window's growth assumes before the IO layer has reported one: a reader
/// that takes half a window within twice this is fast enough to need more.
const UNKNOWN_RTT: std::time::Duration = std::time::Duration::from_millis(100);

impl Core {
    /// Sends Max Stream Data when the application freed enough of the window, within the
    /// session's receive budget; then retries the streams the budget held back, since reading
    /// this one may have freed some of it.
    pub(super) fn update_credit(&mut self, id: StreamId) {
        if self.life.is_fallback() {
            return;
        }
        // The budget in use over all streams: summed once per call (only if some stream is
        // due), then kept up to date by each grant, so retrying many starved streams stays
        // linear in the number of streams.
        let mut charged = None;
        self.grant_credit(id, &mut charged);
        for starved in self.streams.take_starved() {
            self.grant_credit(starved, &mut charged);
        }
    }

    /// Part of the receive budget that window growth leaves free for new streams, so that a
    /// few busy streams holding large windows do not make the session refuse the next ones.
    /// When the budget can hold every stream the concurrency limit allows at its initial window
    /// with room to spare (at most half of it), the reserve is exactly what the streams the peer
    /// may still open need: then the limit, never the budget, refuses a stream (the tunnel's
    /// sessions are sized so). Otherwise the budget bounds concurrency anyway, and a quarter of it
    /// (16 MiB, 256 initial windows, by default) is kept.
    fn admission_reserve(&self) -> u64 {
        let budget = self.config.receive_budget;
        let limit = self.config.max_concurrent_streams as u64;
        if limit.saturating_mul(NEW_STREAM_CHARGE) <= budget / 2 {
            let may_open = limit.saturating_sub(self.streams.peer_open() as u64);
            may_open.saturating_mul(NEW_STREAM_CHARGE)
        } else {
            budget / 4
        }
    }

    /// Whether a new peer stream fits in the receive budget, `charged` being in use: its
    /// initial 64 KiB window and its state are charged from the moment it opens. The first one
    /// always fits.
    pub(super) fn peer_stream_fits(&self, charged: u64) -> bool {
        self.streams.peer_open() == 0 || charged.saturating_add(NEW_STREAM_CHARGE) <= self.config.receive_budget
    }

    /// One stream's Max Stream Data, lowered to what the budget leaves beyond the admission
    /// reserve (but never below a window of [`INITIAL_MAX_STREAM_DATA`] past what the
    /// application read, which its charge already pays for). A stream that gets nothing is
    /// remembered and retried.
    fn grant_credit(&mut self, id: StreamId, charged: &mut Option<u64>) {
        let now = self.clock.now();
        let fast = self.credit_rtt.unwrap_or(UNKNOWN_RTT).saturating_mul(2);
        let Some(s) = self.streams.get_mut(id) else { return };
        let Some(mut wanted) = s.recv.wanted_limit() else { return };
        if s.recv.grow_window(now, fast) {
            wanted = s.recv.wanted_limit().unwrap_or(wanted);
        }
        let total = match *charged {
            Some(total) => total,
            None => self.streams.receive_charged(),
        };
        let room = self.config.receive_budget.saturating_sub(self.admission_reserve()).saturating_sub(total);
        let Some(s) = self.streams.get_mut(id) else { return };
        let before = s.receive_charge();
        let floor = s.recv.read_offset().saturating_add(INITIAL_MAX_STREAM_DATA);
        let limit = s.recv.limit();
        let granted = wanted.min(limit.saturating_add(room).max(floor));
        // A sliver of credit (the budget's last bytes) would only make the peer seal a short
        // record: wait until a record's worth is free, unless the stream is owed its floor
        // (its limit is below it, so the grant is not only the budget's to give).
        let sliver = granted < wanted && limit >= floor && granted.saturating_sub(limit) < MIN_GRANT;
        if granted <= limit || sliver {
            self.streams.starve(id);
            *charged = Some(total);
            return;
        }
        s.recv.advertise(granted, now);
        *charged = Some(total.saturating_sub(before).saturating_add(s.receive_charge()));
        self.control.push(&Frame::MaxStreamData { stream_id: id, maximum_offset: granted }, None);
    }
}
