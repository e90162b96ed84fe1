//! Per-model data every CPU engine needs, computed once: cover ratios, weighted leaf values,
//! expected values (the bias), and where each feature splits inside each subtree.

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::model::{Model, Tree};

/// One tree's engine-side data. Indexed by the model's node numbering.
#[derive(Debug)]
pub(crate) struct PreparedTree {
    /// `cover(left)/cover(n)` and `cover(right)/cover(n)` of internal node `n`.
    pub ratios: Vec<[f64; 2]>,
    /// Leaf value times the tree weight.
    pub value: Vec<f64>,
    /// Expected value of the tree under the cover distribution (path-product form).
    pub expected: f64,
    /// Depth of the tree.
    pub depth: usize,
    /// Preorder position of each node, and one past the last position of its subtree.
    pub span: Vec<(u32, u32)>,
    /// For each player the tree splits on (a feature; see [`PreparedModel::players`]): the
    /// sorted preorder positions of those splits.
    pub splits_by_feature: Vec<(u32, Vec<u32>)>,
    /// Number of distinct players on the path from the root to each node, counting the node's
    /// own split for internal nodes' children only (`UNREACHABLE` for nodes no path reaches).
    pub distinct: Vec<u16>,
}

/// `PreparedTree::distinct` of a node no path from the root reaches (deleted XGBoost nodes).
pub(crate) const UNREACHABLE: u16 = u16::MAX;

impl PreparedTree {
    /// The tree's data; `players[c]` is the player a split on column `c` credits.
    fn new(tree: &Tree, players: &[u32]) -> PreparedTree {
        let n = tree.nodes.len();
        let mut ratios = vec![[0.0; 2]; n];
        let mut value = vec![0.0; n];
        let mut span = vec![(0u32, 0u32); n];
        let mut positions: Vec<(u32, u32)> = Vec::new(); // (feature, preorder)
                                                         // Iterative preorder walk; `exit` frames close a node's span.
        let mut stack = vec![(0usize, false)];
        let mut next = 0u32;
        let mut depth_of = vec![0usize; n];
        let mut depth = 0;
        while let Some((i, exit)) = stack.pop() {
            if exit {
                span[i].1 = next;
                continue;
            }
            let node = &tree.nodes[i];
            span[i].0 = next;
            next += 1;
            depth = depth.max(depth_of[i]);
            stack.push((i, true));
            if node.is_leaf() {
                value[i] = node.value * tree.weight;
            } else {
                ratios[i] = cover_ratios(node.cover, tree.nodes[node.left as usize].cover, tree.nodes[node.right as usize].cover);
                positions.push((players[node.feature as usize], span[i].0));
                depth_of[node.left as usize] = depth_of[i] + 1;
                depth_of[node.right as usize] = depth_of[i] + 1;
                stack.push((node.right as usize, false));
                stack.push((node.left as usize, false));
            }
        }
        positions.sort_unstable();
        let mut splits_by_feature: Vec<(u32, Vec<u32>)> = Vec::new();
        for (f, p) in positions {
            match splits_by_feature.last_mut() {
                Some((lf, v)) if *lf == f => v.push(p),
                _ => splits_by_feature.push((f, vec![p])),
            }
        }
        let expected = expected_value(tree, &ratios, &value);
        let distinct = distinct_path_features(tree, players);
        PreparedTree { ratios, value, expected, depth, span, splits_by_feature, distinct }
    }

    /// Reachable leaves with the number of distinct features on their paths.
    pub fn leaf_path_lengths<'a>(&'a self, tree: &'a Tree) -> impl Iterator<Item = usize> + 'a {
        tree.nodes.iter().zip(&self.distinct).filter(|(n, d)| n.is_leaf() && **d != UNREACHABLE).map(|(_, d)| *d as usize)
    }

    /// Whether the subtree under `node` splits on the feature whose split positions are given.
    #[inline]
    pub fn subtree_splits_on(&self, node: usize, positions: &[u32]) -> bool {
        let (start, end) = self.span[node];
        let i = positions.partition_point(|&p| p < start);
        i < positions.len() && positions[i] < end
    }
}

/// The fractions of a node's cover that go left and right: `child / parent`, as XGBoost's and
/// LightGBM's TreeSHAP take them. A node no training weight reached (zero cover, which XGBoost
/// and LightGBM turn into NaN values) splits by its children's covers where they have some, and
/// evenly where they have none, as [`Tree::node_means`] weighs them.
pub(crate) fn cover_ratios(parent: f64, left: f64, right: f64) -> [f64; 2] {
    if parent > 0.0 {
        [left / parent, right / parent]
    } else if left + right > 0.0 {
        [left / (left + right), right / (left + right)]
    } else {
        [0.5, 0.5]
    }
}

/// For every node, how many distinct players the path from the root to it has split on.
fn distinct_path_features(tree: &Tree, players: &[u32]) -> Vec<u16> {
    let mut out = vec![UNREACHABLE; tree.nodes.len()];
    let mut stack: Vec<(usize, Vec<u32>)> = vec![(0, Vec::new())];
    while let Some((i, feats)) = stack.pop() {
        out[i] = feats.len().min(UNREACHABLE as usize - 1) as u16;
        let node = &tree.nodes[i];
        if node.is_leaf() {
            continue;
        }
        let mut next = feats;
        let player = players[node.feature as usize];
        if !next.contains(&player) {
            next.push(player);
        }
        stack.push((node.right as usize, next.clone()));
        stack.push((node.left as usize, next));
    }
    out
}

