//! The edge's memory under a sustained, bounded lookup load, for longer than the test in
//! tests/tests/edge_memory.rs looks: the measurement behind BENCHMARKS.md ("Edge memory under
//! sustained load"). Prints workerd's memory over the run and its growth over the second half.
//!
//! `cargo run --release -p bloomgate-bench --bin edge-memory -- [SECS] [LOOKUPS_PER_SEC] [--log-requests]`
//! (defaults 600 s, 80 lookups/s; needs `scripts/services start` and `scripts/edge-build`;
//! `BLOOMGATE_TEST_EDGE_ROOT` and `BLOOMGATE_TEST_WRANGLER_INSPECTOR` as in tests/src/edge.rs).

use bloomgate_tests::edge_load::{on_a_fresh_stack, Load};
use std::time::Duration;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let log_requests = args.iter().any(|a| a == "--log-requests");
    let mut numbers = args.iter().filter(|a| !a.starts_with("--"));
    let secs: u64 = numbers.next().map(|a| a.parse()).transpose()?.unwrap_or(600);
    let rate: u32 = numbers.next().map(|a| a.parse()).transpose()?.unwrap_or(80);
    let load = Load { rate, duration: Duration::from_secs(secs), ..Load::default() };
    let report = on_a_fresh_stack(&load, log_requests).await;
    for role in ["worker", "proxy"] {
        let mib = report.mib(role);
        println!(
            "{role}: {:.0} MiB at the start, {:.0} MiB at the end; {:+.0} MiB over the second half",
            mib.first().copied().unwrap_or(0.0),
            mib.last().copied().unwrap_or(0.0),
            report.growth_mib(role, 0.5)
        );
    }
    Ok(())
}
