//! Interventional values and interaction values of models with linear leaves (LightGBM's
//! `linear_tree`), the background aggregated once per leaf.
//!
//! Against one background row `z`, a linear leaf's output over the hybrids of `x` and `z` is a
//! sum of games `v·[A ⊆ S]·[S ∩ B = ∅]` ([`InterventionalReference`]'s `linear_leaf_games`):
//! which games, and the sets `A` and `B`, depend on `z` only through the path features `z`
//! fails (`F`) and the leaf's terms `z` is NaN in; their values are linear in `z`'s values of
//! the terms:
//!
//! ```text
//!   v·[F, X_f] + (K − v)·[X', Z'] + Σ_j a_j (x_j − z_j)·[X' ∪ {j}, Z']
//! ```
//!
//! with `K = c + Σ a_j·(x_j or z_j)`. So the background rows of a leaf are grouped by `F` and
//! their NaN terms, each group keeping its row count and its sum of each term's values, and a
//! group's games are its rows' games summed: one pass per leaf over its groups, not a walk of
//! the tree per background row. A leaf has at most as many groups as the background has rows
//! and at most `2^(d + t)` (`d` path features, `t` terms: LightGBM fits a leaf's model on its
//! path's features), so the cost of a row grows with the background only until every pattern
//! of a leaf is there.
//!
//! The games' values are the same sums as the reference's, added in another order (a group's
//! rows first), so the two agree to rounding, not to the bit.
//!
//! A transformed output (a probability, a loss) scales each background row's games by shap's
//! `s(x, z)` ([`rescaling`](super::rescaling), [`row_scales`]), which differs from row to row
//! of a group. The games are linear in a group's row count and sums, so they take the scaled
//! count `Σ s(x, z)` and scaled sums `Σ s(x, z)·z_j` instead, over the group's rows, which each
//! group then keeps: a row costs, per leaf, the rows of the groups it can reach (no tree walk,
//! and one set of games a group), so it still grows with the background.
//!
//! [`InterventionalReference`]: super::InterventionalReference

use std::collections::HashMap;
use std::sync::Arc;

use super::{check_labels, checked_background_outputs, for_each_bit, interactions_from_pairs, pairs, row_scales, FailWalk, Weights};
use crate::engine::block::FeatureBlock;
use crate::engine::drivers::{bias_is_the_rest, rows_per_task, shap_by_task_from};
use crate::engine::engine_trait::Engine;
use crate::engine::options::{Index, OutputTransform};
use crate::engine::output::{Attributions, Interactions};
use crate::engine::prepared::PreparedModel;
use crate::error::{Error, Result};
use crate::model::{Model, Tree};

/// One term of a leaf's linear model: the column it reads, its coefficient and the bit of the
/// column's player in the leaf's sets.
#[derive(Debug, Clone, Copy)]
struct Term {
    column: u32,
    coefficient: f64,
    bit: u32,
}

/// A leaf's linear model (`constant + Σ coefficient · x[column]`), in the file's term order.
#[derive(Debug)]
struct LinearModel {
    constant: f64,
    terms: Vec<Term>,
}

/// The background rows of one leaf that fail the same path players and are NaN in the same
/// terms.
#[derive(Debug, Clone, Copy)]
struct Group {
    /// The path players the rows fail (bits of [`GroupedLeaf::players`]).
    fails: u64,
    /// The terms the rows are NaN in (bit `t` for term `t`).
    nans: u64,
    /// How many rows.
    rows: f64,
    /// Where its rows' indices are in [`GroupedLeaf::members`] (kept for a transformed output).
    members: (u32, u32),
}

/// One leaf of a tree and its background groups.
#[derive(Debug)]
struct GroupedLeaf {
    /// The leaf's slot in its tree's [`FailWalk`].
    slot: u32,
    /// The player of each bit: the path's (as the walk numbers them), then those only the
    /// leaf's linear model reads.
    players: Vec<u32>,
    /// The leaf's value, what it gives a row NaN in one of its terms (before the tree weight).
    value: f64,
    /// The leaf's linear model, where it has one.
    linear: Option<LinearModel>,
    groups: Vec<Group>,
    /// Per group, its rows' sum of each term's values, `terms` values a group (0 where the
    /// group's rows are NaN in the term).
    sums: Vec<f64>,
    /// The background rows of each group, one group after another (a transformed output
    /// weighs each; empty for the margin).
    members: Vec<u32>,
}

