//! Explainers built over the model store's models, cached for the process: one [`Explainer`]
//! per model version, [`ComputeSettings`] and background version, shared by every SQL call,
//! worker request and Ballista task that asks for the same thing, and built once even when
//! many partitions ask at the same moment. Also where a stored background set becomes the
//! rows an interventional explainer is built over.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use arrow::array::RecordBatch;

use crate::registry::{LoadedBackground, LoadedModel};
use shapfusion_core::error::Result;
use shapfusion_core::model::Model;
use shapfusion_core::ComputeSettings;
use shapfusion_core::Explainer;
use shapfusion_files::input::{sample_background, InputReader};

/// What tells two cached explainers apart: model URL and version, settings, and the
/// background's URL and version (none: path-dependent).
type Key = (String, String, ComputeSettings, Option<(String, String)>);

/// A slot filled once by whoever asks first; the others wait on its lock, not on the cache's.
type Slot = Arc<Mutex<Option<Explainer>>>;

/// The explainer for `model` with `settings`, path-dependent or interventional over
/// `background` (the CPU only), built on first use and shared afterwards. An explainer over an
/// older version of the same model or background is dropped when a newer one is built.
pub(crate) fn explainer_for(model: &LoadedModel, settings: &ComputeSettings, background: Option<&LoadedBackground>) -> Result<Explainer> {
    static CACHE: OnceLock<Mutex<HashMap<Key, Slot>>> = OnceLock::new();
    let key: Key = (model.url.clone(), model.version.clone(), *settings, background.map(|b| (b.url.clone(), b.version.clone())));
    let slot = {
        let mut cache = CACHE.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
        if !cache.contains_key(&key) {
            // Other versions of this model, or of this background, are not asked for again.
            cache.retain(|(url, version, _, b), _| {
                let same_model = *url == key.0 && *version != key.1;
                let same_background = matches!((b, &key.3), (Some((u, v)), Some((ku, kv))) if u == ku && v != kv);
                !same_model && !same_background
            });
        }
        cache.entry(key).or_default().clone()
    };
    let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(explainer) = slot.as_ref() {
        return Ok(explainer.clone());
    }
    let mut builder = Explainer::builder(model.model.clone()).settings(*settings);
    if let Some(b) = background {
        builder = builder.background(background_rows(b, &model.model)?);
    }
    let explainer = builder.build()?;
    *slot = Some(explainer.clone());
    Ok(explainer)
}

/// A stored background's rows for `model`: its feature columns, every row.
pub(crate) fn background_rows(background: &LoadedBackground, model: &Model) -> Result<RecordBatch> {
    let label = format!("background {:?} ({})", background.name, background.url);
    let reader = InputReader::from_bytes(background.bytes().clone(), &label, model.feature_names(), &model.numeric_input_columns(), 65_536)
        .map_err(|e| e.context(label.as_str()))?;
    sample_background(reader, model, None, 0, &label)
}
