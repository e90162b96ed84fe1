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
    // A decoder's panic on a corrupt file is refused with an exception naming it; the standard
    // hook would print it to stderr first. The hook is this extension's own (it links its own
    // standard library), so Python and other extensions are untouched.
    shapfusion_core::expected_panic::quiet_hook();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("HAS_DATAFUSION", cfg!(feature = "datafusion"))?;
    m.add_class::<explainer::NativeExplainer>()?;
    #[cfg(feature = "files")]
    m.add_function(wrap_pyfunction!(spark_model_path, m)?)?;
    #[cfg(feature = "datafusion")]
    {
        m.add("DATAFUSION_VERSION", udf::DATAFUSION_VERSION)?;
        m.add_class::<udf::PyExportedUdf>()?;
        m.add_function(wrap_pyfunction!(udf::datafusion_udfs, m)?)?;
    }
    Ok(())
}

/// Whether a path inside a Spark ML model directory (relative, `/`-separated) is read: a
/// directory that may hold the model's files (`is_dir`), or one of those files. The Python half
/// walks a directory with it, so that it neither reads nor ships what the reader skips (a tuning
/// model's sub-models, Hadoop's side files).
#[cfg(feature = "files")]
#[pyfunction]
fn spark_model_path(relative: &str, is_dir: bool) -> bool {
    if is_dir {
        shapfusion_files::spark::is_model_dir(relative)
    } else {
        shapfusion_files::spark::is_model_file(relative)
    }
}
