//! `quadrature`: exact TreeSHAP by Gauss–Legendre quadrature of the Shapley weights.
//!
//! With the notation of `fast_v1` (path features split into hot S and cold C, cover fractions
//! `z_k`, d distinct features), the Shapley weights are Beta integrals,
//! `c_d(u) = ∫₀¹ t^u (1-t)^(d-1-u) dt`, so the leaf's combination sums become integrals of
//! products of per-feature factors:
//!
//! ```text
//!   G(t)      = Π_{k∈S} (z_k (1-t) + t) · Π_{k∈C} (1-t)
//!   Q(S)      = ∫ G(t) / (1-t) dt                      (shared by every cold feature)
//!   Q(S\{i})  = ∫ G(t) / (z_i (1-t) + t) dt            (hot feature i)
//! ```
//!
//! Both integrands are polynomials of degree d-1, so an n-point Gauss–Legendre rule with
//! n ≥ ⌈d/2⌉ is exact. Every factor lies in (0, 1] on the open interval, so the products neither
//! overflow nor cancel, and removing a repeated feature's factor is a division by a number no
//! smaller than the quadrature node. The walk keeps G at the n nodes as a fixed-size array
//! (n rounded up to a power of two per tree, a few SIMD lanes), costing O(n) per node and per hot
//! feature at a leaf, O(1) per cold feature.
// The rule's loops index several arrays by the same quadrature node, as the formulas read.
#![allow(clippy::needless_range_loop)]

use std::sync::Arc;

use super::block::FeatureBlock;
use super::drivers::{finish_interaction_row, interactions_by_task, rows_per_task, shap_by_tree, FirstTouch};
use super::engine_trait::Engine;
use super::output::{Attributions, Interactions};
use super::prepared::{PreparedModel, PreparedTree};
use crate::error::{Error, Result};
use crate::model::{Model, Tree};

/// Most quadrature points per tree (paths with up to 2·MAX_POINTS distinct features).
pub(crate) const MAX_POINTS: usize = 64;

/// Gauss–Legendre nodes and weights on [0, 1], by Newton's method on the Legendre polynomial.
pub(crate) fn gauss_legendre(n: usize) -> (Vec<f64>, Vec<f64>) {
    let mut nodes = vec![0.0; n];
    let mut weights = vec![0.0; n];
    for i in 0..n {
        // Initial guess (Tricomi), then Newton on P_n.
        let mut x = (std::f64::consts::PI * (i as f64 + 0.75) / (n as f64 + 0.5)).cos();
        let mut dp = 1.0;
        for _ in 0..100 {
            let (mut p0, mut p1) = (1.0, x);
            for k in 2..=n {
                let p2 = ((2 * k - 1) as f64 * x * p1 - (k - 1) as f64 * p0) / k as f64;
                p0 = p1;
                p1 = p2;
            }
            let pn = if n == 0 {
                1.0
            } else if n == 1 {
                x
            } else {
                p1
            };
            let pn1 = if n == 1 { 1.0 } else { p0 };
            dp = n as f64 * (x * pn - pn1) / (x * x - 1.0);
            let dx = pn / dp;
            x -= dx;
            if dx.abs() < 1e-16 {
                break;
            }
        }
        // Map [-1, 1] → [0, 1].
        nodes[i] = (1.0 - x) / 2.0;
        weights[i] = 1.0 / ((1.0 - x * x) * dp * dp);
    }
    (nodes, weights)
}

/// Quadrature points for a tree whose longest path has `distinct` features: ⌈d/2⌉ make the
/// rule exact; rounded up to a power of two so the walk is compiled for a few fixed sizes.
fn points_for(distinct: usize) -> usize {
    distinct.div_ceil(2).max(1).next_power_of_two()
}

/// Quadrature data of one tree, for `N` points.
#[derive(Debug, Clone)]
struct Rule {
    /// Number of points in use (a power of two).
    points: usize,
    t: [f64; MAX_POINTS],
    one_minus_t: [f64; MAX_POINTS],
    /// w_q / (1 - t_q): the cold sum's weights.
    w_over_1mt: [f64; MAX_POINTS],
    /// 1 / (1 - t_q): takes a cold feature out of G.
    inv_1mt: [f64; MAX_POINTS],
    w: [f64; MAX_POINTS],
}

