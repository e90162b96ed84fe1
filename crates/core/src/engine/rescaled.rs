//! Interventional SHAP of a transformed output (shap's `model_output="probability"`, and its
//! `"log_loss"`, where the transform also reads the explained row's label `y`): for each pair
//! of an explained row `x` and a background row `z`, the margin's interventional values against
//! `z` alone, scaled by `(T(f(x), y) - T(f(z), y)) / (f(x) - f(z))` (1 where the margins are
//! equal), then the mean over the background; the bias is the mean of `T(f(z), y)`. Each
//! pair's values add up to `T(f(x), y) - T(f(z), y)`, so each row's add up to `T(f(x), y)`.
//! (shap's own bias column for a loss is the mean of `T(f(z), 0)`, whatever the label; its
//! `expected_value(y)` is this bias.)
//!
//! This is the algorithm of shap's `TreeExplainer` (its `dense_independent` with a transform),
//! so the values are shap's: a per-reference rescaling of the margin's Shapley values, not the
//! Shapley values of the game `mean_z T(f(x_S, z_~S))`.
//!
//! The scale `s(x, z)` differs per pair, so the background cannot be aggregated into tables as
//! [`Interventional`] does; but a leaf's margin values against `z` depend on `z` only through
//! `z`'s fail set there. So each leaf keeps its background rows grouped by fail set (once, at
//! construction), and a row costs, per leaf, one sum of `s(x, z)` over each group's rows and one
//! Shapley term per group: `O(leaves × background)` additions per row, with the per-feature work
//! done per distinct fail set rather than per background row. A tree with a path of more than
//! 64 distinct features keeps its fail sets in several words (`LeafGroups::wide_sets`).
//!
//! Precisely: rows go through each leaf [`ROWS_TOGETHER`] at a time (fewer where a large
//! background's scales would take over [`SCALES_BYTES_PER_TASK`]). Per leaf and group, one
//! vector compare of the rows' fail sets finds the rows the group shares something with (their
//! sets do not meet); for each, a sum of its `s(x, z)` over the group's background rows, and
//! the group's Shapley terms go into the row's sums for the leaf (per path feature, and one for
//! the features the row fails), which the row adds to its values once per leaf. So a row costs
//! `O(groups / ROWS_TOGETHER + Σ sharing groups' rows + path features)` per leaf, at most
//! `O(leaves × background)`, and the groups of a whole model (too large for any cache) are
//! read from memory once per pass rather than once per row. The two leaves of a split that is
//! its path's first on its feature, both leaves, keep one list of groups: a background row
//! fails that feature at exactly one of them, so the second leaf's sets are the first's with
//! that bit flipped, and one scan serves both. Table memory: 4 bytes per background row and
//! leaf (about half that in trees whose splits end in such pairs), and 16 per group.
//!
//! [`Interventional`]: super::interventional::Interventional

use std::sync::Arc;

use rayon::prelude::*;

use super::block::FeatureBlock;
use super::drivers::{rows_per_task, shap_by_task_from};
use super::engine_trait::Engine;
use super::interventional::{
    background_outputs, check_background, check_labels, count_ones_wide, for_each_bit_wide, meet_wide, rescaling,
    transformed_interactions_unavailable, FailWalk, LeafPath, Weights, MAX_INTERVENTIONAL_PATH_FEATURES,
};
use super::options::{Index, OutputTransform};
use super::output::{Attributions, Interactions};
use super::prepared::PreparedModel;
#[cfg(target_arch = "x86_64")]
use super::simd::{simd_level, SimdLevel};
use crate::error::{Error, Result};
use crate::model::{Model, Tree};

/// One leaf's background, grouped by fail set.
struct LeafGroups {
    /// Each group's fail set (its first word; all of it in a one-word walk), apart from the
    /// ranges: a row's scan over a leaf's groups reads only these words (most groups share a
    /// feature with the row's own fail set and are skipped).
    sets: Vec<u64>,
    /// (first, end): background rows `members[first..end]` fail exactly the group's set.
    ranges: Vec<(u32, u32)>,
    /// In a walk of several words, each group's whole fail set, one after another.
    wide_sets: Vec<u64>,
    /// This leaf and the next are a first-split pair (`LeafPath::first_split_pair`) of a
    /// one-word walk: the next leaf's groups are this leaf's with the last path feature's bit
    /// flipped (each background row fails it at exactly one of the two), so the next leaf
    /// keeps none of its own and the pair goes through one scan.
    with_next: bool,
}

/// Interventional SHAP of `T(margin)`, with each leaf's background rows grouped by fail set.
pub(crate) struct RescaledInterventional {
    model: Arc<Model>,
    transform: OutputTransform,
    walks: Vec<FailWalk>,
    /// Per tree, per leaf (in its walk's order): the groups.
    leaves: Vec<Vec<LeafGroups>>,
    /// Background row indices, grouped per leaf (the ranges of [`LeafGroups`]).
    members: Vec<u32>,
    background_rows: usize,
    /// The background rows' margins: `rows × groups`.
    background_margins: Vec<f64>,
    /// Mean of `T(f(z))` over the background, per group; empty for a loss, whose bias each row's
    /// label decides.
    bias: Vec<f64>,
    weights: Weights,
    max_slots: usize,
    /// The most groups of any leaf.
    most_groups: usize,
}

/// Rows that go through each leaf together (see [`RescaledInterventional::explain_pass`]).
const ROWS_TOGETHER: usize = 32;
/// At most this many bytes of a task's `s(x, z)` scales: a large background (a million rows of
/// ten classes) goes through the leaves fewer rows a pass rather than take 16× the memory.
const SCALES_BYTES_PER_TASK: usize = 16 << 20;
// A pass's rows are bits of a `u64`.
const _: () = assert!(ROWS_TOGETHER < 64);
/// Path features a leaf's per-feature sums take per step: one vector of eight (two of AVX2,
/// one of AVX-512), set from a byte of a fail set.
const SLOTS_A_STEP: usize = 8;

