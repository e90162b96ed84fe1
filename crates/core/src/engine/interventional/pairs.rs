//! Interventional interaction values: the Shapley (or Banzhaf) interaction index of the game
//! `v(S) = mean_z f(x_S, z_~S)`, exact, with the background aggregated as for the values.
//!
//! Each leaf's game against one background row is `v · [F ⊆ S] · [S ∩ X_f = ∅]` (see the parent
//! module: `F` the path features only the background row fails, `X_f` those the explained row
//! fails, `a = |F|`, `b = |X_f|`, `m = a + b`). Its pair terms `Δ_ij v(S)` are non-zero at one
//! coalition each, so the Shapley interaction index of a pair is one weight, by where the pair
//! lies (Grabisch's index, `Σ_S |S|! (m−|S|−2)! / (m−1)! · Δ_ij v(S)`):
//!
//! ```text
//!   i, j ∈ F:               (a−2)! b! / (m−1)!  =  1 / ((m−1) · C(m−2, a−2))
//!   i, j ∈ X_f:             a! (b−2)! / (m−1)!  =  1 / ((m−1) · C(m−2, a))
//!   i ∈ F, j ∈ X_f:       −(a−1)! (b−1)! / (m−1)! = −1 / ((m−1) · C(m−2, a−1))
//! ```
//!
//! times `v`, halved as shap lays the matrix out (`Φ_ij = Φ_ji = I_ij / 2`). The Banzhaf
//! interaction index weighs every coalition `1/2^(m−2)`, so the three are `±1/2^(m−2)`, kept
//! whole off the diagonal as for the path-dependent Banzhaf interactions. The diagonal is each
//! value minus its row's other entries, so rows sum to the values and the matrix to the
//! prediction minus the background's mean margin; features off the leaf's path are null players.
//!
//! Every pair inside `X_f` gets the same amount, and a pair across gets one by its feature of
//! `F`, so for one `X_f` a leaf's pairs take `1 + k + k(k−1)/2` numbers, `k = d − b`: the
//! **packed pair row** (`[inside X_f, across by own feature, own pairs]`, own features lowest
//! bit first, pairs `(p, q)`, `p < q`, in row-major order). Leaves of at most
//! [`MAX_TABLE_BITS`](super::MAX_TABLE_BITS) path features get one such row per possible `X_f`,
//! summed over the background once (`Σ_k C(d, k)(1 + k + k(k−1)/2)` values: 496 for d = 6, 3,072
//! for d = 8, 96,256 for d = 12), so a row costs `d(d−1)/2` additions per leaf whatever the
//! background's size. Other leaves (tables over the memory bound, wider paths) build the same
//! row from their background patterns each time, `O(patterns · a²)` per leaf and row.
//!
//! A leaf and its sibling under a split that is the path's first on its feature (a first-split
//! pair, both leaves) share their features, and the explained row fails that feature at exactly
//! one of them, so the left leaf's fail set gives the right's. Such a pair's two tables are summed
//! into one, by the left leaf's fail set, in pair order (`2^d · d(d−1)/2` values, about the two
//! packed tables' size for `d ≤ 8`): a row then adds each pair of the two leaves once, where it
//! added the two leaves' shares one after the other (where most of a tree's leaves are in such
//! pairs, a row's adds nearly halve), and needs no place lookup.
//!
//! A model's tables are tens of megabytes, more than a cache holds, so rows are explained in
//! blocks, leaf-major ([`PairTables::tree_rows`]): a leaf's table is read for every row of the
//! block while it is in cache, into pair-major sums (each of the group's feature pairs a run of
//! the block's rows), added into the matrices once the group's trees are in.

use std::sync::Arc;

use rayon::prelude::*;

use super::{count_fail_sets, for_each_bit, for_each_bit_wide, low_bits, Holding, Interventional, LeafData, LeafPath};
use crate::engine::block::FeatureBlock;
use crate::engine::options::Index;
use crate::engine::simd::prefetch;
use crate::error::{Error, Result};

/// The three pair weights of one leaf's game by `a = |F|` and `b = |X_f|`, signed and placed
/// (halved for Shapley), 0 where the pair kind cannot occur.
#[derive(Debug)]
pub(super) struct PairWeights {
    index: Index,
    stride: usize,
    /// `[(both in F, both in X_f, one in each)]` by `a · stride + b`.
    table: Vec<(f64, f64, f64)>,
}

impl PairWeights {
    /// `index`'s pair weights, tabulated up to `max_bits` path features.
    pub(super) fn of(index: Index, max_bits: usize) -> PairWeights {
        let stride = max_bits + 1;
        let table = (0..stride * stride).map(|k| Self::compute(index, k / stride, k % stride)).collect();
        PairWeights { index, stride, table }
    }