impl Rule {
    fn new(distinct: usize) -> Option<Rule> {
        let points = points_for(distinct);
        if points > MAX_POINTS {
            return None;
        }
        let (nodes, weights) = gauss_legendre(points);
        let mut r = Rule {
            points,
            t: [0.0; MAX_POINTS],
            one_minus_t: [0.0; MAX_POINTS],
            w_over_1mt: [0.0; MAX_POINTS],
            inv_1mt: [0.0; MAX_POINTS],
            w: [0.0; MAX_POINTS],
        };
        for q in 0..points {
            r.t[q] = nodes[q];
            r.one_minus_t[q] = 1.0 - nodes[q];
            r.w[q] = weights[q];
            r.w_over_1mt[q] = weights[q] / (1.0 - nodes[q]);
            r.inv_1mt[q] = 1.0 / (1.0 - nodes[q]);
        }
        Some(r)
    }
}

pub(crate) struct Quadrature {
    prepared: Arc<PreparedModel>,
    rules: Vec<Rule>,
    plans: Vec<PathPlan>,
}

/// The row-independent structure of a tree's unique paths, compiled once: for every node the
/// slot of its feature on the path (slots in order of first appearance), the feature's merged
/// cover fraction before the node and on each child edge; for every leaf its path features.
/// A row's walk then only carries the hot/cold mask, the product vector G and the cold product.
#[derive(Debug, Default)]
struct PathPlan {
    slot: Vec<u8>,
    first: Vec<bool>,
    /// Internal nodes whose children are both leaves.
    pair: Vec<bool>,
    z_prev: Vec<f64>,
    z_edge: Vec<[f64; 2]>,
    /// Leaves: start in `elems` and number of path features.
    leaf: Vec<(u32, u8)>,
    /// (feature, merged cover fraction) per slot, per leaf.
    elems: Vec<(u32, f64)>,
    /// Per leaf element: `(1 - z) · w_q / (z (1 - t_q) + t_q)` for each point, so a hot feature's
    /// contribution is one dot product with G; empty when over the memory bound (then computed).
    hot_weights: Vec<f64>,
    /// Per leaf element: `1 / (z (1 - t_q) + t_q)`, which takes a hot feature out of G with a
    /// multiplication (interactions); tabulated with `hot_weights`.
    hot_inverse: Vec<f64>,
    points: usize,
}

impl PathPlan {
    /// Tabulates `hot_weights` for `rule`.
    fn tabulate(&mut self, rule: &Rule) {
        self.points = rule.points;
        self.hot_weights = Vec::with_capacity(self.elems.len() * rule.points);
        self.hot_inverse = Vec::with_capacity(self.elems.len() * rule.points);
        for &(_, z) in &self.elems {
            for q in 0..rule.points {
                let factor = z * rule.one_minus_t[q] + rule.t[q];
                self.hot_weights.push((1.0 - z) * rule.w[q] / factor);
                self.hot_inverse.push(1.0 / factor);
            }
        }
    }

    fn new(tree: &Tree, prep: &PreparedTree) -> PathPlan {
        let n = tree.nodes.len();
        let mut plan = PathPlan {
            slot: vec![0; n],
            first: vec![false; n],
            pair: vec![false; n],
            z_prev: vec![1.0; n],
            z_edge: vec![[0.0; 2]; n],
            leaf: vec![(0, 0); n],
            elems: Vec::new(),
            hot_weights: Vec::new(),
            hot_inverse: Vec::new(),
            points: 0,
        };
        let mut stack: Vec<(usize, Vec<(u32, f64)>)> = vec![(0, Vec::new())];
        while let Some((i, path)) = stack.pop() {
            let node = &tree.nodes[i];
            if node.is_leaf() {
                plan.leaf[i] = (plan.elems.len() as u32, path.len() as u8);
                plan.elems.extend_from_slice(&path);
                continue;
            }
            let [rl, rr] = prep.ratios[i];
            let existing = path.iter().position(|p| p.0 == node.feature);
            let (slot, prev) = match existing {
                Some(b) => (b, path[b].1),
                None => (path.len(), 1.0),
            };
            plan.slot[i] = slot as u8;
            plan.first[i] = existing.is_none();
            plan.pair[i] = tree.nodes[node.left as usize].is_leaf() && tree.nodes[node.right as usize].is_leaf();
            plan.z_prev[i] = prev;
            plan.z_edge[i] = [prev * rl, prev * rr];
            for (child, z) in [(node.right, prev * rr), (node.left, prev * rl)] {
                let mut next = path.clone();
                match existing {
                    Some(b) => next[b].1 = z,
                    None => next.push((node.feature, z)),
                }
                stack.push((child as usize, next));
            }
        }
        plan
    }
}

