//! Trust and identity, from PEM files: what a binding's config object holds, turned into rustls
//! configs as the CLI builds them (`--ca`, `--insecure`, `--cert`/`--key`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tcpls_proto::insecure::AcceptAnyServerCertificate;

use crate::error::{Error, ErrorKind, Result};

/// A binding's configuration: where the trust and identity files are. Checked when used, so
/// that the error names the step that needs them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigSpec {
    /// The CA (or the server's own certificate) clients trust; the system's roots without it.
    pub ca_file: Option<PathBuf>,
    /// Any server certificate is accepted (handshake signatures are still checked): tests only.
    pub insecure: bool,
    /// The certificate chain and key: a server's identity, or a client certificate.
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
}

fn config_error(message: String) -> Error {
    Error::new(ErrorKind::Config, message)
}

fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let data =
        std::fs::read(path).map_err(|e| config_error(format!("cannot read certificate {}: {e}", path.display())))?;
    let certs: std::result::Result<Vec<_>, _> = rustls_pemfile::certs(&mut &data[..]).collect();
    let certs = certs.map_err(|e| config_error(format!("invalid PEM in {}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(config_error(format!("no certificate found in {}", path.display())));
    }
    Ok(certs)
}

fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>> {
    let data = std::fs::read(path).map_err(|e| config_error(format!("cannot read key {}: {e}", path.display())))?;
    rustls_pemfile::private_key(&mut &data[..])
        .map_err(|e| config_error(format!("invalid PEM in {}: {e}", path.display())))?
        .ok_or_else(|| config_error(format!("no private key found in {}", path.display())))
}

impl ConfigSpec {
    fn identity(&self) -> Result<Option<(Vec<CertificateDer<'static>>, PrivateKeyDer<'static>)>> {
        match (&self.cert_file, &self.key_file) {
            (Some(cert), Some(key)) => Ok(Some((load_certs(cert)?, load_key(key)?))),
            (None, None) => Ok(None),
            _ => Err(config_error("a certificate needs its key and a key its certificate: set both".into())),
        }
    }

    /// The client side: trust from the CA file, insecure, or the system's roots.
    pub fn client_config(&self) -> Result<Arc<ClientConfig>> {
        let provider = Arc::new(tcpls::crypto_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| config_error(e.to_string()))?;
        let builder = if self.insecure {
            let verifier = Arc::new(AcceptAnyServerCertificate::new(&provider));
            builder.dangerous().with_custom_certificate_verifier(verifier)
        } else {
            let mut roots = RootCertStore::empty();
            match &self.ca_file {
                Some(path) => {
                    for cert in load_certs(path)? {
                        roots
                            .add(cert)
                            .map_err(|e| config_error(format!("bad CA certificate in {}: {e}", path.display())))?;
                    }
                }
                None => {
                    for cert in rustls_native_certs::load_native_certs().certs {
                        let _ = roots.add(cert);
                    }
                }
            }
            builder.with_root_certificates(roots)
        };
        let config = match self.identity()? {
            Some((certs, key)) => builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| config_error(format!("client certificate and key do not match: {e}")))?,
            None => builder.with_no_client_auth(),
        };
        Ok(Arc::new(config))
    }

    /// The server side: the certificate and key are required.
    pub fn server_config(&self) -> Result<Arc<ServerConfig>> {
        let Some((certs, key)) = self.identity()? else {
            return Err(config_error(
                "a server needs a certificate and its key (C: tcpls_config_set_certificate; Python: cert=FILE, \
                 key=FILE; `tcpls cert --out DIR` makes a self-signed pair)"
                    .into(),
            ));
        };
        let config = ServerConfig::builder_with_provider(Arc::new(tcpls::crypto_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| config_error(e.to_string()))?
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .map_err(|e| config_error(format!("certificate and key do not match: {e}")))?;
        Ok(Arc::new(config))
    }
}
