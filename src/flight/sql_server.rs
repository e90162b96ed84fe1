//! `shapfusion serve`: a Flight SQL server backed by DataFusion with the shap UDFs (and, with
//! workers, the pool), so ADBC, JDBC and other Flight SQL clients run
//! `SELECT shap('fraud', amount, age) FROM payments` over tables on disk or object stores.
//!
//! Statements go through the standard path: `GetFlightInfo(CommandStatementQuery)` plans the
//! statement (DDL such as `CREATE EXTERNAL TABLE` and `SET` take effect here) and returns a
//! ticket; `DoGet` on the ticket streams the result. Prepared statements (used by JDBC) plan
//! the same way. All clients share one session: tables registered by one are visible to all.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::sql::server::FlightSqlService;
use arrow_flight::sql::{
    ActionClosePreparedStatementRequest, ActionCreatePreparedStatementRequest, ActionCreatePreparedStatementResult,
    CommandPreparedStatementQuery, CommandStatementQuery, CommandStatementUpdate, ProstMessageExt, SqlInfo,
    TicketStatementQuery,
};
use arrow_flight::{FlightDescriptor, FlightEndpoint, FlightInfo, HandshakeRequest, IpcMessage, SchemaAsIpc, Ticket};
use bytes::Bytes;
use datafusion::dataframe::DataFrame;
use datafusion::logical_expr::{DdlStatement, LogicalPlan};
use datafusion::prelude::SessionContext;
use futures::TryStreamExt;
use prost::Message;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status, Streaming};

use super::auth;
use crate::error::{Error, Result};

/// Planned statements wait this long for their `DoGet` before they are dropped.
const TICKET_TTL: Duration = Duration::from_secs(600);

/// The Flight SQL service of `shapfusion serve`.
pub struct SqlService {
    ctx: SessionContext,
    token: Option<String>,
    planned: Mutex<HashMap<Bytes, (Instant, DataFrame)>>,
    next_handle: AtomicU64,
}

fn df_status(e: datafusion::error::DataFusionError) -> Status {
    use datafusion::error::DataFusionError as E;
    match e.find_root() {
        E::Plan(_) | E::SQL(..) | E::SchemaError(..) | E::NotImplemented(_) => Status::invalid_argument(e.to_string()),
        _ => Status::internal(e.to_string()),
    }
}

impl SqlService {
    /// A service running statements on `ctx` (set up with the shap UDFs).
    pub fn new(ctx: SessionContext, token: Option<String>) -> Self {
        SqlService { ctx, token, planned: Mutex::new(HashMap::new()), next_handle: AtomicU64::new(1) }
    }

    /// Registers `NAME=URL` (`--table`): a Parquet or CSV (with header) file or directory,
    /// local or on an object store; the format comes from the extension, Parquet by default.
    pub async fn register_table(&self, arg: &str) -> Result<()> {
        let (name, location) = arg
            .split_once('=')
            .map(|(n, l)| (n.trim(), l.trim()))
            .filter(|(n, l)| !n.is_empty() && !l.is_empty())
            .ok_or_else(|| Error::Input(format!("--table {arg:?}: expected NAME=URL, e.g. payments=s3://bucket/payments/")))?;
        let location = if location.contains("://") { location.to_string() } else { crate::registry::to_url(location)?.to_string() };
        let (format, options) = if location.to_ascii_lowercase().ends_with(".csv") {
            ("CSV", "OPTIONS ('format.has_header' 'true')")
        } else {
            ("PARQUET", "")
        };
        let sql = format!("CREATE EXTERNAL TABLE \"{}\" STORED AS {format} LOCATION '{}' {options}", name.replace('"', "\"\""), location.replace('\'', "''"));
        let frame = self.plan(&sql).await.map_err(|s| Error::Input(format!("--table {name}: {}", s.message())))?;
        frame.collect().await.map_err(|e| Error::Input(format!("--table {name}: {e}")))?;
        tracing::info!(table = name, location, "registered table");
        Ok(())
    }