/// One tree's walk and its leaves.
#[derive(Debug)]
struct GroupedTree {
    walk: FailWalk,
    weight: f64,
    leaves: Vec<GroupedLeaf>,
}

/// The aggregated interventional engine of models with linear leaves, margin output (Shapley
/// or Banzhaf values and interaction values).
pub(crate) struct LinearInterventional {
    model: Arc<Model>,
    index: Index,
    trees: Vec<GroupedTree>,
    /// Per group, the background's mean output (none for a loss, whose bias is each row's own).
    bias: Vec<f64>,
    /// The output explained: the margin, or a function of it.
    transform: OutputTransform,
    /// Each background row's margins, row-major (rows × groups).
    background_margins: Vec<f64>,
    /// The background's rows (a transformed output reads its groups' rows).
    background: FeatureBlock,
    weights: Weights,
    /// `1 / background rows`.
    scale: f64,
    /// Most walk slots of a tree: a row's fail sets take as many words.
    max_slots: usize,
    /// Bytes of the groups and their sums.
    bytes: usize,
}

impl LinearInterventional {
    /// The engine of `prepared`'s model over `background` (rows in the model's feature order
    /// and precision) for `index`'s values of the margin. Refused as [`Error::Unsupported`]
    /// where a leaf's path and linear model read more than 64 players, and as
    /// [`Error::ResourceExhausted`] where the groups would take more than `memory_bound`
    /// bytes: the row-pair reference explains those.
    #[cfg(test)]
    pub(crate) fn new(prepared: Arc<PreparedModel>, background: &FeatureBlock, index: Index, memory_bound: usize) -> Result<LinearInterventional> {
        Self::with_transform(prepared, background, index, OutputTransform::Identity, memory_bound)
    }

    /// [`new`](Self::new) for `transform`'s output (Shapley values only, as shap defines them
    /// for a transform).
    pub(crate) fn with_transform(
        prepared: Arc<PreparedModel>,
        background: &FeatureBlock,
        index: Index,
        transform: OutputTransform,
        memory_bound: usize,
    ) -> Result<LinearInterventional> {
        let model = prepared.model.clone();
        let (background_margins, bias) = checked_background_outputs(&model, background, index, transform)?;
        let keep_members = transform != OutputTransform::Identity;
        let (mut trees, mut bytes, mut max_slots, mut widest) = (Vec::new(), 0usize, 1usize, 0usize);
        for (t, tree) in model.trees().iter().enumerate() {
            let walk = FailWalk::new(tree, t, &prepared.players)?;
            let mut leaves = Vec::with_capacity(walk.leaves.len());
            for path in &walk.leaves {
                let mut players = path.features.clone();
                let linear = tree.linear_leaf(path.node as usize).map(|linear| {
                    let terms = linear
                        .terms
                        .iter()
                        .map(|&(column, coefficient)| {
                            let player = prepared.players[column as usize];
                            let bit = players.iter().position(|&p| p == player).unwrap_or_else(|| {
                                players.push(player);
                                players.len() - 1
                            });
                            Term { column, coefficient, bit: bit as u32 }
                        })
                        .collect();
                    LinearModel { constant: linear.constant, terms }
                });
                let terms = linear.as_ref().map_or(0, |l| l.terms.len());
                if players.len() > 64 || terms > 64 {
                    return Err(Error::Unsupported(format!(
                        "tree {t}: a leaf's path and linear model read {} features in {terms} terms; the grouped engine takes at most 64 of each",
                        players.len()
                    )));
                }
                widest = widest.max(players.len());
                let value = tree.nodes[path.node as usize].value;
                leaves.push(GroupedLeaf { slot: path.slot, players, value, linear, groups: Vec::new(), sums: Vec::new(), members: Vec::new() });
            }
            bytes = group_background(tree, &walk, &mut leaves, background, keep_members, (bytes, memory_bound))?;
            max_slots = max_slots.max(walk.slots);
            trees.push(GroupedTree { walk, weight: tree.weight, leaves });
        }
        let scale = 1.0 / background.rows() as f64;
        let weights = Weights::of(index, widest);
        let background = background.clone();
        Ok(LinearInterventional { model, index, trees, bias, transform, background_margins, background, weights, scale, max_slots, bytes })
    }

