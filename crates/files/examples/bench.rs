//! Timing harness used by the benchmark suite (`benchmarks/suite.py`): explains the rows of a
//! Parquet file with one engine, timing only the computation, and writes the values as raw
//! little-endian f64 so the suite can check them against the reference.
//!
//! ```text
//! cargo run --release -p shapfusion-files --example bench -- MODEL ROWS.parquet ALGORITHM THREADS REPEATS [shap|interactions] [OUT.f64] [--background BG.parquet] [--index shapley|banzhaf] [--transform logistic]
//! ```
//!
//! Prints one JSON line: engine, rows, set-up seconds (tables, or the background's
//! aggregation, with its interaction tables for interactions), best and median seconds over the repeats, rows/s, and the bytes the engine
//! holds for its work where it counts them (`engine_bytes`, else null). With `--background`, the
//! values are interventional SHAP values over the background's rows; with `--index banzhaf`,
//! Banzhaf values (and interactions) instead of Shapley values; with `--transform` (and a
//! background), the values of that function of the margin (`logistic`: shap's
//! `model_output="probability"`, by the rescaled engine).
//!
//! It lives in `shapfusion-files` (Parquet in, the engines of `shapfusion-core`) so that a
//! release build of it compiles no DataFusion or tonic.
//!
//! `bench --fma-peak THREADS [SECONDS]` measures the host's own arithmetic limit instead: as many
//! threads at once, each running independent fused multiply-adds on the widest vectors the CPU
//! has (AVX-512, else AVX2) for SECONDS (default 2), and prints one JSON line with each thread's
//! GFLOP/s (a fused multiply-add counts 2). `benchmarks/limits.py` states the engine's rate
//! against it: a nominal clock times a datasheet's flops per cycle says nothing of what a
//! virtual machine's cores deliver, alone or together.

