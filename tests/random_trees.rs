//! Property tests on random trees: every engine against the definition of (path-dependent and
//! interventional) SHAP values computed by brute force over all coalitions, and against the
//! oracles (`treeshap`, and the row-by-row interventional reference).
//! Trees are random in shape (depth up to 12), covers (children need not add up), repeated
//! features on a path, thresholds, default directions and missing inputs.

mod common;

use std::sync::Arc;

use common::random::{random_model, random_model_with_empty_branches, random_rows, Rng};
use shapfusion::engine::{build_engine, build_interventional, Algorithm, EngineOptions, FeatureBlock};
use shapfusion::error::ErrorKind;
use shapfusion::model::Model;

fn value_of(model: &Model, x: &[f64], mask: usize) -> f64 {
    let in_s: Vec<bool> = (0..model.num_features()).map(|i| mask & (1 << i) != 0).collect();
    model.trees().iter().map(|t| common::path_dependent_game(t, x, &|k| in_s[k as usize], 0)).sum()
}

fn factorial(n: usize) -> f64 {
    (1..=n).map(|k| k as f64).product()
}

/// Shapley values by enumerating every coalition.
fn brute_force_shap(model: &Model, x: &[f64]) -> Vec<f64> {
    let m = model.num_features();
    let v: Vec<f64> = (0..1usize << m).map(|s| value_of(model, x, s)).collect();
    (0..m)
        .map(|i| {
            (0..1usize << m)
                .filter(|s| s & (1 << i) == 0)
                .map(|s| {
                    let k = s.count_ones() as usize;
                    factorial(k) * factorial(m - k - 1) / factorial(m) * (v[s | 1 << i] - v[s])
                })
                .sum()
        })
        .collect()
}

/// Shapley interaction index for i != j by enumeration.
fn brute_force_interaction(model: &Model, x: &[f64], i: usize, j: usize) -> f64 {
    let m = model.num_features();
    let v = |s: usize| value_of(model, x, s);
    (0..1usize << m)
        .filter(|s| s & (1 << i) == 0 && s & (1 << j) == 0)
        .map(|s| {
            let k = s.count_ones() as usize;
            let w = factorial(k) * factorial(m - k - 2) / (2.0 * factorial(m - 1));
            w * (v(s | 1 << i | 1 << j) - v(s | 1 << i) - v(s | 1 << j) + v(s))
        })
        .sum()
}

const ENGINES: [Algorithm; 5] = [Algorithm::TreeShap, Algorithm::FastV1, Algorithm::FastV2, Algorithm::Quadrature, Algorithm::Linear];

/// Checks every engine's SHAP values on `block` against enumeration over all coalitions.
fn assert_engines_equal_brute_force(model: &Arc<Model>, block: &FeatureBlock, seed: u64) {
    for a in ENGINES {
        let shap = build_engine(model.clone(), a, None, &EngineOptions::default()).unwrap().shap(block).unwrap();
        for r in 0..block.rows() {
            let want = brute_force_shap(model, block.row(r));
            let got = shap.row(r, 0);
            let scale = want.iter().fold(1e-9f64, |m, v| m.max(v.abs()));
            for k in 0..model.num_features() {
                assert!((got[k] - want[k]).abs() <= 1e-9 * scale, "seed {seed} {a} row {r} feature {k}: {} vs {}", got[k], want[k]);
            }
        }
    }
}

#[test]
fn engines_equal_brute_force_shapley_values() {
    for seed in 1..=60u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let features = 2 + rng.below(5);
        let (trees, depth) = (1 + rng.below(3), 1 + rng.below(7));
        let model = Arc::new(random_model(&mut rng, features, trees, depth));
        let block = random_rows(&mut rng, &model, 6);
        assert_engines_equal_brute_force(&model, &block, seed);
    }
}

