//! A row alone through eight trees at once: the trees of a chunk (compiled parts with the same
//! point count and nearly the same shape) in the lanes, where a lane group holds rows.
//!
//! Why: a row alone pays for a split's control flow, direction and coefficients on its own (the
//! flat walk of [`row`](super::row) costs about 100 instructions a split, about six times a
//! row's share of a lane group of sixteen). Boosted trees of one depth mostly share a shape
//! (XGBoost's `max_depth` 8 on 10,000 rows: 255 splits a tree, every tree full), so eight of
//! them laid over one shape walk as one: the shape's control flow once, each split's arithmetic
//! in eight lanes, one per tree.
//!
//! The shape is the union of the trees': a node of it is a split of some of the trees; in the
//! others it lies below one of their leaves (a *stand-in*: its B is the leaf's value, its terms
//! are dropped) or the lane holds no tree. A tree joins a group when the shape grows by less than
//! the flat walks it saves, and a group is kept when it saves more than it costs ([`NODE_COST`]);
//! the other trees walk flat (the deep ensembles' parts mostly do).
//!
//! Bits: every value of a lane takes the operations, in the order, that [`row`](super::row)'s
//! walk (and so the lane walk) gives it for its tree; where the walk takes one of three forms of
//! a split's B and terms, the lanes compute each form some lane takes and keep their own by
//! bits. A split's
//! terms are kept, and added to the row's sums after the group's walk, tree by tree in the
//! chunk's order and each tree's splits in post-order: the order the flat walk adds them. So a
//! row has the same bits here as in any lane group (tested in `linear`'s tests).

use super::row::{post_order, NONE};
use super::{Child, Lanes, LinearTree};
use crate::engine::decision::Decision;
use crate::model::Tree;

/// Trees walked together: one AVX-512 vector of values, two AVX2 vectors.
pub(super) const TREE_LANES: usize = 8;
const L: usize = TREE_LANES;

/// What a node of a group costs, in splits of the flat walk: a group pays for its shape's
/// nodes in all eight lanes whether its trees have a split there or not. Measured on
/// `benchmarks/serving.py`'s model (100 trees of depth 8, one thread, AVX-512): 55 ns a node
/// (the directions 10, the passes 45) against 18 ns a split of the flat walk. A group of trees
/// that share too little of their shape (the deep ensembles' parts) walks flat instead.
const NODE_COST: f64 = 3.0;

/// Most nodes of a group's shape: its values (about 2 KiB a node with every lane's split data)
/// then stay in a core's own caches between the passes. The deep ensembles' trees (300 of
/// depth 12, some 1,800 splits each) laid eight over one shape (2,200 to 3,500 nodes) walked
/// 1.17x slower than flat, though their lanes held 42 to 82 % of the nodes' splits.
const MAX_NODES: usize = 1024;

/// Fewest trees a group takes.
const MIN_TREES: usize = 2;

type V = [f64; L];

/// Slots of a node's values, `K` vectors each: A and B.
const SLOTS: usize = 2;
const A: usize = 0;
const B: usize = 1;

/// A node's coefficients: `a_L, a_R, c_L, c_R`, the lanes' hot flags h and β (see [`factor`]).
const COEFFICIENTS: usize = 6;

/// One node of a group's shape, in post-order, with each lane's split there.
#[derive(Debug)]
struct GroupNode {
    /// Each child's node, [`NONE`] where every lane has a leaf there (its value in `leaf`).
    children: [u32; 2],
    /// The lanes whose test is no threshold (categorical splits, other missing rules).
    generic: Option<Box<[Option<Decision>; L]>>,
    /// Per lane: cover fractions of the left and right edge, the feature's merged fraction above.
    z: [V; 2],
    z_prev: V,
    /// Per lane: the leaf values of the children that are leaves in the shape.
    leaf: [V; 2],
    /// Per lane: a stand-in (and its leaf's value), a first split, a first split over two leaves.
    stand_in: [bool; L],
    stand_in_value: V,
    first: [bool; L],
    two_leaves: [bool; L],
    /// The forms of B and terms some lane's split takes here ([`FIRST_FORM`] and the others):
    /// a form no lane takes is not computed.
    forms: u8,
}

/// A split's forms of B and terms: a first split's from its slopes, a repeated split's from its
/// factors, a first split over two leaves.
const FIRST_FORM: u8 = 1;
const REPEATED_FORM: u8 = 2;
const TWO_LEAVES_FORM: u8 = 4;

