//! The GPU engine through its public API: the CUDA source compiled by NVRTC (no GPU needed), and
//! where a GPU is usable, its output equal to the exact engine's. The path extraction, warp
//! packing and the lane-by-lane simulation of the kernels are unit tests in `src/gpu/`.

mod common;

use common::random::{random_rows, spine_model, Rng};
use common::{fixtures, max_row_rel_error};
use shapfusion::engine::Engine;
use shapfusion::engine::{build_engine, Algorithm, EngineOptions};
use shapfusion::gpu::launch::Output;
use shapfusion::gpu::{GpuEngine, PathLayout};

/// The CUDA source compiles with NVRTC (no GPU needed, only libnvrtc). CI installs NVRTC from
/// PyPI and sets SHAPFUSION_REQUIRE_NVRTC=1 so that this cannot pass by skipping.
#[test]
fn the_kernels_compile_with_nvrtc() {
    if !shapfusion::gpu::nvrtc_present() {
        assert!(
            std::env::var_os("SHAPFUSION_REQUIRE_NVRTC").is_none(),
            "SHAPFUSION_REQUIRE_NVRTC is set but libnvrtc cannot be loaded (LD_LIBRARY_PATH?)"
        );
        eprintln!("skipped: no NVRTC library on this machine");
        return;
    }
    for (major, minor) in [(8, 0), (9, 0)] {
        let ptx = shapfusion::gpu::compile_kernels(major, minor).unwrap_or_else(|e| panic!("sm_{major}{minor}: {e}"));
        let text = ptx.to_src();
        for output in [Output::Shap, Output::InteractionPairs] {
            for kernel in output.kernels().map(|k| k.name()) {
                assert!(text.contains(&format!(".entry {kernel}")), "sm_{major}{minor}: no {kernel} in the PTX");
            }
        }
        // Warp shuffles are what the kernels are built on: they must be in the PTX.
        assert!(text.contains("shfl.sync"), "sm_{major}{minor}: no warp shuffles in the PTX");
    }
}

/// The GPU engine against the exact engine on every fixture and on deep random ensembles (paths
/// longer than a warp), SHAP values and interactions, with the default split of paths between
/// the kernels, with every path on the quadrature kernel, and with the row kernels. Runs only where a GPU is usable
/// (benchmarks/gpu.sh runs it with SHAPFUSION_REQUIRE_GPU=1, which turns a missing GPU into a
/// failure).
#[test]
fn the_gpu_engine_matches_the_exact_engine_on_every_fixture() {
    if let Err(why) = shapfusion::gpu::probe() {
        assert!(std::env::var_os("SHAPFUSION_REQUIRE_GPU").is_none(), "SHAPFUSION_REQUIRE_GPU is set but: {why}");
        eprintln!("skipped: {why}");
        return;
    }
    let mut cases: Vec<(String, std::sync::Arc<shapfusion::model::Model>, shapfusion::engine::FeatureBlock)> =
        fixtures().into_iter().map(|f| (f.name.clone(), f.model.clone(), f.block())).collect();
    for depth in [24, 40] {
        let mut rng = Rng(depth as u64);
        let model = std::sync::Arc::new(spine_model(&mut rng, 5 * depth, 3, depth, 1));
        let block = random_rows(&mut rng, &model, 50);
        cases.push((format!("depth-{depth} random ensemble"), model, block));
    }
    // The kernels compute in float64 like the CPU engines: only the order of the sums differs
    // (atomics), so they agree far below 1e-9 (the first GPU run: at most 1.7e-14 on the
    // suite's models, benchmarks/RESULTS.md).
    let mut worst = 0.0f64;
    for (name, model, block) in cases {
        let exact = build_engine(model.clone(), Algorithm::TreeShap, None, &EngineOptions::default()).unwrap();
        let width = model.num_groups() * (model.num_features() + 1);
        for layout in [PathLayout::Warps { max_len: 32 }, PathLayout::Warps { max_len: 0 }, PathLayout::Rows] {
            let Some(gpu) = GpuEngine::with_layout(model.clone(), layout).unwrap() else { continue };
            let (err, row) = max_row_rel_error(&gpu.shap(&block).unwrap().values, &exact.shap(&block).unwrap().values, width);
            assert!(err <= 1e-9, "{name} ({layout:?}): GPU SHAP row {row} off by {err:e} of max|phi|");
            worst = worst.max(err);
            let (err, row) = max_row_rel_error(
                &gpu.interactions(&block).unwrap().values,
                &exact.interactions(&block).unwrap().values,
                width * (model.num_features() + 1),
            );
            assert!(err <= 1e-9, "{name} ({layout:?}): GPU interactions row {row} off by {err:e}");
            worst = worst.max(err);
        }
    }
    eprintln!("largest difference from the exact engine, of a row's max|phi|: {worst:.1e}");
}
