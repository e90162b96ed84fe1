//! Parameters of prepared statements: `?` placeholders numbered as JDBC and ADBC mean them, the
//! parameter schema a client binds to, and the parameter sets a client binds (each row of the
//! bound batches runs the statement once).

use std::collections::HashMap;
use std::ops::ControlFlow;

use arrow::array::RecordBatch;
use arrow::compute::{cast_with_options, CastOptions};
use arrow::datatypes::{DataType, Field};
use datafusion::common::ScalarValue;
use datafusion::execution::session_state::SessionState;
use datafusion::logical_expr::LogicalPlan;
use datafusion::sql::parser::{CopyToSource, Statement};
use datafusion::sql::sqlparser::ast::{visit_expressions, visit_expressions_mut, Expr, Value, Visit, VisitMut};
use datafusion::sql::sqlparser::tokenizer::Location;
use tonic::Status;

/// Parameter sets one bind may send: each runs the statement once, so more rows belong in a
/// table the statement joins.
pub const MAX_PARAMETER_SETS: usize = 1024;

/// Bytes of parameters one bind may send. A session holds up to 64 prepared statements with
/// their bindings, so each stays small; lookups bind a few values.
pub const MAX_PARAMETER_BYTES: u64 = 1 << 20;

/// Values (sets times parameters) one bind may hold once decoded.
const MAX_PARAMETER_VALUES: usize = 1 << 16;

/// Parameters a statement may have.
const MAX_PARAMETERS: usize = 1024;

/// Parses `sql` in the session's dialect, numbering each bare `?` by its place in the text
/// (`$1`, `$2`, …). JDBC and ADBC write parameters as `?`; DataFusion would read every `?` as
/// one parameter named `?`. `$1` and `?1` already carry their numbers; a statement that mixes
/// them with bare `?` is refused, since the two numberings would disagree.
pub fn parse_numbered(state: &SessionState, sql: &str) -> datafusion::error::Result<Statement> {
    let dialect = state.config().options().sql_parser.dialect;
    let mut statement = state.sql_to_statement(sql, &dialect)?;
    match &mut statement {
        Statement::Statement(s) => number_question_marks(s.as_mut())?,
        Statement::CopyTo(copy) => {
            if let CopyToSource::Query(query) = &mut copy.source {
                number_question_marks(query.as_mut())?;
            }
        }
        _ => {}
    }
    Ok(statement)
}

/// Rewrites the bare `?` placeholders of `node` to `$1`, `$2`, … in the order they appear in
/// the text (the parser's spans), whatever order the tree keeps them in.
fn number_question_marks<N: Visit + VisitMut>(node: &mut N) -> datafusion::error::Result<()> {
    let mut bare: Vec<Location> = Vec::new();
    let mut numbered = false;
    let _ = visit_expressions(&*node, |e| {
        if let Expr::Value(v) = e {
            if let Value::Placeholder(p) = &v.value {
                if p == "?" {
                    bare.push(v.span.start);
                } else if p.len() > 1 && p[1..].bytes().all(|b| b.is_ascii_digit()) {
                    numbered = true;
                }
            }
        }
        ControlFlow::<()>::Continue(())
    });
    if bare.is_empty() {
        return Ok(());
    }
    if numbered {
        return Err(datafusion::error::DataFusionError::Plan(
            "this statement mixes ? placeholders with numbered ones ($1, ?1); use one style".to_string(),
        ));
    }
    let mut in_text = bare.clone();
    in_text.sort_unstable();
    in_text.dedup();
    // Every `?` has its own place in the text; were spans missing (all alike), the tree's order
    // stands in for the text's.
    let by_place = in_text.len() == bare.len();
    let mut next = 0usize;
    let _ = visit_expressions_mut(node, |e| {
        if let Expr::Value(v) = e {
            if matches!(&v.value, Value::Placeholder(p) if p == "?") {
                let index = if by_place { in_text.binary_search(&v.span.start).unwrap_or(next) } else { next };
                next += 1;
                v.value = Value::Placeholder(format!("${}", index + 1));
            }
        }
        ControlFlow::<()>::Continue(())
    });
    Ok(())
}

