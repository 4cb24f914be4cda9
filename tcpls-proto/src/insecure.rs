//! **Dangerous**: a server-certificate verifier that accepts any certificate, like rustls'
//! `danger` modules. It is the only one in the workspace: `tcpls connect --insecure` (and the
//! other CLI commands' `--insecure`) use it, the fuzz targets use it without signature checks,
//! and the test kit (`tcpls-test`) re-exports it.
//!
//! It lives in the sans-IO core rather than in `tcpls` because the fuzz crate, which is also
//! compiled by this crate's `tests/fuzz_soak.rs`, can only reach this crate and rustls.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

/// **Dangerous**: accepts any server certificate, for any name, without a chain to a trusted
/// root. Anyone on the path can then impersonate the server; use it for tests and for an
/// explicit `--insecure` only.
///
/// [`AcceptAnyServerCertificate::new`] still checks the handshake signatures (the server
/// proves it holds the key of the certificate it sent, so the handshake is a real one and only
/// the identity is unchecked). [`AcceptAnyServerCertificate::without_signature_checks`] accepts
/// any signature too: for fuzzing, where the server signs with a fake key to save time.
///
/// ```
/// use std::sync::Arc;
/// use tcpls_proto::insecure::AcceptAnyServerCertificate;
///
/// let provider = Arc::new(tcpls_proto::crypto_provider());
/// let verifier = Arc::new(AcceptAnyServerCertificate::new(&provider));
/// let config = rustls::ClientConfig::builder_with_provider(provider)
///     .with_safe_default_protocol_versions()
///     .unwrap()
///     .dangerous()
///     .with_custom_certificate_verifier(verifier)
///     .with_no_client_auth();
/// # let _ = config;
/// ```
#[derive(Debug)]
pub struct AcceptAnyServerCertificate {
    algorithms: WebPkiSupportedAlgorithms,
    check_signatures: bool,
}

impl AcceptAnyServerCertificate {
    /// Accepts any certificate; the handshake signatures are checked with `provider`'s
    /// algorithms.
    pub fn new(provider: &CryptoProvider) -> Self {
        AcceptAnyServerCertificate { algorithms: provider.signature_verification_algorithms, check_signatures: true }
    }

    /// Accepts any certificate and any handshake signature (offering `provider`'s schemes).
    pub fn without_signature_checks(provider: &CryptoProvider) -> Self {
        AcceptAnyServerCertificate { algorithms: provider.signature_verification_algorithms, check_signatures: false }
    }
}

impl ServerCertVerifier for AcceptAnyServerCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        if !self.check_signatures {
            return Ok(HandshakeSignatureValid::assertion());
        }
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        if !self.check_signatures {
            return Ok(HandshakeSignatureValid::assertion());
        }
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}
