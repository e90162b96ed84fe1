//! Attacks on the servers, each refused with a clear error while the server keeps serving:
//! listening beyond loopback without a token, Flight SQL clients reaching for the server's files,
//! settings and models or for each other's sessions, crafted models sent to a worker or `serve`,
//! corrupt Parquet and Arrow IPC tables given to `sql` or `serve`,
//! a fleet of workers answering internal errors, workers holding other model versions, and a
//! worker whose compute is stuck.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::compute::concat_batches;
use arrow_flight::flight_service_server::{FlightService, FlightServiceServer};
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo, HandshakeRequest, HandshakeResponse, PollInfo, PutResult,
    SchemaResult, Ticket,
};
use futures::TryStreamExt;
use shapfusion::flight::{feature_batch, PoolOptions, WorkerPool};
use shapfusion::model::Model;
use shapfusion::OutputKind;
use tonic::{Request, Response, Status, Streaming};

use common::server::{sql_client, sql_result as sql, Server, BIN};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn example_model() -> PathBuf {
    root().join("examples/models/fraud.json")
}

fn payments() -> RecordBatch {
    common::read_parquet(&root().join("examples/data/payments.parquet"))
}

#[test]
fn servers_refuse_to_listen_beyond_loopback_without_a_token() {
    for server in ["serve", "worker"] {
        let out = Command::new(BIN).args([server, "--listen", "0.0.0.0:0"]).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "{server}, an invalid argument: {err}");
        assert!(err.contains("--token-file") && err.contains("--insecure-no-auth") && err.contains("refusing"), "{server}: {err}");
    }
    // With --insecure-no-auth it starts, and says so on stderr.
    let mut child = Command::new(BIN)
        .args(["worker", "--listen", "0.0.0.0:0", "--insecure-no-auth", "--device", "cpu"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert!(line.contains("listening on http://0.0.0.0:"), "{line}");
    child.kill().unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("without authentication") && err.contains("anyone"), "no warning: {err}");
    // The default is loopback.
    let mut child = Command::new(BIN).args(["worker", "--device", "cpu"]).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    // Another test or a leftover worker may hold the default port; then the message says so.
    assert!(line.contains("listening on http://127.0.0.1:50061") || line.is_empty(), "{line}");
}

