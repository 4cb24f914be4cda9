//! The keys of a farm (docs/TUNNEL.md, "Farm"): `--ticket-keys FILE` (`tunnel server`,
//! `serve`), session tickets that every node resumes, from a key file shared by the nodes and
//! re-read on SIGHUP (docs/RESUMPTION.md, "Farm tickets"); and `--farm-route-key FILE`, the key
//! of the join route labels the balancer reads.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tcpls::proto::{FarmTicketer, TicketKeys};

/// How long a farm ticket resumes: long enough for a client that reconnects after a day's
/// sleep, short enough that a rotation (keys drop out of the file) bounds a leaked key's reach.
pub const TICKET_LIFETIME: Duration = Duration::from_secs(24 * 3600);

/// Largest key file read (16 keys of 65 characters, plus comments).
const MAX_FILE: u64 = 64 * 1024;

/// Reads and checks a key file; the error names the file and says how to make a good one.
pub fn load(path: &Path) -> Result<TicketKeys, String> {
    let shown = path.display();
    let meta = std::fs::metadata(path).map_err(|e| format!("--ticket-keys {shown}: {e}"))?;
    if meta.len() > MAX_FILE {
        return Err(format!("--ticket-keys {shown}: {} bytes, more than a key file should be", meta.len()));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("--ticket-keys {shown}: {e}"))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if meta.permissions().mode() & 0o077 != 0 {
            crate::logging::warn(
                "ticket keys",
                &format!("{shown} is readable by other users: anyone with these keys can decrypt recorded sessions' tickets (chmod 600 it)"),
            );
        }
    }
    TicketKeys::parse(&text).map_err(|e| format!("--ticket-keys {shown}: {e}"))
}

/// Reads a farm route key file (`--farm-route-key`).
pub fn load_route_key(path: &Path) -> Result<tcpls::proto::farm_route::RouteKey, String> {
    let shown = path.display();
    let meta = std::fs::metadata(path).map_err(|e| format!("--farm-route-key {shown}: {e}"))?;
    if meta.len() > MAX_FILE {
        return Err(format!("--farm-route-key {shown}: {} bytes, more than a key file should be", meta.len()));
    }
    let text = std::fs::read_to_string(path).map_err(|e| format!("--farm-route-key {shown}: {e}"))?;
    tcpls::proto::farm_route::RouteKey::parse(&text).map_err(|e| format!("--farm-route-key {shown}: {e}"))
}

/// Makes `tls` issue and resume farm tickets from the file. rustls then refuses early data
/// (stateless tickets could replay it on any node), so 0-RTT is off.
pub fn install(tls: &mut rustls::ServerConfig, path: &Path) -> Result<Arc<FarmTicketer>, String> {
    let keys = load(path)?;
    let ticketer = Arc::new(FarmTicketer::new(keys, TICKET_LIFETIME));
    tls.ticketer = ticketer.clone();
    if tls.max_early_data_size > 0 {
        crate::logging::info("ticket keys", "0-RTT is off with --ticket-keys: farm tickets resume in one round trip");
        tls.max_early_data_size = 0;
    }
    Ok(ticketer)
}

/// Re-reads the key file into `ticketer`; a bad file changes nothing.
pub fn reload(ticketer: &FarmTicketer, path: &Path) -> Result<String, String> {
    let keys = load(path)?;
    let (n, id) = (keys.len(), keys.current_id());
    ticketer.replace(keys);
    Ok(format!("ticket keys re-read: {n} key(s), current key id {id}, generation {}", ticketer.generation()))
}

/// `serve`: re-reads the key file on each SIGHUP.
pub fn reload_on_sighup(ticketer: Arc<FarmTicketer>, path: std::path::PathBuf) -> Result<(), String> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut hup = signal(SignalKind::hangup()).map_err(|e| format!("cannot watch SIGHUP: {e}"))?;
        tokio::spawn(async move {
            while hup.recv().await.is_some() {
                match reload(&ticketer, &path) {
                    Ok(msg) => crate::logging::info("serve", &msg),
                    Err(e) => crate::logging::warn("serve", &format!("reload failed, keys unchanged: {e}")),
                }
            }
        });
    }
    #[cfg(not(unix))]
    let _ = (ticketer, path);
    Ok(())
}
