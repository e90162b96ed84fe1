//! Reading rows from Parquet or CSV, from a file or from bytes already fetched (an object
//! store): the inputs of `explain`, and background sets for interventional SHAP, sampled
//! reproducibly with bounded memory.

use std::fs::File;
use std::io::{BufReader, Cursor, Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::Arc;

use arrow::array::{RecordBatch, RecordBatchReader};
use arrow::csv::reader::Format;
use arrow::datatypes::{DataType, Field, FieldRef, Schema, SchemaRef};
use arrow::error::ArrowError;
use bytes::Bytes;
use parquet::arrow::ProjectionMask;
use parquet::file::reader::ChunkReader;

use shapfusion_core::error::{Error, ErrorKind, Result};
use shapfusion_core::features::FeatureColumns;
use shapfusion_core::model::Model;

use crate::decoder_guard::{self, catch_decoder_panic, corrupt, Refused};

/// Input file formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputFormat {
    /// Apache Parquet.
    Parquet,
    /// Comma-separated values with a header line.
    Csv,
    /// The Arrow IPC file format (Feather v2, `.arrow`).
    ArrowIpc,
}

impl InputFormat {
    /// The format's name, as errors give it.
    pub fn name(self) -> &'static str {
        match self {
            InputFormat::Parquet => "Parquet",
            InputFormat::Csv => "CSV",
            InputFormat::ArrowIpc => "Arrow IPC",
        }
    }

    /// Parquet or Arrow IPC by their magic bytes (`PAR1`, `ARROW1`), else CSV.
    fn of(head: &[u8]) -> InputFormat {
        if head.starts_with(b"PAR1") {
            InputFormat::Parquet
        } else if head.starts_with(b"ARROW1") {
            InputFormat::ArrowIpc
        } else {
            InputFormat::Csv
        }
    }
}

/// Detects the input format: Parquet or Arrow IPC by their magic bytes, else CSV.
pub fn detect_input_format(path: &Path) -> Result<InputFormat> {
    let mut f = File::open(path).map_err(|e| Error::io(path, e))?;
    let mut magic = [0u8; 6];
    let n = f.read(&mut magic).map_err(|e| Error::io(path, e))?;
    Ok(InputFormat::of(&magic[..n]))
}

/// A streaming reader over the input's batches, with the total row count when known.
pub struct InputReader {
    reader: Box<dyn RecordBatchReader + Send>,
    total_rows: Option<usize>,
    label: String,
}

impl InputReader {
    /// Opens `path`, reading only the columns in `wanted` (every column when it lacks one of
    /// them, so that the error naming it lists what the file has), `batch_rows` at a time. For
    /// CSV, columns named in `numeric` are parsed as Float64.
    pub fn open(path: &Path, wanted: &[String], numeric: &[String], batch_rows: usize) -> Result<InputReader> {
        let label = path.display().to_string();
        let format = detect_input_format(path)?;
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        guarded(format, label, |label| match format {
            InputFormat::Parquet => parquet_reader(file, label, Some(wanted), batch_rows),
            InputFormat::Csv => csv_reader(file, label, numeric, batch_rows),
            InputFormat::ArrowIpc => ipc_reader(BufReader::new(file), label, Some(wanted), batch_rows),
        })
    }

    /// Opens `path` with every column it has (the SHAP files `plot` reads back).
    pub fn open_all(path: &Path, batch_rows: usize) -> Result<InputReader> {
        let label = path.display().to_string();
        let format = detect_input_format(path)?;
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        guarded(format, label, |label| match format {
            InputFormat::Parquet => parquet_reader(file, label, None, batch_rows),
            InputFormat::Csv => csv_reader(file, label, &[], batch_rows),
            InputFormat::ArrowIpc => ipc_reader(BufReader::new(file), label, None, batch_rows),
        })
    }

    /// Reads Parquet or CSV `bytes` (named `label` in errors), as [`open`](Self::open) does.
    pub fn from_bytes(bytes: Bytes, label: &str, wanted: &[String], numeric: &[String], batch_rows: usize) -> Result<InputReader> {
        let format = InputFormat::of(&bytes);
        guarded(format, label.to_string(), |label| match format {
            InputFormat::Parquet => parquet_reader(bytes, label, Some(wanted), batch_rows),
            InputFormat::Csv => csv_reader(Cursor::new(bytes), label, numeric, batch_rows),
            InputFormat::ArrowIpc => ipc_reader(Cursor::new(bytes), label, Some(wanted), batch_rows),
        })
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
        self.reader.next().map(|r| r.map_err(|e| Error::arrow(format!("reading {}", self.label), e)))
    }
}

