//! shapfusion errors as Python exceptions, by their kind, with the CLI's messages (every cause
//! included): bad arguments and bad data are a `ValueError`, a missing model or file a
//! `FileNotFoundError`, another I/O failure an `OSError`, an unreachable machine or service a
//! `ConnectionError`, a bound reached a `MemoryError`, a path not built a
//! `NotImplementedError`, anything else a `RuntimeError`.

use pyo3::exceptions::{PyConnectionError, PyFileNotFoundError, PyMemoryError, PyNotImplementedError, PyOSError, PyRuntimeError, PyValueError};
use pyo3::PyErr;
use shapfusion_core::{Error, ErrorKind};

/// The Python exception for `error`; the message is the error with its causes, as the CLI
/// prints it.
pub fn to_py(error: Error) -> PyErr {
    let message = error.report();
    match error.kind() {
        ErrorKind::InvalidArgument | ErrorKind::BadData => PyValueError::new_err(message),
        ErrorKind::NotFound => PyFileNotFoundError::new_err(message),
        ErrorKind::Io => PyOSError::new_err(message),
        ErrorKind::Unavailable => PyConnectionError::new_err(message),
        ErrorKind::ResourceExhausted => PyMemoryError::new_err(message),
        ErrorKind::Unsupported => PyNotImplementedError::new_err(message),
        ErrorKind::Internal => PyRuntimeError::new_err(message),
    }
}
