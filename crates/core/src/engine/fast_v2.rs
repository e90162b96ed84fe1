//! `fast-v2`: Fast TreeSHAP v2 (Yang 2021): everything about a leaf's contribution that does
//! not depend on the row is tabulated once per model, and rows are explained branch-free, a
//! block of rows at a time.
//!
//! With the notation of `fast_v1`, a row enters a leaf's formula only through its hot set S
//! (which of the leaf's `d` path features it satisfies). Writing `Z_C(S) = Π_{k∉S} z_k` and
//! `A(S) = v · Z_C(S) · Q(S)` for the leaf value `v`, the contributions are
//!
//! ```text
//!   cold i:  -v·Z_C(S)·Q(S)               = -A(S)
//!   hot i:    v·(1 - z_i)·Z_C(S)·Q(S\{i}) = (1 - z_i)/z_i · A(S\{i})
//! ```
//!
//! so for every path element `i` the contribution is `coef · A(S & !bit_i)` with
//! `coef = (1 - z_i)/z_i` when `i` is hot and `-1` when it is cold: one table read, one select
//! and one multiply-add, with no branch on the row. (An element with `z_i = 0` gets a table of
//! its own exact contributions instead.)
//!
//! Two sibling leaves are merged into one *pair*: their path features agree above the parent,
//! so indexing by the parent's hot set plus the parent's direction, one table serves both
//! leaves' shared elements and one more holds the parent's own feature. A full tree of depth
//! `D` then costs `D` element updates per pair instead of `2·D`.
//!
//! Rows go through a tree in two phases: a walk over the tree's nodes in preorder computes every
//! unit's (leaf's or pair's) index for each row of the block; then, unit by unit and element by
//! element, the rows' contributions are gathered from the same small table (in L1) and added
//! into a feature-major accumulator, a loop the compiler vectorises.
//!
//! The tables take about `Σ_leaves 2^d` f64 values; building them is refused (with the size) when
//! that exceeds the memory bound, and `auto` only picks v2 when they fit and pay for themselves.

use std::sync::Arc;

use rayon::prelude::*;

use super::block::FeatureBlock;
use super::decision::Decision;
use super::drivers::{rows_per_task, shap_by_task, ROWS_PER_TASK};
use super::engine_trait::Engine;
use super::interactions::FastInteractions;
use super::output::{Attributions, Interactions};
use super::path::{poly_mul_linear, weighted_sum, ShapleyWeights};
use super::prepared::{PreparedModel, PreparedTree, UNREACHABLE};

/// A node waiting to be visited while a tree's tables are built: the node, the path above it
/// (feature, fraction), its depth, and whether it is a right child.
type PendingNode = (usize, Vec<(u32, f64)>, u16, bool);
use crate::error::{Error, Result};
use crate::model::{Model, Tree};

/// Most distinct features on one path that v2 will tabulate (2^24 entries for one leaf).
const MAX_PATH_FEATURES: usize = 24;

/// Size in bytes of the v2 tables for `prepared`, or `None` if some path has more than
/// [`MAX_PATH_FEATURES`] distinct features. (Elements with a zero cover fraction add a table
/// each on top; models rarely have them.)
pub(crate) fn table_bytes(prepared: &PreparedModel) -> Option<usize> {
    let mut total = 0usize;
    for (tree, prep) in prepared.model.trees().iter().zip(&prepared.trees) {
        if prep.leaf_path_lengths(tree).any(|d| d > MAX_PATH_FEATURES) {
            return None;
        }
        for (i, node) in tree.nodes.iter().enumerate() {
            if node.is_leaf() || prep.distinct[i] == UNREACHABLE {
                continue;
            }
            let entries = if is_pair(tree, i) {
                // The shared table and the split feature's, each over (parent's set, direction).
                2usize << (prep.distinct[i] as usize + 1)
            } else {
                [node.left, node.right].iter().filter(|&&c| tree.nodes[c as usize].is_leaf()).map(|&c| 1usize << prep.distinct[c as usize]).sum()
            };
            total = total.checked_add(entries.checked_mul(8)?)?;
        }
    }
    Some(total)
}

/// Whether internal node `i`'s children are both leaves (they then form one pair).
fn is_pair(tree: &Tree, i: usize) -> bool {
    let n = &tree.nodes[i];
    !n.is_leaf() && tree.nodes[n.left as usize].is_leaf() && tree.nodes[n.right as usize].is_leaf()
}

