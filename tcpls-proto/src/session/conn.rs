//! One TCP connection of a session: its handshake, record layer and byte buffers.
//!
//! A connection knows nothing of streams. It turns received bytes into decrypted record
//! plaintexts (handed to the session as [`Inbound`]) and seals what the session gives it.

use std::net::SocketAddr;

use super::placement::{self, Expectation, LeadStream, Scan};
use super::{MIN_READ_CHUNK, READ_CHUNK};
use crate::error::{AlertCode, Error, TransportError};
use crate::event::ConnId;
use crate::event::StreamId;
use crate::frame::Frame;
use crate::record::{
    next_record, plaintext_len, RecordKey, RxBuf, TxBuf, CT_ALERT, CT_APPLICATION_DATA, CT_HANDSHAKE, HS_KEY_UPDATE,
    HS_NEW_SESSION_TICKET,
};
use crate::tls::{FallbackTls, Handshake, HandshakeInfo, HandshakeOutcome, Kernel, Progress};

/// Our record layer on an established TCPLS connection.
#[derive(Debug)]
pub(super) struct RecordLayer {
    pub(super) tx: RecordKey,
    pub(super) rx: RecordKey,
    kernel: Kernel,
    /// Sequence number at which the current sending key was installed.
    tx_key_since: u64,
    /// Records sealed (tx) and opened (rx) under earlier key generations: record numbers run
    /// on across KeyUpdate (which restarts TLS sequence numbers) so ACKs stay unambiguous.
    tx_base: u64,
    rx_base: u64,
    pub(super) key_updates_sent: u64,
    pub(super) key_updates_received: u64,
    /// `key_updates_sent` after our last KeyUpdate that answered a request: while nothing was
    /// sealed since, further requests get no new answer (RFC 8446 §4.6.3: a silent receiver of
    /// several requests responds with a single update), so a peer cannot make us rotate keys
    /// once per request it sends.
    answered_update: Option<u64>,
}

/// Where a connection is in its life. Transitions:
///
/// ```text
/// Handshaking ─┬─> Open ─────────────┬─> Closing { sent, received } ─> (both) finished
///              └─> AwaitingJoinAck ──┘
/// any ─> Failed (fatal error, alert queued)      any ─> Gone (socket ended or given up)
/// ```
///
/// `Failed` and `Gone` and a close_notify both ways are the finished states
/// ([`Connection::is_finished`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Phase {
    Handshaking,
    /// Client, joining connection: the handshake is done but the server has not answered on it
    /// yet, so it may still refuse the join: stream data waits (it would be lost with it).
    AwaitingJoinAck,
    /// Carries records both ways.
    Open,
    /// close_notify went out, came in, or both.
    Closing {
        sent: bool,
        received: bool,
    },
    /// A fatal error: its alert is queued if keys allowed; nothing more is sealed or read.
    Failed,
    /// The socket reached EOF or failed, or we gave up on it: nothing more is written either.
    Gone,
}

impl Phase {
    fn close_sent(self) -> bool {
        matches!(self, Phase::Closing { sent: true, .. } | Phase::Failed | Phase::Gone)
    }

    fn close_received(self) -> bool {
        matches!(self, Phase::Closing { received: true, .. })
    }

    /// After the peer's close_notify (TCPLS alert, or the end of a fallback TLS stream).
    fn after_close_received(self) -> Phase {
        match self {
            Phase::Closing { sent, .. } => Phase::Closing { sent, received: true },
            Phase::Failed | Phase::Gone => self,
            _ => Phase::Closing { sent: false, received: true },
        }
    }

    /// After a record from the server on a joining connection: it accepted the join (a
    /// refusal is an alert).
    fn after_join_answer(self) -> Phase {
        match self {
            Phase::AwaitingJoinAck => Phase::Open,
            other => other,
        }
    }
}

/// Why a connection was lost ([`Connection::lose`]), as its error says it.
#[derive(Debug, Clone, Copy)]
pub(super) enum Loss<'a> {
    /// The socket returned EOF without a close_notify before it.
    Eof,
    /// The socket failed (reset, timeout, ...).
    Io(&'a str),
    /// A keepalive Ping went unanswered.
    KeepaliveTimeout,
    /// Records went unacknowledged, with no progress, for this long (`loss.rs`).
    Silent(std::time::Duration),
    /// Suspect of silence when the session closed: given up rather than waited for.
    SilentAtClose,
    /// Suspect of silence, and replaced by a new connection over the same path.
    Replaced,
    /// The peer reported the connection as failed (Connection Reset).
    ReportedByPeer,
}