/// What one task reuses across its passes; each per-row part holds [`ROWS_TOGETHER`] rows.
struct Scratch {
    /// Per row, its fail sets (`max_slots` words).
    slots: Vec<u64>,
    /// Per row, its margins (one per group).
    margins: Vec<f64>,
    /// Per row, `s(x, z) / n` per group then background row.
    scales: Vec<f64>,
    /// Per row, a leaf's sums per path feature (see [`RescaledInterventional::explain_pass`]);
    /// all zero between leaves.
    hot: Vec<[f64; MAX_INTERVENTIONAL_PATH_FEATURES]>,
    /// The same for the second leaf of a first-split pair.
    hot_next: Vec<[f64; MAX_INTERVENTIONAL_PATH_FEATURES]>,
    /// A leaf's groups that share something with a row of the pass: the group's index, the
    /// rows at the leaf, and those at the next leaf of a first-split pair; with room for one
    /// more than the most groups of any leaf.
    shared: Vec<(u32, u64, u64)>,
}

impl Scratch {
    fn new(engine: &RescaledInterventional, together: usize) -> Scratch {
        let g = engine.model.num_groups();
        Scratch {
            slots: vec![0; together * engine.max_slots],
            margins: vec![0.0; together * g],
            scales: vec![0.0; together * g * engine.background_rows],
            hot: vec![[0.0; MAX_INTERVENTIONAL_PATH_FEATURES]; together],
            hot_next: vec![[0.0; MAX_INTERVENTIONAL_PATH_FEATURES]; together],
            shared: vec![(0, 0, 0); engine.most_groups + 1],
        }
    }
}

impl RescaledInterventional {
    /// Prepares `transform`'s explanations over `background` (rows in the model's feature order
    /// and precision); the grouped background rows (4 bytes per row and leaf) must fit in
    /// `memory_bound` bytes.
    pub fn new(
        prepared: Arc<PreparedModel>,
        background: &FeatureBlock,
        transform: OutputTransform,
        memory_bound: usize,
    ) -> Result<RescaledInterventional> {
        let model = prepared.model.clone();
        check_background(&model, background)?;
        let walks: Vec<FailWalk> =
            model.trees().iter().enumerate().map(|(t, tree)| FailWalk::new(tree, t, &prepared.players)).collect::<Result<_>>()?;
        let total_leaves: usize = walks.iter().map(|w| w.leaves.len()).sum();
        let rows = background.rows();
        let bytes = rows.checked_mul(total_leaves).and_then(|n| n.checked_mul(4)).unwrap_or(usize::MAX);
        // Member lists are numbered by `u32`.
        if bytes > memory_bound || bytes / 4 > u32::MAX as usize {
            return Err(Error::ResourceExhausted(format!(
                "interventional {transform} output: the background's {rows} rows × {total_leaves} leaves take {} MiB, over the bound of {} MiB; use fewer background rows or raise the bound",
                bytes >> 20,
                memory_bound >> 20
            )));
        }
        let (margins, bias) = background_outputs(&model, background, transform)?;
        // Each leaf's background rows by fail set, tree by tree in parallel, then one list.
        let grouped: Vec<(Vec<LeafGroups>, Vec<u32>)> =
            model.trees().par_iter().zip(walks.par_iter()).map(|(tree, walk)| group_by_fail_set(tree, walk, background)).collect();
        let mut members = Vec::with_capacity(grouped.iter().map(|(_, m)| m.len()).sum());
        let mut leaves = Vec::with_capacity(walks.len());
        for (mut groups, tree_members) in grouped {
            let base = members.len() as u32;
            for range in groups.iter_mut().flat_map(|g| g.ranges.iter_mut()) {
                *range = (range.0 + base, range.1 + base);
            }
            members.extend_from_slice(&tree_members);
            leaves.push(groups);
        }
        let max_slots = walks.iter().map(|w| w.slots * w.words).max().unwrap_or(1);
        let widest = walks.iter().flat_map(|w| w.leaves.iter().map(|l| l.features.len())).max().unwrap_or(0);
        let most_groups = leaves.iter().flatten().map(|l: &LeafGroups| l.sets.len()).max().unwrap_or(0);
        Ok(RescaledInterventional {
            weights: Weights::of(Index::Shapley, widest.min(super::interventional::MAX_INTERVENTIONAL_PATH_FEATURES)),
            model,
            transform,
            walks,
            leaves,
            members,
            background_rows: rows,
            background_margins: margins,
            bias,
            max_slots,
            most_groups,
        })
    }

