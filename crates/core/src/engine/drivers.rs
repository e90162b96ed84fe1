//! The loops every CPU engine shares: rows split into parallel tasks on the caller's rayon pool,
//! trees applied in model order within a task, the bias filled in; and the checks on blocks,
//! output sizes and depths that run before anything is allocated.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

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
    rows.div_ceil(planned_threads()).clamp(1, most.max(1))
}

thread_local! {
    /// Whether this thread is running a call [in place](in_place).
    static IN_PLACE: Cell<bool> = const { Cell::new(false) };
    /// The pool whose threads help this thread's call in place with its tasks ([`joined`]);
    /// none for a call in place alone.
    static HELPERS: RefCell<Option<Arc<rayon::ThreadPool>>> = const { RefCell::new(None) };
}

/// Runs `call` with this thread's lane set to `in_place` and `helpers`, and restores the lane
/// it had however `call` ends (a panic caught further up leaves the thread as it was).
fn on_lane<T>(in_place: bool, helpers: Option<Arc<rayon::ThreadPool>>, call: impl FnOnce() -> T) -> T {
    struct Restore(bool, Option<Arc<rayon::ThreadPool>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            IN_PLACE.set(self.0);
            HELPERS.set(self.1.take());
        }
    }
    let _restore = Restore(IN_PLACE.replace(in_place), HELPERS.replace(helpers));
    call()
}

/// Runs `call` on this thread as a pool of one thread: the engines plan its work for one thread
/// ([`planned_threads`]) and run their loops over tasks ([`for_each_task`], [`map_each_job`])
/// one after another here, instead of handing the call to a compute pool's thread and waiting
/// for it.
///
/// Why: a hand-off to a pool costs the caller a sleep and a wake-up, which on the virtual
/// machines measured cost more than a small call's work (one row of a model of 100 trees of
/// depth 6, 4,947 splits: 147-153 µs median through a pool of one thread, 62-68 µs in place;
/// see `Explainer`'s choice of where a call runs). Nothing else changes: a row's values have the
/// same bits whatever the pool and its threads (tested for every engine).
pub(crate) fn in_place<T>(call: impl FnOnce() -> T) -> T {
    on_lane(true, None, call)
}

/// Runs `call` [in place](in_place) on this thread, planned for the threads of `helpers` and
/// this one: each loop over tasks hands out its tasks one at a time to this thread and to a job
/// on each of the helpers' threads, whichever comes for the next first.
///
/// Why: a call handed to a pool leaves the caller asleep until the pool is done, and on the
/// virtual machines measured the hand-off and the wake-ups took much of what a second thread
/// saved (one row of a model of 100 trees of depth 8: 297-303 µs on one thread in place,
/// 213-388 µs on two through the pool). Here the caller starts on the first task at once, the
/// helpers take tasks as they wake, and the caller waits only for tasks already taken. The
/// helpers are a pool of one thread fewer than the call is planned for: with a pool of as many,
/// a thread of it that woke and found nothing to do spun beside the caller and the helper on
/// cores they needed (a call's p99 went up by half). The tasks, and the order their results are
/// added in, are those of a pool of the planned threads, so the values have its bits.
pub(crate) fn joined<T>(helpers: &Arc<rayon::ThreadPool>, call: impl FnOnce() -> T) -> T {
    on_lane(true, Some(helpers.clone()), call)
}

/// The pool whose threads help this thread's call, if it runs [joined].
fn helpers() -> Option<Arc<rayon::ThreadPool>> {
    if IN_PLACE.get() {
        HELPERS.with_borrow(Clone::clone)
    } else {
        None
    }
}

/// Threads the engines plan a call's work for: one for a call [in place](in_place), the
/// helpers' and the caller's for one [joined], else the current rayon pool's.
pub(crate) fn planned_threads() -> usize {
    if IN_PLACE.get() {
        1 + HELPERS.with_borrow(|pool| pool.as_ref().map_or(0, |pool| pool.current_num_threads()))
    } else {
        rayon::current_num_threads()
    }
}

