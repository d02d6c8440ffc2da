//! One rebuild per filter at a time: a lease with expiry in the filter store, taken before a
//! rebuild starts, renewed in the background while it runs, released when it ends. A rebuild
//! whose renewal fails stops before its switch (`lost`).

use super::RebuildError;
use crate::store::LifecycleStore;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Takes `filter`'s lease for a new owner; the owner, or `Busy` if another holds it.
pub(super) async fn take(filters: &dyn LifecycleStore, filter: &str, ttl: Duration) -> Result<String, RebuildError> {
    let owner = format!("{:016x}", rand::random::<u64>());
    match filters.lease(filter, &owner, ttl).await? {
        true => Ok(owner),
        false => Err(RebuildError::Busy),
    }
}

/// A background task that ends when its handle is dropped: the lease renewer must die with the
/// rebuild, however the rebuild ends (a rebuild future dropped mid-way must not leave a renewer
/// holding the lease forever).
pub(super) struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Renews the lease in the background until dropped; sets `lost` if it cannot.
pub(super) fn keep(
    filters: Arc<dyn LifecycleStore>,
    filter: &str,
    owner: &str,
    ttl: Duration,
    lost: &Arc<AtomicBool>,
) -> AbortOnDrop {
    let (filter, owner, lost) = (filter.to_owned(), owner.to_owned(), lost.clone());
    AbortOnDrop(tokio::spawn(async move {
        loop {
            tokio::time::sleep(ttl / 3).await;
            if !matches!(filters.lease(&filter, &owner, ttl).await, Ok(true)) {
                lost.store(true, Ordering::SeqCst);
                return;
            }
        }
    }))
}
