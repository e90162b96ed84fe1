//! Arrow → engine input: pick the model's feature columns by name, cast them to numbers, turn
//! nulls into missing values (NaN), and lay them out as a dense [`FeatureBlock`]. String (and
//! dictionary) columns of categorical features become codes through the category names the
//! model file stores, with the library's own rule for values not seen in training.

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Float64Type, Schema};

use crate::engine::FeatureBlock;
use crate::error::{Error, Result};
use crate::model::{category_key_value, combination_key, Categories, CombinationPart, FeatureKind, Model, UnseenCategory};

impl Model {
    /// The engines' input for `batch`: the model's features found by name (any order, other
    /// columns ignored), nulls as missing values, rounded to the precision the model compares
    /// in (float32 for XGBoost), so no caller can get that rounding wrong.
    pub fn feature_block(&self, batch: &RecordBatch) -> Result<FeatureBlock> {
        FeatureColumns::resolve(batch.schema_ref(), self)?.block(batch, self)
    }

    /// The engines' input from `rows` rows of values, row-major in the model's feature order
    /// (NaN: missing), rounded to the model's comparison precision. A CatBoost categorical
    /// feature takes its integer category values here (hashed as CatBoost hashes them).
    pub fn feature_block_from_values(&self, rows: usize, values: Vec<f64>) -> Result<FeatureBlock> {
        let cols = self.num_features();
        if rows.checked_mul(cols) != Some(values.len()) {
            return Err(Error::InvalidArgument(format!("{} values are not {rows} rows of the model's {cols} features", values.len())));
        }
        let mut values = values;
        let mut category_hashes: Vec<Option<Vec<Option<u32>>>> = vec![None; cols];
        // CatBoost categorical features given as numbers are category values (hashed as their
        // decimal digits), not codes.
        for (j, categories) in self.categories().iter().enumerate() {
            if let Some(Categories::CatboostHashes(hashes)) = categories {
                let column: ArrayRef = std::sync::Arc::new(arrow::array::Float64Array::from_iter_values((0..rows).map(|i| values[i * cols + j])));
                let of_rows = catboost_hashes(&column, &self.feature_names()[j])?;
                for (i, code) in catboost_codes(&of_rows, hashes).into_iter().enumerate() {
                    values[i * cols + j] = code;
                }
                category_hashes[j] = Some(of_rows);
            }
        }
        Ok(self.block_with_combinations(rows, values, &category_hashes))
    }

    /// The block of `rows` rows of the model's features (`values`, row-major), with the columns
    /// derived from several of them appended to each row (see
    /// [`Combinations`](crate::model::Combinations)): a combination's code, or missing where a
    /// table does not hold it or a categorical part is missing. `category_hashes` holds each
    /// CatBoost categorical feature's hashes by row (`None` for a missing value).
    fn block_with_combinations(&self, rows: usize, values: Vec<f64>, category_hashes: &[Option<Vec<Option<u32>>>]) -> FeatureBlock {
        let Some(combinations) = self.combinations() else {
            return FeatureBlock::new(rows, self.num_features(), values, self.precision());
        };
        let (f, cols) = (self.num_features(), combinations.num_columns());
        let mut all = Vec::with_capacity(rows * cols);
        let mut parts = Vec::new();
        for (i, x) in values.chunks_exact(f.max(1)).take(rows).enumerate() {
            all.extend_from_slice(&x[..f]);
            for column in combinations.columns() {
                parts.clear();
                let mut missing = false;
                for part in column.parts() {
                    let hash = |feature: u32| category_hashes.get(feature as usize).and_then(|h| h.as_ref()).and_then(|h| h[i]);
                    match *part {
                        CombinationPart::Category { feature } => match hash(feature) {
                            Some(h) => parts.push(category_key_value(h)),
                            None => missing = true,
                        },
                        CombinationPart::Above { feature, border, missing_above } => {
                            let v = x[feature as usize];
                            parts.push(u64::from(if v.is_nan() { missing_above } else { v as f32 > border }));
                        }
                        CombinationPart::Equals { feature, hash: value } => match hash(feature) {
                            Some(h) => parts.push(u64::from(h == value)),
                            None => missing = true,
                        },
                    }
                }
                let code = if missing { None } else { column.code(combination_key(parts.iter().copied())) };
                all.push(code.map_or(f64::NAN, f64::from));
            }
        }
        FeatureBlock::new(rows, cols, all, self.precision())
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
        // Names looked up in a map (the first of repeated names, as `Schema::index_of`), so a
        // model and input of tens of thousands of columns match in linear time.
        let mut by_name: std::collections::HashMap<&str, usize> = std::collections::HashMap::with_capacity(schema.fields().len());
        for (i, field) in schema.fields().iter().enumerate() {
            by_name.entry(field.name().as_str()).or_insert(i);
        }
        let mut indices = Vec::with_capacity(model.num_features());
        for (i, name) in model.feature_names().iter().enumerate() {
            let idx = match by_name.get(name.as_str()) {
                Some(&idx) => idx,
                // Not in the map: the lookup that says which names the input has.
                None => column_index(schema, name, i)?,
            };
            check_feature_type(model, i, schema.field(idx).data_type())?;
            indices.push(idx);
        }
        Ok(FeatureColumns { indices })
    }