/// A Parquet reader over `source` projected to the `wanted` columns it has (all: `None`), with
/// the guards of [`decoder_guard`]: rows come from anywhere.
fn parquet_reader<R: ChunkReader + 'static>(source: R, label: String, wanted: Option<&[String]>, batch_rows: usize) -> Result<InputReader> {
    let ctx = || format!("reading {label}");
    let builder = decoder_guard::open(source).map_err(|e| match e {
        Refused::Parquet(e) => Error::external(ErrorKind::BadData, ctx(), e),
        Refused::Checked(detail) => Error::BadData(format!("{label}: {detail}")),
    })?;
    let total = builder.metadata().file_metadata().num_rows().max(0) as usize;
    // Read only what we need: each model feature plus the kept columns.
    let schema = builder.schema().clone();
    let mask = match projection(&schema, wanted) {
        Some(indices) => ProjectionMask::roots(builder.parquet_schema(), indices),
        None => ProjectionMask::all(),
    };
    let reader = builder.with_projection(mask).with_batch_size(batch_rows).build().map_err(|e| Error::external(ErrorKind::BadData, ctx(), e))?;
    Ok(InputReader { reader: Box::new(reader), total_rows: Some(total), label })
}

/// Opens a reader of `format` named `label` with `open`, and guards it and its batches: the
/// Parquet and Arrow IPC crates assert some invariants of a file instead of reporting them, and
/// rows come from anywhere, so such a panic is an error naming the file (and ends the batches).
fn guarded(format: InputFormat, label: String, open: impl FnOnce(String) -> Result<InputReader>) -> Result<InputReader> {
    let corrupt = || Error::BadData(format!("{label}: {}", corrupt(format.name())));
    let mut input = catch_decoder_panic(|| open(label.clone())).unwrap_or_else(|| Err(corrupt()))?;
    input.reader = Box::new(Guarded { schema: input.reader.schema(), reader: Some(input.reader), format });
    Ok(input)
}

/// Batches of a reader, where a panic of its decoder on a corrupt file is an error and ends the
/// batches (the decoder's state after a panic is not to be trusted).
struct Guarded {
    schema: SchemaRef,
    reader: Option<Box<dyn RecordBatchReader + Send>>,
    format: InputFormat,
}

impl Iterator for Guarded {
    type Item = std::result::Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        let reader = self.reader.as_mut()?;
        match catch_decoder_panic(|| reader.next()) {
            Some(batch) => batch,
            None => {
                self.reader = None;
                Some(Err(ArrowError::ParseError(corrupt(self.format.name()))))
            }
        }
    }
}

impl RecordBatchReader for Guarded {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}

/// An Arrow IPC file reader over `source` projected to the `wanted` columns it has (all:
/// `None`), its batches cut to at most `batch_rows` rows.
fn ipc_reader<R: Read + Seek + Send + 'static>(mut source: R, label: String, wanted: Option<&[String]>, batch_rows: usize) -> Result<InputReader> {
    decoder_guard::check_ipc_blocks(&mut source).map_err(|detail| Error::BadData(format!("{label}: {detail}")))?;
    let ctx = || format!("reading {label}");
    let projection = match wanted {
        // The footer first, for the column indices of the projection.
        Some(wanted) => {
            let schema = arrow::ipc::reader::FileReader::try_new(&mut source, None).map_err(|e| Error::arrow(ctx(), e))?.schema();
            source.seek(SeekFrom::Start(0)).map_err(|e| Error::external(ErrorKind::Io, ctx(), e))?;
            projection(&schema, Some(wanted))
        }
        None => None,
    };
    let reader = arrow::ipc::reader::FileReader::try_new(source, projection.clone()).map_err(|e| Error::arrow(ctx(), e))?;
    // The reader's `schema()` is the file's, its batches the projection's (columns in the
    // projection's order): the schema given is theirs.
    let schema = match &projection {
        Some(indices) => Arc::new(reader.schema().project(indices).map_err(|e| Error::arrow(ctx(), e))?),
        None => reader.schema(),
    };
    let reader = Rebatched { schema, reader, batch_rows: batch_rows.max(1), cutting: None };
    Ok(InputReader { reader: Box::new(reader), total_rows: None, label })
}

