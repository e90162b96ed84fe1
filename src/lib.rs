//! # shapfusion
//!
//! Exact SHAP values and SHAP interaction values for XGBoost, LightGBM, scikit-learn, CatBoost
//! and Spark ML tree ensembles: the `shapfusion` command line, and this facade, which re-exports
//! the crates it is built from (as `datafusion` and `arrow` do theirs), so one dependency gives
//! the whole library:
//!
//! ```no_run
//! use shapfusion::{Explainer, Model};
//! # fn rows() -> arrow::array::RecordBatch { unimplemented!() }
//! let explainer = Explainer::builder(Model::load("examples/models/fraud.json")?).build()?;
//! let shap = explainer.explain_batch(&rows())?; // a column per feature, then `bias`
//! # Ok::<(), shapfusion::Error>(())
//! ```
//!
//! | crate | what it owns | re-exported here as |
//! |---|---|---|
//! | `shapfusion-core` | the tree ensemble and its readers, the CPU and GPU engines, `Explainer` | the top level: [`model`], [`engine`], [`Explainer`], ... |
//! | `shapfusion-files` | Parquet, CSV and IPC input, the explain pipeline, atomic outputs, Spark ML directories | [`input`], [`pipeline`], [`atomic_file`], [`spark`], [`load_model`] |
//! | `shapfusion-plot` | summary, bar, dependence and waterfall charts | [`plot`] |
//! | `shapfusion-sql` | the shap UDFs on DataFusion, the model registry, pinned calls, `shapfusion sql` | `sql`, `registry`, `call`, `shell` (feature `sql`) |
//! | `shapfusion-flight` | listening, tokens and limits; the Flight worker and pool; Flight SQL `serve` | `flight`, `net`, `serve` (feature `flight`) |
//! | `shapfusion-ballista` | a Ballista scheduler and executors with the UDFs | `ballista` (feature `ballista`) |
//!
//! Each crate uses only those below it in the table (the dependency graph says so); a library
//! user who needs the engines on Arrow batches depends on `shapfusion-core` alone.
#![warn(missing_docs)]

pub use shapfusion_core::{
    engine, error, expected_panic, features, model, output_fields, Algorithm, ComputeSettings, Device, Error, ErrorKind, Explainer, ExplainerBuilder,
    Model, OutputKind, OutputTransform, Result,
};

/// The CUDA engine (`shapfusion-core`'s `gpu` module).
#[cfg(feature = "gpu")]
pub use shapfusion_core::gpu;

pub use shapfusion_files::{atomic_file, input, load_model, pipeline, spark};

/// Charts of SHAP values (`shapfusion-plot`).
pub use shapfusion_plot as plot;

/// The SQL layer (`shapfusion-sql`).
#[cfg(feature = "sql")]
pub use shapfusion_sql as sql;
#[cfg(feature = "sql")]
pub use shapfusion_sql::{call, registry, shell};

/// Flight workers, the worker pool and the server plumbing (`shapfusion-flight`).
#[cfg(feature = "flight")]
pub use shapfusion_flight as flight;
#[cfg(feature = "flight")]
pub use shapfusion_flight::{net, serve};

/// Ballista members with the shap UDFs (`shapfusion-ballista`).
#[cfg(feature = "ballista")]
pub use shapfusion_ballista as ballista;
