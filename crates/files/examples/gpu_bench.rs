//! GPU engine against the CPU engine on the same machine: checks the GPU's values against the
//! CPU engine, then times both, with the GPU's two layouts of the paths of up to 32 elements
//! side by side: `auto` (the warp kernels) and the row kernels (a thread per row), these with
//! their block layouts (the default: a block's rows staged in shared memory, or its sums in a
//! region of global memory of its own; `GpuEngine::row_block_layouts`) and without; longer
//! paths are on the long-path quadrature kernel in all. Run by `benchmarks/gpu.sh` on a GPU host (this example links only the
//! engines and the GPU code, so a stripped build can be carried there).
//!
//! ```text
//! gpu_bench [--rows N] [--interaction-rows N] [--cpu-rows N] [--cpu-end-to-end-rows N] [--seconds S] [--repeats K] NAME=MODEL=ROWS.parquet ...
//! ```
//!
//! The Parquet rows are repeated up to N rows, fewer where a call would take over S seconds
//! (2 by default) at the rate of the first check, so that a slow model stays within a GPU host's
//! lease. Besides the wall time of whole engine calls, the device's own time per stage (rows up,
//! kernels, results down; CUDA events) gives the kernels' rate alone, and the launch plan at the
//! timed size is printed. Times are the median of K repeats after one warm-up (which includes
//! NVRTC compilation and the model's upload); every GPU call ends with a stream synchronize, so
//! host clocks measure finished work. Then, end to end, what `explain --device gpu` does: the
//! timed rows from a Parquet file to a Parquet file of SHAP values (model load, reading, the
//! engine and writing), on the GPU, and on the CPU engine for fewer rows. Prints a markdown table
//! last, and writes the results as JSON to `$OUT/gpu_bench.json` after each model when
//! `OUT` is set (the device tool brings back what is under `$OUT`).

use std::sync::Arc;
use std::time::Instant;

use arrow::array::RecordBatch;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use shapfusion_core::engine::{build_engine, Algorithm, Engine, EngineOptions, FeatureBlock};
use shapfusion_core::gpu::launch::Output;
use shapfusion_core::gpu::{GpuEngine, PathLayout};
use shapfusion_core::model::Model;
use shapfusion_core::{ComputeSettings, Device};
use shapfusion_files::pipeline::{explain_with_model, ExplainOptions};

type Error = Box<dyn std::error::Error>;

struct Options {
    rows: usize,
    interaction_rows: usize,
    cpu_rows: usize,
    cpu_end_to_end_rows: usize,
    seconds: f64,
    repeats: usize,
    models: Vec<(String, String, String)>,
}

