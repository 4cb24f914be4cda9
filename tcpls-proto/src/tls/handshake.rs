//! The TLS 1.3 handshake of one TCP connection, driven without IO.
//!
//! rustls is shown only whole records, and only one more when it says it is blocked: bytes that
//! follow the peer's last handshake record (the client's first TCPLS record travels in the same
//! segment as its Finished) stay in our buffer for our own record layer. rustls' final flight is
//! left in the transmit buffer, where the first TCPLS record is appended before the caller writes
//! anything: TCPLS adds no round trip and no extra segment to TLS over TCP.

use std::sync::Arc;

use rustls::client::UnbufferedClientConnection;
use rustls::pki_types::ServerName;
use rustls::server::UnbufferedServerConnection;
use rustls::unbuffered::{ConnectionState, EncodeError, UnbufferedStatus};
use rustls::{ClientConfig, HandshakeKind, ProtocolVersion, ServerConfig};

use super::{FallbackTls, Kernel, ALPN_TCPLS};
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
}

/// How a connection continues after its handshake.
#[allow(clippy::large_enum_variant)] // produced once per connection, moved once
pub enum HandshakeOutcome {
    /// `tcpls/1` on TLS 1.3: our record layer with these keys.
    Tcpls { tx: RecordKey, rx: RecordKey, kernel: Kernel, info: HandshakeInfo },
    /// Anything else: one plain TLS byte stream, rustls keeps the record layer.
    Fallback { tls: FallbackTls, info: HandshakeInfo },
}

/// A handshake in progress (client or server side).
pub enum Handshake {
    Client(Box<UnbufferedClientConnection>),
    Server(Box<UnbufferedServerConnection>),
}

impl std::fmt::Debug for Handshake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Handshake::Client(_) => "Handshake::Client",
            Handshake::Server(_) => "Handshake::Server",
        })
    }
}

/// Bytes of the receive buffer currently shown to rustls; always whole records.
#[derive(Debug, Default, Clone, Copy)]
pub struct Exposed(usize);

impl Handshake {
    pub fn client(config: Arc<ClientConfig>, name: ServerName<'static>) -> Result<Self, Error> {
        Ok(Handshake::Client(Box::new(UnbufferedClientConnection::new(config, name).map_err(Error::Tls)?)))
    }

    pub fn server(config: Arc<ServerConfig>) -> Result<Self, Error> {
        Ok(Handshake::Server(Box::new(UnbufferedServerConnection::new(config).map_err(Error::Tls)?)))
    }

    /// Feeds what `rx` holds to rustls and appends what rustls wants to send to `tx`.
    pub fn drive(&mut self, rx: &mut RxBuf, tx: &mut TxBuf, exposed: &mut Exposed) -> Result<Progress, Error> {
        match self {
            Handshake::Client(c) => drive(&mut **c, rx, tx, exposed),
            Handshake::Server(s) => drive(&mut **s, rx, tx, exposed),
        }
    }

