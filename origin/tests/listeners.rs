//! The admin listener: with `admin_listen` set, metrics, readiness, the OpenAPI document and
//! the status page are served there and no longer on the public port, which keeps the API and
//! liveness. Served over real sockets (`run_listeners`), on the embedded stores.

mod common;

use bloomgate_origin::config::Config;
use bloomgate_origin::Listeners;
use reqwest::StatusCode;
use tokio::net::TcpListener;

/// An origin on the embedded stores with both listeners; their base URLs, and the sender that
/// stops it.
async fn serve_both() -> (String, String, tokio::sync::oneshot::Sender<()>) {
    let public = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let (public_addr, admin_addr) = (public.local_addr().unwrap(), admin.local_addr().unwrap());
    let config = Config {
        listen: public_addr,
        admin_listen: Some(admin_addr),
        data_dir: common::temp_dir(),
        writer_tokens: vec![common::WRITER.into()],
        status_page: true,
        recovery_interval_ms: 0,
        ..Config::default()
    };
    let state = bloomgate_origin::build_state(config).await.unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let listeners = Listeners { public, admin: Some(admin) };
    tokio::spawn(bloomgate_origin::run_listeners(listeners, state, async {
        let _ = stopped.await;
    }));
    (format!("http://{public_addr}"), format!("http://{admin_addr}"), stop)
}

async fn status(http: &reqwest::Client, url: String) -> (StatusCode, String) {
    let r = http.get(url).send().await.unwrap();
    (r.status(), r.text().await.unwrap())
}

#[tokio::test]
async fn the_admin_listener_takes_what_the_public_port_must_not_serve() {
    let (public, admin, _stop) = serve_both().await;
    let http = reqwest::Client::new();
    for path in ["/metrics", "/readyz", "/openapi.json", "/status"] {
        let (code, body) = status(&http, format!("{public}{path}")).await;
        assert_eq!(code, StatusCode::NOT_FOUND, "{path} on the public port");
        assert!(body.contains("admin listener"), "{path}: the refusal says where it went: {body}");
        let (code, _) = status(&http, format!("{admin}{path}")).await;
        assert_eq!(code, StatusCode::OK, "{path} on the admin port");
    }
    for base in [&public, &admin] {
        assert_eq!(status(&http, format!("{base}/healthz")).await.0, StatusCode::OK, "liveness on {base}");
    }
    // The API stays public, and only public.
    let create = http
        .put(format!("{public}/v1/filters/users"))
        .bearer_auth(common::WRITER)
        .json(&serde_json::json!({ "capacity": 1000, "fp_rate": 0.01 }))
        .send()
        .await
        .unwrap();
    assert_eq!(create.status(), StatusCode::CREATED);
    let (code, _) = status(&http, format!("{public}/v1/filters/users/keys/{}", common::key(7))).await;
    assert_eq!(code, StatusCode::NOT_FOUND, "a 'no' from the filter");
    let (code, body) = status(&http, format!("{admin}/v1/filters/users/keys/{}", common::key(7))).await;
    assert_eq!(code, StatusCode::NOT_FOUND);
    assert!(body.contains("no such route"), "the admin port serves no API: {body}");
    // The admin port's metrics count the public port's requests.
    let (_, metrics) = status(&http, format!("{admin}/metrics")).await;
    assert!(metrics.contains("bloomgate_"), "{metrics}");
}

#[tokio::test]
async fn without_an_admin_listener_one_port_serves_everything() {
    let state = bloomgate_origin::build_state(Config {
        data_dir: common::temp_dir(),
        recovery_interval_ms: 0,
        ..Config::default()
    })
    .await
    .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(bloomgate_origin::run(listener, state, std::future::pending()));
    let http = reqwest::Client::new();
    for path in ["/metrics", "/readyz", "/openapi.json", "/healthz"] {
        assert_eq!(status(&http, format!("{base}{path}")).await.0, StatusCode::OK, "{path}");
    }
}