    /// Converts one batch into the engines' dense block.
    pub fn block(&self, batch: &RecordBatch, model: &Model) -> Result<FeatureBlock> {
        let columns: Vec<ArrayRef> = self.indices.iter().map(|&i| batch.column(i).clone()).collect();
        block_from_columns(&columns, model.feature_names(), model)
    }

    /// The batch's columns of the model's features, in the model's order, as they are (types,
    /// categories and nulls kept).
    pub fn project(&self, batch: &RecordBatch) -> Result<RecordBatch> {
        batch.project(&self.indices).map_err(|e| Error::arrow("selecting the model's feature columns", e))
    }
}

/// The input column named `name` (the model's feature `index`), or an error listing the
/// input's columns.
pub fn column_index(schema: &Schema, name: &str, index: usize) -> Result<usize> {
    schema.index_of(name).map_err(|_| missing_column(schema, name, index))
}

/// The error for a feature `name` (the model's feature `index`) that `schema` lacks.
fn missing_column(schema: &Schema, name: &str, index: usize) -> Error {
    Error::MissingColumn {
        name: name.to_string(),
        index,
        available: schema.fields().iter().map(|f| f.name().as_str()).collect::<Vec<_>>().join(", "),
    }
}

/// Whether a column type can feed a feature (numbers, booleans, all-null).
pub fn is_numeric(t: &DataType) -> bool {
    t.is_numeric() || matches!(t, DataType::Boolean | DataType::Null) || matches!(t, DataType::Dictionary(_, v) if is_numeric(v))
}

/// Whether a column type holds text: strings, or a dictionary of strings.
pub fn is_text(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Utf8View) || matches!(t, DataType::Dictionary(_, v) if is_text(v))
}

/// Checks that a column of type `t` can feed feature `j` of `model`: numbers always (category
/// codes for a categorical feature); text only for a categorical feature whose category names
/// the model file stores.
pub fn check_feature_type(model: &Model, j: usize, t: &DataType) -> Result<()> {
    let feature = &model.feature_names()[j];
    if is_numeric(t) {
        return Ok(());
    }
    if is_text(t) && model.feature_kinds()[j] == FeatureKind::Categorical {
        return match model.categories().get(j) {
            Some(Some(Categories::Names(_) | Categories::CatboostHashes(_))) => Ok(()),
            Some(Some(Categories::Numbers(_))) => Err(Error::BadData(format!(
                "column {feature:?} holds strings, but the model's categories for it are numbers: pass the category codes (integers) instead"
            ))),
            _ => Err(Error::BadData(format!(
                "column {feature:?} holds strings, but the model stores no category names for its categorical feature {feature:?} (it was trained on integer codes): pass the codes instead"
            ))),
        };
    }
    Err(Error::ColumnType { name: feature.clone(), data_type: t.to_string() })
}

/// Codes of a text column through a categorical feature's stored `names`: nulls are missing
/// (NaN); a value not among them follows `unseen`.
fn category_codes(column: &ArrayRef, names: &[String], unseen: UnseenCategory, feature: &str) -> Result<Vec<f64>> {
    let code: std::collections::HashMap<&str, usize> = names.iter().enumerate().map(|(k, n)| (n.as_str(), k)).collect();
    let strings = cast(column, &DataType::Utf8).map_err(|e| Error::arrow(format!("reading column {feature:?} as strings"), e))?;
    let known = || {
        let shown: Vec<&str> = names.iter().take(10).map(String::as_str).collect();
        format!("{} categories: {}{}", names.len(), shown.join(", "), if names.len() > shown.len() { ", ..." } else { "" })
    };
    strings
        .as_string::<i32>()
        .iter()
        .map(|value| value.map_or(Ok(f64::NAN), |s| code_or_unseen(code.get(s).copied(), unseen, feature, &format!("{s:?}"), known)))
        .collect()
}

/// Codes of a dictionary column of category values through a feature's stored numeric
/// categories, with the rules of [`category_codes`].
fn number_codes(column: &ArrayRef, categories: &[f64], unseen: UnseenCategory, feature: &str) -> Result<Vec<f64>> {
    let numbers = cast(column, &DataType::Float64).map_err(|e| Error::arrow(format!("reading column {feature:?} as numbers"), e))?;
    let known = || format!("{categories:?}");
    numbers
        .as_primitive::<Float64Type>()
        .iter()
        .map(|value| value.map_or(Ok(f64::NAN), |v| code_or_unseen(categories.iter().position(|&c| c == v), unseen, feature, &v.to_string(), known)))
        .collect()
}

