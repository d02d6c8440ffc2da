//! The Workers runtime glue (wasm32 only): entry points, router and I/O; no decisions.

use serde::Serialize;
use worker::{
    console_error, console_log, event, Context, Env, Fetch, Method, Request, Response, Result,
    RouteContext, Router,
};

use crate::answer;
use crate::config::EdgeConfig;

#[event(start)]
fn start() {
    // Rust panics would otherwise surface as a bare "unreachable" trap in the logs.
    console_error_panic_hook::set_once();
}

#[event(fetch)]
async fn fetch(req: Request, env: Env, _ctx: Context) -> Result<Response> {
    let method = req.method();
    let path = req.path();
    let config = EdgeConfig::from_lookup(|name| env.var(name).ok().map(|v| v.to_string()));
    let response = match config {
        Ok(config) => {
            Router::with_data(config)
                .get("/healthz", handle_health)
                .get_async("/v1/filters/:filter/keys/:key", handle_lookup)
                .or_else_any_method("/*rest", handle_not_found)
                .run(req, env)
                .await?
        }
        Err(err) => {
            console_error!("config: {err}");
            json(&answer::misconfigured(), 500, answer::PROBLEM_JSON)?
        }
    };
    console_log!("{method:?} {path} -> {}", response.status_code());
    Ok(response)
}

fn handle_health(_req: Request, _ctx: RouteContext<EdgeConfig>) -> Result<Response> {
    json(&answer::health(), 200, answer::JSON)
}

fn handle_not_found(req: Request, _ctx: RouteContext<EdgeConfig>) -> Result<Response> {
    json(&answer::not_found(&req.path()), 404, answer::PROBLEM_JSON)
}

/// For now a plain relay to the origin: proves subrequests work under workerd.
async fn handle_lookup(req: Request, ctx: RouteContext<EdgeConfig>) -> Result<Response> {
    let url = req.url()?;
    let path_and_query = match url.query() {
        Some(query) => format!("{}?{query}", url.path()),
        None => url.path().to_owned(),
    };
    let target = answer::origin_url(&ctx.data.origin_url, &path_and_query);
    let mut upstream = match Fetch::Request(Request::new(&target, Method::Get)?)
        .send()
        .await
    {
        Ok(upstream) => upstream,
        Err(err) => {
            console_error!("origin fetch {target}: {err}");
            return json(&answer::origin_unreachable(), 502, answer::PROBLEM_JSON);
        }
    };
    let status = upstream.status_code();
    let content_type = upstream.headers().get("content-type")?;
    let body = upstream.bytes().await?;
    let response = Response::from_bytes(body)?.with_status(status);
    if let Some(content_type) = content_type {
        response.headers().set("content-type", &content_type)?;
    }
    Ok(response)
}

fn json<T: Serialize>(body: &T, status: u16, content_type: &str) -> Result<Response> {
    let response = Response::from_json(body)?.with_status(status);
    response.headers().set("content-type", content_type)?;
    Ok(response)
}
