//! A throw-away self-signed certificate for `localhost`, and the matching rustls configs.

use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

/// Server and client TLS configs that trust each other.
pub struct Pki {
    pub server: Arc<ServerConfig>,
    pub client: Arc<ClientConfig>,
}

impl Pki {
    pub fn new() -> Result<Pki, String> {
        let e = |what: &str, x: &dyn std::fmt::Display| format!("{what}: {x}");
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".into()]).map_err(|x| e("certificate", &x))?;
        let cert: CertificateDer<'static> = ck.cert.der().clone();
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(ck.key_pair.serialize_der()));
        let mut roots = RootCertStore::empty();
        roots.add(cert.clone()).map_err(|x| e("root store", &x))?;
        let client = ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
        let server = ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)
            .map_err(|x| e("server config", &x))?;
        Ok(Pki { server: Arc::new(server), client: Arc::new(client) })
    }
}
