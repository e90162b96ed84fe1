//! The GPU engine: `kernels/treeshap.cu` compiled by NVRTC for the device found, the model's
//! paths uploaded once, and per batch: rows up, the warp kernel and (for paths longer than a
//! warp) the quadrature kernel into one output, attributions down.

use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{CudaContext, CudaFunction, CudaSlice, CudaStream, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions, Ptx};

use super::launch::{interaction_values, plan_launches, shap_values, DeviceLimits, Kernel, KernelCall, Output, RowLaunches};
use super::paths::WARP_LANES;
use super::warps::{PathLayout, PathProgram};
use crate::engine::drivers::check_block;
use crate::engine::{Attributions, Engine, FeatureBlock, Interactions};
use crate::error::{Error, ErrorKind, Result};
use crate::model::Model;

/// The kernels' source, compiled at run time for the device's architecture.
pub const KERNEL_SOURCE: &str = include_str!("../../../../kernels/treeshap.cu");

/// Compiles the kernels to PTX for compute capability `major.minor` (no device needed).
pub fn compile_kernels(major: i32, minor: i32) -> Result<Ptx> {
    let options = CompileOptions {
        options: vec![format!("--gpu-architecture=compute_{major}{minor}")],
        name: Some("treeshap.cu".into()),
        ..Default::default()
    };
    compile_ptx_with_opts(KERNEL_SOURCE, options).map_err(|e| Error::external(ErrorKind::Internal, "NVRTC could not compile kernels/treeshap.cu", e))
}

fn gpu_error(what: &str) -> impl Fn(cudarc::driver::DriverError) -> Error + '_ {
    move |e| Error::external(ErrorKind::Unsupported, format!("GPU: {what} ({})", thread_context()), e)
}

/// The thread a CUDA call failed on and the context current there. The wheel's first run on a
/// GPU (benchmarks/RESULTS.md, GPU section) failed its first upload with "invalid device
/// context" where the same calls from gpu_bench and the tests succeeded; this is what telling
/// such failures apart needs (the engine's context is logged when it is made).
fn thread_context() -> String {
    let thread = std::thread::current();
    let name = thread.name().map_or_else(|| format!("{:?}", thread.id()), str::to_string);
    let current = match cudarc::driver::result::ctx::get_current() {
        Ok(None) => "no CUDA context current".to_string(),
        Ok(Some(ctx)) => format!("CUDA context {ctx:p} current"),
        Err(e) => format!("the current CUDA context unreadable: {e}"),
    };
    format!("on thread {name}, {current}")
}

/// Device 0's context and the kernels compiled for it, shared by every model in the process.
struct Kernels {
    stream: Arc<CudaStream>,
    shap: CudaFunction,
    interactions: CudaFunction,
    quadrature_shap: CudaFunction,
    quadrature_interactions: CudaFunction,
    row_shap: CudaFunction,
    row_interactions: CudaFunction,
    multiprocessors: usize,
}

impl Kernels {
    fn function(&self, kernel: Kernel) -> &CudaFunction {
        match kernel {
            Kernel::Shap => &self.shap,
            Kernel::InteractionPairs => &self.interactions,
            Kernel::QuadratureShap => &self.quadrature_shap,
            Kernel::QuadratureInteractionPairs => &self.quadrature_interactions,
            Kernel::RowShap => &self.row_shap,
            Kernel::RowInteractionPairs => &self.row_interactions,
        }
    }
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
                tracing::info!("GPU: CUDA context {:p} on device 0, made {}", ctx.cu_ctx(), thread_context());
                let multiprocessors = ctx
                    .attribute(cudarc::driver::sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
                    .map_err(gpu_error("count multiprocessors"))? as usize;
                Ok(Kernels {
                    stream: ctx.default_stream(),
                    shap: function(Kernel::Shap.name())?,
                    interactions: function(Kernel::InteractionPairs.name())?,
                    quadrature_shap: function(Kernel::QuadratureShap.name())?,
                    quadrature_interactions: function(Kernel::QuadratureInteractionPairs.name())?,
                    row_shap: function(Kernel::RowShap.name())?,
                    row_interactions: function(Kernel::RowInteractionPairs.name())?,
                    multiprocessors,
                })
            };
            load().map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|why| Error::Unsupported(why.clone()))
}

/// Makes device 0's CUDA context and compiles the kernels now, on the calling thread, unless
/// this process has done it already (it is done once; every engine shares them).
pub fn prepare() -> Result<()> {
    kernels().map(|_| ())
}

/// The model's paths on the device, and the per-batch buffers reused across batches.
struct DeviceModel {
    lane_ints: CudaSlice<i32>,
    lane_reals: CudaSlice<f64>,
    bin_len: CudaSlice<i32>,
    thresholds: CudaSlice<f64>,
    split_ints: CudaSlice<u32>,
    categories: CudaSlice<u32>,
    long: DevicePaths,
    rows: DevicePaths,
    x: Option<CudaSlice<f64>>,
    out: Option<CudaSlice<f64>>,
}