impl Loss<'_> {
    fn error(self) -> Error {
        Error::ConnectionLost(match self {
            Loss::Eof => "TCP connection closed without close_notify".into(),
            Loss::Io(reason) => reason.to_string(),
            Loss::KeepaliveTimeout => "no answer to a keepalive Ping".into(),
            Loss::Replaced => {
                "given up: the path had gone silent and a new connection replaced this one".into()
            }
            Loss::SilentAtClose => {
                "given up at close: the path had gone silent (its records were re-sent on the others)".into()
            }
            Loss::Silent(t) => format!(
                "the path went silent: nothing acknowledged for {:.1} s (no RST: a link down, packets dropped, out of range)",
                t.as_secs_f64()
            ),
            Loss::ReportedByPeer => "the peer reported this connection as failed".into(),
        })
    }
}

/// The connection's keys and TLS state (its life is [`Phase`]).
#[derive(Debug)]
pub(super) enum ConnState {
    Handshaking(Handshake, crate::tls::handshake_exposed::Exposed),
    /// Boxed: the keys are large next to the other states.
    Tcpls(Box<RecordLayer>),
    Fallback(FallbackTls),
    /// No keys: the handshake failed or the connection did.
    Failed,
}

/// Per-connection counters, reported by `tcpls perf`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ConnStats {
    pub bytes_received: u64,
    pub bytes_sent: u64,
    pub records_received: u64,
    pub records_sent: u64,
}

#[derive(Debug)]
pub(super) struct Connection {
    pub(super) id: ConnId,
    pub(super) state: ConnState,
    pub(super) rx: RxBuf,
    pub(super) tx: TxBuf,
    pub(super) info: Option<HandshakeInfo>,
    pub(super) stats: ConnStats,
    pub(super) local: Option<SocketAddr>,
    pub(super) remote: Option<SocketAddr>,
    /// Its life; changed only by the transition methods below.
    phase: Phase,
    /// Why it failed or was lost (none: closed cleanly, or not over).
    pub(super) error: Option<Error>,
    /// The session reported its end to the application (`Event::ConnectionClosed`).
    pub(super) reported: bool,
    /// Records decrypted on this connection (for ACK frames; the next expected sequence).
    pub(super) records_opened: u64,
    /// Records sealed on this connection whose frames the peer has not acknowledged yet,
    /// oldest first (kept only with failover on): what a failover re-sends elsewhere.
    pub(super) sent_log: std::collections::VecDeque<SentRecord>,
    /// Bytes of control frames held in `sent_log`.
    pub(super) sent_log_control: usize,
    /// How its records are acknowledged: RTT, progress clock, suspicion (`loss.rs`).
    pub(super) loss: super::loss::LossState,
    /// TCPLS records (content type 23) received: the first one may carry a Join.
    pub(super) app_records: u64,
    /// Client side of a joining connection: the token its first record must carry.
    pub(super) join_token: Option<[u8; 32]>,
    /// Client side of a connection rejoining without a token: its Rejoin frame's session
    /// reference and rejoin key (the proof is computed once the handshake is done).
    pub(super) rejoin: Option<super::multipath::RejoinCredentials>,
    /// TCPLS connections: the secret of this TLS connection (for rejoin, PROTOCOL.md §3).
    pub(super) secret: Option<crate::tls::ConnSecret>,
    /// A backup path (Path Priority, PROTOCOL.md §3): no unsteered stream data while a regular
    /// connection can carry it.
    pub(super) backup: bool,
    /// Stop processing received records until the session decides (a Join waits for its
    /// target session).
    pub(super) paused: bool,
    /// Keepalive: when a record last arrived, and when an unanswered Ping went out.
    pub(super) last_rx: Option<std::time::Instant>,
    pub(super) ping_sent: Option<std::time::Instant>,
    /// Server: accepted early-data plaintexts, for the session (see `early.rs`).
    pub(super) early_received: Vec<Vec<u8>>,
    /// Path information from the IO layer (TCP_INFO), for the scheduler.
    pub(super) path: super::sched::PathInfo,
    /// Zero-copy receive: where the next stream record is expected to go (`placement.rs`).
    pub(super) expect: Expectation,
    /// A record decrypted into a stream's buffer but belonging elsewhere, moved here to take
    /// the ordinary path (stream data is copied only then).
    rx_scratch: Vec<u8>,
    /// The frames behind the leading Stream frame of a record decrypted into a stream's buffer,
    /// as decoded once by `placement::read_direct` (values: they borrow nothing).
    rx_rest: Vec<Frame<'static>>,
    /// How much the next socket read asks for: grows while reads fill the buffer (bulk), and
    /// shrinks back when they do not, so an idle connection does not hold a bulk-sized buffer.
    pub(super) read_chunk: usize,
    /// Length of the last [`Session::read_buffer`](super::Session::read_buffer) handed out.
    pub(super) last_spare: usize,
    /// Stream data went out or came in on it: without failover, losing it may lose stream
    /// bytes (`on_connection_finished`).
    pub(super) carried_streams: bool,
}

