//! Keeps TCP_NOTSENT_LOWAT on every TCP connection of a session, joined and rejoined ones
//! included (the option is per socket and the session adds sockets over time).

use std::time::Duration;

use tcpls::Session;
use tracing::debug;

const CHECK_EVERY: Duration = Duration::from_millis(200);

/// Stops the keeper task when dropped (with the session's owner).
pub(crate) struct Keeper(tokio::task::JoinHandle<()>);

impl Drop for Keeper {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Starts the keeper; `None` leaves the kernel's default.
pub(crate) fn start(session: &Session, bytes: Option<u32>) -> Option<Keeper> {
    let bytes = bytes?;
    let session = session.clone();
    Some(Keeper(tokio::spawn(async move {
        let mut applied = Vec::new();
        loop {
            let now = session.usable_connections();
            if now != applied {
                match session.set_notsent_lowat(bytes) {
                    Ok(n) => debug!("TCP_NOTSENT_LOWAT {bytes} set on {n} connection(s)"),
                    Err(e) => {
                        debug!("TCP_NOTSENT_LOWAT not available: {e}");
                        return;
                    }
                }
                applied = now;
            }
            tokio::time::sleep(CHECK_EVERY).await;
        }
    })))
}
