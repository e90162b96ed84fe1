//! [`PinnedCall`]: one call of the shap functions as it crosses machines, the same type on every
//! wire. A Flight `DoExchange` descriptor holds it as JSON (`{"model": "fraud", "output":
//! "shap"}` is the smallest); the Ballista codec writes it into a planned function's definition
//! bytes. It names the model (a name or URL) and its content hash, the background set and its
//! content hash, the output, and the caller's [`ComputeSettings`]; [`PinnedCall::resolve`] is
//! the one version check every receiver runs, so a machine with another file refuses instead of
//! mixing versions, and a setting it cannot honour is refused by name rather than dropped.

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::registry::{LoadedBackground, LoadedModel, ModelRegistry};
use shapfusion_core::error::{Error, Result};
use shapfusion_core::ComputeSettings;
use shapfusion_core::Explainer;
use shapfusion_core::OutputKind;

/// Version of the pinned call's form. 2 added the caller's settings; a receiver refuses a
/// newer form it cannot read rather than guess.
pub const CALL_VERSION: u32 = 2;

/// A shap call pinned to model and background versions, with the caller's settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PinnedCall {
    /// A model name the receiver serves, or the URL the caller loaded it from.
    pub model: String,
    /// What to compute (default: SHAP values).
    #[serde(default, with = "output_name")]
    pub output: OutputKind,
    /// The content hash of the caller's model (`blake3:…`); a receiver with other bytes refuses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_version: Option<String>,
    /// A background set the receiver has registered under this name (or with this URL):
    /// interventional SHAP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub background: Option<String>,
    /// The content hash of the caller's background rows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub background_version: Option<String>,
    /// The caller's settings; without them the receiver computes with its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<ComputeSettings>,
    /// The form's version ([`CALL_VERSION`]); absent in version 1 calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u32>,
}

/// A call resolved against a store: the model and background it pins, as this machine has them.
#[derive(Debug, Clone)]
pub struct ResolvedCall {
    /// The model.
    pub model: Arc<LoadedModel>,
    /// The background set, if the call has one.
    pub background: Option<Arc<LoadedBackground>>,
}

impl PinnedCall {
    /// A call of `output` on `model`, unpinned, with the receiver's settings.
    pub fn new(model: impl Into<String>, output: OutputKind) -> Self {
        PinnedCall {
            model: model.into(),
            output,
            model_version: None,
            background: None,
            background_version: None,
            settings: None,
            version: Some(CALL_VERSION),
        }
    }

    /// The same call pinned to the model with content hash `version`.
    pub fn pinned(mut self, version: Option<String>) -> Self {
        self.model_version = version;
        self
    }

    /// The same call over the background registered as `name`, pinned to content hash
    /// `version` (`None`: path-dependent values).
    pub fn with_background(mut self, background: Option<(String, String)>) -> Self {
        (self.background, self.background_version) = background.unzip();
        self
    }

    /// The same call computed with `settings` wherever it lands.
    pub fn with_settings(mut self, settings: ComputeSettings) -> Self {
        self.settings = Some(settings);
        self
    }

    /// Reads a call from JSON; the error says what a valid one looks like.
    pub fn from_json(json: &[u8]) -> Result<Self> {
        const EXAMPLE: &str = r#"{"model": "fraud", "output": "shap"}"#;
        let call: PinnedCall = serde_json::from_slice(json).map_err(|e| {
            Error::InvalidArgument(format!(
                "bad call {:?}: {e}; expected JSON like {EXAMPLE} (output: {})",
                String::from_utf8_lossy(json),
                OutputKind::NAMES.join(", ")
            ))
        })?;
        if call.model.trim().is_empty() {
            return Err(Error::InvalidArgument("the call names no model".into()));
        }
        if let Some(v) = call.version.filter(|v| *v > CALL_VERSION) {
            return Err(Error::Unsupported(format!(
                "the call is version {v} of the form, this build reads up to version {CALL_VERSION}; upgrade this machine to the caller's shapfusion"
            )));
        }
        Ok(call)
    }

    /// The call as JSON.
    pub fn to_json(&self) -> Vec<u8> {
        // Strings, integers and enums by name: always serialises.
        serde_json::to_vec(self).expect("a pinned call serialises")
    }

    /// The one version check: the model and background this call pins, from `registry` (names
    /// under `model_dir` too), refused when their content differs from the caller's. `here`
    /// names this machine in errors. Blocking (the store may read a file or an object).
    pub fn resolve(&self, registry: &ModelRegistry, model_dir: Option<&str>, here: &str) -> Result<ResolvedCall> {
        let model = registry.resolve(&self.model, model_dir).map_err(|e| at(here, e))?;
        check_version(here, "model", &self.model, &model.url, &model.content_hash, self.model_version.as_deref())?;
        let background = match &self.background {
            None => None,
            Some(name) => {
                let b = registry.background(name).map_err(|e| at(here, e))?;
                check_version(here, "background", name, &b.url, &b.content_hash, self.background_version.as_deref())?;
                Some(b)
            }
        };
        Ok(ResolvedCall { model, background })
    }

