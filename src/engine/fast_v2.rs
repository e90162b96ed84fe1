//! `fast-v2`: Fast TreeSHAP v2 (Yang 2021). Everything about a leaf's contribution that does
//! not depend on the row is tabulated once per model.
//!
//! With the notation of `fast_v1`, a row enters a leaf's formula only through its hot set S
//! (which of the leaf's `d` path features it satisfies) and the cold product Z_C. So for every
//! leaf we store `Q(S)` for all 2^d subsets; explaining a row is then a walk that tracks S as a
//! bit mask (one bit per distinct feature, in order of first appearance on the path) and spends
//! O(d) per leaf: `cold i: -v·Z_C·Q(S)`, `hot i: v·(1 - z_i)·Z_C·Q(S \ {i})`.
//!
//! The tables take `Σ_leaves 2^d` f64 values; building them is refused (with the size) when it
//! exceeds the memory bound, and `auto` only picks v2 when they fit and pay for themselves.

use std::sync::Arc;

use super::interactions::FastInteractions;
use super::path::{poly_mul_linear, weighted_sum, ShapleyWeights};
use super::prepared::{PreparedModel, PreparedTree};
use super::{shap_by_tree, Attributions, Explainer, FeatureBlock, Interactions};
use crate::error::{Error, Result};
use crate::model::{Model, Tree};

/// Default bound on the size of the v2 tables: 256 MiB.
pub const DEFAULT_V2_MEMORY_BYTES: usize = 256 << 20;

/// Most distinct features on one path that v2 will tabulate (2^24 entries for one leaf).
const MAX_PATH_FEATURES: usize = 24;

/// One leaf's table and its path features.
#[derive(Debug, Clone, Copy)]
struct LeafEntry {
    /// Distinct features on the path.
    d: u8,
    /// Start of this leaf's 2^d values in `V2Tree::table`.
    table: usize,
    /// Start of this leaf's d (feature, zero) pairs in `V2Tree::path`.
    path: usize,
}

/// Per-tree v2 data.
#[derive(Debug, Default)]
struct V2Tree {
    /// For each internal node: bit of its feature on the path, and whether the path meets the
    /// feature here first.
    node_bit: Vec<(u8, bool)>,
    /// For each node: index into `leaves` (leaves only).
    leaf_of_node: Vec<u32>,
    leaves: Vec<LeafEntry>,
    /// (feature, cover fraction) per path bit, per leaf.
    path: Vec<(u32, f64)>,
    table: Vec<f64>,
}

pub(crate) struct FastV2 {
    prepared: Arc<PreparedModel>,
    trees: Vec<V2Tree>,
    interactions: FastInteractions,
}

/// Size in bytes of the v2 tables for `prepared`, or `None` if some path has more than
/// [`MAX_PATH_FEATURES`] distinct features.
pub(crate) fn table_bytes(prepared: &PreparedModel) -> Option<usize> {
    let mut total = 0usize;
    for (tree, prep) in prepared.model.trees.iter().zip(&prepared.trees) {
        for d in prep.leaf_path_lengths(tree) {
            if d > MAX_PATH_FEATURES {
                return None;
            }
            total = total.checked_add((1usize << d) * 8)?;
        }
    }
    Some(total)
}

impl FastV2 {
    pub fn new(prepared: Arc<PreparedModel>, memory_bound: usize) -> Result<Self> {
        match table_bytes(&prepared) {
            None => {
                return Err(Error::Unavailable(format!(
                    "fast-v2: a path has more than {MAX_PATH_FEATURES} distinct features; use fast-v1"
                )))
            }
            Some(bytes) if bytes > memory_bound => {
                return Err(Error::Unavailable(format!(
                    "fast-v2 needs {:.1} MiB of tables for this model, over the bound of {:.1} MiB; use fast-v1 or raise the bound",
                    bytes as f64 / (1 << 20) as f64,
                    memory_bound as f64 / (1 << 20) as f64
                )))
            }
            Some(_) => {}
        }
        let weights = ShapleyWeights::new(prepared.max_depth);
        let trees = prepared.model.trees.iter().zip(&prepared.trees).map(|(t, p)| build_tree(t, p, &weights)).collect();
        Ok(FastV2 { prepared, trees, interactions: FastInteractions::default() })
    }
}

