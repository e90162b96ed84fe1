//! The `shap.*` session options (a DataFusion config extension).

use datafusion::common::config::ConfigExtension;
use datafusion::common::extensions_options;

extensions_options! {
    /// Options of the shap UDFs, set with `SET shap.<name> = <value>`.
    pub struct ShapOptions {
        /// URL prefix (or local directory) where `<name>.json|.ubj|.txt` models are looked up.
        pub model_dir: String, default = String::new()
        /// Engine: auto, treeshap, fast-v1 or fast-v2.
        pub algorithm: String, default = "auto".to_string()
        /// Threads for SHAP computation; 0 means all cores.
        pub threads: usize, default = 0
        /// Memory bound of fast-v2's tables, in MiB.
        pub v2_memory_mb: usize, default = 256
    }
}

impl ConfigExtension for ShapOptions {
    const PREFIX: &'static str = "shap";
}
