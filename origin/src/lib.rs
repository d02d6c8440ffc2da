//! bloomgate origin: answers the lookups the edge cannot, owns the shared filter in Redis and
//! the write path into Cassandra.
//!
//! # Layout
//! Listed from the bottom up: each module imports only modules listed before it (a module
//! never imports one that depends on it). Inside a folder, `mod.rs` owns the folder's type and
//! its files each add one part of it.
//!
//! - [`planted`]: known bugs for the negative controls (test builds only): the hooks in the
//!   write path (the filter add, the read leases' wait), the read barrier and the incarnation
//!   check.
//! - [`clock`]: wall-clock milliseconds, the one clock of generation numbers and ages.
//! - [`cluster_version`]: the version every origin of a cluster has agreed to, what it asks of
//!   each, and when `upgrade finish` may raise it (pure).
//! - [`lease`]: read leases on local copies: the terms a generation records, the reader's check
//!   and the writer's wait, and the argument why no acknowledged key is missed; the boot clock
//!   they are timed on (`boot_clock`), and its check against Redis's clock (`clock_check`).
//! - [`read_mostly`]: a map by filter name that lookups read without a lock or a shared write.
//! - [`distinct_keys`]: how many distinct keys lookups named, in a kilobyte (a HyperLogLog sketch).
//! - [`config`]: the settings, their defaults and limits (`config/mod.rs`); loading them from
//!   defaults, a TOML file, the environment and flags (`load`), refusing unknown
//!   `BLOOMGATE_*` names (`env_names`); checking them (`validate`), the stores' TLS files,
//!   credentials and the settings that would break the promise among them (`stores`).
//! - [`sizing`]: the size limits every filter's params must meet.
//! - [`build_progress`]: how far a rebuild has come, as published for every origin's stats.
//! - [`store`]: the two backends behind traits: the shared filter and the database.
//!   - `roles`: the filter store's roles, one trait per path that calls it.
//!   - `state`: a filter's generations and which of them may be read or written.
//!   - `drop_record`: what a drop leaves in the database for good, and its format.
//!   - `recent_writes`: the log of recent writes recovery replays, its buckets and format.
//!   - `checkpoint`: a generation's segments saved in the database, and whether a checkpoint
//!     may seed a recovery.
//!   - `run_board`: a rebuild's runs of segments posted for any origin to build, and why
//!     sharing them loses no key.
//!   - `store/redis/`: the filter in Redis or a Redis Cluster: the single link (`link`), the
//!     cluster (`cluster`), how every call goes (`conn`), the Lua scripts (`scripts`,
//!     `scripts/*.lua`), the key names (`keys`), a filter's state (`state`), one file
//!     per role (`lookup`, `write`, `feed`, `stats`, `lifecycle`).
//!   - `store/cassandra/`: the database in Cassandra: connecting (`connect`), the schema's
//!     versions (`migrations`) and applying them (`migrate`), the columns checked on an
//!     unversioned keyspace (`schema`), a definition's row and format (`definition`), reads
//!     meeting writes (`consistency`), the statements (`statements`), a rebuild's scan
//!     (`scan`), a drop's deletes (`drop`), the order of a key's writes and deletes
//!     (`write_order`), the cluster version and the log (`cluster`), checkpoints
//!     (`checkpoints`).
//!   - `store/embedded/`: the quick start's filter in process (`memory`) and keys in a redb
//!     file (`key_file`).
//!   - `connecting`: a database connected in the background, an outage until it answers.
//!   - `tls`: the stores' TLS configurations, from the configured files.
//! - [`metrics`]: Prometheus metrics, one file per concern (`lookups`, `edge_feed`, `writes`,
//!   `requests`, `filters`, `rebuilds`, `recoveries`, `copies`, `leases`, `admission`), each with its
//!   registration table, and the process's own `process_*` metrics (`process`); the counters,
//!   gauge and histogram the request path writes, striped per thread (`striped`).
//! - [`status_history`]: the samples the status page plots.
//! - [`rebuild`]: online rebuild into a new generation, and the argument why it loses no key:
//!   the lease (`lease`), then one file per phase (`name`, `fill`, `switch`); a recovery's
//!   fill from a checkpoint and the log instead of a scan (`replay`); a fill in runs of
//!   segments claimed from a board (`runs`), and a run built for a rebuild another origin
//!   started (`help`); `tests`: a rebuild within a memory budget, and one shared, in process.
//! - [`error`]: the one error type, rendered as problem+json.
//! - [`def_cache`]: filter definitions, cached with a bound on what unknown names cost.
//! - [`local_copy`]: the filters' bits held in process, current behind a read barrier: a "no"
//!   without a Redis call per lookup, or under a read lease without one at all (`rounds`: the
//!   barrier's bookkeeping; `held`: one copy; `load`: loading one; `tail`: keeping one current
//!   and its lease alive; `leased_tests` and `load_tests`: a leased copy on a hand-moved clock,
//!   and a load superseded midway, in process, as tests).
//! - [`gate`]: the paths through the two stores, behind the one `Gate`: lookups (`lookup`:
//!   filter first, database on "maybe" or when the filter cannot answer; `lookup_record`: the
//!   one place a lookup is counted), writes (`write`:
//!   filter first, then database), the edge's manifests, journal chunks and segments
//!   (`edge_feed`), the shared feed's sealed chunk pages and segments at an epoch
//!   (`sealed_feed`), a filter's stats (`stats`), filters created, listed and dropped
//!   (`filters`, with why a drop never lets an old bit or cache answer "no"), and the one door
//!   to a rebuild (`rebuilds`); a checkpoint round (`checkpoints`); the cluster version as
//!   this origin reads it (`cluster`).
//! - [`recovery`]: the background check that rebuilds lost or drifting filters on its own:
//!   the decision (`reason`, pure) from the facts (`health`); and the checkpointer
//!   (`checkpoints`), which keeps each filter's checkpoint recent.
//! - [`auth`]: writer and ops tokens, and the edge secret, as extractors.
//! - [`request_metrics`]: every request counted, timed and held in the in-flight gauge.
//! - [`admission`]: the in-flight caps derived from the memory budget (`budget`: the cgroup's
//!   limit or the setting; `cost`: each kind of request's measured worst case; `caps`: the
//!   budget divided), and the layer that admits a request or answers 429 (`limit`; lookups'
//!   places in flight as one atomic counter, `in_flight`).
//! - [`connection_watchdog`]: the slow-client defence, one timer per connection.
//! - [`serve`]: the server loop with connection limits and header-read timeouts.
//! - [`routes`]: the HTTP API, one file per resource (`keys`, `batch`, `filters`, `edge`,
//!   `ops`, `status`, `openapi`; `refusals`: the 401/403/429 answers the OpenAPI document
//!   describes once for every endpoint; `lookup_lane`: the single-key lookup with its admission
//!   and request metrics in one handler, no layers), and the extractors whose rejections are
//!   problem+json.
//! - This file: the wiring: [`build_state`] derives the caps and connects the stores, [`app`]
//!   puts the routes behind their layers, [`run`] serves them.
//!
//! The binary (`main.rs`) parses the command line and runs a command; everything the command
//! line alone uses lives in its `cli/` folder: the commands (`serve`, `filters`, `keys`,
//! `upgrade`: the cluster version read and raised, and
//! `schema`: the Cassandra schema printed or applied), every setting as a flag
//! (`config_flags`), the bulk loader (`bulk_load`) and the stats table (`stats_table`).
#![forbid(unsafe_code)]

