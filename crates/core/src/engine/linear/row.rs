//! The one-row walk: a row alone (a request to explain one application) through a compiled
//! tree as two flat passes over its splits instead of the lane walk's depth-first descent.
//!
//! Why: a lane group of sixteen rows shares the descent's control flow (which child next, how
//! far back up) and each split's data among its rows; one row pays for them alone. Laid out in
//! post-order (a split's children before it), the same arithmetic needs no stack: one pass from the root down (splits in
//! decreasing post-order) finds each split's direction, coefficients and A from its parent's,
//! one pass up (increasing post-order) each split's B from its children's and its terms. A
//! split's work then depends only on its parent's (down) or children's (up), so the CPU
//! overlaps the work of many splits. The pass down takes no branch on a split's kind (a first
//! split runs the repeated split's arithmetic with values that leave its bits unchanged); the
//! pass up branches only between the walk's two forms of a split's B, and picks a leaf child's
//! value without one. (Picking between both forms computed, without that branch too, measured
//! 0.7x: the extra arithmetic cost more than the mispredicted branches.)
//!
//! Measured on `benchmarks/serving.py`'s model (100 trees of depth 8, 8 features; 25,507 splits
//! in 180 parts), one thread, `examples/bench` alternating builds, best of 400 calls: one row
//! 0.43 ms, against 0.80 ms in the lane walk with its points in the lanes that this replaces
//! (0.50 ms with 3 points not padded to 4, see [`padded`]; 0.45 ms with the branch below
//! taken on the way down too).
//!
//! Bits: every value takes the operations, in the order, that its lane does in the lane walk
//! ([`walk`](super::walk)), and a split's terms are added to the row's sums in the order the
//! walk finishes the splits, which is post-order: a row has the same bits alone as in any lane
//! group (tested in `linear`'s tests against lane groups of sixteen and four).

use super::{Child, Lanes, LinearTree};
use crate::engine::decision::Decision;
use crate::model::Tree;

/// No split (a leaf child, the root's parent, a feature's first split).
pub(super) const NONE: u32 = u32::MAX;

/// A compiled tree (or part) laid out for [`walk_alone`]: its splits in post-order, with their
/// parents, children and nearest split above on the same feature as post-order indices.
#[derive(Debug)]
pub(super) struct RowTree {
    splits: Vec<RowSplit>,
    /// Per split (post-order), `1/f'(t_k)` at each of the tree's points (`LinearTree::inv_prev`),
    /// then 1 up to [`padded`] values a split.
    inv_prev: Vec<f64>,
}

/// Values kept per quadrature point set: the tree's K points padded to a vector's width (3 to 4,
/// 5-7 to 8), so that a split's values are whole vectors and not a vector and a scalar with
/// shuffles between them. The padding computes finite values no sum reads (t = 0, w = 0).
const fn padded(points: usize) -> usize {
    match points {
        0..=2 => points,
        3 | 4 => 4,
        _ => 8,
    }
}

/// One split of a [`RowTree`].
#[derive(Debug, Clone, Copy)]
struct RowSplit {
    decision: Decision,
    feature: u32,
    /// The parent (the root: [`NONE`]) and the side of it (0 left, 1 right) this split is on.
    parent: u32,
    side: u8,
    /// The nearest split above on the same feature and the side of it this split lies on
    /// ([`NONE`] where the path meets the feature here first).
    prev: u32,
    prev_side: u8,
    /// Each child's split, or [`NONE`] for a leaf, whose value is in `leaf`.
    children: [u32; 2],
    leaf: [f64; 2],
    /// Cover fractions of the left and right edge, and the feature's merged fraction above.
    z: [f64; 2],
    z_prev: f64,
}