/// Runs `job(scratch, j)` once for every `j` in `0..jobs`: on this thread and on a job spawned
/// on each of `helpers`' threads, each taking the next `j` not yet taken (this thread its first
/// at once). A scratch from `init` per thread that takes a job. Each `job` runs [in
/// place](in_place) alone: a loop inside it stays on its thread.
fn share_jobs<S>(helpers: &rayon::ThreadPool, jobs: usize, init: impl Fn() -> S + Sync, job: impl Fn(&mut S, usize) + Sync) {
    let next = AtomicUsize::new(0);
    let work = || {
        in_place(|| {
            let mut scratch = None;
            loop {
                // Relaxed: the count hands each job out once; the results reach the caller
                // through their locks and the scope's end.
                let j = next.fetch_add(1, Ordering::Relaxed);
                if j >= jobs {
                    break;
                }
                job(scratch.get_or_insert_with(&init), j);
            }
        })
    };
    let spawned = helpers.current_num_threads().min(jobs.saturating_sub(1));
    helpers.in_place_scope(|scope| {
        for _ in 0..spawned {
            scope.spawn(|_| work());
        }
        work();
    });
}

/// Locks `m`, whatever a panic elsewhere left in it (a job's slot is written whole or not at
/// all).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The engines' loop over a call's tasks: `f(scratch, (task, chunk))` for each `chunk_len`
/// values of `values` (the last may be shorter), a scratch from `init` per thread; in parallel
/// on the current rayon pool, in order on this thread for a call [in place](in_place) (a
/// parallel loop there would run on rayon's global pool instead), or shared with the helpers'
/// threads for a call [joined].
pub(crate) fn for_each_task<S, I, F>(values: &mut [f64], chunk_len: usize, init: I, f: F)
where
    I: Fn() -> S + Sync + Send,
    F: Fn(&mut S, (usize, &mut [f64])) + Sync + Send,
{
    if !IN_PLACE.get() {
        values.par_chunks_mut(chunk_len).enumerate().for_each_init(init, f);
    } else if let Some(helpers) = helpers().filter(|_| values.len() > chunk_len) {
        let tasks: Vec<Mutex<Option<&mut [f64]>>> = values.chunks_mut(chunk_len).map(|chunk| Mutex::new(Some(chunk))).collect();
        share_jobs(&helpers, tasks.len(), init, |scratch, task| {
            if let Some(chunk) = lock(&tasks[task]).take() {
                f(scratch, (task, chunk));
            }
        });
    } else {
        let mut scratch = init();
        values.chunks_mut(chunk_len).enumerate().for_each(|task| f(&mut scratch, task));
    }
}

