//! # shapfusion-sql
//!
//! SQL: `shap(model, c1, …, cN)`, `shap_interactions(…)` and `margin(…)` as DataFusion scalar
//! UDFs, the `shap.*` session options, and what a SQL client may touch ([`AccessPolicy`]).
//!
//! ```sql
//! SET shap.model_dir = 's3://models/';
//! SELECT id, shap('fraud', amount, age)['amount'] AS why FROM payments;
//! ```
//!
//! The UDFs compute through [`Explainer`](shapfusion_core::Explainer), the same path as
//! `shapfusion explain`, so the numbers and the column layout are identical. With
//! `shap.workers` set they compute on remote workers through [`RemoteCompute`], which this
//! crate defines and a transport (`shapfusion-flight`) implements, so SQL knows no wire
//! protocol. Beside the UDFs: the model store ([`registry`]: models by name or URL through
//! `object_store`, by version), the explainers it caches per model version and settings
//! ([`explainer_cache`]), a call pinned to those versions, the one form every wire carries
//! ([`call`]), and `shapfusion sql`, DataFusion's shell with the UDFs ([`shell`]).
//!
//! What it may use: `shapfusion-core`, `shapfusion-files`, DataFusion, object_store and tokio.
//! Not tonic or Ballista: sessions that run on a cluster come in through [`SessionBackend`].
#![warn(missing_docs)]

mod access;
pub mod call;
pub mod errors;
pub mod explainer_cache;
#[cfg(feature = "ffi")]
pub mod ffi;
pub mod file_guard;
pub mod io_runtime;
mod options;
pub mod registry;
mod remote;
pub mod shell;
mod udf;

use std::sync::Arc;

use datafusion::execution::context::SessionContext;
use datafusion::logical_expr::ScalarUDF;
use datafusion::prelude::SessionConfig;

pub use access::AccessPolicy;
pub use errors::{from_datafusion, to_datafusion};
pub use options::{ShapOptions, ShapSettings};
pub use remote::{install_remote, RemoteCompute};
pub use shell::SessionBackend;
pub use udf::ShapUdf;

use crate::registry::ModelRegistry;
use shapfusion_core::error::Result;
use shapfusion_core::OutputKind;

/// Names of the UDFs, with what each returns.
pub const FUNCTIONS: [(&str, OutputKind); 3] =
    [("shap", OutputKind::Shap), ("shap_interactions", OutputKind::Interactions), ("margin", OutputKind::Margin)];

/// The function computing `output`.
pub(crate) fn function_for(output: OutputKind) -> &'static str {
    FUNCTIONS.iter().find(|(_, k)| *k == output).map_or("shap", |(n, _)| n)
}

/// A session config with the `shap.*` options available (so `SET shap.model_dir = …` works).
pub fn session_config() -> SessionConfig {
    SessionConfig::new().with_information_schema(true).with_option_extension(ShapOptions::default())
}

/// Registers the UDFs on `ctx` and returns the model registry they resolve names with (add
/// named models to it with [`ModelRegistry::register`]). Adds the `shap.*` options to the
/// session if its config lacks them.
pub fn register(ctx: &SessionContext) -> Result<Arc<ModelRegistry>> {
    let registry = Arc::new(ModelRegistry::new(Some(ctx.runtime_env())));
    register_with(ctx, registry.clone())?;
    Ok(registry)
}

/// [`register`] with a registry of the caller's (shared between sessions or with a worker).
pub fn register_with(ctx: &SessionContext, registry: Arc<ModelRegistry>) -> Result<()> {
    let options = {
        let state = ctx.state_ref();
        let mut state = state.write();
        let config = state.config_mut().options_mut();
        if config.extensions.get::<ShapOptions>().is_none() {
            config.extensions.insert(ShapOptions::default());
        }
        ShapOptions::of(config)
    };
    for udf in udfs(registry, options)? {
        ctx.register_udf(udf);
    }
    Ok(())
}

/// The [`FUNCTIONS`] over `registry` with `options`: what [`register_with`] registers and
/// `ffi::exported_udfs` hands across the FFI.
pub(crate) fn udfs(registry: Arc<ModelRegistry>, options: ShapOptions) -> Result<Vec<ScalarUDF>> {
    FUNCTIONS.iter().map(|&(name, kind)| Ok(ScalarUDF::new_from_impl(ShapUdf::new(name, kind, registry.clone(), options.clone())?))).collect()
}
