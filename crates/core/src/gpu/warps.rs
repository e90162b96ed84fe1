//! A model's paths as the kernels read them: for the warp kernels, flat arrays with one 32-lane
//! slot per path element (the long paths are laid out by `quadrature.rs`), and a lane-by-lane
//! CPU simulation of the warp kernels (`kernels/treeshap.cu`).
//!
//! The simulation runs the same steps as the CUDA code, in the same order, with the warp's
//! shuffles emulated over 32-element arrays, so everything but the CUDA syntax is checked on
//! machines without a GPU (the unit tests in `gpu/mod.rs` hold it to the `treeshap` engine at 1e-9).
//! Keep the two in step: a change to one is a change to both.

use std::sync::Arc;

#[cfg(test)]
use super::launch::{Kernel, KernelCall};
use super::paths::{extract, pack, PathElement, PathSet, WARP_LANES};
use super::quadrature::{quadrature_points, LongPaths, LONG_PATH_MAX_ELEMENTS};
use crate::error::Result;
use crate::model::Model;
use crate::model::{MissingType, SplitRule};

/// `i32` fields per lane in [`PathProgram::lane_ints`].
pub const LANE_INTS: usize = 8;
/// `f64` fields per lane in [`PathProgram::lane_reals`]: zero fraction, path value.
pub const LANE_REALS: usize = 2;
/// `u32` fields per split in [`PathProgram::split_ints`].
pub const SPLIT_INTS: usize = 4;

/// `feature` of a lane holding no element.
pub const IDLE_LANE: i32 = -2;
/// `feature` of a path's root element.
pub const ROOT_LANE: i32 = -1;

// Split flags: rule in bits 0-2, missing type in bits 3-4, then two direction bits.
const RULE_XGB_LESS: u32 = 0;
const RULE_XGB_CATEGORIES: u32 = 1;
const RULE_LGB_LESS_EQUAL: u32 = 2;
const RULE_LGB_CATEGORIES: u32 = 3;
const RULE_CATEGORIES_LEFT: u32 = 4;
const RULE_CATEGORIES_LEFT_EXACT: u32 = 5;
const RULE_BITS: u32 = 7;
const MISSING_SHIFT: u32 = 3;
const MISSING_NONE: u32 = 0;
const MISSING_ZERO: u32 = 1;
const MISSING_NAN: u32 = 2;
const DEFAULT_LEFT: u32 = 1 << 5;
const TAKE_LEFT: u32 = 1 << 6;

/// A model's paths as flat arrays for the device (uploaded once per model): the paths that fit
/// a warp packed into 32-lane bins for the warp kernels, the longer ones in [`LongPaths`] for
/// the quadrature kernels, and one table of splits both refer to.
///
/// Lane `l` of bin `b` is slot `b * 32 + l`. Its ints are `[feature, group, start, rank, len,
/// split_begin, split_end, 0]`: the element's feature ([`ROOT_LANE`], [`IDLE_LANE`]), the
/// output group, the lane of its path's root, its position on the path, the path length, and
/// its range of splits. Its reals are `[zero_fraction, path_value]`.
#[derive(Debug, Clone)]
pub struct PathProgram {
    /// Number of bins (warps of work).
    pub bins: usize,
    /// Longest path of each bin: the uniform loop bound of its warp.
    pub bin_len: Vec<i32>,
    /// [`LANE_INTS`] per lane.
    pub lane_ints: Vec<i32>,
    /// [`LANE_REALS`] per lane.
    pub lane_reals: Vec<f64>,
    /// Threshold of each split (unused for categorical splits).
    pub split_thresholds: Vec<f64>,
    /// [`SPLIT_INTS`] per split: `[category_begin, category_words, flags, 0]`.
    pub split_ints: Vec<u32>,
    /// Category bitsets of the categorical splits, 32 codes per word.
    pub categories: Vec<u32>,
    /// The paths too long for a warp, for the long-path quadrature kernels (splits in the
    /// table above).
    pub long: LongPaths,
    /// Under [`PathLayout::Rows`], the paths of at most 32 elements, for the row kernels
    /// (one thread per row; empty under [`PathLayout::Warps`]).
    pub rows: LongPaths,
    /// Model features (F).
    pub features: usize,
    /// Output groups (G).
    pub groups: usize,
    /// Expected value per group.
    pub bias: Vec<f64>,
}

