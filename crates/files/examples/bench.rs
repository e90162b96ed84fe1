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

use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use shapfusion_core::engine::{build_engine, build_interventional, build_rescaled_interventional, Algorithm, EngineOptions, Index, OutputTransform};
use shapfusion_core::model::Model;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args: Vec<String> = std::env::args().collect();
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