    /// After [`Progress::Complete`]: hand the keys to our record layer, or stay on rustls.
    pub fn finish(self) -> Result<HandshakeOutcome, Error> {
        match self {
            Handshake::Client(c) => {
                let info = info_of(c.alpn_protocol(), c.negotiated_cipher_suite(), c.handshake_kind());
                if is_tcpls(c.alpn_protocol(), c.protocol_version()) {
                    let (secrets, kernel) = c.dangerous_into_kernel_connection().map_err(Error::Tls)?;
                    Ok(HandshakeOutcome::Tcpls {
                        tx: RecordKey::new(&secrets.tx.1, secrets.tx.0)?,
                        rx: RecordKey::new(&secrets.rx.1, secrets.rx.0)?,
                        kernel: Kernel::Client(kernel),
                        info,
                    })
                } else {
                    Ok(HandshakeOutcome::Fallback { tls: FallbackTls::Client(c), info })
                }
            }
            Handshake::Server(s) => {
                let info = info_of(s.alpn_protocol(), s.negotiated_cipher_suite(), s.handshake_kind());
                if is_tcpls(s.alpn_protocol(), s.protocol_version()) {
                    let (secrets, kernel) = s.dangerous_into_kernel_connection().map_err(Error::Tls)?;
                    Ok(HandshakeOutcome::Tcpls {
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
        match self {
            Handshake::Client(c) => flush_pending(&mut **c, input, tx),
            Handshake::Server(s) => flush_pending(&mut **s, input, tx),
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
) -> HandshakeInfo {
    HandshakeInfo {
        alpn: alpn.map(<[u8]>::to_vec),
        cipher_suite: suite.map(|s| format!("{:?}", s.suite())).unwrap_or_default(),
        resumed: matches!(kind, Some(HandshakeKind::Resumed)),
    }
}

/// The client and server unbuffered connections share their states but not their types.
pub(super) trait Unbuffered {
    type Data;
    fn process<'c, 'i>(&'c mut self, incoming: &'i mut [u8]) -> UnbufferedStatus<'c, 'i, Self::Data>;
    fn handshaking(&self) -> bool;
}

impl Unbuffered for UnbufferedClientConnection {
    type Data = rustls::client::ClientConnectionData;
    fn process<'c, 'i>(&'c mut self, incoming: &'i mut [u8]) -> UnbufferedStatus<'c, 'i, Self::Data> {
        self.process_tls_records(incoming)
    }
    fn handshaking(&self) -> bool {
        self.is_handshaking()
    }
}

impl Unbuffered for UnbufferedServerConnection {
    type Data = rustls::server::ServerConnectionData;
    fn process<'c, 'i>(&'c mut self, incoming: &'i mut [u8]) -> UnbufferedStatus<'c, 'i, Self::Data> {
        self.process_tls_records(incoming)
    }
    fn handshaking(&self) -> bool {
        self.is_handshaking()
    }
}

/// Encodes one handshake chunk into `tx`, growing the reservation if rustls asks for more.
pub(super) fn encode_into<Data>(
    mut e: rustls::unbuffered::EncodeTlsData<'_, Data>,
    tx: &mut TxBuf,
) -> Result<(), Error> {
    let mut want = 4096;
    loop {
        match e.encode(tx.reserve(want)) {
            Ok(n) => {
                tx.commit(n);
                return Ok(());
            }
            Err(EncodeError::InsufficientSize(s)) => want = s.required_size,
            Err(EncodeError::AlreadyEncoded) => return Ok(()),
        }
    }
}

fn drive<C: Unbuffered>(
    conn: &mut C,
    rx: &mut RxBuf,
    tx: &mut TxBuf,
    exposed: &mut Exposed,
) -> Result<Progress, Error> {
    loop {
        let was_handshaking = conn.handshaking();
        let UnbufferedStatus { discard, state } = conn.process(&mut rx.data_mut()[..exposed.0]);
        let mut blocked = false;
        let mut complete = false;
        match state.map_err(Error::Tls)? {
            ConnectionState::EncodeTlsData(e) => encode_into(e, tx)?,
            // The bytes are already in `tx`; the caller writes them after we return, together
            // with the first TCPLS record when the handshake just completed.
            ConnectionState::TransmitTlsData(t) => t.done(),
            ConnectionState::BlockedHandshake => blocked = true,
            ConnectionState::WriteTraffic(_) => {
                // A server may write at half-RTT before the client Finished: not complete yet.
                if was_handshaking && conn.handshaking() {
                    blocked = true;
                } else {
                    complete = true;
                }
            }
            ConnectionState::ReadTraffic(_) | ConnectionState::ReadEarlyData(_) => {
                // We never expose a record past the handshake, and early data is not enabled
                // on this path: a record here means the peer broke the handshake's order.
                return Err(TransportError::unexpected("application data during the handshake").into());
            }
            ConnectionState::PeerClosed | ConnectionState::Closed => {
                return Err(Error::ConnectionLost("peer closed during the handshake".into()));
            }
            _ => return Err(TransportError::internal("unexpected rustls state during the handshake").into()),
        }
        rx.consume(discard);
        exposed.0 -= discard.min(exposed.0);
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