/// Which kernels take a model's paths of at most 32 elements (longer ones always go to the
/// long-path quadrature kernels).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathLayout {
    /// GPUTreeShap's layout: the paths of at most `max_len` elements (at most 32) packed into
    /// warps, a lane per element, EXTEND and UNWOUNDSUM across lanes; longer ones on the
    /// long-path kernels (0 puts every path there).
    Warps {
        /// The longest path a warp takes.
        max_len: usize,
    },
    /// The row kernels: a thread per row, the warp's threads on one path at a time, each
    /// path's values a Gauss-Legendre sum with no division (`quadrature.rs`).
    Rows,
}

impl PathProgram {
    /// The program of `model`'s paths: extracted and merged; paths of at most 32 elements
    /// packed into warps, longer ones for the quadrature kernels. `None` (with a log line) when
    /// a tree is deeper than the engines' recursion bound: the caller computes on the CPU.
    pub fn for_model(model: Arc<Model>) -> Result<Option<PathProgram>> {
        PathProgram::with_layout(model, PathLayout::Warps { max_len: WARP_LANES })
    }

    /// As [`PathProgram::for_model`], with the short paths laid out for `layout`'s kernels: for
    /// comparing the kernels, and for testing the quadrature kernels on short paths.
    pub fn with_layout(model: Arc<Model>, layout: PathLayout) -> Result<Option<PathProgram>> {
        if model.combinations().is_some() {
            // The kernels credit a split to the column it reads; a combination's column credits
            // its features together (the CPU's `oblivious` and `treeshap` do that).
            tracing::warn!("GPU engine not used: the model has CatBoost CTRs of feature combinations; computing on the CPU");
            return Ok(None);
        }
        // Each path keeps every split on it, so a deep chain (legal in the file formats) would
        // need memory quadratic in its depth; such models run on the CPU's `linear`.
        let depth = model.trees().iter().map(crate::model::Tree::depth).max().unwrap_or(0);
        if depth > crate::engine::MAX_RECURSIVE_DEPTH {
            tracing::warn!("GPU engine not used: a tree has depth {depth}, over {}; computing on the CPU", crate::engine::MAX_RECURSIVE_DEPTH);
            return Ok(None);
        }
        let set = extract(model)?;
        let lengths = set.lengths();
        if let Some(len) = lengths.iter().copied().find(|&l| l > LONG_PATH_MAX_ELEMENTS) {
            // Unreachable through the depth bound above (a path has at most depth + 1
            // elements); kept so the kernels' local arrays can never overflow.
            return Err(crate::error::Error::Unsupported(format!(
                "GPU engine: a path has {len} elements, more than the {LONG_PATH_MAX_ELEMENTS} the quadrature kernels take"
            )));
        }
        // The kernels index elements, their splits and the row kernels' scales (up to 16 per
        // element) with 32-bit integers.
        let elements: usize = lengths.iter().sum();
        let splits: usize = set.paths.iter().flat_map(|p| &p.elements).map(|e| e.splits.len()).sum();
        if elements.saturating_mul(quadrature_points(WARP_LANES) + 1).max(splits) > i32::MAX as usize {
            return Err(crate::error::Error::Unsupported(format!(
                "GPU engine: the model's paths have {elements} elements and {splits} splits, more than the kernels' 32-bit indices reach; compute on the CPU"
            )));
        }
        let short_max_len = match layout {
            PathLayout::Warps { max_len } => max_len.min(WARP_LANES),
            PathLayout::Rows => WARP_LANES,
        };
        let (short, long): (Vec<usize>, Vec<usize>) = (0..lengths.len()).partition(|&p| lengths[p] <= short_max_len);
        if !long.is_empty() {
            tracing::debug!(paths = long.len(), longest = long.iter().map(|&p| lengths[p]).max(), "GPU engine: long paths on the quadrature kernels");
        }
        if layout == PathLayout::Rows {
            return Ok(Some(PathProgram::new(&set, &[], &long, &short)));
        }
        let short_lengths: Vec<usize> = short.iter().map(|&p| lengths[p]).collect();
        let bins = pack(&short_lengths, WARP_LANES).expect("paths longer than a warp were set apart");
        let bins: Vec<Vec<usize>> = bins.into_iter().map(|b| b.into_iter().map(|i| short[i]).collect()).collect();
        Ok(Some(PathProgram::new(&set, &bins, &long, &[])))
    }