/// The quadrature kernels' paths on the device (`PathProgram::long`, or `PathProgram::rows`
/// with the row kernels' tables).
struct DevicePaths {
    path_ints: CudaSlice<i32>,
    path_values: CudaSlice<f64>,
    element_ints: CudaSlice<i32>,
    element_zero: CudaSlice<f64>,
    quadrature: CudaSlice<f64>,
    tails: CudaSlice<f64>,
    element_scales: CudaSlice<f64>,
}

impl DevicePaths {
    fn upload(stream: &Arc<CudaStream>, paths: &super::quadrature::LongPaths) -> Result<Self> {
        Ok(DevicePaths {
            path_ints: upload(stream, &paths.path_ints)?,
            path_values: upload(stream, &paths.path_values)?,
            element_ints: upload(stream, &paths.element_ints)?,
            element_zero: upload(stream, &paths.element_zero)?,
            quadrature: upload(stream, &paths.quadrature)?,
            tails: upload(stream, &paths.tails)?,
            element_scales: upload(stream, &paths.element_scales)?,
        })
    }
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

/// Where the device's time went, summed over an engine's calls: measured with CUDA events on
/// the engine's stream, so each stage is the device's own time (the host's conversions and
/// allocations are not in it).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct StageTimes {
    /// Row batches copied to the device and the output cleared, in seconds.
    pub upload_s: f64,
    /// The kernels, in seconds.
    pub kernels_s: f64,
    /// Results copied back, in seconds.
    pub download_s: f64,
    /// Kernel launches.
    pub launches: usize,
    /// Rows computed (a row counted once per output kind asked for).
    pub rows: usize,
}

/// Exact SHAP values and interactions on an NVIDIA GPU.
pub struct GpuEngine {
    model: Arc<Model>,
    program: PathProgram,
    device: Mutex<DeviceModel>,
    times: Mutex<StageTimes>,
    /// [`DeviceLimits::row_block_layouts`] for this engine's plans.
    row_block_layouts: bool,
}

impl GpuEngine {
    /// Extracts the model's paths, packs those that fit a warp, and uploads them. `None` (with
    /// a log line saying why) when a tree is deeper than the engines' recursion bound: the
    /// caller uses the CPU. An error when there is no usable GPU.
    pub fn new(model: Arc<Model>) -> Result<Option<Self>> {
        GpuEngine::with_layout(model, PathLayout::Warps { max_len: WARP_LANES })
    }

    /// As [`GpuEngine::new`], with the short paths on `layout`'s kernels: for comparing the
    /// kernels (`PathLayout::Warps { max_len: 0 }` puts every path on the quadrature kernel).
    pub fn with_layout(model: Arc<Model>, layout: PathLayout) -> Result<Option<Self>> {
        let kernels = kernels()?;
        let Some(program) = PathProgram::with_layout(model.clone(), layout)? else { return Ok(None) };
        let s = &kernels.stream;
        // cudarc binds the context before each call as well; binding first tells a thread
        // without the context apart from a failing copy.
        s.context().bind_to_thread().map_err(gpu_error("make the CUDA context current"))?;
        let device = DeviceModel {
            lane_ints: upload(s, &program.lane_ints)?,
            lane_reals: upload(s, &program.lane_reals)?,
            bin_len: upload(s, &program.bin_len)?,
            thresholds: upload(s, &program.split_thresholds)?,
            split_ints: upload(s, &program.split_ints)?,
            categories: upload(s, &program.categories)?,
            long: DevicePaths::upload(s, &program.long)?,
            rows: DevicePaths::upload(s, &program.rows)?,
            x: None,
            out: None,
        };
        tracing::info!(warps = program.bins, row_paths = program.rows.count, long_paths = program.long.count, "GPU engine: model uploaded");
        Ok(Some(GpuEngine { model, program, device: Mutex::new(device), times: Mutex::new(StageTimes::default()), row_block_layouts: true }))
    }

    /// This engine with the row kernels' block layouts (the default: see
    /// [`DeviceLimits::row_block_layouts`]) or without them (rows read from the batch, sums too
    /// wide for shared memory added to the output): for measuring what they gain (`gpu_bench`).
    pub fn row_block_layouts(mut self, on: bool) -> Self {
        self.row_block_layouts = on;
        self
    }