/// Splits that send no training cover one way (fraction 0 or 1e-200) still route rows there;
/// fast-v2 gives such path elements tables of their own instead of dividing by the fraction.
#[test]
fn empty_branches_equal_brute_force_shapley_values() {
    for seed in 1..=40u64 {
        let mut rng = Rng(seed.wrapping_mul(0x8CB9_2BA7_2F3D_8DD7));
        let features = 2 + rng.below(5);
        let (trees, depth) = (1 + rng.below(3), 2 + rng.below(6));
        let model = Arc::new(random_model_with_empty_branches(&mut rng, features, trees, depth, 0.3));
        let block = random_rows(&mut rng, &model, 8);
        assert_engines_equal_brute_force(&model, &block, seed);
        // Interactions too: quadrature (sibling leaves paired) and linear against the TreeSHAP oracle.
        let interactions = |a| build_engine(model.clone(), a, None, &EngineOptions::default()).unwrap().interactions(&block).unwrap().values;
        let want = interactions(Algorithm::TreeShap);
        let scale = want.iter().fold(1e-9f64, |m, v| m.max(v.abs()));
        for a in [Algorithm::Quadrature, Algorithm::Linear] {
            for (k, (got, want)) in interactions(a).iter().zip(&want).enumerate() {
                assert!((got - want).abs() <= 1e-9 * scale, "seed {seed} {a} interaction value {k}: {got} vs {want}");
            }
        }
    }
}

