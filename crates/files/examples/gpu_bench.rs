//! GPU engine against the CPU engine on the same machine: checks the GPU's values against the
//! CPU engine, then times both, with the GPU's two kernels side by side: `auto` (paths of up to
//! 32 elements on the warp kernel, longer ones on the quadrature kernel) and every path on the
//! quadrature kernel. Run by `benchmarks/gpu.sh` on a GPU host (this example links only the
//! engines and the GPU code, so a stripped build can be carried there).
//!
//! ```text
//! gpu_bench [--rows N] [--interaction-rows N] [--cpu-rows N] [--repeats K] NAME=MODEL=ROWS.parquet ...
//! ```
//!
//! The Parquet rows are repeated up to N rows. Times are the median of K repeats after one
//! warm-up (which includes NVRTC compilation and the model's upload); every GPU call ends with a
//! stream synchronize, so host clocks measure finished work. Then, end to end, what
//! `explain --device gpu` does: the N rows from a Parquet file to a Parquet file of SHAP values
//! (model load, reading, the engine and writing), once on the GPU and once on the CPU engine.
//! Prints a markdown table last, and writes the results as JSON to `$OUT/gpu_bench.json` when
//! `OUT` is set (the device tool brings back what is under `$OUT`).

use std::sync::Arc;
use std::time::Instant;

use arrow::array::RecordBatch;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use shapfusion_core::engine::{build_engine, Algorithm, Engine, EngineOptions, FeatureBlock};
use shapfusion_core::gpu::GpuEngine;
use shapfusion_core::model::Model;
use shapfusion_core::{ComputeSettings, Device};
use shapfusion_files::pipeline::{explain_with_model, ExplainOptions};

type Error = Box<dyn std::error::Error>;

struct Options {
    rows: usize,
    interaction_rows: usize,
    cpu_rows: usize,
    repeats: usize,
    models: Vec<(String, String, String)>,
}

fn parse_args() -> Result<Options, Error> {
    let mut o = Options { rows: 1_000_000, interaction_rows: 20_000, cpu_rows: 20_000, repeats: 5, models: Vec::new() };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--rows" => o.rows = value()?.parse()?,
            "--interaction-rows" => o.interaction_rows = value()?.parse()?,
            "--cpu-rows" => o.cpu_rows = value()?.parse()?,
            "--repeats" => o.repeats = value()?.parse()?,
            spec => {
                let parts: Vec<&str> = spec.splitn(3, '=').collect();
                let [name, model, rows] = parts[..] else { return Err(format!("expected NAME=MODEL=ROWS.parquet, got {spec:?}").into()) };
                o.models.push((name.into(), model.into(), rows.into()));
            }
        }
    }
    if o.models.is_empty() {
        return Err("usage: gpu_bench [--rows N] [--interaction-rows N] [--cpu-rows N] [--repeats K] NAME=MODEL=ROWS.parquet ...".into());
    }
    Ok(o)
}

/// The Parquet file's rows in one batch.
fn parquet_rows(path: &str) -> Result<RecordBatch, Error> {
    let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(path)?)?.with_batch_size(1 << 30).build()?;
    let batches: Vec<_> = reader.collect::<Result<_, _>>()?;
    Ok(arrow::compute::concat_batches(&batches[0].schema(), &batches)?)
}

/// The Parquet file's rows, repeated up to `n` rows.
fn rows(model: &Model, path: &str, n: usize) -> Result<FeatureBlock, Error> {
    let block = model.feature_block(&parquet_rows(path)?)?;
    let cols = block.cols();
    let values: Vec<f64> = block.values().iter().copied().cycle().take(n * cols).collect();
    Ok(model.feature_block_from_values(n, values)?)
}

