//! Writes: keys acknowledged, writes refused at the filter or failed at the database, and
//! writes held until a rebuild named a generation that could take them.

use super::{row, Row};
use prometheus_client::metrics::counter::Counter;

/// The writes' metrics.
#[derive(Default)]
pub struct WriteMetrics {
    /// Keys written (acknowledged).
    pub written: Counter,
    /// Writes refused because the filter could not record the key.
    pub filter_failures: Counter,
    /// Writes failed at the database after the filter add.
    pub database_failures: Counter,
    /// Writes that found the filter's bits lost and waited for a rebuild to name a generation
    /// (see `Gate::insert_many`), acknowledged in the end or not.
    pub recovery_waits: Counter,
}

impl WriteMetrics {
    pub(super) fn rows(&self) -> Vec<Row> {
        vec![
            row("writes", "Keys written and acknowledged.", &self.written),
            row("write_filter_failures", "Writes refused because the filter add failed.", &self.filter_failures),
            row(
                "write_database_failures",
                "Writes failed at the database after the filter add.",
                &self.database_failures,
            ),
            row(
                "write_recovery_waits",
                "Writes that found the filter's bits lost and waited for a rebuild to name a generation.",
                &self.recovery_waits,
            ),
        ]
    }
}