fn first_string(b: &RecordBatch, column: &str) -> String {
    let c = b.column_by_name(column).unwrap();
    arrow::util::display::ArrayFormatter::try_new(c.as_ref(), &Default::default()).unwrap().value(0).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flight_sql_clients_touch_only_what_the_operator_configured() {
    let dir = tempfile::tempdir().unwrap();
    let (data, out) = (dir.path().join("data"), dir.path().join("out"));
    std::fs::create_dir_all(&data).unwrap();
    std::fs::create_dir_all(&out).unwrap();
    std::fs::copy(root().join("examples/data/payments.parquet"), data.join("p.parquet")).unwrap();
    let model = Model::load(example_model()).unwrap();
    let features = model.feature_names().join(", ");
    let serve = Server::start(&[
        "serve",
        "--model",
        &format!("fraud={}", example_model().display()),
        "--table",
        &format!("payments={}", root().join("examples/data/payments.parquet").display()),
        "--data-root",
        data.to_str().unwrap(),
        "--allow-write",
        out.to_str().unwrap(),
    ]);
    let mut a = sql_client(&serve.url).await;
    let mut b = sql_client(&serve.url).await;

    let refused = |r: Result<RecordBatch, String>, needle: &str| {
        let e = r.expect_err("refused");
        assert!(e.contains(needle), "{needle:?} not in {e}");
    };
    // The server's files.
    refused(sql(&mut a, "CREATE EXTERNAL TABLE pw STORED AS CSV LOCATION '/etc/passwd'").await, "data roots");
    refused(sql(&mut a, &format!("CREATE EXTERNAL TABLE up STORED AS PARQUET LOCATION '{}/../out/'", data.display())).await, "'..'");
    refused(sql(&mut a, "CREATE EXTERNAL TABLE meta STORED AS CSV LOCATION 'http://169.254.169.254/latest/'").await, "data roots");
    let endpoint =
        format!("CREATE EXTERNAL TABLE e STORED AS PARQUET LOCATION '{}/p.parquet' OPTIONS ('aws.endpoint' 'http://10.0.0.1')", data.display());
    refused(sql(&mut a, &endpoint).await, "endpoints and credentials");
    refused(sql(&mut a, "SELECT * FROM '/etc/passwd'").await, "passwd");
    refused(sql(&mut a, "COPY (SELECT 1 AS x) TO '/tmp/shapfusion-attack.csv' STORED AS CSV").await, "write roots");
    assert!(!Path::new("/tmp/shapfusion-attack.csv").exists());
    refused(sql(&mut a, "DROP TABLE payments").await, "read-only");
    refused(sql(&mut a, "CREATE TABLE t AS SELECT 1").await, "read-only");
    // What the operator granted works.
    sql(&mut a, &format!("CREATE EXTERNAL TABLE mine STORED AS PARQUET LOCATION '{}/p.parquet'", data.display())).await.unwrap();
    let n = sql(&mut a, "SELECT count(*) AS n FROM mine").await.unwrap();
    assert_eq!(first_string(&n, "n"), "10000");
    sql(&mut a, &format!("COPY (SELECT id FROM payments LIMIT 3) TO '{}/ids.csv' STORED AS CSV", out.display())).await.unwrap();
    assert!(out.join("ids.csv").exists());

    // Settings that route rows or credentials are the server's.
    for set in [
        "SET shap.workers = 'http://127.0.0.1:1'",
        "SET shap.worker_token_file = '/etc/hostname'",
        "SET shap.model_dir = '/'",
        "SET datafusion.runtime.memory_limit = '1G'",
    ] {
        refused(sql(&mut a, set).await, "server configuration");
    }
    // Models are registered names only.
    let elsewhere = root().join("tests/fixtures/xgb_regression/model.json");
    let e = sql(&mut a, &format!("SELECT shap('{}', {features}) FROM payments", elsewhere.display())).await.unwrap_err();
    assert!(e.contains("registered models only: fraud"), "{e}");

    // Sessions: one client's SET and tables are its own.
    sql(&mut a, "SET datafusion.execution.batch_size = 123").await.unwrap();
    let show = |b: RecordBatch| first_string(&b, "value");
    assert_eq!(show(sql(&mut a, "SHOW datafusion.execution.batch_size").await.unwrap()), "123");
    assert_eq!(show(sql(&mut b, "SHOW datafusion.execution.batch_size").await.unwrap()), "8192");
    refused(sql(&mut b, "SELECT count(*) FROM mine").await, "mine");
    // A ticket planned by one client is not another's.
    let info = a.execute("SELECT 42 AS answer".to_string(), None).await.unwrap();
    let ticket = info.endpoint[0].ticket.clone().unwrap();
    assert!(b.do_get(ticket.clone()).await.is_err(), "another client's ticket was served");
    let mine: Vec<RecordBatch> = a.do_get(ticket).await.unwrap().try_collect().await.unwrap();
    assert_eq!(mine[0].num_rows(), 1);

    // And the server still serves the legitimate query, with the right numbers.
    let got = sql(&mut b, &format!("SELECT shap('fraud', {features}) AS s FROM payments ORDER BY id LIMIT 5")).await.unwrap();
    assert_eq!(got.column(0).as_struct().len(), 5);
}

/// The files found to make the Parquet and Arrow IPC crates allocate gigabytes (or abort),
/// spin or panic (`fuzz/regressions/input_rows/`), each with what the refusal names. DataFusion
/// reads a table's files with its own readers, so these go through `file_guard`.
const CORRUPT_FILES: [(&str, &str); 5] = [
    ("ipc_record_batch_past_the_end.arrow", "its record batch 0 claims 144 + 107374182400 bytes at byte 136, past the end of the file (482 bytes)"),
    ("dictionary_count_past_its_bytes.parquet", "dictionary page at byte 4: 402653184 values of type DOUBLE cannot fit in its 240 bytes"),
    ("dictionary_count_in_an_overlong_varint.parquet", "column 27, dictionary page at byte 10354: 1082196492 values of type DOUBLE cannot fit"),
    ("page_header_list_past_the_end.parquet", "row group 0, column 2, page header at byte 26903: runs past the end of its column chunk"),
    ("arrow_schema_unknown_float_precision.parquet", "Arrow schema (ARROW:schema) is corrupt"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_table_files_are_refused_by_sql_and_serve_which_keep_serving() {
    let dir = tempfile::tempdir().unwrap();
    let corrupt = |name: &str| root().join("fuzz/regressions/input_rows").join(name);
    for (name, needle) in CORRUPT_FILES {
        let copy = dir.path().join(name);
        std::fs::copy(corrupt(name), &copy).unwrap();
        // `shapfusion sql` on a table of the file: a data error naming the file, at once.
        let format = if name.ends_with(".arrow") { "ARROW" } else { "PARQUET" };
        let query = format!("CREATE EXTERNAL TABLE t STORED AS {format} LOCATION '{}'", copy.display());
        let out = Command::new(BIN).args(["sql", "-c", &query, "-c", "SELECT * FROM t"]).env("RUST_BACKTRACE", "0").output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(65), "{name}: {stderr}");
        assert!(stderr.contains(&format!("file check error: file://{}: ", copy.display())) && stderr.contains(needle), "{name}: {stderr}");
        assert!(!stderr.contains("panicked"), "a caught decoder panic printed: {stderr}");
        if name.starts_with("arrow_schema") {
            // Its footer is refused, so `serve` cannot make it a table: it says so and exits
            // before it listens (the others are refused when a query reads their pages, below).
            let out = Command::new(BIN).args(["serve", "--table", &format!("t={}", copy.display())]).env("RUST_BACKTRACE", "0").output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(65), "{name}: {stderr}");
            assert!(stderr.contains("table t") && stderr.contains(needle), "{name}: {stderr}");
        }
    }

    // A client's table of such a file under the server's data root: the query fails, naming the
    // file, and the server goes on serving its tables.
    let serve = Server::start(&[
        "serve",
        "--table",
        &format!("payments={}", root().join("examples/data/payments.parquet").display()),
        "--data-root",
        dir.path().to_str().unwrap(),
    ]);
    let mut client = sql_client(&serve.url).await;
    for (i, (name, needle)) in CORRUPT_FILES.into_iter().enumerate() {
        let copy = dir.path().join(name);
        let format = if name.ends_with(".arrow") { "ARROW" } else { "PARQUET" };
        let create = format!("CREATE EXTERNAL TABLE c{i} STORED AS {format} LOCATION '{}'", copy.display());
        let e = match sql(&mut client, &create).await {
            Ok(_) => sql(&mut client, &format!("SELECT * FROM c{i}")).await.expect_err("refused"),
            Err(e) => e,
        };
        assert!(e.contains(&copy.display().to_string()) && e.contains(needle), "{name}: {e}");
        let n = sql(&mut client, "SELECT count(*) AS n, sum(amount) AS s FROM payments").await.unwrap();
        assert_eq!(first_string(&n, "n"), "10000");
    }
}

/// A worker serving the crafted corpus by name.
fn crafted_worker() -> Server {
    Server::start(&["worker", "--device", "cpu", "--threads", "1", "--model-dir", root().join("tests/fixtures/crafted").to_str().unwrap()])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crafted_models_are_refused_by_workers_and_serve_which_keep_serving() {
    let w = crafted_worker();
    let pool = WorkerPool::new(std::slice::from_ref(&w.url), PoolOptions { retry_for: Duration::from_secs(5), ..Default::default() }).unwrap();
    let column = |v: Vec<f64>| Arc::new(arrow::array::Float64Array::from(v)) as arrow::array::ArrayRef;
    let input = RecordBatch::try_from_iter([("f0", column(vec![0.1, 0.9])), ("f1", column(vec![1.0, 2.0]))]).unwrap();
    let expected = std::fs::read_to_string(root().join("tests/fixtures/crafted/EXPECTED.tsv")).unwrap();
    for line in expected.lines().filter(|l| !l.starts_with('#')) {
        let (file, needle) = line.split_once('\t').unwrap();
        let (name, ext) = file.rsplit_once('.').unwrap();
        if needle.is_empty() || !["json", "txt", "ubj"].contains(&ext) {
            continue;
        }
        let e = pool.explain(name, None, OutputKind::Shap, input.clone()).await.unwrap_err().to_string();
        assert!(e.contains(needle) && e.contains(&w.url), "{file}: {e}");
    }
    // Still serving: a valid model of the corpus.
    let got = pool.explain("valid_xgb", None, OutputKind::Margin, input.clone()).await.unwrap();
    assert_eq!(got.num_rows(), 2);

    // serve with a crafted model registered: the query fails, the server stays up.
    let bad = root().join("tests/fixtures/crafted/lgb_max_feature_idx_huge.txt");
    let serve = Server::start(&["serve", "--model", &format!("bad={}", bad.display()), "--model", &format!("fraud={}", example_model().display())]);
    let mut c = sql_client(&serve.url).await;
    let e = sql(&mut c, "SELECT shap('bad', 1.0, 2.0)").await.unwrap_err();
    assert!(e.contains("max_feature_idx=999999999999"), "{e}");
    let ok = sql(&mut c, "SELECT predict('fraud', 1.0, 30, 100, 12, 2, 0.5, 3, true) AS p").await.unwrap();
    assert_eq!(ok.num_rows(), 1);
}

type BoxStream<T> = Pin<Box<dyn futures::Stream<Item = Result<T, Status>> + Send + 'static>>;

/// A Flight service with a bug, whose health probes succeed: it looks alive.
#[derive(Clone, Default)]
struct Broken {
    /// Answers with a message the Arrow crate panics on (a reply and a `FlightInfo` schema
    /// naming a float precision Arrow does not know) instead of an internal error.
    garbled: bool,
    /// The exchanges it was sent.
    exchanges: Arc<AtomicUsize>,
}

#[tonic::async_trait]
impl FlightService for Broken {
    type HandshakeStream = BoxStream<HandshakeResponse>;
    type ListFlightsStream = BoxStream<FlightInfo>;
    type DoGetStream = BoxStream<FlightData>;
    type DoPutStream = BoxStream<PutResult>;
    type DoExchangeStream = BoxStream<FlightData>;
    type DoActionStream = BoxStream<arrow_flight::Result>;
    type ListActionsStream = BoxStream<ActionType>;

    async fn handshake(&self, _: Request<Streaming<HandshakeRequest>>) -> Result<Response<Self::HandshakeStream>, Status> {
        Err(Status::internal("broken"))
    }
    async fn list_flights(&self, _: Request<Criteria>) -> Result<Response<Self::ListFlightsStream>, Status> {
        Err(Status::internal("broken"))
    }
    async fn get_flight_info(&self, _: Request<FlightDescriptor>) -> Result<Response<FlightInfo>, Status> {
        if !self.garbled {
            return Err(Status::internal("broken"));
        }
        let schema = common::undecodable_schema_ipc();
        let about = r#"{"model": "fraud", "url": "fraud.json", "version": "1", "features": [], "output_groups": 1}"#;
        Ok(Response::new(FlightInfo { schema: schema.into(), app_metadata: about.into(), ..FlightInfo::default() }))
    }
    async fn poll_flight_info(&self, _: Request<FlightDescriptor>) -> Result<Response<PollInfo>, Status> {
        Err(Status::internal("broken"))
    }
    async fn get_schema(&self, _: Request<FlightDescriptor>) -> Result<Response<SchemaResult>, Status> {
        Err(Status::internal("broken"))
    }
    async fn do_get(&self, _: Request<Ticket>) -> Result<Response<Self::DoGetStream>, Status> {
        Err(Status::internal("broken"))
    }
    async fn do_put(&self, _: Request<Streaming<FlightData>>) -> Result<Response<Self::DoPutStream>, Status> {
        Err(Status::internal("broken"))
    }
    async fn do_exchange(&self, _: Request<Streaming<FlightData>>) -> Result<Response<Self::DoExchangeStream>, Status> {
        self.exchanges.fetch_add(1, Ordering::SeqCst);
        if !self.garbled {
            return Err(Status::internal("an internal bug in this worker"));
        }
        let reply = FlightData { data_header: common::undecodable_schema_message().into(), ..FlightData::default() };
        Ok(Response::new(Box::pin(futures::stream::iter([Ok(reply)]))))
    }
    async fn do_action(&self, _: Request<Action>) -> Result<Response<Self::DoActionStream>, Status> {
        // Health probes succeed: the worker looks alive, which is what kept the old pool
        // replaying the chunk forever.
        Ok(Response::new(Box::pin(futures::stream::iter([Ok(arrow_flight::Result { body: "{}".into() })]))))
    }
    async fn list_actions(&self, _: Request<Empty>) -> Result<Response<Self::ListActionsStream>, Status> {
        Err(Status::internal("broken"))
    }
}

async fn broken_worker(service: Broken) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(FlightServiceServer::new(service))
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    format!("http://{addr}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internal_errors_are_not_replayed_across_the_fleet() {
    let urls = vec![broken_worker(Broken::default()).await, broken_worker(Broken::default()).await];
    // A deadline the query must beat by far: it fails after one try on each worker.
    let options = PoolOptions { deadline: Duration::from_secs(10), retry_for: Duration::from_secs(5), ..Default::default() };
    let pool = WorkerPool::new(&urls, options.clone()).unwrap();
    let model = Model::load(example_model()).unwrap();
    let input = feature_batch(&payments().slice(0, 100), model.feature_names()).unwrap();
    let began = Instant::now();
    let e = pool.explain("fraud", None, OutputKind::Shap, input).await.unwrap_err().to_string();
    assert!(began.elapsed() < Duration::from_secs(5), "took {:?}", began.elapsed());
    assert!(e.contains("internal error on two workers") && e.contains("an internal bug"), "{e}");
    for u in &urls {
        assert!(e.contains(u.as_str()), "{u} not named: {e}");
    }
    // One worker: tried once, the error saying there was no other.
    let broken = Broken::default();
    let pool = WorkerPool::new(&[broken_worker(broken.clone()).await], options).unwrap();
    let input = feature_batch(&payments().slice(0, 10), model.feature_names()).unwrap();
    let e = pool.explain("fraud", None, OutputKind::Shap, input).await.unwrap_err().to_string();
    assert!(e.contains("no other worker to try") && e.contains("an internal bug"), "{e}");
    assert_eq!(broken.exchanges.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_reply_the_arrow_reader_panics_on_goes_to_another_worker_and_loses_no_rows() {
    let model = Model::load(example_model()).unwrap();
    let input = feature_batch(&payments().slice(0, 100), model.feature_names()).unwrap();
    // Ten chunks of ten rows over both workers: the garbled one is sent some of them.
    let options = || PoolOptions { min_chunk_rows: 10, max_chunk_rows: 10, retry_for: Duration::from_secs(5), ..Default::default() };
    let w = Server::start(&["worker", "--device", "cpu", "--threads", "1", "--model", &format!("fraud={}", example_model().display())]);
    let alone = WorkerPool::new(std::slice::from_ref(&w.url), options()).unwrap();
    let expected = alone.explain("fraud", None, OutputKind::Shap, input.clone()).await.unwrap();

    let garbled = Broken { garbled: true, ..Broken::default() };
    let urls = [broken_worker(garbled.clone()).await, w.url.clone()];
    let pool = WorkerPool::new(&urls, options()).unwrap();
    let got = pool.explain("fraud", None, OutputKind::Shap, input.clone()).await.unwrap();
    assert!(garbled.exchanges.load(Ordering::SeqCst) > 0, "the garbled worker was never tried");
    assert_eq!(got, expected, "the rows the garbled worker answered, explained elsewhere, bit for bit");

    // Garbled everywhere: a clear error naming both workers, after one try on each.
    let urls = [broken_worker(garbled.clone()).await, broken_worker(garbled.clone()).await];
    let pool = WorkerPool::new(&urls, options()).unwrap();
    let e = pool.explain("fraud", None, OutputKind::Shap, input).await.unwrap_err().to_string();
    assert!(e.contains("internal error on two workers") && e.contains("a reply message does not decode"), "{e}");
    assert!(urls.iter().all(|u| e.contains(u.as_str())), "{e}");
    // And the schema of its FlightInfo.
    let e = pool.model_info("fraud", OutputKind::Shap).await.unwrap_err().to_string();
    assert!(e.contains("unreadable schema") && e.contains("Arrow IPC reader failed"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pool_deadline_is_always_enforced() {
    // A worker that accepts the call and never answers within the deadline.
    let w = Server::start(&["worker", "--device", "cpu", "--threads", "1", "--model", &format!("fraud={}", example_model().display())]);
    let options = PoolOptions { deadline: Duration::from_secs(2), max_chunk_rows: 1 << 20, ..Default::default() };
    let pool = WorkerPool::new(std::slice::from_ref(&w.url), options).unwrap();
    let model = Model::load(example_model()).unwrap();
    let big = concat_batches(&payments().schema(), &vec![payments(); 20]).unwrap();
    let input = feature_batch(&big, model.feature_names()).unwrap();
    let began = Instant::now();
    let e = pool.explain("fraud", None, OutputKind::Interactions, input).await.unwrap_err().to_string();
    assert!(began.elapsed() < Duration::from_secs(6), "took {:?}", began.elapsed());
    assert!(e.contains("deadline of 2.0s"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_with_another_model_version_refuse_instead_of_mixing() {
    let dir = tempfile::tempdir().unwrap();
    // The same trees, other bytes: another version of "fraud".
    let other = dir.path().join("fraud.json");
    let mut bytes = std::fs::read(example_model()).unwrap();
    bytes.extend_from_slice(b"\n");
    std::fs::write(&other, &bytes).unwrap();
    let a = Server::start(&["worker", "--device", "cpu", "--threads", "1", "--model", &format!("fraud={}", example_model().display())]);
    let b = Server::start(&["worker", "--device", "cpu", "--threads", "1", "--model", &format!("fraud={}", other.display())]);
    let planned = shapfusion::registry::content_hash(&std::fs::read(example_model()).unwrap());
    let theirs = shapfusion::registry::content_hash(&bytes);
    let pool =
        WorkerPool::new(&[a.url.clone(), b.url.clone()], PoolOptions { min_chunk_rows: 100, max_chunk_rows: 100, ..Default::default() }).unwrap();
    let model = Model::load(example_model()).unwrap();
    let input = feature_batch(&payments().slice(0, 2000), model.feature_names()).unwrap();
    let e = pool.explain("fraud", Some(&planned), OutputKind::Shap, input.clone()).await.unwrap_err().to_string();
    assert!(e.contains(&b.url) && e.contains(&planned) && e.contains(&theirs), "{e}");
    // The planned version, on the worker that has it: served.
    let pool = WorkerPool::new(std::slice::from_ref(&a.url), PoolOptions::default()).unwrap();
    assert_eq!(pool.explain("fraud", Some(&planned), OutputKind::Shap, input).await.unwrap().num_rows(), 2000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_compute_is_stuck_reports_itself_unhealthy() {
    let w = Server::start(&[
        "worker",
        "--device",
        "cpu",
        "--threads",
        "1",
        "--stuck-after-secs",
        "1",
        "--model",
        &format!("fraud={}", example_model().display()),
    ]);
    let model = Model::load(example_model()).unwrap();
    let big = concat_batches(&payments().schema(), &vec![payments(); 10]).unwrap();
    let input = feature_batch(&big, model.feature_names()).unwrap();
    let pool = Arc::new(WorkerPool::new(std::slice::from_ref(&w.url), PoolOptions { max_chunk_rows: 1 << 20, ..Default::default() }).unwrap());
    // One 100,000-row interactions batch on one thread: far more than a second.
    let query = tokio::spawn({
        let pool = pool.clone();
        async move { pool.explain("fraud", None, OutputKind::Interactions, input).await }
    });
    let began = Instant::now();
    let unhealthy = loop {
        match shapfusion::flight::health(&w.url, Duration::from_secs(2)).await {
            Err(e) if e.to_string().contains("stuck") => break e.to_string(),
            _ if began.elapsed() > Duration::from_secs(30) => panic!("never reported stuck"),
            _ => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    assert!(unhealthy.contains("computing for"), "{unhealthy}");
    query.abort();
}
