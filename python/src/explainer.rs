//! `NativeExplainer`: a prepared model and engine, called by `shapfusion.Explainer` with rows
//! and returning flat float64 arrays plus their shape (the Python side names the layout).

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::compute::concat_batches;
use arrow_pyarrow::ToPyArrow;
use numpy::{PyArray1, PyArrayDyn, PyArrayMethods, PyReadonlyArray1, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::exceptions::PyMemoryError;
use pyo3::prelude::*;
use shapfusion_core::model::{SplitRule, LEAF};
use shapfusion_core::{Algorithm, Device, Error, Explainer, Index, Model, OutputKind, OutputTransform, Result};

use crate::chunks::{first_chunk_rows, for_each_chunk};
use crate::errors::to_py;
use crate::rows::{read_arrow, Rows};

/// A model bound to an engine and compute threads (see `shapfusion.Explainer`).
#[pyclass(frozen, module = "shapfusion._shapfusion")]
pub struct NativeExplainer {
    explainer: Explainer,
    /// Leaves of the whole ensemble: the cost model's size of a row (see [`first_chunk_rows`]),
    /// counted once here rather than by every call.
    leaves: usize,
}

/// The background of an explainer that only describes a model (its names, objective and output
/// layout: `shapfusion.TreeExplainer`'s and `shapfusion.spark`'s driver-side explainers) whose
/// values exist only over a background (LightGBM linear trees): one row of missing values, so
/// the engine builds in no time. The values such an explainer would give are never shown.
fn describing_background(model: &Model) -> PyResult<RecordBatch> {
    use arrow::array::{ArrayRef, Float64Array};
    use arrow::datatypes::{DataType, Field, Schema};
    let fields: Vec<Field> = model.feature_names().iter().map(|name| Field::new(name, DataType::Float64, true)).collect();
    let columns: Vec<ArrayRef> = fields.iter().map(|_| Arc::new(Float64Array::from(vec![f64::NAN])) as ArrayRef).collect();
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).map_err(|e| to_py(Error::arrow("a describing explainer's background", e)))
}

/// What one call computes, and how many values it gives a row.
#[derive(Clone, Copy)]
enum Output {
    Shap,
    Interactions,
    Margins,
    /// Saabas values (`approximate=True`), in the layout of SHAP values.
    Saabas,
}

impl Output {
    fn parse(name: &str) -> PyResult<Output> {
        match name {
            "shap" => Ok(Output::Shap),
            "interactions" => Ok(Output::Interactions),
            "margin" => Ok(Output::Margins),
            "saabas" => Ok(Output::Saabas),
            other => Err(to_py(Error::InvalidArgument(format!("unknown output {other:?}; expected shap, interactions, margin or saabas")))),
        }
    }

    fn kind(self) -> PyResult<OutputKind> {
        Ok(match self {
            Output::Shap => OutputKind::Shap,
            Output::Interactions => OutputKind::Interactions,
            Output::Margins => OutputKind::Margin,
            Output::Saabas => return Err(to_py(Error::Unsupported("Saabas values come as a NumPy array only (as_arrow=False)".into()))),
        })
    }

    /// One row's shape in XGBoost's layouts: `[F+1]`, `[F+1, F+1]` or `[]`, after `[G]` for a
    /// model with G > 1 output groups.
    fn row_shape(self, model: &Model) -> Vec<usize> {
        let w = model.num_features().saturating_add(1);
        let groups = Some(model.num_groups()).filter(|&g| g > 1);
        let values: &[usize] = match self {
            Output::Shap | Output::Saabas => &[w],
            Output::Interactions => &[w, w],
            Output::Margins => &[],
        };
        groups.into_iter().chain(values.iter().copied()).collect()
    }

    /// Rows for the first chunk of a call on a model of `leaves` leaves (see
    /// [`first_chunk_rows`]).
    fn first_chunk(self, explainer: &Explainer, leaves: usize) -> usize {
        let factor = match self {
            Output::Interactions => explainer.model().num_features() + 1,
            Output::Shap | Output::Margins | Output::Saabas => 1,
        };
        first_chunk_rows(leaves, factor, explainer.threads())
    }

    /// The computed values of one block, row-major; `labels`, the block's rows' labels, for
    /// SHAP values of a loss.
    fn compute(self, explainer: &Explainer, block: &shapfusion_core::engine::FeatureBlock, labels: Option<&[f64]>) -> Result<Vec<f64>> {
        Ok(match (self, labels) {
            (Output::Shap, Some(labels)) => explainer.shap_values_with_labels(block, labels)?.values,
            (_, Some(_)) => return Err(Error::InvalidArgument("labels go with SHAP values of a loss output only".into())),
            (Output::Shap, None) => explainer.shap_values(block)?.values,
            (Output::Interactions, None) => explainer.interaction_values(block)?.values,
            (Output::Margins, None) => explainer.margins(block)?.values,
            (Output::Saabas, None) => explainer.saabas_values(block)?.values,
        })
    }
}

