//! How a batch reaches the kernels: the launch plan (rows per block, shared memory, grid, and
//! the cut of a large batch into launches), and the host steps around the launches (zeroed
//! outputs, the bias, the interaction diagonal). Pure functions over a [`WarpProgram`] and a
//! launcher, so the CUDA engine and the CPU emulation of the kernels (`tests/gpu_emulation.rs`)
//! run exactly the same arrays and plans.

use super::warps::WarpProgram;
use crate::engine::drivers::check_output;
use crate::engine::{finish_interaction_row, Attributions, FeatureBlock, Interactions};
use crate::error::Result;

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

/// Which kernel of `kernels/treeshap.cu` a launch runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    /// `shap_kernel`: SHAP values, `[rows][G][F+1]` (the bias column left zero).
    Shap,
    /// `interactions_kernel`: off-diagonal interaction pairs, `[rows][G][F+1][F+1]`.
    InteractionPairs,
}

impl Kernel {
    /// The kernel's name in the CUDA source.
    pub fn name(self) -> &'static str {
        match self {
            Kernel::Shap => "shap_kernel",
            Kernel::InteractionPairs => "interactions_kernel",
        }
    }

    /// Output values per row for `features` features and `groups` groups.
    pub fn width(self, features: usize, groups: usize) -> usize {
        match self {
            Kernel::Shap => groups * (features + 1),
            Kernel::InteractionPairs => groups * (features + 1) * (features + 1),
        }
    }
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
}

impl DeviceLimits {
    /// The defaults for a device with `multiprocessors` SMs.
    pub fn new(multiprocessors: usize) -> Self {
        DeviceLimits { multiprocessors: multiprocessors.max(1), shared_bytes: SHARED_BYTES, max_launch_values: MAX_LAUNCH_VALUES }
    }
}

/// One kernel launch over rows `first_row .. first_row + rows` of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Launch {
    /// First row of the batch this launch covers.
    pub first_row: usize,
    /// Rows it covers.
    pub rows: usize,
    /// Blocks along x (groups of rows) and y (slices of the bins).
    pub grid: (u32, u32),
    /// Threads per block.
    pub block_threads: u32,
    /// Dynamic shared memory per block, in bytes (0 when the global-atomics path is used).
    pub shared_bytes: u32,
    /// Rows one block takes.
    pub rows_per_block: usize,
    /// Whether sums gather in shared memory before going to global memory.
    pub use_shared: bool,
}

/// The launches that cover `rows` rows of `width` output values each, for a program of `bins`
/// warps of paths: rows per block as many as fit the shared accumulator (at most 32; the global
/// atomics path when not even one row fits), and when rows are few, the bins split across
/// blocks along y so the device is still filled (4 blocks per SM).
pub fn plan_launches(rows: usize, width: usize, bins: usize, limits: &DeviceLimits) -> Vec<Launch> {
    if rows == 0 || width == 0 {
        return Vec::new();
    }
    let per_launch = (limits.max_launch_values / width).max(1);
    let fits = limits.shared_bytes / (width * 8);
    let (rows_per_block, use_shared) = if fits >= 1 { (fits.min(MAX_ROWS_PER_BLOCK), true) } else { (MAX_ROWS_PER_BLOCK, false) };
    let warps_per_block = BLOCK_THREADS as usize / 32;
    (0..rows)
        .step_by(per_launch)
        .map(|first_row| {
            let n = per_launch.min(rows - first_row);
            let blocks = n.div_ceil(rows_per_block);
            let wanted = 4 * limits.multiprocessors;
            let max_slices = bins.div_ceil(warps_per_block).max(1);
            let slices = wanted.div_ceil(blocks).clamp(1, max_slices.min(MAX_GRID_Y));
            Launch {
                first_row,
                rows: n,
                grid: (blocks as u32, slices as u32),
                block_threads: BLOCK_THREADS,
                shared_bytes: if use_shared { (rows_per_block * width * 8) as u32 } else { 0 },
                rows_per_block,
                use_shared,
            }
        })
        .collect()
}

