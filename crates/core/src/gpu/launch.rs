//! How a batch reaches the kernels: the launch plan (rows per block, shared memory, grid, and
//! the cut of a large batch into launches), and the host steps around the launches (zeroed
//! outputs, the bias, the interaction diagonal). Pure functions over a [`PathProgram`] and a
//! launcher, so the CUDA engine and the CPU emulation of the kernels (`tests/gpu_emulation.rs`)
//! run exactly the same arrays and plans.

use super::warps::PathProgram;
use crate::engine::drivers::check_output;
use crate::engine::{finish_interaction_row, Attributions, FeatureBlock, Interactions};
use crate::error::{Error, Result};

/// Threads per block: 8 warps.
pub const BLOCK_THREADS: u32 = 256;
/// Most rows one block takes.
pub const MAX_ROWS_PER_BLOCK: usize = 32;
/// Shared memory a block may use without opting in to more (every CUDA device has 48 KiB).
pub const SHARED_BYTES: usize = 48 * 1024;
/// Most output values one launch writes (1 GiB of f64): larger batches go in several launches.
pub const MAX_LAUNCH_VALUES: usize = 1 << 27;
/// Most blocks along the grid's y dimension (a CUDA limit).
pub const MAX_GRID_Y: usize = 65_535;

/// What a batch's launches compute: every kernel of the kind adds into one output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// SHAP values, `[rows][G][F+1]` (the bias column left zero for the host).
    Shap,
    /// Off-diagonal interaction pairs, `[rows][G][F+1][F+1]` (the diagonal left to the host).
    InteractionPairs,
}

impl Output {
    /// Output values per row for `features` features and `groups` groups.
    pub fn width(self, features: usize, groups: usize) -> usize {
        match self {
            Output::Shap => groups * (features + 1),
            Output::InteractionPairs => groups * (features + 1) * (features + 1),
        }
    }

    /// The warp, row and long-path kernels that compute this output (a program gives work to
    /// the warp or the row kernel, and to the long-path kernel when it has long paths).
    pub fn kernels(self) -> [Kernel; 3] {
        match self {
            Output::Shap => [Kernel::Shap, Kernel::RowShap, Kernel::QuadratureShap],
            Output::InteractionPairs => [Kernel::InteractionPairs, Kernel::RowInteractionPairs, Kernel::QuadratureInteractionPairs],
        }
    }
}

/// Which kernel of `kernels/treeshap.cu` a launch runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// `shap_kernel`: SHAP values of the paths packed in warps.
    Shap,
    /// `interactions_kernel`: interaction pairs of the paths packed in warps.
    InteractionPairs,
    /// `quadrature_shap_kernel`: SHAP values of the long paths.
    QuadratureShap,
    /// `quadrature_interactions_kernel`: interaction pairs of the long paths.
    QuadratureInteractionPairs,
    /// `row_shap_kernel`: SHAP values of the short paths, a thread per row.
    RowShap,
    /// `row_interactions_kernel`: interaction pairs of the short paths, a thread per row.
    RowInteractionPairs,
}

impl Kernel {
    /// The kernel's name in the CUDA source.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Shap => "shap_kernel",
            Kernel::InteractionPairs => "interactions_kernel",
            Kernel::QuadratureShap => "quadrature_shap_kernel",
            Kernel::QuadratureInteractionPairs => "quadrature_interactions_kernel",
            Kernel::RowShap => "row_shap_kernel",
            Kernel::RowInteractionPairs => "row_interactions_kernel",
        }
    }

    /// Whether this is a long-path quadrature kernel (one thread per row and long path).
    pub fn is_quadrature(self) -> bool {
        matches!(self, Kernel::QuadratureShap | Kernel::QuadratureInteractionPairs)
    }

    /// Whether this is a row kernel (one thread per row, a warp on one path at a time).
    pub fn is_rows(self) -> bool {
        matches!(self, Kernel::RowShap | Kernel::RowInteractionPairs)
    }

    /// The units of `program` this kernel's blocks share out: warp bins, long paths, or the
    /// row kernels' paths.
    pub fn units(self, program: &PathProgram) -> usize {
        if self.is_quadrature() {
            program.long.count
        } else if self.is_rows() {
            program.rows.count
        } else {
            program.bins
        }
    }

    /// Units one block takes at least, when the units are split across blocks: a bin per
    /// warp, a long path per thread, or for the row kernels a run of paths long enough that
    /// the block's one pass over its shared accumulator stays small beside them.
    fn units_per_block(self) -> usize {
        if self.is_quadrature() {
            BLOCK_THREADS as usize
        } else if self.is_rows() {
            ROW_PATHS_PER_BLOCK
        } else {
            BLOCK_THREADS as usize / 32
        }
    }
}

