//! SQL with `shap(...)` on an Apache Ballista cluster: the scheduler plans, executors compute.
//!
//! ```text
//! cargo run --example ballista                       # a scheduler and two executors in-process
//! cargo run --example ballista -- df://HOST:50050    # a running cluster (models as registered
//!                                                    # there; token from SHAPFUSION_TOKEN)
//! ```
//!
//! The client plans the query against its own registry (for the result types), Ballista ships
//! the plan to the scheduler, which pins `fraud` to the version it resolves; each executor
//! loads that version from the shared store and computes its partitions through the same batch
//! step as `explain`. The example checks the cluster's numbers against an in-process
//! `Explainer`: they are identical, bit for bit.

use std::sync::Arc;
use std::time::Instant;

use arrow::array::{Array, AsArray, RecordBatch};
use datafusion::prelude::ParquetReadOptions;
use shapfusion::ballista::client::{remote_context, RemoteScheduler};
use shapfusion::ballista::{ClusterModels, ExecutorOptions, SchedulerOptions};
use shapfusion::input::InputReader;
use shapfusion::net::transport::ListenOptions;
use shapfusion::registry::ModelRegistry;
use shapfusion::{Device, Explainer, Model};

const MODEL: &str = "examples/models/fraud.json";
const DATA: &str = "examples/data/payments.parquet";
const FEATURES: &str = "amount, age, account_days, hour, tx_24h, merchant_risk, country_code, card_present";

fn absolute(path: &str) -> String {
    std::path::absolute(path).expect("the working directory exists").to_string_lossy().into_owned()
}

/// A scheduler and two executors in this process, on loopback; returns the scheduler's URL.
async fn start_cluster() -> shapfusion::Result<String> {
    // Every member registers the same models (here a local file; in a cluster, a shared store
    // or volume) and scans only under its data root.
    let models = ClusterModels { models: vec![format!("fraud={}", absolute(MODEL))], ..Default::default() };
    let scheduler = shapfusion::ballista::start_scheduler(SchedulerOptions {
        listen: ListenOptions::local("127.0.0.1:0"),
        external_host: None,
        token: None,
        models: models.clone(),
        data_roots: vec![absolute("examples/data")],
        allow_write: vec![],
        executor_timeout_secs: 30,
        runtime: None,
    })
    .await?;
    for i in 0..2 {
        // Ballista advertises each executor's data port, so it must be a real one.
        let port =
            std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map_err(|e| shapfusion::Error::io("a free port", e))?.port();
        let options = ExecutorOptions {
            listen: ListenOptions::local(&format!("127.0.0.1:{port}")),
            external_host: None,
            scheduler: scheduler.addr.to_string(),
            token: None,
            models: models.clone(),
            concurrent_tasks: 1,
            work_dir: None,
            heartbeat_secs: 5,
            executor_id: Some(format!("example-{i}")),
            runtime: None,
        };
        tokio::spawn(shapfusion::ballista::run_executor(options));
    }
    Ok(format!("df://{}", scheduler.addr))
}

#[tokio::main]
async fn main() -> shapfusion::Result<()> {
    let df = |e: datafusion::error::DataFusionError| shapfusion::Error::InvalidArgument(e.to_string());
    let url = match std::env::args().nth(1) {
        Some(url) => url,
        None => start_cluster().await?,
    };
    let scheduler = RemoteScheduler { url, token: std::env::var("SHAPFUSION_TOKEN").ok() };

    // 1. A session whose queries run on the cluster (Ballista's settings, the token if any).
    let ctx = remote_context(shapfusion::sql::session_config(), Default::default(), &scheduler)?;

    // 2. The UDFs, with the client's own registry: it resolves `fraud` for the result type.
    let models = Arc::new(ModelRegistry::new(Some(ctx.runtime_env())));
    models.register("fraud", &absolute(MODEL))?;
    shapfusion::sql::register_with(&ctx, models)?;

    // 3. A table: the executors read it themselves (a path they can all reach).
    ctx.register_parquet("payments", &absolute(DATA), ParquetReadOptions::default()).await.map_err(df)?;

    // 4. Attributions, computed on the executors.
    let start = Instant::now();
    let batches =
        ctx.sql(&format!("SELECT id, shap('fraud', {FEATURES}) AS why FROM payments ORDER BY id")).await.map_err(df)?.collect().await.map_err(df)?;
    let seconds = start.elapsed().as_secs_f64();
    let remote = arrow::compute::concat_batches(&batches[0].schema(), &batches).map_err(|e| shapfusion::Error::arrow("the result", e))?;
    println!("{} rows on {} in {seconds:.2}s", remote.num_rows(), scheduler.url);

    // 5. An aggregate over attributions: which features push the most payments towards fraud.
    ctx.sql(&format!(
        "SELECT country_code, COUNT(*) AS payments, AVG(shap('fraud', {FEATURES})['amount']) AS mean_amount_effect \
         FROM payments GROUP BY country_code ORDER BY mean_amount_effect DESC LIMIT 3"
    ))
    .await
    .map_err(df)?
    .show()
    .await
    .map_err(df)?;

    // 6. The same numbers as in-process, once both are in id order.
    let model = Arc::new(Model::load(MODEL)?);
    let mut wanted = model.feature_names().to_vec();
    wanted.push("id".to_string());
    let batches: Vec<RecordBatch> =
        InputReader::open(std::path::Path::new(DATA), &wanted, model.feature_names(), 1 << 20)?.collect::<shapfusion::Result<_>>()?;
    let input = arrow::compute::concat_batches(&batches[0].schema(), &batches).map_err(|e| shapfusion::Error::arrow(DATA, e))?;
    let here = Explainer::builder(model).device(Device::Cpu).build()?.explain_batch(&input)?;
    let arrow_err = |e| shapfusion::Error::arrow("sorting by id", e);
    let order = arrow::compute::sort_to_indices(input.column_by_name("id").expect("id was read"), None, None).map_err(arrow_err)?;
    let here = arrow::compute::take_record_batch(&here, &order).map_err(arrow_err)?;
    let why = remote.column(1).as_struct();
    let identical = here.num_rows() == remote.num_rows() && here.columns().iter().zip(why.columns()).all(|(a, b)| a.to_data() == b.to_data());
    println!("identical to in-process: {identical}");
    if !identical {
        return Err(shapfusion::Error::InvalidArgument("the cluster's result differs from in-process".into()));
    }
    Ok(())
}
