//! Interventional TreeSHAP: SHAP values of the game `v(S) = mean_z f(x_S, z_~S)` over a
//! background set of rows `z` (shap's `feature_perturbation="interventional"`, what
//! `shap.Explainer(model, X)` computes), exact, in margin space.
//!
//! For one leaf with path features `P` (distinct, `d` of them) and value `v`, a hybrid row
//! reaches the leaf iff, feature by feature, the row it takes the feature from satisfies every
//! split of that feature on the path. Let `X_f` be the path features the explained row fails and
//! `F` those the background row fails. If they meet, no hybrid reaches the leaf. Otherwise the
//! leaf is reached iff every feature of `F` comes from `x` and every feature of `X_f` from `z`,
//! a game whose Shapley values are, with `a = |F|` and `b = |X_f|`,
//!
//! ```text
//!   i ∈ F:    v · (a-1)! b! / (a+b)!  =  v / (a · C(a+b, a))
//!   j ∈ X_f: -v · a! (b-1)! / (a+b)!  = -v / (b · C(a+b, a))
//! ```
//!
//! (Lundberg et al. 2020, the interventional algorithm). The background enters a leaf only
//! through how many of its rows have each fail set `F`, so it is aggregated once:
//!
//! * **tables** (a leaf with at most [`MAX_TABLE_BITS`] path features): for every possible `X_f`
//!   the leaf's contribution to each of its `d` features, summed over the background; a row
//!   then costs one table row per leaf, whatever the background's size;
//! * **patterns** (deeper leaves, or tables over the memory bound): the distinct fail sets and
//!   their counts; a row costs one pass over them per leaf (at most the background's size, and
//!   at most `2^d`).
//!
//! The bias is the background's mean margin. [`InterventionalReference`] follows the definition
//! row pair by row pair (x against each background row) and is the oracle the tests hold the
//! aggregated engine to.

use std::collections::HashMap;
use std::sync::Arc;

use rayon::prelude::*;

use super::block::FeatureBlock;
use super::decision::Decision;
use super::drivers::{check_block, rows_per_task, shap_by_task_from};
use super::explainer::Engine;
use super::output::{Attributions, Interactions};
use super::prepared::PreparedModel;
use crate::error::{Error, Result};
use crate::model::{Model, Tree};

/// Most distinct features on one path: fail sets are 64-bit masks.
pub const MAX_INTERVENTIONAL_PATH_FEATURES: usize = 64;

/// Most path features a leaf is tabulated for: `2^12 · 12` values (384 KiB) per leaf.
const MAX_TABLE_BITS: usize = 12;

/// Default bound on the aggregated background (tables and patterns together): 1 GiB.
pub const DEFAULT_INTERVENTIONAL_MEMORY_BYTES: usize = 1 << 30;

/// The Shapley weights of one leaf's game, by `a = |F|` and `b = |X_f|`.
pub(super) struct Weights {
    stride: usize,
    /// `1 / (a · C(a+b, a))`, for the features only the background row fails.
    hot: Vec<f64>,
    /// `1 / (b · C(a+b, a))`, for the features only the explained row fails.
    cold: Vec<f64>,
}

impl Weights {
    pub(super) fn new(max_bits: usize) -> Weights {
        let stride = max_bits + 1;
        let (mut hot, mut cold) = (vec![0.0; stride * stride], vec![0.0; stride * stride]);
        for a in 0..stride {
            for b in 0..stride {
                // C(a+b, a) = Π_{k=1..a} (b+k)/k, exact in f64 for the small cases.
                let choose = (1..=a).fold(1.0f64, |c, k| c * (b + k) as f64 / k as f64);
                if a > 0 {
                    hot[a * stride + b] = 1.0 / (a as f64 * choose);
                }
                if b > 0 {
                    cold[a * stride + b] = 1.0 / (b as f64 * choose);
                }
            }
        }
        Weights { stride, hot, cold }
    }

    #[inline]
    pub(super) fn hot(&self, a: usize, b: usize) -> f64 {
        self.hot[a * self.stride + b]
    }

    #[inline]
    pub(super) fn cold(&self, a: usize, b: usize) -> f64 {
        self.cold[a * self.stride + b]
    }
}

/// One reachable internal node, compiled for the fail-set walk.
#[derive(Debug, Clone, Copy)]
struct Split {
    test: Decision,
    feature: u32,
    /// The feature's bit in the fail sets below this node.
    bit: u8,
    slot: u32,
    left: u32,
    right: u32,
}