    fn compute(index: Index, a: usize, b: usize) -> (f64, f64, f64) {
        let m = a + b;
        if m < 2 {
            return (0.0, 0.0, 0.0);
        }
        let w = |k: usize| match index {
            // 1 / ((m−1) · C(m−2, k)) / 2; C(m−2, k) = Π_{j=1..k} (m−2−k+j)/j, exact for small m.
            Index::Shapley => {
                let choose = (1..=k).fold(1.0f64, |c, j| c * (m - 2 - k + j) as f64 / j as f64);
                0.5 / ((m - 1) as f64 * choose)
            }
            Index::Banzhaf => 0.5f64.powi((m - 2) as i32),
        };
        let hot = if a >= 2 { w(a - 2) } else { 0.0 };
        let cold = if b >= 2 { w(a) } else { 0.0 };
        let across = if a >= 1 && b >= 1 { -w(a - 1) } else { 0.0 };
        (hot, cold, across)
    }

    /// The weights for `a` and `b`: from the table where it reaches, else computed (same bits).
    #[inline]
    fn get(&self, a: usize, b: usize) -> (f64, f64, f64) {
        if a < self.stride && b < self.stride {
            self.table[a * self.stride + b]
        } else {
            Self::compute(self.index, a, b)
        }
    }
}

/// Numbers in a packed pair row with `k` own features.
#[inline]
fn row_len(k: usize) -> usize {
    1 + k + k * k.saturating_sub(1) / 2
}

/// Where the pair of own features ranked `p < q` sits in a packed pair row of `k`.
#[inline]
fn pair_at(k: usize, p: usize, q: usize) -> usize {
    1 + k + p * (2 * k - p - 1) / 2 + (q - p - 1)
}

/// Adds one background fail set's share (`h` rows; its features' ranks among the own features,
/// increasing, in `ranks`) to a packed pair row of `k` own features.
#[inline]
fn accumulate(row: &mut [f64], k: usize, ranks: &[usize], h: f64, (hot, cold, across): (f64, f64, f64)) {
    row[0] += h * cold;
    let across = h * across;
    let hot = h * hot;
    for (n, &p) in ranks.iter().enumerate() {
        row[1 + p] += across;
        for &q in &ranks[n + 1..] {
            row[pair_at(k, p, q)] += hot;
        }
    }
}

/// Adds `v` to the pair of features `i` and `j` in the upper half of a `w`-wide matrix (the lower
/// half is filled from it once per row, [`mirror_upper`]: half the scattered writes).
#[inline]
fn add_upper(matrix: &mut [f64], w: usize, i: u32, j: u32, v: f64) {
    let (lo, hi) = if i < j { (i, j) } else { (j, i) };
    matrix[lo as usize * w + hi as usize] += v;
}

/// Copies the upper half of a `w × w` matrix into its lower half.
pub(super) fn mirror_upper(matrix: &mut [f64], w: usize) {
    for i in 0..w {
        for j in i + 1..w {
            matrix[j * w + i] = matrix[i * w + j];
        }
    }
}

/// Adds a packed pair row, times `scale`, to the upper half of one group's `(F+1) × (F+1)`
/// matrix: `own` the features outside the explained row's fail set (in bit order), `cold` those
/// in it.
fn apply(row: &[f64], scale: f64, own: &[u32], cold: &[u32], matrix: &mut [f64], w: usize) {
    let mut add = |i: u32, j: u32, v: f64| add_upper(matrix, w, i, j, v);
    let inside = scale * row[0];
    for (n, &i) in cold.iter().enumerate() {
        for &j in &cold[n + 1..] {
            add(i, j, inside);
        }
    }
    let k = own.len();
    for (p, &i) in own.iter().enumerate() {
        let across = scale * row[1 + p];
        for &j in cold {
            add(i, j, across);
        }
        for (q, &j) in own.iter().enumerate().skip(p + 1) {
            add(i, j, scale * row[pair_at(k, p, q)]);
        }
    }
}

/// Where each packed pair row starts in a leaf's table, by path features `d` and explained fail
/// set (one offset table per `d` serves every leaf).
#[derive(Debug)]
struct PairRows {
    /// `offsets[d][x_f]`, then the table's length.
    offsets: Vec<Vec<u32>>,
}

impl PairRows {
    fn new(max_bits: usize) -> PairRows {
        let offsets = (0..=max_bits)
            .map(|d| {
                let mut at = 0u32;
                let mut offsets: Vec<u32> = (0..1u64 << d)
                    .map(|x| {
                        let start = at;
                        at += row_len(d - x.count_ones() as usize) as u32;
                        start
                    })
                    .collect();
                offsets.push(at);
                offsets
            })
            .collect();
        PairRows { offsets }
    }

    fn len(&self, d: usize) -> usize {
        *self.offsets[d].last().expect("one offset per key and the end") as usize
    }