/// What a step of the preorder walk does.
#[derive(Debug, Clone, Copy, PartialEq)]
enum StepKind {
    /// An internal node: computes both children's hot sets.
    Split,
    /// A leaf on its own: its hot set is its unit's index.
    Leaf,
    /// The parent of a pair of leaves: its hot set plus its direction is the unit's index.
    Pair,
}

/// One node of a tree in preorder, compiled for the walk.
#[derive(Debug, Clone, Copy)]
struct Step {
    kind: StepKind,
    test: Decision,
    feature: u32,
    /// Leaf and pair steps: the unit whose index they set.
    unit: u32,
    /// Split: the bit of the node's feature in its children's hot sets. Pair: the direction bit.
    bit: u32,
    /// Split: whether the path meets the feature here first (a hot child sets the bit).
    first: bool,
    /// Whether the node is its parent's right child (its hot set waits on the walk's stack).
    right: bool,
    depth: u16,
}

/// One path element of a unit: its contribution for a unit index `m` is
/// `(m & bit != 0 ? hot : cold) · table[m & keep]`.
#[derive(Debug, Clone, Copy)]
struct Elem {
    feature: u32,
    bit: u32,
    /// The index bits the table is read with (the unit's bits less `bit`).
    keep: u32,
    /// Start of the table in `V2Tree::tables`; it holds `size` values.
    table: usize,
    size: usize,
    hot: f64,
    cold: f64,
}

/// Per-tree v2 data.
#[derive(Debug, Default)]
struct V2Tree {
    steps: Vec<Step>,
    /// Element range of each unit, in step order.
    units: Vec<(u32, u32)>,
    elems: Vec<Elem>,
    tables: Vec<f64>,
    /// Deepest step, for the walk's stack.
    max_depth: usize,
}

pub(crate) struct FastV2 {
    prepared: Arc<PreparedModel>,
    trees: Vec<V2Tree>,
    interactions: FastInteractions,
}

impl FastV2 {
    pub fn new(prepared: Arc<PreparedModel>, memory_bound: usize) -> Result<Self> {
        super::drivers::check_depth("fast-v2", &prepared)?;
        match table_bytes(&prepared) {
            None => {
                return Err(Error::Unsupported(format!(
                    "fast-v2: a path has more than {MAX_PATH_FEATURES} distinct features; use linear (or fast-v1)"
                )))
            }
            Some(bytes) if bytes > memory_bound => {
                return Err(Error::ResourceExhausted(format!(
                    "fast-v2 needs {:.1} MiB of tables for this model, over the bound of {:.1} MiB; use linear (no tables) or raise the bound",
                    bytes as f64 / (1 << 20) as f64,
                    memory_bound as f64 / (1 << 20) as f64
                )))
            }
            Some(_) => {}
        }
        let weights = ShapleyWeights::new(prepared.max_depth);
        let trees = prepared.model.trees().par_iter().zip(&prepared.trees).map(|(t, p)| TreeBuilder::new(t, p, &weights).build()).collect();
        Ok(FastV2 { prepared, trees, interactions: FastInteractions::default() })
    }
}

/// A leaf's tables over its hot sets: `Q(S)` and `A(S) = v·Z_C(S)·Q(S)`.
struct LeafTables {
    value: f64,
    path: Vec<(u32, f64)>,
    zeros: Vec<f64>,
    q: Vec<f64>,
    a: Vec<f64>,
}

impl LeafTables {
    fn new(value: f64, path: Vec<(u32, f64)>, weights: &ShapleyWeights, polys: &mut Vec<Vec<f64>>) -> Self {
        let d = path.len();
        let mut q = vec![0.0; 1 << d];
        let zeros: Vec<f64> = path.iter().map(|p| p.1).collect();
        fill_table(&zeros, weights.get(d), &mut q, polys);
        let a = (0..1usize << d).map(|s| value * cold_product(&zeros, s) * q[s]).collect();
        LeafTables { value, path, zeros, q, a }
    }

    /// Exact contribution of path element `b` for hot set `s` (no division: any `z` works).
    fn contribution(&self, b: usize, s: usize) -> f64 {
        let bit = 1usize << b;
        if s & bit == 0 {
            return -self.a[s];
        }
        self.value * (1.0 - self.zeros[b]) * cold_product(&self.zeros, s) * self.q[s ^ bit]
    }
}

