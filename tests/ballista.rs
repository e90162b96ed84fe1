//! Distributed SQL on an in-process Ballista cluster (one scheduler, two executors): the same
//! bits as `explain` on every fixture, the planned model version enforced on executors, and the
//! cluster closed to callers without its token or outside its data roots.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{Array, AsArray, Int64Array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema};
use common::sql::{explain_output, feature_list, query, query_err, same_bits};
use common::{fixtures, Fixture};
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::prelude::{ParquetReadOptions, SessionContext};
use object_store::memory::InMemory;
use object_store::{ObjectStoreExt, PutPayload};
use shapfusion::ballista::client::{remote_context, RemoteScheduler};
use shapfusion::ballista::{ClusterModels, ExecutorOptions, SchedulerOptions};
use shapfusion::net::transport::ListenOptions;
use shapfusion::registry::ModelRegistry;
use shapfusion::OutputKind;

/// A scheduler and executors in this process, stopped on drop.
struct Cluster {
    url: String,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// What each member of a test cluster gets.
struct Member {
    models: ClusterModels,
    runtime: Option<Arc<RuntimeEnv>>,
}

async fn start_cluster(scheduler: Member, executors: Vec<Member>, data_root: &Path, token: Option<&str>) -> Cluster {
    let token = token.map(str::to_string);
    let authenticated = |listen: &str| ListenOptions { authenticated: token.is_some(), ..ListenOptions::local(listen) };
    let running = shapfusion::ballista::start_scheduler(SchedulerOptions {
        listen: authenticated("127.0.0.1:0"),
        external_host: None,
        token: token.clone(),
        models: scheduler.models,
        data_roots: vec![data_root.to_string_lossy().into_owned()],
        allow_write: vec![],
        executor_timeout_secs: 30,
        runtime: scheduler.runtime,
    })
    .await
    .unwrap();
    let mut tasks = vec![tokio::spawn(async move {
        let _ = running.task.await;
    })];
    for (i, member) in executors.into_iter().enumerate() {
        let options = ExecutorOptions {
            listen: authenticated(&format!("127.0.0.1:{}", free_port())),
            external_host: None,
            scheduler: running.addr.to_string(),
            token: token.clone(),
            models: member.models,
            concurrent_tasks: 2,
            work_dir: None,
            heartbeat_secs: 5,
            executor_id: Some(format!("test-executor-{i}")),
            runtime: member.runtime,
        };
        tasks.push(tokio::spawn(async move {
            if let Err(e) = shapfusion::ballista::run_executor(options).await {
                eprintln!("executor stopped: {e}");
            }
        }));
    }
    Cluster { url: format!("df://{}", running.addr), tasks }
}

/// A client session on `cluster` whose models resolve through its own registry of
/// `registry_models` (returned too, for more names).
fn client_with_registry(
    cluster: &Cluster,
    registry_models: &[(&str, String)],
    runtime: Option<Arc<RuntimeEnv>>,
    token: Option<&str>,
) -> (SessionContext, Arc<ModelRegistry>) {
    let scheduler = RemoteScheduler { url: cluster.url.clone(), token: token.map(str::to_string) };
    let config = shapfusion::sql::session_config().with_target_partitions(2);
    let ctx = remote_context(config, runtime.unwrap_or_default(), &scheduler).unwrap();
    let registry = Arc::new(ModelRegistry::new(Some(ctx.runtime_env())));
    for (name, url) in registry_models {
        registry.register(name, url).unwrap();
    }
    shapfusion::sql::register_with(&ctx, registry.clone()).unwrap();
    (ctx, registry)
}

/// [`client_with_registry`]'s session.
fn client(cluster: &Cluster, registry_models: &[(&str, String)], runtime: Option<Arc<RuntimeEnv>>, token: Option<&str>) -> SessionContext {
    client_with_registry(cluster, registry_models, runtime, token).0
}

/// The fixture's rows with a `row_id` column first, written as two Parquet files (so the scan
/// has partitions for both executors).
fn numbered_input(f: &Fixture, dir: &Path) -> PathBuf {
    let table = dir.join(&f.name);
    std::fs::create_dir_all(&table).unwrap();
    let rows = f.batch.num_rows();
    let mut fields = vec![Field::new("row_id", DataType::Int64, false)];
    fields.extend(f.batch.schema().fields().iter().map(|f| f.as_ref().clone()));
    let mut columns: Vec<Arc<dyn Array>> = vec![Arc::new(Int64Array::from_iter_values(0..rows as i64))];
    columns.extend(f.batch.columns().iter().cloned());
    let batch = RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap();
    let half = rows / 2;
    for (part, (offset, len)) in [(0, half), (half, rows - half)].into_iter().enumerate() {
        let file = std::fs::File::create(table.join(format!("part-{part}.parquet"))).unwrap();
        let mut writer = parquet::arrow::ArrowWriter::try_new(file, batch.schema(), None).unwrap();
        writer.write(&batch.slice(offset, len)).unwrap();
        writer.close().unwrap();
    }
    table
}

fn model_name(f: &Fixture) -> String {
    format!("m_{}", f.name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn distributed_sql_equals_explain_on_every_fixture() {
    let data = tempfile::tempdir().unwrap();
    let all = fixtures();
    let named: Vec<(String, String)> = all.iter().map(|f| (model_name(f), f.model_path.to_string_lossy().into_owned())).collect();
    let models = ClusterModels { models: named.iter().map(|(n, u)| format!("{n}={u}")).collect(), ..Default::default() };
    let member = || Member { models: models.clone(), runtime: None };
    let cluster = start_cluster(member(), vec![member(), member()], data.path(), None).await;
    let refs: Vec<(&str, String)> = named.iter().map(|(n, u)| (n.as_str(), u.clone())).collect();
    let ctx = client(&cluster, &refs, None, None);

    for f in &all {
        let table = numbered_input(f, data.path());
        ctx.register_parquet(&f.name, table.to_str().unwrap(), ParquetReadOptions::default()).await.unwrap();
        let (m, cols) = (model_name(f), feature_list(f));

        let got = query(&ctx, &format!("SELECT row_id, shap('{m}', {cols}) AS s FROM \"{}\" ORDER BY row_id", f.name)).await;
        assert_eq!(got.num_rows(), f.batch.num_rows(), "{}", f.name);
        let want = explain_output(f, OutputKind::Shap);
        let shap = got.column(1).as_struct();
        assert_eq!(shap.num_columns(), want.num_columns(), "{}", f.name);
        for (j, field) in want.schema().fields().iter().enumerate() {
            assert_eq!(shap.fields()[j].name(), field.name(), "{}", f.name);
            assert!(same_bits(shap.column(j).as_ref(), want.column(j).as_ref()), "{}: column {}", f.name, field.name());
        }

        let pred = query(&ctx, &format!("SELECT row_id, margin('{m}', {cols}) FROM \"{}\" ORDER BY row_id", f.name)).await;
        assert!(same_bits(pred.column(1).as_ref(), explain_output(f, OutputKind::Margin).column(0).as_ref()), "{}", f.name);

        let inter = query(&ctx, &format!("SELECT row_id, shap_interactions('{m}', {cols}) FROM \"{}\" ORDER BY row_id", f.name)).await;
        assert!(same_bits(inter.column(1).as_ref(), explain_output(f, OutputKind::Interactions).column(0).as_ref()), "{}", f.name);
    }

    // An aggregate over the attributions (a shuffle between stages) sums what explain gives.
    let f = all.iter().find(|f| f.name == "xgb_regression").unwrap();
    let first = &f.model.feature_names()[0];
    let sums = query(
        &ctx,
        &format!(
            "SELECT row_id % 3 AS g, SUM(shap('{}', {})['{first}']) AS total FROM \"{}\" GROUP BY row_id % 3 ORDER BY g",
            model_name(f),
            feature_list(f),
            f.name
        ),
    )
    .await;
    let want = explain_output(f, OutputKind::Shap);
    let as_f64 = |a: &dyn Array| arrow::compute::cast(a, &DataType::Float64).unwrap().as_primitive::<arrow::datatypes::Float64Type>().clone();
    let column = as_f64(want.column_by_name(first).unwrap().as_ref());
    let totals = as_f64(sums.column(1).as_ref());
    assert_eq!(totals.len(), 3);
    for (g, total) in totals.values().iter().enumerate() {
        let expected: f64 = column.values().iter().enumerate().filter(|(i, _)| i % 3 == g).map(|(_, v)| *v).sum();
        assert!((total - expected).abs() <= 1e-9 * expected.abs().max(1.0), "group {g}: {total} vs {expected}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn executors_compute_with_the_sessions_settings_or_refuse_them_by_name() {
    // A deep model, where the engines' last bits differ, so the algorithm that ran shows.
    let data = tempfile::tempdir().unwrap();
    let f = fixtures().into_iter().find(|f| f.name == "xgb_deep").unwrap();
    let models = ClusterModels { models: vec![format!("m={}", f.model_path.display())], ..Default::default() };
    let member = || Member { models: models.clone(), runtime: None };
    let cluster = start_cluster(member(), vec![member(), member()], data.path(), None).await;
    let table = numbered_input(&f, data.path());
    let local = |algorithm: shapfusion::Algorithm| {
        shapfusion::Explainer::builder(f.model.clone()).algorithm(algorithm).build().unwrap().explain_batch(&f.batch).unwrap()
    };
    let (treeshap, linear) = (local(shapfusion::Algorithm::TreeShap), local(shapfusion::Algorithm::Linear));
    assert!(
        treeshap.columns().iter().zip(linear.columns()).any(|(a, b)| !same_bits(a.as_ref(), b.as_ref())),
        "the fixture cannot tell the engines apart"
    );
    let sql = format!("SELECT row_id, shap('m', {}) AS s FROM t ORDER BY row_id", feature_list(&f));
    for (algorithm, want) in [("treeshap", &treeshap), ("linear", &linear)] {
        let ctx = client(&cluster, &[("m", f.model_path.to_string_lossy().into_owned())], None, None);
        ctx.register_parquet("t", table.to_str().unwrap(), ParquetReadOptions::default()).await.unwrap();
        ctx.sql(&format!("SET shap.algorithm = '{algorithm}'")).await.unwrap();
        let got = query(&ctx, &sql).await;
        let shap = got.column(1).as_struct();
        for (j, field) in want.schema().fields().iter().enumerate() {
            assert!(
                same_bits(shap.column(j).as_ref(), want.column(j).as_ref()),
                "{algorithm}: column {} differs from local {algorithm}",
                field.name()
            );
        }
    }
    if shapfusion::Device::Gpu.resolve().is_err() {
        let ctx = client(&cluster, &[("m", f.model_path.to_string_lossy().into_owned())], None, None);
        ctx.register_parquet("t", table.to_str().unwrap(), ParquetReadOptions::default()).await.unwrap();
        ctx.sql("SET shap.device = 'gpu'").await.unwrap();
        let e = query_err(&ctx, &sql).await;
        assert!(e.contains("device gpu"), "{e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn interventional_shap_on_the_cluster_equals_explain() {
    let data = tempfile::tempdir().unwrap();
    let f = fixtures().into_iter().find(|f| f.name == "xgb_regression").unwrap();
    let background = f.background().unwrap();
    let models = ClusterModels {
        models: vec![format!("m={}", f.model_path.display())],
        backgrounds: vec![format!("bg={}", background.display())],
        model_dir: None,
    };
    let member = || Member { models: models.clone(), runtime: None };
    let cluster = start_cluster(member(), vec![member(), member()], data.path(), None).await;
    let table = numbered_input(&f, data.path());
    let rows = shapfusion::input::read_background(&background, &f.model, None, 0).unwrap();
    let explainer = shapfusion::Explainer::builder(f.model.clone()).background(rows).build().unwrap();
    let want = explainer.explain_batch(&f.batch).unwrap();

    // A client session whose registry knows the background under the same name.
    let (ctx, registry) = client_with_registry(&cluster, &[("m", f.model_path.to_string_lossy().into_owned())], None, None);
    registry.register_background("bg", background.to_str().unwrap()).unwrap();
    ctx.register_parquet("t", table.to_str().unwrap(), ParquetReadOptions::default()).await.unwrap();
    ctx.sql("SET shap.background = 'bg'").await.unwrap();
    let got = query(&ctx, &format!("SELECT row_id, shap('m', {}) AS s FROM t ORDER BY row_id", feature_list(&f))).await;
    let shap = got.column(1).as_struct();
    for (j, field) in want.schema().fields().iter().enumerate() {
        assert!(
            same_bits(shap.column(j).as_ref(), want.column(j).as_ref()),
            "column {}: {:?} vs {:?}",
            field.name(),
            shap.column(j).slice(0, 3),
            want.column(j).slice(0, 3)
        );
    }
}

/// A runtime whose `memory://` store holds `bytes` at `models/m.json`.
async fn runtime_with_model(bytes: Vec<u8>) -> Arc<RuntimeEnv> {
    let runtime = Arc::new(RuntimeEnv::default());
    let store = Arc::new(InMemory::new());
    store.put(&object_store::path::Path::from("models/m.json"), PutPayload::from(bytes)).await.unwrap();
    runtime.register_object_store(&url::Url::parse("memory://").unwrap(), store);
    runtime
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_executor_with_another_model_version_fails_the_task_naming_both() {
    let data = tempfile::tempdir().unwrap();
    let all = fixtures();
    let f = all.iter().find(|f| f.name == "xgb_regression").unwrap();
    let planned = std::fs::read(&f.model_path).unwrap();
    // Same features, other trees: a retrained model deployed to one machine only.
    let mut other: serde_json::Value = serde_json::from_slice(&planned).unwrap();
    let trees = &mut other["learner"]["gradient_booster"]["model"]["trees"];
    let n = trees.as_array().unwrap().len();
    trees.as_array_mut().unwrap().truncate(n / 2);
    other["learner"]["gradient_booster"]["model"]["tree_info"].as_array_mut().unwrap().truncate(n / 2);
    other["learner"]["gradient_booster"]["model"]["gbtree_model_param"]["num_trees"] = serde_json::json!((n / 2).to_string());
    let other = serde_json::to_vec(&other).unwrap();
    assert!(shapfusion::Model::from_bytes(&other, "other").is_ok());

    let models = ClusterModels { models: vec!["m=memory:///models/m.json".into()], ..Default::default() };
    let scheduler_rt = runtime_with_model(planned.clone()).await;
    let executor_rt = runtime_with_model(other.clone()).await;
    let cluster = start_cluster(
        Member { models: models.clone(), runtime: Some(scheduler_rt.clone()) },
        vec![Member { models: models.clone(), runtime: Some(executor_rt) }],
        data.path(),
        None,
    )
    .await;
    let ctx = client(&cluster, &[("m", "memory:///models/m.json".into())], Some(scheduler_rt), None);
    let table = numbered_input(f, data.path());
    ctx.register_parquet("t", table.to_str().unwrap(), ParquetReadOptions::default()).await.unwrap();
    let e = query_err(&ctx, &format!("SELECT shap('m', {}) FROM t", feature_list(f))).await;
    let planned_hash = shapfusion::registry::content_hash(&planned);
    let other_hash = shapfusion::registry::content_hash(&other);
    for needle in ["executor test-executor-0", "model", "memory:///models/m.json", "planned with version", planned_hash.as_str(), other_hash.as_str()]
    {
        assert!(e.contains(needle), "{needle:?} not in {e}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_cluster_refuses_callers_without_its_token_and_files_outside_its_data_roots() {
    let data = tempfile::tempdir().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let f = fixtures().into_iter().find(|f| f.name == "lgb_regression").unwrap();
    let models = ClusterModels { models: vec![format!("m={}", f.model_path.display())], ..Default::default() };
    let member = || Member { models: models.clone(), runtime: None };
    let token = "cluster-s3cret";
    let cluster = start_cluster(member(), vec![member()], data.path(), Some(token)).await;
    let model = [("m", f.model_path.to_string_lossy().into_owned())];
    let sql = format!("SELECT row_id, shap('m', {}) AS s FROM t ORDER BY row_id", feature_list(&f));

    let inside = numbered_input(&f, data.path());
    let anonymous = client(&cluster, &model, None, None);
    anonymous.register_parquet("t", inside.to_str().unwrap(), ParquetReadOptions::default()).await.unwrap();
    let e = query_err(&anonymous, &sql).await;
    assert!(e.contains("bearer token is required"), "{e}");
    let wrong = client(&cluster, &model, None, Some("guess"));
    wrong.register_parquet("t", inside.to_str().unwrap(), ParquetReadOptions::default()).await.unwrap();
    assert!(query_err(&wrong, &sql).await.contains("wrong bearer token"));

    // With the token: the query runs (results fetched from the executor with the token too).
    let ctx = client(&cluster, &model, None, Some(token));
    ctx.register_parquet("t", inside.to_str().unwrap(), ParquetReadOptions::default()).await.unwrap();
    assert_eq!(query(&ctx, &sql).await.num_rows(), f.batch.num_rows());

    // A table outside the scheduler's data roots is refused, saying so.
    let outside = numbered_input(&f, elsewhere.path());
    ctx.register_parquet("o", outside.to_str().unwrap(), ParquetReadOptions::default()).await.unwrap();
    let e = query_err(&ctx, &sql.replace("FROM t", "FROM o")).await;
    assert!(e.contains("data roots"), "{e}");
}
