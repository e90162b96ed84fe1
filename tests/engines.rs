//! Our engines against the libraries' own outputs, against each other, and additivity.

mod common;

use common::{fixtures, max_row_rel_error};
use shapfusion::engine::{
    build_engine, build_interventional, build_rescaled_interventional, Algorithm, Engine, EngineOptions, Index, OutputTransform,
};
use std::sync::Arc;

const ENGINES: [Algorithm; 5] = [Algorithm::TreeShap, Algorithm::FastV1, Algorithm::FastV2, Algorithm::Quadrature, Algorithm::Linear];

fn engine(f: &common::Fixture, a: Algorithm) -> Arc<dyn Engine> {
    build_engine(f.model.clone(), a, None, &EngineOptions::default()).unwrap()
}

#[test]
fn shap_values_match_the_libraries() {
    for f in fixtures() {
        let block = f.block();
        let expected = f.expected_f64("contribs").unwrap();
        let width = f.model.num_groups() * (f.model.num_features() + 1);
        for a in ENGINES {
            let ours = engine(&f, a).shap(&block).unwrap();
            // Compare per row and group, relative to that row's largest |phi|.
            let (err, row) = max_row_rel_error(&ours.values, &expected, f.model.num_features() + 1);
            assert!(err <= 1e-5, "{} {a}: SHAP error {err:.3e} (row/group {row}) vs {}", f.name, f.expected["library"]);
            assert_eq!(ours.values.len(), block.rows() * width);
        }
    }
}

#[test]
fn engines_agree_with_the_reference_engine() {
    for f in fixtures() {
        let block = f.block();
        let reference = engine(&f, Algorithm::TreeShap).shap(&block).unwrap();
        for a in [Algorithm::FastV1, Algorithm::FastV2, Algorithm::Quadrature, Algorithm::Linear] {
            let ours = engine(&f, a).shap(&block).unwrap();
            let (err, row) = max_row_rel_error(&ours.values, &reference.values, f.model.num_features() + 1);
            assert!(err <= 1e-9, "{} {a}: differs from treeshap by {err:.3e} (row/group {row})", f.name);
        }
    }
}

#[test]
fn attributions_add_up_to_the_margin() {
    for f in fixtures() {
        let block = f.block();
        let w = f.model.num_features() + 1;
        for a in ENGINES {
            let e = engine(&f, a);
            let shap = e.shap(&block).unwrap();
            let pred = e.predict(&block).unwrap();
            for (i, row) in shap.values.chunks(w).enumerate() {
                let sum: f64 = row.iter().sum();
                let m = pred.values[i];
                assert!((sum - m).abs() <= 1e-9 * m.abs().max(1.0), "{} {a}: row/group {i}: {sum} vs margin {m}", f.name);
            }
        }
        // Our margin is the library's (which computes in float32 for XGBoost).
        let ours = engine(&f, Algorithm::TreeShap).predict(&block).unwrap();
        let theirs = f.expected_f64("margin").unwrap();
        for (a, b) in ours.values.iter().zip(&theirs) {
            assert!((a - b).abs() <= 1e-5 * b.abs().max(1.0), "{}: margin {a} vs {b}", f.name);
        }
    }
}

#[test]
fn interaction_values_match_the_libraries() {
    let mut checked = 0;
    for f in fixtures() {
        let Some(expected) = f.expected_f64("interactions") else { continue };
        let block = f.block();
        let w = f.model.num_features() + 1;
        for a in [Algorithm::TreeShap, Algorithm::Quadrature, Algorithm::Linear] {
            let ours = engine(&f, a).interactions(&block).unwrap();
            let (err, row) = max_row_rel_error(&ours.values, &expected, w * w);
            assert!(err <= 1e-5, "{} {a}: interaction error {err:.3e} (row/group {row})", f.name);
        }
        checked += 1;
    }
    assert!(checked >= 9, "only {checked} fixtures had reference interactions");
}

#[test]
fn interaction_engines_agree_with_the_reference() {
    for f in fixtures() {
        let block = f.block();
        let w = f.model.num_features() + 1;
        let reference = engine(&f, Algorithm::TreeShap).interactions(&block).unwrap();
        for a in [Algorithm::Quadrature, Algorithm::Linear] {
            let ours = engine(&f, a).interactions(&block).unwrap();
            let (err, row) = max_row_rel_error(&ours.values, &reference.values, w * w);
            assert!(err <= 1e-9, "{}: {a} interactions differ by {err:.3e} (row/group {row})", f.name);
        }
    }
}

