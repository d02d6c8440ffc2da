//! The run's filter: created through origin 0 once it reaches Redis, and settled (a readable
//! generation, no rebuild under way, no replaced generation kept) before the workload starts,
//! so that the history begins with a healthy filter and every error in it has a fault to
//! answer for.
//!
//! Why settled: a create can race an origin's recovery check. The check lists the new
//! definition, reads no filter state yet (the creator writes it last), takes the state for lost
//! and deletes the bits of the generation the creator has just made; the state the creator
//! then writes names bits that are gone, the next check rebuilds, and writes fail (503) until
//! the broken generation is retired, a grace period after the switch (seen in 1 of 10 runs of
//! the CI schedule here). It happens before the history starts; the run says so in its notes.

use crate::cluster::Cluster;
use bloomgate_tests::origin::TOKEN;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Creates `filter` through origin 0, then waits until it is settled. A note for the run when
/// settling took a while (the race above).
pub async fn create_filter(
    cluster: &Cluster,
    http: &reqwest::Client,
    filter: &str,
    capacity: u64,
) -> anyhow::Result<Option<String>> {
    let base = &cluster.origins[0].base;
    // The origin answers /readyz once Cassandra does; its Redis link may still be connecting
    // (a create then fails half way: definition stored, no bits). Wait until it reaches Redis.
    let deadline = Instant::now() + Duration::from_secs(60);
    let ready = format!("{base}/readyz");
    while http.get(&ready).send().await?.json::<Value>().await?["filter"] != "ok" {
        anyhow::ensure!(Instant::now() < deadline, "origin-0 did not reach Redis within 60 s (GET {ready})");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let asked = Instant::now();
    // A 503 (with Retry-After) is the origin's honest "not yet": ask again, as a client should,
    // for a bounded time.
    loop {
        let created = http
            .put(format!("{base}/v1/filters/{filter}"))
            .bearer_auth(TOKEN)
            .json(&json!({ "capacity": capacity, "fp_rate": 0.01 }))
            .send()
            .await?;
        let status = created.status().as_u16();
        // 200: it exists with these settings, which a filter created just now can answer too
        // (the create answered 503 once it had stored the filter, and was asked again).
        if status == 201 || status == 200 {
            break;
        }
        let body = created.text().await?;
        anyhow::ensure!(status == 503 && Instant::now() < deadline, "create the filter: {status} {body}");
        eprintln!("chaos: create the filter: 503 ({body}); asking again");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let created_after = asked.elapsed();
    let stats = format!("{base}/v1/filters/{filter}/stats");
    loop {
        let answer = http.get(&stats).bearer_auth(TOKEN).send().await?;
        let settled = answer.status().is_success() && answer.json::<Value>().await.is_ok_and(|s| settled(&s));
        if settled {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "the new filter did not settle within 60 s (GET {stats})");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let took = asked.elapsed();
    Ok((took > Duration::from_secs(2)).then(|| {
        format!(
            "the new filter took {:.1} s to create and {:.1} s more to settle before the workload started \
             (a create racing a recovery check)",
            created_after.as_secs_f64(),
            (took - created_after).as_secs_f64()
        )
    }))
}

/// A readable generation, no rebuild under way, no replaced generation kept.
fn settled(stats: &Value) -> bool {
    stats["generation"].is_u64() && stats["building_generation"].is_null() && stats["previous_generation"].is_null()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_filter_is_settled_with_one_generation_and_nothing_else() {
        assert!(settled(&json!({"generation": 7, "building_generation": null, "previous_generation": null})));
        assert!(!settled(&json!({"generation": 7, "building_generation": null, "previous_generation": 6})));
        assert!(!settled(&json!({"generation": 7, "building_generation": 8, "previous_generation": null})));
        assert!(!settled(&json!({"generation": null, "building_generation": 8})));
    }
}
