//! The SQL functions for a DataFusion built apart from this crate, through `datafusion-ffi`:
//! Python's `datafusion` package loads each one from a PyCapsule named [`CAPSULE_NAME`]
//! holding an `FFI_ScalarUDF` (the `python/` package makes those capsules).
//!
//! The FFI carries `return_field_from_args` with the constant arguments, so the functions work
//! as in `shapfusion sql`: one `shap` serves every model of the registry, planning reads the
//! model name from the query, checks the columns against that model and fixes the struct
//! type, and execution uses the model version planning recorded in the return field. The FFI
//! does not carry `simplify`, so calls are not pinned in the plan; the return field's metadata
//! pins them, as for any host that plans without simplification.
//!
//! The FFI is stable within one DataFusion major version only: a host must report the major
//! version [`ffi_version`] returns.

use std::ffi::CStr;
use std::sync::Arc;

use datafusion::logical_expr::ScalarUDF;
use datafusion_ffi::udf::FFI_ScalarUDF;

use super::options::ShapOptions;
use crate::registry::ModelRegistry;
use shapfusion_core::error::Result;

/// The PyCapsule name Python's `datafusion` expects for a scalar function.
pub const CAPSULE_NAME: &CStr = c"datafusion_scalar_udf";

/// The DataFusion release this crate is built with (the host's major version must match).
pub const DATAFUSION_VERSION: &str = datafusion::DATAFUSION_VERSION;

/// The `datafusion-ffi` major version (what `datafusion_ffi::version()` reports to hosts).
pub fn ffi_version() -> u64 {
    datafusion_ffi::version()
}

/// `shap`, `shap_interactions` and `predict` over `registry` with `options`, ready to cross the
/// FFI. Use a [`ModelRegistry::names_only`] registry when queries come from anyone but the
/// operator: a query can then name only the registered models.
pub fn exported_udfs(registry: Arc<ModelRegistry>, options: ShapOptions) -> Result<Vec<ExportedUdf>> {
    Ok(super::udfs(registry, options)?.into_iter().map(|udf| ExportedUdf { udf: Arc::new(udf) }).collect())
}

/// One SQL function, to hand to a host as many times as it asks.
#[derive(Debug, Clone)]
pub struct ExportedUdf {
    udf: Arc<ScalarUDF>,
}

impl ExportedUdf {
    /// The function's SQL name.
    pub fn name(&self) -> &str {
        self.udf.name()
    }

    /// A new FFI handle on the function; the host owns it (and releases it through the FFI).
    pub fn to_ffi(&self) -> FFI_ScalarUDF {
        FFI_ScalarUDF::from(self.udf.clone())
    }

    /// The function itself, for a host in this process.
    pub fn udf(&self) -> &Arc<ScalarUDF> {
        &self.udf
    }
}

#[cfg(test)]
mod tests {
    use arrow::array::{Array, AsArray, RecordBatch};
    use arrow::compute::concat_batches;
    use arrow::datatypes::Float64Type;
    use datafusion::logical_expr::ScalarUDFImpl;
    use datafusion::prelude::{ParquetReadOptions, SessionContext};

    use super::*;
    use crate::ShapUdf;

    const MODEL: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/models/fraud.json");
    const PAYMENTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/data/payments.parquet");
    const FEATURES: &str = "amount, age, account_days, hour, tx_24h, merchant_risk, country_code, card_present";

    /// What `datafusion_ffi` reports for a library other than this one: the handles below then
    /// take the foreign path (every call through the FFI's C functions), as in another process
    /// image such as Python's `datafusion`.
    extern "C" fn another_library() -> usize {
        datafusion_ffi::get_library_marker_id() + 1
    }

    async fn query(ctx: &SessionContext, sql: &str) -> datafusion::error::Result<RecordBatch> {
        let batches = ctx.sql(sql).await?.collect().await?;
        Ok(concat_batches(&batches[0].schema(), &batches)?)
    }

    #[tokio::test]
    async fn functions_across_the_ffi_give_what_the_local_ones_give() {
        let registry = Arc::new(ModelRegistry::names_only(None));
        registry.register("fraud", MODEL).unwrap();
        let exported = exported_udfs(registry.clone(), ShapOptions::default()).unwrap();
        assert_eq!(exported.iter().map(ExportedUdf::name).collect::<Vec<_>>(), ["shap", "shap_interactions", "margin"]);

        let foreign = SessionContext::new();
        for udf in &exported {
            let mut handle = udf.to_ffi();
            handle.library_marker_id = another_library;
            let imported: Arc<dyn ScalarUDFImpl> = (&handle).into();
            assert!(imported.downcast_ref::<ShapUdf>().is_none(), "the foreign path was not taken");
            foreign.register_udf(ScalarUDF::new_from_shared_impl(imported));
        }
        let local = SessionContext::new_with_config(crate::session_config());
        crate::register_with(&local, registry).unwrap();
        for ctx in [&foreign, &local] {
            ctx.register_parquet("payments", PAYMENTS, ParquetReadOptions::default()).await.unwrap();
        }

        let sql = format!("SELECT id, shap('fraud', {FEATURES}) AS phi, predict('fraud', {FEATURES}) AS margin, shap_interactions('fraud', {FEATURES}) AS inter FROM payments ORDER BY id");
        let (theirs, ours) = (query(&foreign, &sql).await.unwrap(), query(&local, &sql).await.unwrap());
        assert_eq!(theirs.num_rows(), 10_000);
        assert_eq!(theirs, ours);
        // Additivity through the FFI: the struct's fields sum to the margin.
        let phi = theirs.column(1).as_struct();
        let margin = theirs.column(2).as_primitive::<Float64Type>();
        for row in [0, 4_321, 9_999] {
            let sum: f64 = phi.columns().iter().map(|c| c.as_primitive::<Float64Type>().value(row)).sum();
            assert!((sum - margin.value(row)).abs() < 1e-9, "row {row}: {sum} vs {}", margin.value(row));
        }
        assert!(phi.null_count() == 0);

        // Planning errors cross the FFI with the model's usage.
        let err = query(&foreign, "SELECT shap('fraud', amount) FROM payments").await.unwrap_err().to_string();
        assert!(err.contains("takes 8 features in this order"), "{err}");
        // A query reaches registered models only (a registered model's own URL is that model).
        let other = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/fixtures/xgb_regression/model.json");
        let err = query(&foreign, &format!("SELECT shap('{other}', {FEATURES}) FROM payments")).await.unwrap_err().to_string();
        assert!(err.contains("registered models only: fraud"), "{err}");
    }

    #[test]
    fn the_ffi_version_is_the_datafusion_major_version() {
        let major: u64 = DATAFUSION_VERSION.split('.').next().unwrap().parse().unwrap();
        assert_eq!(ffi_version(), major);
    }
}
