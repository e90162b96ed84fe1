//! [`Explainer`]: a model, an engine and the threads to run it, ready to turn Arrow record
//! batches into attributions. The one-call entry point of the library:
//!
//! ```no_run
//! use shapfusion_core::{Algorithm, Explainer, Model};
//! # fn rows() -> arrow::array::RecordBatch { unimplemented!() }
//! let model = Model::load("examples/models/fraud.json")?;
//! let explainer = Explainer::builder(model).algorithm(Algorithm::Linear).threads(4).build()?;
//! let shap = explainer.explain_batch(&rows())?; // one column per feature, then `bias`
//! # Ok::<(), shapfusion_core::Error>(())
//! ```

use std::sync::{Arc, OnceLock};

use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::{Schema, SchemaRef};

use crate::batch::{explain_batch, explain_block};
use crate::compute_pool::compute_pool;
use crate::device::{engine_on, interventional_on, prepare_gpu, Device};
use crate::engine::drivers::{in_place, joined};
use crate::engine::{
    covers_counted_from, transformed_interactions_unavailable, Algorithm, Attributions, Engine, FeatureBlock, Index, Interactions, OutputTransform,
    Predictions, Saabas,
};
use crate::error::{Error, Result};
use crate::features::block_from_columns;
use crate::features::FeatureColumns;
use crate::layout::{output_fields, OutputKind};
use crate::model::Model;
use crate::settings::ComputeSettings;
use crate::small_calls::{answer_alone, call_splits, start_answering, CallReport, Lane, SmallCalls, JOINABLE_ROWS, QUICK_SPLITS};

/// A model bound to an engine and a compute pool. Cheap to clone; share it across threads.
#[derive(Clone)]
pub struct Explainer {
    engine: Arc<dyn Engine>,
    model: Arc<Model>,
    /// Saabas values' node expectations, made by the first call that asks.
    saabas: Arc<OnceLock<Saabas>>,
    pool: Arc<rayon::ThreadPool>,
    /// The threads that help a small call on the calling thread ([`CallLane::Joined`]): a pool
    /// of one thread fewer than `pool`, on the CPU's path-dependent engines with several
    /// threads; else none.
    helpers: Option<Arc<rayon::ThreadPool>>,
    output: OutputKind,
    schema: SchemaRef,
    settings: ComputeSettings,
    /// Small requests of [`spawn_output`](Self::spawn_output) waiting for the compute threads.
    small_calls: Arc<SmallCalls>,
    /// Splits a row walks over all trees, where the engine's cost follows them (the CPU's
    /// path-dependent engines), for the [`QuickLane`](crate::small_calls::QuickLane)'s choice;
    /// `None` for the others.
    splits_a_row: Option<usize>,
}

/// Where an [`Explainer`]'s synchronous call runs ([`Explainer::lane_of`]).
#[derive(Debug, Clone, Copy)]
pub(crate) enum CallLane<'a> {
    /// On the calling thread alone ([`in_place`]).
    InPlace,
    /// On the calling thread, with these helpers' threads taking tasks ([`joined`]).
    Joined(&'a Arc<rayon::ThreadPool>),
    /// Handed to the compute pool.
    Pool,
}

/// Settings of an [`Explainer`], each with the default every front end uses.
#[derive(Debug, Clone)]
pub struct ExplainerBuilder {
    model: Arc<Model>,
    settings: ComputeSettings,
    output: OutputKind,
    rows_hint: Option<usize>,
    background: Option<RecordBatch>,
    cover_rows: Option<RecordBatch>,
    transform: OutputTransform,
}

impl Explainer {
    /// Starts an explainer for `model`: engine `auto`, device `auto`, all cores, SHAP values.
    pub fn builder(model: impl Into<Arc<Model>>) -> ExplainerBuilder {
        ExplainerBuilder {
            model: model.into(),
            settings: ComputeSettings::default(),
            output: OutputKind::default(),
            rows_hint: None,
            background: None,
            cover_rows: None,
            transform: OutputTransform::Identity,
        }
    }

    /// Attributions of every row of `batch`, with the [`schema`](Self::schema): features are
    /// found by name (any column order, extra columns ignored; a missing feature is an error
    /// naming it and what the batch has).
    pub fn explain_batch(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        let columns = self.explain_columns(batch)?;
        RecordBatch::try_new(self.schema.clone(), columns).map_err(|e| Error::arrow("assembling the output batch", e))
    }

