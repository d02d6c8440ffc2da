//! The API's OpenAPI description, generated from the handlers' annotations and the
//! `bloomgate-client` types they answer with (the same types a Rust client reads), served at
//! `/openapi.json`.

use super::{filters, keys, AppState};
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use std::sync::LazyLock;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::OpenApi;

/// The public and the writers' API (not the edge's routes, which only the edge calls).
#[derive(OpenApi)]
#[openapi(
    info(
        title = "bloomgate",
        description = "A Bloom-filter gate in front of a database: lookups answered \"not seen\" \
                       by the filter never reach the database. Errors are RFC 9457 problem details."
    ),
    paths(
        keys::lookup,
        keys::lookup_batch,
        keys::insert,
        keys::insert_batch,
        keys::delete,
        filters::list,
        filters::create,
        filters::stats,
        filters::rebuild,
        filters::drop_filter
    ),
    modifiers(&Tokens),
    tags(
        (name = "keys", description = "Lookups: public. Every answer carries Cache-Control: no-store."),
        (name = "writes", description = "Writes: a writer token (`Authorization: Bearer ...`)."),
        (name = "filters", description = "Filters: a writer token to create, rebuild and drop; a writer or ops token to list them and read stats.")
    )
)]
pub struct ApiDoc;

/// The bearer tokens, as the security schemes the routes name.
struct Tokens;

impl utoipa::Modify for Tokens {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        for (name, description) in [
            ("writer_token", "one of writer_tokens: writes, creates, drops, rebuilds, and every read"),
            ("ops_token", "one of ops_tokens: read-only (stats, the filter list); refused with 403 on writes"),
        ] {
            let bearer = HttpBuilder::new().scheme(HttpAuthScheme::Bearer).description(Some(description));
            components.add_security_scheme(name, SecurityScheme::Http(bearer.build()));
        }
    }
}

/// The description as served (rendered once).
static DOCUMENT: LazyLock<String> =
    LazyLock::new(|| ApiDoc::openapi().to_pretty_json().unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}")));

/// Routes of this resource.
pub fn router() -> Router<AppState> {
    Router::new().route(bloomgate_client::paths::OPENAPI, get(document))
}

async fn document() -> impl IntoResponse {
    ([(header::CONTENT_TYPE, bloomgate_client::media::JSON)], DOCUMENT.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn document() -> Value {
        serde_json::from_str(&DOCUMENT).unwrap()
    }

    #[test]
    fn every_public_and_writer_route_is_described() {
        let doc = document();
        let mut described: Vec<String> = Vec::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for method in item.as_object().unwrap().keys() {
                described.push(format!("{} {path}", method.to_uppercase()));
            }
        }
        described.sort();
        assert_eq!(
            described,
            [
                "DELETE /v1/filters/{filter}",
                "DELETE /v1/filters/{filter}/keys/{key}",
                "GET /v1/filters",
                "GET /v1/filters/{filter}/keys/{key}",
                "GET /v1/filters/{filter}/stats",
                "HEAD /v1/filters/{filter}/keys/{key}",
                "POST /v1/filters/{filter}/keys",
                "POST /v1/filters/{filter}/lookups",
                "POST /v1/filters/{filter}/rebuild",
                "PUT /v1/filters/{filter}",
                "PUT /v1/filters/{filter}/keys/{key}",
            ]
        );
    }

    #[test]
    fn every_reference_names_a_described_schema() {
        let doc = document();
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        for name in [
            "KeyAnswer",
            "Lookups",
            "KeyStored",
            "KeysStored",
            "KeyDeleted",
            "FilterStats",
            "FilterList",
            "FilterDropped",
            "Problem",
            "CreateFilter",
        ] {
            assert!(schemas.contains_key(name), "{name} missing from {:?}", schemas.keys().collect::<Vec<_>>());
        }
        let text = doc.to_string();
        for reference in text.split("\"$ref\":\"").skip(1) {
            let target = reference.split('"').next().unwrap();
            let name = target.strip_prefix("#/components/schemas/").unwrap_or_else(|| panic!("{target}"));
            assert!(schemas.contains_key(name), "{target} is not described");
        }
        assert!(doc["components"]["securitySchemes"]["writer_token"].is_object());
        assert!(doc["components"]["securitySchemes"]["ops_token"].is_object());
        let answerers = &schemas["AnsweredBy"]["enum"];
        assert_eq!(answerers, &serde_json::json!(["filter", "database", "edge"]), "{answerers}");
    }
}
