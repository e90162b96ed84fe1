//! A two-output model whose outputs always sum to the same constant, explained once.
//!
//! A binary classifier that gives both class probabilities (scikit-learn's and Spark ML's
//! forests and decision trees) has, for each tree, a twin with the same splits and covers whose
//! leaves hold one minus its leaves. SHAP values are linear in the model and a constant earns no
//! attribution, so the first class's values are the second's negated and its bias (and margin)
//! is the constant minus the second's: exactly, for path-dependent and interventional values and
//! interaction values alike. [`Complement`] runs its inner engine on the second class's trees only
//! (half the work) and writes the first class from them. The second class's values are what the
//! inner engine gives on those trees; the first's agree with computing them directly to within
//! rounding (the twins' leaves sum to the constant only to within a few ulps).

use std::sync::Arc;

use super::block::FeatureBlock;
use super::drivers::check_output;
use super::engine_trait::Engine;
use super::output::{Attributions, Interactions, Predictions};
use crate::error::Result;
use crate::model::{Model, ModelParts, Node, Tree};

/// How far a leaf pair's sum may stray from its tree's constant, in ulps of the largest of the
/// values: the two class probabilities are each rounded once (a count over a total).
const SUM_ULPS: f64 = 8.0;

/// The model of the second output alone, and the constant the two outputs sum to, when `model`
/// has two outputs that are each other's complement; `None` otherwise.
pub(crate) fn complementary_outputs(model: &Model) -> Option<(Model, f64)> {
    // Linear leaves give each row its own value: no constant sum is read off the leaves.
    if model.num_groups() != 2 || model.base_margin().len() != 2 || model.has_linear_leaves() {
        return None;
    }
    let first: Vec<&Tree> = model.trees().iter().filter(|t| t.group == 0).collect();
    let second: Vec<&Tree> = model.trees().iter().filter(|t| t.group == 1).collect();
    if first.is_empty() || first.len() != second.len() {
        return None;
    }
    let mut total = model.base_margin()[0] + model.base_margin()[1];
    for (a, b) in first.iter().zip(&second) {
        total += b.weight * twin_sum(a, b)?;
    }
    if !total.is_finite() {
        return None;
    }
    // Field by field, so only the second output's trees are copied (not every tree, then half
    // of them dropped).
    let reduced = ModelParts {
        format: model.format(),
        library_version: model.library_version().map(str::to_string),
        objective: model.objective().to_string(),
        feature_names: model.feature_names().to_vec(),
        feature_kinds: model.feature_kinds().to_vec(),
        num_groups: 1,
        base_margin: vec![model.base_margin()[1]],
        trees: second.into_iter().map(|t| Tree { group: 0, ..t.clone() }).collect(),
        precision: model.precision(),
        categories: model.categories().to_vec(),
        combinations: model.combinations().cloned(),
    };
    // The second output's trees of a model that passed its checks pass them again.
    Some((Model::new(reduced, "the second output").ok()?, total))
}

/// The constant `a`'s and `b`'s leaves sum to, when the trees are twins: the same splits,
/// covers and weight, and leaf values summing to one constant.
fn twin_sum(a: &Tree, b: &Tree) -> Option<f64> {
    if a.weight != b.weight || a.nodes.len() != b.nodes.len() || a.category_words != b.category_words {
        return None;
    }
    let mut sum = None;
    for (x, y) in a.nodes.iter().zip(&b.nodes) {
        if (Node { value: 0.0, ..x.clone() }) != (Node { value: 0.0, ..y.clone() }) {
            return None;
        }
        if !x.is_leaf() {
            continue;
        }
        let s = x.value + y.value;
        let c = *sum.get_or_insert(s);
        let scale = x.value.abs().max(y.value.abs()).max(c.abs());
        if (s - c).abs() > SUM_ULPS * f64::EPSILON * scale {
            return None;
        }
    }
    sum
}

/// An engine over a two-output model whose first output is the complement of its second: the
/// inner engine explains the second output's trees and the first is derived from it.
pub(crate) struct Complement {
    model: Arc<Model>,
    inner: Arc<dyn Engine>,
    total: f64,
}

