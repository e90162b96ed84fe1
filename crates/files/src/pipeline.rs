//! The batch pipeline behind `shapfusion explain`: stream a Parquet, Arrow IPC or CSV file
//! through features → engine → layout and write Parquet (or Arrow IPC), in input row order,
//! with memory bounded by the batch size rather than the file size.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::{DataType, FieldRef, Schema};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;

use crate::atomic_file::AtomicFile;
use crate::input::InputReader;
use shapfusion_core::error::{Error, ErrorKind, Result};
use shapfusion_core::model::Model;
use shapfusion_core::ComputeSettings;
use shapfusion_core::Explainer;
use shapfusion_core::OutputKind;

/// Schema metadata key of an output with `--keep` columns: their names, as a JSON list.
pub const KEPT_COLUMNS_METADATA: &str = "shapfusion.kept";

/// Default rows per batch.
pub const DEFAULT_BATCH_ROWS: usize = 65_536;

/// Options of [`explain_file`].
#[derive(Debug, Clone)]
pub struct ExplainOptions {
    /// How to compute: engine, device, threads, memory bounds.
    pub settings: ComputeSettings,
    /// What to compute.
    pub output: OutputKind,
    /// Input columns copied through to the output, before the attributions.
    pub keep: Vec<String>,
    /// Rows per batch.
    pub batch_rows: usize,
    /// Told of the rows written as the run goes (the CLI draws a progress bar).
    pub progress: Option<Arc<dyn Progress>>,
    /// Background rows (see [`crate::input::read_background`]): interventional SHAP values instead of
    /// path-dependent ones, in the same layout.
    pub background: Option<RecordBatch>,
}

/// Follows a run of [`explain_file`]: the CLI draws a progress bar with it.
pub trait Progress: Send + Sync + std::fmt::Debug {
    /// The run starts; `total` rows when the input says (Parquet), `None` when it cannot (CSV).
    fn start(&self, total: Option<u64>);
    /// `rows` more rows are written.
    fn advance(&self, rows: u64);
    /// The output is complete.
    fn finish(&self);
}

