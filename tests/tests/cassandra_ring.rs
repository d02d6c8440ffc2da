//! Scale-out on a real three-node Cassandra ring (replication factor 3, LOCAL_QUORUM): one node
//! is killed while an origin writes and looks keys up, a rebuild scans the ring while the node
//! is down, and the node is restarted. Writes and lookups go on with two replicas of three, and
//! no acknowledged key is lost.
//!
//! # Running
//! Not part of `scripts/test` (CI): the ring takes ~90 s to start and ~1.2 GiB per node, so
//! the test is `#[ignore]`d and run on its own, with the environment the ring was started
//! with (the test finds, kills and restarts the node through `scripts/services`):
//!
//! ```sh
//! export BG_STATE_DIR=/tmp/bg-ring-state \
//!        BG_CASSANDRA_RING_PORT=19042 BG_CASSANDRA_RING_STORAGE_PORT=17000
//! scripts/services start --topology cluster cassandra
//! BG_TEST_CASSANDRA_RING=127.0.0.1:19042,127.0.0.2:19042,127.0.0.3:19042 \
//!   cargo test -p bloomgate-tests --test cassandra_ring -- --ignored --nocapture
//! scripts/services stop --topology cluster cassandra
//! ```
//!
//! `BG_TEST_CASSANDRA_RING` defaults to the ring's default ports (9042). A node that
//! does not answer fails the test. Redis is a private `redis-server` of the test's own.

use bloomgate_tests::origin::{config, TestOrigin};
use bloomgate_tests::redis_server::RedisServer;
use bloomgate_tests::{random_keys, unique_filter};
use reqwest::StatusCode;
use std::path::PathBuf;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Writes per second, and lookups of each kind: bounded, so the run is the same on a fast
/// machine and a slow one.
const OPS_PER_SEC: u32 = 20;
/// Traffic with every node up, before the kill and after the restart.
const ALL_UP: Duration = Duration::from_secs(10);
/// How long the node stays down before its restart begins.
const DOWN: Duration = Duration::from_secs(30);
/// When, after the kill, the rebuild's full scan starts: before the other nodes have marked
/// the dead one down, when a page of a range scan may wait on it until it times out (the scan
/// then reads that range again).
const REBUILD_AFTER: Duration = Duration::from_secs(2);
/// Time the driver and the other nodes get to notice the dead node. Operations that start
/// later while it is down must succeed (MIN_SHARE_DOWN); those before are only counted.
const NOTICE: Duration = Duration::from_secs(5);
/// Share of writes, and of lookups of written keys, that must succeed while the node is down
/// (after NOTICE). Two replicas of three make a quorum, so all should; a little slack for a
/// request caught by a busy 2-core machine.
const MIN_SHARE_DOWN: f64 = 0.95;
/// How long the final read-back waits out a restarted node that is still pulling its schema.
const READ_BACK_PATIENCE: Duration = Duration::from_secs(90);

fn ring_nodes() -> Vec<String> {
    std::env::var("BG_TEST_CASSANDRA_RING")
        .unwrap_or_else(|_| "127.0.0.1:9042,127.0.0.2:9042,127.0.0.3:9042".into())
        .split(',')
        .map(str::to_owned)
        .collect()
}

fn services_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/services")
}

/// Fails, with the commands that start the ring, unless every node accepts connections.
async fn require_ring(nodes: &[String]) {
    assert_eq!(nodes.len(), 3, "BG_TEST_CASSANDRA_RING names {nodes:?}: three nodes expected");
    for node in nodes {
        let reachable = tokio::time::timeout(Duration::from_secs(3), tokio::net::TcpStream::connect(node)).await;
        assert!(
            matches!(reachable, Ok(Ok(_))),
            "Cassandra ring node {node} is not reachable: start the ring with `scripts/services start --topology cluster cassandra` (see `# Running` in this file for the environment)"
        );
    }
}

