//! `linear`: exact TreeSHAP in one top-down and one bottom-up pass over the nodes (the form of
//! Linear TreeSHAP), with the Shapley weights integrated by the Gauss–Legendre rule of
//! [`quadrature`](super::quadrature); sixteen rows at a time, one per SIMD lane (four for a
//! call of two to four rows: see [`SMALL_LANES`]; a row alone, for its SHAP values, takes two
//! flat passes over the splits in post-order instead: see [`row`], and where a chunk's trees
//! share their shape, eight of them at once, a tree per lane: see [`tree_lanes`]).
//!
//! Notation as in `quadrature`: on a leaf's path, feature j has merged cover fraction `z_j` and
//! is hot (`o_j = 1`) when the row follows every split on it, cold (`o_j = 0`) otherwise. With
//! `f_j(t) = z_j + (o_j − z_j)·t`, a leaf of value v adds to a path feature i
//!
//! ```text
//!   φ_i += v · ∫₀¹ (o_i − z_i) · Π_{j≠i} f_j(t) dt
//! ```
//!
//! a polynomial of degree d−1 (d distinct path features), so ⌈d/2⌉ points integrate it exactly.
//! `quadrature` evaluates this at every leaf for every path feature: O(leaves·d·⌈d/2⌉) per row.
//! Here the product is split at the split p that tests i. With `A_p(t)` the product of the
//! factors above p and `B_c(t) = Σ_{leaves l under c} v_l · Π_{factors between c and l}`, every
//! leaf under p gives i, together,
//!
//! ```text
//!   Σ_k w_k · A_p(t_k) · (e_L(t_k)·B_L(t_k) + e_R(t_k)·B_R(t_k)),   e_c = o_c − z_c
//! ```
//!
//! and `B_p = g_L·B_L + g_R·B_R` with `g_c = f_c` the child's factor: A flows down, B flows up,
//! and each split costs O(⌈d/2⌉) per row, O(nodes·⌈d/2⌉) per tree.
//!
//! **Banzhaf values** ([`Index::Banzhaf`]) are the same integrand at t = 1/2 alone: the leaf's
//! game has the multilinear extension `v·Π_j f_j(x_j)`, whose partial derivative in `x_i`
//! integrated along the diagonal is the Shapley value (Owen) and taken at the centre is the
//! Banzhaf value. So the walk runs with one point, t = 1/2 and weight 1, for every tree (one
//! part, whatever its paths), and its pair terms are the Banzhaf interaction index the same way.
//!
//! A feature split on again below an earlier split on it (merged fraction `z'` above, hot or
//! cold there) replaces the factor `f' = z' + (o' − z')·t` by the merged one: its children's
//! factors become `f_c / f'`, and the telescoping difference `(o_c−z_c)/f_c − (o'−z')/f'` of the
//! two splits' terms makes the sum over a path's splits on i exactly the leaf's term, at every
//! quadrature point. If i was already cold above, both children keep it cold: the factor only
//! scales by the edge's cover fraction and the split adds nothing. Per lane this is
//! `g_c = s·(a_c + c_c·t)`, `e_c = s·(c_c − β·g_c)` with `s = 1/f'` (1 for a first or cold
//! split), `β = 1 − z'` (0 for a first or cold split), and `a_c`, `c_c` from the row's
//! directions (see [`Coefficients<N>`]). Every factor is in [0, 1], `1/f'` is at most `1/t₁`,
//! and no division happens per row.
//!
//! **Parts.** The points a tree needs are set by its longest path, but a deep tree's leaves sit
//! at many depths. A tree's SHAP values are a sum over its leaves, so the leaves can be split
//! into groups by the points their own paths need, each group walked as a tree of its own: the
//! same splits with the other leaves' values set to 0, and every subtree left with no leaf of
//! the group cut to one zero leaf (it adds nothing). A group then takes only the points of its
//! own longest path, on only the splits above its leaves. Which groups (runs of point counts)
//! are cheapest is decided per tree at compile time from the splits each would keep
//! ([`leaf_groups`]); a balanced tree stays whole.
//!
//! The walk over a tree is the same for every row; only these per-lane coefficients differ. So
//! a lane group of [`LANES`] rows shares the control flow and the tree's data, and the
//! arithmetic is plain lane-wise `[f64; 16]` loops (two AVX-512 or four AVX2 vectors),
//! compiled for AVX-512 and AVX2 (with FMA) as well and chosen at run time, and (SHAP values)
//! once per common point count, so that the loops over the points unroll.
//! Products that feed a sum are fused multiply-adds (`mul_add`), written out: a fused
//! multiply-add rounds once, the same bits whether the CPU's instruction or the library's
//! software `fma` computes it, so every compiled copy gives the same bits.
//!
//! **Chunks.** The compiled trees are summed in fixed chunks of [`TREES_PER_CHUNK`], each
//! chunk's sums on their own, and a row's values are the chunks' sums added in model order. A
//! block too small to keep every thread busy with its rows (50 rows of a 1000-tree model are 4
//! lane groups, 2 on each of two threads) then shares its chunks among the threads instead
//! ([`Linear::split_by_trees`]), with the same bits: the chunks and their order are the
//! model's, not the thread count's or the block's. A task's last 1-4 rows walk in a lane group
//! of four ([`narrow_tail`]), each tree right after the task's wide groups: 50 rows are three
//! groups of sixteen and one of four, on one thread or shared among several.

use std::sync::{Arc, OnceLock};

mod row;
mod tree_lanes;

use super::block::FeatureBlock;
use super::decision::Decision;
use super::drivers::{
    bias_is_the_rest, check_block, finish_interaction_row, interaction_bias_of_rows, interactions_by_task, rows_per_task_up_to, shap_by_task,
    FirstTouch, ROWS_PER_TASK,
};
use super::engine_trait::Engine;
use super::options::Index;
use super::output::{Attributions, Interactions};
use super::prepared::{PreparedModel, PreparedTree, UNREACHABLE};
use super::quadrature::{gauss_legendre, MAX_POINTS};
use super::simd::prefetch;
#[cfg(target_arch = "x86_64")]
use super::simd::{simd_level, SimdLevel};
use crate::error::{Error, Result};
use crate::model::{Model, Tree};

/// One feature on the path to a node while a tree is compiled: the feature, its merged
/// fraction, the last split on it, and the side below that split.
type PathStep = (u32, f64, u32, u8);

/// Rows explained together, one per lane. A lane group's walk costs mostly its control flow,
/// which follows the tree's shape, and each split's coefficients; the lane-wise arithmetic is a
/// small share. So, against eight lanes (`benchmarks/ab_builds.py`, the same bits), with the
/// larger tasks below: SHAP values 1.7× the rows/s on one thread with AVX-512 (1.4–1.7× on
/// two) and 1.4–1.6× with AVX2, interactions 1.5×, on a forest of 100 trees of depth 10 and
/// XGBoost's 100 of depth 6; 24 lanes ran at a third (the lane loops stop unrolling into
/// registers). A lone row, which fills a lane group alone, runs at 0.85–1.03× its old rate.
pub(crate) const LANES: usize = 16;

/// Lanes of a lane group for a block of at most this many rows (a request to explain one
/// application, say): a lone row in sixteen lanes pays for fifteen empty ones, but a walk's
/// cost is not all lane-wise arithmetic (the split's directions, coefficients and control flow
/// are paid once a group), so four lanes cost about 0.6 of sixteen (medium-8f, one thread:
/// 1.22 against 2.05 ms a group) and two groups of four already cost more than one of sixteen.
/// Every lane computes what it would in a wider group, so the bits are the same. (A call of one
/// row takes a lane group of one and, for its SHAP values, [`row::walk_alone`].)
pub(crate) const SMALL_LANES: usize = 4;

/// Whether a call of `rows` rows walks in lane groups of [`SMALL_LANES`] (else [`LANES`]): the
/// one rule the dispatch and its tests read.
const fn in_small_lane_groups(rows: usize) -> bool {
    rows <= SMALL_LANES
}

/// Whether a call of `rows` rows takes, for its SHAP values, a lane group of one, its chunks'
/// [`tree_lanes::ChunkPlan`] and [`row::walk_alone`] for the trees no group holds
/// (interactions keep [`SMALL_LANES`]): the one rule the dispatch and its tests read.
const fn walks_alone(rows: usize) -> bool {
    rows == 1
}

/// Whether a lane group of `N` rows walks a tree of `points` quadrature points flat
/// ([`row::walk_alone`], which has a copy for 1 to 8 points) instead of in [`walk`]: a row
/// alone, for its SHAP values. The one rule the walk's set-up and its dispatch read.
const fn walks_flat<const PAIRS: bool, const N: usize>(points: usize) -> bool {
    N == 1 && !PAIRS && matches!(points, 1..=8)
}

/// A task of `rows` (or a small block shared by trees) in lane groups of `N`: how many rows go
/// in whole lane groups of `N` and how many (at most [`SMALL_LANES`], else none) in a narrow
/// group walked after them. A narrow group costs about 0.6 of a wide one (see [`SMALL_LANES`]),
/// so 50 rows of a deep model walk three groups of sixteen and one of four rather than four of
/// sixteen; every lane computes what it would in a wide group, so the bits are the same.
const fn narrow_tail<const N: usize>(rows: usize) -> (usize, usize) {
    let tail = rows % N;
    if N > SMALL_LANES && rows > N && tail <= SMALL_LANES {
        (rows - tail, tail)
    } else {
        (rows, 0)
    }
}

/// Compiled trees (or parts) summed on their own before their sum is added to a row's total
/// (see the module docs): the unit in which a small block's trees are shared among threads.
/// Adding a chunk's sums costs one add per feature and row, next to walking 32 trees.
pub(crate) const TREES_PER_CHUNK: usize = 32;

/// Most memory the chunks' sums of a block shared by trees may take at once (one set of sums
/// per chunk until they are added in order); a block that needs more is shared by rows only.
const MAX_CHUNK_SUMS_BYTES: usize = 64 << 20;

/// Most bytes of one task's rows (their features, the current chunk's sums and their totals)
/// that decide how many rows a task takes: every lane group of a task walks a tree before the
/// next tree, and the more lane groups walk it in a row, the better the CPU predicts the walk's
/// branches, which follow the tree's shape. Measured on a forest of 100 trees of depth 10 (20
/// features, 480 bytes a row), one thread, in one process alternating builds: 512 rows a task
/// ran 1.15× the rows/s of 64 (1.09× on XGBoost, 100 trees of depth 6); with eight lanes, 256
/// rows gave 1.12×, 512 rows 1.20× and 1024 rows 1.08× (their sums no longer stay in the
/// core's own cache).
const TASK_ROW_BYTES: usize = 256 << 10;

/// Most rows per task, however narrow the model.
const MAX_ROWS_PER_TASK: usize = 512;

/// Rows per task for a block of `rows`: as many as [`TASK_ROW_BYTES`] holds (at least
/// [`ROWS_PER_TASK`], at most [`MAX_ROWS_PER_TASK`]), fewer when the block is small so that
/// every thread gets work, in whole lane groups (no task pays for a partial group it could have
/// shared). Tasks never change a row's bits: its sums follow the model's chunks.
fn task_rows<const N: usize>(rows: usize, features: usize, groups: usize, pairs: bool) -> usize {
    let sums = groups.saturating_mul(features).saturating_mul(if pairs { features + 1 } else { 1 });
    let per_row = size_of::<f64>().saturating_mul(features.saturating_add(sums.saturating_mul(2))).max(1);
    let most = (TASK_ROW_BYTES / per_row).clamp(ROWS_PER_TASK, MAX_ROWS_PER_TASK);
    rows_per_task_up_to(rows, most).next_multiple_of(N)
}

/// Values of a 64-byte cache line, the alignment of [`Lanes`].
const VALUES_A_LINE: usize = 64 / size_of::<f64>();

/// One value per row of a lane group, aligned to a cache line: a vector load or store then never
/// straddles two lines.
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C, align(64))]
struct Lanes<const N: usize>([f64; N]);

impl<const N: usize> Default for Lanes<N> {
    fn default() -> Self {
        Lanes([0.0; N])
    }
}

impl<const N: usize> Lanes<N> {
    #[inline(always)]
    fn splat(v: f64) -> Lanes<N> {
        Lanes([v; N])
    }
}

impl<const N: usize> std::ops::Index<usize> for Lanes<N> {
    type Output = f64;
    #[inline(always)]
    fn index(&self, r: usize) -> &f64 {
        &self.0[r]
    }
}

impl<const N: usize> std::ops::IndexMut<usize> for Lanes<N> {
    #[inline(always)]
    fn index_mut(&mut self, r: usize) -> &mut f64 {
        &mut self.0[r]
    }
}

/// Quadrature points that integrate every leaf's polynomial exactly when the tree's longest
/// path has `distinct` features: ⌈d/2⌉ (at least one).
pub(crate) fn exact_points(distinct: usize) -> usize {
    distinct.div_ceil(2).max(1)
}

/// A child of a compiled split.
#[derive(Debug, Clone, Copy)]
enum Child {
    /// Another split (index into `LinearTree::splits`).
    Split(u32),
    /// A leaf, with its value times the tree weight.
    Leaf(f64),
}

/// One internal node, compiled.
#[derive(Debug, Clone, Copy)]
struct Split {
    feature: u32,
    decision: Decision,
    children: [Child; 2],
    /// Cover fractions of the left and right edge.
    z: [f64; 2],
    /// The feature's merged cover fraction on the path above (1 where the path meets it here first).
    z_prev: f64,
    /// The nearest split above on the same feature, and the side of it (0 left, 1 right) this
    /// split lies on; `None` where the path meets the feature here first.
    prev: Option<(u32, u8)>,
    /// Position of the feature among the path's distinct features, in order of first split
    /// (interactions keep one ratio per position).
    slot: u8,
}

