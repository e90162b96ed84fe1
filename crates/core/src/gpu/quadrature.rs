//! Paths laid out for the quadrature kernels of `kernels/treeshap.cu`: the paths that do not
//! fit a warp (the long-path kernels: one thread per row and path, any path length), or every
//! path of at most 32 elements (the row kernels: one thread per row, the threads of a warp on
//! the same path); and the Gauss-Legendre rules those kernels integrate with.
//!
//! An element's attribution on a path is `v (o_i − z_i) ∫₀¹ Π_{j≠i} (z_j + t (o_j − z_j)) dt`
//! (the Shapley weights are Beta integrals), a polynomial of degree `n − 1` for `n` features on
//! the path: Gauss-Legendre with `⌈n/2⌉` points integrates it exactly (the rules are the CPU
//! `quadrature` engine's).

use crate::engine::gauss_legendre;

/// `i32` fields per long path in [`LongPaths::path_ints`].
pub const LONG_PATH_INTS: usize = 4;
/// `i32` fields per element in [`LongPaths::element_ints`].
pub const LONG_ELEMENT_INTS: usize = 4;
/// Most elements of a path the quadrature kernels take (`LONG_PATH_MAX_ELEMENTS` in the CUDA
/// source: one bit each of a thread's local memory). Deeper trees than the engines' depth bound
/// are refused before this is reached.
pub const LONG_PATH_MAX_ELEMENTS: usize = 544;

/// Paths as flat arrays for the quadrature kernels, longest first (so neighbouring threads take
/// paths of similar length, and the row kernels' warps meet the same rule size in a run).
/// Splits are in the program's shared split table.
#[derive(Debug, Clone, Default)]
pub struct LongPaths {
    /// Number of paths.
    pub count: usize,
    /// [`LONG_PATH_INTS`] per path: first element, element count, group, quadrature points.
    pub path_ints: Vec<i32>,
    /// Leaf value times the tree weight, per path.
    pub path_values: Vec<f64>,
    /// [`LONG_ELEMENT_INTS`] per element: feature (−1 for the root element), split range
    /// begin and end, and (row kernels only) where its [`LongPaths::element_scales`] start.
    pub element_ints: Vec<i32>,
    /// Zero fraction per element.
    pub element_zero: Vec<f64>,
    /// Gauss-Legendre rules on `[0, 1]` for 1 ..= the most points a path needs, as (node,
    /// weight) pairs; the rule of `m` points starts at pair `m (m − 1) / 2`.
    pub quadrature: Vec<f64>,
    /// `1 / (1 − t)` for each node of [`LongPaths::quadrature`], one per pair (row kernels only).
    pub tails: Vec<f64>,
    /// Per element of a path of `m` points, `m` values `(1 − z) / (z + t_k (1 − z))` (row
    /// kernels only; the root element's are there too, unused).
    pub element_scales: Vec<f64>,
}

impl LongPaths {
    /// Appends a path of `len` elements whose first element is the next one
    /// [`LongPaths::push_element`] adds.
    pub(crate) fn push_path(&mut self, len: usize, group: usize, value: f64) {
        let first = self.element_zero.len();
        self.path_ints.extend([first as i32, len as i32, group as i32, quadrature_points(len) as i32]);
        self.path_values.push(value);
        self.count += 1;
    }

    /// Appends one element of the current path.
    pub(crate) fn push_element(&mut self, feature: i32, splits: std::ops::Range<usize>, zero_fraction: f64) {
        self.element_ints.extend([feature, splits.start as i32, splits.end as i32, 0]);
        self.element_zero.push(zero_fraction);
    }

    /// Fills in the quadrature table for the longest path, and for the row kernels
    /// (`scales`) the tails and each element's scales.
    pub(crate) fn finish(&mut self, scales: bool) {
        let most = self.path_ints.chunks(LONG_PATH_INTS).map(|p| p[3] as usize).max().unwrap_or(0);
        self.quadrature = (1..=most)
            .flat_map(|m| {
                let (nodes, weights) = gauss_legendre(m);
                nodes.into_iter().zip(weights).flat_map(|(t, w)| [t, w])
            })
            .collect();
        if !scales {
            return;
        }
        let nodes: Vec<f64> = self.quadrature.chunks(2).map(|pair| pair[0]).collect();
        self.tails = nodes.iter().map(|t| 1.0 / (1.0 - t)).collect();
        self.element_scales.clear();
        for path in self.path_ints.chunks(LONG_PATH_INTS) {
            let (first, len, m) = (path[0] as usize, path[1] as usize, path[3] as usize);
            let rule = &nodes[m * (m - 1) / 2..][..m];
            for e in first..first + len {
                self.element_ints[e * LONG_ELEMENT_INTS + 3] = self.element_scales.len() as i32;
                let z = self.element_zero[e];
                self.element_scales.extend(rule.iter().map(|t| (1.0 - z) / (z + t * (1.0 - z))));
            }
        }
    }
}

