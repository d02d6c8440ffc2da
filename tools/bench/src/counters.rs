//! The services' own counters, read around each run: the origin's Prometheus samples,
//! Cassandra's coordinator read count (`system_views.coordinator_read_latency`) and Redis's
//! per-command counts (`INFO commandstats`). The CPU time of the processes is in [`crate::cpu`].

use std::collections::{BTreeMap, HashMap};

/// Every sample of one `/metrics` scrape, keyed by `name{labels}`.
#[derive(Clone, Debug, Default)]
pub struct Samples(pub HashMap<String, f64>);

impl Samples {
    /// Scrapes `base/metrics`.
    pub async fn scrape(http: &reqwest::Client, base: &str) -> anyhow::Result<Samples> {
        let text = http.get(format!("{base}/metrics")).send().await?.error_for_status()?.text().await?;
        Ok(Samples::parse(&text))
    }

    /// Parses the text exposition format (comments skipped).
    pub fn parse(text: &str) -> Samples {
        Samples(
            text.lines()
                .filter(|l| !l.starts_with('#'))
                .filter_map(|l| {
                    let (name, value) = l.rsplit_once(' ')?;
                    Some((name.to_owned(), value.parse().ok()?))
                })
                .collect(),
        )
    }

    /// A sample's value, 0 when absent.
    pub fn get(&self, sample: &str) -> f64 {
        self.0.get(sample).copied().unwrap_or(0.0)
    }

    /// `self[sample] - before[sample]`.
    pub fn delta(&self, before: &Samples, sample: &str) -> f64 {
        self.get(sample) - before.get(sample)
    }
}

/// Cassandra's coordinator read count for one table, when the virtual table answers.
pub struct CassandraReads {
    session: scylla::client::session::Session,
    keyspace: String,
}

impl CassandraReads {
    /// Connects; `None` (with the reason printed) when Cassandra cannot be asked.
    pub async fn connect(addr: &str, keyspace: &str) -> Option<CassandraReads> {
        let session = scylla::client::session_builder::SessionBuilder::new()
            .known_node(addr)
            .build()
            .await
            .map_err(|e| eprintln!("cassandra cross-check off: {e}"))
            .ok()?;
        let c = CassandraReads { session, keyspace: keyspace.to_owned() };
        c.count().await.map(|_| c)
    }

    /// Reads coordinated for `<keyspace>.keys` since Cassandra started.
    pub async fn count(&self) -> Option<u64> {
        let result = self
            .session
            .query_unpaged(
                "SELECT count FROM system_views.coordinator_read_latency \
                 WHERE keyspace_name = ? AND table_name = ?",
                (self.keyspace.as_str(), "keys"),
            )
            .await
            .map_err(|e| eprintln!("cassandra cross-check: {e}"))
            .ok()?;
        let rows = result.into_rows_result().ok()?;
        let row: Option<(i64,)> = rows.maybe_first_row().ok()?;
        // No row yet = no reads yet.
        Some(row.map_or(0, |(n,)| n as u64))
    }
}

/// Redis's calls and microseconds per command since it started (`INFO commandstats`). Commands
/// a script runs count under their own names too, and the script's time includes theirs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RedisCommands(pub BTreeMap<String, (u64, u64)>);

impl RedisCommands {
    /// Asks the Redis at `url`; None (with the reason printed) when it cannot be asked.
    pub async fn read(url: &str) -> Option<RedisCommands> {
        let text: Result<String, redis::RedisError> = async {
            let mut c = redis::Client::open(url)?.get_multiplexed_async_connection().await?;
            redis::cmd("INFO").arg("commandstats").query_async(&mut c).await
        }
        .await;
        text.map(|t| RedisCommands::parse(&t)).map_err(|e| eprintln!("redis commandstats: {e}")).ok()
    }

    /// Parses `cmdstat_<name>:calls=N,usec=N,...` lines.
    pub fn parse(text: &str) -> RedisCommands {
        RedisCommands(
            text.lines()
                .filter_map(|l| {
                    let (name, fields) = l.trim().strip_prefix("cmdstat_")?.split_once(':')?;
                    let field = |f: &str| {
                        fields.split(',').find_map(|kv| kv.strip_prefix(f)?.strip_prefix('=')?.parse::<u64>().ok())
                    };
                    Some((name.to_owned(), (field("calls")?, field("usec")?)))
                })
                .collect(),
        )
    }

    /// Calls and microseconds per command since `before`, for the commands that ran (the
    /// `INFO` that reads them left out).
    pub fn since(&self, before: &RedisCommands) -> BTreeMap<String, (u64, u64)> {
        self.0
            .iter()
            .filter(|(name, _)| *name != "info")
            .filter_map(|(name, (calls, usec))| {
                let (c0, u0) = before.0.get(name).copied().unwrap_or_default();
                let d = (calls.saturating_sub(c0), usec.saturating_sub(u0));
                (d.0 > 0).then(|| (name.clone(), d))
            })
            .collect()
    }
}

/// The false-positive rate the origin counted between two scrapes: of the absent keys its
/// filter was asked about, the share it did not stop.
pub fn fp_from_origin(before: &Samples, after: &Samples, filter: &str) -> Option<f64> {
    let neg = after.delta(before, &format!("bloomgate_filter_negatives_total{{filter=\"{filter}\"}}"));
    let fp = after.delta(before, &format!("bloomgate_false_positives_total{{filter=\"{filter}\"}}"));
    (neg + fp > 0.0).then(|| fp / (neg + fp))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_samples_with_labels() {
        let s = Samples::parse(
            "# HELP x y\nbloomgate_lookups_total{answered_by=\"filter\"} 12\nbloomgate_database_reads_total 3\n",
        );
        assert_eq!(s.get("bloomgate_lookups_total{answered_by=\"filter\"}"), 12.0);
        assert_eq!(s.get("bloomgate_database_reads_total"), 3.0);
        assert_eq!(s.get("missing"), 0.0);
    }

    #[test]
    fn parses_redis_commandstats() {
        let before = RedisCommands::parse("# Commandstats\r\ncmdstat_get:calls=10,usec=30,usec_per_call=3.00\r\n");
        let after = RedisCommands::parse(
            "# Commandstats\r\ncmdstat_get:calls=12,usec=36,usec_per_call=3.00,rejected_calls=0\r\n\
             cmdstat_xinfo|stream:calls=1,usec=30,usec_per_call=30.00\r\ncmdstat_info:calls=3,usec=9\r\n",
        );
        let d = after.since(&before);
        assert_eq!(d.get("get"), Some(&(2, 6)));
        assert_eq!(d.get("xinfo|stream"), Some(&(1, 30)));
        assert_eq!(d.len(), 2, "{d:?}");
    }
}
