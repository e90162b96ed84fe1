//! SHAP engines: exact path-dependent (cover-weighted) TreeSHAP in margin space, f64 arithmetic.
//!
//! Every engine implements [`Explainer`]; callers pick one by [`Algorithm`] name through
//! [`build_explainer`]. Rows are explained independently in fixed-size blocks on the rayon pool
//! the caller installs, so results are bit-for-bit the same for any thread count.
//!
//! Engines know nothing of Arrow: they read a dense [`FeatureBlock`] and return plain arrays.

mod auto;
mod block;
mod decision;
mod fast_v1;
mod fast_v2;
pub(crate) mod interactions;
mod linear;
pub(crate) mod path;
pub(crate) mod prepared;
mod quadrature;
mod treeshap;

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use rayon::prelude::*;

pub use auto::AutoChoice;
use auto::choose_algorithm;
pub use block::FeatureBlock;
pub use fast_v2::DEFAULT_V2_MEMORY_BYTES;
pub use interactions::finish_row as finish_interaction_row;
pub(crate) use prepared::PreparedModel;

use crate::error::{Error, Result};
use crate::model::Model;

/// Most rows per unit of parallel work: a task applies one tree to all its rows before the next
/// tree, so more rows per task keep a tree in cache longer.
pub const ROWS_PER_TASK: usize = 64;

/// Rows per task for a block of `rows`: [`ROWS_PER_TASK`], or fewer when the block is small, so
/// that every thread gets work (a 50-row block of a deep model is otherwise one task on one
/// core) — but no fewer than the threads can share, since each task reads every tree once
/// (25 rows per task ran the 1000-tree depth-16 model 18 % faster than 7). Each row's
/// attributions are summed tree by tree in model order whatever the task, so the split of work
/// never changes what is computed.
pub(crate) fn rows_per_task(rows: usize) -> usize {
    rows.div_ceil(rayon::current_num_threads()).clamp(1, ROWS_PER_TASK)
}

/// Deepest tree the engines that recurse along a path (`treeshap`, `fast-v1`, `quadrature`) or
/// size per-thread tables by depth squared (`treeshap`, `fast-v1`, `fast-v2`) take. A tree's
/// depth comes from its file (a chain of 100,000 splits is legal), so these engines refuse deeper
/// trees instead of overflowing the stack or asking for gigabytes; `linear` walks with an explicit
/// stack and takes any depth its scratch bound allows. Real models are far shallower (XGBoost's
/// `max_depth` is usually 6–16).
pub const MAX_RECURSIVE_DEPTH: usize = 512;

/// Refuses a model deeper than [`MAX_RECURSIVE_DEPTH`] for `engine`, naming the tree and the
/// engine that can take it.
pub(crate) fn check_depth(engine: &str, p: &PreparedModel) -> Result<()> {
    if p.max_depth <= MAX_RECURSIVE_DEPTH {
        return Ok(());
    }
    let tree = p.trees.iter().position(|t| t.depth == p.max_depth).unwrap_or(0);
    Err(Error::Unavailable(format!(
        "{engine}: tree {tree} has depth {}, deeper than the {MAX_RECURSIVE_DEPTH} this engine takes (its recursion and per-thread scratch grow with depth); the linear engine takes it",
        p.max_depth
    )))
}

/// Most values one call of an engine returns for one block (2 GiB of f64). Outputs are sized
/// by the model (`G·(F+1)` per row, `G·(F+1)²` for interactions), which a file declares, so
/// they are checked before they are allocated; the caller explains fewer rows at a time.
pub const MAX_OUTPUT_VALUES: usize = 1 << 28;

/// Refuses an output of `rows × width` values over [`MAX_OUTPUT_VALUES`].
pub(crate) fn check_output(rows: usize, width: usize, what: &str) -> Result<()> {
    let values = rows.saturating_mul(width);
    if values > MAX_OUTPUT_VALUES {
        return Err(Error::Input(format!(
            "{rows} rows × {width} {what} per row is {} MiB, over the limit of {} MiB for one batch; explain fewer rows at a time",
            values.saturating_mul(8) >> 20,
            MAX_OUTPUT_VALUES * 8 >> 20
        )));
    }
    Ok(())
}

