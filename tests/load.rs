//! A worker under load, as real processes on loopback: 64 clients sending 2 requests of 20,000
//! rows each at the same moment all get exact answers from a worker with default limits (the
//! extra requests queue, none is refused), and the metrics endpoint's counters add up; a full
//! queue and a queue wait past its deadline are refused naming the flag that raises them; the
//! pool retries a busy worker until it has room. Timings are the benchmark's business
//! (`benchmarks/serving.py`), not asserted here.

mod common;

use std::sync::Arc;
use std::time::Duration;

use arrow::array::{ArrayRef, Float64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::{FlightClient, FlightDescriptor};
use common::server::Server;
use common::{fixtures, Fixture};
use futures::TryStreamExt;
use shapfusion::call::PinnedCall;
use shapfusion::flight::{PoolOptions, WorkerPool};
use shapfusion::{Explainer, OutputKind};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const CLIENTS: usize = 64;
const REQUESTS_PER_CLIENT: usize = 2;
const ROWS: usize = 20_000;

fn fixture(name: &str) -> Fixture {
    fixtures().into_iter().find(|f| f.name == name).unwrap()
}

/// `rows` rows of the model's features: a spread of values with some missing.
fn rows_for(f: &Fixture, rows: usize) -> RecordBatch {
    let names = &f.model.feature_names();
    let fields: Vec<Field> = names.iter().map(|n| Field::new(n, DataType::Float64, true)).collect();
    let columns: Vec<ArrayRef> = (0..names.len())
        .map(|j| {
            let values = (0..rows).map(|r| if (r + j) % 17 == 0 { None } else { Some(((r * 31 + j * 7) % 101) as f64 / 25.0 - 2.0) });
            Arc::new(values.collect::<Float64Array>()) as ArrayRef
        })
        .collect();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
}

/// One `DoExchange` of `batch` for model `m`; the reply joined, or the status.
async fn exchange(channel: tonic::transport::Channel, batch: RecordBatch) -> Result<RecordBatch, tonic::Status> {
    let mut client = FlightClient::new(channel);
    let input = FlightDataEncoderBuilder::new()
        .with_flight_descriptor(Some(FlightDescriptor::new_cmd(r#"{"model": "m", "output": "shap"}"#)))
        .build(futures::stream::iter([Ok(batch)]));
    let to_status = |e: arrow_flight::error::FlightError| match e {
        arrow_flight::error::FlightError::Tonic(s) => *s,
        other => tonic::Status::unknown(other.to_string()),
    };
    let replies: Vec<RecordBatch> = client.do_exchange(input).await.map_err(to_status)?.try_collect().await.map_err(to_status)?;
    Ok(arrow::compute::concat_batches(&replies[0].schema(), &replies).unwrap())
}

async fn connect(url: &str) -> tonic::transport::Channel {
    tonic::transport::Endpoint::from_shared(url.to_string()).unwrap().connect().await.unwrap()
}

/// The metrics page at `url` (`http://host:port/metrics`).
async fn scrape(url: &str) -> String {
    let address = url.trim_start_matches("http://").trim_end_matches("/metrics");
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream.write_all(format!("GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n").as_bytes()).await.unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).await.unwrap();
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    reply.split("\r\n\r\n").nth(1).unwrap_or_default().to_string()
}

/// The value of the sample named exactly `sample` (with its labels) on a metrics page.
fn sample(page: &str, sample: &str) -> f64 {
    page.lines()
        .find_map(|l| l.strip_prefix(sample).and_then(|rest| rest.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("{sample} not on the page:\n{page}"))
        .parse()
        .unwrap()
}

fn worker(f: &Fixture, extra: &[&str]) -> (Server, Vec<String>) {
    let model = format!("m={}", f.model_path.display());
    let mut args = vec!["worker", "--device", "cpu", "--model", model.as_str()];
    args.extend_from_slice(extra);
    let lines = if extra.contains(&"--metrics-listen") { 2 } else { 1 };
    let (server, printed) = Server::start_with_lines(&args, lines);
    (server, printed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_clients_at_once_all_get_exact_answers_and_the_metrics_add_up() {
    let f = fixture("xgb_regression");
    let (w, printed) = worker(&f, &["--metrics-listen", "127.0.0.1:0"]);
    let metrics = printed[1].rsplit(' ').next().unwrap().to_string();
    assert!(metrics.ends_with("/metrics"), "{printed:?}");
    let batch = rows_for(&f, ROWS);
    let want = Explainer::builder(f.model.clone()).build().unwrap().explain_batch(&batch).unwrap();

    // Each client on a connection of its own, both its requests at once.
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(connect(&w.url).await);
    }
    let scraper = {
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let mut most_queued = 0.0f64;
            for _ in 0..40 {
                most_queued = most_queued.max(sample(&scrape(&metrics).await, "shapfusion_worker_requests_queued"));
                tokio::time::sleep(Duration::from_millis(25)).await;
            }
            most_queued
        })
    };
    let requests = clients.iter().flat_map(|channel| (0..REQUESTS_PER_CLIENT).map(|_| tokio::spawn(exchange(channel.clone(), batch.clone()))));
    let handles: Vec<_> = requests.collect();
    let answers = tokio::time::timeout(Duration::from_secs(600), futures::future::join_all(handles)).await.expect("the load finished in time");
    let sent = answers.len();
    assert_eq!(sent, CLIENTS * REQUESTS_PER_CLIENT);
    for (i, answer) in answers.into_iter().enumerate() {
        let got = answer.unwrap().unwrap_or_else(|status| panic!("request {i} was not answered: {status}"));
        assert_eq!(got.num_rows(), ROWS, "request {i}");
        for (c, (g, w)) in got.columns().iter().zip(want.columns()).enumerate() {
            assert_eq!(g.to_data(), w.to_data(), "request {i}: column {c} differs from the local explainer's");
        }
    }
    let most_queued = scraper.await.unwrap();
    let page = scrape(&metrics).await;
    let served = sample(&page, "shapfusion_worker_requests_served_total{outcome=\"ok\"}")
        + sample(&page, "shapfusion_worker_requests_served_total{outcome=\"error\"}");
    let refused = sample(&page, "shapfusion_worker_requests_refused_total{cause=\"queue_full\"}")
        + sample(&page, "shapfusion_worker_requests_refused_total{cause=\"queue_timeout\"}");
    assert_eq!(served + refused, sent as f64, "served {served} + refused {refused} != sent {sent}");
    assert_eq!(refused, 0.0);
    assert_eq!(sample(&page, "shapfusion_worker_requests_rows_total"), (sent * ROWS) as f64);
    assert_eq!(sample(&page, "shapfusion_worker_requests_latency_seconds_count"), served);
    assert_eq!(sample(&page, "shapfusion_worker_requests_latency_seconds_bucket{le=\"+Inf\"}"), served);
    assert_eq!(sample(&page, "shapfusion_worker_requests_in_flight") + sample(&page, "shapfusion_worker_requests_queued"), 0.0);
    eprintln!("load: {sent} requests of {ROWS} rows, all answered; at most {most_queued} queued at a scrape");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_full_queue_and_a_wait_past_its_deadline_are_refused_naming_the_flag() {
    // A model and row count slow enough that the first request is still running when the
    // others arrive.
    let f = fixture("xgb_deep");
    let batch = rows_for(&f, 100_000);
    // No small slots: the 10-row requests would run in them instead of queueing.
    let (w, printed) =
        worker(&f, &["--max-concurrent", "1", "--max-small-requests", "0", "--max-queued", "2", "--threads", "1", "--metrics-listen", "127.0.0.1:0"]);
    let metrics = printed[1].rsplit(' ').next().unwrap().to_string();
    let first = tokio::spawn(exchange(connect(&w.url).await, batch.clone()));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut later = Vec::new();
    for _ in 0..5 {
        later.push(tokio::spawn(exchange(connect(&w.url).await, batch.slice(0, 10))));
    }
    let answers: Vec<_> = futures::future::join_all(later).await.into_iter().map(|a| a.unwrap()).collect();
    assert!(first.await.unwrap().is_ok());
    let refused: Vec<&tonic::Status> = answers.iter().filter_map(|a| a.as_ref().err()).collect();
    assert_eq!((answers.len() - refused.len(), refused.len()), (2, 3), "two queue, three are refused");
    for status in refused {
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        assert!(status.message().contains("queue is full") && status.message().contains("--max-queued"), "{}", status.message());
    }
    let page = scrape(&metrics).await;
    assert_eq!(sample(&page, "shapfusion_worker_requests_refused_total{cause=\"queue_full\"}"), 3.0);
    assert_eq!(sample(&page, "shapfusion_worker_requests_served_total{outcome=\"ok\"}"), 3.0);

    // A wait longer than the queue's deadline.
    let (w, _) = worker(&f, &["--max-concurrent", "1", "--max-small-requests", "0", "--queue-timeout-secs", "1", "--threads", "1"]);
    let first = tokio::spawn(exchange(connect(&w.url).await, batch.clone()));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let e = exchange(connect(&w.url).await, batch.slice(0, 10)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::ResourceExhausted);
    assert!(e.message().contains("waited 1s") && e.message().contains("--queue-timeout-secs"), "{}", e.message());
    assert!(first.await.unwrap().is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_pool_retries_a_busy_worker_until_it_has_room_and_loses_nothing() {
    let f = fixture("xgb_regression");
    // One request at a time and no queue (nor small slots): every other chunk is answered busy
    // at first.
    let (w, _) = worker(&f, &["--max-concurrent", "1", "--max-small-requests", "0", "--max-queued", "0"]);
    let options = PoolOptions { max_chunk_rows: 1000, min_chunk_rows: 500, max_in_flight: 4, ..Default::default() };
    let pool = Arc::new(WorkerPool::new(std::slice::from_ref(&w.url), options).unwrap());
    let batch = rows_for(&f, 8000);
    let want = Explainer::builder(f.model.clone()).build().unwrap().explain_batch(&batch).unwrap();
    let calls: Vec<_> = (0..4)
        .map(|_| {
            let (pool, batch) = (pool.clone(), batch.clone());
            tokio::spawn(async move { pool.run(&PinnedCall::new("m", OutputKind::Shap), batch).await })
        })
        .collect();
    for call in futures::future::join_all(calls).await {
        let got = call.unwrap().expect("every chunk answered after its busy retries");
        for (g, w) in got.columns().iter().zip(want.columns()) {
            assert_eq!(g.to_data(), w.to_data());
        }
    }
    // The worker did turn chunks away, and served each of the 4 × 8 chunks exactly once.
    let mut client = FlightClient::new(connect(&w.url).await);
    let reply: Vec<bytes::Bytes> = client.do_action(arrow_flight::Action::new("stats", "")).await.unwrap().try_collect().await.unwrap();
    let stats: shapfusion::flight::WorkerStats = serde_json::from_slice(&reply[0]).unwrap();
    assert!(stats.refused_queue_full > 0, "no busy answer to retry: {stats:?}");
    assert_eq!((stats.requests, stats.rows), (32, 4 * 8000), "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_shows_its_calls_on_the_metrics_endpoint() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let model = format!("fraud={}", root.join("examples/models/fraud.json").display());
    let table = format!("payments={}", root.join("examples/data/payments.parquet").display());
    let (serve, printed) = Server::start_with_lines(&["serve", "--model", &model, "--table", &table, "--metrics-listen", "127.0.0.1:0"], 2);
    let metrics = printed[1].rsplit(' ').next().unwrap().to_string();
    let mut client = common::server::sql_client(&serve.url).await;
    let result = common::server::sql_result(&mut client, "SELECT COUNT(*) AS n FROM payments").await.unwrap();
    assert_eq!(result.num_rows(), 1);
    let page = scrape(&metrics).await;
    // Planning the statement and fetching its result are one admitted call each.
    assert_eq!(sample(&page, "shapfusion_serve_requests_served_total{outcome=\"ok\"}"), 2.0);
    assert_eq!(sample(&page, "shapfusion_serve_requests_rows_total"), 1.0);
    assert_eq!(sample(&page, "shapfusion_serve_requests_refused_total{cause=\"queue_full\"}"), 0.0);
}