    /// Calls `game(leaf, A, B, v)` for every game `v·[A ⊆ S]·[S ∩ B = ∅]` (`A`, `B` bits of the
    /// leaf's players; `v` summed over the background, before `1 / n`) that the tree's output
    /// over the hybrids of `x` and the background is the sum of, or with `scales` (one per
    /// background row, of the tree's output group) the sum of its background rows' games each
    /// scaled by its own; `fails` and `scaled` are scratch (the walk's fail sets, a group's
    /// scaled sums).
    fn tree_games(
        &self,
        t: usize,
        x: &[f64],
        scales: Option<&[f64]>,
        (fails, scaled): (&mut [u64], &mut Vec<f64>),
        mut game: impl FnMut(&GroupedLeaf, u64, u64, f64),
    ) {
        let (grouped, tree) = (&self.trees[t], &self.model.trees()[t]);
        grouped.walk.fail_sets(tree, x, fails);
        for leaf in &grouped.leaves {
            let x_fails = fails[leaf.slot as usize];
            let terms = leaf.linear.as_ref().map_or(&[][..], |l| &l.terms[..]);
            let mut x_nans = 0u64;
            for (k, term) in terms.iter().enumerate() {
                x_nans |= u64::from(x[term.column as usize].is_nan()) << k;
            }
            let width = terms.len();
            for (i, g) in leaf.groups.iter().enumerate() {
                if g.fails & x_fails != 0 {
                    continue;
                }
                // (A model of no terms has no sums: a slice of zero values a group.)
                let (mut g, mut sums) = (*g, &leaf.sums[i * width..(i + 1) * width]);
                if let Some(scales) = scales {
                    (g.rows, sums) = (self.scaled_sums(leaf, &g, scales, scaled), &scaled[..]);
                }
                match &leaf.linear {
                    None => game(leaf, g.fails, x_fails, g.rows * leaf.value * grouped.weight),
                    Some(linear) => {
                        let mut leaf_game = |a, b, v| game(leaf, a, b, v);
                        linear_group_games((linear, leaf.value, grouped.weight), x, (x_fails, x_nans), &g, sums, &mut leaf_game);
                    }
                }
            }
        }
    }

    /// The values of every row of `block` (`labels`, one per row, for a loss).
    fn values(&self, block: &FeatureBlock, labels: Option<&[f64]>) -> Result<Attributions> {
        check_labels(self.transform, labels, block.rows())?;
        let (g, n) = (self.model.num_groups(), self.background.rows());
        let w = self.model.num_players() + 1;
        let width = g * w;
        let transformed = self.transform != OutputTransform::Identity;
        let mut shap = shap_by_task_from(
            &self.model,
            &self.bias,
            block,
            rows_per_task(block.rows()),
            || (vec![0u64; self.max_slots], Vec::new(), vec![0.0; g], vec![0.0; if transformed { g * n } else { 0 }]),
            |(fails, scaled, margins, scales), first, chunk| {
                for (i, out) in chunk.chunks_mut(width).enumerate() {
                    let x = block.row(first + i);
                    if transformed {
                        // Each background row's scale, `s(x, z) / n`, per output group.
                        let label = labels.map(|l| l[first + i]);
                        row_scales(&self.model, (self.transform, &self.background_margins), (x, label), (margins, scales), (out, w));
                    }
                    for (t, tree) in self.model.trees().iter().enumerate() {
                        let phi = &mut out[tree.group * w..(tree.group + 1) * w];
                        // The margin's games are summed over the background, then scaled by 1/n;
                        // a transform's rows come scaled.
                        let (row_scales, scale) =
                            if transformed { (Some(&scales[tree.group * n..(tree.group + 1) * n]), 1.0) } else { (None, self.scale) };
                        self.tree_games(t, x, row_scales, (fails, scaled), |leaf, from_x, from_z, v| {
                            let v = v * scale;
                            let (a, b) = (from_x.count_ones() as usize, from_z.count_ones() as usize);
                            let (hot, cold) = self.weights.pair(a, b);
                            let (hot, cold) = (v * hot, v * cold);
                            for_each_bit(from_x, |i| phi[leaf.players[i] as usize] += hot);
                            for_each_bit(from_z, |i| phi[leaf.players[i] as usize] -= cold);
                        });
                    }
                }
            },
        )?;
        bias_is_the_rest(self.index, &self.model, block, &mut shap);
        Ok(shap)
    }

