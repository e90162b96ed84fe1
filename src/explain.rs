//! The batch pipeline behind `shapfusion explain`: stream a Parquet or CSV file through
//! features → engine → layout and write Parquet, in input row order, with memory bounded by the
//! batch size rather than the file size.

use std::fs::File;
use std::io::{BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{ArrayRef, RecordBatch, RecordBatchReader};
use arrow::csv::reader::Format;
use arrow::datatypes::{DataType, Field, FieldRef, Schema, SchemaRef};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::{ArrowWriter, ProjectionMask};
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use crate::atomic_file::AtomicFile;
use crate::batch::{compute_pool, explain_batch, output_fields, OutputKind};
use crate::engine::{build_explainer, Algorithm, EngineOptions};
use crate::error::{Error, Result};
use crate::features::FeatureColumns;

use crate::model::Model;

/// Default rows per batch.
pub const DEFAULT_BATCH_ROWS: usize = 65_536;

/// Options of [`explain_file`].
#[derive(Debug, Clone)]
pub struct ExplainOptions {
    /// Engine to use.
    pub algorithm: Algorithm,
    /// Worker threads (`None`: all cores).
    pub threads: Option<usize>,
    /// What to compute.
    pub output: OutputKind,
    /// Input columns copied through to the output, before the attributions.
    pub keep: Vec<String>,
    /// Rows per batch.
    pub batch_rows: usize,
    /// Show a progress bar on stderr when it is a terminal.
    pub progress: bool,
    /// Engine knobs.
    pub engine: EngineOptions,
}

impl Default for ExplainOptions {
    fn default() -> Self {
        ExplainOptions {
            algorithm: Algorithm::Auto,
            threads: None,
            output: OutputKind::Shap,
            keep: Vec::new(),
            batch_rows: DEFAULT_BATCH_ROWS,
            progress: false,
            engine: EngineOptions::default(),
        }
    }
}

/// What a run did.
#[derive(Debug, Clone)]
pub struct ExplainSummary {
    /// Rows written.
    pub rows: usize,
    /// Engine that ran.
    pub algorithm: &'static str,
    /// Wall time in seconds.
    pub seconds: f64,
}

/// Input file formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputFormat {
    /// Apache Parquet.
    Parquet,
    /// Comma-separated values with a header line.
    Csv,
}

/// Detects the input format: Parquet by its `PAR1` magic, else CSV.
pub fn detect_input_format(path: &Path) -> Result<InputFormat> {
    let mut f = File::open(path).map_err(|e| Error::io(path, e))?;
    let mut magic = [0u8; 4];
    let n = f.read(&mut magic).map_err(|e| Error::io(path, e))?;
    Ok(if n == 4 && &magic == b"PAR1" { InputFormat::Parquet } else { InputFormat::Csv })
}

/// A streaming reader over the input's batches, with the total row count when known.
pub struct InputReader {
    reader: Box<dyn RecordBatchReader + Send>,
    total_rows: Option<usize>,
    path: PathBuf,
}

