//! Operations: `/metrics` (Prometheus, OpenMetrics text), `/healthz` (the process is up: what a
//! liveness probe asks, nothing of the stores), `/readyz` (the origin can answer lookups: the
//! filter store or the database answers; what a load balancer or readiness probe asks).
//!
//! Ready needs one store, not both: with the database down every "no" still comes from the
//! filter (only the "maybe"s are 503), and with the filter down every lookup falls through to
//! the database. Taking an origin out of rotation because one store is down would remove every
//! origin exactly when bloomgate helps most.

use super::AppState;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use bloomgate_client::paths;
use serde_json::json;

/// Metrics and readiness: the operators' routes (on the admin listener when there is one).
pub fn router() -> Router<AppState> {
    Router::new().route(paths::METRICS, get(metrics)).route(paths::READYZ, get(readyz))
}

/// Liveness, on every listener: the process is up, whatever its stores say.
pub fn liveness_router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new().route(paths::HEALTHZ, get(healthz))
}

async fn metrics(State(s): State<AppState>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, crate::metrics::CONTENT_TYPE)], s.gate.metrics.render())
}

async fn healthz() -> impl IntoResponse {
    Json(json!({ "ok": true }))
}

/// How long `/readyz` waits for each store.
const READY_PING_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(1000);

async fn readyz(State(s): State<AppState>) -> impl IntoResponse {
    // Each store gets a bounded time: a paused store must read as down within a probe's
    // timeout (2 s in deploy/kubernetes), not hold the answer until the driver gives up.
    let (database, filter) = tokio::join!(within(s.gate.database_ping()), within(s.gate.filter_store_ping()));
    let readiness = Readiness::of(database.is_ok(), filter.is_ok());
    let status = if readiness.ready() { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    let body = json!({
        "ready": readiness.ready(),
        "reason": readiness.reason(),
        "database": database.map(|_| "ok".to_string()).unwrap_or_else(|e| e),
        "filter": filter.map(|_| "ok".to_string()).unwrap_or_else(|e| e),
        "cluster": cluster_standing(&s),
    });
    (status, Json(body))
}

/// The cluster version this origin read, the newest it knows, and what that lets it do: a
/// newer cluster leaves it ready (lookups still work) but refusing every change.
fn cluster_standing(s: &AppState) -> serde_json::Value {
    use crate::cluster_version::{Standing, CLUSTER_VERSION};
    let view = s.gate.cluster();
    let does = match view.standing() {
        Standing::Known { logs_recent_writes: true } => "writes are logged for recovery",
        Standing::Known { logs_recent_writes: false } => {
            "writes are not logged for recovery until `bloomgate-origin upgrade finish`"
        }
        Standing::Behind { .. } => {
            "the cluster is newer than this origin: every change is refused (503); upgrade this origin"
        }
    };
    json!({ "version": view.current(), "knows": CLUSTER_VERSION, "does": does })
}

/// A store's ping, or why it did not answer within [`READY_PING_TIMEOUT`].
async fn within<E: std::fmt::Display>(ping: impl std::future::Future<Output = Result<(), E>>) -> Result<(), String> {
    match tokio::time::timeout(READY_PING_TIMEOUT, ping).await {
        Ok(answer) => answer.map_err(|e| e.to_string()),
        Err(_) => Err(format!("no answer within {} ms", READY_PING_TIMEOUT.as_millis())),
    }
}

/// Whether the origin can answer lookups, from which stores answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Readiness {
    Both,
    FilterOnly,
    DatabaseOnly,
    Neither,
}

impl Readiness {
    fn of(database: bool, filter: bool) -> Readiness {
        match (database, filter) {
            (true, true) => Readiness::Both,
            (false, true) => Readiness::FilterOnly,
            (true, false) => Readiness::DatabaseOnly,
            (false, false) => Readiness::Neither,
        }
    }

    fn ready(self) -> bool {
        self != Readiness::Neither
    }

    fn reason(self) -> &'static str {
        match self {
            Readiness::Both => "the filter and the database answer",
            Readiness::FilterOnly => {
                "the database does not answer: \"no\" comes from the filter, \"maybe\" and writes are refused (503)"
            }
            Readiness::DatabaseOnly => "the filter does not answer: every lookup is asked of the database",
            Readiness::Neither => "neither the filter nor the database answers: no lookup can be answered",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Readiness;

    #[test]
    fn ready_while_either_store_answers() {
        assert!(Readiness::of(true, true).ready());
        assert!(Readiness::of(false, true).ready(), "a database outage keeps every 'no' flowing");
        assert!(Readiness::of(true, false).ready(), "a filter outage falls through to the database");
        assert!(!Readiness::of(false, false).ready());
        assert!(Readiness::of(false, false).reason().contains("no lookup"));
    }
}