fn parse_args() -> Result<Options, Error> {
    let mut o = Options {
        rows: 1_000_000,
        interaction_rows: 20_000,
        cpu_rows: 20_000,
        cpu_end_to_end_rows: 200_000,
        seconds: 2.0,
        repeats: 5,
        models: Vec::new(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--rows" => o.rows = value()?.parse()?,
            "--interaction-rows" => o.interaction_rows = value()?.parse()?,
            "--cpu-rows" => o.cpu_rows = value()?.parse()?,
            "--cpu-end-to-end-rows" => o.cpu_end_to_end_rows = value()?.parse()?,
            "--repeats" => o.repeats = value()?.parse()?,
            "--seconds" => o.seconds = value()?.parse()?,
            spec => {
                let parts: Vec<&str> = spec.splitn(3, '=').collect();
                let [name, model, rows] = parts[..] else { return Err(format!("expected NAME=MODEL=ROWS.parquet, got {spec:?}").into()) };
                o.models.push((name.into(), model.into(), rows.into()));
            }
        }
    }
    if o.models.is_empty() {
        return Err("usage: gpu_bench [--rows N] [--interaction-rows N] [--cpu-rows N] [--cpu-end-to-end-rows N] [--seconds S] [--repeats K] NAME=MODEL=ROWS.parquet ...".into());
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

/// Largest |a − b| of a row over the largest |b| of that row; NaN where a value is NaN on one
/// side only (`f64::max` drops a NaN, so a plain fold would report no error).
fn max_rel_error(a: &[f64], b: &[f64], width: usize) -> f64 {
    let mut worst = 0.0f64;
    for (ra, rb) in a.chunks(width).zip(b.chunks(width)) {
        let scale = rb.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-12);
        for (x, y) in ra.iter().zip(rb) {
            if x == y || (x.is_nan() && y.is_nan()) {
                continue;
            }
            let error = (x - y).abs() / scale;
            if error.is_nan() {
                return f64::NAN;
            }
            worst = worst.max(error);
        }
    }
    worst
}

/// One model and output: rows/s of each GPU kernel choice and of the CPU engine.
struct Row {
    name: String,
    what: &'static str,
    /// Rows of each `auto` call.
    rows: usize,
    /// `auto`: warp kernel, quadrature for paths over 32 elements.
    auto_rate: f64,
    /// The row kernels (a thread per row) for the paths of up to 32 elements.
    rows_rate: f64,
    /// The row kernels alone (CUDA events).
    rows_kernel_rate: f64,
    /// The row kernels alone without their block layouts.
    rows_plain_kernel_rate: f64,
    cpu_rate: f64,
    /// `auto`'s kernels alone (the device's time in them, from CUDA events).
    kernel_rate: f64,
    /// `auto`'s device time: rows up, kernels, results down, in seconds per call.
    stages: [f64; 3],
    /// Largest error of either GPU layout against the CPU engine, of max|φ| per row.
    error: f64,
}

/// Writes the results so far to `$OUT/gpu_bench.json` when `OUT` is set (after each model, so a
/// run cut at its time limit keeps what it measured).
fn write_results(
    info: &shapfusion_core::gpu::GpuInfo,
    threads: usize,
    o: &Options,
    table: &[Row],
    end_to_end: &[(String, f64, f64)],
) -> Result<(), Error> {
    let Some(out) = std::env::var_os("OUT") else { return Ok(()) };
    let results = serde_json::json!({
        "gpu": info.name,
        "cpu_threads": threads,
        "rows": o.rows,
        "interaction_rows": o.interaction_rows,
        "cpu_rows": o.cpu_rows,
        "kernels": table.iter().map(|r| serde_json::json!({
            "model": r.name, "output": r.what, "gpu_rows": r.rows, "gpu_auto_rows_per_s": r.auto_rate,
            "gpu_rows_kernels_rows_per_s": r.rows_rate, "gpu_rows_kernels_alone_rows_per_s": r.rows_kernel_rate, "gpu_rows_kernels_without_block_layouts_alone_rows_per_s": r.rows_plain_kernel_rate, "cpu_rows_per_s": r.cpu_rate, "max_error_of_max_phi": r.error,
            "gpu_kernels_rows_per_s": r.kernel_rate, "gpu_seconds_a_call": {"up": r.stages[0], "kernels": r.stages[1], "down": r.stages[2]},
        })).collect::<Vec<_>>(),
        "end_to_end": end_to_end.iter().map(|(name, gpu, cpu)| serde_json::json!({
            "model": name, "gpu_rows_per_s": gpu, "cpu_rows_per_s": cpu,
        })).collect::<Vec<_>>(),
    });
    std::fs::write(std::path::Path::new(&out).join("gpu_bench.json"), serde_json::to_vec_pretty(&results)?)?;
    Ok(())
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
        let (Some(auto), Some(by_rows), Some(plain)) = (
            GpuEngine::new(model.clone())?,
            GpuEngine::with_layout(model.clone(), PathLayout::Rows)?,
            GpuEngine::with_layout(model.clone(), PathLayout::Rows)?.map(|e| e.row_block_layouts(false)),
        ) else {
            println!("{name}: the GPU engine cannot take this model (see the log); skipped");
            continue;
        };
        println!(
            "{name}: {} trees, {} features; GPU set-up {:.2}s (compile + upload, three engines)",
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

        for (what, most) in [("shap", o.rows), ("interactions", o.interaction_rows)] {
            // The CPU engine's rows, up to --cpu-rows: what --seconds takes at the rate of a
            // first call on a few rows (a deep model's interactions run at tens of rows/s).
            let probe = rows(&model, rows_path, 200.min(most))?;
            let start = Instant::now();
            run(cpu.as_ref(), what, &probe)?;
            let cpu_probe_s = start.elapsed().as_secs_f64();
            let cpu_n =
                ((probe.rows() as f64 * o.seconds / cpu_probe_s.max(1e-9)) as usize).clamp(probe.rows(), o.cpu_rows.min(most).max(probe.rows()));
            let check = rows(&model, rows_path, cpu_n)?;
            let w = if what == "shap" { width } else { width * (f + 1) };
            let want = run(cpu.as_ref(), what, &check)?;
            let timed = |engine: &GpuEngine| -> shapfusion_core::Result<(Vec<f64>, f64)> {
                let start = Instant::now();
                let values = run(engine, what, &check)?;
                Ok((values, start.elapsed().as_secs_f64()))
            };
            let ((auto_values, auto_check_s), (rows_values, rows_check_s)) = (timed(&auto)?, timed(&by_rows)?);
            let (plain_values, _) = timed(&plain)?;
            // The largest of the three, NaN if any is (`f64::max` would drop it).
            let error = [&auto_values, &rows_values, &plain_values]
                .map(|values| max_rel_error(values, &want, w))
                .into_iter()
                .fold(0.0, |m: f64, e| if m.is_nan() || e.is_nan() { f64::NAN } else { m.max(e) });
            // Rows per timed call: up to `most`, cut to what --seconds takes at the check call's
            // rate (a slow kernel or model must not eat the host's lease).
            let sized = |check_s: f64| ((cpu_n as f64 * o.seconds / check_s.max(1e-9)) as usize).clamp(cpu_n, most.max(cpu_n));
            let (gpu_n, rows_n) = (sized(auto_check_s), sized(rows_check_s));
            let block = rows(&model, rows_path, gpu_n)?;
            let output = if what == "shap" { Output::Shap } else { Output::InteractionPairs };
            let plans = auto
                .plan(gpu_n, output)?
                .into_iter()
                .take(2)
                .chain(by_rows.plan(rows_n, output)?.into_iter().take(1))
                .chain(plain.plan(rows_n, output)?.into_iter().take(1));
            for (i, launches) in plans.enumerate() {
                for l in &launches.launches {
                    println!(
                        "{name} {what} plan: row launch {i} of rows {}..{}: {} grid {:?} x {} threads, {} rows a block, {} B shared{}",
                        launches.first_row,
                        launches.first_row + launches.rows,
                        l.kernel.name(),
                        l.grid,
                        l.block_threads,
                        l.rows_per_block,
                        l.shared_bytes,
                        ["; sums added to the output", "", "; rows staged", "; sums in a region of global memory a block"][l.shared_mode() as usize]
                    );
                }
            }
            auto.take_stage_times();
            let auto_s = median_seconds(o.repeats, || run(&auto, what, &block).map(drop))?;
            // Interactions also run the SHAP kernels (their diagonal): both kinds' stages count.
            let t = auto.take_stage_times();
            let calls = (o.repeats.max(1) + 1) as f64;
            let rows_block = rows(&model, rows_path, rows_n)?;
            by_rows.take_stage_times();
            let rows_s = median_seconds(o.repeats, || run(&by_rows, what, &rows_block).map(drop))?;
            let rows_times = by_rows.take_stage_times();
            plain.take_stage_times();
            median_seconds(o.repeats, || run(&plain, what, &rows_block).map(drop))?;
            let plain_times = plain.take_stage_times();
            let cpu_s = median_seconds(3, || run(cpu.as_ref(), what, &check).map(drop))?;
            let row = Row {
                name: name.clone(),
                what,
                rows: gpu_n,
                auto_rate: gpu_n as f64 / auto_s,
                rows_rate: rows_n as f64 / rows_s,
                rows_kernel_rate: rows_n as f64 * calls / rows_times.kernels_s,
                rows_plain_kernel_rate: rows_n as f64 * calls / plain_times.kernels_s,
                cpu_rate: cpu_n as f64 / cpu_s,
                kernel_rate: gpu_n as f64 * calls / t.kernels_s,
                stages: [t.upload_s / calls, t.kernels_s / calls, t.download_s / calls],
                error,
            };
            println!(
                "{name} {what}: GPU auto {:.0} rows/s (kernels alone {:.0}; a call: up {:.4}s, kernels {:.4}s, down {:.4}s, {} launches), ({gpu_n} rows), GPU row kernels {:.0} rows/s (kernels alone {:.0}, {:.0} without their block layouts; {rows_n} rows), CPU {:.0} rows/s ({cpu_n} rows), max error {:.1e}",
                row.auto_rate, row.kernel_rate, row.stages[0], row.stages[1], row.stages[2], t.launches, row.rows_rate, row.rows_kernel_rate, row.rows_plain_kernel_rate, row.cpu_rate, row.error
            );
            table.push(row);
        }

        // End to end: Parquet in, Parquet out, as `explain --device gpu` runs, on the rows of the
        // timed SHAP calls; the CPU engine on fewer (its rate is flat in the row count, and a
        // deep model's million rows take it minutes).
        let shap = table.iter().rev().find(|r| r.name == *name && r.what == "shap");
        let gpu_n = shap.map_or(o.rows, |r| r.rows);
        let cpu_n = o.cpu_end_to_end_rows.min(gpu_n).min((shap.map_or(f64::INFINITY, |r| r.cpu_rate) * o.seconds * 2.0) as usize).max(1000);
        let input = scratch.path().join(format!("{name}.parquet"));
        repeated_parquet(rows_path, gpu_n, &input)?;
        let gpu_rate = end_to_end_rate(&model, &input, gpu_n, Device::Gpu)?;
        repeated_parquet(rows_path, cpu_n, &input)?;
        let cpu_rate = end_to_end_rate(&model, &input, cpu_n, Device::Cpu)?;
        println!("{name} end to end (Parquet to Parquet): GPU {gpu_rate:.0} rows/s ({gpu_n} rows), CPU {cpu_rate:.0} rows/s ({cpu_n} rows)");
        std::fs::remove_file(&input)?;
        end_to_end.push((name.clone(), gpu_rate, cpu_rate));
        write_results(&info, threads, &o, &table, &end_to_end)?;
    }
    println!("\n| model | output | GPU warps rows/s | kernels alone | GPU row kernels rows/s | kernels alone | row kernels without block layouts, kernels alone | CPU rows/s ({threads} threads) | warps / CPU | row kernels / warps | block layouts / without | max error vs CPU (of max|φ|) |");
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in &table {
        println!(
            "| {} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.1}x | {:.2}x | {:.2}x | {:.1e} |",
            r.name,
            r.what,
            r.auto_rate,
            r.kernel_rate,
            r.rows_rate,
            r.rows_kernel_rate,
            r.rows_plain_kernel_rate,
            r.cpu_rate,
            r.auto_rate / r.cpu_rate,
            r.rows_rate / r.auto_rate,
            r.rows_kernel_rate / r.rows_plain_kernel_rate,
            r.error
        );
    }
    println!("\n| model | end to end GPU rows/s | end to end CPU rows/s | GPU / CPU |");
    println!("|---|---:|---:|---:|");
    for (name, gpu, cpu) in &end_to_end {
        println!("| {name} | {gpu:.0} | {cpu:.0} | {:.1}x |", gpu / cpu);
    }
    // A NaN error counts as a difference.
    if table.iter().any(|r| r.error.is_nan() || r.error > 1e-9) {
        return Err("the GPU's values differ from the CPU engine's by more than 1e-9 of max|phi|".into());
    }
    Ok(())
}