/// Batches of `reader` cut to at most `batch_rows` rows (slices, no copy): an Arrow IPC file's
/// batches are as large as its writer made them, and what is computed for a batch is sized by
/// its rows (a file of a few hundred bytes can hold two billion rows of nulls).
struct Rebatched<R> {
    schema: SchemaRef,
    reader: R,
    batch_rows: usize,
    /// The batch being cut, and the rows of it already given.
    cutting: Option<(RecordBatch, usize)>,
}

impl<R: Iterator<Item = std::result::Result<RecordBatch, ArrowError>>> Iterator for Rebatched<R> {
    type Item = std::result::Result<RecordBatch, ArrowError>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some((batch, given)) = &mut self.cutting {
                if *given < batch.num_rows() {
                    let rows = self.batch_rows.min(batch.num_rows() - *given);
                    let part = batch.slice(*given, rows);
                    *given += rows;
                    return Some(Ok(part));
                }
                self.cutting = None;
            }
            match self.reader.next()? {
                Ok(batch) if batch.num_rows() > self.batch_rows => self.cutting = Some((batch, 0)),
                other => return Some(other),
            }
        }
    }
}

impl<R: Iterator<Item = std::result::Result<RecordBatch, ArrowError>>> RecordBatchReader for Rebatched<R> {
    fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }
}

/// The indices of the `wanted` columns in `schema`, to read only those; `None` (read every
/// column) when `wanted` is `None` or the file lacks one of them: the error that then names the
/// missing column lists the columns the file has, not only the wanted ones it has.
fn projection(schema: &Schema, wanted: Option<&[String]>) -> Option<Vec<usize>> {
    wanted?.iter().map(|n| schema.index_of(n).ok()).collect()
}

/// A CSV reader over `source` (a header line, then rows); the `numeric` columns are Float64
/// whatever their first rows look like (e.g. all empty).
fn csv_reader<R: Read + Seek + Send + 'static>(mut source: R, label: String, numeric: &[String], batch_rows: usize) -> Result<InputReader> {
    let ctx = || format!("reading {label}");
    let (inferred, _) =
        Format::default().with_header(true).infer_schema(BufReader::new(&mut source), Some(1000)).map_err(|e| Error::arrow(ctx(), e))?;
    if inferred.fields().is_empty() {
        return Err(Error::BadData(format!("{label}: empty CSV (no header line)")));
    }
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
    source.seek(SeekFrom::Start(0)).map_err(|e| Error::external(ErrorKind::Io, ctx(), e))?;
    let reader = arrow::csv::ReaderBuilder::new(schema)
        .with_header(true)
        .with_batch_size(batch_rows)
        .build(BufReader::new(source))
        .map_err(|e| Error::arrow(ctx(), e))?;
    Ok(InputReader { reader: Box::new(reader), total_rows: None, label })
}

/// Rows per batch when reading a background.
const BACKGROUND_BATCH_ROWS: usize = 65_536;

/// Reads background rows for interventional SHAP from a Parquet or CSV file; see
/// [`sample_background`].
pub fn read_background(path: &Path, model: &Model, max_rows: Option<usize>, seed: u64) -> Result<RecordBatch> {
    let label = format!("background {}", path.display());
    let reader = InputReader::open(path, model.feature_names(), &model.numeric_input_columns(), BACKGROUND_BATCH_ROWS)
        .map_err(|e| e.context(label.as_str()))?;
    sample_background(reader, model, max_rows, seed, &label)
}

/// The background rows of `reader` for `model`: its feature columns (found by name; nulls are
/// missing values), all rows, or `max_rows` of them drawn uniformly without replacement by a
/// generator seeded with `seed` (the same rows on every run), kept in input order. Memory is
/// bounded by `max_rows` (and one input batch), not the input. The batch holds the model's
/// feature columns in its order, as the input holds them: a categorical column keeps its
/// categories, which the engines read as they read an input's (CatBoost hashes them, so
/// codes in their place would be other categories). Every row is checked as `explain` checks
/// it, so a bad background fails here; errors start with `label`.
pub fn sample_background(reader: InputReader, model: &Model, max_rows: Option<usize>, seed: u64, label: &str) -> Result<RecordBatch> {
    let context = |e: Error| e.context(label);
    let cap = max_rows.unwrap_or(usize::MAX);
    if cap == 0 {
        return Err(Error::InvalidArgument(format!("{label}: a sample of 0 background rows was asked for; ask for at least 1")));
    }
    let mut sample = Reservoir::new(cap, seed);
    for batch in reader {
        let batch = batch.map_err(context)?;
        let features = FeatureColumns::resolve(batch.schema_ref(), model).map_err(context)?;
        // The block itself is not kept: converting it checks every value (a category the
        // model refuses, a CatBoost category that is not an integer) while the file is read.
        features.block(&batch, model).map_err(context)?;
        sample.offer(features.project(&batch).map_err(context)?).map_err(context)?;
    }
    sample.rows().map_err(context)?.ok_or_else(|| Error::BadData(format!("{label} has no rows; interventional SHAP needs at least one")))
}