/// The parameters of `plan`: `$1` … `$n`, each with the type DataFusion inferred for it (`Null`
/// where the statement does not say, such as `SELECT $1`). Named parameters (`$name`) are
/// refused: Flight SQL binds parameters by position.
pub fn parameter_fields(plan: &LogicalPlan) -> Result<Vec<Field>, Status> {
    let found = plan.get_parameter_fields().map_err(|e| Status::invalid_argument(format!("the statement's parameters: {e}")))?;
    let mut by_number: HashMap<usize, Option<DataType>> = HashMap::with_capacity(found.len());
    for (id, field) in found {
        let number = id.strip_prefix('$').and_then(|n| n.parse::<usize>().ok()).filter(|n| (1..=MAX_PARAMETERS).contains(n)).ok_or_else(|| {
            Status::invalid_argument(format!(
                "placeholder {id}: parameters are positional here (?, or $1 to ${MAX_PARAMETERS}); Flight SQL binds them by position"
            ))
        })?;
        by_number.insert(number, field.map(|f| f.data_type().clone()));
    }
    let count = by_number.keys().copied().max().unwrap_or(0);
    Ok((1..=count)
        .map(|n| {
            let data_type = by_number.get(&n).cloned().flatten().unwrap_or(DataType::Null);
            Field::new(format!("${n}"), data_type, true)
        })
        .collect())
}

