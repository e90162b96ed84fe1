//! `treeshap`: the original recursive algorithm (Lundberg, Erion & Lee 2018, algorithm 2),
//! kept simple as the reference every other engine is tested against.
//!
//! The recursion also supports conditioning on one feature ("on": the row's value is known,
//! "off": it is averaged out), which the interaction values are built from.

use std::sync::Arc;

use super::block::FeatureBlock;
use super::drivers::{check_block, check_output, finish_interaction_row, fold_player_interactions, par_rows, shap_by_tree, shap_row_by_tree};
use super::engine_trait::Engine;
use super::output::{Attributions, Interactions};
use super::path::{extend, unwind, unwound_sum, PathElem, NO_FEATURE};
use super::prepared::{PreparedModel, PreparedTree};
use crate::error::Result;
use crate::model::{Model, Tree};

/// The reference engine.
pub(crate) struct TreeShap {
    prepared: Arc<PreparedModel>,
}

impl TreeShap {
    pub fn new(prepared: Arc<PreparedModel>) -> Result<Self> {
        super::drivers::check_depth("treeshap", &prepared)?;
        Ok(TreeShap { prepared })
    }
}

/// Conditioning of a recursive TreeSHAP walk on one feature.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Condition {
    /// Plain SHAP values.
    None,
    /// The feature is "on": only the branch the row takes counts.
    On(u32),
    /// The feature is "off": both branches count, weighted by cover.
    Off(u32),
}

impl Condition {
    fn feature(self) -> Option<u32> {
        match self {
            Condition::None => None,
            Condition::On(f) | Condition::Off(f) => Some(f),
        }
    }
}

/// Scratch space for one walk: the triangular stack of unique paths.
pub(crate) fn path_scratch(max_depth: usize) -> Vec<PathElem> {
    let d = max_depth + 2;
    vec![PathElem::default(); d * (d + 1) / 2 + d]
}

/// One recursive walk of one tree for one row.
pub(crate) struct Walk<'a> {
    pub tree: &'a Tree,
    pub prep: &'a PreparedTree,
    pub x: &'a [f64],
    /// Per column of `x`, the player a split on it credits ([`PreparedModel::players`]).
    pub players: &'a [u32],
    /// Attribution output for this tree's group (indexed by player).
    pub phi: &'a mut [f64],
    pub condition: Condition,
    /// Multiplies every contribution (±½ for the interaction halves).
    pub scale: f64,
    /// With a condition: preorder positions of the conditioned feature's splits, so subtrees
    /// where "on" and "off" cannot differ are skipped.
    pub cond_splits: Option<&'a [u32]>,
}

impl Walk<'_> {
    /// Runs the walk from the root.
    pub fn run(&mut self, scratch: &mut [PathElem]) {
        self.visit(0, &[], scratch, 1.0, 1.0, NO_FEATURE, 1.0, false);
    }

    #[allow(clippy::too_many_arguments)]
    fn visit(
        &mut self,
        node: usize,
        parent: &[PathElem],
        scratch: &mut [PathElem],
        parent_zero: f64,
        parent_one: f64,
        parent_feature: u32,
        cond_fraction: f64,
        cond_seen: bool,
    ) {
        if cond_fraction == 0.0 {
            return;
        }
        let n = parent.len();
        let (mine, rest) = scratch.split_at_mut(n + 1);
        mine[..n].copy_from_slice(parent);
        let mut len = n;
        // A conditioned feature never enters the path: its effect is in `cond_fraction`.
        if self.condition.feature() != Some(parent_feature) {
            extend(mine, len, parent_zero, parent_one, parent_feature);
            len += 1;
        }

        let tree_node = &self.tree.nodes[node];
        if tree_node.is_leaf() {
            let v = self.prep.value[node] * cond_fraction * self.scale;
            for i in 1..len {
                let el = mine[i];
                let w = unwound_sum(mine, len, i);
                self.phi[el.feature as usize] += w * (el.one - el.zero) * v;
            }
            return;
        }

        let goes_left = self.tree.goes_left(tree_node, self.x[tree_node.feature as usize]);
        // The path holds players: a split on a combined column is its combination's.
        let feature = self.players[tree_node.feature as usize];
        let (hot, cold, hot_ratio, cold_ratio) = {
            let [rl, rr] = self.prep.ratios[node];
            if goes_left {
                (tree_node.left, tree_node.right, rl, rr)
            } else {
                (tree_node.right, tree_node.left, rr, rl)
            }
        };

        // A feature already on the path is unwound and re-added with the fractions combined.
        let mut incoming_zero = 1.0;
        let mut incoming_one = 1.0;
        if let Some(k) = (1..len).find(|&k| mine[k].feature == feature) {
            incoming_zero = mine[k].zero;
            incoming_one = mine[k].one;
            unwind(mine, len, k);
            len -= 1;
        }

        let mut hot_fraction = cond_fraction;
        let mut cold_fraction = cond_fraction;
        let is_cond = self.condition.feature() == Some(feature);
        match self.condition {
            Condition::On(f) if f == feature => cold_fraction = 0.0,
            Condition::Off(f) if f == feature => {
                hot_fraction *= hot_ratio;
                cold_fraction *= cold_ratio;
            }
            _ => {}
        }
        let seen = cond_seen || is_cond;
        let path = &mine[..len];
        for (child, ratio, one, fraction) in [(hot, hot_ratio, incoming_one, hot_fraction), (cold, cold_ratio, 0.0, cold_fraction)] {
            let zero = ratio * incoming_zero;
            // A branch no training cover reaches and the row does not take adds nothing.
            if zero == 0.0 && one == 0.0 {
                continue;
            }
            // Below here "on" and "off" walks are identical unless the conditioned feature is
            // above (seen) or below: skipping keeps interactions to the paths that hold it.
            if let Some(splits) = self.cond_splits {
                if !seen && !self.prep.subtree_splits_on(child as usize, splits) {
                    continue;
                }
            }
            self.visit(child as usize, path, rest, zero, one, feature, fraction, seen);
        }
    }
}

