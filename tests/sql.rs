//! The SQL UDFs against `explain`, and their planning errors, options and model loading.

mod common;

use std::sync::Arc;

use arrow::array::AsArray;
use arrow::datatypes::Float64Type;
use common::sql::{explain_output, feature_list, query, query_err, same_bits};
use common::{fixtures, read_parquet, Fixture};
use datafusion::prelude::{ParquetReadOptions, SessionContext};
use object_store::memory::InMemory;
use object_store::{ObjectStoreExt, PutPayload};
use shapfusion::pipeline::{explain_with_model, ExplainOptions};
use shapfusion::OutputKind;

fn session(partitions: usize) -> (SessionContext, Arc<shapfusion::registry::ModelRegistry>) {
    let ctx = SessionContext::new_with_config(shapfusion::sql::session_config().with_target_partitions(partitions));
    let registry = shapfusion::sql::register(&ctx).unwrap();
    (ctx, registry)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_equals_explain_on_every_fixture() {
    for f in fixtures() {
        let (ctx, registry) = session(1);
        registry.register("m", f.model_path.to_str().unwrap()).unwrap();
        ctx.register_parquet("t", f.input_path().to_str().unwrap(), ParquetReadOptions::default()).await.unwrap();
        let cols = feature_list(&f);

        let shap = query(&ctx, &format!("SELECT shap('m', {cols}) AS s FROM t")).await;
        let want = explain_output(&f, OutputKind::Shap);
        let got = shap.column(0).as_struct();
        assert_eq!(got.num_columns(), want.num_columns(), "{}", f.name);
        for (j, field) in want.schema().fields().iter().enumerate() {
            assert_eq!(got.fields()[j].name(), field.name(), "{}", f.name);
            assert!(same_bits(got.column(j).as_ref(), want.column(j).as_ref()), "{}: column {}", f.name, field.name());
        }

        let inter = query(&ctx, &format!("SELECT shap_interactions('m', {cols}) FROM t")).await;
        assert!(same_bits(inter.column(0).as_ref(), explain_output(&f, OutputKind::Interactions).column(0).as_ref()), "{}", f.name);

        let margin = query(&ctx, &format!("SELECT margin('m', {cols}) FROM t")).await;
        assert!(same_bits(margin.column(0).as_ref(), explain_output(&f, OutputKind::Margin).column(0).as_ref()), "{}", f.name);
        // The function's name before it was `margin` still answers, with the same bits.
        let predict = query(&ctx, &format!("SELECT predict('m', {cols}) FROM t")).await;
        assert!(same_bits(predict.column(0).as_ref(), margin.column(0).as_ref()), "{}", f.name);
    }
}

fn fixture(name: &str) -> Fixture {
    fixtures().into_iter().find(|f| f.name == name).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn field_access_nulls_and_integer_arguments() {
    let f = fixture("lgb_regression");
    let (ctx, registry) = session(2);
    registry.register("m", f.model_path.to_str().unwrap()).unwrap();
    ctx.register_parquet("t", f.input_path().to_str().unwrap(), ParquetReadOptions::default()).await.unwrap();
    let cols = feature_list(&f);

    // s['x3'] is the x3 field of the struct.
    let b = query(&ctx, &format!("SELECT shap('m', {cols})['x3'] AS a, shap('m', {cols}) AS s FROM t")).await;
    assert!(same_bits(b.column(0).as_ref(), b.column(1).as_struct().column_by_name("x3").unwrap().as_ref()));

    // SQL NULL is a missing value, like NaN.
    let with_null = cols.replacen("\"x0\"", "NULL", 1);
    let with_nan = cols.replacen("\"x0\"", "CAST('NaN' AS DOUBLE)", 1);
    let a = query(&ctx, &format!("SELECT shap('m', {with_null}) FROM t")).await;
    let b = query(&ctx, &format!("SELECT shap('m', {with_nan}) FROM t")).await;
    assert!(same_bits(a.column(0).as_ref(), b.column(0).as_ref()));
    // and it is not the same as the row's real value
    let c = query(&ctx, &format!("SELECT shap('m', {cols}) FROM t")).await;
    assert!(!same_bits(a.column(0).as_ref(), c.column(0).as_ref()));

    // Integer arguments are coerced: CAST(x*1000 AS INT) gives the same as the rounded double.
    let ints = f.model.feature_names().iter().map(|n| format!("CAST(\"{n}\" * 1000 AS INT)")).collect::<Vec<_>>().join(", ");
    let dbls = f.model.feature_names().iter().map(|n| format!("CAST(CAST(\"{n}\" * 1000 AS INT) AS DOUBLE)")).collect::<Vec<_>>().join(", ");
    let a = query(&ctx, &format!("SELECT margin('m', {ints}) FROM t")).await;
    let b = query(&ctx, &format!("SELECT margin('m', {dbls}) FROM t")).await;
    assert!(same_bits(a.column(0).as_ref(), b.column(0).as_ref()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_to_parquet_round_trips() {
    let f = fixture("xgb_multiclass");
    let (ctx, registry) = session(1);
    registry.register("m", f.model_path.to_str().unwrap()).unwrap();
    ctx.register_parquet("t", f.input_path().to_str().unwrap(), ParquetReadOptions::default()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("copy.parquet");
    let cols = feature_list(&f);
    query(&ctx, &format!("COPY (SELECT shap('m', {cols}) AS s FROM t) TO '{}' STORED AS PARQUET", out.display())).await;
    let back = read_parquet(&out);
    let direct = query(&ctx, &format!("SELECT shap('m', {cols}) AS s FROM t")).await;
    assert!(same_bits(back.column(0).as_ref(), direct.column(0).as_ref()));
    // multiclass: each field is a list of 3
    assert_eq!(back.column(0).as_struct().column(0).as_fixed_size_list().value_length(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn category_names_need_a_model_that_stores_them_and_a_known_category() {
    let (ctx, registry) = session(1);
    // Names for a categorical feature need a model that stores its categories (the numbers
    // for names are checked against the libraries by sql_equals_explain_on_every_fixture).
    let f = fixture("xgb_categorical");
    registry.register("codes", f.model_path.to_str().unwrap()).unwrap();
    ctx.register_parquet("c", f.input_path().to_str().unwrap(), ParquetReadOptions::default()).await.unwrap();
    let e = query_err(&ctx, "SELECT shap('codes', x0, CAST(c1 AS VARCHAR), x2, c3) FROM c").await;
    assert!(e.contains("argument 3") && e.contains("\"c1\"") && e.contains("stores no category names") && e.contains("codes"), "{e}");
    let f = fixture("xgb_named_categories");
    registry.register("named", f.model_path.to_str().unwrap()).unwrap();
    ctx.register_parquet("n", f.input_path().to_str().unwrap(), ParquetReadOptions::default()).await.unwrap();
    let e = query_err(&ctx, "SELECT shap('named', amount, CASE WHEN amount > 20 THEN 'XX' ELSE country END, channel, tier) FROM n").await;
    assert!(e.contains("\"country\"") && e.contains("\"XX\"") && e.contains("not seen in training"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planning_errors_say_what_was_expected() {
    let f = fixture("xgb_regression");
    let (ctx, registry) = session(1);
    registry.register("m", f.model_path.to_str().unwrap()).unwrap();
    ctx.register_parquet("t", f.input_path().to_str().unwrap(), ParquetReadOptions::default()).await.unwrap();

    let e = query_err(&ctx, "SELECT shap('m', f0, f1) FROM t").await;
    assert!(e.contains("10 features") && e.contains("f0, f1, f2, f3, f4, f5, f6, f7, f8, f9") && e.contains("got 2"), "{e}");

    let e = query_err(&ctx, "SELECT shap('m', f0, 'x', f2, f3, f4, f5, f6, f7, f8, f9) FROM t").await;
    assert!(e.contains("argument 3") && e.contains("\"f1\"") && e.contains("needs a number"), "{e}");

    let e = query_err(&ctx, "SELECT shap(CAST(f0 AS VARCHAR), f0, f1, f2, f3, f4, f5, f6, f7, f8, f9) FROM t").await;
    assert!(e.contains("constant model name"), "{e}");

    let e = query_err(&ctx, "SELECT shap('nosuch', f0) FROM t").await;
    assert!(e.contains("\"nosuch\"") && e.contains("registered models (m)") && e.contains("shap.model_dir"), "{e}");

    // A GPU asked for where there is none: the query fails saying what is missing.
    #[cfg(feature = "gpu")]
    if let Err(missing) = shapfusion::gpu::probe() {
        ctx.sql("SET shap.device = 'gpu'").await.unwrap();
        let e = query_err(&ctx, "SELECT shap('m', f0, f1, f2, f3, f4, f5, f6, f7, f8, f9) FROM t").await;
        assert!(e.contains("gpu") && e.contains(&missing), "{e}");
        ctx.sql("SET shap.device = 'auto'").await.unwrap();
        assert_eq!(query(&ctx, "SELECT shap('m', f0, f1, f2, f3, f4, f5, f6, f7, f8, f9) FROM t").await.num_rows(), f.batch.num_rows());
    }

    ctx.sql("SET shap.model_dir = '/no/such/dir'").await.unwrap();
    let e = query_err(&ctx, "SELECT shap('nosuch', f0) FROM t").await;
    assert!(e.contains("/no/such/dir/nosuch.json") && e.contains("/no/such/dir/nosuch.txt"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn model_dir_and_changed_models_are_reloaded() {
    let a = fixture("xgb_regression");
    let b = fixture("xgb_missing"); // same features (f0..f9), different trees
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(&a.model_path, dir.path().join("diab.json")).unwrap();
    let (ctx, _) = session(1);
    ctx.register_parquet("t", a.input_path().to_str().unwrap(), ParquetReadOptions::default()).await.unwrap();
    ctx.sql(&format!("SET shap.model_dir = '{}'", dir.path().display())).await.unwrap();
    let cols = feature_list(&a);
    let sql = format!("SELECT margin('diab', {cols}) FROM t");
    let first = query(&ctx, &sql).await;
    let want_a = a.expected_f64("margin").unwrap();
    let got: Vec<f64> = first.column(0).as_primitive::<Float64Type>().values().to_vec();
    assert!(got.iter().zip(&want_a).all(|(x, y)| (x - y).abs() < 1e-4 * y.abs().max(1.0)));

    // Replace the file in place: the next query sees the new model.
    std::fs::copy(&b.model_path, dir.path().join("diab.json")).unwrap();
    let second = query(&ctx, &sql).await;
    assert!(!same_bits(first.column(0).as_ref(), second.column(0).as_ref()), "model change not picked up");
    let expect_b =
        shapfusion::engine::build_engine(b.model.clone(), Default::default(), None, &Default::default()).unwrap().predict(&a.block()).unwrap();
    assert_eq!(second.column(0).as_primitive::<Float64Type>().values().to_vec(), expect_b.values);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_load_from_an_object_store_behind_s3_urls() {
    let f = fixture("lgb_multiclass");
    let (ctx, _) = session(1);
    // An in-memory store answers for s3://models, through the same code path as real S3.
    let store = Arc::new(InMemory::new());
    store.put(&"zoo/wine.txt".into(), PutPayload::from(std::fs::read(&f.model_path).unwrap())).await.unwrap();
    ctx.runtime_env().register_object_store(&url::Url::parse("s3://models").unwrap(), store);
    ctx.register_parquet("t", f.input_path().to_str().unwrap(), ParquetReadOptions::default()).await.unwrap();
    let cols = feature_list(&f);

    let by_url = query(&ctx, &format!("SELECT margin('s3://models/zoo/wine.txt', {cols}) FROM t")).await;
    ctx.sql("SET shap.model_dir = 's3://models/zoo'").await.unwrap();
    let by_name = query(&ctx, &format!("SELECT margin('wine', {cols}) FROM t")).await;
    assert!(same_bits(by_url.column(0).as_ref(), by_name.column(0).as_ref()));
    let want = f.expected_f64("margin").unwrap();
    let got = by_name.column(0).as_fixed_size_list().values().as_primitive::<Float64Type>().values().to_vec();
    assert!(got.iter().zip(&want).all(|(x, y)| (x - y).abs() < 1e-9 * y.abs().max(1.0)));

    let e = query_err(&ctx, &format!("SELECT margin('s3://models/zoo/none.txt', {cols}) FROM t")).await;
    assert!(e.contains("s3://models/zoo/none.txt"), "{e}");
}

/// `SET shap.background` gives interventional values equal to `explain --background` (the same
/// batch step) on every fixture with a shap reference, bit for bit, and CatBoost's own where the
/// fixture holds them (its categories read from the stored background as from an input); an
/// unknown name is named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_with_a_background_equals_explain_with_it() {
    let mut checked = 0;
    for f in fixtures().into_iter().chain(common::combination_fixtures()) {
        let Some(bg_path) = f.background() else {
            continue;
        };
        let (ctx, registry) = session(2);
        registry.register("m", f.model_path.to_str().unwrap()).unwrap();
        registry.register_background("recent", bg_path.to_str().unwrap()).unwrap();
        ctx.register_parquet("t", f.input_path().to_str().unwrap(), ParquetReadOptions::default()).await.unwrap();
        ctx.sql("SET shap.background = 'recent'").await.unwrap();
        let got = query(&ctx, &format!("SELECT shap('m', {}) AS s FROM t", feature_list(&f))).await;

        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("o.parquet");
        let background = shapfusion::input::read_background(&bg_path, &f.model, None, 0).unwrap();
        explain_with_model(f.model.clone(), &f.input_path(), &out, &ExplainOptions { background: Some(background), ..Default::default() }).unwrap();
        let want = read_parquet(&out);
        let got = got.column(0).as_struct();
        for (i, column) in want.columns().iter().enumerate() {
            assert!(same_bits(got.column(i).as_ref(), column.as_ref()), "{}: column {i} differs from explain --background", f.name);
        }
        if let Some(library) = f.expected_f64("background_contribs") {
            let (err, row) = common::max_row_rel_error(&common::row_major(got.columns(), 1), &library, f.model.num_features() + 1);
            assert!(err <= 1e-12, "{}: {err:.3e} from the library's values over the background (row {row})", f.name);
        }
        checked += 1;
    }
    assert!(checked >= 8, "only {checked} fixtures have a background");

    let f = fixture("xgb_regression");
    let (ctx, registry) = session(1);
    registry.register("m", f.model_path.to_str().unwrap()).unwrap();
    ctx.register_parquet("t", f.input_path().to_str().unwrap(), ParquetReadOptions::default()).await.unwrap();
    ctx.sql("SET shap.background = 'nowhere'").await.unwrap();
    let e = query_err(&ctx, &format!("SELECT shap('m', {}) FROM t", feature_list(&f))).await;
    assert!(e.contains("unknown background \"nowhere\"") && e.contains("registered backgrounds: none"), "{e}");
}

/// `SET shap.index = 'banzhaf'` gives `explain --index banzhaf`'s values bit for bit, path-dependent
/// (SHAP layout and interactions) and with a background (values and interactions, and Shapley
/// interactions over the background too); a bad name is refused naming the choices.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sql_with_index_banzhaf_equals_explain_with_it() {
    let f = fixture("xgb_missing");
    let (ctx, registry) = session(2);
    registry.register("m", f.model_path.to_str().unwrap()).unwrap();
    let bg_path = f.background().unwrap();
    registry.register_background("recent", bg_path.to_str().unwrap()).unwrap();
    ctx.register_parquet("t", f.input_path().to_str().unwrap(), ParquetReadOptions::default()).await.unwrap();
    ctx.sql("SET shap.index = 'banzhaf'").await.unwrap();
    let cols = feature_list(&f);
    let settings = shapfusion::ComputeSettings { index: shapfusion::engine::Index::Banzhaf, ..Default::default() };
    let explained = |output, background| {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("o.parquet");
        explain_with_model(f.model.clone(), &f.input_path(), &out, &ExplainOptions { settings, output, background, ..Default::default() }).unwrap();
        read_parquet(&out)
    };
    let shap = query(&ctx, &format!("SELECT shap('m', {cols}) AS s FROM t")).await;
    let want = explained(OutputKind::Shap, None);
    for (i, column) in want.columns().iter().enumerate() {
        assert!(same_bits(shap.column(0).as_struct().column(i).as_ref(), column.as_ref()), "column {i} differs from explain --index banzhaf");
    }
    // Banzhaf values, not SHAP values.
    assert!(!same_bits(want.column(0).as_ref(), explain_output(&f, OutputKind::Shap).column(0).as_ref()));
    let inter = query(&ctx, &format!("SELECT shap_interactions('m', {cols}) FROM t")).await;
    assert!(same_bits(inter.column(0).as_ref(), explained(OutputKind::Interactions, None).column(0).as_ref()));
    ctx.sql("SET shap.background = 'recent'").await.unwrap();
    let over_background = query(&ctx, &format!("SELECT shap('m', {cols}) AS s FROM t")).await;
    let background = shapfusion::input::read_background(&bg_path, &f.model, None, 0).unwrap();
    let want = explained(OutputKind::Shap, Some(background.clone()));
    for (i, column) in want.columns().iter().enumerate() {
        assert!(same_bits(over_background.column(0).as_struct().column(i).as_ref(), column.as_ref()), "column {i} differs with the background");
    }
    // Interventional interaction values, Banzhaf's and then Shapley's.
    let inter = query(&ctx, &format!("SELECT shap_interactions('m', {cols}) FROM t")).await;
    assert!(same_bits(inter.column(0).as_ref(), explained(OutputKind::Interactions, Some(background.clone())).column(0).as_ref()));
    ctx.sql("SET shap.index = 'shapley'").await.unwrap();
    let inter = query(&ctx, &format!("SELECT shap_interactions('m', {cols}) FROM t")).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o.parquet");
    let options = ExplainOptions { output: OutputKind::Interactions, background: Some(background), ..Default::default() };
    explain_with_model(f.model.clone(), &f.input_path(), &out, &options).unwrap();
    assert!(same_bits(inter.column(0).as_ref(), read_parquet(&out).column(0).as_ref()), "Shapley interactions over the background");
    let e = ctx.sql("SET shap.index = 'owen'").await.err().unwrap().to_string();
    assert!(e.contains("shap.index: unknown index \"owen\"") && e.contains("shapley, banzhaf"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spark_ml_directories_are_found_under_the_model_dir() {
    // A forest as Spark wrote it, and a CrossValidatorModel (its best model a PipelineModel,
    // beside the estimator and evaluator it also saves), listed through the object store.
    for (name, fixture_name) in [("forest", "spark_random_forest"), ("tuned", "spark_cv_forest")] {
        let f = fixture(fixture_name);
        let dir = tempfile::tempdir().unwrap();
        // `<model_dir>/NAME/` is the directory Spark wrote (with a stray _SUCCESS marker).
        for entry in walk(&f.model_path) {
            let to = dir.path().join(name).join(entry.strip_prefix(&f.model_path).unwrap());
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(&entry, to).unwrap();
        }
        std::fs::write(dir.path().join(name).join("_SUCCESS"), "").unwrap();
        let (ctx, _) = session(1);
        ctx.register_parquet("t", f.input_path().to_str().unwrap(), ParquetReadOptions::default()).await.unwrap();
        ctx.sql(&format!("SET shap.model_dir = '{}'", dir.path().display())).await.unwrap();
        let got = query(&ctx, &format!("SELECT margin('{name}', {}) FROM t", feature_list(&f))).await;
        assert!(same_bits(got.column(0).as_ref(), explain_output(&f, OutputKind::Margin).column(0).as_ref()), "{fixture_name}");
        let e = query_err(&ctx, &format!("SELECT margin('nothere', {}) FROM t", feature_list(&f))).await;
        assert!(e.contains("nothere/ (a Spark ML model directory)"), "{e}");
    }
}

fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}