/// A tree, or one part of it (see the module docs), compiled for the walk: splits in preorder
/// (a split's ancestors come before it), and the quadrature rule its longest path needs.
#[derive(Debug)]
struct LinearTree {
    /// The model's tree this is (a part of).
    source: usize,
    splits: Vec<Split>,
    /// Quadrature nodes on [0, 1] and weights; ⌈d/2⌉ of them for the tree's longest path.
    t: Vec<f64>,
    w: Vec<f64>,
    /// `−1/(1 − t_k)`: a cold feature's `(o − z)/f` at each node.
    cold_ratio: Vec<f64>,
    /// Per split, `1/f'(t_k)` at each node (K values a split): the same for every row, so
    /// divided once here, not per lane group in the walk. 1 for a first split (unused).
    inv_prev: Vec<f64>,
    /// Deepest split, counting the root as 1.
    depth: usize,
    /// Most distinct features on a path.
    width: usize,
    /// The splits laid out for a row alone ([`row::walk_alone`]), at the first call of one row.
    row: OnceLock<row::RowTree>,
}

/// The point counts `lo..=hi` as a mask of [`leaf_groups`]' bits (bit `k − 1` for `k` points).
fn run_mask(lo: usize, hi: usize) -> u64 {
    (lo..=hi).fold(0u64, |m, k| m | 1u64 << (k - 1))
}

/// Leaves of one tree grouped by the quadrature points their paths need, for the parts of the
/// tree (see the module docs): each group is a run `lo..=hi` of point counts, chosen to make
/// `Σ kept splits × (points + 1)` least (the 1 stands for a split's fixed cost: its direction
/// and coefficients). Returns the runs and, per node, the point counts found under it (bit
/// `k − 1` for `k` points), from which a part's kept splits follow.
fn leaf_groups(tree: &Tree, prep: &PreparedTree) -> (Vec<(usize, usize)>, Vec<u64>) {
    let mut below = vec![0u64; tree.nodes.len()];
    let order = tree.preorder();
    for &i in order.iter().rev() {
        let node = &tree.nodes[i];
        below[i] = if node.is_leaf() {
            // At most MAX_POINTS points: LinearTree::compile refuses more before any part is made.
            1u64 << (exact_points(prep.distinct[i] as usize).min(MAX_POINTS) - 1)
        } else {
            below[node.left as usize] | below[node.right as usize]
        };
    }
    // Splits by the point counts under them.
    let mut splits_by_mask: std::collections::BTreeMap<u64, usize> = std::collections::BTreeMap::new();
    for &i in &order {
        if !tree.nodes[i].is_leaf() {
            *splits_by_mask.entry(below[i]).or_insert(0) += 1;
        }
    }
    let counts: Vec<usize> = (1..=MAX_POINTS).filter(|k| below[0] & (1u64 << (k - 1)) != 0).collect();
    if counts.len() <= 1 {
        return (vec![(counts.first().copied().unwrap_or(1), counts.first().copied().unwrap_or(1))], below);
    }
    let cost = |lo: usize, hi: usize| {
        let mask = run_mask(lo, hi);
        splits_by_mask.iter().filter(|(m, _)| **m & mask != 0).map(|(_, c)| c).sum::<usize>() * (hi + 1)
    };
    // best[j]: the cheapest grouping of the first j point counts, and where its last run starts.
    let mut best = vec![(0usize, 0usize); counts.len() + 1];
    for j in 1..=counts.len() {
        best[j] = (0..j).map(|i| (best[i].0 + cost(counts[i], counts[j - 1]), i)).min().expect("j >= 1");
    }
    let mut runs = Vec::new();
    let mut j = counts.len();
    while j > 0 {
        let i = best[j].1;
        runs.push((counts[i], counts[j - 1]));
        j = i;
    }
    runs.reverse();
    (runs, below)
}

impl LinearTree {
    /// Compiles tree `index` into its parts (see the module docs): one for Banzhaf values,
    /// whose single point serves every path.
    fn parts(tree: &Tree, prep: &PreparedTree, index: usize, of: Index) -> Result<Vec<LinearTree>> {
        let distinct = prep.leaf_path_lengths(tree).max().unwrap_or(0);
        if exact_points(distinct) > MAX_POINTS {
            let instead = match of {
                Index::Shapley => "use fast-v1",
                Index::Banzhaf => "no other engine computes Banzhaf values",
            };
            return Err(Error::Unsupported(format!(
                "linear: tree {index} has a path with {distinct} distinct features (limit {}); {instead}",
                2 * MAX_POINTS
            )));
        }
        if of == Index::Banzhaf {
            return Ok(vec![LinearTree::compile(tree, prep, index, of, |_| true)]);
        }
        let (runs, below) = leaf_groups(tree, prep);
        Ok(runs
            .into_iter()
            .map(|(lo, hi)| {
                let mask = run_mask(lo, hi);
                LinearTree::compile(tree, prep, index, of, |node| below[node] & mask != 0)
            })
            .collect())
    }

    /// Compiles the part of tree `index` whose leaves are those `keep` holds, and whose splits
    /// are those `keep` holds (the splits above a kept leaf); every other child is a zero leaf.
    fn compile(tree: &Tree, prep: &PreparedTree, index: usize, of: Index, keep: impl Fn(usize) -> bool) -> LinearTree {
        let distinct = tree
            .nodes
            .iter()
            .zip(&prep.distinct)
            .enumerate()
            .filter(|(i, (n, d))| n.is_leaf() && **d != UNREACHABLE && keep(*i))
            .map(|(_, (_, d))| *d as usize)
            .max()
            .unwrap_or(0);
        let (t, w) = match of {
            Index::Shapley => gauss_legendre(exact_points(distinct)),
            // The Banzhaf value is the multilinear extension's derivative at 1/2 itself: one
            // point, weight 1, exact for any path.
            Index::Banzhaf => (vec![0.5], vec![1.0]),
        };
        let mut splits = Vec::new();
        let mut split_of = vec![u32::MAX; tree.nodes.len()];
        let mut model_node = Vec::new();
        let mut depth = 0;
        // (node, depth, path: (feature, merged fraction, last split on it, side below it))
        let mut stack: Vec<(usize, usize, Vec<PathStep>)> = vec![(0, 1, Vec::new())];
        while let Some((i, d, path)) = stack.pop() {
            let node = &tree.nodes[i];
            if node.is_leaf() || !keep(i) {
                continue;
            }
            let me = splits.len() as u32;
            split_of[i] = me;
            model_node.push(i);
            depth = depth.max(d);
            let existing = path.iter().position(|e| e.0 == node.feature);
            let (z_prev, prev) = match existing {
                Some(e) => (path[e].1, Some((path[e].2, path[e].3))),
                None => (1.0, None),
            };
            splits.push(Split {
                feature: node.feature,
                decision: Decision::of(tree, i),
                children: [Child::Leaf(0.0); 2],
                z: prep.ratios[i],
                z_prev,
                prev,
                slot: existing.unwrap_or(path.len()) as u8,
            });
            for side in [1u8, 0] {
                let mut next = path.clone();
                let entry = (node.feature, z_prev * prep.ratios[i][side as usize], me, side);
                match existing {
                    Some(e) => next[e] = entry,
                    None => next.push(entry),
                }
                let child = if side == 0 { node.left } else { node.right };
                stack.push((child as usize, d + 1, next));
            }
        }
        for (split, &i) in splits.iter_mut().zip(&model_node) {
            let node = &tree.nodes[i];
            for (slot, child) in split.children.iter_mut().zip([node.left, node.right]) {
                let c = child as usize;
                *slot = match (tree.nodes[c].is_leaf(), keep(c)) {
                    (_, false) => Child::Leaf(0.0),
                    (true, true) => Child::Leaf(prep.value[c]),
                    (false, true) => Child::Split(split_of[c]),
                };
            }
        }
        let cold_ratio = t.iter().map(|t| -1.0 / (1.0 - t)).collect();
        let inv_prev = splits
            .iter()
            .flat_map(|s| t.iter().map(move |&t| if s.prev.is_some() { 1.0 / (s.z_prev + (1.0 - s.z_prev) * t) } else { 1.0 }))
            .collect();
        LinearTree { source: index, splits, t, w, cold_ratio, inv_prev, depth, width: distinct, row: OnceLock::new() }
    }

    fn points(&self) -> usize {
        self.t.len()
    }
}

/// The `linear` engine: compiled trees.
pub(crate) struct Linear {
    prepared: Arc<PreparedModel>,
    trees: Vec<LinearTree>,
    /// Shapley values (the quadrature rule) or Banzhaf values (the one point t = 1/2).
    index: Index,
    /// Interactions only, at their first call: per chunk, the pair sums its walks can write
    /// ([`Linear::pair_entries`]).
    pair_entries: OnceLock<Vec<PairEntries>>,
    /// A row alone, SHAP values only, at its first call: per chunk, the trees it walks eight at
    /// a time ([`tree_lanes`]).
    row_plans: OnceLock<Vec<tree_lanes::ChunkPlan>>,
}

/// The entries of a lane group's pair sums (`groups × F × F`, entry `group·F·F + j·F + i`) that
/// the walks of one chunk of trees can write, in increasing order; or all of them, where the
/// list would hold more than half (one sweep over all is then as cheap).
///
/// Why: a task adds each chunk's pair sums to its totals and clears them for the next chunk.
/// With many features most pairs never meet on a path of a chunk's trees (127 features, trees
/// of depth 6: a path pairs a split with at most five features above it), and sweeping all
/// `F × F` sums twice a chunk was most of the time of interaction values (with writing them
/// out). An entry no walk writes stays exactly +0.0, and adding +0.0 leaves a total unchanged
/// (a total that starts at +0.0 is never −0.0), so skipping such entries keeps the bits.
#[derive(Debug)]
enum PairEntries {
    All,
    Some(Vec<u32>),
}

impl Linear {
    /// The engine for Shapley values.
    pub fn new(prepared: Arc<PreparedModel>) -> Result<Linear> {
        Linear::with_index(prepared, Index::Shapley)
    }

    /// The engine for `index`'s values: Shapley values integrate the path's polynomial over
    /// [0, 1], Banzhaf values take it at 1/2 (see the module docs).
    pub fn with_index(prepared: Arc<PreparedModel>, index: Index) -> Result<Linear> {
        let parts = prepared
            .model
            .trees()
            .iter()
            .zip(&prepared.trees)
            .enumerate()
            .map(|(t, (tree, prep))| LinearTree::parts(tree, prep, t, index))
            .collect::<Result<Vec<_>>>()?;
        let trees = parts.into_iter().flatten().collect();
        let linear = Linear { prepared, trees, index, pair_entries: OnceLock::new(), row_plans: OnceLock::new() };
        linear.check_scratch(false)?;
        Ok(linear)
    }
}

/// Per-lane coefficients of one split for a lane group (see the module docs): child c's factor
/// is `g_c = s·(a_c + c_c·t)` and its term `e_c = s·(c_c − β·g_c)`, with `s = 1/f'(t)` in lanes
/// where a repeated feature was hot above and 1 elsewhere.
#[derive(Clone, Copy)]
struct Coefficients<const N: usize> {
    a: [Lanes<N>; 2],
    c: [Lanes<N>; 2],
    beta: Lanes<N>,
    /// 1 in lanes where a repeated feature was hot above (their factors are divided by f'), else 0.
    sel: Lanes<N>,
    /// Whether the split repeats a feature met above (else `s = 1` and `β = 0` in every lane).
    repeated: bool,
}

impl<const N: usize> Default for Coefficients<N> {
    fn default() -> Self {
        Coefficients { a: [Lanes::default(); 2], c: [Lanes::default(); 2], beta: Lanes::default(), sel: Lanes::default(), repeated: false }
    }
}

#[inline(always)]
fn bit(mask: u32, lane: usize) -> f64 {
    ((mask >> lane) & 1) as f64
}

impl<const N: usize> Coefficients<N> {
    /// `left`: lanes going left; `hot_above`: lanes where every split above on the same
    /// feature was followed (all lanes for a first split).
    #[inline(always)]
    fn set(&mut self, split: &Split, left: u32, hot_above: u32) {
        let [zl, zr] = split.z;
        self.repeated = split.prev.is_some();
        if !self.repeated {
            for r in 0..N {
                let l = bit(left, r);
                self.a[0][r] = zl;
                self.a[1][r] = zr;
                self.c[0][r] = l - zl;
                self.c[1][r] = (1.0 - l) - zr;
            }
            return;
        }
        let zp = split.z_prev;
        for r in 0..N {
            let (l, h) = (bit(left, r), bit(hot_above, r));
            // Hot above: fractions merge with the one above. Cold above: the edge fraction only.
            let merge = 1.0 + h * (zp - 1.0);
            let (al, ar) = (zl * merge, zr * merge);
            self.a[0][r] = al;
            self.a[1][r] = ar;
            self.c[0][r] = h * (l - al);
            self.c[1][r] = h * ((1.0 - l) - ar);
            self.beta[r] = h * (1.0 - zp);
            self.sel[r] = h;
        }
    }

    /// Child `side`'s factor at quadrature node `t` of a first split.
    #[inline(always)]
    fn first_factor(&self, side: usize, t: f64) -> Lanes<N> {
        let (a, c) = (&self.a[side], &self.c[side]);
        let mut g = Lanes::<N>::default();
        for r in 0..N {
            g[r] = c[r].mul_add(t, a[r]);
        }
        g
    }

    /// Child `side`'s factor and term at quadrature node `t` of a repeated split, with
    /// `inv = 1/f'(t)`.
    #[inline(always)]
    fn repeated_factor_term(&self, side: usize, t: f64, inv: f64) -> (Lanes<N>, Lanes<N>) {
        let (a, c) = (&self.a[side], &self.c[side]);
        let mut g = Lanes::<N>::default();
        let mut e = Lanes::<N>::default();
        for r in 0..N {
            let s = 1.0 + self.sel[r] * (inv - 1.0);
            g[r] = s * c[r].mul_add(t, a[r]);
            e[r] = s * (-self.beta[r]).mul_add(g[r], c[r]);
        }
        (g, e)
    }
}