/// Bound on the tabulated hot-feature weights (beyond it they are computed per leaf visit).
const HOT_WEIGHTS_BYTES: usize = 256 << 20;

// The walk's mask has one bit per path slot: `Rule::new` caps paths at 2·MAX_POINTS = 128.
const _: () = assert!(2 * MAX_POINTS <= u128::BITS as usize);

impl Quadrature {
    pub fn new(prepared: Arc<PreparedModel>) -> Result<Self> {
        super::drivers::check_depth("quadrature", &prepared)?;
        let mut rules = Vec::with_capacity(prepared.trees.len());
        for (t, (tree, prep)) in prepared.model.trees().iter().zip(&prepared.trees).enumerate() {
            let d = prep.leaf_path_lengths(tree).max().unwrap_or(0);
            rules.push(Rule::new(d).ok_or_else(|| {
                Error::Unsupported(format!("quadrature: tree {t} has a path with {d} distinct features (limit {}); use fast-v1", 2 * MAX_POINTS))
            })?);
        }
        let mut plans: Vec<PathPlan> = prepared.model.trees().iter().zip(&prepared.trees).map(|(t, p)| PathPlan::new(t, p)).collect();
        // Tabulate the hot-feature weights while they stay small next to the model.
        let table_bytes: usize = plans.iter().zip(&rules).map(|(p, r)| p.elems.len() * r.points * 8).sum();
        if table_bytes <= HOT_WEIGHTS_BYTES {
            for (plan, rule) in plans.iter_mut().zip(&rules) {
                plan.tabulate(rule);
            }
        }
        Ok(Quadrature { prepared, rules, plans })
    }
}

/// The compiled walk for SHAP values: state is (mask, G, cold product), nothing else.
struct FastWalk<'a, const N: usize> {
    tree: &'a Tree,
    prep: &'a PreparedTree,
    plan: &'a PathPlan,
    rule: &'a Rule,
    x: &'a [f64],
    phi: &'a mut [f64],
    /// With interactions: this group's (F+1)×(F+1) matrix, off-diagonal entries accumulated.
    pairs: Option<&'a mut [f64]>,
}