    /// Adds the values of the rows of `block` from `first` (as many as `out` holds, each
    /// G × (F+1), at most [`ROWS_TOGETHER`]) to `out`; `labels` (one per row of the block) are
    /// read by a loss only, which also writes each row's bias.
    ///
    /// The rows go through each leaf together: a leaf's groups are read from memory once for
    /// all of them (the whole model's groups, tens of MB for 100 trees of depth 8 and 100
    /// background rows, are too large for any cache), and one vector compare per group finds
    /// the rows it shares something with. Groups are small (a few background rows each: most
    /// fail sets are rare), so the work per (row, group) is what counts: a sum over the
    /// group's rows, two weights, and the terms, with no loop over features: those of the
    /// features only the background row fails go into the row's sums per path feature
    /// (`Scratch::hot`, eight features a vector step, from the set's bits), those of the
    /// features the explained row fails into one number per row (`cold`); each row touched
    /// adds both to its values once per leaf (see [`add_group`](Self::add_group) and
    /// [`add_leaf`]). A row's values are added in the same order as
    /// alone (tree, leaf, group), so its bits do not depend on its neighbours.
    #[inline(always)]
    fn explain_pass<const AVX2: bool>(&self, block: &FeatureBlock, first: usize, labels: Option<&[f64]>, scratch: &mut Scratch, out: &mut [f64]) {
        let w = self.model.num_features() + 1;
        let (g, n) = (self.model.num_groups(), self.background_rows);
        let (width, per_row_scales, per_row_slots) = (g * w, g * n, self.max_slots);
        let rows = out.len() / width.max(1);
        debug_assert!(rows <= self.rows_together());
        for r in 0..rows {
            let x = block.row(first + r);
            let label = labels.map_or(0.0, |l| l[first + r]);
            let margins = &mut scratch.margins[r * g..(r + 1) * g];
            self.model.predict_row(x, margins);
            // s(x, z) / n for every background row, per group.
            let scales = &mut scratch.scales[r * per_row_scales..(r + 1) * per_row_scales];
            for (group, &mx) in margins.iter().enumerate() {
                let margins_z = self.background_margins.iter().skip(group).step_by(g).copied();
                let bias = rescaling(self.transform, mx, label, margins_z, &mut scales[group * n..(group + 1) * n]);
                if self.transform.needs_labels() {
                    out[r * width + group * w + w - 1] = bias;
                }
            }
        }
        for ((tree, walk), leaves) in self.model.trees().iter().zip(&self.walks).zip(&self.leaves) {
            let (scales_at, phi_at) = (tree.group * n, tree.group * w);
            for r in 0..rows {
                let (x, fails) = (block.row(first + r), &mut scratch.slots[r * per_row_slots..(r + 1) * per_row_slots]);
                if walk.words > 1 {
                    walk.fail_sets_wide(tree, x, fails);
                } else {
                    walk.fail_sets(tree, x, fails);
                }
            }
            if walk.words > 1 {
                for r in 0..rows {
                    let scales = &scratch.scales[r * per_row_scales + scales_at..][..n];
                    let phi = &mut out[r * width + phi_at..][..w];
                    self.wide_tree_row(walk, leaves, &scratch.slots[r * per_row_slots..(r + 1) * per_row_slots], scales, phi);
                }
                continue;
            }
            // Rows past `rows` in a last, partly filled pass share nothing.
            let live = (1u64 << rows) - 1;
            let mut k = 0;
            while k < walk.leaves.len() {
                let (leaf, groups) = (&walk.leaves[k], &leaves[k]);
                // A row not in the pass fails everything: it meets every group but those of
                // no path feature (or, in a pair, none but the last), which are masked apart.
                let mut x_fs = [u64::MAX; ROWS_TOGETHER];
                for (r, x_f) in x_fs.iter_mut().enumerate().take(rows) {
                    *x_f = scratch.slots[r * per_row_slots + leaf.slot as usize];
                }
                let sums = Sums { steps: leaf.features.len().div_ceil(SLOTS_A_STEP), scales_at, per_row_scales, n };
                // First the groups that share something with a row, and with which rows,
                // into a list without a branch per group (whether one shares is a coin toss
                // the branch predictor loses); then the work on those.
                let shared = &mut scratch.shared[..groups.sets.len() + 1];
                let mut found = 0;
                if !groups.with_next {
                    let reaching = rows_where(&x_fs, |x_f| x_f == 0);
                    for (g, &z_f) in groups.sets.iter().enumerate() {
                        // The rows whose set the group's does not meet (else no hybrid
                        // reaches the leaf), all at once in vector compares; but not where
                        // both rows reach the leaf (the empty group, first in a leaf's
                        // increasing sets, and the rows that fail nothing).
                        let mut sharing = disjoint_from::<AVX2>(z_f, &x_fs);
                        if z_f == 0 {
                            sharing &= live & !reaching;
                        }
                        shared[found] = (g as u32, sharing, 0);
                        found += usize::from(sharing != 0);
                    }
                    let b = fail_counts(&x_fs, rows);
                    let (mut cold, mut touched) = ([0.0f64; ROWS_TOGETHER], 0u64);
                    for &(g, sharing, _) in &shared[..found] {
                        let (z_f, (start, end)) = (groups.sets[g as usize], groups.ranges[g as usize]);
                        touched |= sharing;
                        self.add_group(
                            &sums,
                            z_f,
                            &self.members[start as usize..end as usize],
                            sharing,
                            &b,
                            &scratch.scales,
                            &mut cold,
                            &mut scratch.hot,
                        );
                    }
                    add_leaf(leaf, touched, &x_fs, &cold, &mut scratch.hot, &mut out[phi_at..], width);
                    k += 1;
                    continue;
                }
                // A first-split pair: the leaf and the next, whose fail sets are the leaf's
                // with the last path feature's bit flipped, for the rows as for the groups.
                let next = &walk.leaves[k + 1];
                let last = 1u64 << (leaf.features.len() - 1);
                let mut x_next = [u64::MAX; ROWS_TOGETHER];
                let mut prefixes = [u64::MAX; ROWS_TOGETHER];
                for r in 0..rows {
                    x_next[r] = x_fs[r] ^ last;
                    prefixes[r] = x_fs[r] & !last;
                }
                let to_leaf = rows_where(&x_fs, |x_f| x_f & last == 0) & live;
                let to_next = live & !to_leaf;
                let (reaching, reaching_next) = (rows_where(&x_fs, |x_f| x_f == 0), rows_where(&x_next, |x_f| x_f == 0));
                for (g, &z_f) in groups.sets.iter().enumerate() {
                    // Sets that meet on the shared features meet at both leaves; on the last
                    // feature, a row fails it at one leaf and a group at one (its rows go
                    // to the other leaf where `z_f` holds the bit).
                    let mut sharing = disjoint_from::<AVX2>(z_f & !last, &prefixes);
                    if z_f & !last == 0 {
                        sharing &= live;
                    }
                    let (at_leaf, at_next) = if z_f & last != 0 { (sharing & to_leaf, sharing) } else { (sharing, sharing & to_next) };
                    let at_leaf = if z_f == 0 { at_leaf & !reaching } else { at_leaf };
                    let at_next = if z_f == last { at_next & !reaching_next } else { at_next };
                    shared[found] = (g as u32, at_leaf, at_next);
                    found += usize::from(at_leaf | at_next != 0);
                }
                let (b, b_next) = (fail_counts(&x_fs, rows), fail_counts(&x_next, rows));
                let (mut cold, mut cold_next) = ([0.0f64; ROWS_TOGETHER], [0.0f64; ROWS_TOGETHER]);
                let (mut touched, mut touched_next) = (0u64, 0u64);
                for &(g, at_leaf, at_next) in &shared[..found] {
                    let (z_f, (start, end)) = (groups.sets[g as usize], groups.ranges[g as usize]);
                    let members = &self.members[start as usize..end as usize];
                    touched |= at_leaf;
                    touched_next |= at_next;
                    self.add_group(&sums, z_f, members, at_leaf, &b, &scratch.scales, &mut cold, &mut scratch.hot);
                    self.add_group(&sums, z_f ^ last, members, at_next, &b_next, &scratch.scales, &mut cold_next, &mut scratch.hot_next);
                }
                add_leaf(leaf, touched, &x_fs, &cold, &mut scratch.hot, &mut out[phi_at..], width);
                add_leaf(next, touched_next, &x_next, &cold_next, &mut scratch.hot_next, &mut out[phi_at..], width);
                k += 2;
            }
        }
    }

