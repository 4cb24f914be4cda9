//! rustls' connection machinery lives in this module (the unbuffered handshake, the kernel
//! connection, the plain-TLS fallback, the ticket store), so the churn of that API stays here.
//! Elsewhere the crate uses only rustls' value types and traits: the configs and `ServerName`
//! the session is built from (`session/`), `rustls::Error` inside our errors (`error.rs`), the
//! traffic secrets the record layer turns into keys (`record/cipher.rs`) and the certificate
//! verifier traits of the test-only verifier (`insecure.rs`).
//!
//! rustls (unbuffered API) runs the TLS 1.3 handshake of each TCP connection. When `tcpls/1`
//! was negotiated, [`Handshake::finish`] takes the traffic secrets and the
//! [`rustls::kernel::KernelConnection`] that keeps serving session tickets and KeyUpdate, and
//! our own record layer takes over. Otherwise rustls stays the record layer ([`FallbackTls`]).

mod fallback;
mod handshake;
mod tickets;
mod unbuffered;

pub use fallback::FallbackTls;
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

/// A secret of one TLS connection that both ends derive when its handshake completes, from which
/// TCPLS derives the rejoin key, session reference and rejoin proof input (PROTOCOL.md §3).
///
/// rustls' unbuffered API, which TCPLS uses, does not offer RFC 8446 exporters, so this is
/// HKDF-Extract (SHA-256, salt `tcpls connection secret`) over the first application traffic keys and IVs of
/// both directions (client to server first): values only the two ends of this TLS connection
/// know, distinct for each connection. [`ConnSecret::derive`] is HKDF-Expand with a label.
#[derive(Clone)]
pub struct ConnSecret(aws_lc_rs::hkdf::Prk);

impl std::fmt::Debug for ConnSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ConnSecret(..)")
    }
}

fn traffic_key_iv(s: &rustls::ConnectionTrafficSecrets) -> Result<(&[u8], &[u8]), TransportError> {
    use rustls::ConnectionTrafficSecrets as S;
    match s {
        S::Aes128Gcm { key, iv } | S::Aes256Gcm { key, iv } | S::Chacha20Poly1305 { key, iv } => {
            Ok((key.as_ref(), iv.as_ref()))
        }
        _ => Err(TransportError::internal("negotiated cipher suite is not a TLS 1.3 AEAD we support")),
    }
}

impl ConnSecret {
    /// From the first application traffic keys: `client` is the client-to-server direction.
    pub fn from_traffic(
        client: &rustls::ConnectionTrafficSecrets,
        server: &rustls::ConnectionTrafficSecrets,
    ) -> Result<Self, TransportError> {
        let (ck, civ) = traffic_key_iv(client)?;
        let (sk, siv) = traffic_key_iv(server)?;
        let mut ikm = Vec::with_capacity(ck.len() + civ.len() + sk.len() + siv.len());
        for part in [ck, civ, sk, siv] {
            ikm.extend_from_slice(part);
        }
        let salt = aws_lc_rs::hkdf::Salt::new(aws_lc_rs::hkdf::HKDF_SHA256, b"tcpls connection secret");
        let prk = salt.extract(&ikm);
        ikm.iter_mut().for_each(|b| *b = 0);
        Ok(Self(prk))
    }

    /// `out.len()` bytes for `label` (at most 255 × 32).
    pub fn derive(&self, label: &[u8], out: &mut [u8]) {
        struct Len(usize);
        impl aws_lc_rs::hkdf::KeyType for Len {
            fn len(&self) -> usize {
                self.0
            }
        }
        let info = [label];
        let filled = self.0.expand(&info, Len(out.len())).and_then(|okm| okm.fill(out));
        debug_assert!(filled.is_ok(), "HKDF output length in range");
    }
}

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
