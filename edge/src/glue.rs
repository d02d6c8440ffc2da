//! The Workers runtime glue (wasm32 only): the entry points, routing, and the isolate's report
//! on itself. Every decision it acts on comes from the pure modules; the lookup handlers are in
//! `lookup`, manifests in `manifest_fetch`, segments in `segments`, journal requests in
//! `journal_sync`, the isolate's state in `isolate`, subrequests in `upstream`.

use crate::body::{json, problem};
use crate::config::{self, EdgeConfig};
use crate::fleet_counts::{self, FleetCounts, Layout, Sample};
use crate::isolate::{now_ms, with_isolate, Isolate};
use crate::route::{self, Route};
use crate::{answer, lookup, report};
use bloomgate_client::api::{IsolateReport, Problem};
use bloomgate_client::headers;
use std::cell::RefCell;
use std::rc::Rc;
use worker::{
    console_error, console_log, console_warn, event, AnalyticsEngineDataPointBuilder, Context, Env, Method, Request,
    Response, Result,
};

#[event(start)]
fn start() {
    // Rust panics would otherwise surface as a bare "unreachable" trap in the logs.
    console_error_panic_hook::set_once();
}

/// A setting from the worker's environment: `EDGE_SECRET` is a secret (`wrangler secret put`,
/// `.dev.vars` locally), the others are vars (`wrangler.toml`, `--var`).
fn setting(env: &Env, name: &str) -> Option<String> {
    if name == config::EDGE_SECRET {
        env.secret(name).ok().map(|s| s.to_string())
    } else {
        env.var(name).ok().map(|v| v.to_string())
    }
}

thread_local! {
    /// The settings, read once: an isolate's environment never changes, and reading it costs a
    /// call into JavaScript per variable on every request otherwise.
    static CONFIG: RefCell<Option<Rc<EdgeConfig>>> = const { RefCell::new(None) };
}

/// The worker's settings: read from `env` on the first request, then kept. A misconfiguration
/// is read again each time (it is answered 500 anyway).
fn config(env: &Env) -> std::result::Result<Rc<EdgeConfig>, config::ConfigError> {
    if let Some(kept) = CONFIG.with(|c| c.borrow().clone()) {
        return Ok(kept);
    }
    let config = Rc::new(EdgeConfig::from_lookup(|name| setting(env, name))?);
    CONFIG.with(|c| *c.borrow_mut() = Some(config.clone()));
    Ok(config)
}

#[event(fetch)]
async fn fetch(req: Request, env: Env, ctx: Context) -> Result<Response> {
    let method = req.method();
    let head = method == Method::Head;
    let (method, path) = (method.to_string(), req.path());
    let colo = colo(&req);
    let config = config(&env);
    #[cfg(feature = "planted-bugs")] // negative controls (test builds only)
    crate::planted::select(setting(&env, crate::planted::VAR).as_deref());
    let response = match &config {
        Ok(config) => {
            let response = route(config, &env, &ctx, req, &method, &path).await?;
            after_request(config, &env, &colo);
            response
        }
        Err(err) => {
            console_error!("config: {err}");
            problem(&answer::misconfigured())?
        }
    };
    // Whatever answered (the edge, a relayed origin answer, a refusal): see answer::CACHE_CONTROL.
    response.headers().set(headers::CACHE_CONTROL, answer::CACHE_CONTROL)?;
    if config.is_ok_and(|c| c.log_requests) {
        console_log!("{method} {path} -> {}", response.status_code());
    }
    if head {
        // The answer to a HEAD is the GET's status and headers without its body.
        let status = response.status_code();
        return Ok(Response::empty()?.with_status(status).with_headers(response.headers().clone()));
    }
    Ok(response)
}

/// The answer to a request, by its route.
async fn route(
    config: &EdgeConfig,
    env: &Env,
    ctx: &Context,
    req: Request,
    method: &str,
    path: &str,
) -> Result<Response> {
    match route::classify(method, path) {
        Route::Health => json(&answer::health(), 200, answer::JSON),
        Route::Lookup { filter, key } => lookup::handle_lookup(config, ctx, &req, filter, key).await,
        Route::BatchLookup { filter } => lookup::handle_batch(config, ctx, req, filter).await,
        Route::Isolate => handle_isolate(config, env, &req),
        Route::WriteNotAllowed => {
            let r = problem(&answer::write_not_allowed(method, path))?;
            r.headers().set("allow", "GET, HEAD")?;
            Ok(r)
        }
        Route::NotFound => problem(&answer::not_found(path)),
    }
}