    /// Group `g`'s rows counted and summed each scaled by its own of `scales`: the scaled count
    /// returned, the scaled sums of the terms' values into `scaled`.
    fn scaled_sums(&self, leaf: &GroupedLeaf, g: &Group, scales: &[f64], scaled: &mut Vec<f64>) -> f64 {
        let terms = leaf.linear.as_ref().map_or(&[][..], |l| &l.terms[..]);
        scaled.clear();
        scaled.resize(terms.len(), 0.0);
        let mut rows = 0.0;
        for &r in &leaf.members[g.members.0 as usize..g.members.1 as usize] {
            let (s, z) = (scales[r as usize], self.background.row(r as usize));
            rows += s;
            for (k, (sum, term)) in scaled.iter_mut().zip(terms).enumerate() {
                // The group's rows are NaN in the same terms, which the games do not read.
                if g.nans >> k & 1 == 0 {
                    *sum += s * z[term.column as usize];
                }
            }
        }
        rows
    }
}

/// Counts `background`'s rows into the groups of each of `tree`'s `leaves` (and, with
/// `keep_members`, lists each group's rows), adding their bytes to `bytes` (returned); refused
/// once the total passes `memory_bound`.
fn group_background(
    tree: &Tree,
    walk: &FailWalk,
    leaves: &mut [GroupedLeaf],
    background: &FeatureBlock,
    keep_members: bool,
    (mut bytes, memory_bound): (usize, usize),
) -> Result<usize> {
    let mut fails = vec![0u64; walk.slots];
    let mut keys: Vec<HashMap<(u64, u64), usize>> = vec![HashMap::new(); leaves.len()];
    // Each row's group at each leaf, leaf-major (kept rows only), counted before it is made.
    let member_count = if keep_members { leaves.len().saturating_mul(background.rows()) } else { 0 };
    if bytes.saturating_add(member_count.saturating_mul(size_of::<u32>())) > memory_bound || background.rows() > u32::MAX as usize {
        return Err(over_the_bound(memory_bound));
    }
    let mut group_of = vec![0u32; member_count];
    for r in 0..background.rows() {
        let z = background.row(r);
        walk.fail_sets(tree, z, &mut fails);
        for (l, (leaf, keys)) in leaves.iter_mut().zip(&mut keys).enumerate() {
            let terms = leaf.linear.as_ref().map_or(&[][..], |l| &l.terms[..]);
            let mut nans = 0u64;
            for (k, term) in terms.iter().enumerate() {
                nans |= u64::from(z[term.column as usize].is_nan()) << k;
            }
            let key = (fails[leaf.slot as usize], nans);
            // Groups are numbered in the order their first rows come, so the sums are the
            // same on every build of the engine.
            let g = *keys.entry(key).or_insert_with(|| {
                leaf.groups.push(Group { fails: key.0, nans, rows: 0.0, members: (0, 0) });
                leaf.sums.resize(leaf.sums.len() + terms.len(), 0.0);
                bytes += size_of::<Group>() + terms.len() * size_of::<f64>();
                leaf.groups.len() - 1
            });
            leaf.groups[g].rows += 1.0;
            if keep_members {
                group_of[l * background.rows() + r] = g as u32;
            }
            for (sum, term) in leaf.sums[g * terms.len()..].iter_mut().zip(terms) {
                let v = z[term.column as usize];
                if !v.is_nan() {
                    *sum += v;
                }
            }
        }
        if bytes + group_of.len() * size_of::<u32>() > memory_bound {
            return Err(over_the_bound(memory_bound));
        }
    }
    if keep_members {
        // Each group's rows in background order, one group after another.
        for (leaf, group_of) in leaves.iter_mut().zip(group_of.chunks_exact(background.rows())) {
            let mut at = 0u32;
            for g in &mut leaf.groups {
                g.members = (at, at + g.rows as u32);
                at = g.members.1;
            }
            let mut next: Vec<u32> = leaf.groups.iter().map(|g| g.members.0).collect();
            leaf.members = vec![0; background.rows()];
            for (r, &g) in group_of.iter().enumerate() {
                leaf.members[next[g as usize] as usize] = r as u32;
                next[g as usize] += 1;
            }
        }
        bytes += group_of.len() * size_of::<u32>();
    }
    Ok(bytes)
}

