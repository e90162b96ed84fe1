//! Typed errors for the library. Each variant names what went wrong and where (file, tree,
//! node, column), so the CLI (and later SQL/Flight) can render them once at the edge.

use std::path::PathBuf;

/// Result alias used across the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong while loading a model, reading rows or explaining them.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file could not be opened, read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file concerned.
        path: PathBuf,
        /// The underlying OS error.
        #[source]
        source: std::io::Error,
    },

    /// A model file is not valid JSON / UBJSON / LightGBM text, or lacks a required field.
    #[error("{path}: not a valid {format} model: {detail}")]
    ModelFormat {
        /// The model file (or `<memory>` for bytes).
        path: String,
        /// The format we tried to read.
        format: &'static str,
        /// What was wrong, with the location inside the file where known.
        detail: String,
    },

    /// A model parsed, but a tree is structurally wrong (bad child index, cycle, ...).
    #[error("{path}: tree {tree}, node {node}: {detail}")]
    InvalidTree {
        /// The model file.
        path: String,
        /// Index of the tree in the ensemble.
        tree: usize,
        /// Index of the node inside the tree (the library's own numbering).
        node: usize,
        /// What is wrong with it.
        detail: String,
    },

    /// The model uses a feature we do not implement (linear trees, vector leaves, ...).
    #[error("{path}: unsupported model: {detail}")]
    UnsupportedModel {
        /// The model file.
        path: String,
        /// Which feature, and what to do instead if anything.
        detail: String,
    },

    /// A feature the model needs is not among the input columns.
    #[error("input has no column named {name:?} (the model's feature {index}); input columns are: {available}")]
    MissingColumn {
        /// The model's feature name.
        name: String,
        /// Its position among the model's features.
        index: usize,
        /// The input's column names, comma separated.
        available: String,
    },

    /// An input column has a type that cannot be used as a feature.
    #[error("column {name:?} has type {data_type}, but the model needs a number (integer, float or boolean)")]
    ColumnType {
        /// The column.
        name: String,
        /// Its Arrow type, rendered.
        data_type: String,
    },

    /// Bad input that is not about one column: unreadable file, wrong layout, bad option.
    #[error("{0}")]
    Input(String),

    /// A model name or URL that resolves to nothing (names every place searched).
    #[error("{0}")]
    ModelNotFound(String),

    /// A Flight worker (or every worker of a pool) failed a request.
    #[error("worker {worker}: {message}")]
    Remote {
        /// The worker's URL, or `pool` when no worker could serve.
        worker: String,
        /// What went wrong, with the worker's own message where it sent one.
        message: String,
    },

    /// A machine has another version of a model or background than the caller planned with.
    #[error("{0}")]
    VersionMismatch(String),

    /// A requested engine or path is not available in this build or for this model.
    #[error("{0}")]
    Unavailable(String),

    /// Something went wrong inside this process, not with what it was given (a compute thread
    /// that could not start, a task that panicked): servers report it as an internal error,
    /// never as bad input.
    #[error("internal error: {0}")]
    Internal(String),

    /// A chart could not be drawn.
    #[error("drawing {chart}: {detail}")]
    Draw {
        /// The chart (its kind, or the file it was going to).
        chart: String,
        /// What the drawing library said.
        detail: String,
    },

    /// An Arrow error, with context.
    #[error("{context}: {source}")]
    Arrow {
        /// What we were doing.
        context: String,
        /// The Arrow error.
        #[source]
        source: arrow::error::ArrowError,
    },

    /// An error of a library this one builds on (Parquet, DataFusion, the network), with what we
    /// were doing; the library's error is kept as the source.
    #[error("{context}: {source}")]
    External {
        /// What we were doing.
        context: String,
        /// The library's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
}

impl Error {
    /// Wraps an I/O error with the path it concerns.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }

    /// Wraps an Arrow error with what we were doing.
    pub fn arrow(context: impl Into<String>, source: arrow::error::ArrowError) -> Self {
        Error::Arrow { context: context.into(), source }
    }

    /// Wraps another library's error with what we were doing, keeping it as the source.
    pub fn external(context: impl Into<String>, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        Error::External { context: context.into(), source: Box::new(source) }
    }
}