    /// Adds the terms of a group of a leaf (fail set `z_f`, background rows `members`) to the
    /// leaf's sums of the rows in `sharing` (`b`: how many path features each fails): the
    /// group's weight into `cold`, and into `hot`, per path feature the group fails, eight
    /// features a vector step.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn add_group(
        &self,
        at: &Sums,
        z_f: u64,
        members: &[u32],
        sharing: u64,
        b: &[usize; ROWS_TOGETHER],
        scales: &[f64],
        cold: &mut [f64; ROWS_TOGETHER],
        hot: &mut [[f64; MAX_INTERVENTIONAL_PATH_FEATURES]],
    ) {
        let (hot_by_b, cold_by_b) = self.weights.by_b(z_f.count_ones() as usize);
        let mut rows_left = sharing;
        while rows_left != 0 {
            let r = rows_left.trailing_zeros() as usize;
            rows_left &= rows_left - 1;
            let scales = &scales[r * at.per_row_scales + at.scales_at..][..at.n];
            // A group holds at least one background row.
            let mut scale = scales[members[0] as usize];
            for &z in &members[1..] {
                scale += scales[z as usize];
            }
            cold[r] += scale * cold_by_b[b[r]];
            let weight = scale * hot_by_b[b[r]];
            let sums = &mut hot[r];
            for step in 0..at.steps {
                let bits = z_f >> (step * SLOTS_A_STEP);
                let sums = &mut sums[step * SLOTS_A_STEP..][..SLOTS_A_STEP];
                for (j, sum) in sums.iter_mut().enumerate() {
                    *sum += if bits >> j & 1 != 0 { weight } else { 0.0 };
                }
            }
        }
    }

    /// [`explain_pass`](Self::explain_pass) in the copy compiled for this CPU's vectors.
    fn explain_rows(&self, block: &FeatureBlock, first: usize, labels: Option<&[f64]>, scratch: &mut Scratch, out: &mut [f64]) {
        #[cfg(target_arch = "x86_64")]
        match simd_level() {
            // SAFETY: the CPU has the features (`simd_level` detected them).
            SimdLevel::Avx512 => return unsafe { explain_rows_avx512(self, block, first, labels, scratch, out) },
            // SAFETY: as above.
            SimdLevel::Avx2 => return unsafe { explain_rows_avx2(self, block, first, labels, scratch, out) },
            SimdLevel::Portable => {}
        }
        self.explain_pass::<false>(block, first, labels, scratch, out)
    }

    /// Rows a pass takes: [`ROWS_TOGETHER`], or fewer where their scales would take more than
    /// [`SCALES_BYTES_PER_TASK`].
    fn rows_together(&self) -> usize {
        let per_row = self.model.num_groups().saturating_mul(self.background_rows).saturating_mul(size_of::<f64>());
        (SCALES_BYTES_PER_TASK / per_row.max(1)).clamp(1, ROWS_TOGETHER)
    }

    /// Every row's values; `labels` (one per row) for a loss.
    fn values(&self, block: &FeatureBlock, labels: Option<&[f64]>) -> Result<Attributions> {
        let together = self.rows_together();
        let width = self.model.num_groups() * (self.model.num_features() + 1);
        shap_by_task_from(
            &self.model,
            &self.bias,
            block,
            rows_per_task(block.rows()),
            || Scratch::new(self, together),
            |scratch, first, chunk| {
                for (i, rows) in chunk.chunks_mut(width * together).enumerate() {
                    self.explain_rows(block, first + i * together, labels, scratch, rows);
                }
            },
        )
    }

    /// One wide tree's part of [`explain_pass`](Self::explain_pass): the same sums over fail
    /// sets of `walk.words` words (`fails`, per slot).
    fn wide_tree_row(&self, walk: &FailWalk, leaves: &[LeafGroups], fails: &[u64], scales: &[f64], phi: &mut [f64]) {
        let words = walk.words;
        for (leaf, groups) in walk.leaves.iter().zip(leaves) {
            let x_f = &fails[leaf.slot as usize * words..(leaf.slot as usize + 1) * words];
            let b = count_ones_wide(x_f);
            for (&(first, end), z_f) in groups.ranges.iter().zip(groups.wide_sets.chunks_exact(words)) {
                let a = count_ones_wide(z_f);
                if meet_wide(z_f, x_f) || a + b == 0 {
                    continue; // no hybrid reaches the leaf, or both rows do: nothing to share
                }
                let scale: f64 = self.members[first as usize..end as usize].iter().map(|&z| scales[z as usize]).sum();
                let v = leaf.value * scale;
                let (hot_weight, cold_weight) = self.weights.pair(a, b);
                if a > 0 {
                    let hot = v * hot_weight;
                    for_each_bit_wide(z_f, |i| phi[leaf.features[i] as usize] += hot);
                }
                if b > 0 {
                    let cold = v * cold_weight;
                    for_each_bit_wide(x_f, |j| phi[leaf.features[j] as usize] -= cold);
                }
            }
        }
    }
}

