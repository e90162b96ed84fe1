//! `NativeExplainer`: a prepared model and engine, called by `shapfusion.Explainer` with rows
//! and returning flat float64 arrays plus their shape (the Python side names the layout).

use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::compute::concat_batches;
use arrow_pyarrow::ToPyArrow;
use numpy::{PyArray1, PyReadonlyArray2, PyUntypedArrayMethods};
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
            Output::Margins => OutputKind::Predict,
        }
    }

    /// Values per row: `G·(F+1)`, `G·(F+1)²` or `G` (saturating: a width no memory holds is
    /// refused by [`allocate`]).
    fn width(self, model: &Model) -> usize {
        let (g, w) = (model.num_groups, model.num_features().saturating_add(1));
        match self {
            Output::Shap => g.saturating_mul(w),
            Output::Interactions => g.saturating_mul(w).saturating_mul(w),
            Output::Margins => g,
        }
    }

    /// Rows for the first chunk of a call (see [`first_chunk_rows`]).
    fn first_chunk(self, explainer: &Explainer) -> usize {
        let model = explainer.model();
        let leaves = model.trees.iter().map(|t| t.num_leaves()).sum();
        let factor = match self {
            Output::Interactions => model.num_features() + 1,
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
        Ok(NativeExplainer { explainer })
    }

    /// `output` ("shap", "interactions" or "margin") for every row of `x` (a float64 matrix,
    /// with `names` for its columns, or an Arrow object): a flat float64 array, row-major, of
    /// `rows × width` values, and `rows`.
    #[pyo3(signature = (x, output, names=None))]
    fn compute<'py>(&self, py: Python<'py>, x: &Bound<'py, PyAny>, output: &str, names: Option<Vec<String>>) -> PyResult<(Bound<'py, PyArray1<f64>>, usize)> {
        let output = Output::parse(output)?;
        let model = self.explainer.model();
        let width = output.width(model);
        with_rows(model, x, names, |rows| {
            let n = rows.len();
            let mut values = allocate(n, width)?;
            for_each_chunk(py, n, output.first_chunk(&self.explainer), |range| {
                let block = rows.block(model, range.clone())?;
                let out = output.compute(&self.explainer, &block)?;
                let into = &mut values[range.start * width..range.end * width];
                if out.len() != into.len() {
                    return Err(Error::Input(format!("the engine returned {} values for {} rows of {width}", out.len(), range.len())));
                }
                into.copy_from_slice(&out);
                Ok(())
            })?;
            Ok((PyArray1::from_vec(py, values), n))
        })
    }

    /// `output` for every row of `x` as a pyarrow `RecordBatch` with the columns
    /// `shapfusion explain` writes.
    #[pyo3(signature = (x, output, names=None))]
    fn compute_arrow<'py>(&self, py: Python<'py>, x: &Bound<'py, PyAny>, output: &str, names: Option<Vec<String>>) -> PyResult<Bound<'py, PyAny>> {
        let output = Output::parse(output)?;
        let (kind, first_chunk) = (output.kind(), output.first_chunk(&self.explainer));
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

/// A zeroed output of `rows × width` values, or a `MemoryError` saying how much was asked.
fn allocate(rows: usize, width: usize) -> PyResult<Vec<f64>> {
    let too_big = || PyMemoryError::new_err(format!("{rows} rows × {width} output values each do not fit in memory; explain fewer rows per call"));
    let len = rows.checked_mul(width).ok_or_else(too_big)?;
    let mut values = Vec::new();
    values.try_reserve_exact(len).map_err(|_| too_big())?;
    values.resize(len, 0.0);
    Ok(values)
}
