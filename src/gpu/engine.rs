//! The GPU engine: `kernels/treeshap.cu` compiled by NVRTC for the device found, the model's
//! packed paths uploaded once, and per batch: rows up, one launch, attributions down.

use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions, Ptx};

use super::paths::{extract, pack, WARP_LANES};
use super::warps::WarpProgram;
use crate::engine::drivers::{check_block, check_output};
use crate::engine::{finish_interaction_row, Attributions, Engine, FeatureBlock, Interactions};
use crate::error::{Error, Result};
use crate::model::Model;

/// The kernels' source, compiled at run time for the device's architecture.
pub const KERNEL_SOURCE: &str = include_str!("../../kernels/treeshap.cu");

/// Threads per block: 8 warps.
const BLOCK_THREADS: u32 = 256;
/// Most rows one block takes.
const MAX_ROWS_PER_BLOCK: usize = 32;
/// Shared memory a block may use without opting in to more (every CUDA device has 48 KiB).
const SHARED_BYTES: usize = 48 * 1024;
/// Most output values one launch writes (1 GiB of f64): larger batches go in several launches.
const MAX_LAUNCH_VALUES: usize = 1 << 27;

/// Compiles the kernels to PTX for compute capability `major.minor` (no device needed).
pub fn compile_kernels(major: i32, minor: i32) -> Result<Ptx> {
    let options = CompileOptions {
        options: vec![format!("--gpu-architecture=compute_{major}{minor}")],
        name: Some("treeshap.cu".into()),
        ..Default::default()
    };
    compile_ptx_with_opts(KERNEL_SOURCE, options).map_err(|e| Error::Unavailable(format!("NVRTC could not compile kernels/treeshap.cu: {e}")))
}

fn gpu_error(what: &str) -> impl Fn(cudarc::driver::DriverError) -> Error + '_ {
    move |e| Error::Unavailable(format!("GPU: {what}: {e}"))
}

/// Device 0's context and the kernels compiled for it, shared by every model in the process.
struct Kernels {
    stream: Arc<CudaStream>,
    shap: CudaFunction,
    interactions: CudaFunction,
    multiprocessors: usize,
}

fn kernels() -> Result<&'static Kernels> {
    static KERNELS: OnceLock<std::result::Result<Kernels, String>> = OnceLock::new();
    KERNELS
        .get_or_init(|| {
            super::probe()?;
            let load = || -> Result<Kernels> {
                let ctx = CudaContext::new(0).map_err(gpu_error("open device 0"))?;
                let (major, minor) = ctx.compute_capability().map_err(gpu_error("read the compute capability"))?;
                let module = ctx.load_module(compile_kernels(major, minor)?).map_err(gpu_error("load the compiled kernels"))?;
                let function = |name| module.load_function(name).map_err(gpu_error("find a kernel"));
                let multiprocessors = ctx
                    .attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
                    .map_err(gpu_error("count multiprocessors"))? as usize;
                Ok(Kernels { stream: ctx.default_stream(), shap: function("shap_kernel")?, interactions: function("interactions_kernel")?, multiprocessors })
            };
            load().map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|why| Error::Unavailable(why.clone()))
}

/// The model's paths on the device, and the per-batch buffers reused across batches.
struct DeviceModel {
    lane_ints: CudaSlice<i32>,
    lane_reals: CudaSlice<f64>,
    bin_len: CudaSlice<i32>,
    thresholds: CudaSlice<f64>,
    split_ints: CudaSlice<u32>,
    categories: CudaSlice<u32>,
    x: Option<CudaSlice<f64>>,
    out: Option<CudaSlice<f64>>,
}

/// Copies `values` to the device; empty arrays get one element (a zero-byte allocation fails).
fn upload<T: cudarc::driver::DeviceRepr + Default + Clone>(stream: &Arc<CudaStream>, values: &[T]) -> Result<CudaSlice<T>> {
    let padded: Vec<T> = if values.is_empty() { vec![T::default()] } else { values.to_vec() };
    stream.clone_htod(&padded).map_err(gpu_error("copy the model's paths to the device"))
}

