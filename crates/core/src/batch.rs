//! The batch step every front end shares (`explain`, the SQL functions, the Flight worker and
//! the pool): what to compute ([`OutputKind`]), the output's fields, one batch from Arrow
//! through an engine and back to Arrow, and the process's compute threads. Numbers and layout
//! are defined here once, so a row gives the same bits whichever front end explains it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use arrow::array::{ArrayRef, RecordBatch};
use arrow::datatypes::FieldRef;

use crate::engine::{Engine, FeatureBlock};
use crate::error::{Error, Result};
use crate::features::FeatureColumns;
use crate::layout;
use crate::model::Model;

/// What to compute for each row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputKind {
    /// SHAP values: one column per feature plus `bias`.
    #[default]
    Shap,
    /// SHAP interaction values: one `interactions` column.
    Interactions,
    /// Margin (raw score) predictions: one `margin` column.
    Margin,
}

impl OutputKind {
    /// The names, as the command line, SQL, the wire and Python spell them.
    pub const NAMES: [&'static str; 3] = ["shap", "interactions", "margin"];

    /// The name: `shap`, `interactions` or `margin`.
    pub const fn name(&self) -> &'static str {
        match self {
            OutputKind::Shap => Self::NAMES[0],
            OutputKind::Interactions => Self::NAMES[1],
            OutputKind::Margin => Self::NAMES[2],
        }
    }
}

impl std::fmt::Display for OutputKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for OutputKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "shap" => Ok(OutputKind::Shap),
            "interactions" => Ok(OutputKind::Interactions),
            // The name it had before (what older clients and pools send).
            "margin" | "predict" => Ok(OutputKind::Margin),
            other => Err(Error::Input(format!("unknown output {other:?}; expected one of {}", Self::NAMES.join(", ")))),
        }
    }
}

/// Output fields for `output` (without kept columns).
pub fn output_fields(model: &Model, output: OutputKind) -> Vec<FieldRef> {
    match output {
        OutputKind::Shap => layout::shap_fields(model).iter().cloned().collect(),
        OutputKind::Interactions => vec![layout::interactions_field(model)],
        OutputKind::Margin => vec![layout::margin_field(model)],
    }
}

/// The output columns of one block of rows, laid out as [`output_fields`].
pub(crate) fn explain_block(explainer: &dyn Engine, block: &FeatureBlock, output: OutputKind) -> Result<Vec<ArrayRef>> {
    Ok(match output {
        OutputKind::Shap => layout::shap_columns(&explainer.shap(block)?),
        OutputKind::Interactions => vec![layout::interactions_column(explainer.interactions(block)?)],
        OutputKind::Margin => vec![layout::margin_column(explainer.predict(block)?)],
    })
}

/// The output columns for one input batch, its feature columns found by `features`.
pub(crate) fn explain_batch(explainer: &dyn Engine, features: &FeatureColumns, batch: &RecordBatch, output: OutputKind) -> Result<Vec<ArrayRef>> {
    let block = features.block(batch, explainer.model())?;
    explain_block(explainer, &block, output)
}

/// The process's pool of `threads` compute threads ([`ComputeSettings::threads_to_run`](crate::settings::ComputeSettings::threads_to_run),
/// already capped at the cores). Pools are shared by every front end, so a process keeps one
/// pool per thread count. Results do not depend on the pool.
pub(crate) fn compute_pool(threads: usize) -> Result<Arc<rayon::ThreadPool>> {
    static POOLS: OnceLock<Mutex<HashMap<usize, Arc<rayon::ThreadPool>>>> = OnceLock::new();
    let threads = threads.clamp(1, crate::settings::available_cores());
    let mut pools = POOLS.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    if let Some(pool) = pools.get(&threads) {
        return Ok(pool.clone());
    }
    let builder = rayon::ThreadPoolBuilder::new().thread_name(|i| format!("shapfusion-compute-{i}")).num_threads(threads);
    let pool = Arc::new(builder.build().map_err(|e| Error::Internal(format!("cannot start {threads} compute threads: {e}")))?);
    pools.insert(threads, pool.clone());
    Ok(pool)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compute_pools_are_shared_and_capped_at_the_cores() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let all = compute_pool(cores).unwrap();
        assert_eq!(all.current_num_threads(), cores);
        assert!(Arc::ptr_eq(&all, &compute_pool(100_000).unwrap()));
        if cores > 1 {
            assert_eq!(compute_pool(1).unwrap().current_num_threads(), 1);
        }
    }
}