    /// The output columns of [`explain_batch`](Self::explain_batch) without their schema, for
    /// callers that put them beside columns of their own.
    pub fn explain_columns(&self, batch: &RecordBatch) -> Result<Vec<ArrayRef>> {
        self.output_columns(batch, self.output)
    }

    /// `output`'s columns for `batch` (features by name), whatever this explainer's own output
    /// kind: what servers use, one cached explainer answering every kind of call.
    pub fn output_columns(&self, batch: &RecordBatch, output: OutputKind) -> Result<Vec<ArrayRef>> {
        let features = FeatureColumns::resolve(batch.schema_ref(), self.model())?;
        self.run(batch.num_rows(), output, || explain_batch(self.engine.as_ref(), &features, batch, output))
    }

    /// Runs `call`, a call of `rows` rows of `output`, where [`lane_of`](Self::lane_of) says.
    fn run<T: Send>(&self, rows: usize, output: OutputKind, call: impl FnOnce() -> T + Send) -> T {
        match self.lane_of(rows, output) {
            CallLane::InPlace => in_place(call),
            CallLane::Joined(helpers) => joined(helpers, call),
            CallLane::Pool => self.pool.install(call),
        }
    }

    /// Where a call of `rows` rows of `output` runs. On the CPU's path-dependent engines, a call
    /// the [`QuickLane`](crate::small_calls::QuickLane) would take (within [`QUICK_SPLITS`]
    /// splits walked) runs [in place](in_place) on the calling thread, and so does any call of
    /// at most [`JOINABLE_ROWS`] rows when the pool has one thread (which could only do the
    /// same work, after a hand-off); with several threads such a call runs [joined]: on the
    /// calling thread, the helpers' threads (one fewer than the pool's) taking its tasks as
    /// they wake. Every other call runs on the compute pool.
    ///
    /// Why: the caller waits for a call on the pool asleep, and wakes when it is done. Measured
    /// on a 2-core virtual machine (`examples/bench`, 3,000 calls of one row, medians): a model
    /// of 100 trees of depth 6 (4,947 splits) took 147-153 µs through a pool of one thread and
    /// 78-93 µs through two sharing its trees, against 62-68 µs in place; one of 100 trees of
    /// depth 8 (25,500 splits) 466-498 µs through a pool of one, 310-346 µs in place, and
    /// 262 µs through two (and, through the wheel on another day, 382-396 µs through two
    /// against 382-401 µs in place on one). So small calls from several threads run side by
    /// side on their own threads rather than queue for the pool's. A quick call runs alone even
    /// with several threads: it would be over before a helper woke, and then wait for it. The
    /// values have the same bits on every lane.
    pub(crate) fn lane_of(&self, rows: usize, output: OutputKind) -> CallLane<'_> {
        if self.splits_a_row.is_none() || (rows > JOINABLE_ROWS && !self.is_quick(rows, output)) {
            CallLane::Pool
        } else if let Some(helpers) = self.helpers.as_ref().filter(|_| !self.is_quick(rows, output)) {
            CallLane::Joined(helpers)
        } else {
            CallLane::InPlace
        }
    }

    /// [`output_columns`](Self::output_columns) for a job on `lane`: on the quick lane (which
    /// takes only calls [`is_quick`](Self::is_quick) says it may), in place, on the lane's one
    /// thread; else on the compute pool.
    pub(crate) fn output_columns_on(&self, lane: Lane, batch: &RecordBatch, output: OutputKind) -> Result<Vec<ArrayRef>> {
        debug_assert!(lane == Lane::Pool || self.is_quick(batch.num_rows(), output), "a call too large for the quick lane");
        let features = FeatureColumns::resolve(batch.schema_ref(), self.model())?;
        let call = || explain_batch(self.engine.as_ref(), &features, batch, output);
        match lane {
            Lane::Quick => call(),
            // The lane is chosen already (`small_calls` gives the quick lane the calls that fit it).
            Lane::Pool => self.pool.install(call),
        }
    }

    /// Whether a call of `rows` rows of `output` is small enough for the
    /// [`QuickLane`](crate::small_calls::QuickLane): within [`QUICK_SPLITS`] splits walked, on an
    /// engine whose cost follows them.
    pub(crate) fn is_quick(&self, rows: usize, output: OutputKind) -> bool {
        self.splits_a_row.is_some_and(|splits| call_splits(splits, rows, output, self.model.num_features()) <= QUICK_SPLITS)
    }

    /// `output`'s columns for `columns`, the model's features in its order (the arguments of a
    /// SQL function).
    pub fn output_columns_of(&self, columns: &[ArrayRef], output: OutputKind) -> Result<Vec<ArrayRef>> {
        let model = self.model();
        let rows = columns.first().map_or(0, |c| c.len());
        self.run(rows, output, || explain_block(self.engine.as_ref(), &block_from_columns(columns, model.feature_names(), model)?, output))
    }

    /// SHAP values of `block` (from [`Model::feature_block`] or
    /// [`Model::feature_block_from_values`]) on this explainer's threads, row-major in
    /// XGBoost's `pred_contribs` layout: per row and output group, F values then the bias.
    pub fn shap_values(&self, block: &FeatureBlock) -> Result<Attributions> {
        self.run(block.rows(), OutputKind::Shap, || self.engine.shap(block))
    }

    /// SHAP values of a loss of `block`'s rows against their `labels` (one per row), in the
    /// layout of [`shap_values`](Self::shap_values): for an explainer built with a loss
    /// [`output_transform`](ExplainerBuilder::output_transform) and a background (shap's
    /// `model_output="log_loss"`); each row's bias is the background's mean loss against the
    /// row's label, so each row adds up to its own loss.
    pub fn shap_values_with_labels(&self, block: &FeatureBlock, labels: &[f64]) -> Result<Attributions> {
        self.run(block.rows(), OutputKind::Shap, || self.engine.shap_with_labels(block, labels))
    }

    /// SHAP interaction values of `block` in XGBoost's `pred_interactions` layout (with a
    /// background, the interaction index of the interventional game; an error for a transformed
    /// output).
    pub fn interaction_values(&self, block: &FeatureBlock) -> Result<Interactions> {
        self.run(block.rows(), OutputKind::Interactions, || self.engine.interactions(block))
    }

    /// Margin (raw score) predictions of `block`, `rows × G`.
    pub fn margins(&self, block: &FeatureBlock) -> Result<Predictions> {
        self.run(block.rows(), OutputKind::Margin, || self.engine.predict(block))
    }

    /// Saabas values of `block` (the approximation of XGBoost's `approx_contribs` and shap's
    /// `approximate=True`; see [`Saabas`]), in the layout of [`shap_values`](Self::shap_values).
    /// They follow the model's paths whatever the engine: a background plays no part.
    pub fn saabas_values(&self, block: &FeatureBlock) -> Result<Attributions> {
        self.model.refuse_linear_leaves("Saabas values")?;
        let saabas = self.saabas.get_or_init(|| Saabas::new(self.model.clone()));
        self.run(block.rows(), OutputKind::Shap, || saabas.values(block))
    }

    /// `output` for `block` as a record batch: the columns `explain` writes for that output,
    /// whatever this explainer's own output kind.
    pub fn explain_block(&self, block: &FeatureBlock, output: OutputKind) -> Result<RecordBatch> {
        let columns = self.run(block.rows(), output, || explain_block(self.engine.as_ref(), block, output))?;
        let schema = Arc::new(Schema::new(output_fields(self.model(), output)));
        RecordBatch::try_new(schema, columns).map_err(|e| Error::arrow("assembling the output batch", e))
    }

    /// The schema of every output batch: one Float64 column per feature then `bias` (SHAP
    /// values; lists of G values for multi-output models), or one `interactions` or
    /// `prediction` column.
    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    /// The model being explained.
    pub fn model(&self) -> &Model {
        self.engine.model()
    }

    /// The engine that runs (what `auto` picked).
    pub fn engine(&self) -> &Arc<dyn Engine> {
        &self.engine
    }

    /// Runs `job` with this explainer on its compute threads and returns at once, for async
    /// servers: a request reaches the pool in one hand-off, and no thread of the caller's is
    /// held waiting for it (the synchronous calls above, made from outside the pool, each park
    /// their thread until the pool is done, so a server would need a blocking thread per batch
    /// in flight). A panic in `job` ends `job` only (the panic hook reports it); the caller
    /// learns of it by what `job` did not do, such as a channel's sender dropped unsent.
    pub fn spawn(&self, job: impl FnOnce(&Explainer) + Send + 'static) {
        let explainer = self.clone();
        self.pool.spawn(move || {
            // Unwinding out of a spawned job would abort the process (rayon's default).
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(&explainer))).is_err() {
                tracing::error!("a compute job panicked; its request fails, the process goes on");
            }
        });
    }

    /// `output` for `batch` on the compute threads, handed to `reply` with how it was computed;
    /// returns at once (as [`spawn`](Self::spawn)). What servers use for their requests:
    /// requests of at most 16 rows are answered by one job at a time, and those that arrive
    /// while it computes wait together and are computed in one engine call (up to 64 rows, same
    /// output and schema), each getting its own rows back with the bits a call of its own gives
    /// on the CPU; a request that arrives while none computes is computed at once, alone
    /// (nothing waits on purpose). Larger requests are computed on their own, side by side.
    /// A request that finds no job answering starts one on the process's quick lane, a thread
    /// of its own beside the compute pool that waits without spinning, when its call walks at
    /// most 8,192 splits (about a tenth of a millisecond of one core; a row of a
    /// small model): it is computed there, in one hand-off. Larger calls, and the rest of the
    /// job's work from the first of them on, go to the compute pool.
    /// `reply` gets the columns of `batch`'s rows only; a joined call that fails is answered
    /// again one request at a time, so an error is always the request's own. A panic drops
    /// `reply` uncalled.
    pub fn spawn_output(&self, batch: RecordBatch, output: OutputKind, reply: impl FnOnce(Result<Vec<ArrayRef>>, CallReport) + Send + 'static) {
        let rows = batch.num_rows();
        if rows > JOINABLE_ROWS {
            self.spawn(move |explainer| answer_alone(explainer, batch, output, Box::new(reply), Lane::Pool));
        } else if self.small_calls.push(batch, output, Box::new(reply)) {
            start_answering(self, self.is_quick(rows, output));
        }
    }

    /// The small requests of [`spawn_output`](Self::spawn_output) waiting for the threads.
    pub(crate) fn small_calls(&self) -> &SmallCalls {
        &self.small_calls
    }

    /// Compute threads in this explainer's pool.
    pub fn threads(&self) -> usize {
        self.pool.current_num_threads()
    }

    /// The settings it was built with.
    pub fn settings(&self) -> &ComputeSettings {
        &self.settings
    }
}