/// A device buffer of at least `len` elements, reusing `slot`'s when it is large enough.
fn buffer<'a>(stream: &Arc<CudaStream>, slot: &'a mut Option<CudaSlice<f64>>, len: usize) -> Result<&'a mut CudaSlice<f64>> {
    if slot.as_ref().is_none_or(|b| b.len() < len) {
        *slot = None; // free the old one first
        *slot = Some(stream.alloc_zeros::<f64>(len.max(1)).map_err(gpu_error("allocate device memory for a batch"))?);
    }
    Ok(slot.as_mut().expect("allocated above"))
}

/// Which kernel a launch runs.
#[derive(Clone, Copy)]
enum Output {
    Shap,
    InteractionPairs,
}

/// Exact SHAP values and interactions on an NVIDIA GPU.
pub struct GpuEngine {
    model: Arc<Model>,
    program: WarpProgram,
    device: Mutex<DeviceModel>,
}

impl GpuEngine {
    /// Extracts and packs the model's paths and uploads them. `None` (with a log line saying
    /// why) when a path has more elements than a warp has lanes: the caller uses the CPU.
    /// An error when there is no usable GPU.
    pub fn new(model: Arc<Model>) -> Result<Option<Self>> {
        let kernels = kernels()?;
        // Each path keeps every split on it, so a deep chain (legal in the file formats) would
        // need memory quadratic in its depth; such models run on the CPU's `linear`.
        let depth = model.trees.iter().map(crate::model::Tree::depth).max().unwrap_or(0);
        if depth > crate::engine::MAX_RECURSIVE_DEPTH {
            tracing::warn!("GPU engine not used: a tree has depth {depth}, over {}; computing on the CPU", crate::engine::MAX_RECURSIVE_DEPTH);
            return Ok(None);
        }
        let set = extract(model.clone())?;
        let bins = match pack(&set.lengths(), WARP_LANES) {
            Ok(bins) => bins,
            Err(len) => {
                tracing::warn!("GPU engine not used: a path of the model has {len} elements (its root and distinct features), more than a warp's {WARP_LANES} lanes; computing on the CPU");
                return Ok(None);
            }
        };
        let program = WarpProgram::new(&set, &bins);
        let s = &kernels.stream;
        let device = DeviceModel {
            lane_ints: upload(s, &program.lane_ints)?,
            lane_reals: upload(s, &program.lane_reals)?,
            bin_len: upload(s, &program.bin_len)?,
            thresholds: upload(s, &program.split_thresholds)?,
            split_ints: upload(s, &program.split_ints)?,
            categories: upload(s, &program.categories)?,
            x: None,
            out: None,
        };
        tracing::info!(paths = set.paths.len(), warps = program.bins, "GPU engine: model uploaded");
        Ok(Some(GpuEngine { model, program, device: Mutex::new(device) }))
    }

