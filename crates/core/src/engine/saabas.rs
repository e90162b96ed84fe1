//! Saabas values: the approximation XGBoost's `pred_contribs(approx_contribs=True)` and shap's
//! `shap_values(approximate=True)` give. Each split on a row's path credits its feature with
//! the change in the node's expected value ([`Tree::node_means`](crate::model::Tree)) from the
//! node to the child the row takes; the bias is the roots' expected values plus the base
//! margin. They add up to the margin like SHAP values, but they are not Shapley values: they
//! depend on the order of the splits and favour features near the leaves. One pass down each
//! tree per row, no tables.

use std::sync::Arc;

use super::block::FeatureBlock;
use super::drivers::{rows_per_task, shap_by_task_from};
use super::output::Attributions;
use crate::error::Result;
use crate::model::Model;

/// A model prepared for Saabas values: every node's expected value, computed once.
pub struct Saabas {
    model: Arc<Model>,
    /// Per column, the player a split on it credits ([`Model::players`]).
    players: Vec<u32>,
    means: Vec<Vec<f64>>,
    bias: Vec<f64>,
}

impl Saabas {
    /// Computes the nodes' expected values of `model`.
    pub fn new(model: Arc<Model>) -> Saabas {
        let means: Vec<Vec<f64>> = model.trees().iter().map(|t| t.node_means()).collect();
        let mut bias = model.base_margin().to_vec();
        for (tree, m) in model.trees().iter().zip(&means) {
            bias[tree.group] += m.first().copied().unwrap_or(0.0);
        }
        Saabas { players: model.players(), model, means, bias }
    }

    /// Saabas values of every row of `block`, in the layout of SHAP values (G × (F+1) per row,
    /// bias last).
    pub fn values(&self, block: &FeatureBlock) -> Result<Attributions> {
        // Credited to players (a combination's split to its features together), folded after.
        let w = self.model.num_players() + 1;
        let width = self.model.num_groups() * w;
        shap_by_task_from(
            &self.model,
            &self.bias,
            block,
            rows_per_task(block.rows()),
            || (),
            |_, first, chunk| {
                for (i, out) in chunk.chunks_mut(width).enumerate() {
                    let x = block.row(first + i);
                    for (tree, means) in self.model.trees().iter().zip(&self.means) {
                        let phi = &mut out[tree.group * w..(tree.group + 1) * w];
                        let mut at = 0usize;
                        loop {
                            let node = &tree.nodes[at];
                            if node.is_leaf() {
                                break;
                            }
                            let next = if tree.goes_left(node, x[node.feature as usize]) { node.left } else { node.right } as usize;
                            phi[self.players[node.feature as usize] as usize] += means[next] - means[at];
                            at = next;
                        }
                    }
                }
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_fixtures::fixtures;

    #[test]
    fn saabas_values_add_up_to_the_margin_and_credit_path_features_only() {
        for f in &fixtures() {
            let saabas = Saabas::new(f.model.clone());
            let got = saabas.values(&f.block).unwrap();
            let g = f.model.num_groups();
            let mut margin = vec![0.0; g];
            for r in 0..f.block.rows() {
                f.model.predict_row(f.block.row(r), &mut margin);
                for (group, m) in margin.iter().enumerate() {
                    let total: f64 = got.row(r, group).iter().sum();
                    assert!((total - m).abs() <= 1e-9 * m.abs().max(1.0), "{}: row {r} group {group}: {total} vs {m}", f.name);
                }
            }
            // A single-tree check by hand: row 0, the first tree, its path's differences.
            let tree = &f.model.trees()[0];
            let means = tree.node_means();
            let x = f.block.row(0);
            let (mut at, mut want) = (0usize, vec![0.0; f.model.num_features()]);
            while !tree.nodes[at].is_leaf() {
                let node = &tree.nodes[at];
                let next = if tree.goes_left(node, x[node.feature as usize]) { node.left } else { node.right } as usize;
                want[node.feature as usize] += means[next] - means[at];
                at = next;
            }
            let one = Model::new(
                crate::model::ModelParts { trees: vec![tree.clone()], base_margin: vec![0.0; g], ..(*f.model).clone().into_parts() },
                "one tree",
            )
            .unwrap();
            let single = Saabas::new(Arc::new(one)).values(&f.block).unwrap();
            let row = &single.row(0, tree.group)[..want.len()];
            assert!(row.iter().zip(&want).all(|(a, b)| (a - b).abs() <= 1e-12), "{}: {row:?} vs {want:?}", f.name);
        }
    }
}
