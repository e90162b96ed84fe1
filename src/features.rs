//! Arrow → engine input: pick the model's feature columns by name, cast them to numbers, turn
//! nulls into missing values (NaN), and lay them out as a dense [`FeatureBlock`].

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Float64Type, Schema};

use crate::engine::FeatureBlock;
use crate::error::{Error, Result};
use crate::model::Model;

impl Model {
    /// The engines' input for `batch`: the model's features found by name (any order, other
    /// columns ignored), nulls as missing values, rounded to the precision the model compares
    /// in (float32 for XGBoost), so no caller can get that rounding wrong.
    pub fn feature_block(&self, batch: &RecordBatch) -> Result<FeatureBlock> {
        FeatureColumns::resolve(batch.schema_ref(), self)?.block(batch, self)
    }

    /// The engines' input from `rows` rows of values, row-major in the model's feature order
    /// (NaN: missing), rounded to the model's comparison precision.
    pub fn feature_block_from_values(&self, rows: usize, values: Vec<f64>) -> Result<FeatureBlock> {
        let cols = self.num_features();
        if rows.checked_mul(cols) != Some(values.len()) {
            return Err(Error::Input(format!("{} values are not {rows} rows of the model's {cols} features", values.len())));
        }
        Ok(FeatureBlock::new(rows, cols, values, self.precision))
    }
}

/// Where each model feature is found in the input: column indices in the model's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeatureColumns {
    indices: Vec<usize>,
}

impl FeatureColumns {
    /// Matches the model's feature names to `schema` (exact names) and checks the types.
    /// Columns not named by the model are ignored.
    pub fn resolve(schema: &Schema, model: &Model) -> Result<FeatureColumns> {
        let mut indices = Vec::with_capacity(model.num_features());
        for (i, name) in model.feature_names.iter().enumerate() {
            let idx = column_index(schema, name, i)?;
            let field = schema.field(idx);
            if !is_numeric(field.data_type()) {
                return Err(Error::ColumnType { name: name.clone(), data_type: field.data_type().to_string() });
            }
            indices.push(idx);
        }
        Ok(FeatureColumns { indices })
    }

    /// Converts one batch into the engines' dense block.
    pub fn block(&self, batch: &RecordBatch, model: &Model) -> Result<FeatureBlock> {
        let columns: Vec<ArrayRef> = self.indices.iter().map(|&i| batch.column(i).clone()).collect();
        block_from_columns(&columns, &model.feature_names, model)
    }
}

/// The input column named `name` (the model's feature `index`), or an error listing the
/// input's columns.
pub fn column_index(schema: &Schema, name: &str, index: usize) -> Result<usize> {
    schema.index_of(name).map_err(|_| Error::MissingColumn {
        name: name.to_string(),
        index,
        available: schema.fields().iter().map(|f| f.name().as_str()).collect::<Vec<_>>().join(", "),
    })
}

/// Whether a column type can feed a feature (numbers, booleans, all-null).
pub fn is_numeric(t: &DataType) -> bool {
    t.is_numeric() || matches!(t, DataType::Boolean | DataType::Null)
        || matches!(t, DataType::Dictionary(_, v) if is_numeric(v))
}

/// Builds a block from one array per model feature (already in the model's order); `names`
/// label errors. Used by every front end (files, SQL arguments, Flight batches).
pub fn block_from_columns(columns: &[ArrayRef], names: &[String], model: &Model) -> Result<FeatureBlock> {
    let f = model.num_features();
    if columns.len() != f {
        return Err(Error::Input(format!("{} feature columns given, the model has {f} features", columns.len())));
    }
    let rows = columns.first().map_or(0, |c| c.len());
    let mut values = vec![f64::NAN; rows * f];
    for (j, col) in columns.iter().enumerate() {
        let name = names.get(j).map(String::as_str).unwrap_or("?");
        if col.len() != rows {
            return Err(Error::Input(format!("feature column {name:?} has {} rows, expected {rows}", col.len())));
        }
        if !is_numeric(col.data_type()) {
            return Err(Error::ColumnType { name: name.to_string(), data_type: col.data_type().to_string() });
        }
        let as_f64 = cast(col, &DataType::Float64).map_err(|e| Error::arrow(format!("casting column {name:?} to float64"), e))?;
        let prim = as_f64.as_primitive::<Float64Type>();
        let raw = prim.values();
        match prim.nulls() {
            // Nulls are missing values; NaN already is.
            Some(nulls) => {
                for i in 0..rows {
                    if nulls.is_valid(i) {
                        values[i * f + j] = raw[i];
                    }
                }
            }
            None => {
                for i in 0..rows {
                    values[i * f + j] = raw[i];
                }
            }
        }
    }
    Ok(FeatureBlock::new(rows, f, values, model.precision))
}