/// The data centre that took the request (`cf.colo`), or `local` where the runtime gives none.
/// Read through the object itself: the `worker` crate's getter panics when the field is absent.
fn colo(req: &Request) -> String {
    let field = |of: &wasm_bindgen::JsValue, name: &str| js_sys::Reflect::get(of, &name.into()).ok();
    field(req.inner(), "cf").and_then(|cf| field(&cf, "colo")).and_then(|c| c.as_string()).unwrap_or("local".into())
}

/// Counts the request, writes the isolate's data point for the fleet when one is due, and logs
/// a line when wasm memory passed a threshold since the last.
fn after_request(config: &EdgeConfig, env: &Env, colo: &str) {
    let wasm = report::wasm_bytes();
    let (passed, points) = with_isolate(config, |iso| {
        iso.counts.requests += 1;
        let now = now_ms() as u64;
        let mut points = Vec::new();
        if iso.fleet.due(now) {
            let r = isolate_report(iso, config, false);
            let sample = Sample { counts: r.counts, wasm_bytes: r.wasm_bytes, held_bytes: r.held.total, at_ms: now };
            points.push((iso.fleet.layout(), iso.fleet.point(&sample)));
            if config.shared_feed.is_some() {
                points.push((iso.fleet_feed.layout(), iso.fleet_feed.point(&sample)));
            }
        }
        (iso.growth.passed(wasm).map(|at| (at, isolate_report(iso, config, false))), points)
    });
    for (layout, point) in points {
        write_point(config, env, colo, layout, &point);
    }
    if let Some((at, r)) = passed {
        console_warn!(
            "isolate wasm memory passed {} MiB: {} MiB now; held {} of a {} MiB budget ({} segments, {} spare, {} in \
             journal tails)",
            at >> 20,
            r.wasm_bytes >> 20,
            r.held.total >> 20,
            r.budget_bytes >> 20,
            r.held.segment_count,
            r.held.spare_count,
            r.held.journal_tails
        );
    }
}

/// Writes a data point to the fleet's dataset: index the data centre (Analytics Engine samples
/// by it), blobs the layout, the data centre and the isolate. Unbound, nothing is written and
/// the point is taken back (the report says unbound); a write the binding refuses is logged
/// and its counts go into the next point.
fn write_point(config: &EdgeConfig, env: &Env, colo: &str, layout: &'static Layout, point: &fleet_counts::Point) {
    fn of_layout<'a>(iso: &'a mut Isolate, layout: &Layout) -> &'a mut FleetCounts {
        match layout.format {
            fleet_counts::FEED_POINT_FORMAT => &mut iso.fleet_feed,
            _ => &mut iso.fleet,
        }
    }
    let Ok(dataset) = env.analytics_engine(fleet_counts::BINDING) else {
        return with_isolate(config, |iso| of_layout(iso, layout).unbound(point));
    };
    let isolate = with_isolate(config, |iso| iso.id.clone());
    let data = AnalyticsEngineDataPointBuilder::new()
        .indexes([colo])
        .blobs([layout.format, colo, &isolate])
        .doubles(point.iter().copied())
        .build();
    if let Err(err) = dataset.write_data_point(&data) {
        console_error!("fleet counts: the {} binding refused a data point: {err}", fleet_counts::BINDING);
        with_isolate(config, |iso| of_layout(iso, layout).refused(point));
    }
}

/// `GET /_bloomgate/isolate` with the edge secret: [`IsolateReport`].
fn handle_isolate(config: &EdgeConfig, env: &Env, req: &Request) -> Result<Response> {
    let sent = req.headers().get(headers::EDGE_SECRET)?.unwrap_or_default();
    if !report::secret_matches(&sent, &config.edge_secret) {
        let refused = Problem::new(401, "the isolate's report needs the edge secret")
            .with_hint("Send it in x-bloomgate-edge-secret, as the edge sends it to the origin.");
        return problem(&refused);
    }
    let bound = env.analytics_engine(fleet_counts::BINDING).is_ok();
    let body = with_isolate(config, |iso| isolate_report(iso, config, bound));
    json(&body, 200, answer::JSON)
}

fn isolate_report(iso: &Isolate, config: &EdgeConfig, bound: bool) -> IsolateReport {
    let holdings = iso.store.holdings();
    let mut counts = iso.counts;
    counts.dropped_by_switch = holdings.dropped_by_switch;
    counts.buffers_reused = holdings.buffers_reused;
    counts.buffers_allocated = holdings.buffers_allocated;
    IsolateReport {
        wasm_bytes: report::wasm_bytes() as u64,
        budget_bytes: iso.store.budget() as u64,
        held: report::held_bytes(&holdings, iso.manifests.len()),
        counts,
        cpu: iso.cpu,
        cache_api: config.cache_api,
        uptime_ms: (now_ms() - iso.started_ms).max(0.0) as u64,
        fleet: fleet_counts::report(bound, &iso.fleet, &iso.fleet_feed),
    }
}