    /// The settings this call runs with on a machine whose own are `host`: the caller's within
    /// the host's bounds, or the host's when the caller sent none. A device this machine cannot
    /// honour (`gpu` without a usable GPU) is refused by name, never swapped for another.
    pub fn settings_on(&self, host: &ComputeSettings, here: &str) -> Result<ComputeSettings> {
        let Some(asked) = self.settings else { return Ok(*host) };
        let run = asked.within(host);
        run.check_device().map_err(|e| e.context(format!("{here} cannot honour the caller's setting device {}", asked.device)))?;
        Ok(run)
    }
}

impl ResolvedCall {
    /// The (cached) explainer for this call with `settings`.
    pub fn explainer(&self, settings: &ComputeSettings) -> Result<Explainer> {
        crate::explainer_cache::explainer_for(&self.model, settings, self.background.as_deref())
    }
}

/// `e` with the machine that raised it, keeping its kind and cause.
fn at(here: &str, e: Error) -> Error {
    e.context(here)
}

/// Refuses an object whose content hash here differs from the caller's.
fn check_version(here: &str, what: &str, name: &str, url: &str, ours: &str, planned: Option<&str>) -> Result<()> {
    match planned {
        Some(planned) if planned != ours => Err(Error::VersionMismatch(format!(
            "{here}: {what} {name:?} ({url}) is version {ours} here, but the caller planned with version {planned}; deploy the same file everywhere, then run it again"
        ))),
        _ => Ok(()),
    }
}

/// [`OutputKind`] by name on the wire.
mod output_name {
    use serde::{Deserialize, Deserializer, Serializer};

    use shapfusion_core::OutputKind;

    pub fn serialize<S: Serializer>(k: &OutputKind, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(k.name())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<OutputKind, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shapfusion_core::engine::Algorithm;
    use shapfusion_core::Device;

    #[test]
    fn calls_round_trip_and_bad_ones_explain_themselves() {
        let settings = ComputeSettings { algorithm: Algorithm::TreeShap, device: Device::Cpu, threads: Some(2), ..Default::default() };
        let call = PinnedCall::new("file:///m/fraud.json", OutputKind::Interactions)
            .pinned(Some("blake3:ab".into()))
            .with_background(Some(("recent".into(), "blake3:cd".into())))
            .with_settings(settings);
        assert_eq!(PinnedCall::from_json(&call.to_json()).unwrap(), call);
        // What pyarrow clients send: a name and an output, nothing else.
        let plain = PinnedCall::from_json(br#"{"model":"m"}"#).unwrap();
        assert_eq!((plain.output, plain.settings, plain.version), (OutputKind::Shap, None, None));
        for (bad, needle) in [
            (&br#"{"model":"m","output":"shapp"}"#[..], "unknown output"),
            (b"not json", "bad call"),
            (br#"{"model":""}"#, "names no model"),
            (br#"{"modle":"m"}"#, "unknown field"),
            (
                br#"{"model":"m","settings":{"algorithm":"fastest","device":"cpu","v2_memory_bytes":1,"interventional_memory_bytes":1}}"#,
                "unknown algorithm",
            ),
            (br#"{"model":"m","version":99}"#, "version 99"),
        ] {
            let e = PinnedCall::from_json(bad).unwrap_err().to_string();
            assert!(e.contains(needle), "{}: {e}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn a_receiver_runs_the_callers_settings_within_its_own_or_refuses_by_name() {
        let host = ComputeSettings { threads: Some(1), device: Device::Cpu, ..Default::default() };
        let call = PinnedCall::new("m", OutputKind::Shap);
        assert_eq!(call.settings_on(&host, "worker").unwrap(), host);
        let asked = ComputeSettings { algorithm: Algorithm::TreeShap, device: Device::Cpu, threads: Some(64), ..Default::default() };
        let run = call.clone().with_settings(asked).settings_on(&host, "worker").unwrap();
        assert_eq!((run.algorithm, run.threads), (Algorithm::TreeShap, Some(1)));
        if Device::Gpu.resolve().is_err() {
            let gpu = ComputeSettings { device: Device::Gpu, ..Default::default() };
            let e = call.with_settings(gpu).settings_on(&host, "worker http://w1").unwrap_err().to_string();
            assert!(e.contains("worker http://w1 cannot honour the caller's setting device gpu"), "{e}");
        }
    }
}
