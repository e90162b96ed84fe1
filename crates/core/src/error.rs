//! Typed errors. Each variant names what went wrong and where (file, tree, node, column, worker),
//! and [`Error::kind`] says what kind of failure it is: the one thing every edge maps from (the
//! CLI's exit message, a Flight status, a DataFusion error, a Python exception), so the same
//! failure reads the same everywhere. A cause from another library is kept as the error's
//! [`source`](std::error::Error::source), never flattened into a string, and
//! [`Error::context`] adds what was being done without losing the cause's kind.

use std::path::PathBuf;

/// What kind of failure an error is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The caller asked for something that cannot be done as asked: a bad option, flag, URL,
    /// query or request.
    InvalidArgument,
    /// What was given to work on is wrong: a corrupt or invalid model file, input rows without
    /// a feature or of the wrong type, an empty background.
    BadData,
    /// A model, file or name that resolves to nothing.
    NotFound,
    /// Reading or writing a file failed (permissions, a full disk, an address in use).
    Io,
    /// A machine or service could not be reached or stopped answering (a worker, an object
    /// store, a cluster), or holds another version than planned: trying again may succeed.
    Unavailable,
    /// A bound was reached: memory for tables, rows or bytes per request, a full queue.
    ResourceExhausted,
    /// Not built: a path this build, this model or this device does not have yet.
    Unsupported,
    /// Something went wrong inside this process, not with what it was given.
    Internal,
}

impl ErrorKind {
    /// The kind's name, for logs and messages (`invalid argument`, `unavailable`, ...).
    pub const fn name(self) -> &'static str {
        match self {
            ErrorKind::InvalidArgument => "invalid argument",
            ErrorKind::BadData => "bad data",
            ErrorKind::NotFound => "not found",
            ErrorKind::Io => "I/O",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::ResourceExhausted => "resource exhausted",
            ErrorKind::Unsupported => "not supported",
            ErrorKind::Internal => "internal",
        }
    }
}

impl std::fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

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

    /// An option, flag, URL, query or request that cannot be done as asked.
    #[error("{0}")]
    InvalidArgument(String),

    /// Data given to work on that is wrong, not about one column: rows, a background, a file
    /// that is not what it should be.
    #[error("{0}")]
    BadData(String),

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
        /// What kind of failure: [`ErrorKind::Unavailable`] when the worker could not be reached
        /// or stopped answering, else the kind the worker's own answer says.
        kind: ErrorKind,
    },

    /// A machine has another version of a model or background than the caller planned with.
    #[error("{0}")]
    VersionMismatch(String),

    /// A requested engine or path is not built: not in this build, for this model or on this
    /// device.
    #[error("{0}")]
    Unsupported(String),

    /// A machine or service could not be reached, or stopped answering.
    #[error("{0}")]
    Unavailable(String),

    /// A bound was reached (memory for tables, rows or bytes per request, a full queue).
    #[error("{0}")]
    ResourceExhausted(String),

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

    /// An error of a library this one builds on (Parquet, DataFusion, the network, an object
    /// store), with what we were doing; the library's error is kept as the source.
    #[error("{context}: {source}")]
    External {
        /// What kind of failure it is.
        kind: ErrorKind,
        /// What we were doing.
        context: String,
        /// The library's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },

    /// An error with what was being done when it happened (see [`Error::context`]).
    #[error("{context}: {source}")]
    Context {
        /// What we were doing.
        context: String,
        /// The error, whose kind this one has.
        #[source]
        source: Box<Error>,
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
    pub fn external(kind: ErrorKind, context: impl Into<String>, source: impl std::error::Error + Send + Sync + 'static) -> Self {
        Error::External { kind, context: context.into(), source: Box::new(source) }
    }

    /// This error, after `context` (what was being done), keeping its kind and cause.
    pub fn context(self, context: impl Into<String>) -> Self {
        Error::Context { context: context.into(), source: Box::new(self) }
    }

    /// What kind of failure this is: what every edge maps to its own form.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => ErrorKind::NotFound,
            Error::Io { .. } => ErrorKind::Io,
            Error::ModelFormat { .. } | Error::InvalidTree { .. } | Error::MissingColumn { .. } | Error::ColumnType { .. } => ErrorKind::BadData,
            Error::BadData(_) | Error::Arrow { .. } => ErrorKind::BadData,
            Error::UnsupportedModel { .. } | Error::Unsupported(_) => ErrorKind::Unsupported,
            Error::InvalidArgument(_) => ErrorKind::InvalidArgument,
            Error::ModelNotFound(_) => ErrorKind::NotFound,
            Error::Remote { kind, .. } | Error::External { kind, .. } => *kind,
            Error::VersionMismatch(_) | Error::Unavailable(_) => ErrorKind::Unavailable,
            Error::ResourceExhausted(_) => ErrorKind::ResourceExhausted,
            Error::Internal(_) | Error::Draw { .. } => ErrorKind::Internal,
            Error::Context { source, .. } => source.kind(),
        }
    }

    /// The error under any [`Error::context`] wrappers: the one that says what failed.
    pub fn innermost(&self) -> &Error {
        match self {
            Error::Context { source, .. } => source.innermost(),
            e => e,
        }
    }

    /// The message with every cause below it, one per line (`caused by: …`), as the command
    /// line prints an error: the display already holds the direct causes' text where the
    /// variant writes it, so only causes it does not show are added.
    pub fn report(&self) -> String {
        let mut out = self.to_string();
        let mut cause = std::error::Error::source(self);
        while let Some(c) = cause {
            let text = c.to_string();
            if !out.contains(&text) {
                out.push_str("\n  caused by: ");
                out.push_str(&text);
            }
            cause = c.source();
        }
        out
    }
}
