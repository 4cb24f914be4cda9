//! The TLS 1.3 handshake of one TCP connection, driven without IO.
//!
//! rustls is shown only whole records, and only one more when it says it is blocked: bytes that
//! follow the peer's last handshake record (the client's first TCPLS record travels in the same
//! segment as its Finished) stay in our buffer for our own record layer. rustls' final flight is
//! left in the transmit buffer, where the first TCPLS record is appended before the caller writes
//! anything: TCPLS adds no round trip and no extra segment to TLS over TCP.
//!
//! 0-RTT (PROTOCOL.md §1.7): a resuming client may offer one record of TCPLS frames as TLS early
//! data, sealed by rustls right after its ClientHello; a server that accepts it collects those
//! plaintexts for the session and may answer at half-RTT (records sealed by rustls under its
//! application key before the client Finished), see [`Handshake::queue_half_rtt`].

use std::sync::Arc;

use rustls::client::UnbufferedClientConnection;
use rustls::pki_types::ServerName;
use rustls::server::UnbufferedServerConnection;
use rustls::unbuffered::{ConnectionState, ReadEarlyData, TransmitTlsData, UnbufferedStatus};
use rustls::{ClientConfig, HandshakeKind, ProtocolVersion, ServerConfig};

use super::fallback::FallbackTls;
use super::unbuffered::{encode_into, Unbuffered};
use super::{ConnSecret, Kernel, ALPN_TCPLS};
use crate::error::{Error, TransportError};
use crate::record::{next_record, RecordKey, RxBuf, TxBuf};

/// What the caller should do after feeding bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// Waiting for more bytes from the peer.
    NeedData,
    /// The handshake is complete; call [`Handshake::finish`].
    Complete,
}

/// Facts about a finished handshake, for the API and statistics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandshakeInfo {
    pub alpn: Option<Vec<u8>>,
    pub cipher_suite: String,
    pub resumed: bool,
    /// Client: the server accepted the early data we offered. Server: early data was accepted
    /// and delivered (it may be a replay, see RESUMPTION.md).
    pub early_data_accepted: bool,
    /// The peer's certificate chain, end-entity first: the server's on a client (also after
    /// resumption: rustls keeps it with the ticket); on a server, the client's under mutual
    /// TLS, else empty. Verified by rustls before the handshake completed.
    pub peer_certificates: Vec<rustls::pki_types::CertificateDer<'static>>,
}

/// How a connection continues after its handshake.
#[allow(clippy::large_enum_variant)] // produced once per connection, moved once
pub enum HandshakeOutcome {
    /// `tcpls/1` on TLS 1.3: our record layer with these keys.
    Tcpls { tx: RecordKey, rx: RecordKey, kernel: Kernel, info: HandshakeInfo, secret: ConnSecret },
    /// Anything else: one plain TLS byte stream, rustls keeps the record layer.
    Fallback { tls: FallbackTls, info: HandshakeInfo },
}

/// A handshake in progress (client or server side).
pub struct Handshake {
    side: Side,
    early: Early,
}

enum Side {
    Client(Box<UnbufferedClientConnection>),
    Server(Box<UnbufferedServerConnection>),
}

impl std::fmt::Debug for Handshake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.side {
            Side::Client(_) => "Handshake::Client",
            Side::Server(_) => "Handshake::Server",
        })
    }
}

/// Size of the client's EndOfEarlyData record: header 5, message 4, inner type 1, tag 16. rustls
/// sends it (RFC 8446 §4.5) only when the server accepted early data, as its own record before
/// Finished; no other record a TLS 1.3 client sends has this size (an empty client Certificate
/// is 30, an alert 24, Finished at least 58), which is how we learn that early data was accepted
/// (`UnbufferedClientConnection` has no `is_early_data_accepted`).
const END_OF_EARLY_DATA_RECORD_LEN: usize = 26;

/// Early data (0-RTT) and half-RTT data state of one handshake.
#[derive(Debug, Default)]
pub(super) struct Early {
    /// Client: the plaintext (TCPLS frames) to offer as early data, until the ClientHello goes.
    offer: Option<Vec<u8>>,
    /// Client: the offer went out as early data.
    sent: bool,
    /// Client: the final flight carried EndOfEarlyData. Server: early data arrived.
    accepted: bool,
    /// Server: early-data plaintexts received and not yet handed to the session.
    received: Vec<Vec<u8>>,
    /// Server: plaintexts (TCPLS frames) to seal at half-RTT, in rustls' WriteTraffic state.
    half_rtt: Vec<Vec<u8>>,
    /// Server: rustls may seal half-RTT data (its Finished is sent, `send_half_rtt_data`).
    half_rtt_writable: bool,
}