/// The rows (bit `r` for `sets[r]`) whose set does not meet `set`. `AVX2` promises the CPU has
/// it: four sets a compare, whose lanes' signs make four bits (the compiler's own vector code
/// for the portable loop moved the lanes through shuffles and was a fifth of the pass).
#[inline(always)]
fn disjoint_from<const AVX2: bool>(set: u64, sets: &[u64; ROWS_TOGETHER]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if AVX2 {
        use std::arch::x86_64::*;
        // SAFETY: `AVX2` is true only in the copies compiled for AVX2 or AVX-512, which run
        // where the CPU has AVX2; each load reads four of the array's sixteen.
        return unsafe {
            let set = _mm256_set1_epi64x(set as i64);
            let zero = _mm256_setzero_si256();
            let mut bits = 0u64;
            for quad in 0..ROWS_TOGETHER / 4 {
                let four = _mm256_loadu_si256(sets.as_ptr().add(quad * 4).cast());
                let empty = _mm256_cmpeq_epi64(_mm256_and_si256(set, four), zero);
                bits |= (_mm256_movemask_pd(_mm256_castsi256_pd(empty)) as u64) << (quad * 4);
            }
            bits
        };
    }
    let mut bits = 0u64;
    for (r, &x) in sets.iter().enumerate() {
        bits |= u64::from(set & x == 0) << r;
    }
    bits
}

/// One tree's background rows grouped by their fail set at each leaf (in increasing set then
/// row order, so every sum over them runs in the same order on every run), with the member
/// lists the groups' ranges number; the second leaf of a first-split pair of a one-word walk
/// keeps no groups (see `LeafGroups::with_next`).
fn group_by_fail_set(tree: &Tree, walk: &FailWalk, background: &FeatureBlock) -> (Vec<LeafGroups>, Vec<u32>) {
    let (words, rows, leaves) = (walk.words, background.rows(), walk.leaves.len());
    let mut slots = vec![0u64; walk.slots * words];
    // Per leaf, each background row's fail set there.
    let mut sets = vec![0u64; leaves * rows * words];
    for r in 0..rows {
        if words == 1 {
            walk.fail_sets(tree, background.row(r), &mut slots);
        } else {
            walk.fail_sets_wide(tree, background.row(r), &mut slots);
        }
        for (k, leaf) in walk.leaves.iter().enumerate() {
            sets[(k * rows + r) * words..][..words].copy_from_slice(&slots[leaf.slot as usize * words..][..words]);
        }
    }
    let (mut groups, mut members) = (Vec::<LeafGroups>::with_capacity(leaves), Vec::new());
    let mut order: Vec<u32> = Vec::with_capacity(rows);
    for k in 0..leaves {
        if groups.last().is_some_and(|left| left.with_next) {
            groups.push(LeafGroups { sets: Vec::new(), ranges: Vec::new(), wide_sets: Vec::new(), with_next: false });
            continue;
        }
        let set_of = |r: u32| &sets[(k * rows + r as usize) * words..][..words];
        order.clear();
        order.extend(0..rows as u32);
        // Stable: a set's rows stay in increasing order.
        order.sort_by(|&a, &b| set_of(a).cmp(set_of(b)));
        let mut leaf = LeafGroups {
            sets: Vec::new(),
            ranges: Vec::new(),
            wide_sets: Vec::new(),
            with_next: words == 1 && walk.leaves[k].first_split_pair && k + 1 < leaves,
        };
        for same in order.chunk_by(|&a, &b| set_of(a) == set_of(b)) {
            let set = set_of(same[0]);
            let first = members.len() as u32;
            members.extend_from_slice(same);
            leaf.sets.push(set[0]);
            leaf.ranges.push((first, members.len() as u32));
            if words > 1 {
                leaf.wide_sets.extend_from_slice(set);
            }
        }
        groups.push(leaf);
    }
    (groups, members)
}

/// Where a leaf's sums read a pass's scales, and how many vector steps its path features take.
struct Sums {
    steps: usize,
    scales_at: usize,
    per_row_scales: usize,
    n: usize,
}

/// The rows (bit `r` for `sets[r]`) whose set `test` holds for.
#[inline(always)]
fn rows_where(sets: &[u64; ROWS_TOGETHER], test: impl Fn(u64) -> bool) -> u64 {
    sets.iter().enumerate().fold(0, |rows, (r, &x)| rows | u64::from(test(x)) << r)
}

/// How many path features each of the pass's `rows` rows fails.
#[inline(always)]
fn fail_counts(sets: &[u64; ROWS_TOGETHER], rows: usize) -> [usize; ROWS_TOGETHER] {
    let mut b = [0; ROWS_TOGETHER];
    for r in 0..rows {
        b[r] = sets[r].count_ones() as usize;
    }
    b
}