/// What the row's directions at a node need, lane by lane: each split's feature and test, `x
/// < threshold` (the lane's bit of `strict`) or `x <= threshold`, missing values going left
/// where `default_left` (a lane of `generic` tests the node's [`GroupNode::generic`] instead);
/// the nearest split above on the same feature (a node index; the node count, whose direction
/// is left and hot, for a first split or a stand-in) and whether this node lies left of it
/// (`prev_left`). Masks hold one bit per lane.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
struct NodeTests {
    threshold: V,
    feature: [u32; L],
    prev: [u32; L],
    strict: u8,
    default_left: u8,
    prev_left: u8,
    generic: u8,
}

/// A node's directions, a byte per lane (see [`GroupScratch`]), for the stand-ins' `prev`.
const LEFT_AND_HOT: u64 = u64::from_le_bytes([0b11; L]);

/// Byte j of `SPREAD[m]` is bit j of m: a lane mask as a byte per lane.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const SPREAD: [u64; 256] = {
    let mut table = [0u64; 256];
    let mut m = 0;
    while m < 256 {
        let mut j = 0;
        while j < L {
            table[m] |= (((m >> j) & 1) as u64) << (8 * j);
            j += 1;
        }
        m += 1;
    }
    table
};

/// Compiled trees of one chunk walked together for a row alone; see the module docs.
#[derive(Debug)]
pub(super) struct TreeGroup {
    /// Each member's tree in the model (its generic splits' tests read it), lane by lane (fewer
    /// than [`TREE_LANES`] leave the last lanes empty: stand-ins throughout).
    sources: Vec<usize>,
    points: usize,
    nodes: Vec<GroupNode>,
    /// Per node (as `nodes`), what its directions need.
    tests: Vec<NodeTests>,
    /// The largest feature of any lane's split.
    max_feature: u32,
    /// Per node, point and lane: `1/f'(t_k)` of the lane's split (1 for a first split).
    inv_prev: Vec<V>,
    /// Quadrature nodes and weights (the members').
    t: Vec<f64>,
    w: Vec<f64>,
    /// Per member: its splits' terms (index `node · L + lane`) with the feature each adds to,
    /// in the member's post-order.
    adds: Vec<Vec<(u32, u32)>>,
}

/// How a row alone walks one chunk of trees: groups, and the trees left to walk flat.
#[derive(Debug, Default)]
pub(super) struct ChunkPlan {
    pub(super) groups: Vec<TreeGroup>,
    /// Per tree of the chunk: `(group, member)` where a group holds it.
    pub(super) place: Vec<Option<(u32, u32)>>,
}

/// What a lane holds at a node of the shape while the shape is built.
#[derive(Debug, Clone, Copy)]
enum Occupant {
    /// The member's split (an index into its splits).
    Split(u32),
    /// A stand-in below the member's leaf of this value (or a lane with no member).
    StandIn(f64),
}

/// A node of the shape being built, in preorder: each lane's occupant and the children.
struct Draft {
    lanes: [Occupant; L],
    children: [u32; 2],
    leaf: [V; 2],
}

/// Lays `members` (their compiled trees in `trees`) over one shape, in preorder; `None` when the
/// shape would pass `limit` nodes.
fn union(trees: &[LinearTree], members: &[u32], limit: usize) -> Option<Vec<Draft>> {
    let mut lanes = [Occupant::StandIn(0.0); L];
    for lane in lanes.iter_mut().take(members.len()) {
        *lane = Occupant::Split(0);
    }
    let mut drafts = vec![Draft { lanes, children: [NONE; 2], leaf: [[0.0; L]; 2] }];
    // Preorder without recursion (a tree's depth comes from its file): left child first.
    let mut stack = vec![0u32];
    while let Some(at) = stack.pop() {
        let mut kids = [None, None];
        for (side, kid) in kids.iter_mut().enumerate() {
            let mut next = [Occupant::StandIn(0.0); L];
            let mut any = false;
            for lane in 0..L {
                next[lane] = match drafts[at as usize].lanes[lane] {
                    Occupant::Split(i) => match trees[members[lane] as usize].splits[i as usize].children[side] {
                        Child::Split(c) => {
                            any = true;
                            Occupant::Split(c)
                        }
                        Child::Leaf(v) => {
                            drafts[at as usize].leaf[side][lane] = v;
                            Occupant::StandIn(v)
                        }
                    },
                    stand_in => stand_in,
                };
            }
            if any {
                *kid = Some(next);
            }
        }
        for side in [1, 0] {
            if let Some(next) = kids[side] {
                if drafts.len() >= limit {
                    return None;
                }
                let child = drafts.len() as u32;
                drafts[at as usize].children[side] = child;
                drafts.push(Draft { lanes: next, children: [NONE; 2], leaf: [[0.0; L]; 2] });
                stack.push(child);
            }
        }
    }
    Some(drafts)
}