    fn authorize(&self, metadata: &MetadataMap) -> std::result::Result<(), Status> {
        auth::check(metadata, self.token.as_deref())
    }

    /// Plans `sql`; DDL and `SET` run now (as DataFusion does for `ctx.sql`). Object stores
    /// for `CREATE EXTERNAL TABLE … LOCATION 's3://…'` are registered from the environment and
    /// the statement's options first.
    async fn plan(&self, sql: &str) -> std::result::Result<DataFrame, Status> {
        let state = self.ctx.state();
        let plan = state.create_logical_plan(sql).await.map_err(df_status)?;
        if let LogicalPlan::Ddl(DdlStatement::CreateExternalTable(cmd)) = &plan {
            for location in &cmd.locations {
                register_store(&self.ctx, location, &cmd.options).map_err(|e| Status::invalid_argument(e.to_string()))?;
            }
        }
        self.ctx.execute_logical_plan(plan).await.map_err(df_status)
    }

    /// Keeps a planned statement for its `DoGet` and returns the FlightInfo pointing at it.
    fn ticket_for(&self, frame: DataFrame, descriptor: FlightDescriptor) -> std::result::Result<FlightInfo, Status> {
        let schema = frame.schema().as_arrow().clone();
        let handle = Bytes::from(format!("stmt-{}-{}", std::process::id(), self.next_handle.fetch_add(1, Ordering::Relaxed)));
        {
            let mut planned = self.planned.lock().expect("planned statements");
            planned.retain(|_, (at, _)| at.elapsed() < TICKET_TTL);
            planned.insert(handle.clone(), (Instant::now(), frame));
        }
        let ticket = TicketStatementQuery { statement_handle: handle };
        let endpoint = FlightEndpoint::new().with_ticket(Ticket::new(ticket.as_any().encode_to_vec()));
        Ok(FlightInfo::new()
            .try_with_schema(&schema)
            .map_err(|e| Status::internal(format!("encoding schema: {e}")))?
            .with_endpoint(endpoint)
            .with_descriptor(descriptor))
    }
}

/// Registers an object store for `location` unless the session already has one (local paths
/// need none). Credentials come from the environment (`AWS_*`, `GOOGLE_*`, `AZURE_*`) and the
/// statement's `OPTIONS ('aws.access_key_id' '…', …)`.
fn register_store(ctx: &SessionContext, location: &str, options: &HashMap<String, String>) -> Result<()> {
    let Ok(url) = url::Url::parse(location) else { return Ok(()) };
    if url.scheme() == "file" || url.scheme().len() == 1 {
        return Ok(());
    }
    let base = url::Url::parse(&url[..url::Position::BeforePath]).map_err(|e| Error::Input(format!("{location}: {e}")))?;
    let store_url = datafusion::execution::object_store::ObjectStoreUrl::parse(base.as_str()).map_err(|e| Error::Input(format!("{location}: {e}")))?;
    if ctx.runtime_env().object_store(&store_url).is_ok() {
        return Ok(());
    }
    let from_statement = options.iter().map(|(k, v)| (k.replace('.', "_"), v.clone()));
    let (store, _) = object_store::parse_url_opts(&url, std::env::vars().chain(from_statement))
        .map_err(|e| Error::Input(format!("no object store for {location}: {e}")))?;
    ctx.register_object_store(&base, Arc::from(store));
    Ok(())
}

#[tonic::async_trait]
impl FlightSqlService for SqlService {
    type FlightService = SqlService;

    async fn do_handshake(
        &self,
        request: Request<Streaming<HandshakeRequest>>,
    ) -> std::result::Result<Response<<Self as FlightService>::HandshakeStream>, Status> {
        auth::handshake(request, self.token.as_deref()).await
    }

