//! What engines return: plain row-major arrays of SHAP values, interaction values and margins.

/// SHAP values: per row and output group, one value per feature then the bias.
#[derive(Debug, Clone, PartialEq)]
pub struct Attributions {
    /// Rows explained.
    pub rows: usize,
    /// Output groups (G).
    pub groups: usize,
    /// Model features (F).
    pub features: usize,
    /// `rows × G × (F + 1)` values, row-major; the bias is last in each group.
    pub values: Vec<f64>,
}

impl Attributions {
    /// Values of one row and group: F attributions then the bias.
    pub fn row(&self, row: usize, group: usize) -> &[f64] {
        let w = self.features + 1;
        let start = (row * self.groups + group) * w;
        &self.values[start..start + w]
    }
}

/// SHAP interaction values in XGBoost's `pred_interactions` layout.
#[derive(Debug, Clone, PartialEq)]
pub struct Interactions {
    /// Rows explained.
    pub rows: usize,
    /// Output groups (G).
    pub groups: usize,
    /// Model features (F).
    pub features: usize,
    /// `rows × G × (F+1) × (F+1)`; entry `[i][j]` is the interaction of features i and j, the
    /// diagonal the main effect, and the last row/column the bias (only `[F][F]` is non-zero).
    pub values: Vec<f64>,
}

impl Interactions {
    /// The `(F+1) × (F+1)` matrix of one row and output group, row-major.
    pub fn matrix(&self, row: usize, group: usize) -> &[f64] {
        let w = (self.features + 1) * (self.features + 1);
        let start = (row * self.groups + group) * w;
        &self.values[start..start + w]
    }
}

/// Margin (raw score) predictions, `rows × G`.
#[derive(Debug, Clone, PartialEq)]
pub struct Predictions {
    /// Rows predicted.
    pub rows: usize,
    /// Output groups (G).
    pub groups: usize,
    /// `rows × G` margins.
    pub values: Vec<f64>,
}