/// Bytes of the receive buffer currently shown to rustls; always whole records.
#[derive(Debug, Default, Clone, Copy)]
pub struct Exposed(usize);

impl Handshake {
    pub fn client(config: Arc<ClientConfig>, name: ServerName<'static>) -> Result<Self, Error> {
        let conn = UnbufferedClientConnection::new(config, name).map_err(Error::Tls)?;
        Ok(Handshake { side: Side::Client(Box::new(conn)), early: Early::default() })
    }

    /// A client handshake that offers `plaintext` (encoded TCPLS frames, at most
    /// [`MAX_EARLY_DATA`] bytes) as early data if rustls resumes a ticket that allows it.
    pub fn client_with_early_data(
        config: Arc<ClientConfig>,
        name: ServerName<'static>,
        plaintext: Vec<u8>,
    ) -> Result<Self, Error> {
        if plaintext.len() > MAX_EARLY_DATA {
            return Err(TransportError::internal("early data offer larger than one record").into());
        }
        let mut hs = Self::client(config, name)?;
        hs.early.offer = Some(plaintext);
        Ok(hs)
    }

    pub fn server(config: Arc<ServerConfig>) -> Result<Self, Error> {
        let conn = UnbufferedServerConnection::new(config).map_err(Error::Tls)?;
        Ok(Handshake { side: Side::Server(Box::new(conn)), early: Early::default() })
    }

    /// Server: early-data plaintexts (TCPLS frames) that arrived since the last call.
    pub fn take_early_data(&mut self) -> Vec<Vec<u8>> {
        std::mem::take(&mut self.early.received)
    }

    /// Server: early data was accepted and rustls can seal half-RTT data now.
    pub fn half_rtt_writable(&self) -> bool {
        self.early.accepted && self.early.half_rtt_writable
    }

    /// Server: a record of TCPLS frames to seal at half-RTT (under the server's application key,
    /// before the client Finished); the next [`Handshake::drive`] seals it. Only when
    /// [`Handshake::half_rtt_writable`].
    pub fn queue_half_rtt(&mut self, plaintext: Vec<u8>) {
        self.early.half_rtt.push(plaintext);
    }

    /// Feeds what `rx` holds to rustls and appends what rustls wants to send to `tx`.
    pub fn drive(&mut self, rx: &mut RxBuf, tx: &mut TxBuf, exposed: &mut Exposed) -> Result<Progress, Error> {
        match &mut self.side {
            Side::Client(c) => drive(&mut **c, &mut self.early, rx, tx, exposed),
            Side::Server(s) => drive(&mut **s, &mut self.early, rx, tx, exposed),
        }
    }

    /// After [`Progress::Complete`]: hand the keys to our record layer, or stay on rustls.
    pub fn finish(self) -> Result<HandshakeOutcome, Error> {
        let early_data_accepted = self.early.accepted;
        let with_early = |mut info: HandshakeInfo| {
            info.early_data_accepted = early_data_accepted;
            info
        };
        match self.side {
            Side::Client(c) => {
                let info = with_early(info_of(
                    c.alpn_protocol(),
                    c.negotiated_cipher_suite(),
                    c.handshake_kind(),
                    c.peer_certificates(),
                ));
                if is_tcpls(c.alpn_protocol(), c.protocol_version()) {
                    let (secrets, kernel) = c.dangerous_into_kernel_connection().map_err(Error::Tls)?;
                    Ok(HandshakeOutcome::Tcpls {
                        secret: ConnSecret::from_traffic(&secrets.tx.1, &secrets.rx.1)?,
                        tx: RecordKey::new(&secrets.tx.1, secrets.tx.0)?,
                        rx: RecordKey::new(&secrets.rx.1, secrets.rx.0)?,
                        kernel: Kernel::Client(kernel),
                        info,
                    })
                } else {
                    Ok(HandshakeOutcome::Fallback { tls: FallbackTls::Client(c), info })
                }
            }
            Side::Server(s) => {
                let info = with_early(info_of(
                    s.alpn_protocol(),
                    s.negotiated_cipher_suite(),
                    s.handshake_kind(),
                    s.peer_certificates(),
                ));
                if is_tcpls(s.alpn_protocol(), s.protocol_version()) {
                    let (secrets, kernel) = s.dangerous_into_kernel_connection().map_err(Error::Tls)?;
                    Ok(HandshakeOutcome::Tcpls {
                        secret: ConnSecret::from_traffic(&secrets.rx.1, &secrets.tx.1)?,
                        tx: RecordKey::new(&secrets.tx.1, secrets.tx.0)?,
                        rx: RecordKey::new(&secrets.rx.1, secrets.rx.0)?,
                        kernel: Kernel::Server(kernel),
                        info,
                    })
                } else {
                    Ok(HandshakeOutcome::Fallback { tls: FallbackTls::Server(s), info })
                }
            }
        }
    }

