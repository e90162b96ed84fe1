//! The opt-in metrics endpoint: `GET /metrics` in Prometheus' text exposition format, on a
//! listener of its own, closed by default like every other: loopback unless a token is
//! configured, and then every scrape must carry `authorization: Bearer <token>` (Prometheus'
//! `authorization` / `bearer_token_file` settings send it).

use std::convert::Infallible;
use std::fmt::Write as _;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

use super::limits::{AdmissionStats, LATENCY_BUCKETS};
use super::transport::{check_exposure, ListenOptions};
use shapfusion_core::error::{Error, ErrorKind, Result};

/// Renders the metrics page on every scrape.
pub type Render = Arc<dyn Fn() -> String + Send + Sync>;

/// Prometheus' text exposition of the metrics of one server.
#[derive(Debug, Default)]
pub struct Exposition {
    text: String,
}

impl Exposition {
    /// One metric with its help, type and samples (`labels` like `cause="queue_full"`, or empty).
    pub fn metric(&mut self, name: &str, kind: &str, help: &str, samples: &[(&str, f64)]) -> &mut Self {
        let _ = writeln!(self.text, "# HELP {name} {help}\n# TYPE {name} {kind}");
        for (labels, value) in samples {
            let labels = if labels.is_empty() { String::new() } else { format!("{{{labels}}}") };
            let _ = writeln!(self.text, "{name}{labels} {value}");
        }
        self
    }

    /// The admission's gauges, counters and latency histogram, named `<prefix>_…`.
    pub fn admission(&mut self, prefix: &str, what: &str, s: &AdmissionStats) -> &mut Self {
        self.metric(&format!("{prefix}_in_flight"), "gauge", &format!("{what} running now."), &[("", s.running as f64)]);
        self.metric(
            &format!("{prefix}_small_in_flight"),
            "gauge",
            "Of those running now, requests in small slots (a few rows each, beyond the full slots).",
            &[("", s.running_small as f64)],
        );
        self.metric(&format!("{prefix}_queued"), "gauge", &format!("{what} waiting for a slot now."), &[("", s.queued as f64)]);
        self.metric(
            &format!("{prefix}_served_total"),
            "counter",
            &format!("{what} admitted and finished, by outcome."),
            &[("outcome=\"ok\"", (s.served - s.failed) as f64), ("outcome=\"error\"", s.failed as f64)],
        );
        self.metric(
            &format!("{prefix}_refused_total"),
            "counter",
            &format!("{what} refused, by cause."),
            &[
                ("cause=\"queue_full\"", s.refused_queue_full as f64),
                ("cause=\"queue_timeout\"", s.refused_queue_timeout as f64),
                ("cause=\"sessions_full\"", s.refused_sessions as f64),
            ],
        );
        self.metric(
            &format!("{prefix}_sessions_open"),
            "gauge",
            "Sessions open now: exchanges kept open for many requests, each request admitted on its own.",
            &[("", s.sessions as f64)],
        );
        self.metric(&format!("{prefix}_rows_total"), "counter", "Rows served.", &[("", s.rows as f64)]);
        let name = format!("{prefix}_latency_seconds");
        let _ = writeln!(
            self.text,
            "# HELP {name} Latency of finished {}, arrival to the end of the reply, queue wait included.\n# TYPE {name} histogram",
            what.to_lowercase()
        );
        for (i, count) in s.latency_buckets.iter().enumerate() {
            let bound = LATENCY_BUCKETS.get(i).map_or("+Inf".to_string(), |b| b.to_string());
            let _ = writeln!(self.text, "{name}_bucket{{le=\"{bound}\"}} {count}");
        }
        let _ = writeln!(self.text, "{name}_sum {}\n{name}_count {}", s.latency_seconds_sum, s.served);
        self
    }

    /// The page.
    pub fn finish(self) -> String {
        self.text
    }
}