#[test]
fn interaction_rows_sum_to_shap_values() {
    for f in fixtures() {
        let block = f.block();
        let w = f.model.num_features() + 1;
        let e = engine(&f, Algorithm::TreeShap);
        let inter = e.interactions(&block).unwrap();
        let shap = e.shap(&block).unwrap();
        for (m, phi) in inter.values.chunks(w * w).zip(shap.values.chunks(w)) {
            for i in 0..w {
                let row_sum: f64 = m[i * w..(i + 1) * w].iter().sum();
                assert!((row_sum - phi[i]).abs() <= 1e-9 * phi.iter().fold(1.0f64, |a, v| a.max(v.abs())), "{}: row {i}", f.name);
                // Symmetric, as the definition implies.
                for j in 0..w {
                    let scale = m.iter().fold(1e-12f64, |a, v| a.max(v.abs()));
                    assert!((m[i * w + j] - m[j * w + i]).abs() <= 1e-9 * scale, "{}: [{i}][{j}] not symmetric", f.name);
                }
            }
        }
    }
}

#[test]
fn results_do_not_depend_on_the_thread_count() {
    for f in fixtures().into_iter().take(4) {
        // Enough rows for several parallel tasks.
        let small = f.block();
        let values: Vec<f64> = (0..700).flat_map(|i| small.row(i % small.rows()).to_vec()).collect();
        let block = f.model.feature_block_from_values(700, values).unwrap();
        for a in ENGINES {
            let e = engine(&f, a);
            let run = |threads| {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                pool.install(|| (e.shap(&block).unwrap(), e.interactions(&block).unwrap()))
            };
            let (s1, i1) = run(1);
            let (s2, i2) = run(2);
            let (s3, _) = run(3);
            assert!(s1.values.iter().zip(&s2.values).all(|(a, b)| a.to_bits() == b.to_bits()), "{} {a}", f.name);
            assert!(s1.values.iter().zip(&s3.values).all(|(a, b)| a.to_bits() == b.to_bits()), "{} {a}", f.name);
            assert!(i1.values.iter().zip(&i2.values).all(|(a, b)| a.to_bits() == b.to_bits()), "{} {a}", f.name);
        }
    }
}

/// A call of one row (an online request) takes its own walk in `linear` (two flat passes over
/// the splits); every fixture's rows (categorical splits, LightGBM's zero-as-missing, vector
/// leaves, multiclass, CatBoost's trees) get the bits alone that they get in the block.
#[test]
fn linear_gives_a_row_alone_the_bits_it_has_in_a_block() {
    for f in fixtures() {
        let block = f.block();
        let e = engine(&f, Algorithm::Linear);
        let together = e.shap(&block).unwrap();
        assert!(together.values.iter().any(|v| *v != 0.0), "{}: the model attributes something", f.name);
        for r in (0..block.rows()).step_by(block.rows().div_ceil(7).max(1)) {
            // The row as a front end gives it: its own one-row batch.
            let alone = e.shap(&f.model.feature_block(&f.batch.slice(r, 1)).unwrap()).unwrap();
            for g in 0..f.model.num_groups() {
                let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<u64>>();
                assert_eq!(bits(alone.row(0, g)), bits(together.row(r, g)), "{}: row {r}, output {g}", f.name);
            }
        }
    }
}

/// The scikit-learn, CatBoost and Spark ML fixtures: every engine within 1e-6 of the largest
/// |phi| of each row (of the references: shap for scikit-learn and Spark, CatBoost's own
/// values, brute force where the fixture says so), SHAP and interaction values. The worst
/// relative error is printed (`--nocapture`) so the figure in the docs can be checked.
#[test]
fn new_formats_match_their_references_within_1e_6() {
    let mut seen = 0;
    for f in fixtures().into_iter().filter(|f| ["skl_", "cb_", "spark_"].iter().any(|p| f.name.starts_with(p))) {
        seen += 1;
        let block = f.block();
        let w = f.model.num_features() + 1;
        let expected = f.expected_f64("contribs").unwrap();
        let interactions = f.expected_f64("interactions");
        for a in ENGINES {
            let e = engine(&f, a);
            let (err, row) = max_row_rel_error(&e.shap(&block).unwrap().values, &expected, w);
            assert!(err <= 1e-6, "{} {a}: SHAP error {err:.3e} (row/group {row}) vs {}", f.name, f.expected["reference"]);
            let mut worst = err;
            if let (Some(inter), true) = (&interactions, matches!(a, Algorithm::TreeShap | Algorithm::Quadrature | Algorithm::Linear)) {
                let (err, row) = max_row_rel_error(&e.interactions(&block).unwrap().values, inter, w * w);
                assert!(err <= 1e-6, "{} {a}: interaction error {err:.3e} (row/group {row})", f.name);
                worst = worst.max(err);
            }
            println!("{} {a}: worst error relative to max |phi| {worst:.2e} vs {}", f.name, f.expected["reference"]);
        }
    }
    assert!(seen >= 15, "scikit-learn, CatBoost and Spark ML fixtures missing: {seen} found");
}

