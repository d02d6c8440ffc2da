//! A promise a run's figures are held to, and what was measured against it: one row of the
//! report's checks table, and the runs' pass/fail.

use serde::Serialize;

/// A target the figures are held to, measured.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    /// What is promised.
    pub target: String,
    /// What was measured, in words and numbers.
    pub measured: String,
    /// Whether the promise held.
    pub met: bool,
}
