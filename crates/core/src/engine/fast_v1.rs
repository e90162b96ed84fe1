//! `fast-v1`: Fast TreeSHAP v1 (Yang 2021), written as polynomials.
//!
//! On a root-to-leaf path with `d` distinct features, split into the features the row follows
//! ("hot", set S) and those it does not ("cold", C), a leaf of value v contributes
//!
//! ```text
//!   cold i:  -v · Z_C · Q(S)            hot i:  v · (1 - z_i) · Z_C · Q(S \ {i})
//!   Z_C = Π_{k∈C} z_k,   Q(T) = Σ_u c_d(u) · [t^u] Π_{k∈T} (z_k + t),   c_d(u) = u!(d-1-u)!/d!
//! ```
//!
//! where `z_k` is the cover fraction of the path for feature k. The cold features share one
//! value, and the polynomial only carries hot features (cold ones are a scalar product), which is
//! v1's saving over the original: one O(d) sum for all cold features instead of one per feature.

use std::sync::Arc;

use super::block::FeatureBlock;
use super::drivers::shap_by_tree;
use super::engine_trait::Engine;
use super::interactions::FastInteractions;
use super::output::{Attributions, Interactions};
use super::path::{poly_div_linear, poly_mul_linear, weighted_sum, ShapleyWeights};
use super::prepared::{PreparedModel, PreparedTree};
use crate::error::Result;
use crate::model::{Model, Tree};

pub(crate) struct FastV1 {
    prepared: Arc<PreparedModel>,
    weights: ShapleyWeights,
    interactions: FastInteractions,
}

impl FastV1 {
    pub fn new(prepared: Arc<PreparedModel>) -> Result<Self> {
        super::drivers::check_depth("fast-v1", &prepared)?;
        let weights = ShapleyWeights::new(prepared.max_depth);
        Ok(FastV1 { prepared, weights, interactions: FastInteractions::default() })
    }
}

#[derive(Debug, Clone, Copy)]
struct Elem {
    feature: u32,
    zero: f64,
    hot: bool,
}

/// Path state at one depth: distinct features, the hot polynomial and the cold product.
#[derive(Debug, Clone, Default)]
struct Level {
    elems: Vec<Elem>,
    poly: Vec<f64>,
    residual: f64,
}

struct Scratch {
    levels: Vec<Level>,
    tmp: Vec<f64>,
}

struct Walk<'a> {
    tree: &'a Tree,
    prep: &'a PreparedTree,
    weights: &'a ShapleyWeights,
    x: &'a [f64],
    phi: &'a mut [f64],
}

impl Walk<'_> {
    fn visit(&mut self, node: usize, level: usize, s: &mut Scratch) {
        let tree_node = &self.tree.nodes[node];
        if tree_node.is_leaf() {
            self.leaf(node, level, s);
            return;
        }
        let feature = tree_node.feature;
        let goes_left = self.tree.goes_left(tree_node, self.x[feature as usize]);
        let [rl, rr] = self.prep.ratios[node];
        let children = if goes_left {
            [(tree_node.left, rl, true), (tree_node.right, rr, false)]
        } else {
            [(tree_node.right, rr, true), (tree_node.left, rl, false)]
        };
        for (child, ratio, hot_branch) in children {
            let (head, tail) = s.levels.split_at_mut(level + 1);
            let parent = &head[level];
            let next = &mut tail[0];
            next.elems.clear();
            next.elems.extend_from_slice(&parent.elems);
            next.poly.clear();
            next.poly.extend_from_slice(&parent.poly);
            next.residual = parent.residual;

            // Take the feature's earlier element off the path, keeping its fractions.
            let mut zero = ratio;
            let mut hot = hot_branch;
            if let Some(k) = next.elems.iter().position(|e| e.feature == feature) {
                let e = next.elems.remove(k);
                zero *= e.zero;
                hot &= e.hot;
                if e.hot {
                    poly_div_linear(&next.poly, e.zero, &mut s.tmp);
                    std::mem::swap(&mut next.poly, &mut s.tmp);
                } else {
                    next.residual /= e.zero;
                }
            }
            if !hot && zero == 0.0 {
                continue; // unreachable by cover and not taken by the row: contributes nothing
            }
            next.elems.push(Elem { feature, zero, hot });
            if hot {
                poly_mul_linear(&mut next.poly, zero);
            } else {
                next.residual *= zero;
            }
            self.visit(child as usize, level + 1, s);
        }
    }

    fn leaf(&mut self, node: usize, level: usize, s: &mut Scratch) {
        let state = &s.levels[level];
        let d = state.elems.len();
        if d == 0 {
            return;
        }
        let c = self.weights.get(d);
        let v = self.prep.value[node] * state.residual;
        let cold_value = -v * weighted_sum(&state.poly, c);
        for e in &state.elems {
            let contribution = if e.hot {
                poly_div_linear(&state.poly, e.zero, &mut s.tmp);
                v * (1.0 - e.zero) * weighted_sum(&s.tmp, c)
            } else {
                cold_value
            };
            self.phi[e.feature as usize] += contribution;
        }
    }
}

impl Engine for FastV1 {
    fn name(&self) -> &'static str {
        "fast-v1"
    }

    fn model(&self) -> &Model {
        &self.prepared.model
    }

    fn shap(&self, block: &FeatureBlock) -> Result<Attributions> {
        let p = &*self.prepared;
        let init = || Scratch { levels: vec![Level::default(); p.max_depth + 2], tmp: Vec::new() };
        shap_by_tree(p, block, init, |t, x, phi, s| {
            let root = &mut s.levels[0];
            root.elems.clear();
            root.poly.clear();
            root.poly.push(1.0);
            root.residual = 1.0;
            let (tree, prep) = (&p.model.trees()[t], &p.trees[t]);
            Walk { tree, prep, weights: &self.weights, x, phi }.visit(0, 0, s);
        })
    }

    /// Interaction values come from the quadrature engine's walk (exact, and far cheaper than
    /// conditioning a TreeSHAP walk on every feature).
    fn interactions(&self, block: &FeatureBlock) -> Result<Interactions> {
        self.interactions.compute(&self.prepared, block)
    }
}