impl RowTree {
    /// Lays out `lt`'s splits (preorder, as the lane walk keeps them) in post-order.
    pub(super) fn new(lt: &LinearTree) -> RowTree {
        let n = lt.splits.len();
        let (order, position) = post_order(n, |at, side| match lt.splits[at as usize].children[side] {
            Child::Split(c) => Some(c),
            Child::Leaf(_) => None,
        });
        let mut splits: Vec<RowSplit> = order
            .iter()
            .map(|&pre| {
                let split = &lt.splits[pre as usize];
                let (prev, prev_side) = match split.prev {
                    Some((p, side)) => (position[p as usize], side),
                    None => (NONE, 0),
                };
                let (mut children, mut leaf) = ([NONE; 2], [0.0; 2]);
                for side in 0..2 {
                    match split.children[side] {
                        Child::Split(c) => children[side] = position[c as usize],
                        Child::Leaf(v) => leaf[side] = v,
                    }
                }
                RowSplit {
                    decision: split.decision,
                    feature: split.feature,
                    parent: NONE,
                    side: 0,
                    prev,
                    prev_side,
                    children,
                    leaf,
                    z: split.z,
                    z_prev: split.z_prev,
                }
            })
            .collect();
        for s in 0..n {
            for side in 0..2 {
                let c = splits[s].children[side];
                if c != NONE {
                    splits[c as usize].parent = s as u32;
                    splits[c as usize].side = side as u8;
                }
            }
        }
        // Every split is reached from the root (the walk's splits are compiled from it), so every
        // index above is below n or NONE: `walk_alone` indexes by them unchecked.
        assert!(
            order.len() == n
                && splits.iter().all(|s| [s.parent, s.prev, s.children[0], s.children[1]].iter().all(|&i| i == NONE || (i as usize) < n))
        );
        let (k, width) = (lt.points(), padded(lt.points()));
        // The pass down runs a first split's arithmetic as a repeated split's with z' = 1 and
        // 1/f' = 1, which must be exactly 1 for its bits.
        debug_assert!(order.iter().all(|&pre| {
            let split = &lt.splits[pre as usize];
            split.prev.is_some() || (split.z_prev == 1.0 && lt.inv_prev[pre as usize * k..(pre as usize + 1) * k].iter().all(|&v| v == 1.0))
        }));
        let inv_prev = order
            .iter()
            .flat_map(|&pre| lt.inv_prev[pre as usize * k..(pre as usize + 1) * k].iter().copied().chain(std::iter::repeat_n(1.0, width - k)))
            .collect();
        RowTree { splits, inv_prev }
    }
}

/// The post-order of a tree of `n` nodes numbered in preorder from its root 0 (left child
/// first, as the walk goes), without recursion (a tree's depth comes from its file): the nodes
/// in post-order, and each node's place in it. `child(node, side)` is the node's child there,
/// `None` for a leaf.
pub(super) fn post_order(n: usize, child: impl Fn(u32, usize) -> Option<u32>) -> (Vec<u32>, Vec<u32>) {
    let mut order = Vec::with_capacity(n);
    let mut stack: Vec<(u32, u8)> = if n > 0 { vec![(0, 0)] } else { Vec::new() };
    while let Some(&mut (at, ref mut stage)) = stack.last_mut() {
        if *stage < 2 {
            let side = *stage as usize;
            *stage += 1;
            if let Some(c) = child(at, side) {
                stack.push((c, 0));
            }
        } else {
            order.push(at);
            stack.pop();
        }
    }
    let mut position = vec![NONE; n];
    for (post, &pre) in order.iter().enumerate() {
        position[pre as usize] = post as u32;
    }
    (order, position)
}

/// Per-split values of [`walk_alone`], reused across trees: [`padded`]`(K)` values a slot, for
/// each split and one more (slot n, see the walk); a direction for each split and slot n.
#[derive(Default)]
pub(super) struct RowScratch {
    /// Per split: A, B, the children's factors G and (repeated splits) terms E.
    values: Vec<f64>,
    /// Per split: the coefficients `a_L, a_R, c_L, c_R` of its children's factors.
    coefficients: Vec<[f64; 4]>,
    /// Per split: bit 0 set when the row goes left, bit 1 when every split above on the same
    /// feature was followed (always for a first split).
    directions: Vec<u8>,
}

const SLOTS: usize = 6;
const A: usize = 0;
const B: usize = 1;
const G: [usize; 2] = [2, 3];
const E: [usize; 2] = [4, 5];
const LEFT: u8 = 1;
const HOT: u8 = 2;

/// `x` where `take`, else `y`, by their bits: no branch on whether a child is a leaf (which
/// follows the tree's shape, and the CPU would mispredict it), and no arithmetic on the value
/// not taken.
#[inline(always)]
fn pick<const W: usize>(take: bool, x: [f64; W], y: [f64; W]) -> [f64; W] {
    let m = (take as u64).wrapping_neg();
    std::array::from_fn(|k| f64::from_bits((x[k].to_bits() & m) | (y[k].to_bits() & !m)))
}

/// Where slot `slot` of split `split` starts in a [`RowScratch`]'s values (`K` a split's slot).
#[inline(always)]
const fn at<const K: usize>(split: usize, slot: usize) -> usize {
    (split * SLOTS + slot) * K
}

