//! Interventional SHAP against shap's own `TreeExplainer(model, data=background,
//! feature_perturbation="interventional")` on the committed fixtures
//! (`tests/make_interventional_fixtures.py`), and the front ends against the engine.

mod common;

use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};

use common::{brute_force_interventional, fixtures, linear_fixtures, max_row_rel_error, read_parquet, Fixture};
use shapfusion::engine::{build_interventional, Algorithm, EngineOptions, Index, OutputTransform};
use shapfusion::{Explainer, OutputKind};

/// One shap reference: the fixture, its background rows and shap's values.
struct Case {
    fixture: Fixture,
    size: usize,
    background: arrow::array::RecordBatch,
    expected: serde_json::Value,
}

fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    for fixture in fixtures() {
        let mut sizes: Vec<usize> = std::fs::read_dir(&fixture.dir)
            .unwrap()
            .filter_map(|e| e.unwrap().file_name().to_str()?.strip_prefix("interventional_")?.strip_suffix(".json")?.parse().ok())
            .collect();
        sizes.sort();
        for size in sizes {
            let expected = serde_json::from_slice(&std::fs::read(fixture.dir.join(format!("interventional_{size}.json"))).unwrap()).unwrap();
            let background = read_parquet(&fixture.dir.join(format!("background_{size}.parquet")));
            out.push(Case { fixture: fixture.clone(), size, background, expected });
        }
    }
    assert!(out.len() >= 14, "interventional fixtures missing: run tests/make_interventional_fixtures.py");
    out
}

fn values(v: &serde_json::Value) -> Vec<f64> {
    v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect()
}

#[test]
fn every_fixture_matches_shap_and_the_librarys_margins() {
    let mut with_shap = 0;
    for case in cases() {
        let f = &case.fixture;
        let (nf, g) = (f.model.num_features(), f.model.num_groups());
        let what = format!("{} background {}", f.name, case.size);
        let background = f.model.feature_block(&case.background).unwrap();
        let engine = build_interventional(f.model.clone(), &background, Algorithm::Auto, &EngineOptions::default()).unwrap();
        let got = engine.shap(&f.block()).unwrap();
        // The bias is the library's own mean margin over the background.
        let mean_margin = values(&case.expected["library_mean_margin"]);
        assert_eq!(mean_margin.len(), g, "{what}: one mean margin per output");
        for (k, want) in mean_margin.iter().enumerate() {
            let bias = got.row(0, k)[nf];
            assert!((bias - want).abs() <= 1e-6 * want.abs().max(1.0), "{what}: bias {bias} vs the library's {want}");
        }
        // Additivity against the library's margins for the explained rows.
        let margins = f.expected_f64("margin").unwrap();
        for r in 0..got.rows {
            for k in 0..g {
                let total: f64 = got.row(r, k).iter().sum();
                let m = margins[r * g + k];
                assert!((total - m).abs() <= 1e-5 * m.abs().max(1.0), "{what} row {r} group {k}: Σφ + bias = {total}, the library's margin {m}");
            }
        }
        // shap's values (rows × groups × features), where shap can explain the model.
        if let Some(shap_values) = case.expected.get("values") {
            let ours: Vec<f64> =
                (0..got.rows).flat_map(|r| (0..g).flat_map(move |k| (0..nf).map(move |i| (r, k, i)))).map(|(r, k, i)| got.row(r, k)[i]).collect();
            let (err, row) = max_row_rel_error(&ours, &values(shap_values), g * nf);
            assert!(err <= 1e-6, "{what}: row {row} off shap by {err:e} of max|phi|");
            with_shap += 1;
        }
        // The reference engine agrees far below shap's tolerance.
        let reference =
            build_interventional(f.model.clone(), &background, Algorithm::TreeShap, &EngineOptions::default()).unwrap().shap(&f.block()).unwrap();
        let (err, row) = max_row_rel_error(&got.values, &reference.values, g * (nf + 1));
        assert!(err <= 1e-9, "{what}: row {row} off the reference by {err:e}");
    }
    assert!(with_shap >= 9, "only {with_shap} fixtures have shap's values");
}