impl Complement {
    /// Wraps `inner`, built on the second output's trees as [`complementary_outputs`] gave
    /// them with `total`, as an engine of the full two-output `model`.
    pub(crate) fn new(model: Arc<Model>, inner: Arc<dyn Engine>, total: f64) -> Self {
        Complement { model, inner, total }
    }

    /// Spreads one-output rows of `width` values into two-output rows: the first output from
    /// `derive(index in the row, value)`, the second the value itself.
    fn spread(&self, values: &[f64], width: usize, derive: impl Fn(usize, f64) -> f64) -> Vec<f64> {
        let mut out = Vec::with_capacity(values.len() * 2);
        for row in values.chunks_exact(width) {
            out.extend(row.iter().enumerate().map(|(i, &v)| derive(i, v)));
            out.extend_from_slice(row);
        }
        out
    }
}

impl Engine for Complement {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn model(&self) -> &Model {
        &self.model
    }

    fn shap(&self, block: &FeatureBlock) -> Result<Attributions> {
        let w = self.model.num_features() + 1;
        check_output(block.rows(), 2 * w, "SHAP values")?;
        let one = self.inner.shap(block)?;
        // `0.0 - v`, not `-v`: a zero stays +0.0, as the engine writes it.
        let values = self.spread(&one.values, w, |i, v| if i + 1 == w { self.total - v } else { 0.0 - v });
        Ok(Attributions { rows: one.rows, groups: 2, features: one.features, values })
    }

    fn interactions(&self, block: &FeatureBlock) -> Result<Interactions> {
        let w = self.model.num_features() + 1;
        check_output(block.rows(), 2 * w * w, "interaction values")?;
        let one = self.inner.interactions(block)?;
        let values = self.spread(&one.values, w * w, |i, v| if i + 1 == w * w { self.total - v } else { 0.0 - v });
        Ok(Interactions { rows: one.rows, groups: 2, features: one.features, values })
    }

    fn predict(&self, block: &FeatureBlock) -> Result<Predictions> {
        check_output(block.rows(), 2, "predictions")?;
        let one = self.inner.predict(block)?;
        let values = self.spread(&one.values, 1, |_, v| self.total - v);
        Ok(Predictions { rows: one.rows, groups: 2, values })
    }