/// CatBoost's binary format (`model.cbm`, saved beside each CatBoost fixture's JSON from the same
/// trained model): the same model as the JSON, so the same bits of SHAP values, interactions and
/// predictions, on oblivious and non-symmetric trees, one-hot categories, CTR splits of every
/// type read, missing values and several outputs.
#[test]
fn catboost_binary_files_give_the_bits_of_their_json() {
    let mut read = 0;
    for f in fixtures().into_iter().filter(|f| f.dir.join("model.cbm").exists()) {
        let model = Arc::new(shapfusion::load_model(f.dir.join("model.cbm")).unwrap_or_else(|e| panic!("{}: {e}", f.name)));
        assert_eq!(model.format(), shapfusion::model::ModelFormat::CatboostBinary);
        assert_eq!(model.feature_names(), f.model.feature_names(), "{}", f.name);
        assert_eq!(model.feature_kinds(), f.model.feature_kinds(), "{}", f.name);
        assert_eq!(model.base_margin(), f.model.base_margin(), "{}", f.name);
        assert_eq!(model.categories(), f.model.categories(), "{}", f.name);
        assert!(model.trees() == f.model.trees(), "{}: the trees differ from the JSON's", f.name);
        assert_eq!((model.objective(), model.library_version()), (f.model.objective(), f.model.library_version()), "{}", f.name);
        let block = f.block();
        for a in [Algorithm::TreeShap, Algorithm::Linear] {
            let ours = build_engine(model.clone(), a, None, &EngineOptions::default()).unwrap();
            let json = engine(&f, a);
            assert_eq!(ours.shap(&block).unwrap().values, json.shap(&block).unwrap().values, "{} {a}", f.name);
            assert_eq!(ours.interactions(&block).unwrap().values, json.interactions(&block).unwrap().values, "{} {a}", f.name);
        }
        let (mut mine, mut theirs) = (vec![0.0; model.num_groups()], vec![0.0; model.num_groups()]);
        for r in 0..block.rows() {
            model.predict_row(block.row(r), &mut mine);
            f.model.predict_row(block.row(r), &mut theirs);
            assert_eq!(mine, theirs, "{} row {r}", f.name);
        }
        read += 1;
    }
    assert!(read >= 12, "CatBoost binary fixtures missing: {read} read");
}