    /// Lays out `set`'s paths: the warp kernels' `bins` (as `pack` chose them), the long-path
    /// kernels' `long` paths and the row kernels' `rows`.
    pub(crate) fn new(set: &PathSet, bins: &[Vec<usize>], long: &[usize], rows: &[usize]) -> Self {
        let lanes = bins.len() * WARP_LANES;
        let mut program = PathProgram {
            bins: bins.len(),
            bin_len: Vec::with_capacity(bins.len()),
            lane_ints: Vec::with_capacity(lanes * LANE_INTS),
            lane_reals: Vec::with_capacity(lanes * LANE_REALS),
            split_thresholds: Vec::new(),
            split_ints: Vec::new(),
            categories: Vec::new(),
            long: LongPaths::default(),
            rows: LongPaths::default(),
            features: set.model.num_features(),
            groups: set.model.num_groups(),
            bias: set.bias.clone(),
        };
        for bin in bins {
            let mut lane = 0usize;
            let mut longest = 1usize;
            for &p in bin {
                let path = &set.paths[p];
                let (start, len) = (lane, path.elements.len());
                longest = longest.max(len);
                for (rank, e) in path.elements.iter().enumerate() {
                    let splits = program.push_splits(set, e);
                    let feature = e.feature.map_or(ROOT_LANE, |f| f as i32);
                    program.lane_ints.extend([
                        feature,
                        path.group as i32,
                        start as i32,
                        rank as i32,
                        len as i32,
                        splits.start as i32,
                        splits.end as i32,
                        0,
                    ]);
                    program.lane_reals.extend([e.zero_fraction, path.value]);
                    lane += 1;
                }
            }
            // Idle lanes: a path of one element rooted at themselves, contributing nothing.
            for l in lane..WARP_LANES {
                program.lane_ints.extend([IDLE_LANE, 0, l as i32, 0, 1, 0, 0, 0]);
                program.lane_reals.extend([1.0, 0.0]);
            }
            program.bin_len.push(longest as i32);
        }
        let mut long_paths = std::mem::take(&mut program.long);
        program.push_quadrature_paths(set, long, &mut long_paths);
        long_paths.finish(false);
        let mut row_paths = std::mem::take(&mut program.rows);
        program.push_quadrature_paths(set, rows, &mut row_paths);
        row_paths.finish(true);
        (program.long, program.rows) = (long_paths, row_paths);
        program
    }

    /// Adds `paths` of `set` to `to`, longest first: neighbouring threads of the long-path
    /// kernels take paths of similar length, and the row kernels meet paths of one rule size
    /// in runs.
    fn push_quadrature_paths(&mut self, set: &PathSet, paths: &[usize], to: &mut LongPaths) {
        let mut paths = paths.to_vec();
        paths.sort_by_key(|&p| std::cmp::Reverse(set.paths[p].elements.len()));
        for p in paths {
            let path = &set.paths[p];
            to.push_path(path.elements.len(), path.group, path.value);
            for e in &path.elements {
                let splits = self.push_splits(set, e);
                to.push_element(e.feature.map_or(ROOT_LANE, |f| f as i32), splits, e.zero_fraction);
            }
        }
    }

    /// Adds an element's splits to the split table; returns their range.
    fn push_splits(&mut self, set: &PathSet, element: &PathElement) -> std::ops::Range<usize> {
        let begin = self.split_thresholds.len();
        for s in &element.splits {
            self.push_split(set, s.tree as usize, s.node as usize, s.left);
        }
        begin..self.split_thresholds.len()
    }

