//! Everything that touches rustls lives in this module, so its API churn stays here.
//!
//! rustls (unbuffered API) runs the TLS 1.3 handshake of each TCP connection. When `tcpls/1`
//! was negotiated, [`Handshake::finish`] takes the traffic secrets and the
//! [`rustls::kernel::KernelConnection`] that keeps serving session tickets and KeyUpdate, and
//! our own record layer takes over. Otherwise rustls stays the record layer ([`FallbackTls`]).

mod fallback;
mod handshake;
mod tickets;

pub use fallback::{FallbackRead, FallbackTls};
pub use handshake::{Handshake, HandshakeInfo, HandshakeOutcome, Progress, MAX_EARLY_DATA};
pub use tickets::{TicketStats, TicketStore};

/// Re-exported for the connection state, which keeps the handshake's exposed-bytes marker.
pub mod handshake_exposed {
    pub use super::handshake::Exposed;
}

use rustls::client::ClientConnectionData;
use rustls::kernel::KernelConnection;
use rustls::server::ServerConnectionData;

use crate::error::TransportError;
use crate::record::RecordKey;

/// rustls' aws-lc-rs provider with the TLS 1.3 suites in TCPLS's order: AES-128-GCM first
/// (PROTOCOL.md §2; the fastest here), then AES-256-GCM and ChaCha20-Poly1305, then the TLS 1.2
/// suites, which only plain-TLS fallback peers may use.
pub fn crypto_provider() -> rustls::crypto::CryptoProvider {
    use rustls::crypto::aws_lc_rs::{cipher_suite as cs, default_provider};
    let mut suites =
        vec![cs::TLS13_AES_128_GCM_SHA256, cs::TLS13_AES_256_GCM_SHA384, cs::TLS13_CHACHA20_POLY1305_SHA256];
    suites.extend(default_provider().cipher_suites.into_iter().filter(|s| s.version() == &rustls::version::TLS12));
    rustls::crypto::CryptoProvider { cipher_suites: suites, ..default_provider() }
}

/// The ALPN protocol id that selects TCPLS (PROTOCOL.md §1).
pub const ALPN_TCPLS: &[u8] = b"tcpls/1";

/// rustls' view of an established TCPLS connection: derives the next traffic secrets for
/// KeyUpdate and takes the session tickets the server sends after the handshake.
pub enum Kernel {
    Client(KernelConnection<ClientConnectionData>),
    Server(KernelConnection<ServerConnectionData>),
}

impl Kernel {
    /// Next generation of our sending key (after we sent KeyUpdate).
    pub fn next_tx_key(&mut self) -> Result<RecordKey, TransportError> {
        let next = match self {
            Kernel::Client(k) => k.update_tx_secret(),
            Kernel::Server(k) => k.update_tx_secret(),
        };
        let (seq, secrets) = next.map_err(|e| TransportError::internal(format!("KeyUpdate: {e}")))?;
        RecordKey::new(&secrets, seq)
    }

    /// Next generation of the peer's key (after it sent KeyUpdate).
    pub fn next_rx_key(&mut self) -> Result<RecordKey, TransportError> {
        let next = match self {
            Kernel::Client(k) => k.update_rx_secret(),
            Kernel::Server(k) => k.update_rx_secret(),
        };
        let (seq, secrets) = next.map_err(|e| TransportError::internal(format!("KeyUpdate: {e}")))?;
        RecordKey::new(&secrets, seq)
    }

    /// A NewSessionTicket message body received on our record layer. Only servers send them.
    pub fn handle_new_session_ticket(&mut self, body: &[u8]) -> Result<(), TransportError> {
        match self {
            Kernel::Client(k) => {
                k.handle_new_session_ticket(body).map_err(|e| TransportError::decode(format!("NewSessionTicket: {e}")))
            }
            Kernel::Server(_) => Err(TransportError::unexpected("NewSessionTicket sent by a client")),
        }
    }
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Kernel::Client(_) => "Kernel::Client",
            Kernel::Server(_) => "Kernel::Server",
        })
    }
}