/// CatBoost's CTRs of feature combinations (`tests/fixtures/combinations`, trained with
/// `max_ctr_complexity` 4, as CatBoost trains 200 trees or more by default): SHAP values equal to
/// CatBoost's own ShapValues, interaction values equal to brute force over the players folded
/// into the features (both from `tests/make_catboost_fixtures.py`), predictions to CatBoost's,
/// from the JSON and the `.cbm` alike, by `auto`, `oblivious` and `treeshap`; interventional SHAP
/// values equal to CatBoost's own over a background; every other engine, Banzhaf values,
/// interventional interaction values, transformed outputs and the GPU refuse such a model,
/// naming a combination.
#[test]
fn catboost_ctrs_of_feature_combinations_match_catboost() {
    let list = common::combination_fixtures();
    assert!(!list.is_empty(), "no fixture under tests/fixtures/combinations");
    for f in list {
        let c = f.model.combinations().unwrap_or_else(|| panic!("{}: no combined columns", f.name));
        // Players shared by two and by three features, and float conditions in combinations.
        assert!(c.shared().iter().any(|s| s.len() == 2) && c.shared().iter().any(|s| s.len() == 3), "{}: {:?}", f.name, c.shared());
        assert!(c.columns().iter().flat_map(|k| k.parts()).any(|p| matches!(p, shapfusion::model::CombinationPart::Above { .. })), "{}", f.name);
        let cbm = Arc::new(shapfusion::load_model(f.dir.join("model.cbm")).unwrap_or_else(|e| panic!("{}: {e}", f.name)));
        assert!(cbm.trees() == f.model.trees() && cbm.combinations() == f.model.combinations(), "{}: the .cbm differs from the JSON", f.name);
        let block = f.block();
        let w = f.model.num_features() + 1;
        let (contribs, interactions, margin) =
            (f.expected_f64("contribs").unwrap(), f.expected_f64("interactions").unwrap(), f.expected_f64("margin").unwrap());
        let reference = build_engine(f.model.clone(), Algorithm::TreeShap, None, &EngineOptions::default()).unwrap();
        let (ref_shap, ref_inter) = (reference.shap(&block).unwrap(), reference.interactions(&block).unwrap());
        for model in [&f.model, &cbm] {
            for a in [Algorithm::Auto, Algorithm::Oblivious, Algorithm::TreeShap] {
                let e = build_engine(model.clone(), a, None, &EngineOptions::default()).unwrap();
                let (shap, inter) = (e.shap(&block).unwrap(), e.interactions(&block).unwrap());
                assert_eq!((shap.features, inter.features), (w - 1, w - 1));
                let (err, row) = max_row_rel_error(&shap.values, &contribs, w);
                assert!(err <= 1e-12, "{} {a}: {err:.3e} from CatBoost's ShapValues (row {row})", f.name);
                let (err, row) = max_row_rel_error(&inter.values, &interactions, w * w);
                assert!(err <= 1e-12, "{} {a}: interactions {err:.3e} from brute force (row {row})", f.name);
                let (err, _) = max_row_rel_error(&shap.values, &ref_shap.values, w);
                assert!(err <= 1e-13, "{} {a}: {err:.3e} from treeshap", f.name);
                let (err, _) = max_row_rel_error(&inter.values, &ref_inter.values, w * w);
                assert!(err <= 1e-13, "{} {a}: interactions {err:.3e} from treeshap", f.name);
                let predicted = e.predict(&block).unwrap();
                for (r, (row, m)) in shap.values.chunks(w).zip(&predicted.values).enumerate() {
                    assert!((m - margin[r]).abs() <= 1e-12 * margin[r].abs().max(1.0), "{} row {r}: margin {m} vs CatBoost's {}", f.name, margin[r]);
                    let total: f64 = row.iter().sum();
                    assert!((total - m).abs() <= 1e-12 * m.abs().max(1.0), "{} {a} row {r}: values add to {total}, margin {m}", f.name);
                }
                for (m, phi) in inter.values.chunks(w * w).zip(shap.values.chunks(w)) {
                    for i in 0..w {
                        let sum: f64 = m[i * w..(i + 1) * w].iter().sum();
                        assert!((sum - phi[i]).abs() <= 1e-12 * phi.iter().fold(1.0f64, |a, v| a.max(v.abs())), "{}: interaction row {i}", f.name);
                    }
                }
            }
        }
        // Where no player holds both features, the folded pairs are CatBoost's own
        // ShapInteractionValues (which drop the pairs of players that fold onto one feature).
        let library = f.expected_f64("library_interactions").unwrap();
        let one_player = |i: usize, j: usize| c.shared().iter().any(|s| s.contains(&(i as u32)) && s.contains(&(j as u32)));
        let mut compared = 0;
        for (ours, theirs) in ref_inter.values.chunks(w * w).zip(library.chunks(w * w)) {
            let scale = theirs.iter().fold(1e-12f64, |a, v| a.max(v.abs()));
            for i in 0..w - 1 {
                for j in (0..w - 1).filter(|&j| j != i && !one_player(i, j)) {
                    assert!((ours[i * w + j] - theirs[i * w + j]).abs() <= 1e-12 * scale, "{}: pair ({i}, {j})", f.name);
                    compared += 1;
                }
            }
        }
        assert!(compared > 0, "{}: no pair of features outside a shared player", f.name);
        // What is not built yet says so, naming a combination.
        let says = |e: shapfusion::Error| {
            let text = e.to_string();
            assert!(text.contains("CTRs of feature combinations") && text.contains("not built yet"), "{}: {text}", f.name);
        };
        for a in ENGINES.into_iter().filter(|&a| a != Algorithm::TreeShap) {
            says(build_engine(f.model.clone(), a, None, &EngineOptions::default()).err().unwrap_or_else(|| panic!("{}: {a} took the model", f.name)));
        }
        says(build_engine(f.model.clone(), Algorithm::Auto, None, &EngineOptions { index: Index::Banzhaf, ..Default::default() }).err().unwrap());
        // Interventional SHAP values over a background: CatBoost's own (its Independent Tree
        // SHAP, with `reference_data`), from the aggregated engine and the reference alike.
        let background = f.model.feature_block(&common::read_parquet(&f.background().unwrap())).unwrap();
        let want = f.expected_f64("background_contribs").unwrap();
        let mut interventional = Vec::new();
        for a in [Algorithm::Auto, Algorithm::TreeShap] {
            let e = build_interventional(f.model.clone(), &background, a, &EngineOptions::default()).unwrap();
            let got = e.shap(&block).unwrap();
            let (err, row) = max_row_rel_error(&got.values, &want, w);
            assert!(err <= 1e-12, "{} interventional {a}: {err:.3e} from CatBoost's (row {row})", f.name);
            says(e.interactions(&block).err().unwrap());
            interventional.push(got.values);
        }
        let (err, row) = max_row_rel_error(&interventional[0], &interventional[1], w);
        assert!(err <= 1e-13, "{}: the interventional engines differ by {err:.3e} (row {row})", f.name);
        let banzhaf = EngineOptions { index: Index::Banzhaf, ..Default::default() };
        says(build_interventional(f.model.clone(), &background, Algorithm::Auto, &banzhaf).err().unwrap());
        says(build_rescaled_interventional(f.model.clone(), &background, OutputTransform::Logistic, &EngineOptions::default()).err().unwrap());
        let gpu = shapfusion::Explainer::builder(f.model.clone()).device(shapfusion::Device::Gpu).build();
        says(gpu.err().unwrap_or_else(|| panic!("{}: the GPU took the model", f.name)));
    }
}