    /// Runs the planned launches over some rows on the device: the rows up, each kernel into
    /// one zeroed output, the sums down.
    fn launch(&self, call: &KernelCall) -> Result<Vec<f64>> {
        let kernels = kernels()?;
        let (n, width) = (call.plan.rows, call.width);
        let stream = &kernels.stream;
        stream.context().bind_to_thread().map_err(gpu_error("make the CUDA context current"))?;
        let mut device = self.device.lock().unwrap_or_else(|p| p.into_inner());
        let device = &mut *device;
        // Timing events on the stream: the device's own time for each stage (about a
        // microsecond each to record; see `take_stage_times`).
        let event = |what| stream.record_event(Some(cudarc::driver::sys::CUevent_flags::CU_EVENT_DEFAULT)).map_err(gpu_error(what));
        let x = buffer(stream, &mut device.x, call.x.len())?;
        let started = event("record a timing event")?;
        if !call.x.is_empty() {
            stream.memcpy_htod(call.x, &mut x.slice_mut(0..call.x.len())).map_err(gpu_error("copy rows to the device"))?;
        }
        // The output, and after it the regions some launches' blocks gather in (each block
        // clears its own).
        let out = buffer(stream, &mut device.out, call.plan.buffer_values(width))?;
        stream.memset_zeros(&mut out.slice_mut(0..n * width)).map_err(gpu_error("clear the output"))?;
        let uploaded = event("record a timing event")?;
        let program = call.program;
        let (rows_i64, cols, groups) = (n as i64, program.features as i32, program.groups as i32);
        for plan in &call.plan.launches {
            let config =
                LaunchConfig { grid_dim: (plan.grid.0, plan.grid.1, 1), block_dim: (plan.block_threads, 1, 1), shared_mem_bytes: plan.shared_bytes };
            let units = plan.kernel.units(program) as i32;
            let (rpb, use_shared) = (plan.rows_per_block as i32, plan.shared_mode());
            let mut launch = stream.launch_builder(kernels.function(plan.kernel));
            if plan.kernel.is_quadrature() || plan.kernel.is_rows() {
                let paths = if plan.kernel.is_rows() { &device.rows } else { &device.long };
                launch.arg(&paths.path_ints).arg(&paths.path_values).arg(&paths.element_ints).arg(&paths.element_zero).arg(&paths.quadrature);
                if plan.kernel.is_rows() {
                    launch.arg(&paths.tails).arg(&paths.element_scales);
                }
            } else {
                launch.arg(&device.lane_ints).arg(&device.lane_reals).arg(&device.bin_len);
            }
            launch
                .arg(&units)
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
            // SAFETY: the argument list matches the kernel's signature in kernels/treeshap.cu
            // (the warp, row and quadrature kernels differ only in their path arrays), and every
            // buffer holds what the kernel reads or writes for `n` rows.
            unsafe { launch.launch(config) }.map_err(gpu_error("launch the kernel"))?;
        }
        let computed = event("record a timing event")?;
        let mut values = vec![0.0; n * width];
        stream.memcpy_dtoh(&out.slice(0..n * width), &mut values).map_err(gpu_error("copy results back"))?;
        let downloaded = event("record a timing event")?;
        stream.synchronize().map_err(gpu_error("run the kernel"))?;
        let seconds =
            |from: &cudarc::driver::CudaEvent, to| from.elapsed_ms(to).map(|ms| f64::from(ms) / 1e3).map_err(gpu_error("read a timing event"));
        let mut times = self.times.lock().unwrap_or_else(|p| p.into_inner());
        times.upload_s += seconds(&started, &uploaded)?;
        times.kernels_s += seconds(&uploaded, &computed)?;
        times.download_s += seconds(&computed, &downloaded)?;
        times.launches += call.plan.launches.len();
        times.rows += n;
        Ok(values)
    }

    /// The device's time per stage over every call since the engine was made or the times were
    /// last taken; taking them resets them.
    pub fn take_stage_times(&self) -> StageTimes {
        std::mem::take(&mut *self.times.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The launch plan this engine uses for `rows` rows of `output` (for reports: the kernels,
    /// grids and rows per launch).
    pub fn plan(&self, rows: usize, output: Output) -> Result<Vec<RowLaunches>> {
        let width = output.width(self.program.features, self.program.groups);
        let units = output.kernels().map(|k| (k, k.units(&self.program)));
        Ok(plan_launches(rows, width, self.program.features, &units, &self.limits()?))
    }

    fn limits(&self) -> Result<DeviceLimits> {
        Ok(DeviceLimits { row_block_layouts: self.row_block_layouts, ..DeviceLimits::new(kernels()?.multiprocessors) })
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
        check_block(&self.model, block)?;
        shap_values(&self.program, block, &self.limits()?, &mut |call| self.launch(call))
    }

    fn interactions(&self, block: &FeatureBlock) -> Result<Interactions> {
        check_block(&self.model, block)?;
        interaction_values(&self.program, block, &self.limits()?, &mut |call| self.launch(call))
    }
}