/// Fewest paths a block of the row kernels takes when the paths are split across blocks.
pub const ROW_PATHS_PER_BLOCK: usize = 64;
/// Most rows (threads) in a block of the row kernels.
pub const ROW_BLOCK_THREADS: usize = 256;
/// Fewest rows (threads, one warp) in a block of the row kernels that gathers in shared memory;
/// a wider output gathers in a region of global memory, from blocks of this many rows (see
/// [`Gather::BlockRegion`]).
pub const ROW_MIN_BLOCK_THREADS: usize = 32;

/// Rows (threads) of a block of the row kernels whose `bytes_a_row` of shared memory fit
/// `shared_bytes`: the most, a power of two from [`ROW_MIN_BLOCK_THREADS`] to
/// [`ROW_BLOCK_THREADS`]; `None` when not even a warp's rows fit.
fn row_block_threads(bytes_a_row: usize, shared_bytes: usize) -> Option<usize> {
    (ROW_MIN_BLOCK_THREADS.trailing_zeros()..=ROW_BLOCK_THREADS.trailing_zeros())
        .rev()
        .map(|b| 1usize << b)
        .find(|&t| t.saturating_mul(bytes_a_row) <= shared_bytes)
}

/// What the plan may use of a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceLimits {
    /// Streaming multiprocessors (132 on an H100 SXM).
    pub multiprocessors: usize,
    /// Shared memory per block in bytes; 0 forces the global-atomics path.
    pub shared_bytes: usize,
    /// Most output values per launch.
    pub max_launch_values: usize,
    /// Whether blocks of the row kernels use their block-local layouts: their rows staged in
    /// shared memory beside the accumulator where both fit ([`Gather::SharedWithRows`]), and
    /// sums too wide for shared memory gathered in a region of global memory of their own
    /// ([`Gather::BlockRegion`]). Off only to measure what they gain.
    pub row_block_layouts: bool,
}

impl DeviceLimits {
    /// The defaults for a device with `multiprocessors` SMs.
    pub fn new(multiprocessors: usize) -> Self {
        DeviceLimits {
            multiprocessors: multiprocessors.max(1),
            shared_bytes: SHARED_BYTES,
            max_launch_values: MAX_LAUNCH_VALUES,
            row_block_layouts: true,
        }
    }
}

/// Where a block's sums gather before they reach the output: the kernels' `use_shared`
/// argument (the discriminant). The warp and long-path kernels take the first two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gather {
    /// Nowhere: each sum goes to the output (atomically where blocks share rows).
    Output = 0,
    /// An accumulator in shared memory.
    Shared = 1,
    /// An accumulator in shared memory, with the block's rows staged after it (row kernels): a
    /// warp reads its rows' features as consecutive words instead of one word a row apart each.
    SharedWithRows = 2,
    /// An accumulator in a region of global memory of the block's own, after the output and
    /// laid out as the shared one (row kernels, for outputs too wide for shared memory): a
    /// warp's additions touch consecutive words instead of one line a row apart each.
    BlockRegion = 3,
}

