//! bloomgate origin: answers the lookups the edge cannot, owns the shared filter in Redis and
//! the write path into Cassandra.
//!
//! # Layout
//! - [`config`]: the TOML / environment / flag configuration and its limits.
//! - [`def_cache`]: filter definitions, cached with a bound on what unknown names cost.
//! - [`gate`]: lookups and writes: filter first, database on "maybe" or when the filter is
//!   unavailable; the edge's manifest and segments; filters created, listed and dropped, and
//!   why a drop never lets an old bit or cache answer "no" (`gate/filters.rs`).
//! - [`local_copy`]: the filters' bits held in process, current behind a read barrier: a "no"
//!   without a Redis call per lookup.
//! - [`store`]: the filter store (Redis, or in process) and database (Cassandra, or redb).
//! - [`routes`]: the HTTP API, one file per resource.
//! - [`serve`]: the server loop with connection limits and header-read timeouts.
//! - [`sizing`]: the size limits every filter's params must meet.
//! - [`auth`]: writer tokens and the edge secret.
//! - [`error`]: the one error type, rendered as problem+json.
//! - [`metrics`]: Prometheus counters and the latency histogram.
//! - [`load`]: the bulk loader behind `bloomgate-origin load`.
//! - [`rebuild`]: online rebuild into a new generation, and the argument why it loses no key.
//! - [`recovery`]: the background check that rebuilds lost or drifting filters on its own.
//! - [`planted`]: known bugs for the history checker's negative controls (test builds only).
#![forbid(unsafe_code)]

pub mod auth;
pub mod build_progress;
pub mod clock;
pub mod config;
pub mod def_cache;
pub mod error;
pub mod gate;
pub mod local_copy;
pub mod metrics;
pub mod planted;
pub mod rebuild;
pub mod recovery;
pub mod request_metrics;
pub mod routes;
pub mod serve;
pub mod sizing;
pub mod status_history;
pub mod store;

use axum::error_handling::HandleErrorLayer;
use axum::extract::DefaultBodyLimit;
use axum::http::Request;
use axum::{BoxError, Router};
use config::Config;
use error::AppError;
use gate::{Gate, GateSettings};
use rebuild::RebuildOptions;
use routes::AppState;
use std::future::Future;
use std::sync::Arc;
use store::cassandra::{CassandraDatabase, CassandraSettings};
use store::embedded::{MemoryFilterStore, RedbDatabase};
use store::redis::{RedisFilterStore, RedisSettings};
use store::{Database, FilterMeta, FilterStore, JournalRetention, LifecycleStore, WriteStore};
use tokio::net::TcpListener;
use tower::ServiceBuilder;
use tower_http::trace::TraceLayer;

