//! `shapfusion._shapfusion`: the native half of the Python package. The Python half
//! (`python/shapfusion/__init__.py`) turns models and tables into what this module takes (model
//! bytes or a path; a float64 matrix with column names, or an Arrow stream) and shapes results
//! into XGBoost's layouts; everything numeric happens here, on the library's own batch path
//! (`Model::feature_block` → engine), so a row gives the bits `shapfusion explain` gives.

mod chunks;
mod errors;
mod explainer;
mod rows;
#[cfg(feature = "datafusion")]
mod udf;

use pyo3::prelude::*;

/// The native module; see `shapfusion` for the documented API.
#[pymodule]
fn _shapfusion(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("HAS_DATAFUSION", cfg!(feature = "datafusion"))?;
    m.add_class::<explainer::NativeExplainer>()?;
    #[cfg(feature = "datafusion")]
    {
        m.add("DATAFUSION_VERSION", udf::DATAFUSION_VERSION)?;
        m.add_class::<udf::PyExportedUdf>()?;
        m.add_function(wrap_pyfunction!(udf::datafusion_udfs, m)?)?;
    }
    Ok(())
}