/// One kernel launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Launch {
    /// The kernel.
    pub kernel: Kernel,
    /// Blocks along x (groups of rows) and y (slices of the bins or long paths).
    pub grid: (u32, u32),
    /// Threads per block.
    pub block_threads: u32,
    /// Dynamic shared memory per block, in bytes (0 when the sums do not gather there).
    pub shared_bytes: u32,
    /// Rows one block takes.
    pub rows_per_block: usize,
    /// Where the block's sums gather.
    pub gather: Gather,
}

impl Launch {
    /// Whether sums gather in shared memory before going to global memory.
    pub fn use_shared(&self) -> bool {
        matches!(self.gather, Gather::Shared | Gather::SharedWithRows)
    }

    /// The kernel's `use_shared` argument. (A kernel source from before the row kernels' block
    /// layouts takes 2 as 1 and does not know 3, so an A/B run against one must turn them off.)
    pub fn shared_mode(&self) -> i32 {
        self.gather as i32
    }

    /// Values of global memory after the output that the launch's blocks gather in
    /// ([`Gather::BlockRegion`]: one region of `rows_per_block × width` a block), else 0.
    pub fn scratch_values(&self, width: usize) -> usize {
        match self.gather {
            Gather::BlockRegion => self.grid.0 as usize * self.grid.1 as usize * self.rows_per_block * width,
            _ => 0,
        }
    }
}

/// The launches over rows `first_row .. first_row + rows` of a batch: one per kernel with work,
/// all adding into the same zeroed output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowLaunches {
    /// First row of the batch these launches cover.
    pub first_row: usize,
    /// Rows they cover.
    pub rows: usize,
    /// The launches, warp kernel first.
    pub launches: Vec<Launch>,
}

impl RowLaunches {
    /// Values the launches need in their output buffer: the output, `rows × width`, and the
    /// largest region after it that a launch gathers in (launches run one after another).
    pub fn buffer_values(&self, width: usize) -> usize {
        self.rows * width + self.launches.iter().map(|l| l.scratch_values(width)).max().unwrap_or(0)
    }
}

