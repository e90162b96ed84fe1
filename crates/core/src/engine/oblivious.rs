//! `oblivious`: SHAP values of oblivious trees (CatBoost's symmetric trees, and any tree whose
//! nodes at each level all split the same way) from a table per tree, as CatBoost's own
//! `ShapValues` does.
//!
//! In an oblivious tree of depth `d` a row's path is decided level by level, the same test at
//! every node of a level, so the row's leaf index (bit `h`, from the top, set where level `h`
//! sends it right) is all the path-dependent TreeSHAP of the tree reads from the row: its values
//! are a function of that index. So the values of all `2^d` indices are computed once, exactly,
//! and a row costs `d` tests and one row of the table per tree.
//!
//! The table of index `r` is TreeSHAP's leaf sum written out: for every leaf `l`, each distinct
//! feature `j` of the tree enters the unique path once, with `zero` the product of the cover
//! ratios of `j`'s levels on `l`'s path and `one` 1 where `r` and `l` take the same branches at
//! all of `j`'s levels (else 0), and `l`'s value is shared by the unwound path weights. That is
//! `4^d` pairs of `O(k²)` steps for `k` distinct features once per tree (about 50 ns a pair:
//! 0.2 ms for depth 6, 60 ms for depth 10), and `2^d · k` values of memory (a depth-6 tree of
//! six features: 3 KiB).
//!
//! A tree that is not oblivious, or whose table would pass the memory bound, is walked by
//! `treeshap`, so the engine explains any model; `auto` picks it where every tree has a table
//! and the tables pay for themselves (see the `auto` module). Interaction values are
//! `treeshap`'s.

use std::sync::Arc;

use rayon::prelude::*;

use super::block::FeatureBlock;
use super::drivers::shap_by_tree;
use super::engine_trait::Engine;
use super::output::{Attributions, Interactions};
use super::path::{extend, unwound_sum, PathElem, NO_FEATURE};
use super::prepared::{PreparedModel, PreparedTree};
use super::treeshap::{interactions_for_rows, path_scratch, shap_tree};
use crate::error::Result;
use crate::model::{Model, Node, Tree};

/// Deepest tree given a table: 4^12 pairs of leaf indices to build (about a second a tree),
/// and 4,096 rows of table.
pub(crate) const MAX_TABLE_DEPTH: usize = 12;

/// The engine.
pub(crate) struct Oblivious {
    prepared: Arc<PreparedModel>,
    /// Per tree, its table; `None` for a tree walked by `treeshap`.
    tables: Vec<Option<LeafTable>>,
}

/// One oblivious tree's SHAP values, by leaf index.
struct LeafTable {
    /// A node of each level, root first: the level's split.
    levels: Vec<u32>,
    /// The distinct players the tree's splits credit (its features, or combinations': see
    /// [`PreparedModel::players`]).
    features: Vec<u32>,
    /// Row-major `2^d × features.len()`: the values of each leaf index.
    values: Vec<f64>,
}

impl Oblivious {
    /// Tabulates every oblivious tree of depth at most [`MAX_TABLE_DEPTH`] whose table fits
    /// what is left of `memory_bytes` (in the model's order), in parallel over trees.
    pub fn new(prepared: Arc<PreparedModel>, memory_bytes: usize) -> Result<Oblivious> {
        super::drivers::check_depth("oblivious", &prepared)?;
        let model = &prepared.model;
        let mut budget = memory_bytes;
        let shapes: Vec<Option<ObliviousShape>> = model
            .trees()
            .iter()
            .map(|tree| {
                let shape = ObliviousShape::of(tree).filter(|s| s.depth() <= MAX_TABLE_DEPTH)?;
                let bytes = shape.table_bytes();
                (bytes <= budget).then(|| {
                    budget -= bytes;
                    shape
                })
            })
            .collect();
        let tables = shapes
            .into_par_iter()
            .enumerate()
            .map(|(t, shape)| shape.map(|s| s.table(&model.trees()[t], &prepared.trees[t], &prepared.players)))
            .collect();
        Ok(Oblivious { prepared, tables })
    }
}

/// The levels of an oblivious tree: a node of each level and every node of each level, left
/// to right (at the last level, the leaves in index order).
pub(crate) struct ObliviousShape {
    levels: Vec<Vec<u32>>,
}

