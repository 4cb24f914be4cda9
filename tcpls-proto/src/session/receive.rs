//! The receive path, socket to application, as one straight line (ARCHITECTURE.md, "The
//! receive path", lists the same functions in order):
//!
//! 1. [`Session::read_buffer`] hands the IO layer room in the connection's receive buffer
//!    (or nothing, under backpressure); [`Session::handle_read`] commits what it read
//!    ([`Session::handle_data`] copies bytes in instead).
//! 2. `Session::process` advances the TLS handshakes (`Session::drive_handshakes`), then
//!    has the connection open its records: `Connection::read_records` (conn.rs) ->
//!    `open_record` decrypts each one, straight into a stream's buffer when the connection's
//!    placement expectation names one (`placement.rs`), in place otherwise.
//! 3. Each record goes to the session (`RecordSink::deliver` -> `Core::on_inbound`,
//!    frames.rs): its frames are decoded once (`Core::on_frames`, or `placement::read_direct`
//!    for a zero-copy record) and acted on one by one (`Core::on_frame`): stream data into
//!    stream buffers (`on_stream_frame` / `on_direct_stream`), control frames into the parts
//!    they concern; consequences that need the connection table become `ConnAction`s.
//! 4. `Session::run_actions` carries those out (ACKs release sent records, resets lose
//!    connections, echoes are queued), and `Session::after_connection_change` (lifecycle.rs)
//!    reports finished connections, fails over what they carried, and ends or orphans the
//!    session when none is left.
//! 5. The application learns of it by [`Session::poll_event`] and reads with
//!    [`Session::read`] / [`Session::recv_chunk`] (stream_api.rs).

use std::time::Instant;

use crate::error::{AlertCode, TransportError};
use crate::event::{ConnId, Event};

use super::conn::HANDSHAKE_READ_CHUNK;
use super::conn::{Connection, Loss};
use super::conn_action::ConnAction;
use super::{Session, MAX_QUEUED_CONTROL};

impl Session {
    /// Free space to read socket bytes of `conn` into; report how many with [`Session::handle_read`].
    /// Empty when the connection should not be read now (finished, or backpressure).
    pub fn read_buffer(&mut self, conn: ConnId) -> &mut [u8] {
        // Stop reading while answers to the peer pile up (it sends probes or KeyUpdate requests
        // but does not read): TCP then pushes back on it instead of our memory growing.
        let replies_backed_up = self.core.control.entries() > MAX_QUEUED_CONTROL || self.core.events.backed_up();
        let backpressure = replies_backed_up || (self.core.life.is_fallback() && self.core.fallback_stream_full());
        let tx_cap = 2 * self.core.config.transmit_high_water;
        match self.conns.get_mut(conn) {
            Some(c) if !c.is_finished() && !c.close_received() && !backpressure && c.tx.len() < tx_cap => {
                // Small until the handshake is done: a peer that only connects costs little.
                let chunk =
                    if c.is_established() { c.reading.chunk } else { c.reading.chunk.min(HANDSHAKE_READ_CHUNK) };
                let spare = c.rx.spare(chunk);
                c.reading.last_spare = spare.len();
                spare
            }
            _ => &mut [],
        }
    }

    /// `n` bytes were read into [`Session::read_buffer`].
    pub fn handle_read(&mut self, conn: ConnId, n: usize, now: Instant) {
        if let Some(c) = self.conns.get_mut(conn) {
            c.rx.commit(n);
            c.stats.bytes_received += n as u64;
            c.reading.adapt_chunk(n);
        }
        self.process(conn, now);
        if let Some(c) = self.conns.get_mut(conn) {
            c.reading.release_idle(&mut c.rx, n);
        }
    }

    /// Copies received bytes in (tests, or IO layers without their own buffer).
    pub fn handle_data(&mut self, conn: ConnId, data: &[u8], now: Instant) {
        if let Some(c) = self.conns.get_mut(conn) {
            c.rx.extend(data);
            c.stats.bytes_received += data.len() as u64;
        }
        self.process(conn, now);
    }

    /// The socket returned EOF: without a close_notify before it, the connection is lost.
    pub fn handle_eof(&mut self, conn: ConnId, now: Instant) {
        self.core.clock.advance(now);
        self.lose_connection(conn, Loss::Eof);
    }

    /// The socket failed (reset, timeout, ...).
    pub fn handle_io_error(&mut self, conn: ConnId, reason: &str, now: Instant) {
        self.core.clock.advance(now);
        self.lose_connection(conn, Loss::Io(reason));
    }