#[test]
fn interactions_equal_brute_force_shapley_interaction_index() {
    for seed in 1..=30u64 {
        let mut rng = Rng(seed.wrapping_mul(0xD1B5_4A32_D192_ED03));
        let features = 3 + rng.below(3);
        let (trees, depth) = (1 + rng.below(2), 2 + rng.below(5));
        let model = Arc::new(random_model(&mut rng, features, trees, depth));
        let block = random_rows(&mut rng, &model, 4);
        for a in [Algorithm::TreeShap, Algorithm::Quadrature, Algorithm::Linear] {
            let e = build_engine(model.clone(), a, None, &EngineOptions::default()).unwrap();
            let inter = e.interactions(&block).unwrap();
            let w = features + 1;
            for r in 0..block.rows() {
                let m = &inter.values[r * w * w..(r + 1) * w * w];
                let scale = m.iter().fold(1e-9f64, |a, v| a.max(v.abs()));
                for i in 0..features {
                    for j in 0..features {
                        if i != j {
                            let want = brute_force_interaction(&model, block.row(r), i, j);
                            assert!((m[i * w + j] - want).abs() <= 1e-9 * scale, "seed {seed} {a} row {r} [{i}][{j}]: {} vs {want}", m[i * w + j]);
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn deep_random_ensembles_agree_with_the_oracle() {
    for seed in 1..=16u64 {
        let mut rng = Rng(seed.wrapping_mul(0xA076_1D64_78BD_642F));
        let features = 3 + rng.below(30);
        let depth = 8 + rng.below(9); // up to 16
        let model = Arc::new(random_model(&mut rng, features, 3, depth));
        let block = random_rows(&mut rng, &model, 20);
        let oracle = build_engine(model.clone(), Algorithm::TreeShap, None, &EngineOptions::default()).unwrap().shap(&block).unwrap();
        let pred = build_engine(model.clone(), Algorithm::TreeShap, None, &EngineOptions::default()).unwrap().predict(&block).unwrap();
        for a in [Algorithm::FastV1, Algorithm::FastV2, Algorithm::Quadrature, Algorithm::Linear] {
            let ours = match build_engine(model.clone(), a, None, &EngineOptions::default()) {
                Ok(e) => e.shap(&block).unwrap(),
                // fast-v2 declines models whose tables exceed its memory bound
                Err(e) if a == Algorithm::FastV2 && matches!(e.kind(), ErrorKind::ResourceExhausted | ErrorKind::Unsupported) => continue,
                Err(e) => panic!("{a}: {e}"),
            };
            for r in 0..block.rows() {
                let (o, g) = (oracle.row(r, 0), ours.row(r, 0));
                let scale = o.iter().fold(1e-12f64, |m, v| m.max(v.abs()));
                for k in 0..=features {
                    assert!((o[k] - g[k]).abs() <= 1e-9 * scale, "seed {seed} {a} row {r} k {k}: {} vs {}", g[k], o[k]);
                }
                let sum: f64 = g.iter().sum();
                assert!((sum - pred.values[r]).abs() <= 1e-9 * pred.values[r].abs().max(1.0), "additivity, seed {seed} {a}");
            }
        }
    }
}

/// Interaction values of `linear` (pair terms by the product rule over each path's splits) on
/// deep trees with repeated features and missing values, against the conditioned TreeSHAP oracle.
#[test]
fn deep_random_interactions_agree_with_the_oracle() {
    for seed in 1..=8u64 {
        let mut rng = Rng(seed.wrapping_mul(0x94D0_49BB_1331_11EB));
        let features = 3 + rng.below(10);
        let depth = 6 + rng.below(7); // up to 12
        let model = Arc::new(random_model(&mut rng, features, 2, depth));
        let block = random_rows(&mut rng, &model, 11);
        let interactions = |a| build_engine(model.clone(), a, None, &EngineOptions::default()).unwrap().interactions(&block).unwrap().values;
        let (want, got) = (interactions(Algorithm::TreeShap), interactions(Algorithm::Linear));
        let w = features + 1;
        for (r, (want, got)) in want.chunks(w * w).zip(got.chunks(w * w)).enumerate() {
            let scale = want.iter().fold(1e-12f64, |m, v| m.max(v.abs()));
            for (k, (a, b)) in got.iter().zip(want).enumerate() {
                assert!((a - b).abs() <= 1e-9 * scale, "seed {seed} row {r} [{}][{}]: {a} vs {b}", k / w, k % w);
            }
        }
    }
}

#[test]
fn fast_v2_refuses_tables_over_its_memory_bound() {
    let mut rng = Rng(7);
    let model = Arc::new(random_model(&mut rng, 20, 4, 12));
    let err = build_engine(model, Algorithm::FastV2, None, &EngineOptions { v2_memory_bytes: 1024, ..Default::default() }).err().unwrap();
    assert!(err.to_string().contains("over the bound"), "{err}");
}

/// `linear` explains eight rows per SIMD pass: a row's values must not depend on which rows
/// share its pass (nor on the padding of a partial one), bit for bit.
#[test]
fn linear_rows_do_not_depend_on_their_lane_group() {
    let mut rng = Rng(0x5EED_1234);
    let features = 12;
    let model = Arc::new(random_model(&mut rng, features, 5, 10));
    let block = random_rows(&mut rng, &model, 21);
    let engine = build_engine(model.clone(), Algorithm::Linear, None, &EngineOptions::default()).unwrap();
    let together = engine.shap(&block).unwrap();
    // Reversed order puts every row beside other rows, at another lane.
    let reversed: Vec<f64> = (0..block.rows()).rev().flat_map(|r| block.row(r).to_vec()).collect();
    let reversed = engine.shap(&model.feature_block_from_values(block.rows(), reversed).unwrap()).unwrap();
    for r in 0..block.rows() {
        let alone = engine.shap(&model.feature_block_from_values(1, block.row(r).to_vec()).unwrap()).unwrap();
        assert_eq!(together.row(r, 0), alone.row(0, 0), "row {r} alone");
        assert_eq!(together.row(r, 0), reversed.row(block.rows() - 1 - r, 0), "row {r} reversed");
    }
}

/// The aggregated interventional engine and the reference. (Its two representations, tables
/// and patterns, are held to the reference on every fixture by the crate's unit tests.)
fn interventional_engines(model: &Arc<Model>, background: &FeatureBlock) -> Vec<(&'static str, Arc<dyn shapfusion::engine::Engine>)> {
    vec![
        ("aggregated", build_interventional(model.clone(), background, Algorithm::Auto, &EngineOptions::default()).unwrap()),
        ("reference", build_interventional(model.clone(), background, Algorithm::TreeShap, &EngineOptions::default()).unwrap()),
    ]
}

#[test]
fn interventional_engines_equal_brute_force_shapley_values() {
    for seed in 1..=50u64 {
        let mut rng = Rng(seed.wrapping_mul(0x6A09_E667_F3BC_C909));
        let features = 2 + rng.below(5);
        let (trees, depth) = (1 + rng.below(3), 1 + rng.below(7));
        let model = Arc::new(random_model_with_empty_branches(&mut rng, features, trees, depth, 0.2));
        let block = random_rows(&mut rng, &model, 5);
        let background_rows = 1 + rng.below(12);
        let background = random_rows(&mut rng, &model, background_rows);
        for (name, engine) in interventional_engines(&model, &background) {
            let shap = engine.shap(&block).unwrap();
            let pred = engine.predict(&block).unwrap();
            for r in 0..block.rows() {
                let want = &common::brute_force_interventional(&model, block.row(r), &background)[0];
                let bias = (0..background.rows())
                    .map(|z| {
                        let mut m = [0.0];
                        model.predict_row(background.row(z), &mut m);
                        m[0]
                    })
                    .sum::<f64>()
                    / background.rows() as f64;
                let got = shap.row(r, 0);
                let scale = want.iter().fold(1e-9f64, |m, v| m.max(v.abs()));
                for k in 0..features {
                    assert!((got[k] - want[k]).abs() <= 1e-9 * scale, "seed {seed} {name} row {r} feature {k}: {} vs {}", got[k], want[k]);
                }
                assert!((got[features] - bias).abs() <= 1e-9 * bias.abs().max(1.0), "seed {seed} {name}: bias {} vs {bias}", got[features]);
                let total: f64 = got.iter().sum();
                assert!((total - pred.values[r]).abs() <= 1e-9 * pred.values[r].abs().max(1.0), "seed {seed} {name} row {r}: additivity");
            }
        }
    }
}

#[test]
fn interventional_aggregation_equals_the_reference_on_deep_trees() {
    for seed in 1..=10u64 {
        let mut rng = Rng(seed.wrapping_mul(0xBB67_AE85_84CA_A73B));
        let features = 3 + rng.below(30);
        let depth = 6 + rng.below(7); // up to 12, features repeated along paths
        let model = Arc::new(random_model_with_empty_branches(&mut rng, features, 3, depth, 0.1));
        let block = random_rows(&mut rng, &model, 12);
        let background = random_rows(&mut rng, &model, 40);
        let engines = interventional_engines(&model, &background);
        let reference = engines[1].1.shap(&block).unwrap();
        for (name, engine) in &engines[..1] {
            let got = engine.shap(&block).unwrap();
            let width = features + 1;
            for (r, (a, b)) in got.values.chunks(width).zip(reference.values.chunks(width)).enumerate() {
                let scale = b.iter().fold(1e-12f64, |m, v| m.max(v.abs()));
                for k in 0..width {
                    assert!((a[k] - b[k]).abs() <= 1e-9 * scale, "seed {seed} {name} row {r} feature {k}: {} vs {}", a[k], b[k]);
                }
            }
        }
    }
}

#[test]
fn interventional_values_do_not_depend_on_the_thread_count() {
    let mut rng = Rng(0x3C6E_F372_FE94_F82B);
    let model = Arc::new(random_model(&mut rng, 10, 4, 8));
    let block = random_rows(&mut rng, &model, 300);
    let background = random_rows(&mut rng, &model, 64);
    let run = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        pool.install(|| build_interventional(model.clone(), &background, Algorithm::Auto, &EngineOptions::default()).unwrap().shap(&block).unwrap())
    };
    assert_eq!(run(1).values, run(2).values);
    assert_eq!(run(1).values, run(3).values);
}

#[test]
fn interventional_refusals_say_what_is_wrong() {
    let mut rng = Rng(0x510E_527F_ADE6_82D1);
    let model = Arc::new(random_model(&mut rng, 4, 2, 4));
    let empty = model.feature_block_from_values(0, vec![]).unwrap();
    let e = build_interventional(model.clone(), &empty, Algorithm::Auto, &EngineOptions::default()).err().unwrap().to_string();
    assert!(e.contains("background has no rows"), "{e}");
    let background = random_rows(&mut rng, &model, 3);
    let e = build_interventional(model.clone(), &background, Algorithm::Linear, &EngineOptions::default()).err().unwrap().to_string();
    assert!(e.contains("linear is path-dependent only"), "{e}");
}

#[test]
fn interventional_interaction_values_equal_the_reference_engine_and_sum_to_the_values() {
    let mut rng = Rng(0x9B05_688C_2B3E_6C1F);
    for case in 0..6 {
        let model = Arc::new(random_model(&mut rng, 6, 3 + case % 3, 5));
        let (background, rows) = (random_rows(&mut rng, &model, 1 + 9 * case), random_rows(&mut rng, &model, 7));
        let options = EngineOptions::default();
        let engine = build_interventional(model.clone(), &background, Algorithm::Auto, &options).unwrap();
        let reference = build_interventional(model.clone(), &background, Algorithm::TreeShap, &options).unwrap();
        let (got, want) = (engine.interactions(&rows).unwrap(), reference.interactions(&rows).unwrap());
        let scale = want.values.iter().fold(1e-12f64, |a, v| a.max(v.abs()));
        for (k, (g, w)) in got.values.iter().zip(&want.values).enumerate() {
            assert!((g - w).abs() <= 1e-12 * scale, "case {case} entry {k}: {g} against {w}");
        }
        let values = engine.shap(&rows).unwrap();
        let w = model.num_features() + 1;
        for r in 0..rows.rows() {
            for g in 0..model.num_groups() {
                for i in 0..w {
                    let row: f64 = got.matrix(r, g)[i * w..(i + 1) * w].iter().sum();
                    assert!((row - values.row(r, g)[i]).abs() <= 1e-12 * scale, "case {case} row {r} group {g} feature {i}");
                }
            }
        }
    }
}