/// The K values at `at`.
///
/// # Safety
/// `at + K <= values.len()`.
#[inline(always)]
unsafe fn get<const K: usize>(values: &[f64], at: usize) -> [f64; K] {
    debug_assert!(at + K <= values.len());
    // SAFETY: the caller's promise; [f64; K] has f64's alignment.
    unsafe { values.as_ptr().add(at).cast::<[f64; K]>().read() }
}

/// Writes the K values at `at`.
///
/// # Safety
/// `at + K <= values.len()`.
#[inline(always)]
unsafe fn put<const K: usize>(values: &mut [f64], at: usize, v: [f64; K]) {
    debug_assert!(at + K <= values.len());
    // SAFETY: the caller's promise.
    unsafe { values.as_mut_ptr().add(at).cast::<[f64; K]>().write(v) }
}

/// What one row's walk through one compiled tree reads.
pub(super) struct RowWalk<'a, const N: usize> {
    /// The model's tree (its generic splits' tests read it).
    pub tree: &'a Tree,
    /// The tree (or part) compiled; [`walk_alone`] lays it out for a row at its first call.
    pub lt: &'a LinearTree,
    /// The row's features, in lane 0.
    pub xs: &'a [Lanes<N>],
}

/// One row through a compiled tree with `K` points, adding the splits' terms to lane 0 of `phi`
/// (one sum per feature) as the lane walk does (see the module docs).
#[inline(always)]
pub(super) fn walk_alone<const K: usize, const N: usize>(walk: &RowWalk<'_, N>, phi: &mut [Lanes<N>], s: &mut RowScratch) {
    let rt = walk.lt.row.get_or_init(|| RowTree::new(walk.lt));
    // K is a constant: one arm is compiled per copy.
    match K {
        1 => walk_padded::<1, 1, N>(walk, rt, phi, s),
        2 => walk_padded::<2, 2, N>(walk, rt, phi, s),
        3 => walk_padded::<3, 4, N>(walk, rt, phi, s),
        4 => walk_padded::<4, 4, N>(walk, rt, phi, s),
        5 => walk_padded::<5, 8, N>(walk, rt, phi, s),
        6 => walk_padded::<6, 8, N>(walk, rt, phi, s),
        7 => walk_padded::<7, 8, N>(walk, rt, phi, s),
        8 => walk_padded::<8, 8, N>(walk, rt, phi, s),
        _ => unreachable!("walk_alone: 1 to 8 points"),
    }
}

