//! The engines' input: a dense row-major block of feature values.

use crate::model::Precision;

/// Dense row-major feature values; NaN marks a missing value.
///
/// Values are stored as f64. For models that compare in float32 (XGBoost) the values are
/// rounded to float32 on the way in, so an f64 comparison with the (float32) thresholds gives
/// exactly the library's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct FeatureBlock {
    rows: usize,
    cols: usize,
    values: Vec<f64>,
}

impl FeatureBlock {
    /// Wraps row-major values (`rows × cols`), rounding them to `precision`. Callers outside
    /// the crate go through the model (`Model::feature_block`), which knows its precision.
    ///
    /// # Panics
    /// If `values.len() != rows * cols`.
    pub(crate) fn new(rows: usize, cols: usize, mut values: Vec<f64>, precision: Precision) -> Self {
        assert_eq!(values.len(), rows * cols, "feature block shape");
        if precision == Precision::F32 {
            for v in &mut values {
                *v = *v as f32 as f64;
            }
        }
        FeatureBlock { rows, cols, values }
    }

    /// Number of rows.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Number of columns (model features).
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// All values, row-major (`rows × cols`).
    pub fn values(&self) -> &[f64] {
        &self.values
    }

    /// One row's values.
    #[inline]
    pub fn row(&self, i: usize) -> &[f64] {
        &self.values[i * self.cols..(i + 1) * self.cols]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float32_models_round_inputs_like_xgboost() {
        let t = 0.1f32 as f64; // a float32 threshold
        let just_below = f64::from_bits(t.to_bits() - 1);
        assert!(just_below < t);
        let b = FeatureBlock::new(1, 1, vec![just_below], Precision::F32);
        assert_eq!(b.row(0)[0], t, "one f64 ulp below rounds up to the float32 threshold");
        let b = FeatureBlock::new(1, 1, vec![just_below], Precision::F64);
        assert!(b.row(0)[0] < t);
    }
}
