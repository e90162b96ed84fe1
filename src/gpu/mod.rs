//! The NVIDIA GPU engine. The CUDA driver and NVRTC are loaded at run time (cudarc's dynamic
//! loading), so this builds and runs on machines without CUDA; [`probe`] says what is there.
//!
//! * [`paths`]: GPUTreeShap's preprocessing on the CPU (path extraction, merging, bin packing);
//! * [`warps`]: the packed paths as the kernels' flat arrays, and a lane-by-lane CPU simulation
//!   of the kernels, so their arithmetic is tested without a GPU;
//! * [`engine`]: [`GpuExplainer`], which compiles `kernels/treeshap.cu` with NVRTC and runs it.

pub mod engine;
pub mod paths;
pub mod warps;

pub use engine::{compile_kernels, GpuExplainer, KERNEL_SOURCE};

/// What the GPU probe found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuInfo {
    /// Name of device 0.
    pub name: String,
    /// Number of CUDA devices.
    pub devices: usize,
}

/// Looks for the CUDA driver library, NVRTC and a device, in that order; the error names the
/// first thing missing. Never panics (cudarc panics on use when a library is absent, so the
/// libraries are checked before any call).
pub fn probe() -> Result<GpuInfo, String> {
    // SAFETY: these only try to dlopen the library by its usual names.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err("no CUDA driver library (libcuda.so) could be loaded: is the NVIDIA driver installed, and visible to this process?".into());
    }
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err("no NVRTC library (libnvrtc.so) could be loaded: install the CUDA toolkit's NVRTC or add it to LD_LIBRARY_PATH".into());
    }
    use cudarc::driver::result;
    result::init().map_err(|e| format!("the CUDA driver did not initialise: {e}"))?;
    let devices = result::device::get_count().map_err(|e| format!("cannot count CUDA devices: {e}"))?;
    if devices < 1 {
        return Err("the CUDA driver reports no devices".into());
    }
    let device = result::device::get(0).map_err(|e| format!("cannot open CUDA device 0: {e}"))?;
    let name = result::device::get_name(device).map_err(|e| format!("cannot read CUDA device 0's name: {e}"))?;
    Ok(GpuInfo { name, devices: devices as usize })
}

#[cfg(test)]
mod tests {
    #[test]
    fn probing_never_panics_and_explains_a_missing_gpu() {
        match super::probe() {
            Ok(info) => assert!(info.devices >= 1 && !info.name.is_empty()),
            Err(why) => assert!(why.contains("CUDA") || why.contains("NVRTC"), "{why}"),
        }
    }
}
