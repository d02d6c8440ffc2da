//! The floor the origin's "no" is compared with: axum alone on the same route, a 404 with a
//! small JSON body and the answered-by header, no work behind it (the negative-path bench's
//! floor, `tools/bench/src/servers.rs`). Shared by the allocation test and the lane's bench.

use axum::http::{HeaderValue, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use bloomgate_client::paths;

/// The floor's router.
pub fn floor() -> Router {
    async fn not_seen() -> impl IntoResponse {
        (
            StatusCode::NOT_FOUND,
            [
                ("content-type", HeaderValue::from_static("application/json")),
                ("x-bloomgate-answered-by", HeaderValue::from_static("floor")),
            ],
            r#"{"seen":false}"#,
        )
    }
    Router::new().route(paths::KEY, get(not_seen))
}