/// One reachable leaf: its walk slot, its value (times the tree weight) and its path features
/// by bit.
#[derive(Debug, Clone)]
pub(super) struct LeafPath {
    pub(super) slot: u32,
    pub(super) value: f64,
    pub(super) features: Vec<u32>,
}

/// A tree compiled for fail-set walks: every reachable node gets a slot (the root slot 0), and
/// walking the splits in order sets each child's fail set from its parent's.
#[derive(Debug)]
pub(super) struct FailWalk {
    splits: Vec<Split>,
    pub(super) slots: usize,
    pub(super) leaves: Vec<LeafPath>,
}

impl FailWalk {
    /// Compiles tree `t`; refuses a path with more than [`MAX_INTERVENTIONAL_PATH_FEATURES`]
    /// distinct features.
    pub(super) fn new(tree: &Tree, t: usize) -> Result<FailWalk> {
        let (mut splits, mut leaves) = (Vec::new(), Vec::new());
        let mut path: Vec<u32> = Vec::new();
        let mut stack = vec![(0usize, 0u32, 0usize)];
        let mut slots = 1u32;
        while let Some((i, slot, len)) = stack.pop() {
            path.truncate(len);
            let node = &tree.nodes[i];
            if node.is_leaf() {
                leaves.push(LeafPath { slot, value: node.value * tree.weight, features: path.clone() });
                continue;
            }
            let bit = match path.iter().position(|&f| f == node.feature) {
                Some(b) => b,
                None => {
                    path.push(node.feature);
                    path.len() - 1
                }
            };
            if path.len() > MAX_INTERVENTIONAL_PATH_FEATURES {
                return Err(Error::Unavailable(format!(
                    "interventional: tree {t} has a path with more than {MAX_INTERVENTIONAL_PATH_FEATURES} distinct features, more than this engine tracks"
                )));
            }
            let (left, right) = (slots, slots + 1);
            slots += 2;
            splits.push(Split { test: Decision::of(tree, i), feature: node.feature, bit: bit as u8, slot, left, right });
            stack.push((node.right as usize, right, path.len()));
            stack.push((node.left as usize, left, path.len()));
        }
        Ok(FailWalk { splits, slots: slots as usize, leaves })
    }

    /// Sets `fails[slot]` of every reachable node to the path features `x` fails on the way there.
    #[inline]
    pub(super) fn fail_sets(&self, tree: &Tree, x: &[f64], fails: &mut [u64]) {
        fails[0] = 0;
        for s in &self.splits {
            let above = fails[s.slot as usize];
            let bit = 1u64 << s.bit;
            let (left, right) = if s.test.goes_left(tree, x[s.feature as usize]) { (0, bit) } else { (bit, 0) };
            fails[s.left as usize] = above | left;
            fails[s.right as usize] = above | right;
        }
    }
}

/// How one leaf holds its aggregated background.
#[derive(Debug)]
enum LeafData {
    /// `d` contributions per fail set of the explained row: `table[x_f · d + bit]`.
    Table(Vec<f64>),
    /// Distinct background fail sets and how many rows have each, and `value / N`.
    Patterns { scale: f64, patterns: Vec<(u64, f64)> },
}

/// One tree's walk and its leaves' aggregated background.
#[derive(Debug)]
struct AggregatedTree {
    walk: FailWalk,
    data: Vec<LeafData>,
}

/// The aggregated interventional engine.
pub(crate) struct Interventional {
    model: Arc<Model>,
    trees: Vec<AggregatedTree>,
    bias: Vec<f64>,
    weights: Weights,
    max_slots: usize,
}

/// Counts of the background rows' fail sets at each leaf of one tree: dense (`2^d` per leaf)
/// for tabulated leaves, a map otherwise.
fn count_fail_sets(tree: &Tree, walk: &FailWalk, background: &FeatureBlock, dense: &[bool]) -> Vec<HashMap<u64, u64>> {
    let mut counts: Vec<HashMap<u64, u64>> = vec![HashMap::new(); walk.leaves.len()];
    let mut dense_counts: Vec<Vec<u64>> =
        walk.leaves.iter().zip(dense).map(|(l, &d)| if d { vec![0; 1 << l.features.len()] } else { Vec::new() }).collect();
    let mut fails = vec![0u64; walk.slots];
    for r in 0..background.rows() {
        walk.fail_sets(tree, background.row(r), &mut fails);
        for (k, leaf) in walk.leaves.iter().enumerate() {
            let f = fails[leaf.slot as usize];
            if dense[k] {
                dense_counts[k][f as usize] += 1;
            } else {
                *counts[k].entry(f).or_insert(0) += 1;
            }
        }
    }
    for (k, d) in dense_counts.into_iter().enumerate() {
        if dense[k] {
            counts[k] = d.into_iter().enumerate().filter(|(_, c)| *c > 0).map(|(f, c)| (f as u64, c)).collect();
        }
    }
    counts
}

