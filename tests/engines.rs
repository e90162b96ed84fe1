//! Our engines against the libraries' own outputs, against each other, and additivity.

mod common;

use common::{fixtures, max_row_rel_error};
use shapfusion::engine::{build_engine, Algorithm, Engine, EngineOptions};
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
