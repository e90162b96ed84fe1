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
//!   then costs one table row per leaf, whatever the background's size. The rows are packed:
//!   every feature of `X_f` gets the same value (the cold sum), so a row holds it once plus one
//!   value per feature outside `X_f`, `2^d·(1 + d/2)` values instead of `2^d·d`; and two sibling
//!   leaves under the first split on their last path feature share one table (the explained
//!   row fails that feature at exactly one of them, so the left leaf's `X_f` indexes both),
//!   `2^d·(3/2 + d/2)` values for the two. See [`PackedRows`];
//! * **patterns** (deeper leaves, or tables over the memory bound): the distinct fail sets and
//!   their counts; a row costs one pass over them per leaf (at most the background's size, and
//!   at most `2^d`).
//!
//! A tree with a path of more than 64 distinct features (deep forests on wide sparse data) keeps
//! patterns too, its fail sets as bitsets of as many 64-bit words as its widest path needs
//! (`LeafData::WidePatterns`): the same arithmetic, any path length.
//!
//! The bias is the background's mean margin. Interaction values (the `pairs` module) aggregate
//! the background the same way, into tables of their own built on the first call that asks for
//! them. [`InterventionalReference`] follows the definition row pair by row pair (x against each
//! background row) and is the oracle the tests hold the aggregated engine to.
//!
//! A linear leaf's value depends on the background row's values, not only on its fail set:
//! [`LinearInterventional`] (the `linear_leaves` module) groups each such leaf's background rows
//! by fail set and NaN terms, keeping the groups' sums of the terms' values.

mod linear_leaves;
mod pairs;

use std::collections::HashMap;
use std::sync::Arc;

use rayon::prelude::*;

use super::block::FeatureBlock;
use super::decision::Decision;
use super::drivers::{
    bias_is_the_rest, check_block, finish_interaction_row, interaction_bias_is_the_rest, interaction_bias_of_rows, interactions_by_task,
    rows_per_task, rows_per_task_up_to, shap_by_task_from, FirstTouch, ROWS_PER_TASK, SUMS_AT_ONCE,
};
use super::engine_trait::Engine;
#[cfg(test)]
use super::options::DEFAULT_INTERVENTIONAL_MEMORY_BYTES;
use super::options::{Index, OutputTransform};
use super::output::{Attributions, Interactions};
use super::prepared::PreparedModel;
use super::simd::prefetch;
use crate::error::{Error, Result};
use crate::model::{LinearLeaf, Model, Tree};
pub(crate) use linear_leaves::LinearInterventional;
use pairs::{PairScratch, PairTables, SharedPairs};

/// Most distinct features on one path whose fail sets fit one 64-bit mask; trees with wider
/// paths hold them in several words (see `LeafData::WidePatterns`).
pub const MAX_INTERVENTIONAL_PATH_FEATURES: usize = 64;

/// Most path features a leaf is tabulated for: `2^12 · 12` values (384 KiB) per leaf.
const MAX_TABLE_BITS: usize = 12;

/// The weights of one leaf's game, by `a = |F|` and `b = |X_f|`: Shapley's, or Banzhaf's
/// (`1/2^(a+b-1)` for both kinds of feature: the leaf's game is `v·[F ⊆ S]·[S ∩ X_f = ∅]`, and
/// of the `2^(a+b-1)` coalitions of the other path features exactly one makes a feature of `F`,
/// or of `X_f`, change its value).
pub(super) struct Weights {
    index: Index,
    stride: usize,
    /// `1 / (a · C(a+b, a))`, for the features only the background row fails.
    hot: Vec<f64>,
    /// `1 / (b · C(a+b, a))`, for the features only the explained row fails.
    cold: Vec<f64>,
}

impl Weights {
    /// Shapley weights up to `max_bits` path features.
    #[cfg(test)]
    pub(super) fn new(max_bits: usize) -> Weights {
        Weights::of(Index::Shapley, max_bits)
    }

    /// `index`'s weights, tabulated up to `max_bits` path features.
    pub(super) fn of(index: Index, max_bits: usize) -> Weights {
        let stride = max_bits + 1;
        let (mut hot, mut cold) = (vec![0.0; stride * stride], vec![0.0; stride * stride]);
        for a in 0..stride {
            for b in 0..stride {
                let (h, c) = Self::compute(index, a, b);
                hot[a * stride + b] = h;
                cold[a * stride + b] = c;
            }
        }
        Weights { index, stride, hot, cold }
    }

    /// `(hot(a, b), cold(a, b))`, 0 where `a` (or `b`) is 0.
    fn compute(index: Index, a: usize, b: usize) -> (f64, f64) {
        match index {
            Index::Shapley => {
                // C(a+b, a) = Π_{k=1..a} (b+k)/k, exact in f64 for the small cases.
                let choose = (1..=a).fold(1.0f64, |c, k| c * (b + k) as f64 / k as f64);
                let hot = if a > 0 { 1.0 / (a as f64 * choose) } else { 0.0 };
                let cold = if b > 0 { 1.0 / (b as f64 * choose) } else { 0.0 };
                (hot, cold)
            }
            Index::Banzhaf => {
                // A power of two, exact (0 beyond 1074 features, as f64 holds it).
                let w = if a + b > 0 { 0.5f64.powi((a + b - 1) as i32) } else { 0.0 };
                (if a > 0 { w } else { 0.0 }, if b > 0 { w } else { 0.0 })
            }
        }
    }

    /// `(hot(a, b), cold(a, b))` for any `a` and `b`: from the table where it reaches, else
    /// computed the same way (the same bits), in O(a).
    #[inline]
    pub(super) fn pair(&self, a: usize, b: usize) -> (f64, f64) {
        if a < self.stride && b < self.stride {
            (self.hot[a * self.stride + b], self.cold[a * self.stride + b])
        } else {
            Self::compute(self.index, a, b)
        }
    }

    /// `hot(a, ·)` and `cold(a, ·)`, indexed by `b` up to the tabulated width (for a gather
    /// of several rows' `b` at once).
    #[inline]
    pub(super) fn by_b(&self, a: usize) -> (&[f64], &[f64]) {
        let at = a * self.stride..(a + 1) * self.stride;
        (&self.hot[at.clone()], &self.cold[at])
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
    /// The column the split reads.
    feature: u32,
    /// Its player's bit in the fail sets below this node (its place among the path's distinct
    /// players: the path's features, for a model whose columns are its features).
    bit: u32,
    slot: u32,
    left: u32,
    right: u32,
}

/// One reachable leaf: its walk slot and node, its value (times the tree weight) and its path
/// features (players: see [`PreparedModel::players`]) by bit.
#[derive(Debug, Clone)]
pub(super) struct LeafPath {
    pub(super) slot: u32,
    /// The leaf's index in the tree's nodes.
    pub(super) node: u32,
    pub(super) value: f64,
    pub(super) features: Vec<u32>,
    /// This leaf is the left child of a split that is the path's first on its feature (the
    /// last path feature), and the next leaf is the right child: the two share their features,
    /// and the explained row fails that feature at exactly one of them.
    pub(super) first_split_pair: bool,
}

/// A tree compiled for fail-set walks: every reachable node gets a slot (the root slot 0), and
/// walking the splits in order sets each child's fail set from its parent's.
#[derive(Debug)]
pub(super) struct FailWalk {
    splits: Vec<Split>,
    pub(super) slots: usize,
    pub(super) leaves: Vec<LeafPath>,
    /// 64-bit words of one fail set: 1 unless a path has more than 64 distinct features.
    pub(super) words: usize,
}

impl FailWalk {
    /// Compiles tree `t` (node indices are checked by the model's validation; `t` names it in
    /// errors); `players[c]` is the player a split on column `c` credits, whose fail bit it sets.
    pub(super) fn new(tree: &Tree, t: usize, players: &[u32]) -> Result<FailWalk> {
        let (mut splits, mut leaves) = (Vec::new(), Vec::new());
        let mut path: Vec<u32> = Vec::new();
        let mut stack = vec![(0usize, 0u32, 0usize)];
        let mut slots = 1u32;
        // Left children that start a first-split pair (see `LeafPath::first_split_pair`).
        let mut pair_left = Vec::new();
        while let Some((i, slot, len)) = stack.pop() {
            path.truncate(len);
            let node = &tree.nodes[i];
            if node.is_leaf() {
                let first_split_pair = pair_left.last() == Some(&i);
                leaves.push(LeafPath { slot, node: i as u32, value: node.value * tree.weight, features: path.clone(), first_split_pair });
                continue;
            }
            let player = players[node.feature as usize];
            let bit = match path.iter().position(|&f| f == player) {
                Some(b) => b,
                None => {
                    path.push(player);
                    // Both children leaves: the left is popped next and the right right after it.
                    let (l, r) = (node.left as usize, node.right as usize);
                    if tree.nodes[l].is_leaf() && tree.nodes[r].is_leaf() {
                        pair_left.push(l);
                    }
                    path.len() - 1
                }
            };
            let Some(next) = slots.checked_add(2) else {
                return Err(Error::InvalidArgument(format!("interventional: tree {t} has more nodes than a walk can number")));
            };
            let (left, right) = (slots, slots + 1);
            slots = next;
            splits.push(Split { test: Decision::of(tree, i), feature: node.feature, bit: bit as u32, slot, left, right });
            stack.push((node.right as usize, right, path.len()));
            stack.push((node.left as usize, left, path.len()));
        }
        let widest = leaves.iter().map(|l| l.features.len()).max().unwrap_or(0);
        Ok(FailWalk { splits, slots: slots as usize, leaves, words: widest.div_ceil(64).max(1) })
    }

