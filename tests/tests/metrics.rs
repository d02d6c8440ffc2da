//! `/metrics` as an operator scrapes it, from an origin on real Redis and Cassandra: the
//! OpenMetrics content type, every request counted by route and status, every lookup (single
//! and batch) counted by who answered, store latency, the filter's gauges set by the recovery
//! check; and the dashboard and alert rules in `deploy/` name only metrics that are exposed.

use bloomgate_tests::origin::TestOrigin;
use bloomgate_tests::{random_keys, unique_filter};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// A sample's value, by its exact name and labels as exposed.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

/// Metric family names exposed (`# TYPE name kind`), with the sample suffixes they imply.
fn exposed_names(text: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else { continue };
        let mut parts = rest.split_whitespace();
        let (Some(name), Some(kind)) = (parts.next(), parts.next()) else { continue };
        let suffixes: &[&str] = match kind {
            "counter" => &["_total"],
            "histogram" => &["_bucket", "_count", "_sum"],
            "info" => &["_info"],
            _ => &[""],
        };
        names.extend(suffixes.iter().map(|s| format!("{name}{s}")));
    }
    names
}

/// Every `bloomgate_…` name in a file (dashboard queries, alert expressions, recording rules
/// aside: names with a colon are recorded, not exposed).
fn names_used(text: &str) -> BTreeSet<String> {
    let mut used = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(at) = text[i..].find("bloomgate_") {
        let start = i + at;
        let mut end = start;
        while end < bytes.len() && (bytes[end].is_ascii_alphanumeric() || bytes[end] == b'_' || bytes[end] == b':') {
            end += 1;
        }
        let name = &text[start..end];
        let preceded_by_colon = start > 0 && bytes[start - 1] == b':';
        // `bloomgate_*` in prose names the prefix, not a metric.
        if !name.contains(':') && !preceded_by_colon && !name.ends_with('_') {
            used.insert(name.to_owned());
        }
        i = end;
    }
    used
}

