//! `shap`, `shap_interactions` and `margin` for Python's `datafusion` package: the library's
//! SQL functions (`shapfusion_sql::ffi`, the ones `shapfusion sql` runs), handed over as
//! PyCapsules holding `datafusion-ffi` handles. Models are the ones registered here by name; a
//! query cannot name a path.

use std::sync::Arc;

use pyo3::prelude::*;
use pyo3::types::PyCapsule;
use shapfusion_sql::ffi::{exported_udfs, ExportedUdf, CAPSULE_NAME};
use shapfusion_sql::registry::ModelRegistry;
use shapfusion_sql::ShapOptions;

use crate::errors::to_py;

pub use shapfusion_sql::ffi::DATAFUSION_VERSION;

/// One SQL function, exportable to Python's `datafusion` (`ScalarUDF.from_pycapsule`).
#[pyclass(frozen, name = "ExportedUdf", module = "shapfusion._shapfusion")]
pub struct PyExportedUdf {
    udf: ExportedUdf,
}

#[pymethods]
impl PyExportedUdf {
    /// A new FFI handle on the function, in the capsule `datafusion.ScalarUDF` reads.
    fn __datafusion_scalar_udf__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyCapsule>> {
        PyCapsule::new_with_value(py, self.udf.to_ffi(), CAPSULE_NAME)
    }

    /// The function's SQL name.
    #[getter]
    fn name(&self) -> &str {
        self.udf.name()
    }

    fn __repr__(&self) -> String {
        format!("<shapfusion SQL function {}>", self.udf.name())
    }
}

/// The SQL functions over `models` (name → path or URL, each loaded now so a wrong path fails
/// here), computing with `algorithm` on `threads` threads (0: all cores); with `background` (a
/// path or URL of rows), `shap` returns interventional SHAP values over it.
#[pyfunction]
#[pyo3(signature = (models, *, algorithm="auto", threads=0, background=None))]
pub fn datafusion_udfs(
    py: Python<'_>,
    models: Vec<(String, String)>,
    algorithm: &str,
    threads: usize,
    background: Option<String>,
) -> PyResult<Vec<PyExportedUdf>> {
    let registry = Arc::new(ModelRegistry::names_only(None));
    let mut options = ShapOptions::default();
    options.algorithm = algorithm.to_string();
    options.threads = threads;
    py.detach(|| -> shapfusion_core::Result<()> {
        for (name, url) in &models {
            registry.register(name, url)?;
            registry.resolve(name, None)?;
        }
        if let Some(url) = &background {
            registry.register_background("background", url)?;
            registry.background("background")?;
            options.background = "background".to_string();
        }
        Ok(())
    })
    .map_err(to_py)?;
    let udfs = exported_udfs(registry, options).map_err(to_py)?;
    Ok(udfs.into_iter().map(|udf| PyExportedUdf { udf }).collect())
}
