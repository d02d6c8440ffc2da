//! Writes: keys acknowledged, writes refused at the filter or failed at the database, writes
//! held until a rebuild named a generation that could take them, and how long the database
//! took to store a write's keys (a series of its own: the stores' latency series times reads).

use super::{latency_histogram, row, Row};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;

/// The writes' metrics.
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
    /// How long the database took to store a write's keys (all of a request's, together).
    pub database_seconds: Histogram,
}

impl Default for WriteMetrics {
    fn default() -> WriteMetrics {
        WriteMetrics {
            written: Counter::default(),
            filter_failures: Counter::default(),
            database_failures: Counter::default(),
            recovery_waits: Counter::default(),
            database_seconds: latency_histogram(),
        }
    }
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
            row(
                "write_database_seconds",
                "Latency of a write's database writes (all of a request's keys together), seconds.",
                &self.database_seconds,
            ),
        ]
    }
}