/// Per-task buffers, reused across trees and blocks.
#[derive(Default)]
struct Scratch<const N: usize> {
    /// Feature values of the task's lane groups, feature-major within a group.
    xs: Vec<Lanes<N>>,
    /// The current chunk's attributions per lane group, output group and feature.
    phi: Vec<Lanes<N>>,
    /// Interactions only: the current chunk's sums, per lane group and output group, `F × F`
    /// sums `P[j][i]` of the terms of splits on j times the ratio `(o_i − z_i)/f_i` of a
    /// feature i above them.
    pairs: Vec<Lanes<N>>,
    /// The task's totals of `phi` and `pairs`: every chunk's sums added in model order.
    total_phi: Vec<Lanes<N>>,
    total_pairs: Vec<Lanes<N>>,
    /// Per split of the current tree: (lanes going left, lanes hot above on its feature).
    masks: Vec<(u32, u32)>,
    walk: WalkStack<N>,
    /// The one-row walk's values ([`row::walk_alone`]).
    row: row::RowScratch,
    /// The values of a row alone's walks of trees in the lanes ([`tree_lanes`]), and each
    /// group's terms until they are added in the chunk's order.
    group: tree_lanes::GroupScratch,
    group_terms: Vec<Vec<f64>>,
}

/// The explicit stack of the walk, one level per depth.
#[derive(Default)]
struct WalkStack<const N: usize> {
    split: Vec<u32>,
    /// Children done (0, 1 or 2).
    stage: Vec<u8>,
    coefficients: Vec<Coefficients<N>>,
    /// `LEVEL_SLOTS·K` lanes per level: A, the children's B, and (repeated splits) their
    /// factors and terms.
    values: Vec<Lanes<N>>,
    /// Interactions only: the split's terms per quadrature node (K lanes).
    terms: Vec<Lanes<N>>,
    /// Where the root's B goes (K lanes): nothing reads it.
    sink: Vec<Lanes<N>>,
    /// Interactions only: the path's distinct features in order of first split (`width`), and
    /// each one's `(o − z)/f` at every node (`width·K`), for the walk's current level. Going
    /// down changes one entry, so they are kept once, not per level: a level's own entries are
    /// those below its `path_len`, and the one entry a repeated split overwrites below it is
    /// saved in `path_saved` (K lanes per level) and put back on the way up.
    path_features: Vec<u32>,
    path_len: Vec<usize>,
    path_ratios: Vec<Lanes<N>>,
    path_saved: Vec<Lanes<N>>,
}

/// Slots of K lanes per level of [`WalkStack::<N>::values`].
const LEVEL_SLOTS: usize = 7;
const A: usize = 0;
const B: [usize; 2] = [1, 2];
const G: [usize; 2] = [3, 4];
const E: [usize; 2] = [5, 6];

impl<const N: usize> WalkStack<N> {
    /// Sizes the stack for a tree; the interaction buffers only when `pairs`.
    fn reserve(&mut self, levels: usize, points: usize, width: usize, pairs: bool) {
        self.split.resize(levels, 0);
        self.stage.resize(levels, 0);
        self.coefficients.resize(levels, Coefficients::<N>::default());
        self.values.resize(levels * LEVEL_SLOTS * points, Lanes::<N>::default());
        self.terms.resize(points, Lanes::<N>::default());
        self.sink.resize(points, Lanes::<N>::default());
        if pairs {
            self.path_features.resize(width, 0);
            self.path_len.resize(levels, 0);
            self.path_ratios.resize(width * points, Lanes::<N>::default());
            self.path_saved.resize(levels * points, Lanes::<N>::default());
        }
    }

    /// Bytes [`reserve`](Self::reserve) takes for a tree.
    fn bytes(levels: usize, points: usize, width: usize, pairs: bool) -> usize {
        let per_level = size_of::<Coefficients<N>>() + 5 + LEVEL_SLOTS * points * size_of::<Lanes<N>>();
        let lanes = size_of::<Lanes<N>>();
        let pair_level = if pairs { 8 + points * lanes } else { 0 };
        let pair_path = if pairs { width.saturating_mul(4 + points * lanes) } else { 0 };
        // The terms and the sink: K lanes each.
        let per_tree = 2 * points * lanes;
        levels.saturating_mul(per_level + pair_level).saturating_add(pair_path).saturating_add(per_tree)
    }
}

/// Most scratch memory one thread's walk may take (the stack grows with a tree's depth times
/// its quadrature points; for interactions, times its path width too).
pub(crate) const MAX_WALK_BYTES: usize = 256 << 20;

impl Linear {
    /// Refuses a tree whose walk would need more than [`MAX_WALK_BYTES`] per thread.
    fn check_scratch(&self, pairs: bool) -> Result<()> {
        for (t, lt) in self.trees.iter().enumerate() {
            let bytes = WalkStack::<LANES>::bytes(lt.depth + 1, lt.points(), lt.width, pairs);
            if bytes > MAX_WALK_BYTES {
                let what = if pairs { "interaction values" } else { "SHAP values" };
                return Err(Error::ResourceExhausted(format!(
                    "linear: tree {t} (depth {}, {} distinct features on a path) needs {} MiB of scratch per thread for {what}, over the bound of {} MiB",
                    lt.depth,
                    lt.width,
                    bytes >> 20,
                    MAX_WALK_BYTES >> 20
                )));
            }
        }
        Ok(())
    }
}

/// A task's rows and their sums: the first `wide_rows` in lane groups of `N` and, where
/// [`narrow_tail`] gives the rows one, the last `tail_rows` (1 to [`SMALL_LANES`]) in one narrow
/// lane group, which walks each tree right after the wide groups.
#[derive(Default)]
struct TaskScratch<const N: usize> {
    wide_rows: usize,
    tail_rows: usize,
    wide: Scratch<N>,
    tail: Scratch<SMALL_LANES>,
}

impl<const N: usize> TaskScratch<N> {
    /// Lane groups of `N` rows.
    fn wide_groups(&self) -> usize {
        self.wide_rows.div_ceil(N)
    }

    /// The wide groups' scratch and, where the rows have one, the narrow group's.
    fn scratches_mut(&mut self) -> (&mut Scratch<N>, Option<&mut Scratch<SMALL_LANES>>) {
        (&mut self.wide, (self.tail_rows > 0).then_some(&mut self.tail))
    }
}

/// Phase one for a lane group: every split's lanes going left, and lanes where the splits above
/// on the same feature were all followed. Splits are in preorder, so `prev` is already done.
///
/// # Safety
/// `AVX2` only where the CPU has AVX2.
#[inline(always)]
unsafe fn directions<const AVX2: bool, const N: usize>(tree: &Tree, lt: &LinearTree, xs: &[Lanes<N>], masks: &mut Vec<(u32, u32)>) {
    masks.clear();
    for split in &lt.splits {
        let xs = &xs[split.feature as usize].0;
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller's promise.
        let left = if AVX2 { unsafe { split.decision.lanes_left_avx2(tree, xs) } } else { split.decision.lanes_left(tree, xs) };
        #[cfg(not(target_arch = "x86_64"))]
        let left = split.decision.lanes_left(tree, xs);
        let hot = match split.prev {
            None => all_lanes::<N>(),
            Some((p, side)) => {
                let (pl, ph) = masks[p as usize];
                ph & if side == 0 { pl } else { !pl & all_lanes::<N>() }
            }
        };
        masks.push((left, hot));
    }
}

/// Every lane's bit set, for `N` lanes (at most 32).
const fn all_lanes<const N: usize>() -> u32 {
    if N >= 32 {
        u32::MAX
    } else {
        (1 << N) - 1
    }
}

/// Phase two for a lane group: the walk, adding every split's terms to `phi` (per feature) and,
/// with `PAIRS`, its pair terms to `pairs` (`F × F`).
#[inline(always)]
fn walk<const PAIRS: bool, const K: usize, const N: usize>(
    lt: &LinearTree,
    masks: &[(u32, u32)],
    phi: &mut [Lanes<N>],
    pairs: &mut [Lanes<N>],
    s: &mut WalkStack<N>,
) {
    // K > 0: a copy compiled for trees of K points, its loops over them unrolled.
    debug_assert!(K == 0 || K == lt.points());
    let k_n = if K > 0 { K } else { lt.points() };
    let (t, w) = (&lt.t[..], &lt.w[..]);
    let WalkStack { split: at_split, stage, coefficients, values, terms, sink, path_features, path_len, path_ratios, path_saved, .. } = s;
    let slot = |level: usize, slot: usize| (level * LEVEL_SLOTS + slot) * k_n;
    let f = phi.len();
    // The root's A is the quadrature weights, so the terms come out integrated.
    for k in 0..k_n {
        values[slot(0, A) + k] = Lanes::<N>::splat(w[k]);
    }
    at_split[0] = 0;
    stage[0] = 0;
    if PAIRS {
        // The path buffers are sized only for interactions.
        path_len[0] = 0;
    }
    let mut d = 0usize;
    loop {
        let p = at_split[d] as usize;
        let split = &lt.splits[p];
        if stage[d] == 0 {
            let co = &mut coefficients[d];
            let (left, hot) = masks[p];
            co.set(split, left, hot);
            if co.repeated {
                let inv_prev = &lt.inv_prev[p * k_n..(p + 1) * k_n];
                for k in 0..k_n {
                    for side in 0..2 {
                        let (g, e) = co.repeated_factor_term(side, t[k], inv_prev[k]);
                        values[slot(d, G[side]) + k] = g;
                        values[slot(d, E[side]) + k] = e;
                    }
                }
            } else if let [Child::Leaf(vl), Child::Leaf(vr)] = split.children {
                // Two leaves under a first split: the terms do not depend on t, and
                // B = Σ_c (a_c + c_c·t)·v_c = Z + t·E.
                let mut e = Lanes::<N>::default();
                let mut z = Lanes::<N>::default();
                for r in 0..N {
                    e[r] = co.c[0][r].mul_add(vl, co.c[1][r] * vr);
                    z[r] = co.a[0][r].mul_add(vl, co.a[1][r] * vr);
                }
                let mut a_sum = Lanes::<N>::default();
                for k in 0..k_n {
                    let a = values[slot(d, A) + k];
                    let mut b = Lanes::<N>::default();
                    for r in 0..N {
                        a_sum[r] += a[r];
                        b[r] = e[r].mul_add(t[k], z[r]);
                    }
                    if d > 0 {
                        values[slot(d - 1, B[stage[d - 1] as usize - 1]) + k] = b;
                    }
                    if PAIRS {
                        for r in 0..N {
                            terms[k][r] = a[r] * e[r];
                        }
                    }
                }
                let out = &mut phi[split.feature as usize];
                for r in 0..N {
                    out[r] += a_sum[r] * e[r];
                }
                if PAIRS {
                    add_pairs(k_n, f, split.feature, terms, &path_features[..path_len[d]], path_ratios, pairs);
                }
                if d == 0 {
                    return;
                }
                d -= 1;
                if PAIRS {
                    restore_path(lt, at_split[d], d, path_len, path_ratios, path_saved);
                }
                continue;
            }
        }
        let co = &coefficients[d];
        // Descend into the next child that is a split; a leaf child's B is its value.
        let mut descended = false;
        while stage[d] < 2 {
            let side = stage[d] as usize;
            stage[d] += 1;
            match split.children[side] {
                Child::Leaf(v) => {
                    let b = slot(d, B[side]);
                    values[b..b + k_n].fill(Lanes::<N>::splat(v));
                }
                Child::Split(c) => {
                    // The child's A: this level's A times the child's factor. (Interactions
                    // run faster with the loop indexed, SHAP values with it sliced: measured.)
                    if PAIRS {
                        for k in 0..k_n {
                            let g = if co.repeated { values[slot(d, G[side]) + k] } else { co.first_factor(side, t[k]) };
                            let a = values[slot(d, A) + k];
                            let mut child = Lanes::<N>::default();
                            for r in 0..N {
                                child[r] = a[r] * g[r];
                            }
                            values[slot(d + 1, A) + k] = child;
                        }
                    } else {
                        let (level, below) = values.split_at_mut(slot(d + 1, A));
                        let (a_here, a_child) = (&level[slot(d, A)..slot(d, A) + k_n], &mut below[..k_n]);
                        if co.repeated {
                            let g = &level[slot(d, G[side])..slot(d, G[side]) + k_n];
                            for ((child, a), g) in a_child.iter_mut().zip(a_here).zip(g) {
                                for r in 0..N {
                                    child[r] = a[r] * g[r];
                                }
                            }
                        } else {
                            for ((child, a), &t) in a_child.iter_mut().zip(a_here).zip(t) {
                                let g = co.first_factor(side, t);
                                for r in 0..N {
                                    child[r] = a[r] * g[r];
                                }
                            }
                        }
                    }
                    if PAIRS {
                        descend_path(lt, split, side, masks[p], d, path_features, path_len, path_ratios, path_saved);
                    }
                    at_split[d + 1] = c;
                    stage[d + 1] = 0;
                    descended = true;
                    break;
                }
            }
        }
        if descended {
            d += 1;
            continue;
        }
        // Both children's B are in: this split's terms, and its own B for the parent. At node
        // k, `inner` is the terms before A, `e_L·B_L + e_R·B_R`. A first split's terms are its
        // slopes (`e_c = c_c`), so with `q = c_L·B_L + c_R·B_R` its B is
        // `Σ_c (a_c + c_c·t)·B_c = (a_L·B_L + a_R·B_R) + t·q`: one product shared by both.
        let mut acc = Lanes::<N>::default();
        if PAIRS {
            // Interactions keep each node's terms. They run faster with the loop indexed and the
            // kind of split tested per node, SHAP values with it sliced and hoisted (measured);
            // the arithmetic is the same, so the two give the same bits.
            let parent_b = if d > 0 { Some(slot(d - 1, B[stage[d - 1] as usize - 1])) } else { None };
            for k in 0..k_n {
                let (bl, br, a) = (values[slot(d, B[0]) + k], values[slot(d, B[1]) + k], values[slot(d, A) + k]);
                let mut b = Lanes::<N>::default();
                let mut inner = Lanes::<N>::default();
                if co.repeated {
                    let (gl, el, gr, er) =
                        (values[slot(d, G[0]) + k], values[slot(d, E[0]) + k], values[slot(d, G[1]) + k], values[slot(d, E[1]) + k]);
                    for r in 0..N {
                        b[r] = gl[r].mul_add(bl[r], gr[r] * br[r]);
                        inner[r] = el[r].mul_add(bl[r], er[r] * br[r]);
                    }
                } else {
                    let ([al, ar], [cl, cr]) = (&co.a, &co.c);
                    for r in 0..N {
                        inner[r] = cl[r].mul_add(bl[r], cr[r] * br[r]);
                        b[r] = inner[r].mul_add(t[k], al[r].mul_add(bl[r], ar[r] * br[r]));
                    }
                }
                let mut term = Lanes::<N>::default();
                for r in 0..N {
                    acc[r] = a[r].mul_add(inner[r], acc[r]);
                    term[r] = a[r] * inner[r];
                }
                terms[k] = term;
                if let Some(parent_b) = parent_b {
                    values[parent_b + k] = b;
                }
            }
        } else {
            let (upper, level) = values.split_at_mut(slot(d, 0));
            let part = |s: usize| &level[s * k_n..(s + 1) * k_n];
            // The root's B has no parent to go to: it goes to the sink.
            let parent_b = if d > 0 {
                let at = slot(d - 1, B[stage[d - 1] as usize - 1]);
                &mut upper[at..at + k_n]
            } else {
                &mut sink[..k_n]
            };
            let (a_s, bl_s, br_s) = (part(A), part(B[0]), part(B[1]));
            if co.repeated {
                let (gl_s, gr_s, el_s, er_s) = (part(G[0]), part(G[1]), part(E[0]), part(E[1]));
                for k in 0..k_n {
                    let (bl, br, gl, gr, el, er) = (&bl_s[k], &br_s[k], &gl_s[k], &gr_s[k], &el_s[k], &er_s[k]);
                    let mut b = Lanes::<N>::default();
                    let mut inner = Lanes::<N>::default();
                    for r in 0..N {
                        b[r] = gl[r].mul_add(bl[r], gr[r] * br[r]);
                        inner[r] = el[r].mul_add(bl[r], er[r] * br[r]);
                    }
                    accumulate(&mut acc, &a_s[k], &inner);
                    parent_b[k] = b;
                }
            } else {
                let ([al, ar], [cl, cr]) = (&co.a, &co.c);
                for k in 0..k_n {
                    let (bl, br) = (&bl_s[k], &br_s[k]);
                    let mut b = Lanes::<N>::default();
                    let mut inner = Lanes::<N>::default();
                    for r in 0..N {
                        inner[r] = cl[r].mul_add(bl[r], cr[r] * br[r]);
                        b[r] = inner[r].mul_add(t[k], al[r].mul_add(bl[r], ar[r] * br[r]));
                    }
                    accumulate(&mut acc, &a_s[k], &inner);
                    parent_b[k] = b;
                }
            }
        }
        let out = &mut phi[split.feature as usize];
        for r in 0..N {
            out[r] += acc[r];
        }
        if PAIRS {
            add_pairs(k_n, f, split.feature, terms, &path_features[..path_len[d]], path_ratios, pairs);
        }
        if d == 0 {
            return;
        }
        d -= 1;
        if PAIRS {
            restore_path(lt, at_split[d], d, path_len, path_ratios, path_saved);
        }
    }
}