/// Where shap cannot serve as the reference (categorical splits of either library, LightGBM
/// multiclass and zero-as-missing; see tests/make_interventional_fixtures.py; scikit-learn's
/// category sets, CatBoost and Spark ML models), the definition itself does: every coalition of
/// a small model, from its predictions alone.
#[test]
fn models_shap_cannot_explain_equal_brute_force() {
    // The libraries' own categorical rules and the other libraries' models, which shap reads
    // with a background only for scikit-learn (tests/make_sklearn_fixtures.py writes those).
    let names = [
        "xgb_categorical",
        "lgb_categorical",
        "lgb_multiclass",
        "lgb_zero_missing",
        "skl_hist_categorical",
        "cb_binary_missing",
        "cb_multiclass",
        "spark_tree_categorical",
        "spark_gbt_classifier",
        "spark_one_vs_rest_tree",
    ];
    for f in fixtures().into_iter().filter(|f| names.contains(&f.name.as_str())) {
        let block = f.block();
        let values: Vec<f64> = block.values()[..10 * block.cols()].to_vec();
        let background = f.model.feature_block_from_values(10, values).unwrap();
        let engine = build_interventional(f.model.clone(), &background, Algorithm::Auto, &EngineOptions::default()).unwrap();
        let rows: Vec<f64> = block.values()[10 * block.cols()..13 * block.cols()].to_vec();
        let explained = f.model.feature_block_from_values(3, rows).unwrap();
        let got = engine.shap(&explained).unwrap();
        for r in 0..3 {
            let want = brute_force_interventional(&f.model, explained.row(r), &background);
            for (k, want) in want.iter().enumerate() {
                let scale = want.iter().fold(1e-9f64, |m, v| m.max(v.abs()));
                for (i, w) in want.iter().enumerate() {
                    let ours = got.row(r, k)[i];
                    assert!((ours - w).abs() <= 1e-9 * scale, "{} row {r} group {k} feature {i}: {ours} vs {w}", f.name);
                }
            }
        }
    }
}

#[test]
fn explainer_with_a_background_gives_the_engines_values() {
    let case = cases().into_iter().find(|c| c.fixture.name == "xgb_missing").unwrap();
    let f = &case.fixture;
    let explainer = Explainer::builder(f.model.clone()).background(case.background.clone()).build().unwrap();
    assert_eq!(explainer.engine().name(), "interventional");
    let batch = explainer.explain_batch(&f.batch).unwrap();
    let background = f.model.feature_block(&case.background).unwrap();
    let want = build_interventional(f.model.clone(), &background, Algorithm::Auto, &EngineOptions::default()).unwrap().shap(&f.block()).unwrap();
    for (i, column) in batch.columns().iter().enumerate() {
        let column = column.as_any().downcast_ref::<arrow::array::Float64Array>().unwrap();
        for r in 0..want.rows {
            assert_eq!(column.value(r).to_bits(), want.row(r, 0)[i].to_bits(), "column {i} row {r}");
        }
    }
    // Interaction values over the background: the engine's, bit for bit, through the explainer.
    let interactions = Explainer::builder(f.model.clone()).background(case.background.clone()).output(OutputKind::Interactions).build().unwrap();
    let got = interactions.interaction_values(&f.block()).unwrap();
    let engine = build_interventional(f.model.clone(), &background, Algorithm::Auto, &EngineOptions::default()).unwrap();
    assert_eq!(got, engine.interactions(&f.block()).unwrap());
    // Rows of each matrix sum to the values.
    let w = f.model.num_features() + 1;
    for r in 0..want.rows {
        for i in 0..w - 1 {
            let row: f64 = got.matrix(r, 0)[i * w..(i + 1) * w].iter().sum();
            assert!((row - want.row(r, 0)[i]).abs() <= 1e-12, "row {r} feature {i}: {row} against {}", want.row(r, 0)[i]);
        }
    }
    // Those of a transformed output are refused before the background is aggregated.
    let e = Explainer::builder(f.model.clone())
        .background(case.background.clone())
        .output(OutputKind::Interactions)
        .output_transform(shapfusion::engine::OutputTransform::Logistic)
        .build()
        .unwrap_err()
        .to_string();
    assert!(e.contains("transformed output") && e.contains("not built yet"), "{e}");
    let e = Explainer::builder(f.model.clone()).background(case.background.project(&[1]).unwrap()).build().unwrap_err().to_string();
    assert!(e.starts_with("background: ") && e.contains(&f.model.feature_names()[0]), "{e}");
}

