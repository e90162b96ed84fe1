//! `shap(...)` in SQL, step by step, on the example data.
//!
//! ```text
//! cargo run --example sql
//! ```
//!
//! Registers the shap UDFs on a DataFusion session, names the example model `fraud`, and runs a
//! few queries over the example payments: attributions as a struct, one field of it, the margin,
//! a filter on an attribution, and a `COPY … TO` Parquet file.

use datafusion::prelude::{ParquetReadOptions, SessionContext};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));

    // 1. A session whose config knows the `shap.*` options, with the UDFs registered.
    let ctx = SessionContext::new_with_config(shapfusion::sql::session_config());
    let models = shapfusion::sql::register(&ctx)?;

    // 2. Name a model. A URL works too (s3://bucket/fraud.json, with credentials from the
    //    environment), and so does `SET shap.model_dir = '<url prefix>'` for name lookup.
    models.register("fraud", root.join("examples/models/fraud.json").to_str().unwrap())?;

    // 3. A table of rows to explain.
    let data = root.join("examples/data/payments.parquet");
    ctx.register_parquet("payments", data.to_str().unwrap(), ParquetReadOptions::default()).await?;

    // 4. shap(model, features in the model's order) returns a struct: one field per feature + bias.
    let features = "amount, age, account_days, hour, tx_24h, merchant_risk, country_code, card_present";
    ctx.sql(&format!("SELECT id, shap('fraud', {features}) AS why FROM payments ORDER BY id LIMIT 3")).await?.show().await?;

    // 5. Fields are ordinary values: filter and sort on them, next to the margin.
    ctx.sql(&format!(
        "SELECT id, amount, shap('fraud', {features})['amount'] AS amount_effect, margin('fraud', {features}) AS margin \
         FROM payments WHERE shap('fraud', {features})['amount'] > 0.5 ORDER BY amount_effect DESC LIMIT 5"
    ))
    .await?
    .show()
    .await?;

    // 6. The nightly job: COPY the explanations to Parquet (a local path here; s3://… works the same).
    let out = std::env::temp_dir().join("shapfusion_example_explanations.parquet");
    ctx.sql(&format!("COPY (SELECT id, shap('fraud', {features}) AS why FROM payments) TO '{}' STORED AS PARQUET", out.display()))
        .await?
        .show()
        .await?;
    println!("wrote {}", out.display());
    Ok(())
}