    async fn get_flight_info_statement(
        &self,
        query: CommandStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<FlightInfo>, Status> {
        self.authorize(request.metadata())?;
        tracing::debug!(sql = query.query, "statement");
        let frame = self.plan(&query.query).await?;
        Ok(Response::new(self.ticket_for(frame, request.into_inner())?))
    }

    async fn get_flight_info_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<FlightInfo>, Status> {
        self.authorize(request.metadata())?;
        let sql = String::from_utf8(query.prepared_statement_handle.to_vec())
            .map_err(|_| Status::invalid_argument("prepared statement handle is not one of ours"))?;
        let frame = self.plan(&sql).await?;
        Ok(Response::new(self.ticket_for(frame, request.into_inner())?))
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        request: Request<Ticket>,
    ) -> std::result::Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        self.authorize(request.metadata())?;
        let (_, frame) = self
            .planned
            .lock()
            .expect("planned statements")
            .remove(&ticket.statement_handle)
            .ok_or_else(|| Status::not_found("unknown or already used ticket; run the statement again"))?;
        let schema = Arc::new(frame.schema().as_arrow().clone());
        let batches = frame.execute_stream().await.map_err(df_status)?;
        let stream = FlightDataEncoderBuilder::new()
            .with_schema(schema)
            .build(batches.map_err(|e| FlightError::Tonic(Box::new(df_status(e)))))
            .map_err(Status::from);
        Ok(Response::new(Box::pin(stream)))
    }

    async fn do_put_statement_update(
        &self,
        command: CommandStatementUpdate,
        request: Request<arrow_flight::sql::server::PeekableFlightDataStream>,
    ) -> std::result::Result<i64, Status> {
        self.authorize(request.metadata())?;
        let frame = self.plan(&command.query).await?;
        let batches = frame.collect().await.map_err(df_status)?;
        // DDL returns no rows; DML (INSERT/COPY) returns one `count` row.
        let affected = batches
            .first()
            .filter(|b| b.num_rows() == 1 && b.num_columns() == 1)
            .and_then(|b| b.column(0).as_any().downcast_ref::<arrow::array::UInt64Array>().map(|a| a.value(0) as i64))
            .unwrap_or(0);
        Ok(affected)
    }

    async fn do_action_create_prepared_statement(
        &self,
        query: ActionCreatePreparedStatementRequest,
        request: Request<arrow_flight::Action>,
    ) -> std::result::Result<ActionCreatePreparedStatementResult, Status> {
        self.authorize(request.metadata())?;
        // Plan only to report the schema (and refuse bad SQL now); DDL waits for execution.
        let plan = self.ctx.state().create_logical_plan(&query.query).await.map_err(df_status)?;
        let schema = plan.schema().as_arrow().clone();
        let options = arrow::ipc::writer::IpcWriteOptions::default();
        let IpcMessage(dataset_schema) = SchemaAsIpc::new(&schema, &options)
            .try_into()
            .map_err(|e: arrow::error::ArrowError| Status::internal(format!("encoding schema: {e}")))?;
        Ok(ActionCreatePreparedStatementResult {
            prepared_statement_handle: Bytes::from(query.query.into_bytes()),
            dataset_schema,
            parameter_schema: Bytes::new(),
        })
    }

    async fn do_action_close_prepared_statement(
        &self,
        _query: ActionClosePreparedStatementRequest,
        request: Request<arrow_flight::Action>,
    ) -> std::result::Result<(), Status> {
        self.authorize(request.metadata())
    }

    /// The `health` action, as on workers (no token needed), so one health check serves both.
    async fn do_action_fallback(
        &self,
        request: Request<arrow_flight::Action>,
    ) -> std::result::Result<Response<<Self as FlightService>::DoActionStream>, Status> {
        let action = request.get_ref().r#type.clone();
        if action != super::protocol::ACTION_HEALTH {
            return Err(Status::invalid_argument(format!("unknown action {action:?}; besides Flight SQL's own, this server has: health")));
        }
        let body = Bytes::from_static(br#"{"status":"serving","role":"flight-sql"}"#);
        Ok(Response::new(Box::pin(futures::stream::iter([Ok(arrow_flight::Result { body })]))))
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}