impl<const N: usize> FastWalk<'_, N> {
    #[inline]
    fn hot_factor(&self, z: f64, q: usize) -> f64 {
        z * self.rule.one_minus_t[q] + self.rule.t[q]
    }

    fn visit(&mut self, node: usize, mask: u128, g: &[f64; N], cold: f64) {
        let tree_node = &self.tree.nodes[node];
        if tree_node.is_leaf() {
            self.leaf(node, mask, g, cold);
            return;
        }
        let goes_left = self.tree.goes_left(tree_node, self.x[tree_node.feature as usize]);
        let bit = 1u128 << self.plan.slot[node];
        let [zl, zr] = self.plan.z_edge[node];
        let (hot, cold_child, z_hot, z_cold) =
            if goes_left { (tree_node.left, tree_node.right, zl, zr) } else { (tree_node.right, tree_node.left, zr, zl) };
        let mut gh = *g;
        let mut gc = *g;
        // Each child's (hot set, cold product); a child whose cold product is 0 contributes
        // nothing and is not visited.
        let (hot_state, cold_state);
        if self.plan.first[node] {
            for q in 0..N {
                gh[q] *= self.hot_factor(z_hot, q);
                gc[q] *= self.rule.one_minus_t[q];
            }
            (hot_state, cold_state) = ((mask | bit, cold), (mask, cold * z_cold));
        } else if mask & bit != 0 {
            // The feature was hot: the hot child keeps it hot with a smaller fraction, the cold
            // child turns it cold.
            let z_prev = self.plan.z_prev[node];
            for q in 0..N {
                let old = self.hot_factor(z_prev, q);
                gh[q] *= self.hot_factor(z_hot, q) / old;
                gc[q] *= self.rule.one_minus_t[q] / old;
            }
            (hot_state, cold_state) = ((mask, cold), (mask & !bit, cold * z_cold));
        } else {
            // Already cold: it stays cold on both sides; only its fraction changes.
            let z_prev = self.plan.z_prev[node];
            (hot_state, cold_state) = ((mask, cold / z_prev * z_hot), (mask, cold / z_prev * z_cold));
        }
        if self.plan.pair[node] && !self.plan.hot_weights.is_empty() {
            let slot = self.plan.slot[node] as usize;
            let leaves = [(hot as usize, hot_state, &gh), (cold_child as usize, cold_state, &gc)];
            self.leaf_pair(leaves, slot);
            if self.pairs.is_some() {
                self.leaf_pair_interactions(leaves, slot);
            }
            return;
        }
        for (child, (m, c), gx) in [(hot, hot_state, &gh), (cold_child, cold_state, &gc)] {
            if c != 0.0 {
                self.visit(child as usize, m, gx, c);
            }
        }
    }

    /// Two sibling leaves at once (SHAP values only). Their paths agree except at the parent's
    /// feature (path slot `slot`), so every other element reads one combined vector
    /// `H = v_a·c_a·G_a + v_b·c_b·G_b` instead of each leaf's own: half the dot products.
    fn leaf_pair(&mut self, leaves: [(usize, (u128, f64), &[f64; N]); 2], slot: usize) {
        let mut h = [0.0; N];
        let mut own = [0.0; 2];
        for (k, &(leaf, (mask, cold), g)) in leaves.iter().enumerate() {
            let scale = self.prep.value[leaf] * cold;
            let (start, _) = self.plan.leaf[leaf];
            let hw = &self.plan.hot_weights[(start as usize + slot) * N..(start as usize + slot + 1) * N];
            for q in 0..N {
                h[q] += scale * g[q];
            }
            let (hot_sum, cold_sum) = (dot(hw, g), dot(&self.rule.w_over_1mt, g));
            own[k] = scale * if mask & (1u128 << slot) != 0 { hot_sum } else { -cold_sum };
        }
        let (start, d) = self.plan.leaf[leaves[0].0];
        let (start, d) = (start as usize, d as usize);
        let elems = &self.plan.elems[start..start + d];
        self.phi[elems[slot].0 as usize] += own[0] + own[1];
        let cold_sum = dot(&self.rule.w_over_1mt, &h);
        // Outside `slot` both leaves have the same hot set.
        let mask = leaves[0].1 .0;
        let weights = &self.plan.hot_weights[start * N..(start + d) * N];
        for (b, (&(feature, _), hw)) in elems.iter().zip(weights.chunks_exact(N)).enumerate() {
            if b == slot {
                continue;
            }
            let s = dot(hw, &h);
            self.phi[feature as usize] += if mask & (1u128 << b) != 0 { s } else { -cold_sum };
        }
    }

    /// Interaction halves of two sibling leaves at once ([`FastWalk::leaf_pairs`] for both).
    /// Conditioning on a feature `j` other than the parent's (path slot `slot`) scales both
    /// leaves alike, so every pair `(j, i)` with neither at `slot` reads the combined vector
    /// `H = Σ v·c·G` once instead of each leaf's `G`.
    fn leaf_pair_interactions(&mut self, leaves: [(usize, (u128, f64), &[f64; N]); 2], slot: usize) {
        let (start, d) = self.plan.leaf[leaves[0].0];
        let (start, d) = (start as usize, d as usize);
        if d < 2 {
            return;
        }
        let starts = [start, self.plan.leaf[leaves[1].0].0 as usize];
        let width = self.phi.len();
        let rule = self.rule;
        let plan = self.plan;
        let pairs = self.pairs.as_deref_mut().expect("checked by caller");
        let table = |leaf: usize, b: usize| (starts[leaf] + b) * N..(starts[leaf] + b + 1) * N;
        // Each leaf's G scaled by its value and cold product, and their sum.
        let mut scaled = [[0.0; N]; 2];
        let mut h = [0.0; N];
        for (k, &(leaf, (_, cold), g)) in leaves.iter().enumerate() {
            let scale = self.prep.value[leaf] * cold;
            for q in 0..N {
                scaled[k][q] = scale * g[q];
                h[q] += scaled[k][q];
            }
        }
        let elems = &plan.elems[start..start + d];
        let mask = leaves[0].1 .0; // the same in both leaves outside `slot`
        let hot = |m: u128, b: usize| m & (1u128 << b) != 0;
        for (bj, &(fj, zj)) in elems.iter().enumerate() {
            let row = &mut pairs[fj as usize * width..(fj as usize + 1) * width];
            if bj == slot {
                // The parent's feature differs between the leaves: each on its own.
                for (k, &(leaf, (m, cold), g)) in leaves.iter().enumerate() {
                    if cold == 0.0 {
                        continue;
                    }
                    let zj = plan.elems[starts[k] + slot].1;
                    let weights = &plan.hot_weights[starts[k] * N..(starts[k] + d) * N];
                    let inverse = &plan.hot_inverse[starts[k] * N..(starts[k] + d) * N];
                    let single = &plan.elems[starts[k]..starts[k] + d];
                    leaf_pairs_row::<N>(single, weights, inverse, rule, m, g, cold, self.prep.value[leaf], slot, zj, row);
                }
                continue;
            }
            let hot_j = hot(mask, bj);
            if !hot_j && zj == 0.0 {
                continue; // unreachable: both leaves' cold products are 0
            }
            let inv = if hot_j { &plan.hot_inverse[table(0, bj)] } else { &rule.inv_1mt[..N] };
            let k_j = 0.5 * ((hot_j as u8 as f64) - zj) * if hot_j { 1.0 } else { 1.0 / zj };
            let mut hj = [0.0; N];
            for q in 0..N {
                hj[q] = h[q] * inv[q];
            }
            let cold_sum = dot(&rule.w_over_1mt, &hj);
            for (bi, &(fi, _)) in elems.iter().enumerate() {
                if bi == bj {
                    continue;
                }
                let c = if bi == slot {
                    let mut c = 0.0;
                    for (k, &(_, (m, _), _)) in leaves.iter().enumerate() {
                        let mut gj = [0.0; N];
                        for q in 0..N {
                            gj[q] = scaled[k][q] * inv[q];
                        }
                        c += if hot(m, slot) { dot(&plan.hot_weights[table(k, slot)], &gj) } else { -dot(&rule.w_over_1mt, &gj) };
                    }
                    c
                } else if hot(mask, bi) {
                    dot(&plan.hot_weights[table(0, bi)], &hj)
                } else {
                    -cold_sum
                };
                row[fi as usize] += k_j * c;
            }
        }
    }

    fn leaf(&mut self, node: usize, mask: u128, g: &[f64; N], cold: f64) {
        let (start, d) = self.plan.leaf[node];
        if d == 0 {
            return;
        }
        let v = self.prep.value[node] * cold;
        let cold_value = -v * dot(&self.rule.w_over_1mt, g);
        let start = start as usize;
        let elems = &self.plan.elems[start..start + d as usize];
        let tabulated = !self.plan.hot_weights.is_empty();
        if tabulated {
            // Branch-free: whether a feature is hot is a coin flip per row, so the dot product
            // is computed for every element and the answer selected.
            let weights = &self.plan.hot_weights[start * N..(start + elems.len()) * N];
            for (b, (&(feature, _), hw)) in elems.iter().zip(weights.chunks_exact(N)).enumerate() {
                let s = dot(hw, g);
                let hot = mask & (1u128 << b) != 0;
                self.phi[feature as usize] += if hot { v * s } else { cold_value };
            }
        } else {
            for (b, &(feature, z)) in elems.iter().enumerate() {
                let contribution = if mask & (1u128 << b) != 0 {
                    let mut s = 0.0;
                    for q in 0..N {
                        s += (1.0 - z) * self.rule.w[q] * g[q] / self.hot_factor(z, q);
                    }
                    v * s
                } else {
                    cold_value
                };
                self.phi[feature as usize] += contribution;
            }
        }
        if self.pairs.is_some() {
            self.leaf_pairs(node, mask, g, cold);
        }
    }

    /// Interaction halves at a leaf. Conditioning on feature j ("on" minus "off") scales the
    /// leaf by `1[j hot] − z_j` and removes j from the players, so row j gets, for every other
    /// path feature i, half of i's contribution over the path without j.
    fn leaf_pairs(&mut self, node: usize, mask: u128, g: &[f64; N], cold: f64) {
        let (start, d) = self.plan.leaf[node];
        if d < 2 {
            return;
        }
        let start = start as usize;
        let elems = &self.plan.elems[start..start + d as usize];
        let width = self.phi.len();
        let value = self.prep.value[node];
        let pairs = self.pairs.as_deref_mut().expect("checked by caller");
        if !self.plan.hot_inverse.is_empty() {
            let table = start * N..(start + elems.len()) * N;
            let (weights, inverse) = (&self.plan.hot_weights[table.clone()], &self.plan.hot_inverse[table]);
            for (bj, &(fj, zj)) in elems.iter().enumerate() {
                let row = &mut pairs[fj as usize * width..(fj as usize + 1) * width];
                leaf_pairs_row::<N>(elems, weights, inverse, self.rule, mask, g, cold, value, bj, zj, row);
            }
            return;
        }
        for (bj, &(fj, zj)) in elems.iter().enumerate() {
            let hot_j = mask & (1u128 << bj) != 0;
            let mut gj = *g;
            for q in 0..N {
                gj[q] /= if hot_j { zj * self.rule.one_minus_t[q] + self.rule.t[q] } else { self.rule.one_minus_t[q] };
            }
            // j leaves the players: a cold j takes its fraction out of the cold product.
            let residual = if hot_j { cold } else { cold / zj };
            let scale = 0.5 * ((hot_j as u8 as f64) - zj) * value * residual;
            let mut cold_sum = 0.0;
            for q in 0..N {
                cold_sum += self.rule.w_over_1mt[q] * gj[q];
            }
            let row = fj as usize * width;
            for (bi, &(fi, zi)) in elems.iter().enumerate() {
                if bi == bj {
                    continue;
                }
                let c = if mask & (1u128 << bi) != 0 {
                    let mut s = 0.0;
                    for q in 0..N {
                        s += self.rule.w[q] * gj[q] / (zi * self.rule.one_minus_t[q] + self.rule.t[q]);
                    }
                    (1.0 - zi) * s
                } else {
                    -cold_sum
                };
                pairs[row + fi as usize] += scale * c;
            }
        }
    }
}