/// The launches that cover `rows` rows of `features` feature values and `width` output values
/// each, for `units` of work per kernel (bins of the warp kernel, paths of the quadrature and
/// row kernels; a kernel with none is not launched), and when rows are few, the units split
/// across blocks along y so the device is still filled (4 blocks per SM). Rows per block: for
/// the warp and long-path kernels, as many as fit the shared accumulator (at most 32; the
/// global atomics path when not even one row fits); for the row kernels, a thread per row, as
/// many as fit (a power of two from 32 to 256) with the rows staged beside the accumulator,
/// else with the accumulator alone, else 32 rows gathering in a region of global memory of
/// their own (see [`Gather`] and [`DeviceLimits::row_block_layouts`]; without them, 256 rows
/// adding to the output). A launch that gathers in global memory takes half the rows, and its
/// blocks split the paths only as far as their regions take no more memory than the output may,
/// so that both stay within `max_launch_values` (rows too wide for that add to the output).
pub fn plan_launches(rows: usize, width: usize, features: usize, units: &[(Kernel, usize)], limits: &DeviceLimits) -> Vec<RowLaunches> {
    if rows == 0 || width == 0 {
        return Vec::new();
    }
    let fits = limits.shared_bytes / (width * 8);
    let layouts = limits.row_block_layouts;
    // (threads, rows per block, gather, values a row of shared memory) of each kernel family.
    let shape = |kernel: Kernel| {
        if kernel.is_rows() {
            let staged = layouts.then(|| row_block_threads((width + features) * 8, limits.shared_bytes)).flatten();
            match (staged, row_block_threads(width * 8, limits.shared_bytes)) {
                (Some(t), _) => (t, t, Gather::SharedWithRows, width + features),
                (None, Some(t)) => (t, t, Gather::Shared, width),
                // A warp's rows a block: the regions of blocks that split the paths (when rows
                // are few) then stay within the memory the output takes.
                (None, None) if layouts => (ROW_MIN_BLOCK_THREADS, ROW_MIN_BLOCK_THREADS, Gather::BlockRegion, 0),
                (None, None) => (ROW_BLOCK_THREADS, ROW_BLOCK_THREADS, Gather::Output, 0),
            }
        } else if fits >= 1 {
            (BLOCK_THREADS as usize, fits.min(MAX_ROWS_PER_BLOCK), Gather::Shared, width)
        } else {
            (BLOCK_THREADS as usize, MAX_ROWS_PER_BLOCK, Gather::Output, 0)
        }
    };
    let kernels: Vec<_> = units.iter().filter(|(_, count)| *count > 0).map(|&(kernel, count)| (kernel, count, shape(kernel))).collect();
    let in_region = kernels.iter().any(|(_, _, (_, _, gather, _))| *gather == Gather::BlockRegion);
    let per_launch = match limits.max_launch_values / width {
        // Half the rows, whole blocks of them: the regions then take what the output does.
        rows if in_region && rows >= 2 * ROW_MIN_BLOCK_THREADS => rows / 2 / ROW_MIN_BLOCK_THREADS * ROW_MIN_BLOCK_THREADS,
        rows if in_region => rows / 2,
        rows => rows,
    }
    .max(1);
    // The most values the regions of a launch's blocks may take: what the output may.
    let region_values = limits.max_launch_values / 2;
    (0..rows)
        .step_by(per_launch)
        .map(|first_row| {
            let n = per_launch.min(rows - first_row);
            let wanted = 4 * limits.multiprocessors;
            let launches = kernels
                .iter()
                .map(|&(kernel, count, (threads, rows_per_block, gather, shared_values))| {
                    let blocks = n.div_ceil(rows_per_block);
                    let max_slices = count.div_ceil(kernel.units_per_block()).max(1);
                    let mut slices = wanted.div_ceil(blocks).clamp(1, max_slices.min(MAX_GRID_Y));
                    let mut gather = gather;
                    if gather == Gather::BlockRegion {
                        // A region a block: as many slices as the regions' memory allows, and
                        // none where one slice's would take more (rows wider than any model's
                        // interactions but a few thousand features'): those add to the output.
                        match region_values / (blocks * rows_per_block * width) {
                            0 => gather = Gather::Output,
                            most => slices = slices.min(most),
                        }
                    }
                    Launch {
                        kernel,
                        grid: (blocks as u32, slices as u32),
                        block_threads: threads as u32,
                        shared_bytes: (rows_per_block * shared_values * 8) as u32,
                        rows_per_block,
                        gather,
                    }
                })
                .collect();
            RowLaunches { first_row, rows: n, launches }
        })
        .collect()
}

/// The launches over some rows of a batch as the kernels see them: the program's arrays, the
/// rows and the plan. The launcher zeroes one output of `rows × width` values, runs every
/// launch into it in order, and returns it.
#[derive(Debug, Clone, Copy)]
pub struct KernelCall<'a> {
    /// The model's paths.
    pub program: &'a PathProgram,
    /// These launches' rows, row-major `rows × features` (NaN: missing).
    pub x: &'a [f64],
    /// Rows, and the launches over them.
    pub plan: &'a RowLaunches,
    /// Output values per row.
    pub width: usize,
}

