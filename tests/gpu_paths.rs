//! The GPU engine. Without a GPU: paths extracted and merged, packed into warps, the kernels'
//! steps simulated lane by lane equal to the exact engine, the CUDA source compiled by NVRTC.
//! With one: the kernels' output equal to the exact engine.

mod common;

use common::{fixtures, max_row_rel_error};
use shapfusion::engine::{build_explainer, Algorithm, EngineOptions};
use shapfusion::engine::Explainer;
use shapfusion::gpu::paths::{extract, pack, WARP_LANES};
use shapfusion::gpu::warps::{WarpProgram, IDLE_LANE, LANE_INTS};
use shapfusion::gpu::GpuExplainer;

#[test]
fn every_leaf_is_one_merged_path_and_every_path_is_packed_once() {
    for f in fixtures() {
        let set = extract(f.model.clone()).unwrap();
        // One path per leaf; each feature at most once per path; root first.
        let leaves: usize = f.model.trees.iter().map(|t| t.nodes.iter().filter(|n| n.is_leaf()).count()).sum();
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
fn exact_interactions(f: &common::Fixture) -> Vec<f64> {
    build_explainer(f.model.clone(), Algorithm::TreeShap, None, &EngineOptions::default()).unwrap().interactions(&f.block()).unwrap().values
}

fn warp_program(f: &common::Fixture) -> WarpProgram {
    let set = extract(f.model.clone()).unwrap();
    let bins = pack(&set.lengths(), WARP_LANES).unwrap();
    WarpProgram::new(&set, &bins)
}

#[test]
fn the_kernels_steps_simulated_lane_by_lane_give_the_exact_shap_values() {
    for f in fixtures() {
        let program = warp_program(&f);
        // Every element in one lane; idle lanes fill the rest of each warp.
        let lanes = program.lane_ints.chunks(LANE_INTS).filter(|l| l[0] != IDLE_LANE).count();
        assert_eq!(lanes, extract(f.model.clone()).unwrap().lengths().iter().sum::<usize>(), "{}", f.name);
        let block = f.block();
        let got = program.simulate_shap(&block);
        let exact = build_explainer(f.model.clone(), Algorithm::TreeShap, None, &EngineOptions::default()).unwrap().shap(&block).unwrap();
        let (err, row) = max_row_rel_error(&got.values, &exact.values, f.model.num_groups * (f.model.num_features() + 1));
        assert!(err <= 1e-9, "{}: row {row} differs from treeshap by {err:e} of max|phi|", f.name);
    }
}

#[test]
fn the_interaction_kernels_steps_simulated_lane_by_lane_give_the_exact_interactions() {
    for f in fixtures() {
        let program = warp_program(&f);
        let block = f.block();
        let (nf, g) = (f.model.num_features(), f.model.num_groups);
        let mut got = program.simulate_interaction_pairs(&block);
        let shap = program.simulate_shap(&block);
        let (w, sw) = (g * (nf + 1) * (nf + 1), g * (nf + 1));
        for (r, out) in got.values.chunks_mut(w).enumerate() {
            shapfusion::engine::finish_interaction_row(out, &shap.values[r * sw..(r + 1) * sw], nf, g);
        }
        let (err, row) = max_row_rel_error(&got.values, &exact_interactions(&f), w);
        assert!(err <= 1e-9, "{}: row {row} differs from treeshap's interactions by {err:e}", f.name);
    }
}

/// The CUDA source compiles with NVRTC (no GPU needed, only libnvrtc). CI installs NVRTC from
/// PyPI and sets SHAPFUSION_REQUIRE_NVRTC=1 so that this cannot pass by skipping.
#[test]
fn the_kernels_compile_with_nvrtc() {
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        assert!(std::env::var_os("SHAPFUSION_REQUIRE_NVRTC").is_none(), "SHAPFUSION_REQUIRE_NVRTC is set but libnvrtc cannot be loaded (LD_LIBRARY_PATH?)");
        eprintln!("skipped: no NVRTC library on this machine");
        return;
    }
    for (major, minor) in [(8, 0), (9, 0)] {
        let ptx = shapfusion::gpu::compile_kernels(major, minor).unwrap_or_else(|e| panic!("sm_{major}{minor}: {e}"));
        let text = ptx.to_src();
        for kernel in ["shap_kernel", "interactions_kernel"] {
            assert!(text.contains(&format!(".entry {kernel}")), "sm_{major}{minor}: no {kernel} in the PTX");
        }
        // Warp shuffles are what the kernels are built on: they must be in the PTX.
        assert!(text.contains("shfl.sync"), "sm_{major}{minor}: no warp shuffles in the PTX");
    }
}

/// The GPU engine against the exact engine on every fixture, SHAP values and interactions.
/// Runs only where a GPU is usable (benchmarks/gpu.sh runs it with SHAPFUSION_REQUIRE_GPU=1,
/// which turns a missing GPU into a failure).
#[test]
fn the_gpu_engine_matches_the_exact_engine_on_every_fixture() {
    if let Err(why) = shapfusion::gpu::probe() {
        assert!(std::env::var_os("SHAPFUSION_REQUIRE_GPU").is_none(), "SHAPFUSION_REQUIRE_GPU is set but: {why}");
        eprintln!("skipped: {why}");
        return;
    }
    for f in fixtures() {
        let Some(gpu) = GpuExplainer::new(f.model.clone()).unwrap() else { continue };
        let block = f.block();
        let exact = build_explainer(f.model.clone(), Algorithm::TreeShap, None, &EngineOptions::default()).unwrap();
        let width = f.model.num_groups * (f.model.num_features() + 1);
        let (err, row) = max_row_rel_error(&gpu.shap(&block).unwrap().values, &exact.shap(&block).unwrap().values, width);
        assert!(err <= 1e-5, "{}: GPU SHAP row {row} off by {err:e} of max|phi|", f.name);
        let (err, row) = max_row_rel_error(&gpu.interactions(&block).unwrap().values, &exact.interactions(&block).unwrap().values, width * (f.model.num_features() + 1));
        assert!(err <= 1e-5, "{}: GPU interactions row {row} off by {err:e}", f.name);
    }
}