/// Bytes of a leaf's table: `2^d · d` values.
fn table_bytes(d: usize) -> usize {
    (1usize << d) * d * 8
}

/// The table of one leaf: for every fail set `x_f` of the explained row, the contribution to
/// each path feature, summed over the background's fail sets (in increasing order, so the sums
/// are the same on every run) and scaled by `value / N`.
fn leaf_table(d: usize, counts: &HashMap<u64, u64>, scale: f64, w: &Weights) -> Vec<f64> {
    let full = (1u64 << d) - 1;
    let mut table = vec![0.0; (1usize << d) * d];
    let mut sets: Vec<(u64, u64)> = counts.iter().map(|(f, c)| (*f, *c)).collect();
    sets.sort_unstable();
    for (f, count) in sets {
        let h = count as f64;
        let a = f.count_ones() as usize;
        let free = full ^ f;
        // Every x_f disjoint from f: the submasks of its complement.
        let mut xf = free;
        loop {
            let b = xf.count_ones() as usize;
            let row = &mut table[xf as usize * d..(xf as usize + 1) * d];
            if a > 0 {
                let hot = h * w.hot(a, b);
                for_each_bit(f, |i| row[i] += hot);
            }
            if b > 0 {
                let cold = h * w.cold(a, b);
                for_each_bit(xf, |j| row[j] -= cold);
            }
            if xf == 0 {
                break;
            }
            xf = (xf - 1) & free;
        }
    }
    table.iter_mut().for_each(|v| *v *= scale);
    table
}

/// Calls `f` with the index of every set bit of `mask`, lowest first.
#[inline]
pub(super) fn for_each_bit(mut mask: u64, mut f: impl FnMut(usize)) {
    while mask != 0 {
        f(mask.trailing_zeros() as usize);
        mask &= mask - 1;
    }
}

impl Interventional {
    /// Aggregates `background` (rows in the model's feature order and precision) for `model`,
    /// within `memory_bound` bytes.
    pub fn new(prepared: Arc<PreparedModel>, background: &FeatureBlock, memory_bound: usize) -> Result<Interventional> {
        Self::with_table_bits(prepared, background, memory_bound, MAX_TABLE_BITS)
    }

