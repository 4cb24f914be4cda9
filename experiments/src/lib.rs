//! The seed papers' experiments, reproduced in the `tcpls-netem` namespace test bed, and the
//! middlebox traversal report. Each experiment writes `DIR/NAME.csv` (time series),
//! `DIR/NAME.png` (plot) and `DIR/NAME.json` (summary); see docs/EXPERIMENTS.md.

pub mod middleboxes;

use std::path::PathBuf;

/// Options shared by every experiment.
#[derive(Debug, Clone)]
pub struct Opts {
    /// Shortened run (well under a minute) for CI and quick checks.
    pub quick: bool,
    /// Output directory (created if missing).
    pub out: PathBuf,
}

/// What an experiment returns: its JSON summary (also written to `DIR/NAME.json`).
pub type Summary = serde_json::Value;