fn build_tree(tree: &Tree, prep: &PreparedTree, weights: &ShapleyWeights) -> V2Tree {
    let n = tree.nodes.len();
    let mut out = V2Tree { node_bit: vec![(0, false); n], leaf_of_node: vec![u32::MAX; n], ..Default::default() };
    let mut stack: Vec<(usize, Vec<(u32, f64)>)> = vec![(0, Vec::new())];
    let mut poly_stack: Vec<Vec<f64>> = Vec::new();
    while let Some((i, path)) = stack.pop() {
        let node = &tree.nodes[i];
        if node.is_leaf() {
            let d = path.len();
            let entry = LeafEntry { d: d as u8, table: out.table.len(), path: out.path.len() };
            out.leaf_of_node[i] = out.leaves.len() as u32;
            out.leaves.push(entry);
            out.table.resize(entry.table + (1 << d), 0.0);
            if d > 0 {
                let c = weights.get(d);
                let zeros: Vec<f64> = path.iter().map(|p| p.1).collect();
                fill_table(&zeros, c, &mut out.table[entry.table..], &mut poly_stack);
            }
            out.path.extend_from_slice(&path);
            continue;
        }
        let [rl, rr] = prep.ratios[i];
        let existing = path.iter().position(|p| p.0 == node.feature);
        out.node_bit[i] = match existing {
            Some(b) => (b as u8, false),
            None => (path.len() as u8, true),
        };
        for (child, ratio) in [(node.right, rr), (node.left, rl)] {
            let mut next = path.clone();
            match existing {
                Some(b) => next[b].1 *= ratio,
                None => next.push((node.feature, ratio)),
            }
            stack.push((child as usize, next));
        }
    }
    out
}

/// `table[S] = Q(S)` for every subset S of the path's bits, by a depth-first walk over
/// include/exclude decisions that keeps one polynomial per depth.
fn fill_table(zeros: &[f64], c: &[f64], table: &mut [f64], polys: &mut Vec<Vec<f64>>) {
    let d = zeros.len();
    polys.resize(d + 1, Vec::new());
    polys[0].clear();
    polys[0].push(1.0);
    // Iterate masks in an order where each mask extends a prefix: recursive over bits.
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

fn shap_tree(tree: &Tree, prep: &PreparedTree, v2: &V2Tree, x: &[f64], phi: &mut [f64], stack: &mut Vec<(u32, u32)>) {
    stack.clear();
    stack.push((0, 0));
    while let Some((i, mask)) = stack.pop() {
        let i = i as usize;
        let node = &tree.nodes[i];
        if node.is_leaf() {
            let leaf = v2.leaves[v2.leaf_of_node[i] as usize];
            let d = leaf.d as usize;
            if d == 0 {
                continue;
            }
            let path = &v2.path[leaf.path..leaf.path + d];
            let table = &v2.table[leaf.table..leaf.table + (1 << d)];
            let mut cold_product = 1.0;
            for (b, &(_, z)) in path.iter().enumerate() {
                if mask & (1 << b) == 0 {
                    cold_product *= z;
                }
            }
            let v = prep.value[i] * cold_product;
            let cold_value = -v * table[mask as usize];
            for (b, &(feature, z)) in path.iter().enumerate() {
                let bit = 1u32 << b;
                phi[feature as usize] += if mask & bit != 0 {
                    v * (1.0 - z) * table[(mask ^ bit) as usize]
                } else {
                    cold_value
                };
            }
            continue;
        }
        let (b, first) = v2.node_bit[i];
        let bit = 1u32 << b;
        let hot_mask = if first { mask | bit } else { mask };
        let cold_mask = mask & !bit;
        let (hot, cold) = if tree.goes_left(node, x[node.feature as usize]) {
            (node.left, node.right)
        } else {
            (node.right, node.left)
        };
        stack.push((cold, cold_mask));
        stack.push((hot, hot_mask));
    }
}

impl Explainer for FastV2 {
    fn name(&self) -> &'static str {
        "fast-v2"
    }

    fn model(&self) -> &Model {
        &self.prepared.model
    }

    fn shap(&self, block: &FeatureBlock) -> Result<Attributions> {
        let p = &*self.prepared;
        shap_by_tree(p, block, Vec::new, |t, x, phi, stack| {
            shap_tree(&p.model.trees[t], &p.trees[t], &self.trees[t], x, phi, stack)
        })
    }

    /// Interaction values come from the quadrature engine's walk (exact, and far cheaper than
    /// conditioning a TreeSHAP walk on every feature).
    fn interactions(&self, block: &FeatureBlock) -> Result<Interactions> {
        self.interactions.compute(&self.prepared, block)
    }
}