/// Each row in `touched` adds its sums for `leaf` to its values (`out` from the tree's group,
/// `width` a row) and clears them: per path feature its `hot` sum, or, for those it fails
/// (`x_fs`), minus its `cold` sum (no group it shares with fails them).
#[inline(always)]
fn add_leaf(
    leaf: &LeafPath,
    mut touched: u64,
    x_fs: &[u64; ROWS_TOGETHER],
    cold: &[f64; ROWS_TOGETHER],
    hot: &mut [[f64; MAX_INTERVENTIONAL_PATH_FEATURES]],
    out: &mut [f64],
    width: usize,
) {
    // The terms are picked by mask, eight path features a vector step, then added to the
    // values one by one. Picking each feature's term as it was added compiled to a branch on
    // the fail set's bit, which the predictor loses about half the time: that loop took a third
    // of the pass (perf), and the pass takes 0.78 of its time this way (one thread, AVX-512,
    // the SHAP COMPAT model).
    let steps = leaf.features.len().div_ceil(SLOTS_A_STEP);
    let mut terms = [0.0f64; MAX_INTERVENTIONAL_PATH_FEATURES];
    while touched != 0 {
        let r = touched.trailing_zeros() as usize;
        touched &= touched - 1;
        let phi = &mut out[r * width..];
        let (x_f, minus_cold, sums) = (x_fs[r], -cold[r], &mut hot[r]);
        for step in 0..steps {
            let bits = x_f >> (step * SLOTS_A_STEP);
            let sums = &mut sums[step * SLOTS_A_STEP..][..SLOTS_A_STEP];
            let terms = &mut terms[step * SLOTS_A_STEP..][..SLOTS_A_STEP];
            for (j, (term, sum)) in terms.iter_mut().zip(sums.iter_mut()).enumerate() {
                // All ones where the row fails the feature: a select of bits, which LLVM
                // keeps in vectors, where an `if` on the bit it compiled to a branch.
                let fails = 0u64.wrapping_sub(bits >> j & 1);
                *term = leaf.value * f64::from_bits(minus_cold.to_bits() & fails | sum.to_bits() & !fails);
                *sum = 0.0;
            }
        }
        for (&feature, &term) in leaf.features.iter().zip(&terms) {
            phi[feature as usize] += term;
        }
    }
}

/// [`RescaledInterventional::explain_pass`] compiled for AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,popcnt")]
unsafe fn explain_rows_avx2(
    e: &RescaledInterventional,
    block: &FeatureBlock,
    first: usize,
    labels: Option<&[f64]>,
    scratch: &mut Scratch,
    out: &mut [f64],
) {
    e.explain_pass::<true>(block, first, labels, scratch, out)
}

/// [`RescaledInterventional::explain_pass`] compiled for AVX-512.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,fma,popcnt")]
unsafe fn explain_rows_avx512(
    e: &RescaledInterventional,
    block: &FeatureBlock,
    first: usize,
    labels: Option<&[f64]>,
    scratch: &mut Scratch,
    out: &mut [f64],
) {
    e.explain_pass::<true>(block, first, labels, scratch, out)
}

impl Engine for RescaledInterventional {
    fn name(&self) -> &'static str {
        "interventional-rescaled"
    }

    fn model(&self) -> &Model {
        &self.model
    }

    fn shap(&self, block: &FeatureBlock) -> Result<Attributions> {
        check_labels(self.transform, None, block.rows())?;
        self.values(block, None)
    }

    fn shap_with_labels(&self, block: &FeatureBlock, labels: &[f64]) -> Result<Attributions> {
        check_labels(self.transform, Some(labels), block.rows())?;
        self.values(block, Some(labels))
    }

    fn interactions(&self, _block: &FeatureBlock) -> Result<Interactions> {
        Err(transformed_interactions_unavailable())
    }
}

// The fixtures are read from Parquet.
#[cfg(test)]
mod tests {
    use super::*;

    use crate::engine::interventional::InterventionalReference;
    use crate::test_fixtures::{block_rows as rows, fixtures, max_row_rel_error};

    /// More rows than a pass takes, so a block goes through the leaves in several passes, a
    /// last one partly filled: the fixture's rows from `from` on, again from `from` where
    /// they run out.
    fn more_rows_than_a_pass(block: &FeatureBlock, from: usize) -> FeatureBlock {
        let cols = block.cols();
        let rows = ROWS_TOGETHER + 5;
        let values = (0..rows).flat_map(|r| block.row(from + r % (block.rows() - from)).to_vec()).collect::<Vec<_>>();
        assert_eq!(values.len(), rows * cols);
        FeatureBlock::new(rows, cols, values, crate::model::Precision::F64)
    }

    #[test]
    fn identity_is_the_interventional_reference_on_every_fixture() {
        for f in &fixtures() {
            let prepared = Arc::new(PreparedModel::new(f.model.clone()).unwrap());
            let (background, explained) = (rows(&f.block, 0, 12), rows(&f.block, 12, 30));
            let want = InterventionalReference::new(prepared.clone(), &background).unwrap().shap(&explained).unwrap();
            let got = RescaledInterventional::new(prepared, &background, OutputTransform::Identity, 1 << 30).unwrap().shap(&explained).unwrap();
            let width = f.model.num_groups() * (f.model.num_features() + 1);
            let (err, row) = max_row_rel_error(&got.values, &want.values, width);
            assert!(err <= 1e-9, "{}: row {row} off the reference by {err:e}", f.name);
        }
    }