    /// After a handshake error: the alert rustls queued for the peer, if any.
    pub fn take_alert(&mut self, rx: &mut RxBuf, exposed: Exposed, tx: &mut TxBuf) {
        let input = &mut rx.data_mut()[..exposed.0];
        match &mut self.side {
            Side::Client(c) => flush_pending(&mut **c, input, tx),
            Side::Server(s) => flush_pending(&mut **s, input, tx),
        }
    }
}

/// TCPLS needs TLS 1.3: a peer that negotiated tcpls/1 on TLS 1.2 gets plain TLS (PROTOCOL.md §1).
fn is_tcpls(alpn: Option<&[u8]>, version: Option<ProtocolVersion>) -> bool {
    alpn == Some(ALPN_TCPLS) && version == Some(ProtocolVersion::TLSv1_3)
}

fn info_of(
    alpn: Option<&[u8]>,
    suite: Option<rustls::SupportedCipherSuite>,
    kind: Option<HandshakeKind>,
    peer_certificates: Option<&[rustls::pki_types::CertificateDer<'static>]>,
) -> HandshakeInfo {
    HandshakeInfo {
        alpn: alpn.map(<[u8]>::to_vec),
        cipher_suite: suite.map(|s| format!("{:?}", s.suite())).unwrap_or_default(),
        resumed: matches!(kind, Some(HandshakeKind::Resumed)),
        early_data_accepted: false,
        peer_certificates: peer_certificates.map(<[_]>::to_vec).unwrap_or_default(),
    }
}

/// What the handshake adds to the client's and the server's unbuffered connections: the
/// early-data steps, which differ by side.
trait EarlyData: Unbuffered {
    /// Client: seal the early-data offer after the ClientHello, if the ticket allows it.
    fn offer_early_data(
        t: &mut TransmitTlsData<'_, Self::Data>,
        early: &mut Early,
        tx: &mut TxBuf,
    ) -> Result<(), Error>;
    /// Server: collect accepted early-data records.
    fn read_early_data(r: ReadEarlyData<'_, '_, Self::Data>, early: &mut Early) -> Result<(), Error>;
}

impl EarlyData for UnbufferedClientConnection {
    fn offer_early_data(
        t: &mut TransmitTlsData<'_, Self::Data>,
        early: &mut Early,
        tx: &mut TxBuf,
    ) -> Result<(), Error> {
        let Some(offer) = early.offer.take() else { return Ok(()) };
        // None: no ticket, or one that does not allow early data; the bytes go after Finished.
        let Some(mut may) = t.may_encrypt_early_data() else { return Ok(()) };
        let n = may
            .encrypt(&offer, tx.reserve(offer.len() + 64))
            .map_err(|e| TransportError::internal(format!("early data: {e:?}")))?;
        // rustls silently truncates to the ticket's limit; a truncated record of frames would
        // be garbage, and the server enforces the same limit. Our offer is capped below the
        // limit every TCPLS server grants (MAX_EARLY_DATA), so this holds unless the server
        // is not a TCPLS one; then we fail rather than send half a frame.
        if n != offer.len() + EARLY_RECORD_OVERHEAD {
            return Err(TransportError::internal("the ticket allows less early data than offered").into());
        }
        tx.commit(n);
        early.sent = true;
        Ok(())
    }
    fn read_early_data(_: ReadEarlyData<'_, '_, Self::Data>, _: &mut Early) -> Result<(), Error> {
        Err(TransportError::unexpected("early data sent to a client").into())
    }
}

impl EarlyData for UnbufferedServerConnection {
    fn offer_early_data(_: &mut TransmitTlsData<'_, Self::Data>, _: &mut Early, _: &mut TxBuf) -> Result<(), Error> {
        Ok(())
    }
    fn read_early_data(mut r: ReadEarlyData<'_, '_, Self::Data>, early: &mut Early) -> Result<(), Error> {
        while let Some(record) = r.next_record() {
            let record = record.map_err(Error::Tls)?;
            early.received.push(record.payload.to_vec());
            early.accepted = true;
        }
        Ok(())
    }
}

/// Largest early-data plaintext a client offers and the least a TCPLS server that accepts
/// early data grants (`tcpls_server_config` raises `max_early_data_size` to it): one record.
pub const MAX_EARLY_DATA: usize = crate::record::MAX_PLAINTEXT;

/// TLS 1.3 record overhead of rustls' early data: header, inner content type, AEAD tag.
const EARLY_RECORD_OVERHEAD: usize = 5 + 1 + 16;

fn drive<C: EarlyData>(
    conn: &mut C,
    early: &mut Early,
    rx: &mut RxBuf,
    tx: &mut TxBuf,
    exposed: &mut Exposed,
) -> Result<Progress, Error> {
    loop {
        let was_handshaking = conn.handshaking();
        let UnbufferedStatus { discard, state } = conn.process(&mut rx.data_mut()[..exposed.0]);
        let mut blocked = false;
        let mut complete = false;
        let mut half_rtt = false;
        match state.map_err(Error::Tls)? {
            ConnectionState::EncodeTlsData(e) => {
                let before = tx.len();
                encode_into(e, tx)?;
                if early.sent && tx.len() - before == END_OF_EARLY_DATA_RECORD_LEN {
                    early.accepted = true;
                }
            }
            // The bytes are already in `tx`; the caller writes them after we return, together
            // with the first TCPLS record when the handshake just completed. Early data follows
            // the ClientHello in the same write (and, with TCP Fast Open, in the SYN).
            ConnectionState::TransmitTlsData(mut t) => {
                C::offer_early_data(&mut t, early, tx)?;
                t.done()
            }
            ConnectionState::BlockedHandshake => blocked = true,
            ConnectionState::WriteTraffic(_) => {
                // A server may write at half-RTT before the client Finished: not complete yet.
                if was_handshaking && conn.handshaking() {
                    early.half_rtt_writable = true;
                    half_rtt = !early.half_rtt.is_empty();
                    blocked = true;
                } else {
                    complete = true;
                }
            }
            ConnectionState::ReadEarlyData(r) => C::read_early_data(r, early)?,
            ConnectionState::ReadTraffic(_) => {
                // We never expose a record past the handshake: a record here means the peer
                // broke the handshake's order.
                return Err(TransportError::unexpected("application data during the handshake").into());
            }
            ConnectionState::PeerClosed | ConnectionState::Closed => {
                return Err(Error::ConnectionLost("peer closed during the handshake".into()));
            }
            _ => return Err(TransportError::internal("unexpected rustls state during the handshake").into()),
        }
        rx.consume(discard);
        exposed.0 -= discard.min(exposed.0);
        if half_rtt {
            seal_half_rtt(conn, early, rx, tx, exposed)?;
        }
        if complete {
            return Ok(Progress::Complete);
        }
        if blocked {
            match next_record(&rx.data()[exposed.0..]) {
                Ok(Some(span)) => exposed.0 += span.len,
                Ok(None) => return Ok(Progress::NeedData),
                // Let rustls see the garbage: it answers with the right alert.
                Err(_) => exposed.0 = rx.len(),
            }
        }
    }
}

/// Seals the queued half-RTT plaintexts: rustls is in WriteTraffic before the client Finished
/// (the same input gives the same state again).
fn seal_half_rtt<C: Unbuffered>(
    conn: &mut C,
    early: &mut Early,
    rx: &mut RxBuf,
    tx: &mut TxBuf,
    exposed: &mut Exposed,
) -> Result<(), Error> {
    let UnbufferedStatus { discard, state } = conn.process(&mut rx.data_mut()[..exposed.0]);
    if let ConnectionState::WriteTraffic(mut w) = state.map_err(Error::Tls)? {
        for plaintext in early.half_rtt.drain(..) {
            let n = w
                .encrypt(&plaintext, tx.reserve(plaintext.len() + 64))
                .map_err(|e| TransportError::internal(format!("half-RTT data: {e:?}")))?;
            tx.commit(n);
        }
    }
    rx.consume(discard);
    exposed.0 -= discard.min(exposed.0);
    Ok(())
}

/// Takes the fatal alert rustls queued when it failed. rustls hands out queued records before it
/// looks at the input again, so one call yields the alert; a second call would deframe the input
/// again, which rustls does not expect after a fatal error (it asserts, or panics on stale
/// positions), hence exactly one call.
fn flush_pending<C: Unbuffered>(conn: &mut C, input: &mut [u8], tx: &mut TxBuf) {
    let UnbufferedStatus { state, .. } = conn.process(input);
    if let Ok(ConnectionState::EncodeTlsData(e)) = state {
        let _ = encode_into(e, tx);
    }
}