/// Serves `render`'s page at `GET /metrics` on `listen` until the process ends; says where on
/// stdout (`metrics on http://…/metrics`). `token`: the bearer token every scrape must carry
/// (needed to listen beyond loopback, as for the other listeners). Returns the bound address.
pub async fn serve_metrics(listen: &ListenOptions, token: Option<String>, what: &str, render: Render) -> Result<std::net::SocketAddr> {
    let listener = tokio::net::TcpListener::bind(&listen.listen)
        .await
        .map_err(|e| Error::external(ErrorKind::Io, format!("{what} metrics: cannot listen on {}", listen.listen), e))?;
    let addr = listener.local_addr().map_err(|e| Error::external(ErrorKind::Io, format!("{what} metrics"), e))?;
    let options = ListenOptions { authenticated: token.is_some(), ..listen.clone() };
    check_exposure(addr, &options, &format!("{what} metrics"))?;
    println!("{what} metrics on http://{addr}/metrics");
    let expected = token;
    tokio::spawn(async move {
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of file descriptors, say: wait rather than spin, and keep serving.
                    tracing::warn!("metrics endpoint: cannot accept a connection: {e}");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            };
            let (render, expected) = (render.clone(), expected.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                    let reply = page(&request, expected.as_deref(), &render);
                    async move { Ok::<_, Infallible>(reply) }
                });
                // A client that hangs up mid-request is its own problem.
                let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
            });
        }
    });
    Ok(addr)
}

/// The reply to one scrape.
fn page(request: &Request<Incoming>, expected: Option<&str>, render: &Render) -> Response<Full<Bytes>> {
    let reply = |status: StatusCode, body: String, kind: &str| {
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        if let Ok(value) = kind.parse() {
            response.headers_mut().insert(hyper::header::CONTENT_TYPE, value);
        }
        response
    };
    if let Some(expected) = expected {
        let given = request.headers().get(hyper::header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.split_once(' '));
        let bearer = given.filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer")).map(|(_, token)| token.trim());
        if !bearer.is_some_and(|t| super::auth::token_matches(t, expected)) {
            return reply(StatusCode::UNAUTHORIZED, "missing or wrong bearer token\n".into(), "text/plain");
        }
    }
    if request.method() != hyper::Method::GET || request.uri().path() != "/metrics" {
        return reply(StatusCode::NOT_FOUND, "the metrics are at GET /metrics\n".into(), "text/plain");
    }
    reply(StatusCode::OK, render(), "text/plain; version=0.0.4")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_exposition_is_prometheus_text() {
        let stats = AdmissionStats {
            running: 2,
            running_small: 1,
            queued: 3,
            served: 10,
            failed: 1,
            rows: 500,
            refused_queue_full: 4,
            refused_queue_timeout: 0,
            sessions: 5,
            refused_sessions: 2,
            latency_buckets: (1..=LATENCY_BUCKETS.len() as u64 + 1).map(|i| i.min(10)).collect(),
            latency_seconds_sum: 1.5,
        };
        let mut page = Exposition::default();
        page.admission("shapfusion_worker_requests", "Requests", &stats);
        let text = page.finish();
        for line in [
            "# TYPE shapfusion_worker_requests_in_flight gauge",
            "shapfusion_worker_requests_small_in_flight 1",
            "shapfusion_worker_requests_queued 3",
            "shapfusion_worker_requests_sessions_open 5",
            "shapfusion_worker_requests_refused_total{cause=\"sessions_full\"} 2",
            "shapfusion_worker_requests_served_total{outcome=\"ok\"} 9",
            "shapfusion_worker_requests_refused_total{cause=\"queue_full\"} 4",
            "shapfusion_worker_requests_rows_total 500",
            "shapfusion_worker_requests_latency_seconds_bucket{le=\"0.0005\"} 1",
            "shapfusion_worker_requests_latency_seconds_bucket{le=\"+Inf\"} 10",
            "shapfusion_worker_requests_latency_seconds_count 10",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} not in\n{text}");
        }
    }
}