    /// [`new`](Self::new) tabulating only leaves with at most `table_bits` path features.
    fn with_table_bits(prepared: Arc<PreparedModel>, background: &FeatureBlock, memory_bound: usize, table_bits: usize) -> Result<Interventional> {
        let model = prepared.model.clone();
        check_background(&model, background)?;
        let walks: Vec<FailWalk> = model.trees.iter().enumerate().map(|(t, tree)| FailWalk::new(tree, t)).collect::<Result<_>>()?;

        // Tables where they fit, leaf by leaf in model order, within the bound.
        let mut budget = memory_bound;
        let dense: Vec<Vec<bool>> = walks
            .iter()
            .map(|walk| {
                walk.leaves
                    .iter()
                    .map(|leaf| {
                        let d = leaf.features.len();
                        let fits = d <= table_bits && table_bytes(d) <= budget;
                        if fits {
                            budget -= table_bytes(d);
                        }
                        fits
                    })
                    .collect()
            })
            .collect();

        let n = background.rows() as f64;
        let max_bits = walks.iter().flat_map(|w| w.leaves.iter().map(|l| l.features.len())).max().unwrap_or(0);
        let weights = Weights::new(max_bits);
        let counted: Vec<Vec<HashMap<u64, u64>>> =
            model.trees.par_iter().zip(&walks).zip(&dense).map(|((tree, walk), dense)| count_fail_sets(tree, walk, background, dense)).collect();

        // Pattern memory is known only once counted: checked against what the tables left.
        let pattern_bytes: usize =
            counted.iter().zip(&dense).flat_map(|(c, d)| c.iter().zip(d).filter(|(_, d)| !**d).map(|(c, _)| c.len() * 16)).sum();
        if pattern_bytes > budget {
            return Err(Error::Unavailable(format!(
                "interventional: the background's {} rows aggregate to {} MiB, over the bound of {} MiB; use fewer background rows or raise the bound",
                background.rows(),
                (memory_bound - budget + pattern_bytes) >> 20,
                memory_bound >> 20
            )));
        }

        let mut bias = model.base_margin.clone();
        let mut trees = Vec::with_capacity(walks.len());
        for (((tree, walk), counts), dense) in model.trees.iter().zip(walks).zip(counted).zip(dense) {
            let data: Vec<LeafData> = walk
                .leaves
                .par_iter()
                .zip(counts.par_iter())
                .zip(dense.par_iter())
                .map(|((leaf, counts), &dense)| {
                    let scale = leaf.value / n;
                    if dense {
                        LeafData::Table(leaf_table(leaf.features.len(), counts, scale, &weights))
                    } else {
                        let mut patterns: Vec<(u64, f64)> = counts.iter().map(|(f, c)| (*f, *c as f64)).collect();
                        patterns.sort_unstable_by_key(|p| p.0);
                        LeafData::Patterns { scale, patterns }
                    }
                })
                .collect();
            // The mean over the background of this tree's output: the rows that fail nothing.
            for (leaf, counts) in walk.leaves.iter().zip(&counts) {
                bias[tree.group] += leaf.value * (counts.get(&0).copied().unwrap_or(0) as f64 / n);
            }
            trees.push(AggregatedTree { walk, data });
        }
        if bias.iter().any(|b| !b.is_finite()) {
            return Err(Error::Input("interventional: the background's mean margin is not finite".into()));
        }
        let max_slots = trees.iter().map(|t| t.walk.slots).max().unwrap_or(1);
        Ok(Interventional { model, trees, bias, weights, max_slots })
    }

    /// Adds tree `t`'s attributions for row `x` to `phi` (its group's F + 1 values).
    fn tree_row(&self, t: usize, x: &[f64], phi: &mut [f64], fails: &mut [u64]) {
        let tree = &self.model.trees[t];
        let agg = &self.trees[t];
        agg.walk.fail_sets(tree, x, fails);
        for (leaf, data) in agg.walk.leaves.iter().zip(&agg.data) {
            let xf = fails[leaf.slot as usize];
            let d = leaf.features.len();
            match data {
                LeafData::Table(table) => {
                    let row = &table[xf as usize * d..(xf as usize + 1) * d];
                    for (feature, v) in leaf.features.iter().zip(row) {
                        phi[*feature as usize] += v;
                    }
                }
                LeafData::Patterns { scale, patterns } => {
                    let b = xf.count_ones() as usize;
                    let mut cold = 0.0;
                    for &(f, h) in patterns {
                        if f & xf != 0 {
                            continue;
                        }
                        let a = f.count_ones() as usize;
                        if a > 0 {
                            let hot = scale * h * self.weights.hot(a, b);
                            for_each_bit(f, |i| phi[leaf.features[i] as usize] += hot);
                        }
                        if b > 0 {
                            cold += h * self.weights.cold(a, b);
                        }
                    }
                    if b > 0 {
                        let cold = scale * cold;
                        for_each_bit(xf, |j| phi[leaf.features[j] as usize] -= cold);
                    }
                }
            }
        }
    }
}

impl Engine for Interventional {
    fn name(&self) -> &'static str {
        "interventional"
    }

    fn model(&self) -> &Model {
        &self.model
    }

    fn shap(&self, block: &FeatureBlock) -> Result<Attributions> {
        let w = self.model.num_features() + 1;
        let width = self.model.num_groups * w;
        let per_task = rows_per_task(block.rows());
        shap_by_task_from(
            &self.model,
            &self.bias,
            block,
            per_task,
            || vec![0u64; self.max_slots],
            |fails, first, chunk| {
                // Tree-major within the task, so a tree's tables stay in cache across its rows.
                for (t, tree) in self.model.trees.iter().enumerate() {
                    let g = tree.group;
                    for (i, out) in chunk.chunks_mut(width).enumerate() {
                        self.tree_row(t, block.row(first + i), &mut out[g * w..(g + 1) * w], fails);
                    }
                }
            },
        )
    }

    fn interactions(&self, _block: &FeatureBlock) -> Result<Interactions> {
        Err(interactions_unavailable())
    }
}

