//! One TCP connection of a session: its handshake, record layer and byte buffers.
//!
//! A connection knows nothing of streams. It turns received bytes into decrypted record
//! plaintexts (handed to the session as [`Inbound`]) and seals what the session gives it. Its
//! parts: the phase with the handshake or keys (`phase.rs`, `record_layer.rs`), the receive side
//! (`reading.rs`), the sent-record log (`sent_log.rs`), loss detection (`loss_state.rs`) and
//! keepalive (`keepalive.rs`), join credentials (`join.rs`) and the path (`path.rs`).

use super::placement::{self, Expectation, LeadStream, Scan};
use crate::error::{AlertCode, Error, TransportError};
use crate::event::ConnId;
use crate::event::StreamId;
use crate::frame::Frame;
use crate::record::{next_record, plaintext_len, RecordKey, RxBuf, TxBuf, CT_ALERT, CT_APPLICATION_DATA, CT_HANDSHAKE};
use crate::tls::{FallbackTls, Handshake, HandshakeInfo, HandshakeOutcome, Progress};

mod join;
mod keepalive;
mod loss_state;
mod path;
mod phase;
mod reading;
mod record_layer;
mod sent_log;

use join::JoinCredentials;
pub(super) use join::{rejoin_proof, session_secrets, RejoinCredentials, LABEL_SESSION_REF};
use keepalive::Keepalive;
use loss_state::LossState;
use path::ConnPath;
use phase::{Keys, Life, Phase, PhaseEvent, PhaseKind};
use reading::Reading;
pub(super) use reading::HANDSHAKE_READ_CHUNK;
pub use reading::{MIN_READ_CHUNK, READ_CHUNK};
use record_layer::{post_handshake, send_key_update, RecordLayer};
use sent_log::SentLog;
pub(super) use sent_log::SentRecord;

/// Why a connection was lost ([`Connection::lose`]), as its error says it.
#[derive(Debug, Clone, Copy)]
pub(in crate::session) enum Loss<'a> {
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
    pub(super) fn error(self) -> Error {
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

/// Per-connection counters, reported by `tcpls perf`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ConnStats {
    pub bytes_received: u64,
    pub bytes_sent: u64,
    pub records_received: u64,
    pub records_sent: u64,
}

/// One TCP connection of the session. Each part is in its own file; the phase, which holds the
/// handshake and the keys, changes only through the transition methods below.
#[derive(Debug)]
pub(in crate::session) struct Connection {
    pub(in crate::session) id: ConnId,
    phase: Phase,
    pub(in crate::session) rx: RxBuf,
    pub(in crate::session) tx: TxBuf,
    pub(in crate::session) info: Option<HandshakeInfo>,
    pub(in crate::session) stats: ConnStats,
    /// Read sizing, zero-copy placement, records opened (`reading.rs`).
    pub(in crate::session) reading: Reading,
    /// Addresses, backup role, TCP_INFO (`path.rs`).
    pub(in crate::session) path: ConnPath,
    /// Unacknowledged records, for failover (`sent_log.rs`).
    pub(in crate::session) sent: SentLog,
    /// RTT, progress clock, suspicion (`loss_state.rs`; the rules are in `session/loss.rs`).
    pub(in crate::session) loss: LossState,
    pub(in crate::session) keepalive: Keepalive,
    /// Join token, rejoin credentials, TLS secret (`join.rs`).
    pub(in crate::session) join: JoinCredentials,
}

impl Connection {
    pub(in crate::session) fn new(id: ConnId, handshake: Handshake) -> Self {
        Self {
            id,
            phase: Phase::Handshaking(handshake, Default::default()),
            rx: RxBuf::default(),
            tx: TxBuf::default(),
            info: None,
            stats: ConnStats::default(),
            reading: Reading::default(),
            path: ConnPath::default(),
            sent: SentLog::default(),
            loss: LossState::default(),
            keepalive: Keepalive::default(),
            join: JoinCredentials::default(),
        }
    }

    /// Why it failed or was lost (none: closed cleanly, or not over).
    pub(in crate::session) fn error(&self) -> Option<&Error> {
        self.phase.error()
    }

    pub(in crate::session) fn is_tcpls(&self) -> bool {
        matches!(self.phase.keys(), Some(Keys::Tcpls(_)))
    }