    fn push_split(&mut self, set: &PathSet, tree: usize, node: usize, take_left: bool) {
        let tree = &set.model.trees()[tree];
        let n = &tree.nodes[node];
        let (rule, missing, threshold) = match n.rule {
            SplitRule::XgbLess { threshold } => (RULE_XGB_LESS, MISSING_NAN, threshold),
            SplitRule::XgbCategories => (RULE_XGB_CATEGORIES, MISSING_NAN, 0.0),
            SplitRule::LgbLessEqual { threshold, missing } => {
                let m = match missing {
                    MissingType::None => MISSING_NONE,
                    MissingType::Zero => MISSING_ZERO,
                    MissingType::NaN => MISSING_NAN,
                };
                (RULE_LGB_LESS_EQUAL, m, threshold)
            }
            SplitRule::LgbCategories => (RULE_LGB_CATEGORIES, MISSING_NONE, 0.0),
            SplitRule::CategoriesLeft { exact: false } => (RULE_CATEGORIES_LEFT, MISSING_NAN, 0.0),
            SplitRule::CategoriesLeft { exact: true } => (RULE_CATEGORIES_LEFT_EXACT, MISSING_NAN, 0.0),
        };
        debug_assert!(rule <= RULE_BITS);
        let mut flags = rule | missing << MISSING_SHIFT;
        if n.default_left {
            flags |= DEFAULT_LEFT;
        }
        if take_left {
            flags |= TAKE_LEFT;
        }
        let (begin, words) = n.categories;
        let category_begin = self.categories.len() as u32;
        self.categories.extend_from_slice(&tree.category_words[begin as usize..(begin + words) as usize]);
        self.split_thresholds.push(threshold);
        self.split_ints.extend([category_begin, words, flags, 0]);
        debug_assert_eq!(self.split_ints.len() % SPLIT_INTS, 0);
    }
}

/// The lane-by-lane simulation of the kernels, for the unit tests in `gpu/mod.rs`.
#[cfg(test)]
impl PathProgram {
    /// Whether `x` (the split's feature value) follows split `s` the way the path does.
    /// `follows` in the kernel source.
    pub fn follows(&self, s: usize, x: f64) -> bool {
        let [category_begin, words, flags, _] = self.split_ints[s * SPLIT_INTS..(s + 1) * SPLIT_INTS] else { unreachable!() };
        let threshold = self.split_thresholds[s];
        let default_left = flags & DEFAULT_LEFT != 0;
        let in_set = |code: u32| {
            let word = code / 32;
            word < words && (self.categories[(category_begin + word) as usize] >> (code % 32)) & 1 == 1
        };
        let left = match flags & RULE_BITS {
            RULE_XGB_LESS => {
                if x.is_nan() {
                    default_left
                } else {
                    x < threshold
                }
            }
            RULE_XGB_CATEGORIES => {
                if x.is_nan() {
                    default_left
                } else if !(0.0..16_777_216.0).contains(&x) {
                    true
                } else {
                    !in_set(x as u32)
                }
            }
            RULE_LGB_LESS_EQUAL => {
                let missing = (flags >> MISSING_SHIFT) & 3;
                let x = if x.is_nan() && missing != MISSING_NAN { 0.0 } else { x };
                let is_missing = match missing {
                    MISSING_ZERO => (-1e-35..=1e-35).contains(&x),
                    MISSING_NAN => x.is_nan(),
                    _ => false,
                };
                if is_missing {
                    default_left
                } else {
                    x <= threshold
                }
            }
            RULE_CATEGORIES_LEFT | RULE_CATEGORIES_LEFT_EXACT => {
                if x.is_nan() || x < 0.0 {
                    default_left
                } else if x >= 16_777_216.0 || (flags & RULE_BITS == RULE_CATEGORIES_LEFT_EXACT && x.fract() != 0.0) {
                    false
                } else {
                    in_set(x as u32)
                }
            }
            _ => {
                if x.is_nan() || x >= 2_147_483_648.0 || x <= -2_147_483_649.0 || x.trunc() < 0.0 {
                    false
                } else {
                    in_set(x.trunc() as u32)
                }
            }
        };
        left == (flags & TAKE_LEFT != 0)
    }

    /// One lane's record.
    fn lane(&self, bin: usize, l: usize) -> Lane {
        let i = &self.lane_ints[(bin * WARP_LANES + l) * LANE_INTS..][..LANE_INTS];
        let r = &self.lane_reals[(bin * WARP_LANES + l) * LANE_REALS..][..LANE_REALS];
        Lane {
            feature: i[0],
            group: i[1] as usize,
            start: i[2] as usize,
            rank: i[3] as usize,
            len: i[4] as usize,
            splits: i[5] as usize..i[6] as usize,
            zero: r[0],
            value: r[1],
        }
    }