    #[inline]
    fn row<'a>(&self, rows: &'a [f64], d: usize, x: u64) -> &'a [f64] {
        &rows[self.offsets[d][x as usize] as usize..self.offsets[d][x as usize + 1] as usize]
    }
}

/// How one leaf holds its pairs' share of the background.
#[derive(Debug)]
enum PairLeaf {
    /// A packed pair row per explained fail set, scaled by `value / N`, and the group's pair
    /// number of each of the leaf's pairs (bits `i < j`, `i` outer; see [`Positions`]).
    Table { rows: Vec<f64>, pairs: Vec<u32> },
    /// This leaf's and its first-split sibling's pair values summed, in pair order (the leaf's
    /// pairs, as for `Table`), by this leaf's fail set: `values[x_f · P + p]`, `P = d(d−1)/2`;
    /// the sibling holds [`PairLeaf::InSibling`].
    Paired { values: Vec<f64>, pairs: Vec<u32> },
    /// In the previous leaf's [`PairLeaf::Paired`] values.
    InSibling,
    /// Distinct background fail sets with their counts, and `value / N`.
    Patterns { scale: f64, patterns: Vec<(u64, f64)> },
    /// The values' [`LeafData::WidePatterns`] (a tree of several-word fail sets).
    Wide,
}

/// The background aggregated for interaction values, per tree and leaf, built the first time an
/// [`Interventional`] engine is asked for them (values alone never pay for it).
#[derive(Debug)]
pub(super) struct PairTables {
    trees: Vec<Vec<PairLeaf>>,
    rows: PairRows,
    positions: Positions,
    weights: PairWeights,
    groups: Vec<GroupPairs>,
    /// Rows a block of a task's pair-major sums holds at once (see [`PairTables::tree_rows`]).
    block_rows: usize,
}

/// Bytes of a task's pair-major sums, and of its rows' fail sets: about a core's L2, so a block's
/// sums stay there while every tree of the group adds to them. Within it, the more rows a block
/// holds the more of them read each leaf's table while it is in cache (on the WOODELF benchmark
/// model, 650 pairs: blocks of 64 rows ran 4,300 rows/s on two threads, of 200 rows 5,400).
const PAIR_BLOCK_BYTES: usize = 1 << 20;

/// Most rows of a block (and so of a task: a block's rows are one task's).
const MAX_BLOCK_ROWS: usize = 256;

/// One group's trees and the feature pairs their tabulated leaves touch.
#[derive(Debug, Default)]
pub(super) struct GroupPairs {
    /// The group's trees, in model order.
    pub(super) trees: Vec<usize>,
    /// Each pair number's features `(lo, hi)`, `lo < hi`, in increasing order.
    pairs: Vec<(u32, u32)>,
}

/// Where each of a leaf's pairs sits in its packed pair row, by path features `d` and explained
/// fail set: `at[d][x_f · P + p]`, `P = d(d−1)/2`, pair `p` the `p`-th of bits `i < j` with `i`
/// the outer loop. The place depends on `x_f` only (inside it: 0; across: `1 +` the own
/// feature's rank; both own: their pair's place), so one table per `d` serves every leaf.
#[derive(Debug, Default)]
struct Positions {
    at: Vec<Vec<u8>>,
}

impl Positions {
    /// Tables for the path lengths in `lengths` (the others stay empty).
    fn new(max_bits: usize, lengths: impl Iterator<Item = usize>) -> Positions {
        // A packed row of 12 features holds 79 numbers: every place fits a byte.
        debug_assert!(row_len(max_bits) <= 256);
        let mut at = vec![Vec::new(); max_bits + 1];
        for d in lengths {
            if d > max_bits || !at[d].is_empty() || d < 2 {
                continue;
            }
            let full = low_bits(d);
            let mut places = Vec::with_capacity((1 << d) * d * (d - 1) / 2);
            for xf in 0..1u64 << d {
                let own = full ^ xf;
                let k = own.count_ones() as usize;
                let rank = |i: usize| (own & low_bits(i)).count_ones() as usize;
                for i in 0..d {
                    for j in i + 1..d {
                        let place = match (xf >> i & 1 == 1, xf >> j & 1 == 1) {
                            (true, true) => 0,
                            (true, false) => 1 + rank(j),
                            (false, true) => 1 + rank(i),
                            (false, false) => pair_at(k, rank(i), rank(j)),
                        };
                        places.push(place as u8);
                    }
                }
            }
            at[d] = places;
        }
        Positions { at }
    }

    fn bytes(&self) -> usize {
        self.at.iter().map(Vec::len).sum()
    }
}