    /// The TLS handshake completed and the connection has not finished.
    pub(in crate::session) fn is_established(&self) -> bool {
        matches!(self.phase, Phase::Established { .. }) && !self.is_finished()
    }

    /// Client: a joining connection the server has not answered on yet.
    pub(in crate::session) fn awaiting_join_ack(&self) -> bool {
        self.phase.life() == Some(Life::AwaitingJoinAck)
    }

    /// We sent close_notify, or failed: nothing more may be sealed.
    pub(in crate::session) fn close_sent(&self) -> bool {
        self.phase.close_sent()
    }

    /// The peer's close_notify arrived (and the connection did not fail since).
    pub(in crate::session) fn close_received(&self) -> bool {
        self.phase.close_received()
    }

    /// Nothing can be written to the socket any more.
    pub(in crate::session) fn is_gone(&self) -> bool {
        matches!(self.phase, Phase::Gone { .. })
    }

    /// Can carry new records.
    pub(in crate::session) fn is_usable(&self) -> bool {
        self.phase.life().is_some_and(|life| !life.close_sent())
    }

    /// Both close_notify went, or the connection failed: the IO layer may close the socket once
    /// the transmit buffer is written.
    pub(in crate::session) fn is_finished(&self) -> bool {
        self.phase.kind().is_finished()
    }

    /// Carries no new data: its records went unacknowledged past the deadline.
    pub(in crate::session) fn is_suspect(&self) -> bool {
        self.loss.is_suspect()
    }

    /// Can carry stream records: usable, and (for a joining connection) accepted by the server.
    pub(in crate::session) fn carries_streams(&self) -> bool {
        self.is_up() && !self.is_suspect()
    }

    /// Usable, and (for a joining connection) accepted by the server: up as far as TCP and TLS
    /// say, suspect of silence or not (`loss.rs`).
    pub(in crate::session) fn is_up(&self) -> bool {
        self.is_usable() && !self.join_pending() && !self.awaiting_join_ack()
    }

    /// The socket ended or failed, or the connection is given up: nothing more is read or
    /// written. An EOF after the peer's close_notify is a clean end; any other loss is the
    /// connection's error (unless it already had one).
    pub(in crate::session) fn lose(&mut self, loss: Loss<'_>) {
        let clean = matches!(loss, Loss::Eof) && self.close_received();
        self.phase.lose((!clean).then(|| loss.error()));
    }

    /// Ends the connection after a local error: the alert is queued if keys allow it.
    pub(in crate::session) fn fail(&mut self, error: Error) {
        let may_send = !self.phase.close_sent();
        if let (Error::Local(e), Some(Keys::Tcpls(layer))) = (&error, self.phase.keys_mut()) {
            if may_send {
                let _ = layer.tx.seal(CT_ALERT, &[2, e.alert as u8], &mut self.tx);
            }
        }
        self.phase.fail(error);
    }

    /// Number the next sealed record gets (monotonic over the connection's life).
    pub(in crate::session) fn next_tx_number(&self) -> u64 {
        match self.phase.keys() {
            Some(Keys::Tcpls(layer)) => layer.next_tx_number(),
            _ => 0,
        }
    }

    /// The TCPLS sending key and the transmit buffer, to seal records into (none without TCPLS
    /// keys: handshaking, fallback, failed).
    pub(in crate::session) fn tcpls_tx(&mut self) -> Option<(&mut RecordKey, &mut TxBuf)> {
        match self.phase.keys_mut() {
            Some(Keys::Tcpls(layer)) => Some((&mut layer.tx, &mut self.tx)),
            _ => None,
        }
    }

    /// The plain TLS connection of a fallback session and the transmit buffer.
    pub(in crate::session) fn fallback_tx(&mut self) -> Option<(&mut FallbackTls, &mut TxBuf)> {
        match self.phase.keys_mut() {
            Some(Keys::Fallback(tls)) => Some((tls, &mut self.tx)),
            _ => None,
        }
    }

    /// The handshake in progress, and the counters of what is queued on it (server: half-RTT
    /// data).
    pub(in crate::session) fn handshake_mut(&mut self) -> Option<(&mut Handshake, &mut ConnStats, &mut SentLog)> {
        match &mut self.phase {
            Phase::Handshaking(hs, _) => Some((hs, &mut self.stats, &mut self.sent)),
            _ => None,
        }
    }