/// The engines callers can ask for by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Algorithm {
    /// Pick per model and row count (see [`auto_choice`]).
    #[default]
    Auto,
    /// The original recursive TreeSHAP (Lundberg et al. 2018, algorithm 2): the reference.
    TreeShap,
    /// Fast TreeSHAP v1: hot/cold split of the path, same memory as TreeSHAP.
    FastV1,
    /// Fast TreeSHAP v2: per-leaf tables over the satisfied-feature patterns, bounded memory.
    FastV2,
    /// Gauss–Legendre quadrature of the Shapley weights: exact, O(⌈d/2⌉) per node, no tables.
    Quadrature,
    /// The quadrature rule in Linear TreeSHAP's bottom-up form, eight rows per SIMD pass:
    /// exact, O(⌈d/2⌉) per node and row instead of per leaf and path feature, no tables.
    Linear,
}

impl Algorithm {
    /// The name used on the command line.
    pub fn name(&self) -> &'static str {
        match self {
            Algorithm::Auto => "auto",
            Algorithm::TreeShap => "treeshap",
            Algorithm::FastV1 => "fast-v1",
            Algorithm::FastV2 => "fast-v2",
            Algorithm::Quadrature => "quadrature",
            Algorithm::Linear => "linear",
        }
    }

    /// All names, for help texts.
    pub const NAMES: &'static [&'static str] = &["auto", "treeshap", "fast-v1", "fast-v2", "quadrature", "linear"];
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Algorithm {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "auto" => Algorithm::Auto,
            "treeshap" => Algorithm::TreeShap,
            "fast-v1" | "fast_v1" => Algorithm::FastV1,
            "fast-v2" | "fast_v2" => Algorithm::FastV2,
            "quadrature" => Algorithm::Quadrature,
            "linear" => Algorithm::Linear,
            other => {
                return Err(Error::Input(format!(
                    "unknown algorithm {other:?}; expected one of {}",
                    Algorithm::NAMES.join(", ")
                )))
            }
        })
    }
}

/// Where attributions are computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Device {
    /// The GPU when one can be used, else the CPU (said once in the log).
    #[default]
    Auto,
    /// All CPU cores.
    Cpu,
    /// An NVIDIA GPU; an error when none can be used.
    Gpu,
}

impl FromStr for Device {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "auto" => Ok(Device::Auto),
            "cpu" => Ok(Device::Cpu),
            "gpu" => Ok(Device::Gpu),
            other => Err(Error::Input(format!("unknown device {other:?}; expected auto, cpu or gpu"))),
        }
    }
}

impl Device {
    /// The device that will actually run, or why the one asked for cannot: `gpu` fails naming
    /// what is missing (driver library, NVRTC, device); `auto` takes the GPU when one is usable
    /// and otherwise the CPU, saying why once in the log.
    pub fn resolve(self) -> Result<Device> {
        match self {
            Device::Cpu => Ok(Device::Cpu),
            Device::Auto => match gpu_status() {
                Ok(name) => {
                    log_once(|| tracing::info!("device auto: computing on the GPU ({name})"));
                    Ok(Device::Gpu)
                }
                Err(why) => {
                    log_once(|| tracing::info!("device auto: computing on the CPU ({why})"));
                    Ok(Device::Cpu)
                }
            },
            Device::Gpu => gpu_status().map(|_| Device::Gpu).map_err(|why| Error::Unavailable(format!("--device gpu: {why}; use --device cpu or auto"))),
        }
    }

    /// The device the engines use for `algorithm` (before a model the GPU cannot take falls
    /// back to the CPU): as [`resolve`](Self::resolve), except that `auto` with a named CPU
    /// algorithm stays on the CPU.
    pub fn for_algorithm(self, algorithm: Algorithm) -> Result<Device> {
        if self == Device::Auto && algorithm != Algorithm::Auto {
            return Ok(Device::Cpu);
        }
        self.resolve()
    }
}