use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use shapfusion_core::engine::{build_engine, build_interventional, build_rescaled_interventional, Algorithm, EngineOptions, Index, OutputTransform};
use shapfusion_core::model::Model;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("--fma-peak") {
        let threads: usize = args.get(2).map_or(Ok(1), |t| t.parse())?;
        let seconds: f64 = args.get(3).map_or(Ok(2.0), |s| s.parse())?;
        if !(seconds.is_finite() && seconds > 0.0) || threads == 0 {
            return Err(format!("--fma-peak THREADS [SECONDS]: a thread count of at least 1 and a positive time, not {threads} and {seconds}").into());
        }
        return fma_peak::run(threads, seconds);
    }
    let mut flag = |name: &str| match args.iter().position(|a| a == name) {
        Some(i) if i + 1 < args.len() => {
            let value = args.remove(i + 1);
            args.remove(i);
            Some(value)
        }
        _ => None,
    };
    let background = flag("--background");
    let index: Index = flag("--index").as_deref().unwrap_or("shapley").parse()?;
    let transform: OutputTransform = flag("--transform").as_deref().unwrap_or("identity").parse()?;
    if args.len() < 6 {
        eprintln!("usage: bench MODEL ROWS.parquet ALGORITHM THREADS REPEATS [shap|interactions] [OUT.f64] [--background BG.parquet] [--index shapley|banzhaf] [--transform logistic]");
        std::process::exit(2);
    }
    let model = Arc::new(Model::load(&args[1])?);
    let algorithm: Algorithm = args[3].parse()?;
    let threads: usize = args[4].parse()?;
    let repeats: usize = args[5].parse()?;
    let interactions = args.get(6).map(String::as_str) == Some("interactions");

    let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&args[2])?)?.with_batch_size(1 << 30).build()?;
    let batches: Vec<_> = reader.collect::<Result<_, _>>()?;
    let batch = arrow::compute::concat_batches(&batches[0].schema(), &batches)?;
    let block = model.feature_block(&batch)?;

    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build()?;
    // Read before the clock starts: set-up is the tables or the background's aggregation only.
    let background = match &background {
        Some(path) => Some(model.feature_block(&shapfusion_files::input::read_background(std::path::Path::new(path), &model, None, 0)?)?),
        None => None,
    };
    let options = EngineOptions { v2_memory_bytes: 4 << 30, index, ..Default::default() };
    let setup = Instant::now();
    let explainer = match &background {
        None => pool.install(|| build_engine(model.clone(), algorithm, Some(block.rows()), &options))?,
        Some(rows) if transform == OutputTransform::Identity => pool.install(|| build_interventional(model.clone(), rows, algorithm, &options))?,
        Some(rows) => pool.install(|| build_rescaled_interventional(model.clone(), rows, transform, &options))?,
    };
    if interactions && background.is_some() {
        // The interventional engine builds its interaction tables at the first call for them:
        // one row here, so that set-up holds them and the repeats do not.
        let first = model.feature_block(&batch.slice(0, 1.min(batch.num_rows())))?;
        pool.install(|| explainer.interactions(&first))?;
    }
    let setup_seconds = setup.elapsed().as_secs_f64();
    let mut times = Vec::new();
    let mut values = Vec::new();
    for _ in 0..repeats.max(1) {
        let start = Instant::now();
        values = pool.install(|| -> shapfusion_core::Result<Vec<f64>> {
            Ok(if interactions { explainer.interactions(&block)?.values } else { explainer.shap(&block)?.values })
        })?;
        times.push(start.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    if let Some(out) = args.get(7) {
        let mut f = std::io::BufWriter::new(std::fs::File::create(out)?);
        for v in &values {
            f.write_all(&v.to_le_bytes())?;
        }
    }
    // Memory the engine holds for its work (the interventional engine's packed tables and
    // patterns), where it counts it.
    let engine_bytes = explainer.memory_bytes().map_or("null".to_string(), |b| b.to_string());
    println!(
        "{{\"engine\": \"{}\", \"rows\": {}, \"setup_seconds\": {setup_seconds}, \"best_seconds\": {}, \"median_seconds\": {median}, \"rows_per_second\": {}, \"engine_bytes\": {engine_bytes}}}",
        explainer.name(),
        block.rows(),
        times[0],
        block.rows() as f64 / median
    );
    Ok(())
}

/// The host's fused multiply-add throughput (`bench --fma-peak`).
mod fma_peak {
    use std::time::{Duration, Instant};

    /// Independent accumulators a thread updates in turn: more than a fused multiply-add's
    /// latency times the pipes that issue them (4 cycles × 2 on current x86 cores), so that the
    /// loop is bound by throughput, not by one chain's latency.
    const CHAINS: usize = 12;
    /// Loop iterations between clock reads.
    const ITERATIONS: u64 = 1 << 20;

    /// A kernel: `ITERATIONS` rounds of the chains; returns their sum (so none is optimised away).
    type Kernel = fn(u64) -> f64;

    /// Runs `threads` threads at once for `seconds`; prints each one's GFLOP/s and their sum.
    pub fn run(threads: usize, seconds: f64) -> Result<(), Box<dyn std::error::Error>> {
        let (width, kernel) = kernel().ok_or("--fma-peak needs an x86-64 CPU with AVX2 and FMA")?;
        let per_iteration = (CHAINS * width * 2) as f64;
        let limit = Duration::from_secs_f64(seconds);
        let barrier = std::sync::Barrier::new(threads);
        let rates: Vec<f64> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..threads)
                .map(|_| {
                    scope.spawn(|| {
                        barrier.wait();
                        let (start, mut iterations, mut sink) = (Instant::now(), 0u64, 0.0);
                        while start.elapsed() < limit {
                            sink += kernel(ITERATIONS);
                            iterations += ITERATIONS;
                        }
                        std::hint::black_box(sink);
                        iterations as f64 * per_iteration / start.elapsed().as_secs_f64() / 1e9
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("an FMA thread panicked")).collect()
        });
        let list = rates.iter().map(|r| format!("{r:.2}")).collect::<Vec<_>>().join(", ");
        println!(
            "{{\"fma_peak\": true, \"vector_doubles\": {width}, \"threads\": {threads}, \"gflops_per_thread\": [{list}], \"gflops_total\": {:.2}}}",
            rates.iter().sum::<f64>()
        );
        Ok(())
    }

    /// The widest kernel this CPU runs, and the doubles in its vector: the rule by which the
    /// engines pick their compiled copy (`shapfusion_core`'s `simd_level`, crate-private), so the
    /// peak is that of the vectors the engines run on.
    #[cfg(target_arch = "x86_64")]
    fn kernel() -> Option<(usize, Kernel)> {
        let fma = is_x86_feature_detected!("fma");
        if fma && is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F and FMA (detected above).
            Some((8, |n| unsafe { avx512(n) }))
        } else if fma && is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2 and FMA (detected above).
            Some((4, |n| unsafe { avx2(n) }))
        } else {
            None
        }
    }

    #[cfg(not(target_arch = "x86_64"))]
    fn kernel() -> Option<(usize, Kernel)> {
        None
    }

    /// `CHAINS` accumulators of `W` doubles, each updated `iterations` times by a fused
    /// multiply-add: plain lane loops, compiled (as the engines' are) for the CPU features of the
    /// caller, which the compiler turns into one vector instruction a chain.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    fn chains<const W: usize>(iterations: u64) -> f64 {
        let (m, c) = (std::hint::black_box(0.999_999), std::hint::black_box(1e-7));
        let mut acc = [[1.0f64; W]; CHAINS];
        for _ in 0..iterations {
            for a in &mut acc {
                for x in a.iter_mut() {
                    *x = x.mul_add(m, c);
                }
            }
        }
        acc.iter().flatten().sum()
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,fma")]
    unsafe fn avx512(iterations: u64) -> f64 {
        chains::<8>(iterations)
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn avx2(iterations: u64) -> f64 {
        chains::<4>(iterations)
    }
}