/// What one sealed record carried, by reference: a stream range and retransmittable control
/// frames (encoded; ACKs are not kept, they are stale once lost).
#[derive(Debug)]
pub(super) struct SentRecord {
    /// Record number on its connection (see `RecordLayer::tx_base`).
    pub(super) number: u64,
    /// When it was sealed: its acknowledgement is an RTT sample (`loss.rs`).
    pub(super) sent_at: Option<std::time::Instant>,
    pub(super) stream: Option<(crate::event::StreamId, u64, usize, bool)>,
    pub(super) control: Vec<u8>,
}

/// Where decrypted records go: the session.
pub(super) trait RecordSink {
    /// Acts on one record. For [`Inbound::Frames`] the sink notes the placement facts of the
    /// frames in `scan` as it reads them (each record's frames are decoded once).
    fn deliver(
        &mut self,
        conn: ConnId,
        seq: u64,
        inbound: Inbound<'_>,
        scan: &mut Scan,
    ) -> Result<Flow, TransportError>;
    /// Storage for stream `id`'s bytes `offset..offset + len`, to decrypt a record of `len`
    /// plaintext bytes into; `None` when the stream cannot take it (zero-copy off, unknown or
    /// reset stream, out of window, overlapping received bytes).
    fn direct_slot(&mut self, id: StreamId, offset: u64, len: usize) -> Option<&mut [u8]>;
}

/// Where [`Connection::read_records`] opened a record.
enum Opened {
    /// In the receive buffer, `range` of the record.
    InPlace(u8, std::ops::Range<usize>),
    /// In a stream's buffer, as expected (`scan.lead`); its other frames are decoded in
    /// `rx_rest`.
    Direct(Scan),
    /// In a stream's buffer, but the record belongs elsewhere: its content was moved to
    /// `rx_scratch` and takes the ordinary path.
    Moved(u8),
}

/// What the session wants after a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Flow {
    Continue,
    /// Leave the following records in the buffer (the connection is about to change session).
    Pause,
}

/// A decrypted record handed to the session.
pub(super) enum Inbound<'a> {
    /// TCPLS frames (inner content type 23); `first` for the connection's first such record.
    Frames { plaintext: &'a [u8], first: bool },
    /// A record decrypted straight into stream `lead.id`'s receive buffer at `lead.offset`
    /// (obtained from [`RecordSink::direct_slot`]), whose leading Stream frame says so: its
    /// data is in place and only needs committing. `rest` are the record's other frames,
    /// decoded, in reader order (last on the wire first).
    Direct { lead: LeadStream, rest: &'a [Frame<'static>] },
    /// Application bytes of a plain-TLS (fallback) connection.
    PlainData(&'a [u8]),
}