/// Why the groups are refused where they would pass `memory_bound` bytes.
fn over_the_bound(memory_bound: usize) -> Error {
    Error::ResourceExhausted(format!("interventional: the background's groups at the linear leaves pass the memory bound of {memory_bound} bytes"))
}

/// The games of a linear leaf (its model, its value and the tree's weight) for `x` against the
/// rows of background group `g` (`sums`: their sums of each term's values), summed over those
/// rows: the reference's `linear_leaf_games` with sets as bits (`x_fails` the path players `x`
/// fails, `x_nans` the terms `x` is NaN in) and each row-dependent value a group's sum.
fn linear_group_games(
    (linear, value, weight): (&LinearModel, f64, f64),
    x: &[f64],
    (x_fails, x_nans): (u64, u64),
    g: &Group,
    sums: &[f64],
    game: &mut impl FnMut(u64, u64, f64),
) {
    let (from_x, from_z) = (g.fails, x_fails);
    let (mut more_x, mut more_z) = (from_x, from_z);
    for (k, term) in linear.terms.iter().enumerate() {
        let bit = 1u64 << term.bit;
        let (x_nan, z_nan) = (x_nans >> k & 1 == 1, g.nans >> k & 1 == 1);
        let always_nan = if from_x & bit != 0 {
            x_nan
        } else if from_z & bit != 0 {
            z_nan
        } else {
            x_nan && z_nan
        };
        if always_nan {
            game(from_x, from_z, g.rows * value * weight);
            return;
        }
        // Where the model holds, its features come from a row without a NaN in them.
        if x_nan {
            more_z |= bit;
        } else if z_nan {
            more_x |= bit;
        }
    }
    // Each term's value: the explained row's (times the group's rows) where the hybrids take
    // its feature from `x`, else the group's sum.
    let mut sum = g.rows * linear.constant;
    for (k, term) in linear.terms.iter().enumerate() {
        sum += term.coefficient * if more_x & 1u64 << term.bit != 0 { g.rows * x[term.column as usize] } else { sums[k] };
    }
    if more_x != from_x || more_z != from_z {
        game(from_x, from_z, g.rows * value * weight);
        sum -= g.rows * value;
    }
    game(more_x, more_z, sum * weight);
    for (k, term) in linear.terms.iter().enumerate() {
        let bit = 1u64 << term.bit;
        if (more_x | more_z) & bit == 0 {
            game(more_x | bit, more_z, term.coefficient * (g.rows * x[term.column as usize] - sums[k]) * weight);
        }
    }
}

impl Engine for LinearInterventional {
    fn name(&self) -> &'static str {
        "interventional-linear-leaves"
    }

    fn model(&self) -> &Model {
        &self.model
    }

    fn shap(&self, block: &FeatureBlock) -> Result<Attributions> {
        self.values(block, None)
    }

    fn shap_with_labels(&self, block: &FeatureBlock, labels: &[f64]) -> Result<Attributions> {
        self.values(block, Some(labels))
    }

    fn interactions(&self, block: &FeatureBlock) -> Result<Interactions> {
        let w = self.model.num_features() + 1;
        let init = || (vec![0u64; self.max_slots], Vec::new(), Vec::new(), Vec::new());
        interactions_from_pairs(
            &self.model,
            (self.index, self.transform),
            block,
            || self.shap(block),
            init,
            |(fails, scaled, in_x, in_z), x, out| {
                for (t, tree) in self.model.trees().iter().enumerate() {
                    let matrix = &mut out[tree.group * w * w..(tree.group + 1) * w * w];
                    self.tree_games(t, x, None, (fails, scaled), |leaf, from_x, from_z, v| {
                        in_x.clear();
                        in_z.clear();
                        for_each_bit(from_x, |i| in_x.push(leaf.players[i]));
                        for_each_bit(from_z, |i| in_z.push(leaf.players[i]));
                        pairs::reference_leaf(self.index, in_x, in_z, v * self.scale, matrix, w);
                    });
                }
            },
        )
    }

    fn memory_bytes(&self) -> Option<usize> {
        Some(self.bytes)
    }
}