impl ChunkPlan {
    /// Groups a chunk's compiled trees (see the module docs): trees of one point count (1 to 8,
    /// the flat walk's copies) in chunk order, each joining the open group of its count when
    /// the shape grows by less than its splits' worth of flat walks, and a group kept when its
    /// splits are worth more than its shape (both at [`NODE_COST`]).
    pub(super) fn new(trees: &[LinearTree]) -> ChunkPlan {
        let mut plan = ChunkPlan { groups: Vec::new(), place: vec![None; trees.len()] };
        // Per point count: the open group's members, its shape and its splits.
        let mut open: Vec<(Vec<u32>, Vec<Draft>, usize)> = (0..=8).map(|_| (Vec::new(), Vec::new(), 0)).collect();
        let close = |plan: &mut ChunkPlan, (members, drafts, splits): (Vec<u32>, Vec<Draft>, usize)| {
            if members.len() >= MIN_TREES && splits as f64 > NODE_COST * drafts.len() as f64 {
                let g = plan.groups.len() as u32;
                for (lane, &m) in members.iter().enumerate() {
                    plan.place[m as usize] = Some((g, lane as u32));
                }
                plan.groups.push(TreeGroup::new(trees, members, drafts));
            }
        };
        for (i, lt) in trees.iter().enumerate() {
            let (k, size) = (lt.points(), lt.splits.len());
            if size == 0 || size > MAX_NODES || !(1..=8).contains(&k) {
                continue;
            }
            let (members, drafts, splits) = &mut open[k];
            let mut with = members.clone();
            with.push(i as u32);
            // The shape may grow by less than the tree's splits' worth of group nodes (a tree
            // alone is its own shape).
            let limit = if members.is_empty() { usize::MAX } else { (drafts.len() + (size as f64 / NODE_COST).ceil() as usize).min(MAX_NODES + 1) };
            match union(trees, &with, limit).filter(|grown| grown.len() < limit) {
                Some(grown) => (*members, *drafts, *splits) = (with, grown, *splits + size),
                None => {
                    let alone = union(trees, &[i as u32], usize::MAX).expect("no limit");
                    let full = std::mem::replace(&mut open[k], (vec![i as u32], alone, size));
                    close(&mut plan, full);
                }
            }
            if open[k].0.len() == L {
                let full = std::mem::take(&mut open[k]);
                close(&mut plan, full);
            }
        }
        for group in open {
            close(&mut plan, group);
        }
        plan
    }
}

