//! Ctrl-C (SIGINT) for the commands that end cleanly on it: the handler is installed when
//! [`listen`] is called, before the command says it is ready, so that a Ctrl-C right after the
//! ready line is handled too (`tokio::signal::ctrl_c` installs it only when first polled).
//! `tcpls perf` also ends cleanly on SIGTERM ([`stop_watch`]), as a test harness or a service
//! manager stops a run.

use tokio::signal::unix::{signal, Signal, SignalKind};
use tokio::sync::watch;

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

/// The signal that asked a command to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stop {
    /// SIGINT (Ctrl-C).
    Interrupt,
    /// SIGTERM.
    Terminate,
}

impl Stop {
    /// The exit status after it: 128 + the signal's number, as shells report it.
    pub fn exit_status(self) -> u8 {
        match self {
            Self::Interrupt => 130,
            Self::Terminate => 143,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Interrupt => "SIGINT",
            Self::Terminate => "SIGTERM",
        }
    }
}

/// SIGINT and SIGTERM from now on: the first turns the watch to the signal (the command stops
/// and reports), a second one exits at once with that signal's status (the `--trace` file
/// written out first).
pub fn stop_watch(command: &'static str, what: &'static str) -> watch::Receiver<Option<Stop>> {
    let (tx, rx) = watch::channel(None);
    let mut int = listen();
    let mut term = Interrupt(signal(SignalKind::terminate()).ok());
    tokio::spawn(async move {
        let first = next_stop(&mut int, &mut term).await;
        let how = match first {
            Stop::Interrupt => "interrupted",
            Stop::Terminate => "terminated (SIGTERM)",
        };
        crate::logging::info(command, &format!("{how}: {what} (Ctrl-C again to quit at once)"));
        let _ = tx.send(Some(first));
        let second = next_stop(&mut int, &mut term).await;
        crate::exit_on_signal(second);
    });
    rx
}

async fn next_stop(int: &mut Interrupt, term: &mut Interrupt) -> Stop {
    tokio::select! {
        () = int.recv() => Stop::Interrupt,
        () = term.recv() => Stop::Terminate,
    }
}
