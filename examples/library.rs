//! shapfusion as a library: a model, a record batch in, a record batch of SHAP values out.
//!
//! ```text
//! cargo run --example library
//! ```

use arrow::array::{AsArray, RecordBatch};
use arrow::datatypes::Float64Type;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use shapfusion::{Algorithm, Explainer, Model, OutputKind};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let model = Model::load(root.join("examples/models/fraud.json"))?;
    let file = std::fs::File::open(root.join("examples/data/payments.parquet"))?;
    let rows = ParquetRecordBatchReaderBuilder::try_new(file)?.with_batch_size(4).build()?.next().expect("rows")?;

    // Features are matched by name; the input's other columns (here `id`) are ignored.
    let explainer = Explainer::builder(model.clone()).algorithm(Algorithm::Linear).threads(2).build()?;
    let shap: RecordBatch = explainer.explain_batch(&rows)?;
    let names: Vec<&str> = shap.schema_ref().fields().iter().map(|f| f.name().as_str()).collect();
    println!("{}", names.join("\t"));

    // Each row's values (one per feature, then `bias`) add up to the model's margin for it.
    let margins = Explainer::builder(model).output(OutputKind::Margin).build()?.explain_batch(&rows)?;
    for row in 0..shap.num_rows() {
        let values: Vec<f64> = shap.columns().iter().map(|c| c.as_primitive::<Float64Type>().value(row)).collect();
        println!("{}", values.iter().map(|v| format!("{v:+.4}")).collect::<Vec<_>>().join("\t"));
        let margin = margins.column(0).as_primitive::<Float64Type>().value(row);
        assert!((values.iter().sum::<f64>() - margin).abs() < 1e-9, "row {row} does not add up to {margin}");
    }
    Ok(())
}