#[pymethods]
impl NativeExplainer {
    /// Loads the model (`path`; `data`, the model file's bytes; or `spark_files`, a Spark ML
    /// model directory's (relative path, bytes) pairs; named `name` in errors) and
    /// builds the engine. `background`, when given, is rows for interventional SHAP, as a
    /// float64 matrix (with `background_names`) or an Arrow object; `transform` ("identity",
    /// "logistic", or a loss: "logistic_nlogloss", "squared_loss") is what those values
    /// attribute. `cover_rows` (with `cover_names`), in the same forms, are rows to count the
    /// covers of path-dependent values from. `tree_limit` keeps the model's first trees only (in
    /// the file's order). `device` ("cpu", "gpu" or "auto") is where the engine runs. `index`
    /// ("shapley" or "banzhaf") is the attribution index. `describe` asks for an explainer of
    /// the model's names and output layout only ([`describing_background`]).
    #[new]
    #[pyo3(signature = (*, path=None, data=None, name="<memory>", algorithm="auto", threads=0, background=None, background_names=None, transform="identity", tree_limit=None, spark_files=None, cover_rows=None, cover_names=None, device="cpu", index="shapley", describe=false))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        path: Option<std::path::PathBuf>,
        data: Option<&[u8]>,
        name: &str,
        algorithm: &str,
        threads: usize,
        background: Option<&Bound<'_, PyAny>>,
        background_names: Option<Vec<String>>,
        transform: &str,
        tree_limit: Option<usize>,
        spark_files: Option<Vec<(String, Vec<u8>)>>,
        cover_rows: Option<&Bound<'_, PyAny>>,
        cover_names: Option<Vec<String>>,
        device: &str,
        index: &str,
        describe: bool,
    ) -> PyResult<Self> {
        let mut model = match (path, data, spark_files) {
            (Some(path), None, None) => py.detach(|| load_path(&path)),
            (None, Some(bytes), None) => py.detach(|| Model::from_bytes(bytes, name)),
            (None, None, Some(files)) => py.detach(|| spark_files_model(files, name)),
            _ => Err(Error::InvalidArgument("give the model as exactly one of a path, bytes or a Spark ML model directory's files".into())),
        }
        .map_err(to_py)?;
        if let Some(limit) = tree_limit {
            if limit == 0 {
                return Err(to_py(Error::InvalidArgument(format!("tree_limit must be at least 1; {name} has {} trees", model.trees().len()))));
            }
            let mut parts = model.into_parts();
            parts.trees.truncate(limit);
            model = Model::new(parts, name).map_err(to_py)?;
        }
        let model = Arc::new(model);
        let algorithm: Algorithm = algorithm.parse().map_err(to_py)?;
        let transform: OutputTransform = transform.parse().map_err(to_py)?;
        let device: Device = device.parse().map_err(to_py)?;
        let index: Index = index.parse().map_err(to_py)?;
        let mut builder =
            Explainer::builder(model.clone()).algorithm(algorithm).device(device).threads(threads).output_transform(transform).index(index);
        if let Some(background) = background {
            let rows = with_rows(&model, background, background_names, |rows| rows.into_batch(&model).map_err(to_py))?;
            builder = builder.background(rows);
        } else if describe && model.has_linear_leaves() {
            builder = builder.background(describing_background(&model)?);
        }
        if let Some(cover_rows) = cover_rows {
            let rows = with_rows(&model, cover_rows, cover_names, |rows| rows.into_batch(&model).map_err(to_py))?;
            builder = builder.cover_rows(rows);
        }
        let explainer = py.detach(|| builder.build()).map_err(to_py)?;
        let leaves = model.trees().iter().map(|t| t.num_leaves()).sum();
        Ok(NativeExplainer { explainer, leaves })
    }

    /// `output` ("shap", "interactions" or "margin") for every row of `x` (a float64 matrix,
    /// with `names` for its columns, or an Arrow object), as a NumPy array in XGBoost's layout:
    /// `(n, *row_shape)`. `labels` (float64, one per row) are the rows' labels, for SHAP values
    /// of a loss transform.
    #[pyo3(signature = (x, output, names=None, labels=None))]
    fn compute<'py>(
        &self,
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        output: &str,
        names: Option<Vec<String>>,
        labels: Option<PyReadonlyArray1<'py, f64>>,
    ) -> PyResult<Bound<'py, PyArrayDyn<f64>>> {
        let output = Output::parse(output)?;
        let labels: Option<Vec<f64>> = labels.map(|l| l.as_array().to_vec());
        let model = self.explainer.model();
        let row_shape = output.row_shape(model);
        let width = row_shape.iter().try_fold(1usize, |w, &d| w.checked_mul(d)).unwrap_or(usize::MAX);
        with_rows(model, x, names, |rows| {
            let n = rows.len();
            if let Some(labels) = &labels {
                if labels.len() != n {
                    return Err(to_py(Error::InvalidArgument(format!("{} labels for {n} rows: give one label per row", labels.len()))));
                }
            }
            // Reserved (untouched) up front, so a call too large for memory fails before any work.
            let mut values = reserve(n, width)?;
            for_each_chunk(py, n, output.first_chunk(&self.explainer, self.leaves), |range| {
                let block = rows.block(model, range.clone())?;
                let out = output.compute(&self.explainer, &block, labels.as_deref().map(|l| &l[range.clone()]))?;
                if out.len() != range.len() * width {
                    return Err(Error::Internal(format!("the engine returned {} values for {} rows of {width}", out.len(), range.len())));
                }
                if range.len() == n {
                    values = out; // one chunk: the engine's array is the answer, no copy
                } else {
                    values.extend_from_slice(&out);
                }
                Ok(())
            })?;
            let shape: Vec<usize> = std::iter::once(n).chain(row_shape.iter().copied()).collect();
            PyArray1::from_vec(py, values).reshape(shape)
        })
    }

    /// `output` for every row of `x` as a pyarrow `RecordBatch` with the columns
    /// `shapfusion explain` writes.
    #[pyo3(signature = (x, output, names=None))]
    fn compute_arrow<'py>(&self, py: Python<'py>, x: &Bound<'py, PyAny>, output: &str, names: Option<Vec<String>>) -> PyResult<Bound<'py, PyAny>> {
        let output = Output::parse(output)?;
        let (kind, first_chunk) = (output.kind()?, output.first_chunk(&self.explainer, self.leaves));
        let model = self.explainer.model();
        with_rows(model, x, names, |rows| {
            let mut batches: Vec<RecordBatch> = Vec::new();
            for_each_chunk(py, rows.len(), first_chunk, |range| {
                let block = rows.block(model, range)?;
                batches.push(self.explainer.explain_block(&block, kind)?);
                Ok(())
            })?;
            if batches.is_empty() {
                // No rows: still the right columns.
                let none = rows.block(model, 0..0).and_then(|block| self.explainer.explain_block(&block, kind)).map_err(to_py)?;
                batches.push(none);
            }
            let batch = concat_batches(&batches[0].schema(), &batches).map_err(|e| to_py(Error::arrow("assembling the output", e)))?;
            batch.to_pyarrow(py)
        })
    }

    /// The model's feature names, in its order.
    #[getter]
    fn feature_names(&self) -> Vec<String> {
        self.explainer.model().feature_names().to_vec()
    }

    /// Output groups (classes for a multiclass model, targets for a multi-output one).
    #[getter]
    fn num_groups(&self) -> usize {
        self.explainer.model().num_groups()
    }

    /// Trees in the model (after `tree_limit`).
    #[getter]
    fn num_trees(&self) -> usize {
        self.explainer.model().trees().len()
    }

    /// The model's objective as its library wrote it (`binary:logistic`, `binary sigmoid:1`,
    /// `Logloss`, ...).
    #[getter]
    fn objective(&self) -> String {
        self.explainer.model().objective().to_string()
    }

    /// The model file's format (`xgboost-json`, `lightgbm-text`, ...).
    #[getter]
    fn format(&self) -> String {
        self.explainer.model().format().to_string()
    }

    /// The margin added to every prediction, per group.
    #[getter]
    fn base_margin(&self) -> Vec<f64> {
        self.explainer.model().base_margin().to_vec()
    }

    /// The trees as node arrays, one dict per tree: `children_left`, `children_right`,
    /// `children_default` (-1 at leaves), `features` (-2 at leaves), `thresholds` (NaN for
    /// categorical splits and leaves), `rules` (0 leaf, 1 `x < t`, 2 `x <= t`, 3 categorical),
    /// `values` (leaf values times the tree weight; an internal node holds the cover-weighted
    /// mean of its leaves), `node_sample_weight` (covers), and `group`.
    fn trees<'py>(&self, py: Python<'py>) -> PyResult<Vec<Bound<'py, pyo3::types::PyDict>>> {
        let model = self.explainer.model();
        let mut out = Vec::with_capacity(model.trees().len());
        for tree in model.trees() {
            let n = tree.nodes.len();
            let child = |c: u32| if c == LEAF { -1i64 } else { c as i64 };
            let (mut left, mut right, mut default, mut features) =
                (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
            let (mut thresholds, mut rules, mut covers) = (Vec::with_capacity(n), Vec::with_capacity(n), Vec::with_capacity(n));
            for node in &tree.nodes {
                let leaf = node.is_leaf();
                left.push(child(node.left));
                right.push(child(node.right));
                default.push(if leaf {
                    -1
                } else if node.default_left {
                    child(node.left)
                } else {
                    child(node.right)
                });
                features.push(if leaf { -2i64 } else { node.feature as i64 });
                let (rule, threshold) = match node.rule {
                    _ if leaf => (0i8, f64::NAN),
                    SplitRule::XgbLess { threshold } => (1, threshold),
                    SplitRule::LgbLessEqual { threshold, .. } => (2, threshold),
                    _ => (3, f64::NAN),
                };
                rules.push(rule);
                thresholds.push(threshold);
                covers.push(node.cover);
            }
            let values = tree.node_means();
            let dict = pyo3::types::PyDict::new(py);
            dict.set_item("children_left", PyArray1::from_vec(py, left))?;
            dict.set_item("children_right", PyArray1::from_vec(py, right))?;
            dict.set_item("children_default", PyArray1::from_vec(py, default))?;
            dict.set_item("features", PyArray1::from_vec(py, features))?;
            dict.set_item("thresholds", PyArray1::from_vec(py, thresholds))?;
            dict.set_item("rules", PyArray1::from_vec(py, rules))?;
            dict.set_item("values", PyArray1::from_vec(py, values))?;
            dict.set_item("node_sample_weight", PyArray1::from_vec(py, covers))?;
            dict.set_item("group", tree.group)?;
            out.push(dict);
        }
        Ok(out)
    }

    /// The engine that runs (what `auto` picked).
    #[getter]
    fn engine(&self) -> &'static str {
        self.explainer.engine().name()
    }

    /// Compute threads.
    #[getter]
    fn threads(&self) -> usize {
        self.explainer.threads()
    }

    fn __repr__(&self) -> String {
        let model = self.explainer.model();
        format!(
            "Explainer(features={}, groups={}, engine={:?}, threads={})",
            model.num_features(),
            model.num_groups(),
            self.explainer.engine().name(),
            self.explainer.threads()
        )
    }
}