/// A category's code, or for a value not seen in training (`value` as written in the error)
/// the library's rule: missing, or an error naming the column and the `known` categories.
fn code_or_unseen(code: Option<usize>, unseen: UnseenCategory, feature: &str, value: &str, known: impl Fn() -> String) -> Result<f64> {
    match (code, unseen) {
        (Some(k), _) => Ok(k as f64),
        (None, UnseenCategory::Missing) => Ok(f64::NAN),
        (None, UnseenCategory::Error) => Err(Error::BadData(format!(
            "column {feature:?}: category {value} was not seen in training, and XGBoost refuses such rows; the model knows {}",
            known()
        ))),
    }
}

/// CatBoost's hashes of a categorical column's values (strings as they are, integers as their
/// decimal digits), `None` for a null.
fn catboost_hashes(column: &ArrayRef, feature: &str) -> Result<Vec<Option<u32>>> {
    let hash = crate::model::cityhash::catboost_category_hash;
    if is_text(column.data_type()) {
        let strings = cast(column, &DataType::Utf8).map_err(|e| Error::arrow(format!("reading column {feature:?} as strings"), e))?;
        return Ok(strings.as_string::<i32>().iter().map(|v| v.map(hash)).collect());
    }
    let numbers = cast(column, &DataType::Float64).map_err(|e| Error::arrow(format!("reading column {feature:?} as numbers"), e))?;
    numbers
        .as_primitive::<Float64Type>()
        .iter()
        .map(|v| match v {
            None => Ok(None),
            Some(x) if x.is_nan() => Ok(None),
            Some(x) if x.fract() == 0.0 && x.abs() < 9.0e15 => Ok(Some(hash(&(x as i64).to_string()))),
            Some(x) => Err(Error::BadData(format!(
                "column {feature:?} holds {x}: a CatBoost categorical feature takes strings or integers, as CatBoost does"
            ))),
        })
        .collect()
}

/// Codes of a CatBoost categorical column from its values' hashes: each found among the hashes
/// its splits test; nulls and values no split tests are missing, which sends them the way
/// CatBoost sends a value equal to none of them.
fn catboost_codes(of_rows: &[Option<u32>], hashes: &[u32]) -> Vec<f64> {
    let code: std::collections::HashMap<u32, usize> = hashes.iter().enumerate().map(|(k, &h)| (h, k)).collect();
    of_rows.iter().map(|h| h.and_then(|h| code.get(&h)).map_or(f64::NAN, |&k| k as f64)).collect()
}

/// Builds a block from one array per model feature (already in the model's order); `names`
/// label errors. Used by every front end (files, SQL arguments, Flight batches).
pub fn block_from_columns(columns: &[ArrayRef], names: &[String], model: &Model) -> Result<FeatureBlock> {
    let f = model.num_features();
    if columns.len() != f {
        return Err(Error::InvalidArgument(format!("{} feature columns given, the model has {f} features", columns.len())));
    }
    let rows = columns.first().map_or(0, |c| c.len());
    let mut values = vec![f64::NAN; rows * f];
    let mut category_hashes: Vec<Option<Vec<Option<u32>>>> = vec![None; f];
    for (j, col) in columns.iter().enumerate() {
        let name = names.get(j).map(String::as_str).unwrap_or("?");
        if col.len() != rows {
            return Err(Error::InvalidArgument(format!("feature column {name:?} has {} rows, expected {rows}", col.len())));
        }
        check_feature_type(model, j, col.data_type())?;
        let codes = match (col.data_type(), model.categories().get(j)) {
            (t, Some(Some(Categories::Names(names)))) if is_text(t) => Some(category_codes(col, names, model.unseen_category(), name)?),
            (_, Some(Some(Categories::CatboostHashes(hashes)))) => {
                let of_rows = catboost_hashes(col, name)?;
                let codes = catboost_codes(&of_rows, hashes);
                category_hashes[j] = Some(of_rows);
                Some(codes)
            }
            // A dictionary of numbers holds category values (a pandas categorical of numbers),
            // not codes: find each value's position among the training categories.
            (DataType::Dictionary(_, _), Some(Some(Categories::Numbers(numbers)))) => {
                Some(number_codes(col, numbers, model.unseen_category(), name)?)
            }
            _ => None,
        };
        if let Some(codes) = codes {
            for (i, code) in codes.into_iter().enumerate() {
                values[i * f + j] = code;
            }
            continue;
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
    Ok(model.block_with_combinations(rows, values, &category_hashes))
}