impl std::fmt::Debug for Explainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Explainer").field("engine", &self.engine.name()).field("threads", &self.threads()).field("output", &self.output).finish()
    }
}

impl ExplainerBuilder {
    /// All compute settings at once (what every front end passes, parsed from its options).
    pub fn settings(mut self, settings: ComputeSettings) -> Self {
        self.settings = settings;
        self
    }

    /// The engine, by [`Algorithm`] (default `auto`: picked from the model's shape).
    pub fn algorithm(mut self, algorithm: Algorithm) -> Self {
        self.settings.algorithm = algorithm;
        self
    }

    /// Where to compute (default `auto`: the GPU when one is usable and the algorithm is
    /// `auto`, else the CPU).
    pub fn device(mut self, device: Device) -> Self {
        self.settings.device = device;
        self
    }

    /// Compute threads (default: all cores; 0 also means all cores). Pools are shared in the
    /// process and capped at its cores; results never depend on the thread count.
    pub fn threads(mut self, threads: usize) -> Self {
        self.settings.threads = crate::settings::thread_count(Some(threads));
        self
    }

    /// What to compute (default SHAP values).
    pub fn output(mut self, output: OutputKind) -> Self {
        self.output = output;
        self
    }

    /// Rows expected per call, if known: lets `auto` weigh an engine's set-up against its
    /// per-row cost. Left unset, every front end picks the same engine for a model.
    pub fn rows_hint(mut self, rows: usize) -> Self {
        self.rows_hint = Some(rows);
        self
    }