    /// Advances the handshake. Returns the outcome's info once, when it completes.
    pub(in crate::session) fn drive_handshake(&mut self) -> Result<Option<HandshakeInfo>, Error> {
        let Phase::Handshaking(hs, exposed) = &mut self.phase else {
            return Ok(None);
        };
        let progress = hs.drive(&mut self.rx, &mut self.tx, exposed);
        self.reading.early_received.extend(hs.take_early_data());
        match progress {
            Ok(Progress::NeedData) => Ok(None),
            Ok(Progress::Complete) => self.complete_handshake().map(Some),
            Err(e) => {
                hs.take_alert(&mut self.rx, *exposed, &mut self.tx);
                self.phase.fail(e.clone());
                Err(e)
            }
        }
    }

    /// `finish` consumes the handshake: the phase becomes Failed with its error if it fails.
    fn complete_handshake(&mut self) -> Result<HandshakeInfo, Error> {
        let Phase::Handshaking(hs, _) = std::mem::replace(&mut self.phase, Phase::Gone { keys: None, error: None })
        else {
            return Err(TransportError::internal("handshake completed twice").into());
        };
        let (keys, info) = match hs.finish() {
            Ok(HandshakeOutcome::Tcpls { tx, rx, kernel, info, secret }) => {
                self.join.secret = Some(secret);
                (Keys::Tcpls(Box::new(RecordLayer::new(tx, rx, kernel))), info)
            }
            Ok(HandshakeOutcome::Fallback { tls, info }) => (Keys::Fallback(tls), info),
            Err(e) => {
                self.phase = Phase::Failed(e.clone());
                return Err(e);
            }
        };
        self.info = Some(info.clone());
        let joining = self.join_pending();
        let life = if joining { Life::AwaitingJoinAck } else { Life::Open };
        self.phase = Phase::Established { keys, life };
        debug_assert_eq!(self.phase.kind(), PhaseKind::Handshaking.after(PhaseEvent::HandshakeDone { joining }));
        Ok(info)
    }

    /// Decrypts every whole record in the receive buffer and hands each plaintext to the sink.
    /// Stops early (leaving records in the buffer) when the sink says so, e.g. because a
    /// fallback stream is full.
    pub(in crate::session) fn read_records(&mut self, sink: &mut dyn RecordSink) -> Result<(), Error> {
        let id = self.id;
        let (keys, mut life) = match &mut self.phase {
            Phase::Established { keys, life } => (keys, Some(life)),
            Phase::Gone { keys: Some(keys), .. } => (keys, None),
            _ => return Ok(()),
        };
        let layer = match keys {
            Keys::Tcpls(layer) => layer,
            Keys::Fallback(tls) => {
                let mut failure = None;
                let result = tls.read(&mut self.rx, &mut self.tx, &mut |data| {
                    if failure.is_none() {
                        if let Err(e) = sink.deliver(id, 0, Inbound::PlainData(data), &mut Scan::default()) {
                            failure = Some(e);
                        }
                    }
                })?;
                if failure.is_none() && self.reading.app_records == 0 {
                    self.reading.app_records = 1;
                }
                if let Some(e) = failure {
                    return Err(e.into());
                }
                if let (true, Some(life)) = (result.peer_closed, life) {
                    *life = life.after(PhaseEvent::CloseReceived);
                }
                return Ok(());
            }
        };
        loop {
            if self.reading.paused {
                return Ok(());
            }
            let Some(span) = next_record(self.rx.data())? else {
                return Ok(());
            };
            if life.as_ref().is_some_and(|l| l.close_received()) {
                return Err(TransportError::unexpected("record after close_notify").into());
            }
            let seq = layer.next_rx_number();
            let record = &mut self.rx.data_mut()[..span.len];
            let reading = &mut self.reading;
            let opened = open_record(layer, record, reading.expect, sink, &mut reading.scratch, &mut reading.rest)?;
            reading.records_opened = layer.next_rx_number();
            self.stats.records_received += 1;
            let (content_type, content): (u8, &[u8]) = match &opened {
                Opened::InPlace(ct, range) => (*ct, &self.rx.data()[range.clone()]),
                Opened::Direct(..) => (CT_APPLICATION_DATA, &[]),
                Opened::Moved(ct) => (*ct, &reading.scratch),
            };
            match content_type {
                CT_APPLICATION_DATA => {
                    let first = reading.app_records == 0;
                    reading.app_records += 1;
                    // Any record from the server on a joining connection means it accepted
                    // the join (a refusal is an alert).
                    if let Some(life) = life.as_deref_mut() {
                        *life = life.after(PhaseEvent::JoinAnswered);
                    }
                    let (inbound, mut scan) = match opened {
                        Opened::Direct(scan @ Scan { lead: Some(lead), .. }) => {
                            (Inbound::Direct { lead, rest: &reading.rest }, scan)
                        }
                        _ => (Inbound::Frames { plaintext: content, first }, Scan::default()),
                    };
                    let flow = sink.deliver(id, seq, inbound, &mut scan)?;
                    if scan.lead.is_some() {
                        self.sent.note_stream_data();
                    }
                    reading.expect.observe(&scan);
                    if flow == Flow::Pause {
                        reading.paused = true;
                    }
                }
                CT_ALERT => {
                    let (level, desc) = match content {
                        [level, desc] => (*level, *desc),
                        _ => return Err(TransportError::decode("malformed alert").into()),
                    };
                    if desc == AlertCode::CloseNotify as u8 {
                        if let Some(life) = life.as_deref_mut() {
                            *life = life.after(PhaseEvent::CloseReceived);
                        }
                    } else if level == 2 || desc != 90 {
                        // Fatal, or a warning TLS 1.3 does not define (user_canceled is 90).
                        return Err(Error::PeerAlert(desc));
                    }
                }
                // After our close_notify nothing more may be sent: a KeyUpdate request is
                // then processed (the peer's key still rotates) but not answered.
                CT_HANDSHAKE => {
                    let may_send = life.as_ref().is_some_and(|l| !l.close_sent());
                    post_handshake(layer, content, &mut self.tx, may_send)?
                }
                other => {
                    return Err(TransportError::unexpected(format!("inner content type {other}")).into());
                }
            }
            self.rx.consume(span.len);
        }
    }

