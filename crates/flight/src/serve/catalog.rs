//! What a Flight SQL client asks before it queries: the server's SQL info, and the catalogs,
//! schemas, tables and table types of the client's own session (database browsers, BI tools,
//! JDBC's `DatabaseMetaData`, ADBC's `get_objects` and `get_table_schema`). Each listing is
//! the session's own: the operator's `--table` tables and the tables the client made.

use std::sync::Arc;

use arrow::array::{new_empty_array, RecordBatch};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use arrow_flight::sql::metadata::{SqlInfoData, SqlInfoDataBuilder};
use arrow_flight::sql::{
    CommandGetCatalogs, CommandGetDbSchemas, CommandGetTableTypes, CommandGetTables, SqlInfo, SqlNullOrdering, SqlSupportedCaseSensitivity,
    SqlSupportedTransaction,
};
use datafusion::datasource::TableType;
use datafusion::prelude::SessionContext;
use tonic::Status;

use super::service::df_status;

/// The table types a listing names (`TableType`'s, by JDBC's names).
const TABLE_TYPES: [&str; 3] = ["TABLE", "VIEW", "LOCAL TEMPORARY"];

fn table_type_name(table_type: TableType) -> &'static str {
    match table_type {
        TableType::Base => TABLE_TYPES[0],
        TableType::View => TABLE_TYPES[1],
        TableType::Temporary => TABLE_TYPES[2],
    }
}

fn arrow_status(what: &str, e: arrow_flight::error::FlightError) -> Status {
    Status::internal(format!("building the {what} listing: {e}"))
}

/// The server's answers to `GetSqlInfo`: its name and version, and how its SQL (DataFusion's)
/// treats identifiers and nulls. `writes` says whether clients may write files (`COPY … TO`
/// under `--allow-write`).
pub fn sql_info(writes: bool, handle_timeout_ms: i32) -> SqlInfoData {
    let mut info = SqlInfoDataBuilder::new();
    info.append(SqlInfo::FlightSqlServerName, "shapfusion");
    info.append(SqlInfo::FlightSqlServerVersion, env!("CARGO_PKG_VERSION"));
    // The Arrow columnar format's version (Schema.fbs's MetadataVersion V5).
    info.append(SqlInfo::FlightSqlServerArrowVersion, "1.5.0");
    info.append(SqlInfo::FlightSqlServerReadOnly, !writes);
    info.append(SqlInfo::FlightSqlServerSql, true);
    info.append(SqlInfo::FlightSqlServerSubstrait, false);
    info.append(SqlInfo::FlightSqlServerTransaction, SqlSupportedTransaction::None as i32);
    info.append(SqlInfo::FlightSqlServerCancel, false);
    info.append(SqlInfo::FlightSqlServerBulkIngestion, false);
    info.append(SqlInfo::FlightSqlServerStatementTimeout, handle_timeout_ms);
    // DataFusion folds unquoted identifiers to lower case and keeps quoted ones as written;
    // nulls sort as the largest values (`datafusion.sql_parser.default_null_ordering`).
    info.append(SqlInfo::SqlIdentifierCase, SqlSupportedCaseSensitivity::SqlCaseSensitivityLowercase as i32);
    info.append(SqlInfo::SqlIdentifierQuoteChar, "\"");
    // Quoted identifiers keep their case and match it exactly, which the protocol's list of
    // sensitivities (insensitive, upper, lower) has no entry for.
    info.append(SqlInfo::SqlQuotedIdentifierCase, SqlSupportedCaseSensitivity::SqlCaseSensitivityUnknown as i32);
    info.append(SqlInfo::SqlAllTablesAreSelectable, true);
    info.append(SqlInfo::SqlNullOrdering, SqlNullOrdering::SqlNullsSortedHigh as i32);
    info.build().expect("a fixed list of SqlInfo values of their documented types")
}