pub mod admission;
pub mod auth;
pub mod build_progress;
pub mod clock;
pub mod cluster_version;
pub mod config;
pub mod connection_watchdog;
pub mod def_cache;
pub mod distinct_keys;
pub mod error;
pub mod gate;
pub mod lease;
pub mod local_copy;
pub mod metrics;
pub mod planted;
pub mod read_mostly;
pub mod rebuild;
pub mod recovery;
pub mod request_metrics;
pub mod routes;
pub mod serve;
pub mod sizing;
pub mod status_history;
pub mod store;

use admission::{Admission, Caps, MemoryLimit};
use axum::error_handling::HandleErrorLayer;
use axum::extract::DefaultBodyLimit;
use axum::http::Request;
use axum::{BoxError, Router};
use bloomgate_client::paths;
use config::{Config, FilterHome};
use error::AppError;
use gate::{Gate, GateSettings};
use rebuild::RebuildOptions;
use routes::AppState;
use std::future::Future;
use std::sync::Arc;
use store::cassandra::{CassandraAccess, CassandraDatabase, CassandraSettings};
use store::embedded::{MemoryFilterStore, RedbDatabase};
use store::redis::{RedisAccess, RedisFilterStore, RedisSettings};
use store::{Database, FilterStore, Generation, JournalRetention, LifecycleStore, WriteStore};
use tokio::net::TcpListener;
use tower::ServiceBuilder;
use tower_http::trace::TraceLayer;