impl Connection {
    pub(super) fn new(id: ConnId, handshake: Handshake) -> Self {
        Self {
            id,
            state: ConnState::Handshaking(handshake, Default::default()),
            rx: RxBuf::default(),
            tx: TxBuf::default(),
            info: None,
            stats: ConnStats::default(),
            local: None,
            remote: None,
            phase: Phase::Handshaking,
            reported: false,
            error: None,
            records_opened: 0,
            sent_log: std::collections::VecDeque::new(),
            sent_log_control: 0,
            loss: Default::default(),
            app_records: 0,
            join_token: None,
            rejoin: None,
            secret: None,
            backup: false,
            paused: false,
            path: Default::default(),
            last_rx: None,
            ping_sent: None,
            early_received: Vec::new(),
            expect: Expectation::default(),
            rx_scratch: Vec::new(),
            rx_rest: Vec::new(),
            read_chunk: MIN_READ_CHUNK,
            last_spare: 0,
            carried_streams: false,
        }
    }

    /// A read of `n` bytes came in: a full buffer means more is waiting (read more next time,
    /// up to [`READ_CHUNK`]); a small read means the connection is not busy.
    pub(super) fn adapt_read_chunk(&mut self, n: usize) {
        if n > 0 && n >= self.last_spare {
            self.read_chunk = (self.read_chunk * 4).min(READ_CHUNK);
        } else if n < self.read_chunk / 8 {
            self.read_chunk = (self.read_chunk / 2).max(MIN_READ_CHUNK);
        }
    }

    /// Frees a receive buffer that holds nothing after a read of `n` bytes when it is much
    /// larger than reads need now, or when the connection is quiet (reads at their smallest)
    /// and this read drained the socket (it returned less than asked): an idle connection
    /// holds no buffer, and the next read allocates one (a busy one keeps its buffer).
    pub(super) fn release_idle_rx(&mut self, n: usize) {
        let drained = n < self.last_spare && self.read_chunk == MIN_READ_CHUNK;
        if self.rx.is_empty() && (self.rx.capacity() > 2 * self.read_chunk || drained) {
            self.rx.shrink();
        }
    }

    pub(super) fn is_tcpls(&self) -> bool {
        matches!(self.state, ConnState::Tcpls(_))
    }

    /// The TLS handshake completed and the connection has not finished.
    pub(super) fn is_established(&self) -> bool {
        matches!(self.phase, Phase::AwaitingJoinAck | Phase::Open | Phase::Closing { .. })
            && !matches!(self.state, ConnState::Handshaking(..))
            && !self.is_finished()
    }

    /// Client: a joining connection the server has not answered on yet.
    pub(super) fn awaiting_join_ack(&self) -> bool {
        self.phase == Phase::AwaitingJoinAck
    }

    /// We sent close_notify, or failed: nothing more may be sealed.
    pub(super) fn close_sent(&self) -> bool {
        self.phase.close_sent()
    }

    /// The peer's close_notify arrived (and the connection did not fail since).
    pub(super) fn close_received(&self) -> bool {
        self.phase.close_received()
    }

    /// Nothing can be written to the socket any more.
    pub(super) fn is_gone(&self) -> bool {
        self.phase == Phase::Gone
    }

    /// Can carry new records.
    pub(super) fn is_usable(&self) -> bool {
        matches!(self.phase, Phase::AwaitingJoinAck | Phase::Open | Phase::Closing { sent: false, .. })
            && matches!(self.state, ConnState::Tcpls(_) | ConnState::Fallback(_))
    }

    /// The socket ended or failed, or the connection is given up: nothing more is read or
    /// written. An EOF after the peer's close_notify is a clean end; any other loss is the
    /// connection's error (unless it already had one).
    pub(super) fn lose(&mut self, loss: Loss<'_>) {
        let clean = matches!(loss, Loss::Eof) && self.close_received();
        self.phase = Phase::Gone;
        if !clean && self.error.is_none() {
            self.error = Some(loss.error());
        }
    }

    /// Number the next sealed record gets (monotonic over the connection's life).
    pub(super) fn next_tx_number(&self) -> u64 {
        match &self.state {
            ConnState::Tcpls(layer) => layer.tx_base + layer.tx.seq(),
            _ => 0,
        }
    }

    /// Can carry stream records: usable, and (for a joining connection) accepted by the server.
    pub(super) fn carries_streams(&self) -> bool {
        self.is_up() && !self.is_suspect()
    }