/// Runs `log` the first time only: the device choice is said once per process, not per model.
fn log_once(log: impl FnOnce()) {
    static SAID: std::sync::Once = std::sync::Once::new();
    SAID.call_once(log);
}

/// The usable GPU's name, or what is missing.
fn gpu_status() -> std::result::Result<String, String> {
    #[cfg(feature = "gpu")]
    {
        crate::gpu::probe().map(|info| info.name)
    }
    #[cfg(not(feature = "gpu"))]
    {
        Err("this build has no GPU support (the `gpu` cargo feature is off)".to_string())
    }
}

/// Knobs shared by all engines.
#[derive(Debug, Clone)]
pub struct EngineOptions {
    /// Most memory the fast-v2 tables may take, in bytes.
    pub v2_memory_bytes: usize,
    /// Where to compute. `Gpu` and `Auto` use the GPU engine when a GPU is usable; a model the
    /// GPU engine cannot take (a path wider than a warp) runs on the CPU, with a log line.
    pub device: Device,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions { v2_memory_bytes: DEFAULT_V2_MEMORY_BYTES, device: Device::Cpu }
    }
}

/// SHAP values: per row and output group, one value per feature then the bias.
#[derive(Debug, Clone, PartialEq)]
pub struct Attributions {
    /// Rows explained.
    pub rows: usize,
    /// Output groups (G).
    pub groups: usize,
    /// Model features (F).
    pub features: usize,
    /// `rows × G × (F + 1)` values, row-major; the bias is last in each group.
    pub values: Vec<f64>,
}

impl Attributions {
    /// Values of one row and group: F attributions then the bias.
    pub fn row(&self, row: usize, group: usize) -> &[f64] {
        let w = self.features + 1;
        let start = (row * self.groups + group) * w;
        &self.values[start..start + w]
    }
}

/// SHAP interaction values in XGBoost's `pred_interactions` layout.
#[derive(Debug, Clone, PartialEq)]
pub struct Interactions {
    /// Rows explained.
    pub rows: usize,
    /// Output groups (G).
    pub groups: usize,
    /// Model features (F).
    pub features: usize,
    /// `rows × G × (F+1) × (F+1)`; entry `[i][j]` is the interaction of features i and j, the
    /// diagonal the main effect, and the last row/column the bias (only `[F][F]` is non-zero).
    pub values: Vec<f64>,
}

/// Margin (raw score) predictions, `rows × G`.
#[derive(Debug, Clone, PartialEq)]
pub struct Predictions {
    /// Rows predicted.
    pub rows: usize,
    /// Output groups (G).
    pub groups: usize,
    /// `rows × G` margins.
    pub values: Vec<f64>,
}

/// An engine bound to one model. Cheap to share across threads.
pub trait Explainer: Send + Sync {
    /// The algorithm name (`treeshap`, `fast-v1`, ...).
    fn name(&self) -> &'static str;

    /// The model being explained.
    fn model(&self) -> &Model;

    /// SHAP values of every row of `block`.
    fn shap(&self, block: &FeatureBlock) -> Result<Attributions>;

    /// SHAP interaction values of every row of `block`.
    fn interactions(&self, block: &FeatureBlock) -> Result<Interactions>;

    /// Margin predictions of every row of `block`.
    fn predict(&self, block: &FeatureBlock) -> Result<Predictions> {
        let model = self.model();
        check_block(model, block)?;
        let g = model.num_groups;
        check_output(block.rows(), g, "predictions")?;
        let values = par_rows(block, g, || (), |x, out, _| model.predict_row(x, out));
        Ok(Predictions { rows: block.rows(), groups: g, values })
    }
}

