//! Plain TLS over one TCP connection, when the peer did not select `tcpls/1` (PROTOCOL.md §1.3).
//!
//! rustls stays the record layer; the session exposes the byte stream as stream 0.

use rustls::client::UnbufferedClientConnection;
use rustls::server::UnbufferedServerConnection;
use rustls::unbuffered::{ConnectionState, EncryptError, UnbufferedStatus};

use super::unbuffered::{encode_into, Unbuffered};
use crate::error::{Error, TransportError};
use crate::record::{RxBuf, TxBuf};

pub enum FallbackTls {
    Client(Box<UnbufferedClientConnection>),
    Server(Box<UnbufferedServerConnection>),
}

impl std::fmt::Debug for FallbackTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FallbackTls")
    }
}

/// Result of processing received bytes.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FallbackRead {
    /// The peer sent close_notify: its byte stream is complete.
    pub peer_closed: bool,
}

impl FallbackTls {
    /// Decrypts every whole record in `rx`, passing application bytes to `deliver`; also sends
    /// what rustls must answer (KeyUpdate) into `tx`.
    pub fn read(
        &mut self,
        rx: &mut RxBuf,
        tx: &mut TxBuf,
        deliver: &mut dyn FnMut(&[u8]),
    ) -> Result<FallbackRead, Error> {
        match self {
            FallbackTls::Client(c) => read(&mut **c, rx, tx, deliver),
            FallbackTls::Server(s) => read(&mut **s, rx, tx, deliver),
        }
    }

    /// Encrypts `data` as application data records into `tx`.
    pub fn write(&mut self, data: &[u8], tx: &mut TxBuf) -> Result<(), Error> {
        match self {
            FallbackTls::Client(c) => with_write_traffic(&mut **c, tx, &mut |w, tx| encrypt(w, data, tx, false)),
            FallbackTls::Server(s) => with_write_traffic(&mut **s, tx, &mut |w, tx| encrypt(w, data, tx, false)),
        }
    }

    /// Queues close_notify: the end of our byte stream.
    pub fn close(&mut self, tx: &mut TxBuf) -> Result<(), Error> {
        match self {
            FallbackTls::Client(c) => with_write_traffic(&mut **c, tx, &mut |w, tx| encrypt(w, &[], tx, true)),
            FallbackTls::Server(s) => with_write_traffic(&mut **s, tx, &mut |w, tx| encrypt(w, &[], tx, true)),
        }
    }
}

type WriteFn<'a, D> = dyn FnMut(&mut rustls::unbuffered::WriteTraffic<'_, D>, &mut TxBuf) -> Result<(), Error> + 'a;

fn with_write_traffic<C: Unbuffered>(conn: &mut C, tx: &mut TxBuf, f: &mut WriteFn<'_, C::Data>) -> Result<(), Error> {
    let mut empty = [0u8; 0];
    // Pending handshake-layer output (e.g. a KeyUpdate answer) comes first; bounded loop.
    for _ in 0..16 {
        let UnbufferedStatus { state, .. } = conn.process(&mut empty);
        match state.map_err(Error::Tls)? {
            ConnectionState::EncodeTlsData(e) => encode_into(e, tx)?,
            ConnectionState::TransmitTlsData(t) => t.done(),
            ConnectionState::WriteTraffic(mut w) => return f(&mut w, tx),
            ConnectionState::Closed | ConnectionState::PeerClosed => {
                return Err(Error::ConnectionLost("TLS connection already closed".into()))
            }
            _ => return Err(TransportError::internal("plain TLS connection cannot write now").into()),
        }
    }
    Err(TransportError::internal("plain TLS connection did not become writable").into())
}

fn encrypt<D>(
    w: &mut rustls::unbuffered::WriteTraffic<'_, D>,
    data: &[u8],
    tx: &mut TxBuf,
    close: bool,
) -> Result<(), Error> {
    let mut want = data.len() + data.len() / 16 + 64 * (1 + data.len() / 16384);
    loop {
        let out = tx.reserve(want);
        let r = if close { w.queue_close_notify(out) } else { w.encrypt(data, out) };
        match r {
            Ok(n) => {
                tx.commit(n);
                return Ok(());
            }
            Err(EncryptError::InsufficientSize(s)) if s.required_size > want => want = s.required_size,
            Err(e) => return Err(TransportError::internal(format!("plain TLS encrypt: {e}")).into()),
        }
    }
}

fn read<C: Unbuffered>(
    conn: &mut C,
    rx: &mut RxBuf,
    tx: &mut TxBuf,
    deliver: &mut dyn FnMut(&[u8]),
) -> Result<FallbackRead, Error> {
    let mut result = FallbackRead::default();
    // Each pass consumes at least one record or stops; the bound only guards against a loop.
    for _ in 0..1_000_000 {
        let UnbufferedStatus { mut discard, state } = conn.process(rx.data_mut());
        let mut stop = false;
        match state.map_err(Error::Tls)? {
            ConnectionState::ReadTraffic(mut r) => {
                while let Some(record) = r.next_record() {
                    let record = record.map_err(Error::Tls)?;
                    discard += record.discard;
                    deliver(record.payload);
                }
            }
            ConnectionState::EncodeTlsData(e) => encode_into(e, tx)?,
            ConnectionState::TransmitTlsData(t) => t.done(),
            ConnectionState::PeerClosed => result.peer_closed = true,
            ConnectionState::Closed => {
                result.peer_closed = true;
                stop = true;
            }
            ConnectionState::WriteTraffic(_) | ConnectionState::BlockedHandshake => stop = true,
            _ => return Err(TransportError::unexpected("unexpected plain TLS state").into()),
        }
        rx.consume(discard);
        if stop {
            return Ok(result);
        }
    }
    Err(TransportError::internal("plain TLS read did not settle").into())
}