    /// Usable, and (for a joining connection) accepted by the server: up as far as TCP and TLS
    /// say, suspect of silence or not (`loss.rs`).
    pub(super) fn is_up(&self) -> bool {
        self.is_usable() && !self.join_pending() && !self.awaiting_join_ack()
    }

    /// Advances the handshake. Returns the outcome's info once, when it completes.
    pub(super) fn drive_handshake(&mut self) -> Result<Option<HandshakeInfo>, Error> {
        let ConnState::Handshaking(hs, exposed) = &mut self.state else {
            return Ok(None);
        };
        let progress = hs.drive(&mut self.rx, &mut self.tx, exposed);
        self.early_received.extend(hs.take_early_data());
        match progress {
            Ok(Progress::NeedData) => Ok(None),
            Ok(Progress::Complete) => {
                let ConnState::Handshaking(hs, _) = std::mem::replace(&mut self.state, ConnState::Failed) else {
                    return Ok(None);
                };
                let info = match hs.finish()? {
                    HandshakeOutcome::Tcpls { tx, rx, kernel, info, secret } => {
                        self.secret = Some(secret);
                        let tx_key_since = tx.seq();
                        self.state = ConnState::Tcpls(Box::new(RecordLayer {
                            tx,
                            rx,
                            kernel,
                            tx_key_since,
                            tx_base: 0,
                            rx_base: 0,
                            key_updates_sent: 0,
                            key_updates_received: 0,
                            answered_update: None,
                        }));
                        info
                    }
                    HandshakeOutcome::Fallback { tls, info } => {
                        self.state = ConnState::Fallback(tls);
                        info
                    }
                };
                self.info = Some(info.clone());
                if self.phase == Phase::Handshaking {
                    self.phase = if self.join_pending() { Phase::AwaitingJoinAck } else { Phase::Open };
                }
                Ok(Some(info))
            }
            Err(e) => {
                hs.take_alert(&mut self.rx, *exposed, &mut self.tx);
                self.state = ConnState::Failed;
                Err(e)
            }
        }
    }

    /// Decrypts every whole record in the receive buffer and hands each plaintext to the sink.
    /// Stops early (leaving records in the buffer) when the sink says so, e.g. because a
    /// fallback stream is full.
    pub(super) fn read_records(&mut self, sink: &mut dyn RecordSink) -> Result<(), Error> {
        let id = self.id;
        match &mut self.state {
            ConnState::Tcpls(layer) => loop {
                if self.paused {
                    return Ok(());
                }
                let Some(span) = next_record(self.rx.data())? else {
                    return Ok(());
                };
                if self.phase.close_received() {
                    return Err(TransportError::unexpected("record after close_notify").into());
                }
                let seq = layer.rx_base + layer.rx.seq();
                let record = &mut self.rx.data_mut()[..span.len];
                let opened = open_record(layer, record, self.expect, sink, &mut self.rx_scratch, &mut self.rx_rest)?;
                self.records_opened = layer.rx_base + layer.rx.seq();
                self.stats.records_received += 1;
                let (content_type, content): (u8, &[u8]) = match &opened {
                    Opened::InPlace(ct, range) => (*ct, &self.rx.data()[range.clone()]),
                    Opened::Direct(..) => (CT_APPLICATION_DATA, &[]),
                    Opened::Moved(ct) => (*ct, &self.rx_scratch),
                };
                match content_type {
                    CT_APPLICATION_DATA => {
                        let first = self.app_records == 0;
                        self.app_records += 1;
                        // Any record from the server on a joining connection means it accepted
                        // the join (a refusal is an alert).
                        self.phase = self.phase.after_join_answer();
                        let (inbound, mut scan) = match opened {
                            Opened::Direct(scan @ Scan { lead: Some(lead), .. }) => {
                                (Inbound::Direct { lead, rest: &self.rx_rest }, scan)
                            }
                            _ => (Inbound::Frames { plaintext: content, first }, Scan::default()),
                        };
                        let flow = sink.deliver(id, seq, inbound, &mut scan)?;
                        self.carried_streams |= scan.lead.is_some();
                        self.expect.observe(&scan);
                        if flow == Flow::Pause {
                            self.paused = true;
                        }
                    }
                    CT_ALERT => {
                        let (level, desc) = match content {
                            [level, desc] => (*level, *desc),
                            _ => return Err(TransportError::decode("malformed alert").into()),
                        };
                        if desc == AlertCode::CloseNotify as u8 {
                            self.phase = self.phase.after_close_received();
                        } else if level == 2 || desc != 90 {
                            // Fatal, or a warning TLS 1.3 does not define (user_canceled is 90).
                            return Err(Error::PeerAlert(desc));
                        }
                    }
                    // After our close_notify nothing more may be sent: a KeyUpdate request is
                    // then processed (the peer's key still rotates) but not answered.
                    CT_HANDSHAKE => post_handshake(layer, content, &mut self.tx, !self.phase.close_sent())?,
                    other => {
                        return Err(TransportError::unexpected(format!("inner content type {other}")).into());
                    }
                }
                self.rx.consume(span.len);
            },
            ConnState::Fallback(tls) => {
                let mut failure = None;
                let result = tls.read(&mut self.rx, &mut self.tx, &mut |data| {
                    if failure.is_none() {
                        if let Err(e) = sink.deliver(id, 0, Inbound::PlainData(data), &mut Scan::default()) {
                            failure = Some(e);
                        }
                    }
                })?;
                if failure.is_none() && self.app_records == 0 {
                    self.app_records = 1;
                }
                if let Some(e) = failure {
                    return Err(e.into());
                }
                if result.peer_closed {
                    self.phase = self.phase.after_close_received();
                }
                Ok(())
            }
            ConnState::Handshaking(..) | ConnState::Failed => Ok(()),
        }
    }