/// One launch as the kernel sees it: the program's arrays, this launch's rows and the plan.
#[derive(Debug, Clone, Copy)]
pub struct KernelCall<'a> {
    /// Which kernel.
    pub kernel: Kernel,
    /// The packed paths.
    pub program: &'a WarpProgram,
    /// This launch's rows, row-major `rows × features` (NaN: missing).
    pub x: &'a [f64],
    /// Grid, block and shared memory.
    pub launch: Launch,
    /// Output values per row.
    pub width: usize,
}

/// Runs `kernel` over every row of `block` in the planned launches; `launch` runs one
/// [`KernelCall`] (on the device, or an emulator) and returns its zero-initialised and then
/// accumulated output, `rows × width` values.
pub fn run_kernel(
    program: &WarpProgram,
    block: &FeatureBlock,
    kernel: Kernel,
    limits: &DeviceLimits,
    launch: &mut dyn FnMut(&KernelCall) -> Result<Vec<f64>>,
) -> Result<Vec<f64>> {
    let (f, g) = (program.features, program.groups);
    let width = kernel.width(f, g);
    let rows = block.rows();
    check_output(rows, width, "values")?;
    let mut values = vec![0.0; rows * width];
    for plan in plan_launches(rows, width, program.bins, limits) {
        let x = &block.values()[plan.first_row * f..(plan.first_row + plan.rows) * f];
        let out = launch(&KernelCall { kernel, program, x, launch: plan, width })?;
        values[plan.first_row * width..(plan.first_row + plan.rows) * width].copy_from_slice(&out);
    }
    Ok(values)
}

/// SHAP values of `block` through `launch`: the kernel's sums and the bias.
pub fn shap_values(program: &WarpProgram, block: &FeatureBlock, limits: &DeviceLimits, launch: &mut dyn FnMut(&KernelCall) -> Result<Vec<f64>>) -> Result<Attributions> {
    let mut values = run_kernel(program, block, Kernel::Shap, limits, launch)?;
    let (f, g) = (program.features, program.groups);
    for row in values.chunks_mut(g * (f + 1)) {
        for (k, b) in program.bias.iter().enumerate() {
            row[k * (f + 1) + f] = *b;
        }
    }
    Ok(Attributions { rows: block.rows(), groups: g, features: f, values })
}

/// Interaction values of `block` through `launch`: the kernel's off-diagonal pairs, the
/// diagonal (`φ_i − Σ_{j≠i} φ_ij`) and the bias from the SHAP values.
pub fn interaction_values(
    program: &WarpProgram,
    block: &FeatureBlock,
    limits: &DeviceLimits,
    launch: &mut dyn FnMut(&KernelCall) -> Result<Vec<f64>>,
) -> Result<Interactions> {
    let (f, g) = (program.features, program.groups);
    check_output(block.rows(), g * (f + 1) * (f + 1), "interaction values")?;
    let shap = shap_values(program, block, limits, launch)?;
    let mut values = run_kernel(program, block, Kernel::InteractionPairs, limits, launch)?;
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
        for (rows, width, bins) in [(1, 9, 40), (1000, 9, 40), (100_000, 33, 500), (5, 20_000, 3)] {
            let plan = plan_launches(rows, width, bins, &limits);
            assert_eq!(plan.iter().map(|l| l.rows).sum::<usize>(), rows);
            assert!(plan.windows(2).all(|w| w[0].first_row + w[0].rows == w[1].first_row));
            for l in &plan {
                assert!(l.shared_bytes as usize <= SHARED_BYTES && (l.grid.1 as usize) <= MAX_GRID_Y);
                assert!(l.grid.0 as usize * l.rows_per_block >= l.rows);
                assert_eq!(l.use_shared, l.shared_bytes > 0);
            }
        }
        // A row too wide for shared memory takes the global-atomics path; few rows split bins.
        let wide = plan_launches(5, 20_000, 3, &limits)[0];
        assert!(!wide.use_shared && wide.shared_bytes == 0);
        let few = plan_launches(1, 9, 400, &limits)[0];
        assert!(few.grid.1 > 1 && few.grid.1 as usize <= 400usize.div_ceil(8));
        let forced = plan_launches(100, 9, 40, &DeviceLimits { shared_bytes: 0, ..limits });
        assert!(forced.iter().all(|l| !l.use_shared));
        let cut = plan_launches(100, 9, 40, &DeviceLimits { max_launch_values: 9 * 30, ..limits });
        assert_eq!(cut.len(), 4);
    }
}
