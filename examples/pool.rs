//! Explain the example payments on a pool of Flight workers.
//!
//! ```text
//! cargo run --example pool                                   # starts two workers in-process
//! cargo run --example pool -- http://w1:50061,http://w2:50061 # uses running workers
//! ```
//!
//! The pool cuts each batch into chunks, sends them to the least-loaded workers, retries a chunk
//! elsewhere if its worker fails, and returns rows in input order: the result is identical to
//! explaining the batch in-process, which this example checks.

use std::sync::Arc;
use std::time::Instant;

use arrow::array::RecordBatch;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use shapfusion::flight::{feature_batch, parse_worker_list, PoolOptions, WorkerConfig, WorkerPool, WorkerService, DEFAULT_STUCK_AFTER};
use shapfusion::net::transport::{self, ListenOptions};
use shapfusion::net::Admission;
use shapfusion::registry::ModelRegistry;
use shapfusion::{ComputeSettings, Device, Explainer, Model, OutputKind};

const MODEL: &str = "examples/models/fraud.json";
const DATA: &str = "examples/data/payments.parquet";

/// Starts a worker on a free loopback port inside this process; returns its URL.
async fn start_worker() -> shapfusion::Result<String> {
    let config = WorkerConfig {
        // What requests compute with unless the caller sends settings of its own.
        settings: ComputeSettings { device: Device::Cpu, threads: Some(1), ..Default::default() },
        model_dir: Some("examples/models".into()),
        token: None,
        stuck_after: DEFAULT_STUCK_AFTER,
        admission: Admission::new(Default::default()),
    };
    // A worker serves the models its operator configured, by name: never a path a client sends.
    let service = WorkerService::new(Arc::new(ModelRegistry::names_only(None)), config)?;
    let listen = ListenOptions { max_message_bytes: 64 << 20, ..ListenOptions::local("127.0.0.1:0") };
    let (listener, addr) = transport::bind(&listen, "example worker").await?;
    tokio::spawn(async move { transport::serve(service, listener, &listen, std::future::pending()).await });
    Ok(format!("http://{addr}"))
}

#[tokio::main]
async fn main() -> shapfusion::Result<()> {
    let urls = match std::env::args().nth(1) {
        Some(list) => parse_worker_list(&list),
        None => vec![start_worker().await?, start_worker().await?],
    };

    // The rows: the model's feature columns are all a worker needs.
    let model = Arc::new(Model::load(MODEL)?);
    let file = std::fs::File::open(DATA).map_err(|e| shapfusion::Error::io(DATA, e))?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .and_then(|b| b.build())
        .map_err(|e| shapfusion::Error::external(shapfusion::error::ErrorKind::BadData, DATA, e))?;
    let batches: Vec<RecordBatch> = reader.collect::<Result<_, _>>().map_err(|e| shapfusion::Error::arrow(DATA, e))?;
    let all = arrow::compute::concat_batches(&batches[0].schema(), &batches).map_err(|e| shapfusion::Error::arrow(DATA, e))?;
    let input = feature_batch(&all, model.feature_names())?;

    // Workers resolve "fraud" in their model directory (a URL or a shared path works too).
    let pool = WorkerPool::new(&urls, PoolOptions::default())?;
    let start = Instant::now();
    let remote = pool.explain("fraud", None, OutputKind::Shap, input.clone()).await?;
    let seconds = start.elapsed().as_secs_f64();
    println!("{} rows on {} workers in {seconds:.2}s ({:.0} rows/s)", remote.num_rows(), urls.len(), remote.num_rows() as f64 / seconds);
    for state in pool.status() {
        println!("  {}: up={} failures={}", state.url, state.up, state.failures);
    }

    // Same numbers as in-process.
    let here = Explainer::builder(model).device(Device::Cpu).build()?.explain_batch(&input)?;
    let identical = here.columns().iter().zip(remote.columns()).all(|(a, b)| a.to_data() == b.to_data());
    println!("identical to in-process: {identical}");
    if !identical {
        return Err(shapfusion::Error::InvalidArgument("the pool's result differs from in-process".into()));
    }
    Ok(())
}