impl PairTables {
    /// Aggregates `background` for the pairs of `engine`'s trees, tables leaf by leaf in model
    /// order within `memory_bound` bytes (a budget of its own, beside the values' tables).
    pub(super) fn build(engine: &Interventional, background: &FeatureBlock, memory_bound: usize) -> Result<PairTables> {
        let rows = PairRows::new(engine.table_bits);
        let mut budget = memory_bound;
        let holdings: Vec<Vec<Holding>> = engine
            .trees
            .iter()
            .map(|agg| {
                if agg.walk.words > 1 {
                    return Vec::new();
                }
                let leaves = &agg.walk.leaves;
                let mut held = Vec::with_capacity(leaves.len());
                while held.len() < leaves.len() {
                    let (l, leaf) = (held.len(), &leaves[held.len()]);
                    let d = leaf.features.len();
                    let paired = is_first_split_pair(leaves, l);
                    let bytes = match (d <= engine.table_bits, paired) {
                        (false, _) => usize::MAX,
                        // The two packed tables while they are built, then their sum.
                        (true, true) => (2 * rows.len(d)).max(paired_len(d)) * size_of::<f64>(),
                        (true, false) => rows.len(d) * size_of::<f64>(),
                    };
                    let holding = if bytes <= budget {
                        budget -= bytes;
                        Holding::Table
                    } else {
                        Holding::Patterns
                    };
                    held.push(holding);
                    if paired {
                        held.push(holding);
                    }
                }
                held
            })
            .collect();
        let n = background.rows() as f64;
        let widest = engine.trees.iter().flat_map(|t| t.walk.leaves.iter().map(|l| l.features.len())).max().unwrap_or(0);
        let weights = PairWeights::of(engine.index, widest.min(super::MAX_INTERVENTIONAL_PATH_FEATURES));
        let mut trees: Vec<Vec<PairLeaf>> = engine
            .model
            .trees()
            .par_iter()
            .zip(&engine.trees)
            .zip(&holdings)
            .map(|((tree, agg), holdings)| {
                if agg.walk.words > 1 {
                    return agg.walk.leaves.iter().map(|_| PairLeaf::Wide).collect();
                }
                let counts = count_fail_sets(tree, &agg.walk, background, holdings);
                agg.walk
                    .leaves
                    .iter()
                    .zip(counts)
                    .zip(holdings)
                    .map(|((leaf, counts), holding)| {
                        let mut patterns: Vec<(u64, f64)> = counts.into_iter().map(|(f, c)| (f, c as f64)).collect();
                        patterns.sort_unstable_by_key(|p| p.0);
                        let scale = leaf.value / n;
                        match holding {
                            Holding::Table => {
                                PairLeaf::Table { rows: pair_table(leaf.features.len(), &patterns, scale, &rows, &weights), pairs: Vec::new() }
                            }
                            _ => PairLeaf::Patterns { scale, patterns },
                        }
                    })
                    .collect()
            })
            .collect();
        let pattern_bytes: usize =
            trees.iter().flatten().map(|p| if let PairLeaf::Patterns { patterns, .. } = p { patterns.len() * 16 } else { 0 }).sum();
        if pattern_bytes > budget {
            return Err(Error::ResourceExhausted(format!(
                "interventional interaction values: the background's {} rows aggregate to {} MiB, over the bound of {} MiB; use fewer background rows or raise the bound",
                background.rows(),
                (memory_bound - budget + pattern_bytes) >> 20,
                memory_bound >> 20
            )));
        }
        let groups = number_pairs(engine, &mut trees);
        let positions = Positions::new(
            engine.table_bits,
            engine.trees.iter().zip(&trees).flat_map(|(agg, leaves)| {
                agg.walk.leaves.iter().zip(leaves).filter(|(_, p)| matches!(p, PairLeaf::Table { .. })).map(|(l, _)| l.features.len())
            }),
        );
        for (agg, leaves) in engine.trees.iter().zip(trees.iter_mut()) {
            merge_first_split_pairs(&agg.walk.leaves, leaves, &rows, &positions);
        }
        let widest_group = groups.iter().map(|g| g.pairs.len()).max().unwrap_or(0).max(1);
        let block_rows = (PAIR_BLOCK_BYTES / (widest_group * size_of::<f64>()))
            .min(PAIR_BLOCK_BYTES / (engine.max_slots * size_of::<u64>()))
            .clamp(1, MAX_BLOCK_ROWS);
        Ok(PairTables { trees, rows, positions, weights, groups, block_rows })
    }

    /// The model's groups: their trees and pairs.
    pub(super) fn groups(&self) -> &[GroupPairs] {
        &self.groups
    }

    /// Rows a block of pair-major sums holds at once.
    pub(super) fn block_rows(&self) -> usize {
        self.block_rows
    }

    /// These tables, adding pairs for `rows` explained rows at a time (the tests' way to cross
    /// block boundaries on small data).
    #[cfg(test)]
    pub(super) fn with_block_rows(self, rows: usize) -> PairTables {
        PairTables { block_rows: rows.max(1), ..self }
    }

