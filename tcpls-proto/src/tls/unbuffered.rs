//! rustls' unbuffered client and server connections behind one trait, for the code that drives
//! either (the handshake, and the plain TLS fallback after it).

use rustls::client::UnbufferedClientConnection;
use rustls::server::UnbufferedServerConnection;
use rustls::unbuffered::{EncodeError, UnbufferedStatus};

use crate::error::Error;
use crate::record::TxBuf;

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
