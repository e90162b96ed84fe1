//! The NVIDIA GPU engine. The CUDA driver and NVRTC are loaded at run time (cudarc's dynamic
//! loading), so this builds and runs on machines without CUDA; [`probe`] says what is there.
//!
//! * `paths`: GPUTreeShap's preprocessing on the CPU (path extraction, merging, bin packing);
//! * `warps`: [`PathProgram`], the paths as the kernels' flat arrays (short paths packed in
//!   warps, or for the row kernels), and a lane-by-lane CPU simulation of the warp kernels;
//! * `quadrature`: the quadrature kernels' path layout (long paths; the row kernels' paths) and
//!   their Gauss-Legendre rules;
//! * [`launch`]: the launch plan and the host steps around launches, shared by the engine and
//!   the CPU emulation of the CUDA source (`tests/gpu_emulation.rs`);
//! * `engine`: [`GpuEngine`], which compiles `kernels/treeshap.cu` with NVRTC and runs it.

mod engine;
pub mod launch;
mod paths;
mod quadrature;
mod warps;

pub use engine::{compile_kernels, prepare, GpuEngine, StageTimes, KERNEL_SOURCE};
pub use quadrature::{LongPaths, LONG_ELEMENT_INTS, LONG_PATH_INTS, LONG_PATH_MAX_ELEMENTS};
pub use warps::{PathLayout, PathProgram, IDLE_LANE, LANE_INTS, LANE_REALS, ROOT_LANE, SPLIT_INTS};

/// What the GPU probe found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuInfo {
    /// Name of device 0.
    pub name: String,
    /// Number of CUDA devices.
    pub devices: usize,
}

/// Whether NVRTC, the CUDA run-time compiler, can be loaded (no GPU or driver needed): what
/// compiling the kernels takes.
pub fn nvrtc_present() -> bool {
    // SAFETY: only tries to load the library and reports whether it could.
    unsafe { cudarc::nvrtc::sys::is_culib_present() }
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

/// The kernels' arithmetic without a GPU: every fixture's paths extracted, merged and packed,
/// and the kernels' steps simulated lane by lane, equal to the exact engine.
// The fixtures are read from Parquet.
#[cfg(test)]
mod tests {
    use super::launch::{interaction_values, shap_values, DeviceLimits};
    use super::paths::{extract, pack, WARP_LANES};
    use super::warps::{PathProgram, IDLE_LANE, LANE_INTS};
    use crate::engine::{build_engine, Algorithm, EngineOptions};
    use crate::test_fixtures::{fixtures, max_row_rel_error, Fixture};

    #[test]
    fn every_leaf_is_one_merged_path_and_every_path_is_packed_once() {
        for f in &fixtures() {
            let set = extract(f.model.clone()).unwrap();
            // One path per leaf a path reaches (pruned XGBoost nodes stay in the arrays, reached
            // by none); each feature at most once per path; root first.
            let leaves: usize = f.model.trees().iter().map(|t| t.num_leaves()).sum();
            assert_eq!(set.paths.len(), leaves, "{}", f.name);
            for p in &set.paths {
                assert!(p.elements[0].feature.is_none());
                let mut features: Vec<u32> = p.elements[1..].iter().map(|e| e.feature.unwrap()).collect();
                let n = features.len();
                features.sort();
                features.dedup();
                assert_eq!(features.len(), n, "{}: a feature repeated on a merged path", f.name);
            }
            let bins = pack(&set.lengths(), WARP_LANES).unwrap();
            let mut packed: Vec<usize> = bins.iter().flatten().copied().collect();
            packed.sort();
            assert_eq!(packed, (0..set.paths.len()).collect::<Vec<_>>(), "{}: every path packed once", f.name);
            let lens = set.lengths();
            for b in &bins {
                assert!(b.iter().map(|&p| lens[p]).sum::<usize>() <= WARP_LANES, "{}: a bin over 32 lanes", f.name);
            }
        }
    }

    /// Interaction values of the exact engine, for comparison.
    fn exact_interactions(f: &Fixture) -> Vec<f64> {
        build_engine(f.model.clone(), Algorithm::TreeShap, None, &EngineOptions::default()).unwrap().interactions(&f.block).unwrap().values
    }

    fn warp_program(f: &Fixture) -> PathProgram {
        PathProgram::for_model(f.model.clone()).unwrap().expect("every fixture's paths fit a warp")
    }

    #[test]
    fn the_kernels_steps_simulated_lane_by_lane_give_the_exact_shap_values() {
        for f in &fixtures() {
            let program = warp_program(f);
            // Every element in one lane; idle lanes fill the rest of each warp.
            let lanes = program.lane_ints.chunks(LANE_INTS).filter(|l| l[0] != IDLE_LANE).count();
            assert_eq!(lanes, extract(f.model.clone()).unwrap().lengths().iter().sum::<usize>(), "{}", f.name);
            let block = &f.block;
            let got = shap_values(&program, block, &DeviceLimits::new(132), &mut |call| program.simulate(call)).unwrap();
            let exact = build_engine(f.model.clone(), Algorithm::TreeShap, None, &EngineOptions::default()).unwrap().shap(block).unwrap();
            let (err, row) = max_row_rel_error(&got.values, &exact.values, f.model.num_groups() * (f.model.num_features() + 1));
            assert!(err <= 1e-9, "{}: row {row} differs from treeshap by {err:e} of max|phi|", f.name);
        }
    }

    #[test]
    fn the_interaction_kernels_steps_simulated_lane_by_lane_give_the_exact_interactions() {
        for f in &fixtures() {
            let program = warp_program(f);
            let block = &f.block;
            let w = f.model.num_groups() * (f.model.num_features() + 1).pow(2);
            let got = interaction_values(&program, block, &DeviceLimits::new(132), &mut |call| program.simulate(call)).unwrap();
            let (err, row) = max_row_rel_error(&got.values, &exact_interactions(f), w);
            assert!(err <= 1e-9, "{}: row {row} differs from treeshap's interactions by {err:e}", f.name);
        }
    }

    #[test]
    fn probing_never_panics_and_explains_a_missing_gpu() {
        match super::probe() {
            Ok(info) => assert!(info.devices >= 1 && !info.name.is_empty()),
            Err(why) => assert!(why.contains("CUDA") || why.contains("NVRTC"), "{why}"),
        }
    }
}
