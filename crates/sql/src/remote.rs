//! How the SQL functions reach remote workers (`SET shap.workers = ...`) without knowing the wire:
//! a [`RemoteCompute`] installed once per process by the transport that implements it
//! (the Flight module's `install`).

use std::sync::{Arc, OnceLock};

use arrow::array::RecordBatch;

use crate::call::PinnedCall;
use shapfusion_core::error::{Error, Result};

/// Computes a pinned call on remote workers.
pub trait RemoteCompute: Send + Sync + std::fmt::Debug {
    /// The call's output for `batch` (the model's feature columns, by name), computed on
    /// `workers` (comma-separated URLs) with the token in `token_file` (empty: none); one row
    /// per input row, in order. Blocking.
    fn compute(&self, workers: &str, token_file: &str, call: &PinnedCall, batch: RecordBatch) -> Result<RecordBatch>;
}

static REMOTE: OnceLock<Arc<dyn RemoteCompute>> = OnceLock::new();

/// Installs the process's way to remote workers; the first one installed stays.
pub fn install_remote(remote: Arc<dyn RemoteCompute>) {
    let _ = REMOTE.set(remote);
}

/// The installed [`RemoteCompute`], or why there is none.
pub(crate) fn remote() -> Result<&'static Arc<dyn RemoteCompute>> {
    REMOTE.get().ok_or_else(|| {
        Error::Unsupported(
            "shap.workers is set, but this process has no worker client: build with the `flight` feature and call shapfusion::flight::install() when setting up SQL sessions".into(),
        )
    })
}
