//! The origin as the CDN's upstream: every path fetched over HTTP after a link latency, the
//! answer kept as the caches keep it.

use bloomgate_cdn_sim::{Fetched, Upstream};
use std::sync::Arc;
use std::time::Duration;

/// The origin at `base` (`http://host:port`), reached after `latency`.
pub struct OriginUpstream {
    http: reqwest::Client,
    base: String,
    latency: Duration,
}

impl OriginUpstream {
    /// The origin at `base`, every request delayed by `latency`.
    pub fn new(base: &str, latency: Duration) -> OriginUpstream {
        OriginUpstream { http: reqwest::Client::new(), base: base.trim_end_matches('/').to_owned(), latency }
    }
}

#[async_trait::async_trait]
impl Upstream for OriginUpstream {
    async fn fetch(&self, path: &str) -> Arc<Fetched> {
        tokio::time::sleep(self.latency).await;
        let failed = |why: String| {
            Arc::new(Fetched { status: 599, cache_control: None, retry_after: None, body: why.into_bytes() })
        };
        let response = match self.http.get(format!("{}{path}", self.base)).send().await {
            Ok(response) => response,
            Err(e) => return failed(e.to_string()),
        };
        let header = |name: reqwest::header::HeaderName| {
            response.headers().get(name).and_then(|v| v.to_str().ok()).map(str::to_owned)
        };
        let (status, cache_control, retry_after) =
            (response.status().as_u16(), header(reqwest::header::CACHE_CONTROL), header(reqwest::header::RETRY_AFTER));
        match response.bytes().await {
            Ok(body) => Arc::new(Fetched { status, cache_control, retry_after, body: body.to_vec() }),
            Err(e) => failed(e.to_string()),
        }
    }
}
