//! Flight workers, the pool and the Flight SQL server, as real processes on loopback.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{Array, RecordBatch};
use arrow::compute::concat_batches;
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::sql::client::FlightSqlServiceClient;
use arrow_flight::{Action, FlightClient, FlightDescriptor};
use bytes::Bytes;
use common::{fixtures, read_parquet};
use futures::{StreamExt, TryStreamExt};
use shapfusion::call::PinnedCall;
use shapfusion::flight::{descriptor, output_schema, ModelInfo, WorkerStats, SESSION_HEADER};
use shapfusion::flight::{feature_batch, PoolOptions, WorkerPool};
use shapfusion::model::Model;
use shapfusion::pipeline::{explain_with_model, ExplainOptions};
use shapfusion::{ErrorKind, OutputKind};
use tonic::Code;

use common::server::{fetch, sql_client, sql_result, Server, BIN};

/// A worker serving the example model as `fraud` and every fixture model by its fixture name
/// (workers serve configured models only; the pool sends their URLs).
fn worker(extra: &[&str]) -> Server {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut models = vec![format!("fraud={}", root.join("examples/models/fraud.json").display())];
    models.extend(fixtures().iter().map(|f| format!("{}={}", f.name, f.model_path.display())));
    let mut args = vec!["worker", "--device", "cpu", "--threads", "1"];
    for m in &models {
        args.extend(["--model", m.as_str()]);
    }
    args.extend_from_slice(extra);
    Server::start(&args)
}

fn file_url(p: &Path) -> String {
    shapfusion::registry::to_url(p.to_str().unwrap()).unwrap().to_string()
}

fn local(model: &Arc<Model>, input: &Path, output: OutputKind) -> RecordBatch {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o.parquet");
    explain_with_model(model.clone(), input, &out, &ExplainOptions { output, ..Default::default() }).unwrap();
    read_parquet(&out)
}

fn assert_same(got: &RecordBatch, want: &RecordBatch, what: &str) {
    assert_eq!(got.num_rows(), want.num_rows(), "{what}: row count");
    assert_eq!(got.num_columns(), want.num_columns(), "{what}: column count");
    for (i, (g, w)) in got.columns().iter().zip(want.columns()).enumerate() {
        assert_eq!(g.to_data(), w.to_data(), "{what}: column {i} ({}) differs", want.schema().field(i).name());
    }
}

async fn client(url: &str, token: Option<&str>) -> FlightClient {
    let channel = tonic::transport::Endpoint::from_shared(url.to_string()).unwrap().connect().await.unwrap();
    let mut c = FlightClient::new(channel);
    if let Some(t) = token {
        c.add_header("authorization", &format!("Bearer {t}")).unwrap();
    }
    c
}

async fn exchange(c: &mut FlightClient, command: Bytes, batch: RecordBatch, max_message: usize) -> Result<Vec<RecordBatch>, tonic::Status> {
    let input = FlightDataEncoderBuilder::new()
        .with_flight_descriptor(Some(FlightDescriptor::new_cmd(command)))
        .with_max_flight_data_size(max_message)
        .build(futures::stream::iter([Ok(batch)]));
    let to_status = |e: arrow_flight::error::FlightError| match e {
        arrow_flight::error::FlightError::Tonic(s) => *s,
        other => tonic::Status::unknown(other.to_string()),
    };
    c.do_exchange(input).await.map_err(to_status)?.try_collect().await.map_err(to_status)
}