    /// Most memory fast-v2's tables may take, in bytes (default 256 MiB).
    pub fn v2_memory_bytes(mut self, bytes: usize) -> Self {
        self.settings.v2_memory_bytes = bytes;
        self
    }

    /// Interventional SHAP over these background rows (features found by name, as in
    /// [`Explainer::explain_batch`]): each feature left out of a coalition takes the background
    /// rows' values, as `shap.TreeExplainer(model, data=background)` does, and the bias is the
    /// background's mean margin. Without a background, SHAP values are path-dependent (the
    /// training covers stand in for a missing feature), as XGBoost's and LightGBM's own.
    pub fn background(mut self, rows: RecordBatch) -> Self {
        self.background = Some(rows);
        self
    }

    /// Path-dependent SHAP with every node's cover counted from these rows (features found by
    /// name) instead of the training covers, as `shap.TreeExplainer(model, data,
    /// feature_perturbation="tree_path_dependent")` computes them: the bias is the rows' mean
    /// margin (a node none of them reaches weighs [`UNREACHED_COVER`](crate::engine::UNREACHED_COVER)),
    /// and each row's values add up to its margin. Not with a [`background`](Self::background).
    pub fn cover_rows(mut self, rows: RecordBatch) -> Self {
        self.cover_rows = Some(rows);
        self
    }

