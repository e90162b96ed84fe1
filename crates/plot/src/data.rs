//! What a chart is drawn from: SHAP values and the feature values they explain, row for row,
//! read back from an `explain` output and its input, or computed on the fly from a model.

use std::collections::BTreeSet;
use std::path::Path;

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Float64Type, Schema};

use shapfusion_core::error::{Error, Result};
use shapfusion_core::features::is_text;
use shapfusion_core::ExplainerBuilder;
use shapfusion_files::input::{count_rows, selected_indices, take_rows, InputReader, RowSelection};
use shapfusion_files::pipeline::KEPT_COLUMNS_METADATA;

/// Rows per batch while reading files for a chart.
const READ_BATCH_ROWS: usize = 65_536;

/// SHAP values and feature values of the same rows.
#[derive(Debug, Clone, PartialEq)]
pub struct PlotData {
    /// Feature names, in the SHAP file's (the model's) order.
    pub features: Vec<String>,
    /// Rows held.
    pub rows: usize,
    /// Output groups (classes) per row.
    pub groups: usize,
    /// Feature values, row-major `rows × features`; NaN where missing.
    pub values: Vec<f64>,
    /// Per feature, the names of its values when the input column held strings: value `k` is
    /// `labels[k]` (sorted names, so the order is stable across runs).
    pub labels: Vec<Option<Vec<String>>>,
    /// SHAP values, row-major `rows × groups × (features + 1)`, the bias last (the engines'
    /// layout).
    pub shap: Vec<f64>,
    /// The 0-based row number in the input file of each row held.
    pub row_numbers: Vec<usize>,
}

impl PlotData {
    /// Value of feature `j` in row `r`.
    pub fn value(&self, r: usize, j: usize) -> f64 {
        self.values[r * self.features.len() + j]
    }

    /// SHAP value of feature `j` (or the bias, `j == features`) for group `g` in row `r`.
    pub fn shap(&self, r: usize, g: usize, j: usize) -> f64 {
        let w = self.features.len() + 1;
        self.shap[(r * self.groups + g) * w + j]
    }

    /// Index of the feature named `name`, or an error listing the features.
    pub fn feature_index(&self, name: &str) -> Result<usize> {
        self.features
            .iter()
            .position(|f| f == name)
            .ok_or_else(|| Error::InvalidArgument(format!("feature {name:?} is not in the model; its features are: {}", self.features.join(", "))))
    }

    /// Feature `j`'s value in row `r` as text: the category name, a number, or "missing".
    pub fn value_text(&self, r: usize, j: usize) -> String {
        let v = self.value(r, j);
        if v.is_nan() {
            return "missing".into();
        }
        match &self.labels[j] {
            Some(names) => names.get(v as usize).cloned().unwrap_or_else(|| format!("{v}")),
            None => format_number(v),
        }
    }

    /// Reads the SHAP values of an `explain` output (`shap`) and the feature values of the
    /// input it explained (`input`), keeping the rows `selection` picks. `features` names the
    /// SHAP columns (a model's features); without it they are the columns before the bias
    /// column that have the bias column's type, less the columns `explain --keep` copied.
    pub fn from_files(shap: &Path, input: &Path, features: Option<&[String]>, selection: RowSelection) -> Result<PlotData> {
        let shap_label = shap.display().to_string();
        let input_label = input.display().to_string();
        // The layout from the SHAP file's schema first, so the input is read for its features only.
        let shap_reader = InputReader::open_all(shap, READ_BATCH_ROWS)?;
        let layout = ShapLayout::of(&shap_reader.schema(), features, &shap_label)?;
        let open_input = || InputReader::open(input, &layout.features, &[], READ_BATCH_ROWS);
        let shap_rows = count_rows(shap_reader)?;
        let input_rows = count_rows(open_input()?)?;
        if shap_rows != input_rows {
            return Err(Error::BadData(format!(
                "{shap_label} has {shap_rows} rows but {input_label} has {input_rows}: the SHAP file must be the explain output of that input, row for row"
            )));
        }
        let indices = selected_indices(selection, input_rows, &input_label)?;
        let shap_batch = take_rows(InputReader::open_all(shap, READ_BATCH_ROWS)?, &indices)?;
        let input_batch = take_rows(open_input()?, &indices)?;
        let (values, labels) = feature_values(&input_batch, &layout.features, &input_label)?;
        Ok(PlotData {
            rows: indices.len(),
            groups: layout.groups,
            shap: layout.values(&shap_batch),
            features: layout.features,
            values,
            labels,
            row_numbers: indices,
        })
    }