/// One tree's plain SHAP values for one row, added to `phi`.
pub(crate) fn shap_tree(p: &PreparedModel, t: usize, x: &[f64], phi: &mut [f64], scratch: &mut [PathElem]) {
    let (tree, prep) = (&p.model.trees()[t], &p.trees[t]);
    Walk { tree, prep, x, players: &p.players, phi, condition: Condition::None, scale: 1.0, cond_splits: None }.run(scratch);
}

/// Plain SHAP values of one row into `out` (G × (F+1)), bias included.
pub(crate) fn shap_row(p: &PreparedModel, x: &[f64], out: &mut [f64], scratch: &mut Vec<PathElem>) {
    shap_row_by_tree(p, x, out, scratch, &|t, x, phi, s| shap_tree(p, t, x, phi, s));
}

impl Engine for TreeShap {
    fn name(&self) -> &'static str {
        "treeshap"
    }

    fn model(&self) -> &Model {
        &self.prepared.model
    }

    fn shap(&self, block: &FeatureBlock) -> Result<Attributions> {
        let p = &*self.prepared;
        shap_by_tree(p, block, || path_scratch(p.max_depth), |t, x, phi, s| shap_tree(p, t, x, phi, s))
    }

    fn interactions(&self, block: &FeatureBlock) -> Result<Interactions> {
        interactions_for_rows(&self.prepared, block)
    }
}

// Interaction values by conditioned walks (Lundberg et al. 2020): for each feature j a tree
// splits on, the walk with j "on" minus the walk with j "off", halved, gives row j of the
// matrix; the diagonal is the SHAP value minus the row's off-diagonal sum. Only features a tree
// splits on are conditioned on, and each conditioned walk skips every subtree where "on" and
// "off" cannot differ, so the work follows the paths that hold the feature rather than all
// features × all leaves.

struct Scratch {
    path: Vec<PathElem>,
    shap: Vec<f64>,
    diff: Vec<f64>,
}

/// Interaction values of every row by conditioned TreeSHAP walks: the reference for the
/// faster engines' interaction values, and their fallback when quadrature cannot take a model.
pub(crate) fn interactions_for_rows(p: &PreparedModel, block: &FeatureBlock) -> Result<Interactions> {
    check_block(&p.model, block)?;
    // Computed for the players, folded into the features' values after.
    let f = p.model.num_players();
    let g = p.model.num_groups();
    let w = f + 1;
    let width = g * w * w;
    check_output(block.rows(), width, "interaction values")?;
    let init = || Scratch { path: path_scratch(p.max_depth), shap: vec![0.0; g * w], diff: vec![0.0; w] };
    let values = par_rows(block, width, init, |x, out, s| interaction_row(p, x, out, s));
    Ok(fold_player_interactions(&p.model, Interactions { rows: block.rows(), groups: g, features: f, values }))
}

fn interaction_row(p: &PreparedModel, x: &[f64], out: &mut [f64], s: &mut Scratch) {
    let f = p.model.num_players();
    let w = f + 1;
    s.shap.iter_mut().for_each(|v| *v = 0.0);
    shap_row(p, x, &mut s.shap, &mut s.path);

    for (tree, prep) in p.model.trees().iter().zip(&p.trees) {
        let group_base = tree.group * w * w;
        for (j, splits) in &prep.splits_by_feature {
            for (condition, scale) in [(Condition::On(*j), 0.5), (Condition::Off(*j), -0.5)] {
                Walk { tree, prep, x, players: &p.players, phi: &mut s.diff, condition, scale, cond_splits: Some(splits) }.run(&mut s.path);
            }
            let row = group_base + *j as usize * w;
            for (i, _) in &prep.splits_by_feature {
                let i = *i as usize;
                out[row + i] += s.diff[i];
                s.diff[i] = 0.0;
            }
        }
    }

    finish_interaction_row(out, &s.shap, f, p.model.num_groups());
}