/// Path-dependent Banzhaf values and Banzhaf interaction values against WOODELF's own, and over
/// a background Banzhaf values and both indices' interaction values
/// (`tests/make_banzhaf_fixtures.py`: XGBoost and LightGBM, with and without missing values);
/// brute force over coalitions holds them far closer (`linear`'s unit tests). Each row's values
/// and its bias add up to the margin, in both layouts.
#[test]
fn banzhaf_values_match_woodelfs() {
    let options = EngineOptions { index: Index::Banzhaf, ..Default::default() };
    let mut checked = Vec::new();
    for f in fixtures().into_iter().filter(|f| f.dir.join("banzhaf.json").exists()) {
        let reference: serde_json::Value = serde_json::from_slice(&std::fs::read(f.dir.join("banzhaf.json")).unwrap()).unwrap();
        let floats = |key: &str| -> Vec<f64> { reference[key].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect() };
        let (values, pairs) = (floats("banzhaf_values"), floats("banzhaf_interactions"));
        let engine = build_engine(f.model.clone(), Algorithm::Auto, None, &options).unwrap();
        let block = f.block();
        let (nf, w) = (f.model.num_features(), f.model.num_features() + 1);
        let (shap, interactions) = (engine.shap(&block).unwrap(), engine.interactions(&block).unwrap());
        let scale = values.iter().chain(&pairs).fold(1e-12f64, |m, v| m.max(v.abs()));
        let mut margin = [0.0];
        for r in 0..block.rows() {
            let got = shap.row(r, 0);
            let matrix = &interactions.values[r * w * w..(r + 1) * w * w];
            for i in 0..nf {
                let want = values[r * nf + i];
                assert!((got[i] - want).abs() <= 1e-4 * scale, "{} row {r} feature {i}: Banzhaf value {} against WOODELF's {want}", f.name, got[i]);
                for j in (0..nf).filter(|&j| j != i) {
                    let (ours, theirs) = (matrix[i * w + j], pairs[(r * nf + i) * nf + j]);
                    assert!((ours - theirs).abs() <= 1e-4 * scale, "{} row {r} pair ({i}, {j}): {ours} against WOODELF's {theirs}", f.name);
                }
            }
            f.model.predict_row(block.row(r), &mut margin);
            let (total, matrix_total) = (got.iter().sum::<f64>(), matrix.iter().sum::<f64>());
            assert!(
                (total - margin[0]).abs() <= 1e-9 * scale && (matrix_total - margin[0]).abs() <= 1e-9 * scale,
                "{} row {r}: {total} and {matrix_total} against the margin {}",
                f.name,
                margin[0]
            );
        }
        // Interventional, over the background WOODELF had.
        // The first `background_rows` rows of the file, as WOODELF had them.
        let rows = reference["background_rows"].as_u64().unwrap() as usize;
        let background = f.model.feature_block(&common::read_parquet(&f.dir.join(reference["background"].as_str().unwrap())).slice(0, rows)).unwrap();
        let want = floats("background_banzhaf_values");
        let scale = want.iter().fold(1e-12f64, |m, v| m.max(v.abs()));
        let shap = build_interventional(f.model.clone(), &background, Algorithm::Auto, &options).unwrap().shap(&block).unwrap();
        for r in 0..block.rows() {
            let got = shap.row(r, 0);
            for i in 0..nf {
                let theirs = want[r * nf + i];
                assert!(
                    (got[i] - theirs).abs() <= 1e-4 * scale,
                    "{} row {r} feature {i}: interventional Banzhaf value {} against WOODELF's {theirs}",
                    f.name,
                    got[i]
                );
            }
            f.model.predict_row(block.row(r), &mut margin);
            assert!(
                (got.iter().sum::<f64>() - margin[0]).abs() <= 1e-9 * scale,
                "{} row {r}: interventional values and bias against the margin",
                f.name
            );
        }
        // Interventional interaction values, Banzhaf's (off the diagonal, as WOODELF gives
        // them) and Shapley's (the whole matrix, shap's layout), over the same background.
        for (index, key, diagonal) in
            [(Index::Banzhaf, "background_banzhaf_interactions", false), (Index::Shapley, "background_shapley_interactions", true)]
        {
            let options = EngineOptions { index, ..Default::default() };
            let engine = build_interventional(f.model.clone(), &background, Algorithm::Auto, &options).unwrap();
            let (interactions, values) = (engine.interactions(&block).unwrap(), engine.shap(&block).unwrap());
            let want = floats(key);
            let scale = want.iter().fold(1e-12f64, |m, v| m.max(v.abs()));
            for r in 0..block.rows() {
                let matrix = interactions.matrix(r, 0);
                for i in 0..nf {
                    for j in (0..nf).filter(|&j| diagonal || j != i) {
                        let (ours, theirs) = (matrix[i * w + j], want[(r * nf + i) * nf + j]);
                        assert!(
                            (ours - theirs).abs() <= 1e-4 * scale,
                            "{} {index} row {r} pair ({i}, {j}): {ours} against WOODELF's {theirs}",
                            f.name
                        );
                    }
                    let row: f64 = matrix[i * w..(i + 1) * w].iter().sum();
                    assert!((row - values.row(r, 0)[i]).abs() <= 1e-9 * scale, "{} {index} row {r} feature {i}: the row against the value", f.name);
                }
                f.model.predict_row(block.row(r), &mut margin);
                let total: f64 = matrix.iter().sum();
                assert!((total - margin[0]).abs() <= 1e-9 * scale.max(margin[0].abs()), "{} {index} row {r}: the matrix against the margin", f.name);
            }
        }
        checked.push(f.name);
    }
    assert_eq!(checked.len(), 4, "the fixtures with WOODELF's values: {checked:?}");
}

