//! DataFusion's errors and shapfusion's, both ways, keeping the cause and the kind: the edge
//! between the SQL engine and the library. (`From<DataFusionError>` cannot be written for
//! `shapfusion_core::Error` here, both types being foreign to this crate, and the core does not
//! depend on DataFusion: these two functions are that conversion.)

use datafusion::error::DataFusionError;
use shapfusion_core::{Error, ErrorKind};

/// A DataFusion error as shapfusion's, with what was being done, DataFusion's error kept as the
/// cause. The kind is that of an error of ours DataFusion carried (a UDF's), else what DataFusion
/// says went wrong: a bad statement is an invalid argument, a memory limit a resource exhausted,
/// an unreachable store unavailable, and so on.
pub fn from_datafusion(context: impl Into<String>, e: DataFusionError) -> Error {
    let context = context.into();
    let kind = match e.find_root() {
        DataFusionError::External(inner) => inner.downcast_ref::<Error>().map_or(ErrorKind::Internal, Error::kind),
        DataFusionError::Plan(_) | DataFusionError::SQL(..) | DataFusionError::SchemaError(..) | DataFusionError::Configuration(_) => {
            ErrorKind::InvalidArgument
        }
        DataFusionError::NotImplemented(_) => ErrorKind::Unsupported,
        DataFusionError::ResourcesExhausted(_) => ErrorKind::ResourceExhausted,
        DataFusionError::IoError(_) => ErrorKind::Io,
        DataFusionError::ObjectStore(store) => match store.as_ref() {
            object_store::Error::NotFound { .. } => ErrorKind::NotFound,
            // One of ours, such as a Parquet file the guard refused (`file_guard`).
            object_store::Error::Generic { source, .. } if source.downcast_ref::<Error>().is_some() => {
                source.downcast_ref::<Error>().map_or(ErrorKind::Unavailable, Error::kind)
            }
            _ => ErrorKind::Unavailable,
        },
        DataFusionError::ParquetError(_) | DataFusionError::ArrowError(..) => ErrorKind::BadData,
        _ => ErrorKind::Internal,
    };
    Error::external(kind, context, e)
}

/// One of our errors as DataFusion's: carried whole (kind and causes), so a query's caller gets
/// it back by [`from_datafusion`].
pub fn to_datafusion(e: Error) -> DataFusionError {
    DataFusionError::External(Box::new(e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_errors_cross_datafusion_with_their_kind_and_cause() {
        let ours = Error::ResourceExhausted("the background needs 3 GiB, over the bound".into()).context("shap()");
        let back = from_datafusion("running the query", to_datafusion(ours));
        assert_eq!(back.kind(), ErrorKind::ResourceExhausted);
        let report = back.report();
        assert!(report.starts_with("running the query: "), "{report}");
        assert_eq!(report.matches("over the bound").count(), 1, "{report}");
        // Wrapped again by DataFusion (a context, a shared error), still found.
        let wrapped = DataFusionError::Context("planning".into(), Box::new(to_datafusion(Error::ModelNotFound("no model x".into()))));
        assert_eq!(from_datafusion("q", wrapped).kind(), ErrorKind::NotFound);
    }

    #[test]
    fn datafusion_errors_get_the_kind_of_what_went_wrong() {
        let kind = |e: DataFusionError| from_datafusion("q", e).kind();
        assert_eq!(kind(DataFusionError::Plan("no table t".into())), ErrorKind::InvalidArgument);
        assert_eq!(kind(DataFusionError::ResourcesExhausted("memory pool".into())), ErrorKind::ResourceExhausted);
        assert_eq!(kind(DataFusionError::NotImplemented("lateral".into())), ErrorKind::Unsupported);
        let not_found = object_store::Error::NotFound { path: "t.parquet".into(), source: "gone".into() };
        assert_eq!(kind(DataFusionError::ObjectStore(Box::new(not_found))), ErrorKind::NotFound);
        assert_eq!(kind(DataFusionError::Internal("bug".into())), ErrorKind::Internal);
    }
}