/// Derives the in-flight caps, connects the stores named in `config` (or the embedded ones)
/// and builds the app state. Stores that do not answer yet are connected in the background:
/// the origin starts anyway, not ready until one of them answers (see `routes::ops`).
pub async fn build_state(config: Config) -> anyhow::Result<AppState> {
    config.validate()?;
    store::tls::crypto();
    error::set_retry_after(config.retry_after_secs);
    if config.single_origin && config.database_is_shared() && config.filter_home() == FilterHome::InProcess {
        tracing::warn!(
            "single_origin: the filter lives in this process over a shared database. Start no second origin on this database: it would answer \"not seen\" for keys written through this one"
        );
    }
    let in_process = config.filter_home() == FilterHome::InProcess;
    // Local copies only make sense of a filter in another process.
    let local_copies_wanted = if in_process { 0 } else { config.local_copy_max_bytes };
    let caps = caps_for(&config, local_copies_wanted)?;
    let embedded_keys = if config.database_is_shared() {
        None
    } else {
        let path = config.data_dir.join("keys.redb");
        tracing::info!(path = %path.display(), "no cassandra_nodes configured: keys in an embedded file");
        Some(Arc::new(RedbDatabase::open(&path)?))
    };
    let keys: Arc<dyn Database> = match &embedded_keys {
        Some(redb) => redb.clone(),
        None => {
            let settings = cassandra_settings(&config)?;
            store::connecting::ConnectingDatabase::start("Cassandra", move || {
                let settings = settings.clone();
                async move { Ok(Arc::new(CassandraDatabase::connect(&settings).await?) as Arc<dyn Database>) }
            })
            .await
        }
    };
    let filters: Arc<dyn FilterStore> = match in_process {
        false => {
            let redis = RedisFilterStore::connect(&redis_settings(&config)?).await?;
            let checked = redis.clone();
            tokio::spawn(async move { checked.check_eviction_policy().await });
            Arc::new(redis)
        }
        true => {
            tracing::info!("no redis_url configured: the filter lives in this process");
            let memory = Arc::new(MemoryFilterStore::new(journal_retention(&config)));
            if let Some(redb) = &embedded_keys {
                rebuild_memory_filters(&memory, redb, config.max_filter_bytes, config.journal_enabled).await?;
            }
            memory
        }
    };
    let settings = GateSettings { local_copy_max_bytes: caps.local_copies, ..GateSettings::from_config(&config) };
    let gate = Arc::new(Gate::new(filters, keys, settings));
    caps.export(&gate.metrics);
    tokio::spawn(gate::cluster::watch(gate.clone()));
    // Checkpoints are kept where they can seed a recovery: in a shared database, of a filter
    // in Redis.
    if config.checkpoint_interval_ms > 0 && config.database_is_shared() && !in_process {
        let interval = std::time::Duration::from_millis(config.checkpoint_interval_ms);
        tokio::spawn(recovery::checkpoints::run(gate.clone(), interval));
    }
    if config.recovery_interval_ms > 0 {
        let interval = std::time::Duration::from_millis(config.recovery_interval_ms);
        let (thresholds, options) = (
            recovery::Thresholds::from_config(&config),
            RebuildOptions::from_config(&config, false).recovering(&config),
        );
        tokio::spawn(recovery::run(gate.clone(), thresholds, interval, options, config.recovery_max_rebuilds));
    }
    Ok(AppState { gate, config: Arc::new(config), caps: Arc::new(caps) })
}