impl InputReader {
    /// Opens `path`, reading only the columns in `wanted` (plus none else), `batch_rows` at a
    /// time. For CSV, columns named in `numeric` are parsed as Float64.
    pub fn open(path: &Path, wanted: &[String], numeric: &[String], batch_rows: usize) -> Result<InputReader> {
        let ctx = || format!("reading {}", path.display());
        match detect_input_format(path)? {
            InputFormat::Parquet => {
                let file = File::open(path).map_err(|e| Error::io(path, e))?;
                let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| Error::parquet(ctx(), e))?;
                let total = builder.metadata().file_metadata().num_rows().max(0) as usize;
                // Read only what we need: each model feature plus the kept columns.
                let schema = builder.schema().clone();
                let roots: Vec<usize> = wanted.iter().filter_map(|n| schema.index_of(n).ok()).collect();
                let mask = ProjectionMask::roots(builder.parquet_schema(), roots);
                let reader = builder
                    .with_projection(mask)
                    .with_batch_size(batch_rows)
                    .build()
                    .map_err(|e| Error::parquet(ctx(), e))?;
                Ok(InputReader { reader: Box::new(reader), total_rows: Some(total), path: path.into() })
            }
            InputFormat::Csv => {
                let mut file = File::open(path).map_err(|e| Error::io(path, e))?;
                let (inferred, _) = Format::default()
                    .with_header(true)
                    .infer_schema(BufReader::new(&mut file), Some(1000))
                    .map_err(|e| Error::arrow(ctx(), e))?;
                if inferred.fields().is_empty() {
                    return Err(Error::Input(format!("{}: empty CSV (no header line)", path.display())));
                }
                // Model features are numbers whatever the first rows look like (e.g. all empty).
                let fields: Vec<FieldRef> = inferred
                    .fields()
                    .iter()
                    .map(|f| {
                        if numeric.contains(f.name()) && !f.data_type().is_numeric() && *f.data_type() != DataType::Boolean {
                            Arc::new(Field::new(f.name(), DataType::Float64, true))
                        } else {
                            f.clone()
                        }
                    })
                    .collect();
                let schema = Arc::new(Schema::new(fields));
                file.seek(SeekFrom::Start(0)).map_err(|e| Error::io(path, e))?;
                let reader = arrow::csv::ReaderBuilder::new(schema)
                    .with_header(true)
                    .with_batch_size(batch_rows)
                    .build(BufReader::new(file))
                    .map_err(|e| Error::arrow(ctx(), e))?;
                Ok(InputReader { reader: Box::new(reader), total_rows: None, path: path.into() })
            }
        }
    }

    /// Schema of the batches.
    pub fn schema(&self) -> SchemaRef {
        self.reader.schema()
    }

    /// Total rows, when the format says (Parquet).
    pub fn total_rows(&self) -> Option<usize> {
        self.total_rows
    }
}

impl Iterator for InputReader {
    type Item = Result<RecordBatch>;
    fn next(&mut self) -> Option<Self::Item> {
        self.reader.next().map(|r| r.map_err(|e| Error::arrow(format!("reading {}", self.path.display()), e)))
    }
}

/// Explains every row of `input` with the model at `model_path`, writing Parquet to `output`.
pub fn explain_file(model_path: &Path, input: &Path, output: &Path, options: &ExplainOptions) -> Result<ExplainSummary> {
    let model = Arc::new(Model::load(model_path)?);
    explain_with_model(model, input, output, options)
}

/// [`explain_file`] with a model already loaded.
pub fn explain_with_model(model: Arc<Model>, input: &Path, output: &Path, options: &ExplainOptions) -> Result<ExplainSummary> {
    let start = Instant::now();
    let pool = compute_pool(options.threads.unwrap_or(0))?;
    // `auto` decides from the model alone (not the row count), so every front end (CLI, SQL,
    // Flight) picks the same engine for a model and gives bit-identical numbers.
    let explainer = pool.install(|| build_explainer(model.clone(), options.algorithm, None, &options.engine))?;
    tracing::info!(engine = explainer.name(), threads = pool.current_num_threads(), "explaining {}", input.display());
    let mut features: Option<FeatureColumns> = None;
    let rows = explain_rows(input, output, options, &model.feature_names, output_fields(&model, options.output), |batch| {
        let features = match &features {
            Some(f) => f,
            None => features.insert(FeatureColumns::resolve(batch.schema_ref(), &model)?),
        };
        pool.install(|| explain_batch(explainer.as_ref(), features, batch, options.output))
    })?;
    Ok(ExplainSummary { rows, algorithm: explainer.name(), seconds: start.elapsed().as_secs_f64() })
}