/// Connects the stores named in `config` (or the embedded ones) and builds the app state.
pub async fn build_state(config: Config) -> anyhow::Result<AppState> {
    config.validate()?;
    error::set_retry_after(config.retry_after_secs);
    let embedded_keys = if config.cassandra_nodes.is_empty() {
        let path = config.data_dir.join("keys.redb");
        tracing::info!(path = %path.display(), "no cassandra_nodes configured: keys in an embedded file");
        Some(Arc::new(RedbDatabase::open(&path)?))
    } else {
        None
    };
    let keys: Arc<dyn Database> = match &embedded_keys {
        Some(redb) => redb.clone(),
        None => {
            let settings = CassandraSettings {
                nodes: config.cassandra_nodes.clone(),
                keyspace: config.cassandra_keyspace.clone(),
                replication: config.cassandra_replication.clone(),
                manage_schema: config.cassandra_manage_schema,
                consistency: config.consistency()?,
                timeout: config.cassandra_timeout(),
            };
            Arc::new(CassandraDatabase::connect(&settings).await?)
        }
    };
    let redis_url = match config.redis_cluster_nodes.is_empty() {
        true => config.redis_url.clone(),
        false => Some(String::new()),
    };
    // Local copies only make sense of a filter in another process.
    let local_copy_max_bytes = if redis_url.is_some() { config.local_copy_max_bytes } else { 0 };
    let filters: Arc<dyn FilterStore> = match redis_url {
        Some(url) => {
            let redis = RedisFilterStore::connect(&RedisSettings {
                journal: journal_retention(&config),
                url,
                cluster_nodes: config.redis_cluster_nodes.clone(),
                min_replicas_acked: config.redis_min_replicas_acked,
                timeout: config.redis_timeout(),
                write_timeout: config.redis_write_timeout(),
            })
            .await?;
            redis.check_eviction_policy().await;
            Arc::new(redis)
        }
        None => {
            tracing::info!("no redis_url configured: the filter lives in this process");
            let memory = Arc::new(MemoryFilterStore::new(journal_retention(&config)));
            if let Some(redb) = &embedded_keys {
                rebuild_memory_filters(&memory, redb, config.max_filter_bytes, config.journal_enabled).await?;
            }
            memory
        }
    };
    let settings = GateSettings {
        cache_ttl: std::time::Duration::from_millis(config.meta_cache_ms),
        filter_enabled: config.filter_enabled,
        max_filter_bytes: config.max_filter_bytes,
        journal_enabled: config.journal_enabled,
        local_copy_max_bytes,
    };
    let gate = Arc::new(Gate::new(filters, keys, settings));
    if config.recovery_interval_ms > 0 {
        let interval = std::time::Duration::from_millis(config.recovery_interval_ms);
        let (thresholds, options) =
            (recovery::Thresholds::from_config(&config), RebuildOptions::from_config(&config, false));
        tokio::spawn(recovery::run(gate.clone(), thresholds, interval, options));
    }
    Ok(AppState { gate, config: Arc::new(config) })
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
        let meta = FilterMeta { generation: clock::now_ms(), params, incarnation, journal };
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

/// The whole HTTP app: API routes behind the overload layers, ops routes beside them.
///
/// Single-key lookups, the path every "no" takes, carry only what they need: load shedding and
/// the in-flight limit (one limit, shared with the rest of the API). No request timeout (a timer
/// per request): each store call on their path has its own (`redis_timeout_ms`,
/// `cassandra_timeout_ms`); no trace span. Everything else keeps the whole stack.
pub fn app(state: AppState) -> Router {
    let config = state.config.clone();
    let in_flight = Arc::new(tokio::sync::Semaphore::new(config.max_in_flight));
    let lookups = routes::keys::lookup_router().with_state(state.clone()).layer(
        ServiceBuilder::new()
            .layer(overload_errors(&state))
            .load_shed()
            .layer(tower::limit::GlobalConcurrencyLimitLayer::with_semaphore(in_flight.clone())),
    );
    let api = Router::new()
        .merge(routes::keys::router())
        .merge(routes::filters::router())
        .merge(routes::edge::router())
        .with_state(state.clone())
        .layer(DefaultBodyLimit::max(config.max_body_bytes()))
        .layer(
            // Outermost first: errors → load shed → concurrency limit → timeout → trace.
            ServiceBuilder::new()
                .layer(overload_errors(&state))
                .load_shed()
                .layer(tower::limit::GlobalConcurrencyLimitLayer::with_semaphore(in_flight))
                .timeout(config.request_timeout())
                .layer(TraceLayer::new_for_http().make_span_with(|req: &Request<_>| {
                    // Borrowed, not copied: this runs on every request, logged or not.
                    let path = req.extensions().get::<axum::extract::MatchedPath>().map_or("", |p| p.as_str());
                    tracing::debug_span!("request", method = %req.method(), path)
                })),
        );
    let tracked = request_metrics::TrackRequestsLayer::new(state.gate.metrics.clone());
    Router::new()
        .merge(lookups)
        .merge(api)
        .merge(routes::ops::router().with_state(state.clone()))
        .merge(routes::openapi::router().with_state(state.clone()))
        .merge(routes::status::router().with_state(state))
        .fallback(|| async { AppError::NotFound("no such route; see the README's API section".into()) })
        .layer(tracked)
}

/// Turns the overload layers' errors into the API's answers: 429 when shedding load, 503 when a
/// request ran out of time.
fn overload_errors<S>(
    state: &AppState,
) -> HandleErrorLayer<impl Fn(BoxError) -> std::future::Ready<AppError> + Clone, S> {
    let metrics = state.gate.metrics.clone();
    HandleErrorLayer::new(move |err: BoxError| {
        std::future::ready(if err.is::<tower::load_shed::error::Overloaded>() {
            metrics.requests.overloaded.inc();
            AppError::Overloaded
        } else if err.is::<tower::timeout::error::Elapsed>() {
            AppError::Timeout
        } else {
            AppError::BadRequest(format!("request failed: {err}"))
        })
    })
}

/// Serves until `shutdown` resolves, then finishes in-flight requests (for at most the request
/// timeout).
pub async fn run(
    listener: TcpListener,
    state: AppState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let limits = serve::ServeLimits {
        max_connections: state.config.max_connections,
        header_read_timeout: state.config.header_read_timeout(),
        drain: state.config.request_timeout(),
    };
    serve::serve(listener, app(state), limits, shutdown).await
}
