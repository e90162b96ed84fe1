//! GPUTreeShap's preprocessing, done on the CPU and cached per model: every root-to-leaf path
//! as a list of elements, repeated features on a path merged into one element, and the paths
//! packed into 32-lane warps by best-fit decreasing. `warps.rs` lays the packed paths out for
//! the kernels.

use std::sync::Arc;

use crate::engine::prepared::PreparedModel;
use crate::error::Result;
use crate::model::Model;

/// Lanes of a warp: the most elements one packed bin holds.
pub const WARP_LANES: usize = 32;

/// One split on a path: the row follows the path there iff `goes_left(node, x) == left`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Split {
    /// Tree index.
    pub tree: u32,
    /// Node index inside the tree.
    pub node: u32,
    /// Whether the path takes the left child.
    pub left: bool,
}

/// One element of a path: a distinct feature (or the root placeholder), the product of its
/// splits' cover fractions, and the splits a row must all satisfy to follow the path.
#[derive(Debug, Clone, PartialEq)]
pub struct PathElement {
    /// The feature, or `None` for the root element every path starts with.
    pub feature: Option<u32>,
    /// Fraction of training cover following the path through this feature's splits.
    pub zero_fraction: f64,
    /// The splits on this feature along the path (merged: all must hold).
    pub splits: Vec<Split>,
}

/// A root-to-leaf path with merged elements.
#[derive(Debug, Clone, PartialEq)]
pub struct Path {
    /// Output group of the tree.
    pub group: usize,
    /// Leaf value times the tree weight.
    pub value: f64,
    /// Root element first, then one element per distinct feature.
    pub elements: Vec<PathElement>,
}

/// Every path of a model, and the bias (expected value per group).
#[derive(Debug, Clone)]
pub struct PathSet {
    /// The model the paths came from.
    pub model: Arc<Model>,
    /// The paths, tree by tree, leaves in preorder.
    pub paths: Vec<Path>,
    /// Base margin plus every tree's expected value, per group.
    pub bias: Vec<f64>,
}

/// Extracts and merges the paths of every tree.
pub fn extract(model: Arc<Model>) -> Result<PathSet> {
    let prepared = PreparedModel::new(model.clone())?;
    let mut paths = Vec::new();
    for (t, (tree, prep)) in model.trees().iter().zip(&prepared.trees).enumerate() {
        // Depth-first, carrying the path so far (elements keyed by feature).
        let root = PathElement { feature: None, zero_fraction: 1.0, splits: Vec::new() };
        let mut stack = vec![(0usize, vec![root])];
        while let Some((i, elements)) = stack.pop() {
            let node = &tree.nodes[i];
            if node.is_leaf() {
                paths.push(Path { group: tree.group, value: prep.value[i], elements });
                continue;
            }
            for (child, left, ratio) in [(node.left, true, prep.ratios[i][0]), (node.right, false, prep.ratios[i][1])] {
                let mut next = elements.clone();
                let split = Split { tree: t as u32, node: i as u32, left };
                match next.iter_mut().find(|e| e.feature == Some(node.feature)) {
                    // A feature met again: one element, fractions multiplied, both splits kept.
                    Some(e) => {
                        e.zero_fraction *= ratio;
                        e.splits.push(split);
                    }
                    None => next.push(PathElement { feature: Some(node.feature), zero_fraction: ratio, splits: vec![split] }),
                }
                stack.push((child as usize, next));
            }
        }
    }
    Ok(PathSet { model, paths, bias: prepared.bias })
}

/// Best-fit decreasing: bins of at most `capacity` elements, each path whole in one bin. Returns
/// the path indices of each bin. A path longer than `capacity` is an error (the program sets
/// such paths apart for the quadrature kernels first).
pub fn pack(lengths: &[usize], capacity: usize) -> std::result::Result<Vec<Vec<usize>>, usize> {
    if let Some(&too_long) = lengths.iter().find(|&&l| l > capacity) {
        return Err(too_long);
    }
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(lengths[i]));
    let mut bins: Vec<Vec<usize>> = Vec::new();
    // The open bins by their free lanes, each set in bin order: finding the fullest bin that
    // still fits is a look at most `capacity` sets, not a scan of every bin (a deep model has
    // hundreds of thousands of paths; the scan took a minute on one of 300 trees of depth 12).
    let mut by_free: Vec<std::collections::BTreeSet<usize>> = vec![Default::default(); capacity + 1];
    for i in order {
        let len = lengths[i];
        // The fullest bin that still fits (best fit; the first such bin), else a new bin.
        let fit = (len..=capacity).find_map(|free| by_free[free].first().map(|&b| (free, b)));
        let (free, b) = match fit {
            Some((free, b)) => {
                by_free[free].remove(&b);
                (free, b)
            }
            None => {
                bins.push(Vec::new());
                (capacity, bins.len() - 1)
            }
        };
        bins[b].push(i);
        by_free[free - len].insert(b);
    }
    Ok(bins)
}

impl PathSet {
    /// Element count of each path (what a warp's lanes hold).
    pub fn lengths(&self) -> Vec<usize> {
        self.paths.iter().map(|p| p.elements.len()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_fit_decreasing_fills_warps_and_refuses_long_paths() {
        let bins = pack(&[20, 12, 10, 9, 8, 5, 30], 32).unwrap();
        let mut seen: Vec<usize> = bins.iter().flatten().copied().collect();
        seen.sort();
        assert_eq!(seen, (0..7).collect::<Vec<_>>());
        let lens = [20, 12, 10, 9, 8, 5, 30];
        for b in &bins {
            assert!(b.iter().map(|&i| lens[i]).sum::<usize>() <= 32);
        }
        assert_eq!(bins.len(), 3, "{bins:?}"); // 94 lanes: 30 / 20+12 / 10+9+8+5
        assert_eq!(pack(&[33], 32), Err(33));
    }
}
