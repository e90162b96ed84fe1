//! The [`Engine`] trait every engine (CPU or GPU) implements.

use super::block::FeatureBlock;
use super::drivers::{check_block, check_output, par_rows};
use super::output::{Attributions, Interactions, Predictions};
use crate::error::{Error, Result};
use crate::model::Model;

/// An engine bound to one model. Cheap to share across threads.
pub trait Engine: Send + Sync {
    /// The algorithm name (`treeshap`, `fast-v1`, ...).
    fn name(&self) -> &'static str;

    /// The model being explained.
    fn model(&self) -> &Model;

    /// SHAP values of every row of `block`.
    fn shap(&self, block: &FeatureBlock) -> Result<Attributions>;

    /// SHAP values of a loss of every row of `block` against the row's label (`labels`, one
    /// per row). Only an engine of a loss transform (an `OutputTransform` whose `needs_labels`
    /// holds) has a loss to attribute; the others refuse.
    fn shap_with_labels(&self, block: &FeatureBlock, labels: &[f64]) -> Result<Attributions> {
        let _ = (block, labels);
        Err(Error::InvalidArgument(format!(
            "the {} engine attributes no loss: labels go with an interventional explainer of a loss output (shap's model_output=\"log_loss\")",
            self.name()
        )))
    }

    /// SHAP interaction values of every row of `block`.
    fn interactions(&self, block: &FeatureBlock) -> Result<Interactions>;

    /// Bytes the engine holds for its work beyond the model (tables, an aggregated background),
    /// where it counts them; `None` where it does not.
    fn memory_bytes(&self) -> Option<usize> {
        None
    }

    /// Margin predictions of every row of `block`.
    fn predict(&self, block: &FeatureBlock) -> Result<Predictions> {
        let model = self.model();
        check_block(model, block)?;
        let g = model.num_groups();
        check_output(block.rows(), g, "predictions")?;
        let values = par_rows(block, g, || (), |x, out, _| model.predict_row(x, out));
        Ok(Predictions { rows: block.rows(), groups: g, values })
    }
}
