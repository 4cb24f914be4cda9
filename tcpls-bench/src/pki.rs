//! A self-signed certificate made by the parent and handed to the child processes, and the
//! rustls configs every protocol uses (aws-lc-rs, TLS 1.3 only, TLS13_AES_128_GCM_SHA256 only).

use std::sync::Arc;

use rustls::crypto::{aws_lc_rs, CryptoProvider};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

use crate::Res;

/// Environment variables through which the children get the certificate and key (DER, hex).
pub const CERT_ENV: &str = "TCPLS_BENCH_CERT_DER_HEX";
pub const KEY_ENV: &str = "TCPLS_BENCH_KEY_DER_HEX";

/// The server name the certificate is for.
pub const SERVER_NAME: &str = tcpls_test::pki::SERVER_NAMES[0];

pub struct Pki {
    pub cert: Vec<u8>,
    pub key: Vec<u8>,
}

impl Pki {
    pub fn generate() -> Res<Self> {
        // The workspace's throw-away certificate (for localhost and 127.0.0.1).
        let pki = tcpls_test::Pki::try_new()?;
        Ok(Self { cert: pki.cert.to_vec(), key: pki.key })
    }

    /// The variables to set on a child process.
    pub fn env(&self) -> [(&'static str, String); 2] {
        [(CERT_ENV, hex(&self.cert)), (KEY_ENV, hex(&self.key))]
    }

    /// What the parent put in the environment.
    pub fn from_env() -> Res<Self> {
        let get = |name: &str| -> Res<Vec<u8>> {
            let v = std::env::var(name).map_err(|_| format!("{name} is not set (run `tcpls-bench compare`)"))?;
            unhex(&v).ok_or_else(|| format!("{name} is not valid hex").into())
        };
        Ok(Self { cert: get(CERT_ENV)?, key: get(KEY_ENV)? })
    }

    pub fn client_config(&self) -> Res<ClientConfig> {
        let mut roots = RootCertStore::empty();
        roots.add(CertificateDer::from(self.cert.clone()))?;
        Ok(ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_root_certificates(roots)
            .with_no_client_auth())
    }

    pub fn server_config(&self) -> Res<ServerConfig> {
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key.clone()));
        Ok(ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_no_client_auth()
            .with_single_cert(vec![CertificateDer::from(self.cert.clone())], key)?)
    }
}

/// aws-lc-rs restricted to TLS13_AES_128_GCM_SHA256, for both TLS and TCPLS, both sides.
fn provider() -> Arc<CryptoProvider> {
    Arc::new(CryptoProvider {
        cipher_suites: vec![aws_lc_rs::cipher_suite::TLS13_AES_128_GCM_SHA256],
        ..aws_lc_rs::default_provider()
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip() {
        let data: Vec<u8> = (0..=255).collect();
        assert_eq!(unhex(&hex(&data)).as_deref(), Some(&data[..]));
        assert_eq!(unhex("abc"), None);
        assert_eq!(unhex("zz"), None);
    }
}
