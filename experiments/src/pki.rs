//! Server and client TLS configs that trust each other, around the workspace's throw-away
//! certificate for `localhost` (the `tcpls-test` kit).

use std::sync::Arc;

use rustls::{ClientConfig, ServerConfig};

/// Server and client TLS configs that trust each other.
pub struct Pki {
    pub server: Arc<ServerConfig>,
    pub client: Arc<ClientConfig>,
}

impl Pki {
    pub fn new() -> Result<Pki, String> {
        let pki = tcpls_test::Pki::try_new().map_err(|e| format!("certificate: {e}"))?;
        Ok(Pki { server: pki.server(), client: pki.client() })
    }
}