    fn memory_bytes(&self) -> Option<usize> {
        self.inner.memory_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{build_engine, build_interventional, build_path_dependent, Algorithm, EngineOptions};
    use crate::model::Precision;
    use crate::test_support::{full_tree, max_abs_diff, numeric_parts, uniform};

    /// A binary "forest" as scikit-learn's trees file gives it: per estimator, the tree of
    /// class 0 then its twin of class 1, leaves `p` and `1 - p`, each weighted 1/trees.
    fn forest(seed: &mut u64, trees: usize, features: usize) -> Model {
        let mut all = Vec::new();
        for _ in 0..trees {
            let mut second = full_tree(seed, 5, |_, u| (u * features as f64) as u32);
            second.weight = 1.0 / trees as f64;
            let mut first = second.clone();
            for (a, b) in first.nodes.iter_mut().zip(&mut second.nodes) {
                if a.is_leaf() {
                    let p = uniform(seed);
                    (a.value, b.value) = (1.0 - p, p);
                }
            }
            second.group = 1;
            all.extend([first, second]);
        }
        let mut parts = numeric_parts(features, all, 0.0);
        (parts.num_groups, parts.base_margin) = (2, vec![0.0, 0.0]);
        Model::new(parts, "a test forest").unwrap()
    }

    fn block(seed: &mut u64, rows: usize, features: usize) -> FeatureBlock {
        let values = (0..rows * features).map(|_| if uniform(seed) < 0.05 { f64::NAN } else { uniform(seed) }).collect();
        FeatureBlock::new(rows, features, values, Precision::F64)
    }

    #[test]
    fn the_first_class_derived_matches_computing_it() {
        let (mut seed, features) = (7u64, 6);
        let model = Arc::new(forest(&mut seed, 9, features));
        let (second, total) = complementary_outputs(&model).expect("twins with leaves p and 1 - p");
        assert_eq!((second.num_groups(), second.trees().len()), (1, 9));
        assert!((total - 1.0).abs() < 1e-12, "the two classes sum to {total}, not 1");
        let x = block(&mut seed, 40, features);
        let options = EngineOptions::default();
        for algorithm in [Algorithm::TreeShap, Algorithm::Linear, Algorithm::FastV2] {
            let once = build_engine(model.clone(), algorithm, None, &options).unwrap();
            let both = build_path_dependent(model.clone(), algorithm, None, &options).unwrap();
            let alone = build_path_dependent(Arc::new(second.clone()), algorithm, None, &options).unwrap();
            let (s1, s2) = (once.shap(&x).unwrap(), both.shap(&x).unwrap());
            assert_eq!((s1.groups, s1.rows), (2, 40));
            assert!(max_abs_diff(&s1.values, &s2.values) < 1e-13, "{algorithm}: SHAP values");
            // The second class is the inner engine's, bit for bit.
            let inner = alone.shap(&x).unwrap();
            for r in 0..40 {
                assert_eq!(s1.row(r, 1), inner.row(r, 0));
            }
            let (i1, i2) = (once.interactions(&x).unwrap(), both.interactions(&x).unwrap());
            assert!(max_abs_diff(&i1.values, &i2.values) < 1e-13, "{algorithm}: interaction values");
            let (p1, p2) = (once.predict(&x).unwrap(), both.predict(&x).unwrap());
            assert!(max_abs_diff(&p1.values, &p2.values) < 1e-13, "{algorithm}: margins");
            // Additivity of the derived class: each row's values sum to its margin.
            for r in 0..40 {
                let sum: f64 = s1.row(r, 0).iter().sum();
                assert!((sum - p1.values[r * 2]).abs() < 1e-12);
            }
        }
        let background = block(&mut seed, 25, features);
        for algorithm in [Algorithm::Auto, Algorithm::TreeShap] {
            let once = build_interventional(model.clone(), &background, algorithm, &options).unwrap();
            let mut unpaired = (*model).clone().into_parts();
            unpaired.trees[0].nodes[0].cover += 1.0; // no longer twins: computed directly
            let unpaired = Model::new(unpaired, "test").unwrap();
            assert!(complementary_outputs(&unpaired).is_none());
            let both = build_interventional(Arc::new(unpaired), &background, algorithm, &options).unwrap();
            // Covers do not enter interventional values, so the two must agree.
            assert!(max_abs_diff(&once.shap(&x).unwrap().values, &both.shap(&x).unwrap().values) < 1e-13, "{algorithm}: interventional");
        }
    }

    #[test]
    fn trees_that_are_not_twins_are_computed_directly() {
        let mut seed = 11u64;
        let model = forest(&mut seed, 4, 5);
        assert!(complementary_outputs(&model).is_some());
        let changed = |change: &dyn Fn(&mut ModelParts)| {
            let mut parts = model.clone().into_parts();
            change(&mut parts);
            Model::new(parts, "test").unwrap()
        };
        let off = changed(&|p| {
            let leaf = p.trees[3].nodes.iter().position(Node::is_leaf).unwrap();
            p.trees[3].nodes[leaf].value += 1e-9;
        });
        assert!(complementary_outputs(&off).is_none(), "a leaf pair off the tree's sum");
        let off = changed(&|p| p.trees[1].weight *= 2.0);
        assert!(complementary_outputs(&off).is_none(), "twins of different weights");
        let off = changed(&|p| p.trees[2].nodes[0].feature = (p.trees[2].nodes[0].feature + 1) % 5);
        assert!(complementary_outputs(&off).is_none(), "a split on another feature");
        let off = changed(&|p| {
            p.trees.pop();
        });
        assert!(complementary_outputs(&off).is_none(), "a tree without a twin");
        let off = changed(&|p| {
            p.trees.iter_mut().for_each(|t| t.group = 0);
            (p.num_groups, p.base_margin) = (1, vec![0.0]);
        });
        assert!(complementary_outputs(&off).is_none(), "one output");
    }
}
