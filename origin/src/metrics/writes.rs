//! WriteMetrics: keys acknowledged, and writes refused at the filter or failed at the database.

use super::{row, Row};
use prometheus_client::metrics::counter::Counter;

/// The writes' metrics.
#[derive(Default)]
pub struct WriteMetrics {
    /// Keys written (acknowledged).
    pub written: Counter,
    /// WriteMetrics refused because the filter could not record the key.
    pub filter_failures: Counter,
    /// WriteMetrics failed at the database after the filter add.
    pub database_failures: Counter,
}

impl WriteMetrics {
    pub(super) fn rows(&self) -> Vec<Row> {
        vec![
            row("writes", "Keys written and acknowledged.", &self.written),
            row("write_filter_failures", "WriteMetrics refused because the filter add failed.", &self.filter_failures),
            row(
                "write_database_failures",
                "WriteMetrics failed at the database after the filter add.",
                &self.database_failures,
            ),
        ]
    }
}