    /// Sets `fails[slot]` of every reachable node to the path features `x` fails on the way there
    /// (a walk of one word; see [`fail_sets_wide`](Self::fail_sets_wide) for the others).
    #[inline]
    pub(super) fn fail_sets(&self, tree: &Tree, x: &[f64], fails: &mut [u64]) {
        debug_assert_eq!(self.words, 1);
        fails[0] = 0;
        for s in &self.splits {
            let above = fails[s.slot as usize];
            // The child the row does not take fails the split's feature: its bit shifted in
            // from the row's direction, without a branch on it (a coin toss to the predictor,
            // which LLVM made of an `if` and of a mask alike).
            let right = u64::from(s.test.goes_left(tree, x[s.feature as usize])) << s.bit;
            fails[s.left as usize] = above | (right ^ 1u64 << s.bit);
            fails[s.right as usize] = above | right;
        }
    }
}

impl FailWalk {
    /// [`fail_sets`](Self::fail_sets) for a walk of any width: the fail set of slot `s` is
    /// `fails[s * words..(s + 1) * words]`, bit `i` in word `i / 64`.
    pub(super) fn fail_sets_wide(&self, tree: &Tree, x: &[f64], fails: &mut [u64]) {
        let words = self.words;
        fails[..words].fill(0);
        for s in &self.splits {
            let (above, left, right) = (s.slot as usize * words, s.left as usize * words, s.right as usize * words);
            fails.copy_within(above..above + words, left);
            fails.copy_within(above..above + words, right);
            let (word, bit) = (s.bit as usize / 64, 1u64 << (s.bit % 64));
            let failed = if s.test.goes_left(tree, x[s.feature as usize]) { right } else { left };
            fails[failed + word] |= bit;
        }
    }
}

/// Calls `f` with the index of every set bit of a multi-word set, lowest first.
#[inline]
pub(super) fn for_each_bit_wide(set: &[u64], mut f: impl FnMut(usize)) {
    for (w, &word) in set.iter().enumerate() {
        for_each_bit(word, |i| f(w * 64 + i));
    }
}

/// Set bits of a multi-word set.
#[inline]
pub(super) fn count_ones_wide(set: &[u64]) -> usize {
    set.iter().map(|w| w.count_ones() as usize).sum()
}

/// Whether two multi-word sets share a bit.
#[inline]
pub(super) fn meet_wide(a: &[u64], b: &[u64]) -> bool {
    a.iter().zip(b).any(|(a, b)| a & b != 0)
}

/// How one leaf holds its aggregated background.
#[derive(Debug)]
enum LeafData {
    /// Packed rows keyed by the leaf's fail set (see [`PackedRows`]); `paired`: they cover the
    /// next leaf too (its first-split sibling), which then holds [`LeafData::InSibling`].
    Table { rows: Vec<f64>, paired: bool },
    /// Distinct background fail sets and how many rows have each, and `value / N`.
    Patterns { scale: f64, patterns: Vec<(u64, f64)> },
    /// Patterns of a tree whose fail sets take several words: `masks` holds them one after
    /// another (`words` each, in increasing order), `counts` how many rows have each.
    WidePatterns { scale: f64, masks: Vec<u64>, counts: Vec<f64> },
    /// In the previous leaf's paired table.
    InSibling,
}

/// Where each row of a packed table starts, for tables of `d` path features, single or paired.
///
/// A row is keyed by the (left) leaf's fail set `key`. Its shared set `S` is `key` for a single
/// leaf and `key` without the last bit for a pair; the row is `[shared, own…]`: one value every
/// feature of `S` gets, then one value for each feature outside `S`, lowest bit first, so
/// `1 + d − |S|` values. The start of each row depends only on `d` and the kind, so one offset
/// table per kind and size serves every leaf.
#[derive(Debug)]
struct PackedRows {
    /// `offsets[paired][d][key]`, with one more entry at the end: the table's length.
    offsets: [Vec<Vec<u32>>; 2],
}

impl PackedRows {
    fn new(max_bits: usize) -> PackedRows {
        let kind = |paired: bool| {
            (0..=max_bits)
                .map(|d| {
                    let mut offsets = Vec::with_capacity((1 << d) + 1);
                    let mut at = 0u32;
                    for key in 0..1u64 << d {
                        offsets.push(at);
                        at += (1 + d - (key & shared_mask(d, paired)).count_ones() as usize) as u32;
                    }
                    offsets.push(at);
                    offsets
                })
                .collect()
        };
        PackedRows { offsets: [kind(false), kind(true)] }
    }

    /// The values a packed table of `d` features holds.
    fn len(&self, d: usize, paired: bool) -> usize {
        *self.offsets[paired as usize][d].last().expect("one offset per key and the end") as usize
    }

    /// The row of `key`.
    #[inline]
    fn row<'a>(&self, rows: &'a [f64], d: usize, paired: bool, key: u64) -> &'a [f64] {
        let offsets = &self.offsets[paired as usize][d];
        &rows[offsets[key as usize] as usize..offsets[key as usize + 1] as usize]
    }

    /// Packs the dense tables (`2^d · d` values, `table[x_f · d + bit]`) of one leaf, or of a
    /// first-split pair (left, right): the right leaf's fail set is the left one's with the last
    /// bit flipped, and the pair's values are their sums.
    fn pack(&self, d: usize, left: &[f64], right: Option<&[f64]>) -> Vec<f64> {
        let paired = right.is_some();
        let (full, last) = (low_bits(d), if d > 0 { 1u64 << (d - 1) } else { 0 });
        let mut rows = Vec::with_capacity(self.len(d, paired));
        for key in 0..1u64 << d {
            let value = |bit: usize| {
                let l = left[key as usize * d + bit];
                match right {
                    Some(r) => l + r[(key ^ last) as usize * d + bit],
                    None => l,
                }
            };
            let shared = key & shared_mask(d, paired);
            // Every feature of the shared set holds the same (cold) value in the dense table.
            rows.push(if shared == 0 { 0.0 } else { value(shared.trailing_zeros() as usize) });
            for_each_bit(full ^ shared, |i| rows.push(value(i)));
        }
        debug_assert_eq!(rows.len(), self.len(d, paired));
        rows
    }
}

/// The low `d` bits.
fn low_bits(d: usize) -> u64 {
    if d >= 64 {
        u64::MAX
    } else {
        (1u64 << d) - 1
    }
}

/// The bits of a key that form a packed row's shared set: all `d` for a single leaf, all but
/// the last (the pair's split feature) for a pair.
fn shared_mask(d: usize, paired: bool) -> u64 {
    if paired && d > 0 {
        low_bits(d - 1)
    } else {
        low_bits(d)
    }
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
    /// Shapley or Banzhaf values (the weights; Banzhaf's bias is each row's rest).
    index: Index,
    trees: Vec<AggregatedTree>,
    bias: Vec<f64>,
    weights: Weights,
    packed: PackedRows,
    max_slots: usize,
    /// Kept for the interaction tables, which are built from it on the first call for them.
    background: FeatureBlock,
    memory_bound: usize,
    /// Most path features a leaf's tables (values' and pairs') are built for.
    table_bits: usize,
    pairs: SharedPairs,
}

/// How a leaf is held, decided before counting (tables have known sizes, patterns do not).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Holding {
    Patterns,
    Table,
    /// A table for this leaf and the next (a first-split pair).
    PairTable,
    InSibling,
}

impl Holding {
    /// Whether the leaf's background is counted for a table (its own or its pair's).
    fn tabulated(self) -> bool {
        self != Holding::Patterns
    }
}