fn cmd(model: &str, output: &str) -> Bytes {
    Bytes::from(format!(r#"{{"model": "{model}", "output": "{output}"}}"#))
}

/// The example payments data repeated `times` times: enough rows that a query runs for a while.
fn payments(times: usize) -> (Arc<Model>, PathBuf, RecordBatch) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let model_path = root.join("examples/models/fraud.json");
    let model = Arc::new(shapfusion::load_model(&model_path).unwrap());
    let once = read_parquet(&root.join("examples/data/payments.parquet"));
    let batch = concat_batches(&once.schema(), &vec![once.clone(); times]).unwrap();
    (model, model_path, batch)
}

fn small_chunks() -> PoolOptions {
    PoolOptions { max_chunk_rows: 2000, min_chunk_rows: 500, retry_for: Duration::from_secs(20), ..Default::default() }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pool_of_three_equals_local_explain_on_every_fixture() {
    let workers: Vec<Server> = (0..3).map(|_| worker(&[])).collect();
    let urls: Vec<String> = workers.iter().map(|w| w.url.clone()).collect();
    let pool = WorkerPool::new(&urls, PoolOptions { min_chunk_rows: 16, ..Default::default() }).unwrap();
    for f in fixtures() {
        let url = file_url(&f.model_path);
        let input = feature_batch(&f.batch, f.model.feature_names()).unwrap();
        for output in [OutputKind::Shap, OutputKind::Interactions, OutputKind::Margin] {
            let got = pool.explain(&url, None, output, input.clone()).await.unwrap_or_else(|e| panic!("{}: {e}", f.name));
            assert_same(&got, &local(&f.model, &f.input_path(), output), &format!("{} {output:?}", f.name));
        }
    }
    // A model no worker has is the caller's mistake: final at once, by its kind, not retried.
    let f = &fixtures()[0];
    let missing = file_url(&f.model_path.with_file_name("no_such_model.json"));
    let input = feature_batch(&f.batch, f.model.feature_names()).unwrap();
    let e = pool.explain(&missing, None, OutputKind::Shap, input).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound, "{e}");
    assert!(e.to_string().contains("no_such_model.json"), "{e}");
    // The work was spread: every worker served rows, and nothing is left running. (The failed
    // call's other chunks were cancelled when the first failed: a worker learns of a cancel
    // when the client's reset reaches it, so it may take a moment to count them out.)
    for w in &workers {
        let stats = settled_worker_stats(&w.url).await;
        assert!(stats.rows > 0, "{} served nothing: {stats:?}", w.url);
        assert_eq!(stats.in_flight, 0, "{}: requests still running: {stats:?}", w.url);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_explains_lightgbm_integer_coded_categories_like_lightgbm() {
    let w = worker(&[]);
    let mut c = client(&w.url, None).await;
    let coded: Vec<_> = fixtures().into_iter().filter(|f| common::LIGHTGBM_INTEGER_CODED.contains(&f.name.as_str())).collect();
    assert_eq!(coded.len(), common::LIGHTGBM_INTEGER_CODED.len());
    for f in &coded {
        let name = f.name.as_str();
        let got = exchange(&mut c, cmd(name, "shap"), f.batch.clone(), 1 << 20).await.unwrap_or_else(|e| panic!("{name}: {e}"));
        let got = concat_batches(&got[0].schema(), &got).unwrap();
        common::assert_library_values(f, &common::row_major(got.columns(), 1), 1e-6, "Flight worker");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_query_loses_no_rows() {
    let workers: Vec<Server> = (0..3).map(|_| worker(&[])).collect();
    let urls: Vec<String> = workers.iter().map(|w| w.url.clone()).collect();
    let (model, model_path, batch) = payments(12);
    let input = feature_batch(&batch, model.feature_names()).unwrap();
    let pool = Arc::new(WorkerPool::new(&urls, small_chunks()).unwrap());
    let url = file_url(&model_path);
    let query = {
        let (pool, input) = (pool.clone(), input.clone());
        tokio::spawn(async move { pool.explain(&url, None, OutputKind::Shap, input).await })
    };
    // Kill a worker once it is busy with this query.
    let victim = &workers[1];
    let started = Instant::now();
    loop {
        let busy = pool.status().iter().any(|s| s.url == victim.url && s.in_flight > 0);
        if busy || started.elapsed() > Duration::from_secs(20) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!query.is_finished(), "the query ended before the worker could be killed; make it longer");
    victim.signal("-KILL");
    let got = query.await.unwrap().expect("the query survives losing a worker");
    let state = pool.status().into_iter().find(|s| s.url == victim.url).unwrap();
    assert!(state.failures > 0 && state.last_error.is_some(), "the pool never noticed the dead worker: {state:?}");

    let dir = tempfile::tempdir().unwrap();
    let all = dir.path().join("in.parquet");
    write_parquet(&all, &batch);
    assert_same(&got, &local(&model, &all, OutputKind::Shap), "after SIGKILL");
}

fn write_parquet(path: &Path, batch: &RecordBatch) {
    let mut w = parquet::arrow::ArrowWriter::try_new(std::fs::File::create(path).unwrap(), batch.schema(), None).unwrap();
    w.write(batch).unwrap();
    w.close().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_every_worker_down_the_query_fails_clearly_and_in_time() {
    // Ports that were free a moment ago: nothing listens there.
    let urls: Vec<String> = (0..2).map(|_| format!("http://{}", std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap())).collect();
    let options = PoolOptions { retry_for: Duration::from_secs(2), ..Default::default() };
    let pool = WorkerPool::new(&urls, options).unwrap();
    let (model, model_path, batch) = payments(1);
    let input = feature_batch(&batch, model.feature_names()).unwrap();
    let began = Instant::now();
    let err = pool.explain(&file_url(&model_path), None, OutputKind::Shap, input).await.unwrap_err();
    assert!(began.elapsed() < Duration::from_secs(15), "took {:?}", began.elapsed());
    // Worth trying again later: the CLI exits 69, Python raises ConnectionError.
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    let err = err.to_string();
    assert!(err.contains("no worker could explain"), "{err}");
    for u in &urls {
        assert!(err.contains(u.as_str()), "{u} not named in {err}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_bad_requests_and_oversized_batches_get_the_right_status() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "s3cret\n").unwrap();
    let (model, model_path, batch) = payments(1);
    let model_dir = model_path.parent().unwrap().to_str().unwrap().to_string();
    let w = worker(&["--auth-token-file", token_file.to_str().unwrap(), "--model-dir", &model_dir, "--max-message-mb", "1"]);
    let input = feature_batch(&batch.slice(0, 100), model.feature_names()).unwrap();

    // No token, wrong token: refused before anything is computed.
    for token in [None, Some("wrong")] {
        let mut c = client(&w.url, token).await;
        let e = exchange(&mut c, cmd("fraud", "shap"), input.clone(), 1 << 20).await.unwrap_err();
        assert_eq!(e.code(), Code::Unauthenticated, "{token:?}: {e}");
        let e = c.list_flights(Bytes::new()).await.err().expect("list_flights refused");
        assert!(e.to_string().contains("Unauthenticated") || e.to_string().contains("token"), "{e}");
    }
    // Health needs no token; stats does.
    let mut anon = client(&w.url, None).await;
    assert!(anon.do_action(Action::new("health", "")).await.is_ok());
    assert!(anon.do_action(Action::new("stats", "")).await.is_err());
    // Handshake with the token as basic-auth password returns the bearer token.
    let mut hs = client(&w.url, None).await;
    hs.add_header("authorization", &format!("Basic {}", base64_encode("user:s3cret"))).unwrap();
    assert_eq!(hs.handshake(Bytes::new()).await.unwrap(), Bytes::from("s3cret"));

    let mut c = client(&w.url, Some("s3cret")).await;
    let status = |r: Result<Vec<RecordBatch>, tonic::Status>| r.unwrap_err();
    let e = status(exchange(&mut c, Bytes::from("{not json"), input.clone(), 1 << 20).await);
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    assert!(e.message().contains("bad call"), "{e}");
    let e = status(exchange(&mut c, cmd("nosuchmodel", "shap"), input.clone(), 1 << 20).await);
    assert_eq!(e.code(), Code::NotFound, "{e}");
    assert!(e.message().contains("nosuchmodel"), "{e}");
    let missing = input.project(&[0, 2]).unwrap();
    let e = status(exchange(&mut c, cmd("fraud", "shap"), missing, 1 << 20).await);
    assert_eq!(e.code(), Code::InvalidArgument, "{e}");
    assert!(e.message().contains(model.feature_names()[1].as_str()), "the missing column is not named: {e}");
    let e = status(exchange(&mut c, cmd("fraud", "explode"), input.clone(), 1 << 20).await);
    assert!(e.message().contains("unknown output"), "{e}");
    // One message over the worker's 1 MiB limit.
    let big = feature_batch(&payments(4).2, model.feature_names()).unwrap();
    let e = status(exchange(&mut c, cmd("fraud", "shap"), big, usize::MAX).await);
    assert!(matches!(e.code(), Code::OutOfRange | Code::ResourceExhausted), "{e}");
    assert!(e.message().contains("too large"), "{e}");

    // Still serving, and right.
    let got = exchange(&mut c, cmd("fraud", "shap"), input.clone(), 1 << 20).await.unwrap();
    let got = concat_batches(&got[0].schema(), &got).unwrap();
    let dir2 = tempfile::tempdir().unwrap();
    let p = dir2.path().join("in.parquet");
    write_parquet(&p, &batch.slice(0, 100));
    assert_same(&got, &local(&model, &p, OutputKind::Shap), "after errors");
}

fn base64_encode(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_flights_schema_and_info_describe_the_models() {
    let (model, model_path, _) = payments(1);
    let w = Server::start(&["worker", "--device", "cpu", "--threads", "1", "--model", &format!("fraud={}", model_path.display())]);
    let mut c = client(&w.url, None).await;
    let infos: Vec<_> = c.list_flights(Bytes::new()).await.unwrap().try_collect().await.unwrap();
    assert_eq!(infos.len(), 1);
    let meta: ModelInfo = serde_json::from_slice(&infos[0].app_metadata).unwrap();
    assert_eq!(meta.model, "fraud");
    assert_eq!(meta.features, model.feature_names());
    for output in [OutputKind::Shap, OutputKind::Interactions, OutputKind::Margin] {
        let d = descriptor(&PinnedCall::new("fraud", output));
        let schema = c.get_schema(d.clone()).await.unwrap();
        assert_eq!(Arc::new(schema), output_schema(&model, output));
        let info = c.get_flight_info(d).await.unwrap();
        assert_eq!(Arc::new(info.try_decode_schema().unwrap()), output_schema(&model, output));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_the_request_in_flight_finish() {
    let (model, model_path, batch) = payments(6);
    let w = worker(&["--model", &format!("fraud={}", model_path.display())]);
    let input = feature_batch(&batch, model.feature_names()).unwrap();
    let mut c = client(&w.url, None).await;
    let request = tokio::spawn(async move { exchange(&mut c, cmd("fraud", "predict"), input, 4 << 20).await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    w.signal("-TERM");
    let got = request.await.unwrap().expect("the request in flight completes");
    assert_eq!(got.iter().map(|b| b.num_rows()).sum::<usize>(), batch.num_rows());
    let mut w = w;
    let status = w.child.wait().unwrap();
    assert!(status.success(), "worker exit status after SIGTERM: {status}");
}

async fn sql_query(c: &mut FlightSqlServiceClient<tonic::transport::Channel>, sql: &str) -> RecordBatch {
    sql_result(c, sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flight_sql_serves_shap_over_tables_locally_and_on_workers() {
    let (model, model_path, _) = payments(1);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let data = root.join("examples/data/payments.parquet");
    let want = local(&model, &data, OutputKind::Shap);
    let features = model.feature_names().join(", ");
    let w1 = worker(&[]);
    let w2 = worker(&[]);
    let workers = format!("{},{}", w1.url, w2.url);
    let model_arg = format!("fraud={}", model_path.display());
    let table_arg = format!("payments={}", data.display());
    let data_root = root.join("examples/data").display().to_string();
    for extra in [vec![], vec!["--workers", workers.as_str()]] {
        let mut args = vec!["serve", "--model", &model_arg, "--table", &table_arg, "--data-root", &data_root];
        args.extend(extra.iter().copied());
        let serve = Server::start(&args);
        let mut c = sql_client(&serve.url).await;
        let query = format!("SELECT shap('fraud', {features}) AS s FROM payments ORDER BY id");
        let values = |batch: RecordBatch| RecordBatch::from(arrow::array::AsArray::as_struct(batch.column(0)).clone());
        assert_same(&values(sql_query(&mut c, &query).await), &want, &format!("Flight SQL {extra:?}"));
        // RESET returns a shap option to the operator's value (DataFusion's own RESET knows
        // only its datafusion.* options), and names the options when the name is not one.
        sql_query(&mut c, "SET shap.index = 'banzhaf'").await;
        assert_ne!(values(sql_query(&mut c, &query).await).column(0), want.column(0), "Banzhaf values after SET {extra:?}");
        sql_query(&mut c, "RESET shap.index").await;
        assert_same(&values(sql_query(&mut c, &query).await), &want, &format!("Flight SQL after RESET {extra:?}"));
        let e = c.execute("RESET shap.indices".to_string(), None).await.unwrap_err().to_string();
        assert!(e.contains("RESET shap.indices: no such option") && e.contains("shap.index"), "{e}");
        // Several shap calls planned in one statement (each resolves the model while planning
        // inside the server's runtime: this once hung).
        let union: Vec<String> = (0..10).map(|k| format!("SELECT {k} AS copy, shap('fraud', {features}) AS s FROM payments")).collect();
        let statement = format!("SELECT count(s['bias']) AS n FROM ({})", union.join(" UNION ALL "));
        let n = tokio::time::timeout(Duration::from_secs(120), sql_query(&mut c, &statement)).await.expect("planning hung");
        assert_eq!(arrow::array::AsArray::as_primitive::<arrow::datatypes::Int64Type>(n.column(0)).value(0), 100_000);
        // DDL through the statement path, then a query on the new table.
        sql_query(&mut c, &format!("CREATE EXTERNAL TABLE p2 STORED AS PARQUET LOCATION '{}'", data.display())).await;
        let n = sql_query(&mut c, "SELECT count(*) AS n FROM p2").await;
        assert_eq!(arrow::array::AsArray::as_primitive::<arrow::datatypes::Int64Type>(n.column(0)).value(0), 10_000);
        // Errors come back as statuses naming the problem.
        let e = c.execute("SELECT shap('fraud', amount) FROM payments".to_string(), None).await.unwrap_err().to_string();
        assert!(e.contains("takes") && e.contains("features"), "{e}");
    }
}

/// The rows of `batch` ordered by its first column (an integer id), for results whose runs
/// come back in any order.
fn by_id(batch: &RecordBatch) -> RecordBatch {
    let order = arrow::compute::sort_to_indices(batch.column(0), None, None).unwrap();
    arrow::compute::take_record_batch(batch, &order).unwrap()
}

/// What database browsers, BI tools, JDBC and ADBC ask before and while they query: the
/// session's catalogs, schemas, tables (each client's own), table types, keys and the server's
/// SQL info; prepared statements with `?` parameters, one run per bound row, equal to the same
/// statement with the values written in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flight_sql_lists_each_session_and_binds_parameters() {
    use arrow_flight::sql::{CommandGetDbSchemas, CommandGetPrimaryKeys, CommandGetTables, SqlInfo};
    let (model, model_path, _) = payments(1);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let data = root.join("examples/data/payments.parquet");
    let features = model.feature_names().join(", ");
    let out = tempfile::tempdir().unwrap();
    let model_arg = format!("fraud={}", model_path.display());
    let table_arg = format!("payments={}", data.display());
    let data_root = root.join("examples/data").display().to_string();
    let write_root = out.path().display().to_string();
    let serve = Server::start(&["serve", "--model", &model_arg, "--table", &table_arg, "--data-root", &data_root, "--allow-write", &write_root]);
    let mut a = sql_client(&serve.url).await;
    let mut b = sql_client(&serve.url).await;
    let text = |batch: &RecordBatch| arrow::util::pretty::pretty_format_batches(std::slice::from_ref(batch)).unwrap().to_string();

    // The server's SQL info.
    let info = a.get_sql_info(vec![SqlInfo::FlightSqlServerName, SqlInfo::FlightSqlServerReadOnly]).await.unwrap();
    let info = text(&fetch(&mut a, info).await.unwrap());
    assert!(info.contains("shapfusion") && info.contains("false"), "{info}");

    // Catalogs and schemas, filtered as asked.
    let catalogs = a.get_catalogs().await.unwrap();
    assert!(text(&fetch(&mut a, catalogs).await.unwrap()).contains("datafusion"));
    let request = CommandGetDbSchemas { catalog: Some("datafusion".into()), db_schema_filter_pattern: Some("pub%".into()) };
    let schemas = a.get_db_schemas(request).await.unwrap();
    let schemas = fetch(&mut a, schemas).await.unwrap();
    assert_eq!(schemas.num_rows(), 1, "{}", text(&schemas));
    assert!(text(&schemas).contains("public"));
    let types = a.get_table_types().await.unwrap();
    assert!(text(&fetch(&mut a, types).await.unwrap()).contains("TABLE"));

    // Tables: the operator's for everyone, a client's own for that client only, with their
    // Arrow schemas when asked.
    sql_result(&mut b, &format!("CREATE EXTERNAL TABLE mine STORED AS PARQUET LOCATION '{}'", data.display())).await.unwrap();
    let tables = |pattern: &str| CommandGetTables {
        catalog: None,
        db_schema_filter_pattern: None,
        table_name_filter_pattern: Some(pattern.into()),
        table_types: vec!["TABLE".into()],
        include_schema: true,
    };
    let listed = a.get_tables(tables("%")).await.unwrap();
    let listed = fetch(&mut a, listed).await.unwrap();
    let names = arrow::array::AsArray::as_string::<i32>(listed.column_by_name("table_name").unwrap());
    assert_eq!(names.iter().flatten().collect::<Vec<_>>(), ["payments"], "client a's tables");
    let ipc = arrow::array::AsArray::as_binary::<i32>(listed.column_by_name("table_schema").unwrap()).value(0).to_vec();
    let listed_schema = arrow::datatypes::Schema::try_from(arrow_flight::IpcMessage(ipc.into())).unwrap();
    let scanned = sql_result(&mut a, "SELECT * FROM payments LIMIT 0").await.unwrap();
    assert_eq!(listed_schema.fields(), scanned.schema().fields(), "the listed schema is the table's");
    let listed = b.get_tables(tables("m%")).await.unwrap();
    let listed = fetch(&mut b, listed).await.unwrap();
    assert_eq!(listed.num_rows(), 1, "client b's own table: {}", text(&listed));
    assert!(text(&listed).contains("mine"));
    let request = CommandGetPrimaryKeys { catalog: None, db_schema: None, table: "payments".into() };
    let keys = a.get_primary_keys(request).await.unwrap();
    assert_eq!(fetch(&mut a, keys).await.unwrap().num_rows(), 0, "DataFusion's tables have no keys");

    // `?` parameters, numbered by their place in the text, cast to the column's type.
    let mut statement =
        a.prepare(format!("SELECT id, shap('fraud', {features}) AS s FROM payments WHERE id = ? OR amount > ? ORDER BY id"), None).await.unwrap();
    let parameters = statement.parameter_schema().unwrap().clone();
    assert_eq!(parameters.fields().len(), 2, "{parameters:?}");
    assert_eq!(parameters.field(0).data_type(), listed_schema.field_with_name("id").unwrap().data_type());
    assert_eq!(parameters.field(1).data_type(), listed_schema.field_with_name("amount").unwrap().data_type());
    let e = statement.execute().await.unwrap_err().to_string();
    assert!(e.contains("bind their values"), "{e}");
    let one = RecordBatch::try_from_iter([
        ("id", Arc::new(arrow::array::Int32Array::from(vec![7])) as _),
        ("amount", Arc::new(arrow::array::Float64Array::from(vec![1_000.0])) as _),
    ])
    .unwrap();
    statement.set_parameters(one).unwrap();
    let got = fetch(&mut a, statement.execute().await.unwrap()).await.unwrap();
    let want = sql_result(&mut a, &format!("SELECT id, shap('fraud', {features}) AS s FROM payments WHERE id = 7 OR amount > 1000.0 ORDER BY id"))
        .await
        .unwrap();
    assert!(want.num_rows() > 1, "the comparison has rows: {}", want.num_rows());
    assert_same(&got, &want, "a bound statement");

    // Several rows bound: one run each, together the rows of all.
    let mut statement = a.prepare(format!("SELECT id, shap('fraud', {features}) AS s FROM payments WHERE id = $1"), None).await.unwrap();
    statement.set_parameters(RecordBatch::try_from_iter([("id", Arc::new(arrow::array::Int64Array::from(vec![3, 11, 5])) as _)]).unwrap()).unwrap();
    let got = fetch(&mut a, statement.execute().await.unwrap()).await.unwrap();
    let want = sql_result(&mut a, &format!("SELECT id, shap('fraud', {features}) AS s FROM payments WHERE id IN (3, 5, 11)")).await.unwrap();
    assert_eq!(want.num_rows(), 3);
    assert_same(&by_id(&got), &by_id(&want), "three bound rows");
    statement.set_parameters(RecordBatch::try_from_iter([("id", Arc::new(arrow::array::StringArray::from(vec!["three"])) as _)]).unwrap()).unwrap();
    let e = statement.execute().await.unwrap_err().to_string();
    assert!(e.contains("parameter $1") && e.contains("Int64"), "{e}");

    // Prepared updates (JDBC runs DDL and COPY this way), parameters sent with the update.
    let mut create = a.prepare(format!("CREATE EXTERNAL TABLE p3 STORED AS PARQUET LOCATION '{}'", data.display()), None).await.unwrap();
    assert_eq!(create.execute_update().await.unwrap(), 0);
    let n = sql_result(&mut a, "SELECT count(*) AS n FROM p3 WHERE id < 100").await.unwrap();
    let n = arrow::array::AsArray::as_primitive::<arrow::datatypes::Int64Type>(n.column(0)).value(0);
    let target = out.path().join("low.parquet");
    let mut copy = a.prepare(format!("COPY (SELECT id FROM p3 WHERE id < ?) TO '{}'", target.display()), None).await.unwrap();
    copy.set_parameters(RecordBatch::try_from_iter([("limit", Arc::new(arrow::array::Int64Array::from(vec![100])) as _)]).unwrap()).unwrap();
    assert_eq!(copy.execute_update().await.unwrap(), n, "rows written");
    assert_eq!(read_parquet(&target).num_rows() as i64, n);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_workers_serve_the_pool_and_refuse_plaintext() {
    let dir = tempfile::tempdir().unwrap();
    let path = |n: &str| dir.path().join(n).to_str().unwrap().to_string();
    let (cert, key, ca) = (path("cert.pem"), path("key.pem"), path("ca.pem"));
    std::fs::write(path("ext.cnf"), "subjectAltName=IP:127.0.0.1,DNS:localhost\n").unwrap();
    // A test CA, and a server certificate it signs (webpki refuses a CA as the server's own).
    let steps: [Vec<String>; 3] = [
        ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=test-ca", "-keyout"]
            .iter()
            .map(|s| s.to_string())
            .chain([path("ca.key"), "-out".into(), ca.clone()])
            .collect(),
        ["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=localhost", "-keyout"]
            .iter()
            .map(|s| s.to_string())
            .chain([key.clone(), "-out".into(), path("req.csr")])
            .collect(),
        ["x509", "-req", "-days", "1", "-CAcreateserial", "-in"]
            .iter()
            .map(|s| s.to_string())
            .chain([
                path("req.csr"),
                "-CA".into(),
                ca.clone(),
                "-CAkey".into(),
                path("ca.key"),
                "-extfile".into(),
                path("ext.cnf"),
                "-out".into(),
                cert.clone(),
            ])
            .collect(),
    ];
    for args in steps {
        let ok = Command::new("openssl")
            .args(&args)
            .stderr(Stdio::null())
            .stdout(Stdio::null())
            .status()
            .expect("openssl is needed to make test certificates");
        assert!(ok.success(), "openssl {args:?}");
    }
    let cert = PathBuf::from(cert);
    let key = PathBuf::from(key);
    let w = worker(&["--tls-cert", cert.to_str().unwrap(), "--tls-key", key.to_str().unwrap()]);
    assert!(w.url.starts_with("https://"), "{}", w.url);
    let url = w.url.clone();
    let (model, model_path, batch) = payments(1);
    let input = feature_batch(&batch.slice(0, 500), model.feature_names()).unwrap();
    let mut options = PoolOptions::default();
    options.connect.ca_cert = Some(PathBuf::from(ca));
    let pool = WorkerPool::new(std::slice::from_ref(&url), options).unwrap();
    let got = pool.explain(&file_url(&model_path), None, OutputKind::Margin, input.clone()).await.unwrap();
    assert_eq!(got.num_rows(), 500);
    // Plaintext to a TLS port is a transport failure, reported as such once retries run out.
    let plain = PoolOptions { retry_for: Duration::from_secs(1), ..Default::default() };
    let pool = WorkerPool::new(&[url.replace("https://", "http://")], plain).unwrap();
    let err = pool.explain(&file_url(&model_path), None, OutputKind::Margin, input).await.unwrap_err().to_string();
    assert!(err.contains("no worker could explain"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_a_query_cancels_its_requests() {
    let w = worker(&[]);
    let (model, model_path, batch) = payments(12);
    let input = feature_batch(&batch, model.feature_names()).unwrap();
    let pool = Arc::new(WorkerPool::new(std::slice::from_ref(&w.url), small_chunks()).unwrap());
    let url = file_url(&model_path);
    let query = {
        let pool = pool.clone();
        tokio::spawn(async move { pool.explain(&url, None, OutputKind::Interactions, input).await })
    };
    let started = Instant::now();
    while pool.status()[0].in_flight == 0 && started.elapsed() < Duration::from_secs(20) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    query.abort();
    assert!(query.await.unwrap_err().is_cancelled());
    // The worker sees its calls end (in_flight back to 0) long before the rows could be done.
    let stats = settled_worker_stats(&w.url).await;
    assert_eq!(stats.in_flight, 0, "requests still running after the query was dropped: {stats:?}");
    assert!((stats.rows as usize) < batch.num_rows(), "the worker finished every row anyway: {stats:?}");
    assert_eq!(pool.status()[0].in_flight, 0);
}

#[test]
fn a_gpu_worker_on_a_machine_without_a_usable_gpu_refuses_to_start_and_says_why() {
    // Through `Device`, not the `gpu` module, so that the test builds without the `gpu` feature
    // too, where the reason is that the build has no GPU support.
    let Err(refused) = shapfusion::Device::Gpu.resolve() else {
        // A GPU host: the GPU worker starts; tests/gpu_paths.rs checks its numbers.
        return;
    };
    let out = Command::new(BIN).args(["worker", "--device", "gpu", "--listen", "127.0.0.1:0"]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("device gpu was asked for") && err.contains(&refused.to_string()), "{err}");
}

/// Workers with `--background`: on every fixture with a background, the pool's chunks come back
/// as the local interventional values (and interaction values) bit for bit; an unregistered background and a background
/// of another version are refused, naming them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_compute_interventional_values_over_their_registered_background() {
    let with_background: Vec<(common::Fixture, PathBuf)> = fixtures().into_iter().filter_map(|f| f.background().map(|b| (f, b))).collect();
    assert!(with_background.len() >= 10, "fixture backgrounds missing");
    let flags: Vec<String> = with_background.iter().map(|(f, b)| format!("{}={}", f.name, b.display())).collect();
    let mut extra = Vec::new();
    for flag in &flags {
        extra.extend(["--background", flag.as_str()]);
    }
    let w = worker(&extra);
    let pool = WorkerPool::new(std::slice::from_ref(&w.url), small_chunks()).unwrap();
    let mut interactions = 0;
    for (f, bg_path) in &with_background {
        let input = feature_batch(&f.batch, f.model.feature_names()).unwrap();
        let hash = shapfusion::registry::content_hash(&std::fs::read(bg_path).unwrap());
        let command = PinnedCall::new(f.name.clone(), OutputKind::Shap).with_background(Some((f.name.clone(), hash.clone())));
        let got = pool.run(&command, input.clone()).await.unwrap();
        let background = shapfusion::input::read_background(bg_path, &f.model, None, 0).unwrap();
        let want = shapfusion::Explainer::builder(f.model.clone()).background(background.clone()).build().unwrap().explain_batch(&input).unwrap();
        assert_same(&got, &want, &format!("{}: interventional on a worker", f.name));
        // Interaction values over the background, on the first few fixtures (each matrix is
        // (F+1)² a row).
        if f.model.num_features() <= 12 {
            let command = PinnedCall::new(f.name.clone(), OutputKind::Interactions).with_background(Some((f.name.clone(), hash)));
            let got = pool.run(&command, input.clone()).await.unwrap();
            let explainer = shapfusion::Explainer::builder(f.model.clone()).background(background).output(OutputKind::Interactions).build().unwrap();
            assert_same(&got, &explainer.explain_batch(&input).unwrap(), &format!("{}: interventional interactions on a worker", f.name));
            interactions += 1;
        }
    }
    assert!(interactions >= 3, "interventional interactions checked on {interactions} fixtures");

    let (f, _) = &with_background[0];
    let input = feature_batch(&f.batch, f.model.feature_names()).unwrap();
    let unknown = PinnedCall::new(f.name.clone(), OutputKind::Shap).with_background(Some(("old".into(), "x".into())));
    let e = pool.run(&unknown, input.clone()).await.unwrap_err().to_string();
    assert!(e.contains("unknown background \"old\"") && e.contains(&f.name), "{e}");
    let stale = PinnedCall::new(f.name.clone(), OutputKind::Shap).with_background(Some((f.name.clone(), "0123".into())));
    let e = pool.run(&stale, input).await.unwrap_err().to_string();
    assert!(e.contains(&format!("background \"{}\"", f.name)) && e.contains("0123"), "{e}");
}

/// `explain --workers --background FILE`: the workers compute over the background they
/// registered with that file's path, and the output equals a local `explain --background` bit
/// for bit, for SHAP and interaction values; a file no worker registered and `--background-rows`
/// are refused, naming what is wrong. (A worker's copy with other bytes than the caller's is
/// refused by its version, as `workers_compute_interventional_values_over_their_registered_background`
/// checks: on one machine the worker reads the caller's file.)
#[test]
fn explain_on_workers_with_a_background_equals_explain_with_it_here() {
    // CatBoost's combinations fixture: categories go to the worker as values, not codes.
    let cases: Vec<(common::Fixture, PathBuf)> = fixtures()
        .into_iter()
        .filter(|f| ["xgb_missing", "xgb_multiclass", "lgb_categorical", "skl_random_forest"].contains(&f.name.as_str()))
        .chain(common::combination_fixtures())
        .filter_map(|f| f.background().map(|b| (f, b)))
        .collect();
    assert_eq!(cases.len(), 5, "fixtures with backgrounds: {:?}", cases.iter().map(|(f, _)| &f.name).collect::<Vec<_>>());
    let mut flags: Vec<String> = cases.iter().map(|(f, b)| format!("--background={}={}", f.name, b.display())).collect();
    flags.extend(common::combination_fixtures().iter().map(|f| format!("--model={}={}", f.name, f.model_path.display())));
    let w = worker(&flags.iter().map(String::as_str).collect::<Vec<_>>());
    let dir = tempfile::tempdir().unwrap();
    let explain = |f: &common::Fixture, background: &Path, more: &[&str], out: &Path| {
        let input = f.input_path();
        let mut args = vec!["explain", "--no-progress", "--model", f.model_path.to_str().unwrap()];
        args.extend(["--input", input.to_str().unwrap(), "--output", out.to_str().unwrap()]);
        args.extend(["--background", background.to_str().unwrap()]);
        args.extend_from_slice(more);
        Command::new(BIN).args(&args).output().unwrap()
    };
    for (f, background) in &cases {
        // Interventional interaction values of a model with combinations are not built yet.
        let outputs: &[&[&str]] = if f.model.combinations().is_some() { &[&[]] } else { &[&[], &["--interactions"]] };
        for &more in outputs {
            let (remote, here) = (dir.path().join("remote.parquet"), dir.path().join("here.parquet"));
            let mut on_workers = vec!["--workers", w.url.as_str()];
            on_workers.extend_from_slice(more);
            let o = explain(f, background, &on_workers, &remote);
            assert!(o.status.success(), "{} {more:?} on workers: {}", f.name, String::from_utf8_lossy(&o.stderr));
            let o = explain(f, background, more, &here);
            assert!(o.status.success(), "{} {more:?} here: {}", f.name, String::from_utf8_lossy(&o.stderr));
            assert_same(&read_parquet(&remote), &read_parquet(&here), &format!("{} {more:?}: workers against here", f.name));
        }
    }

    let (f, background) = &cases[0];
    let out = dir.path().join("refused.parquet");
    let workers = ["--workers", w.url.as_str()];
    // A file the workers did not register (the same rows at another path): named, with the
    // backgrounds they have.
    let elsewhere = dir.path().join("background.parquet");
    std::fs::copy(background, &elsewhere).unwrap();
    let o = explain(f, &elsewhere, &workers, &out);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && e.contains("no registered background has") && e.contains("background.parquet") && e.contains(&f.name), "{e}");
    // A sample of the background is drawn here only.
    let o = explain(f, background, &["--workers", w.url.as_str(), "--background-rows", "5"], &out);
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && e.contains("--background-rows with --workers"), "{e}");
    assert!(!out.exists(), "a refused run wrote {}", out.display());
}

/// Runs `sql` over table `rows` (the Parquet file `rows`) in a session whose shap functions
/// compute on `workers`, after the `SET`s in `settings`.
async fn on_workers(workers: &str, rows: &Path, settings: &[&str], sql: &str) -> shapfusion::Result<RecordBatch> {
    let ctx = datafusion::prelude::SessionContext::new_with_config(shapfusion::sql::session_config());
    shapfusion::flight::install();
    shapfusion::sql::register(&ctx)?;
    ctx.register_parquet("rows", rows.to_str().unwrap(), Default::default()).await.unwrap();
    let run = |q: String| {
        let ctx = ctx.clone();
        async move { ctx.sql(&q).await?.collect().await }
    };
    let df = |e: datafusion::error::DataFusionError| shapfusion::Error::InvalidArgument(e.to_string());
    run(format!("SET shap.workers = '{workers}'")).await.map_err(df)?;
    for set in settings {
        run(set.to_string()).await.map_err(df)?;
    }
    let batches = run(sql.to_string()).await.map_err(df)?;
    Ok(concat_batches(&batches[0].schema(), &batches).unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_compute_with_the_sessions_settings_or_refuse_them_by_name() {
    // A deep model, where the engines' last bits differ, so the algorithm that ran shows.
    let f = fixtures().into_iter().find(|f| f.name == "xgb_deep").expect("xgb_deep fixture");
    let dir = tempfile::tempdir().unwrap();
    let rows = dir.path().join("rows.parquet");
    write_parquet(&rows, &feature_batch(&f.batch, f.model.feature_names()).unwrap());
    // The worker's own default is linear: a session asking for treeshap must get treeshap.
    let w = worker(&["--algorithm", "linear"]);
    let cols = f.model.feature_names().iter().map(|n| format!("\"{n}\"")).collect::<Vec<_>>().join(", ");
    let sql = format!("SELECT shap('{}', {cols}) AS s FROM rows", file_url(&f.model_path));
    let local = |algorithm: shapfusion::Algorithm| {
        let explainer = shapfusion::Explainer::builder(f.model.clone()).algorithm(algorithm).build().unwrap();
        explainer.explain_batch(&f.batch).unwrap()
    };
    let as_struct = |b: RecordBatch| b.column(0).as_any().downcast_ref::<arrow::array::StructArray>().unwrap().clone();
    let (treeshap, linear) = (local(shapfusion::Algorithm::TreeShap), local(shapfusion::Algorithm::Linear));
    assert_ne!(
        treeshap.columns().iter().map(|c| c.to_data()).collect::<Vec<_>>(),
        linear.columns().iter().map(|c| c.to_data()).collect::<Vec<_>>(),
        "the fixture cannot tell the engines apart"
    );
    for (set, want) in [("SET shap.algorithm = 'treeshap'", &treeshap), ("SET shap.algorithm = 'linear'", &linear)] {
        let got = as_struct(on_workers(&w.url, &rows, &[set], &sql).await.unwrap());
        for (i, column) in want.columns().iter().enumerate() {
            assert_eq!(got.column(i).to_data(), column.to_data(), "{set}: column {i} is not bit-identical to the local engine's");
        }
    }
    // The index travels with the call too: the session's Banzhaf values, bit for bit.
    let banzhaf = shapfusion::Explainer::builder(f.model.clone()).index(shapfusion::engine::Index::Banzhaf).build().unwrap();
    let want = banzhaf.explain_batch(&f.batch).unwrap();
    let got = as_struct(on_workers(&w.url, &rows, &["SET shap.index = 'banzhaf'"], &sql).await.unwrap());
    for (i, column) in want.columns().iter().enumerate() {
        assert_eq!(got.column(i).to_data(), column.to_data(), "shap.index banzhaf: column {i} is not bit-identical to the local engine's");
    }
    // What a worker cannot honour is refused with the setting's name, never computed otherwise.
    if shapfusion::Device::Gpu.resolve().is_err() {
        let e = on_workers(&w.url, &rows, &["SET shap.device = 'gpu'"], &sql).await.unwrap_err().to_string();
        assert!(e.contains("cannot honour the caller's setting device gpu"), "{e}");
    }
    // A model file the worker has in another version is refused too.
    let changed = dir.path().join("changed.json");
    let mut bytes = std::fs::read(&f.model_path).unwrap();
    bytes.extend_from_slice(b"\n");
    std::fs::write(&changed, bytes).unwrap();
    let w2 = Server::start(&["worker", "--device", "cpu", "--threads", "1", "--model", &format!("m={}", f.model_path.display())]);
    let call = PinnedCall::new("m", OutputKind::Shap).pinned(Some(shapfusion::registry::content_hash(&std::fs::read(&changed).unwrap())));
    let pool = WorkerPool::new(std::slice::from_ref(&w2.url), small_chunks()).unwrap();
    let e = pool.run(&call, feature_batch(&f.batch, f.model.feature_names()).unwrap()).await.unwrap_err().to_string();
    assert!(e.contains("is version") && e.contains("planned with version"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_reports_the_threads_that_actually_run() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let w = Server::start(&["worker", "--device", "cpu", "--threads", "1000"]);
    let mut c = client(&w.url, None).await;
    let reply: Vec<Bytes> = c.do_action(Action::new("stats", "")).await.unwrap().try_collect().await.unwrap();
    let stats: WorkerStats = serde_json::from_slice(&reply[0]).unwrap();
    assert_eq!(stats.device, format!("cpu ({cores} threads)"));
}

/// An exchange whose input the test sends batch by batch (`send`), so that it stays open and
/// holds its slot, and whose replies it reads one at a time.
struct OpenExchange {
    input: futures::channel::mpsc::UnboundedSender<Result<RecordBatch, arrow_flight::error::FlightError>>,
    replies: arrow_flight::decode::FlightRecordBatchStream,
    _client: FlightClient,
}

impl OpenExchange {
    async fn start(url: &str, command: Bytes, first: RecordBatch) -> OpenExchange {
        Self::open(url, command, first, &[]).await.unwrap()
    }

    /// A session ([`SESSION_HEADER`]): each batch sent is a request of its own.
    async fn session(url: &str, command: Bytes, first: RecordBatch) -> Result<OpenExchange, tonic::Status> {
        Self::open(url, command, first, &[(SESSION_HEADER, "1")]).await
    }

    async fn open(url: &str, command: Bytes, first: RecordBatch, headers: &[(&str, &str)]) -> Result<OpenExchange, tonic::Status> {
        let (input, batches) = futures::channel::mpsc::unbounded();
        input.unbounded_send(Ok(first)).unwrap();
        let data = FlightDataEncoderBuilder::new().with_flight_descriptor(Some(FlightDescriptor::new_cmd(command))).build(batches);
        let mut c = client(url, None).await;
        for (key, value) in headers {
            c.add_header(key, value).unwrap();
        }
        let replies = c.do_exchange(data).await.map_err(|e| match e {
            arrow_flight::error::FlightError::Tonic(s) => *s,
            other => tonic::Status::unknown(other.to_string()),
        })?;
        Ok(OpenExchange { input, replies, _client: c })
    }

    fn send(&self, batch: RecordBatch) {
        self.input.unbounded_send(Ok(batch)).unwrap();
    }

    async fn reply(&mut self) -> RecordBatch {
        tokio::time::timeout(Duration::from_secs(60), self.replies.next()).await.expect("a reply within 60 s").unwrap().unwrap()
    }

    /// The status the reply stream ends with, within 60 s.
    async fn error(&mut self) -> tonic::Status {
        match tokio::time::timeout(Duration::from_secs(60), self.replies.next()).await.expect("an answer within 60 s") {
            Some(Err(arrow_flight::error::FlightError::Tonic(status))) => *status,
            other => panic!("expected an error status, got {other:?}"),
        }
    }

    /// Ends the input and checks that the replies end too, with no error.
    async fn finish(mut self) {
        self.input.close_channel();
        let rest = tokio::time::timeout(Duration::from_secs(60), self.replies.next()).await.expect("the reply ends within 60 s");
        assert!(rest.is_none(), "a reply after the input ended: {rest:?}");
    }
}

/// Row `r` of `rows` sent to the `fraud` model in an exchange of its own, which must be answered
/// within 60 s with row `r` of `want`.
async fn answered_alone(url: &str, rows: &RecordBatch, want: &RecordBatch, r: usize, what: &str) {
    let mut c = client(url, None).await;
    let got = tokio::time::timeout(Duration::from_secs(60), exchange(&mut c, cmd("fraud", "shap"), rows.slice(r, 1), 1 << 20))
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within 60 s"))
        .unwrap();
    assert_same(&got[0], &want.slice(r, 1), what);
}

/// The bytes of a batch's own rows (a slice's buffers are its whole parent's).
fn rows_bytes(batch: &RecordBatch) -> usize {
    batch.columns().iter().map(|c| c.to_data().get_slice_memory_size().unwrap()).sum()
}

async fn worker_stats(url: &str) -> WorkerStats {
    let reply: Vec<Bytes> = client(url, None).await.do_action(Action::new("stats", "")).await.unwrap().try_collect().await.unwrap();
    serde_json::from_slice(&reply[0]).unwrap()
}

/// A worker's stats once no request is running, or after 10 s, whichever is first: cancelled
/// calls end on the worker when the client's reset reaches it, a moment after the client moved on.
async fn settled_worker_stats(url: &str) -> WorkerStats {
    worker_stats_once(url, |stats| stats.in_flight == 0).await
}

/// A worker's stats once `settled` holds of them, or after 10 s, whichever is first.
async fn worker_stats_once(url: &str, settled: impl Fn(&WorkerStats) -> bool) -> WorkerStats {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let stats = worker_stats(url).await;
        if settled(&stats) || Instant::now() > deadline {
            return stats;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_requests_run_beside_a_held_slot_and_grow_into_a_full_one_in_turn() {
    // One full slot, held by an exchange whose client is still sending.
    let w = worker(&["--max-concurrent", "1", "--max-small-requests", "2"]);
    let (model, _, rows) = payments(1);
    let want = local(&model, &Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/data/payments.parquet"), OutputKind::Shap);
    let mut holder = OpenExchange::start(&w.url, cmd("fraud", "shap"), rows.slice(0, 1)).await;
    assert_same(&holder.reply().await, &want.slice(0, 1), "the holder's row");

    // A one-row request runs at once in a small slot, where it used to queue behind the holder.
    answered_alone(&w.url, &rows, &want, 1, "a one-row request while the full slot is held").await;

    // One that starts small and then sends more than a small slot holds waits for the full slot.
    let mut grower = OpenExchange::start(&w.url, cmd("fraud", "shap"), rows.slice(2, 1)).await;
    assert_same(&grower.reply().await, &want.slice(2, 1), "the grower's first row");
    let stats = worker_stats(&w.url).await;
    assert_eq!((stats.in_flight, stats.in_flight_small, stats.queued), (2, 1, 0), "{stats:?}");
    let big = rows.slice(3, rows.num_rows() - 3);
    assert!(rows_bytes(&big) > 2 * shapfusion::net::SMALL_REQUEST_BYTES as usize, "{} bytes", rows_bytes(&big));
    grower.send(big);
    let waited = Instant::now();
    while worker_stats(&w.url).await.queued != 1 {
        assert!(waited.elapsed() < Duration::from_secs(60), "the growing request never queued: {:?}", worker_stats(&w.url).await);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // A pool's chunk says its size (`REQUEST_BYTES_HEADER`): it queues for a full slot at once
    // and leaves the small slot free.
    // All the rows in one chunk.
    let all = rows.num_rows();
    let options = PoolOptions { min_chunk_rows: all, max_chunk_rows: all, retry_for: Duration::from_secs(120), ..Default::default() };
    let pool = WorkerPool::new(std::slice::from_ref(&w.url), options).unwrap();
    let pooled_rows = feature_batch(&rows, model.feature_names()).unwrap();
    assert!(rows_bytes(&pooled_rows) > 2 * shapfusion::net::SMALL_REQUEST_BYTES as usize, "{} bytes", rows_bytes(&pooled_rows));
    let fraud = file_url(&Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/models/fraud.json"));
    let pooled = tokio::spawn(async move { pool.explain(&fraud, None, OutputKind::Shap, pooled_rows).await });
    let mut stats = worker_stats(&w.url).await;
    while stats.queued < 2 {
        assert!(waited.elapsed() < Duration::from_secs(60), "the pool's chunk never queued: {stats:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
        stats = worker_stats(&w.url).await;
    }
    assert_eq!((stats.in_flight, stats.in_flight_small), (2, 1), "{stats:?}");

    // The holder finishes: its slot passes to the grower, which is then answered in full.
    holder.finish().await;
    let mut grown = Vec::new();
    while grown.iter().map(RecordBatch::num_rows).sum::<usize>() < rows.num_rows() - 3 {
        grown.push(grower.reply().await);
    }
    let grown = concat_batches(&grown[0].schema(), &grown).unwrap();
    assert_same(&grown, &want.slice(3, rows.num_rows() - 3), "the grown request");
    grower.finish().await;
    // Then the pool's chunk.
    let pooled = tokio::time::timeout(Duration::from_secs(60), pooled).await.expect("the pool's answer within 60 s").unwrap().unwrap();
    assert_same(&pooled, &want, "the pool's rows");
    let stats = worker_stats(&w.url).await;
    assert_eq!((stats.in_flight, stats.in_flight_small, stats.queued, stats.failed_requests), (0, 0, 0, 0), "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_one_row_requests_get_the_bits_of_one_call() {
    // One compute thread and many clients, admitted at once by the default small slots:
    // requests wait together and are joined into one engine call (`Explainer::spawn_output`);
    // each must still get exactly its own row's values.
    let w = worker(&[]);
    let (model, _, rows) = payments(1);
    let want = local(&model, &Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/data/payments.parquet"), OutputKind::Shap);
    let (clients, each) = (12, 15);
    let mut tasks = Vec::new();
    for k in 0..clients {
        let (url, rows, want) = (w.url.clone(), rows.clone(), want.clone());
        tasks.push(tokio::spawn(async move {
            let mut c = client(&url, None).await;
            for i in 0..each {
                let r = (k * each + i) % rows.num_rows();
                let got = exchange(&mut c, cmd("fraud", "shap"), rows.slice(r, 1), 1 << 20).await.unwrap();
                let got = concat_batches(&got[0].schema(), &got).unwrap();
                assert_same(&got, &want.slice(r, 1), &format!("client {k}, row {r}"));
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let stats = worker_stats(&w.url).await;
    assert_eq!(stats.rows, (clients * each) as u64);
    assert!(stats.joined_batches <= stats.rows, "{stats:?}");
    eprintln!("{} of {} one-row requests were joined with others", stats.joined_batches, stats.rows);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_answers_each_request_as_it_comes_and_holds_no_slot_between_them() {
    // One slot and no small ones: an exchange that held its slot while open would make every
    // other request wait until it closed.
    let w = worker(&["--max-concurrent", "1", "--max-small-requests", "0", "--max-request-rows", "1000"]);
    let (model, _, rows) = payments(1);
    let want = local(&model, &Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/data/payments.parquet"), OutputKind::Shap);
    let mut session = OpenExchange::session(&w.url, cmd("fraud", "shap"), rows.slice(0, 1)).await.unwrap();
    assert_same(&session.reply().await, &want.slice(0, 1), "the session's first request");
    let stats = settled_worker_stats(&w.url).await;
    assert_eq!((stats.sessions, stats.in_flight, stats.requests), (1, 0, 1), "{stats:?}");

    // Between its requests, the one slot is free for others.
    answered_alone(&w.url, &rows, &want, 1, "a request beside an open session").await;

    // Each batch is a request of its own, answered before the next is sent, with the bits of a
    // call of its own; the rows bound is a request's (these send 1,623 rows in all), and a
    // request larger than a small slot is answered as well.
    assert!(rows_bytes(&rows.slice(0, 1000)) > shapfusion::net::SMALL_REQUEST_BYTES as usize);
    let mut at = 2;
    for n in [1, 3, 16, 1, 600, 1, 1000, 1] {
        session.send(rows.slice(at, n));
        let mut got = Vec::new();
        while got.iter().map(RecordBatch::num_rows).sum::<usize>() < n {
            got.push(session.reply().await);
        }
        assert_same(&concat_batches(&got[0].schema(), &got).unwrap(), &want.slice(at, n), &format!("the session's {n} rows at {at}"));
        at += n;
    }
    let stats = settled_worker_stats(&w.url).await;
    assert_eq!((stats.sessions, stats.in_flight, stats.requests, stats.rows), (1, 0, 10, at as u64), "{stats:?}");
    session.finish().await;
    let stats = stats_once_sessions_closed(&w.url).await;
    assert_eq!((stats.sessions, stats.failed_requests), (0, 0), "{stats:?}");

    // A request over the rows bound ends the session with its error, counted as failed.
    let mut session = OpenExchange::session(&w.url, cmd("fraud", "shap"), rows.slice(0, 2)).await.unwrap();
    assert_same(&session.reply().await, &want.slice(0, 2), "the second session's first request");
    session.send(rows.slice(0, 1001));
    let e = session.error().await;
    assert_eq!(e.code(), Code::OutOfRange, "{e:?}");
    assert!(e.message().contains("more than 1000 rows"), "{}", e.message());
    let stats = stats_once_sessions_closed(&w.url).await;
    assert_eq!((stats.sessions, stats.failed_requests), (0, 1), "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_are_bounded_and_end_between_requests_when_the_worker_stops() {
    let w = worker(&["--max-sessions", "1"]);
    let (model, _, rows) = payments(1);
    let want = local(&model, &Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/data/payments.parquet"), OutputKind::Shap);
    let mut session = OpenExchange::session(&w.url, cmd("fraud", "shap"), rows.slice(0, 1)).await.unwrap();
    assert_same(&session.reply().await, &want.slice(0, 1), "the session's request");

    // A second session is refused as busy, naming the flag; a header that says neither yes nor
    // no is refused rather than guessed.
    let e = refusal(OpenExchange::session(&w.url, cmd("fraud", "shap"), rows.slice(1, 1)).await).await;
    assert_eq!(e.code(), Code::ResourceExhausted, "{e:?}");
    assert!(e.message().contains("--max-sessions"), "{}", e.message());
    let e = refusal(OpenExchange::open(&w.url, cmd("fraud", "shap"), rows.slice(1, 1), &[(SESSION_HEADER, "yes")]).await).await;
    assert_eq!(e.code(), Code::InvalidArgument, "{e:?}");
    assert!(e.message().contains(SESSION_HEADER), "{}", e.message());
    assert_eq!(worker_stats(&w.url).await.refused_sessions, 1);

    // SIGTERM: the idle session ends at once with Unavailable, and the worker exits well
    // within the grace it gives open calls (60 s).
    let stopped = Instant::now();
    w.signal("-TERM");
    let e = session.error().await;
    assert_eq!(e.code(), Code::Unavailable, "{e:?}");
    assert!(e.message().contains("stopping"), "{}", e.message());
    let mut w = w;
    let status = w.child.wait().unwrap();
    assert!(status.success(), "worker exit status after SIGTERM: {status}");
    assert!(stopped.elapsed() < Duration::from_secs(30), "the worker took {:?} to stop with a session open", stopped.elapsed());
}

/// The status a call was refused with: when it was made, or as its reply's first item.
async fn refusal(call: Result<OpenExchange, tonic::Status>) -> tonic::Status {
    match call {
        Err(status) => status,
        Ok(mut exchange) => exchange.error().await,
    }
}

/// A worker's stats once no session is open, or after 10 s, whichever is first: a session's
/// place is given back when the server drops its reply stream, a moment after the client has
/// read its end.
async fn stats_once_sessions_closed(url: &str) -> WorkerStats {
    worker_stats_once(url, |stats| stats.in_flight == 0 && stats.sessions == 0).await
}

/// Checks that a Flight call (its reply read to the end) was refused with `InvalidArgument`
/// saying its message does not decode.
async fn assert_undecodable<T: std::fmt::Debug>(
    call: Result<impl futures::Stream<Item = Result<T, arrow_flight::error::FlightError>>, arrow_flight::error::FlightError>,
    what: &str,
) {
    let result = match call {
        Ok(replies) => replies.try_collect::<Vec<_>>().await.map(|_| ()),
        Err(e) => Err(e),
    };
    let status = match result {
        Err(arrow_flight::error::FlightError::Tonic(status)) => *status,
        other => panic!("{what}: expected a refusal, got {other:?}"),
    };
    assert_eq!(status.code(), Code::InvalidArgument, "{what}: {status:?}");
    assert!(status.message().contains("Arrow IPC reader failed"), "{what}: {}", status.message());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_the_arrow_reader_panics_on_is_refused_and_the_worker_keeps_serving() {
    let w = worker(&[]);
    let (model, _, rows) = payments(1);
    let want = local(&model, &Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/data/payments.parquet"), OutputKind::Shap);
    let schema = Bytes::from(common::undecodable_schema_message());
    let descriptor = Some(FlightDescriptor::new_cmd(cmd("fraud", "shap")));
    // In the first message (read before the exchange starts) and in a later one (read by the
    // decoder), in a call and in a session.
    let first = arrow_flight::FlightData { flight_descriptor: descriptor.clone(), data_header: schema.clone(), ..Default::default() };
    let later = [
        arrow_flight::FlightData { flight_descriptor: descriptor, ..Default::default() },
        arrow_flight::FlightData { data_header: schema, ..Default::default() },
    ];
    for (messages, what) in [(vec![first.clone()], "the first message"), (later.to_vec(), "a later message")] {
        for session in [false, true] {
            let mut c = client(&w.url, None).await;
            if session {
                c.add_header(SESSION_HEADER, "1").unwrap();
            }
            let call = c.do_exchange(futures::stream::iter(messages.clone().into_iter().map(Ok))).await;
            assert_undecodable(call, &format!("{what} (session: {session})")).await;
        }
    }
    answered_alone(&w.url, &rows, &want, 0, "a request after the undecodable messages").await;
    let stats = stats_once_sessions_closed(&w.url).await;
    assert_eq!((stats.in_flight, stats.sessions), (0, 0), "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_refuses_parameters_the_arrow_reader_panics_on_and_keeps_serving() {
    use arrow_flight::sql::{
        ActionCreatePreparedStatementRequest, ActionCreatePreparedStatementResult, Any, CommandPreparedStatementQuery, ProstMessageExt,
    };
    use prost::Message;
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/data/payments.parquet");
    let serve = Server::start(&["serve", "--table", &format!("payments={}", data.display())]);
    // A prepared statement of this client's session, then parameters whose schema the Arrow
    // crate panics on, bound the raw Flight SQL way (a DoPut of the statement's handle).
    let mut c = client(&serve.url, None).await;
    let request = ActionCreatePreparedStatementRequest { query: "SELECT count(*) AS n FROM payments WHERE id < ?".into(), transaction_id: None };
    let reply: Vec<Bytes> =
        c.do_action(Action::new("CreatePreparedStatement", request.as_any().encode_to_vec())).await.unwrap().try_collect().await.unwrap();
    let created: ActionCreatePreparedStatementResult = Any::decode(reply[0].clone()).unwrap().unpack().unwrap().unwrap();
    let command = CommandPreparedStatementQuery { prepared_statement_handle: created.prepared_statement_handle };
    let message = arrow_flight::FlightData {
        flight_descriptor: Some(FlightDescriptor::new_cmd(command.as_any().encode_to_vec())),
        data_header: Bytes::from(common::undecodable_schema_message()),
        ..Default::default()
    };
    assert_undecodable(c.do_put(futures::stream::iter([Ok(message)])).await, "parameters bound by DoPut").await;
    let n = sql_result(&mut sql_client(&serve.url).await, "SELECT count(*) AS n FROM payments").await.unwrap();
    assert_eq!(n.column(0).as_any().downcast_ref::<arrow::array::Int64Array>().unwrap().value(0), 10_000);
}