    /// Two implementations of shap's definition: the grouped engine and the pair-by-pair
    /// reference with its transform, for the probability and a loss (the labels alternating).
    #[test]
    fn transforms_are_the_rescaled_reference_on_every_fixture() {
        for f in &fixtures() {
            let prepared = Arc::new(PreparedModel::new(f.model.clone()).unwrap());
            let (background, explained) = (rows(&f.block, 0, 12), rows(&f.block, 12, 30));
            let labels: Vec<f64> = (0..explained.rows()).map(|r| (r % 2) as f64).collect();
            let width = f.model.num_groups() * (f.model.num_features() + 1);
            for transform in [OutputTransform::Logistic, OutputTransform::LogisticLoss] {
                let reference = InterventionalReference::with_transform(prepared.clone(), &background, Index::Shapley, transform).unwrap();
                let engine = RescaledInterventional::new(prepared.clone(), &background, transform, 1 << 30).unwrap();
                let (want, got) = if transform.needs_labels() {
                    (reference.shap_with_labels(&explained, &labels).unwrap(), engine.shap_with_labels(&explained, &labels).unwrap())
                } else {
                    (reference.shap(&explained).unwrap(), engine.shap(&explained).unwrap())
                };
                let (err, row) = max_row_rel_error(&got.values, &want.values, width);
                assert!(err <= 1e-9, "{} {transform}: row {row} off the reference by {err:e}", f.name);
            }
        }
    }

