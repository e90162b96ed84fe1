//! The `shap.*` session options (a DataFusion config extension).

use std::ops::{Deref, DerefMut};

use datafusion::common::config::{ConfigEntry, ConfigExtension, ConfigOptions, ExtensionOptions};
use datafusion::common::{extensions_options, DataFusionError, Result as DfResult};
use datafusion::logical_expr::{LogicalPlan, SetVariable, Statement};

use shapfusion_core::ComputeSettings;

extensions_options! {
    /// The values of [`ShapOptions`], one field per `shap.<name>` option.
    pub struct ShapSettings {
        /// URL prefix (or local directory) where `<name>.<ext>` models are looked up, for each
        /// model file extension (`shapfusion_core::model::MODEL_EXTENSIONS`).
        pub model_dir: String, default = String::new()
        /// Engine: auto, treeshap, fast-v1, fast-v2, quadrature, linear or oblivious.
        pub algorithm: String, default = "auto".to_string()
        /// Device: auto (the GPU when one is usable and algorithm is auto), cpu, or gpu.
        pub device: String, default = "auto".to_string()
        /// Threads for SHAP computation; 0 means all cores.
        pub threads: usize, default = 0
        /// Memory bound of fast-v2's tables, in MiB.
        pub v2_memory_mb: usize, default = 256
        /// Flight workers to compute on, comma separated (`http://w1:50061,http://w2:50061`);
        /// empty: compute in this process.
        pub workers: String, default = String::new()
        /// File holding the bearer token the workers require (empty: none).
        pub worker_token_file: String, default = String::new()
        /// The attribution index: shapley (SHAP values) or banzhaf (Banzhaf values, every
        /// coalition weighted alike; the bias is the prediction minus their sum).
        pub index: String, default = "shapley".to_string()
        /// A registered background set (`--background NAME=URL`): `shap(...)` returns
        /// interventional SHAP values over its rows; empty: path-dependent values.
        pub background: String, default = String::new()
    }
}

/// Options of the shap UDFs, set with `SET shap.<name> = <value>` (the fields of
/// [`ShapSettings`], reached through `Deref`).
///
/// A hand-written extension around the macro-made settings for one reason: its entries carry
/// the `shap.` prefix. DataFusion lists the macro's entries without it, and Ballista forwards a
/// session's settings to its scheduler by those names, so without the prefix a client's `SET
/// shap.background` would never reach the cluster.
#[derive(Debug, Clone, Default)]
pub struct ShapOptions(ShapSettings);

impl ShapOptions {
    /// The options `config` holds; the defaults where it has none.
    pub fn of(config: &ConfigOptions) -> ShapOptions {
        config.extensions.get::<ShapOptions>().cloned().unwrap_or_default()
    }

    /// The compute settings these options ask for (`shap.algorithm`, `shap.device`,
    /// `shap.threads`, `shap.v2_memory_mb`, `shap.index`), checked.
    pub fn compute_settings(&self) -> shapfusion_core::Result<ComputeSettings> {
        let settings = ComputeSettings::parse(&self.algorithm, &self.device, Some(self.threads), self.v2_memory_mb)?;
        Ok(ComputeSettings { index: self.index.parse()?, ..settings })
    }

    /// `plan`, or, where it is `RESET shap.<name>`, the `SET shap.<name>` to the value these
    /// options hold (the session's values when it started: the operator's flags, else the
    /// defaults, as PostgreSQL's `RESET` returns to the value before any `SET`).
    ///
    /// Every SQL entry point runs its plans through this: DataFusion (55) executes `RESET` of
    /// its own `datafusion.*` options only and fails on an extension's with "Could not find
    /// config namespace". A name `shap` lacks is an error naming the options it has.
    pub fn resolve_reset(&self, plan: LogicalPlan) -> DfResult<LogicalPlan> {
        let LogicalPlan::Statement(Statement::ResetVariable(reset)) = &plan else { return Ok(plan) };
        let Some(name) = reset.variable.strip_prefix(Self::PREFIX).and_then(|rest| rest.strip_prefix('.')) else { return Ok(plan) };
        let entries = self.0.entries();
        let Some(value) = entries.iter().find(|e| e.key == name).map(|e| e.value.clone().unwrap_or_default()) else {
            let names: Vec<String> = entries.iter().map(|e| format!("{}.{}", Self::PREFIX, e.key)).collect();
            return Err(DataFusionError::Configuration(format!(
                "RESET {}: no such option; the shap options are {}",
                reset.variable,
                names.join(", ")
            )));
        };
        Ok(LogicalPlan::Statement(Statement::SetVariable(SetVariable { variable: reset.variable.clone(), value })))
    }
}