/// How to reach Cassandra: the nodes, schema and consistency settings, the credentials (the
/// password read from its file) and the TLS configuration (its files read and checked now).
/// What the origin connects with, and `bloomgate-origin schema apply` too.
pub fn cassandra_settings(config: &Config) -> anyhow::Result<CassandraSettings> {
    let credentials = match (&config.cassandra_user, config.cassandra_password()?) {
        (Some(user), Some(password)) => Some((user.clone(), password)),
        _ => None,
    };
    let tls = match config.cassandra_tls {
        true => Some(Arc::new(
            store::tls::cassandra_config(config.cassandra_tls_files(), config.cassandra_tls_server_name.as_deref())
                .map_err(anyhow::Error::msg)?,
        )),
        false => None,
    };
    Ok(CassandraSettings {
        nodes: config.cassandra_nodes.clone(),
        keyspace: config.cassandra_keyspace.clone(),
        replication: config.cassandra_replication.clone(),
        manage_schema: config.cassandra_manage_schema,
        consistency: config.consistency()?,
        timeout: config.cassandra_timeout(),
        delete_margin: std::time::Duration::from_millis(config.delete_skew_margin_ms),
        access: CassandraAccess { credentials, tls },
    })
}

/// How to reach Redis (or a Redis Cluster), with its credentials and TLS material.
fn redis_settings(config: &Config) -> anyhow::Result<RedisSettings> {
    let uses_tls = config.redis_url.iter().chain(&config.redis_cluster_nodes).any(|u| u.starts_with("rediss://"));
    let tls = match uses_tls {
        true => Some(store::tls::redis_certificates(config.redis_tls()).map_err(anyhow::Error::msg)?),
        false => None,
    };
    Ok(RedisSettings {
        journal: journal_retention(config),
        url: config.redis_url.clone().unwrap_or_default(),
        cluster_nodes: config.redis_cluster_nodes.clone(),
        min_replicas_acked: config.redis_min_replicas_acked,
        timeout: config.redis_timeout(),
        write_timeout: config.redis_write_timeout(),
        access: RedisAccess { user: config.redis_user.clone(), password: config.redis_password()?, tls },
    })
}

/// The in-flight caps for `config` on this machine (its cgroup's memory limit, or the
/// `memory_budget_bytes` setting), with local copies of at most `local_copies_wanted` bytes;
/// logged in one line with what they come from.
pub fn caps_for(config: &Config, local_copies_wanted: u64) -> Result<Caps, admission::CapsError> {
    let limit = MemoryLimit::of_this_process(config.memory_budget_bytes);
    let caps = Caps::derive(config, limit, local_copies_wanted)?;
    tracing::info!(
        budget_bytes = caps.limit.bytes,
        lookups = caps.cap(metrics::Kind::Lookup),
        batch_writes = caps.cap(metrics::Kind::BatchWrite),
        batch_lookups = caps.cap(metrics::Kind::BatchLookup),
        "{caps}"
    );
    if caps.explicit.is_some_and(|n| n as u64 * caps.costs.batch_lookup > caps.writes_and_batches) {
        tracing::warn!("max_in_flight admits more writes and batches than the memory budget holds at worst");
    }
    Ok(caps)
}

/// How long insert journals keep their entries, as configured.
fn journal_retention(config: &Config) -> JournalRetention {
    JournalRetention {
        max_entries: config.journal_max_entries,
        max_age: std::time::Duration::from_millis(config.journal_max_age_ms),
    }
}

/// The in-process filter does not survive a restart: rebuild it from the key file, so the quick
/// start keeps answering "no" from the filter after a restart. A filter that cannot be built
/// (too large for `max_filter_bytes` or for this machine's memory) is logged and left without
/// bits: its lookups fall through to the key file, and the origin still starts.
async fn rebuild_memory_filters(
    memory: &MemoryFilterStore,
    keys: &RedbDatabase,
    max_filter_bytes: u64,
    journal: bool,
) -> anyhow::Result<()> {
    let incarnation = memory.incarnation().await?;
    for def in keys.filter_defs()? {
        let options = bloomgate_filter::SizingOptions { seed: rand::random(), segment_bytes: def.segment_bytes };
        let params = bloomgate_filter::Params::for_capacity_with(def.capacity, def.fp_rate, options)?;
        if let Err(e) = sizing::check_size(&params, max_filter_bytes) {
            tracing::error!(filter = %def.name, cause = %e, "filter not rebuilt in process; lookups read the key file");
            continue;
        }
        // In process: no other origin holds a copy, so no read lease to wait out.
        let meta = Generation { generation: clock::now_ms(), params, incarnation, journal, lease: None };
        if let Err(e) = memory.create_generation(&def.name, meta).await {
            tracing::error!(filter = %def.name, cause = %e, "filter not rebuilt in process; lookups read the key file");
            continue;
        }
        let stored = keys.keys_of(&def.name)?;
        let hashes = stored.iter().map(|k| bloomgate_filter::hash_key(k, params.seed)).collect();
        memory.add(&def.name, meta, hashes).await?;
        let state = store::FilterState { active: Some(meta), ..store::FilterState::default() };
        memory.replace_state(&def.name, None, state).await?;
        tracing::info!(filter = %def.name, keys = stored.len(), "rebuilt in-process filter from the key file");
    }
    Ok(())
}