/// The pid in `scripts/services cluster-nodes cassandra`'s listing (`address port state
/// pid|-` per line) of the node at `node` (`address:port`).
fn pid_in_listing(listing: &str, node: &str) -> Option<u32> {
    let (address, port) = node.rsplit_once(':')?;
    listing.lines().find_map(|line| match line.split_whitespace().collect::<Vec<_>>()[..] {
        [a, p, _state, pid] if a == address && p == port => pid.parse().ok(),
        _ => None,
    })
}

fn node_pid(node: &str) -> u32 {
    let out = Command::new(services_script()).args(["cluster-nodes", "cassandra"]).output().unwrap();
    let listing = String::from_utf8_lossy(&out.stdout);
    pid_in_listing(&listing, node).unwrap_or_else(|| {
        panic!(
            "`scripts/services cluster-nodes cassandra` lists no running node {node}:\n{listing}\nrun the test with the BG_STATE_DIR and BG_CASSANDRA_RING_* the ring was started with"
        )
    })
}

/// Restarts whatever ring node is down (the scripts' `start` brings a killed node back) and
/// waits until all three are up.
fn restart_ring() {
    let out = Command::new(services_script()).args(["start", "--topology", "cluster", "cassandra"]).output().unwrap();
    assert!(out.status.success(), "restarting the ring failed:\n{}", String::from_utf8_lossy(&out.stderr));
}

/// Whether each key is seen, asked in batches; a batch refused with a retryable error (503)
/// is asked again for up to [`READ_BACK_PATIENCE`]. A node `scripts/services` restarted can
/// answer CQL before it has pulled the keyspaces created since its previous start (the dev
/// nodes run with `-Dcassandra.unsafesystem=true`, which keeps schema out of the commit log):
/// the origin then answers 503, never a wrong answer, and the read-back waits it out.
async fn read_back(origin: &TestOrigin, filter: &str, keys: &[String]) -> Vec<bool> {
    let deadline = Instant::now() + READ_BACK_PATIENCE;
    let mut seen = Vec::with_capacity(keys.len());
    for chunk in keys.chunks(1000) {
        loop {
            match origin.client.lookup_batch(filter, chunk).await {
                Ok(answers) => {
                    seen.extend(answers.results.iter().map(|a| a.seen));
                    break;
                }
                Err(e) if e.is_retryable() && Instant::now() < deadline => {
                    tokio::time::sleep(e.retry_after().unwrap_or(Duration::from_secs(1))).await;
                }
                Err(e) => panic!("read-back of {} keys: {e}", chunk.len()),
            }
        }
    }
    seen
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Write,
    LookupWritten,
    LookupNeverWritten,
}

/// A write: acknowledged (`Yes`) or refused with 503/429 (`Refused`, with the answer's detail).
/// A lookup: seen (`Yes`), not seen (`No`), or refused.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Outcome {
    Yes,
    No,
    Refused(String),
    Unexpected(String),
}

/// One operation: when it started (since the run began), what, on which key, and its answer.
#[derive(Clone, Debug)]
struct Op {
    at: Duration,
    kind: Kind,
    key: String,
    outcome: Outcome,
}

async fn outcome(response: reqwest::Response, yes: StatusCode, no: StatusCode) -> Outcome {
    match response.status() {
        s if s == yes => Outcome::Yes,
        s if s == no => Outcome::No,
        StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS => {
            let body: serde_json::Value = response.json().await.unwrap_or_default();
            Outcome::Refused(body["detail"].as_str().unwrap_or("(no detail)").to_owned())
        }
        other => Outcome::Unexpected(format!("{other}: {}", response.text().await.unwrap_or_default())),
    }
}

