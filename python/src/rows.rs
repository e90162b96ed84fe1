//! Input rows, whatever the caller passed: a float64 matrix (from NumPy, or a numeric pandas
//! frame) with or without column names, or any object with the Arrow PyCapsule interface
//! (pyarrow, polars, pandas through pyarrow, ...). Each chunk of rows becomes the engines' input
//! through the model (`Model::feature_block_from_values` for a matrix, `Model::feature_block`
//! for Arrow), the paths every front end takes: names are matched, nulls become missing values,
//! category names become codes and values are rounded as in `shapfusion explain`.

use std::ops::Range;
use std::sync::Arc;

use arrow::array::{ArrayRef, Float64Array, RecordBatch};
use arrow::compute::concat_batches;
use arrow::datatypes::{DataType, Field, Schema};
use arrow_pyarrow::{FromPyArrow, Table};
use pyo3::prelude::*;
use shapfusion_core::engine::FeatureBlock;
use shapfusion_core::{Error, Model, Result};

use crate::errors::to_py;

/// Rows to explain.
pub enum Rows<'a> {
    /// A row-major matrix of `cols` columns; `positions[j]` is the column of model feature j.
    Matrix { values: &'a [f64], cols: usize, positions: Vec<usize> },
    /// Arrow columns, found by name.
    Arrow(RecordBatch),
}

impl<'a> Rows<'a> {
    /// Rows from a row-major `rows × cols` matrix. With `names` (one per column) the model's
    /// features are found by name; without, the matrix must have exactly the model's features,
    /// in its order. Columns the model does not use are ignored.
    pub fn matrix(model: &Model, values: &'a [f64], cols: usize, names: Option<&[String]>) -> Result<Rows<'a>> {
        let features = &model.feature_names();
        let positions = match names {
            Some(names) => {
                if names.len() != cols {
                    return Err(Error::InvalidArgument(format!("X has {cols} columns but {} column names", names.len())));
                }
                feature_positions(features, names)?
            }
            None if cols == features.len() => (0..cols).collect(),
            None => {
                return Err(Error::InvalidArgument(format!(
                    "X has {cols} columns, but the model has {} features ({}); pass exactly those columns in that order, or a DataFrame whose column names are the feature names",
                    features.len(),
                    summarize(features)
                )))
            }
        };
        if cols == 0 && !values.is_empty() {
            return Err(Error::InvalidArgument("X has no columns".into()));
        }
        Ok(Rows::Matrix { values, cols, positions })
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        match self {
            Rows::Matrix { values, cols, .. } => values.len().checked_div(*cols).unwrap_or(0),
            Rows::Arrow(batch) => batch.num_rows(),
        }
    }

    /// The engines' input for `range` of the rows.
    pub fn block(&self, model: &Model, range: Range<usize>) -> Result<FeatureBlock> {
        match self {
            Rows::Matrix { values, cols, positions } => {
                let mut block = Vec::with_capacity(range.len() * positions.len());
                for row in values[range.start * cols..range.end * cols].chunks_exact(*cols) {
                    block.extend(positions.iter().map(|&c| row[c]));
                }
                model.feature_block_from_values(range.len(), block)
            }
            Rows::Arrow(batch) => model.feature_block(&batch.slice(range.start, range.len())),
        }
    }

    /// The rows as a record batch with the model's feature names (what a background set is).
    pub fn into_batch(self, model: &Model) -> Result<RecordBatch> {
        match self {
            Rows::Arrow(batch) => Ok(batch),
            Rows::Matrix { values, cols, positions } => {
                let rows = values.len().checked_div(cols).unwrap_or(0);
                let columns: Vec<ArrayRef> = positions
                    .iter()
                    .map(|&c| Arc::new(Float64Array::from_iter_values((0..rows).map(|r| values[r * cols + c]))) as ArrayRef)
                    .collect();
                let fields: Vec<Field> = model.feature_names().iter().map(|n| Field::new(n, DataType::Float64, true)).collect();
                RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).map_err(|e| Error::arrow("assembling the rows", e))
            }
        }
    }
}

/// Reads an object exporting Arrow data (`__arrow_c_stream__`, `__arrow_c_array__`, or a pyarrow
/// object) into one batch. Column names are kept; features are found by name per chunk.
pub fn read_arrow(data: &Bound<'_, PyAny>) -> PyResult<RecordBatch> {
    if !data.hasattr("__arrow_c_stream__")? {
        return RecordBatch::from_pyarrow_bound(data);
    }
    let (batches, schema) = Table::from_pyarrow_bound(data)?.into_inner();
    concat_batches(&schema, &batches).map_err(|e| to_py(Error::arrow("reading the Arrow input", e)))
}

/// For each of the model's features, its position among `names`; a missing one is the error
/// every front end gives (the feature, and the columns there are).
fn feature_positions(features: &[String], names: &[String]) -> Result<Vec<usize>> {
    // A map, so a frame of tens of thousands of columns is matched in linear time; the first
    // of repeated names wins, as a search from the left would give.
    let mut by_name: std::collections::HashMap<&str, usize> = std::collections::HashMap::with_capacity(names.len());
    for (i, n) in names.iter().enumerate() {
        by_name.entry(n.as_str()).or_insert(i);
    }
    features
        .iter()
        .enumerate()
        .map(|(index, name)| {
            by_name.get(name.as_str()).copied().ok_or_else(|| Error::MissingColumn { name: name.clone(), index, available: summarize(names) })
        })
        .collect()
}

/// The first few names and how many more, for messages about wide models.
fn summarize(names: &[String]) -> String {
    const SHOWN: usize = 8;
    if names.len() <= SHOWN {
        names.join(", ")
    } else {
        format!("{}, … {} more", names[..SHOWN].join(", "), names.len() - SHOWN)
    }
}