/// `f(scratch, j)` for every `j` in `0..jobs`, in order of `j`, each `j` a task of its own (so
/// that an idle thread can take the next one), run as [`for_each_task`] runs its tasks.
pub(crate) fn map_each_job<S, R, I, F>(jobs: usize, init: I, f: F) -> Vec<R>
where
    R: Send,
    I: Fn() -> S + Sync + Send,
    F: Fn(&mut S, usize) -> R + Sync + Send,
{
    if !IN_PLACE.get() {
        (0..jobs).into_par_iter().with_max_len(1).map_init(init, f).collect()
    } else if let Some(helpers) = helpers().filter(|_| jobs > 1) {
        let results: Vec<Mutex<Option<R>>> = (0..jobs).map(|_| Mutex::new(None)).collect();
        share_jobs(&helpers, jobs, init, |scratch, j| *lock(&results[j]) = Some(f(scratch, j)));
        // `share_jobs` ran every job (a panic in one would have ended this call there).
        results.into_iter().map(|r| r.into_inner().unwrap_or_else(PoisonError::into_inner).expect("every job ran")).collect()
    } else {
        let mut scratch = init();
        (0..jobs).map(|j| f(&mut scratch, j)).collect()
    }
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

/// Errors unless the block has one column per model feature (and per column derived from
/// several: [`Model::num_columns`]).
pub(crate) fn check_block(model: &Model, block: &FeatureBlock) -> Result<()> {
    if block.cols() != model.num_columns() {
        return Err(Error::InvalidArgument(format!(
            "feature block has {} columns but the model has {} features{}",
            block.cols(),
            model.num_features(),
            if model.num_columns() == model.num_features() {
                String::new()
            } else {
                format!(" and {} columns combining them (make the block with Model::feature_block)", model.num_columns() - model.num_features())
            }
        )));
    }
    Ok(())
}

/// Attributions computed for the model's players (G × (P+1) a row) as the model's features'
/// (G × (F+1)): a player shared by several features split equally among them
/// ([`Combinations::fold_values`](crate::model::Combinations::fold_values)). The same values
/// where the players are the features.
pub(crate) fn fold_players(model: &Model, shap: Attributions) -> Attributions {
    match model.combinations() {
        None => shap,
        Some(c) => Attributions { features: model.num_features(), values: c.fold_values(&shap.values, shap.groups), ..shap },
    }
}

/// [`fold_players`] for interaction values.
pub(crate) fn fold_player_interactions(model: &Model, interactions: Interactions) -> Interactions {
    match model.combinations() {
        None => interactions,
        Some(c) => {
            Interactions { features: model.num_features(), values: c.fold_interactions(&interactions.values, interactions.groups), ..interactions }
        }
    }
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
    let width = p.model.num_players() + 1;
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
    let w = model.num_players() + 1;
    let width = model.num_groups() * w;
    let rows = block.rows();
    check_output(rows, width, "SHAP values")?;
    let mut values = vec![0.0; rows * width];
    if width > 0 {
        for_each_task(&mut values, width * per_task.max(1), init, |scratch, (task, chunk)| {
            touch_by_writing(chunk);
            task_fn(scratch, task * per_task, chunk);
            for out in chunk.chunks_mut(width) {
                for (g, b) in bias.iter().enumerate() {
                    out[g * w + w - 1] = *b;
                }
            }
        });
    }
    Ok(fold_players(model, Attributions { rows, groups: model.num_groups(), features: model.num_players(), values }))
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

/// How an engine first touches its task's part of a fresh interaction output: whether the driver
/// writes zeros over the part first ([`touch_by_writing`]). Either way the values are the same;
/// only the cost of mapping the pages differs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FirstTouch {
    /// The engine adds into its part (`+=`), reading a page before it writes it: the driver
    /// writes the part first.
    Adds,
    /// The engine stores into every page of its part before it reads any: the kernel's zeroed
    /// pages are all it needs. Writing zeros first costs a pass over the part (2 % of a call's
    /// samples: linear's Banzhaf interactions on WOODELF's task, 127 features, 4,000 rows) and,
    /// as a task's part is megabytes, leaves it beyond the core's caches by the time the
    /// engine stores into it.
    Stores,
}

/// Interaction values of every row of `block`, in parallel tasks of `per_task` rows:
/// `task_fn(scratch, first, out)` fills rows `first..` of `out` (`rows × G × (F+1)²`, zeroed;
/// one chunk per task), touching it first as `touch` says. Checks the block and the output size
/// first.
pub(crate) fn interactions_by_task<S, I, F>(
    model: &Model,
    block: &FeatureBlock,
    per_task: usize,
    touch: FirstTouch,
    init: I,
    task_fn: F,
) -> Result<Interactions>
where
    I: Fn() -> S + Sync + Send,
    F: Fn(&mut S, usize, &mut [f64]) + Sync + Send,
{
    check_block(model, block)?;
    let (f, g) = (model.num_players(), model.num_groups());
    let width = g * (f + 1) * (f + 1);
    check_output(block.rows(), width, "interaction values")?;
    let mut values = vec![0.0; block.rows() * width];
    advise_huge_pages(&values);
    for_each_task(&mut values, width * per_task.max(1), init, |scratch, (task, chunk)| {
        if touch == FirstTouch::Adds {
            touch_by_writing(chunk);
        }
        task_fn(scratch, task * per_task, chunk);
    });
    Ok(fold_player_interactions(model, Interactions { rows: block.rows(), groups: g, features: f, values }))
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
    let (width, w) = (p.shap_width(), p.model.num_players() + 1);
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
    for_each_task(&mut out, width * per_task, init, |scratch, (task, chunk)| {
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
        // Each matrix row's off-diagonal sum in column order, as a left fold (its order sets the
        // bits), for SUMS_AT_ONCE rows side by side: one sum is a chain of dependent adds, as
        // slow as the adder's latency, and several chains fill its pipeline (the sums were a
        // tenth of an interaction call at 127 features, one row's sum after the other).
        let whole = f - f % SUMS_AT_ONCE;
        for first in (0..whole).step_by(SUMS_AT_ONCE) {
            let block = &out[base + first * w..][..SUMS_AT_ONCE * w];
            let mut sums = [EMPTY_SUM; SUMS_AT_ONCE];
            // Columns before the block's diagonal, across it, and after it: only across it does
            // a row skip an entry, by adding −0.0 there, which changes no sum (x + −0.0 = x for
            // every x, zeros' signs included), so no column needs a branch.
            let add = |sums: &mut [f64; SUMS_AT_ONCE], columns: std::ops::Range<usize>| {
                for k in columns {
                    for (t, sum) in sums.iter_mut().enumerate() {
                        *sum += block[t * w + k];
                    }
                }
            };
            add(&mut sums, 0..first);
            for k in first..first + SUMS_AT_ONCE {
                for (t, sum) in sums.iter_mut().enumerate() {
                    *sum += if k == first + t { -0.0 } else { block[t * w + k] };
                }
            }
            add(&mut sums, first + SUMS_AT_ONCE..f);
            for (t, sum) in sums.iter().enumerate() {
                out[base + (first + t) * (w + 1)] = shap[g * w + first + t] - sum;
            }
        }
        // The last rows (fewer than SUMS_AT_ONCE) one after the other.
        for i in whole..f {
            let row = base + i * w;
            let off_diagonal: f64 = (0..f).filter(|&k| k != i).map(|k| out[row + k]).sum();
            out[row + i] = shap[g * w + i] - off_diagonal;
        }
        out[base + f * w + f] = shap[g * w + f];
    }
}

/// Sums computed side by side where each is a left fold of its own (see
/// [`finish_interaction_row`]): enough to cover an add's latency several times over.
pub(crate) const SUMS_AT_ONCE: usize = 8;

/// What `Iterator::sum` of `f64`s starts from (−0.0, so that a sum of zeros keeps its sign): a
/// fold written out starts there too and gives the bits of `sum`.
const EMPTY_SUM: f64 = -0.0;

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
/// (Engines that fill matrices by tasks call [`interaction_bias_of_rows`] on each task's rows
/// instead, while they are in cache.)
pub(crate) fn interaction_bias_is_the_rest(index: Index, model: &Model, block: &FeatureBlock, interactions: &mut Interactions) {
    if index == Index::Shapley {
        return;
    }
    let w = model.num_features() + 1;
    rest_into(model, block, &mut interactions.values, w * w, interaction_values_and_bias(w));
}

/// [`interaction_bias_is_the_rest`] for rows `first..` of `block`, whose whole matrices are
/// `rows`, on this thread: an engine calls it on rows it has just finished, while their matrices
/// are still in its caches. Done after the whole call instead, the pass read every matrix back
/// from memory (128 KiB a row at 127 features). The same bits either way: each row's sum is its
/// own left fold.
pub(crate) fn interaction_bias_of_rows(index: Index, model: &Model, block: &FeatureBlock, first: usize, rows: &mut [f64]) {
    if index == Index::Shapley || model.num_groups() == 0 {
        return;
    }
    let w = model.num_features() + 1;
    let at = interaction_values_and_bias(w);
    let mut margins = vec![0.0; model.num_groups() * SUMS_AT_ONCE];
    for (pass, rows) in rows.chunks_mut(model.num_groups() * w * w * SUMS_AT_ONCE).enumerate() {
        rest_of_rows(model, block, first + pass * SUMS_AT_ONCE, rows, w * w, &at, &mut margins);
    }
}

/// Where group `g`'s values and bias entry are in a row of `w × w` interaction matrices: the
/// group's matrix but its last row (the bias's row; its last column is zero but the bias), and
/// the bias.
fn interaction_values_and_bias(w: usize) -> impl Fn(usize) -> (std::ops::Range<usize>, usize) + Sync {
    move |g| (g * w * w..(g + 1) * w * w - w, (g + 1) * w * w - 1)
}

/// Rows of `out` hold `per_group` values a group; `at(g)` gives group `g`'s values and its bias
/// entry there, which becomes the row's margin minus their sum.
fn rest_into(model: &Model, block: &FeatureBlock, out: &mut [f64], per_group: usize, at: impl Fn(usize) -> (std::ops::Range<usize>, usize) + Sync) {
    let width = model.num_groups() * per_group;
    if width == 0 {
        return;
    }
    for_each_task(
        out,
        width * SUMS_AT_ONCE,
        || vec![0.0; model.num_groups() * SUMS_AT_ONCE],
        |margins, (c, rows)| rest_of_rows(model, block, c * SUMS_AT_ONCE, rows, per_group, &at, margins),
    );
}

/// [`rest_into`] for at most [`SUMS_AT_ONCE`] rows, `first..` of `block`, held in `rows`; their
/// sums side by side, each in its own order (see [`finish_interaction_row`]). `margins` holds
/// `SUMS_AT_ONCE` rows' margins.
fn rest_of_rows(
    model: &Model,
    block: &FeatureBlock,
    first: usize,
    rows: &mut [f64],
    per_group: usize,
    at: &impl Fn(usize) -> (std::ops::Range<usize>, usize),
    margins: &mut [f64],
) {
    let groups = model.num_groups();
    let width = groups * per_group;
    let n = rows.len() / width;
    debug_assert!(n <= SUMS_AT_ONCE && rows.len() == n * width);
    if n == 0 {
        return;
    }
    for (t, margin) in margins.chunks_exact_mut(groups).take(n).enumerate() {
        model.predict_row(block.row(first + t), margin);
    }
    for g in 0..groups {
        let (values, bias) = at(g);
        let mut sums = [EMPTY_SUM; SUMS_AT_ONCE];
        if n == SUMS_AT_ONCE {
            // A whole pass's sums in registers (the loop over them unrolled).
            for value in values {
                for (t, sum) in sums.iter_mut().enumerate() {
                    *sum += rows[t * width + value];
                }
            }
        } else {
            for value in values {
                for (t, sum) in sums.iter_mut().enumerate().take(n) {
                    *sum += rows[t * width + value];
                }
            }
        }
        for (t, sum) in sums.iter().enumerate().take(n) {
            rows[t * width + bias] = margins[t * groups + g] - sum;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_in_place_runs_every_task_on_the_calling_thread_and_plans_for_one() {
        let caller = std::thread::current().id();
        let pool = rayon::ThreadPoolBuilder::new().num_threads(2).build().unwrap();
        // Each task writes its index, and whether it ran on the caller's thread.
        let tasks = |values: &mut Vec<f64>| {
            for_each_task(
                values,
                3,
                || (),
                |_, (task, chunk)| {
                    let here = std::thread::current().id() == caller;
                    chunk.fill(if here { task as f64 } else { -1.0 });
                },
            )
        };
        let mut values = vec![0.0; 3 * 40];
        pool.install(|| {
            assert_eq!(planned_threads(), 2);
            tasks(&mut values);
        });
        assert!(values.iter().all(|&v| v == -1.0), "on the pool, not the caller's thread");
        let planned = in_place(|| {
            tasks(&mut values);
            planned_threads()
        });
        assert_eq!(planned, 1);
        assert!(values.chunks(3).enumerate().all(|(t, c)| c.iter().all(|&v| v == t as f64)), "in place: every task here, in order");
        // Inside a pool too, and the flag is restored after a panic.
        pool.install(|| {
            assert!(std::panic::catch_unwind(|| in_place(|| panic!("a call that fails"))).is_err());
            assert_eq!(planned_threads(), 2);
        });
        assert!(!IN_PLACE.get());
    }

    #[test]
    fn a_joined_call_runs_each_task_once_here_or_on_a_helpers_thread_in_order() {
        use std::sync::atomic::AtomicBool;
        use std::sync::Barrier;
        use std::time::{Duration, Instant};

        let caller = std::thread::current().id();
        let here = || std::thread::current().id() == caller;
        // The helpers: one thread, for a call planned for two.
        let helpers = Arc::new(rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap());
        // Each task writes its index where it ran on the caller's thread, -1 - index elsewhere;
        // a task runs alone (a loop inside it plans for one thread).
        let write = |task: usize, chunk: &mut [f64]| {
            assert_eq!(planned_threads(), 1);
            chunk.fill(if here() { task as f64 } else { -1.0 - task as f64 });
        };
        let each_once = |values: &[f64]| values.chunks(3).enumerate().all(|(t, c)| c.iter().all(|&v| v == t as f64 || v == -1.0 - t as f64));

        // The helper's thread busy: the caller runs every task at once, in order, and the helper's
        // job that runs after them finds none left.
        let (started, release) = (Arc::new(Barrier::new(2)), Arc::new(Barrier::new(2)));
        {
            let (started, release) = (started.clone(), release.clone());
            helpers.spawn(move || {
                started.wait();
                release.wait();
            });
        }
        started.wait();
        let mut values = vec![0.0; 3 * 40];
        let planned = joined(&helpers, || {
            for_each_task(
                &mut values,
                3,
                || (),
                |_, (task, chunk)| {
                    write(task, chunk);
                    if task == 39 {
                        release.wait();
                    }
                },
            );
            planned_threads()
        });
        assert_eq!(planned, 2, "planned for the helper's thread and the caller's");
        assert!(values.chunks(3).enumerate().all(|(t, c)| c.iter().all(|&v| v == t as f64)), "all here, each once");

        // The helper's thread free: it takes tasks beside the caller (the caller's first task
        // waits until it has), and the results come back in the jobs' order.
        let helped = AtomicBool::new(false);
        let (values, jobs) = joined(&helpers, || {
            let mut values = vec![0.0; 3 * 40];
            for_each_task(
                &mut values,
                3,
                || (),
                |_, (task, chunk)| {
                    write(task, chunk);
                    if !here() {
                        helped.store(true, Ordering::Relaxed);
                    }
                    let deadline = Instant::now() + Duration::from_secs(10);
                    while here() && !helped.load(Ordering::Relaxed) && Instant::now() < deadline {
                        std::thread::sleep(Duration::from_micros(100));
                    }
                },
            );
            (values, map_each_job(40, || (), |_, j| (j, planned_threads())))
        });
        assert!(each_once(&values));
        assert!(values.iter().any(|&v| v < 0.0), "the helper took a task");
        assert_eq!(jobs, (0..40).map(|j| (j, 1)).collect::<Vec<_>>());

        // The lane is restored after a call, also one that panics.
        assert!(std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| joined(&helpers, || panic!("a call that fails")))).is_err());
        assert!(!IN_PLACE.get() && super::helpers().is_none());
    }

    /// A value of every kind a sum can meet: ±0, a wide range of magnitudes, both signs (so the
    /// order of adding them changes the rounding).
    fn values(n: usize, seed: u64) -> Vec<f64> {
        let mut x = seed;
        (0..n)
            .map(|i| {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                match i % 7 {
                    0 => 0.0,
                    1 => -0.0,
                    _ => ((x >> 11) as f64 / (1u64 << 53) as f64 - 0.5) * 10f64.powi((x % 13) as i32 - 6),
                }
            })
            .collect()
    }

    #[test]
    fn the_written_out_folds_start_where_sum_does() {
        assert_eq!(std::iter::empty::<f64>().sum::<f64>().to_bits(), EMPTY_SUM.to_bits());
        assert_eq!([-0.0f64, -0.0].iter().sum::<f64>().to_bits(), (EMPTY_SUM + -0.0 + -0.0).to_bits());
    }

    /// The side-by-side sums give each diagonal entry the bits of its own sum in column order
    /// (what the function computed one row after the other), for every width around the number
    /// of sums at once and two groups.
    #[test]
    fn a_diagonal_has_the_bits_of_its_row_summed_in_order() {
        // Random values, and all −0.0 (where a sum that skipped its diagonal by adding +0.0,
        // or started from it, would turn a diagonal's sign).
        let cases = [1, 2, 7, 8, 9, 17, 127].into_iter().map(|f| (f, false)).chain([(9, true), (16, true)]);
        for (f, negative_zeros) in cases {
            let (w, groups) = (f + 1, 2);
            let mut out = if negative_zeros { vec![-0.0; groups * w * w] } else { values(groups * w * w, f as u64) };
            let shap = if negative_zeros { vec![-0.0; groups * w] } else { values(groups * w, 7 + f as u64) };
            let mut expected = out.clone();
            for g in 0..groups {
                let base = g * w * w;
                for i in 0..f {
                    let off_diagonal: f64 = (0..f).filter(|&k| k != i).map(|k| expected[base + i * w + k]).sum();
                    expected[base + i * w + i] = shap[g * w + i] - off_diagonal;
                }
                expected[base + f * w + f] = shap[g * w + f];
            }
            finish_interaction_row(&mut out, &shap, f, groups);
            let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&out), bits(&expected), "{f} features, all -0.0: {negative_zeros}");
        }
    }

    /// A Banzhaf interaction matrix's bias entry is the row's margin less the sum of the rest of
    /// its matrix in order, with the bits of that sum however many rows share a pass (11 rows:
    /// one pass of SUMS_AT_ONCE and the rest).
    #[test]
    fn a_banzhaf_bias_has_the_bits_of_the_margin_less_the_matrix_summed_in_order() {
        use crate::test_support::{full_tree, numeric_model, uniform};
        let (f, rows) = (9, 11);
        let mut seed = 3;
        let trees = (0..4).map(|_| full_tree(&mut seed, 3, |_, u| (u * f as f64) as u32)).collect();
        let model = numeric_model(f, trees, 0.25);
        let block = model.feature_block_from_values(rows, (0..rows * f).map(|_| uniform(&mut seed)).collect()).unwrap();
        let w = f + 1;
        let mut interactions = Interactions { rows, groups: 1, features: f, values: values(rows * w * w, 5) };
        let mut expected = interactions.values.clone();
        for (r, matrix) in expected.chunks_mut(w * w).enumerate() {
            let mut margin = [0.0];
            model.predict_row(block.row(r), &mut margin);
            matrix[w * w - 1] = margin[0] - matrix[..w * w - w].iter().sum::<f64>();
        }
        interaction_bias_is_the_rest(Index::Banzhaf, &model, &block, &mut interactions);
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&interactions.values), bits(&expected));
    }

    /// The bias set on a task's rows as they are finished ([`interaction_bias_of_rows`]) has the
    /// bits of the pass over the whole output, wherever the tasks start and however many rows
    /// they hold (a pass of SUMS_AT_ONCE rows, fewer, several), for two groups; Shapley matrices
    /// are left as they are.
    #[test]
    fn a_task_s_banzhaf_biases_have_the_bits_of_the_pass_over_the_whole_output() {
        use crate::test_support::{full_tree, numeric_parts, uniform};
        let (f, rows, groups) = (9, 29, 2);
        let mut seed = 5;
        let mut trees: Vec<crate::model::Tree> = (0..6).map(|_| full_tree(&mut seed, 3, |_, u| (u * f as f64) as u32)).collect();
        for (t, tree) in trees.iter_mut().enumerate() {
            tree.group = t % groups;
        }
        let parts = crate::model::ModelParts { num_groups: groups, base_margin: vec![0.25, -0.5], ..numeric_parts(f, trees, 0.0) };
        let model = Model::new(parts, "a two-group test model").unwrap();
        let block = model.feature_block_from_values(rows, (0..rows * f).map(|_| uniform(&mut seed)).collect()).unwrap();
        let width = groups * (f + 1) * (f + 1);
        let start = values(rows * width, 9);
        let mut whole = Interactions { rows, groups, features: f, values: start.clone() };
        interaction_bias_is_the_rest(Index::Banzhaf, &model, &block, &mut whole);
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        for task_rows in [1, 3, SUMS_AT_ONCE, SUMS_AT_ONCE + 1, 2 * SUMS_AT_ONCE + 5, rows] {
            let mut by_tasks = start.clone();
            for (task, chunk) in by_tasks.chunks_mut(task_rows * width).enumerate() {
                interaction_bias_of_rows(Index::Banzhaf, &model, &block, task * task_rows, chunk);
            }
            assert_eq!(bits(&by_tasks), bits(&whole.values), "tasks of {task_rows} rows");
        }
        assert_ne!(bits(&whole.values), bits(&start), "the biases were set");
        let mut shapley = start.clone();
        interaction_bias_of_rows(Index::Shapley, &model, &block, 0, &mut shapley);
        assert_eq!(bits(&shapley), bits(&start));
    }
}