/// Writes one new key, and looks up one written key and one never-written key, per tick,
/// each in its own task, until `stop`: a slow answer never slows the rate.
async fn traffic(origin: Arc<TestOrigin>, filter: String, start: Instant, stop: Arc<tokio::sync::Notify>) -> Vec<Op> {
    let ops = Arc::new(Mutex::new(Vec::<Op>::new()));
    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let mut tick = tokio::time::interval(Duration::from_secs(1) / OPS_PER_SEC);
    let mut tasks = Vec::new();
    loop {
        tokio::select! {
            _ = stop.notified() => break,
            _ = tick.tick() => {}
        }
        let (origin, filter, ops, acked) = (origin.clone(), filter.clone(), ops.clone(), acked.clone());
        tasks.push(tokio::spawn(async move {
            let at = start.elapsed();
            let record = |kind, key: String, outcome| ops.lock().unwrap().push(Op { at, kind, key, outcome });
            let key = random_keys(1).remove(0);
            let written = {
                let acked = acked.lock().unwrap();
                (!acked.is_empty()).then(|| acked[rand::random_range(0..acked.len())].clone())
            };
            let never = random_keys(1).remove(0);
            let (put, seen, unseen) = tokio::join!(
                async { outcome(origin.put(&filter, &key).await, StatusCode::CREATED, StatusCode::NOT_FOUND).await },
                async {
                    match &written {
                        Some(k) => {
                            Some(outcome(origin.get(&filter, k).await, StatusCode::OK, StatusCode::NOT_FOUND).await)
                        }
                        None => None,
                    }
                },
                async { outcome(origin.get(&filter, &never).await, StatusCode::OK, StatusCode::NOT_FOUND).await },
            );
            if put == Outcome::Yes {
                acked.lock().unwrap().push(key.clone());
            }
            record(Kind::Write, key, put);
            if let (Some(k), Some(seen)) = (written, seen) {
                record(Kind::LookupWritten, k, seen);
            }
            record(Kind::LookupNeverWritten, never, unseen);
        }));
    }
    for task in tasks {
        task.await.expect("a traffic task panicked");
    }
    let ops = ops.lock().unwrap().clone();
    ops
}

/// (answered `Yes`, all) among operations of `kind` that started within `window`.
fn share(ops: &[Op], kind: Kind, window: std::ops::Range<Duration>) -> (usize, usize) {
    let of_kind = ops.iter().filter(|op| op.kind == kind && window.contains(&op.at));
    let (yes, all) = of_kind.fold((0, 0), |(y, a), op| (y + usize::from(op.outcome == Outcome::Yes), a + 1));
    (yes, all)
}

