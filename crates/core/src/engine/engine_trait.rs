//! The [`Engine`] trait every engine (CPU or GPU) implements.

use super::block::FeatureBlock;
use super::drivers::{check_block, check_output, par_rows};
use super::output::{Attributions, Interactions, Predictions};
use crate::error::Result;
use crate::model::Model;

/// An engine bound to one model. Cheap to share across threads.
pub trait Engine: Send + Sync {
    /// The algorithm name (`treeshap`, `fast-v1`, ...).
    fn name(&self) -> &'static str;

    /// The model being explained.
    fn model(&self) -> &Model;

    /// SHAP values of every row of `block`.
    fn shap(&self, block: &FeatureBlock) -> Result<Attributions>;

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