/// A model file, or a Spark ML model directory where this build reads Parquet.
fn load_path(path: &std::path::Path) -> Result<Model> {
    #[cfg(feature = "files")]
    return shapfusion_files::load_model(path);
    #[cfg(not(feature = "files"))]
    return Model::load(path);
}

/// A Spark ML model directory from its files, where this build reads Parquet.
fn spark_files_model(files: Vec<(String, Vec<u8>)>, name: &str) -> Result<Model> {
    #[cfg(feature = "files")]
    {
        let files: Vec<(String, bytes::Bytes)> = files.into_iter().map(|(p, b)| (p, bytes::Bytes::from(b))).collect();
        shapfusion_files::spark::from_files(&files, name)
    }
    #[cfg(not(feature = "files"))]
    {
        drop(files);
        Err(Error::Unsupported(format!(
            "{name}: this build of shapfusion reads no Parquet, which Spark ML models are stored in (build with the `files` feature)"
        )))
    }
}

/// Runs `f` on the rows `x` holds: a float64 matrix (NumPy; `names` for its columns) or an
/// Arrow object.
fn with_rows<'py, T>(model: &Model, x: &Bound<'py, PyAny>, names: Option<Vec<String>>, f: impl FnOnce(Rows<'_>) -> PyResult<T>) -> PyResult<T> {
    if let Ok(matrix) = x.extract::<PyReadonlyArray2<'py, f64>>() {
        let cols = matrix.shape()[1];
        let values =
            matrix.as_slice().map_err(|_| to_py(Error::InvalidArgument("X must be C-contiguous (shapfusion.Explainer copies it)".into())))?;
        let rows = Rows::matrix(model, values, cols, names.as_deref()).map_err(to_py)?;
        return f(rows);
    }
    f(Rows::Arrow(read_arrow(x)?))
}

/// An empty output with room for `rows × width` values, or a `MemoryError` saying how much was
/// asked.
fn reserve(rows: usize, width: usize) -> PyResult<Vec<f64>> {
    let too_big = || PyMemoryError::new_err(format!("{rows} rows × {width} output values each do not fit in memory; explain fewer rows per call"));
    let len = rows.checked_mul(width).ok_or_else(too_big)?;
    let mut values = Vec::new();
    values.try_reserve_exact(len).map_err(|_| too_big())?;
    Ok(values)
}