/// `acc += a · inner`, lane by lane. A function, not a closure: a closure in the walk is not
/// always inlined (with sixteen lanes the general copy's was not), and out of line it has no FMA,
/// so each `mul_add` became a call to the software `fma` (15x slower on depth-16 trees).
#[inline(always)]
fn accumulate<const N: usize>(acc: &mut Lanes<N>, a: &Lanes<N>, inner: &Lanes<N>) {
    for r in 0..N {
        acc[r] = a[r].mul_add(inner[r], acc[r]);
    }
}

/// Interactions: a split's terms (`terms`, one per quadrature node) times the ratio of each
/// other feature on the path above it (`path_features`), into `pairs` (`f × f`). A function,
/// not a closure, so that it is inlined into each compiled copy of the walk with its FMA.
#[inline(always)]
fn add_pairs<const N: usize>(
    k_n: usize,
    f: usize,
    feature: u32,
    terms: &[Lanes<N>],
    path_features: &[u32],
    path_ratios: &[Lanes<N>],
    pairs: &mut [Lanes<N>],
) {
    for (i, &fi) in path_features.iter().enumerate() {
        if fi == feature {
            continue; // the split's own feature, met above
        }
        let ratios = &path_ratios[i * k_n..(i + 1) * k_n];
        let mut acc = Lanes::<N>::default();
        for k in 0..k_n {
            for r in 0..N {
                acc[r] = ratios[k][r].mul_add(terms[k][r], acc[r]);
            }
        }
        let out = &mut pairs[feature as usize * f + fi as usize];
        for r in 0..N {
            out[r] += acc[r];
        }
    }
}

/// Interactions: the path features below `split` (level `d`) toward child `side`, at level
/// `d + 1`: the parent's, with the split's feature set to its new ratio `(o − z)/f`, which is
/// `(1 − z)/(z + (1 − z)·t)` in lanes that follow every split on it and `−1/(1 − t)` elsewhere.
/// A repeated feature's ratio at level `d` is saved first, for [`restore_path`].
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn descend_path<const N: usize>(
    lt: &LinearTree,
    split: &Split,
    side: usize,
    (left, hot): (u32, u32),
    d: usize,
    path_features: &mut [u32],
    path_len: &mut [usize],
    path_ratios: &mut [Lanes<N>],
    path_saved: &mut [Lanes<N>],
) {
    let k_n = lt.points();
    let n = path_len[d];
    let at = split.slot as usize;
    let ratios = &mut path_ratios[at * k_n..(at + 1) * k_n];
    if at < n {
        path_saved[d * k_n..(d + 1) * k_n].copy_from_slice(ratios);
    }
    path_features[at] = split.feature;
    path_len[d + 1] = n.max(at + 1);
    let follows = hot & if side == 0 { left } else { !left };
    let z = split.z_prev * split.z[side];
    for (k, out) in ratios.iter_mut().enumerate() {
        let (hot_ratio, cold_ratio) = ((1.0 - z) / (z + (1.0 - z) * lt.t[k]), lt.cold_ratio[k]);
        for r in 0..N {
            out[r] = if (follows >> r) & 1 == 1 { hot_ratio } else { cold_ratio };
        }
    }
}

/// Interactions, back at level `d` from a child of its split (model split `split`): puts back
/// the ratio of the split's feature if the split repeats it (see [`descend_path`]).
#[inline(always)]
fn restore_path<const N: usize>(lt: &LinearTree, split: u32, d: usize, path_len: &[usize], path_ratios: &mut [Lanes<N>], path_saved: &[Lanes<N>]) {
    let k_n = lt.points();
    let at = lt.splits[split as usize].slot as usize;
    if at < path_len[d] {
        path_ratios[at * k_n..(at + 1) * k_n].copy_from_slice(&path_saved[d * k_n..(d + 1) * k_n]);
    }
}

/// One task's rows (`groups` lane groups, already in `s.xs`): every tree, tree-major.
///
/// # Safety
/// `AVX2` only where the CPU has AVX2 (the copies compiled with it).
#[inline(always)]
unsafe fn explain_task<const PAIRS: bool, const AVX2: bool, const N: usize>(
    p: &PreparedModel,
    trees: &[LinearTree],
    groups: usize,
    s: &mut Scratch<N>,
    mut tail: Option<&mut Scratch<SMALL_LANES>>,
    plan: Option<&tree_lanes::ChunkPlan>,
) {
    if let Some(plan) = plan.filter(|_| groups == 1) {
        // A row alone (one lane group of one, SHAP values): the groups' walks first, then
        // every tree's terms in the chunk's order (see `tree_lanes`).
        debug_assert!(N == 1 && !PAIRS && tail.is_none() && plan.place.len() == trees.len());
        let (f, model) = (p.model.num_features(), p.model.trees());
        s.group_terms.resize_with(plan.groups.len(), Vec::new);
        for (group, terms) in plan.groups.iter().zip(&mut s.group_terms) {
            group.walk(model, &s.xs[..f], terms, &mut s.group);
        }
        for (lt, place) in trees.iter().zip(&plan.place) {
            match *place {
                Some((g, member)) => {
                    let at = model[lt.source].group;
                    plan.groups[g as usize].add_terms(member as usize, &s.group_terms[g as usize], &mut s.phi[at * f..(at + 1) * f]);
                }
                // SAFETY: the caller's promise.
                None if !lt.splits.is_empty() => unsafe { walk_points::<PAIRS, AVX2, N>(p, lt, groups, s) },
                None => {}
            }
        }
        return;
    }
    for lt in trees {
        if lt.splits.is_empty() {
            continue; // a lone leaf attributes nothing
        }
        // SAFETY (both): the caller's promise.
        unsafe { walk_points::<PAIRS, AVX2, N>(p, lt, groups, s) };
        // The narrow group right after the wide ones, while the tree's splits are still in the
        // core's caches: a deep tree's (a megabyte) are not when a second pass comes back to
        // them (100 trees of depth 16: a narrow group in a pass of its own cost 0.8 of a wide
        // one, 36 against 45 ms of CPU on two threads, not the 0.6 of a cached tree).
        if let Some(tail) = tail.as_deref_mut() {
            unsafe { walk_points::<PAIRS, AVX2, SMALL_LANES>(p, lt, 1, tail) };
        }
    }
}

/// Every lane group through one compiled tree, in the copy of the walk for its point count.
///
/// # Safety
/// `AVX2` only where the CPU has AVX2.
#[inline(always)]
unsafe fn walk_points<const PAIRS: bool, const AVX2: bool, const N: usize>(p: &PreparedModel, lt: &LinearTree, groups: usize, s: &mut Scratch<N>) {
    let (f, g) = (p.model.num_features(), p.model.num_groups());
    let tree = &p.model.trees()[lt.source];
    // A row alone walks flat, without the stack.
    if !walks_flat::<PAIRS, N>(lt.points()) {
        s.walk.reserve(lt.depth + 1, lt.points(), lt.width, PAIRS);
    }
    // SHAP values walk a copy compiled for the tree's point count, up to 8 (paths of up to
    // 16 distinct features, XGBoost's max_depth 16): its loops unrolled and its offsets
    // constant, up to 14 % faster than the general copy (measured on a noisy machine; 7 and
    // 8 points together with `narrow_tail`: +6 % on 1000 trees of depth 16, 2 threads), with
    // the same arithmetic and so the same bits.
    // SAFETY (every arm): the caller's promise.
    unsafe {
        match (PAIRS, lt.points()) {
            (false, 1) => walk_tree::<PAIRS, 1, AVX2, N>(tree, lt, groups, f, g, s),
            (false, 2) => walk_tree::<PAIRS, 2, AVX2, N>(tree, lt, groups, f, g, s),
            (false, 3) => walk_tree::<PAIRS, 3, AVX2, N>(tree, lt, groups, f, g, s),
            (false, 4) => walk_tree::<PAIRS, 4, AVX2, N>(tree, lt, groups, f, g, s),
            (false, 5) => walk_tree::<PAIRS, 5, AVX2, N>(tree, lt, groups, f, g, s),
            (false, 6) => walk_tree::<PAIRS, 6, AVX2, N>(tree, lt, groups, f, g, s),
            (false, 7) => walk_tree::<PAIRS, 7, AVX2, N>(tree, lt, groups, f, g, s),
            (false, 8) => walk_tree::<PAIRS, 8, AVX2, N>(tree, lt, groups, f, g, s),
            _ => walk_tree::<PAIRS, 0, AVX2, N>(tree, lt, groups, f, g, s),
        }
    }
}

