//! The "unique path" of TreeSHAP: the distinct features met on the way from the root, each
//! with the fraction of training cover that follows the path (`zero`) and whether the row being
//! explained follows it (`one`), plus the permutation weights `w` of every subset size.
//!
//! `extend`, `unwind` and `unwound_sum` are the EXTEND / UNWIND / sum(UNWIND(...).w) steps of
//! Lundberg, Erion & Lee (2018), algorithm 2. Also here: the Shapley weights used by the
//! polynomial (fast-v1/v2) engines.

/// Feature id of the root's placeholder element.
pub(crate) const NO_FEATURE: u32 = u32::MAX;

/// One element of the unique path.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct PathElem {
    pub feature: u32,
    pub zero: f64,
    pub one: f64,
    pub w: f64,
}

/// Appends an element with fractions `(zero, one)` to `path[..len]` (so `path[len]` becomes
/// the new last element) and updates the permutation weights.
#[inline]
pub(crate) fn extend(path: &mut [PathElem], len: usize, zero: f64, one: f64, feature: u32) {
    path[len] = PathElem { feature, zero, one, w: if len == 0 { 1.0 } else { 0.0 } };
    let denom = (len + 1) as f64;
    for i in (0..len).rev() {
        path[i + 1].w += one * path[i].w * (i + 1) as f64 / denom;
        path[i].w = zero * path[i].w * (len - i) as f64 / denom;
    }
}

/// Removes element `idx` from `path[..len]`, undoing its `extend`.
#[inline]
pub(crate) fn unwind(path: &mut [PathElem], len: usize, idx: usize) {
    let depth = len - 1;
    let PathElem { one, zero, .. } = path[idx];
    let mut next = path[depth].w;
    let denom = (depth + 1) as f64;
    for i in (0..depth).rev() {
        if one != 0.0 {
            let tmp = path[i].w;
            path[i].w = next * denom / ((i + 1) as f64 * one);
            next = tmp - path[i].w * zero * (depth - i) as f64 / denom;
        } else {
            path[i].w = path[i].w * denom / (zero * (depth - i) as f64);
        }
    }
    for i in idx..depth {
        path[i].feature = path[i + 1].feature;
        path[i].zero = path[i + 1].zero;
        path[i].one = path[i + 1].one;
    }
}

/// Total permutation weight of `path[..len]` with element `idx` unwound, without modifying it.
#[inline]
pub(crate) fn unwound_sum(path: &[PathElem], len: usize, idx: usize) -> f64 {
    let depth = len - 1;
    let PathElem { one, zero, .. } = path[idx];
    let mut total = 0.0;
    if one != 0.0 {
        let mut next = path[depth].w;
        for i in (0..depth).rev() {
            let tmp = next / ((i + 1) as f64 * one);
            total += tmp;
            next = path[i].w - tmp * zero * (depth - i) as f64;
        }
    } else {
        for i in (0..depth).rev() {
            total += path[i].w / (zero * (depth - i) as f64);
        }
    }
    total * (depth + 1) as f64
}

/// Shapley weights `c[d][u] = u! (d-1-u)! / d!` for `1 <= d <= max_d`, `0 <= u < d`: the weight
/// of a coalition of size `u` among the other `d - 1` players.
#[derive(Debug, Clone)]
pub(crate) struct ShapleyWeights {
    rows: Vec<Vec<f64>>,
}

impl ShapleyWeights {
    pub fn new(max_d: usize) -> Self {
        let mut rows = vec![Vec::new()];
        for d in 1..=max_d.max(1) {
            let mut row = Vec::with_capacity(d);
            let mut c = 1.0 / d as f64; // u = 0: (d-1)!/d!
            for u in 0..d {
                row.push(c);
                if u + 1 < d {
                    c *= (u + 1) as f64 / (d - 1 - u) as f64;
                }
            }
            rows.push(row);
        }
        ShapleyWeights { rows }
    }

    /// Weights for `d` players.
    #[inline]
    pub fn get(&self, d: usize) -> &[f64] {
        &self.rows[d]
    }
}

/// Multiplies the polynomial `poly` (coefficients, lowest first) by `(z + t)` in place.
#[inline]
pub(crate) fn poly_mul_linear(poly: &mut Vec<f64>, z: f64) {
    poly.push(0.0);
    for u in (1..poly.len()).rev() {
        poly[u] = poly[u] * z + poly[u - 1];
    }
    poly[0] *= z;
}

/// Writes `poly / (z + t)` into `out` (exact division: `poly` must have the factor), using the
/// top-down recurrence, which stays stable for `z` in [0, 1].
#[inline]
pub(crate) fn poly_div_linear(poly: &[f64], z: f64, out: &mut Vec<f64>) {
    let n = poly.len() - 1; // degree
    out.clear();
    out.resize(n, 0.0);
    if n == 0 {
        return;
    }
    out[n - 1] = poly[n];
    for u in (1..n).rev() {
        out[u - 1] = poly[u] - z * out[u];
    }
}

/// `Σ_u weights[u] · poly[u]`.
#[inline]
pub(crate) fn weighted_sum(poly: &[f64], weights: &[f64]) -> f64 {
    poly.iter().zip(weights).map(|(a, c)| a * c).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapley_weights_sum_to_one_per_size_class() {
        // Σ_u C(d-1, u) c[d][u] = 1 for every d.
        let w = ShapleyWeights::new(20);
        for d in 1..=20usize {
            let mut binom = 1.0;
            let mut total = 0.0;
            for u in 0..d {
                total += binom * w.get(d)[u];
                binom = binom * (d - 1 - u) as f64 / (u + 1) as f64;
            }
            assert!((total - 1.0).abs() < 1e-12, "d={d}: {total}");
        }
    }

    #[test]
    fn polynomial_division_inverts_multiplication() {
        let mut p = vec![1.0];
        for z in [0.3, 0.9, 0.05, 1.0] {
            poly_mul_linear(&mut p, z);
        }
        let mut q = Vec::new();
        poly_div_linear(&p, 0.05, &mut q);
        let mut back = q.clone();
        poly_mul_linear(&mut back, 0.05);
        for (a, b) in back.iter().zip(&p) {
            assert!((a - b).abs() < 1e-14);
        }
    }

    #[test]
    fn unwind_undoes_extend() {
        let mut path = vec![PathElem::default(); 8];
        extend(&mut path, 0, 1.0, 1.0, NO_FEATURE);
        extend(&mut path, 1, 0.4, 1.0, 3);
        extend(&mut path, 2, 0.7, 0.0, 5);
        let before: Vec<f64> = path[..3].iter().map(|e| e.w).collect();
        extend(&mut path, 3, 0.2, 1.0, 9);
        unwind(&mut path, 4, 3);
        for (i, w) in before.iter().enumerate() {
            assert!((path[i].w - w).abs() < 1e-14);
        }
    }
}
