//! The batch step every front end shares (`explain`, the SQL functions, the Flight worker and
//! the pool): one batch from Arrow through an engine and back to Arrow, in the layout of
//! [`output_fields`](crate::layout::output_fields). Defined here once, so a row gives the same
//! bits whichever front end explains it.

use arrow::array::{ArrayRef, RecordBatch};

use crate::engine::{Engine, FeatureBlock};
use crate::error::Result;
use crate::features::FeatureColumns;
use crate::layout::{self, OutputKind};

/// The output columns of one block of rows, laid out as [`output_fields`](layout::output_fields).
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
