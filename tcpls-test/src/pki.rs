//! Throw-away certificates (rcgen) and the rustls configs that use them. Every test, example,
//! benchmark and experiment of the workspace gets its certificates here, so that a change of
//! rcgen or rustls API is made once.

use std::sync::Arc;

use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig, SupportedCipherSuite};

/// The names of [`Pki`]'s server certificate: tests connect to `localhost` or `127.0.0.1`.
pub const SERVER_NAMES: [&str; 2] = ["localhost", "127.0.0.1"];

/// A certificate and its private key, as DER (for rustls) and PEM (for files and other
/// programs: the CLI, openssl, proxies).
#[derive(Clone)]
pub struct Identity {
    pub cert: CertificateDer<'static>,
    /// PKCS#8 DER.
    pub key: Vec<u8>,
    pub cert_pem: String,
    pub key_pem: String,
}

impl Identity {
    fn new(cert: &rcgen::Certificate, key: &KeyPair) -> Identity {
        Identity {
            cert: cert.der().clone(),
            key: key.serialize_der(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        }
    }

    /// A self-signed certificate for the DNS names (or IP addresses) `names`, with common name
    /// `cn` when given.
    pub fn self_signed(cn: Option<&str>, names: &[&str]) -> Result<Identity, String> {
        let mut params = params(names)?;
        if let Some(cn) = cn {
            params.distinguished_name.push(DnType::CommonName, cn);
        }
        let key = KeyPair::generate().map_err(|e| format!("key generation: {e}"))?;
        let cert = params.self_signed(&key).map_err(|e| format!("certificate: {e}"))?;
        Ok(Identity::new(&cert, &key))
    }

    /// The private key, as rustls takes it.
    pub fn private_key(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key.clone()))
    }
}

fn params(names: &[&str]) -> Result<CertificateParams, String> {
    let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
    CertificateParams::new(names).map_err(|e| format!("certificate names: {e}"))
}

/// A test certificate authority, for client certificates (mutual TLS, per-client policies).
pub struct TestCa {
    /// The CA certificate (what a server's `--client-ca` file holds).
    pub cert: Identity,
    issuer: rcgen::Certificate,
    key: KeyPair,
}

impl TestCa {
    /// A CA with common name `cn`.
    pub fn new(cn: &str) -> Result<TestCa, String> {
        let mut params = params(&[])?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, cn);
        let key = KeyPair::generate().map_err(|e| format!("key generation: {e}"))?;
        let issuer = params.self_signed(&key).map_err(|e| format!("CA certificate: {e}"))?;
        Ok(TestCa { cert: Identity::new(&issuer, &key), issuer, key })
    }

    /// A client certificate (extended key usage clientAuth) with common name `cn` and the DNS
    /// names `names`, signed by this CA.
    pub fn client_cert(&self, cn: &str, names: &[&str]) -> Result<Identity, String> {
        let mut params = params(names)?;
        params.distinguished_name.push(DnType::CommonName, cn);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let key = KeyPair::generate().map_err(|e| format!("key generation: {e}"))?;
        let cert = params.signed_by(&key, &self.issuer, &self.key).map_err(|e| format!("certificate: {e}"))?;
        Ok(Identity::new(&cert, &key))
    }
}

/// A self-signed server certificate for [`SERVER_NAMES`] and rustls configs around it: the
/// server presents it, the client trusts it (and nothing else).
///
/// [`Pki::server`] / [`Pki::client`] use rustls' builders with the process default provider
/// (aws-lc-rs, TLS 1.2 and 1.3, as an application would); [`Pki::server_config`] /
/// [`Pki::client_config`] pin aws-lc-rs and TLS 1.3 and set ALPN, as the sans-IO core's tests
/// want.
#[derive(Clone)]
pub struct Pki {
    pub cert: CertificateDer<'static>,
    /// PKCS#8 DER.
    pub key: Vec<u8>,
    pub cert_pem: String,
    pub key_pem: String,
}

impl Default for Pki {
    fn default() -> Self {
        Self::new()
    }
}

impl Pki {
    /// A fresh certificate (panics if rcgen fails, which it does not for these fixed names).
    pub fn new() -> Pki {
        Self::try_new().expect("generating a test certificate")
    }

    /// A fresh certificate, for callers that report errors rather than panic (tools).
    pub fn try_new() -> Result<Pki, String> {
        let id = Identity::self_signed(None, &SERVER_NAMES)?;
        Ok(Pki { cert: id.cert, key: id.key, cert_pem: id.cert_pem, key_pem: id.key_pem })
    }

    /// The private key, as rustls takes it.
    pub fn private_key(&self) -> PrivateKeyDer<'static> {
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key.clone()))
    }

    /// A root store holding just this certificate.
    pub fn roots(&self) -> RootCertStore {
        let mut roots = RootCertStore::empty();
        roots.add(self.cert.clone()).expect("a freshly generated certificate is a valid root");
        roots
    }

    /// A client config (default builder) that trusts only this certificate.
    pub fn client(&self) -> Arc<ClientConfig> {
        Arc::new(ClientConfig::builder().with_root_certificates(self.roots()).with_no_client_auth())
    }

    /// A server config (default builder) presenting this certificate, no client authentication.
    pub fn server(&self) -> Arc<ServerConfig> {
        let config = ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(vec![self.cert.clone()], self.private_key())
            .expect("the certificate and key match");
        Arc::new(config)
    }

    /// A TLS 1.3-only aws-lc-rs client config trusting this certificate, offering `alpn`.
    pub fn client_config(&self, alpn: &[&[u8]]) -> ClientConfig {
        let mut c = self.client_config_with_suites(&rustls::crypto::aws_lc_rs::default_provider().cipher_suites);
        c.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
        c
    }

    /// Like [`Pki::client_config`] without ALPN, offering only `suites`.
    pub fn client_config_with_suites(&self, suites: &[SupportedCipherSuite]) -> ClientConfig {
        let provider = rustls::crypto::CryptoProvider {
            cipher_suites: suites.to_vec(),
            ..rustls::crypto::aws_lc_rs::default_provider()
        };
        ClientConfig::builder_with_provider(Arc::new(provider))
            .with_protocol_versions(&[&rustls::version::TLS13])
            .expect("aws-lc-rs supports TLS 1.3")
            .with_root_certificates(self.roots())
            .with_no_client_auth()
    }

    /// A TLS 1.3-only aws-lc-rs server config presenting this certificate, offering `alpn`.
    pub fn server_config(&self, alpn: &[&[u8]]) -> ServerConfig {
        let mut s = ServerConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
            .with_protocol_versions(&[&rustls::version::TLS13])
            .expect("aws-lc-rs supports TLS 1.3")
            .with_no_client_auth()
            .with_single_cert(vec![self.cert.clone()], self.private_key())
            .expect("the certificate and key match");
        s.alpn_protocols = alpn.iter().map(|a| a.to_vec()).collect();
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configs_build_and_a_ca_signs_client_certificates() {
        let pki = Pki::new();
        let _ = (pki.client(), pki.server(), pki.client_config(&[b"x"]), pki.server_config(&[]));
        assert!(pki.cert_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        let ca = TestCa::new("test CA").unwrap();
        let alice = ca.client_cert("alice", &["alice.clients.test"]).unwrap();
        assert!(alice.key_pem.contains("PRIVATE KEY"));
        assert_ne!(alice.cert, ca.cert.cert);
    }
}
