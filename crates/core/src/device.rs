//! Where attributions are computed: the CPU engines of [`crate::engine`] or the GPU engine,
//! and `auto`'s choice between them (a probe for the CUDA driver, NVRTC and a device, said
//! once in the log). This layer sits above both, so neither engine layer knows of the other.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use crate::engine::{
    build_engine, build_interventional, build_rescaled_interventional, Algorithm, Engine, EngineOptions, FeatureBlock, Index, OutputTransform,
};
use crate::error::{Error, Result};
use crate::model::Model;

/// Where attributions are computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Device {
    /// The GPU when one can be used, else the CPU (said once in the log); interaction values
    /// stay on the CPU, where they were faster on the first GPU measured.
    #[default]
    Auto,
    /// All CPU cores.
    Cpu,
    /// An NVIDIA GPU; an error when none can be used.
    Gpu,
}

impl Device {
    /// All names, in the order help texts list them.
    pub const NAMES: &'static [&'static str] = &["auto", "cpu", "gpu"];

    /// The name used on the command line and in SQL options.
    pub fn name(&self) -> &'static str {
        match self {
            Device::Auto => "auto",
            Device::Cpu => "cpu",
            Device::Gpu => "gpu",
        }
    }

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
            Device::Gpu => gpu_status()
                .map(|_| Device::Gpu)
                .map_err(|why| Error::Unsupported(format!("device gpu was asked for, but {why}; ask for device cpu or auto instead"))),
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

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Device {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "auto" => Ok(Device::Auto),
            "cpu" => Ok(Device::Cpu),
            "gpu" => Ok(Device::Gpu),
            other => Err(Error::InvalidArgument(format!("unknown device {other:?}; expected one of {}", Device::NAMES.join(", ")))),
        }
    }
}

/// Builds the engine for `model` on `device`: the GPU engine when the device resolves to the
/// GPU and the model fits it, else the CPU engine named by `algorithm` (`rows_hint` as in
/// [`build_engine`]). An explicit `gpu` that cannot be honoured is an error; with `auto`, a
/// GPU engine that fails to start, or a named CPU algorithm, keeps the work on the CPU.
pub fn engine_on(
    device: Device,
    model: Arc<Model>,
    algorithm: Algorithm,
    rows_hint: Option<usize>,
    options: &EngineOptions,
) -> Result<Arc<dyn Engine>> {
    model.refuse_linear_leaves("path-dependent SHAP (no background)")?;
    if device == Device::Gpu {
        // The kernels credit a split to the column it reads; a combination's column is no one
        // feature's. (With `auto` such a model stays on the CPU: the GPU's path program declines
        // it.)
        model.refuse_combinations("the GPU engine")?;
    }
    // One decision, the index's included: Banzhaf values never reach the GPU engine.
    if device_for(device, algorithm, options.index)? == Device::Gpu {
        if let Some(gpu) = gpu_engine(device, &model)? {
            if device == Device::Auto {
                let cpu = build_engine(model, algorithm, rows_hint, options)?;
                return Ok(Arc::new(ShapOnGpu { gpu, cpu }));
            }
            return Ok(gpu);
        }
    }
    build_engine(model, algorithm, rows_hint, options)
}

/// Readies the GPU on the calling thread when `device` will compute there with `algorithm` and
/// `index`: the CUDA context and the kernels are made once a process. The wheel's first run on
/// a GPU failed its first upload with "invalid device context" when they were made on a
/// compute-pool thread; made on the caller's thread and used from the pool's, as `gpu_bench`'s
/// end-to-end run did there, they ran (benchmarks/RESULTS.md, GPU section).
pub(crate) fn prepare_gpu(device: Device, algorithm: Algorithm, index: Index) {
    #[cfg(feature = "gpu")]
    if matches!(device_for(device, algorithm, index), Ok(Device::Gpu)) {
        // A failure here is the engine's to report when it starts (with `auto`'s fallback).
        let _ = crate::gpu::prepare();
    }
    #[cfg(not(feature = "gpu"))]
    let _ = (device, algorithm, index);
}

/// What `auto` computes with when a GPU is usable: SHAP values on the GPU engine, interaction
/// values on the CPU engine. The first run on a GPU (an H200 against its host's 16 cores,
/// benchmarks/RESULTS.md, GPU section) computed SHAP values of the medium models 1.1–2.4x as
/// fast as the CPU, but interaction values only 0.1–0.6x as fast; until the GPU's interaction
/// kernel is faster, `auto` keeps them on the CPU. `gpu` runs both on the GPU.
struct ShapOnGpu {
    gpu: Arc<dyn Engine>,
    cpu: Arc<dyn Engine>,
}

impl Engine for ShapOnGpu {
    fn name(&self) -> &'static str {
        self.gpu.name()
    }

    fn model(&self) -> &Model {
        self.gpu.model()
    }

    fn shap(&self, block: &FeatureBlock) -> Result<crate::engine::Attributions> {
        self.gpu.shap(block)
    }

    fn interactions(&self, block: &FeatureBlock) -> Result<crate::engine::Interactions> {
        self.cpu.interactions(block)
    }

    fn memory_bytes(&self) -> Option<usize> {
        self.cpu.memory_bytes()
    }
}