/// Path-dependent Banzhaf values come from `linear` (or `auto`, which takes it): another engine
/// is refused saying so, as is a transformed output with a background (not built yet).
#[test]
fn banzhaf_values_are_refused_where_they_are_not_computed() {
    let f = fixtures().into_iter().find(|f| f.name == "xgb_regression").unwrap();
    let options = EngineOptions { index: Index::Banzhaf, ..Default::default() };
    let e = build_engine(f.model.clone(), Algorithm::TreeShap, None, &options).err().unwrap().to_string();
    assert!(e.contains("Shapley values only") && e.contains("linear"), "{e}");
    let e = build_rescaled_interventional(f.model.clone(), &f.block(), OutputTransform::Logistic, &options).err().unwrap().to_string();
    assert!(e.contains("not built yet"), "{e}");
}

/// Banzhaf values of `game` over `players` by enumerating every coalition, added to `out`.
fn add_banzhaf(players: &[u32], game: impl Fn(usize) -> f64, out: &mut [f64]) {
    let m = players.len();
    let v: Vec<f64> = (0..1usize << m).map(game).collect();
    for (i, &p) in players.iter().enumerate() {
        let sum: f64 = (0..1usize << m).filter(|s| s & (1 << i) == 0).map(|s| v[s | 1 << i] - v[s]).sum();
        out[p as usize] += sum / (1u64 << (m - 1)) as f64;
    }
}