    /// Leaves whose pairs are summed with their sibling's ([`PairLeaf::Paired`]).
    #[cfg(test)]
    pub(super) fn paired_leaves(&self) -> usize {
        self.trees.iter().flatten().filter(|p| matches!(p, PairLeaf::Paired { .. })).count()
    }

    /// Bytes the tables and patterns hold.
    pub(super) fn memory_bytes(&self) -> usize {
        let leaves: usize = self
            .trees
            .iter()
            .flatten()
            .map(|p| match p {
                PairLeaf::Table { rows: values, pairs } | PairLeaf::Paired { values, pairs } => {
                    values.len() * size_of::<f64>() + pairs.len() * size_of::<u32>()
                }
                PairLeaf::Patterns { patterns, .. } => patterns.len() * size_of::<(u64, f64)>(),
                PairLeaf::Wide | PairLeaf::InSibling => 0,
            })
            .sum();
        let groups: usize = self.groups.iter().map(|g| g.pairs.len() * size_of::<(u32, u32)>() + g.trees.len() * size_of::<usize>()).sum();
        leaves + groups + self.positions.bytes() + self.rows.offsets.iter().map(|o| o.len() * size_of::<u32>()).sum::<usize>()
    }

    /// Adds tree `t`'s off-diagonal interaction values for the `n` rows of a block: row `r`'s
    /// fail sets at `fails[r * stride..]` (as [`Interventional::tree_row`] leaves them), its
    /// group's `w × w` matrix at `matrices[r * width..]`. Tabulated leaves add into the block's
    /// pair-major sums (`s`, started by [`start_block`](PairScratch::start_block) and written
    /// out by [`finish_block`](Self::finish_block)), the others straight into the upper half of
    /// each row's matrix ([`mirror_upper`] completes it once all trees are in).
    ///
    /// Leaf-major over the block: a leaf's table is read for all its rows while it is in cache,
    /// and its pairs' sums are `n` numbers side by side, so a row costs a place lookup, a load
    /// and an add per pair of each leaf instead of a cache miss per leaf.
    pub(super) fn tree_rows(
        &self,
        engine: &Interventional,
        t: usize,
        (fails, stride): (&[u64], usize),
        n: usize,
        (matrices, width, w): (&mut [f64], usize, usize),
        s: &mut PairScratch,
    ) {
        let agg = &engine.trees[t];
        let words = agg.walk.words;
        let rows = self.block_rows;
        let (leaves, held) = (&agg.walk.leaves, &self.trees[t]);
        for (l, ((leaf, pairs), data)) in leaves.iter().zip(held).zip(&agg.data).enumerate() {
            let slot = leaf.slot as usize;
            // The next tabulated leaf's rows for the block, asked for while this one adds: its
            // table is read once per block, so its rows are rarely in cache.
            match (leaves.get(l + 1), held.get(l + 1)) {
                (Some(next), Some(PairLeaf::Table { rows: table, .. })) => {
                    for r in 0..n {
                        prefetch(self.rows.row(table, next.features.len(), fails[r * stride + next.slot as usize]));
                    }
                }
                (Some(next), Some(PairLeaf::Paired { values, pairs })) => {
                    for r in 0..n {
                        prefetch(&values[fails[r * stride + next.slot as usize] as usize * pairs.len()..]);
                    }
                }
                _ => {}
            }
            match pairs {
                PairLeaf::Table { rows: table, pairs } => {
                    if pairs.is_empty() {
                        continue;
                    }
                    let d = leaf.features.len();
                    let places = &self.positions.at[d];
                    // Pair by pair, the block's rows after one another: each pair's sums are
                    // contiguous (`sums[pair · block_rows + r]`), where row by row each add went
                    // to another pair's sums, `block_rows` values apart (about 1.1x the interaction
                    // rows/s on WOODELF's benchmark model). Each sum still gets one add per
                    // leaf, so the order of its adds (leaf by leaf) and its bits are the same.
                    let offsets = &self.rows.offsets[d];
                    s.rows_of_leaf.clear();
                    s.rows_of_leaf.extend((0..n).map(|r| {
                        let xf = fails[r * stride + slot] as usize;
                        (offsets[xf] as usize, xf * pairs.len())
                    }));
                    for (k, &pair) in pairs.iter().enumerate() {
                        let sums = &mut s.sums[pair as usize * rows..][..n];
                        for (sum, &(row, at)) in sums.iter_mut().zip(&s.rows_of_leaf) {
                            *sum += table[row + places[at + k] as usize];
                        }
                    }
                }
                PairLeaf::Paired { values, pairs } => {
                    if pairs.is_empty() {
                        continue;
                    }
                    // As for a table, pair by pair over the block's rows; a row's values for the
                    // two leaves are side by side in pair order.
                    let p = pairs.len();
                    s.starts.clear();
                    s.starts.extend((0..n).map(|r| fails[r * stride + slot] as usize * p));
                    for (k, &pair) in pairs.iter().enumerate() {
                        let sums = &mut s.sums[pair as usize * rows..][..n];
                        for (sum, &start) in sums.iter_mut().zip(&s.starts) {
                            *sum += values[start + k];
                        }
                    }
                }
                PairLeaf::InSibling => {}
                PairLeaf::Patterns { scale, patterns } => {
                    for r in 0..n {
                        let xf = std::slice::from_ref(&fails[r * stride + slot]);
                        let patterns = patterns.iter().map(|(f, h)| (std::slice::from_ref(f), *h));
                        let matrix = &mut matrices[r * width..r * width + w * w];
                        self.add_patterns(leaf, xf, patterns, *scale, (matrix, w), s);
                    }
                }
                PairLeaf::Wide => {
                    let LeafData::WidePatterns { scale, masks, counts } = data else { continue };
                    for r in 0..n {
                        let xf = &fails[r * stride + slot * words..r * stride + (slot + 1) * words];
                        let patterns = masks.chunks_exact(words).zip(counts.iter().copied());
                        let matrix = &mut matrices[r * width..r * width + w * w];
                        self.add_patterns(leaf, xf, patterns, *scale, (matrix, w), s);
                    }
                }
            }
        }
    }

