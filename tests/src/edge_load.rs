//! A bounded lookup load on the edge, with the memory of its workerd processes sampled as it
//! runs: for finding (and keeping out) memory that grows with the number of requests served.
//!
//! Lookups go out at a fixed rate, at most `max_in_flight` at once (one that would pass the cap
//! is skipped and counted, so a slow edge is measured at what it sustains instead of queueing
//! without bound in the client): single GETs and 20-key batches, a share of them for stored
//! keys (forwarded to the origin: a subrequest each) and the rest for absent keys (answered at
//! the edge).

use crate::procs;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The load to drive.
#[derive(Clone, Debug)]
pub struct Load {
    /// Lookups (requests) per second.
    pub rate: u32,
    /// How long.
    pub duration: Duration,
    /// Most requests in flight; more are skipped.
    pub max_in_flight: u64,
    /// Share of single lookups for stored keys (the rest are absent keys).
    pub present_share: f64,
    /// Share of requests that are 20-key batches (a third of their keys stored).
    pub batch_share: f64,
    /// How often memory is sampled.
    pub sample_every: Duration,
}

impl Default for Load {
    fn default() -> Load {
        Load {
            rate: 100,
            duration: Duration::from_secs(60),
            max_in_flight: 32,
            present_share: 0.3,
            batch_share: 0.05,
            sample_every: Duration::from_secs(10),
        }
    }
}

/// Resident memory of one process, by what it is.
#[derive(Clone, Debug)]
pub struct Rss {
    /// `worker` (workerd running the edge) or `proxy` (workerd running wrangler's proxy and
    /// inspector-proxy workers), or the process name.
    pub role: String,
    /// VmRSS in KiB.
    pub kib: u64,
}

/// One memory sample.
#[derive(Clone, Debug)]
pub struct Sample {
    /// Since the load started.
    pub at: Duration,
    /// Requests answered so far.
    pub answered: u64,
    /// Each process's resident memory.
    pub rss: Vec<Rss>,
    /// The edge isolate's own report (wasm memory, what it holds), if it answered.
    pub isolate: Option<bloomgate_client::api::IsolateReport>,
}

/// What a run did and saw.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Requests sent.
    pub sent: u64,
    /// Requests answered (any status).
    pub answered: u64,
    /// Requests that got no answer for another reason than the client's timeout (a connection
    /// refused or reset: workerd gone or restarting).
    pub errors: u64,
    /// Requests without an answer within the client's timeout (15 s): an overloaded machine.
    pub timeouts: u64,
    /// The first few errors and timeouts, as reqwest words them.
    pub failures: Vec<String>,
    /// Requests skipped because `max_in_flight` were under way.
    pub skipped: u64,
    /// Answers other than 200 and 404.
    pub unexpected: u64,
    /// Memory samples, the first before any load.
    pub samples: Vec<Sample>,
}

impl Report {
    /// Resident memory of `role` at each sample, in MiB.
    pub fn mib(&self, role: &str) -> Vec<f64> {
        self.samples
            .iter()
            .map(|s| s.rss.iter().filter(|r| r.role == role).map(|r| r.kib as f64 / 1024.0).sum())
            .collect()
    }

    /// Growth of `role`'s resident memory from the sample nearest `from` (a share of the run,
    /// 0.0 to 1.0) to the last sample, in MiB.
    pub fn growth_mib(&self, role: &str, from: f64) -> f64 {
        let mib = self.mib(role);
        if mib.is_empty() {
            return 0.0;
        }
        let start = ((mib.len() - 1) as f64 * from).round() as usize;
        mib[mib.len() - 1] - mib[start]
    }

    /// The isolate's wasm memory at each sample that has it, in MiB.
    pub fn wasm_mib(&self) -> Vec<f64> {
        self.samples.iter().filter_map(|s| s.isolate.as_ref()).map(|i| i.wasm_bytes as f64 / MIB).collect()
    }

    /// What the run under `load` sent and got, then [`table`](Self::table).
    pub fn summary(&self, load: &Load) -> String {
        format!(
            "{} lookups/s for {:?}: {} sent, {} answered, {} skipped (in flight at the cap), {} errors, {} timeouts, \
             {} unexpected {:?}\n{}",
            load.rate,
            load.duration,
            self.sent,
            self.answered,
            self.skipped,
            self.errors,
            self.timeouts,
            self.unexpected,
            self.failures,
            self.table()
        )
    }

