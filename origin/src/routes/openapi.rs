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
        filters::create,
        filters::stats,
        filters::rebuild
    ),
    modifiers(&WriterToken),
    tags(
        (name = "keys", description = "Lookups: public."),
        (name = "writes", description = "Writes: a writer token (`Authorization: Bearer ...`)."),
        (name = "filters", description = "Filters: a writer token.")
    )
)]
pub struct ApiDoc;

/// The writer token, as the security scheme the write routes name.
struct WriterToken;

impl utoipa::Modify for WriterToken {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let bearer = HttpBuilder::new().scheme(HttpAuthScheme::Bearer).description(Some("one of writer_tokens"));
        components.add_security_scheme("writer_token", SecurityScheme::Http(bearer.build()));
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
                "DELETE /v1/filters/{filter}/keys/{key}",
                "GET /v1/filters/{filter}/keys/{key}",
                "GET /v1/filters/{filter}/stats",
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
        for name in
            ["KeyAnswer", "Lookups", "KeyStored", "KeysStored", "KeyDeleted", "FilterStats", "Problem", "CreateFilter"]
        {
            assert!(schemas.contains_key(name), "{name} missing from {:?}", schemas.keys().collect::<Vec<_>>());
        }
        let text = doc.to_string();
        for reference in text.split("\"$ref\":\"").skip(1) {
            let target = reference.split('"').next().unwrap();
            let name = target.strip_prefix("#/components/schemas/").unwrap_or_else(|| panic!("{target}"));
            assert!(schemas.contains_key(name), "{target} is not described");
        }
        assert!(doc["components"]["securitySchemes"]["writer_token"].is_object());
    }
}