impl TreeGroup {
    /// The group of `members` over the shape `drafts` (their union, in preorder).
    fn new(trees: &[LinearTree], members: Vec<u32>, drafts: Vec<Draft>) -> TreeGroup {
        let n = drafts.len();
        // Post-order, as the flat walk lays a tree out.
        let (order, position) = post_order(n, |at, side| Some(drafts[at as usize].children[side]).filter(|&c| c != NONE));
        // Per member: its splits' nodes in the shape.
        let mut node_of: Vec<Vec<u32>> = members.iter().map(|&m| vec![NONE; trees[m as usize].splits.len()]).collect();
        for (pre, draft) in drafts.iter().enumerate() {
            for (lane, occupant) in draft.lanes.iter().enumerate() {
                if let Occupant::Split(i) = *occupant {
                    node_of[lane][i as usize] = position[pre];
                }
            }
        }
        let first = &trees[members[0] as usize];
        let points = first.points();
        let mut inv_prev = vec![[1.0; L]; n * points];
        // A stand-in's test: any, on feature 0, with a `prev` that makes it hot.
        let stand_ins =
            NodeTests { threshold: [0.0; L], feature: [0; L], prev: [n as u32; L], strict: !0, default_left: !0, prev_left: !0, generic: 0 };
        let mut tests = vec![stand_ins; n];
        let nodes: Vec<GroupNode> = order
            .iter()
            .enumerate()
            .map(|(post, &pre)| {
                let draft = &drafts[pre as usize];
                let mut node = GroupNode {
                    children: draft.children.map(|c| if c == NONE { NONE } else { position[c as usize] }),
                    generic: None,
                    z: [[1.0; L], [0.0; L]],
                    z_prev: [1.0; L],
                    leaf: draft.leaf,
                    stand_in: [true; L],
                    stand_in_value: [0.0; L],
                    first: [true; L],
                    two_leaves: [false; L],
                    forms: 0,
                };
                for lane in 0..L {
                    match draft.lanes[lane] {
                        Occupant::StandIn(v) => node.stand_in_value[lane] = v,
                        Occupant::Split(i) => {
                            let lt = &trees[members[lane] as usize];
                            let split = &lt.splits[i as usize];
                            node.stand_in[lane] = false;
                            let (test, bit) = (&mut tests[post], 1u8 << lane);
                            test.feature[lane] = split.feature;
                            match split.decision {
                                Decision::Numeric { threshold, strict, default_left } => {
                                    test.threshold[lane] = threshold;
                                    test.strict = if strict { test.strict | bit } else { test.strict & !bit };
                                    test.default_left = if default_left { test.default_left | bit } else { test.default_left & !bit };
                                }
                                generic => {
                                    test.generic |= bit;
                                    node.generic.get_or_insert_with(|| Box::new([None; L]))[lane] = Some(generic);
                                }
                            }
                            match split.prev {
                                Some((p, side)) => {
                                    test.prev[lane] = node_of[lane][p as usize];
                                    test.prev_left = if side == 0 { test.prev_left | bit } else { test.prev_left & !bit };
                                }
                                None => test.prev_left |= bit,
                            }
                            node.first[lane] = split.prev.is_none();
                            node.two_leaves[lane] = split.prev.is_none() && split.children.iter().all(|c| matches!(c, Child::Leaf(_)));
                            for side in 0..2 {
                                node.z[side][lane] = split.z[side];
                            }
                            node.z_prev[lane] = split.z_prev;
                            for k in 0..points {
                                inv_prev[post * points + k][lane] = lt.inv_prev[i as usize * points + k];
                            }
                        }
                    }
                }
                for lane in (0..L).filter(|&lane| !node.stand_in[lane]) {
                    node.forms |= match (node.first[lane], node.two_leaves[lane]) {
                        (false, _) => REPEATED_FORM,
                        (true, false) => FIRST_FORM,
                        (true, true) => TWO_LEAVES_FORM,
                    };
                }
                node
            })
            .collect();
        // Every index the walk reads unchecked is below n (or n itself for `prev`, the extra
        // direction slot): the shape is built from the root down.
        assert!(
            nodes.iter().all(|g| g.children.iter().all(|&i| i == NONE || (i as usize) < n))
                && tests.iter().all(|t| t.prev.iter().all(|&i| (i as usize) <= n))
        );
        let adds = (0..members.len())
            .map(|lane| {
                let lt = &trees[members[lane] as usize];
                let mut adds: Vec<(u32, u32)> =
                    (0..lt.splits.len()).map(|i| (node_of[lane][i] * L as u32 + lane as u32, lt.splits[i].feature)).collect();
                // The member's post-order is the shape's, restricted to its splits.
                adds.sort_unstable_by_key(|&(term, _)| term);
                adds
            })
            .collect();
        let sources = members.iter().map(|&m| trees[m as usize].source).collect();
        let max_feature = tests.iter().flat_map(|t| t.feature).max().unwrap_or(0);
        TreeGroup { sources, points, nodes, tests, max_feature, inv_prev, t: first.t.clone(), w: first.w.clone(), adds }
    }