    /// Adds one row's pairs of an untabulated `leaf` to the upper half of its `w × w` matrix:
    /// its packed pair row for the explained fail set `xf`, summed from the background's
    /// `patterns` (fail sets with their counts; sets of any number of words, a narrow leaf's
    /// being one), times `scale`.
    fn add_patterns<'a>(
        &self,
        leaf: &LeafPath,
        xf: &[u64],
        patterns: impl Iterator<Item = (&'a [u64], f64)>,
        scale: f64,
        (matrix, w): (&mut [f64], usize),
        s: &mut PairScratch,
    ) {
        s.split(leaf, |visit| for_each_bit_wide(xf, visit));
        s.start_row();
        let b = s.cold.len();
        for (f, h) in patterns {
            if super::meet_wide(f, xf) {
                continue;
            }
            s.ranks.clear();
            for_each_bit_wide(f, |i| s.ranks.push(s.rank[i]));
            accumulate(&mut s.row, s.own.len(), &s.ranks, h, self.weights.get(s.ranks.len(), b));
        }
        apply(&s.row, scale, &s.own, &s.cold, matrix, w);
    }

    /// Adds group `g`'s pair-major sums of a block's `n` rows into the upper half of each row's
    /// matrix (`matrices[r * width..]`, `w × w`).
    pub(super) fn finish_block(&self, g: usize, s: &PairScratch, n: usize, (matrices, width, w): (&mut [f64], usize, usize)) {
        let rows = self.block_rows;
        for r in 0..n {
            let matrix = &mut matrices[r * width..r * width + w * w];
            for (pair, &(lo, hi)) in self.groups[g].pairs.iter().enumerate() {
                matrix[lo as usize * w + hi as usize] += s.sums[pair * rows + r];
            }
        }
    }
}

/// Numbers the feature pairs of each group's tabulated leaves (in increasing order) and gives
/// each such leaf its pairs' numbers; returns the groups.
fn number_pairs(engine: &Interventional, trees: &mut [Vec<PairLeaf>]) -> Vec<GroupPairs> {
    let mut groups: Vec<GroupPairs> = (0..engine.model.num_groups()).map(|_| GroupPairs::default()).collect();
    // A leaf's feature pairs by bits `i < j`, `i` outer (the order of `Positions`).
    fn leaf_pairs(features: &[u32]) -> impl Iterator<Item = (u32, u32)> + '_ {
        let d = features.len();
        (0..d).flat_map(move |i| (i + 1..d).map(move |j| (features[i].min(features[j]), features[i].max(features[j]))))
    }
    for (t, (tree, leaves)) in engine.model.trees().iter().zip(trees.iter()).enumerate() {
        let group = &mut groups[tree.group];
        group.trees.push(t);
        for (leaf, pairs) in engine.trees[t].walk.leaves.iter().zip(leaves) {
            if matches!(pairs, PairLeaf::Table { .. }) {
                group.pairs.extend(leaf_pairs(&leaf.features));
            }
        }
    }
    for group in &mut groups {
        group.pairs.sort_unstable();
        group.pairs.dedup();
    }
    for (t, leaves) in trees.iter_mut().enumerate() {
        let group = &groups[engine.model.trees()[t].group];
        for (leaf, pairs) in engine.trees[t].walk.leaves.iter().zip(leaves) {
            if let PairLeaf::Table { pairs: numbers, .. } = pairs {
                *numbers = leaf_pairs(&leaf.features)
                    .map(|pair| group.pairs.binary_search(&pair).expect("every tabulated leaf's pairs are numbered") as u32)
                    .collect();
            }
        }
    }
    groups
}

