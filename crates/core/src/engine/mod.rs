//! SHAP engines: exact path-dependent (cover-weighted) TreeSHAP in margin space, f64 arithmetic,
//! on the CPU.
//!
//! Every engine implements [`Engine`]; callers pick one by [`Algorithm`] name through
//! [`build_engine`]. Rows are explained independently in fixed-size blocks on the rayon pool
//! the caller installs, so results are bit-for-bit the same for any thread count.
//!
//! Engines know nothing of Arrow, GPUs or command lines: they read a dense [`FeatureBlock`]
//! and return plain arrays, and their errors say what is wrong, not which flag fixes it.
//! Choosing between these engines and the GPU's is the job of the device layer above this one.
//!
//! Modules, each importing only those listed before it:
//! `block`, `output` (inputs and outputs) → `options` → `prepared`, `decision`, `path` (per-model
//! data and walk helpers) → `drivers` (the parallel loops and size checks every engine shares)
//! → `explainer` (the trait), `covers` (covers counted from rows) → `treeshap`, `quadrature`, `fast_v1`, `fast_v2`, `linear`
//! (the engines; `interactions` gives the first three interaction values) → `oblivious` (tables
//! of oblivious trees, `treeshap` for the others), `interventional`
//! → `rescaled` (with a background), `saabas` (the approximation), `complement` (a binary
//! classifier's two class probabilities explained once) → `auto`.

mod auto;
mod block;
mod complement;
mod covers;
mod decision;
pub(crate) mod drivers;
mod engine_trait;
mod fast_v1;
mod fast_v2;
mod interactions;
mod interventional;
mod linear;
mod oblivious;
mod options;
mod output;
pub(crate) mod path;
pub(crate) mod prepared;
mod quadrature;
mod rescaled;
mod saabas;
mod simd;
mod treeshap;

use std::sync::Arc;

use auto::choose_algorithm;
pub use auto::AutoChoice;
pub use block::FeatureBlock;
use complement::{complementary_outputs, Complement};
pub use covers::{covers_counted_from, UNREACHED_COVER};
pub use drivers::{finish_interaction_row, MAX_OUTPUT_VALUES, MAX_RECURSIVE_DEPTH, ROWS_PER_TASK};
pub use engine_trait::Engine;
pub(crate) use interventional::transformed_interactions_unavailable;
pub use interventional::MAX_INTERVENTIONAL_PATH_FEATURES;
pub use options::{Algorithm, EngineOptions, Index, OutputTransform, DEFAULT_INTERVENTIONAL_MEMORY_BYTES, DEFAULT_V2_MEMORY_BYTES};
pub use output::{Attributions, Interactions, Predictions};
pub(crate) use prepared::PreparedModel;
#[cfg(feature = "gpu")]
pub(crate) use quadrature::gauss_legendre;
pub use saabas::Saabas;

use crate::error::{Error, ErrorKind, Result};
use crate::model::Model;

/// Builds the CPU engine named by `algorithm` for `model`; `rows_hint` (expected rows per run,
/// if known) lets `auto` weigh table set-up against per-row savings. A binary classifier that
/// gives both class probabilities is explained once (see the `complement` module).
pub fn build_engine(model: Arc<Model>, algorithm: Algorithm, rows_hint: Option<usize>, options: &EngineOptions) -> Result<Arc<dyn Engine>> {
    model.refuse_linear_leaves("path-dependent SHAP (no background)")?;
    explained_once(model, |model| build_path_dependent(model, algorithm, rows_hint, options))
}

/// `build(model)`, or, when `model`'s two outputs are each other's complement, `build` on the
/// second output's trees, wrapped to give both outputs.
fn explained_once(model: Arc<Model>, build: impl FnOnce(Arc<Model>) -> Result<Arc<dyn Engine>>) -> Result<Arc<dyn Engine>> {
    match complementary_outputs(&model) {
        Some((second, total)) => {
            tracing::debug!("the model's two outputs sum to {total}: explaining the second, deriving the first");
            Ok(Arc::new(Complement::new(model, build(Arc::new(second))?, total)))
        }
        None => build(model),
    }
}

/// The path-dependent engine named by `algorithm` for `model` as it stands.
fn build_path_dependent(model: Arc<Model>, algorithm: Algorithm, rows_hint: Option<usize>, options: &EngineOptions) -> Result<Arc<dyn Engine>> {
    if !matches!(algorithm, Algorithm::Auto | Algorithm::TreeShap | Algorithm::Oblivious) || options.index == Index::Banzhaf {
        let what = match options.index {
            Index::Shapley => format!("the {algorithm} engine"),
            index => format!("{index} values"),
        };
        model.refuse_combinations(&what)?;
    }
    let prepared = Arc::new(PreparedModel::new(model)?);
    if options.index == Index::Banzhaf {
        // Banzhaf values are `linear`'s walk with one point, t = 1/2, for its quadrature (see
        // the `linear` module); the other engines compute Shapley values only.
        return match algorithm {
            Algorithm::Auto | Algorithm::Linear => {
                if algorithm == Algorithm::Auto {
                    tracing::info!(algorithm = "linear", reason = "Banzhaf values: linear's walk at t = 1/2", "auto picked an engine");
                }
                Ok(Arc::new(linear::Linear::with_index(prepared, Index::Banzhaf)?))
            }
            other => {
                Err(Error::InvalidArgument(format!("the {other} engine computes Shapley values only; Banzhaf values come from linear (or auto)")))
            }
        };
    }
    let algorithm = match algorithm {
        Algorithm::Auto => {
            let choice = choose_algorithm(&prepared, rows_hint, options.v2_memory_bytes);
            tracing::info!(algorithm = %choice.algorithm, reason = %choice.reason, "auto picked an engine");
            choice.algorithm
        }
        a => a,
    };
    Ok(match algorithm {
        Algorithm::TreeShap => Arc::new(treeshap::TreeShap::new(prepared)?),
        Algorithm::FastV1 => Arc::new(fast_v1::FastV1::new(prepared)?),
        Algorithm::FastV2 => Arc::new(fast_v2::FastV2::new(prepared, options.v2_memory_bytes)?),
        Algorithm::Quadrature => Arc::new(quadrature::Quadrature::new(prepared)?),
        Algorithm::Linear => Arc::new(linear::Linear::new(prepared)?),
        Algorithm::Oblivious => Arc::new(oblivious::Oblivious::new(prepared, options.v2_memory_bytes)?),
        Algorithm::Auto => unreachable!("auto resolved above"),
    })
}