    /// The row `xs` (lane 0)'s directions at every node into `directions` (see
    /// [`GroupScratch`]; n + 1 values, the last the stand-ins' `prev`): by the AVX2 copy where
    /// the CPU has it, unless `portable`.
    fn directions<const N: usize>(&self, model: &[Tree], xs: &[Lanes<N>], directions: &mut [u64], portable: bool) {
        let n = self.nodes.len();
        assert_eq!(directions.len(), n + 1, "TreeGroup: a direction per node and one more");
        // Every feature is a feature of the row: the copies read them unchecked.
        assert!((self.max_feature as usize) < xs.len(), "TreeGroup: a row of every feature");
        directions[n] = LEFT_AND_HOT;
        let (x, stride) = (xs.as_ptr().cast::<f64>(), size_of::<Lanes<N>>() / size_of::<f64>());
        let generic = |p: usize, lane: usize, x: f64| match (&self.nodes[p].generic, self.sources.get(lane)) {
            (Some(generic), Some(&tree)) => generic[lane].map(|decision| decision.goes_left(&model[tree], x)),
            _ => None,
        };
        // SAFETY (both copies): every feature is below `xs.len()` (asserted above) and a
        // `Lanes<N>` holds its N values from its start, so feature × stride indexes the row's
        // value from `x`; every `prev` is at most n (`TreeGroup::new`) and `directions` holds
        // n + 1 (asserted).
        #[cfg(target_arch = "x86_64")]
        if !portable && crate::engine::simd::simd_level() != crate::engine::simd::SimdLevel::Portable {
            // (and the CPU has AVX2: every level but the portable one)
            return unsafe { directions_avx2(&self.tests, &generic, x, stride, directions) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = portable;
        unsafe { directions_portable(&self.tests, &generic, x, stride, directions) }
    }

    /// Adds member `member`'s terms from the last [`walk`](Self::walk) to `phi` (one sum per
    /// feature of the member's output group), in the member's post-order.
    pub(super) fn add_terms<const N: usize>(&self, member: usize, terms: &[f64], phi: &mut [Lanes<N>]) {
        for &(term, feature) in &self.adds[member] {
            phi[feature as usize][0] += terms[term as usize];
        }
    }
}

/// Per-node values of [`TreeGroup::walk`], reused across groups.
#[derive(Default)]
pub(super) struct GroupScratch {
    /// Per node: [`SLOTS`] slots of K vectors.
    values: Vec<V>,
    /// Per node: its [`COEFFICIENTS`].
    coefficients: Vec<[V; COEFFICIENTS]>,
    /// Per node and one more (see [`NodeTests`]' `prev`), a byte per lane (lane j in byte j):
    /// bit 0 set where the row goes left, bit 1 where every split above on its feature was
    /// followed (it is hot).
    directions: Vec<u64>,
}

/// Each lane's `x` where `take`, else `y`, by their bits.
#[inline(always)]
fn pick(take: [bool; L], x: V, y: V) -> V {
    std::array::from_fn(|j| {
        let m = (take[j] as u64).wrapping_neg();
        f64::from_bits((x[j].to_bits() & m) | (y[j].to_bits() & !m))
    })
}

impl TreeGroup {
    /// One row (`xs`, lane 0) through the group: each member's split terms into `terms` (index
    /// `node · L + lane`, resized), for [`add_terms`](Self::add_terms).
    #[inline(always)]
    pub(super) fn walk<const N: usize>(&self, model: &[Tree], xs: &[Lanes<N>], terms: &mut Vec<f64>, s: &mut GroupScratch) {
        match self.points {
            1 => self.walk_points::<1, N>(model, xs, terms, s),
            2 => self.walk_points::<2, N>(model, xs, terms, s),
            3 => self.walk_points::<3, N>(model, xs, terms, s),
            4 => self.walk_points::<4, N>(model, xs, terms, s),
            5 => self.walk_points::<5, N>(model, xs, terms, s),
            6 => self.walk_points::<6, N>(model, xs, terms, s),
            7 => self.walk_points::<7, N>(model, xs, terms, s),
            8 => self.walk_points::<8, N>(model, xs, terms, s),
            _ => unreachable!("TreeGroup: 1 to 8 points"),
        }
    }

    /// [`walk`](Self::walk) with K points: the directions, the pass down (root first), then
    /// the pass up.
    #[inline(always)]
    fn walk_points<const K: usize, const N: usize>(&self, model: &[Tree], xs: &[Lanes<N>], terms: &mut Vec<f64>, s: &mut GroupScratch) {
        debug_assert_eq!(K, self.points);
        let n = self.nodes.len();
        let (t, w): ([f64; K], [f64; K]) = (std::array::from_fn(|k| self.t[k]), std::array::from_fn(|k| self.w[k]));
        // Grown, never shrunk: every value a walk reads it has written first (a node's A before
        // its pass down, its B before its parent's pass up).
        if s.values.len() < n * SLOTS * K {
            s.values.resize(n * SLOTS * K, [0.0; L]);
        }
        if s.coefficients.len() < n {
            s.coefficients.resize(n, [[0.0; L]; COEFFICIENTS]);
        }
        if s.directions.len() < n + 1 {
            s.directions.resize(n + 1, 0);
        }
        if terms.len() < n * L {
            terms.resize(n * L, 0.0);
        }
        let (values, coefficients, directions) = (&mut s.values[..n * SLOTS * K], &mut s.coefficients[..n], &mut s.directions[..n + 1]);
        let at = |node: usize, slot: usize, k: usize| (node * SLOTS + slot) * K + k;
        // The row's directions at every node, before the pass down reads them as vectors.
        self.directions(model, xs, directions, false);

        // The root's A is the quadrature weights, so the terms come out integrated.
        for k in 0..K {
            values[at(n - 1, A, k)] = [w[k]; L];
        }
        // Down: each node's coefficients, and its children's A (its own is set).
        for p in (0..n).rev() {
            let node = &self.nodes[p];
            // 1.0 or +0.0, as the flat walk's `as f64` of its bits.
            let d = directions[p].to_le_bytes();
            let l: V = std::array::from_fn(|j| (d[j] & 1) as f64);
            let h: V = std::array::from_fn(|j| (d[j] >> 1) as f64);
            let ([zl, zr], zp) = (node.z, node.z_prev);
            // As the flat walk's, lane by lane.
            let merge: V = std::array::from_fn(|j| 1.0 + h[j] * (zp[j] - 1.0));
            let al: V = std::array::from_fn(|j| zl[j] * merge[j]);
            let ar: V = std::array::from_fn(|j| zr[j] * merge[j]);
            let cl: V = std::array::from_fn(|j| h[j] * (l[j] - al[j]));
            let cr: V = std::array::from_fn(|j| h[j] * ((1.0 - l[j]) - ar[j]));
            let beta: V = std::array::from_fn(|j| h[j] * (1.0 - zp[j]));
            coefficients[p] = [al, ar, cl, cr, h, beta];
            for side in 0..2 {
                let c = node.children[side];
                if c == NONE {
                    continue;
                }
                for k in 0..K {
                    let g = factor(&coefficients[p], side, self.inv_prev[p * K + k], t[k]).0;
                    let a = values[at(p, A, k)];
                    values[at(c as usize, A, k)] = std::array::from_fn(|j| a[j] * g[j]);
                }
            }
        }

        // Up: children first, each node's B and every lane's terms, in each lane's form.
        for (p, node) in self.nodes.iter().enumerate() {
            let co = &coefficients[p];
            let [al, ar, cl, cr, _, _] = *co;
            let a: [V; K] = std::array::from_fn(|k| values[at(p, A, k)]);
            let child = |side: usize| -> [V; K] {
                let c = node.children[side];
                std::array::from_fn(|k| if c == NONE { node.leaf[side] } else { values[at(c as usize, B, k)] })
            };
            let (bl, br) = (child(0), child(1));
            let (first, repeated) = (node.forms & FIRST_FORM != 0, node.forms & REPEATED_FORM != 0);
            let mut b = [[0.0; L]; K];
            let mut inner = [[0.0; L]; K];
            for k in 0..K {
                // A repeated split's B and terms from its factors; a first split's from its slopes.
                if repeated {
                    let inv = self.inv_prev[p * K + k];
                    let ((gl, el), (gr, er)) = (factor(co, 0, inv, t[k]), factor(co, 1, inv, t[k]));
                    b[k] = std::array::from_fn(|j| gl[j].mul_add(bl[k][j], gr[j] * br[k][j]));
                    inner[k] = std::array::from_fn(|j| el[j].mul_add(bl[k][j], er[j] * br[k][j]));
                }
                if first {
                    let inner_first: V = std::array::from_fn(|j| cl[j].mul_add(bl[k][j], cr[j] * br[k][j]));
                    let b_first: V = std::array::from_fn(|j| inner_first[j].mul_add(t[k], al[j].mul_add(bl[k][j], ar[j] * br[k][j])));
                    (b[k], inner[k]) =
                        if repeated { (pick(node.first, b_first, b[k]), pick(node.first, inner_first, inner[k])) } else { (b_first, inner_first) };
                }
            }
            let mut acc = [0.0; L];
            for k in 0..K {
                acc = std::array::from_fn(|j| a[k][j].mul_add(inner[k][j], acc[j]));
            }
            // Two leaves under a first split: B = Z + t·E, and the terms are the slope E times
            // the sum of A (the leaves' values are every point's B of the children).
            let mut term = acc;
            if node.forms & TWO_LEAVES_FORM != 0 {
                let (vl, vr) = (bl[0], br[0]);
                let e: V = std::array::from_fn(|j| cl[j].mul_add(vl[j], cr[j] * vr[j]));
                let z: V = std::array::from_fn(|j| al[j].mul_add(vl[j], ar[j] * vr[j]));
                let mut a_sum = [0.0; L];
                for a in &a {
                    a_sum = std::array::from_fn(|j| a_sum[j] + a[j]);
                }
                for (b, &t) in b.iter_mut().zip(&t) {
                    *b = pick(node.two_leaves, std::array::from_fn(|j| e[j].mul_add(t, z[j])), *b);
                }
                term = pick(node.two_leaves, std::array::from_fn(|j| a_sum[j] * e[j]), acc);
            }
            for (k, b) in b.iter().enumerate() {
                values[at(p, B, k)] = pick(node.stand_in, node.stand_in_value, *b);
            }
            terms[p * L..(p + 1) * L].copy_from_slice(&term);
        }
    }
}

/// A child's factor g and term e at one point, from its node's coefficients (`a_L, a_R, c_L,
/// c_R, h, β`) and `1/f'` there: `g = s·(a + c·t)`, `e = s·(c − β·g)` with `s = 1 + h·(1/f' − 1)`,
/// as the flat walk computes them. The pass down takes g for the children's A, the pass up both
/// again (recomputed rather than kept: a group's nodes then hold a third of the values).
#[inline(always)]
fn factor(co: &[V; COEFFICIENTS], side: usize, inv: V, t: f64) -> (V, V) {
    let (a, c, h, beta) = (co[side], co[2 + side], co[4], co[5]);
    let sc: V = std::array::from_fn(|j| 1.0 + h[j] * (inv[j] - 1.0));
    let g: V = std::array::from_fn(|j| sc[j] * c[j].mul_add(t, a[j]));
    let e: V = std::array::from_fn(|j| sc[j] * (-beta[j]).mul_add(g[j], c[j]));
    (g, e)
}

/// The row's directions at each node of `tests` (see [`GroupScratch`]'s `directions`), from the
/// root (the last) down, lane by lane; `generic(node, lane, x)` tests a lane of `generic`.
///
/// # Safety
/// Every feature of `tests` times `x_stride` is the index of the row's value of that feature
/// from `x`; every `prev` is below `directions.len()`, which is `tests.len() + 1`.
unsafe fn directions_portable(
    tests: &[NodeTests],
    generic: &dyn Fn(usize, usize, f64) -> Option<bool>,
    x: *const f64,
    x_stride: usize,
    directions: &mut [u64],
) {
    for p in (0..tests.len()).rev() {
        let t = &tests[p];
        let mut bytes = [0u8; L];
        for (lane, byte) in bytes.iter_mut().enumerate() {
            let bit = |mask: u8| mask >> lane & 1 != 0;
            // SAFETY: the caller's promise.
            let x = unsafe { *x.add(t.feature[lane] as usize * x_stride) };
            let below = if bit(t.strict) { x < t.threshold[lane] } else { x <= t.threshold[lane] };
            let mut left = below | (x.is_nan() & bit(t.default_left));
            if bit(t.generic) {
                left = generic(p, lane, x).unwrap_or(left);
            }
            let above = (unsafe { *directions.get_unchecked(t.prev[lane] as usize) } >> (8 * lane)) as u8;
            let hot = (above >> 1) & !(above ^ bit(t.prev_left) as u8) & 1;
            *byte = left as u8 | hot << 1;
        }
        directions[p] = u64::from_le_bytes(bytes);
    }
}

/// [`directions_portable`] with the lanes of a node in two AVX2 vectors: the row's values and
/// the directions above gathered, the tests as masks.
///
/// # Safety
/// As [`directions_portable`]'s, and the CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn directions_avx2(
    tests: &[NodeTests],
    generic: &dyn Fn(usize, usize, f64) -> Option<bool>,
    x: *const f64,
    x_stride: usize,
    directions: &mut [u64],
) {
    use std::arch::x86_64::*;
    let stride = _mm_set1_epi32(x_stride as i32);
    // Lane j's byte of a gathered node's directions to the bottom of its 64 bits.
    let (shift_low, shift_high) = (_mm256_set_epi64x(24, 16, 8, 0), _mm256_set_epi64x(56, 48, 40, 32));
    let (one, two) = (_mm256_set1_epi64x(1), _mm256_set1_epi64x(2));
    // The lanes of four 64-bit values where they equal `bit` under it, as a 4-bit mask.
    let has = |v: __m256i, bit: __m256i| _mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpeq_epi64(_mm256_and_si256(v, bit), bit))) as u8;
    // Read (gathered) and written through one pointer.
    let dirs = directions.as_mut_ptr();
    for p in (0..tests.len()).rev() {
        let t = &tests[p];
        // SAFETY (the gathers): the caller's promise.
        let (left, hot) = unsafe {
            let feature = t.feature.as_ptr().cast::<__m128i>();
            let (f_low, f_high) = (_mm_mullo_epi32(_mm_loadu_si128(feature), stride), _mm_mullo_epi32(_mm_loadu_si128(feature.add(1)), stride));
            let (x_low, x_high) = (_mm256_i32gather_pd::<8>(x, f_low), _mm256_i32gather_pd::<8>(x, f_high));
            let (t_low, t_high) = (_mm256_loadu_pd(t.threshold.as_ptr()), _mm256_loadu_pd(t.threshold.as_ptr().add(4)));
            let mask = |low: __m256d, high: __m256d| (_mm256_movemask_pd(low) | _mm256_movemask_pd(high) << 4) as u8;
            let lt = mask(_mm256_cmp_pd::<_CMP_LT_OQ>(x_low, t_low), _mm256_cmp_pd::<_CMP_LT_OQ>(x_high, t_high));
            let le = mask(_mm256_cmp_pd::<_CMP_LE_OQ>(x_low, t_low), _mm256_cmp_pd::<_CMP_LE_OQ>(x_high, t_high));
            let nan = mask(_mm256_cmp_pd::<_CMP_UNORD_Q>(x_low, x_low), _mm256_cmp_pd::<_CMP_UNORD_Q>(x_high, x_high));
            let mut left = (lt & t.strict) | (le & !t.strict) | (nan & t.default_left);
            if t.generic != 0 {
                for lane in (0..L).filter(|lane| t.generic >> lane & 1 != 0) {
                    let x = *x.add(t.feature[lane] as usize * x_stride);
                    if let Some(goes) = generic(p, lane, x) {
                        left = (left & !(1 << lane)) | (goes as u8) << lane;
                    }
                }
            }
            let prev = t.prev.as_ptr().cast::<__m128i>();
            let above_low = _mm256_srlv_epi64(_mm256_i32gather_epi64::<8>(dirs.cast::<i64>(), _mm_loadu_si128(prev)), shift_low);
            let above_high = _mm256_srlv_epi64(_mm256_i32gather_epi64::<8>(dirs.cast::<i64>(), _mm_loadu_si128(prev.add(1))), shift_high);
            let above_left = has(above_low, one) | has(above_high, one) << 4;
            let above_hot = has(above_low, two) | has(above_high, two) << 4;
            (left, above_hot & !(above_left ^ t.prev_left))
        };
        // SAFETY: p < tests.len() < directions.len().
        unsafe { *dirs.add(p) = SPREAD[left as usize] | SPREAD[hot as usize] << 1 };
    }
}

