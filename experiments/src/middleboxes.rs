//! `experiments middleboxes`: TCPLS through real middlebox software (paper §3.2, §5.2).

use crate::{Opts, Summary};

/// Runs every middlebox scenario and returns the report.
pub fn run(_opts: &Opts) -> Result<Summary, String> {
    Err("middleboxes: not implemented yet".into())
}
