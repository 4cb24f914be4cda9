//! `tcpls connect --show-session`: the negotiated session as `openssl s_client` shows it
//! (protocol, TCPLS or fallback and why, cipher, ALPN, resumption, the server's certificate,
//! the connections).

use std::fmt::Write;
use std::time::Duration;

use rustls::pki_types::CertificateDer;
use tcpls::{ConnectOutcome, Session};

/// How the server's certificate was checked (for the report).
pub enum Trust<'a> {
    Insecure,
    Ca(&'a std::path::Path),
    SystemRoots,
}

/// The session block, one line each, for stderr.
pub fn describe(session: &Session, outcome: &ConnectOutcome, trust: Trust<'_>, handshake: Duration) -> String {
    let info = session.handshake_info();
    let cipher = info.as_ref().map_or("?".to_string(), |i| i.cipher_suite.clone());
    let version = if cipher.starts_with("TLS13_") { "TLS 1.3" } else { "TLS 1.2" };
    let mut out = String::from("---\n");
    let protocol = match outcome {
        ConnectOutcome::Tcpls => format!("TCPLS (tcpls/1) over {version}"),
        other => format!("plain {version}, TCPLS fallback: {other}"),
    };
    let _ = writeln!(out, "Protocol    : {protocol}");
    let _ = writeln!(out, "Cipher      : {cipher}");
    let alpn =
        info.as_ref().and_then(|i| i.alpn.clone()).map_or("none".into(), |a| String::from_utf8_lossy(&a).into_owned());
    let _ = writeln!(out, "ALPN        : {alpn}");
    let resumed = info.as_ref().is_some_and(|i| i.resumed);
    let early = info.as_ref().is_some_and(|i| i.early_data_accepted);
    let _ = writeln!(
        out,
        "Resumption  : {}, 0-RTT data {}",
        if resumed { "resumed from a session ticket" } else { "no (full handshake)" },
        if early { "accepted" } else { "not sent" }
    );
    let _ = writeln!(out, "Handshake   : {:.1} ms", handshake.as_secs_f64() * 1e3);
    let verified = match trust {
        Trust::Insecure => "NOT verified (--insecure)".to_string(),
        Trust::Ca(path) => format!("verified against --ca {}", path.display()),
        Trust::SystemRoots => "verified against the system's roots".to_string(),
    };
    let certificate = info.as_ref().and_then(|i| i.peer_certificates.first().cloned());
    match certificate {
        Some(der) => out.push_str(&certificate_lines(&der, &verified)),
        None if resumed => out.push_str("Server certificate: not sent again (resumed session)\n"),
        None => out.push_str("Server certificate: not seen\n"),
    }
    let conns = session.connections();
    let _ = writeln!(out, "Connections : {}", conns.len());
    for c in conns {
        let local = c.local.map_or("?".into(), |a| a.to_string());
        let remote = c.remote.map_or("?".into(), |a| a.to_string());
        let _ = writeln!(out, "  {}: {local} -> {remote}", c.id);
    }
    out.push_str("---");
    out
}

fn certificate_lines(der: &CertificateDer<'_>, verified: &str) -> String {
    use x509_parser::prelude::{FromDer, GeneralName, X509Certificate};
    let mut out = String::from("Server certificate:\n");
    let Ok((_, cert)) = X509Certificate::from_der(der.as_ref()) else {
        let _ = writeln!(out, "  (not parseable as X.509), {verified}");
        return out;
    };
    let _ = writeln!(out, "  subject   : {}", cert.subject());
    let _ = writeln!(out, "  issuer    : {}", cert.issuer());
    if let Ok(Some(san)) = cert.subject_alternative_name() {
        let names: Vec<String> = san
            .value
            .general_names
            .iter()
            .map(|n| match n {
                GeneralName::DNSName(d) => d.to_string(),
                GeneralName::IPAddress(ip) => match ip.len() {
                    4 => std::net::Ipv4Addr::new(ip[0], ip[1], ip[2], ip[3]).to_string(),
                    16 => {
                        <[u8; 16]>::try_from(*ip).map(|b| std::net::Ipv6Addr::from(b).to_string()).unwrap_or_default()
                    }
                    _ => format!("{ip:02x?}"),
                },
                other => other.to_string(),
            })
            .collect();
        let _ = writeln!(out, "  names     : {}", names.join(", "));
    }
    let validity = cert.validity();
    let _ = writeln!(out, "  valid     : from {} until {}", validity.not_before, validity.not_after);
    if let Some(left) = validity.time_to_expiration() {
        let _ = writeln!(out, "  expires in: {} days", left.whole_days());
    } else {
        let _ = writeln!(out, "  expires in: EXPIRED");
    }
    let _ = writeln!(out, "  trust     : {verified}");
    out
}