/// Why interventional interaction values are refused.
pub(crate) fn interactions_unavailable() -> Error {
    Error::Unavailable(
        "interventional SHAP interaction values are not built yet: interaction values are path-dependent only (explain without a background)".into(),
    )
}

/// Refuses an empty background or one with the wrong number of columns.
pub(super) fn check_background(model: &Model, background: &FeatureBlock) -> Result<()> {
    if background.rows() == 0 {
        return Err(Error::Input("the background has no rows; interventional SHAP needs at least one".into()));
    }
    check_block(model, background).map_err(|e| Error::Input(format!("background: {e}")))
}

/// The definition, background row by background row (Lundberg et al. 2020's interventional
/// algorithm): for each pair of the explained row `x` and a background row `z`, every path of
/// the hybrid rows through each tree, branching where `x` and `z` part on a feature not yet
/// taken from either, then the mean over the background. Cost per row grows with the
/// background: the oracle for [`Interventional`], not a production engine.
pub(crate) struct InterventionalReference {
    model: Arc<Model>,
    background: FeatureBlock,
    bias: Vec<f64>,
    weights: Weights,
}

impl InterventionalReference {
    /// The oracle for `background` (rows in the model's feature order and precision).
    pub fn new(prepared: Arc<PreparedModel>, background: &FeatureBlock) -> Result<InterventionalReference> {
        let model = prepared.model.clone();
        check_background(&model, background)?;
        let n = background.rows() as f64;
        let mut bias = vec![0.0; model.num_groups];
        let mut margin = vec![0.0; model.num_groups];
        for r in 0..background.rows() {
            model.predict_row(background.row(r), &mut margin);
            bias.iter_mut().zip(&margin).for_each(|(b, m)| *b += m);
        }
        bias.iter_mut().for_each(|b| *b /= n);
        // The widest path bounds a + b; FailWalk refuses paths wider than the weights can index.
        let mut widest = 0;
        for (t, tree) in model.trees.iter().enumerate() {
            widest = FailWalk::new(tree, t)?.leaves.iter().map(|l| l.features.len()).fold(widest, usize::max);
        }
        Ok(InterventionalReference { model, background: background.clone(), bias, weights: Weights::new(widest) })
    }

    /// Adds `tree`'s attributions for `x` against background row `z` to `phi`.
    fn pair(&self, tree: &Tree, x: &[f64], z: &[f64], phi: &mut [f64], scale: f64) {
        // (node, features taken from x, features taken from z), depth-first.
        let mut stack: Vec<(usize, Vec<u32>, Vec<u32>)> = vec![(0, Vec::new(), Vec::new())];
        while let Some((i, from_x, from_z)) = stack.pop() {
            let node = &tree.nodes[i];
            if node.is_leaf() {
                let (a, b) = (from_x.len(), from_z.len());
                let v = node.value * tree.weight * scale;
                if a > 0 {
                    let hot = v * self.weights.hot(a, b);
                    from_x.iter().for_each(|&k| phi[k as usize] += hot);
                }
                if b > 0 {
                    let cold = v * self.weights.cold(a, b);
                    from_z.iter().for_each(|&k| phi[k as usize] -= cold);
                }
                continue;
            }
            let k = node.feature;
            let child = |left: bool| if left { node.left as usize } else { node.right as usize };
            let x_left = tree.goes_left(node, x[k as usize]);
            let z_left = tree.goes_left(node, z[k as usize]);
            if from_x.contains(&k) {
                stack.push((child(x_left), from_x, from_z));
            } else if from_z.contains(&k) {
                stack.push((child(z_left), from_x, from_z));
            } else if x_left == z_left {
                stack.push((child(x_left), from_x, from_z));
            } else {
                let mut with_x = from_x.clone();
                with_x.push(k);
                let mut with_z = from_z.clone();
                with_z.push(k);
                stack.push((child(x_left), with_x, from_z));
                stack.push((child(z_left), from_x, with_z));
            }
        }
    }
}