/// Counts of the background rows' fail sets at each leaf of one tree: dense (`2^d` per leaf)
/// for tabulated leaves, a map otherwise.
fn count_fail_sets(tree: &Tree, walk: &FailWalk, background: &FeatureBlock, holdings: &[Holding]) -> Vec<HashMap<u64, u64>> {
    let dense: Vec<bool> = holdings.iter().map(|h| h.tabulated()).collect();
    let mut counts: Vec<HashMap<u64, u64>> = vec![HashMap::new(); walk.leaves.len()];
    let mut dense_counts: Vec<Vec<u64>> =
        walk.leaves.iter().zip(&dense).map(|(l, &d)| if d { vec![0; 1 << l.features.len()] } else { Vec::new() }).collect();
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
    /// [`with_index`](Self::with_index) for Shapley values, as the tests build it.
    #[cfg(test)]
    pub fn new(prepared: Arc<PreparedModel>, background: &FeatureBlock, memory_bound: usize) -> Result<Interventional> {
        Self::with_table_bits(prepared, background, memory_bound, MAX_TABLE_BITS, Index::Shapley)
    }

    /// Aggregates `background` (rows in the model's feature order and precision) for `model`,
    /// within `memory_bound` bytes, for `index`'s values.
    pub fn with_index(prepared: Arc<PreparedModel>, background: &FeatureBlock, memory_bound: usize, index: Index) -> Result<Interventional> {
        Self::with_table_bits(prepared, background, memory_bound, MAX_TABLE_BITS, index)
    }

    /// [`with_index`](Self::with_index) tabulating only leaves with at most `table_bits` path
    /// features.
    fn with_table_bits(
        prepared: Arc<PreparedModel>,
        background: &FeatureBlock,
        memory_bound: usize,
        table_bits: usize,
        index: Index,
    ) -> Result<Interventional> {
        let model = prepared.model.clone();
        check_background(&model, background)?;
        let walks: Vec<FailWalk> =
            model.trees().iter().enumerate().map(|(t, tree)| FailWalk::new(tree, t, &prepared.players)).collect::<Result<_>>()?;

        // Tables where they fit, leaf by leaf in model order, within the bound; a first-split
        // pair shares one.
        let packed = PackedRows::new(table_bits.min(MAX_TABLE_BITS));
        let mut budget = memory_bound;
        let mut take = |d: usize, paired: bool| {
            let bytes = packed.len(d, paired) * size_of::<f64>();
            let fits = bytes <= budget;
            if fits {
                budget -= bytes;
            }
            fits
        };
        let holdings: Vec<Vec<Holding>> = walks
            .iter()
            .map(|walk| {
                let mut holdings = vec![Holding::Patterns; walk.leaves.len()];
                // A wide tree's fail sets are several words: patterns only.
                let mut k = if walk.words > 1 { walk.leaves.len() } else { 0 };
                while k < walk.leaves.len() {
                    let leaf = &walk.leaves[k];
                    let d = leaf.features.len();
                    if d <= table_bits.min(MAX_TABLE_BITS) {
                        if leaf.first_split_pair && k + 1 < walk.leaves.len() && take(d, true) {
                            holdings[k] = Holding::PairTable;
                            holdings[k + 1] = Holding::InSibling;
                            k += 2;
                            continue;
                        }
                        if take(d, false) {
                            holdings[k] = Holding::Table;
                        }
                    }
                    k += 1;
                }
                holdings
            })
            .collect();
        let n = background.rows() as f64;
        // Narrow paths index the weight table; wider ones compute their weights as they go.
        let max_bits = walks.iter().flat_map(|w| w.leaves.iter().map(|l| l.features.len())).max().unwrap_or(0);
        let weights = Weights::of(index, max_bits.min(MAX_INTERVENTIONAL_PATH_FEATURES));
        let counted: Vec<Counts> = model
            .trees()
            .par_iter()
            .zip(&walks)
            .zip(&holdings)
            .map(|((tree, walk), holdings)| {
                if walk.words > 1 {
                    Counts::Wide(count_wide_fail_sets(tree, walk, background))
                } else {
                    Counts::Narrow(count_fail_sets(tree, walk, background, holdings))
                }
            })
            .collect();

        // Pattern memory is known only once counted: checked against what the tables left.
        let pattern_bytes: usize = counted
            .iter()
            .zip(&holdings)
            .zip(&walks)
            .map(|((counts, holdings), walk)| match counts {
                Counts::Narrow(c) => c.iter().zip(holdings).filter(|(_, h)| !h.tabulated()).map(|(c, _)| c.len() * 16).sum::<usize>(),
                Counts::Wide(c) => c.iter().map(|c| c.len() * (walk.words + 1) * 8).sum(),
            })
            .sum();
        if pattern_bytes > budget {
            return Err(Error::ResourceExhausted(format!(
                "interventional: the background's {} rows aggregate to {} MiB, over the bound of {} MiB; use fewer background rows or raise the bound",
                background.rows(),
                (memory_bound - budget + pattern_bytes) >> 20,
                memory_bound >> 20
            )));
        }

        let mut bias = model.base_margin().to_vec();
        let mut trees = Vec::with_capacity(walks.len());
        for (((tree, walk), counts), holdings) in model.trees().iter().zip(walks).zip(counted).zip(holdings) {
            let counts = match counts {
                Counts::Narrow(counts) => counts,
                Counts::Wide(counts) => {
                    let data = wide_leaf_data(&walk, counts, n, &mut bias[tree.group]);
                    trees.push(AggregatedTree { walk, data });
                    continue;
                }
            };
            let data: Vec<LeafData> = (0..walk.leaves.len())
                .into_par_iter()
                .map(|k| {
                    let leaf = &walk.leaves[k];
                    let d = leaf.features.len();
                    let scale = leaf.value / n;
                    match holdings[k] {
                        Holding::Table => LeafData::Table { rows: packed.pack(d, &leaf_table(d, &counts[k], scale, &weights), None), paired: false },
                        Holding::PairTable => {
                            let right = leaf_table(d, &counts[k + 1], walk.leaves[k + 1].value / n, &weights);
                            LeafData::Table { rows: packed.pack(d, &leaf_table(d, &counts[k], scale, &weights), Some(&right)), paired: true }
                        }
                        Holding::InSibling => LeafData::InSibling,
                        Holding::Patterns => {
                            let mut patterns: Vec<(u64, f64)> = counts[k].iter().map(|(f, c)| (*f, *c as f64)).collect();
                            patterns.sort_unstable_by_key(|p| p.0);
                            LeafData::Patterns { scale, patterns }
                        }
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
            return Err(Error::InvalidArgument("interventional: the background's mean margin is not finite".into()));
        }
        let max_slots = trees.iter().map(|t| t.walk.slots * t.walk.words).max().unwrap_or(1);
        let (background, pairs) = (background.clone(), SharedPairs::new());
        let table_bits = table_bits.min(MAX_TABLE_BITS);
        Ok(Interventional { model, index, trees, bias, weights, packed, max_slots, background, memory_bound, table_bits, pairs })
    }

    /// Adds tree `t`'s attributions for row `x` to `phi` (its group's F + 1 values), leaving
    /// `x`'s fail sets at the tree's slots in `fails` (for the pairs).
    fn tree_row(&self, t: usize, x: &[f64], phi: &mut [f64], fails: &mut [u64]) {
        let tree = &self.model.trees()[t];
        let agg = &self.trees[t];
        if agg.walk.words > 1 {
            agg.walk.fail_sets_wide(tree, x, fails);
            return self.wide_tree_row(agg, fails, phi);
        }
        agg.walk.fail_sets(tree, x, fails);
        // Every tabulated leaf's row asked for first: each is a load from another place in the
        // tree's tables, and the loop below adds each into the row's values before it needs the
        // next, so they would otherwise wait on one another.
        for (leaf, data) in agg.walk.leaves.iter().zip(&agg.data) {
            if let LeafData::Table { rows, paired } = data {
                prefetch(self.packed.row(rows, leaf.features.len(), *paired, fails[leaf.slot as usize]));
            }
        }
        for (leaf, data) in agg.walk.leaves.iter().zip(&agg.data) {
            let xf = fails[leaf.slot as usize];
            let d = leaf.features.len();
            match data {
                LeafData::Table { rows, paired } => {
                    let row = self.packed.row(rows, d, *paired, xf);
                    let shared = xf & shared_mask(d, *paired);
                    let features = &leaf.features;
                    for_each_bit(shared, |j| phi[features[j] as usize] += row[0]);
                    let mut own = 1;
                    for_each_bit(low_bits(d) ^ shared, |i| {
                        phi[features[i] as usize] += row[own];
                        own += 1;
                    });
                }
                LeafData::InSibling | LeafData::WidePatterns { .. } => {}
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

impl Interventional {
    /// [`tree_row`](Self::tree_row) of a wide tree, its fail sets (`words` per slot) in `fails`.
    fn wide_tree_row(&self, agg: &AggregatedTree, fails: &[u64], phi: &mut [f64]) {
        let words = agg.walk.words;
        for (leaf, data) in agg.walk.leaves.iter().zip(&agg.data) {
            let LeafData::WidePatterns { scale, masks, counts } = data else { continue };
            let xf = &fails[leaf.slot as usize * words..(leaf.slot as usize + 1) * words];
            let b = count_ones_wide(xf);
            let mut cold = 0.0;
            for (f, &h) in masks.chunks_exact(words).zip(counts) {
                if meet_wide(f, xf) {
                    continue;
                }
                let a = count_ones_wide(f);
                let (hot_weight, cold_weight) = self.weights.pair(a, b);
                if a > 0 {
                    let hot = scale * h * hot_weight;
                    for_each_bit_wide(f, |i| phi[leaf.features[i] as usize] += hot);
                }
                if b > 0 {
                    cold += h * cold_weight;
                }
            }
            if b > 0 {
                let cold = scale * cold;
                for_each_bit_wide(xf, |j| phi[leaf.features[j] as usize] -= cold);
            }
        }
    }
}

/// How many background rows have each fail set at each leaf, per tree.
enum Counts {
    /// One-word fail sets (dense counts for tabulated leaves, see [`count_fail_sets`]).
    Narrow(Vec<HashMap<u64, u64>>),
    /// Fail sets of several words.
    Wide(Vec<HashMap<Vec<u64>, u64>>),
}

/// [`count_fail_sets`] for a wide tree (patterns only).
fn count_wide_fail_sets(tree: &Tree, walk: &FailWalk, background: &FeatureBlock) -> Vec<HashMap<Vec<u64>, u64>> {
    let words = walk.words;
    let mut counts: Vec<HashMap<Vec<u64>, u64>> = vec![HashMap::new(); walk.leaves.len()];
    let mut fails = vec![0u64; walk.slots * words];
    for r in 0..background.rows() {
        walk.fail_sets_wide(tree, background.row(r), &mut fails);
        for (k, leaf) in walk.leaves.iter().enumerate() {
            let set = &fails[leaf.slot as usize * words..(leaf.slot as usize + 1) * words];
            match counts[k].get_mut(set) {
                Some(c) => *c += 1,
                None => {
                    counts[k].insert(set.to_vec(), 1);
                }
            }
        }
    }
    counts
}

/// A wide tree's leaves as [`LeafData::WidePatterns`] (in increasing set order, so the sums run
/// the same way on every run), adding the tree's mean output over the background to `bias`.
fn wide_leaf_data(walk: &FailWalk, counts: Vec<HashMap<Vec<u64>, u64>>, n: f64, bias: &mut f64) -> Vec<LeafData> {
    walk.leaves
        .iter()
        .zip(counts)
        .map(|(leaf, counts)| {
            let mut sets: Vec<(Vec<u64>, u64)> = counts.into_iter().collect();
            sets.sort_unstable();
            let none = sets.iter().find(|(f, _)| f.iter().all(|&w| w == 0)).map_or(0, |(_, c)| *c);
            *bias += leaf.value * (none as f64 / n);
            let counts = sets.iter().map(|(_, c)| *c as f64).collect();
            let masks = sets.into_iter().flat_map(|(f, _)| f).collect();
            LeafData::WidePatterns { scale: leaf.value / n, masks, counts }
        })
        .collect()
}

impl Engine for Interventional {
    fn name(&self) -> &'static str {
        "interventional"
    }

    fn model(&self) -> &Model {
        &self.model
    }

    fn shap(&self, block: &FeatureBlock) -> Result<Attributions> {
        // Computed for the players, folded into the features' values by the driver.
        let w = self.model.num_players() + 1;
        let width = self.model.num_groups() * w;
        let per_task = rows_per_task(block.rows());
        let mut shap = shap_by_task_from(
            &self.model,
            &self.bias,
            block,
            per_task,
            || vec![0u64; self.max_slots],
            |fails, first, chunk| {
                // Tree-major within the task, so a tree's tables stay in cache across its rows.
                for (t, tree) in self.model.trees().iter().enumerate() {
                    let g = tree.group;
                    for (i, out) in chunk.chunks_mut(width).enumerate() {
                        self.tree_row(t, block.row(first + i), &mut out[g * w..(g + 1) * w], fails);
                    }
                }
            },
        )?;
        bias_is_the_rest(self.index, &self.model, block, &mut shap);
        Ok(shap)
    }

    fn interactions(&self, block: &FeatureBlock) -> Result<Interactions> {
        self.model.refuse_combinations("interventional interaction values (with a background)")?;
        let pairs = self.pair_tables()?;
        let (f, groups) = (self.model.num_features(), self.model.num_groups());
        let w = f + 1;
        let (shap_width, width) = (groups * w, groups * w * w);
        let (stride, block_rows) = (self.max_slots, pairs.block_rows());
        interactions_by_task(
            &self.model,
            block,
            rows_per_task_up_to(block.rows(), block_rows.max(ROWS_PER_TASK)),
            FirstTouch::Adds,
            || (vec![0u64; block_rows * stride], Vec::new(), PairScratch::default()),
            |(fails, shap, scratch), first, chunk| {
                let rows = chunk.len() / width;
                shap.clear();
                shap.resize(rows * shap_width, 0.0);
                // Blocks of rows, group by group, tree-major within: each tree's values for the
                // block's rows (leaving their fail sets), then its pairs leaf by leaf into the
                // block's pair-major sums (`PairTables::tree_rows`), written into the matrices
                // once the group's trees are all in. Each row still takes its trees in model
                // order, so the result does not depend on the blocking.
                for start in (0..rows).step_by(block_rows) {
                    let n = block_rows.min(rows - start);
                    let phis = &mut shap[start * shap_width..(start + n) * shap_width];
                    let matrices = &mut chunk[start * width..(start + n) * width];
                    for (g, group) in pairs.groups().iter().enumerate() {
                        scratch.start_block(&pairs, g);
                        let group_matrices = &mut matrices[g * w * w..];
                        for &t in &group.trees {
                            for (r, (phi, fails)) in phis.chunks_mut(shap_width).zip(fails.chunks_mut(stride)).enumerate() {
                                self.tree_row(t, block.row(first + start + r), &mut phi[g * w..(g + 1) * w], fails);
                            }
                            pairs.tree_rows(self, t, (fails, stride), n, (&mut *group_matrices, width, w), scratch);
                        }
                        pairs.finish_block(g, scratch, n, (group_matrices, width, w));
                    }
                }
                // Finished a few rows at a time, each few's Banzhaf biases while their matrices
                // are still in cache.
                let rows_at_once = shap_width * SUMS_AT_ONCE;
                for (pass, (phis, outs)) in shap.chunks_mut(rows_at_once).zip(chunk.chunks_mut(width * SUMS_AT_ONCE)).enumerate() {
                    for (phi, out) in phis.chunks_mut(shap_width).zip(outs.chunks_mut(width)) {
                        for (g, b) in self.bias.iter().enumerate() {
                            phi[g * w + f] = *b;
                        }
                        out.chunks_mut(w * w).for_each(|matrix| pairs::mirror_upper(matrix, w));
                        finish_interaction_row(out, phi, f, groups);
                    }
                    interaction_bias_of_rows(self.index, &self.model, block, first + pass * SUMS_AT_ONCE, outs);
                }
            },
        )
    }

    fn memory_bytes(&self) -> Option<usize> {
        let data: usize = self
            .trees
            .iter()
            .flat_map(|t| &t.data)
            .map(|d| match d {
                LeafData::Table { rows, .. } => rows.len() * size_of::<f64>(),
                LeafData::Patterns { patterns, .. } => patterns.len() * size_of::<(u64, f64)>(),
                LeafData::WidePatterns { masks, counts, .. } => (masks.len() + counts.len()) * size_of::<u64>(),
                LeafData::InSibling => 0,
            })
            .sum();
        let offsets: usize = self.packed.offsets.iter().flatten().map(|o| o.len() * size_of::<u32>()).sum();
        let pairs = self.pairs.get().map_or(0, |p| p.memory_bytes());
        Some(data + offsets + pairs)
    }
}

impl Interventional {
    /// The interaction tables, built on the first call (concurrent first calls may each build
    /// them; one is kept); an error is returned, not kept, so a later call tries again.
    fn pair_tables(&self) -> Result<Arc<PairTables>> {
        if let Some(pairs) = self.pairs.get() {
            return Ok(pairs.clone());
        }
        let built = Arc::new(PairTables::build(self, &self.background, self.memory_bound)?);
        tracing::debug!(bytes = built.memory_bytes(), "interventional: interaction tables built");
        Ok(self.pairs.get_or_init(|| built).clone())
    }
}

/// Why interaction values of a transformed output (probability, loss) are refused.
pub(crate) fn transformed_interactions_unavailable() -> Error {
    Error::Unsupported(
        "interaction values of a transformed output (probability, loss) are not built yet: those of the margin are, with or without a background"
            .into(),
    )
}

/// shap's rescaling of the margin's values for a transformed output, for one explained row of
/// margin `mx` (and label `label`) in one output group: into `scales`, for each background row
/// `z` (its margin in that group from `margins_z`), `s(x, z) / n`, where `s(x, z) = (T(mx) -
/// T(mz)) / (mx - mz)` (1 where the margins are equal) and `n` the background's rows; returns
/// the background's mean `T(mz)`, the row's bias.
pub(super) fn rescaling(transform: OutputTransform, mx: f64, label: f64, margins_z: impl Iterator<Item = f64>, scales: &mut [f64]) -> f64 {
    let n = scales.len() as f64;
    let tx = transform.apply(mx, label);
    let mut bias = 0.0;
    for (scale, mz) in scales.iter_mut().zip(margins_z) {
        let tz = transform.apply(mz, label);
        let s = if mx == mz { 1.0 } else { (tx - tz) / (mx - mz) };
        *scale = s / n;
        bias += tz;
    }
    bias / n
}

/// [`rescaling`] of one explained row `x` (with its label, for a loss) against every background
/// row (their margins row-major, rows × groups): the row's margins into `margins`, each
/// background row's `s(x, z) / n` into `scales` (`n` values a group), and for a loss each
/// group's bias (the background's mean loss against the label) into `out`'s last of every `w`.
pub(super) fn row_scales(
    model: &Model,
    (transform, background_margins): (OutputTransform, &[f64]),
    (x, label): (&[f64], Option<f64>),
    (margins, scales): (&mut [f64], &mut [f64]),
    (out, w): (&mut [f64], usize),
) {
    let g = margins.len();
    let n = scales.len() / g.max(1);
    model.predict_row(x, margins);
    for (group, &mx) in margins.iter().enumerate() {
        let margins_z = background_margins.iter().skip(group).step_by(g).copied();
        let bias = rescaling(transform, mx, label.unwrap_or(0.0), margins_z, &mut scales[group * n..(group + 1) * n]);
        if label.is_some() {
            out[group * w + w - 1] = bias;
        }
    }
}

/// Each background row's margins (row-major, rows × groups) and, per group, the background's
/// mean `T(margin)`, the bias of a transformed output (none for a loss, whose bias is each
/// explained row's own, against its label); an error where that mean is not finite.
pub(super) fn background_outputs(model: &Model, background: &FeatureBlock, transform: OutputTransform) -> Result<(Vec<f64>, Vec<f64>)> {
    let (n, g) = (background.rows(), model.num_groups());
    let mut margins = vec![0.0; n * g];
    let mut bias = vec![0.0; g];
    for (r, margin) in margins.chunks_exact_mut(g.max(1)).enumerate().take(n) {
        model.predict_row(background.row(r), margin);
        bias.iter_mut().zip(margin.iter()).for_each(|(b, &m)| *b += transform.apply(m, 0.0));
    }
    bias.iter_mut().for_each(|b| *b /= n as f64);
    if bias.iter().any(|b| !b.is_finite()) {
        return Err(Error::InvalidArgument(format!("interventional {transform} output: the background's mean output is not finite")));
    }
    if transform.needs_labels() {
        bias.clear();
    }
    Ok((margins, bias))
}

/// [`background_outputs`] of a background [`check_background`] accepts, for `index`'s values
/// of `transform`'s output: a transform's Banzhaf values are refused (shap defines a
/// transform's rescaling for Shapley values).
pub(super) fn checked_background_outputs(
    model: &Model,
    background: &FeatureBlock,
    index: Index,
    transform: OutputTransform,
) -> Result<(Vec<f64>, Vec<f64>)> {
    check_background(model, background)?;
    if transform != OutputTransform::Identity && index != Index::Shapley {
        return Err(Error::Unsupported(format!("{index} values of the {transform} output are not built yet: those of the margin are")));
    }
    background_outputs(model, background, transform)
}

/// The interaction values of an interventional engine of `model` (`index`'s, of the margin: a
/// `transform`'s are refused) from its pair terms: `row_pairs(scratch, x, out)` adds row `x`'s
/// into its matrices (`G` of `(F+1)²`, one group's after another), whose diagonals are then
/// each value (`shap`, called once the model is accepted) less its row's pairs.
pub(super) fn interactions_from_pairs<S, I, P>(
    model: &Model,
    (index, transform): (Index, OutputTransform),
    block: &FeatureBlock,
    shap: impl FnOnce() -> Result<Attributions>,
    init: I,
    row_pairs: P,
) -> Result<Interactions>
where
    I: Fn() -> S + Sync + Send,
    P: Fn(&mut S, &[f64], &mut [f64]) + Sync + Send,
{
    if transform != OutputTransform::Identity {
        return Err(transformed_interactions_unavailable());
    }
    model.refuse_combinations("interventional interaction values (with a background)")?;
    let (f, groups) = (model.num_features(), model.num_groups());
    let w = f + 1;
    let width = groups * w * w;
    // The diagonal is each value less its row's pairs: the values first.
    let shap = shap()?;
    let mut interactions = interactions_by_task(model, block, rows_per_task(block.rows()), FirstTouch::Adds, init, |scratch, first, chunk| {
        for (i, out) in chunk.chunks_mut(width).enumerate() {
            row_pairs(scratch, block.row(first + i), out);
            let r = first + i;
            finish_interaction_row(out, &shap.values[r * groups * w..(r + 1) * groups * w], f, groups);
        }
    })?;
    interaction_bias_is_the_rest(index, model, block, &mut interactions);
    Ok(interactions)
}

/// Refuses `labels` where `transform` needs them and they are missing, of the wrong count or not
/// finite, or where it reads none and they are given.
pub(super) fn check_labels(transform: OutputTransform, labels: Option<&[f64]>, rows: usize) -> Result<()> {
    match labels {
        None if transform.needs_labels() => Err(Error::InvalidArgument(format!(
            "the {transform} output is a loss against each row's label: give the labels (shap_values(X, y) in shap's interface)"
        ))),
        None => Ok(()),
        Some(_) if !transform.needs_labels() => Err(Error::InvalidArgument(format!("the {transform} output reads no labels; explain without them"))),
        Some(labels) if labels.len() != rows => {
            Err(Error::InvalidArgument(format!("{} labels for {rows} rows: give one label per explained row", labels.len())))
        }
        Some(labels) => match labels.iter().position(|y| !y.is_finite()) {
            Some(r) => Err(Error::InvalidArgument(format!("the label of row {r} is {}, not a finite number", labels[r]))),
            None => Ok(()),
        },
    }
}

/// Refuses an empty background or one with the wrong number of columns.
pub(super) fn check_background(model: &Model, background: &FeatureBlock) -> Result<()> {
    if background.rows() == 0 {
        return Err(Error::InvalidArgument("the background has no rows; interventional SHAP needs at least one".into()));
    }
    check_block(model, background).map_err(|e| e.context("background"))
}

/// The definition, background row by background row (Lundberg et al. 2020's interventional
/// algorithm): for each pair of the explained row `x` and a background row `z`, every path of
/// the hybrid rows through each tree, branching where `x` and `z` part on a feature not yet
/// taken from either, then the mean over the background. Cost per row grows with the
/// background: the oracle for [`Interventional`] and [`LinearInterventional`], and the engine
/// of models with linear leaves (LightGBM's `linear_tree`) where the latter's groups do not
/// fit. With a transform, each pair's values are scaled by shap's `s(x, z)` ([`rescaling`]), as
/// [`RescaledInterventional`]'s.
///
/// [`RescaledInterventional`]: super::rescaled::RescaledInterventional
pub(crate) struct InterventionalReference {
    model: Arc<Model>,
    index: Index,
    background: FeatureBlock,
    /// Per group, the background's mean output (none for a loss, whose bias is each row's own).
    bias: Vec<f64>,
    /// The output explained: the margin, or a function of it.
    transform: OutputTransform,
    /// Each background row's margins, row-major (rows × groups).
    background_margins: Vec<f64>,
    weights: Weights,
    /// Per column, the player a split on it credits ([`PreparedModel::players`]).
    players: Vec<u32>,
}

impl InterventionalReference {
    /// [`with_index`](Self::with_index) for Shapley values, as the tests build it.
    #[cfg(test)]
    pub fn new(prepared: Arc<PreparedModel>, background: &FeatureBlock) -> Result<InterventionalReference> {
        Self::with_index(prepared, background, Index::Shapley)
    }

    /// The oracle for `background` (rows in the model's feature order and precision), for
    /// `index`'s values of the margin.
    pub fn with_index(prepared: Arc<PreparedModel>, background: &FeatureBlock, index: Index) -> Result<InterventionalReference> {
        Self::with_transform(prepared, background, index, OutputTransform::Identity)
    }

    /// [`with_index`](Self::with_index) for `transform`'s output (Shapley values only, as shap
    /// defines them for a transform).
    pub fn with_transform(
        prepared: Arc<PreparedModel>,
        background: &FeatureBlock,
        index: Index,
        transform: OutputTransform,
    ) -> Result<InterventionalReference> {
        let model = prepared.model.clone();
        let (background_margins, bias) = checked_background_outputs(&model, background, index, transform)?;
        // The widest path bounds a + b; FailWalk refuses paths wider than the weights can index.
        // A linear leaf's games also take its model's features (`linear_leaf_games`).
        let mut widest = 0;
        for (t, tree) in model.trees().iter().enumerate() {
            let terms = tree.linear_leaves.iter().map(|l| l.terms.len()).max().unwrap_or(0);
            widest = FailWalk::new(tree, t, &prepared.players)?.leaves.iter().map(|l| l.features.len() + terms).fold(widest, usize::max);
        }
        let players = prepared.players.clone();
        let weights = Weights::of(index, widest);
        Ok(InterventionalReference { model, index, background: background.clone(), bias, transform, background_margins, weights, players })
    }

    /// Adds `tree`'s attributions for `x` against background row `z` to `phi`.
    fn pair(&self, tree: &Tree, x: &[f64], z: &[f64], phi: &mut [f64], scale: f64) {
        Self::leaf_games(tree, &self.players, x, z, |from_x, from_z, value| {
            let (a, b) = (from_x.len(), from_z.len());
            let v = value * scale;
            if a > 0 {
                let hot = v * self.weights.hot(a, b);
                from_x.iter().for_each(|&k| phi[k as usize] += hot);
            }
            if b > 0 {
                let cold = v * self.weights.cold(a, b);
                from_z.iter().for_each(|&k| phi[k as usize] -= cold);
            }
        });
    }

    /// The values of every row of `block` (`labels`, one per row, for a loss).
    fn values(&self, block: &FeatureBlock, labels: Option<&[f64]>) -> Result<Attributions> {
        check_labels(self.transform, labels, block.rows())?;
        let (g, n) = (self.model.num_groups(), self.background.rows());
        let w = self.model.num_players() + 1;
        let width = g * w;
        let mut shap = shap_by_task_from(
            &self.model,
            &self.bias,
            block,
            rows_per_task(block.rows()),
            // The margin's scales, 1/n for every pair, kept; a transform's, each row's own.
            || (vec![0.0; g], vec![1.0 / n as f64; g * n]),
            |(margins, scales), first, chunk| {
                for (i, out) in chunk.chunks_mut(width).enumerate() {
                    let x = block.row(first + i);
                    if self.transform != OutputTransform::Identity {
                        let label = labels.map(|l| l[first + i]);
                        row_scales(&self.model, (self.transform, &self.background_margins), (x, label), (margins, scales), (out, w));
                    }
                    self.against_background(out, w, |tree, r, z, phi| self.pair(tree, x, z, phi, scales[tree.group * n + r]));
                }
            },
        )?;
        bias_is_the_rest(self.index, &self.model, block, &mut shap);
        Ok(shap)
    }

    /// Calls `add(tree, r, z, part)` for every tree and background row `z` (row `r`), `part` the
    /// tree's group's `per_group` values of one explained row's `out`.
    fn against_background(&self, out: &mut [f64], per_group: usize, mut add: impl FnMut(&Tree, usize, &[f64], &mut [f64])) {
        for tree in self.model.trees() {
            let part = &mut out[tree.group * per_group..(tree.group + 1) * per_group];
            for r in 0..self.background.rows() {
                add(tree, r, self.background.row(r), part);
            }
        }
    }

    /// Calls `game(from_x, from_z, value)` for every game `v·[from_x ⊆ S]·[S ∩ from_z = ∅]` that
    /// `tree`'s value for the hybrids of `x` and `z` is the sum of: one a leaf they reach, with
    /// the features (players: `players[column]`) taken from each where they part and the leaf's
    /// weighted value; a linear leaf's several ([`Self::linear_leaf_games`]).
    fn leaf_games(tree: &Tree, players: &[u32], x: &[f64], z: &[f64], mut game: impl FnMut(&[u32], &[u32], f64)) {
        let mut scratch = (Vec::new(), Vec::new());
        Self::hybrid_paths(tree, players, x, z, |leaf, from_x, from_z| match tree.linear_leaf(leaf) {
            None => game(from_x, from_z, tree.nodes[leaf].value * tree.weight),
            Some(linear) => {
                let leaf = (linear, tree.nodes[leaf].value, tree.weight);
                Self::linear_leaf_games(leaf, players, (x, z), (from_x, from_z), &mut scratch, &mut game)
            }
        });
    }

    /// The games of a linear leaf reached by the hybrids that take `from_x` from `x` and
    /// `from_z` from `z`, their sum the leaf's output for each such hybrid.
    ///
    /// A hybrid `h` gets `c + Σ_j a_j·h_j` (`linear`), or the leaf's constant `v` where one of
    /// the model's features is NaN in `h`. A feature of `from_x` (`from_z`) has its value from `x`
    /// (`z`); any other, `j`, from `x` exactly when `j ∈ S`. So: a NaN that every hybrid has
    /// gives `v` alone; otherwise the model holds where no feature NaN in `x` comes from `x`
    /// (those join `from_z`: `Z'`) and every one NaN in `z` comes from `x` (those join `from_x`:
    /// `X'`), and the output is
    ///
    /// ```text
    ///   v·[X, Z] + (K - v)·[X', Z'] + Σ_j a_j (x_j - z_j)·[X' ∪ {j}, Z']
    /// ```
    ///
    /// over the features `j` in neither `X'` nor `Z'`, where `K = c + Σ a_j·(the value each
    /// feature of X' (Z') has in x (z), z_j for the others)` and `[A, B]` is the game of taking
    /// `A` from `x` and `B` from `z` (`v·[X, Z]` drops out when `X' = X` and `Z' = Z`).
    ///
    /// `leaf` is the linear model, the leaf's constant value and the tree's weight; `scratch`
    /// holds `X'` and `Z'` (kept between calls so that a walk allocates them once).
    fn linear_leaf_games(
        (linear, value, weight): (&LinearLeaf, f64, f64),
        players: &[u32],
        (x, z): (&[f64], &[f64]),
        (from_x, from_z): (&[u32], &[u32]),
        (more_x, more_z): &mut (Vec<u32>, Vec<u32>),
        game: &mut impl FnMut(&[u32], &[u32], f64),
    ) {
        more_x.clear();
        more_x.extend_from_slice(from_x);
        more_z.clear();
        more_z.extend_from_slice(from_z);
        for &(feature, _) in &linear.terms {
            let (f, k) = (feature as usize, players[feature as usize]);
            let (x_nan, z_nan) = (x[f].is_nan(), z[f].is_nan());
            let always_nan = if from_x.contains(&k) {
                x_nan
            } else if from_z.contains(&k) {
                z_nan
            } else {
                x_nan && z_nan
            };
            if always_nan {
                game(from_x, from_z, value * weight);
                return;
            }
            // Where the model holds, its features come from a row without a NaN in them.
            if x_nan && !more_z.contains(&k) {
                more_z.push(k);
            } else if z_nan && !more_x.contains(&k) {
                more_x.push(k);
            }
        }
        let narrowed = more_x.len() > from_x.len() || more_z.len() > from_z.len();
        let mut sum = linear.constant;
        for &(feature, coefficient) in &linear.terms {
            let (f, k) = (feature as usize, players[feature as usize]);
            sum += coefficient * if more_x.contains(&k) { x[f] } else { z[f] };
        }
        if narrowed {
            game(from_x, from_z, value * weight);
            sum -= value;
        }
        game(more_x, more_z, sum * weight);
        for &(feature, coefficient) in &linear.terms {
            let (f, k) = (feature as usize, players[feature as usize]);
            if more_x.contains(&k) || more_z.contains(&k) || x[f] == z[f] {
                continue;
            }
            more_x.push(k);
            game(more_x, more_z, coefficient * (x[f] - z[f]) * weight);
            more_x.pop();
        }
    }

    /// Calls `leaf(node, from_x, from_z)` for every leaf the hybrids of `x` and `z` reach through
    /// `tree`, with the features (players: `players[column]`) taken from each where they part.
    fn hybrid_paths(tree: &Tree, players: &[u32], x: &[f64], z: &[f64], mut leaf: impl FnMut(usize, &[u32], &[u32])) {
        // Depth-first, the features taken from each row held once: the lists are cut back to
        // what a branch's parent had taken on the branch's turn (no list copied per branch).
        let (mut from_x, mut from_z) = (Vec::new(), Vec::new());
        let mut stack = vec![HybridBranch { node: 0, taken_x: 0, taken_z: 0, takes: Takes::Nothing }];
        while let Some(HybridBranch { node: i, taken_x, taken_z, takes }) = stack.pop() {
            from_x.truncate(taken_x);
            from_z.truncate(taken_z);
            match takes {
                Takes::FromX(k) => from_x.push(k),
                Takes::FromZ(k) => from_z.push(k),
                Takes::Nothing => {}
            }
            let node = &tree.nodes[i];
            if node.is_leaf() {
                leaf(i, &from_x, &from_z);
                continue;
            }
            let k = players[node.feature as usize];
            let child = |left: bool| if left { node.left as usize } else { node.right as usize };
            let x_left = tree.goes_left(node, x[node.feature as usize]);
            let z_left = tree.goes_left(node, z[node.feature as usize]);
            let branch = |left: bool, takes: Takes| HybridBranch { node: child(left), taken_x: from_x.len(), taken_z: from_z.len(), takes };
            if from_x.contains(&k) {
                stack.push(branch(x_left, Takes::Nothing));
            } else if from_z.contains(&k) {
                stack.push(branch(z_left, Takes::Nothing));
            } else if x_left == z_left {
                stack.push(branch(x_left, Takes::Nothing));
            } else {
                stack.push(branch(x_left, Takes::FromX(k)));
                stack.push(branch(z_left, Takes::FromZ(k)));
            }
        }
    }
}

/// A branch of [`InterventionalReference::hybrid_paths`]'s walk waiting its turn: its node, how
/// many features its parent had taken from each row, and the feature the branch itself takes.
struct HybridBranch {
    node: usize,
    taken_x: usize,
    taken_z: usize,
    takes: Takes,
}

/// Which row a branch takes its split's feature from, where the rows part there.
#[derive(Clone, Copy)]
enum Takes {
    /// The rows go the same way, or the feature was taken before.
    Nothing,
    /// From the explained row.
    FromX(u32),
    /// From the background row.
    FromZ(u32),
}

impl Engine for InterventionalReference {
    fn name(&self) -> &'static str {
        "interventional-reference"
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
        let scale = 1.0 / self.background.rows() as f64;
        interactions_from_pairs(
            &self.model,
            (self.index, self.transform),
            block,
            || self.shap(block),
            || (),
            |_, x, out| {
                self.against_background(out, w * w, |tree, _, z, matrix| {
                    Self::leaf_games(tree, &self.players, x, z, |from_x, from_z, value| {
                        pairs::reference_leaf(self.index, from_x, from_z, value * scale, matrix, w)
                    })
                });
            },
        )
    }
}

// The fixtures are read from Parquet.
#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    use crate::model::Precision;
    use crate::test_fixtures::{block_rows as rows, fixtures, max_row_rel_error};

    #[test]
    fn tables_and_patterns_equal_the_reference_on_every_fixture() {
        for f in &fixtures() {
            let prepared = Arc::new(PreparedModel::new(f.model.clone()).unwrap());
            let background = rows(&f.block, 0, 25);
            let explained = rows(&f.block, 25, 45);
            let reference = InterventionalReference::new(prepared.clone(), &background).unwrap().shap(&explained).unwrap();
            let tables = Interventional::new(prepared.clone(), &background, DEFAULT_INTERVENTIONAL_MEMORY_BYTES).unwrap();
            let patterns =
                Interventional::with_table_bits(prepared.clone(), &background, DEFAULT_INTERVENTIONAL_MEMORY_BYTES, 0, Index::Shapley).unwrap();
            let width = f.model.num_groups() * (f.model.num_features() + 1);
            for (name, engine) in [("tables", tables), ("patterns", patterns)] {
                let got = engine.shap(&explained).unwrap();
                let (err, row) = max_row_rel_error(&got.values, &reference.values, width);
                assert!(err <= 1e-9, "{}: {name} row {row} off the reference by {err:e}", f.name);
                // Additivity: the values and the bias add up to the margin.
                let margins = engine.predict(&explained).unwrap();
                for r in 0..explained.rows() {
                    for g in 0..f.model.num_groups() {
                        let total: f64 = got.row(r, g).iter().sum();
                        let m = margins.values[r * f.model.num_groups() + g];
                        assert!((total - m).abs() <= 1e-9 * m.abs().max(1.0), "{}: {name} row {r} group {g}: {total} vs {m}", f.name);
                    }
                }
            }
        }
    }

    /// A full tree of `depth` splitting on feature `level` at each level (so every path has
    /// `depth` distinct features and every leaf has a first-split sibling).
    fn deep_model(depth: usize, seed: u64) -> Model {
        let tree = crate::test_support::full_tree(&mut { seed }, depth, |level, _| level as u32);
        crate::test_support::numeric_model(depth, vec![tree], 0.5)
    }

    #[test]
    fn packed_tables_take_under_half_the_dense_ones_and_keep_the_values() {
        let depth = 10;
        let model = Arc::new(deep_model(depth, 7));
        let prepared = Arc::new(PreparedModel::new(model.clone()).unwrap());
        let uniform = |rows: usize, salt: usize| {
            let values = (0..rows * depth).map(|i| ((i * 7919 + salt * 104729) % 1000) as f64 / 1000.0).collect();
            FeatureBlock::new(rows, depth, values, Precision::F64)
        };
        let (background, explained) = (uniform(40, 1), uniform(12, 2));
        let engine = Interventional::new(prepared.clone(), &background, DEFAULT_INTERVENTIONAL_MEMORY_BYTES).unwrap();
        // Every leaf is in a first-split pair: one packed table per pair.
        let tables = engine.trees[0].data.iter().filter(|d| matches!(d, LeafData::Table { paired: true, .. })).count();
        assert_eq!(tables, 1 << (depth - 1));
        let dense_bytes = (1usize << depth) * (1 << depth) * depth * 8;
        let packed_bytes = engine.memory_bytes().unwrap();
        assert!(packed_bytes * 2 <= dense_bytes, "packed {packed_bytes} bytes against {dense_bytes} dense");
        // The values: the definition, row pair by row pair.
        let reference = InterventionalReference::new(prepared.clone(), &background).unwrap().shap(&explained).unwrap();
        let got = engine.shap(&explained).unwrap();
        let (err, row) = max_row_rel_error(&got.values, &reference.values, depth + 1);
        assert!(err <= 1e-9, "row {row} off the reference by {err:e}");
        assert!(got.values.iter().any(|v| v.abs() > 1e-3), "the model attributes something");
    }

    /// A caterpillar of `depth` splits, each on its own feature (one leaf and the next split
    /// below each): paths of up to `depth` distinct features.
    pub(crate) fn chain_model(depth: usize, seed: u64) -> Model {
        use crate::model::{Node, SplitRule};
        let mut seed = seed;
        let mut next = || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 11) as f64 / (1u64 << 53) as f64
        };
        let mut nodes = Vec::new();
        for level in 0..depth {
            let (split, leaf) = (nodes.len(), nodes.len() + 1);
            nodes.push(Node::leaf(0.0, 1.0));
            nodes.push(Node::leaf(next() - 0.5, 1.0));
            let n = &mut nodes[split];
            // Most rows go on down the chain, so deep leaves are reached.
            n.rule = SplitRule::XgbLess { threshold: 0.08 + 0.1 * next() };
            n.feature = level as u32;
            n.default_left = next() < 0.5;
            (n.left, n.right) = (leaf as u32, leaf as u32 + 1);
        }
        nodes.push(Node::leaf(next() - 0.5, 1.0));
        let tree = crate::model::Tree { nodes, category_words: vec![], group: 0, weight: 1.0, linear_leaves: vec![] };
        crate::test_support::numeric_model(depth, vec![tree], 0.25)
    }

    /// Rows whose values fall on both sides of the chain's thresholds.
    pub(crate) fn uniform_rows(rows: usize, cols: usize, salt: usize) -> FeatureBlock {
        let values = (0..rows * cols).map(|i| ((i * 7919 + salt * 104729) % 1000) as f64 / 1000.0).collect();
        FeatureBlock::new(rows, cols, values, Precision::F64)
    }

    #[test]
    fn paths_of_more_than_64_distinct_features_are_explained_exactly() {
        for depth in [65, 130] {
            let model = Arc::new(chain_model(depth, depth as u64));
            let prepared = Arc::new(PreparedModel::new(model.clone()).unwrap());
            let (background, explained) = (uniform_rows(30, depth, 1), uniform_rows(8, depth, 2));
            let engine = Interventional::new(prepared.clone(), &background, DEFAULT_INTERVENTIONAL_MEMORY_BYTES).unwrap();
            assert!(engine.trees[0].walk.words > 1, "a wide walk");
            let got = engine.shap(&explained).unwrap();
            let reference = InterventionalReference::new(prepared.clone(), &background).unwrap().shap(&explained).unwrap();
            let (err, row) = max_row_rel_error(&got.values, &reference.values, depth + 1);
            assert!(err <= 1e-9, "depth {depth}: row {row} off the reference by {err:e}");
            let margins = engine.predict(&explained).unwrap();
            for r in 0..explained.rows() {
                let total: f64 = got.row(r, 0).iter().sum();
                assert!((total - margins.values[r]).abs() <= 1e-9, "depth {depth} row {r}: {total} vs {}", margins.values[r]);
            }
            // Features deep in the chain are credited: the walk's second word is used.
            assert!(got.values.iter().skip(64).step_by(1).any(|v| v.abs() > 0.0));
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

    /// The interventional game `v(S) = mean_z f(x_S, z_~S)` of a one-group model, every
    /// coalition (bit `i` of `S` for feature `i`).
    fn game_by_coalitions(model: &Model, x: &[f64], background: &FeatureBlock) -> Vec<f64> {
        let m = model.num_features();
        let mut margin = [0.0];
        (0..1usize << m)
            .map(|s| {
                let mut sum = 0.0;
                for r in 0..background.rows() {
                    let hybrid: Vec<f64> = (0..m).map(|i| if s & (1 << i) != 0 { x[i] } else { background.row(r)[i] }).collect();
                    model.predict_row(&hybrid, &mut margin);
                    sum += margin[0];
                }
                sum / background.rows() as f64
            })
            .collect()
    }

    fn factorial(n: usize) -> f64 {
        (1..=n).map(|k| k as f64).product()
    }

    /// `index`'s values of game `v` over `m` players, coalition by coalition (Banzhaf's:
    /// `β_i = Σ_{S ∌ i} (v(S∪i) − v(S)) / 2^(M−1)`).
    fn values_by_coalitions(index: Index, v: &[f64], m: usize) -> Vec<f64> {
        let weight = |size: usize| match index {
            Index::Shapley => factorial(size) * factorial(m - size - 1) / factorial(m),
            Index::Banzhaf => 1.0 / (1u64 << (m - 1)) as f64,
        };
        (0..m)
            .map(|i| (0..1usize << m).filter(|s| s & (1 << i) == 0).map(|s| weight(s.count_ones() as usize) * (v[s | 1 << i] - v[s])).sum())
            .collect()
    }

    /// `index`'s interaction matrix of game `v` over `m` players, coalition by coalition, in
    /// the engines' layout (`m + 1` square, Shapley's pairs halved, the diagonal each value less
    /// its row's pairs, the bias entry left 0).
    fn interactions_by_coalitions(index: Index, v: &[f64], m: usize) -> Vec<f64> {
        let w = m + 1;
        let mut matrix = vec![0.0; w * w];
        for i in 0..m {
            for j in 0..m {
                if i == j {
                    continue;
                }
                let mut sum = 0.0;
                for s in (0..1usize << m).filter(|s| s & (1 << i | 1 << j) == 0) {
                    let size = s.count_ones() as usize;
                    let weight = match index {
                        Index::Shapley => factorial(size) * factorial(m - size - 2) / factorial(m - 1) / 2.0,
                        Index::Banzhaf => 1.0 / (1u64 << (m - 2)) as f64,
                    };
                    sum += weight * (v[s | 1 << i | 1 << j] - v[s | 1 << i] - v[s | 1 << j] + v[s]);
                }
                matrix[i * w + j] = sum;
            }
        }
        for (i, value) in values_by_coalitions(index, v, m).into_iter().enumerate() {
            let pairs: f64 = (0..m).filter(|&j| j != i).map(|j| matrix[i * w + j]).sum();
            matrix[i * w + i] = value - pairs;
        }
        matrix
    }

    #[test]
    fn values_and_interaction_values_equal_enumeration_over_coalitions_in_every_holding() {
        use crate::test_support::{full_tree, numeric_model, uniform};
        let mut seed = 11u64;
        for case in 0..24usize {
            let index = if case % 2 == 0 { Index::Shapley } else { Index::Banzhaf };
            let features = 2 + case % 5;
            let trees = (0..1 + case % 3).map(|t| full_tree(&mut seed, 1 + (case + t) % 5, |_, u| (u * features as f64) as u32)).collect();
            let model = Arc::new(numeric_model(features, trees, -0.5));
            let prepared = Arc::new(PreparedModel::new(model.clone()).unwrap());
            let mut draw = |rows: usize| {
                let values = (0..rows * features).map(|_| if uniform(&mut seed) < 0.15 { f64::NAN } else { uniform(&mut seed) }).collect();
                FeatureBlock::new(rows, features, values, Precision::F64)
            };
            let (background, explained) = (draw(1 + case % 7), draw(5));
            let bound = DEFAULT_INTERVENTIONAL_MEMORY_BYTES;
            let engines: [(&str, Arc<dyn Engine>); 3] = [
                ("tables", Arc::new(Interventional::with_index(prepared.clone(), &background, bound, index).unwrap())),
                ("patterns", Arc::new(Interventional::with_table_bits(prepared.clone(), &background, bound, 0, index).unwrap())),
                ("reference", Arc::new(InterventionalReference::with_index(prepared.clone(), &background, index).unwrap())),
            ];
            let w = features + 1;
            for (name, engine) in engines {
                let got = engine.interactions(&explained).unwrap();
                let values = engine.shap(&explained).unwrap();
                for r in 0..explained.rows() {
                    let game = game_by_coalitions(&model, explained.row(r), &background);
                    let want = interactions_by_coalitions(index, &game, features);
                    let scale = want.iter().fold(1e-9f64, |a, v| a.max(v.abs()));
                    for (i, value) in values_by_coalitions(index, &game, features).into_iter().enumerate() {
                        let g = values.row(r, 0)[i];
                        assert!((g - value).abs() <= 1e-12 * scale, "case {case} {index} {name} row {r} feature {i}: value {g} against {value}");
                    }
                    let matrix = got.matrix(r, 0);
                    for i in 0..features {
                        for j in 0..features {
                            let (g, e) = (matrix[i * w + j], want[i * w + j]);
                            assert!((g - e).abs() <= 1e-12 * scale, "case {case} {index} {name} row {r} ({i}, {j}): {g} against {e}");
                        }
                        // Rows sum to the values.
                        let row: f64 = matrix[i * w..i * w + features].iter().sum();
                        assert!((row - values.row(r, 0)[i]).abs() <= 1e-12 * scale, "case {case} {name} row {r} feature {i}: {row}");
                    }
                    // The matrix sums to the margin, with the bias the values' own (Banzhaf's is
                    // the margin's rest, summed over the matrix instead of the values).
                    let (bias, values_bias) = (matrix[w * w - 1], values.row(r, 0)[features]);
                    assert!(
                        (bias - values_bias).abs() <= 1e-12 * scale.max(bias.abs()),
                        "case {case} {name} row {r}: bias {bias} against {values_bias}"
                    );
                    if index == Index::Shapley {
                        assert_eq!(bias, values_bias, "case {case} {name} row {r}: the background's mean margin");
                    }
                    let mut margin = [0.0];
                    model.predict_row(explained.row(r), &mut margin);
                    let total: f64 = matrix.iter().sum();
                    assert!(
                        (total - margin[0]).abs() <= 1e-12 * scale.max(margin[0].abs()),
                        "case {case} {name} row {r}: {total} against {}",
                        margin[0]
                    );
                }
            }
        }
    }

    #[test]
    fn interaction_tables_and_patterns_equal_the_reference_on_every_fixture() {
        let mut paired = 0;
        for f in &fixtures() {
            let prepared = Arc::new(PreparedModel::new(f.model.clone()).unwrap());
            let (background, explained) = (rows(&f.block, 0, 12), rows(&f.block, 30, 36));
            let reference = InterventionalReference::new(prepared.clone(), &background).unwrap().interactions(&explained).unwrap();
            let bound = DEFAULT_INTERVENTIONAL_MEMORY_BYTES;
            let tables = Interventional::new(prepared.clone(), &background, bound).unwrap();
            let patterns = Interventional::with_table_bits(prepared.clone(), &background, bound, 0, Index::Shapley).unwrap();
            // Pair blocks of 4 rows: the 6 rows cross a block boundary.
            let blocks = Interventional::new(prepared.clone(), &background, bound).unwrap();
            let _ = blocks.pairs.set(Arc::new(PairTables::build(&blocks, &background, bound).unwrap().with_block_rows(4)));
            let width = f.model.num_groups() * (f.model.num_features() + 1).pow(2);
            let mut outputs = Vec::new();
            for (name, engine) in [("tables", tables), ("patterns", patterns), ("blocks of 4", blocks)] {
                let got = engine.interactions(&explained).unwrap();
                let (err, row) = max_row_rel_error(&got.values, &reference.values, width);
                assert!(err <= 1e-9, "{}: {name} row {row} off the reference by {err:e}", f.name);
                assert!(engine.memory_bytes().unwrap() > 0);
                outputs.push(got.values);
            }
            // Each row takes its trees in the same order whatever the blocks: the same bits.
            assert!(outputs[0].iter().zip(&outputs[2]).all(|(a, b)| a.to_bits() == b.to_bits()), "{}: blocks change the bits", f.name);
            paired += Interventional::new(prepared, &background, bound).unwrap().pair_tables().unwrap().paired_leaves();
        }
        // The fixtures' first-split pairs of leaves took the summed tables (checked above).
        assert!(paired > 0, "no leaves were paired");
    }

    #[test]
    fn interactions_of_paths_of_more_than_64_distinct_features_equal_the_reference() {
        let depth = 70;
        let model = Arc::new(chain_model(depth, 3));
        let prepared = Arc::new(PreparedModel::new(model.clone()).unwrap());
        let (background, explained) = (uniform_rows(20, depth, 1), uniform_rows(4, depth, 2));
        for index in [Index::Shapley, Index::Banzhaf] {
            let engine = Interventional::with_index(prepared.clone(), &background, DEFAULT_INTERVENTIONAL_MEMORY_BYTES, index).unwrap();
            assert!(engine.trees[0].walk.words > 1, "a wide walk");
            let got = engine.interactions(&explained).unwrap();
            let reference = InterventionalReference::with_index(prepared.clone(), &background, index).unwrap().interactions(&explained).unwrap();
            let (err, row) = max_row_rel_error(&got.values, &reference.values, (depth + 1) * (depth + 1));
            assert!(err <= 1e-9, "{index}: row {row} off the reference by {err:e}");
            // Pairs deep in the chain (past the first word) are credited.
            let w = depth + 1;
            assert!((0..explained.rows()).any(|r| (66..depth).any(|j| got.matrix(r, 0)[65 * w + j] != 0.0)), "{index}: no pair past bit 64");
        }
    }

    #[test]
    fn a_bound_too_small_for_the_interaction_patterns_is_refused_when_they_are_asked_for() {
        let f = &fixtures()[0];
        let prepared = Arc::new(PreparedModel::new(f.model.clone()).unwrap());
        // Enough for the values' patterns (no tables), not for the pairs' as well.
        let engine = Interventional::with_table_bits(prepared, &f.block, 1 << 30, 0, Index::Shapley).unwrap();
        let bytes = engine.memory_bytes().unwrap();
        let small = Interventional { memory_bound: bytes / 4, ..engine };
        assert!(small.shap(&rows(&f.block, 0, 3)).is_ok());
        let e = small.interactions(&rows(&f.block, 0, 3)).unwrap_err().to_string();
        assert!(e.contains("interaction values") && e.contains("over the bound"), "{e}");
    }
}
