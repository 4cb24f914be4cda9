#![allow(dead_code, clippy::unwrap_used)]

use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

pub struct Pki {
    pub cert: CertificateDer<'static>,
    pub key: Vec<u8>,
    pub cert_pem: String,
    pub key_pem: String,
}

impl Pki {
    pub fn new() -> Self {
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
        Pki {
            cert: ck.cert.der().clone(),
            key: ck.key_pair.serialize_der(),
            cert_pem: ck.cert.pem(),
            key_pem: ck.key_pair.serialize_pem(),
        }
    }

    pub fn client(&self) -> Arc<ClientConfig> {
        let mut roots = RootCertStore::empty();
        roots.add(self.cert.clone()).unwrap();
        Arc::new(ClientConfig::builder().with_root_certificates(roots).with_no_client_auth())
    }

    pub fn server(&self) -> Arc<ServerConfig> {
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.key.clone()));
        Arc::new(ServerConfig::builder().with_no_client_auth().with_single_cert(vec![self.cert.clone()], key).unwrap())
    }
}

pub fn pattern(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Listeners on several loopback addresses (e.g. 127.0.0.1 and 127.0.0.2 as two paths) sharing
/// one join registry, as a multi-address server has them.
pub async fn listen_on(pki: &Pki, addrs: &[&str]) -> Vec<tcpls::TcplsListener> {
    let registry = tcpls::JoinRegistry::new();
    let mut listeners = Vec::new();
    for a in addrs {
        let l = tcpls::TcplsListener::bind_with_registry(
            a.parse().unwrap(),
            pki.server(),
            tcpls::SessionConfig::default(),
            registry.clone(),
        )
        .await
        .unwrap();
        listeners.push(l);
    }
    listeners
}
