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
//! pass over the rows' fail sets finds the rows the group shares something with (their sets do
//! not meet); for each, a sum of its `s(x, z)` over the group's background rows. So a row costs
//! `O(groups / ROWS_TOGETHER + Σ sharing groups' rows)` per leaf, at most `O(leaves ×
//! background)`, and the groups of a whole model (too large for any cache) are read from memory
//! once per pass rather than once per row. Table memory: 4 bytes per background row and leaf,
//! and 16 per group.
//!
//! [`Interventional`]: super::interventional::Interventional

use std::collections::BTreeMap;
use std::sync::Arc;

use super::block::FeatureBlock;
use super::drivers::{rows_per_task, shap_by_task_from};
use super::engine_trait::Engine;
use super::interventional::{
    check_background, count_ones_wide, for_each_bit, for_each_bit_wide, meet_wide, transformed_interactions_unavailable, FailWalk, Weights,
};
use super::options::{Index, OutputTransform};
use super::output::{Attributions, Interactions};
use super::prepared::PreparedModel;
use crate::error::{Error, Result};
use crate::model::Model;

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
}

/// Rows that go through each leaf together (see [`RescaledInterventional::explain_rows`]).
const ROWS_TOGETHER: usize = 16;
/// At most this many bytes of a task's `s(x, z)` scales: a large background (a million rows of
/// ten classes) goes through the leaves fewer rows a pass rather than take 16× the memory.
const SCALES_BYTES_PER_TASK: usize = 16 << 20;
// A pass's rows are bits of a `u32`.
const _: () = assert!(ROWS_TOGETHER < 32);