    #[test]
    fn rows_explained_together_give_the_bits_of_each_row_alone() {
        // On one and two threads (other task boundaries).
        for f in &fixtures() {
            let prepared = Arc::new(PreparedModel::new(f.model.clone()).unwrap());
            let background = rows(&f.block, 0, 12);
            let explained = more_rows_than_a_pass(&f.block, 12);
            let engine = RescaledInterventional::new(prepared, &background, OutputTransform::Logistic, 1 << 30).unwrap();
            for threads in [1, 2] {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                let together = pool.install(|| engine.shap(&explained)).unwrap();
                for r in 0..explained.rows() {
                    let alone = engine.shap(&rows(&explained, r, r + 1)).unwrap();
                    for g in 0..f.model.num_groups() {
                        let (a, b) = (together.row(r, g), alone.row(0, g));
                        assert!(a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()), "{}: row {r}, group {g}, {threads} threads", f.name);
                    }
                }
            }
        }
    }

    #[test]
    fn every_compiled_copy_gives_the_same_bits() {
        // A regressor's margins can be far enough from 0 that the logistic is flat there and
        // every value 0; most fixtures have some.
        let mut with_values = 0;
        let fixtures = fixtures();
        for f in &fixtures {
            let prepared = Arc::new(PreparedModel::new(f.model.clone()).unwrap());
            let background = rows(&f.block, 0, 12);
            let explained = more_rows_than_a_pass(&f.block, 12);
            let engine = RescaledInterventional::new(prepared, &background, OutputTransform::Logistic, 1 << 30).unwrap();
            let width = f.model.num_groups() * (f.model.num_features() + 1);
            // Each copy over the block, pass by pass, as `values` runs them.
            let run = |pass: &dyn Fn(usize, &mut Scratch, &mut [f64])| {
                let mut out = vec![0.0; explained.rows() * width];
                let mut scratch = Scratch::new(&engine, ROWS_TOGETHER);
                for (i, rows) in out.chunks_mut(width * ROWS_TOGETHER).enumerate() {
                    pass(i * ROWS_TOGETHER, &mut scratch, rows);
                }
                out.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            };
            let portable = run(&|first, s, out| engine.explain_pass::<false>(&explained, first, None, s, out));
            with_values += usize::from(portable.iter().any(|&v| f64::from_bits(v) != 0.0));
            #[cfg(target_arch = "x86_64")]
            {
                let level = simd_level();
                if level != SimdLevel::Portable {
                    // SAFETY: the CPU has AVX2 (and FMA).
                    assert_eq!(
                        portable,
                        run(&|first, s, out| unsafe { explain_rows_avx2(&engine, &explained, first, None, s, out) }),
                        "{}: AVX2",
                        f.name
                    );
                }
                if level == SimdLevel::Avx512 {
                    // SAFETY: the CPU has AVX-512F (and FMA).
                    assert_eq!(
                        portable,
                        run(&|first, s, out| unsafe { explain_rows_avx512(&engine, &explained, first, None, s, out) }),
                        "{}: AVX-512",
                        f.name
                    );
                }
            }
        }
        assert!(with_values * 2 > fixtures.len(), "{with_values} of {} fixtures have values", fixtures.len());
    }

    #[test]
    fn logistic_values_add_up_to_each_row_probability_and_rescale_each_pair() {
        for f in fixtures().iter().filter(|f| f.model.num_groups() == 1) {
            let prepared = Arc::new(PreparedModel::new(f.model.clone()).unwrap());
            let (background, explained) = (rows(&f.block, 0, 9), rows(&f.block, 9, 25));
            let engine = RescaledInterventional::new(prepared.clone(), &background, OutputTransform::Logistic, 1 << 30).unwrap();
            let got = engine.shap(&explained).unwrap();
            let margins = engine.predict(&explained).unwrap();
            for r in 0..explained.rows() {
                let total: f64 = got.row(r, 0).iter().sum();
                let want = OutputTransform::Logistic.apply(margins.values[r], 0.0);
                assert!((total - want).abs() <= 1e-12, "{}: row {r}: {total} vs {want}", f.name);
            }
            // Row 0 by hand: the margin's values against each background row alone, scaled.
            let x = rows(&explained, 0, 1);
            let mut want = vec![0.0; f.model.num_features()];
            let sigma = |m: f64| OutputTransform::Logistic.apply(m, 0.0);
            let mx = engine.predict(&x).unwrap().values[0];
            for z in 0..background.rows() {
                let one = rows(&background, z, z + 1);
                let pair = InterventionalReference::new(prepared.clone(), &one).unwrap().shap(&x).unwrap();
                let mz = engine.predict(&one).unwrap().values[0];
                let factor = if mx == mz { 1.0 } else { (sigma(mx) - sigma(mz)) / (mx - mz) };
                want.iter_mut().zip(pair.row(0, 0)).for_each(|(w, p)| *w += p * factor / background.rows() as f64);
            }
            let (err, _) = max_row_rel_error(&got.row(0, 0)[..want.len()], &want, want.len());
            assert!(err <= 1e-9, "{}: row 0 off the pairwise definition by {err:e}", f.name);
        }
    }

    #[test]
    fn losses_add_up_to_each_rows_loss_against_its_label_and_rescale_each_pair() {
        for f in fixtures().iter().filter(|f| f.model.num_groups() == 1) {
            let prepared = Arc::new(PreparedModel::new(f.model.clone()).unwrap());
            let (background, explained) = (rows(&f.block, 0, 9), rows(&f.block, 9, 25));
            let margins = InterventionalReference::new(prepared.clone(), &background).unwrap().predict(&explained).unwrap().values;
            for transform in [OutputTransform::LogisticLoss, OutputTransform::SquaredLoss] {
                let engine = RescaledInterventional::new(prepared.clone(), &background, transform, 1 << 30).unwrap();
                let e = engine.shap(&explained).err().unwrap().to_string();
                assert!(e.contains("give the labels"), "{e}");
                let labels: Vec<f64> = (0..explained.rows())
                    .map(|r| if transform == OutputTransform::LogisticLoss { (r % 2) as f64 } else { r as f64 * 0.3 - 2.0 })
                    .collect();
                let e = engine.shap_with_labels(&explained, &labels[1..]).err().unwrap().to_string();
                assert!(e.contains("labels for 16 rows"), "{e}");
                let got = engine.shap_with_labels(&explained, &labels).unwrap();
                let background_margins = engine.predict(&background).unwrap().values;
                for r in 0..explained.rows() {
                    let row = got.row(r, 0);
                    let total: f64 = row.iter().sum();
                    let want = transform.apply(margins[r], labels[r]);
                    assert!((total - want).abs() <= 1e-9 * want.abs().max(1.0), "{} {transform}: row {r}: {total} vs {want}", f.name);
                    // The bias is the background's mean loss against this row's label.
                    let bias = background_margins.iter().map(|&m| transform.apply(m, labels[r])).sum::<f64>() / background.rows() as f64;
                    assert!((row[row.len() - 1] - bias).abs() <= 1e-12 * bias.abs().max(1.0), "{} {transform}: row {r} bias", f.name);
                }
                // Row 3 by hand: the margin's values against each background row alone, scaled.
                let (r, x) = (3, rows(&explained, 3, 4));
                let mut want = vec![0.0; f.model.num_features()];
                for (z, &mz) in background_margins.iter().enumerate() {
                    let pair = InterventionalReference::new(prepared.clone(), &rows(&background, z, z + 1)).unwrap().shap(&x).unwrap();
                    let mx = margins[r];
                    let factor = if mx == mz { 1.0 } else { (transform.apply(mx, labels[r]) - transform.apply(mz, labels[r])) / (mx - mz) };
                    want.iter_mut().zip(pair.row(0, 0)).for_each(|(w, p)| *w += p * factor / background.rows() as f64);
                }
                let (err, _) = max_row_rel_error(&got.row(r, 0)[..want.len()], &want, want.len());
                assert!(err <= 1e-9, "{} {transform}: row {r} off the pairwise definition by {err:e}", f.name);
            }
        }
    }

    #[test]
    fn a_large_margin_has_a_finite_log_loss() {
        let t = OutputTransform::LogisticLoss;
        assert_eq!(t.apply(800.0, 1.0), 0.0);
        assert_eq!(t.apply(800.0, 0.0), 800.0);
        assert!((t.apply(0.3, 1.0) - ((1.0f64 + 0.3f64.exp()).ln() - 0.3)).abs() < 1e-15);
        assert!((t.apply(-2.0, 0.0) - (1.0f64 + (-2.0f64).exp()).ln()).abs() < 1e-15);
    }

    #[test]
    fn paths_of_more_than_64_distinct_features_are_the_reference_and_add_up() {
        use crate::engine::interventional::tests::{chain_model, uniform_rows};
        let depth = 90;
        let prepared = Arc::new(PreparedModel::new(Arc::new(chain_model(depth, 5))).unwrap());
        let (background, explained) = (uniform_rows(25, depth, 3), uniform_rows(6, depth, 4));
        let want = InterventionalReference::new(prepared.clone(), &background).unwrap().shap(&explained).unwrap();
        let got = RescaledInterventional::new(prepared.clone(), &background, OutputTransform::Identity, 1 << 30).unwrap().shap(&explained).unwrap();
        let (err, row) = max_row_rel_error(&got.values, &want.values, depth + 1);
        assert!(err <= 1e-9, "row {row} off the reference by {err:e}");
        let engine = RescaledInterventional::new(prepared, &background, OutputTransform::Logistic, 1 << 30).unwrap();
        let (got, margins) = (engine.shap(&explained).unwrap(), engine.predict(&explained).unwrap());
        for r in 0..explained.rows() {
            let total: f64 = got.row(r, 0).iter().sum();
            let p = OutputTransform::Logistic.apply(margins.values[r], 0.0);
            assert!((total - p).abs() <= 1e-12, "row {r}: {total} vs {p}");
        }
    }

    #[test]
    fn a_background_over_the_bound_is_refused_with_the_sizes() {
        let f = &fixtures()[0];
        let prepared = Arc::new(PreparedModel::new(f.model.clone()).unwrap());
        let e = RescaledInterventional::new(prepared, &f.block, OutputTransform::Logistic, 0).err().unwrap().to_string();
        assert!(e.contains("over the bound of 0 MiB") && e.contains(&format!("{} rows", f.block.rows())), "{e}");
    }
}
