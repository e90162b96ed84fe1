//! shapfusion errors as Python exceptions, with the CLI's messages: a missing file is a
//! `FileNotFoundError`, bad input (model, table, option) a `ValueError`, a path this build or
//! model does not have a `NotImplementedError`.

use pyo3::exceptions::{PyFileNotFoundError, PyNotImplementedError, PyOSError, PyRuntimeError, PyValueError};
use pyo3::PyErr;
use shapfusion_core::Error;

/// The Python exception for `error`; the message is the error's `Display`, as the CLI prints it.
pub fn to_py(error: Error) -> PyErr {
    let message = error.to_string();
    match &error {
        Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => PyFileNotFoundError::new_err(message),
        Error::Io { .. } => PyOSError::new_err(message),
        Error::ModelNotFound(_) => PyFileNotFoundError::new_err(message),
        Error::Unavailable(_) => PyNotImplementedError::new_err(message),
        Error::Remote { .. } | Error::Draw { .. } | Error::Internal(_) | Error::VersionMismatch(_) => PyRuntimeError::new_err(message),
        Error::ModelFormat { .. }
        | Error::InvalidTree { .. }
        | Error::UnsupportedModel { .. }
        | Error::MissingColumn { .. }
        | Error::ColumnType { .. }
        | Error::Input(_)
        | Error::Arrow { .. }
        | Error::External { .. } => PyValueError::new_err(message),
    }
}
