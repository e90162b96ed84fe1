//! Covers counted from rows: path-dependent SHAP with the trees' expectations taken over a data
//! set instead of the training covers (shap's `TreeExplainer(model, data,
//! feature_perturbation="tree_path_dependent")`).
//!
//! Path-dependent values weigh a split's branches by the covers of the nodes below it; the
//! training covers describe the training rows. Counting how many rows of another set reach each
//! node gives the same values over that set: the bias becomes its mean prediction (up to the
//! floor below), and the values still add up to each row's margin. A node no row reaches gets
//! [`UNREACHED_COVER`] (what shap gives it), so a branch the data never takes still has a
//! weight and no 0/0 appears.

use rayon::prelude::*;

use super::block::FeatureBlock;
use super::drivers::check_block;
use crate::error::{Error, Result};
use crate::model::Model;

/// The cover of a node no counted row reaches: negligible against a count of one row, not
/// zero (shap's floor for the same case).
pub const UNREACHED_COVER: f64 = 1e-6;

/// `model` with every node's cover the number of `rows` that reach it ([`UNREACHED_COVER`] where
/// none does). Rows are in the model's feature order and precision
/// ([`Model::feature_block`](crate::model::Model)).
pub fn covers_counted_from(model: &Model, rows: &FeatureBlock) -> Result<Model> {
    if rows.rows() == 0 {
        return Err(Error::InvalidArgument("the rows to count covers from are empty; give at least one".into()));
    }
    check_block(model, rows).map_err(|e| e.context("rows to count covers from"))?;
    let mut counted = model.clone().into_parts();
    counted.trees.par_iter_mut().for_each(|tree| {
        let mut counts = vec![0u64; tree.nodes.len()];
        for r in 0..rows.rows() {
            let x = rows.row(r);
            let mut n = 0usize;
            loop {
                counts[n] += 1;
                let node = &tree.nodes[n];
                if node.is_leaf() {
                    break;
                }
                n = if tree.goes_left(node, x[node.feature as usize]) { node.left } else { node.right } as usize;
            }
        }
        for (node, count) in tree.nodes.iter_mut().zip(counts) {
            node.cover = if count == 0 { UNREACHED_COVER } else { count as f64 };
        }
    });
    Model::new(counted, "the model with counted covers")
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::engine::{build_engine, Algorithm, EngineOptions};
    use crate::model::Precision;

    #[test]
    fn covers_are_the_rows_through_each_node_and_the_bias_their_mean_prediction() {
        let mut seed = 11;
        let trees = (0..3).map(|_| crate::test_support::full_tree(&mut seed, 4, |_, u| (u * 3.0) as u32)).collect();
        let model = crate::test_support::numeric_model(3, trees, 0.25);
        let n = 40;
        let values: Vec<f64> = (0..n * 3).map(|i| ((i * 7919) % 1009) as f64 / 1009.0).collect();
        let rows = FeatureBlock::new(n, 3, values, Precision::F64);
        let counted = covers_counted_from(&model, &rows).unwrap();
        let mut unreached = 0;
        for (tree, original) in counted.trees().iter().zip(model.trees()) {
            // A leaf's count is the rows that end there; a node's, the sum over its subtree.
            let mut want = vec![0.0; tree.nodes.len()];
            for r in 0..n {
                want[original.leaf_of(rows.row(r))] += 1.0;
            }
            for &i in tree.preorder().iter().rev() {
                let node = &tree.nodes[i];
                if !node.is_leaf() {
                    want[i] = want[node.left as usize] + want[node.right as usize];
                }
            }
            for (i, node) in tree.nodes.iter().enumerate() {
                let expected = if want[i] == 0.0 { UNREACHED_COVER } else { want[i] };
                unreached += (want[i] == 0.0) as usize;
                assert_eq!(node.cover, expected, "node {i}");
            }
        }
        assert!(unreached > 0, "some node no row reaches, so the floor is exercised");
        // Path-dependent values over the counted covers: the bias is the rows' mean margin (up to
        // the floor's weight), and each row's values add up to its margin.
        let engine = build_engine(Arc::new(counted.clone()), Algorithm::TreeShap, None, &EngineOptions::default()).unwrap();
        let shap = engine.shap(&rows).unwrap();
        let margins = engine.predict(&rows).unwrap();
        let mean = margins.values.iter().sum::<f64>() / n as f64;
        let bias = shap.row(0, 0)[3];
        assert!((bias - mean).abs() < 1e-5, "bias {bias} vs the rows' mean margin {mean}");
        for r in 0..n {
            let total: f64 = shap.row(r, 0).iter().sum();
            assert!((total - margins.values[r]).abs() < 1e-12, "row {r}");
        }
        assert!(covers_counted_from(&model, &FeatureBlock::new(0, 3, vec![], Precision::F64)).is_err());
    }
}
