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
    /// `xs[r]` goes left.
    #[inline(always)]
    pub fn lanes_left<const N: usize>(&self, tree: &Tree, xs: &[f64; N]) -> u32 {
        match *self {
            Decision::Numeric { threshold, strict, default_left } => {
                // The AVX2 and AVX-512 walks use `lanes_left_avx2` instead: this loop compiles
                // to scalar compares for about half of the lanes.
                lane_bits(xs, |x| (if strict { x < threshold } else { x <= threshold }) | (x.is_nan() & default_left))
            }
            Decision::Generic { node } => {
                let node = &tree.nodes[node as usize];
                lane_bits(xs, |x| tree.goes_left(node, x))
            }
        }
    }

    /// [`lanes_left`](Self::lanes_left) for `N` rows (at most 32), a numeric rule as one AVX
    /// compare and mask move per four (the portable loop compiles to about half of them scalar);
    /// `N` not a multiple of four (one row) takes the portable loop.
    ///
    /// Inlined into the walks' AVX2 and AVX-512 copies, whose features its intrinsics take (a
    /// `#[target_feature]` function of its own was not inlined: a call per split, a tenth of the
    /// walk's time on a forest).
    ///
    /// # Safety
    /// The CPU has AVX2: call it only from code compiled for AVX2 that
    /// `is_x86_feature_detected!("avx2")` chose.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    pub unsafe fn lanes_left_avx2<const N: usize>(&self, tree: &Tree, xs: &[f64; N]) -> u32 {
        use std::arch::x86_64::*;
        let Decision::Numeric { threshold, strict, default_left } = *self else {
            return self.lanes_left(tree, xs);
        };
        const { assert!(N <= 32, "lanes_left_avx2 takes at most 32 lanes") };
        if N % 4 != 0 {
            // A lane group of one row (the one-row walk): a scalar compare is all it takes.
            return self.lanes_left(tree, xs);
        }
        let mut bits = 0u32;
        for q in 0..N / 4 {
            // SAFETY: the caller's promise (AVX2); xs holds N values, read in unaligned groups of four.
            bits |= unsafe { numeric_left_avx2(_mm256_loadu_pd(xs.as_ptr().add(4 * q)), threshold, strict, default_left) } << (4 * q);
        }
        bits
    }
}

/// The numeric rule on four lanes, as a 4-bit mask. Ordered compares are false for NaN, as
/// Rust's `<` and `<=` are; UNORD(x, x) holds where x is NaN.
///
/// # Safety
/// The CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn numeric_left_avx2(x: std::arch::x86_64::__m256d, threshold: f64, strict: bool, default_left: bool) -> u32 {
    use std::arch::x86_64::*;
    // SAFETY: the caller's promise.
    unsafe {
        let t = _mm256_set1_pd(threshold);
        let below = if strict { _mm256_cmp_pd::<_CMP_LT_OQ>(x, t) } else { _mm256_cmp_pd::<_CMP_LE_OQ>(x, t) };
        let missing = if default_left { _mm256_cmp_pd::<_CMP_UNORD_Q>(x, x) } else { _mm256_setzero_pd() };
        _mm256_movemask_pd(_mm256_or_pd(below, missing)) as u32
    }
}

/// Bit `r` set where `test(xs[r])` holds.
#[inline(always)]
fn lane_bits<const N: usize>(xs: &[f64; N], test: impl Fn(f64) -> bool) -> u32 {
    let mut bits = 0u32;
    for (r, &x) in xs.iter().enumerate() {
        bits |= (test(x) as u32) << r;
    }
    bits
}