impl Default for ExplainOptions {
    fn default() -> Self {
        ExplainOptions {
            settings: ComputeSettings::default(),
            output: OutputKind::Shap,
            keep: Vec::new(),
            batch_rows: DEFAULT_BATCH_ROWS,
            progress: None,
            background: None,
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

/// Explains every row of `input` with the model at `model_path`, writing Parquet to `output`.
pub fn explain_file(model_path: &Path, input: &Path, output: &Path, options: &ExplainOptions) -> Result<ExplainSummary> {
    let model = Arc::new(crate::load_model(model_path)?);
    explain_with_model(model, input, output, options)
}

/// [`explain_file`] with a model already loaded.
pub fn explain_with_model(model: Arc<Model>, input: &Path, output: &Path, options: &ExplainOptions) -> Result<ExplainSummary> {
    let start = Instant::now();
    // No row hint: `auto` decides from the model alone, so every front end (CLI, SQL, Flight)
    // picks the same engine for a model and gives bit-identical numbers.
    let mut builder = Explainer::builder(model.clone()).settings(options.settings).output(options.output);
    if let Some(background) = &options.background {
        builder = builder.background(background.clone());
    }
    let explainer = builder.build()?;
    let engine = explainer.engine().name();
    tracing::info!(engine, threads = explainer.threads(), "explaining {}", input.display());
    let fields = explainer.schema().fields().iter().cloned().collect();
    let numeric = model.numeric_input_columns();
    let rows = explain_rows(input, output, options, model.feature_names(), &numeric, fields, |batch| explainer.explain_columns(batch))?;
    Ok(ExplainSummary { rows, algorithm: engine, seconds: start.elapsed().as_secs_f64() })
}

/// The streaming loop shared by local and remote (worker pool) explanation: reads `input`
/// (the `features` and the kept columns only; CSV columns named in `numeric` as numbers), hands each batch to `compute` for the
/// attribution columns (laid out as `out_fields`), and writes kept columns + attributions as
/// Parquet with bounded row groups. The output appears (replacing any previous file) only once
/// every row is written; an output that is the input is refused. Returns the number of rows
/// written.
pub fn explain_rows(
    input: &Path,
    output: &Path,
    options: &ExplainOptions,
    features: &[String],
    numeric: &[String],
    out_fields: Vec<FieldRef>,
    mut compute: impl FnMut(&RecordBatch) -> Result<Vec<ArrayRef>>,
) -> Result<usize> {
    if options.batch_rows == 0 {
        return Err(Error::InvalidArgument("rows per batch must be at least 1".into()));
    }
    // Before the input is even opened: an output that is the input would destroy it.
    let pending = AtomicFile::create(output, &[input])?;
    let mut wanted = features.to_vec();
    wanted.extend(options.keep.iter().cloned());
    let mut reader = InputReader::open(input, &wanted, numeric, options.batch_rows)?;
    let schema = reader.schema();

    // Output schema: kept columns (as in the input), then the attributions.
    let mut keep_idx = Vec::new();
    let mut fields: Vec<FieldRef> = Vec::new();
    for name in &options.keep {
        let i = schema.index_of(name).map_err(|_| Error::InvalidArgument(format!("column to keep {name:?}: the input has no such column")))?;
        keep_idx.push(i);
        fields.push(schema.fields()[i].clone());
    }
    for f in &out_fields {
        if options.keep.contains(f.name()) {
            return Err(Error::InvalidArgument(format!("column to keep {:?} clashes with the output column of the same name", f.name())));
        }
    }
    fields.extend(out_fields);
    let mut out_schema = Schema::new(fields);
    if !options.keep.is_empty() {
        // Readers of the output (`shapfusion plot`) tell copied columns from attributions by it.
        let kept = serde_json::to_string(&options.keep).unwrap_or_default();
        out_schema = out_schema.with_metadata([(KEPT_COLUMNS_METADATA.to_string(), kept)].into());
    }
    let out_schema = Arc::new(out_schema);

    let mut writer = OutputWriter::new(pending.file()?, output, out_schema.clone())?;

    if let Some(progress) = &options.progress {
        progress.start(reader.total_rows().map(|n| n as u64));
    }
    let mut rows = 0usize;
    for batch in &mut reader {
        let batch = batch?;
        let mut columns: Vec<ArrayRef> = keep_idx.iter().map(|&i| batch.column(i).clone()).collect();
        columns.extend(compute(&batch)?);
        let out = RecordBatch::try_new(out_schema.clone(), columns).map_err(|e| Error::arrow("assembling output batch", e))?;
        writer.write(&out)?;
        rows += batch.num_rows();
        if let Some(progress) = &options.progress {
            progress.advance(batch.num_rows() as u64);
        }
    }
    writer.close()?;
    pending.commit()?;
    if let Some(progress) = &options.progress {
        progress.finish();
    }
    Ok(rows)
}

/// Parquet, or the Arrow IPC file format (Feather v2) for an output named `.arrow`,
/// `.feather` or `.ipc`.
enum OutputWriter<'a> {
    Parquet(ArrowWriter<std::fs::File>, &'a Path),
    ArrowIpc(arrow::ipc::writer::FileWriter<std::fs::File>, &'a Path),
}

/// Output extensions written as Arrow IPC.
pub const ARROW_IPC_EXTENSIONS: [&str; 3] = ["arrow", "feather", "ipc"];

impl<'a> OutputWriter<'a> {
    fn new(file: std::fs::File, output: &'a Path, schema: Arc<Schema>) -> Result<Self> {
        let ipc = output.extension().and_then(|e| e.to_str()).is_some_and(|e| ARROW_IPC_EXTENSIONS.contains(&e.to_ascii_lowercase().as_str()));
        if ipc {
            let writer =
                arrow::ipc::writer::FileWriter::try_new(file, &schema).map_err(|e| Error::arrow(format!("writing {}", output.display()), e))?;
            return Ok(OutputWriter::ArrowIpc(writer, output));
        }
        // Keep row groups near 64 MiB of values whatever the row width, so memory stays bounded.
        let row_bytes: usize = schema.fields().iter().map(|f| value_bytes(f.data_type())).sum::<usize>().max(8);
        let props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(ZstdLevel::default()))
            .set_max_row_group_row_count(Some(((64usize << 20) / row_bytes).clamp(1024, 1 << 20)))
            .build();
        let writer = ArrowWriter::try_new(file, schema, Some(props))
            .map_err(|e| Error::external(ErrorKind::Io, format!("writing {}", output.display()), e))?;
        Ok(OutputWriter::Parquet(writer, output))
    }

    fn write(&mut self, batch: &RecordBatch) -> Result<()> {
        match self {
            OutputWriter::Parquet(w, output) => {
                w.write(batch).map_err(|e| Error::external(ErrorKind::Io, format!("writing {}", output.display()), e))
            }
            OutputWriter::ArrowIpc(w, output) => w.write(batch).map_err(|e| Error::arrow(format!("writing {}", output.display()), e)),
        }
    }

    fn close(self) -> Result<()> {
        match self {
            OutputWriter::Parquet(w, output) => {
                w.close().map(|_| ()).map_err(|e| Error::external(ErrorKind::Io, format!("closing {}", output.display()), e))
            }
            OutputWriter::ArrowIpc(mut w, output) => w.finish().map_err(|e| Error::arrow(format!("closing {}", output.display()), e)),
        }
    }
}

/// Bytes per row of a column of type `t` (fixed-width estimate; variable-width types count 16).
fn value_bytes(t: &DataType) -> usize {
    match t {
        DataType::Struct(fields) => fields.iter().map(|f| value_bytes(f.data_type())).sum(),
        DataType::FixedSizeList(f, n) => *n as usize * value_bytes(f.data_type()),
        t => t.primitive_width().unwrap_or(16),
    }
}
