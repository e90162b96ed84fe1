//! Interaction values for the engines that have no interaction walk of their own (`fast-v1`,
//! `fast-v2`): the quadrature engine's, or the conditioned TreeSHAP walks where quadrature
//! cannot take the model. Same layout as XGBoost's `pred_interactions`: `(F+1) × (F+1)` per
//! group, bias last.

use std::sync::{Arc, OnceLock};

use super::block::FeatureBlock;
use super::engine_trait::Engine;
use super::output::Interactions;
use super::prepared::PreparedModel;
use super::quadrature::Quadrature;
use super::treeshap::interactions_for_rows;
use crate::error::Result;

/// Interaction values for the engines without a walk of their own: the quadrature engine's
/// (built on first use), or the conditioned TreeSHAP walks when quadrature cannot take the model.
#[derive(Default)]
pub(crate) struct FastInteractions {
    quadrature: OnceLock<Option<Quadrature>>,
}

impl FastInteractions {
    pub fn compute(&self, p: &Arc<PreparedModel>, block: &FeatureBlock) -> Result<Interactions> {
        match self.quadrature.get_or_init(|| Quadrature::new(p.clone()).ok()) {
            Some(q) => q.interactions(block),
            None => interactions_for_rows(p, block),
        }
    }
}
