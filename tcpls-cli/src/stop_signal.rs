//! SIGINT (Ctrl-C) or SIGTERM (`kill`, `systemctl stop`) for a command that stops cleanly on
//! either: both handlers are installed when [`listen`] is called, before the command says it is
//! ready, so that a signal right after the ready line is handled too.

use tokio::signal::unix::{signal, Signal, SignalKind};

/// The signal that asked the command to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopSignal {
    Interrupt,
    Terminate,
}

impl StopSignal {
    /// The signal's name, for the log line.
    pub fn name(self) -> &'static str {
        match self {
            StopSignal::Interrupt => "SIGINT",
            StopSignal::Terminate => "SIGTERM",
        }
    }

    /// The exit status, 128 + the signal's number, as shells report a process it ended:
    /// 130 for SIGINT, 143 for SIGTERM.
    pub fn exit_status(self) -> u8 {
        match self {
            StopSignal::Interrupt => 130,
            StopSignal::Terminate => 143,
        }
    }
}

/// SIGINT and SIGTERM from now on.
pub struct StopSignals {
    interrupt: Option<Signal>,
    terminate: Option<Signal>,
}

/// Installs both handlers now (inside the tokio runtime).
pub fn listen() -> StopSignals {
    StopSignals { interrupt: signal(SignalKind::interrupt()).ok(), terminate: signal(SignalKind::terminate()).ok() }
}

async fn next(s: &mut Option<Signal>) {
    match s {
        Some(s) => {
            s.recv().await;
        }
        None => std::future::pending().await,
    }
}

impl StopSignals {
    /// The next SIGINT or SIGTERM (never, if neither handler could be installed).
    pub async fn recv(&mut self) -> StopSignal {
        tokio::select! {
            () = next(&mut self.interrupt) => StopSignal::Interrupt,
            () = next(&mut self.terminate) => StopSignal::Terminate,
        }
    }
}