fn percent((yes, all): (usize, usize)) -> f64 {
    if all == 0 {
        0.0
    } else {
        100.0 * yes as f64 / all as f64
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the 3-node Cassandra ring: see `# Running` at the top of this file"]
async fn a_node_down_keeps_writes_and_lookups_at_quorum_and_its_restart_loses_nothing() {
    // The origin's warnings (a token range scanned again, a node marked down) go with the
    // test's output.
    let _ = tracing_subscriber::fmt().with_env_filter("bloomgate_origin=warn").with_test_writer().try_init();
    let nodes = ring_nodes();
    require_ring(&nodes).await;
    let victim = nodes[2].clone();
    let victim_pid = node_pid(&victim);
    let redis = RedisServer::start();
    let origin = Arc::new(origin_on_the_ring_at_local_quorum(&nodes, &redis).await);
    let filter = unique_filter("ring");
    origin.create_filter(&filter, 100_000, 0.01).await;

    let start = Instant::now();
    let stop = Arc::new(tokio::sync::Notify::new());
    let traffic = tokio::spawn(traffic(origin.clone(), filter.clone(), start, stop.clone()));
    tokio::time::sleep(ALL_UP).await;
    let killed = a_rebuild_scans_the_ring_with_a_node_killed(&origin, &filter, &victim, victim_pid, start).await;
    let (restarting, back) = the_killed_node_restarts(start).await;
    tokio::time::sleep(ALL_UP).await;
    stop.notify_one();
    let ops = traffic.await.unwrap();
    let end = start.elapsed();
    let timeline = Timeline { killed, restarting, back, end };

    let (acked, lost, phantom) = read_back_once_the_ring_is_whole(&origin, &filter, &ops).await;
    print_by_phase(&ops, &timeline, &acked, lost, phantom);
    no_key_lost_and_quorum_kept_while_the_node_was_down(&ops, &timeline, lost, phantom);
}

/// An origin on all three nodes, at LOCAL_QUORUM in a keyspace of its own replicated to all
/// three, with Redis on `redis`: two replicas of three make a quorum.
async fn origin_on_the_ring_at_local_quorum(nodes: &[String], redis: &RedisServer) -> TestOrigin {
    let mut cfg = config(Some(redis.url()), &nodes[0]);
    cfg.cassandra_nodes = nodes.to_vec();
    cfg.cassandra_keyspace = format!("bg_ring_{:x}", rand::random::<u32>());
    cfg.cassandra_replication = "{'class': 'NetworkTopologyStrategy', 'datacenter1': 3}".into();
    cfg.cassandra_consistency = "local_quorum".into();
    // Generous timeouts: the test is about availability with a replica down, not latency, on a
    // shared 2-core machine where three JVMs and the origin compete for the CPU.
    cfg.cassandra_timeout_ms = 5000;
    cfg.redis_timeout_ms = 1000;
    cfg.redis_write_timeout_ms = 3000;
    cfg.request_timeout_ms = 12_000;
    TestOrigin::start(cfg).await
}

/// The victim node killed, and a rebuild's full scan of the ring, at LOCAL_QUORUM, succeeds
/// without it. Returns when the node was killed (since `start`), once it has been down for
/// [`DOWN`].
async fn a_rebuild_scans_the_ring_with_a_node_killed(
    origin: &TestOrigin,
    filter: &str,
    victim: &str,
    victim_pid: u32,
    start: Instant,
) -> Duration {
    let killed = start.elapsed();
    let status = Command::new("kill").args(["-9", &victim_pid.to_string()]).status().unwrap();
    assert!(status.success(), "kill -9 {victim_pid} ({victim})");
    println!("{killed:.1?}: killed {victim} (pid {victim_pid})");
    tokio::time::sleep(REBUILD_AFTER).await;
    // The rebuild's full-table scan, at LOCAL_QUORUM, with one replica of every range down.
    let rebuilt = origin.rebuild_now(filter).await.expect("a rebuild while a node is down");
    println!("{:.1?}: rebuilt with the node down: {} keys scanned", start.elapsed(), rebuilt.keys);
    tokio::time::sleep((killed + DOWN).saturating_sub(start.elapsed())).await;
    killed
}

/// The killed node brought back, and the ring whole again. Returns when the restart began and
/// when all three nodes were up (since `start`).
async fn the_killed_node_restarts(start: Instant) -> (Duration, Duration) {
    let restarting = start.elapsed();
    tokio::task::spawn_blocking(restart_ring).await.unwrap();
    let back = start.elapsed();
    println!("{restarting:.1?}: restart began; {back:.1?}: all three nodes up again");
    (restarting, back)
}

/// When, since the traffic began, the node was killed, its restart began, the ring was whole
/// again, and the traffic stopped.
#[derive(Clone, Copy)]
struct Timeline {
    killed: Duration,
    restarting: Duration,
    back: Duration,
    end: Duration,
}

/// What the whole ring holds after the outage: returns the acknowledged keys, how many of
/// them are not seen (lost), and how many of 1000 never-written keys are seen (phantoms).
async fn read_back_once_the_ring_is_whole(
    origin: &TestOrigin,
    filter: &str,
    ops: &[Op],
) -> (Vec<String>, usize, usize) {
    // Every acknowledged key, read back once the ring is whole: nothing lost.
    let acked: Vec<String> =
        ops.iter().filter(|op| op.kind == Kind::Write && op.outcome == Outcome::Yes).map(|op| op.key.clone()).collect();
    let lost = read_back(origin, filter, &acked).await.iter().filter(|seen| !**seen).count();
    let never_written = random_keys(1000);
    let phantom = read_back(origin, filter, &never_written).await.iter().filter(|seen| **seen).count();
    (acked, lost, phantom)
}

/// The run, phase by phase (shares of writes and lookups that succeeded), the read-back, and
/// the refusals by detail: what a reader needs to judge a failure, or a pass.
fn print_by_phase(ops: &[Op], timeline: &Timeline, acked: &[String], lost: usize, phantom: usize) {
    let Timeline { killed, restarting, back, end } = *timeline;
    let phases = [
        ("all up", Duration::ZERO..killed),
        ("node down, driver noticing", killed..killed + NOTICE),
        ("node down", killed + NOTICE..restarting),
        ("node restarting", restarting..back),
        ("all up again", back..end),
    ];
    println!("phase: writes acknowledged, lookups of written keys seen, never-written keys not seen");
    for (name, window) in &phases {
        let (w, l) = (share(ops, Kind::Write, window.clone()), share(ops, Kind::LookupWritten, window.clone()));
        let n = ops.iter().filter(|op| op.kind == Kind::LookupNeverWritten && window.contains(&op.at));
        let unseen = n.clone().filter(|op| op.outcome == Outcome::No).count();
        println!(
            "  {name} ({:.0?}..{:.0?}): {}/{} ({:.1} %), {}/{} ({:.1} %), {unseen}/{}",
            window.start,
            window.end,
            w.0,
            w.1,
            percent(w),
            l.0,
            l.1,
            percent(l),
            n.count()
        );
    }
    println!(
        "end: {} acknowledged keys read back, {lost} lost; {phantom} of 1000 never-written keys seen",
        acked.len()
    );
    let mut refusals = std::collections::BTreeMap::<(Kind, &str), usize>::new();
    for op in ops {
        if let Outcome::Refused(detail) = &op.outcome {
            *refusals.entry((op.kind, detail)).or_default() += 1;
        }
    }
    println!("refusals (503/429): {refusals:?}");
}

/// No lookup ever answered wrong (an acknowledged key "not seen", a never-written key
/// "seen") nor outside the API, no acknowledged key was lost, and while the node was down
/// (once noticed) writes and lookups kept succeeding at quorum.
fn no_key_lost_and_quorum_kept_while_the_node_was_down(ops: &[Op], timeline: &Timeline, lost: usize, phantom: usize) {
    let Timeline { killed, restarting, .. } = *timeline;
    let false_negatives: Vec<&Op> =
        ops.iter().filter(|op| op.kind == Kind::LookupWritten && op.outcome == Outcome::No).collect();
    assert!(false_negatives.is_empty(), "acknowledged keys answered \"not seen\": {false_negatives:?}");
    let phantoms: Vec<&Op> =
        ops.iter().filter(|op| op.kind == Kind::LookupNeverWritten && op.outcome == Outcome::Yes).collect();
    assert!(phantoms.is_empty(), "never-written keys answered \"seen\": {phantoms:?}");
    let unexpected: Vec<&Op> = ops.iter().filter(|op| matches!(op.outcome, Outcome::Unexpected(_))).collect();
    assert!(unexpected.is_empty(), "answers other than the API's: {unexpected:?}");
    assert_eq!((lost, phantom), (0, 0), "lost acknowledged keys, never-written keys seen at the end");
    for kind in [Kind::Write, Kind::LookupWritten] {
        let down = share(ops, kind, killed + NOTICE..restarting);
        assert!(down.1 > 0, "no {kind:?} while the node was down");
        assert!(
            percent(down) >= 100.0 * MIN_SHARE_DOWN,
            "{kind:?} while a node was down: {}/{} succeeded, below {MIN_SHARE_DOWN}",
            down.0,
            down.1
        );
    }
}

#[test]
fn the_node_listing_is_read() {
    let listing = "127.0.0.1 19042 up 101\n127.0.0.2 19042 up 102\n127.0.0.3 19042 down -\n";
    assert_eq!(pid_in_listing(listing, "127.0.0.2:19042"), Some(102));
    assert_eq!(pid_in_listing(listing, "127.0.0.3:19042"), None, "a stopped node has no pid");
    assert_eq!(pid_in_listing(listing, "127.0.0.1:9042"), None, "another port is another ring");
}