/// The streaming loop shared by local and remote (worker pool) explanation: reads `input`
/// (the `features` and the kept columns only), hands each batch to `compute` for the
/// attribution columns (laid out as `out_fields`), and writes kept columns + attributions as
/// Parquet with bounded row groups. The output appears (replacing any previous file) only once
/// every row is written; an output that is the input is refused. Returns the number of rows
/// written.
pub fn explain_rows(
    input: &Path,
    output: &Path,
    options: &ExplainOptions,
    features: &[String],
    out_fields: Vec<FieldRef>,
    mut compute: impl FnMut(&RecordBatch) -> Result<Vec<ArrayRef>>,
) -> Result<usize> {
    if options.batch_rows == 0 {
        return Err(Error::Input("--batch-rows must be at least 1".into()));
    }
    // Before the input is even opened: an output that is the input would destroy it.
    let pending = AtomicFile::create(output, &[input])?;
    let mut wanted = features.to_vec();
    wanted.extend(options.keep.iter().cloned());
    let mut reader = InputReader::open(input, &wanted, features, options.batch_rows)?;
    let schema = reader.schema();

    // Output schema: kept columns (as in the input), then the attributions.
    let mut keep_idx = Vec::new();
    let mut fields: Vec<FieldRef> = Vec::new();
    for name in &options.keep {
        let i = schema
            .index_of(name)
            .map_err(|_| Error::Input(format!("--keep: input has no column {name:?}")))?;
        keep_idx.push(i);
        fields.push(schema.fields()[i].clone());
    }
    for f in &out_fields {
        if options.keep.contains(f.name()) {
            return Err(Error::Input(format!("--keep {:?} clashes with the output column of the same name", f.name())));
        }
    }
    fields.extend(out_fields);
    let out_schema = Arc::new(Schema::new(fields));

    let file = pending.file()?;
    // Keep row groups near 64 MiB of values whatever the row width, so memory stays bounded.
    let row_bytes: usize = out_schema.fields().iter().map(|f| value_bytes(f.data_type())).sum::<usize>().max(8);
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::default()))
        .set_max_row_group_row_count(Some(((64usize << 20) / row_bytes).clamp(1024, 1 << 20)))
        .build();
    let mut writer = ArrowWriter::try_new(file, out_schema.clone(), Some(props))
        .map_err(|e| Error::parquet(format!("writing {}", output.display()), e))?;

    let progress = progress_bar(options.progress, reader.total_rows());
    let mut rows = 0usize;
    for batch in &mut reader {
        let batch = batch?;
        let mut columns: Vec<ArrayRef> = keep_idx.iter().map(|&i| batch.column(i).clone()).collect();
        columns.extend(compute(&batch)?);
        let out = RecordBatch::try_new(out_schema.clone(), columns).map_err(|e| Error::arrow("assembling output batch", e))?;
        writer.write(&out).map_err(|e| Error::parquet(format!("writing {}", output.display()), e))?;
        rows += batch.num_rows();
        progress.inc(batch.num_rows() as u64);
    }
    writer.close().map_err(|e| Error::parquet(format!("closing {}", output.display()), e))?;
    pending.commit()?;
    progress.finish_and_clear();
    Ok(rows)
}

/// Bytes per row of a column of type `t` (fixed-width estimate; variable-width types count 16).
fn value_bytes(t: &DataType) -> usize {
    match t {
        DataType::Struct(fields) => fields.iter().map(|f| value_bytes(f.data_type())).sum(),
        DataType::FixedSizeList(f, n) => *n as usize * value_bytes(f.data_type()),
        t => t.primitive_width().unwrap_or(16),
    }
}

fn progress_bar(enabled: bool, total: Option<usize>) -> ProgressBar {
    if !enabled {
        return ProgressBar::hidden();
    }
    // indicatif hides itself when stderr is not a terminal.
    let bar = ProgressBar::with_draw_target(total.map(|t| t as u64), ProgressDrawTarget::stderr());
    let style = match total {
        Some(_) => ProgressStyle::with_template("{bar:40} {human_pos}/{human_len} rows  {per_sec}  eta {eta}"),
        None => ProgressStyle::with_template("{spinner} {human_pos} rows  {per_sec}"),
    };
    if let Ok(style) = style {
        bar.set_style(style);
    }
    bar
}
