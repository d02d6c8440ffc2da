//! The one door to a rebuild, and what the recovery check and the probes ask of the stores. A
//! rebuild is started here, and only here: the definition read fresh, the sizing checked as the
//! rebuild will check it (so an impossible one is refused at once, not in the background), the
//! lease taken, and the filter's build counted for its stats. The routes, the recovery check
//! and the command line call it; none of them holds a store.

use super::Gate;
use crate::rebuild::{self, HelpedRun, RebuildError, RebuildOptions, RebuildReport};
use crate::store::{DatabaseError, FilterDef, FilterUnavailable};
use std::time::Duration;

/// A rebuild running in the background: its report when it ends.
pub type RebuildTask = tokio::task::JoinHandle<Result<RebuildReport, RebuildError>>;

impl Gate {
    /// Starts a rebuild of filter `name` with `options`, in the background; `Busy` when another
    /// (on any origin) holds the filter's rebuild lease.
    pub async fn start_rebuild(&self, name: &str, options: RebuildOptions) -> Result<RebuildTask, RebuildError> {
        if let crate::cluster_version::Standing::Behind { found, known } = self.cluster.standing() {
            return Err(RebuildError::ClusterAhead { found, known });
        }
        let def = self.database.filter(name).await?.ok_or_else(|| RebuildError::UnknownFilter(name.into()))?;
        rebuild::sized(&def, &options, 0)?;
        let task = rebuild::start(self.store.whole.clone(), self.database.clone(), name.to_owned(), options).await?;
        self.metrics.filters.counters(name).mark_build();
        Ok(task)
    }

    /// Builds one run of a rebuild of filter `name` that another process started and posted
    /// runs for, if one is left that this origin's rebuild memory (`options`) can hold; the
    /// run, or None (see `rebuild::help`). An origin behind the cluster does not help.
    pub async fn help_rebuild(&self, name: &str, options: &RebuildOptions) -> Result<Option<HelpedRun>, RebuildError> {
        if let crate::cluster_version::Standing::Behind { found, known } = self.cluster.standing() {
            return Err(RebuildError::ClusterAhead { found, known });
        }
        let helped = rebuild::help(self.store.whole.as_ref(), self.database.as_ref(), name, options).await?;
        if helped.is_some() {
            self.metrics.rebuilds.runs_helped.inc();
        }
        Ok(helped)
    }

    /// Retires a `previous` generation whose rebuild died before retiring it, under the
    /// filter's rebuild lease (held for at most `lease_ttl`); whether there was one.
    pub async fn retire_overdue_previous(&self, name: &str, lease_ttl: Duration) -> Result<bool, RebuildError> {
        rebuild::retire_overdue_previous(self.store.whole.clone(), name, lease_ttl).await
    }

    /// Every filter's definition, read fresh from the database (for the recovery check).
    pub async fn filter_defs(&self) -> Result<Vec<FilterDef>, DatabaseError> {
        self.database.filters().await
    }

    /// Whether the database answers now.
    pub async fn database_ping(&self) -> Result<(), DatabaseError> {
        self.database.ping().await
    }

    /// Whether the filter store answers now.
    pub async fn filter_store_ping(&self) -> Result<(), FilterUnavailable> {
        self.store.whole.ping().await
    }
}