    /// One line per sample: seconds, answered, each process's MiB, the isolate's wasm memory and
    /// what it holds.
    pub fn table(&self) -> String {
        let mut out = String::from("     t  answered  rss (MiB)                  isolate (MiB)\n");
        for s in &self.samples {
            let rss: Vec<String> = s.rss.iter().map(|r| format!("{} {:.0}", r.role, r.kib as f64 / 1024.0)).collect();
            let isolate = s.isolate.as_ref().map_or("-".to_owned(), |i| {
                format!("wasm {:.1}, held {:.1}", i.wasm_bytes as f64 / MIB, i.held.total as f64 / MIB)
            });
            out.push_str(&format!("{:>5}s {:>9}  {:<26} {isolate}\n", s.at.as_secs(), s.answered, rss.join(", ")));
        }
        out
    }
}

/// The workerd processes under `root_pid` (wrangler's node process), with their roles.
pub fn workerd_processes(root_pid: u32) -> Vec<(u32, String)> {
    procs::descendants_named(&procs::processes(), root_pid, "workerd")
        .into_iter()
        .map(|pid| {
            // wrangler starts the edge's workerd with an inspector; its proxy's without.
            let worker = procs::cmdline(pid).iter().any(|a| a.starts_with("--inspector-addr"));
            (pid, if worker { "worker" } else { "proxy" }.to_owned())
        })
        .collect()
}

const MIB: f64 = 1024.0 * 1024.0;

/// A sample of the processes' memory and the isolate's report from the edge at `base`.
pub async fn sample(processes: &[(u32, String)], base: &str, at: Duration, answered: u64) -> Sample {
    let http = reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap();
    Sample {
        at,
        answered,
        rss: processes
            .iter()
            .map(|(pid, role)| Rss { role: role.clone(), kib: procs::rss_kib(*pid).unwrap_or(0) })
            .collect(),
        isolate: crate::edge::isolate_report(&http, base).await.ok(),
    }
}

/// Drives `load` against the edge at `base` for `filter`, whose stored keys include `present`,
/// sampling the memory of the workerd processes under `wrangler_pid`.
pub async fn drive(base: &str, filter: &str, present: &[String], wrangler_pid: u32, load: &Load) -> Report {
    let processes = workerd_processes(wrangler_pid);
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(load.max_in_flight as usize)
        .timeout(Duration::from_secs(15))
        .build()
        .unwrap();
    let present = Arc::new(present.to_vec());
    let counts = Arc::new(Counts::default());
    let mut report = Report { samples: vec![sample(&processes, base, Duration::ZERO, 0).await], ..Report::default() };
    let started = Instant::now();
    let interval = Duration::from_secs_f64(1.0 / f64::from(load.rate.max(1)));
    let mut next_sample = load.sample_every;
    let mut n: u64 = 0;
    while started.elapsed() < load.duration {
        let due = started + interval.mul_f64(n as f64);
        tokio::time::sleep_until(due.into()).await;
        n += 1;
        if started.elapsed() >= next_sample {
            report.samples.push(sample(&processes, base, started.elapsed(), counts.answered.load(Relaxed)).await);
            next_sample += load.sample_every;
        }
        if counts.in_flight.load(Relaxed) >= load.max_in_flight {
            report.skipped += 1;
            continue;
        }
        report.sent += 1;
        counts.in_flight.fetch_add(1, Relaxed);
        let request = one_request(&http, base, filter, &present, load);
        let counts = counts.clone();
        tokio::spawn(async move {
            match request.send().await {
                Ok(r) => {
                    let status = r.status().as_u16();
                    let _ = r.bytes().await;
                    counts.answered.fetch_add(1, Relaxed);
                    if status != 200 && status != 404 {
                        counts.unexpected.fetch_add(1, Relaxed);
                    }
                }
                Err(e) => {
                    let n = if e.is_timeout() { &counts.timeouts } else { &counts.errors };
                    n.fetch_add(1, Relaxed);
                    let mut failures = counts.failures.lock().unwrap();
                    if failures.len() < 5 {
                        failures.push(format!("{e:?}"));
                    }
                }
            }
            counts.in_flight.fetch_sub(1, Relaxed);
        });
    }
    // Let what is in flight finish, then the last sample.
    let drain = Instant::now();
    while counts.in_flight.load(Relaxed) > 0 && drain.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    report.samples.push(sample(&processes, base, started.elapsed(), counts.answered.load(Relaxed)).await);
    report.answered = counts.answered.load(Relaxed);
    report.errors = counts.errors.load(Relaxed);
    report.timeouts = counts.timeouts.load(Relaxed);
    report.failures = counts.failures.lock().unwrap().clone();
    report.unexpected = counts.unexpected.load(Relaxed);
    report
}