    /// Runs one kernel over every row of `block`, in launches of bounded output size.
    fn run(&self, block: &FeatureBlock, output: Output) -> Result<Vec<f64>> {
        check_block(&self.model, block)?;
        let kernels = kernels()?;
        let (f, g) = (self.program.features, self.program.groups);
        let (width, function) = match output {
            Output::Shap => (g * (f + 1), &kernels.shap),
            Output::InteractionPairs => (g * (f + 1) * (f + 1), &kernels.interactions),
        };
        let rows = block.rows();
        check_output(rows, width, "values")?;
        let mut values = vec![0.0; rows * width];
        if rows == 0 || width == 0 {
            return Ok(values);
        }
        let per_launch = (MAX_LAUNCH_VALUES / width).max(1);
        let fits = SHARED_BYTES / (width * 8);
        let (rows_per_block, use_shared) = if fits >= 1 { (fits.min(MAX_ROWS_PER_BLOCK), 1i32) } else { (MAX_ROWS_PER_BLOCK, 0) };

        let stream = &kernels.stream;
        let mut device = self.device.lock().unwrap_or_else(|p| p.into_inner());
        let device = &mut *device;
        for first in (0..rows).step_by(per_launch) {
            let n = per_launch.min(rows - first);
            let x_host = &block.values()[first * f..(first + n) * f];
            let x = buffer(stream, &mut device.x, x_host.len())?;
            if !x_host.is_empty() {
                stream.memcpy_htod(x_host, &mut x.slice_mut(0..x_host.len())).map_err(gpu_error("copy rows to the device"))?;
            }
            let out = buffer(stream, &mut device.out, n * width)?;
            stream.memset_zeros(&mut out.slice_mut(0..n * width)).map_err(gpu_error("clear the output"))?;

            let blocks = n.div_ceil(rows_per_block);
            // Enough blocks to fill the device: split the bins across blocks when rows are few.
            let wanted = 4 * kernels.multiprocessors;
            let max_slices = self.program.bins.div_ceil(BLOCK_THREADS as usize / 32).max(1);
            let slices = wanted.div_ceil(blocks).clamp(1, max_slices.min(65_535));
            let config = LaunchConfig {
                grid_dim: (blocks as u32, slices as u32, 1),
                block_dim: (BLOCK_THREADS, 1, 1),
                shared_mem_bytes: if use_shared == 1 { (rows_per_block * width * 8) as u32 } else { 0 },
            };
            let (bins, rows_i64, cols, groups, rpb) = (self.program.bins as i32, n as i64, f as i32, g as i32, rows_per_block as i32);
            let mut launch = stream.launch_builder(function);
            launch
                .arg(&device.lane_ints)
                .arg(&device.lane_reals)
                .arg(&device.bin_len)
                .arg(&bins)
                .arg(&device.thresholds)
                .arg(&device.split_ints)
                .arg(&device.categories)
                .arg(&*x)
                .arg(&rows_i64)
                .arg(&cols)
                .arg(&groups)
                .arg(&rpb)
                .arg(&use_shared)
                .arg(&mut *out);
            // SAFETY: the argument list matches the kernel's signature in kernels/treeshap.cu,
            // and every buffer holds what the kernel reads or writes for `n` rows.
            unsafe { launch.launch(config) }.map_err(gpu_error("launch the kernel"))?;
            stream.memcpy_dtoh(&out.slice(0..n * width), &mut values[first * width..(first + n) * width]).map_err(gpu_error("copy results back"))?;
            stream.synchronize().map_err(gpu_error("run the kernel"))?;
        }
        Ok(values)
    }
}

impl Engine for GpuEngine {
    fn name(&self) -> &'static str {
        "gpu"
    }

    fn model(&self) -> &Model {
        &self.model
    }

    fn shap(&self, block: &FeatureBlock) -> Result<Attributions> {
        let mut values = self.run(block, Output::Shap)?;
        let (f, g) = (self.program.features, self.program.groups);
        for row in values.chunks_mut(g * (f + 1)) {
            for (k, b) in self.program.bias.iter().enumerate() {
                row[k * (f + 1) + f] = *b;
            }
        }
        Ok(Attributions { rows: block.rows(), groups: g, features: f, values })
    }

    fn interactions(&self, block: &FeatureBlock) -> Result<Interactions> {
        let (f, g) = (self.program.features, self.program.groups);
        check_output(block.rows(), g * (f + 1) * (f + 1), "interaction values")?;
        let shap = self.shap(block)?;
        let mut values = self.run(block, Output::InteractionPairs)?;
        let (width, shap_width) = (g * (f + 1) * (f + 1), g * (f + 1));
        for (r, out) in values.chunks_mut(width).enumerate() {
            finish_interaction_row(out, &shap.values[r * shap_width..(r + 1) * shap_width], f, g);
        }
        Ok(Interactions { rows: block.rows(), groups: g, features: f, values })
    }
}