/// The whole HTTP app on one listener: the API and liveness, and, unless an admin listener
/// is configured (`admin_listen`), the operators' routes beside them (see [`admin_app`]).
pub fn app(state: AppState) -> Router {
    match state.config.admin_listen {
        Some(admin) => public_app(state).fallback(move |uri: axum::http::Uri| async move {
            let admin_paths = [paths::METRICS, paths::READYZ, paths::OPENAPI, "/status", "/status/data"];
            match admin_paths.contains(&uri.path()) {
                true => AppError::NotFound(format!("{} is served on the admin listener ({admin})", uri.path())),
                false => no_such_route(),
            }
        }),
        None => public_app(state.clone()).merge(admin_routes(state)).fallback(|| async { no_such_route() }),
    }
}

/// The API (`/v1`) and liveness: what the public listener serves.
///
/// Single-key lookups, the path every "no" takes, carry only what they need, in one handler
/// (`routes::lookup_lane`): admission into their own limiter (apart from writes and batches,
/// so these cannot shed them) and the request metrics, without layers. No request timeout (a
/// timer per request): each store call on their path has its own (`redis_timeout_ms`,
/// `cassandra_timeout_ms`); no trace span. Everything else keeps the whole stack.
fn public_app(state: AppState) -> Router {
    let config = state.config.clone();
    let admission = Admission::new(&state.caps, state.gate.metrics.clone(), state.config.max_body_bytes());
    let lookups = routes::lookup_lane::router(state.clone(), admission.clone());
    let api = Router::new()
        .merge(routes::keys::router())
        .merge(routes::filters::router())
        .merge(routes::edge::router())
        .with_state(state.clone())
        .layer(DefaultBodyLimit::max(config.max_body_bytes()))
        .layer(
            // Outermost first: errors → admission (429 above the cap) → timeout → trace.
            ServiceBuilder::new()
                .layer(timeout_errors())
                .layer(admission.layer())
                .timeout(config.request_timeout())
                .layer(TraceLayer::new_for_http().make_span_with(|req: &Request<_>| {
                    // Borrowed, not copied: this runs on every request, logged or not.
                    let path = req.extensions().get::<axum::extract::MatchedPath>().map_or("", |p| p.as_str());
                    tracing::debug_span!("request", method = %req.method(), path)
                })),
        );
    let tracked = request_metrics::TrackRequestsLayer::new(state.gate.metrics.clone());
    // The lookup lane counts its own requests: the rest is layered before it is merged in.
    let rest = Router::new().merge(api).merge(routes::ops::liveness_router()).layer(tracked);
    lookups.merge(rest)
}

/// What the admin listener serves: metrics, readiness, liveness, the OpenAPI document and the
/// status page. Nothing here needs a token, so it belongs on a port only operators reach.
pub fn admin_app(state: AppState) -> Router {
    admin_routes(state).merge(routes::ops::liveness_router()).fallback(|| async { no_such_route() })
}

fn admin_routes(state: AppState) -> Router {
    let tracked = request_metrics::TrackRequestsLayer::new(state.gate.metrics.clone());
    Router::new()
        .merge(routes::ops::router().with_state(state.clone()))
        .merge(routes::openapi::router().with_state(state.clone()))
        .merge(routes::status::router().with_state(state))
        .layer(tracked)
}

fn no_such_route() -> AppError {
    AppError::NotFound("no such route; see the README's API section".into())
}

/// Turns the timeout layer's error into the API's answer: 503 when a request ran out of time.
fn timeout_errors<S>() -> HandleErrorLayer<impl Fn(BoxError) -> std::future::Ready<AppError> + Clone, S> {
    HandleErrorLayer::new(move |err: BoxError| {
        std::future::ready(if err.is::<tower::timeout::error::Elapsed>() {
            AppError::Timeout
        } else {
            AppError::BadRequest(format!("request failed: {err}"))
        })
    })
}