/// What one task reuses across its rows; each per-row part holds [`ROWS_TOGETHER`] rows.
struct Scratch {
    /// Per row, its fail sets (`max_slots` words).
    slots: Vec<u64>,
    /// Per row, its margins (one per group).
    margins: Vec<f64>,
    /// Per row, `s(x, z) / n` per group then background row.
    scales: Vec<f64>,
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
        let walks: Vec<FailWalk> = model.trees().iter().enumerate().map(|(t, tree)| FailWalk::new(tree, t)).collect::<Result<_>>()?;
        let total_leaves: usize = walks.iter().map(|w| w.leaves.len()).sum();
        let rows = background.rows();
        let bytes = rows.checked_mul(total_leaves).and_then(|n| n.checked_mul(4)).unwrap_or(usize::MAX);
        if bytes > memory_bound || rows > u32::MAX as usize {
            return Err(Error::ResourceExhausted(format!(
                "interventional {transform} output: the background's {rows} rows × {total_leaves} leaves take {} MiB, over the bound of {} MiB; use fewer background rows or raise the bound",
                bytes >> 20,
                memory_bound >> 20
            )));
        }
        let g = model.num_groups();
        let mut margins = vec![0.0; rows * g];
        let mut bias = vec![0.0; g];
        for r in 0..rows {
            let m = &mut margins[r * g..(r + 1) * g];
            model.predict_row(background.row(r), m);
            for (b, m) in bias.iter_mut().zip(m.iter()) {
                *b += transform.apply(*m, 0.0);
            }
        }
        bias.iter_mut().for_each(|b| *b /= rows as f64);
        if bias.iter().any(|b| !b.is_finite()) {
            return Err(Error::InvalidArgument(format!("interventional {transform} output: the background's mean output is not finite")));
        }
        // Each leaf's background rows by fail set, in increasing set then row order, so every
        // sum below runs in the same order on every run.
        let mut members = Vec::with_capacity(rows * total_leaves);
        let mut leaves = Vec::with_capacity(walks.len());
        let mut slots = vec![0u64; walks.iter().map(|w| w.slots * w.words).max().unwrap_or(1)];
        for (tree, walk) in model.trees().iter().zip(&walks) {
            let words = walk.words;
            let mut by_leaf: Vec<BTreeMap<Vec<u64>, Vec<u32>>> = vec![BTreeMap::new(); walk.leaves.len()];
            for r in 0..rows {
                if words == 1 {
                    walk.fail_sets(tree, background.row(r), &mut slots);
                } else {
                    walk.fail_sets_wide(tree, background.row(r), &mut slots);
                }
                for (k, leaf) in walk.leaves.iter().enumerate() {
                    let set = &slots[leaf.slot as usize * words..(leaf.slot as usize + 1) * words];
                    match by_leaf[k].get_mut(set) {
                        Some(members) => members.push(r as u32),
                        None => {
                            by_leaf[k].insert(set.to_vec(), vec![r as u32]);
                        }
                    }
                }
            }
            let groups = by_leaf
                .into_iter()
                .map(|sets| {
                    let mut wide_sets = Vec::new();
                    let (sets, ranges) = sets
                        .into_iter()
                        .map(|(set, rows)| {
                            let first = members.len() as u32;
                            members.extend_from_slice(&rows);
                            if words > 1 {
                                wide_sets.extend_from_slice(&set);
                            }
                            (set[0], (first, members.len() as u32))
                        })
                        .unzip();
                    LeafGroups { sets, ranges, wide_sets }
                })
                .collect();
            leaves.push(groups);
        }
        let widest = walks.iter().flat_map(|w| w.leaves.iter().map(|l| l.features.len())).max().unwrap_or(0);
        let max_slots = slots.len();
        if transform.needs_labels() {
            bias.clear();
        }
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
        })
    }

    /// Adds the values of `rows` rows of `block` from `first` to `out` (each row G × (F+1));
    /// `labels` (one per row of the block) are read by a loss only, which also writes each
    /// row's bias. The rows go through each leaf together: a leaf's groups are read from memory
    /// once for all of them (the whole model's groups, tens of MB for 100 trees of depth 8 and
    /// 100 background rows, are too large for any cache). Each row's values are added in the
    /// same order as alone (tree, leaf, group), so the bits do not depend on its neighbours.
    fn explain_rows(&self, block: &FeatureBlock, first: usize, labels: Option<&[f64]>, scratch: &mut Scratch, out: &mut [f64]) {
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
                let tx = self.transform.apply(mx, label);
                let mut bias = 0.0;
                for z in 0..n {
                    let mz = self.background_margins[z * g + group];
                    let tz = self.transform.apply(mz, label);
                    let s = if mx == mz { 1.0 } else { (tx - tz) / (mx - mz) };
                    scales[group * n + z] = s / n as f64;
                    bias += tz;
                }
                if self.transform.needs_labels() {
                    out[r * width + group * w + w - 1] = bias / n as f64;
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
            let live = (1u32 << rows) - 1;
            for (leaf, groups) in walk.leaves.iter().zip(leaves) {
                let mut x_fs = [0u64; ROWS_TOGETHER];
                for (r, x_f) in x_fs.iter_mut().enumerate().take(rows) {
                    *x_f = scratch.slots[r * per_row_slots + leaf.slot as usize];
                }
                for (k, &z_f) in groups.sets.iter().enumerate() {
                    // Which rows the group shares something with, all rows at once (a loop
                    // the compiler turns into vector compares, with no branch per row): none
                    // when the sets meet (no hybrid reaches the leaf), nor when both rows reach
                    // it.
                    let mut sharing = 0u32;
                    for (r, &x_f) in x_fs.iter().enumerate() {
                        sharing |= u32::from(z_f & x_f == 0 && (z_f | x_f) != 0) << r;
                    }
                    sharing &= live;
                    if sharing == 0 {
                        continue;
                    }
                    let (start, end) = groups.ranges[k];
                    let members = &self.members[start as usize..end as usize];
                    let a = z_f.count_ones() as usize;
                    for_each_bit(u64::from(sharing), |r| {
                        let x_f = x_fs[r];
                        let b = x_f.count_ones() as usize;
                        let scales = &scratch.scales[r * per_row_scales + scales_at..][..n];
                        let phi = &mut out[r * width + phi_at..][..w];
                        let scale: f64 = members.iter().map(|&z| scales[z as usize]).sum();
                        let v = leaf.value * scale;
                        if a > 0 {
                            let hot = v * self.weights.hot(a, b);
                            for_each_bit(z_f, |i| phi[leaf.features[i] as usize] += hot);
                        }
                        if b > 0 {
                            let cold = v * self.weights.cold(a, b);
                            for_each_bit(x_f, |j| phi[leaf.features[j] as usize] -= cold);
                        }
                    });
                }
            }
        }
    }
}

