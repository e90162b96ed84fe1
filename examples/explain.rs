//! Explaining a batch of rows from Rust, step by step: the same path `shapfusion explain` takes.
//!
//! Run it with:
//!
//! ```text
//! cargo run --example explain
//! ```
//!
//! It loads the example fraud model, reads the example payments, explains the first rows, and
//! prints each row's strongest reasons and a check that the attributions add up to the margin.

use std::fs::File;
use std::sync::Arc;

use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use shapfusion::engine::{build_engine, Algorithm, EngineOptions};
use shapfusion::model::Model;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));

    // 1. The model: the format (XGBoost JSON here) is detected from the content.
    let model = Arc::new(Model::load(root.join("examples/models/fraud.json"))?);
    println!("{} trees over {} features: {}", model.trees().len(), model.num_features(), model.feature_names().join(", "));

    // 2. Rows: any Arrow record batch. Here, the first 5 rows of the example Parquet file.
    let file = File::open(root.join("examples/data/payments.parquet"))?;
    let mut reader = ParquetRecordBatchReaderBuilder::try_new(file)?.with_batch_size(5).build()?;
    let batch = reader.next().expect("the example file has rows")?;

    // 3. Features: the model's columns are picked by name; nulls become missing values, and
    //    values are rounded to float32 because XGBoost compares in float32.
    let block = model.feature_block(&batch)?;

    // 4. The engine: `auto` picks fast-v2 or linear from the model's shape (as `explain` does,
    //    without a row count, so this picks the same engine as the CLI).
    let explainer = build_engine(model.clone(), Algorithm::Auto, None, &EngineOptions::default())?;
    let shap = explainer.shap(&block)?;
    let margin = explainer.predict(&block)?;

    // 5. Read the attributions: per row, one value per feature, then the bias.
    for row in 0..shap.rows {
        let phi = shap.row(row, 0);
        let (features, bias) = phi.split_at(model.num_features());
        let mut reasons: Vec<(&str, f64)> = model.feature_names().iter().map(String::as_str).zip(features.iter().copied()).collect();
        reasons.sort_by(|a, b| b.1.abs().total_cmp(&a.1.abs()));
        let total: f64 = phi.iter().sum();
        println!(
            "row {row}: margin {:+.4} = bias {:+.4} + Σφ {:+.4}; top reasons: {}",
            margin.values[row],
            bias[0],
            total - bias[0],
            reasons.iter().take(3).map(|(n, v)| format!("{n} {v:+.3}")).collect::<Vec<_>>().join(", ")
        );
        assert!((total - margin.values[row]).abs() < 1e-9, "additivity");
    }
    Ok(())
}