/// `GetCatalogs` over `ctx`.
pub fn catalogs(ctx: &SessionContext, query: CommandGetCatalogs) -> Result<RecordBatch, Status> {
    let mut builder = query.into_builder();
    for name in ctx.catalog_names() {
        builder.append(name);
    }
    builder.build().map_err(|e| arrow_status("catalog", e))
}

/// `GetDbSchemas` over `ctx` (the builder applies the client's catalog and pattern filters).
pub fn schemas(ctx: &SessionContext, query: CommandGetDbSchemas) -> Result<RecordBatch, Status> {
    let mut builder = query.into_builder();
    for catalog_name in ctx.catalog_names() {
        let Some(catalog) = ctx.catalog(&catalog_name) else { continue };
        for schema_name in catalog.schema_names() {
            builder.append(&catalog_name, schema_name);
        }
    }
    builder.build().map_err(|e| arrow_status("schema", e))
}

/// `GetTables` over `ctx`, with each table's Arrow schema when the client asks for it.
pub async fn tables(ctx: &SessionContext, query: CommandGetTables) -> Result<RecordBatch, Status> {
    let no_columns = Arc::new(Schema::empty());
    let mut builder = query.into_builder();
    let with_schema = builder.include_schema();
    for catalog_name in ctx.catalog_names() {
        let Some(catalog) = ctx.catalog(&catalog_name) else { continue };
        for schema_name in catalog.schema_names() {
            let Some(schema) = catalog.schema(&schema_name) else { continue };
            for table_name in schema.table_names() {
                let Some(table) = schema.table(&table_name).await.map_err(df_status)? else { continue };
                let columns = if with_schema { table.schema() } else { Arc::clone(&no_columns) };
                builder
                    .append(&catalog_name, &schema_name, &table_name, table_type_name(table.table_type()), &columns)
                    .map_err(|e| arrow_status("table", e))?;
            }
        }
    }
    builder.build().map_err(|e| arrow_status("table", e))
}

/// `GetTableTypes`: the types a `GetTables` listing may name.
pub fn table_types(query: CommandGetTableTypes) -> Result<RecordBatch, Status> {
    let mut builder = query.into_builder();
    for table_type in TABLE_TYPES {
        builder.append(table_type);
    }
    builder.build().map_err(|e| arrow_status("table type", e))
}

/// The empty answer to `GetPrimaryKeys` (DataFusion's tables have no keys), in the schema
/// Flight SQL gives it.
pub fn primary_keys_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("catalog_name", DataType::Utf8, true),
        Field::new("db_schema_name", DataType::Utf8, true),
        Field::new("table_name", DataType::Utf8, false),
        Field::new("column_name", DataType::Utf8, false),
        Field::new("key_name", DataType::Utf8, true),
        Field::new("key_sequence", DataType::Int32, false),
    ]))
}

/// The schema of Flight SQL's answers to `GetExportedKeys`, `GetImportedKeys` and
/// `GetCrossReference` (always empty here: DataFusion's tables have no foreign keys).
pub fn foreign_keys_schema() -> SchemaRef {
    let text = |name: &str, nullable: bool| Field::new(name, DataType::Utf8, nullable);
    Arc::new(Schema::new(vec![
        text("pk_catalog_name", true),
        text("pk_db_schema_name", true),
        text("pk_table_name", false),
        text("pk_column_name", false),
        text("fk_catalog_name", true),
        text("fk_db_schema_name", true),
        text("fk_table_name", false),
        text("fk_column_name", false),
        Field::new("key_sequence", DataType::Int32, false),
        text("fk_key_name", true),
        text("pk_key_name", true),
        Field::new("update_rule", DataType::UInt8, false),
        Field::new("delete_rule", DataType::UInt8, false),
    ]))
}

/// A batch of no rows in `schema`.
pub fn no_rows(schema: SchemaRef) -> RecordBatch {
    let columns = schema.fields().iter().map(|f| new_empty_array(f.data_type())).collect();
    RecordBatch::try_new(schema, columns).expect("empty columns of the schema's own types")
}
