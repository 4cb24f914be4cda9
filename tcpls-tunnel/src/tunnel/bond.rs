//! Bonding: one tunneled TCP connection spread over every usable path of the session, in both
//! directions, instead of steered to one (docs/TUNNEL.md §6).
//!
//! The client leaves a bonded connection's stream unsteered, so its session's scheduler spreads
//! the uploads. For the downloads, the concentrator must stop steering the stream it steered on
//! accept: once the concentrator has answered Connect OK (so after it steered the stream), the
//! client sends a Stream Steer with the Connection ID "any" ([`tcpls::STEER_ANY`], PROTOCOL.md
//! §3). A concentrator that does not know that value ignores it (no such connection): the
//! download then stays on one path and everything else works as before.
//!
//! Both ends use [`EarliestArrival`] for unsteered data: each record goes on the path where it
//! would reach the peer first (queue ahead of it over the path's delivery rate, plus half its
//! RTT), and waits for the fast path rather than go late on a slow one. On unequal paths (40 and
//! 10 Mbit/s, 20 and 80 ms RTT) a scheduler that ignores the queue and the RTT fills the
//! receiver's window with slow-path data that arrives late (head-of-line blocking); see
//! docs/ARCHITECTURE.md ("Scheduler of aggregated streams") for the choice and its paper.
//! Backup paths keep their meaning: the session never schedules unsteered data on a backup
//! while a regular path is usable.

use tcpls::{EarliestArrival, RecvStream, Scheduler, Session, STEER_ANY};

/// The scheduler of the tunnel's sessions for unsteered (bonded) stream data.
pub fn scheduler() -> Box<dyn Scheduler> {
    Box::new(EarliestArrival)
}

/// Asks the concentrator to answer a new bonded stream on the session's lowest-RTT path: until
/// the client's "any" (after Connect OK) the concentrator steers the stream, by default round
/// robin, which would put every other answer behind the slow path's queue.
pub fn answer_on_fastest_path(session: &Session, recv: &RecvStream) {
    let fastest = session
        .connections()
        .into_iter()
        .filter(|c| c.usable && !c.suspect)
        .min_by_key(|c| c.tcp_info.as_ref().map_or(u32::MAX, |i| i.rtt_us));
    if let Some(c) = fastest {
        recv.request_steer(c.id);
    }
}

/// Asks the concentrator to spread this stream's download over every usable path (Stream
/// Steer "any"); call it after its Connect OK.
pub fn spread_download(recv: &RecvStream) {
    recv.request_steer(STEER_ANY);
}
