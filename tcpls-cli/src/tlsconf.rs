//! rustls configurations for the CLI: certificates, trust, cipher suite order.

use std::path::Path;
use std::sync::Arc;

use rustls::crypto::{aws_lc_rs, CryptoProvider};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use tcpls_proto::insecure::AcceptAnyServerCertificate;
use tcpls_proto::sync::LockExt;

/// aws-lc-rs with the TLS 1.3 suites in our order (AES-128-GCM first: fastest here and the
/// protocol's default), then TLS 1.2 suites for plain-TLS fallback peers. `cipher` restricts
/// the TLS 1.3 suites to one (aes128, aes256, chacha20).
pub fn provider(cipher: Option<&str>) -> Result<Arc<CryptoProvider>, String> {
    use aws_lc_rs::cipher_suite as cs;
    let tls13 = match cipher {
        None => return Ok(Arc::new(tcpls::crypto_provider())),
        Some("aes128") => vec![cs::TLS13_AES_128_GCM_SHA256],
        Some("aes256") => vec![cs::TLS13_AES_256_GCM_SHA384],
        Some("chacha20") => vec![cs::TLS13_CHACHA20_POLY1305_SHA256],
        Some(other) => return Err(format!("unknown cipher {other:?}: use aes128, aes256 or chacha20")),
    };
    let mut suites = tls13;
    suites.extend(
        aws_lc_rs::default_provider().cipher_suites.into_iter().filter(|s| s.version() == &rustls::version::TLS12),
    );
    Ok(Arc::new(CryptoProvider { cipher_suites: suites, ..aws_lc_rs::default_provider() }))
}

/// The warm-up thread of [`warm_up_crypto`], until someone waits for it.
static WARM_UP: std::sync::Mutex<Option<std::thread::JoinHandle<()>>> = std::sync::Mutex::new(None);

/// Starts the crypto library's random generator on a thread of its own. aws-lc-rs seeds it on
/// first use, once per process, from its CPU jitter entropy source, which takes tens of
/// milliseconds (50-100 ms measured here, docs/PERFORMANCE.md "Cold start"); without this the
/// first handshake pays for it, as its ClientHello needs a random. Called first thing in `main`,
/// it runs while the arguments are parsed, the certificates loaded and the TCP connection made.
pub fn warm_up_crypto() {
    let started = std::thread::Builder::new().name("crypto-warm-up".into()).spawn(|| {
        let mut seed = [0u8; 32];
        let _ = aws_lc_rs::default_provider().secure_random.fill(&mut seed);
    });
    if let Ok(handle) = started {
        *WARM_UP.lock_unpoisoned() = Some(handle);
    }
}

/// Waits until [`warm_up_crypto`] is done (at once if it was not started or is done), so that a
/// handshake timer started after it measures the handshake, not the crypto library's start.
pub async fn crypto_ready() {
    let handle = WARM_UP.lock_unpoisoned().take();
    if let Some(handle) = handle {
        let _ = tokio::task::spawn_blocking(move || handle.join()).await;
    }
}

/// The TLS secrets of every handshake, in the NSS key log format that Wireshark reads, go to
/// the file named by SSLKEYLOGFILE (`--keylog FILE` sets it): rustls' own `KeyLogFile`, which
/// does nothing when the variable is not set.
fn key_log() -> Arc<dyn rustls::KeyLog> {
    Arc::new(rustls::KeyLogFile::new())
}

pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let data = std::fs::read(path).map_err(|e| format!("cannot read certificate {}: {e}", path.display()))?;
    let certs: Result<Vec<_>, _> = rustls_pemfile::certs(&mut &data[..]).collect();
    let certs = certs.map_err(|e| format!("invalid PEM in {}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("no certificate found in {}", path.display()));
    }
    Ok(certs)
}

pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let data = std::fs::read(path).map_err(|e| format!("cannot read key {}: {e}", path.display()))?;
    rustls_pemfile::private_key(&mut &data[..])
        .map_err(|e| format!("invalid PEM in {}: {e}", path.display()))?
        .ok_or_else(|| format!("no private key found in {}", path.display()))
}

/// A self-signed certificate for localhost, 127.0.0.1, ::1 and `names` (PEM cert, PEM key).
pub fn self_signed(names: &[String]) -> Result<(String, String), String> {
    self_signed_for_days(names, CERT_DAYS)
}

/// Validity of the certificates `tcpls cert` writes by default (and of ephemeral ones): a year,
/// as a TLS scanner expects of a server certificate (rcgen's own default runs to the year 4096).
pub const CERT_DAYS: u32 = 365;

