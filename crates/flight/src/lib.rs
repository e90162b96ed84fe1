//! # shapfusion-flight
//!
//! shapfusion on the network: listening closed by default, tokens and admission limits
//! ([`net`]); `shapfusion worker`, an Arrow Flight service that explains the batches streamed to
//! it; the [`WorkerPool`] that spreads batches over many workers and survives losing some; and
//! `shapfusion serve`, the Flight SQL front door ([`serve`]). The pool is how the SQL functions
//! reach workers ([`install`] puts it behind [`shapfusion_sql::RemoteCompute`]).
//!
//! ```text
//! Flight client ──DoExchange {"model": "fraud", "output": "shap"}──► worker ──► attributions
//! SQL (shap.workers set) ──► UDF ──► WorkerPool ──chunks──► worker, worker, worker
//! ADBC / JDBC ──Flight SQL──► serve (DataFusion + UDFs) ──► WorkerPool or local engines
//! ```
//!
//! A worker computes through the same features → engine → layout path as `explain`, so a row
//! explained remotely is bit-identical to the same row explained locally.
//!
//! What it may use: `shapfusion-core`, `-files` and `-sql`, Arrow Flight, tonic, hyper and
//! tokio. Not Ballista: a `serve` whose sessions run on a cluster gets them through
//! [`shapfusion_sql::SessionBackend`].
#![warn(missing_docs)]

pub mod net;
mod pool;
mod protocol;
pub mod serve;
mod worker;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

pub use pool::{parse_worker_list, PoolOptions, WorkerPool, WorkerState};
pub use protocol::{call_from_descriptor, descriptor, output_schema, ModelInfo, WorkerStats, PROTOCOL_VERSION, REQUEST_BYTES_HEADER, SESSION_HEADER};
pub use worker::{SessionCloser, WorkerConfig, WorkerService, DEFAULT_STUCK_AFTER};

use arrow::array::RecordBatch;
use arrow::datatypes::{Field, Schema};

use crate::net::{auth, transport};
use shapfusion_core::error::{Error, ErrorKind, Result};
use shapfusion_core::features::column_index;
use shapfusion_files::pipeline::{explain_rows, ExplainOptions, ExplainSummary};
use shapfusion_sql::call::PinnedCall;
use shapfusion_sql::io_runtime::run_io;
use shapfusion_sql::RemoteCompute;

/// `shapfusion explain --workers`: streams `input` through the pool, writing the same Parquet
/// layout as a local run. `model` is sent to the workers as given (a name they serve, or a URL
/// they can read); the model's features come from the workers. Every chunk is pinned to one
/// model version: `version` (the content hash of the caller's copy) when given, else the
/// version the first worker to answer has, so workers with another file refuse instead of
/// mixing versions. Workers compute with `options.settings` or refuse what they cannot honour.
/// With `background` (a background the workers registered, by name or by the URL they
/// registered it with, and the content hash of the caller's copy) the calls ask for
/// interventional values over it; `options.background` (rows held here) is not sent.
pub fn explain_on_workers(
    pool: Arc<WorkerPool>,
    model: &str,
    version: Option<String>,
    background: Option<(String, String)>,
    input: &Path,
    output: &Path,
    options: &ExplainOptions,
) -> Result<ExplainSummary> {
    let start = Instant::now();
    let info_pool = pool.clone();
    let (info, schema) = {
        let (m, kind) = (model.to_string(), options.output);
        run_io(async move { info_pool.model_info(&m, kind).await })?
    };
    tracing::info!(model, url = info.url, workers = pool.status().len(), "explaining {} on the worker pool", input.display());
    let features = info.features.clone();
    let version = version.or_else(|| Some(info.content_hash.clone()).filter(|v| !v.is_empty()));
    let rows = explain_rows(input, output, options, &features, &features, schema.fields().iter().cloned().collect(), |batch| {
        let chunk = feature_batch(batch, &features)?;
        let call = PinnedCall::new(model, options.output).pinned(version.clone()).with_background(background.clone()).with_settings(options.settings);
        let pool = pool.clone();
        let out = run_io(async move { pool.run(&call, chunk).await })?;
        Ok(out.columns().to_vec())
    })?;
    Ok(ExplainSummary { rows, algorithm: "worker pool", seconds: start.elapsed().as_secs_f64() })
}