    /// What interventional values attribute (default the margin): `Logistic` gives shap's
    /// `model_output="probability"` values of a log-odds model, each background row's margin
    /// values rescaled to the change in probability, the bias the background's mean
    /// probability. Needs a [`background`](Self::background).
    pub fn output_transform(mut self, transform: OutputTransform) -> Self {
        self.transform = transform;
        self
    }

    /// The attribution index (default Shapley values): [`Index::Banzhaf`] gives Banzhaf values
    /// (path-dependent, or over a [`background`](Self::background)) and path-dependent Banzhaf
    /// interaction values, in the same layouts, on the CPU.
    pub fn index(mut self, index: Index) -> Self {
        self.settings.index = index;
        self
    }

    /// Most memory the interventional engine's aggregated background may take, in bytes
    /// (default 1 GiB); leaves beyond it keep their background patterns instead of tables.
    pub fn interventional_memory_bytes(mut self, bytes: usize) -> Self {
        self.settings.interventional_memory_bytes = bytes;
        self
    }

    /// Builds the engine (and any tables it needs, on the compute pool).
    pub fn build(self) -> Result<Explainer> {
        let pool = compute_pool(self.settings.threads_to_run())?;
        let (device, algorithm, options) = (self.settings.device, self.settings.algorithm, self.settings.engine_options());
        let mut model = self.model;
        if let Some(rows) = &self.cover_rows {
            if self.background.is_some() {
                return Err(Error::InvalidArgument(
                    "give either background rows (interventional SHAP) or rows to count covers from (path-dependent SHAP over those rows), not both"
                        .into(),
                ));
            }
            let block = model.feature_block(rows).map_err(|e| e.context("rows to count covers from"))?;
            model = Arc::new(pool.install(|| covers_counted_from(&model, &block))?);
        }
        let engine = match &self.background {
            None if self.transform != OutputTransform::Identity => {
                return Err(Error::InvalidArgument(format!(
                    "the {} output transform is interventional only: give background rows (path-dependent values attribute the margin)",
                    self.transform
                )))
            }
            None => {
                prepare_gpu(device, algorithm, options.index);
                pool.install(|| engine_on(device, model.clone(), algorithm, self.rows_hint, &options))?
            }
            Some(rows) => {
                // Refused here, before the background is aggregated, rather than at the first batch.
                if self.output == OutputKind::Interactions && self.transform != OutputTransform::Identity {
                    return Err(transformed_interactions_unavailable());
                }
                let background = model.feature_block(rows).map_err(|e| e.context("background"))?;
                pool.install(|| interventional_on(device, model.clone(), &background, algorithm, self.transform, &options))?
            }
        };
        let schema = Arc::new(Schema::new(output_fields(&model, self.output)));
        // The CPU's path-dependent engines walk a row's splits (interventional ones walk the
        // background's too, and the GPU's cost is its launches).
        let splits_a_row = (self.background.is_none() && engine.name() != "gpu")
            .then(|| model.trees().iter().map(|tree| tree.nodes.iter().filter(|node| !node.is_leaf()).count()).sum());
        let helpers = match pool.current_num_threads() {
            threads if threads > 1 && splits_a_row.is_some() => Some(compute_pool(threads - 1)?),
            _ => None,
        };
        Ok(Explainer {
            engine,
            model,
            saabas: Arc::new(OnceLock::new()),
            pool,
            helpers,
            output: self.output,
            schema,
            settings: self.settings,
            small_calls: Arc::default(),
            splits_a_row,
        })
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::{Array, Float64Array};
    use arrow::datatypes::{DataType, Field};

    use super::*;

    fn fixture_model() -> Model {
        Model::load(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/models/fraud.json")).unwrap()
    }

    /// A batch of the model's features in reverse order, with one column the model lacks.
    fn shuffled_rows(model: &Model, rows: usize) -> RecordBatch {
        let mut fields = vec![Field::new("id", DataType::Float64, false)];
        let mut columns: Vec<ArrayRef> = vec![Arc::new(Float64Array::from_iter_values((0..rows).map(|r| r as f64)))];
        for (j, name) in model.feature_names().iter().enumerate().rev() {
            fields.push(Field::new(name, DataType::Float64, true));
            columns.push(Arc::new(Float64Array::from_iter_values((0..rows).map(|r| ((r * 7 + j * 3) % 11) as f64 - 2.0))));
        }
        RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
    }

    #[test]
    fn a_batch_in_a_batch_out_with_its_schema_and_additive() {
        let model = fixture_model();
        let rows = shuffled_rows(&model, 40);
        let explainer = Explainer::builder(model.clone()).algorithm(Algorithm::TreeShap).threads(1).build().unwrap();
        let shap = explainer.explain_batch(&rows).unwrap();
        assert_eq!(shap.schema(), explainer.schema());
        assert_eq!(shap.num_rows(), 40);
        assert_eq!(shap.num_columns(), model.num_features() + 1);
        let margins = Explainer::builder(model).output(OutputKind::Margin).build().unwrap().explain_batch(&rows).unwrap();
        let margin = margins.column(0).as_any().downcast_ref::<Float64Array>().unwrap();
        for r in 0..40 {
            let sum: f64 = shap.columns().iter().map(|c| c.as_any().downcast_ref::<Float64Array>().unwrap().value(r)).sum();
            assert!((sum - margin.value(r)).abs() < 1e-9, "row {r}: {sum} vs {}", margin.value(r));
        }
    }

    #[test]
    fn every_engine_and_thread_count_gives_the_same_batch() {
        let model = fixture_model();
        let rows = shuffled_rows(&model, 70);
        let reference = Explainer::builder(model.clone()).algorithm(Algorithm::TreeShap).threads(1).build().unwrap().explain_batch(&rows).unwrap();
        for name in Algorithm::NAMES {
            let explainer = Explainer::builder(model.clone()).algorithm(name.parse().unwrap()).device(Device::Cpu).threads(2).build().unwrap();
            let got = explainer.explain_batch(&rows).unwrap();
            for (a, b) in got.columns().iter().zip(reference.columns()) {
                let (a, b) = (a.as_any().downcast_ref::<Float64Array>().unwrap(), b.as_any().downcast_ref::<Float64Array>().unwrap());
                for r in 0..a.len() {
                    assert!((a.value(r) - b.value(r)).abs() < 1e-12, "{name} row {r}");
                }
            }
        }
    }

    #[test]
    fn a_spawned_job_answers_as_a_call_does_and_a_panicking_one_ends_alone() {
        let model = fixture_model();
        let rows = shuffled_rows(&model, 5);
        let explainer = Explainer::builder(model).threads(2).build().unwrap();
        let want = explainer.output_columns(&rows, OutputKind::Shap).unwrap();
        let (sender, panicked) = std::sync::mpsc::channel::<()>();
        explainer.spawn(move |_| {
            let _unsent = sender;
            panic!("a job that fails");
        });
        // Its sender was dropped unsent: what the worker reads as a failed request.
        assert!(panicked.recv().is_err());
        let (sender, answered) = std::sync::mpsc::channel();
        explainer.spawn(move |e| sender.send(e.output_columns(&rows, OutputKind::Shap).unwrap()).unwrap());
        let got = answered.recv().unwrap();
        for (a, b) in got.iter().zip(&want) {
            assert_eq!(a.as_any().downcast_ref::<Float64Array>().unwrap().values(), b.as_any().downcast_ref::<Float64Array>().unwrap().values());
        }
    }

    #[test]
    fn a_missing_feature_is_named() {
        let model = fixture_model();
        let rows = shuffled_rows(&model, 3);
        let without = rows.project(&(0..rows.num_columns() - 1).collect::<Vec<_>>()).unwrap();
        let missing = &model.feature_names()[0];
        let e = Explainer::builder(model.clone()).build().unwrap().explain_batch(&without).unwrap_err().to_string();
        assert!(e.contains(missing.as_str()), "{e}");
    }

    /// Rows of the XGBoost fixture with named categories (text columns among its features).
    fn named_category_rows() -> (Model, RecordBatch) {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/xgb_named_categories");
        let model = Model::load(format!("{dir}/model.json")).unwrap();
        let file = std::fs::File::open(format!("{dir}/input.parquet")).unwrap();
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file).unwrap().build().unwrap();
        let batches: Vec<RecordBatch> = reader.map(|b| b.unwrap()).collect();
        (model, arrow::compute::concat_batches(&batches[0].schema(), &batches).unwrap())
    }

    #[test]
    fn small_requests_waiting_together_are_joined_with_the_bits_of_calls_of_their_own() {
        use std::sync::mpsc::channel;
        let (model, rows) = named_category_rows();
        // One thread, held by a job until every request waits: a deterministic queue (the quick
        // lane held the same way below).
        let explainer = Explainer::builder(model).algorithm(Algorithm::Linear).threads(1).build().unwrap();
        // Same schema as the others, but a country the model never saw: XGBoost refuses the row,
        // and so does the batch step, so the joined call fails and each request answers alone.
        let bad = {
            let mut columns = rows.slice(0, 2).columns().to_vec();
            let country = rows.schema().index_of("country").unwrap();
            columns[country] = Arc::new(arrow::array::StringArray::from(vec![Some("Atlantis"), Some("US")]));
            RecordBatch::try_new(rows.schema(), columns).unwrap()
        };
        // In order of arrival: five good requests and the bad one (a run of 25 rows that fails,
        // so each answers alone), one of another output (not joined to its neighbours), then
        // two more (joined: 5 rows in one call).
        let requests: Vec<(RecordBatch, OutputKind)> = vec![
            (rows.slice(0, 1), OutputKind::Shap),
            (rows.slice(1, 3), OutputKind::Shap),
            (rows.slice(4, 1), OutputKind::Shap),
            (rows.slice(5, 16), OutputKind::Shap),
            (rows.slice(21, 2), OutputKind::Shap),
            (bad, OutputKind::Shap),
            (rows.slice(23, 2), OutputKind::Margin),
            (rows.slice(25, 1), OutputKind::Shap),
            (rows.slice(26, 4), OutputKind::Shap),
        ];
        let (bad_at, joined) = (5, |i: usize| if i >= 7 { 2 } else { 1 });
        // This model's calls are small enough for the quick lane, whose job would start on the
        // first request: the lane is held too, so the job finds every request waiting.
        let (release, held) = channel::<()>();
        let (started, running) = channel();
        explainer.spawn(move |_| {
            started.send(()).unwrap();
            held.recv().unwrap();
        });
        running.recv().unwrap();
        let (release_lane, lane_held) = channel::<()>();
        let (lane_started, lane_running) = channel();
        crate::small_calls::QuickLane::get().expect("the quick lane starts").spawn(move || {
            lane_started.send(()).unwrap();
            lane_held.recv().unwrap();
        });
        lane_running.recv().unwrap();
        let (sender, answers) = channel();
        for (i, (batch, output)) in requests.iter().enumerate() {
            let sender = sender.clone();
            explainer.spawn_output(batch.clone(), *output, move |columns, report| sender.send((i, columns, report)).unwrap());
        }
        release_lane.send(()).unwrap();
        release.send(()).unwrap();
        let mut got: Vec<_> = (0..requests.len()).map(|_| answers.recv().unwrap()).collect();
        got.sort_by_key(|(i, _, _)| *i);
        for (i, columns, report) in got {
            let (batch, output) = &requests[i];
            match (columns, explainer.output_columns(batch, *output)) {
                (Ok(columns), Ok(want)) => {
                    assert_eq!(columns.len(), want.len());
                    for (a, b) in columns.iter().zip(&want) {
                        let (a, b) = (a.as_any().downcast_ref::<Float64Array>().unwrap(), b.as_any().downcast_ref::<Float64Array>().unwrap());
                        assert_eq!(a.len(), batch.num_rows(), "request {i}");
                        let bits = |x: &Float64Array| x.values().iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                        assert_eq!(bits(a), bits(b), "request {i}: not the bits of a call of its own");
                    }
                    assert_eq!(report.joined(), joined(i), "request {i}");
                }
                (Err(e), Err(want)) => {
                    assert_eq!(i, bad_at);
                    assert_eq!(e.to_string(), want.to_string());
                    assert!(e.to_string().contains("Atlantis"), "{e}");
                }
                (columns, want) => panic!("request {i}: {:?} against a call of its own: {:?}", columns.err(), want.err()),
            }
        }
    }

    #[test]
    fn small_calls_run_on_the_calling_thread_with_the_pools_bits() {
        let model = fixture_model();
        let splits: usize = model.trees().iter().map(|t| t.nodes.iter().filter(|n| !n.is_leaf()).count()).sum();
        let quick_rows = QUICK_SPLITS / splits;
        assert!((1..JOINABLE_ROWS).contains(&quick_rows), "the fixture's {splits} splits: {quick_rows} rows fit the quick lane's size");
        let two = Explainer::builder(model.clone()).threads(2).build().unwrap();
        let one = Explainer::builder(model.clone()).threads(1).build().unwrap();
        // (The lanes by name: a joined lane's helpers are one thread fewer than the explainer's.)
        let lane = |e: &Explainer, rows, output| match e.lane_of(rows, output) {
            CallLane::Joined(helpers) => {
                assert_eq!(helpers.current_num_threads() + 1, e.threads());
                "joined"
            }
            CallLane::InPlace => "in place",
            CallLane::Pool => "pool",
        };
        if crate::settings::available_cores() > 1 {
            // Two threads: what the quick lane would take alone; past it, up to a lane group's
            // rows joined by a helper's thread; larger calls on the pool.
            assert_eq!(lane(&two, quick_rows, OutputKind::Shap), "in place");
            assert_eq!(lane(&two, quick_rows + 1, OutputKind::Shap), "joined");
            assert_eq!(lane(&two, JOINABLE_ROWS, OutputKind::Interactions), "joined");
            assert_eq!(lane(&two, JOINABLE_ROWS + 1, OutputKind::Shap), "pool");
        }
        // One thread: up to a lane group's rows, whatever the model's size.
        assert_eq!(lane(&one, JOINABLE_ROWS, OutputKind::Shap), "in place");
        assert_eq!(lane(&one, JOINABLE_ROWS + 1, OutputKind::Shap), "pool");
        assert_eq!(lane(&one, JOINABLE_ROWS, OutputKind::Interactions), "in place");
        // Engines whose cost is not a row's splits (a background's) stay on the pool.
        let background = shuffled_rows(&model, 30).project(&(1..=model.num_features()).collect::<Vec<_>>()).unwrap();
        let interventional = Explainer::builder(model.clone()).threads(2).background(background).build().unwrap();
        assert_eq!(lane(&interventional, 1, OutputKind::Shap), "pool");

        // In place or on the pool, every output has the pool's bits, in blocks of every small size
        // (one task or several, a lane group, a flat walk).
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<u64>>();
        let batch = shuffled_rows(&model, 2 * JOINABLE_ROWS + 3);
        // Every engine on one thread (in place) and on two (joined, where there are two cores).
        let engines: Vec<Explainer> = Algorithm::NAMES
            .iter()
            .flat_map(|name| [1, 2].map(|threads| (name, threads)))
            .map(|(name, threads)| {
                Explainer::builder(model.clone()).algorithm(name.parse().unwrap()).device(Device::Cpu).threads(threads).build().unwrap()
            })
            .collect();
        for explainer in &engines {
            for rows in [1, 2, 3, quick_rows, quick_rows + 1, JOINABLE_ROWS, JOINABLE_ROWS + 1, 2 * JOINABLE_ROWS + 3] {
                let block = model.feature_block(&batch.slice(0, rows)).unwrap();
                let engine = explainer.engine.as_ref();
                let what = format!("{}, {} thread(s), {rows} rows", engine.name(), explainer.threads());
                assert_eq!(
                    bits(&explainer.shap_values(&block).unwrap().values),
                    bits(&explainer.pool.install(|| engine.shap(&block)).unwrap().values),
                    "SHAP, {what}"
                );
                assert_eq!(
                    bits(&explainer.interaction_values(&block).unwrap().values),
                    bits(&explainer.pool.install(|| engine.interactions(&block)).unwrap().values),
                    "interactions, {what}"
                );
                assert_eq!(
                    bits(&explainer.margins(&block).unwrap().values),
                    bits(&explainer.pool.install(|| engine.predict(&block)).unwrap().values),
                    "margins, {what}"
                );
            }
        }
    }
}
