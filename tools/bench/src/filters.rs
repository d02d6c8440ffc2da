//! The filters a run measures: created on an origin and preloaded with its present keys through
//! the batch API, and their stats read back for the report.

use bloomgate_client::{Client, RetryPolicy};
use bloomgate_tests::origin::TOKEN;
use indicatif::{ProgressBar, ProgressStyle};
use std::sync::Arc;
use std::time::Duration;

/// A filter to create.
#[derive(Clone, Debug)]
pub struct FilterSpec<'a> {
    /// Its name.
    pub name: &'a str,
    /// Target false-positive rate at capacity.
    pub fp_rate: f64,
    /// Keys it is sized for.
    pub capacity: u64,
    /// Segment size; `None` = the origin's default.
    pub segment_bytes: Option<u64>,
}

/// A writer's client of the origin at `base` for a run's set-up: a minute per request (a batch
/// of 1000 keys behind a loaded Cassandra), and writes refused with 503 while Redis or
/// Cassandra hiccup (a filter-state read timing out behind other batches' Redis scripts, see
/// BENCHMARKS.md) tried again, at least as long as the origin asks.
fn setup_client(base: &str) -> anyhow::Result<Client> {
    let retries = RetryPolicy::default()
        .attempts(31)
        .backoff(Duration::from_millis(200), Duration::from_secs(2))
        .total_wait(Duration::from_secs(120));
    Ok(Client::builder(base).token(TOKEN).timeout(Duration::from_secs(60)).build()?.with_retries(retries))
}

/// Drops `filter` and deletes its keys: a run leaves its keyspace as it found it, so the next
/// run's origins do not list, check and recover the filters of every run before.
///
/// A drop that deletes many keys answers 503 while they go and is retried; a retry that finds
/// the filter gone (404) found the drop done.
pub async fn drop_with_keys(base: &str, filter: &str) -> anyhow::Result<()> {
    match setup_client(base)?.drop_filter(filter, bloomgate_client::api::DropKeys::Delete).await {
        Ok(_) => Ok(()),
        Err(e) if e.status() == Some(404) => Ok(()),
        Err(e) => Err(anyhow::anyhow!("drop filter {filter}: {e}")),
    }
}

/// Creates the filter and stores `keys` through the origin's batch API, four batches at a time.
pub async fn preload(base: &str, spec: &FilterSpec<'_>, keys: &Arc<Vec<String>>, progress: bool) -> anyhow::Result<()> {
    let filter = spec.name;
    let client = setup_client(base)?;
    let mut create = bloomgate_client::api::CreateFilter::new(spec.capacity.max(1), spec.fp_rate);
    if let Some(b) = spec.segment_bytes {
        create.segment_bytes = b;
    }
    client.create_filter(filter, &create).await.map_err(|e| anyhow::anyhow!("create filter {filter}: {e}"))?;
    let bar = if progress {
        let bar = ProgressBar::new(keys.len() as u64);
        bar.set_style(
            ProgressStyle::with_template("{prefix:>28} [{bar:30}] {pos}/{len} keys {per_sec}")
                .expect("template")
                .progress_chars("=> "),
        );
        bar.set_prefix(format!("preload {filter}"));
        bar
    } else {
        ProgressBar::hidden()
    };
    let mut tasks = tokio::task::JoinSet::new();
    let chunks = keys.len().div_ceil(1000);
    for c in 0..chunks {
        if tasks.len() >= 4 {
            tasks.join_next().await.expect("a task")??;
        }
        let (client, keys, bar, filter) = (client.clone(), keys.clone(), bar.clone(), filter.to_owned());
        tasks.spawn(async move {
            let chunk = &keys[c * 1000..((c + 1) * 1000).min(keys.len())];
            client.insert_batch(&filter, chunk).await.map_err(|e| anyhow::anyhow!("insert batch: {e}"))?;
            bar.inc(chunk.len() as u64);
            anyhow::Ok(())
        });
    }
    while let Some(r) = tasks.join_next().await {
        r??;
    }
    bar.finish();
    Ok(())
}

/// The origin's stats of a filter (null when they cannot be read).
pub async fn filter_stats(base: &str, filter: &str) -> serde_json::Value {
    let Ok(client) = setup_client(base) else { return serde_json::Value::Null };
    match client.stats(filter).await {
        Ok(stats) => serde_json::to_value(stats).unwrap_or_default(),
        Err(_) => serde_json::Value::Null,
    }
}