/// `Π_{k∉s} z_k`.
fn cold_product(zeros: &[f64], s: usize) -> f64 {
    zeros.iter().enumerate().filter(|(k, _)| s & (1 << k) == 0).map(|(_, z)| z).product()
}

/// The hot coefficient `(1 - z)/z` of an element read from the shared table, or `None` when
/// `z` is so small (or zero) that the shared table cannot carry it: the element then gets a
/// table of its own.
fn hot_coefficient(z: f64) -> Option<f64> {
    let r = (1.0 - z) / z;
    (z >= 1e-100 && r.is_finite()).then_some(r)
}

/// Compiles one tree: steps in preorder, units with their elements and tables.
struct TreeBuilder<'a> {
    tree: &'a Tree,
    prep: &'a PreparedTree,
    weights: &'a ShapleyWeights,
    polys: Vec<Vec<f64>>,
    out: V2Tree,
}

impl<'a> TreeBuilder<'a> {
    fn new(tree: &'a Tree, prep: &'a PreparedTree, weights: &'a ShapleyWeights) -> Self {
        TreeBuilder { tree, prep, weights, polys: Vec::new(), out: V2Tree::default() }
    }

    fn build(mut self) -> V2Tree {
        // (node, path before the node, depth, is a right child)
        let mut stack: Vec<PendingNode> = vec![(0, Vec::new(), 0, false)];
        while let Some((i, path, depth, right)) = stack.pop() {
            let node = &self.tree.nodes[i];
            self.out.max_depth = self.out.max_depth.max(depth as usize + 1);
            let mut step =
                Step { kind: StepKind::Split, test: Decision::of(self.tree, i), feature: node.feature, unit: 0, bit: 0, first: false, right, depth };
            if node.is_leaf() {
                if path.is_empty() {
                    continue; // a tree that is one leaf attributes nothing
                }
                step.kind = StepKind::Leaf;
                step.unit = self.leaf_unit(i, path);
                self.out.steps.push(step);
                continue;
            }
            if is_pair(self.tree, i) {
                step.kind = StepKind::Pair;
                step.bit = 1 << path.len();
                step.unit = self.pair_unit(i, path);
                self.out.steps.push(step);
                continue;
            }
            let existing = path.iter().position(|p| p.0 == node.feature);
            step.bit = 1 << existing.unwrap_or(path.len());
            step.first = existing.is_none();
            self.out.steps.push(step);
            let [rl, rr] = self.prep.ratios[i];
            for (child, ratio, is_right) in [(node.right, rr, true), (node.left, rl, false)] {
                stack.push((child as usize, child_path(&path, existing, node.feature, ratio), depth + 1, is_right));
            }
        }
        self.out
    }

    fn leaf(&mut self, i: usize, path: Vec<(u32, f64)>) -> LeafTables {
        LeafTables::new(self.prep.value[i], path, self.weights, &mut self.polys)
    }

    /// Appends a table and returns its start.
    fn table(&mut self, values: impl IntoIterator<Item = f64>) -> usize {
        let start = self.out.tables.len();
        self.out.tables.extend(values);
        start
    }

    /// Starts a unit; its elements are the ones pushed until the next unit starts.
    fn unit(&mut self, elems: Vec<Elem>) -> u32 {
        let start = self.out.elems.len() as u32;
        self.out.elems.extend(elems);
        self.out.units.push((start, self.out.elems.len() as u32));
        (self.out.units.len() - 1) as u32
    }

    fn leaf_unit(&mut self, i: usize, path: Vec<(u32, f64)>) -> u32 {
        let leaf = self.leaf(i, path);
        let size = leaf.a.len();
        let shared = self.table(leaf.a.iter().copied());
        let mut elems = Vec::with_capacity(leaf.path.len());
        for (b, &(feature, z)) in leaf.path.iter().enumerate() {
            elems.push(match hot_coefficient(z) {
                Some(hot) => shared_elem(feature, 1 << b, size, shared, hot),
                None => {
                    let own = self.table((0..size).map(|s| leaf.contribution(b, s)));
                    own_elem(feature, size, own)
                }
            });
        }
        self.unit(elems)
    }