/// Builds the engine named by `algorithm` for `model`; `rows_hint` (expected rows per run, if
/// known) lets `auto` weigh table set-up against per-row savings.
pub fn build_explainer(
    model: Arc<Model>,
    algorithm: Algorithm,
    rows_hint: Option<usize>,
    options: &EngineOptions,
) -> Result<Arc<dyn Explainer>> {
    if let Some(gpu) = gpu_explainer(&model, algorithm, options)? {
        return Ok(gpu);
    }
    let prepared = Arc::new(PreparedModel::new(model)?);
    let algorithm = match algorithm {
        Algorithm::Auto => {
            let choice = choose_algorithm(&prepared, rows_hint, options);
            tracing::info!(algorithm = %choice.algorithm, reason = %choice.reason, "auto picked an engine");
            choice.algorithm
        }
        a => a,
    };
    Ok(match algorithm {
        Algorithm::TreeShap => Arc::new(treeshap::TreeShap::new(prepared)?),
        Algorithm::FastV1 => Arc::new(fast_v1::FastV1::new(prepared)?),
        Algorithm::FastV2 => Arc::new(fast_v2::FastV2::new(prepared, options.v2_memory_bytes)?),
        Algorithm::Quadrature => Arc::new(quadrature::Quadrature::new(prepared)?),
        Algorithm::Linear => Arc::new(linear::Linear::new(prepared)?),
        Algorithm::Auto => unreachable!("auto resolved above"),
    })
}

