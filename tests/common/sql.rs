//! Helpers for the SQL tests (local sessions and Ballista clusters alike).

use arrow::array::{Array, RecordBatch};
use arrow::compute::concat_batches;
use datafusion::prelude::SessionContext;
use shapfusion::pipeline::{explain_with_model, ExplainOptions};
use shapfusion::OutputKind;

use super::{read_parquet, Fixture};

/// The fixture's feature columns, quoted, in the model's order (the UDFs' arguments).
pub fn feature_list(f: &Fixture) -> String {
    f.model.feature_names().iter().map(|n| format!("\"{n}\"")).collect::<Vec<_>>().join(", ")
}

/// Runs `sql` and concatenates its result; panics with the statement on failure.
pub async fn query(ctx: &SessionContext, sql: &str) -> RecordBatch {
    let batches = ctx.sql(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}")).collect().await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    concat_batches(&batches[0].schema(), &batches).unwrap()
}

/// The error `sql` fails with, from planning or execution; panics if it succeeds.
pub async fn query_err(ctx: &SessionContext, sql: &str) -> String {
    match ctx.sql(sql).await {
        Err(e) => e.to_string(),
        Ok(df) => df.collect().await.err().map(|e| e.to_string()).unwrap_or_else(|| panic!("{sql} succeeded")),
    }
}

/// What `explain` writes for the fixture's input.
pub fn explain_output(f: &Fixture, output: OutputKind) -> RecordBatch {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o.parquet");
    explain_with_model(f.model.clone(), &f.input_path(), &out, &ExplainOptions { output, ..Default::default() }).unwrap();
    read_parquet(&out)
}

/// Whether two arrays hold the same bits (type, nulls and values).
pub fn same_bits(a: &dyn Array, b: &dyn Array) -> bool {
    a.to_data() == b.to_data()
}