    /// Two sibling leaves under node `i`, indexed by `T | dir·2^D`: `T` the hot set of the
    /// parent's `D` path features, `dir` set when the row goes left at `i`.
    fn pair_unit(&mut self, i: usize, path: Vec<(u32, f64)>) -> u32 {
        let node = &self.tree.nodes[i];
        let d = path.len();
        let existing = path.iter().position(|p| p.0 == node.feature);
        let [rl, rr] = self.prep.ratios[i];
        let left = self.leaf(node.left as usize, child_path(&path, existing, node.feature, rl));
        let right = self.leaf(node.right as usize, child_path(&path, existing, node.feature, rr));
        let size = 2usize << d;
        let dir = 1usize << d;
        // Each leaf's hot set for a unit index.
        let child_sets = |index: usize| -> (usize, usize) {
            let t = index & (dir - 1);
            let goes_left = index & dir != 0;
            match existing {
                None => {
                    let f = 1usize << d;
                    if goes_left {
                        (t | f, t)
                    } else {
                        (t, t | f)
                    }
                }
                Some(s) => {
                    let t_cold = t & !(1usize << s);
                    if goes_left {
                        (t, t_cold)
                    } else {
                        (t_cold, t)
                    }
                }
            }
        };
        let sum = |b: usize, index: usize| {
            let (l, r) = child_sets(index);
            left.contribution(b, l) + right.contribution(b, r)
        };
        let shared = self.table((0..size).map(|index| {
            let (l, r) = child_sets(index);
            left.a[l] + right.a[r]
        }));
        let split_slot = existing.unwrap_or(d);
        let mut elems = Vec::with_capacity(d + 1);
        for (b, &(feature, z)) in path.iter().enumerate() {
            if b == split_slot {
                continue;
            }
            // Above the parent both leaves share the element's fraction, so the shared table
            // (the two leaves' A summed) serves it.
            elems.push(match hot_coefficient(z) {
                Some(hot) => shared_elem(feature, 1 << b, size, shared, hot),
                None => {
                    let own = self.table((0..size).map(|index| sum(b, index)));
                    own_elem(feature, size, own)
                }
            });
        }
        let own = self.table((0..size).map(|index| sum(split_slot, index)));
        elems.push(own_elem(node.feature, size, own));
        self.unit(elems)
    }
}

/// An element read from a shared table with the hot coefficient `hot` (cold: -1).
fn shared_elem(feature: u32, bit: u32, size: usize, table: usize, hot: f64) -> Elem {
    Elem { feature, bit, keep: (size as u32 - 1) & !bit, table, size, hot, cold: -1.0 }
}

/// An element with a table of its own contributions.
fn own_elem(feature: u32, size: usize, table: usize) -> Elem {
    Elem { feature, bit: 0, keep: size as u32 - 1, table, size, hot: 1.0, cold: 1.0 }
}

/// The path below a split on `feature` whose child takes `ratio` of the cover.
fn child_path(path: &[(u32, f64)], existing: Option<usize>, feature: u32, ratio: f64) -> Vec<(u32, f64)> {
    let mut next = path.to_vec();
    match existing {
        Some(b) => next[b].1 *= ratio,
        None => next.push((feature, ratio)),
    }
    next
}

/// `table[S] = Q(S)` for every subset S of the path's bits, by a depth-first walk over
/// include/exclude decisions that keeps one polynomial per depth.
fn fill_table(zeros: &[f64], c: &[f64], table: &mut [f64], polys: &mut Vec<Vec<f64>>) {
    let d = zeros.len();
    polys.resize(d + 1, Vec::new());
    polys[0].clear();
    polys[0].push(1.0);
    fn go(bit: usize, mask: usize, zeros: &[f64], c: &[f64], table: &mut [f64], polys: &mut [Vec<f64>]) {
        if bit == zeros.len() {
            table[mask] = weighted_sum(&polys[bit], c);
            return;
        }
        // Exclude the bit: same polynomial.
        let (head, tail) = polys.split_at_mut(bit + 1);
        tail[0].clear();
        tail[0].extend_from_slice(&head[bit]);
        go(bit + 1, mask, zeros, c, table, polys);
        // Include it: multiply by (z + t).
        let (head, tail) = polys.split_at_mut(bit + 1);
        tail[0].clear();
        tail[0].extend_from_slice(&head[bit]);
        poly_mul_linear(&mut tail[0], zeros[bit]);
        go(bit + 1, mask | (1 << bit), zeros, c, table, polys);
    }
    go(0, 0, zeros, c, table, polys);
}