    /// Explains the rows `selection` picks from `input` with `explainer` (a model, engine and
    /// optional background), for a chart without an `explain` run first.
    pub fn from_model(explainer: ExplainerBuilder, input: &Path, selection: RowSelection) -> Result<PlotData> {
        let explainer = explainer.build()?;
        let features = explainer.model().feature_names().to_vec();
        let label = input.display().to_string();
        let numeric = explainer.model().numeric_input_columns();
        let open = || InputReader::open(input, &features, &numeric, READ_BATCH_ROWS);
        let indices = selected_indices(selection, count_rows(open()?)?, &label)?;
        let rows = take_rows(open()?, &indices)?;
        let shap_batch = explainer.explain_batch(&rows)?;
        let layout = ShapLayout::of(shap_batch.schema_ref(), Some(&features), "the computed SHAP values")?;
        let (values, labels) = feature_values(&rows, &features, &label)?;
        Ok(PlotData { rows: indices.len(), groups: layout.groups, shap: layout.values(&shap_batch), features, values, labels, row_numbers: indices })
    }
}

/// Where the SHAP values are in a batch of explain output: one column per feature, then bias.
struct ShapLayout {
    features: Vec<String>,
    /// Column index of each feature, then of the bias.
    columns: Vec<usize>,
    groups: usize,
}

impl ShapLayout {
    fn of(schema: &Schema, features: Option<&[String]>, label: &str) -> Result<ShapLayout> {
        let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
        // The bias is `bias_` when a feature is itself named `bias`.
        let bias = ["bias_", "bias"].iter().find_map(|b| names.iter().rposition(|n| n == b)).ok_or_else(|| {
            Error::BadData(format!("{label} has no bias column: is it an explain output of SHAP values? Its columns are: {}", names.join(", ")))
        })?;
        let bias_type = schema.field(bias).data_type().clone();
        let groups = match &bias_type {
            DataType::Float64 => 1,
            DataType::FixedSizeList(item, g) if *item.data_type() == DataType::Float64 && *g > 0 => *g as usize,
            other => {
                return Err(Error::BadData(format!(
                    "{label}: the bias column has type {other}; explain writes Float64 or a list of Float64 per class"
                )))
            }
        };
        let features: Vec<String> = match features {
            Some(f) => f.to_vec(),
            None => {
                let kept: Vec<String> = schema.metadata().get(KEPT_COLUMNS_METADATA).and_then(|k| serde_json::from_str(k).ok()).unwrap_or_default();
                schema.fields()[..bias].iter().filter(|f| *f.data_type() == bias_type && !kept.contains(f.name())).map(|f| f.name().clone()).collect()
            }
        };
        if features.is_empty() {
            return Err(Error::BadData(format!("{label} has no SHAP columns before its bias column")));
        }
        let mut columns = Vec::with_capacity(features.len() + 1);
        for name in &features {
            let i = schema
                .index_of(name)
                .map_err(|_| Error::BadData(format!("{label} has no SHAP column for feature {name:?}; its columns are: {}", names.join(", "))))?;
            if *schema.field(i).data_type() != bias_type {
                return Err(Error::BadData(format!(
                    "{label}: column {name:?} has type {}, the bias column {bias_type}",
                    schema.field(i).data_type()
                )));
            }
            columns.push(i);
        }
        columns.push(bias);
        Ok(ShapLayout { features, columns, groups })
    }