// The fixtures are read from Parquet.
#[cfg(test)]
mod tests {
    use super::*;

    use crate::engine::interventional::InterventionalReference;
    use crate::engine::options::EngineOptions;
    use crate::engine::{build_interventional, Algorithm};
    use crate::model::{LinearLeaf, Precision};
    use crate::test_fixtures::{block_rows as rows, fixtures, linear_fixtures, max_row_rel_error};
    use crate::test_support::uniform;

    /// The grouped engine against the row-pair reference on `explained` over `background`:
    /// values and interaction values, Shapley's and Banzhaf's (where the model's players allow
    /// them), and the values of the probability and of the logistic loss (labels alternating),
    /// to rounding.
    fn assert_equals_the_reference(what: &str, model: &Arc<Model>, background: &FeatureBlock, explained: &FeatureBlock) {
        let prepared = Arc::new(PreparedModel::new(model.clone()).unwrap());
        let g = model.num_groups();
        for index in [Index::Shapley, Index::Banzhaf] {
            let by_players = model.refuse_combinations("").is_ok();
            if index == Index::Banzhaf && !by_players {
                continue;
            }
            let reference = InterventionalReference::with_index(prepared.clone(), background, index).unwrap();
            let grouped = LinearInterventional::new(prepared.clone(), background, index, 1 << 30).unwrap();
            let (want, got) = (reference.shap(explained).unwrap(), grouped.shap(explained).unwrap());
            let (err, row) = max_row_rel_error(&got.values, &want.values, g * (model.num_players() + 1));
            assert!(err <= 1e-12, "{what} {index}: row {row} off the reference by {err:e} of max|phi|");
            if by_players {
                let (want, got) = (reference.interactions(explained).unwrap(), grouped.interactions(explained).unwrap());
                let w = model.num_features() + 1;
                let (err, row) = max_row_rel_error(&got.values, &want.values, g * w * w);
                assert!(err <= 1e-12, "{what} {index}: row {row}'s interactions off the reference by {err:e}");
            }
        }
        let labels: Vec<f64> = (0..explained.rows()).map(|r| (r % 2) as f64).collect();
        for transform in [OutputTransform::Logistic, OutputTransform::LogisticLoss] {
            let reference = InterventionalReference::with_transform(prepared.clone(), background, Index::Shapley, transform).unwrap();
            let grouped = LinearInterventional::with_transform(prepared.clone(), background, Index::Shapley, transform, 1 << 30).unwrap();
            let (want, got) = if transform.needs_labels() {
                (reference.shap_with_labels(explained, &labels).unwrap(), grouped.shap_with_labels(explained, &labels).unwrap())
            } else {
                (reference.shap(explained).unwrap(), grouped.shap(explained).unwrap())
            };
            let (err, row) = max_row_rel_error(&got.values, &want.values, g * (model.num_players() + 1));
            assert!(err <= 1e-12, "{what} {transform}: row {row} off the reference by {err:e} of max|phi|");
            let e = grouped.interactions(explained).unwrap_err();
            assert_eq!(e.kind(), crate::error::ErrorKind::Unsupported, "{e}");
        }
    }

    /// `block` with every value NaN at a rate of about `rate` (seeded).
    fn with_nans(block: &FeatureBlock, rate: f64, seed: &mut u64) -> FeatureBlock {
        let values = block.values().iter().map(|&v| if uniform(seed) < rate { f64::NAN } else { v }).collect();
        FeatureBlock::new(block.rows(), block.cols(), values, Precision::F64)
    }

    #[test]
    fn equals_the_reference_on_the_linear_tree_fixtures() {
        for (f, background) in &linear_fixtures() {
            assert_equals_the_reference(&f.name, &f.model, background, &f.block);
            // Every background row twice: the same mean, so the same values, and the same
            // groups (each twice the rows).
            let twice =
                FeatureBlock::new(2 * background.rows(), background.cols(), [background.values(), background.values()].concat(), Precision::F64);
            let prepared = Arc::new(PreparedModel::new(f.model.clone()).unwrap());
            let once = LinearInterventional::new(prepared.clone(), background, Index::Shapley, 1 << 30).unwrap();
            let doubled = LinearInterventional::new(prepared, &twice, Index::Shapley, 1 << 30).unwrap();
            assert_eq!(once.memory_bytes(), doubled.memory_bytes(), "{}", f.name);
            let (a, b) = (once.shap(&f.block).unwrap(), doubled.shap(&f.block).unwrap());
            let (err, row) = max_row_rel_error(&b.values, &a.values, f.model.num_groups() * (f.model.num_players() + 1));
            assert!(err <= 1e-12, "{}: row {row} changed by {err:e} when the background was doubled", f.name);
            // A row's values do not depend on the rows explained with it.
            for r in 0..f.block.rows() {
                let alone = once.shap(&rows(&f.block, r, r + 1)).unwrap();
                assert_eq!(alone.values, a.values[r * alone.values.len()..(r + 1) * alone.values.len()], "{} row {r}", f.name);
            }
        }
    }

