//! Ctrl-C (SIGINT) for the commands that end cleanly on it: the handler is installed when
//! [`listen`] is called, before the command says it is ready, so that a Ctrl-C right after the
//! ready line is handled too (`tokio::signal::ctrl_c` installs it only when first polled).

use tokio::signal::unix::{signal, Signal, SignalKind};

/// Ctrl-C presses from now on.
pub struct Interrupt(Option<Signal>);

/// Installs the SIGINT handler now (inside the tokio runtime).
pub fn listen() -> Interrupt {
    Interrupt(signal(SignalKind::interrupt()).ok())
}

impl Interrupt {
    /// The next Ctrl-C (never, if the handler could not be installed).
    pub async fn recv(&mut self) {
        match &mut self.0 {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending().await,
        }
    }
}
