//! tcpls_config_*: trust and identity.
// C entry points: `#[no_mangle]`, raw pointer arguments; the unsafe work is in raw.rs.
#![allow(unsafe_code)]

use std::ffi::{c_char, c_int};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use tcpls_bindings::{ConfigSpec, Error, ErrorKind, Result};

use crate::{guard, handles, raw, tcpls_config};

fn update(cfg: *mut tcpls_config, change: impl FnOnce(&mut ConfigSpec)) -> Result<()> {
    let config = handles::config(cfg)?;
    let mut spec =
        config.lock().map_err(|_| Error::new(ErrorKind::Internal, "the config lock was poisoned by a panic"))?;
    change(&mut spec);
    Ok(())
}

/// A new configuration: the system's CA roots, no client certificate. Free it with
/// tcpls_config_free (sessions made from it keep what they need). NULL only if the library
/// cannot work at all (see tcpls_last_error).
#[no_mangle]
pub extern "C" fn tcpls_config_new() -> *mut tcpls_config {
    let mut out = std::ptr::null_mut();
    guard::status("tcpls_config_new", || {
        out = handles::insert(handles::Object::Config(Arc::new(Mutex::new(ConfigSpec::default()))));
        Ok(())
    });
    out
}

/// Trusts the CA (or server certificate) in the PEM file `path` instead of the system's roots.
/// The file is read when a session is made.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn tcpls_config_set_ca_file(cfg: *mut tcpls_config, path: *const c_char) -> c_int {
    guard::status("tcpls_config_set_ca_file", || {
        // SAFETY: the caller's promise on `path` is this function's.
        let path = PathBuf::from(unsafe { raw::string(path, "path") }?);
        update(cfg, |spec| spec.ca_file = Some(path))
    })
}

/// Non-zero: accept any server certificate (signatures are still checked). For tests only.
#[no_mangle]
pub extern "C" fn tcpls_config_set_insecure(cfg: *mut tcpls_config, insecure: c_int) -> c_int {
    guard::status("tcpls_config_set_insecure", || update(cfg, |spec| spec.insecure = insecure != 0))
}

/// The certificate chain and private key (PEM files): a server's identity (required by
/// tcpls_listen), or a client certificate for servers that ask for one.
///
/// # Safety
/// `cert_path` and `key_path` are NULL or NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn tcpls_config_set_certificate(
    cfg: *mut tcpls_config,
    cert_path: *const c_char,
    key_path: *const c_char,
) -> c_int {
    guard::status("tcpls_config_set_certificate", || {
        // SAFETY: the caller's promise on both strings is this function's.
        let cert = PathBuf::from(unsafe { raw::string(cert_path, "cert_path") }?);
        // SAFETY: as above.
        let key = PathBuf::from(unsafe { raw::string(key_path, "key_path") }?);
        update(cfg, |spec| {
            spec.cert_file = Some(cert);
            spec.key_file = Some(key);
        })
    })
}

/// Frees a configuration. Sessions and listeners made from it are not affected.
#[no_mangle]
pub extern "C" fn tcpls_config_free(cfg: *mut tcpls_config) -> c_int {
    guard::status("tcpls_config_free", || handles::remove_config(cfg).map(drop))
}

/// The configuration behind a handle, as it is now.
pub(crate) fn spec(cfg: *const tcpls_config) -> Result<ConfigSpec> {
    let config = handles::config(cfg)?;
    let spec = config.lock().map_err(|_| Error::new(ErrorKind::Internal, "the config lock was poisoned by a panic"))?;
    Ok(spec.clone())
}