/// Where the origin listens: the public listener, and the admin listener when `admin_listen`
/// is set.
pub struct Listeners {
    /// The API and liveness (and, without an admin listener, everything).
    pub public: TcpListener,
    /// Metrics, readiness, the OpenAPI document and the status page.
    pub admin: Option<TcpListener>,
}

impl Listeners {
    /// Binds the listeners `config` names.
    pub async fn bind(config: &Config) -> anyhow::Result<Listeners> {
        use anyhow::Context;
        let public =
            TcpListener::bind(config.listen).await.with_context(|| format!("cannot listen on {}", config.listen))?;
        let admin = match config.admin_listen {
            Some(address) => Some(
                TcpListener::bind(address).await.with_context(|| format!("cannot listen on admin_listen {address}"))?,
            ),
            None => None,
        };
        Ok(Listeners { public, admin })
    }
}

/// Serves until `shutdown` resolves, then finishes in-flight requests (for at most the request
/// timeout). With an admin listener configured, use [`run_listeners`].
pub async fn run(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    run_listeners(Listeners { public: listener, admin: None }, state, shutdown).await
}

/// [`run`] on the public listener and, if given, the admin listener, both until `shutdown`.
pub async fn run_listeners(
    listeners: Listeners,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    use futures::FutureExt;
    let limits = serve::ServeLimits {
        max_connections: state.config.max_connections,
        header_read_timeout: state.config.header_read_timeout(),
        drain: state.config.request_timeout(),
    };
    let shutdown = shutdown.boxed().shared();
    let admin = listeners.admin.map(|admin| {
        let serving = serve::serve(admin, admin_app(state.clone()), limits, shutdown.clone());
        tokio::spawn(serving)
    });
    let public = serve::serve(listeners.public, app(state), limits, shutdown).await;
    if let Some(admin) = admin {
        admin.await.map_err(std::io::Error::other)??;
    }
    public
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    /// The crate doc's lines.
    fn crate_doc() -> String {
        include_str!("lib.rs").lines().filter_map(|l| l.strip_prefix("//!")).collect::<Vec<_>>().join("\n")
    }

    /// Every `.rs` file below `dir`.
    fn sources(dir: &Path) -> Vec<PathBuf> {
        let mut out = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap().map(Result::unwrap) {
            let path = entry.path();
            match path.is_dir() {
                true => out.extend(sources(&path)),
                false if path.extension().is_some_and(|e| e == "rs") => out.push(path),
                false => {}
            }
        }
        out
    }

    fn src() -> PathBuf {
        PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/src"))
    }

    /// Every module of the crate (and of the binary's `cli/`) is named in the crate doc's
    /// layout, so the layout cannot fall behind the tree.
    #[test]
    fn the_crate_doc_names_every_module() {
        let doc = crate_doc();
        let missing: Vec<PathBuf> = sources(&src())
            .into_iter()
            .filter(|path| {
                let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
                !["lib", "main", "mod", "tests"].contains(&stem) && !doc.contains(&format!("`{stem}`"))
            })
            .collect();
        assert!(missing.is_empty(), "the crate doc's layout does not name {missing:?}");
    }

    /// No upward imports: the code of each top-level module (tests aside) names only modules
    /// the layout lists before it.
    #[test]
    fn each_module_imports_only_modules_listed_before_it() {
        let doc = crate_doc();
        let order: Vec<&str> = doc.lines().filter_map(|l| l.strip_prefix(" - [`")?.split('`').next()).collect();
        let mut upward = Vec::new();
        for path in sources(&src()) {
            let relative = path.strip_prefix(src()).unwrap();
            let top = relative.components().next().unwrap().as_os_str().to_str().unwrap().trim_end_matches(".rs");
            let Some(at) = order.iter().position(|m| *m == top) else { continue };
            let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
            if stem == "tests" {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            let code = text.split("#[cfg(test)]").next().unwrap_or_default();
            for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
                for used in line.split("crate::").skip(1) {
                    let module = used.split(|c: char| !c.is_alphanumeric() && c != '_').next().unwrap_or_default();
                    if order.iter().position(|m| *m == module).is_some_and(|used_at| used_at > at) {
                        upward.push(format!("{}: {module}", relative.display()));
                    }
                }
            }
        }
        assert!(upward.is_empty(), "modules importing modules listed after them: {upward:?}");
    }
}
