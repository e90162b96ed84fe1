//! The loops every CPU engine shares: rows split into parallel tasks on the caller's rayon pool,
//! trees applied in model order within a task, the bias filled in; and the checks on blocks,
//! output sizes and depths that run before anything is allocated.

use rayon::prelude::*;

use super::block::FeatureBlock;
use super::options::Index;
use super::output::{Attributions, Interactions};
use super::prepared::PreparedModel;
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
    rows_per_task_up_to(rows, ROWS_PER_TASK)
}

/// [`rows_per_task`] with `most` rows a task in place of [`ROWS_PER_TASK`], for an engine that
/// sizes its tasks by its own scratch.
pub(crate) fn rows_per_task_up_to(rows: usize, most: usize) -> usize {
    rows.div_ceil(rayon::current_num_threads()).clamp(1, most.max(1))
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
    Err(Error::Unsupported(format!(
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
        return Err(Error::InvalidArgument(format!(
            "{rows} rows × {width} {what} per row is {} MiB, over the limit of {} MiB for one batch; explain fewer rows at a time",
            values.saturating_mul(8) >> 20,
            (MAX_OUTPUT_VALUES * 8) >> 20
        )));
    }
    Ok(())
}

/// Errors unless the block has one column per model feature.
pub(crate) fn check_block(model: &Model, block: &FeatureBlock) -> Result<()> {
    if block.cols() != model.num_features() {
        return Err(Error::InvalidArgument(format!(
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
pub(crate) fn shap_row_by_tree<S>(
    p: &PreparedModel,
    x: &[f64],
    out: &mut [f64],
    scratch: &mut S,
    tree_fn: &impl Fn(usize, &[f64], &mut [f64], &mut S),
) {
    let width = p.model.num_features() + 1;
    for (t, tree) in p.model.trees().iter().enumerate() {
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
    shap_by_task_from(&p.model, &p.bias, block, per_task, init, task_fn)
}

/// [`shap_by_task`] measured from `bias` (one value per group) instead of the path-dependent
/// expected value: the interventional engines' bias is the background's mean margin.
pub(crate) fn shap_by_task_from<S, I, F>(
    model: &Model,
    bias: &[f64],
    block: &FeatureBlock,
    per_task: usize,
    init: I,
    task_fn: F,
) -> Result<Attributions>
where
    I: Fn() -> S + Sync + Send,
    F: Fn(&mut S, usize, &mut [f64]) + Sync + Send,
{
    check_block(model, block)?;
    let w = model.num_features() + 1;
    let width = model.num_groups() * w;
    let rows = block.rows();
    check_output(rows, width, "SHAP values")?;
    let mut values = vec![0.0; rows * width];
    if width > 0 {
        values.par_chunks_mut(width * per_task.max(1)).enumerate().for_each_init(init, |scratch, (task, chunk)| {
            touch_by_writing(chunk);
            task_fn(scratch, task * per_task, chunk);
            for out in chunk.chunks_mut(width) {
                for (g, b) in bias.iter().enumerate() {
                    out[g * w + w - 1] = *b;
                }
            }
        });
    }
    Ok(Attributions { rows, groups: model.num_groups(), features: model.num_features(), values })
}

/// Writes zeros over a task's part of a freshly allocated, zeroed output before the engine adds
/// into it. A large zeroed allocation is mapped on first touch; an engine's first touch is a
/// read (`+=`), which maps the shared zero page, and its write then copies the page and flushes
/// the old mapping from every core running the process (an inter-processor interrupt per page).
/// A write first takes one plain fault instead: on interaction matrices (128 KiB a row at 127
/// features) the copies and flushes were a quarter of a two-thread run.
#[inline]
fn touch_by_writing(chunk: &mut [f64]) {
    chunk.fill(0.0);
}

/// Asks Linux to back a large output with transparent huge pages where the system leaves that
/// to the program (`/sys/kernel/mm/transparent_hugepage/enabled` = `madvise`, the common
/// default): interaction matrices run to gigabytes, and mapping them 4 KiB at a time costs a
/// fault per page. A hint only: nothing changes where the kernel declines it.
fn advise_huge_pages(values: &[f64]) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let start = values.as_ptr() as usize;
        let (first, end) = (start.next_multiple_of(HUGE), (start + size_of_val(values)) & !(HUGE - 1));
        if end > first {
            // SAFETY: the range is whole pages inside a live allocation; MADV_HUGEPAGE changes
            // how the kernel backs them, never their contents, and its failure is harmless.
            unsafe { libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE) };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = values;
}

/// Interaction values of every row of `block`, in parallel tasks of `per_task` rows:
/// `task_fn(scratch, first, out)` fills rows `first..` of `out` (`rows × G × (F+1)²`, zeroed;
/// one chunk per task). Checks the block and the output size first.
pub(crate) fn interactions_by_task<S, I, F>(model: &Model, block: &FeatureBlock, per_task: usize, init: I, task_fn: F) -> Result<Interactions>
where
    I: Fn() -> S + Sync + Send,
    F: Fn(&mut S, usize, &mut [f64]) + Sync + Send,
{
    check_block(model, block)?;
    let (f, g) = (model.num_features(), model.num_groups());
    let width = g * (f + 1) * (f + 1);
    check_output(block.rows(), width, "interaction values")?;
    let mut values = vec![0.0; block.rows() * width];
    advise_huge_pages(&values);
    values.par_chunks_mut(width * per_task.max(1)).enumerate().for_each_init(init, |scratch, (task, chunk)| {
        touch_by_writing(chunk);
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
        for (t, tree) in p.model.trees().iter().enumerate() {
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
        touch_by_writing(chunk);
        let first = task * per_task;
        for (i, row_out) in chunk.chunks_mut(width).enumerate() {
            row_fn(block.row(first + i), row_out, scratch);
        }
    });
    out
}

/// Fills the diagonal (`φ_i − Σ_{k≠i} φ_ik`) and the bias entry of one row's matrices, given its
/// off-diagonal entries in `out` and its SHAP values `shap` (G × (F+1)).
pub fn finish_interaction_row(out: &mut [f64], shap: &[f64], f: usize, groups: usize) {
    let w = f + 1;
    for g in 0..groups {
        let base = g * w * w;
        for i in 0..f {
            let row = base + i * w;
            let off_diagonal: f64 = (0..f).filter(|&k| k != i).map(|k| out[row + k]).sum();
            out[row + i] = shap[g * w + i] - off_diagonal;
        }
        out[base + f * w + f] = shap[g * w + f];
    }
}

/// Banzhaf values do not add up to the prediction ([`Index::Banzhaf`]): each
/// row's bias becomes its margin minus the sum of its values (per group), so that a row still
/// sums to the prediction. Shapley values' bias stays (they add up by themselves).
pub(crate) fn bias_is_the_rest(index: Index, model: &Model, block: &FeatureBlock, shap: &mut Attributions) {
    if index == Index::Shapley {
        return;
    }
    let w = model.num_features() + 1;
    rest_into(model, block, &mut shap.values, w, |g| (g * w..g * w + w - 1, g * w + w - 1));
}

/// [`bias_is_the_rest`] for interaction matrices: the bias entry (the last of the diagonal)
/// becomes the margin minus the sum of the rest of the matrix, which is the sum of the values.
pub(crate) fn interaction_bias_is_the_rest(index: Index, model: &Model, block: &FeatureBlock, interactions: &mut Interactions) {
    if index == Index::Shapley {
        return;
    }
    let w = model.num_features() + 1;
    // A group's matrix but its last row (the bias's row; its last column is zero but the bias).
    rest_into(model, block, &mut interactions.values, w * w, |g| (g * w * w..(g + 1) * w * w - w, (g + 1) * w * w - 1));
}

/// Rows of `out` hold `per_group` values a group; `at(g)` gives group `g`'s values and its bias
/// entry there, which becomes the row's margin minus their sum.
fn rest_into(model: &Model, block: &FeatureBlock, out: &mut [f64], per_group: usize, at: impl Fn(usize) -> (std::ops::Range<usize>, usize) + Sync) {
    let groups = model.num_groups();
    let width = groups * per_group;
    if width == 0 {
        return;
    }
    out.par_chunks_mut(width).enumerate().for_each_init(
        || vec![0.0; groups],
        |margin, (r, row)| {
            model.predict_row(block.row(r), margin);
            for (g, m) in margin.iter().enumerate() {
                let (values, bias) = at(g);
                row[bias] = m - row[values].iter().sum::<f64>();
            }
        },
    );
}