    /// Rotates our sending key when it has protected `limit` records (KeyUpdate, RFC 8446 §4.6.3).
    pub(super) fn maybe_update_key(&mut self, limit: u64) -> Result<(), TransportError> {
        if let ConnState::Tcpls(layer) = &mut self.state {
            if layer.tx.seq().saturating_sub(layer.tx_key_since) >= limit {
                send_key_update(layer, false, &mut self.tx)?;
            }
        }
        Ok(())
    }

    /// Sends KeyUpdate now, asking the peer to update too when `request_peer`.
    pub(super) fn update_key(&mut self, request_peer: bool) -> Result<(), TransportError> {
        match &mut self.state {
            ConnState::Tcpls(layer) if !self.phase.close_sent() => send_key_update(layer, request_peer, &mut self.tx),
            _ => Err(TransportError::internal("KeyUpdate needs an open TCPLS connection")),
        }
    }

    /// Seals a close_notify alert (once).
    pub(super) fn send_close_notify(&mut self) -> Result<(), Error> {
        if self.close_sent() {
            return Ok(());
        }
        self.phase = match self.phase {
            Phase::Closing { received, .. } => Phase::Closing { sent: true, received },
            _ => Phase::Closing { sent: true, received: false },
        };
        match &mut self.state {
            ConnState::Tcpls(layer) => {
                layer.tx.seal(CT_ALERT, &[1, AlertCode::CloseNotify as u8], &mut self.tx)?;
            }
            ConnState::Fallback(tls) => tls.close(&mut self.tx)?,
            ConnState::Handshaking(..) | ConnState::Failed => {}
        }
        Ok(())
    }

    /// Ends the connection after a local error: the alert is queued if keys allow it.
    pub(super) fn fail(&mut self, error: Error) {
        if let (Error::Local(e), ConnState::Tcpls(layer)) = (&error, &mut self.state) {
            if !self.phase.close_sent() {
                let _ = layer.tx.seal(CT_ALERT, &[2, e.alert as u8], &mut self.tx);
            }
        }
        if self.phase != Phase::Gone {
            self.phase = Phase::Failed;
        }
        self.state = ConnState::Failed;
        if self.error.is_none() {
            self.error = Some(error);
        }
    }

    /// Both close_notify went, or the connection failed: the IO layer may close the socket once
    /// the transmit buffer is written.
    pub(super) fn is_finished(&self) -> bool {
        matches!(self.phase, Phase::Failed | Phase::Gone | Phase::Closing { sent: true, received: true })
    }

