//! A filter's state as Redis holds it (its meta key), read by lookups under the lookup timeout
//! and by writes, rebuilds and drops under the write timeout (they wait differently long), and
//! stamped with the incarnation of the process it was read from.

use super::keys::meta_key;
use super::RedisFilterStore;
use crate::store::{decode_state, FilterState, FilterUnavailable, StateStore, StoreResult};
use async_trait::async_trait;
use redis::AsyncCommands;
use std::time::Duration;

impl RedisFilterStore {
    /// Reads a filter's state from its meta key under `limit` (lookups and writes wait differently long).
    pub(super) async fn read_state(&self, filter: &str, limit: Duration) -> StoreResult<FilterState> {
        let key = meta_key(filter);
        let (json, incarnation): (Option<String>, u64) =
            self.call_at(limit, None, |mut c| async move { c.get(key).await }).await?;
        let json = json.ok_or(FilterUnavailable::MetaMissing)?;
        let mut state = decode_state(&json)?;
        state.read_from = incarnation;
        Ok(state)
    }
}

#[async_trait]
impl StateStore for RedisFilterStore {
    async fn state(&self, filter: &str) -> StoreResult<FilterState> {
        let filter = filter.to_owned();
        self.read_state(&filter, self.timeout).await
    }

    async fn state_for_write(&self, filter: &str) -> StoreResult<FilterState> {
        let filter = filter.to_owned();
        self.read_state(&filter, self.write_timeout).await
    }
}
