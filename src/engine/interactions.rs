//! SHAP interaction values (Lundberg et al. 2020): for each feature j, the difference between
//! TreeSHAP with j "on" and with j "off", halved, gives row j of the matrix; the diagonal is
//! the SHAP value minus the row's off-diagonal sum. Same layout as XGBoost's
//! `pred_interactions`: `(F+1) × (F+1)` per group, bias last.
//!
//! Only features a tree splits on are conditioned on, and each conditioned walk skips every
//! subtree where "on" and "off" cannot differ (the feature is neither above nor below it), so
//! the work follows the paths that hold the feature rather than all features × all leaves.

use std::sync::{Arc, OnceLock};

use super::path::PathElem;
use super::quadrature::Quadrature;
use super::Explainer;
use super::prepared::PreparedModel;
use super::treeshap::{path_scratch, shap_row, Condition, Walk};
use super::{check_block, par_rows, FeatureBlock, Interactions};
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


struct Scratch {
    path: Vec<PathElem>,
    shap: Vec<f64>,
    diff: Vec<f64>,
}

pub(crate) fn interactions_for_rows(p: &PreparedModel, block: &FeatureBlock) -> Result<Interactions> {
    check_block(&p.model, block)?;
    let f = p.model.num_features();
    let g = p.model.num_groups;
    let w = f + 1;
    let width = g * w * w;
    check_size(block.rows(), width)?;
    let init = || Scratch { path: path_scratch(p.max_depth), shap: vec![0.0; g * w], diff: vec![0.0; w] };
    let values = par_rows(block, width, init, |x, out, s| interaction_row(p, x, out, s));
    Ok(Interactions { rows: block.rows(), groups: g, features: f, values })
}

fn interaction_row(p: &PreparedModel, x: &[f64], out: &mut [f64], s: &mut Scratch) {
    let f = p.model.num_features();
    let w = f + 1;
    s.shap.iter_mut().for_each(|v| *v = 0.0);
    shap_row(p, x, &mut s.shap, &mut s.path);

    for (tree, prep) in p.model.trees.iter().zip(&p.trees) {
        let group_base = tree.group * w * w;
        for (j, splits) in &prep.splits_by_feature {
            for (condition, scale) in [(Condition::On(*j), 0.5), (Condition::Off(*j), -0.5)] {
                Walk { tree, prep, x, phi: &mut s.diff, condition, scale, cond_splits: Some(splits) }.run(&mut s.path);
            }
            let row = group_base + *j as usize * w;
            for (i, _) in &prep.splits_by_feature {
                let i = *i as usize;
                out[row + i] += s.diff[i];
                s.diff[i] = 0.0;
            }
        }
    }

    finish_row(out, &s.shap, f, p.model.num_groups);
}

/// Fills the diagonal (`φ_i − Σ_{k≠i} φ_ik`) and the bias entry of one row's matrices, given its
/// off-diagonal entries in `out` and its SHAP values `shap` (G × (F+1)).
pub fn finish_row(out: &mut [f64], shap: &[f64], f: usize, groups: usize) {
    let w = f + 1;
    for g in 0..groups {
        let base = g * w * w;
        for i in 0..f {
            let row = base + i * w;
            let off_diagonal: f64 = (0..f).filter(|&k| k != i).map(|k| out[row + k]).sum();
            out[row + i] = shap[g * w + i] - off_diagonal;
        }
        out[base + f * w + f] = shap[g * w + f];
    }
}

/// Refuses an interaction output over [`MAX_OUTPUT_VALUES`](super::MAX_OUTPUT_VALUES).
pub(crate) fn check_size(rows: usize, width: usize) -> Result<()> {
    super::check_output(rows, width, "interaction values")
}
