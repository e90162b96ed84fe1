//! Random trees for the property tests: shapes, covers (children need not add up), repeated
//! features on a path, thresholds, default directions and missing inputs, from a seeded
//! generator so failures reproduce.

use shapfusion::engine::FeatureBlock;
use shapfusion::model::{FeatureKind, Model, ModelFormat, ModelParts, Node, Precision, SplitRule, Tree};

/// A small deterministic generator (xorshift64*), so failures reproduce from the seed.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// A random tree where, at rate `empty_rate`, a split sends no training cover (0, or a
/// vanishing 1e-200) one way: that child is a leaf rows can still reach.
pub fn random_tree_with_empty_branches(rng: &mut Rng, features: usize, max_depth: usize, group: usize, empty_rate: f64) -> Tree {
    let mut nodes = vec![Node::leaf(0.0, 100.0)];
    let mut stack = vec![(0usize, 0usize)];
    while let Some((i, depth)) = stack.pop() {
        let split = depth < max_depth && (depth < 2 || rng.unit() < 0.8);
        if !split {
            nodes[i].value = rng.unit() * 4.0 - 2.0;
            continue;
        }
        let cover = nodes[i].cover;
        let frac = 0.05 + 0.9 * rng.unit();
        // Covers roughly split, with some noise so children need not add up exactly (as
        // XGBoost's float32 hessian sums do not), but no child holds more than its parent (a
        // model that does is refused as corrupt).
        let (mut cl, mut cr) = ((cover * frac * (0.9 + 0.2 * rng.unit())).max(1e-3).min(cover), (cover * (1.0 - frac)).max(1e-3).min(cover));
        let (mut depth_l, mut depth_r) = (depth + 1, depth + 1);
        if rng.unit() < empty_rate {
            let empty = if rng.unit() < 0.5 { 0.0 } else { 1e-200 };
            if rng.unit() < 0.5 {
                (cl, depth_l) = (empty, max_depth);
            } else {
                (cr, depth_r) = (empty, max_depth);
            }
        }
        let (l, r) = split_randomly(rng, &mut nodes, i, features, (cl, cr));
        stack.push((l as usize, depth_l));
        stack.push((r as usize, depth_r));
    }
    Tree { nodes, category_words: vec![], group, weight: 1.0, linear_leaves: vec![] }
}

/// Turns leaf `i` into a split on a random feature, threshold and default direction, with two
/// new leaves of the given covers; returns their indices.
fn split_randomly(rng: &mut Rng, nodes: &mut Vec<Node>, i: usize, features: usize, (cover_left, cover_right): (f64, f64)) -> (u32, u32) {
    let (l, r) = (nodes.len() as u32, nodes.len() as u32 + 1);
    nodes.push(Node::leaf(0.0, cover_left));
    nodes.push(Node::leaf(0.0, cover_right));
    let n = &mut nodes[i];
    n.left = l;
    n.right = r;
    n.feature = rng.below(features) as u32;
    n.rule = SplitRule::XgbLess { threshold: rng.unit() };
    n.default_left = rng.unit() < 0.5;
    (l, r)
}

/// A random regression model of `trees` trees up to `max_depth` deep.
pub fn random_model(rng: &mut Rng, features: usize, trees: usize, max_depth: usize) -> Model {
    random_model_with_empty_branches(rng, features, trees, max_depth, 0.0)
}

/// As [`random_model`], with empty branches at `empty_rate`.
pub fn random_model_with_empty_branches(rng: &mut Rng, features: usize, trees: usize, max_depth: usize, empty_rate: f64) -> Model {
    let parts = ModelParts {
        format: ModelFormat::XgboostJson,
        library_version: None,
        objective: "reg:squarederror".into(),
        feature_names: (0..features).map(|i| format!("f{i}")).collect(),
        feature_kinds: vec![FeatureKind::Numeric; features],
        num_groups: 1,
        base_margin: vec![0.25],
        trees: (0..trees).map(|_| random_tree_with_empty_branches(rng, features, max_depth, 0, empty_rate)).collect(),
        precision: Precision::F64,
        categories: Vec::new(),
        combinations: None,
    };
    Model::new(parts, "a random model").expect("valid")
}

/// `rows` random rows in [0, 1), a tenth of the values missing.
pub fn random_rows(rng: &mut Rng, model: &Model, rows: usize) -> FeatureBlock {
    let values = (0..rows * model.num_features()).map(|_| if rng.unit() < 0.1 { f64::NAN } else { rng.unit() }).collect();
    model.feature_block_from_values(rows, values).unwrap()
}

/// A tree exactly `depth` levels deep along a random spine, with side branches at most three
/// levels deep, so its size grows linearly with its depth (a random tree that deep would not
/// fit in memory). Features are drawn from `features`, so long paths repeat some (merged).
pub fn spine_tree(rng: &mut Rng, features: usize, depth: usize, group: usize) -> Tree {
    let mut nodes = vec![Node::leaf(0.0, 1000.0)];
    // (node, its depth, the depth its branch may reach)
    let mut stack = vec![(0usize, 0usize, depth)];
    while let Some((i, d, reach)) = stack.pop() {
        if d >= reach || (reach < depth && rng.unit() < 0.35) {
            nodes[i].value = rng.unit() * 4.0 - 2.0;
            continue;
        }
        let cover = nodes[i].cover;
        let frac = 0.05 + 0.9 * rng.unit();
        let (l, r) = split_randomly(rng, &mut nodes, i, features, ((cover * frac).max(1e-3), (cover * (1.0 - frac)).max(1e-3)));
        // On the spine, one child goes on to the full depth, the other gets a short branch.
        let side_reach = (d + 1 + rng.below(3)).min(depth);
        let (reach_l, reach_r) = if reach < depth {
            (reach, reach)
        } else if rng.unit() < 0.5 {
            (depth, side_reach)
        } else {
            (side_reach, depth)
        };
        stack.push((l as usize, d + 1, reach_l));
        stack.push((r as usize, d + 1, reach_r));
    }
    Tree { nodes, category_words: vec![], group, weight: 1.0, linear_leaves: vec![] }
}

/// A model of `trees` [`spine_tree`]s per group over `features` features.
pub fn spine_model(rng: &mut Rng, features: usize, trees: usize, depth: usize, groups: usize) -> Model {
    let mut parts = random_model(rng, features, 0, 0).into_parts();
    parts.num_groups = groups;
    parts.base_margin = vec![0.25; groups];
    if groups > 1 {
        parts.objective = "multi:softprob".into();
    }
    parts.trees = (0..trees * groups).map(|t| spine_tree(rng, features, depth, t % groups)).collect();
    Model::new(parts, "a spine model").expect("valid")
}
