//! What every target does with its input: read it as one format, and when it is a model, use
//! it the way every front end does (summary, a prediction, SHAP values of two rows with the
//! engine `auto` picks), so a model that reads but breaks an engine is found too.

use std::sync::Arc;

use shapfusion_core::engine::{build_engine, Algorithm, EngineOptions};
use shapfusion_core::model::{Model, ModelFormat};

/// Largest model (in nodes) the targets explain; bigger ones are only read, to keep runs fast.
const EXPLAIN_NODES: usize = 20_000;

#[allow(dead_code)]
pub fn check(bytes: &[u8], format: ModelFormat) {
    let Ok(model) = Model::from_bytes_as(bytes, "fuzz", format) else { return };
    explain(model);
}

/// What every front end does with a model that reads: its summary, a prediction, SHAP values.
#[allow(dead_code)]
pub fn explain(model: Model) {
    let summary = model.summary();
    assert_eq!(summary.features.len(), model.num_features());
    let nodes: usize = model.trees().iter().map(|t| t.nodes.len()).sum();
    if nodes > EXPLAIN_NODES || model.num_features() > 256 || model.num_groups() > 16 {
        return;
    }
    let f = model.num_features();
    let rows = [vec![0.0; f], vec![f64::NAN; f]];
    let Ok(block) = model.feature_block_from_values(rows.len(), rows.concat()) else { return };
    // The prediction of the row as the engines see it (category values already turned into
    // codes, inputs rounded to the model's precision).
    let mut margin = vec![0.0; model.num_groups()];
    model.predict_row(block.row(0), &mut margin);
    let model = Arc::new(model);
    let Ok(explainer) = build_engine(model, Algorithm::Auto, None, &EngineOptions::default()) else { return };
    if let Ok(shap) = explainer.shap(&block) {
        // Additivity holds for every model the readers accept, up to rounding of its terms.
        let row = shap.row(0, 0);
        let total: f64 = row.iter().sum();
        let scale: f64 = row.iter().map(|v| v.abs()).sum::<f64>() + margin[0].abs();
        if total.is_finite() && scale.is_finite() {
            assert!((total - margin[0]).abs() <= 1e-8 * scale.max(1.0), "attributions sum to {total}, the prediction is {}", margin[0]);
        }
    }
}

/// The Parquet and Arrow IPC crates assert some invariants of a file instead of returning
/// errors; the readers turn those panics into errors (`catch_unwind` around the decoding, in
/// shapfusion-files' `decoder_guard::catch_decoder_panic`).
/// libFuzzer's panic hook aborts on every panic, before that boundary is reached, so a panic
/// raised while the reader's guarded closure is on the stack is let through to it here, wherever
/// it was raised (the Parquet crate's own asserts, or a crate it calls, such as `bytes` slicing a
/// page by the file's level lengths); any other panic still aborts and is reported.
#[allow(dead_code)]
pub fn allow_decoder_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let fuzzer_hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let stack = std::backtrace::Backtrace::force_capture().to_string();
            if !stack.contains("catch_decoder_panic::{{closure}}") {
                fuzzer_hook(info);
            }
        }));
    });
}
