//! # shapfusion-core
//!
//! Exact SHAP values and SHAP interaction values of tree ensembles, the same numbers XGBoost's
//! `pred_contribs`, LightGBM's `pred_contrib`, CatBoost's `ShapValues` and shap's TreeExplainer
//! give, on all cores or an NVIDIA GPU.
//!
//! ```no_run
//! use shapfusion_core::{Explainer, Model};
//! # fn rows() -> arrow::array::RecordBatch { unimplemented!() }
//! let explainer = Explainer::builder(Model::load("examples/models/fraud.json")?).build()?;
//! let shap = explainer.explain_batch(&rows())?; // a column per feature, then `bias`
//! # Ok::<(), shapfusion_core::Error>(())
//! ```
//!
//! What this crate owns: the tree ensemble as plain arrays and its readers ([`model`]), the
//! engines ([`engine`], and `gpu` with the `gpu` feature), the Arrow edges of a batch
//! (features in, attributions out), the compute settings and [`Explainer`]. One path for every
//! batch, shared by all front ends:
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
//!   formats; Spark ML directories, which hold Parquet, are read by `shapfusion-files`);
//!   [`Model::feature_block`] turns a batch into the engines' input.
//! * [`engine`]: the [`engine::Engine`] trait and the CPU engines by [`Algorithm`]: `treeshap`
//!   (the reference), `fast-v1`, `fast-v2`, `quadrature`, `linear`, `oblivious`, the
//!   interventional ones, and `auto`.
//! * [`Device`]: CPU or GPU, and `auto`'s choice between them.
//!
//! What it may use: Arrow's arrays and schemas, rayon, serde_json (model files). Not DataFusion,
//! tokio, Parquet or tonic: the crates above it (`shapfusion-files`, `-sql`, `-flight`,
//! `-ballista`, `-plot`) bring those, and the dependency graph keeps it so.
#![warn(missing_docs)]

mod batch;
mod compute_pool;
mod device;
pub mod engine;
pub mod error;
pub mod expected_panic;
mod explainer;
pub mod features;
#[cfg(feature = "gpu")]
pub mod gpu;
mod layout;
pub mod model;
mod settings;
mod small_calls;
#[cfg(test)]
mod test_fixtures;
#[cfg(test)]
mod test_support;

pub use device::Device;
pub use engine::{Algorithm, Index, OutputTransform};
pub use error::{Error, ErrorKind, Result};
pub use explainer::{Explainer, ExplainerBuilder};
pub use layout::{output_fields, OutputKind};
pub use model::Model;
pub use settings::ComputeSettings;
pub use small_calls::CallReport;