    /// The one fraction of a lane for row `x`: 1 when the row satisfies all its splits.
    fn one_fraction(&self, lane: &Lane, x: &[f64]) -> f64 {
        if lane.feature < 0 {
            return 1.0;
        }
        let v = x[lane.feature as usize];
        if lane.splits.clone().all(|s| self.follows(s, v)) {
            1.0
        } else {
            0.0
        }
    }

    /// The launches of `call` by the warp kernels' steps, simulated on the CPU: what the
    /// device returns (sums only: the host adds the bias and the interaction diagonal, in
    /// [`super::launch`]). Pass it as the launcher of [`super::launch::shap_values`] or
    /// [`super::launch::interaction_values`]. The quadrature kernels are not simulated (their
    /// CUDA source runs under emulation in `tests/gpu_emulation.rs`): a call with long paths
    /// is an error.
    pub fn simulate(&self, call: &KernelCall) -> Result<Vec<f64>> {
        let mut sums = vec![0.0; call.plan.rows * call.width];
        for launch in &call.plan.launches {
            let part = match launch.kernel {
                Kernel::Shap => self.simulate_shap_sums(call.x, call.width),
                Kernel::InteractionPairs => self.simulate_interaction_pairs(call.x, call.width),
                kernel => {
                    return Err(crate::error::Error::Unsupported(format!(
                        "{} is not simulated lane by lane; tests/gpu_emulation.rs runs it",
                        kernel.name()
                    )))
                }
            };
            sums.iter_mut().zip(part).for_each(|(s, p)| *s += p);
        }
        Ok(sums)
    }

    /// `shap_kernel`'s sums for the rows `x`.
    fn simulate_shap_sums(&self, x: &[f64], width: usize) -> Vec<f64> {
        let f = self.features;
        self.for_each_warp(x, width, |phi, lanes, loaded, max_len| {
            let mut warp = loaded.clone();
            warp.extend(lanes, max_len);
            let sums = warp.unwound_sums(lanes, max_len);
            for (l, lane) in lanes.iter().enumerate() {
                if lane.feature >= 0 {
                    phi[lane.group * (f + 1) + lane.feature as usize] += sums[l] * (warp.one[l] - warp.zero[l]) * lane.value;
                }
            }
        })
    }

    /// `interactions_kernel`'s off-diagonal pairs for the rows `x`.
    ///
    /// Conditioning on element `c` makes it a null player (fractions 1 and 1: Shapley values of
    /// the others are unchanged by a null player) and scales the path by `one_c` ("on") or
    /// `zero_c` ("off"); half the difference of the two runs is entry `[c][i]`.
    fn simulate_interaction_pairs(&self, x: &[f64], width: usize) -> Vec<f64> {
        let w = self.features + 1;
        self.for_each_warp(x, width, |out, lanes, loaded, max_len| {
            for c in 1..max_len {
                // Every lane learns its path's element c (its own lane when the path is shorter).
                let src: Vec<usize> = lanes.iter().enumerate().map(|(l, lane)| if c < lane.len { lane.start + c } else { l }).collect();
                let zero_c: Vec<f64> = src.iter().map(|&s| loaded.zero[s]).collect();
                let one_c: Vec<f64> = src.iter().map(|&s| loaded.one[s]).collect();
                let feature_c: Vec<i32> = src.iter().map(|&s| lanes[s].feature).collect();
                let mut warp = loaded.clone();
                for (l, lane) in lanes.iter().enumerate() {
                    if lane.rank == c {
                        warp.zero[l] = 1.0;
                        warp.one[l] = 1.0;
                    }
                }
                warp.extend(lanes, max_len);
                let sums = warp.unwound_sums(lanes, max_len);
                for (l, lane) in lanes.iter().enumerate() {
                    if lane.feature >= 0 && c < lane.len && lane.rank != c {
                        let v = 0.5 * sums[l] * (warp.one[l] - warp.zero[l]) * lane.value * (one_c[l] - zero_c[l]);
                        out[lane.group * w * w + feature_c[l] as usize * w + lane.feature as usize] += v;
                    }
                }
            }
        })
    }

