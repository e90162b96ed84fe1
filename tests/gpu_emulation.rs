//! The CUDA kernels themselves, run on the CPU: `kernels/treeshap.cu` compiled unchanged as C++
//! against `tests/gpu_emulation/cuda_emulator.hpp` (CUDA's built-ins on fibers: warp shuffles
//! and ballots as barriers across a warp, `__syncthreads` across a block, shared memory poisoned
//! with NaN and guarded by a canary), driven with exactly the arrays and launch plans the GPU
//! engine uses (`shapfusion::gpu::launch`), and held to the exact engine within 1e-9: the warp
//! kernels, the quadrature kernels (every path, or the paths over a length), and deep random
//! ensembles whose paths do not fit a warp.
//!
//! Needs a C++20 compiler (`CXX`, else `c++`); without one the tests skip, unless
//! `SHAPFUSION_REQUIRE_CXX=1` (set by `.ci/run`) makes that a failure.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use common::random::{random_rows, spine_model, Rng};
use common::{fixtures, max_row_rel_error, Fixture};
use shapfusion::engine::{build_engine, Algorithm, EngineOptions};
use shapfusion::gpu::launch::{interaction_values, shap_values, DeviceLimits, Kernel, KernelCall, Launch};
use shapfusion::gpu::{PathLayout, PathProgram};
use shapfusion::{Error, Result};

const SOURCES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/gpu_emulation");

/// Compiles `tests/gpu_emulation/{name}.cpp` once per test process; `None` when there is no
/// C++ compiler (and it is not required).
fn compiled(name: &'static str) -> Option<PathBuf> {
    static BINARIES: OnceLock<std::sync::Mutex<std::collections::HashMap<&'static str, Option<PathBuf>>>> = OnceLock::new();
    let mut built = BINARIES.get_or_init(Default::default).lock().unwrap();
    built
        .entry(name)
        .or_insert_with(|| {
            let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
            let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("gpu_emulation_{name}"));
            let status = Command::new(&cxx).args(["-std=c++20", "-O2", "-o"]).arg(&out).arg(Path::new(SOURCES).join(format!("{name}.cpp"))).status();
            match status {
                Ok(s) if s.success() => Some(out),
                Ok(s) => panic!("{cxx} could not compile tests/gpu_emulation/{name}.cpp ({s})"),
                Err(e) => {
                    assert!(std::env::var_os("SHAPFUSION_REQUIRE_CXX").is_none(), "SHAPFUSION_REQUIRE_CXX is set but {cxx} cannot run: {e}");
                    eprintln!("skipped: no C++ compiler ({cxx}: {e})");
                    None
                }
            }
        })
        .clone()
}

/// How the emulator orders threads.
#[derive(Debug, Clone, Copy)]
enum Schedule {
    /// Every lane in turn.
    RoundRobin,
    /// Whole warps at a time, in a random order from this seed.
    RandomWarps(u64),
}

/// Runs the planned launches of `call` under the emulator, one driver run per kernel, and
/// adds their outputs (the device adds them into one buffer).
fn emulate(driver: &Path, call: &KernelCall, schedule: Schedule) -> Result<Vec<f64>> {
    let mut sums = vec![0.0; call.plan.rows * call.width];
    for launch in &call.plan.launches {
        let out = emulate_launch(driver, call, launch, schedule)?;
        sums.iter_mut().zip(out).for_each(|(s, v)| *s += v);
    }
    Ok(sums)
}

