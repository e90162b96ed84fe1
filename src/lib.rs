//! # shapfusion
//!
//! Exact SHAP values and SHAP interaction values for XGBoost and LightGBM tree ensembles, the
//! same numbers the libraries' own `pred_contribs` / `pred_contrib` give, on all cores.
//!
//! One path for every batch, shared by all front ends:
//!
//! ```text
//! Arrow batch ──features──► FeatureBlock ──engine──► Attributions ──layout──► Arrow arrays
//! ```
//!
//! * [`model`]: the tree ensemble and its readers (XGBoost JSON/UBJSON, LightGBM text).
//! * [`engine`]: the [`engine::Explainer`] trait and the CPU engines (`treeshap`, `fast-v1`,
//!   `fast-v2`, `auto`).
//! * [`batch`]: the batch step every front end shares (output kinds, fields, one batch through
//!   an engine, the compute threads); [`features`] and [`layout`] convert between Arrow and the
//!   engines.
//! * [`explain`]: the batch pipeline behind `shapfusion explain` (Parquet/CSV in, Parquet out),
//!   writing through [`atomic_file`] so an output appears whole or not at all.
//! * [`registry`]: models by name or URL through `object_store`, cached by version.
//! * [`sql`]: the `shap(...)` DataFusion UDFs, `shap.*` options and `shapfusion sql`.
//! * [`flight`]: `shapfusion worker` (Arrow Flight), the worker pool, and the Flight SQL server
//!   `shapfusion serve`, closed by default (loopback, tokens, one session per client, only the
//!   models, tables and paths the operator configured).
//!
//! ```no_run
//! use std::sync::Arc;
//! use shapfusion::{engine, model::Model};
//! let model = Arc::new(Model::load("examples/models/fraud.json")?);
//! let explainer = engine::build_explainer(model, engine::Algorithm::Auto, None, &Default::default())?;
//! # Ok::<(), shapfusion::Error>(())
//! ```

pub mod atomic_file;
pub mod batch;
pub mod engine;
pub mod error;
pub mod explain;
#[cfg(feature = "flight")]
pub mod flight;
pub mod features;
#[cfg(feature = "gpu")]
pub mod gpu;
pub mod layout;
pub mod model;
#[cfg(feature = "sql")]
pub mod registry;
#[cfg(feature = "sql")]
pub mod sql;

pub use error::{Error, Result};
