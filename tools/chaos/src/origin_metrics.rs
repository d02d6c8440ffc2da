//! What the origins' `/metrics` say over a run: every origin is read once a second, and each
//! counter the floors need is summed over the origin's lives (a `kill -9`ed origin starts its
//! counters again from zero; what it counted since its last sample is lost, so the sums are
//! lower bounds). Also asked directly: whether an origin holds a local copy now.

use crate::cluster::Cluster;
use crate::history::{OriginCounters, Recorder};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The sum of the samples of metric `name` whose labels include every one of `labels` (the
/// OpenMetrics text of `/metrics`); None if no line matches.
pub fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut sum = None;
    for line in text.lines() {
        let Some(rest) = line.strip_prefix(name) else { continue };
        let (label_text, value) = match rest.strip_prefix('{') {
            Some(rest) => match rest.split_once("} ") {
                Some((labels, value)) => (labels, value),
                None => continue,
            },
            None => match rest.strip_prefix(' ') {
                Some(value) => ("", value),
                None => continue,
            },
        };
        let has = |(k, v): &(&str, &str)| label_text.split(',').any(|pair| pair == format!("{k}=\"{v}\""));
        if labels.iter().all(has) {
            if let Ok(value) = value.split_whitespace().next().unwrap_or("").parse::<f64>() {
                *sum.get_or_insert(0.0) += value;
            }
        }
    }
    sum
}

/// A counter summed over the lives of the process it is read from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Lives {
    /// What earlier lives counted.
    before: u64,
    /// The last value read in this life.
    last: u64,
}

impl Lives {
    /// Takes a value read now: lower than the last one read means a new life.
    pub fn read(&mut self, value: u64) {
        if value < self.last {
            self.before += self.last;
        }
        self.last = value;
    }

    /// The sum over every life.
    pub fn total(&self) -> u64 {
        self.before + self.last
    }
}

/// Route of the journal endpoint, as the origin labels its requests.
const JOURNAL_ROUTE: &str = "/v1/filters/{filter}/journal/{generation}";

/// One origin's counters as the floors need them, over its lives.
#[derive(Clone, Copy, Debug, Default)]
struct OriginLives {
    copy_answered: Lives,
    lease_answered: Lives,
    journal_gone: Lives,
    recovered_from_checkpoint: Lives,
    samples: u64,
}

impl OriginLives {
    fn read(&mut self, text: &str) {
        let count = |name, labels: &[(&str, &str)]| metric(text, name, labels).unwrap_or(0.0) as u64;
        self.copy_answered.read(count("bloomgate_local_copy_lookups_total", &[("outcome", "answered")]));
        self.lease_answered.read(count("bloomgate_filter_reads_total", &[("via", "lease")]));
        self.journal_gone.read(count("bloomgate_http_requests_total", &[("route", JOURNAL_ROUTE), ("status", "410")]));
        self.recovered_from_checkpoint.read(count("bloomgate_recoveries_total", &[("source", "checkpoint")]));
        self.samples += 1;
    }

    fn counters(&self) -> OriginCounters {
        OriginCounters {
            copy_answered: self.copy_answered.total(),
            lease_answered: self.lease_answered.total(),
            journal_gone: self.journal_gone.total(),
            recovered_from_checkpoint: self.recovered_from_checkpoint.total(),
            copy_resets: 0,
            samples: self.samples,
        }
    }
}

/// `/metrics` of origin `index`, if it answers.
pub async fn read(http: &reqwest::Client, base: &str) -> Option<String> {
    let r = http.get(format!("{base}/metrics")).timeout(Duration::from_secs(2)).send().await.ok()?;
    if !r.status().is_success() {
        return None;
    }
    r.text().await.ok()
}

/// Whether any running origin holds a local copy now (`bloomgate_local_copy_bytes` above 0).
pub async fn any_copy_held(cluster: &Cluster, http: &reqwest::Client) -> bool {
    for origin in cluster.origins.iter().filter(|o| o.pid().is_some()) {
        if let Some(text) = read(http, &origin.base).await {
            if metric(&text, "bloomgate_local_copy_bytes", &[]).is_some_and(|bytes| bytes > 0.0) {
                return true;
            }
        }
    }
    false
}

/// Reads every running origin's `/metrics` once a second and records its counters.
pub async fn sample_metrics(cluster: Arc<Cluster>, rec: Arc<Recorder>, http: reqwest::Client) {
    let mut lives: BTreeMap<u8, OriginLives> = BTreeMap::new();
    loop {
        for origin in cluster.origins.iter().filter(|o| o.pid().is_some()) {
            if let Some(text) = read(&http, &origin.base).await {
                let of = lives.entry(origin.index).or_default();
                of.read(&text);
                rec.origin_counters(origin.index, of.counters());
            }
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "# HELP bloomgate_local_copy_lookups Lookups offered.\n\
        # TYPE bloomgate_local_copy_lookups counter\n\
        bloomgate_local_copy_lookups_total{outcome=\"answered\"} 120\n\
        bloomgate_local_copy_lookups_total{outcome=\"stale\"} 3\n\
        bloomgate_http_requests_total{method=\"GET\",route=\"/v1/filters/{filter}/journal/{generation}\",status=\"410\"} 2\n\
        bloomgate_http_requests_total{method=\"GET\",route=\"/v1/filters/{filter}/journal/{generation}\",status=\"200\"} 9\n\
        bloomgate_local_copy_bytes 65536\n\
        bloomgate_local_copy_bytes_other 1\n";

    #[test]
    fn samples_are_read_by_name_and_labels() {
        assert_eq!(metric(TEXT, "bloomgate_local_copy_lookups_total", &[("outcome", "answered")]), Some(120.0));
        assert_eq!(metric(TEXT, "bloomgate_local_copy_lookups_total", &[]), Some(123.0), "summed");
        let gone = [("route", JOURNAL_ROUTE), ("status", "410")];
        assert_eq!(metric(TEXT, "bloomgate_http_requests_total", &gone), Some(2.0));
        assert_eq!(metric(TEXT, "bloomgate_local_copy_bytes", &[]), Some(65536.0), "not the longer name");
        assert_eq!(metric(TEXT, "bloomgate_local_copy_lookups_total", &[("outcome", "not_held")]), None);
    }

    #[test]
    fn a_counter_that_goes_down_started_a_new_life() {
        let mut c = Lives::default();
        for v in [5, 9, 2, 4, 4, 0, 1] {
            c.read(v);
        }
        assert_eq!(c.total(), 9 + 4 + 1);
    }
}