/// Every lane group through one compiled tree (`K` as in [`walk`]).
///
/// # Safety
/// `AVX2` only where the CPU has AVX2.
#[inline(always)]
unsafe fn walk_tree<const PAIRS: bool, const K: usize, const AVX2: bool, const N: usize>(
    tree: &Tree,
    lt: &LinearTree,
    groups: usize,
    f: usize,
    g: usize,
    s: &mut Scratch<N>,
) {
    for lane_group in 0..groups {
        let xs = &s.xs[lane_group * f..(lane_group + 1) * f];
        let at = lane_group * g + tree.group;
        let phi = &mut s.phi[at * f..(at + 1) * f];
        if walks_flat::<PAIRS, N>(K) {
            row::walk_alone::<K, N>(&row::RowWalk { tree, lt, xs }, phi, &mut s.row);
            continue;
        }
        // SAFETY: the caller's promise.
        unsafe { directions::<AVX2, N>(tree, lt, xs, &mut s.masks) };
        let pairs = if PAIRS { &mut s.pairs[at * f * f..(at + 1) * f * f] } else { &mut [][..] };
        walk::<PAIRS, K, N>(lt, &s.masks, phi, pairs, &mut s.walk);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma")]
unsafe fn explain_task_avx512<const PAIRS: bool, const N: usize>(
    p: &PreparedModel,
    trees: &[LinearTree],
    groups: usize,
    s: &mut Scratch<N>,
    tail: Option<&mut Scratch<SMALL_LANES>>,
    plan: Option<&tree_lanes::ChunkPlan>,
) {
    // SAFETY: AVX-512F implies AVX2.
    unsafe { explain_task::<PAIRS, true, N>(p, trees, groups, s, tail, plan) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn explain_task_avx2<const PAIRS: bool, const N: usize>(
    p: &PreparedModel,
    trees: &[LinearTree],
    groups: usize,
    s: &mut Scratch<N>,
    tail: Option<&mut Scratch<SMALL_LANES>>,
    plan: Option<&tree_lanes::ChunkPlan>,
) {
    // SAFETY: this copy runs only where the CPU has AVX2.
    unsafe { explain_task::<PAIRS, true, N>(p, trees, groups, s, tail, plan) }
}

/// Which compiled copy of the walk this CPU runs (decided once): `groups` lane groups of `s`
/// and, each tree after them, the one of `tail`.
fn dispatch<const PAIRS: bool, const N: usize>(
    p: &PreparedModel,
    trees: &[LinearTree],
    groups: usize,
    s: &mut Scratch<N>,
    tail: Option<&mut Scratch<SMALL_LANES>>,
    plan: Option<&tree_lanes::ChunkPlan>,
) {
    #[cfg(target_arch = "x86_64")]
    match simd_level() {
        // SAFETY: the CPU has the features (`simd_level` detected them).
        SimdLevel::Avx512 => return unsafe { explain_task_avx512::<PAIRS, N>(p, trees, groups, s, tail, plan) },
        // SAFETY: as above.
        SimdLevel::Avx2 => return unsafe { explain_task_avx2::<PAIRS, N>(p, trees, groups, s, tail, plan) },
        SimdLevel::Portable => {}
    }
    // SAFETY: the portable copy needs no CPU feature.
    unsafe { explain_task::<PAIRS, false, N>(p, trees, groups, s, tail, plan) }
}

/// Adds `part` to `total`, lane by lane.
fn add_lanes<const N: usize>(total: &mut [Lanes<N>], part: &[Lanes<N>]) {
    for (t, p) in total.iter_mut().zip(part) {
        for r in 0..N {
            t[r] += p[r];
        }
    }
}

/// Adds the sums of a chunk in `s` to its totals: `phi`, and the pairs `entries` lists (none
/// for SHAP values), which it clears for the next chunk.
fn add_chunk<const N: usize>(entries: Option<&PairEntries>, per_lane_group: usize, s: &mut Scratch<N>) {
    add_lanes(&mut s.total_phi, &s.phi);
    if let Some(entries) = entries {
        add_and_clear(entries, per_lane_group, &mut s.total_pairs, &mut s.pairs);
    }
}

/// Adds a chunk's pair sums (`part`, lane groups of `per_lane_group` after one another) to the
/// totals and clears them: the entries `entries` names in each lane group, or all.
fn add_and_clear<const N: usize>(entries: &PairEntries, per_lane_group: usize, total: &mut [Lanes<N>], part: &mut [Lanes<N>]) {
    match entries {
        PairEntries::All => {
            add_lanes(total, part);
            part.fill(Lanes::default());
        }
        PairEntries::Some(entries) => {
            for (total, part) in total.chunks_exact_mut(per_lane_group).zip(part.chunks_exact_mut(per_lane_group)) {
                for &e in entries {
                    let (t, p) = (&mut total[e as usize], &mut part[e as usize]);
                    for r in 0..N {
                        t[r] += p[r];
                    }
                    *p = Lanes::default();
                }
            }
        }
    }
}

/// Asks the cache for every line of `lanes`.
#[inline(always)]
fn prefetch_lanes<const N: usize>(lanes: &Lanes<N>) {
    for line in lanes.0.chunks(VALUES_A_LINE) {
        prefetch(line);
    }
}

/// Resizes `v` to `len` zeroed entries.
fn zeroed<const N: usize>(v: &mut Vec<Lanes<N>>, len: usize) {
    v.clear();
    v.resize(len, Lanes::<N>::default());
}

impl Linear {
    /// Chunks of [`TREES_PER_CHUNK`] compiled trees.
    fn chunks(&self) -> usize {
        self.trees.len().div_ceil(TREES_PER_CHUNK)
    }

    /// Whether a block of `lane_groups` shares its chunks of trees among the threads rather than
    /// its rows: when it has too few lane groups to give every thread four (one or two apiece
    /// leave a thread idle or waiting on the other), the model has several chunks, and their
    /// sums fit [`MAX_CHUNK_SUMS_BYTES`]. Either way a row gets the same bits.
    fn split_by_trees<const N: usize>(&self, lane_groups: usize, pairs: bool) -> bool {
        let threads = super::drivers::planned_threads();
        let (f, groups) = (self.prepared.model.num_features(), self.prepared.model.num_groups());
        let per_lane_group = groups.saturating_mul(f).saturating_mul(if pairs { f + 1 } else { 1 });
        let bytes = self.chunks().saturating_mul(lane_groups).saturating_mul(per_lane_group).saturating_mul(size_of::<Lanes<N>>());
        threads > 1 && self.chunks() > 1 && lane_groups > 0 && lane_groups < 4 * threads && bytes <= MAX_CHUNK_SUMS_BYTES
    }

    /// Whether a block of `rows` shares its trees among the threads (in the lane groups its size
    /// gets, as [`Engine::shap`] picks them).
    #[cfg(test)]
    fn shares_trees(&self, rows: usize, pairs: bool) -> bool {
        if walks_alone(rows) && !pairs {
            self.split_by_trees::<1>(1, pairs)
        } else if in_small_lane_groups(rows) {
            self.split_by_trees::<SMALL_LANES>(rows.div_ceil(SMALL_LANES), pairs)
        } else {
            self.split_by_trees::<LANES>(rows.div_ceil(LANES), pairs)
        }
    }

    /// Loads `rows` rows of `block` from `first` into `ts`: whole lane groups of `N`, and the
    /// narrow group [`narrow_tail`] gives them, if any.
    fn load_task<const N: usize>(&self, block: &FeatureBlock, first: usize, rows: usize, ts: &mut TaskScratch<N>) {
        (ts.wide_rows, ts.tail_rows) = narrow_tail::<N>(rows);
        self.load_rows(block, first, ts.wide_rows, &mut ts.wide);
        self.load_rows(block, first + ts.wide_rows, ts.tail_rows, &mut ts.tail);
    }

    /// Loads `rows` rows of `block` from `first` into `s.xs` as lane groups; returns how many.
    fn load_rows<const N: usize>(&self, block: &FeatureBlock, first: usize, rows: usize, s: &mut Scratch<N>) -> usize {
        let f = self.prepared.model.num_features();
        let lane_groups = rows.div_ceil(N);
        // Feature-major within each lane group; lanes past the last row stay NaN (missing).
        s.xs.clear();
        s.xs.resize(lane_groups * f, Lanes::<N>::splat(f64::NAN));
        for r in 0..rows {
            for (j, &x) in block.row(first + r).iter().enumerate() {
                s.xs[(r / N) * f + j][r % N] = x;
            }
        }
        lane_groups
    }

    /// Sets the sums of `lane_groups` in `s` to zero for a chunk: `s.phi`, and `s.pairs` where
    /// they do not have the lane groups' length (else they are zero already: whoever reads a
    /// chunk's pair sums clears them or takes them away).
    fn zero_chunk<const PAIRS: bool, const N: usize>(&self, lane_groups: usize, s: &mut Scratch<N>) {
        let (f, groups) = (self.prepared.model.num_features(), self.prepared.model.num_groups());
        zeroed(&mut s.phi, lane_groups * groups * f);
        if PAIRS && s.pairs.len() != lane_groups * groups * f * f {
            zeroed(&mut s.pairs, lane_groups * groups * f * f);
        }
    }

    /// One chunk of trees over the loaded lane groups of `ts`, each tree by the wide groups and
    /// then the narrow one: their sums, from zero, in `phi` (and `pairs`) of each.
    fn run_chunk<const PAIRS: bool, const N: usize>(&self, chunk: usize, ts: &mut TaskScratch<N>) {
        let wide_groups = ts.wide_groups();
        let (wide, mut tail) = ts.scratches_mut();
        self.zero_chunk::<PAIRS, N>(wide_groups, wide);
        if let Some(tail) = tail.as_deref_mut() {
            self.zero_chunk::<PAIRS, SMALL_LANES>(1, tail);
        }
        let trees = &self.trees[chunk * TREES_PER_CHUNK..((chunk + 1) * TREES_PER_CHUNK).min(self.trees.len())];
        let plan = (N == 1 && !PAIRS).then(|| &self.row_plans()[chunk]);
        dispatch::<PAIRS, N>(&self.prepared, trees, wide_groups, wide, tail, plan);
    }

    /// Per chunk, how a row alone walks its trees (see [`tree_lanes`]), laid out at the first call.
    fn row_plans(&self) -> &[tree_lanes::ChunkPlan] {
        self.row_plans.get_or_init(|| self.trees.chunks(TREES_PER_CHUNK).map(tree_lanes::ChunkPlan::new).collect())
    }

    /// Zeroes the totals for `lane_groups` of `s`.
    fn zero_totals<const PAIRS: bool, const N: usize>(&self, lane_groups: usize, s: &mut Scratch<N>) {
        let (f, groups) = (self.prepared.model.num_features(), self.prepared.model.num_groups());
        zeroed(&mut s.total_phi, lane_groups * groups * f);
        if PAIRS {
            zeroed(&mut s.total_pairs, lane_groups * groups * f * f);
        }
    }

    /// Zeroes the totals of the loaded rows of `ts`.
    fn zero_task_totals<const PAIRS: bool, const N: usize>(&self, ts: &mut TaskScratch<N>) {
        let wide_groups = ts.wide_groups();
        let (wide, tail) = ts.scratches_mut();
        self.zero_totals::<PAIRS, N>(wide_groups, wide);
        if let Some(tail) = tail {
            self.zero_totals::<PAIRS, SMALL_LANES>(1, tail);
        }
    }

    /// A task's rows (`rows` from `first`) through every chunk, in order, on this thread; the
    /// totals in `total_phi` (and `total_pairs`) of `ts.wide` and `ts.tail`.
    fn run_task<const PAIRS: bool, const N: usize>(&self, block: &FeatureBlock, first: usize, rows: usize, ts: &mut TaskScratch<N>) {
        self.load_task(block, first, rows, ts);
        self.zero_task_totals::<PAIRS, N>(ts);
        // Interactions: one lane group's pair sums, and which of them each chunk writes.
        let (f, groups) = (self.prepared.model.num_features(), self.prepared.model.num_groups());
        let entries: &[PairEntries] = if PAIRS { self.pair_entries() } else { &[] };
        for chunk in 0..self.chunks() {
            self.run_chunk::<PAIRS, N>(chunk, ts);
            let (wide, tail) = ts.scratches_mut();
            add_chunk(entries.get(chunk), groups * f * f, wide);
            if let Some(tail) = tail {
                add_chunk(entries.get(chunk), groups * f * f, tail);
            }
        }
    }

    /// Per chunk, the pair sums its walks can write (see [`PairEntries`]), found at the first
    /// call from the trees' shapes: a split adds to the pairs of its feature with each other
    /// feature on the path above it ([`add_pairs`]). O(splits × depth), once.
    fn pair_entries(&self) -> &[PairEntries] {
        self.pair_entries.get_or_init(|| {
            let model = &self.prepared.model;
            let (f, groups) = (model.num_features(), model.num_groups());
            let per_lane_group = groups * f * f;
            let mut written = vec![0u64; per_lane_group.div_ceil(64)];
            // The walk's stack, as an explicit one: (split, features above it).
            let (mut stack, mut path) = (Vec::<(u32, usize)>::new(), Vec::<u32>::new());
            self.trees
                .chunks(TREES_PER_CHUNK)
                .map(|chunk| {
                    written.fill(0);
                    for lt in chunk.iter().filter(|lt| !lt.splits.is_empty()) {
                        let base = model.trees()[lt.source].group * f * f;
                        stack.push((0, 0));
                        while let Some((i, above)) = stack.pop() {
                            path.truncate(above);
                            let split = &lt.splits[i as usize];
                            for &other in path.iter().filter(|&&other| other != split.feature) {
                                let entry = base + split.feature as usize * f + other as usize;
                                written[entry / 64] |= 1 << (entry % 64);
                            }
                            path.push(split.feature);
                            for child in split.children {
                                if let Child::Split(c) = child {
                                    stack.push((c, above + 1));
                                }
                            }
                        }
                    }
                    let count: usize = written.iter().map(|w| w.count_ones() as usize).sum();
                    // (Entries are numbered by `u32`: a lane group of more sums takes them all.)
                    if count * 2 > per_lane_group || per_lane_group > u32::MAX as usize {
                        return PairEntries::All;
                    }
                    let mut entries = Vec::with_capacity(count);
                    for (w, &word) in written.iter().enumerate() {
                        let mut bits = word;
                        while bits != 0 {
                            entries.push((w * 64 + bits.trailing_zeros() as usize) as u32);
                            bits &= bits - 1;
                        }
                    }
                    PairEntries::Some(entries)
                })
                .collect()
        })
    }

    /// Every row of a small `block` with the chunks shared among the threads: each chunk's sums
    /// on their own, then added in model order, as [`run_task`](Self::run_task) adds them. The
    /// totals in the returned scratch.
    fn run_shared<const PAIRS: bool, const N: usize>(&self, block: &FeatureBlock) -> TaskScratch<N> {
        // Each job (a chunk, below) loads the rows and sizes its scratch: a block shared by trees
        // has fewer than four lane groups a thread, little to load next to a chunk's walks.
        let loaded = || {
            let mut ts = TaskScratch::<N>::default();
            self.load_task(block, 0, block.rows(), &mut ts);
            ts
        };
        type Sums<const M: usize> = (Vec<Lanes<M>>, Vec<Lanes<M>>);
        // Every chunk a job of its own: rayon otherwise walks runs of chunks (an eighth of
        // them, with two threads) that no idle thread can take a part of, and a thread that
        // finishes first waits on the other's last run.
        let sums: Vec<(Sums<N>, Sums<SMALL_LANES>)> = super::drivers::map_each_job(self.chunks(), loaded, |ts, chunk| {
            self.run_chunk::<PAIRS, N>(chunk, ts);
            (
                (std::mem::take(&mut ts.wide.phi), std::mem::take(&mut ts.wide.pairs)),
                (std::mem::take(&mut ts.tail.phi), std::mem::take(&mut ts.tail.pairs)),
            )
        });
        let mut total = TaskScratch::<N>::default();
        (total.wide_rows, total.tail_rows) = narrow_tail::<N>(block.rows());
        self.zero_task_totals::<PAIRS, N>(&mut total);
        for ((phi, pairs), (tail_phi, tail_pairs)) in &sums {
            add_lanes(&mut total.wide.total_phi, phi);
            add_lanes(&mut total.tail.total_phi, tail_phi);
            if PAIRS {
                add_lanes(&mut total.wide.total_pairs, pairs);
                add_lanes(&mut total.tail.total_pairs, tail_pairs);
            }
        }
        total
    }

    /// Copies the SHAP values of a task's rows from the totals of `ts` into `chunk` (rows of
    /// `width`), leaving the bias.
    fn write_shap<const N: usize>(&self, ts: &TaskScratch<N>, chunk: &mut [f64]) {
        let (wide, tail) = chunk.split_at_mut(ts.wide_rows * self.prepared.shap_width());
        self.write_shap_of(&ts.wide, wide);
        self.write_shap_of(&ts.tail, tail);
    }

    /// [`write_shap`](Self::write_shap) for the lane groups of `s`.
    fn write_shap_of<const N: usize>(&self, s: &Scratch<N>, chunk: &mut [f64]) {
        let p = &*self.prepared;
        let (f, groups) = (p.model.num_features(), p.model.num_groups());
        let (w, width) = (f + 1, p.shap_width());
        for (r, out) in chunk.chunks_mut(width).enumerate() {
            for g in 0..groups {
                let at = (r / N) * groups + g;
                for (j, phi) in s.total_phi[at * f..(at + 1) * f].iter().enumerate() {
                    out[g * w + j] = phi[r % N];
                }
            }
        }
    }

    /// Fills the interaction matrices of a task's rows (rows `first..` of `block`) from the
    /// totals into `chunk`, a lane group's rows at a time, each group's finished (diagonals, and
    /// Banzhaf biases) while its matrices are still in cache; `shap` holds one row's SHAP values
    /// while its diagonal is filled. Every page of `chunk` gets a store (the pairs off the
    /// diagonal, matrix row by matrix row) before anything reads it ([`FirstTouch::Stores`]).
    fn write_interactions<const N: usize>(&self, ts: &TaskScratch<N>, shap: &mut [f64], chunk: &mut [f64], (block, first): (&FeatureBlock, usize)) {
        let w = self.prepared.model.num_features() + 1;
        let (wide, tail) = chunk.split_at_mut(ts.wide_rows * self.prepared.model.num_groups() * w * w);
        self.write_interactions_of(&ts.wide, shap, wide, (block, first));
        self.write_interactions_of(&ts.tail, shap, tail, (block, first + ts.wide_rows));
    }

    /// [`write_interactions`](Self::write_interactions) for the lane groups of `s`.
    fn write_interactions_of<const N: usize>(&self, s: &Scratch<N>, shap: &mut [f64], chunk: &mut [f64], (block, first): (&FeatureBlock, usize)) {
        let p = &*self.prepared;
        let (f, groups) = (p.model.num_features(), p.model.num_groups());
        let w = f + 1;
        // Both orders of a pair sum to its interaction index: shap's layout halves the Shapley
        // index off the diagonal, WOODELF's keeps the Banzhaf index whole.
        let pair_share = match self.index {
            Index::Shapley => 0.5,
            Index::Banzhaf => 1.0,
        };
        let row_width = groups * w * w;
        // A lane group's rows together, eight pairs of a matrix row at a time (a cache line of
        // each row's output, from sums that stay in the core's first cache across the rows):
        // its sums (F × F vectors of N lanes, 2 MiB at 127 features) are then read once, where
        // filling one output row after another read them N times over from beyond the core's
        // own caches. (Pair by pair across the rows instead, every store went to another row
        // at the same offset within a page, all into one set of the first cache.)
        for (lane_group, rows_here) in chunk.chunks_mut(row_width * N).enumerate() {
            for g in 0..groups {
                let at = lane_group * groups + g;
                let pairs = &s.total_pairs[at * f * f..(at + 1) * f * f];
                for i in 0..f {
                    for first in (0..f).step_by(VALUES_A_LINE) {
                        let js = first..(first + VALUES_A_LINE).min(f);
                        // The next matrix row's lines, asked for a row ahead: the sums read
                        // across (`f` apart, too far for the CPU's own prefetcher to follow) and
                        // every row's output line (fresh pages, zeroed beyond the core's caches).
                        if i + 1 < f {
                            for j in js.clone() {
                                prefetch_lanes(&pairs[j * f + i + 1]);
                            }
                            for out in rows_here.chunks_exact(row_width) {
                                prefetch(&out[g * w * w + (i + 1) * w + first]);
                            }
                        }
                        // The line's entries for every lane at once (each sum read once, not
                        // once a lane), then each row's line from them, with no test for the
                        // diagonal: its entry is a sum that is never added to (a split's own
                        // feature has no pair term), which `finish_interaction_row` replaces.
                        let mut line = [Lanes::<N>::default(); VALUES_A_LINE];
                        for (entry, j) in line.iter_mut().zip(js.clone()) {
                            let (ij, ji) = (&pairs[i * f + j], &pairs[j * f + i]);
                            for r in 0..N {
                                entry[r] = pair_share * (ij[r] + ji[r]);
                            }
                        }
                        for (lane, out) in rows_here.chunks_exact_mut(row_width).enumerate() {
                            for (o, entry) in out[g * w * w + i * w + first..][..js.len()].iter_mut().zip(&line) {
                                *o = entry[lane];
                            }
                        }
                    }
                }
            }
            for (lane, out) in rows_here.chunks_mut(row_width).enumerate() {
                for g in 0..groups {
                    let at = lane_group * groups + g;
                    for (i, phi) in s.total_phi[at * f..(at + 1) * f].iter().enumerate() {
                        shap[g * w + i] = phi[lane];
                    }
                    shap[g * w + f] = p.bias[g];
                }
                finish_interaction_row(out, shap, f, groups);
            }
            interaction_bias_of_rows(self.index, &p.model, block, first + lane_group * N, rows_here);
        }
    }
}

impl Engine for Linear {
    fn name(&self) -> &'static str {
        "linear"
    }

    fn model(&self) -> &Model {
        &self.prepared.model
    }

    fn shap(&self, block: &FeatureBlock) -> Result<Attributions> {
        let mut shap = if walks_alone(block.rows()) {
            self.shap_in::<1>(block)
        } else if in_small_lane_groups(block.rows()) {
            self.shap_in::<SMALL_LANES>(block)
        } else {
            self.shap_in::<LANES>(block)
        }?;
        bias_is_the_rest(self.index, &self.prepared.model, block, &mut shap);
        Ok(shap)
    }

    /// Interactions from the same walk: a leaf's pair term `v·(o_i−z_i)(o_j−z_j)·∫Π_{k≠i,j} f_k`
    /// is, by the product rule over the path's splits, the sum of each split's own terms times
    /// the ratio `(o−z)/f` of every other feature above it; both orders are summed (and halved
    /// for Shapley values, as shap lays them out; Banzhaf values keep the index whole).
    fn interactions(&self, block: &FeatureBlock) -> Result<Interactions> {
        if in_small_lane_groups(block.rows()) {
            self.interactions_in::<SMALL_LANES>(block)
        } else {
            self.interactions_in::<LANES>(block)
        }
    }
}

impl Linear {
    /// SHAP values of `block` in lane groups of `N` rows.
    fn shap_in<const N: usize>(&self, block: &FeatureBlock) -> Result<Attributions> {
        let p = &*self.prepared;
        check_block(&p.model, block)?;
        let width = p.shap_width();
        if self.split_by_trees::<N>(block.rows().div_ceil(N), false) {
            let shared = self.run_shared::<false, N>(block);
            return shap_by_task(p, block, block.rows(), || (), |_, _, chunk| self.write_shap(&shared, chunk));
        }
        let per_task = task_rows::<N>(block.rows(), p.model.num_features(), p.model.num_groups(), false);
        shap_by_task(p, block, per_task, TaskScratch::<N>::default, |ts, first, chunk| {
            self.run_task::<false, N>(block, first, chunk.len() / width, ts);
            self.write_shap(ts, chunk);
        })
    }

    /// Interaction values of `block` in lane groups of `N` rows.
    fn interactions_in<const N: usize>(&self, block: &FeatureBlock) -> Result<Interactions> {
        self.check_scratch(true)?;
        let p = &*self.prepared;
        check_block(&p.model, block)?;
        let w = p.model.num_features() + 1;
        let width = p.model.num_groups() * w * w;
        let shap_row = || vec![0.0; p.model.num_groups() * w];
        if self.split_by_trees::<N>(block.rows().div_ceil(N), true) {
            let shared = self.run_shared::<true, N>(block);
            return interactions_by_task(&p.model, block, block.rows(), FirstTouch::Stores, shap_row, |shap, _, chunk| {
                self.write_interactions(&shared, shap, chunk, (block, 0))
            });
        }
        let per_task = task_rows::<N>(block.rows(), p.model.num_features(), p.model.num_groups(), true);
        interactions_by_task(
            &p.model,
            block,
            per_task,
            FirstTouch::Stores,
            || (TaskScratch::<N>::default(), shap_row()),
            |(ts, shap), first, chunk| {
                self.run_task::<true, N>(block, first, chunk.len() / width, ts);
                self.write_interactions(ts, shap, chunk, (block, first));
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Node, Precision, SplitRule};
    use crate::test_support::{full_tree, max_abs_diff, numeric_model, uniform};

    /// A full tree of `depth` over few features (so paths repeat them), with uneven covers.
    fn tree(seed: &mut u64, features: u32, depth: usize) -> Tree {
        full_tree(seed, depth, |_, u| (u * features as f64) as u32)
    }

    /// A lopsided tree over `features` features (at least 8): under the root's left child a full
    /// subtree of depth 4 (short paths); under its right child a chain down the remaining
    /// features with a leaf beside every split, ending in a full subtree of depth 3 on features
    /// met above (paths of up to `features` distinct features).
    fn lopsided(features: usize, seed: &mut u64) -> Tree {
        let mut next = move || uniform(seed);
        let mut nodes = vec![Node::leaf(0.0, 1000.0)];
        let split = |nodes: &mut Vec<Node>, at: usize, feature: usize, next: &mut dyn FnMut() -> f64| {
            let cover = nodes[at].cover;
            let frac = 0.2 + 0.6 * next();
            let (l, r) = (nodes.len() as u32, nodes.len() as u32 + 1);
            nodes.push(Node::leaf(next() - 0.5, cover * frac));
            nodes.push(Node::leaf(next() - 0.5, cover * (1.0 - frac)));
            let n = &mut nodes[at];
            (n.left, n.right, n.feature) = (l, r, feature as u32);
            n.rule = SplitRule::XgbLess { threshold: next() };
            n.default_left = next() < 0.5;
            (l as usize, r as usize)
        };
        let (left, right) = split(&mut nodes, 0, 0, &mut next);
        // Full subtrees: (node, depth left, features to take from, in order of depth).
        let mut full = vec![(left, 4usize, 1usize)];
        // The chain on the right.
        let mut at = right;
        for feature in 5..features {
            let (l, r) = split(&mut nodes, at, feature, &mut next);
            at = if next() < 0.5 { l } else { r };
        }
        full.push((at, 3, 0));
        while let Some((i, left_depth, feature)) = full.pop() {
            if left_depth == 0 {
                continue;
            }
            let (l, r) = split(&mut nodes, i, feature, &mut next);
            full.push((l, left_depth - 1, feature + 1));
            full.push((r, left_depth - 1, feature + 1));
        }
        Tree { nodes, category_words: vec![], group: 0, weight: 1.0, linear_leaves: vec![] }
    }

    #[test]
    fn an_uneven_tree_is_walked_in_parts_with_the_same_values() {
        let (features, mut seed) = (14usize, 7u64);
        let mut trees: Vec<Tree> = (0..3).map(|_| lopsided(features, &mut seed)).collect();
        trees.push(tree(&mut seed, features as u32, 8));
        let model = numeric_model(features, trees, 0.0);
        let prepared = Arc::new(PreparedModel::new(Arc::new(model)).unwrap());
        let engine = Linear::new(prepared.clone()).unwrap();
        // The lopsided trees split into parts, some with fewer points than the whole needs.
        let parts = |t: usize| engine.trees.iter().filter(|lt| lt.source == t).count();
        assert!((0..3).all(|t| parts(t) > 1), "parts per lopsided tree: {:?}", (0..3).map(parts).collect::<Vec<_>>());
        assert!(engine.trees.iter().filter(|lt| lt.source == 0).any(|lt| lt.points() < exact_points(features + 1)));
        let rows = 40;
        let values = (0..rows * features).map(|i| if i % 11 == 0 { f64::NAN } else { ((i * 7919) % 1000) as f64 / 1000.0 }).collect();
        let block = FeatureBlock::new(rows, features, values, Precision::F64);
        let reference = super::super::treeshap::TreeShap::new(prepared.clone()).unwrap();
        let (got, want) = (engine.shap(&block).unwrap(), reference.shap(&block).unwrap());
        let worst = max_abs_diff(&got.values, &want.values);
        assert!(worst <= 1e-12, "SHAP values off the reference by {worst:e}");
        assert!(want.values.iter().any(|v| v.abs() > 1e-3), "the model attributes something");
        let (got, want) = (engine.interactions(&block).unwrap(), reference.interactions(&block).unwrap());
        let worst = max_abs_diff(&got.values, &want.values);
        assert!(worst <= 1e-12, "interaction values off the reference by {worst:e}");
    }

    #[test]
    fn interactions_add_only_the_pairs_a_chunk_writes_with_the_bits_of_adding_all() {
        // Many features and shallow trees: a chunk's paths pair few of them, so its entries are
        // listed; two chunks, the second short.
        let (features, mut seed) = (60usize, 5u64);
        let trees = (0..TREES_PER_CHUNK + 7).map(|_| tree(&mut seed, features as u32, 3)).collect();
        let prepared = Arc::new(PreparedModel::new(Arc::new(numeric_model(features, trees, 0.5))).unwrap());
        let engine = Linear::new(prepared.clone()).unwrap();
        assert_eq!(engine.chunks(), 2);
        let entries = engine.pair_entries();
        let rows = 40;
        let values = (0..rows * features).map(|i| if i % 11 == 0 { f64::NAN } else { ((i * 7919) % 1000) as f64 / 1000.0 }).collect();
        let block = FeatureBlock::new(rows, features, values, Precision::F64);
        // Every pair sum a chunk's walk writes is listed: the others stay +0.0 in every lane.
        let mut ts = TaskScratch::<LANES>::default();
        engine.load_task(&block, 0, rows, &mut ts);
        let lane_groups = ts.wide_groups();
        assert_eq!((ts.wide_rows, ts.tail_rows), (rows, 0));
        for (chunk, entries) in entries.iter().enumerate() {
            let PairEntries::Some(listed) = entries else { panic!("chunk {chunk}: all {features}² pairs, expected a list") };
            assert!(listed.len() < features * features / 4, "chunk {chunk}: {} entries", listed.len());
            ts.wide.pairs.clear();
            engine.run_chunk::<true, LANES>(chunk, &mut ts);
            let mut written = 0;
            for (k, lanes) in ts.wide.pairs.iter().enumerate() {
                let is_listed = listed.binary_search(&((k % (features * features)) as u32)).is_ok();
                let nonzero = lanes.0.iter().any(|v| v.to_bits() != 0);
                assert!(is_listed || !nonzero, "chunk {chunk}: pair sum {k} is written but not listed");
                written += usize::from(nonzero);
            }
            assert!(written > listed.len(), "chunk {chunk}: the listed pairs are written ({written} nonzero in {lane_groups} lane groups)");
        }
        // One thread adds the listed entries; two share the chunks and add all of theirs.
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<u64>>();
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            pool.install(|| (engine.shares_trees(rows, true), engine.interactions(&block).unwrap()))
        };
        let ((one_shares, one), (two_shares, two)) = (run(1), run(2));
        assert_eq!((one_shares, two_shares), (false, true));
        assert_eq!(bits(&one.values), bits(&two.values), "interactions on 1 and 2 threads");
        let want = super::super::treeshap::TreeShap::new(prepared).unwrap().interactions(&block).unwrap();
        let scale = want.values.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let worst = max_abs_diff(&one.values, &want.values);
        assert!(scale > 1e-3 && worst <= 1e-12 * scale.max(1.0), "interactions off treeshap's by {worst:e} (largest {scale:e})");
    }

    #[test]
    fn a_small_block_shared_by_trees_gives_the_bits_of_one_thread() {
        let (features, mut seed) = (10usize, 11u64);
        // Three chunks of trees, the last one short.
        let trees = (0..2 * TREES_PER_CHUNK + 5).map(|_| tree(&mut seed, features as u32, 6)).collect();
        let prepared = Arc::new(PreparedModel::new(Arc::new(numeric_model(features, trees, 0.5))).unwrap());
        let engine = Linear::new(prepared.clone()).unwrap();
        assert_eq!(engine.chunks(), 3);
        let reference = super::super::treeshap::TreeShap::new(prepared.clone()).unwrap();
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<u64>>();
        for rows in [1usize, 13, 30] {
            let values = (0..rows * features).map(|i| if i % 13 == 0 { f64::NAN } else { ((i * 7919) % 1000) as f64 / 1000.0 }).collect();
            let block = FeatureBlock::new(rows, features, values, Precision::F64);
            let run = |threads: usize| {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                pool.install(|| {
                    let split = (engine.shares_trees(rows, false), engine.shares_trees(rows, true));
                    (split, bits(&engine.shap(&block).unwrap().values), bits(&engine.interactions(&block).unwrap().values))
                })
            };
            let (one, two, three) = (run(1), run(2), run(3));
            // One thread walks every chunk itself; two and three share the chunks.
            assert_eq!(one.0, (false, false), "{rows} rows");
            assert_eq!((two.0, three.0), ((true, true), (true, true)), "{rows} rows");
            assert_eq!(one.1, two.1, "{rows} rows: SHAP values on 1 and 2 threads");
            assert_eq!(one.1, three.1, "{rows} rows: SHAP values on 1 and 3 threads");
            assert_eq!(one.2, two.2, "{rows} rows: interactions on 1 and 2 threads");
            assert_eq!(one.2, three.2, "{rows} rows: interactions on 1 and 3 threads");
            // And the values are the reference's.
            let (got, want) = (engine.shap(&block).unwrap(), reference.shap(&block).unwrap());
            let worst = max_abs_diff(&got.values, &want.values);
            assert!(worst <= 1e-12, "{rows} rows: SHAP values off the reference by {worst:e}");
            assert!(want.values.iter().any(|v| v.abs() > 1e-3), "the model attributes something");
        }
        // A row alone (shared by trees) has the bits it has in a large block (shared by rows).
        let rows = 200;
        let values: Vec<f64> = (0..rows * features).map(|i| ((i * 104729) % 1000) as f64 / 1000.0).collect();
        let block = FeatureBlock::new(rows, features, values.clone(), Precision::F64);
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        pool.install(|| {
            assert!(!engine.shares_trees(rows, false));
            let all = engine.shap(&block).unwrap();
            for r in [0, 57, 199] {
                let alone = FeatureBlock::new(1, features, values[r * features..(r + 1) * features].to_vec(), Precision::F64);
                assert_eq!(bits(all.row(r, 0)), bits(engine.shap(&alone).unwrap().row(0, 0)), "row {r}");
            }
        });
    }

    #[test]
    fn small_blocks_in_narrow_lane_groups_give_the_bits_of_a_large_block() {
        let (features, mut seed) = (6usize, 5u64);
        // Two chunks, so that two threads share a small block's trees; deep enough for parts.
        let mut trees: Vec<Tree> = (0..TREES_PER_CHUNK + 3).map(|_| tree(&mut seed, features as u32, 8)).collect();
        trees.push(lopsided(features, &mut seed));
        let prepared = Arc::new(PreparedModel::new(Arc::new(numeric_model(features, trees, 0.25))).unwrap());
        let engine = Linear::new(prepared).unwrap();
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<u64>>();
        let rows = 3 * LANES + 5;
        let values: Vec<f64> = (0..rows * features).map(|i| if i % 11 == 0 { f64::NAN } else { ((i * 7919) % 1000) as f64 / 1000.0 }).collect();
        let all = FeatureBlock::new(rows, features, values.clone(), Precision::F64);
        let (shap, interactions) = (engine.shap(&all).unwrap(), engine.interactions(&all).unwrap());
        for threads in [1, 2] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            pool.install(|| {
                for n in 1..=SMALL_LANES + 1 {
                    // Rows from the middle of the large block, so that they sat in other lanes there.
                    let first = LANES + 3;
                    let small = FeatureBlock::new(n, features, values[first * features..(first + n) * features].to_vec(), Precision::F64);
                    let (got, got_pairs) = (engine.shap(&small).unwrap(), engine.interactions(&small).unwrap());
                    for r in 0..n {
                        assert_eq!(bits(got.row(r, 0)), bits(shap.row(first + r, 0)), "{threads} threads, {n} rows: SHAP values of row {r}");
                        assert_eq!(
                            bits(got_pairs.matrix(r, 0)),
                            bits(interactions.matrix(first + r, 0)),
                            "{threads} threads, {n} rows: interactions of row {r}"
                        );
                    }
                }
            });
        }
        assert!(shap.values.iter().any(|v| v.abs() > 1e-3), "the model attributes something");
    }

    #[test]
    fn a_small_block_walks_its_tail_in_a_narrow_lane_group_with_the_same_bits() {
        let (features, mut seed) = (7usize, 19u64);
        // Two chunks, so that two threads share a small block's trees.
        let trees: Vec<Tree> = (0..TREES_PER_CHUNK + 9).map(|_| tree(&mut seed, features as u32, 7)).collect();
        let prepared = Arc::new(PreparedModel::new(Arc::new(numeric_model(features, trees, -0.5))).unwrap());
        let engine = Linear::new(prepared).unwrap();
        let rows = 20 * LANES;
        let values: Vec<f64> = (0..rows * features).map(|i| if i % 13 == 0 { f64::NAN } else { ((i * 104729) % 1000) as f64 / 1000.0 }).collect();
        let all = FeatureBlock::new(rows, features, values.clone(), Precision::F64);
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        let (shap, interactions) = pool.install(|| {
            assert!(!engine.shares_trees(rows, false), "the large block is shared by rows");
            (engine.shap(&all).unwrap(), engine.interactions(&all).unwrap())
        });
        assert!(shap.values.iter().any(|v| v.abs() > 1e-3), "the model attributes something");
        // Shared by trees on two threads, one task on one thread: either way in the same pass.
        for threads in [2, 1] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            pool.install(|| small_blocks_agree(&engine, &values, (&shap, &interactions)));
        }
    }

    /// Small blocks of rows from the middle of a large block (`values`; `shap` and
    /// `interactions` are its values), in the current pool: the same bits, their tails in a
    /// narrow lane group, as where they sat in wide ones.
    fn small_blocks_agree(engine: &Linear, values: &[f64], (shap, interactions): (&Attributions, &Interactions)) {
        let features = engine.prepared.model.num_features();
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<u64>>();
        let shared = rayon::current_num_threads() > 1;
        for n in [LANES + 1, 2 * LANES + SMALL_LANES, 3 * LANES + 2, 3 * LANES + SMALL_LANES + 1] {
            assert_eq!((engine.shares_trees(n, false), engine.shares_trees(n, true)), (shared, shared), "{n} rows shared by trees");
            let tail = n % LANES;
            assert_eq!(narrow_tail::<LANES>(n), if tail <= SMALL_LANES { (n - tail, tail) } else { (n, 0) }, "{n} rows");
            // Rows from the middle of the large block, so that they sat in other lanes there.
            let first = 2 * LANES + 5;
            let small = FeatureBlock::new(n, features, values[first * features..(first + n) * features].to_vec(), Precision::F64);
            let (got, got_pairs) = (engine.shap(&small).unwrap(), engine.interactions(&small).unwrap());
            for r in 0..n {
                assert_eq!(bits(got.row(r, 0)), bits(shap.row(first + r, 0)), "{n} rows: SHAP values of row {r}");
                assert_eq!(bits(got_pairs.matrix(r, 0)), bits(interactions.matrix(first + r, 0)), "{n} rows: interactions of row {r}");
            }
        }
    }

    #[test]
    fn every_compiled_copy_gives_the_same_bits() {
        compiled_copies_agree::<LANES>();
        compiled_copies_agree::<SMALL_LANES>();
        // One row: `row::walk_alone` for 1-8 points against the lane walk (interactions and the
        // general copy) in a lane group of one.
        compiled_copies_agree::<1>();
    }

    #[test]
    fn a_row_alone_walks_flat_with_the_bits_of_a_large_block() {
        let (features, mut seed) = (20usize, 23u64);
        // Two chunks (so that two threads share one row's trees); parts of 1-8 points (a copy of
        // `row::walk_alone` per point count; `compiled_copies_agree::<1>` has 7 and 8) and of more (the
        // lane walk's general copy, in a lane group of one); repeated features on the full trees.
        let mut trees: Vec<Tree> = (0..TREES_PER_CHUNK + 4).map(|_| tree(&mut seed, 6, 9)).collect();
        trees.extend([12, 16, features].map(|width| lopsided(width, &mut seed)));
        trees.push(tree(&mut seed, 2, 1));
        let prepared = Arc::new(PreparedModel::new(Arc::new(numeric_model(features, trees, 0.75))).unwrap());
        let engine = Linear::new(prepared).unwrap();
        let points: std::collections::BTreeSet<usize> = engine.trees.iter().map(LinearTree::points).collect();
        assert!(
            points.contains(&1) && points.iter().filter(|&&k| (2..=8).contains(&k)).count() >= 3 && points.iter().any(|&k| k > 8),
            "point counts: {points:?}"
        );
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<u64>>();
        let rows = 3 * LANES;
        let values: Vec<f64> = (0..rows * features).map(|i| if i % 17 == 0 { f64::NAN } else { ((i * 7919) % 1000) as f64 / 1000.0 }).collect();
        let all = FeatureBlock::new(rows, features, values.clone(), Precision::F64);
        on_one_and_two_threads(&engine, &all, |threads, shap| {
            assert_eq!(engine.shares_trees(1, false), threads > 1, "{threads} threads share one row's trees");
            for r in [0, 5, LANES + 7, rows - 1] {
                let alone = FeatureBlock::new(1, features, values[r * features..(r + 1) * features].to_vec(), Precision::F64);
                assert_eq!(bits(engine.shap(&alone).unwrap().row(0, 0)), bits(shap.row(r, 0)), "{threads} threads, row {r}");
            }
        });
    }

    /// `check(threads, SHAP values of block)` in a pool of one thread and in one of two, after
    /// checking that the model attributes something.
    fn on_one_and_two_threads(engine: &Linear, block: &FeatureBlock, check: impl Fn(usize, &Attributions) + Sync) {
        for threads in [1, 2] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
            pool.install(|| {
                let shap = engine.shap(block).unwrap();
                assert!(shap.values.iter().any(|v| v.abs() > 1e-3), "the model attributes something");
                check(threads, &shap);
            });
        }
    }

    /// A tree of `depth` over `features` features whose branches stop at random below depth 2
    /// (every tree a shape of its own).
    fn ragged(seed: &mut u64, features: u32, depth: usize) -> Tree {
        let mut t = full_tree(seed, depth, |_, u| (u * features as f64) as u32);
        // Cut: a split drawn to stop becomes a leaf, its subtree left out by a rebuild below.
        let mut nodes = vec![t.nodes[0].clone()];
        let mut stack = vec![(0usize, 0usize, 0usize)];
        while let Some((old, new, d)) = stack.pop() {
            let node = t.nodes[old].clone();
            if node.is_leaf() || (d >= 2 && uniform(seed) < 0.2) {
                nodes[new] = Node::leaf(uniform(seed) - 0.5, node.cover);
                continue;
            }
            let (l, r) = (nodes.len(), nodes.len() + 1);
            nodes.push(t.nodes[node.left as usize].clone());
            nodes.push(t.nodes[node.right as usize].clone());
            (nodes[new].left, nodes[new].right) = (l as u32, r as u32);
            stack.push((node.left as usize, l, d + 1));
            stack.push((node.right as usize, r, d + 1));
        }
        t.nodes = nodes;
        t
    }

    #[test]
    fn a_row_alone_walks_trees_in_lanes_with_the_bits_of_a_large_block() {
        let (features, mut seed) = (14usize, 91u64);
        // Full trees (one shape), ragged ones (stand-ins in their groups' lanes) and lopsided
        // ones (parts of several point counts), over three output groups; every fifth split
        // LightGBM's rule with zero as missing (a generic test).
        let mut trees: Vec<Tree> =
            (0..2 * TREES_PER_CHUNK + 9).map(|i| if i % 3 == 0 { tree(&mut seed, 6, 7) } else { ragged(&mut seed, features as u32, 7) }).collect();
        trees.extend([10, features].map(|width| lopsided(width, &mut seed)));
        for (i, t) in trees.iter_mut().enumerate() {
            t.group = i % 3;
        }
        for (i, node) in trees.iter_mut().flat_map(|t| t.nodes.iter_mut()).enumerate().filter(|(i, n)| i % 5 == 0 && !n.is_leaf()) {
            node.rule = SplitRule::LgbLessEqual { threshold: ((i * 7) % 100) as f64 / 100.0, missing: crate::model::MissingType::Zero };
        }
        let mut parts = crate::test_support::numeric_parts(features, trees, 0.0);
        (parts.num_groups, parts.base_margin, parts.objective) = (3, vec![0.1, 0.2, 0.3], "multi:softprob".into());
        let model = Model::new(parts, "a test model").unwrap();
        let prepared = Arc::new(PreparedModel::new(Arc::new(model)).unwrap());
        let engine = Linear::new(prepared.clone()).unwrap();
        let (mut grouped, mut stand_ins, mut generic) = (0, 0, 0);
        for plan in engine.row_plans() {
            let (t, s, g) = plan.census();
            (grouped, stand_ins, generic) = (grouped + t, stand_ins + s, generic + g);
        }
        assert!(
            grouped >= TREES_PER_CHUNK && stand_ins > 0 && generic > 0,
            "trees in lanes {grouped}, stand-in nodes {stand_ins}, generic lanes {generic}"
        );
        assert!(engine.row_plans().iter().any(|plan| plan.place.iter().any(Option::is_none)), "some trees walk flat");
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<u64>>();
        let rows = 2 * LANES + 3;
        let values: Vec<f64> = (0..rows * features)
            .map(|i| match i % 13 {
                0 => f64::NAN,
                1 => 0.0,
                _ => ((i * 7919) % 1000) as f64 / 1000.0,
            })
            .collect();
        let all = FeatureBlock::new(rows, features, values.clone(), Precision::F64);
        on_one_and_two_threads(&engine, &all, |threads, shap| {
            for r in [0, 1, 9, LANES + 4, rows - 1] {
                let row = &values[r * features..(r + 1) * features];
                let alone = FeatureBlock::new(1, features, row.to_vec(), Precision::F64);
                let one = engine.shap(&alone).unwrap();
                for g in 0..3 {
                    assert_eq!(bits(one.row(0, g)), bits(shap.row(r, g)), "{threads} threads, row {r}, output {g}");
                }
                let xs: Vec<Lanes<1>> = row.iter().map(|&x| Lanes([x])).collect();
                for plan in engine.row_plans() {
                    plan.assert_directions_agree(prepared.model.trees(), &xs);
                }
            }
        });
    }

    /// Every compiled copy of the walk for lane groups of `N` rows gives the same bits.
    fn compiled_copies_agree<const N: usize>() {
        let (features, mut seed) = (18usize, 42u64);
        let mut trees: Vec<Tree> = (0..4).map(|_| tree(&mut seed, 5, 9)).collect();
        // Longer paths: parts of 7 and 8 points, the widest that have copies of their own.
        trees.push(lopsided(16, &mut seed));
        trees.push(lopsided(features, &mut seed));
        // Every third split `x <= threshold` (LightGBM's rule), at a threshold some rows equal.
        for (i, node) in trees.iter_mut().flat_map(|t| t.nodes.iter_mut()).enumerate().filter(|(i, n)| i % 3 == 0 && !n.is_leaf()) {
            node.rule = SplitRule::LgbLessEqual { threshold: ((i * 7) % 100) as f64 / 100.0, missing: crate::model::MissingType::NaN };
        }
        let model = numeric_model(features, trees, 0.0);
        let prepared = Arc::new(PreparedModel::new(Arc::new(model)).unwrap());
        let engine = Linear::new(prepared.clone()).unwrap();
        let groups = 3;
        // (SHAP values, pair sums) as bits.
        let run = |task: &dyn Fn(&mut Scratch<N>)| {
            let mut s = Scratch {
                xs: (0..groups * features)
                    .map(|i| Lanes(std::array::from_fn(|r| if (i + r) % 7 == 0 { f64::NAN } else { ((i * 31 + r * 17) % 100) as f64 / 100.0 })))
                    .collect(),
                phi: vec![Lanes::default(); groups * features],
                pairs: vec![Lanes::default(); groups * features * features],
                ..Default::default()
            };
            task(&mut s);
            let bits = |v: &[Lanes<N>]| v.iter().flat_map(|l| l.0.iter().map(|v| v.to_bits())).collect::<Vec<u64>>();
            (bits(&s.phi), bits(&s.pairs))
        };
        // SAFETY (every portable copy here): it needs no CPU feature.
        let baseline = run(&|s| unsafe { explain_task::<true, false, N>(&prepared, &engine.trees, groups, s, None, None) });
        assert!(baseline.0.iter().any(|&b| f64::from_bits(b).abs() > 1e-3), "the model attributes something");
        assert!(baseline.1.iter().any(|&b| f64::from_bits(b).abs() > 1e-3), "and has interactions");
        assert_eq!(
            baseline.0,
            run(&|s| unsafe { explain_task::<false, false, N>(&prepared, &engine.trees, groups, s, None, None) }).0,
            "SHAP values without pairs"
        );
        // SHAP values walk a copy per point count; the general copy gives the same bits.
        let points: std::collections::BTreeSet<usize> = engine.trees.iter().map(LinearTree::points).collect();
        assert!(
            points.contains(&7) && points.contains(&8) && points.iter().all(|&k| k <= 8),
            "the trees take the copies per point count: {points:?}"
        );
        let general = run(&|s| {
            for lt in engine.trees.iter().filter(|lt| !lt.splits.is_empty()) {
                s.walk.reserve(lt.depth + 1, lt.points(), lt.width, false);
                unsafe { walk_tree::<false, 0, false, N>(&prepared.model.trees()[lt.source], lt, groups, features, 1, s) };
            }
        });
        assert_eq!(baseline.0, general.0, "the general copy of the walk");
        #[cfg(target_arch = "x86_64")]
        {
            let fma = std::arch::is_x86_feature_detected!("fma");
            if fma && std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: the CPU has AVX2 and FMA.
                assert_eq!(baseline, run(&|s| unsafe { explain_task_avx2::<true, N>(&prepared, &engine.trees, groups, s, None, None) }), "AVX2");
                assert_eq!(
                    baseline.0,
                    run(&|s| unsafe { explain_task_avx2::<false, N>(&prepared, &engine.trees, groups, s, None, None) }).0,
                    "AVX2, SHAP values"
                );
            }
            if fma && std::arch::is_x86_feature_detected!("avx512f") {
                // SAFETY: the CPU has AVX-512F and FMA.
                assert_eq!(baseline, run(&|s| unsafe { explain_task_avx512::<true, N>(&prepared, &engine.trees, groups, s, None, None) }), "AVX-512");
                assert_eq!(
                    baseline.0,
                    run(&|s| unsafe { explain_task_avx512::<false, N>(&prepared, &engine.trees, groups, s, None, None) }).0,
                    "AVX-512, SHAP values"
                );
            }
        }
    }

    /// The path-dependent game of a model at `x`: E[f | x_S] under the trees' covers (follow `x`
    /// on features in `in_s`, average the children by cover elsewhere), by recursion, for the
    /// small trees of these tests.
    fn game_value(tree: &Tree, x: &[f64], in_s: &[bool], node: usize) -> f64 {
        let n = &tree.nodes[node];
        if n.is_leaf() {
            return n.value * tree.weight;
        }
        let (l, r) = (n.left as usize, n.right as usize);
        if in_s[n.feature as usize] {
            game_value(tree, x, in_s, if tree.goes_left(n, x[n.feature as usize]) { l } else { r })
        } else {
            let (cl, cr) = (tree.nodes[l].cover / n.cover, tree.nodes[r].cover / n.cover);
            cl * game_value(tree, x, in_s, l) + cr * game_value(tree, x, in_s, r)
        }
    }

    /// Banzhaf values and the Banzhaf interaction index of the path-dependent game at `x`, by
    /// enumerating every coalition: `β_i = Σ_S (v(S∪i) − v(S)) / 2^(M−1)` over `S ∌ i`, and
    /// `I_ij = Σ_S (v(S∪ij) − v(S∪i) − v(S∪j) + v(S)) / 2^(M−2)` over `S ∌ i, j`.
    fn banzhaf_by_coalitions(model: &Model, x: &[f64]) -> (Vec<f64>, Vec<f64>) {
        let m = model.num_features();
        let v: Vec<f64> = (0..1usize << m)
            .map(|s| {
                let in_s: Vec<bool> = (0..m).map(|i| s & (1 << i) != 0).collect();
                model.trees().iter().map(|t| game_value(t, x, &in_s, 0)).sum()
            })
            .collect();
        let values = (0..m)
            .map(|i| (0..1usize << m).filter(|s| s & (1 << i) == 0).map(|s| v[s | 1 << i] - v[s]).sum::<f64>() / (1u64 << (m - 1)) as f64)
            .collect();
        let mut pairs = vec![0.0; m * m];
        for i in 0..m {
            for j in (0..m).filter(|&j| j != i) {
                let (bi, bj) = (1 << i, 1 << j);
                let sum: f64 = (0..1usize << m).filter(|s| s & (bi | bj) == 0).map(|s| v[s | bi | bj] - v[s | bi] - v[s | bj] + v[s]).sum();
                pairs[i * m + j] = sum / (1u64 << (m - 2)) as f64;
            }
        }
        (values, pairs)
    }

    #[test]
    fn banzhaf_values_and_interactions_equal_enumeration_over_coalitions() {
        let mut seed = 41u64;
        let mut checked_pairs = 0;
        for case in 0..24usize {
            let features = 2 + case % 5;
            let trees = (0..1 + case % 3).map(|t| tree(&mut seed, features as u32, 1 + (case + t) % 6)).collect();
            let model = Arc::new(numeric_model(features, trees, 0.25));
            let engine = Linear::with_index(Arc::new(PreparedModel::new(model.clone()).unwrap()), Index::Banzhaf).unwrap();
            // One row alone (its own walk), four (a small lane group) and 21 (sixteen lanes and a tail).
            for rows in [1usize, 4, 21] {
                let values = (0..rows * features).map(|_| if uniform(&mut seed) < 0.15 { f64::NAN } else { uniform(&mut seed) }).collect();
                let block = FeatureBlock::new(rows, features, values, Precision::F64);
                let (shap, inter) = (engine.shap(&block).unwrap(), engine.interactions(&block).unwrap());
                let w = features + 1;
                for r in 0..rows {
                    let x = block.row(r);
                    let (want, want_pairs) = banzhaf_by_coalitions(&model, x);
                    let scale = want.iter().chain(&want_pairs).fold(1e-9f64, |a, v| a.max(v.abs()));
                    let got = shap.row(r, 0);
                    let mut margin = [0.0];
                    model.predict_row(x, &mut margin);
                    let matrix = &inter.values[r * w * w..(r + 1) * w * w];
                    for i in 0..features {
                        assert!((got[i] - want[i]).abs() <= 1e-12 * scale, "case {case} row {r} feature {i}: {} against {}", got[i], want[i]);
                        for j in (0..features).filter(|&j| j != i) {
                            let (g, e) = (matrix[i * w + j], want_pairs[i * features + j]);
                            assert!((g - e).abs() <= 1e-12 * scale, "case {case} row {r} pair ({i}, {j}): {g} against {e}");
                            checked_pairs += usize::from(e.abs() > 1e-6);
                        }
                        // Each matrix row sums to the feature's Banzhaf value.
                        let row_sum: f64 = matrix[i * w..i * w + features].iter().sum();
                        assert!((row_sum - want[i]).abs() <= 1e-12 * scale, "case {case} row {r}: matrix row {i} sums to {row_sum}, not {}", want[i]);
                    }
                    // The bias is what the values leave of the prediction, in both layouts.
                    let total: f64 = got.iter().sum();
                    assert!(
                        (total - margin[0]).abs() <= 1e-12 * scale.max(margin[0].abs()),
                        "case {case} row {r}: values and bias sum to {total}, not the margin {}",
                        margin[0]
                    );
                    let matrix_total: f64 = matrix.iter().sum();
                    assert!(
                        (matrix_total - margin[0]).abs() <= 1e-12 * scale.max(margin[0].abs()),
                        "case {case} row {r}: the matrix sums to {matrix_total}"
                    );
                }
            }
        }
        assert!(checked_pairs > 100, "the models interact: {checked_pairs} nonzero pairs checked");
    }
}
