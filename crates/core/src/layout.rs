//! Engine output → Arrow: the one definition of the output layout, used by every front end.
//!
//! * SHAP values: one `Float64` column per model feature, named after it, then `bias`. For
//!   models with G > 1 outputs (multiclass), each column is `FixedSizeList<Float64>[G]`.
//! * Interactions: one column `interactions` of `FixedSizeList<Float64>[G·(F+1)·(F+1)]`, in
//!   XGBoost's `pred_interactions` order (group, then row i, then column j; bias last).
//! * Margins: one column `margin` (the raw score), `Float64` or `FixedSizeList<Float64>[G]`.
//!
//! If a model feature is itself named `bias`, the bias column is named `bias_` instead.
//! [`OutputKind`] says which of the three a caller asks for.

use std::sync::Arc;

use arrow::array::{ArrayRef, FixedSizeListArray, Float64Array};
use arrow::datatypes::{DataType, Field, FieldRef, Fields};

use crate::engine::{Attributions, Interactions, Predictions};
use crate::error::{Error, Result};
use crate::model::Model;

/// What to compute for each row.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputKind {
    /// SHAP values: one column per feature plus `bias`.
    #[default]
    Shap,
    /// SHAP interaction values: one `interactions` column.
    Interactions,
    /// Margin (raw score) predictions: one `margin` column.
    Margin,
}

impl OutputKind {
    /// The names, as the command line, SQL, the wire and Python spell them.
    pub const NAMES: [&'static str; 3] = ["shap", "interactions", "margin"];

    /// The name: `shap`, `interactions` or `margin`.
    pub const fn name(&self) -> &'static str {
        match self {
            OutputKind::Shap => Self::NAMES[0],
            OutputKind::Interactions => Self::NAMES[1],
            OutputKind::Margin => Self::NAMES[2],
        }
    }
}

impl std::fmt::Display for OutputKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for OutputKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "shap" => Ok(OutputKind::Shap),
            "interactions" => Ok(OutputKind::Interactions),
            // The name it had before (what older clients and pools send).
            "margin" | "predict" => Ok(OutputKind::Margin),
            other => Err(Error::InvalidArgument(format!("unknown output {other:?}; expected one of {}", Self::NAMES.join(", ")))),
        }
    }
}

/// Output fields for `output` (without kept columns).
pub fn output_fields(model: &Model, output: OutputKind) -> Vec<FieldRef> {
    match output {
        OutputKind::Shap => shap_fields(model).iter().cloned().collect(),
        OutputKind::Interactions => vec![interactions_field(model)],
        OutputKind::Margin => vec![margin_field(model)],
    }
}

/// Name of the interactions column.
pub const INTERACTIONS_COLUMN: &str = "interactions";
/// Name of the margin column.
pub const MARGIN_COLUMN: &str = "margin";

/// Name of the bias column for `model`.
pub fn bias_column(model: &Model) -> &'static str {
    if model.feature_names().iter().any(|n| n == "bias") {
        "bias_"
    } else {
        "bias"
    }
}

/// Type of a value that has one number per output group.
fn per_group_type(groups: usize) -> DataType {
    if groups == 1 {
        DataType::Float64
    } else {
        DataType::FixedSizeList(Arc::new(Field::new("item", DataType::Float64, false)), groups as i32)
    }
}

/// Fields of the SHAP output: features then bias.
pub fn shap_fields(model: &Model) -> Fields {
    let t = per_group_type(model.num_groups());
    model
        .feature_names()
        .iter()
        .map(String::as_str)
        .chain([bias_column(model)])
        .map(|n| Arc::new(Field::new(n, t.clone(), false)) as FieldRef)
        .collect()
}

/// Field of the interactions output.
pub fn interactions_field(model: &Model) -> FieldRef {
    let w = model.num_features() + 1;
    let n = model.num_groups() * w * w;
    let item = Arc::new(Field::new("item", DataType::Float64, false));
    Arc::new(Field::new(INTERACTIONS_COLUMN, DataType::FixedSizeList(item, n as i32), false))
}

/// Field of the margin output.
pub fn margin_field(model: &Model) -> FieldRef {
    Arc::new(Field::new(MARGIN_COLUMN, per_group_type(model.num_groups()), false))
}

fn fixed_list(values: Vec<f64>, size: usize) -> ArrayRef {
    let item = Arc::new(Field::new("item", DataType::Float64, false));
    Arc::new(FixedSizeListArray::new(item, size as i32, Arc::new(Float64Array::from(values)), None))
}

/// SHAP columns (same order as [`shap_fields`]).
pub fn shap_columns(a: &Attributions) -> Vec<ArrayRef> {
    let w = a.features + 1;
    (0..w)
        .map(|j| {
            let mut col = Vec::with_capacity(a.rows * a.groups);
            for r in 0..a.rows {
                for g in 0..a.groups {
                    col.push(a.values[(r * a.groups + g) * w + j]);
                }
            }
            if a.groups == 1 {
                Arc::new(Float64Array::from(col)) as ArrayRef
            } else {
                fixed_list(col, a.groups)
            }
        })
        .collect()
}

/// The interactions column.
pub fn interactions_column(i: Interactions) -> ArrayRef {
    let w = i.features + 1;
    fixed_list(i.values, i.groups * w * w)
}

/// The margin column.
pub fn margin_column(p: Predictions) -> ArrayRef {
    if p.groups == 1 {
        Arc::new(Float64Array::from(p.values))
    } else {
        fixed_list(p.values, p.groups)
    }
}