/// The GPU engine when `options.device` resolves to the GPU and the model fits it; `None` means
/// compute on the CPU. An explicit `gpu` that cannot be honoured is an error. With device `auto`,
/// naming a CPU algorithm keeps the work on the CPU.
fn gpu_explainer(model: &Arc<Model>, algorithm: Algorithm, options: &EngineOptions) -> Result<Option<Arc<dyn Explainer>>> {
    if options.device.for_algorithm(algorithm)? != Device::Gpu {
        return Ok(None);
    }
    #[cfg(feature = "gpu")]
    {
        match crate::gpu::GpuExplainer::new(model.clone()) {
            Ok(engine) => Ok(engine.map(|e| Arc::new(e) as Arc<dyn Explainer>)),
            Err(e) if options.device == Device::Auto => {
                tracing::warn!("GPU engine failed, computing on the CPU: {e}");
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
    #[cfg(not(feature = "gpu"))]
    {
        let _ = model;
        Ok(None)
    }
}

/// What `auto` would pick for `model` and `rows_hint` rows, and why.
pub fn auto_choice(model: Arc<Model>, rows_hint: Option<usize>, options: &EngineOptions) -> Result<AutoChoice> {
    let prepared = PreparedModel::new(model)?;
    Ok(choose_algorithm(&prepared, rows_hint, options))
}

/// Errors unless the block has one column per model feature.
pub(crate) fn check_block(model: &Model, block: &FeatureBlock) -> Result<()> {
    if block.cols() != model.num_features() {
        return Err(Error::Input(format!(
            "feature block has {} columns but the model has {} features",
            block.cols(),
            model.num_features()
        )));
    }
    Ok(())
}

/// One row's SHAP values: `tree_fn(tree_index, x, phi, scratch)` adds each tree's attributions
/// to `phi` (that tree's group, F + 1 wide), then the bias is filled in. Shared by every CPU engine.
#[inline]
pub(crate) fn shap_row_by_tree<S>(p: &PreparedModel, x: &[f64], out: &mut [f64], scratch: &mut S, tree_fn: &impl Fn(usize, &[f64], &mut [f64], &mut S)) {
    let width = p.model.num_features() + 1;
    for (t, tree) in p.model.trees.iter().enumerate() {
        tree_fn(t, x, &mut out[tree.group * width..(tree.group + 1) * width], scratch);
    }
    for (g, b) in p.bias.iter().enumerate() {
        out[g * width + width - 1] = *b;
    }
}

/// SHAP values of every row of `block`, in parallel tasks of `per_task` rows: `task_fn(scratch,
/// first, out)` writes the attributions of rows `first..` into `out` (`rows × G × (F+1)`,
/// row-major, zeroed; one chunk per task), leaving the bias slots, which are filled in after.
/// Shared by the CPU engines, which differ only in how a task computes its rows.
pub(crate) fn shap_by_task<S, I, F>(p: &PreparedModel, block: &FeatureBlock, per_task: usize, init: I, task_fn: F) -> Result<Attributions>
where
    I: Fn() -> S + Sync + Send,
    F: Fn(&mut S, usize, &mut [f64]) + Sync + Send,
{
    check_block(&p.model, block)?;
    let width = p.shap_width();
    let w = p.model.num_features() + 1;
    let rows = block.rows();
    check_output(rows, width, "SHAP values")?;
    let mut values = vec![0.0; rows * width];
    if width > 0 {
        values.par_chunks_mut(width * per_task.max(1)).enumerate().for_each_init(init, |scratch, (task, chunk)| {
            task_fn(scratch, task * per_task, chunk);
            for out in chunk.chunks_mut(width) {
                for (g, b) in p.bias.iter().enumerate() {
                    out[g * w + w - 1] = *b;
                }
            }
        });
    }
    Ok(Attributions { rows, groups: p.model.num_groups, features: p.model.num_features(), values })
}

/// Interaction values of every row of `block`, in parallel tasks of `per_task` rows:
/// `task_fn(scratch, first, out)` fills rows `first..` of `out` (`rows × G × (F+1)²`, zeroed;
/// one chunk per task). Checks the block and the output size first.
pub(crate) fn interactions_by_task<S, I, F>(p: &PreparedModel, block: &FeatureBlock, per_task: usize, init: I, task_fn: F) -> Result<Interactions>
where
    I: Fn() -> S + Sync + Send,
    F: Fn(&mut S, usize, &mut [f64]) + Sync + Send,
{
    check_block(&p.model, block)?;
    let (f, g) = (p.model.num_features(), p.model.num_groups);
    let width = g * (f + 1) * (f + 1);
    interactions::check_size(block.rows(), width)?;
    let mut values = vec![0.0; block.rows() * width];
    values.par_chunks_mut(width * per_task.max(1)).enumerate().for_each_init(init, |scratch, (task, chunk)| {
        task_fn(scratch, task * per_task, chunk);
    });
    Ok(Interactions { rows: block.rows(), groups: g, features: f, values })
}

/// SHAP values of every row of `block`, in parallel. Within each task the loop is tree-major:
/// one tree is applied to all the task's rows before the next, so the tree's nodes stay in
/// cache instead of the whole model streaming from memory for every row. Each row still
/// receives its trees in model order, so the result does not depend on the blocking.
pub(crate) fn shap_by_tree<S, I, F>(p: &PreparedModel, block: &FeatureBlock, init: I, tree_fn: F) -> Result<Attributions>
where
    I: Fn() -> S + Sync + Send,
    F: Fn(usize, &[f64], &mut [f64], &mut S) + Sync + Send,
{
    let (width, w) = (p.shap_width(), p.model.num_features() + 1);
    shap_by_task(p, block, rows_per_task(block.rows()), init, |scratch, first, chunk| {
        for (t, tree) in p.model.trees.iter().enumerate() {
            let g = tree.group;
            for (i, out) in chunk.chunks_mut(width).enumerate() {
                tree_fn(t, block.row(first + i), &mut out[g * w..(g + 1) * w], scratch);
            }
        }
    })
}

/// Runs `row_fn(x, out, scratch)` for every row, `width` outputs per row, in parallel blocks of
/// at most [`ROWS_PER_TASK`] rows on the current rayon pool. `out` arrives zeroed.
pub(crate) fn par_rows<S, I, F>(block: &FeatureBlock, width: usize, init: I, row_fn: F) -> Vec<f64>
where
    I: Fn() -> S + Sync + Send,
    F: Fn(&[f64], &mut [f64], &mut S) + Sync + Send,
{
    let rows = block.rows();
    let mut out = vec![0.0; rows * width];
    if width == 0 {
        return out;
    }
    let per_task = rows_per_task(rows);
    out.par_chunks_mut(width * per_task).enumerate().for_each_init(init, |scratch, (task, chunk)| {
        let first = task * per_task;
        for (i, row_out) in chunk.chunks_mut(width).enumerate() {
            row_fn(block.row(first + i), row_out, scratch);
        }
    });
    out
}