    /// Rotates our sending key when it has protected `limit` records (KeyUpdate, RFC 8446 §4.6.3).
    pub(in crate::session) fn maybe_update_key(&mut self, limit: u64) -> Result<(), TransportError> {
        match self.phase.keys_mut() {
            Some(Keys::Tcpls(layer)) => layer.maybe_update_key(limit, &mut self.tx),
            _ => Ok(()),
        }
    }

    /// Sends KeyUpdate now, asking the peer to update too when `request_peer`.
    pub(in crate::session) fn update_key(&mut self, request_peer: bool) -> Result<(), TransportError> {
        let may_send = !self.phase.close_sent();
        match self.phase.keys_mut() {
            Some(Keys::Tcpls(layer)) if may_send => send_key_update(layer, request_peer, &mut self.tx),
            _ => Err(TransportError::internal("KeyUpdate needs an open TCPLS connection")),
        }
    }

    /// Seals a close_notify alert (once). A connection still in its handshake has nothing to
    /// seal it with: the session's close sends it once the handshake is done.
    pub(in crate::session) fn send_close_notify(&mut self) -> Result<(), Error> {
        if self.close_sent() || !matches!(self.phase, Phase::Established { .. }) {
            return Ok(());
        }
        self.phase.change_life(PhaseEvent::CloseSent);
        match self.phase.keys_mut() {
            Some(Keys::Tcpls(layer)) => {
                layer.tx.seal(CT_ALERT, &[1, AlertCode::CloseNotify as u8], &mut self.tx)?;
            }
            Some(Keys::Fallback(tls)) => tls.close(&mut self.tx)?,
            None => {}
        }
        Ok(())
    }

    pub(in crate::session) fn key_updates(&self) -> (u64, u64) {
        match self.phase.keys() {
            Some(Keys::Tcpls(l)) => (l.key_updates_sent, l.key_updates_received),
            _ => (0, 0),
        }
    }
}

/// Where decrypted records go: the session.
pub(in crate::session) trait RecordSink {
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
pub(in crate::session) enum Flow {
    Continue,
    /// Leave the following records in the buffer (the connection is about to change session).
    Pause,
}

/// A decrypted record handed to the session.
pub(in crate::session) enum Inbound<'a> {
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