/// Quadrature points a path of `len` elements (its root and `len − 1` features) needs: the
/// integrand has degree `len − 2`, exact with `m` points when `2m − 1 ≥ len − 2`.
pub fn quadrature_points(len: usize) -> usize {
    (len / 2).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shapley_weights_are_the_beta_integrals_the_kernels_use() {
        // |S|! (n-|S|-1)! / n! = ∫ t^|S| (1-t)^(n-|S|-1) dt, with the points a path of n
        // features (n + 1 elements) gets.
        // Up to the longest path the kernels take (543 features): weights built by the ratio
        // w(s + 1) = w(s) (s + 1) / (n − s − 1) from w(0) = 1 / n, as factorials overflow.
        for n in [1usize, 2, 5, 12, 31, 40, 100, 300, LONG_PATH_MAX_ELEMENTS - 1] {
            let (nodes, weights) = gauss_legendre(quadrature_points(n + 1));
            let mut want = 1.0 / n as f64;
            for s in 0..n {
                let got: f64 = nodes.iter().zip(&weights).map(|(t, w)| w * t.powi(s as i32) * (1.0 - t).powi((n - s - 1) as i32)).sum();
                assert!((got - want).abs() <= 1e-10 * want, "n={n}, |S|={s}: {got} vs {want}");
                want *= (s + 1) as f64 / (n - s - 1).max(1) as f64;
            }
        }
    }

    #[test]
    fn the_table_holds_every_rule_up_to_the_longest_path_at_its_offset() {
        let mut long = LongPaths::default();
        for len in [40, 7, 65] {
            long.push_path(len, 0, 1.0);
            for j in 0..len {
                long.push_element(j as i32 - 1, 0..0, 0.5);
            }
        }
        long.finish(false);
        let most = quadrature_points(65);
        assert_eq!(long.quadrature.len(), most * (most + 1)); // Σ m pairs, 2 values each
        let m = quadrature_points(40);
        let at = m * (m - 1); // pair m(m-1)/2, two values per pair
        let (nodes, weights) = gauss_legendre(m);
        let pairs: Vec<(f64, f64)> = nodes.into_iter().zip(weights).collect();
        assert_eq!(long.quadrature[at..at + 2 * m].chunks(2).map(|p| (p[0], p[1])).collect::<Vec<_>>(), pairs);
        assert_eq!(&long.path_ints[4..8], &[40, 7, 0, quadrature_points(7) as i32]);
    }

    /// The row kernels' sums, written out on the CPU: `φ_i = v Σ_k P_k h_ik` and the pairs'
    /// `v/2 Σ_k P_k h_ik h_ck`, against the Shapley formula summed over every coalition.
    #[test]
    fn the_row_kernels_tails_and_scales_give_the_shapley_sums() {
        let zeros = [1.0, 0.3, 0.55, 0.0, 0.8, 0.25];
        let mut paths = LongPaths::default();
        paths.push_path(zeros.len(), 0, 2.5);
        for (j, &z) in zeros.iter().enumerate() {
            paths.push_element(j as i32 - 1, 0..0, z);
        }
        paths.finish(true);
        let m = paths.path_ints[3] as usize;
        let rule = m * (m - 1) / 2;
        let (n, v) = (zeros.len(), paths.path_values[0]);
        for ones in 0u32..1 << n {
            let one = |j: usize| if j == 0 || ones >> j & 1 == 1 { 1.0 } else { 0.0 };
            // The kernels' sums.
            let p: Vec<f64> = (0..m)
                .map(|k| {
                    let (t, w) = (paths.quadrature[2 * (rule + k)], paths.quadrature[2 * (rule + k) + 1]);
                    w * (0..n).map(|j| zeros[j] + t * (one(j) - zeros[j])).product::<f64>()
                })
                .collect();
            let scale = |i: usize, k: usize| {
                if one(i) == 1.0 {
                    paths.element_scales[paths.element_ints[i * LONG_ELEMENT_INTS + 3] as usize + k]
                } else {
                    -paths.tails[rule + k]
                }
            };
            // The Shapley sums over coalitions S of the other features (element 0 is the root).
            let others = |skip: &[usize]| (1..n).filter(|j| !skip.contains(j)).collect::<Vec<_>>();
            let shapley = |skip: &[usize]| {
                let rest = others(skip);
                // |S|! (r − |S|)! / (r + 1)! for r other features: the Shapley weight of a
                // path of r + 1 features, and with c as a null player, of the r + 1 left.
                let r = rest.len();
                let factorial = |k: usize| (1..=k).map(|x| x as f64).product::<f64>();
                (0u32..1 << r)
                    .map(|s| {
                        let size = s.count_ones() as usize;
                        let weight = factorial(size) * factorial(r - size) / factorial(r + 1);
                        let fractions: f64 = rest.iter().enumerate().map(|(b, &j)| if s >> b & 1 == 1 { one(j) } else { zeros[j] }).product();
                        weight * fractions
                    })
                    .sum::<f64>()
            };
            for i in 1..n {
                let got = v * (0..m).map(|k| p[k] * scale(i, k)).sum::<f64>();
                let want = v * (one(i) - zeros[i]) * shapley(&[i]);
                assert!((got - want).abs() <= 1e-12, "ones {ones:b}, element {i}: {got} vs {want}");
                for c in i + 1..n {
                    let got = 0.5 * v * (0..m).map(|k| p[k] * scale(i, k) * scale(c, k)).sum::<f64>();
                    // The pair's share as the warp kernel defines it: half of c's effect on i's
                    // attribution with c as a null player, |S|! (n − |S| − 2)! / (n − 1)!.
                    let want = 0.5 * v * (one(i) - zeros[i]) * (one(c) - zeros[c]) * shapley(&[i, c]);
                    assert!((got - want).abs() <= 1e-12, "ones {ones:b}, pair {i},{c}: {got} vs {want}");
                }
            }
        }
    }
}