/// LightGBM linear trees, which neither LightGBM nor shap explains: the values and interaction
/// values, Shapley's and Banzhaf's, against the definition over every coalition with each hybrid
/// row scored by LightGBM itself (`tests/make_linear_tree_fixtures.py`), NaNs in the explained
/// and background rows (where LightGBM gives a leaf its constant value) included.
#[test]
fn linear_trees_match_the_definition_over_lightgbms_own_scores() {
    let list = linear_fixtures();
    assert_eq!(list.len(), 3, "linear-tree fixtures missing: run tests/make_linear_tree_fixtures.py");
    for f in &list {
        assert!(f.model.has_linear_leaves(), "{}", f.name);
        let (nf, g) = (f.model.num_features(), f.model.num_groups());
        let (w, block) = (nf + 1, f.block());
        let background_rows = read_parquet(&f.dir.join("background.parquet"));
        let background = f.model.feature_block(&background_rows).unwrap();
        // The reader's predictions are LightGBM's, NaNs included.
        let margins = f.expected_f64("margin").unwrap();
        let engine = build_interventional(f.model.clone(), &background, Algorithm::Auto, &EngineOptions::default()).unwrap();
        let predicted = engine.predict(&block).unwrap();
        let (err, row) = max_row_rel_error(&predicted.values, &margins, g);
        assert!(err <= 1e-12, "{}: row {row}'s score off LightGBM's by {err:e}", f.name);
        for index in [Index::Shapley, Index::Banzhaf] {
            let what = format!("{} {index}", f.name);
            let options = EngineOptions { index, ..EngineOptions::default() };
            let engine = build_interventional(f.model.clone(), &background, Algorithm::Auto, &options).unwrap();
            let key = index.name();
            let got = engine.shap(&block).unwrap();
            let (err, row) = max_row_rel_error(&got.values, &f.expected_f64(key).unwrap(), g * w);
            assert!(err <= 1e-9, "{what}: row {row} off the definition by {err:e} of max|phi|");
            let pairs = engine.interactions(&block).unwrap();
            let (err, row) = max_row_rel_error(&pairs.values, &f.expected_f64(&format!("{key}_interactions")).unwrap(), g * w * w);
            assert!(err <= 1e-9, "{what}: row {row}'s interactions off the definition by {err:e}");
            // Each row adds up to LightGBM's score.
            for r in 0..got.rows {
                for k in 0..g {
                    let (total, m) = (got.row(r, k).iter().sum::<f64>(), margins[r * g + k]);
                    assert!((total - m).abs() <= 1e-9 * m.abs().max(1.0), "{what} row {r} group {k}: {total} against {m}");
                }
            }
            // auto groups each leaf's background rows; the reference walks them pair by pair:
            // the same sums in another order.
            let named = build_interventional(f.model.clone(), &background, Algorithm::TreeShap, &options).unwrap();
            assert_eq!((engine.name(), named.name()), ("interventional-linear-leaves", "interventional-reference"), "{what}");
            let (err, row) = max_row_rel_error(&named.shap(&block).unwrap().values, &got.values, g * w);
            assert!(err <= 1e-12, "{what}: row {row} of the reference off auto's by {err:e}");
        }
        // The linear models matter: the same trees with constant leaves give other values.
        let mut parts = (*f.model).clone().into_parts();
        parts.trees.iter_mut().for_each(|t| t.linear_leaves.clear());
        let constant = Arc::new(shapfusion::model::Model::new(parts, "constant leaves").unwrap());
        let other = build_interventional(constant, &background, Algorithm::Auto, &EngineOptions::default()).unwrap().shap(&block).unwrap();
        let (err, _) = max_row_rel_error(&other.values, &f.expected_f64("shapley").unwrap(), g * w);
        assert!(err > 1e-3, "{}: the linear models changed nothing ({err:e})", f.name);
    }
}