    /// Connection `conn` is lost (its socket ended or failed, or we gave up on it): the one
    /// way a connection is marked lost. What it carried unacknowledged fails over.
    pub(super) fn lose_connection(&mut self, conn: ConnId, loss: Loss<'_>) {
        if let Some(c) = self.conns.get_mut(conn) {
            c.lose(loss);
        }
        self.after_connection_change();
    }

    /// Runs the handshake or record layer of `conn` over what it has buffered.
    pub(super) fn process(&mut self, conn: ConnId, now: Instant) {
        self.core.clock.advance(now);
        self.drive_handshakes();
        let Some(c) = self.conns.get_mut(conn) else {
            return;
        };
        let core = &mut self.core;
        let was_awaiting_join_ack = c.awaiting_join_ack();
        let opened_before = c.reading.records_opened;
        let result = c.read_records(core);
        if c.reading.records_opened != opened_before {
            // The connection is alive: whatever keepalive Ping was pending is answered.
            c.keepalive.on_record(Some(now));
        }
        if was_awaiting_join_ack && !c.awaiting_join_ack() {
            // The server answered on a joining connection: it is part of the session now.
            core.events.push(Event::ConnectionEstablished { conn: c.id });
            core.life.rejoined();
        }
        if let Err(e) = result {
            c.fail(e);
        }
        if core.life.is_fallback() && c.close_received() {
            core.on_fallback_peer_closed();
        }
        if self.peer_closed() && self.core.life.report_peer_close() {
            self.core.events.push(Event::PeerClosed);
        }
        self.run_actions();
        self.after_connection_change();
    }

    pub(super) fn drive_handshakes(&mut self) {
        for c in &mut self.conns {
            let result = c.drive_handshake();
            // Server: accepted early data goes to the session before the handshake completes.
            if let Err(e) = self.core.deliver_early_data(c) {
                c.fail(e);
                continue;
            }
            match result {
                Ok(None) => {}
                Ok(Some(info)) => {
                    c.keepalive.last_rx = self.core.clock.now();
                    if !self.core.life.is_established() {
                        self.core.settle_early_data(info.early_data_accepted);
                        self.core.on_established(c.id, &info, c.is_tcpls());
                    } else if !c.is_tcpls() {
                        // A joining connection must speak TCPLS like the session's first one.
                        c.fail(
                            TransportError::new(
                                AlertCode::NoApplicationProtocol,
                                "joined connection did not negotiate tcpls/1",
                            )
                            .into(),
                        );
                    } else if !c.awaiting_join_ack() {
                        self.core.events.push(Event::ConnectionEstablished { conn: c.id });
                    }
                }
                Err(e) => c.fail(e),
            }
        }
    }

    /// Carries out what received frames asked of the connection table.
    pub(super) fn run_actions(&mut self) {
        for action in std::mem::take(&mut self.core.actions) {
            match action {
                ConnAction::Reset(id) => {
                    if let Some(c) = self.conns.get_mut(id) {
                        c.lose(Loss::ReportedByPeer);
                    }
                }
                ConnAction::EchoRtt { conn, timestamp_us } => {
                    if self.conns.get(conn).is_some_and(Connection::is_usable) {
                        let echo = crate::frame::Frame::RttEcho { connection_id: conn, timestamp_us };
                        self.core.control.push_answer(&echo, conn, Some(conn));
                    }
                }
                ConnAction::Ack { conn, highest } => {
                    if let Some(c) = self.conns.get_mut(conn) {
                        self.core.on_acked(c, highest);
                    }
                }
                ConnAction::SetBackup { conn, backup } => {
                    // A connection we do not have (any more) is ignored (PROTOCOL.md §3).
                    if let Some(c) = self.conns.get_mut(conn) {
                        c.path.backup = backup;
                    }
                }
                ConnAction::Steer { stream, conn } => {
                    // Honoured when that connection can carry data; otherwise the stream stays
                    // where it is (the request may be stale, e.g. the connection just failed).
                    if conn == super::multipath::STEER_ANY {
                        let _ = self.steer_stream(stream, None);
                    } else if self.conns.get(conn).is_some_and(Connection::carries_streams) {
                        let _ = self.steer_stream(stream, Some(conn));
                    }
                }
                ConnAction::EchoAddress { on, about } => {
                    if let Some(addr) = self.conns.get(about).and_then(|c| c.path.remote) {
                        let echo = crate::frame::Frame::AddressEcho { connection_id: about, addr };
                        self.core.control.push_answer(&echo, about, Some(on));
                    }
                }
            }
        }
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.core.events.poll()
    }
}
