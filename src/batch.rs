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
    /// Margin predictions: one `prediction` column.
    Predict,
}

/// Output fields for `output` (without kept columns).
pub fn output_fields(model: &Model, output: OutputKind) -> Vec<FieldRef> {
    match output {
        OutputKind::Shap => layout::shap_fields(model).iter().cloned().collect(),
        OutputKind::Interactions => vec![layout::interactions_field(model)],
        OutputKind::Predict => vec![layout::prediction_field(model)],
    }
}

/// The output columns of one block of rows, laid out as [`output_fields`].
pub fn explain_block(explainer: &dyn Engine, block: &FeatureBlock, output: OutputKind) -> Result<Vec<ArrayRef>> {
    Ok(match output {
        OutputKind::Shap => layout::shap_columns(&explainer.shap(block)?),
        OutputKind::Interactions => vec![layout::interactions_column(explainer.interactions(block)?)],
        OutputKind::Predict => vec![layout::prediction_column(explainer.predict(block)?)],
    })
}

/// The output columns for one input batch, its feature columns found by `features`.
pub fn explain_batch(explainer: &dyn Engine, features: &FeatureColumns, batch: &RecordBatch, output: OutputKind) -> Result<Vec<ArrayRef>> {
    let block = features.block(batch, explainer.model())?;
    explain_block(explainer, &block, output)
}

/// The columns of `batch` named `features`, in that order (what a worker needs of a batch).
#[cfg(feature = "flight")]
pub fn feature_batch(batch: &RecordBatch, features: &[String]) -> Result<RecordBatch> {
    use crate::features::column_index;
    use arrow::datatypes::{Field, Schema};
    let schema = batch.schema();
    let mut fields = Vec::with_capacity(features.len());
    let mut columns = Vec::with_capacity(features.len());
    for (index, name) in features.iter().enumerate() {
        let i = column_index(&schema, name, index)?;
        fields.push(Field::new(name, batch.column(i).data_type().clone(), true));
        columns.push(batch.column(i).clone());
    }
    RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).map_err(|e| Error::arrow("selecting feature columns", e))
}

/// The process's compute threads for `threads` (0: all cores). Pools are shared by every front
/// end and capped at the machine's cores, so a process never runs more compute threads than
/// it has cores per pool, and asking for more (a client's `SET shap.threads = 100000`) gets
/// all cores rather than a pool of that size. Results do not depend on the pool.
pub fn compute_pool(threads: usize) -> Result<Arc<rayon::ThreadPool>> {
    static POOLS: OnceLock<Mutex<HashMap<usize, Arc<rayon::ThreadPool>>>> = OnceLock::new();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = if threads >= cores { 0 } else { threads };
    let mut pools = POOLS.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
    if let Some(pool) = pools.get(&threads) {
        return Ok(pool.clone());
    }
    let mut builder = rayon::ThreadPoolBuilder::new().thread_name(|i| format!("shapfusion-compute-{i}"));
    if threads > 0 {
        builder = builder.num_threads(threads);
    }
    let pool = Arc::new(builder.build().map_err(|e| Error::Input(format!("cannot start {threads} compute threads: {e}")))?);
    pools.insert(threads, pool.clone());
    Ok(pool)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compute_pools_are_shared_and_capped_at_the_cores() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let all = compute_pool(0).unwrap();
        assert_eq!(all.current_num_threads(), cores);
        assert!(Arc::ptr_eq(&all, &compute_pool(100_000).unwrap()));
        assert!(Arc::ptr_eq(&all, &compute_pool(cores).unwrap()));
        if cores > 1 {
            assert_eq!(compute_pool(1).unwrap().current_num_threads(), 1);
        }
    }
}