/// [`walk_alone`] with the K points' values kept in `W` = [`padded`]`(K)` lanes (the sums read
/// the first K only), through `rt`, the tree's layout.
#[inline(always)]
fn walk_padded<const K: usize, const W: usize, const N: usize>(walk: &RowWalk<'_, N>, rt: &RowTree, phi: &mut [Lanes<N>], s: &mut RowScratch) {
    let RowWalk { tree, lt, xs } = *walk;
    debug_assert!(K > 0 && K == lt.points() && W == padded(K), "walk_alone: a copy per point count");
    let n = rt.splits.len();
    if n == 0 {
        return;
    }
    // The padding's points: t = 0 and w = 0 (their values stay finite and no sum reads them).
    let points = |v: &[f64]| -> [f64; W] { std::array::from_fn(|k| if k < K { v[k] } else { 0.0 }) };
    let (t, w) = (points(&lt.t), points(&lt.w));
    // Grown, never shrunk: every value a walk takes it has written first (down before up). One
    // slot more than splits, slot n: where a leaf child's B and a first split's `prev` point, so
    // that they are read without a branch (a leaf's B is then picked from its value, and slot
    // n's direction, set below, makes a first split hot).
    if s.directions.len() < n + 1 {
        s.coefficients.resize(n, [0.0; 4]);
        s.directions.resize(n + 1, 0);
    }
    if s.values.len() < (n + 1) * SLOTS * W {
        s.values.resize((n + 1) * SLOTS * W, 0.0);
    }
    let (values, coefficients, directions) = (&mut s.values[..(n + 1) * SLOTS * W], &mut s.coefficients[..n], &mut s.directions[..n + 1]);
    directions[n] = LEFT | HOT;
    let inv_prev = &rt.inv_prev[..n * W];
    let slot = |i: u32| if i == NONE { n } else { i as usize };
    // SAFETY (every `get`, `put` and unchecked index below): a split's index, its parent's, its
    // children's and its `prev`'s are below n ([`RowTree::new`] checks it) or NONE, read as n,
    // and `values` holds SLOTS·W values for each of n + 1 splits.

    // Down: from the root (the last in post-order), each split's direction, its children's
    // factors and terms, and its A from its parent's. A first split takes the repeated split's
    // arithmetic with h = 1, z' = 1 and 1/f' = 1, which gives its factors' bits exactly (a
    // product by 1, a sum with 0 and a fused product by −0 change nothing).
    for p in (0..n).rev() {
        let split = &rt.splits[p];
        let left = split.decision.goes_left(tree, xs[split.feature as usize][0]);
        let above = unsafe { *directions.get_unchecked(slot(split.prev)) };
        let hot = (above & HOT != 0) & ((above & LEFT != 0) == (split.prev_side == 0));
        directions[p] = (left as u8 * LEFT) | (hot as u8 * HOT);
        let (l, h) = (left as u8 as f64, hot as u8 as f64);
        let [zl, zr] = split.z;
        // As `Coefficients::set` and its factors, in one lane.
        let zp = split.z_prev;
        let merge = 1.0 + h * (zp - 1.0);
        let (al, ar) = (zl * merge, zr * merge);
        let (a, c) = ([al, ar], [h * (l - al), h * ((1.0 - l) - ar)]);
        let beta = h * (1.0 - zp);
        coefficients[p] = [a[0], a[1], c[0], c[1]];
        let inv: [f64; W] = std::array::from_fn(|k| inv_prev[p * W + k]);
        for side in 0..2 {
            let (mut g, mut e) = ([0.0; W], [0.0; W]);
            for k in 0..W {
                let s = 1.0 + h * (inv[k] - 1.0);
                g[k] = s * c[side].mul_add(t[k], a[side]);
                e[k] = s * (-beta).mul_add(g[k], c[side]);
            }
            unsafe {
                put(values, at::<W>(p, G[side]), g);
                put(values, at::<W>(p, E[side]), e);
            }
        }
        // The root's A is the quadrature weights, so the terms come out integrated.
        let a = if split.parent == NONE {
            w
        } else {
            let (parent, side) = (split.parent as usize, split.side as usize & 1);
            let (a, g): ([f64; W], [f64; W]) = unsafe { (get(values, at::<W>(parent, A)), get(values, at::<W>(parent, G[side]))) };
            std::array::from_fn(|k| a[k] * g[k])
        };
        unsafe { put(values, at::<W>(p, A), a) };
    }

    // Up: children first, each split's B for its parent and its terms, added to the row's sums
    // in the walk's order (post-order), in the walk's form for the split: two leaves under a
    // first split, a first split's (from its slopes), or a repeated split's (from its factors
    // and terms).
    for (p, (split, &[al, ar, cl, cr])) in rt.splits.iter().zip(coefficients.iter()).enumerate() {
        let a: [f64; W] = unsafe { get(values, at::<W>(p, A)) };
        let first = split.prev == NONE;
        let leaf = split.children.map(|c| c == NONE);
        let (b, term) = if first & leaf[0] & leaf[1] {
            // Two leaves under a first split: as in the walk, B = Z + t·E, and the terms are
            // the slope E times the sum of A.
            let [vl, vr] = split.leaf;
            let e = cl.mul_add(vl, cr * vr);
            let z = al.mul_add(vl, ar * vr);
            let mut a_sum = 0.0;
            for a in &a[..K] {
                a_sum += a;
            }
            (std::array::from_fn(|k| e.mul_add(t[k], z)), a_sum * e)
        } else {
            let (bl, br) = unsafe {
                (
                    pick(leaf[0], [split.leaf[0]; W], get(values, at::<W>(slot(split.children[0]), B))),
                    pick(leaf[1], [split.leaf[1]; W], get(values, at::<W>(slot(split.children[1]), B))),
                )
            };
            let (mut b, mut inner) = ([0.0; W], [0.0; W]);
            if first {
                for k in 0..W {
                    inner[k] = cl.mul_add(bl[k], cr * br[k]);
                    b[k] = inner[k].mul_add(t[k], al.mul_add(bl[k], ar * br[k]));
                }
            } else {
                let (gl, gr, el, er): ([f64; W], [f64; W], [f64; W], [f64; W]) = unsafe {
                    (get(values, at::<W>(p, G[0])), get(values, at::<W>(p, G[1])), get(values, at::<W>(p, E[0])), get(values, at::<W>(p, E[1])))
                };
                for k in 0..W {
                    b[k] = gl[k].mul_add(bl[k], gr[k] * br[k]);
                    inner[k] = el[k].mul_add(bl[k], er[k] * br[k]);
                }
            }
            let mut acc = 0.0;
            for k in 0..K {
                acc = a[k].mul_add(inner[k], acc);
            }
            (b, acc)
        };
        unsafe { put(values, at::<W>(p, B), b) };
        phi[split.feature as usize][0] += term;
    }
}