/// [`self_signed`] valid from an hour ago (a peer whose clock lags a little accepts it at once)
/// for `days` days.
pub fn self_signed_for_days(names: &[String], days: u32) -> Result<(String, String), String> {
    let mut all: Vec<String> = names.to_vec();
    for n in ["localhost", "127.0.0.1", "::1"] {
        if !all.iter().any(|x| x == n) {
            all.push(n.to_string());
        }
    }
    let failed = |e: rcgen::Error| format!("certificate generation failed: {e}");
    let mut params = rcgen::CertificateParams::new(all).map_err(failed)?;
    let now = time::OffsetDateTime::now_utc();
    params.not_before = now - time::Duration::hours(1);
    params.not_after = now + time::Duration::days(i64::from(days));
    let key = rcgen::KeyPair::generate().map_err(failed)?;
    let cert = params.self_signed(&key).map_err(failed)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// `client_ca`: require a client certificate that chains to (or is) one in that PEM file (mutual
/// TLS); every connection of a session, joined ones included, is then authenticated.
pub fn server_config(
    certs: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    alpn: &[String],
    client_ca: Option<&Path>,
) -> Result<ServerConfig, String> {
    let builder = ServerConfig::builder_with_provider(provider(None)?)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(path) => {
            let mut roots = RootCertStore::empty();
            for cert in load_certs(path)? {
                roots.add(cert).map_err(|e| format!("bad client CA certificate in {}: {e}", path.display()))?;
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider(None)?)
                .build()
                .map_err(|e| format!("client CA {}: {e}", path.display()))?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut config =
        builder.with_single_cert(certs, key).map_err(|e| format!("certificate and key do not match: {e}"))?;
    // Plain TLS clients may offer these (after tcpls/1, which the library puts first).
    config.alpn_protocols = alpn.iter().map(|a| a.as_bytes().to_vec()).collect();
    config.key_log = key_log();
    Ok(config)
}

/// Trust: `--ca FILE`, `--insecure`, or the system's roots.
pub fn client_config(
    ca: Option<&Path>,
    insecure: bool,
    alpn: &[String],
    cipher: Option<&str>,
) -> Result<ClientConfig, String> {
    client_config_with_identity(ca, insecure, alpn, cipher, None)
}

/// Like [`client_config`], presenting a client certificate (`--cert FILE --key FILE`) to servers
/// that ask for one.
pub fn client_config_with_identity(
    ca: Option<&Path>,
    insecure: bool,
    alpn: &[String],
    cipher: Option<&str>,
    identity: Option<(&Path, &Path)>,
) -> Result<ClientConfig, String> {
    let identity = match identity {
        Some((cert, key)) => Some((load_certs(cert)?, load_key(key)?)),
        None => None,
    };
    let with_identity = |b: rustls::ConfigBuilder<ClientConfig, rustls::client::WantsClientCert>| match identity {
        Some((certs, key)) => {
            b.with_client_auth_cert(certs, key).map_err(|e| format!("client certificate and key do not match: {e}"))
        }
        None => Ok(b.with_no_client_auth()),
    };
    let builder = ClientConfig::builder_with_provider(provider(cipher)?)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let mut config = if insecure {
        // `--insecure`: any certificate (signatures are still checked, so the handshake is a
        // real one; only the identity is not).
        let verifier = Arc::new(AcceptAnyServerCertificate::new(&*provider(cipher)?));
        with_identity(builder.dangerous().with_custom_certificate_verifier(verifier))?
    } else {
        let mut roots = RootCertStore::empty();
        match ca {
            Some(path) => {
                for cert in load_certs(path)? {
                    roots.add(cert).map_err(|e| format!("bad CA certificate in {}: {e}", path.display()))?;
                }
            }
            None => {
                for cert in rustls_native_certs::load_native_certs().certs {
                    let _ = roots.add(cert);
                }
            }
        }
        // With no roots at all every certificate fails with UnknownIssuer.
        with_identity(builder.with_root_certificates(roots))?
    };
    config.alpn_protocols = alpn.iter().map(|a| a.as_bytes().to_vec()).collect();
    config.key_log = key_log();
    Ok(config)
}

/// A connection error as a user should read it: what failed and, for the usual mistakes (no
/// server at that address, an untrusted certificate...), what to do about it.
pub fn explain(e: &std::io::Error) -> String {
    advice(e).unwrap_or_else(|| e.to_string())
}

/// The session error inside `e`, through the errors that wrap it (io::Error's inner error,
/// an error's source).
fn session_error<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a tcpls::proto::Error> {
    if let Some(s) = e.downcast_ref::<tcpls::proto::Error>() {
        return Some(s);
    }
    if let Some(inner) = e.downcast_ref::<std::io::Error>().and_then(|io| io.get_ref()) {
        return session_error(inner);
    }
    e.source().and_then(session_error)
}

/// What to do about `e`, when it is one of the usual mistakes; the message replaces the error's
/// own (which names the address again: the caller has named it already).
pub fn advice(e: &std::io::Error) -> Option<String> {
    use rustls::{CertificateError, Error as Tls};
    use tcpls::proto::Error as Session;
    if e.kind() == std::io::ErrorKind::ConnectionRefused {
        return Some(
            "connection refused: nothing listens on that address and port (is the server running there? \
             check the address and the port; a tcpls server listens on 4443 unless told otherwise)"
                .into(),
        );
    }
    let session_error = session_error(e)?;
    let advice = match session_error {
        Session::Tls(Tls::InvalidCertificate(CertificateError::UnknownIssuer)) => {
            "the server's certificate is not signed by a CA we trust (UnknownIssuer): pass the server's \
             certificate or its CA with --ca FILE, or use --insecure for a test"
        }
        Session::Tls(Tls::InvalidCertificate(CertificateError::BadSignature)) => {
            "the server's certificate does not verify against the --ca certificate (BadSignature): is --ca the \
             right file for this server? (--insecure for a test)"
        }
        Session::Tls(Tls::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        )) => "the server's certificate does not name this host (NotValidForName): use --server-name NAME with a name it has",
        Session::Tls(Tls::InvalidCertificate(CertificateError::Expired | CertificateError::ExpiredContext { .. })) => {
            "the server's certificate has expired"
        }
        Session::Tls(Tls::InvalidMessage(_)) => {
            "the server does not speak TLS (its first bytes are not a TLS record): check the address and port"
        }
        Session::PeerAlert(116) => {
            "the server requires a client certificate (CertificateRequired): pass --cert FILE --key FILE"
        }
        _ => return None,
    };
    Some(format!("TLS handshake failed: {advice}"))
}