/// Phase one for one row: every unit's index, written to `index[unit * stride + row]`.
fn unit_indices(tree: &Tree, v2: &V2Tree, x: &[f64], index: &mut [u32], stride: usize, row: usize, pending: &mut [u32]) {
    let mut current = 0u32;
    for step in &v2.steps {
        let set = if step.right { pending[step.depth as usize] } else { current };
        match step.kind {
            StepKind::Leaf => index[step.unit as usize * stride + row] = set,
            StepKind::Pair => {
                let dir = if step.test.goes_left(tree, x[step.feature as usize]) { step.bit } else { 0 };
                index[step.unit as usize * stride + row] = set | dir;
            }
            StepKind::Split => {
                let hot = if step.first { set | step.bit } else { set };
                let cold = set & !step.bit;
                let (left, right) = if step.test.goes_left(tree, x[step.feature as usize]) { (hot, cold) } else { (cold, hot) };
                current = left;
                pending[step.depth as usize + 1] = right;
            }
        }
    }
}

/// Phase two: adds every unit's contributions for `rows` rows into `acc` (feature-major,
/// `acc[feature * stride + row]`).
#[inline(always)]
fn accumulate_impl(v2: &V2Tree, index: &[u32], stride: usize, rows: usize, acc: &mut [f64]) {
    for (u, &(start, end)) in v2.units.iter().enumerate() {
        let sets = &index[u * stride..u * stride + rows];
        for e in &v2.elems[start as usize..end as usize] {
            let table = &v2.tables[e.table..e.table + e.size];
            let out = &mut acc[e.feature as usize * stride..e.feature as usize * stride + rows];
            assert!((e.keep as usize) < table.len());
            for (o, &m) in out.iter_mut().zip(sets) {
                let c = if m & e.bit != 0 { e.hot } else { e.cold };
                // SAFETY: `m & keep <= keep < table.len()`, asserted above.
                *o += c * unsafe { *table.get_unchecked((m & e.keep) as usize) };
            }
        }
    }
}

/// [`accumulate_impl`] compiled for AVX2 (gathers), chosen at run time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn accumulate_avx2(v2: &V2Tree, index: &[u32], stride: usize, rows: usize, acc: &mut [f64]) {
    accumulate_impl(v2, index, stride, rows, acc)
}

fn accumulate(v2: &V2Tree, index: &[u32], stride: usize, rows: usize, acc: &mut [f64]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2, checked just above.
        return unsafe { accumulate_avx2(v2, index, stride, rows, acc) };
    }
    accumulate_impl(v2, index, stride, rows, acc)
}

/// Per-task buffers, reused across blocks.
#[derive(Default)]
struct Scratch {
    index: Vec<u32>,
    acc: Vec<f64>,
    pending: Vec<u32>,
}

impl Engine for FastV2 {
    fn name(&self) -> &'static str {
        "fast-v2"
    }

    fn model(&self) -> &Model {
        &self.prepared.model
    }

    fn shap(&self, block: &FeatureBlock) -> Result<Attributions> {
        let p = &*self.prepared;
        let (f, groups) = (p.model.num_features(), p.model.num_groups());
        let (w, width) = (f + 1, p.shap_width());
        let stride = ROWS_PER_TASK;
        let max_units = self.trees.iter().map(|t| t.units.len()).max().unwrap_or(0);
        let max_depth = self.trees.iter().map(|t| t.max_depth).max().unwrap_or(0);
        shap_by_task(p, block, rows_per_task(block.rows()), Scratch::default, |s, first, chunk| {
            let n = chunk.len() / width;
            s.index.resize(max_units * stride, 0);
            s.pending.resize(max_depth + 1, 0);
            s.acc.clear();
            s.acc.resize(groups * f * stride, 0.0);
            for (tree, v2) in p.model.trees().iter().zip(&self.trees) {
                for r in 0..n {
                    unit_indices(tree, v2, block.row(first + r), &mut s.index, stride, r, &mut s.pending);
                }
                let acc = &mut s.acc[tree.group * f * stride..(tree.group + 1) * f * stride];
                accumulate(v2, &s.index, stride, n, acc);
            }
            for (r, out) in chunk.chunks_mut(width).enumerate() {
                for g in 0..groups {
                    for j in 0..f {
                        out[g * w + j] = s.acc[(g * f + j) * stride + r];
                    }
                }
            }
        })
    }

    /// Interaction values come from the quadrature engine's walk (exact, and far cheaper than
    /// conditioning a TreeSHAP walk on every feature).
    fn interactions(&self, block: &FeatureBlock) -> Result<Interactions> {
        self.interactions.compute(&self.prepared, block)
    }
}