    /// Every fixture's trees with a linear model at most leaves (its path's features, sometimes
    /// one more, as a player of another path or one no split reads), NaNs in both rows: XGBoost,
    /// LightGBM, scikit-learn, CatBoost and Spark ML trees, categorical splits, tree weights
    /// (DART) and CatBoost's combination players included.
    #[test]
    fn equals_the_reference_with_linear_models_on_every_fixtures_trees() {
        let mut seed = 0x5eed_0001;
        for f in &fixtures() {
            let mut parts = (*f.model).clone().into_parts();
            let features = f.model.num_features() as u32;
            for tree in &mut parts.trees {
                tree.linear_leaves = linear_models(tree, features, &mut seed);
            }
            let model = Arc::new(Model::new(parts, "linear leaves on a fixture's trees").unwrap());
            let background = with_nans(&rows(&f.block, 0, 12), 0.15, &mut seed);
            let explained = with_nans(&rows(&f.block, 12, 24), 0.15, &mut seed);
            assert_equals_the_reference(&f.name, &model, &background, &explained);
        }
    }

    /// Linear models for most of `tree`'s leaves: each reads its path's features (of the model's
    /// `features`, not its combination columns), and at times one more at random, with random
    /// constants and coefficients.
    fn linear_models(tree: &Tree, features: u32, seed: &mut u64) -> Vec<LinearLeaf> {
        let mut leaves = Vec::new();
        let mut stack = vec![(0usize, Vec::<u32>::new())];
        while let Some((i, path)) = stack.pop() {
            let node = &tree.nodes[i];
            if !node.is_leaf() {
                let mut below = path.clone();
                if !below.contains(&node.feature) {
                    below.push(node.feature);
                }
                stack.push((node.left as usize, below.clone()));
                stack.push((node.right as usize, below));
                continue;
            }
            if uniform(seed) < 0.2 {
                continue;
            }
            let mut terms: Vec<(u32, f64)> = path.iter().filter(|&&c| c < features).map(|&c| (c, uniform(seed) - 0.5)).collect();
            let extra = (uniform(seed) * features as f64) as u32;
            if uniform(seed) < 0.5 && !path.contains(&extra) {
                terms.push((extra, uniform(seed) - 0.5));
            }
            leaves.push(LinearLeaf { node: i as u32, constant: uniform(seed) - 0.5, terms });
        }
        leaves.sort_by_key(|l| l.node);
        leaves
    }

    #[test]
    fn auto_takes_the_reference_where_the_groups_pass_the_memory_bound() {
        let (f, background) = &linear_fixtures()[0];
        let build = |bytes| {
            let options = EngineOptions { interventional_memory_bytes: bytes, ..EngineOptions::default() };
            build_interventional(f.model.clone(), background, Algorithm::Auto, &options).unwrap()
        };
        let (grouped, reference) = (build(1 << 30), build(64));
        assert_eq!(grouped.name(), "interventional-linear-leaves");
        assert_eq!(reference.name(), "interventional-reference");
        let prepared = Arc::new(PreparedModel::new(f.model.clone()).unwrap());
        let e = LinearInterventional::new(prepared, background, Index::Shapley, 64).err().unwrap();
        assert_eq!(e.kind(), crate::error::ErrorKind::ResourceExhausted, "{e}");
        let width = f.model.num_groups() * (f.model.num_players() + 1);
        let (err, _) = max_row_rel_error(&grouped.shap(&f.block).unwrap().values, &reference.shap(&f.block).unwrap().values, width);
        assert!(err <= 1e-12, "{err:e}");
    }
}