impl ObliviousShape {
    /// The tree's levels, or `None` where it is not oblivious (a leaf above the last level, or
    /// two nodes of a level that split differently).
    pub fn of(tree: &Tree) -> Option<ObliviousShape> {
        let mut levels = vec![vec![0u32]];
        loop {
            let level = levels.last()?;
            let first = &tree.nodes[level[0] as usize];
            if level.iter().all(|&n| tree.nodes[n as usize].is_leaf()) {
                return Some(ObliviousShape { levels });
            }
            // Deeper than any table could be: not worth following (and a chain of splits in a
            // file could be long).
            if levels.len() > MAX_TABLE_DEPTH + 1 {
                return None;
            }
            let mut next = Vec::with_capacity(level.len() * 2);
            for &n in level {
                let node = &tree.nodes[n as usize];
                if node.is_leaf() || !same_split(tree, first, node) {
                    return None;
                }
                next.extend([node.left, node.right]);
            }
            levels.push(next);
        }
    }

    /// Number of levels of splits.
    pub fn depth(&self) -> usize {
        self.levels.len() - 1
    }

    /// Distinct players of the splits (`players[column]`), in level order.
    fn features(&self, tree: &Tree, players: &[u32]) -> Vec<u32> {
        let mut features = Vec::new();
        for level in &self.levels[..self.depth()] {
            let f = players[tree.nodes[level[0] as usize].feature as usize];
            if !features.contains(&f) {
                features.push(f);
            }
        }
        features
    }

    /// Bytes of the tree's table: `2^d` rows of one value per distinct feature (counted as
    /// `d`, at least as many).
    pub fn table_bytes(&self) -> usize {
        (1usize << self.depth()).saturating_mul(self.depth().max(1)).saturating_mul(8)
    }

    /// Pairs of leaf indices the table's build visits: `4^d`.
    pub fn index_pairs(&self) -> f64 {
        4f64.powi(self.depth() as i32)
    }

    /// The tree's table (see the module's documentation).
    fn table(&self, tree: &Tree, prep: &PreparedTree, players: &[u32]) -> LeafTable {
        let d = self.depth();
        let features = self.features(tree, players);
        let k = features.len();
        // Per level, its player's place in `features`; per distinct player, the index bits of
        // its levels (level h is bit d-1-h).
        let slots: Vec<usize> = self.levels[..d]
            .iter()
            .map(|level| features.iter().position(|&g| g == players[tree.nodes[level[0] as usize].feature as usize]).unwrap_or(0))
            .collect();
        let mut masks = vec![0usize; k];
        for (h, &j) in slots.iter().enumerate() {
            masks[j] |= 1 << (d - 1 - h);
        }
        let leaves = &self.levels[d];
        // Per leaf: each feature's share of the training cover that follows the leaf's path.
        let mut zeros = vec![1.0; leaves.len() * k];
        for l in 0..leaves.len() {
            for (h, (level, &j)) in self.levels[..d].iter().zip(&slots).enumerate() {
                let node = level[l >> (d - h)] as usize;
                let right = (l >> (d - 1 - h)) & 1;
                zeros[l * k + j] *= prep.ratios[node][right];
            }
        }
        let mut values = vec![0.0; leaves.len() * k];
        let mut path = vec![PathElem::default(); k + 2];
        for (r, out) in values.chunks_exact_mut(k.max(1)).enumerate().take(leaves.len()) {
            for (l, &leaf) in leaves.iter().enumerate() {
                let v = prep.value[leaf as usize];
                let zero = &zeros[l * k..(l + 1) * k];
                let differs = r ^ l;
                let one = |j: usize| if differs & masks[j] == 0 { 1.0 } else { 0.0 };
                // A leaf that neither the training cover nor the row reaches adds nothing.
                if v == 0.0 || (0..k).any(|j| zero[j] == 0.0 && one(j) == 0.0) {
                    continue;
                }
                extend(&mut path, 0, 1.0, 1.0, NO_FEATURE);
                for (j, &z) in zero.iter().enumerate() {
                    extend(&mut path, j + 1, z, one(j), j as u32);
                }
                for (j, o) in out.iter_mut().enumerate() {
                    *o += unwound_sum(&path, k + 1, j + 1) * (one(j) - zero[j]) * v;
                }
            }
        }
        LeafTable { levels: self.levels[..d].iter().map(|level| level[0]).collect(), features, values }
    }
}

