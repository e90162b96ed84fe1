//! `NativeExplainer`: a prepared model and engine, called by `shapfusion.Explainer` with rows
//! and returning flat float64 arrays plus their shape (the Python side names the layout).

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::compute::concat_batches;
use arrow_pyarrow::ToPyArrow;
use numpy::{PyArray1, PyArrayDyn, PyArrayMethods, PyReadonlyArray2, PyUntypedArrayMethods};
use pyo3::exceptions::PyMemoryError;
use pyo3::prelude::*;
use shapfusion::{Algorithm, Error, Explainer, Model, OutputKind, Result};

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

/// What one call computes, and how many values it gives a row.
#[derive(Clone, Copy)]
enum Output {
    Shap,
    Interactions,
    Margins,
}

impl Output {
    fn parse(name: &str) -> PyResult<Output> {
        match name {
            "shap" => Ok(Output::Shap),
            "interactions" => Ok(Output::Interactions),
            "margin" => Ok(Output::Margins),
            other => Err(to_py(Error::Input(format!("unknown output {other:?}; expected shap, interactions or margin")))),
        }
    }

    fn kind(self) -> OutputKind {
        match self {
            Output::Shap => OutputKind::Shap,
            Output::Interactions => OutputKind::Interactions,
            Output::Margins => OutputKind::Margin,
        }
    }

    /// One row's shape in XGBoost's layouts: `[F+1]`, `[F+1, F+1]` or `[]`, after `[G]` for a
    /// model with G > 1 output groups.
    fn row_shape(self, model: &Model) -> Vec<usize> {
        let w = model.num_features().saturating_add(1);
        let groups = Some(model.num_groups).filter(|&g| g > 1);
        let values: &[usize] = match self {
            Output::Shap => &[w],
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
            Output::Shap | Output::Margins => 1,
        };
        first_chunk_rows(leaves, factor, explainer.threads())
    }

    /// The computed values of one block, row-major.
    fn compute(self, explainer: &Explainer, block: &shapfusion::engine::FeatureBlock) -> Result<Vec<f64>> {
        Ok(match self {
            Output::Shap => explainer.shap_values(block)?.values,
            Output::Interactions => explainer.interaction_values(block)?.values,
            Output::Margins => explainer.margins(block)?.values,
        })
    }
}

#[pymethods]
impl NativeExplainer {
    /// Loads the model (`path`, or `data`: the model file's bytes, named `name` in errors) and
    /// builds the engine. `background`, when given, is rows for interventional SHAP, as a
    /// float64 matrix (with `background_names`) or an Arrow object.
    #[new]
    #[pyo3(signature = (*, path=None, data=None, name="<memory>", algorithm="auto", threads=0, background=None, background_names=None))]
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
    ) -> PyResult<Self> {
        let model = match (path, data) {
            (Some(path), None) => py.detach(|| Model::load(&path)),
            (None, Some(bytes)) => py.detach(|| Model::from_bytes(bytes, name)),
            _ => Err(Error::Input("give the model as exactly one of a path or bytes".into())),
        }
        .map_err(to_py)?;
        let model = Arc::new(model);
        let algorithm: Algorithm = algorithm.parse().map_err(to_py)?;
        let mut builder = Explainer::builder(model.clone()).algorithm(algorithm).threads(threads);
        if let Some(background) = background {
            let rows = with_rows(&model, background, background_names, |rows| rows.into_batch(&model).map_err(to_py))?;
            builder = builder.background(rows);
        }
        let explainer = py.detach(|| builder.build()).map_err(to_py)?;
        let leaves = model.trees.iter().map(|t| t.num_leaves()).sum();
        Ok(NativeExplainer { explainer, leaves })
    }

    /// `output` ("shap", "interactions" or "margin") for every row of `x` (a float64 matrix,
    /// with `names` for its columns, or an Arrow object), as a NumPy array in XGBoost's layout:
    /// `(n, *row_shape)`.
    #[pyo3(signature = (x, output, names=None))]
    fn compute<'py>(
        &self,
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        output: &str,
        names: Option<Vec<String>>,
    ) -> PyResult<Bound<'py, PyArrayDyn<f64>>> {
        let output = Output::parse(output)?;
        let model = self.explainer.model();
        let row_shape = output.row_shape(model);
        let width = row_shape.iter().try_fold(1usize, |w, &d| w.checked_mul(d)).unwrap_or(usize::MAX);
        with_rows(model, x, names, |rows| {
            let n = rows.len();
            // Reserved (untouched) up front, so a call too large for memory fails before any work.
            let mut values = reserve(n, width)?;
            for_each_chunk(py, n, output.first_chunk(&self.explainer, self.leaves), |range| {
                let block = rows.block(model, range.clone())?;
                let out = output.compute(&self.explainer, &block)?;
                if out.len() != range.len() * width {
                    return Err(Error::Input(format!("the engine returned {} values for {} rows of {width}", out.len(), range.len())));
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
        let (kind, first_chunk) = (output.kind(), output.first_chunk(&self.explainer, self.leaves));
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
        self.explainer.model().feature_names.clone()
    }

    /// Output groups (classes for a multiclass model, targets for a multi-output one).
    #[getter]
    fn num_groups(&self) -> usize {
        self.explainer.model().num_groups
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
            model.num_groups,
            self.explainer.engine().name(),
            self.explainer.threads()
        )
    }
}

/// Runs `f` on the rows `x` holds: a float64 matrix (NumPy; `names` for its columns) or an
/// Arrow object.
fn with_rows<'py, T>(model: &Model, x: &Bound<'py, PyAny>, names: Option<Vec<String>>, f: impl FnOnce(Rows<'_>) -> PyResult<T>) -> PyResult<T> {
    if let Ok(matrix) = x.extract::<PyReadonlyArray2<'py, f64>>() {
        let cols = matrix.shape()[1];
        let values = matrix.as_slice().map_err(|_| to_py(Error::Input("X must be C-contiguous (shapfusion.Explainer copies it)".into())))?;
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