/// A uniform sample of at most `cap` rows of the batches offered (Algorithm R: after `seen`
/// rows, each is kept with probability cap/seen), held as references into the batches that
/// hold kept rows. Those are merged into one batch of the kept rows whenever they hold more
/// than twice `cap` rows, so they never hold more than that between offers (nor a whole
/// batch much larger than the sample), and a merge, which copies `cap` rows, comes at most
/// once per `cap` rows offered, or once per batch offered.
struct Reservoir {
    cap: usize,
    rng: SplitMix64,
    seen: usize,
    /// Batches that hold kept rows.
    batches: Vec<RecordBatch>,
    /// Rows those batches hold in all.
    held_rows: usize,
    /// Each kept row: its index in the input, its batch, its row there.
    kept: Vec<(usize, usize, usize)>,
}

impl Reservoir {
    fn new(cap: usize, seed: u64) -> Reservoir {
        Reservoir { cap, rng: SplitMix64(seed), seen: 0, batches: Vec::new(), held_rows: 0, kept: Vec::new() }
    }

    fn offer(&mut self, batch: RecordBatch) -> Result<()> {
        let slot = self.batches.len();
        let mut used = false;
        for r in 0..batch.num_rows() {
            if self.kept.len() < self.cap {
                self.kept.push((self.seen, slot, r));
                used = true;
            } else {
                let j = self.rng.below(self.seen as u64 + 1) as usize;
                if j < self.cap {
                    self.kept[j] = (self.seen, slot, r);
                    used = true;
                }
            }
            self.seen += 1;
        }
        if used {
            self.held_rows += batch.num_rows();
            self.batches.push(batch);
        }
        if self.held_rows > self.cap.saturating_mul(2) {
            let merged = self.take(false)?;
            self.held_rows = merged.num_rows();
            for (k, entry) in self.kept.iter_mut().enumerate() {
                *entry = (entry.0, 0, k);
            }
            self.batches = vec![merged];
        }
        Ok(())
    }

    /// The kept rows as one batch, in input order when `ordered`, else in `kept`'s order.
    fn take(&mut self, ordered: bool) -> Result<RecordBatch> {
        if ordered {
            self.kept.sort_unstable_by_key(|&(index, _, _)| index);
        }
        let indices: Vec<(usize, usize)> = self.kept.iter().map(|&(_, batch, row)| (batch, row)).collect();
        let batches: Vec<&RecordBatch> = self.batches.iter().collect();
        arrow::compute::interleave_record_batch(&batches, &indices).map_err(|e| Error::arrow("sampling rows", e))
    }

    /// The sample in input order; `None` when no rows were offered.
    fn rows(mut self) -> Result<Option<RecordBatch>> {
        if self.kept.is_empty() {
            return Ok(None);
        }
        self.take(true).map(Some)
    }
}

/// Which rows of a file to read: see [`selected_indices`] and [`take_rows`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowSelection {
    /// Every row, or `max_rows` of them drawn uniformly without replacement by a generator
    /// seeded with `seed` (the same rows on every run), kept in file order.
    Sample {
        /// Most rows to keep (`None`: all).
        max_rows: Option<usize>,
        /// Seed of the draw.
        seed: u64,
    },
    /// The one row with this 0-based index.
    One(usize),
}

/// Rows in `reader`'s file: the format's own count when it has one, else counted by reading.
pub fn count_rows(reader: InputReader) -> Result<usize> {
    if let Some(total) = reader.total_rows() {
        return Ok(total);
    }
    let mut total = 0usize;
    for batch in reader {
        total += batch?.num_rows();
    }
    Ok(total)
}