    pub(super) fn key_updates(&self) -> (u64, u64) {
        match &self.state {
            ConnState::Tcpls(l) => (l.key_updates_sent, l.key_updates_received),
            _ => (0, 0),
        }
    }
}

/// Opens one record: straight into the stream buffer the connection expects it in, when the
/// sink offers a slot there, otherwise in place. Nothing decrypted is used before its tag is
/// verified (an error returns before any of it is looked at).
fn open_record(
    layer: &mut RecordLayer,
    record: &mut [u8],
    expect: Expectation,
    sink: &mut dyn RecordSink,
    scratch: &mut Vec<u8>,
    rest: &mut Vec<Frame<'static>>,
) -> Result<Opened, TransportError> {
    let slot = match (expect.target(), plaintext_len(record)) {
        (Some((stream, offset)), Some(len)) => sink.direct_slot(stream, offset, len).map(|slot| (stream, offset, slot)),
        _ => None,
    };
    let Some((stream, offset, slot)) = slot else {
        let (content_type, range) = layer.rx.open_in_place(record)?;
        return Ok(Opened::InPlace(content_type, range));
    };
    let (content_type, content_len) = layer.rx.open_into(record, slot)?;
    let content = &slot[..content_len];
    let scan = match content_type {
        CT_APPLICATION_DATA => placement::read_direct(content, rest),
        _ => None,
    };
    Ok(match scan {
        Some(scan @ Scan { lead: Some(lead), .. }) if lead.id == stream && lead.offset == offset => {
            Opened::Direct(scan)
        }
        _ => {
            scratch.clear();
            scratch.extend_from_slice(content);
            Opened::Moved(content_type)
        }
    })
}

fn send_key_update(layer: &mut RecordLayer, request_update: bool, tx: &mut TxBuf) -> Result<(), TransportError> {
    layer.tx.seal(CT_HANDSHAKE, &[HS_KEY_UPDATE, 0, 0, 1, request_update as u8], tx)?;
    layer.tx_base += layer.tx.seq();
    layer.tx = layer.kernel.next_tx_key()?;
    layer.tx_key_since = layer.tx.seq();
    layer.key_updates_sent += 1;
    Ok(())
}

/// Handshake messages after the handshake: session tickets and KeyUpdate (RFC 8446 §4.6).
fn post_handshake(
    layer: &mut RecordLayer,
    mut content: &[u8],
    tx: &mut TxBuf,
    may_send: bool,
) -> Result<(), TransportError> {
    if content.is_empty() {
        return Err(TransportError::unexpected("empty handshake record"));
    }
    while !content.is_empty() {
        let [msg_type, a, b, c, rest @ ..] = content else {
            return Err(TransportError::decode("truncated handshake message header"));
        };
        let len = u32::from_be_bytes([0, *a, *b, *c]) as usize;
        let Some(body) = rest.get(..len) else {
            // rustls never splits these messages across records; neither do we accept it.
            return Err(TransportError::decode("handshake message spans records"));
        };
        content = &rest[len..];
        match *msg_type {
            HS_NEW_SESSION_TICKET => layer.kernel.handle_new_session_ticket(body)?,
            HS_KEY_UPDATE => {
                let request = match body {
                    [0] => false,
                    [1] => true,
                    // RFC 8446 §4.6.3: a request_update other than 0 or 1 is illegal_parameter;
                    // only a body of the wrong length is a decode_error.
                    [_] => return Err(TransportError::illegal("KeyUpdate request_update is not 0 or 1")),
                    _ => return Err(TransportError::decode("malformed KeyUpdate")),
                };
                if !content.is_empty() {
                    return Err(TransportError::unexpected("KeyUpdate not at the end of its record"));
                }
                layer.rx_base += layer.rx.seq();
                layer.rx = layer.kernel.next_rx_key()?;
                layer.key_updates_received += 1;
                let silent_since_answer =
                    layer.answered_update == Some(layer.key_updates_sent) && layer.tx.seq() == layer.tx_key_since;
                if request && may_send && !silent_since_answer {
                    send_key_update(layer, false, tx)?;
                    layer.answered_update = Some(layer.key_updates_sent);
                }
            }
            other => return Err(TransportError::unexpected(format!("handshake message {other} after the handshake"))),
        }
    }
    Ok(())
}