#[cfg(test)]
impl ChunkPlan {
    /// What the plan's groups hold: trees in groups, nodes where a member's lane is a stand-in
    /// below a leaf of its tree, lanes with a generic test.
    pub(super) fn census(&self) -> (usize, usize, usize) {
        let trees = self.groups.iter().map(|g| g.sources.len()).sum();
        let stand_ins = self.groups.iter().map(|g| g.nodes.iter().filter(|node| node.stand_in[..g.sources.len()].contains(&true)).count()).sum();
        let generic = self.groups.iter().flat_map(|g| &g.tests).map(|t| t.generic.count_ones() as usize).sum();
        (trees, stand_ins, generic)
    }

    /// Asserts that both copies of the directions pass agree on the row `xs` in every group
    /// (the AVX2 copy where the CPU has it).
    pub(super) fn assert_directions_agree<const N: usize>(&self, model: &[Tree], xs: &[Lanes<N>]) {
        for group in &self.groups {
            let n = group.nodes.len();
            let (mut portable, mut chosen) = (vec![0u64; n + 1], vec![0u64; n + 1]);
            group.directions(model, xs, &mut portable, true);
            group.directions(model, xs, &mut chosen, false);
            assert!(portable[..n].iter().any(|&d| d & SPREAD[0xff] != 0), "some lane goes left");
            assert_eq!(portable, chosen, "the AVX2 directions");
        }
    }
}
