//! Looking at the example fraud model's decisions: explain the example payments, then draw the
//! four charts every SHAP user starts from.
//!
//! ```text
//! cargo run --example plots               # writes the charts to a temporary directory
//! cargo run --example plots -- docs/src/images   # ... or to the book's images
//! ```
//!
//! The data: 10,000 card payments (`examples/data/payments.parquet`, made by
//! `examples/make_example.py`) with an `id`, the amount, the customer's age and account age in
//! days, the hour, the number of payments in the last 24 hours, the merchant's risk score, a
//! country code and whether the card was present. The model (`examples/models/fraud.json`) is
//! an XGBoost classifier of fraud; its margin is the log-odds of fraud.
//!
//! The command line does the same with `shapfusion explain` and `shapfusion plot`.

use std::path::PathBuf;

use shapfusion::input::RowSelection;
use shapfusion::pipeline::{explain_file, ExplainOptions};
use shapfusion::plot::{render_to_file, ChartKind, ChartOptions, PlotData};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let (model, input) = (root.join("examples/models/fraud.json"), root.join("examples/data/payments.parquet"));
    let temp = tempfile::tempdir()?;
    let out: PathBuf = std::env::args().nth(1).map(PathBuf::from).unwrap_or_else(|| temp.path().to_path_buf());
    std::fs::create_dir_all(&out)?;

    // 1. Explain every payment, keeping the id: one SHAP column per feature, then `bias`.
    let shap = temp.path().join("payments_shap.parquet");
    let options = ExplainOptions { keep: vec!["id".into()], ..Default::default() };
    let summary = explain_file(&model, &input, &shap, &options)?;
    println!("explained {} payments with {}", summary.rows, summary.algorithm);

    // 2. Read 2,000 of them back with the feature values they explain (a seeded sample: the
    //    same rows every run). The kept `id` column is recognised and left out.
    let data = PlotData::from_files(&shap, &input, None, RowSelection::Sample { max_rows: Some(2000), seed: 7 })?;
    assert_eq!(data.rows, 2000);
    assert!(!data.features.contains(&"id".to_string()), "id is not a feature");

    // 3. Which features matter most, on average: mean |φ|.
    let mean_abs: Vec<f64> =
        (0..data.features.len()).map(|j| (0..data.rows).map(|r| data.shap(r, 0, j).abs()).sum::<f64>() / data.rows as f64).collect();
    let top = (0..data.features.len()).max_by(|&a, &b| mean_abs[a].total_cmp(&mean_abs[b])).expect("features");
    println!("most important on average: {} (mean |φ| {:.3})", data.features[top], mean_abs[top]);

    // 4. The riskiest payment of the sample: the highest margin (bias + Σφ).
    let margin = |r: usize| (0..=data.features.len()).map(|j| data.shap(r, 0, j)).sum::<f64>();
    let riskiest = (0..data.rows).max_by(|&a, &b| margin(a).total_cmp(&margin(b))).expect("rows");
    println!("riskiest sampled payment: row {} of the file, margin {:+.3}", data.row_numbers[riskiest], margin(riskiest));

    // 5. The four charts.
    let charts = [
        ("summary.png", ChartKind::Summary),
        ("bar.png", ChartKind::Bar),
        // Colour left to the default: the feature that appears to interact most with it.
        ("dependence.png", ChartKind::Dependence { feature: data.features[top].clone(), color: None }),
        ("waterfall.png", ChartKind::Waterfall { row: riskiest }),
    ];
    for (file, kind) in charts {
        let path = out.join(file);
        render_to_file(&data, &ChartOptions::new(kind), &path)?;
        let bytes = std::fs::read(&path)?;
        assert_eq!(&bytes[1..4], b"PNG", "{file} is a PNG");
        let width = u32::from_be_bytes([bytes[16], bytes[17], bytes[18], bytes[19]]);
        assert_eq!(width, 900, "{file}: default width");
        println!("wrote {} ({} KiB)", path.display(), bytes.len() / 1024);
    }
    Ok(())
}