/// Whether leaves `l` and `l + 1` are a first-split pair (see [`LeafPath::first_split_pair`]).
fn is_first_split_pair(leaves: &[LeafPath], l: usize) -> bool {
    leaves[l].first_split_pair && leaves.get(l + 1).is_some_and(|next| next.features == leaves[l].features)
}

/// Values of a [`PairLeaf::Paired`] leaf of `d` path features.
fn paired_len(d: usize) -> usize {
    (1usize << d) * (d * d.saturating_sub(1) / 2)
}

/// Sums each first-split pair of tabulated leaves into the left leaf's [`PairLeaf::Paired`]
/// values (the right becomes [`PairLeaf::InSibling`]). The pair's last feature is the path's
/// last (`d − 1`, new at that split), and the explained row fails it at the left leaf exactly
/// when it goes right: the right leaf's fail set is the left's with that bit flipped.
fn merge_first_split_pairs(paths: &[LeafPath], leaves: &mut [PairLeaf], rows: &PairRows, positions: &Positions) {
    for l in 0..leaves.len().saturating_sub(1) {
        if !is_first_split_pair(paths, l) {
            continue;
        }
        let (PairLeaf::Table { rows: left, pairs }, PairLeaf::Table { rows: right, .. }) = (&leaves[l], &leaves[l + 1]) else {
            continue;
        };
        let (d, p) = (paths[l].features.len(), pairs.len());
        let places = &positions.at[d];
        let top = 1u64 << (d - 1);
        let mut values = Vec::with_capacity(paired_len(d));
        for xf in 0..1u64 << d {
            let (at_left, at_right) = (xf as usize * p, (xf ^ top) as usize * p);
            let (row_left, row_right) = (rows.row(left, d, xf), rows.row(right, d, xf ^ top));
            values.extend((0..p).map(|k| row_left[places[at_left + k] as usize] + row_right[places[at_right + k] as usize]));
        }
        let pairs = pairs.clone();
        leaves[l] = PairLeaf::Paired { values, pairs };
        leaves[l + 1] = PairLeaf::InSibling;
    }
}

/// One leaf's packed pair rows for every explained fail set, from its background `patterns`
/// (in increasing order, so the sums run the same way every time), scaled by `value / N`.
fn pair_table(d: usize, patterns: &[(u64, f64)], scale: f64, rows: &PairRows, weights: &PairWeights) -> Vec<f64> {
    let full = low_bits(d);
    let mut table = vec![0.0; rows.len(d)];
    let mut ranks = Vec::with_capacity(d);
    for &(f, h) in patterns {
        let a = f.count_ones() as usize;
        let free = full ^ f;
        // Every explained fail set disjoint from f: the submasks of its complement.
        let mut xf = free;
        loop {
            let b = xf.count_ones() as usize;
            let own = full ^ xf;
            ranks.clear();
            // An own feature's rank: the own features below it.
            for_each_bit(f, |i| ranks.push((own & low_bits(i)).count_ones() as usize));
            let start = rows.offsets[d][xf as usize] as usize;
            accumulate(&mut table[start..], d - b, &ranks, h, weights.get(a, b));
            if xf == 0 {
                break;
            }
            xf = (xf - 1) & free;
        }
    }
    table.iter_mut().for_each(|v| *v *= scale);
    table
}

/// Per-thread scratch of [`PairTables::tree_rows`].
#[derive(Debug, Default)]
pub(super) struct PairScratch {
    /// The leaf's features outside the explained fail set, in bit order.
    own: Vec<u32>,
    /// The leaf's features in it.
    cold: Vec<u32>,
    /// The explained fail set's bits, in order.
    failed: Vec<usize>,
    /// Each own bit's rank among the own features (by bit).
    rank: Vec<usize>,
    /// One background fail set's ranks.
    ranks: Vec<usize>,
    /// A packed pair row being summed from patterns.
    row: Vec<f64>,
    /// A block's pair-major sums of tabulated leaves: `sums[pair · block_rows + r]`.
    sums: Vec<f64>,
    /// Per row of a block, where a tabulated leaf's pair row for it starts in the table and
    /// where its places start.
    rows_of_leaf: Vec<(usize, usize)>,
    /// Per row of a block, where a paired leaf's values for it start.
    starts: Vec<usize>,
}

impl PairScratch {
    /// Zeroed sums for group `g` of `tables`, for a block of rows.
    pub(super) fn start_block(&mut self, tables: &PairTables, g: usize) {
        self.sums.clear();
        self.sums.resize(tables.groups[g].pairs.len() * tables.block_rows, 0.0);
    }

