//! What read leases cost besides lookups, measured on origins side by side: a write's latency (it
//! waits out the lease, overlapped with its database write) and the Redis calls an origin makes
//! for a filter it holds, while lookups come and at rest.

use crate::counters::Samples;
use crate::stats::quantile;
use bloomgate_tests::origin::TOKEN;
use std::time::{Duration, Instant};

/// Write latency over one run of writes.
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct WriteRun {
    /// Writes acknowledged.
    pub writes: usize,
    /// Median latency, ms.
    pub p50_ms: f64,
    /// 99th percentile latency, ms.
    pub p99_ms: f64,
    /// Of the writes, the share whose wait for the lease outlasted their database write (the
    /// origin's `write_lease_waits_total`).
    pub waited_share: f64,
}

/// `count` writes of fresh keys into `filter` at `base`, one at a time with `gap` between them
/// (so each is a write on an idle origin, as writes are rare next to lookups).
pub async fn write_run(
    http: &reqwest::Client,
    base: &str,
    filter: &str,
    count: usize,
    gap: Duration,
) -> anyhow::Result<WriteRun> {
    let before = Samples::scrape(http, base).await?;
    let mut latencies_ms = Vec::with_capacity(count);
    for _ in 0..count {
        let key = format!("{:032x}{:032x}", rand::random::<u128>(), rand::random::<u128>());
        let started = Instant::now();
        let r = http.put(format!("{base}/v1/filters/{filter}/keys/{key}")).bearer_auth(TOKEN).send().await?;
        let elapsed = started.elapsed();
        anyhow::ensure!(r.status().is_success(), "write to {base}: {}", r.status());
        latencies_ms.push(elapsed.as_secs_f64() * 1e3);
        tokio::time::sleep(gap).await;
    }
    let after = Samples::scrape(http, base).await?;
    latencies_ms.sort_by(f64::total_cmp);
    Ok(WriteRun {
        writes: count,
        p50_ms: quantile(&latencies_ms, 0.5),
        p99_ms: quantile(&latencies_ms, 0.99),
        waited_share: after.delta(&before, "bloomgate_write_lease_waits_total{outcome=\"waited\"}")
            / count.max(1) as f64,
    })
}

/// Redis calls per second the origin at `base` makes for its local copies (journal reads of
/// every kind) and direct filter reads over `window`, from its own counters: with no lookups
/// sent meanwhile, what holding its filters costs Redis at rest.
pub async fn redis_calls_per_sec(http: &reqwest::Client, base: &str, window: Duration) -> anyhow::Result<f64> {
    let calls = |s: &Samples| {
        s.get("bloomgate_local_copy_rounds_total{result=\"current\"}")
            + s.get("bloomgate_local_copy_rounds_total{result=\"failed\"}")
            + s.get("bloomgate_filter_reads_total{via=\"redis\"}")
    };
    let before = Samples::scrape(http, base).await?;
    tokio::time::sleep(window).await;
    let after = Samples::scrape(http, base).await?;
    Ok((calls(&after) - calls(&before)) / window.as_secs_f64())
}