impl Deref for ShapOptions {
    type Target = ShapSettings;
    fn deref(&self) -> &ShapSettings {
        &self.0
    }
}

impl DerefMut for ShapOptions {
    fn deref_mut(&mut self) -> &mut ShapSettings {
        &mut self.0
    }
}

impl ExtensionOptions for ShapOptions {
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }

    fn as_any_mut(&mut self) -> &mut dyn std::any::Any {
        self
    }

    fn cloned(&self) -> Box<dyn ExtensionOptions> {
        Box::new(self.clone())
    }

    fn set(&mut self, key: &str, value: &str) -> DfResult<()> {
        // Checked here, so that `SET` itself fails on a bad name rather than a later query.
        if key == "index" {
            value.parse::<shapfusion_core::Index>().map_err(|e| DataFusionError::Configuration(format!("shap.index: {e}")))?;
        }
        self.0.set(key, value)
    }

    fn entries(&self) -> Vec<ConfigEntry> {
        let mut entries = self.0.entries();
        for e in &mut entries {
            e.key = format!("{}.{}", Self::PREFIX, e.key);
        }
        entries
    }
}

impl ConfigExtension for ShapOptions {
    const PREFIX: &'static str = "shap";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_named_as_set_so_they_round_trip() {
        let mut options = ConfigOptions::new();
        options.extensions.insert(ShapOptions::default());
        options.set("shap.background", "recent").unwrap();
        let entries: Vec<(String, Option<String>)> =
            options.entries().into_iter().filter(|e| e.key.starts_with("shap.")).map(|e| (e.key, e.value)).collect();
        assert!(entries.contains(&("shap.background".to_string(), Some("recent".to_string()))), "{entries:?}");
        // What a Ballista scheduler does with a client's entries.
        let mut remote = ConfigOptions::new();
        remote.extensions.insert(ShapOptions::default());
        for (key, value) in &entries {
            remote.set(key, value.as_deref().unwrap_or_default()).unwrap();
        }
        assert_eq!(remote.extensions.get::<ShapOptions>().unwrap().background, "recent");
    }

    #[test]
    fn reset_becomes_a_set_to_the_starting_value() {
        use datafusion::logical_expr::ResetVariable;
        let reset = |variable: &str| LogicalPlan::Statement(Statement::ResetVariable(ResetVariable { variable: variable.into() }));
        let mut start = ShapOptions::default();
        start.set("model_dir", "s3://models/").unwrap();
        let set = |variable: &str, value: &str| {
            LogicalPlan::Statement(Statement::SetVariable(SetVariable { variable: variable.into(), value: value.into() }))
        };
        assert_eq!(start.resolve_reset(reset("shap.model_dir")).unwrap(), set("shap.model_dir", "s3://models/"));
        assert_eq!(start.resolve_reset(reset("shap.threads")).unwrap(), set("shap.threads", "0"));
        assert_eq!(start.resolve_reset(reset("shap.background")).unwrap(), set("shap.background", ""));
        // DataFusion's own options, and other plans, are left to DataFusion.
        assert_eq!(start.resolve_reset(reset("datafusion.execution.batch_size")).unwrap(), reset("datafusion.execution.batch_size"));
        let e = start.resolve_reset(reset("shap.algorithms")).unwrap_err().to_string();
        assert!(e.contains("RESET shap.algorithms: no such option") && e.contains("shap.algorithm, shap.device"), "{e}");
    }
}