/// Whether two internal nodes test the same thing: feature, rule, missing direction and
/// category set.
fn same_split(tree: &Tree, a: &Node, b: &Node) -> bool {
    let words = |n: &Node| &tree.category_words[n.categories.0 as usize..(n.categories.0 + n.categories.1) as usize];
    a.feature == b.feature && a.rule == b.rule && a.default_left == b.default_left && words(a) == words(b)
}

impl LeafTable {
    /// Adds the tree's values of row `x` to `phi`.
    #[inline]
    fn add_row(&self, tree: &Tree, x: &[f64], phi: &mut [f64]) {
        let mut index = 0;
        for &n in &self.levels {
            let node = &tree.nodes[n as usize];
            index = (index << 1) | usize::from(!tree.goes_left(node, x[node.feature as usize]));
        }
        let k = self.features.len();
        for (&f, v) in self.features.iter().zip(&self.values[index * k..(index + 1) * k]) {
            phi[f as usize] += v;
        }
    }
}

impl Engine for Oblivious {
    fn name(&self) -> &'static str {
        "oblivious"
    }

    fn model(&self) -> &Model {
        &self.prepared.model
    }

    fn memory_bytes(&self) -> Option<usize> {
        Some(self.tables.iter().flatten().map(|t| t.values.len() * 8).sum())
    }

    fn shap(&self, block: &FeatureBlock) -> Result<Attributions> {
        let p = &*self.prepared;
        shap_by_tree(
            p,
            block,
            || path_scratch(p.max_depth),
            |t, x, phi, scratch| match &self.tables[t] {
                Some(table) => table.add_row(&p.model.trees()[t], x, phi),
                None => shap_tree(p, t, x, phi, scratch),
            },
        )
    }

    fn interactions(&self, block: &FeatureBlock) -> Result<Interactions> {
        interactions_for_rows(&self.prepared, block)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::engine::treeshap::TreeShap;
    use crate::test_fixtures::{fixtures, max_row_rel_error};

    #[test]
    fn equals_treeshap_on_every_fixture_and_tabulates_catboosts_symmetric_trees() {
        let mut tabulated = 0;
        for f in &fixtures() {
            let prepared = Arc::new(PreparedModel::new(f.model.clone()).unwrap());
            let engine = Oblivious::new(prepared.clone(), 1 << 30).unwrap();
            let got = engine.shap(&f.block).unwrap();
            let want = TreeShap::new(prepared).unwrap().shap(&f.block).unwrap();
            let width = f.model.num_groups() * (f.model.num_features() + 1);
            let (err, row) = max_row_rel_error(&got.values, &want.values, width);
            assert!(err <= 1e-12, "{}: row {row} off treeshap by {err:e}", f.name);
            let all_tables = engine.tables.iter().all(Option::is_some);
            assert!(!f.is_catboost_symmetric() || all_tables, "{}: a CatBoost symmetric tree without a table", f.name);
            tabulated += usize::from(all_tables);
        }
        assert!(tabulated >= 3, "only {tabulated} fixtures have oblivious trees only");
    }

    #[test]
    fn trees_over_the_memory_bound_are_walked_and_give_the_same_values() {
        let f = fixtures().into_iter().find(|f| f.is_catboost_symmetric()).unwrap();
        let prepared = Arc::new(PreparedModel::new(f.model.clone()).unwrap());
        let all = Oblivious::new(prepared.clone(), 1 << 30).unwrap();
        let none = Oblivious::new(prepared, 0).unwrap();
        assert!(none.tables.iter().all(Option::is_none) && none.memory_bytes() == Some(0));
        let (a, b) = (all.shap(&f.block).unwrap(), none.shap(&f.block).unwrap());
        let width = f.model.num_groups() * (f.model.num_features() + 1);
        let (err, row) = max_row_rel_error(&a.values, &b.values, width);
        assert!(err <= 1e-12, "{}: row {row} differs by {err:e}", f.name);
    }
}