/// Builds an interventional engine for `model` over `background` (rows in the model's feature
/// order, as [`Model::feature_block`](crate::model::Model) makes them): SHAP values of
/// `v(S) = mean_z f(x_S, z_~S)`, the bias the background's mean margin. `auto` aggregates the
/// background once (per-row cost independent of its size); `treeshap` follows the definition
/// background row by background row (the reference, cost growing with the background). For a
/// model with linear leaves (LightGBM's `linear_tree`), whose leaves' values depend on the row
/// pair, `auto` groups each leaf's background rows by the path features they fail and the terms
/// they are NaN in, keeping each group's sums of the terms' values (`LinearInterventional`); it
/// takes the reference where a leaf reads more than 64 features or the groups would pass the
/// memory bound.
pub fn build_interventional(model: Arc<Model>, background: &FeatureBlock, algorithm: Algorithm, options: &EngineOptions) -> Result<Arc<dyn Engine>> {
    if options.index != Index::Shapley {
        model.refuse_combinations(&format!("interventional {} values (with a background)", options.index))?;
    }
    explained_once(model, |model| {
        let linear_leaves = model.has_linear_leaves();
        let prepared = Arc::new(PreparedModel::new(model)?);
        let index = options.index;
        match algorithm {
            Algorithm::Auto if linear_leaves => linear_leaves_engine(prepared, background, index, OutputTransform::Identity, options),
            Algorithm::Auto => Ok(Arc::new(interventional::Interventional::with_index(prepared, background, options.interventional_memory_bytes, index)?)),
            Algorithm::TreeShap => Ok(Arc::new(interventional::InterventionalReference::with_index(prepared, background, index)?)),
            other => Err(Error::InvalidArgument(format!(
                "interventional SHAP (with a background) has two engines, auto (the background aggregated once) and treeshap (the reference, row by row); {other} is path-dependent only"
            ))),
        }
    })
}

/// Builds the interventional engine of a transformed output over `background` (shap's
/// `model_output="probability"` with `OutputTransform::Logistic`): each background row's
/// margin values scaled by how much `transform` changes between its margin and the explained
/// row's, as shap computes them (see the `rescaled` module). The identity transform gives
/// [`build_interventional`]'s values, at a cost per row that grows with the background.
pub fn build_rescaled_interventional(
    model: Arc<Model>,
    background: &FeatureBlock,
    transform: OutputTransform,
    options: &EngineOptions,
) -> Result<Arc<dyn Engine>> {
    if options.index != Index::Shapley {
        // The rescaled engine's per-reference weights are Shapley's.
        return Err(Error::Unsupported(format!(
            "{} values of a transformed output (the {transform} output, with a background) are not built yet: those of the margin are",
            options.index
        )));
    }
    let what = format!("interventional SHAP of the {transform} output (with a background)");
    model.refuse_combinations(&what)?;
    let linear_leaves = model.has_linear_leaves();
    let prepared = Arc::new(PreparedModel::new(model)?);
    if linear_leaves {
        // A linear leaf's value depends on the background row's values, not only its fail set.
        return linear_leaves_engine(prepared, background, Index::Shapley, transform, options);
    }
    Ok(Arc::new(rescaled::RescaledInterventional::new(prepared, background, transform, options.interventional_memory_bytes)?))
}

/// The interventional engine of a model with linear leaves: each leaf's background rows grouped
/// (`LinearInterventional`), or the row-pair reference where the groups do not fit (a leaf
/// reading more than 64 features, or groups over the memory bound), saying why.
fn linear_leaves_engine(
    prepared: Arc<PreparedModel>,
    background: &FeatureBlock,
    index: Index,
    transform: OutputTransform,
    options: &EngineOptions,
) -> Result<Arc<dyn Engine>> {
    match interventional::LinearInterventional::with_transform(prepared.clone(), background, index, transform, options.interventional_memory_bytes) {
        Ok(engine) => Ok(Arc::new(engine)),
        Err(e) if matches!(e.kind(), ErrorKind::Unsupported | ErrorKind::ResourceExhausted) => {
            tracing::info!(algorithm = "treeshap", reason = %e, "auto picked an engine: the background row by row, at a cost that grows with its size");
            Ok(Arc::new(interventional::InterventionalReference::with_transform(prepared, background, index, transform)?))
        }
        Err(e) => Err(e),
    }
}

/// What `auto` would pick for `model` and `rows_hint` rows, and why.
pub fn auto_choice(model: Arc<Model>, rows_hint: Option<usize>, options: &EngineOptions) -> Result<AutoChoice> {
    // The model the engine is built on: one output of a complementary pair.
    let model = complementary_outputs(&model).map_or(model, |(second, _)| Arc::new(second));
    let prepared = PreparedModel::new(model)?;
    Ok(choose_algorithm(&prepared, rows_hint, options.v2_memory_bytes))
}