/// `Σ_q a[q]·b[q]` with four independent partial sums, combined in a fixed order: no chain of
/// additions through one accumulator, so the loop vectorises and results stay deterministic.
#[inline(always)]
fn dot<const N: usize>(a: &[f64], b: &[f64; N]) -> f64 {
    let a = &a[..N];
    if N < 4 {
        return (0..N).map(|q| a[q] * b[q]).sum();
    }
    let mut acc = [0.0; 4];
    for q in (0..N).step_by(4) {
        for l in 0..4 {
            acc[l] += a[q + l] * b[q + l];
        }
    }
    (acc[0] + acc[1]) + (acc[2] + acc[3])
}

/// Row `j` (path slot `bj`, fraction `zj`) of one leaf's interaction halves, added to `row`,
/// with the per-element weights and inverses tabulated: no division.
#[allow(clippy::too_many_arguments)]
#[inline]
fn leaf_pairs_row<const N: usize>(
    elems: &[(u32, f64)],
    weights: &[f64],
    inverse: &[f64],
    rule: &Rule,
    mask: u128,
    g: &[f64; N],
    cold: f64,
    value: f64,
    bj: usize,
    zj: f64,
    row: &mut [f64],
) {
    let hot_j = mask & (1u128 << bj) != 0;
    let inv = if hot_j { &inverse[bj * N..(bj + 1) * N] } else { &rule.inv_1mt[..N] };
    let mut gj = [0.0; N];
    for q in 0..N {
        gj[q] = g[q] * inv[q];
    }
    let cold_sum = dot(&rule.w_over_1mt, &gj);
    // j leaves the players: a cold j takes its fraction out of the cold product.
    let residual = if hot_j { cold } else { cold / zj };
    let scale = 0.5 * ((hot_j as u8 as f64) - zj) * value * residual;
    for (bi, (&(fi, _), hw)) in elems.iter().zip(weights.chunks_exact(N)).enumerate() {
        // The diagonal (bi == bj) is filled in from the SHAP values afterwards.
        if bi == bj {
            continue;
        }
        let c = if mask & (1u128 << bi) != 0 { dot(hw, &gj) } else { -cold_sum };
        row[fi as usize] += scale * c;
    }
}