    /// Splits `leaf`'s features by the explained fail set, whose bits `bits` visits in order.
    fn split(&mut self, leaf: &LeafPath, bits: impl FnOnce(&mut dyn FnMut(usize))) {
        let d = leaf.features.len();
        self.rank.clear();
        self.rank.resize(d, usize::MAX);
        let failed = &mut self.failed;
        failed.clear();
        bits(&mut |i| failed.push(i));
        self.cold.clear();
        self.own.clear();
        let mut next = self.failed.iter().peekable();
        for (i, &feature) in leaf.features.iter().enumerate() {
            if next.peek() == Some(&&i) {
                next.next();
                self.cold.push(feature);
            } else {
                self.rank[i] = self.own.len();
                self.own.push(feature);
            }
        }
    }

    /// A zeroed packed pair row for the current split.
    fn start_row(&mut self) {
        self.row.clear();
        self.row.resize(row_len(self.own.len()), 0.0);
    }
}

/// Adds the off-diagonal interaction values of one explained row against one background row to
/// `matrix` (`w × w`), for a leaf of value `v` reached with the features `from_x` taken from the
/// explained row (the set `F`) and `from_z` from the background row (`X_f`): the definition,
/// pair by pair, for [`InterventionalReference`](super::InterventionalReference).
pub(super) fn reference_leaf(index: Index, from_x: &[u32], from_z: &[u32], v: f64, matrix: &mut [f64], w: usize) {
    let (hot, cold, across) = PairWeights::compute(index, from_x.len(), from_z.len());
    let mut add = |i: u32, j: u32, v: f64| {
        matrix[i as usize * w + j as usize] += v;
        matrix[j as usize * w + i as usize] += v;
    };
    for (n, &i) in from_x.iter().enumerate() {
        from_x[n + 1..].iter().for_each(|&j| add(i, j, v * hot));
        from_z.iter().for_each(|&j| add(i, j, v * across));
    }
    for (n, &i) in from_z.iter().enumerate() {
        from_z[n + 1..].iter().for_each(|&j| add(i, j, v * cold));
    }
}

/// Keeps the pair tables of an engine once built: shared by the engine's calls.
pub(super) type SharedPairs = std::sync::OnceLock<Arc<PairTables>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_pair_rows_place_every_pair_once() {
        for k in 0..9 {
            let mut seen = vec![0; row_len(k)];
            seen[0] += 1;
            (0..k).for_each(|p| seen[1 + p] += 1);
            for p in 0..k {
                for q in p + 1..k {
                    seen[pair_at(k, p, q)] += 1;
                }
            }
            assert!(seen.iter().all(|&s| s == 1), "k {k}: {seen:?}");
        }
    }

    #[test]
    fn pair_weights_are_the_interaction_index_of_the_leaf_game() {
        // The leaf game's pair terms by enumeration: Σ_S weight(|S|) Δ_ij g(S) over S ⊆ N∖{i,j}.
        let factorial = |n: usize| (1..=n).map(|k| k as f64).product::<f64>();
        for index in [Index::Shapley, Index::Banzhaf] {
            let weights = PairWeights::of(index, 6);
            for a in 0..=6usize {
                for b in 0..=6usize {
                    let m = a + b;
                    if m < 2 {
                        continue;
                    }
                    // Players 0..a are F, a..m are X_f; g(S) = [F ⊆ S][S ∩ X_f = ∅].
                    let f_mask = low_bits(a);
                    let g = |s: u64| if s & f_mask == f_mask && s >> a == 0 { 1.0 } else { 0.0 };
                    let index_of = |i: usize, j: usize| {
                        let mut sum = 0.0;
                        for s in 0..1u64 << m {
                            if s & (1 << i | 1 << j) != 0 {
                                continue;
                            }
                            let size = s.count_ones() as usize;
                            let weight = match index {
                                Index::Shapley => factorial(size) * factorial(m - size - 2) / factorial(m - 1) / 2.0,
                                Index::Banzhaf => 0.5f64.powi(m as i32 - 2),
                            };
                            sum += weight * (g(s | 1 << i | 1 << j) - g(s | 1 << i) - g(s | 1 << j) + g(s));
                        }
                        sum
                    };
                    let (hot, cold, across) = weights.get(a, b);
                    if a >= 2 {
                        assert!((hot - index_of(0, 1)).abs() < 1e-15, "{index} hot {a} {b}");
                    }
                    if b >= 2 {
                        assert!((cold - index_of(a, a + 1)).abs() < 1e-15, "{index} cold {a} {b}");
                    }
                    if a >= 1 && b >= 1 {
                        assert!((across - index_of(0, a)).abs() < 1e-15, "{index} across {a} {b}");
                    }
                }
            }
        }
    }
}