#[derive(Default)]
struct Counts {
    in_flight: AtomicU64,
    answered: AtomicU64,
    errors: AtomicU64,
    timeouts: AtomicU64,
    unexpected: AtomicU64,
    failures: std::sync::Mutex<Vec<String>>,
}

/// The header naming a request with a stored key in it, which the edge forwards to the
/// origin: the null edge makes a subrequest for each such request, so that both workers make
/// about as many (the edge ignores it).
pub const FORWARDED_HEADER: &str = "x-bloomgate-test-forwarded";

fn one_request(
    http: &reqwest::Client,
    base: &str,
    filter: &str,
    present: &[String],
    load: &Load,
) -> reqwest::RequestBuilder {
    let stored = std::cell::Cell::new(false);
    let pick = |share: f64| {
        if !present.is_empty() && rand::random::<f64>() < share {
            stored.set(true);
            present[rand::random_range(0..present.len())].clone()
        } else {
            crate::random_keys(1).remove(0)
        }
    };
    let request = if rand::random::<f64>() < load.batch_share {
        let keys: Vec<String> = (0..20).map(|_| pick(1.0 / 3.0)).collect();
        http.post(format!("{base}/v1/filters/{filter}/lookups")).json(&serde_json::json!({ "keys": keys }))
    } else {
        http.get(format!("{base}/v1/filters/{filter}/keys/{}", pick(load.present_share)))
    };
    if stored.get() {
        request.header(FORWARDED_HEADER, "1")
    } else {
        request
    }
}

/// Starts an origin on the test services with a filter of 20,000 stored keys and an edge in
/// front of it (`LOG_REQUESTS` as given), drives the load and prints what it saw.
pub async fn on_a_fresh_stack(load: &Load, log_requests: bool) -> Report {
    let origin = crate::origin::TestOrigin::on_services(|_| {}).await;
    let mut options = crate::edge::Options::new(2);
    options.vars.push(("LOG_REQUESTS".into(), log_requests.to_string()));
    let edge = crate::edge::Wrangler::start_with(&origin.base, crate::origin::EDGE_SECRET, options).await;
    let filter = crate::unique_filter("memory");
    origin.create_filter(&filter, 1_000_000, 0.01).await;
    let present = crate::random_keys(20_000);
    origin.insert_all(&filter, &present).await;
    let processes = workerd_processes(edge.pid());
    assert!(processes.iter().any(|(_, role)| role == "worker"), "no workerd found under wrangler: {processes:?}");
    let report = drive(&edge.base, &filter, &present, edge.pid(), load).await;
    eprintln!("{}", report.summary(load));
    report
}

/// The null edge (tests/fixtures/null-edge): a worker that answers every lookup "not seen"
/// with no work and no subrequest, served by `wrangler dev` exactly as the edge is.
pub const NULL_EDGE: &str = "tests/fixtures/null-edge";

/// The edge and the null edge under the same load at the same time, each under its own
/// `wrangler dev`: `(edge, null edge)`. `wrangler dev`'s workerd processes grow with the
/// requests they serve whatever the worker (about 2 MiB per 100 requests each, with wrangler
/// 4.164), so the edge's own growth is what it grows beyond the null edge in the same run.
pub async fn beside_the_null_edge(load: &Load) -> (Report, Report) {
    let origin = crate::origin::TestOrigin::on_services(|_| {}).await;
    let mut options = crate::edge::Options::new(2);
    options.vars.push(("LOG_REQUESTS".into(), "false".into()));
    let edge = crate::edge::Wrangler::start_with(&origin.base, crate::origin::EDGE_SECRET, options.clone()).await;
    let null = crate::edge::Wrangler::start_with(
        &origin.base,
        crate::origin::EDGE_SECRET,
        crate::edge::Options { build: Some(NULL_EDGE.into()), ..options },
    )
    .await;
    let filter = crate::unique_filter("memory");
    origin.create_filter(&filter, 1_000_000, 0.01).await;
    let present = crate::random_keys(20_000);
    origin.insert_all(&filter, &present).await;
    for wrangler in [&edge, &null] {
        let processes = workerd_processes(wrangler.pid());
        assert!(processes.iter().any(|(_, role)| role == "worker"), "no workerd found under wrangler: {processes:?}");
    }
    let (ours, control) = tokio::join!(
        drive(&edge.base, &filter, &present, edge.pid(), load),
        drive(&null.base, &filter, &present, null.pid(), load)
    );
    for (name, report) in [("edge", &ours), ("null edge", &control)] {
        eprintln!("{name}, {}", report.summary(load));
    }
    (ours, control)
}
