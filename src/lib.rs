//! # shapfusion
//!
//! Exact SHAP values and SHAP interaction values for XGBoost and LightGBM tree ensembles, the
//! same numbers the libraries' own `pred_contribs` / `pred_contrib` give, on all cores.
//!
//! ```no_run
//! use shapfusion::{Explainer, Model};
//! # fn rows() -> arrow::array::RecordBatch { unimplemented!() }
//! let explainer = Explainer::builder(Model::load("examples/models/fraud.json")?).build()?;
//! let shap = explainer.explain_batch(&rows())?; // a column per feature, then `bias`
//! # Ok::<(), shapfusion::Error>(())
//! ```
//!
//! One path for every batch, shared by all front ends (`explain`, the SQL UDFs, Flight workers
//! and the worker pool):
//!
//! ```text
//! Arrow batch ──features──► FeatureBlock ──engine──► Attributions ──layout──► Arrow arrays
//! ```
//!
//! * [`Explainer`] (built by [`ExplainerBuilder`]): a model, an engine and compute threads;
//!   record batches in, record batches out. Every front end computes through it.
//! * [`ComputeSettings`]: engine, device, threads and memory bounds, one value with one meaning,
//!   parsed once from each front end's options (flags, `shap.*` SQL options, Python arguments).
//! * [`model`]: the tree ensemble and its readers ([`model::ModelFormat::ALL`] lists the
//!   formats); [`Model::feature_block`] turns a batch into the engines' input.
//! * [`engine`]: the [`engine::Engine`] trait and the CPU engines by [`Algorithm`]: `treeshap`
//!   (the reference), `fast-v1`, `fast-v2`, `quadrature`, `linear`, and `auto`, which picks
//!   `fast-v2` or `linear` from the model's shape.
//! * [`Device`]: CPU or GPU, and `auto`'s choice between them; `gpu`: the CUDA engine.
//! * [`explain`]: the file pipeline behind `shapfusion explain` (Parquet/CSV in, Parquet out,
//!   written so an output appears whole or not at all); [`input`] reads Parquet or CSV rows
//!   and background sets for interventional SHAP.
//! * `plot`: summary (beeswarm), bar, dependence and waterfall charts as PNG or SVG, from an
//!   `explain` output and its input or from a model and input.
//! * `registry`: the model store: models by name or URL through `object_store`, by version.
//! * `call`: a call pinned to model and background versions with the caller's settings, the
//!   one form every wire carries (Flight exchanges, the Ballista codec), and its version check.
//! * `sql`: the `shap(...)` DataFusion UDFs and `shap.*` options; `shell`: `shapfusion sql`.
//! * `net`: listening (closed by default), tokens and admission limits, for every server.
//! * `flight`: `shapfusion worker` (Arrow Flight) and the worker pool, through which the SQL
//!   functions reach workers.
//! * `serve`: the Flight SQL server `shapfusion serve`, closed by default (loopback, tokens, one
//!   session per client, only the models, tables and paths the operator configured).
//! * `ballista`: a Ballista scheduler and executors with the UDFs, for SQL computed where the
//!   data is; `ballista::client` makes a session whose queries run on such a cluster.
//!
//! Modules import only their own layer and those below (checked by `tests/layers.rs`): model
//! and engines, then device and settings, `Explainer`, files, the store, calls, SQL,
//! networking, Flight, Ballista, and the front doors (`shell`, `serve`, the command line).
//!
//! Cargo features: `files` (Parquet, CSV and Arrow IPC files: [`input`] and [`explain`]), `plot`
//! (charts, with plotters), `sql` (DataFusion), `flight` (Arrow Flight, implies `sql`),
//! `ballista` (Apache Ballista, implies `flight`), `gpu` (the CUDA engine, loaded at run time),
//! `cli` (the `shapfusion` binary's own dependencies: argument parsing, progress bars, log
//! formatting). `plot`, `sql` and `cli` imply `files`. All are on by default; a library user who
//! wants the model readers, the engines and [`Explainer`] on Arrow batches only takes
//! `default-features = false` (no Parquet or compression codecs are compiled then).
#![warn(missing_docs)]

#[cfg(feature = "files")]
mod atomic_file;
#[cfg(feature = "ballista")]
pub mod ballista;
mod batch;
#[cfg(feature = "sql")]
pub mod call;
mod device;
pub mod engine;
pub mod error;
#[cfg(feature = "files")]
pub mod explain;
mod explainer;
#[cfg(feature = "sql")]
mod explainers;
mod features;
#[cfg(feature = "flight")]
pub mod flight;
#[cfg(feature = "gpu")]
pub mod gpu;
#[cfg(feature = "files")]
pub mod input;
#[cfg(feature = "sql")]
mod io_runtime;
mod layout;
pub mod model;
#[cfg(feature = "flight")]
pub mod net;
#[cfg(feature = "plot")]
pub mod plot;
#[cfg(feature = "sql")]
pub mod registry;
#[cfg(feature = "flight")]
pub mod serve;
mod settings;
#[cfg(feature = "sql")]
pub mod shell;
#[cfg(feature = "sql")]
pub mod sql;
#[cfg(all(test, feature = "files"))]
mod test_fixtures;
#[cfg(test)]
mod test_support;

pub use batch::OutputKind;
pub use device::Device;
pub use engine::{Algorithm, OutputTransform};
pub use error::{Error, Result};
pub use explainer::{Explainer, ExplainerBuilder};
pub use model::Model;
pub use settings::ComputeSettings;