/// Banzhaf values are linear in the game and blind to features a tree does not split on, so
/// enumerating every coalition of each tree's own features is an exact oracle for any model:
/// every fixture whose trees split on at most 10 features each (XGBoost, LightGBM, scikit-learn,
/// CatBoost, Spark ML; missing values, categorical splits, multiclass), path-dependent, and
/// interventional over a few rows of its background.
#[test]
fn banzhaf_values_equal_enumeration_over_each_trees_coalitions() {
    let options = EngineOptions { index: Index::Banzhaf, ..Default::default() };
    let mut checked = Vec::new();
    for f in fixtures() {
        let players: Vec<Vec<u32>> = f
            .model
            .trees()
            .iter()
            .map(|t| t.nodes.iter().filter(|n| !n.is_leaf()).map(|n| n.feature).collect::<std::collections::BTreeSet<u32>>().into_iter().collect())
            .collect();
        if players.iter().any(|p| p.len() > 10) {
            continue;
        }
        let (nf, groups) = (f.model.num_features(), f.model.num_groups());
        let block = f.block();
        let rows = block.rows().min(6);
        let background = f.background().map(|path| {
            let rows = common::read_parquet(&path);
            f.model.feature_block(&rows.slice(0, rows.num_rows().min(8))).unwrap()
        });
        let path_dependent = build_engine(f.model.clone(), Algorithm::Auto, None, &options).unwrap().shap(&block).unwrap();
        let interventional =
            background.as_ref().map(|bg| build_interventional(f.model.clone(), bg, Algorithm::Auto, &options).unwrap().shap(&block).unwrap());
        for r in 0..rows {
            let x = block.row(r);
            let (mut want, mut want_bg) = (vec![0.0; groups * nf], vec![0.0; groups * nf]);
            for (tree, players) in f.model.trees().iter().zip(&players) {
                let out = &mut want[tree.group * nf..(tree.group + 1) * nf];
                add_banzhaf(
                    players,
                    |s| common::path_dependent_game(tree, x, &|k| players.iter().position(|&p| p == k).is_some_and(|i| s & (1 << i) != 0), 0),
                    out,
                );
                if let Some(bg) = &background {
                    let out = &mut want_bg[tree.group * nf..(tree.group + 1) * nf];
                    add_banzhaf(
                        players,
                        |s| {
                            let mean: f64 = (0..bg.rows())
                                .map(|z| {
                                    let hybrid: Vec<f64> = (0..nf)
                                        .map(|k| {
                                            if players.iter().position(|&p| p == k as u32).is_some_and(|i| s & (1 << i) != 0) {
                                                x[k]
                                            } else {
                                                bg.row(z)[k]
                                            }
                                        })
                                        .collect();
                                    tree.nodes[tree.leaf_of(&hybrid)].value * tree.weight
                                })
                                .sum();
                            mean / bg.rows() as f64
                        },
                        out,
                    );
                }
            }
            for (values, want, what) in [(Some(&path_dependent), &want, "path-dependent"), (interventional.as_ref(), &want_bg, "interventional")] {
                let Some(values) = values else { continue };
                for g in 0..groups {
                    let (got, want) = (values.row(r, g), &want[g * nf..(g + 1) * nf]);
                    let scale = want.iter().fold(1e-9f64, |m, v| m.max(v.abs()));
                    for k in 0..nf {
                        assert!(
                            (got[k] - want[k]).abs() <= 1e-9 * scale,
                            "{} {what} row {r} group {g} feature {k}: {} against {}",
                            f.name,
                            got[k],
                            want[k]
                        );
                    }
                }
            }
        }
        checked.push(f.name.clone());
    }
    for library in ["xgb_", "lgb_", "skl_", "cb_", "spark_"] {
        assert!(checked.iter().any(|n| n.starts_with(library)), "no {library} fixture checked: {checked:?}");
    }
    assert!(checked.iter().any(|n| n.contains("multiclass")) && checked.iter().any(|n| n.contains("categor")), "{checked:?}");
}