/// Runs one launch under the emulator: the engine's arrays in, the output back.
fn emulate_launch(driver: &Path, call: &KernelCall, l: &Launch, schedule: Schedule) -> Result<Vec<f64>> {
    let p: &PathProgram = call.program;
    let (kind, seed) = match schedule {
        Schedule::RoundRobin => (0i64, 0u64),
        Schedule::RandomWarps(seed) => (1, seed),
    };
    let kernel = match l.kernel {
        Kernel::Shap => 0,
        Kernel::InteractionPairs => 1,
        Kernel::QuadratureShap => 2,
        Kernel::QuadratureInteractionPairs => 3,
        Kernel::RowShap => 4,
        Kernel::RowInteractionPairs => 5,
    };
    // The output, and after it the region the launch's blocks gather in, if any.
    let out_len = call.plan.rows * call.width + l.scratch_values(call.width);
    let header: [i64; 16] = [
        kernel,
        l.grid.0 as i64,
        l.grid.1 as i64,
        l.block_threads as i64,
        l.shared_bytes as i64,
        l.rows_per_block as i64,
        i64::from(l.shared_mode()),
        l.kernel.units(p) as i64,
        call.plan.rows as i64,
        p.features as i64,
        p.groups as i64,
        kind,
        seed as i64,
        out_len as i64,
        (call.plan.rows * call.width) as i64,
        0,
    ];
    let mut bytes: Vec<u8> = header.iter().flat_map(|v| v.to_le_bytes()).collect();
    fn array<T: Copy, const N: usize>(bytes: &mut Vec<u8>, values: &[T], le: impl Fn(T) -> [u8; N]) {
        bytes.extend((values.len() as u64).to_le_bytes());
        values.iter().for_each(|&v| bytes.extend(le(v)));
    }
    array(&mut bytes, &p.lane_ints, i32::to_le_bytes);
    array(&mut bytes, &p.lane_reals, f64::to_le_bytes);
    array(&mut bytes, &p.bin_len, i32::to_le_bytes);
    array(&mut bytes, &p.split_thresholds, f64::to_le_bytes);
    array(&mut bytes, &p.split_ints, u32::to_le_bytes);
    array(&mut bytes, &p.categories, u32::to_le_bytes);
    array(&mut bytes, call.x, f64::to_le_bytes);
    let paths = if l.kernel.is_rows() { &p.rows } else { &p.long };
    array(&mut bytes, &paths.path_ints, i32::to_le_bytes);
    array(&mut bytes, &paths.path_values, f64::to_le_bytes);
    array(&mut bytes, &paths.element_ints, i32::to_le_bytes);
    array(&mut bytes, &paths.element_zero, f64::to_le_bytes);
    array(&mut bytes, &paths.quadrature, f64::to_le_bytes);
    array(&mut bytes, &paths.tails, f64::to_le_bytes);
    array(&mut bytes, &paths.element_scales, f64::to_le_bytes);
    let dir = tempfile::tempdir().map_err(|e| Error::io(std::env::temp_dir(), e))?;
    let (input, output) = (dir.path().join("launch.bin"), dir.path().join("out.bin"));
    std::fs::write(&input, bytes).map_err(|e| Error::io(&input, e))?;
    let run = Command::new(driver).arg(&input).arg(&output).output().map_err(|e| Error::io(driver, e))?;
    if !run.status.success() {
        return Err(Error::Unsupported(format!("{}: {} ({})", l.kernel.name(), String::from_utf8_lossy(&run.stderr).trim(), run.status)));
    }
    let raw = std::fs::read(&output).map_err(|e| Error::io(&output, e))?;
    Ok(raw.chunks_exact(8).take(call.plan.rows * call.width).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect())
}

/// Device shapes the launch plan is tried on.
fn plans() -> Vec<(&'static str, DeviceLimits)> {
    let h100 = DeviceLimits::new(132);
    vec![
        ("H100 (132 SMs)", h100),
        ("one SM", DeviceLimits::new(1)),
        ("global atomics (no shared memory)", DeviceLimits { shared_bytes: 0, ..h100 }),
        ("launches of 7 rows", DeviceLimits { max_launch_values: 0, ..h100 }),
        ("row kernels without their block layouts", DeviceLimits { row_block_layouts: false, ..h100 }),
        ("no shared memory nor block layouts", DeviceLimits { shared_bytes: 0, row_block_layouts: false, ..h100 }),
    ]
}