#[tokio::test]
async fn an_operator_sees_requests_lookups_stores_and_the_filter_s_health() {
    let origin = TestOrigin::on_services(|c| {
        // Its own keyspace: the recovery check acts on every filter it can see.
        c.cassandra_keyspace = "bloomgate_metrics_test".into();
        c.recovery_interval_ms = 200;
    })
    .await;
    let filter = unique_filter("metrics");
    origin.create_filter(&filter, 10_000, 0.01).await;
    let present = random_keys(200);
    origin.insert_all(&filter, &present).await;
    let absent = random_keys(300);
    for key in present.iter().take(20).chain(absent.iter().take(30)) {
        origin.get(&filter, key).await;
    }
    let batch: Vec<String> = present.iter().skip(20).take(40).chain(absent.iter().skip(30).take(60)).cloned().collect();
    origin.lookup_all(&filter, &batch).await;

    // The recovery check (every 200 ms) sets the filter's gauges: wait for them, bounded. A
    // check that read the counters before the lookups above sets the fill ratio but not yet the
    // observed false-positive rate (no absent key looked up): wait for a check after them.
    let url = format!("{}/metrics", origin.base);
    let deadline = Instant::now() + Duration::from_secs(20);
    let fill_series = format!("bloomgate_filter_fill_ratio{{filter=\"{filter}\"}}");
    let observed_series = format!("bloomgate_filter_observed_fp_rate{{filter=\"{filter}\"}}");
    let (content_type, text) = loop {
        let r = origin.http.get(&url).send().await.unwrap();
        let content_type = r.headers()["content-type"].to_str().unwrap().to_owned();
        let text = r.text().await.unwrap();
        let gauges_set = sample(&text, &fill_series).is_some() && sample(&text, &observed_series).is_some();
        if gauges_set || Instant::now() > deadline {
            break (content_type, text);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(content_type.starts_with("application/openmetrics-text"), "{content_type}");
    assert!(text.trim_end().ends_with("# EOF"), "an OpenMetrics exposition ends with # EOF");

    assert_every_lookup_counted_and_timed(&text);
    let fill = sample(&text, &fill_series).expect("the recovery check set the fill ratio");
    assert!(fill > 0.0 && fill < 0.5, "200 keys in a filter for 10,000: {fill}");
    let expected_fp = sample(&text, &format!("bloomgate_filter_expected_fp_rate{{filter=\"{filter}\"}}")).unwrap();
    assert!(expected_fp < 0.01, "{expected_fp}");
    assert_eq!(sample(&text, &format!("bloomgate_rebuild_running{{filter=\"{filter}\"}}")), Some(0.0));
    assert!(text.contains("bloomgate_build_info{version=\""), "{text}");
    assert!(sample(&text, "bloomgate_http_in_flight").is_some());
    // The process's own metrics, under the names every Prometheus client exports.
    let rss = sample(&text, "process_resident_memory_bytes").expect("process_resident_memory_bytes");
    assert!(rss > 1e6, "resident memory {rss} bytes");
    assert!(sample(&text, "process_cpu_seconds_total").is_some_and(|s| s > 0.0), "{text}");
    for name in ["process_open_fds", "process_max_fds", "process_threads", "process_start_time_seconds"] {
        assert!(sample(&text, name).is_some_and(|v| v > 0.0), "{name}");
    }

    // The dashboard and the alert rules query only what is exposed.
    let exposed = exposed_names(&text);
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for file in ["deploy/grafana/bloomgate.json", "deploy/prometheus/alerts.yml"] {
        let used = names_used(&std::fs::read_to_string(root.join(file)).unwrap());
        assert!(!used.is_empty(), "{file} queries nothing");
        let missing: Vec<&String> = used.iter().filter(|n| !exposed.contains(*n)).collect();
        assert!(missing.is_empty(), "{file} queries {missing:?}, which /metrics does not expose");
    }
}

/// What `text`, the exposition scraped after the lookups, must show of them: 150 lookups each
/// counted once by who answered, the requests by route pattern and status, and the store reads
/// they made timed.
fn assert_every_lookup_counted_and_timed(text: &str) {
    let lookups = ["filter", "database"]
        .iter()
        .map(|by| sample(text, &format!("bloomgate_lookups_total{{answered_by=\"{by}\"}}")).unwrap_or(0.0))
        .sum::<f64>();
    assert_eq!(lookups, 150.0, "50 single lookups and a batch of 100, each counted once:\n{text}");
    let not_found = sample(
        text,
        "bloomgate_http_requests_total{method=\"GET\",route=\"/v1/filters/{filter}/keys/{key}\",status=\"404\"}",
    );
    assert_eq!(not_found, Some(30.0), "the 30 absent single lookups, by route pattern and status");
    let batches = sample(
        text,
        "bloomgate_http_requests_total{method=\"POST\",route=\"/v1/filters/{filter}/lookups\",status=\"200\"}",
    );
    assert_eq!(batches, Some(1.0));
    // Each lookup's filter read is timed once, under whichever answered: Redis or the local copy.
    let filter_reads = ["redis", "local_copy"]
        .iter()
        .map(|store| sample(text, &format!("bloomgate_store_seconds_count{{store=\"{store}\"}}")).unwrap_or(0.0))
        .sum::<f64>();
    assert!(filter_reads >= 150.0, "{filter_reads} filter reads timed for 150 lookups");
    assert!(sample(text, "bloomgate_store_seconds_count{store=\"database\"}").unwrap_or(0.0) >= 1.0);
    // A write's database time has a series of its own, not the lookups' reads.
    assert!(sample(text, "bloomgate_write_database_seconds_count").unwrap_or(0.0) >= 1.0);
    assert!(sample(text, "bloomgate_batch_lookup_seconds_count").unwrap_or(0.0) >= 1.0);
}

#[test]
fn names_used_skips_recorded_series() {
    let used = names_used(
        "# every bloomgate_* name\nsum(rate(bloomgate_lookups_total[5m])) / bloomgate:offload_share:rate5m + job:bloomgate_x",
    );
    assert_eq!(used.into_iter().collect::<Vec<_>>(), ["bloomgate_lookups_total"]);
}