/// The parameter sets of `batches`, one a row, each value cast to its parameter's type where
/// the statement gives one (a client binding an `int` where the column is `BIGINT` or `DOUBLE`).
pub fn parameter_sets(fields: &[Field], batches: &[RecordBatch]) -> Result<Vec<Vec<ScalarValue>>, Status> {
    let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
    if rows > MAX_PARAMETER_SETS {
        return Err(Status::out_of_range(format!(
            "{rows} parameter sets bound; at most {MAX_PARAMETER_SETS} run at once (each runs the statement once): put more in a table and join it"
        )));
    }
    if rows.saturating_mul(fields.len()) > MAX_PARAMETER_VALUES {
        return Err(Status::out_of_range(format!(
            "{rows} parameter sets of {} values bound; at most {MAX_PARAMETER_VALUES} values a bind: put more in a table and join it",
            fields.len()
        )));
    }
    let strict = CastOptions { safe: false, ..Default::default() };
    let mut sets = Vec::with_capacity(rows);
    for batch in batches {
        if batch.num_columns() != fields.len() {
            return Err(Status::invalid_argument(format!(
                "{} parameter values bound a row; the statement has {} parameter(s) ({})",
                batch.num_columns(),
                fields.len(),
                fields.iter().map(|f| f.name().as_str()).collect::<Vec<_>>().join(", ")
            )));
        }
        let mut columns = Vec::with_capacity(fields.len());
        for (field, column) in fields.iter().zip(batch.columns()) {
            let wanted = field.data_type();
            let column = if wanted.is_null() || wanted == column.data_type() {
                column.clone()
            } else {
                cast_with_options(column, wanted, &strict).map_err(|e| {
                    Status::invalid_argument(format!(
                        "parameter {}: a {} value where the statement needs {wanted}: {e}",
                        field.name(),
                        column.data_type()
                    ))
                })?
            };
            columns.push(column);
        }
        for row in 0..batch.num_rows() {
            let set = columns
                .iter()
                .zip(fields)
                .map(|(column, field)| {
                    ScalarValue::try_from_array(column, row).map_err(|e| Status::invalid_argument(format!("parameter {}: {e}", field.name())))
                })
                .collect::<Result<Vec<_>, Status>>()?;
            sets.push(set);
        }
    }
    Ok(sets)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int32Array, StringArray};
    use datafusion::prelude::SessionContext;
    use std::sync::Arc;

    async fn plan_of(ctx: &SessionContext, sql: &str) -> datafusion::error::Result<LogicalPlan> {
        let state = ctx.state();
        let statement = parse_numbered(&state, sql)?;
        state.statement_to_plan(statement).await
    }

    fn context() -> SessionContext {
        let ctx = SessionContext::new();
        let batch = RecordBatch::try_from_iter([
            ("id", Arc::new(arrow::array::Int64Array::from(vec![1, 2, 3])) as _),
            ("name", Arc::new(StringArray::from(vec!["a", "b", "c"])) as _),
        ])
        .unwrap();
        ctx.register_batch("t", batch).unwrap();
        ctx
    }

    #[tokio::test]
    async fn question_marks_are_numbered_in_the_order_of_the_text() {
        let ctx = context();
        // The tree keeps the projection before the filter and the filter before the limit; the
        // text's order is what a client binds by.
        let plan = plan_of(&ctx, "SELECT id + ? AS x FROM t WHERE name = ? AND id > ? LIMIT 10").await.unwrap();
        let fields = parameter_fields(&plan).unwrap();
        let names: Vec<&str> = fields.iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, ["$1", "$2", "$3"]);
        assert_eq!(fields[1].data_type(), &DataType::Utf8, "name = ? is the second parameter");
        assert_eq!(fields[2].data_type(), &DataType::Int64, "id > ? is the third parameter");
        let values = vec![ScalarValue::Int64(Some(100)), ScalarValue::Utf8(Some("b".into())), ScalarValue::Int64(Some(0))];
        let got = ctx.execute_logical_plan(plan.with_param_values(values).unwrap()).await.unwrap().collect().await.unwrap();
        let x = got[0].column(0).as_any().downcast_ref::<arrow::array::Int64Array>().unwrap();
        assert_eq!(x.values(), &[102]);
    }

    #[tokio::test]
    async fn numbered_placeholders_stay_and_mixed_or_named_ones_are_refused() {
        let ctx = context();
        let plan = plan_of(&ctx, "SELECT name FROM t WHERE id = $2 OR id = $1").await.unwrap();
        assert_eq!(parameter_fields(&plan).unwrap().len(), 2);
        let e = plan_of(&ctx, "SELECT name FROM t WHERE id = $1 OR id = ?").await.unwrap_err().to_string();
        assert!(e.contains("mixes ? placeholders"), "{e}");
        let plan = plan_of(&ctx, "SELECT name FROM t WHERE id = $id").await.unwrap();
        let e = parameter_fields(&plan).unwrap_err();
        assert!(e.message().contains("$id") && e.message().contains("positional"), "{e}");
        // A statement with no parameters has an empty parameter schema.
        assert!(parameter_fields(&plan_of(&ctx, "SELECT 1").await.unwrap()).unwrap().is_empty());
    }

    #[test]
    fn bound_rows_become_parameter_sets_cast_to_the_statement_types() {
        let fields = [Field::new("$1", DataType::Int64, true), Field::new("$2", DataType::Null, true)];
        let batch =
            RecordBatch::try_from_iter([("a", Arc::new(Int32Array::from(vec![7, 8])) as _), ("b", Arc::new(StringArray::from(vec!["x", "y"])) as _)])
                .unwrap();
        let sets = parameter_sets(&fields, std::slice::from_ref(&batch)).unwrap();
        assert_eq!(
            sets,
            vec![
                vec![ScalarValue::Int64(Some(7)), ScalarValue::Utf8(Some("x".into()))],
                vec![ScalarValue::Int64(Some(8)), ScalarValue::Utf8(Some("y".into()))]
            ]
        );
        let e = parameter_sets(&fields[..1], &[batch]).unwrap_err();
        assert!(e.message().contains("2 parameter values") && e.message().contains("1 parameter(s) ($1)"), "{e}");
        let text = RecordBatch::try_from_iter([("a", Arc::new(StringArray::from(vec!["seven"])) as _)]).unwrap();
        let e = parameter_sets(&fields[..1], &[text]).unwrap_err();
        assert!(e.message().contains("parameter $1") && e.message().contains("Int64"), "{e}");
        let many = RecordBatch::try_from_iter([("a", Arc::new(Int32Array::from(vec![1; MAX_PARAMETER_SETS + 1])) as _)]).unwrap();
        assert_eq!(parameter_sets(&fields[..1], &[many]).unwrap_err().code(), tonic::Code::OutOfRange);
    }
}