fn exact(f: &Fixture) -> std::sync::Arc<dyn shapfusion::engine::Engine> {
    build_engine(f.model.clone(), Algorithm::TreeShap, None, &EngineOptions::default()).unwrap()
}

#[test]
fn the_emulator_computes_warp_operations_and_refuses_what_cuda_would_not_run() {
    let Some(selftest) = compiled("selftest") else { return };
    let run = |mode: &str| Command::new(&selftest).arg(mode).output().unwrap();
    let ok = run("ok");
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    for (mode, why) in [
        ("divergent", "lanes at different warp operations"),
        ("exited", "has exited but the __shfl_sync"),
        ("sync", "different __syncthreads"),
        ("shared", "wrote past the end of its 256 bytes of shared memory"),
        ("bigblock", "a block of 2048 threads"),
    ] {
        let o = run(mode);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(3), "{mode}: {err}");
        assert!(err.contains(why), "{mode}: {err}");
    }
}

/// Which paths go to which kernel: `auto` (paths of up to 32 elements in warps), every path on
/// the long-path quadrature kernel, a mix (paths over 4 elements on the quadrature kernel, both
/// kernels adding into one output), and the row kernels (a thread per row).
const LAYOUTS: [(&str, PathLayout); 4] = [
    ("auto", PathLayout::Warps { max_len: 32 }),
    ("quadrature only", PathLayout::Warps { max_len: 0 }),
    ("mixed at 4", PathLayout::Warps { max_len: 4 }),
    ("rows", PathLayout::Rows),
];
const MIXED: PathLayout = LAYOUTS[2].1;

fn program(f: &Fixture, layout: PathLayout) -> PathProgram {
    PathProgram::with_layout(f.model.clone(), layout).unwrap().expect("no fixture is deeper than the engines' bound")
}

#[test]
fn the_cuda_shap_kernels_match_the_exact_engine_on_every_fixture_and_plan() {
    let Some(driver) = compiled("driver") else { return };
    // Row kernel launches run with each place their sums gather (`Gather`: none, shared memory,
    // shared with the rows, a region of global memory).
    let mut modes = [false; 4];
    for f in fixtures() {
        let block = f.block();
        let want = exact(&f).shap(&block).unwrap();
        let width = f.model.num_groups() * (f.model.num_features() + 1);
        for (split, layout) in LAYOUTS {
            let program = program(&f, layout);
            for (i, (plan, mut limits)) in plans().into_iter().enumerate() {
                // The mix on the H100 plan only: the other plans are the same code per kernel.
                if layout == MIXED && i > 0 {
                    continue;
                }
                if limits.max_launch_values == 0 {
                    limits.max_launch_values = 7 * width;
                }
                let schedule = if i % 2 == 0 { Schedule::RoundRobin } else { Schedule::RandomWarps(i as u64) };
                let got = shap_values(&program, &block, &limits, &mut |call| {
                    call.plan.launches.iter().filter(|l| l.kernel.is_rows()).for_each(|l| modes[l.shared_mode() as usize] = true);
                    emulate(&driver, call, schedule)
                })
                .unwrap_or_else(|e| panic!("{} ({split}) on {plan}: {e}", f.name));
                let (err, row) = max_row_rel_error(&got.values, &want.values, width);
                assert!(err <= 1e-9, "{} ({split}) on {plan} ({schedule:?}): row {row} off by {err:e} of max|phi|", f.name);
            }
        }
    }
    assert_eq!(modes, [true; 4], "row kernel launches gathering their sums in each place: {modes:?}");
}