impl RescaledInterventional {
    /// Rows a pass takes: [`ROWS_TOGETHER`], or fewer where their scales would take more than
    /// [`SCALES_BYTES_PER_TASK`].
    fn rows_together(&self) -> usize {
        let per_row = self.model.num_groups().saturating_mul(self.background_rows).saturating_mul(size_of::<f64>());
        (SCALES_BYTES_PER_TASK / per_row.max(1)).clamp(1, ROWS_TOGETHER)
    }

    /// Every row's values; `labels` (one per row) for a loss.
    fn values(&self, block: &FeatureBlock, labels: Option<&[f64]>) -> Result<Attributions> {
        let together = self.rows_together();
        let g = self.model.num_groups();
        let width = g * (self.model.num_features() + 1);
        shap_by_task_from(
            &self.model,
            &self.bias,
            block,
            rows_per_task(block.rows()),
            || Scratch {
                slots: vec![0; together * self.max_slots],
                margins: vec![0.0; together * g],
                scales: vec![0.0; together * g * self.background_rows],
            },
            |scratch, first, chunk| {
                for (i, rows) in chunk.chunks_mut(width * together).enumerate() {
                    self.explain_rows(block, first + i * together, labels, scratch, rows);
                }
            },
        )
    }

    /// One wide tree's part of [`explain_rows`](Self::explain_rows): the same sums over fail
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

impl Engine for RescaledInterventional {
    fn name(&self) -> &'static str {
        "interventional-rescaled"
    }

    fn model(&self) -> &Model {
        &self.model
    }

    fn shap(&self, block: &FeatureBlock) -> Result<Attributions> {
        if self.transform.needs_labels() {
            return Err(Error::InvalidArgument(format!(
                "the {} output is a loss against each row's label: give the labels (shap_values(X, y) in shap's interface)",
                self.transform
            )));
        }
        self.values(block, None)
    }

    fn shap_with_labels(&self, block: &FeatureBlock, labels: &[f64]) -> Result<Attributions> {
        if !self.transform.needs_labels() {
            return Err(Error::InvalidArgument(format!("the {} output reads no labels; explain without them", self.transform)));
        }
        if labels.len() != block.rows() {
            return Err(Error::InvalidArgument(format!("{} labels for {} rows: give one label per explained row", labels.len(), block.rows())));
        }
        if let Some(r) = labels.iter().position(|y| !y.is_finite()) {
            return Err(Error::InvalidArgument(format!("the label of row {r} is {}, not a finite number", labels[r])));
        }
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

    #[test]
    fn rows_explained_together_give_the_bits_of_each_row_alone() {
        // More rows than ROWS_TOGETHER, so the block goes through the leaves in several passes,
        // a last one partly filled; on one and two threads (other task boundaries).
        for f in &fixtures() {
            let prepared = Arc::new(PreparedModel::new(f.model.clone()).unwrap());
            let background = rows(&f.block, 0, 12);
            let explained = rows(&f.block, 12, f.block.rows().min(12 + ROWS_TOGETHER + 5));
            assert!(explained.rows() > ROWS_TOGETHER, "{}: too few rows to fill a pass", f.name);
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
