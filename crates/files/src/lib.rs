//! # shapfusion-files
//!
//! Files in and out of shapfusion: rows from Parquet, CSV and Arrow IPC files ([`input`]), the
//! pipeline behind `shapfusion explain` that streams them through an
//! [`Explainer`](shapfusion_core::Explainer) to Parquet ([`pipeline`]), outputs that appear
//! whole or not at all ([`atomic_file`]), and Spark ML model directories, whose nodes are
//! Parquet ([`spark`], and [`load_model`], which reads every format).
//!
//! What it may use: `shapfusion-core`, Arrow (with its CSV and IPC readers) and Parquet. Not
//! DataFusion, tokio or tonic.
#![warn(missing_docs)]

pub mod atomic_file;
mod decoder_guard;
pub mod input;
pub mod pipeline;
pub mod spark;

pub use decoder_guard::{check_ipc_blocks, CheckedFooter};

use std::path::Path;

use shapfusion_core::{Model, Result};

/// Loads a model from a file in any format [`Model::load`] reads, or from a Spark ML model
/// directory (`model.save(dir)`).
pub fn load_model(path: impl AsRef<Path>) -> Result<Model> {
    let path = path.as_ref();
    if path.is_dir() {
        return spark::from_dir(path);
    }
    Model::load(path)
}