/// A linear-tree classifier's probability and loss over a background (shap's
/// `model_output="probability"` and `"log_loss"`): each background row's values of the margin
/// scaled by the transform's secant, as shap defines them for a transform, equal to that
/// definition over LightGBM's own scores of every hybrid row; each row adds up to its
/// transformed score. Their interaction values and Banzhaf values are refused as not built.
#[test]
fn linear_tree_probability_and_loss_match_shaps_definition_over_lightgbms_scores() {
    let f = linear_fixtures().into_iter().find(|f| f.name == "lgb_linear_binary").expect("run tests/make_linear_tree_fixtures.py");
    let background = read_parquet(&f.dir.join("background.parquet"));
    let (block, w) = (f.block(), f.model.num_features() + 1);
    let (labels, margins) = (f.expected_f64("labels").unwrap(), f.expected_f64("margin").unwrap());
    let explainer = |transform| Explainer::builder(f.model.clone()).background(background.clone()).output_transform(transform).build().unwrap();
    let probability = explainer(OutputTransform::Logistic).shap_values(&block).unwrap();
    let loss = explainer(OutputTransform::LogisticLoss).shap_values_with_labels(&block, &labels).unwrap();
    for (got, key) in [(&probability, "probability"), (&loss, "log_loss")] {
        let (err, row) = max_row_rel_error(&got.values, &f.expected_f64(key).unwrap(), w);
        assert!(err <= 1e-9, "{key}: row {row} off the definition by {err:e} of max|phi|");
    }
    for r in 0..block.rows() {
        let (m, y) = (margins[r], labels[r]);
        let p = 1.0 / (1.0 + (-m).exp());
        let nll = m.max(0.0) + (-m.abs()).exp().ln_1p() - y * m;
        for (got, want, what) in [(&probability, p, "probability"), (&loss, nll, "loss")] {
            let total: f64 = got.row(r, 0).iter().sum();
            assert!((total - want).abs() <= 1e-12 * want.abs().max(1.0), "row {r}'s {what} values add up to {total}, not {want}");
        }
    }
    // The rescaling matters: the margin's values are others.
    let margin = explainer(OutputTransform::Identity).shap_values(&block).unwrap();
    assert!(max_row_rel_error(&margin.values, &probability.values, w).0 > 1e-2);
    let e = explainer(OutputTransform::Logistic).interaction_values(&block).unwrap_err();
    assert_eq!(e.kind(), shapfusion::ErrorKind::Unsupported, "{e}");
    let builder = Explainer::builder(f.model.clone()).background(background).output_transform(OutputTransform::Logistic);
    let e = builder.index(Index::Banzhaf).build().unwrap_err();
    assert_eq!(e.kind(), shapfusion::ErrorKind::Unsupported, "{e}");
}

/// What needs a leaf's linear model without a background is refused, naming the background.
#[test]
fn linear_trees_without_a_background_are_refused_naming_it() {
    let f = &linear_fixtures()[0];
    let refused = |builder: shapfusion::ExplainerBuilder| builder.build().expect_err("refused");
    for error in [refused(Explainer::builder(f.model.clone())), refused(Explainer::builder(f.model.clone()).output(OutputKind::Interactions))] {
        let message = error.to_string();
        assert_eq!(error.kind(), shapfusion::ErrorKind::Unsupported, "{message}");
        assert!(message.contains("linear leaves") && message.contains("linear_tree"), "{message}");
    }
    let message = refused(Explainer::builder(f.model.clone())).to_string();
    assert!(message.contains("give background rows"), "{message}");
}