/// The 0-based row indices `selection` keeps out of `total` rows, ascending; `label` names the
/// file in the error for a row out of range.
pub fn selected_indices(selection: RowSelection, total: usize, label: &str) -> Result<Vec<usize>> {
    match selection {
        RowSelection::One(row) if row < total => Ok(vec![row]),
        RowSelection::One(row) => Err(Error::InvalidArgument(format!("row {row} is out of range: {label} has {total} rows (rows count from 0)"))),
        RowSelection::Sample { max_rows: Some(0), .. } => Err(Error::InvalidArgument("a sample of 0 rows was asked for; ask for at least 1".into())),
        RowSelection::Sample { max_rows, seed } => {
            let keep = max_rows.unwrap_or(usize::MAX);
            if keep >= total {
                return Ok((0..total).collect());
            }
            // Floyd's algorithm: `keep` distinct indices in O(keep) memory whatever `total` is.
            let mut rng = SplitMix64(seed);
            let mut chosen = std::collections::BTreeSet::new();
            for j in total - keep..total {
                let t = rng.below(j as u64 + 1) as usize;
                if !chosen.insert(t) {
                    chosen.insert(j);
                }
            }
            Ok(chosen.into_iter().collect())
        }
    }
}

/// The rows of `reader` at the ascending `indices`, as one batch (streamed: memory grows with
/// the rows kept, not the file).
pub fn take_rows(reader: InputReader, indices: &[usize]) -> Result<RecordBatch> {
    let schema = reader.schema();
    let mut parts = Vec::new();
    let mut start = 0usize;
    let mut next = 0usize;
    for batch in reader {
        let batch = batch?;
        let end = start + batch.num_rows();
        let mut local = Vec::new();
        while next < indices.len() && indices[next] < end {
            local.push((indices[next] - start) as u32);
            next += 1;
        }
        if !local.is_empty() {
            let take = arrow::array::UInt32Array::from(local);
            let columns = batch
                .columns()
                .iter()
                .map(|c| arrow::compute::take(c, &take, None))
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(|e| Error::arrow("selecting rows", e))?;
            parts.push(RecordBatch::try_new(batch.schema(), columns).map_err(|e| Error::arrow("selecting rows", e))?);
        }
        start = end;
        if next == indices.len() {
            break;
        }
    }
    arrow::compute::concat_batches(&schema, &parts).map_err(|e| Error::arrow("selecting rows", e))
}

/// A small seeded generator (SplitMix64) for sampling rows reproducibly (backgrounds, plots).
pub(crate) struct SplitMix64(pub(crate) u64);

