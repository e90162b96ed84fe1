//! The `shap.*` session options (a DataFusion config extension).

use datafusion::common::config::ConfigExtension;
use datafusion::common::extensions_options;

extensions_options! {
    /// Options of the shap UDFs, set with `SET shap.<name> = <value>`.
    pub struct ShapOptions {
        /// URL prefix (or local directory) where `<name>.json|.ubj|.txt` models are looked up.
        pub model_dir: String, default = String::new()
        /// Engine: auto, treeshap, fast-v1, fast-v2, quadrature or linear.
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
        /// A registered background set (`--background NAME=URL`): `shap(...)` returns
        /// interventional SHAP values over its rows; empty: path-dependent values.
        pub background: String, default = String::new()
    }
}

impl ConfigExtension for ShapOptions {
    const PREFIX: &'static str = "shap";
}