    /// Calls `warp_fn(row_out, lanes, registers, max_len)` for every row and bin, the
    /// registers loaded for that row; returns the rows' outputs, `width` each, summed.
    fn for_each_warp(&self, x: &[f64], width: usize, warp_fn: impl Fn(&mut [f64], &[Lane], &WarpState, usize)) -> Vec<f64> {
        let rows = x.len() / self.features.max(1);
        let mut values = vec![0.0; rows * width];
        let warps: Vec<Vec<Lane>> = (0..self.bins).map(|b| (0..WARP_LANES).map(|l| self.lane(b, l)).collect()).collect();
        for (r, out) in values.chunks_mut(width.max(1)).enumerate().take(rows) {
            let row = &x[r * self.features..(r + 1) * self.features];
            for (b, lanes) in warps.iter().enumerate() {
                warp_fn(out, lanes, &WarpState::load(self, lanes, row), self.bin_len[b] as usize);
            }
        }
        values
    }
}

/// One lane's record, decoded.
#[cfg(test)]
#[derive(Debug, Clone)]
struct Lane {
    feature: i32,
    group: usize,
    start: usize,
    rank: usize,
    len: usize,
    splits: std::ops::Range<usize>,
    zero: f64,
    value: f64,
}

/// The per-lane registers of a warp for one row: fractions and permutation weights.
#[cfg(test)]
#[derive(Debug, Clone)]
struct WarpState {
    zero: Vec<f64>,
    one: Vec<f64>,
    w: Vec<f64>,
}

#[cfg(test)]
impl WarpState {
    fn load(program: &PathProgram, lanes: &[Lane], x: &[f64]) -> Self {
        WarpState {
            zero: lanes.iter().map(|l| l.zero).collect(),
            one: lanes.iter().map(|l| program.one_fraction(l, x)).collect(),
            w: lanes.iter().map(|l| if l.rank == 0 { 1.0 } else { 0.0 }).collect(),
        }
    }

    /// EXTEND by every element of every path at once: at step `d`, each lane reads its path's
    /// element `d` (a shuffle) and its left neighbour's weight (a shuffle up).
    fn extend(&mut self, lanes: &[Lane], max_len: usize) {
        for d in 1..max_len {
            let old = self.w.clone();
            for (l, lane) in lanes.iter().enumerate() {
                let src = if d < lane.len { lane.start + d } else { l };
                let (z, o) = (self.zero[src], self.one[src]);
                let left = if lane.rank == 0 { 0.0 } else { old[l - 1] };
                if d < lane.len {
                    let rank = lane.rank as f64;
                    // The kernel multiplies by 1 / (d + 1) from a table (RECIPROCAL).
                    self.w[l] = (old[l] * z * (d as f64 - rank) + left * o * rank) * (1.0 / (d + 1) as f64);
                }
            }
        }
    }

    /// UNWOUNDSUM of each lane's own element, every lane at once (uniform loop over `max_len`).
    fn unwound_sums(&self, lanes: &[Lane], max_len: usize) -> Vec<f64> {
        lanes
            .iter()
            .enumerate()
            .map(|(l, lane)| {
                let depth = lane.len - 1;
                let (zero, one) = (self.zero[l], self.one[l]);
                let mut next = self.w[lane.start + depth];
                let mut total = 0.0;
                for i in (0..max_len.saturating_sub(1)).rev() {
                    let wi = self.w[lane.start + i.min(depth)];
                    if i < depth {
                        // As the kernel: `one` is 0 or 1, so its divisions are products
                        // with 1 / k, and the factor 1 / zero is applied once.
                        if one != 0.0 {
                            let tmp = next * (1.0 / (i + 1) as f64);
                            total += tmp;
                            next = wi - tmp * zero * (depth - i) as f64;
                        } else {
                            total += wi * (1.0 / (depth - i) as f64);
                        }
                    }
                }
                if one == 0.0 {
                    // As the kernel: an element no training cover reaches and the row does not
                    // follow zeroes the path (every weight is 0), and its own sum too.
                    total = if zero == 0.0 { 0.0 } else { total / zero };
                }
                total * (depth + 1) as f64
            })
            .collect()
    }
}
