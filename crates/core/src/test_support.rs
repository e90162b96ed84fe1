//! Builders the crate's unit tests share for models made in code (the committed fixtures are in
//! `test_fixtures`).

use crate::model::{FeatureKind, Model, ModelFormat, ModelParts, Node, Precision, SplitRule, Tree};

/// A seeded generator of numbers in [0, 1) (a 64-bit LCG): the same sequence on every run.
pub(crate) fn uniform(seed: &mut u64) -> f64 {
    *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (*seed >> 11) as f64 / (1u64 << 53) as f64
}

/// A one-output regression model of `trees` over `features` numeric features `f0…`, read as
/// XGBoost JSON, in f64, with base margin `base`.
pub(crate) fn numeric_model(features: usize, trees: Vec<Tree>, base: f64) -> Model {
    Model::new(numeric_parts(features, trees, base), "a test model").expect("a valid test model")
}

/// The parts of [`numeric_model`], to change before making the model.
pub(crate) fn numeric_parts(features: usize, trees: Vec<Tree>, base: f64) -> ModelParts {
    ModelParts {
        format: ModelFormat::XgboostJson,
        library_version: None,
        objective: "reg:squarederror".into(),
        feature_names: (0..features).map(|i| format!("f{i}")).collect(),
        feature_kinds: vec![FeatureKind::Numeric; features],
        num_groups: 1,
        base_margin: vec![base],
        trees,
        precision: Precision::F64,
        categories: Vec::new(),
        combinations: None,
    }
}

/// A full tree of `depth` with uneven covers and random thresholds, default directions and leaf
/// values; `feature(level, u)` picks the feature of a split at `level` from a draw `u` in [0, 1).
pub(crate) fn full_tree(seed: &mut u64, depth: usize, mut feature: impl FnMut(usize, f64) -> u32) -> Tree {
    let mut nodes = vec![Node::leaf(0.0, 1000.0)];
    let mut stack = vec![(0usize, 0usize)];
    while let Some((i, d)) = stack.pop() {
        if d == depth {
            nodes[i].value = uniform(seed) - 0.5;
            continue;
        }
        let cover = nodes[i].cover;
        let frac = 0.1 + 0.8 * uniform(seed);
        let (l, r) = (nodes.len() as u32, nodes.len() as u32 + 1);
        nodes.push(Node::leaf(0.0, cover * frac));
        nodes.push(Node::leaf(0.0, cover * (1.0 - frac)));
        let f = feature(d, uniform(seed));
        let n = &mut nodes[i];
        (n.left, n.right, n.feature) = (l, r, f);
        n.rule = SplitRule::XgbLess { threshold: uniform(seed) };
        n.default_left = uniform(seed) < 0.5;
        stack.push((l as usize, d + 1));
        stack.push((r as usize, d + 1));
    }
    Tree { nodes, category_words: vec![], group: 0, weight: 1.0, linear_leaves: vec![] }
}

/// Largest |a − b| over the pairs, NaN where one value of a pair is NaN and the other is not
/// (`f64::max` drops a NaN, so a fold with it would pass a NaN result as no error).
pub(crate) fn max_abs_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len(), "lengths differ");
    let mut worst = 0.0f64;
    for (x, y) in a.iter().zip(b) {
        if x == y || (x.is_nan() && y.is_nan()) {
            continue;
        }
        let diff = (x - y).abs();
        if diff.is_nan() {
            return f64::NAN;
        }
        worst = worst.max(diff);
    }
    worst
}
