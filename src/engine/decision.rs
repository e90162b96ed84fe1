//! A split's test compiled for the engines' walks: the common numeric rules become a compare
//! (no match on the model's rule per row), anything else defers to [`Tree::goes_left`].

use crate::model::{MissingType, SplitRule, Tree};

/// How a compiled split decides a row's direction.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Decision {
    /// XGBoost numeric, and LightGBM numeric with NaN as its missing value: missing goes the
    /// default way, else left iff `x < threshold` (`strict`) or `x <= threshold`.
    Numeric { threshold: f64, strict: bool, default_left: bool },
    /// Anything else (categories, LightGBM zero-as-missing): `Tree::goes_left` on model node `node`.
    Generic { node: u32 },
}

impl Decision {
    /// The decision of internal node `i` of `tree`.
    pub fn of(tree: &Tree, i: usize) -> Decision {
        let node = &tree.nodes[i];
        match node.rule {
            SplitRule::XgbLess { threshold } => Decision::Numeric { threshold, strict: true, default_left: node.default_left },
            SplitRule::LgbLessEqual { threshold, missing: MissingType::NaN } => {
                Decision::Numeric { threshold, strict: false, default_left: node.default_left }
            }
            _ => Decision::Generic { node: i as u32 },
        }
    }

    /// Whether a row whose value of the split's feature is `x` goes left.
    #[inline(always)]
    pub fn goes_left(&self, tree: &Tree, x: f64) -> bool {
        match *self {
            Decision::Numeric { threshold, strict, default_left } => {
                let below = if strict { x < threshold } else { x <= threshold };
                below | (x.is_nan() & default_left)
            }
            Decision::Generic { node } => tree.goes_left(&tree.nodes[node as usize], x),
        }
    }

    /// [`goes_left`](Self::goes_left) for several rows at once: bit `r` of the result is set when
    /// `xs[r]` goes left. The numeric loop has no branch, so it compiles to vector compares.
    #[inline(always)]
    pub fn lanes_left<const N: usize>(&self, tree: &Tree, xs: &[f64; N]) -> u32 {
        let mut bits = 0u32;
        match *self {
            Decision::Numeric { threshold, strict, default_left } => {
                for (r, &x) in xs.iter().enumerate() {
                    let below = if strict { x < threshold } else { x <= threshold };
                    bits |= ((below | (x.is_nan() & default_left)) as u32) << r;
                }
            }
            Decision::Generic { node } => {
                let node = &tree.nodes[node as usize];
                for (r, &x) in xs.iter().enumerate() {
                    bits |= (tree.goes_left(node, x) as u32) << r;
                }
            }
        }
        bits
    }
}