const BIN: &str = env!("CARGO_BIN_EXE_shapfusion");

fn explain(args: &[&str]) -> std::process::Output {
    Command::new(BIN).arg("explain").args(args).arg("--no-progress").output().unwrap()
}

#[test]
fn explain_background_writes_the_engines_values_and_names_bad_backgrounds() {
    let case = cases().into_iter().find(|c| c.fixture.name == "xgb_missing").unwrap();
    let f = &case.fixture;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.parquet");
    let bg = f.dir.join(format!("background_{}.parquet", case.size));
    let run = explain(&["--model", p(&f.model_path), "--input", p(&f.input_path()), "--output", p(&out), "--background", p(&bg)]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let written = read_parquet(&out);
    let want = Explainer::builder(f.model.clone()).background(case.background.clone()).build().unwrap().explain_batch(&f.batch).unwrap();
    assert_eq!(written.columns(), want.columns());
    // --interactions over the background (Shapley's, then Banzhaf's): the explainer's.
    for index in ["shapley", "banzhaf"] {
        let out = dir.path().join(format!("interactions_{index}.parquet"));
        let input = f.input_path();
        let args = ["--model", p(&f.model_path), "--input", p(&input), "--output", p(&out), "--background", p(&bg)];
        let run = explain(&[&args[..], &["--interactions", "--index", index]].concat());
        assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
        let explainer = Explainer::builder(f.model.clone())
            .background(case.background.clone())
            .output(OutputKind::Interactions)
            .index(index.parse().unwrap())
            .build()
            .unwrap();
        assert_eq!(read_parquet(&out).columns(), explainer.explain_batch(&f.batch).unwrap().columns(), "{index}");
    }

    // A sample of the background: the same rows for the same seed.
    let sampled = |seed: &str| {
        let out = dir.path().join(format!("sampled_{seed}.parquet"));
        let run = explain(&[
            "--model",
            p(&f.model_path),
            "--input",
            p(&f.input_path()),
            "--output",
            p(&out),
            "--background",
            p(&bg),
            "--background-rows",
            "7",
            "--seed",
            seed,
        ]);
        assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
        read_parquet(&out)
    };
    assert_eq!(sampled("3"), sampled("3"));
    assert_ne!(sampled("3"), sampled("4"));

    // Bad backgrounds, each named.
    let missing = dir.path().join("missing_feature.parquet");
    let projected = case.background.project(&(1..case.background.num_columns()).collect::<Vec<_>>()).unwrap();
    write_parquet(&missing, &projected);
    let empty = dir.path().join("empty.parquet");
    write_parquet(&empty, &case.background.slice(0, 0));
    let text = dir.path().join("text.parquet");
    let mut fields: Vec<Field> = case.background.schema().fields().iter().map(|f| f.as_ref().clone()).collect();
    fields[0] = Field::new(fields[0].name(), DataType::Utf8, true);
    let mut columns: Vec<ArrayRef> = case.background.columns().to_vec();
    columns[0] = Arc::new(StringArray::from(vec!["abc"; case.background.num_rows()]));
    write_parquet(&text, &RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap());
    for (path, what) in
        [(&missing, f.model.feature_names()[0].clone()), (&empty, "has no rows".to_string()), (&text, f.model.feature_names()[0].clone())]
    {
        let run = explain(&[
            "--model",
            p(&f.model_path),
            "--input",
            p(&f.input_path()),
            "--output",
            p(&dir.path().join("bad.parquet")),
            "--background",
            p(path),
        ]);
        let err = String::from_utf8_lossy(&run.stderr);
        assert!(!run.status.success() && err.contains(p(path)) && err.contains(&what), "{}: {err}", path.display());
    }
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn write_parquet(path: &Path, batch: &arrow::array::RecordBatch) {
    let mut w = parquet::arrow::ArrowWriter::try_new(std::fs::File::create(path).unwrap(), batch.schema(), None).unwrap();
    w.write(batch).unwrap();
    w.close().unwrap();
}
