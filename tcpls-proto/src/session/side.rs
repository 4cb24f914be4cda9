//! Which end of the session we are.

/// Which end of the session we are: clients open connections and even-numbered streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    Client,
    Server,
}