impl SplitMix64 {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0), without modulo bias.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        let zone = u64::MAX - u64::MAX % n;
        loop {
            let v = self.next();
            if v < zone {
                return v % n;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{ArrayRef, AsArray, Float64Array};

    #[test]
    fn a_seeded_sample_is_uniform_and_repeatable() {
        let mut counts = [0usize; 10];
        for seed in 0..2000 {
            let mut rng = SplitMix64(seed);
            counts[rng.below(10) as usize] += 1;
        }
        assert!(counts.iter().all(|&c| (150..250).contains(&c)), "{counts:?}");
        assert_eq!(SplitMix64(7).next(), SplitMix64(7).next());
    }

    /// The reservoir keeps the rows Algorithm R keeps (the same draws), in input order, with
    /// their columns as they were, across batches of any size and the merges of the batches
    /// it holds; and it holds no more than a few times the sample.
    #[test]
    fn the_reservoir_keeps_algorithm_rs_rows_as_they_were() {
        for (cap, sizes) in [(7usize, vec![3usize, 0, 50, 1, 1, 200, 9]), (64, vec![10; 40]), (1000, vec![300, 300]), (5, vec![1; 30])] {
            let total: usize = sizes.iter().sum();
            // Algorithm R over row indices, with the reservoir's generator.
            let mut rng = SplitMix64(11);
            let mut want: Vec<usize> = Vec::new();
            for seen in 0..total {
                if want.len() < cap {
                    want.push(seen);
                } else {
                    let j = rng.below(seen as u64 + 1) as usize;
                    if j < cap {
                        want[j] = seen;
                    }
                }
            }
            want.sort_unstable();
            let mut reservoir = Reservoir::new(cap, 11);
            let mut start = 0usize;
            for &n in &sizes {
                let rows = start..start + n;
                let batch = RecordBatch::try_from_iter([
                    ("x", Arc::new(Float64Array::from_iter_values(rows.clone().map(|i| i as f64))) as ArrayRef),
                    ("c", Arc::new(arrow::array::StringArray::from_iter_values(rows.map(|i| format!("row {i}")))) as ArrayRef),
                ])
                .unwrap();
                reservoir.offer(batch).unwrap();
                assert!(reservoir.held_rows <= 2 * cap, "cap {cap}: {} rows held", reservoir.held_rows);
                start += n;
            }
            let got = reservoir.rows().unwrap().unwrap();
            let x: Vec<usize> = got.column(0).as_primitive::<arrow::datatypes::Float64Type>().values().iter().map(|&v| v as usize).collect();
            assert_eq!(x, want, "cap {cap}");
            let c: Vec<String> = got.column(1).as_string::<i32>().iter().map(|v| v.unwrap().to_string()).collect();
            assert_eq!(c, want.iter().map(|i| format!("row {i}")).collect::<Vec<_>>(), "cap {cap}");
        }
        assert!(Reservoir::new(3, 0).rows().unwrap().is_none());
    }

    #[test]
    fn a_row_selection_is_distinct_ascending_and_repeatable() {
        let pick = |max_rows, seed| selected_indices(RowSelection::Sample { max_rows, seed }, 1000, "f").unwrap();
        let a = pick(Some(50), 3);
        assert_eq!(a.len(), 50);
        assert!(a.windows(2).all(|w| w[0] < w[1]) && *a.last().unwrap() < 1000, "{a:?}");
        assert_eq!(a, pick(Some(50), 3));
        assert_ne!(a, pick(Some(50), 4));
        assert_eq!(pick(None, 0), (0..1000).collect::<Vec<_>>());
        assert_eq!(selected_indices(RowSelection::One(7), 8, "f").unwrap(), vec![7]);
        let e = selected_indices(RowSelection::One(8), 8, "rows.parquet").unwrap_err().to_string();
        assert!(e.contains("row 8 is out of range") && e.contains("rows.parquet has 8 rows"), "{e}");
    }

    #[test]
    fn csv_and_parquet_bytes_read_alike() {
        let csv = Bytes::from_static(b"a,b\n1,2\n3,\n");
        let names = vec!["a".to_string(), "b".to_string()];
        let batches: Vec<RecordBatch> = InputReader::from_bytes(csv, "t.csv", &names, &names, 10).unwrap().collect::<Result<_>>().unwrap();
        assert_eq!(batches[0].num_rows(), 2);
        assert!(batches[0].schema().field(1).data_type().is_numeric());
        let e = InputReader::from_bytes(Bytes::new(), "empty.csv", &names, &names, 10).err().unwrap().to_string();
        assert!(e.contains("empty.csv") && e.contains("empty CSV"), "{e}");
    }

    /// A fuzz regression of the readers of rows (`fuzz/regressions/input_rows/`).
    fn regression(name: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/regressions/input_rows").join(name)
    }

    /// Every batch of `reader`, or its first error.
    fn read_all(reader: Result<InputReader>) -> Result<Vec<RecordBatch>> {
        reader?.collect()
    }

    /// Rows read from a file and from the same bytes (the two sources `explain` and the SQL
    /// engine hand the Parquet reader), with every column the file has.
    fn read_both(path: &Path) -> (Result<Vec<RecordBatch>>, Result<Vec<RecordBatch>>) {
        let from_file = read_all(InputReader::open_all(path, 256));
        let bytes = Bytes::from(std::fs::read(path).unwrap());
        // Every column the footer names (`from_bytes` reads only the columns asked for), where
        // the footer reads.
        let names: Vec<String> = catch_decoder_panic(|| decoder_guard::open(bytes.clone()).map(|b| b.schema().clone()))
            .and_then(|schema| schema.ok())
            .map_or_else(Vec::new, |schema| schema.fields().iter().map(|f| f.name().clone()).collect());
        let from_bytes = read_all(InputReader::from_bytes(bytes, &path.display().to_string(), &names, &[], 256));
        (from_file, from_bytes)
    }

    /// A page header whose unknown field lists two billion 8-byte elements: the Parquet crate
    /// skipped them one by one past the end of the file (seconds of CPU for 160 KiB, then "failed
    /// to fill whole buffer"); both sources now fail the first read at the end, naming the file.
    #[test]
    fn a_page_header_read_past_the_end_of_an_input_file_is_refused_there() {
        let path = regression("page_header_list_past_the_end.parquet");
        let (from_file, from_bytes) = read_both(&path);
        for e in [from_file.unwrap_err().to_string(), from_bytes.unwrap_err().to_string()] {
            assert!(e.contains("page_header_list_past_the_end.parquet") && e.contains("read past the end of the Parquet file"), "{e}");
        }
    }

    /// A file whose footer promises column chunks beyond its end (its data cut out): refused
    /// before anything is allocated for the chunks, naming the file, the row group and column.
    #[test]
    fn column_chunks_outside_an_input_file_are_refused_before_reading() {
        let dir = std::env::temp_dir().join(format!("shapfusion-input-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.parquet");
        let batch = RecordBatch::try_from_iter([("a", Arc::new(Float64Array::from_iter_values((0..1000).map(f64::from))) as ArrayRef)]).unwrap();
        let mut writer = parquet::arrow::ArrowWriter::try_new(File::create(&good).unwrap(), batch.schema(), None).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        let (from_file, from_bytes) = read_both(&good);
        assert_eq!(from_file.unwrap().iter().map(RecordBatch::num_rows).sum::<usize>(), 1000);
        assert_eq!(from_bytes.unwrap().iter().map(RecordBatch::num_rows).sum::<usize>(), 1000);
        // The magic, then the footer as written (its length and the magic): no data at all.
        let bytes = std::fs::read(&good).unwrap();
        let footer_len = u32::from_le_bytes(bytes[bytes.len() - 8..bytes.len() - 4].try_into().unwrap()) as usize;
        let cut = dir.join("cut.parquet");
        std::fs::write(&cut, [&bytes[..4], &bytes[bytes.len() - 8 - footer_len..]].concat()).unwrap();
        let (from_file, from_bytes) = read_both(&cut);
        let e = from_file.unwrap_err().to_string();
        assert!(e.contains("cut.parquet") && e.contains("row group 0, column 0") && e.contains("lies outside the file"), "{e}");
        assert!(from_bytes.unwrap_err().to_string().contains("lies outside the file"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The page headers' walk (before the crate reads them) follows every page of a file with
    /// many: dictionary and data pages, statistics, two row groups; and refuses none of them.
    #[test]
    fn a_file_of_many_pages_reads_whole() {
        let dir = std::env::temp_dir().join(format!("shapfusion-pages-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("pages.parquet");
        let rows = 50_000;
        let batch = RecordBatch::try_from_iter([
            ("a", Arc::new(Float64Array::from_iter_values((0..rows).map(|i| f64::from(i % 97)))) as ArrayRef),
            ("b", Arc::new(Float64Array::from_iter((0..rows).map(|i| (i % 5 != 0).then(|| f64::from(i) * 0.5)))) as ArrayRef),
        ])
        .unwrap();
        let props = parquet::file::properties::WriterProperties::builder()
            .set_data_page_size_limit(512)
            .set_max_row_group_row_count(Some(30_000))
            .set_statistics_enabled(parquet::file::properties::EnabledStatistics::Page)
            .build();
        let mut writer = parquet::arrow::ArrowWriter::try_new(File::create(&path).unwrap(), batch.schema(), Some(props)).unwrap();
        writer.write(&batch).unwrap();
        writer.close().unwrap();
        let metadata = decoder_guard::open(File::open(&path).unwrap()).unwrap().metadata().clone();
        assert_eq!(metadata.num_row_groups(), 2);
        let (from_file, from_bytes) = read_both(&path);
        for batches in [from_file.unwrap(), from_bytes.unwrap()] {
            let read: Vec<f64> = batches
                .iter()
                .flat_map(|b| b.column(1).as_any().downcast_ref::<Float64Array>().unwrap().iter().flatten().collect::<Vec<_>>())
                .collect();
            assert_eq!(read.len(), (0..rows).filter(|i| i % 5 != 0).count());
            assert_eq!(batches.iter().map(RecordBatch::num_rows).sum::<usize>(), rows as usize);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Every input the fuzzer found for the readers of rows is an error, never a panic.
    #[test]
    fn input_fuzz_regressions_are_errors() {
        let mut replayed = 0;
        for entry in std::fs::read_dir(regression("")).unwrap() {
            let (from_file, from_bytes) = read_both(&entry.unwrap().path());
            assert!(from_file.is_err() && from_bytes.is_err());
            replayed += 1;
        }
        assert!(replayed >= 1);
    }

    /// A dictionary page header that claims 400 million doubles in a 30-row file: refused before
    /// the crate fills its dictionary (it took 3 GB), naming the page and the count.
    #[test]
    fn a_dictionary_count_its_page_cannot_hold_is_refused_before_allocating() {
        let path = regression("dictionary_count_past_its_bytes.parquet");
        let e = InputReader::open_all(&path, 256).err().expect("refused when opened").to_string();
        assert!(e.contains("row group 0, column 0, dictionary page at byte 4") && e.contains("values of type DOUBLE cannot fit"), "{e}");
        // The count in a varint of more than ten bytes, whose bits past the 64th the crate
        // wraps onto the first (8.5 GB, found by fuzzing after the check above).
        let path = regression("dictionary_count_in_an_overlong_varint.parquet");
        let e = InputReader::open_all(&path, 256).err().expect("refused when opened").to_string();
        assert!(e.contains("row group 0, column 27, dictionary page at byte 10354: 1082196492 values of type DOUBLE cannot fit"), "{e}");
    }

    /// An Arrow IPC file whose footer says a record batch has a 100 GB body (482 bytes in all):
    /// refused before the reader allocates the body (the process aborted), naming the block.
    #[test]
    fn an_arrow_ipc_block_past_the_end_of_its_file_is_refused_before_allocating() {
        let path = regression("ipc_record_batch_past_the_end.arrow");
        let (from_file, from_bytes) = read_both(&path);
        for e in [from_file.unwrap_err().to_string(), from_bytes.unwrap_err().to_string()] {
            assert!(e.contains("its record batch 0 claims 144 + 107374182400 bytes at byte 136, past the end of the file (482 bytes)"), "{e}");
        }
    }

    /// Arrow IPC batches come at most `batch_rows` rows at a time, whatever their writer made
    /// (two billion rows of nulls take a few hundred bytes, and each batch is computed whole),
    /// and a projected file's schema is its batches' (the kept columns are found in them).
    #[test]
    fn arrow_ipc_batches_are_cut_to_the_batch_rows_and_keep_their_schema() {
        use arrow::array::{Int64Array, NullArray};
        let write = |batch: &RecordBatch| {
            let mut bytes = Vec::new();
            let mut writer = arrow::ipc::writer::FileWriter::try_new(&mut bytes, &batch.schema()).unwrap();
            writer.write(batch).unwrap();
            writer.finish().unwrap();
            drop(writer);
            Bytes::from(bytes)
        };
        // One batch of 10,000 rows: an id first, then two features.
        let id = Arc::new(Int64Array::from_iter_values(0..10_000)) as ArrayRef;
        let x = |k: f64| Arc::new(Float64Array::from_iter_values((0..10_000).map(|i| f64::from(i) * k))) as ArrayRef;
        let batch = RecordBatch::try_from_iter([("id", id), ("x0", x(0.5)), ("x1", x(2.0))]).unwrap();
        let wanted = ["x0".to_string(), "x1".to_string(), "id".to_string()];
        let reader = InputReader::from_bytes(write(&batch), "ids.arrow", &wanted, &[], 256).unwrap();
        let schema = reader.schema();
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["x0", "x1", "id"]);
        let batches: Vec<RecordBatch> = reader.collect::<Result<_>>().unwrap();
        assert_eq!(batches.len(), 40);
        assert!(batches.iter().all(|b| b.num_rows() <= 256 && b.schema() == schema));
        let ids: Vec<i64> = batches.iter().flat_map(|b| b.column(2).as_primitive::<arrow::datatypes::Int64Type>().values().to_vec()).collect();
        assert_eq!(ids, (0..10_000).collect::<Vec<i64>>());

        let nulls = i32::MAX as usize;
        let batch = RecordBatch::try_from_iter([("x0", Arc::new(NullArray::new(nulls)) as ArrayRef)]).unwrap();
        let bytes = write(&batch);
        assert!(bytes.len() < 2048, "{} bytes", bytes.len());
        let mut reader = InputReader::from_bytes(bytes, "nulls.arrow", &["x0".to_string()], &[], 1000).unwrap();
        for _ in 0..3 {
            assert_eq!(reader.next().unwrap().unwrap().num_rows(), 1000);
        }
    }
}