    /// The SHAP values of `batch` in [`PlotData::shap`]'s layout.
    fn values(&self, batch: &RecordBatch) -> Vec<f64> {
        let (rows, g, w) = (batch.num_rows(), self.groups, self.columns.len());
        let mut out = vec![0.0; rows * g * w];
        for (j, &c) in self.columns.iter().enumerate() {
            let column = batch.column(c);
            let flat = match column.as_fixed_size_list_opt() {
                Some(list) => list.values().clone(),
                None => column.clone(),
            };
            let flat = flat.as_primitive::<Float64Type>().values();
            for r in 0..rows {
                for k in 0..g {
                    out[(r * g + k) * w + j] = flat[r * g + k];
                }
            }
        }
        out
    }
}

/// Per feature, the category names of a string column (`None`: a numeric column).
type CategoryNames = Vec<Option<Vec<String>>>;

/// The `features` columns of `batch` as numbers (NaN: missing), with names for string columns.
fn feature_values(batch: &RecordBatch, features: &[String], label: &str) -> Result<(Vec<f64>, CategoryNames)> {
    let (rows, f) = (batch.num_rows(), features.len());
    let mut values = vec![f64::NAN; rows * f];
    let mut labels = Vec::with_capacity(f);
    for (j, name) in features.iter().enumerate() {
        let column =
            batch.column_by_name(name).ok_or_else(|| Error::BadData(format!("{label} has no column {name:?} (a feature of the SHAP values)")))?;
        let (numbers, names) = column_numbers(column).map_err(|e| Error::arrow(format!("{label}: column {name:?}"), e))?;
        for (r, v) in numbers.into_iter().enumerate() {
            values[r * f + j] = v;
        }
        labels.push(names);
    }
    Ok((values, labels))
}

/// A column as numbers: numeric and boolean columns cast, string columns as the index of each
/// value among the column's sorted distinct values (returned as the names).
fn column_numbers(column: &ArrayRef) -> std::result::Result<(Vec<f64>, Option<Vec<String>>), arrow::error::ArrowError> {
    if !is_text(column.data_type()) {
        let numbers = cast(column, &DataType::Float64)?;
        let numbers = numbers.as_primitive::<Float64Type>();
        return Ok(((0..numbers.len()).map(|i| if numbers.is_null(i) { f64::NAN } else { numbers.value(i) }).collect(), None));
    }
    let strings = cast(column, &DataType::Utf8)?;
    let strings = strings.as_string::<i32>();
    let names: Vec<String> = strings.iter().flatten().collect::<BTreeSet<_>>().into_iter().map(str::to_string).collect();
    let numbers = strings.iter().map(|s| s.and_then(|s| names.binary_search_by(|n| n.as_str().cmp(s)).ok()).map_or(f64::NAN, |k| k as f64)).collect();
    Ok((numbers, Some(names)))
}

/// A number in at most 4 significant digits, without trailing zeros.
pub(crate) fn format_number(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    let magnitude = v.abs().log10().floor() as i32;
    if !(-4..6).contains(&magnitude) {
        return format!("{v:.3e}");
    }
    let decimals = (3 - magnitude).max(0) as usize;
    let s = format!("{v:.decimals$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_read_short() {
        assert_eq!(format_number(1234.5678), "1235");
        assert_eq!(format_number(0.012345), "0.01235");
        assert_eq!(format_number(-2.5), "-2.5");
        assert_eq!(format_number(3.0), "3");
        assert_eq!(format_number(1.5e9), "1.500e9");
    }

    #[test]
    fn string_columns_become_sorted_codes_with_names() {
        let column: ArrayRef = std::sync::Arc::new(arrow::array::StringArray::from(vec![Some("US"), None, Some("FR"), Some("US")]));
        let (numbers, names) = column_numbers(&column).unwrap();
        assert_eq!(names.unwrap(), vec!["FR", "US"]);
        assert_eq!(numbers[0], 1.0);
        assert!(numbers[1].is_nan());
        assert_eq!(&numbers[2..], &[0.0, 1.0]);
    }
}