/// The device that computes `index`'s values with `algorithm` when `device` is asked for (see
/// [`Device::for_algorithm`]): Banzhaf values are the CPU's (`linear`), so `auto` stays there
/// and `gpu` is refused.
pub(crate) fn device_for(device: Device, algorithm: Algorithm, index: Index) -> Result<Device> {
    match (index, device) {
        (Index::Shapley, _) => device.for_algorithm(algorithm),
        (_, Device::Gpu) => {
            Err(Error::Unsupported(format!("the GPU engine computes Shapley values only; {index} values run on the CPU (device cpu or auto)")))
        }
        _ => Ok(Device::Cpu),
    }
}

/// The interventional engine over `background` (see [`build_interventional`]) for `device`,
/// of the margin or of `transform` of it (see [`build_rescaled_interventional`]): it runs on
/// the CPU only, so `gpu` is refused and `auto` stays on the CPU.
pub(crate) fn interventional_on(
    device: Device,
    model: Arc<Model>,
    background: &FeatureBlock,
    algorithm: Algorithm,
    transform: OutputTransform,
    options: &EngineOptions,
) -> Result<Arc<dyn Engine>> {
    if device == Device::Gpu {
        return Err(Error::Unsupported("interventional SHAP (with a background) runs on the CPU only; ask for device cpu or auto".into()));
    }
    match transform {
        OutputTransform::Identity => build_interventional(model, background, algorithm, options),
        _ if algorithm != Algorithm::Auto => Err(Error::InvalidArgument(format!(
            "interventional SHAP of the {transform} output has one engine, auto (shap's per-reference rescaling); {algorithm} computes the margin's values"
        ))),
        _ => build_rescaled_interventional(model, background, transform, options),
    }
}

/// The GPU engine, once [`device_for`] chose the GPU for the `device` asked for, when the
/// model fits it; `None` means compute on the CPU (with `auto`, also when the engine fails to
/// start).
fn gpu_engine(device: Device, model: &Arc<Model>) -> Result<Option<Arc<dyn Engine>>> {
    #[cfg(feature = "gpu")]
    {
        match crate::gpu::GpuEngine::new(model.clone()) {
            Ok(engine) => Ok(engine.map(|e| Arc::new(e) as Arc<dyn Engine>)),
            Err(e) if device == Device::Auto => {
                tracing::warn!("GPU engine failed, computing on the CPU: {e}");
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
    #[cfg(not(feature = "gpu"))]
    {
        let _ = (device, model);
        Ok(None)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_unknown_ones_list_the_choices() {
        for name in Device::NAMES {
            assert_eq!(name.parse::<Device>().unwrap().name(), *name);
        }
        let e = "tpu".parse::<Device>().unwrap_err().to_string();
        assert!(e.contains("auto, cpu, gpu"), "{e}");
    }

    /// An engine whose every value is `mark`, so a test sees which engine answered.
    struct Marked(Arc<Model>, f64, &'static str);

    impl Engine for Marked {
        fn name(&self) -> &'static str {
            self.2
        }
        fn model(&self) -> &Model {
            &self.0
        }
        fn shap(&self, block: &FeatureBlock) -> Result<crate::engine::Attributions> {
            let (g, f) = (self.0.num_groups(), self.0.num_features());
            Ok(crate::engine::Attributions { rows: block.rows(), groups: g, features: f, values: vec![self.1; block.rows() * g * (f + 1)] })
        }
        fn interactions(&self, block: &FeatureBlock) -> Result<crate::engine::Interactions> {
            let (g, f) = (self.0.num_groups(), self.0.num_features());
            Ok(crate::engine::Interactions { rows: block.rows(), groups: g, features: f, values: vec![self.1; block.rows() * g * (f + 1) * (f + 1)] })
        }
    }

    #[test]
    fn auto_on_a_gpu_computes_shap_values_there_and_interactions_on_the_cpu() {
        let f = &crate::test_fixtures::fixtures()[0];
        let split = ShapOnGpu { gpu: Arc::new(Marked(f.model.clone(), 1.0, "gpu")), cpu: Arc::new(Marked(f.model.clone(), 2.0, "linear")) };
        assert_eq!(split.name(), "gpu");
        assert!(split.shap(&f.block).unwrap().values.iter().all(|&v| v == 1.0));
        assert!(split.interactions(&f.block).unwrap().values.iter().all(|&v| v == 2.0));
    }

    #[test]
    fn a_named_cpu_algorithm_keeps_auto_on_the_cpu() {
        assert_eq!(Device::Auto.for_algorithm(Algorithm::Linear).unwrap(), Device::Cpu);
        assert_eq!(Device::Cpu.for_algorithm(Algorithm::Auto).unwrap(), Device::Cpu);
    }
}