#[test]
fn the_cuda_interaction_kernels_match_the_exact_engine_on_every_fixture() {
    let Some(driver) = compiled("driver") else { return };
    for (k, f) in fixtures().into_iter().enumerate() {
        let block = f.block();
        let want = exact(&f).interactions(&block).unwrap();
        let width = f.model.num_groups() * (f.model.num_features() + 1).pow(2);
        for (split, layout) in LAYOUTS {
            let program = program(&f, layout);
            // One schedule per fixture, alternating, so both run and the suite stays fast.
            let schedule = if k % 2 == 0 { Schedule::RoundRobin } else { Schedule::RandomWarps(k as u64) };
            let got = interaction_values(&program, &block, &DeviceLimits::new(132), &mut |call| emulate(&driver, call, schedule))
                .unwrap_or_else(|e| panic!("{} ({split}): {e}", f.name));
            let (err, row) = max_row_rel_error(&got.values, &want.values, width);
            assert!(err <= 1e-9, "{} ({split}, {schedule:?}): interactions row {row} off by {err:e}", f.name);
        }
    }
}

#[test]
fn deep_random_ensembles_run_on_the_gpu_kernels_with_no_path_limit() {
    let Some(driver) = compiled("driver") else { return };
    for (seed, depth, groups) in [(1u64, 16usize, 1usize), (2, 24, 2), (3, 40, 1)] {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let features = 5 * depth;
        let model = std::sync::Arc::new(spine_model(&mut rng, features, 3, depth, groups));
        let block = random_rows(&mut rng, &model, 12);
        let oracle = build_engine(model.clone(), Algorithm::TreeShap, None, &EngineOptions::default()).unwrap();
        let (want, want_pairs) = (oracle.shap(&block).unwrap(), oracle.interactions(&block).unwrap());
        let width = groups * (features + 1);
        let longest = PathProgram::for_model(model.clone()).unwrap().unwrap();
        if depth == 40 {
            // Paths longer than a warp exist and go to the quadrature kernel, not the CPU.
            assert!(longest.long.count > 0, "depth 40 should give paths of more than 32 elements");
        }
        for (split, layout) in [LAYOUTS[0], LAYOUTS[1], LAYOUTS[3]] {
            let program = PathProgram::with_layout(model.clone(), layout).unwrap().unwrap();
            let schedule = Schedule::RandomWarps(seed);
            let got = shap_values(&program, &block, &DeviceLimits::new(132), &mut |call| emulate(&driver, call, schedule))
                .unwrap_or_else(|e| panic!("depth {depth} ({split}): {e}"));
            let (err, row) = max_row_rel_error(&got.values, &want.values, width);
            assert!(err <= 1e-9, "depth {depth} ({split}): row {row} off by {err:e} of max|phi|");
            // Interactions under one schedule only (the warp kernel's are the slow case).
            let got = interaction_values(&program, &block, &DeviceLimits::new(132), &mut |call| emulate(&driver, call, Schedule::RoundRobin))
                .unwrap_or_else(|e| panic!("depth {depth} ({split}) interactions: {e}"));
            let (err, row) = max_row_rel_error(&got.values, &want_pairs.values, width * (features + 1));
            assert!(err <= 1e-9, "depth {depth} ({split}): interactions row {row} off by {err:e}");
        }
    }
}

#[test]
fn one_row_batches_fill_the_device_by_splitting_the_bins() {
    let Some(driver) = compiled("driver") else { return };
    let f = fixtures().into_iter().find(|f| f.name == "xgb_multiclass").unwrap();
    let block = f.block();
    let exact = exact(&f);
    for (r, layout) in [(0, LAYOUTS[0].1), (7, LAYOUTS[0].1), (block.rows() - 1, LAYOUTS[0].1), (3, PathLayout::Rows)] {
        let program = program(&f, layout);
        let one = f.model.feature_block_from_values(1, block.row(r).to_vec()).unwrap();
        let got = shap_values(&program, &one, &DeviceLimits::new(132), &mut |call| {
            assert!(call.plan.launches[0].grid.1 > 1, "one row should split the bins across blocks: {:?}", call.plan);
            emulate(&driver, call, Schedule::RandomWarps(r as u64))
        })
        .unwrap();
        let want = exact.shap(&one).unwrap();
        let (err, _) = max_row_rel_error(&got.values, &want.values, got.values.len());
        assert!(err <= 1e-9, "row {r}: {err:e}");
    }
}