/// Median seconds of `repeats` runs of `f`, after one warm-up run.
fn median_seconds(repeats: usize, mut f: impl FnMut() -> shapfusion_core::Result<()>) -> Result<f64, Error> {
    f()?;
    let mut times = Vec::new();
    for _ in 0..repeats.max(1) {
        let start = Instant::now();
        f()?;
        times.push(start.elapsed().as_secs_f64());
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

/// Writes the Parquet file's rows, repeated up to `n` rows, to `to` (the end-to-end input).
fn repeated_parquet(path: &str, n: usize, to: &std::path::Path) -> Result<(), Error> {
    let batch = parquet_rows(path)?;
    if batch.num_rows() == 0 {
        return Err(format!("{path} has no rows").into());
    }
    let mut writer = ArrowWriter::try_new(std::fs::File::create(to)?, batch.schema(), None)?;
    let mut written = 0;
    while written < n {
        let take = (n - written).min(batch.num_rows());
        writer.write(&batch.slice(0, take))?;
        written += take;
    }
    writer.close()?;
    Ok(())
}

/// Rows/s of `explain` from the Parquet file `input` to a Parquet file beside it, on `device`
/// (the model already loaded: its load is timed by the CLI, not here).
fn end_to_end_rate(model: &Arc<Model>, input: &std::path::Path, rows: usize, device: Device) -> Result<f64, Error> {
    let options = ExplainOptions { settings: ComputeSettings { device, ..ComputeSettings::default() }, ..ExplainOptions::default() };
    let output = input.with_extension("shap.parquet");
    let summary = explain_with_model(model.clone(), input, &output, &options)?;
    std::fs::remove_file(&output)?;
    Ok(rows as f64 / summary.seconds)
}

/// Largest |a − b| of a row over the largest |b| of that row.
fn max_rel_error(a: &[f64], b: &[f64], width: usize) -> f64 {
    a.chunks(width)
        .zip(b.chunks(width))
        .map(|(ra, rb)| {
            let scale = rb.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-12);
            ra.iter().zip(rb).fold(0.0f64, |m, (x, y)| m.max((x - y).abs())) / scale
        })
        .fold(0.0, |m: f64, e| if e.is_nan() { f64::NAN } else { m.max(e) })
}

/// One model and output: rows/s of each GPU kernel choice and of the CPU engine.
struct Row {
    name: String,
    what: &'static str,
    /// `auto`: warp kernel, quadrature for paths over 32 elements.
    auto_rate: f64,
    /// Every path on the quadrature kernel.
    quadrature_rate: f64,
    cpu_rate: f64,
    /// Largest error of either GPU choice against the CPU engine, of max|φ| per row.
    error: f64,
}

fn main() -> Result<(), Error> {
    let o = parse_args()?;
    let info = shapfusion_core::gpu::probe().map_err(|why| format!("no usable GPU: {why}"))?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("GPU: {} ; CPU engine: auto on {threads} threads", info.name);
    let mut table = Vec::new();
    let mut end_to_end = Vec::new();
    let scratch = tempfile::tempdir()?;
    for (name, model_path, rows_path) in &o.models {
        let model = Arc::new(Model::load(model_path)?);
        let setup = Instant::now();
        let (Some(auto), Some(quadrature)) = (GpuEngine::new(model.clone())?, GpuEngine::with_warp_limit(model.clone(), 0)?) else {
            println!("{name}: the GPU engine cannot take this model (see the log); skipped");
            continue;
        };
        println!(
            "{name}: {} trees, {} features; GPU set-up {:.2}s (compile + upload, both kernels)",
            model.trees().len(),
            model.num_features(),
            setup.elapsed().as_secs_f64()
        );
        let cpu = build_engine(model.clone(), Algorithm::Auto, Some(o.cpu_rows), &EngineOptions::default())?;
        let f = model.num_features();
        let width = model.num_groups() * (f + 1);
        let run = |engine: &dyn Engine, what: &str, block: &FeatureBlock| -> shapfusion_core::Result<Vec<f64>> {
            Ok(if what == "shap" { engine.shap(block)?.values } else { engine.interactions(block)?.values })
        };

        for (what, gpu_n) in [("shap", o.rows), ("interactions", o.interaction_rows)] {
            let cpu_n = o.cpu_rows.min(gpu_n);
            let check = rows(&model, rows_path, cpu_n)?;
            let w = if what == "shap" { width } else { width * (f + 1) };
            let want = run(cpu.as_ref(), what, &check)?;
            let error = max_rel_error(&run(&auto, what, &check)?, &want, w).max(max_rel_error(&run(&quadrature, what, &check)?, &want, w));
            let block = rows(&model, rows_path, gpu_n)?;
            let auto_s = median_seconds(o.repeats, || run(&auto, what, &block).map(drop))?;
            let quadrature_s = median_seconds(o.repeats, || run(&quadrature, what, &block).map(drop))?;
            let cpu_s = median_seconds(3, || run(cpu.as_ref(), what, &check).map(drop))?;
            let row = Row {
                name: name.clone(),
                what,
                auto_rate: gpu_n as f64 / auto_s,
                quadrature_rate: gpu_n as f64 / quadrature_s,
                cpu_rate: cpu_n as f64 / cpu_s,
                error,
            };
            println!(
                "{name} {what}: GPU auto {:.0} rows/s, GPU quadrature {:.0} rows/s ({gpu_n} rows), CPU {:.0} rows/s ({cpu_n} rows), max error {:.1e}",
                row.auto_rate, row.quadrature_rate, row.cpu_rate, row.error
            );
            table.push(row);
        }

        // End to end: Parquet in, Parquet out, as `explain --device gpu` runs (and the CPU
        // engine on the same file).
        let input = scratch.path().join(format!("{name}.parquet"));
        repeated_parquet(rows_path, o.rows, &input)?;
        let gpu_rate = end_to_end_rate(&model, &input, o.rows, Device::Gpu)?;
        let cpu_rate = end_to_end_rate(&model, &input, o.rows, Device::Cpu)?;
        println!("{name} end to end (Parquet to Parquet, {} rows): GPU {gpu_rate:.0} rows/s, CPU {cpu_rate:.0} rows/s", o.rows);
        std::fs::remove_file(&input)?;
        end_to_end.push((name.clone(), gpu_rate, cpu_rate));
    }
    println!("\n| model | output | GPU auto rows/s | GPU quadrature rows/s | CPU rows/s ({threads} threads) | auto / CPU | quadrature / auto | max error vs CPU (of max|φ|) |");
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    for r in &table {
        println!(
            "| {} | {} | {:.0} | {:.0} | {:.0} | {:.1}x | {:.2}x | {:.1e} |",
            r.name,
            r.what,
            r.auto_rate,
            r.quadrature_rate,
            r.cpu_rate,
            r.auto_rate / r.cpu_rate,
            r.quadrature_rate / r.auto_rate,
            r.error
        );
    }
    println!("\n| model | end to end GPU rows/s | end to end CPU rows/s | GPU / CPU |");
    println!("|---|---:|---:|---:|");
    for (name, gpu, cpu) in &end_to_end {
        println!("| {name} | {gpu:.0} | {cpu:.0} | {:.1}x |", gpu / cpu);
    }
    if let Some(out) = std::env::var_os("OUT") {
        let results = serde_json::json!({
            "gpu": info.name,
            "cpu_threads": threads,
            "rows": o.rows,
            "interaction_rows": o.interaction_rows,
            "cpu_rows": o.cpu_rows,
            "kernels": table.iter().map(|r| serde_json::json!({
                "model": r.name, "output": r.what, "gpu_auto_rows_per_s": r.auto_rate,
                "gpu_quadrature_rows_per_s": r.quadrature_rate, "cpu_rows_per_s": r.cpu_rate, "max_error_of_max_phi": r.error,
            })).collect::<Vec<_>>(),
            "end_to_end": end_to_end.iter().map(|(name, gpu, cpu)| serde_json::json!({
                "model": name, "gpu_rows_per_s": gpu, "cpu_rows_per_s": cpu,
            })).collect::<Vec<_>>(),
        });
        std::fs::write(std::path::Path::new(&out).join("gpu_bench.json"), serde_json::to_vec_pretty(&results)?)?;
    }
    // A NaN error counts as a difference.
    if table.iter().any(|r| r.error.is_nan() || r.error > 1e-5) {
        return Err("the GPU's values differ from the CPU engine's by more than 1e-5 of max|phi|".into());
    }
    Ok(())
}