/// Computes `output` for every row of `block` in the planned launches; `launch` runs the
/// launches of one [`KernelCall`] (on the device, or an emulator) and returns their
/// zero-initialised and then accumulated output, `rows × width` values.
pub fn run_kernels(
    program: &PathProgram,
    block: &FeatureBlock,
    output: Output,
    limits: &DeviceLimits,
    launch: &mut dyn FnMut(&KernelCall) -> Result<Vec<f64>>,
) -> Result<Vec<f64>> {
    let (f, g) = (program.features, program.groups);
    let width = output.width(f, g);
    let rows = block.rows();
    check_output(rows, width, "values")?;
    let mut values: Option<Vec<f64>> = None;
    let units = output.kernels().map(|k| (k, k.units(program)));
    for plan in plan_launches(rows, width, f, &units, limits) {
        if plan.launches.is_empty() {
            continue; // a model without paths: nothing to add
        }
        let x = &block.values()[plan.first_row * f..(plan.first_row + plan.rows) * f];
        let out = launch(&KernelCall { program, x, plan: &plan, width })?;
        if out.len() != plan.rows * width {
            return Err(Error::Internal(format!("a kernel launch returned {} values for {} rows of {width}", out.len(), plan.rows)));
        }
        if plan.rows == rows {
            // The whole batch in one call (the usual case): its output is the answer, with no
            // second pass over what can be gigabytes of interaction values.
            values = Some(out);
        } else {
            values.get_or_insert_with(|| vec![0.0; rows * width])[plan.first_row * width..(plan.first_row + plan.rows) * width].copy_from_slice(&out);
        }
    }
    Ok(values.unwrap_or_else(|| vec![0.0; rows * width]))
}

/// SHAP values of `block` through `launch`: the kernels' sums and the bias.
pub fn shap_values(
    program: &PathProgram,
    block: &FeatureBlock,
    limits: &DeviceLimits,
    launch: &mut dyn FnMut(&KernelCall) -> Result<Vec<f64>>,
) -> Result<Attributions> {
    let mut values = run_kernels(program, block, Output::Shap, limits, launch)?;
    let (f, g) = (program.features, program.groups);
    for row in values.chunks_mut(g * (f + 1)) {
        for (k, b) in program.bias.iter().enumerate() {
            row[k * (f + 1) + f] = *b;
        }
    }
    Ok(Attributions { rows: block.rows(), groups: g, features: f, values })
}