fn run_fast<const N: usize>(q: &Quadrature, t: usize, x: &[f64], phi: &mut [f64], pairs: Option<&mut [f64]>) {
    let p = &*q.prepared;
    let mut walk = FastWalk::<N> { tree: &p.model.trees()[t], prep: &p.trees[t], plan: &q.plans[t], rule: &q.rules[t], x, phi, pairs };
    walk.visit(0, 0, &[1.0; N], 1.0);
}

impl Quadrature {
    /// One tree's walk for one row, dispatched on the tree's number of quadrature points.
    fn walk(&self, t: usize, x: &[f64], phi: &mut [f64], pairs: Option<&mut [f64]>) {
        match self.rules[t].points {
            1 => run_fast::<1>(self, t, x, phi, pairs),
            2 => run_fast::<2>(self, t, x, phi, pairs),
            4 => run_fast::<4>(self, t, x, phi, pairs),
            8 => run_fast::<8>(self, t, x, phi, pairs),
            16 => run_fast::<16>(self, t, x, phi, pairs),
            32 => run_fast::<32>(self, t, x, phi, pairs),
            _ => run_fast::<64>(self, t, x, phi, pairs),
        }
    }
}

impl Engine for Quadrature {
    fn name(&self) -> &'static str {
        "quadrature"
    }

    fn model(&self) -> &Model {
        &self.prepared.model
    }

    fn shap(&self, block: &FeatureBlock) -> Result<Attributions> {
        shap_by_tree(&self.prepared, block, || (), |t, x, phi, _| self.walk(t, x, phi, None))
    }

    /// Interactions from the same walk: SHAP values and all pair terms in one pass per tree.
    fn interactions(&self, block: &FeatureBlock) -> Result<Interactions> {
        let p = &*self.prepared;
        let (f, g) = (p.model.num_features(), p.model.num_groups());
        let w = f + 1;
        let width = g * w * w;
        // Tree-major within a task, as for SHAP values: the tree's tables stay in cache while
        // it meets every row of the task (row by row, the whole model streams from memory).
        interactions_by_task(&p.model, block, rows_per_task(block.rows()), FirstTouch::Adds, Vec::new, |shap: &mut Vec<f64>, first, chunk| {
            let rows = chunk.len() / width;
            shap.clear();
            shap.resize(rows * g * w, 0.0);
            for (t, tree) in p.model.trees().iter().enumerate() {
                let k = tree.group;
                for (r, out) in chunk.chunks_mut(width).enumerate() {
                    let phi = &mut shap[(r * g + k) * w..(r * g + k + 1) * w];
                    self.walk(t, block.row(first + r), phi, Some(&mut out[k * w * w..(k + 1) * w * w]));
                }
            }
            for (out, shap) in chunk.chunks_mut(width).zip(shap.chunks_mut(g * w)) {
                for (k, b) in p.bias.iter().enumerate() {
                    shap[k * w + f] = *b;
                }
                finish_interaction_row(out, shap, f, g);
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gauss_legendre_integrates_polynomials_exactly() {
        for n in [1usize, 2, 3, 4, 8, 16, 32, 64] {
            let (t, w) = gauss_legendre(n);
            for degree in 0..(2 * n) {
                let got: f64 = t.iter().zip(&w).map(|(t, w)| w * t.powi(degree as i32)).sum();
                let want = 1.0 / (degree as f64 + 1.0);
                assert!((got - want).abs() < 1e-13, "n={n} degree={degree}: {got} vs {want}");
            }
        }
    }
}
