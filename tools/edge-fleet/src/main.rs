//! `edge-fleet`: a fleet run for the record (BENCHMARKS.md): an origin started on the running
//! services (Redis and Cassandra, as the tests find them), F filters of its own, N native
//! isolates in P data centres following their shared feeds through the stand-in CDN, writes and
//! lookups at fixed rates; prints what reached the origin, per second and per write, the
//! freshness lag's percentiles, and whether any acknowledged key was answered "not seen".
//!
//! `cargo run --release -p bloomgate-edge-fleet -- --isolates 1000 --pops 10 --filters 10 --upper-tier --seconds 60`

use bloomgate_cdn_sim::Hostile;
use bloomgate_client::api::{CreateFilter, DropKeys};
use bloomgate_edge_fleet::{run, FleetOptions, OriginUpstream, Protocol};
use bloomgate_tests::origin::{TestOrigin, EDGE_SECRET};
use clap::Parser;
use std::sync::Arc;
use std::time::Duration;

/// A fleet run.
#[derive(Parser, Debug)]
struct Args {
    /// Isolates.
    #[arg(long, default_value_t = 100)]
    isolates: usize,
    /// Data centres (lower cache tiers).
    #[arg(long, default_value_t = 10)]
    pops: usize,
    /// Filters, each followed by every isolate; writes go to each in turn.
    #[arg(long, default_value_t = 1)]
    filters: usize,
    /// With an upper cache tier.
    #[arg(long)]
    upper_tier: bool,
    /// Seconds of writes and lookups.
    #[arg(long, default_value_t = 30)]
    seconds: u64,
    /// Writes per second to the origin.
    #[arg(long, default_value_t = 25.0)]
    write_rate: f64,
    /// Milliseconds between two lookups of one isolate.
    #[arg(long, default_value_t = 200)]
    lookup_every_ms: u64,
    /// Chunk width Δ, ms.
    #[arg(long, default_value_t = 250)]
    width_ms: u64,
    /// The freshness bound S, ms.
    #[arg(long, default_value_t = 2_000)]
    freshness_ms: u64,
    /// ε, ms.
    #[arg(long, default_value_t = 100)]
    epsilon_ms: u64,
    /// Seconds between an isolate's cold starts, about (0: never again).
    #[arg(long, default_value_t = 30)]
    restart_every_secs: u64,
    /// Today's protocol instead (each isolate asks the origin itself), for the baseline.
    #[arg(long)]
    per_isolate: bool,
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    let origin = TestOrigin::on_services(|_| {}).await;
    let filters: Vec<String> =
        (0..args.filters.max(1)).map(|_| bloomgate_tests::unique_filter("fleet-bench")).collect();
    let create = CreateFilter { segment_bytes: 4096, ..CreateFilter::new(100_000, 0.01) };
    for filter in &filters {
        origin.client.create_filter(filter, &create).await.unwrap_or_else(|e| panic!("create {filter}: {e}"));
    }
    let options = FleetOptions {
        protocol: if args.per_isolate { Protocol::PerIsolate } else { Protocol::Shared },
        isolates: args.isolates,
        pops: args.pops,
        upper_tier: args.upper_tier,
        hostile: Hostile::None,
        duration: Duration::from_secs(args.seconds),
        width_ms: args.width_ms,
        freshness_ms: args.freshness_ms,
        epsilon_ms: args.epsilon_ms,
        write_every: Duration::from_secs_f64(1.0 / args.write_rate.max(0.01)),
        lookup_every: Duration::from_millis(args.lookup_every_ms),
        link_latency: Duration::from_millis(30),
        pop_latency: Duration::from_millis(5),
        restart_every: Duration::from_secs(args.restart_every_secs),
        origin_base: origin.base.clone(),
    };
    let upstream = Arc::new(OriginUpstream::new(&origin.base, options.link_latency));
    let r = run(upstream, origin.client.clone(), &filters, EDGE_SECRET, options).await;
    for filter in &filters {
        // A run's filters are its own: leave no keyspace behind for the next run to list.
        let _ = origin.client.drop_filter(filter, DropKeys::Delete).await;
    }
    let secs = args.seconds as f64;
    let report = serde_json::json!({
        "isolates": args.isolates,
        "pops": args.pops,
        "filters": filters.len(),
        "width_ms": args.width_ms,
        "upper_tier": args.upper_tier,
        "seconds": args.seconds,
        "writes": r.writes,
        "lookups": r.lookups,
        "not_seen": r.not_seen,
        "violations": r.violations,
        "examples": r.examples,
        "cold_starts": r.cold_starts,
        "fallbacks": r.fallbacks,
        "lag_ms": { "samples": r.lags_ms.len(), "p50": r.lag_quantile_ms(0.5), "p90": r.lag_quantile_ms(0.9), "p99": r.lag_quantile_ms(0.99), "max": r.lags_ms.last() },
        "protocol": if args.per_isolate { "per-isolate" } else { "shared" },
        "origin_feed_requests": r.cdn.upstream + r.per_isolate_polls,
        "origin_feed_requests_per_sec": (r.cdn.upstream + r.per_isolate_polls) as f64 / secs,
        "origin_bytes_per_write": r.cdn.upstream_bytes as f64 / (r.writes.max(1) as f64),
        "lower_tier": { "requests": r.cdn.lower.requests, "hits": r.cdn.lower.hits, "misses": r.cdn.lower.misses, "collapsed": r.cdn.lower.collapsed },
        "upper_tier_counts": { "requests": r.cdn.upper.requests, "hits": r.cdn.upper.hits, "misses": r.cdn.upper.misses, "collapsed": r.cdn.upper.collapsed },
    });
    println!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
    if r.violations > 0 {
        std::process::exit(1);
    }
}