/// Interaction values of `block` through `launch`: the kernels' off-diagonal pairs, the
/// diagonal (`φ_i − Σ_{j≠i} φ_ij`) and the bias from the SHAP values.
pub fn interaction_values(
    program: &PathProgram,
    block: &FeatureBlock,
    limits: &DeviceLimits,
    launch: &mut dyn FnMut(&KernelCall) -> Result<Vec<f64>>,
) -> Result<Interactions> {
    let (f, g) = (program.features, program.groups);
    check_output(block.rows(), g * (f + 1) * (f + 1), "interaction values")?;
    let shap = shap_values(program, block, limits, launch)?;
    let mut values = run_kernels(program, block, Output::InteractionPairs, limits, launch)?;
    let (width, shap_width) = (g * (f + 1) * (f + 1), g * (f + 1));
    for (r, out) in values.chunks_mut(width).enumerate() {
        finish_interaction_row(out, &shap.values[r * shap_width..(r + 1) * shap_width], f, g);
    }
    Ok(Interactions { rows: block.rows(), groups: g, features: f, values })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_cover_every_row_once_within_the_limits() {
        let limits = DeviceLimits::new(132);
        let warps = |bins| [(Kernel::Shap, bins), (Kernel::QuadratureShap, 0)];
        for (rows, width, bins) in [(1, 9, 40), (1000, 9, 40), (100_000, 33, 500), (5, 20_000, 3)] {
            let plan = plan_launches(rows, width, width - 1, &warps(bins), &limits);
            assert_eq!(plan.iter().map(|l| l.rows).sum::<usize>(), rows);
            assert!(plan.windows(2).all(|w| w[0].first_row + w[0].rows == w[1].first_row));
            for rl in &plan {
                assert_eq!(rl.launches.len(), 1, "no launch for a kernel without work");
                for l in &rl.launches {
                    assert!(l.shared_bytes as usize <= SHARED_BYTES && (l.grid.1 as usize) <= MAX_GRID_Y);
                    assert!(l.grid.0 as usize * l.rows_per_block >= rl.rows);
                    assert_eq!(l.use_shared(), l.shared_bytes > 0);
                    assert!(matches!(l.gather, Gather::Output | Gather::Shared), "only the row kernels use block layouts");
                }
            }
        }
        // A row too wide for shared memory takes the global-atomics path; few rows split bins.
        let wide = plan_launches(5, 20_000, 19_999, &warps(3), &limits)[0].launches[0];
        assert!(wide.gather == Gather::Output && wide.shared_bytes == 0);
        let few = plan_launches(1, 9, 8, &warps(400), &limits)[0].launches[0];
        assert!(few.grid.1 > 1 && few.grid.1 as usize <= 400usize.div_ceil(8));
        let forced = plan_launches(100, 9, 8, &warps(40), &DeviceLimits { shared_bytes: 0, ..limits });
        assert!(forced.iter().flat_map(|rl| &rl.launches).all(|l| !l.use_shared()));
        let cut = plan_launches(100, 9, 8, &warps(40), &DeviceLimits { max_launch_values: 9 * 30, ..limits });
        assert_eq!(cut.len(), 4);
        // Both kinds of work: two launches over the same rows; long paths slice by threads.
        let both = plan_launches(1, 9, 8, &[(Kernel::Shap, 400), (Kernel::QuadratureShap, 600)], &limits);
        let kernels: Vec<Kernel> = both[0].launches.iter().map(|l| l.kernel).collect();
        assert_eq!(kernels, [Kernel::Shap, Kernel::QuadratureShap]);
        assert_eq!(both[0].launches[1].grid.1 as usize, 600usize.div_ceil(BLOCK_THREADS as usize));
    }

    #[test]
    fn the_row_kernels_take_a_thread_per_row_and_as_many_rows_as_the_accumulator_holds() {
        let h100 = DeviceLimits::new(132);
        let plan = |rows: usize, width: usize, features: usize, paths: usize, limits: &DeviceLimits| {
            plan_launches(rows, width, features, &[(Kernel::RowShap, paths)], limits)
        };
        let rows = |rows: usize, width: usize, paths: usize| plan(rows, width, width - 1, paths, &h100);
        // Every block: one thread per row, a power of two from a warp to 256, shared memory for
        // its rows' accumulator (and, where they fit too, its rows) within the limit, and blocks
        // covering every row. (width, features): SHAP values of one group, interactions of 8
        // and 54 features, SHAP values and interactions of 5 groups of 20.
        let shapes = [(1, 0), (9, 8), (55, 54), (81, 8), (105, 20), (129, 128), (192, 191), (193, 192), (2205, 20), (3025, 54)];
        for layouts in [true, false] {
            let limits = DeviceLimits { row_block_layouts: layouts, ..h100 };
            for (width, features) in shapes {
                let what = format!("width {width}, {features} features, block layouts {layouts}");
                let bytes = |values: usize, rows: usize| values * rows * 8;
                for plan in plan(10_000, width, features, 5_000, &limits) {
                    let l = plan.launches[0];
                    assert_eq!(l.block_threads as usize, l.rows_per_block, "{what}");
                    assert!(l.rows_per_block.is_power_of_two() && (32..=256).contains(&l.rows_per_block), "{what}: {l:?}");
                    assert!(l.grid.0 as usize * l.rows_per_block >= plan.rows);
                    assert!(l.shared_bytes as usize <= limits.shared_bytes, "{what}: {l:?}");
                    // Each block's shared memory holds what its mode says, for the most rows that
                    // fit: twice as many would not.
                    let per_block = |values: usize| {
                        assert_eq!(l.shared_bytes as usize, bytes(values, l.rows_per_block), "{what}: {l:?}");
                        assert!(l.rows_per_block == 256 || bytes(values, 2 * l.rows_per_block) > limits.shared_bytes, "{what}: {l:?}");
                    };
                    // Not even one warp's accumulator fits: global memory, with the output and
                    // the blocks' regions together within the limit.
                    let global = || {
                        assert!(bytes(width, 32) > limits.shared_bytes && l.shared_bytes == 0, "{what}");
                        assert!(plan.buffer_values(width) <= limits.max_launch_values, "{what}");
                    };
                    match l.gather {
                        Gather::SharedWithRows => {
                            assert!(layouts, "{what}");
                            per_block(width + features);
                        }
                        Gather::Shared => {
                            // Staged, not even a warp's rows would fit.
                            assert!(!layouts || bytes(width + features, 32) > limits.shared_bytes, "{what}");
                            per_block(width);
                        }
                        Gather::BlockRegion => {
                            assert!(layouts && l.rows_per_block == 32, "{what}: {l:?}");
                            assert_eq!(l.scratch_values(width), (l.grid.0 * l.grid.1) as usize * 32 * width);
                            global();
                        }
                        Gather::Output => {
                            assert!(!layouts && l.rows_per_block == 256, "{what}: {l:?}");
                            global();
                        }
                    }
                }
            }
        }
        // The shapes of the suite's models: 256 rows a block with their rows for medium-8f's SHAP
        // values, 64 for its interactions; a warp's for 54 features; 128 features' SHAP values
        // keep their accumulator without their rows; wide interactions gather in global memory,
        // in launches of half the rows.
        let modes = shapes.map(|(width, features)| {
            let l = plan(10_000, width, features, 5_000, &h100)[0].launches[0];
            (l.rows_per_block, l.gather)
        });
        assert_eq!(modes[1], (256, Gather::SharedWithRows));
        assert_eq!(modes[2], (32, Gather::SharedWithRows));
        assert_eq!(modes[3], (64, Gather::SharedWithRows));
        assert_eq!(modes[5], (32, Gather::Shared));
        assert_eq!(modes[9], (32, Gather::BlockRegion));
        let wide = |layouts| {
            let limits = DeviceLimits { row_block_layouts: layouts, ..h100 };
            plan(100_000, 3025, 54, 5_000, &limits).iter().map(|rl| rl.rows).max().unwrap()
        };
        assert_eq!(wide(true), MAX_LAUNCH_VALUES / 3025 / 2 / 32 * 32);
        assert_eq!(wide(false), MAX_LAUNCH_VALUES / 3025);
        // One row: the paths split across blocks, at least ROW_PATHS_PER_BLOCK each.
        let one = rows(1, 9, 10_000)[0].launches[0];
        assert_eq!(one.grid.0, 1);
        assert_eq!(one.grid.1 as usize, 10_000usize.div_ceil(ROW_PATHS_PER_BLOCK));
        assert_eq!(rows(1, 9, 10)[0].launches[0].grid.1, 1);
        // A wide output's rows, few or many: blocks split the paths (at least 64 paths each,
        // 4 blocks an SM at most) as far as their regions take no more memory than the output
        // may; rows too wide for even one slice's regions add to the output.
        let slices_for = |blocks: usize| (4 * 132usize).div_ceil(blocks).min(10_000usize.div_ceil(ROW_PATHS_PER_BLOCK));
        for (rows, width, gather, slices) in [
            (1, 3025, Gather::BlockRegion, slices_for(1)),
            (10_000, 3025, Gather::BlockRegion, slices_for(10_000usize.div_ceil(32))),
            (1 << 20, 3025, Gather::BlockRegion, 1),
            (1, 1 << 26, Gather::Output, slices_for(1)),
        ] {
            let launches = plan(rows, width, 54, 10_000, &h100);
            let first = launches[0].launches[0];
            assert_eq!((first.gather, first.grid.1 as usize), (gather, slices), "{rows} rows of {width}: {first:?}");
            for rl in launches {
                let l = rl.launches[0];
                assert!(rl.buffer_values(width) <= MAX_LAUNCH_VALUES, "{rows} rows of {width}: {l:?}");
                assert!(l.grid.1 as usize <= slices_for(l.grid.0 as usize), "{rows} rows of {width}: {l:?}");
            }
        }
    }
}