impl Engine for InterventionalReference {
    fn name(&self) -> &'static str {
        "interventional-reference"
    }

    fn model(&self) -> &Model {
        &self.model
    }

    fn shap(&self, block: &FeatureBlock) -> Result<Attributions> {
        let w = self.model.num_features() + 1;
        let width = self.model.num_groups * w;
        let scale = 1.0 / self.background.rows() as f64;
        shap_by_task_from(
            &self.model,
            &self.bias,
            block,
            rows_per_task(block.rows()),
            || (),
            |_, first, chunk| {
                for (i, out) in chunk.chunks_mut(width).enumerate() {
                    let x = block.row(first + i);
                    for tree in &self.model.trees {
                        let phi = &mut out[tree.group * w..(tree.group + 1) * w];
                        for r in 0..self.background.rows() {
                            self.pair(tree, x, self.background.row(r), phi, scale);
                        }
                    }
                }
            },
        )
    }

    fn interactions(&self, _block: &FeatureBlock) -> Result<Interactions> {
        Err(interactions_unavailable())
    }
}

// The fixtures are read from Parquet.
#[cfg(all(test, feature = "files"))]
mod tests {
    use super::*;

    use crate::test_fixtures::{block_rows as rows, fixtures, max_row_rel_error};

    #[test]
    fn tables_and_patterns_equal_the_reference_on_every_fixture() {
        for f in &fixtures() {
            let prepared = Arc::new(PreparedModel::new(f.model.clone()).unwrap());
            let background = rows(&f.block, 0, 25);
            let explained = rows(&f.block, 25, 45);
            let reference = InterventionalReference::new(prepared.clone(), &background).unwrap().shap(&explained).unwrap();
            let tables = Interventional::new(prepared.clone(), &background, DEFAULT_INTERVENTIONAL_MEMORY_BYTES).unwrap();
            let patterns = Interventional::with_table_bits(prepared.clone(), &background, DEFAULT_INTERVENTIONAL_MEMORY_BYTES, 0).unwrap();
            let width = f.model.num_groups * (f.model.num_features() + 1);
            for (name, engine) in [("tables", tables), ("patterns", patterns)] {
                let got = engine.shap(&explained).unwrap();
                let (err, row) = max_row_rel_error(&got.values, &reference.values, width);
                assert!(err <= 1e-9, "{}: {name} row {row} off the reference by {err:e}", f.name);
                // Additivity: the values and the bias add up to the margin.
                let margins = engine.predict(&explained).unwrap();
                for r in 0..explained.rows() {
                    for g in 0..f.model.num_groups {
                        let total: f64 = got.row(r, g).iter().sum();
                        let m = margins.values[r * f.model.num_groups + g];
                        assert!((total - m).abs() <= 1e-9 * m.abs().max(1.0), "{}: {name} row {r} group {g}: {total} vs {m}", f.name);
                    }
                }
            }
        }
    }

    #[test]
    fn a_bound_too_small_for_the_patterns_is_refused_with_the_sizes() {
        let f = &fixtures()[0];
        let prepared = Arc::new(PreparedModel::new(f.model.clone()).unwrap());
        let e = Interventional::new(prepared, &f.block, 0).err().unwrap().to_string();
        assert!(e.contains("over the bound of 0 MiB") && e.contains(&format!("{} rows", f.block.rows())), "{e}");
    }

    #[test]
    fn weights_are_the_shapley_weights_of_the_leaf_game() {
        let w = Weights::new(6);
        let factorial = |n: usize| (1..=n).map(|k| k as f64).product::<f64>();
        for a in 0..=6 {
            for b in 0..=6 {
                if a > 0 {
                    let want = factorial(a - 1) * factorial(b) / factorial(a + b);
                    assert!((w.hot(a, b) - want).abs() <= 1e-15 * want, "hot {a} {b}");
                }
                if b > 0 {
                    let want = factorial(a) * factorial(b - 1) / factorial(a + b);
                    assert!((w.cold(a, b) - want).abs() <= 1e-15 * want, "cold {a} {b}");
                }
            }
        }
    }

    #[test]
    fn each_leaf_game_adds_up_to_its_value_difference() {
        // With both sets non-empty neither x nor z reaches the leaf (v(all) = v(none) = 0), so
        // the leaf's values sum to zero: a·hot(a, b) = b·cold(a, b).
        let w = Weights::new(8);
        for a in 1..=8 {
            for b in 1..=8 {
                assert!((a as f64 * w.hot(a, b) - b as f64 * w.cold(a, b)).abs() < 1e-15);
            }
        }
    }
}