/// The columns of `batch` named `features`, in that order: what a worker needs of a batch.
pub fn feature_batch(batch: &RecordBatch, features: &[String]) -> Result<RecordBatch> {
    let schema = batch.schema();
    let mut fields = Vec::with_capacity(features.len());
    let mut columns = Vec::with_capacity(features.len());
    for (index, name) in features.iter().enumerate() {
        let i = column_index(&schema, name, index)?;
        fields.push(Field::new(name, batch.column(i).data_type().clone(), true));
        columns.push(batch.column(i).clone());
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).map_err(|e| Error::arrow("selecting feature columns", e))
}

/// The SQL functions' way to the workers: calls go through the process's shared pool for the
/// worker list.
#[derive(Debug)]
struct FlightRemote;

impl RemoteCompute for FlightRemote {
    fn compute(&self, workers: &str, token_file: &str, call: &PinnedCall, batch: RecordBatch) -> Result<RecordBatch> {
        let pool = shared_pool(workers, token_file)?;
        let call = call.clone();
        run_io(async move { pool.run(&call, batch).await })
    }
}

/// Lets the SQL functions of this process compute on Flight workers (`SET shap.workers`).
/// Every front end that makes SQL sessions calls it; calling it again does nothing.
pub fn install() {
    shapfusion_sql::install_remote(Arc::new(FlightRemote));
}

/// One pool per worker list (and token file) for the whole process, shared by every SQL
/// function instance and session, so connections and worker health are shared too.
pub fn shared_pool(workers: &str, token_file: &str) -> Result<Arc<WorkerPool>> {
    /// Pools by worker list and token file.
    type Pools = Mutex<HashMap<(String, String), Arc<WorkerPool>>>;
    static POOLS: OnceLock<Pools> = OnceLock::new();
    let key = (workers.to_string(), token_file.to_string());
    let mut pools = POOLS.get_or_init(Default::default).lock().expect("pool cache");
    if let Some(p) = pools.get(&key) {
        return Ok(p.clone());
    }
    let mut options = PoolOptions::default();
    if !token_file.is_empty() {
        options.connect.token = Some(auth::read_token_file(Path::new(token_file))?);
    }
    let pool = Arc::new(WorkerPool::new(&pool::parse_worker_list(workers), options)?);
    pools.insert(key, pool.clone());
    Ok(pool)
}

/// Calls the `health` action on a worker or `serve` at `url`; its JSON reply, or why not.
pub async fn health(url: &str, timeout: std::time::Duration) -> Result<String> {
    use futures::StreamExt;
    let options = transport::ConnectOptions { connect_timeout: timeout, ..Default::default() };
    let attempt = async {
        let channel = transport::endpoint(url, &options)?.connect().await.map_err(|e| Error::Remote {
            worker: url.to_string(),
            message: format!("cannot connect: {e}"),
            kind: ErrorKind::Unavailable,
        })?;
        let mut client = transport::client(channel, &options)?;
        let remote =
            |e: arrow_flight::error::FlightError| Error::Remote { worker: url.to_string(), message: e.to_string(), kind: ErrorKind::Unavailable };
        let mut replies = client.do_action(arrow_flight::Action::new(protocol::ACTION_HEALTH, "")).await.map_err(remote)?;
        let body = replies
            .next()
            .await
            .ok_or_else(|| Error::Remote { worker: url.to_string(), message: "empty health reply".into(), kind: ErrorKind::Unavailable })?
            .map_err(remote)?;
        Ok(String::from_utf8_lossy(&body).into_owned())
    };
    tokio::time::timeout(timeout, attempt).await.map_err(|_| Error::Remote {
        worker: url.to_string(),
        message: format!("no health reply within {}", protocol::human_duration(timeout)),
        kind: ErrorKind::Unavailable,
    })?
}