/// Σ over leaves of value × product of cover ratios on the way down. This is exactly the
/// quantity TreeSHAP's attributions are measured from, so attributions + bias = prediction
/// holds to rounding even when child covers do not add up to the parent's.
fn expected_value(tree: &Tree, ratios: &[[f64; 2]], value: &[f64]) -> f64 {
    let mut total = 0.0;
    let mut stack = vec![(0usize, 1.0f64)];
    while let Some((i, p)) = stack.pop() {
        let node = &tree.nodes[i];
        if node.is_leaf() {
            total += p * value[i];
        } else {
            stack.push((node.right as usize, p * ratios[i][1]));
            stack.push((node.left as usize, p * ratios[i][0]));
        }
    }
    total
}

/// A model plus its prepared trees; shared by all CPU engines.
#[derive(Debug)]
pub(crate) struct PreparedModel {
    pub model: Arc<Model>,
    pub trees: Vec<PreparedTree>,
    /// Bias per group: base margin plus every tree's expected value.
    pub bias: Vec<f64>,
    /// Deepest tree.
    pub max_depth: usize,
    /// Per column of the feature block, the player a split on it credits: the column itself for
    /// a feature, the features of a combination for a combined column (see
    /// [`Combinations`](crate::model::Combinations)).
    pub players: Vec<u32>,
}

impl PreparedModel {
    pub fn new(model: Arc<Model>) -> Result<PreparedModel> {
        let players = model.players();
        let trees: Vec<PreparedTree> = model.trees().iter().map(|t| PreparedTree::new(t, &players)).collect();
        let mut bias = model.base_margin().to_vec();
        for (t, p) in model.trees().iter().zip(&trees) {
            bias[t.group] += p.expected;
        }
        if bias.iter().any(|b| !b.is_finite()) {
            return Err(Error::InvalidArgument("model's expected value is not finite (check covers and leaf values)".into()));
        }
        let max_depth = trees.iter().map(|t| t.depth).max().unwrap_or(0);
        Ok(PreparedModel { model, trees, bias, max_depth, players })
    }

    /// Width of one row of attributions: G × (F + 1) (players, for a model whose values are
    /// computed for players and folded after: [`Model::num_players`]).
    pub fn shap_width(&self) -> usize {
        self.model.num_groups() * (self.model.num_players() + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::{build_engine, Algorithm, EngineOptions, FeatureBlock};
    use crate::model::Precision;

    #[test]
    fn zero_cover_nodes_split_by_their_childrens_covers_or_evenly_in_every_engine() {
        assert_eq!(cover_ratios(4.0, 1.0, 3.0), [0.25, 0.75]);
        assert_eq!(cover_ratios(0.0, 1.0, 3.0), [0.25, 0.75]);
        assert_eq!(cover_ratios(0.0, 0.0, 0.0), [0.5, 0.5]);
        // A full tree of depth 4 whose whole right subtree below the root's right child has no
        // training weight (cover 0 at every node of it).
        let mut seed = 5;
        let mut tree = crate::test_support::full_tree(&mut seed, 4, |level, _| level as u32);
        let right = tree.nodes[0].right as usize;
        let mut stack = vec![right];
        while let Some(i) = stack.pop() {
            tree.nodes[i].cover = 0.0;
            if !tree.nodes[i].is_leaf() {
                stack.extend([tree.nodes[i].left as usize, tree.nodes[i].right as usize]);
            }
        }
        tree.nodes[0].cover = tree.nodes[tree.nodes[0].left as usize].cover;
        // Made through Model::new, whose checks take zero covers.
        let model = Arc::new(crate::test_support::numeric_model(4, vec![tree], 0.5));
        let rows = FeatureBlock::new(16, 4, (0..64).map(|i| ((i * 37) % 17) as f64 / 17.0).collect(), Precision::F64);
        let options = EngineOptions::default();
        let reference = build_engine(model.clone(), Algorithm::TreeShap, None, &options).unwrap();
        let want = reference.shap(&rows).unwrap();
        let margins = reference.predict(&rows).unwrap();
        assert!(want.values.iter().all(|v| v.is_finite()));
        for r in 0..16 {
            let total: f64 = want.row(r, 0).iter().sum();
            assert!((total - margins.values[r]).abs() < 1e-12, "row {r}: {total} vs {}", margins.values[r]);
        }
        // Rows that go into the empty subtree are explained too (its branches weigh 1/2 each).
        assert!((0..16).any(|r| rows.row(r)[0] >= 0.0 && want.row(r, 0)[1..4].iter().any(|v| *v != 0.0)));
        for algorithm in [Algorithm::FastV1, Algorithm::FastV2, Algorithm::Quadrature, Algorithm::Linear] {
            let got = build_engine(model.clone(), algorithm, None, &options).unwrap().shap(&rows).unwrap();
            for (a, b) in got.values.iter().zip(&want.values) {
                assert!((a - b).abs() <= 1e-12 * b.abs().max(1.0), "{algorithm}: {a} vs {b}");
            }
        }
    }
}
