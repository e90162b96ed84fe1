//! `shapfusion serve`: a Flight SQL server backed by DataFusion with the shap UDFs (and, with
//! workers, the pool), so ADBC, JDBC and other Flight SQL clients run
//! `SELECT shap('fraud', amount, age) FROM payments` over tables on disk or object stores.
//!
//! Statements go through the standard path: `GetFlightInfo(CommandStatementQuery)` plans the
//! statement (`SET` and the permitted DDL take effect here) and returns a ticket; `DoGet` on the
//! ticket streams the result. Prepared statements (used by JDBC) plan the same way; their
//! parameters (`?` or `$1`) are bound by `DoPut`, one run of the statement a bound row. Clients
//! list the session's catalogs, schemas, tables and table types and the server's SQL info the
//! standard way too (`GetTables` and the rest), as database browsers and BI tools do.
//!
//! **One session per client.** Each client connection (its gRPC connection, identified by the
//! peer address) gets its own DataFusion session: the operator's `--table` tables and the shap
//! functions, with its own `SET` values and its own external tables. Statement tickets and
//! prepared-statement handles are random, bound to the session that made them, expire, and are
//! capped per session. What a client may do to the server is [`AccessPolicy`]'s to decide.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use arrow::datatypes::{Field, SchemaRef};
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::sql::metadata::SqlInfoData;
use arrow_flight::sql::server::FlightSqlService;
use arrow_flight::sql::server::PeekableFlightDataStream;
use arrow_flight::sql::{
    ActionClosePreparedStatementRequest, ActionCreatePreparedStatementRequest, ActionCreatePreparedStatementResult, CommandGetCatalogs,
    CommandGetCrossReference, CommandGetDbSchemas, CommandGetExportedKeys, CommandGetImportedKeys, CommandGetPrimaryKeys, CommandGetSqlInfo,
    CommandGetTableTypes, CommandGetTables, CommandPreparedStatementQuery, CommandPreparedStatementUpdate, CommandStatementQuery,
    CommandStatementUpdate, DoPutPreparedStatementResult, ProstMessageExt, SqlInfo, TicketStatementQuery,
};
use arrow_flight::{FlightDescriptor, FlightEndpoint, FlightInfo, HandshakeRequest, IpcMessage, SchemaAsIpc, Ticket};
use bytes::Bytes;
use datafusion::catalog::TableProvider;
use datafusion::common::ScalarValue;
use datafusion::dataframe::DataFrame;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::logical_expr::{DdlStatement, LogicalPlan};
use datafusion::prelude::{SessionConfig, SessionContext};
use futures::TryStreamExt;
use prost::Message;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status, Streaming};

use super::catalog;
use super::parameters::{self, MAX_PARAMETER_BYTES};
use crate::net::auth;
use crate::net::limits::Admission;
use crate::protocol::status_from_error;
use shapfusion_core::error::{Error, ErrorKind, Result};
use shapfusion_sql::registry::ModelRegistry;
use shapfusion_sql::{AccessPolicy, SessionBackend, ShapOptions};

/// Planned statements wait this long for their `DoGet` before they are dropped.
const TICKET_TTL: Duration = Duration::from_secs(600);

/// Planned statements and prepared statements one session may hold at once.
pub const MAX_HANDLES_PER_SESSION: usize = 64;

/// A session unused this long is dropped (with its tables, settings and handles); so is a
/// prepared statement.
const SESSION_IDLE: Duration = Duration::from_secs(1800);

/// Sessions held at once; a new client beyond this is refused until one goes idle.
pub const MAX_SESSIONS: usize = 256;

/// One client's state.
struct Session {
    ctx: SessionContext,
    last_used: Instant,
    /// Planned statements by ticket handle.
    planned: HashMap<Bytes, (Instant, DataFrame)>,
    /// Prepared statements by handle.
    prepared: HashMap<Bytes, Prepared>,
}

/// A prepared statement: its SQL, its parameters, and the parameter sets bound to it.
struct Prepared {
    /// Last created, bound or run: a statement unused for [`SESSION_IDLE`] is dropped.
    used: Instant,
    sql: String,
    /// `$1` … `$n`, with the types the statement gives them.
    parameters: Vec<Field>,
    /// Each set runs the statement once; empty until the client binds.
    bound: Vec<Vec<ScalarValue>>,
}

impl Session {
    fn handles(&self) -> usize {
        self.planned.len() + self.prepared.len()
    }

    /// Refuses a new handle once the session holds [`MAX_HANDLES_PER_SESSION`].
    fn room_for_handle(&self) -> std::result::Result<(), Status> {
        if self.handles() >= MAX_HANDLES_PER_SESSION {
            return Err(Status::resource_exhausted(format!(
                "this session holds {MAX_HANDLES_PER_SESSION} planned or prepared statements; fetch or close some first"
            )));
        }
        Ok(())
    }

    fn expire(&mut self) {
        self.planned.retain(|_, (at, _)| at.elapsed() < TICKET_TTL);
        self.prepared.retain(|_, p| p.used.elapsed() < SESSION_IDLE);
    }
}

/// What every new session starts from: the operator's configuration.
struct SessionTemplate {
    config: SessionConfig,
    runtime: Arc<RuntimeEnv>,
    registry: Arc<ModelRegistry>,
    tables: Vec<(String, Arc<dyn TableProvider>)>,
    /// Client sessions run their queries there (a Ballista cluster).
    backend: Option<Arc<dyn SessionBackend>>,
}

/// The Flight SQL service of `shapfusion serve`.
pub struct SqlService {
    /// The operator's session: `--table` tables are registered here and shared (read-only) with
    /// every client session.
    base: SessionContext,
    template: Mutex<SessionTemplate>,
    token: Option<String>,
    policy: AccessPolicy,
    admission: Admission,
    sessions: Mutex<HashMap<String, Session>>,
    /// The `shap.*` options every client session starts with (the operator's): what a client's
    /// `RESET shap.<name>` returns to.
    start_options: ShapOptions,
    /// The answers to `GetSqlInfo`.
    sql_info: SqlInfoData,
}

/// A DataFusion error's status, by the kind it has as shapfusion's (an error of a shap function
/// keeps its own).
pub(super) fn df_status(e: datafusion::error::DataFusionError) -> Status {
    status_from_error(&shapfusion_sql::from_datafusion("the query", e))
}

/// A random, unguessable handle (128 bits from the OS).
fn random_handle(prefix: &str) -> std::result::Result<Bytes, Status> {
    let mut raw = [0u8; 16];
    getrandom::fill(&mut raw).map_err(|e| Status::internal(format!("no randomness for a handle: {e}")))?;
    let hex: String = raw.iter().map(|b| format!("{b:02x}")).collect();
    Ok(Bytes::from(format!("{prefix}-{hex}")))
}

/// The session key of a request: its connection's peer address.
fn client_of<T>(request: &Request<T>) -> String {
    request.remote_addr().map_or_else(|| "unknown-peer".to_string(), |a| a.to_string())
}

impl SqlService {
    /// A service whose sessions start from `ctx`'s configuration, runtime and shap functions
    /// (resolving models through `registry`), under `policy`, admitting statements through
    /// `admission`.
    pub fn new(ctx: SessionContext, registry: Arc<ModelRegistry>, token: Option<String>, policy: AccessPolicy, admission: Admission) -> Self {
        let state = ctx.state();
        // Each client session gets its own default catalog (the operator's session may have
        // turned creating one off once it had its own).
        let config = state.config().clone().with_create_default_catalog_and_schema(true);
        let start_options = ShapOptions::of(config.options());
        let template = SessionTemplate { config, runtime: ctx.runtime_env(), registry, tables: Vec::new(), backend: None };
        let sql_info = catalog::sql_info(policy.allows_writes(), SESSION_IDLE.as_millis() as i32);
        let sessions = Mutex::new(HashMap::new());
        SqlService { base: ctx, template: Mutex::new(template), token, policy, admission, sessions, start_options, sql_info }
    }

    /// Client sessions submit their queries to `backend` (a Ballista cluster, whose executors
    /// compute next to the data) instead of running them here.
    pub fn on_backend(self, backend: Arc<dyn SessionBackend>) -> Self {
        self.template.lock().expect("template").backend = Some(backend);
        self
    }

    /// Registers `NAME=URL` (`--table`): a Parquet or CSV (with header) file or directory,
    /// local or on an object store; the format comes from the extension, Parquet by default.
    /// Every client session sees it.
    pub async fn register_table(&self, arg: &str) -> Result<()> {
        let (name, location) = arg
            .split_once('=')
            .map(|(n, l)| (n.trim(), l.trim()))
            .filter(|(n, l)| !n.is_empty() && !l.is_empty())
            .ok_or_else(|| Error::InvalidArgument(format!("table {arg:?}: expected NAME=URL, e.g. payments=s3://bucket/payments/")))?;
        let location = if location.contains("://") { location.to_string() } else { shapfusion_sql::registry::to_url(location)?.to_string() };
        let (format, options) =
            if location.to_ascii_lowercase().ends_with(".csv") { ("CSV", "OPTIONS ('format.has_header' 'true')") } else { ("PARQUET", "") };
        let sql = format!(
            "CREATE EXTERNAL TABLE \"{}\" STORED AS {format} LOCATION '{}' {options}",
            name.replace('"', "\"\""),
            location.replace('\'', "''")
        );
        let what = format!("table {name}");
        let fail = |e| shapfusion_sql::from_datafusion(what.as_str(), e);
        let plan = self.base.state().create_logical_plan(&sql).await.map_err(fail)?;
        register_stores(&self.base, &plan).map_err(|e| e.context(what.as_str()))?;
        self.base.execute_logical_plan(plan).await.map_err(fail)?.collect().await.map_err(fail)?;
        let provider = self.base.table_provider(name).await.map_err(fail)?;
        self.template.lock().expect("template").tables.push((name.to_string(), provider));
        tracing::info!(table = name, location, "registered table");
        Ok(())
    }

    fn authorize(&self, metadata: &MetadataMap) -> std::result::Result<(), Status> {
        auth::check(metadata, self.token.as_deref())
    }

    /// A new client session: the operator's configuration, tables and functions; no URL tables
    /// (`SELECT * FROM '/path'`), so files are reached only through tables.
    fn new_session(&self) -> std::result::Result<SessionContext, Status> {
        let template = self.template.lock().expect("template");
        let ctx = match &template.backend {
            Some(backend) => backend.new_context(template.config.clone(), template.runtime.clone()).map_err(|e| status_from_error(&e))?,
            None => SessionContext::new_with_config_rt(template.config.clone(), template.runtime.clone()),
        };
        crate::install();
        shapfusion_sql::register_with(&ctx, template.registry.clone()).map_err(|e| status_from_error(&e))?;
        for (name, provider) in &template.tables {
            ctx.register_table(name.as_str(), provider.clone()).map_err(df_status)?;
        }
        Ok(ctx)
    }

    /// Runs `f` on the caller's session, creating it on first use.
    fn with_session<T>(&self, client: &str, f: impl FnOnce(&mut Session) -> std::result::Result<T, Status>) -> std::result::Result<T, Status> {
        let mut sessions = self.sessions.lock().expect("sessions");
        if !sessions.contains_key(client) {
            sessions.retain(|_, s| s.last_used.elapsed() < SESSION_IDLE);
            if sessions.len() >= MAX_SESSIONS {
                return Err(Status::resource_exhausted(format!(
                    "this server holds {MAX_SESSIONS} client sessions; try again when one has been idle for {} minutes",
                    SESSION_IDLE.as_secs() / 60
                )));
            }
            let ctx = self.new_session()?;
            sessions.insert(client.to_string(), Session { ctx, last_used: Instant::now(), planned: HashMap::new(), prepared: HashMap::new() });
        }
        let session = sessions.get_mut(client).expect("inserted above");
        session.last_used = Instant::now();
        session.expire();
        f(session)
    }

    fn session_ctx(&self, client: &str) -> std::result::Result<SessionContext, Status> {
        self.with_session(client, |s| Ok(s.ctx.clone()))
    }

    /// Plans `sql` in the client's session after the access policy allowed it; DDL and `SET`
    /// run now (as DataFusion does for `ctx.sql`). Object stores for a permitted `CREATE
    /// EXTERNAL TABLE … LOCATION 's3://…'` are registered from the environment and the
    /// statement's options first.
    async fn plan(&self, client: &str, sql: &str) -> std::result::Result<DataFrame, Status> {
        let ctx = self.session_ctx(client)?;
        let plan = self.allowed_plan(&ctx, sql).await?;
        execute_plan(&ctx, plan).await
    }

    /// The logical plan of `sql` in `ctx` (bare `?` parameters numbered by their place in the
    /// text), once the access policy allowed it.
    async fn allowed_plan(&self, ctx: &SessionContext, sql: &str) -> std::result::Result<LogicalPlan, Status> {
        let state = ctx.state();
        let statement = parameters::parse_numbered(&state, sql).map_err(df_status)?;
        let plan = state.statement_to_plan(statement).await.map_err(df_status)?;
        self.policy.check(&plan).map_err(Status::permission_denied)?;
        self.start_options.resolve_reset(plan).map_err(df_status)
    }

    /// Plans the client's prepared statement `handle` once for each parameter set bound to it
    /// (once if it has no parameters) and returns the runs, DDL and `SET` having taken effect.
    async fn plan_prepared(&self, client: &str, handle: &Bytes) -> std::result::Result<Vec<DataFrame>, Status> {
        let (sql, count, bound) = self.with_prepared(client, handle, |p| Ok((p.sql.clone(), p.parameters.len(), p.bound.clone())))?;
        if count > 0 && bound.is_empty() {
            return Err(Status::failed_precondition(format!(
                "this prepared statement has {count} parameter(s): bind their values (DoPut with the statement's handle) before running it"
            )));
        }
        let ctx = self.session_ctx(client)?;
        let plan = self.allowed_plan(&ctx, &sql).await?;
        if count == 0 {
            return Ok(vec![execute_plan(&ctx, plan).await?]);
        }
        let mut runs = Vec::with_capacity(bound.len());
        for values in bound {
            let plan = plan.clone().with_param_values(values).map_err(df_status)?;
            self.policy.check(&plan).map_err(Status::permission_denied)?;
            runs.push(execute_plan(&ctx, plan).await?);
        }
        Ok(runs)
    }

    /// Binds the parameter rows a `DoPut` carries to the client's prepared statement `handle`
    /// (each row a set; the sets replace any bound before). A stream with no rows binds nothing.
    async fn bind(&self, client: &str, handle: &Bytes, stream: PeekableFlightDataStream) -> std::result::Result<(), Status> {
        let fields = self.with_prepared(client, handle, |p| Ok(p.parameters.clone()))?;
        let batches = read_parameters(stream).await?;
        if batches.iter().all(|b| b.num_rows() == 0) {
            return Ok(());
        }
        let sets = parameters::parameter_sets(&fields, &batches)?;
        self.with_prepared(client, handle, |p| {
            p.bound = sets;
            Ok(())
        })
    }

    /// Runs `frames` as statements that return no rows but a count (DDL, `INSERT`, `COPY`) within
    /// the server's deadline, and returns the rows they affected.
    async fn run_update(&self, frames: Vec<DataFrame>) -> std::result::Result<i64, Status> {
        let deadline = self.admission.limits().deadline;
        let mut affected = 0;
        for frame in frames {
            let batches = tokio::time::timeout(deadline, frame.collect())
                .await
                .map_err(|_| Status::deadline_exceeded(format!("the statement ran longer than this server's limit of {}s", deadline.as_secs())))?
                .map_err(df_status)?;
            // DDL returns no rows; DML (INSERT/COPY) returns one `count` row.
            affected += batches
                .first()
                .filter(|b| b.num_rows() == 1 && b.num_columns() == 1)
                .and_then(|b| b.column(0).as_any().downcast_ref::<arrow::array::UInt64Array>().map(|a| a.value(0) as i64))
                .unwrap_or(0);
        }
        Ok(affected)
    }

    /// Answers a listing's `GetFlightInfo`: the ticket is the command itself, listed when the
    /// client fetches it (from its session then).
    fn listing(
        &self,
        command: &impl ProstMessageExt,
        schema: &arrow::datatypes::Schema,
        request: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<FlightInfo>, Status> {
        self.authorize(request.metadata())?;
        Ok(Response::new(flight_info(command.as_any().encode_to_vec(), schema, request.into_inner())?))
    }

    /// The session a listing's `DoGet` lists, once the client is authorized.
    fn listed_session(&self, request: &Request<Ticket>) -> std::result::Result<SessionContext, Status> {
        self.authorize(request.metadata())?;
        self.session_ctx(&client_of(request))
    }

    /// A listing's `DoGet` of no rows in `schema`.
    fn no_rows(&self, request: &Request<Ticket>, schema: SchemaRef) -> std::result::Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        self.authorize(request.metadata())?;
        Ok(one_batch(catalog::no_rows(schema)))
    }

    /// Keeps a planned statement for the client's `DoGet` and returns the FlightInfo pointing
    /// at it.
    fn ticket_for(&self, client: &str, frame: DataFrame, descriptor: FlightDescriptor) -> std::result::Result<FlightInfo, Status> {
        let schema = frame.schema().as_arrow().clone();
        let handle = random_handle("stmt")?;
        self.with_session(client, |s| {
            s.room_for_handle()?;
            s.planned.insert(handle.clone(), (Instant::now(), frame));
            Ok(())
        })?;
        let ticket = TicketStatementQuery { statement_handle: handle };
        flight_info(ticket.as_any().encode_to_vec(), &schema, descriptor)
    }

    /// Runs `f` on the client's prepared statement `handle`, which counts as used now.
    fn with_prepared<T>(
        &self,
        client: &str,
        handle: &Bytes,
        f: impl FnOnce(&mut Prepared) -> std::result::Result<T, Status>,
    ) -> std::result::Result<T, Status> {
        self.with_session(client, |s| {
            let prepared = s.prepared.get_mut(handle).ok_or_else(|| {
                Status::not_found("unknown, expired or closed prepared statement (handles belong to the connection that made them)")
            })?;
            prepared.used = Instant::now();
            f(prepared)
        })
    }
}

/// The record batches of a parameter `DoPut`, within [`MAX_PARAMETER_BYTES`]. Messages without
/// IPC data (the descriptor alone, as clients send for an update without parameters) are
/// skipped.
async fn read_parameters(stream: PeekableFlightDataStream) -> std::result::Result<Vec<RecordBatch>, Status> {
    let mut bytes = 0u64;
    let data = stream
        .try_filter(|m| std::future::ready(!m.data_header.is_empty()))
        .and_then(move |m| {
            bytes += (m.data_header.len() + m.data_body.len()) as u64;
            let too_many = bytes > MAX_PARAMETER_BYTES;
            async move {
                if too_many {
                    return Err(Status::out_of_range(format!(
                        "more than {MAX_PARAMETER_BYTES} bytes of parameters bound; put large inputs in a table and join it"
                    )));
                }
                Ok(m)
            }
        })
        .map_err(FlightError::from);
    crate::protocol::decode_guarded(data).try_collect().await.map_err(|e| match e {
        FlightError::Tonic(status) => *status,
        other => Status::invalid_argument(format!("cannot decode the bound parameters: {other}")),
    })
}

/// The `FlightInfo` of a result of `schema` fetched by one `DoGet` of `ticket`.
fn flight_info(ticket: Vec<u8>, schema: &arrow::datatypes::Schema, descriptor: FlightDescriptor) -> std::result::Result<FlightInfo, Status> {
    Ok(FlightInfo::new()
        .try_with_schema(schema)
        .map_err(|e| Status::internal(format!("encoding schema: {e}")))?
        .with_endpoint(FlightEndpoint::new().with_ticket(Ticket::new(ticket)))
        .with_descriptor(descriptor))
}

/// A `DoGet` reply of one batch.
fn one_batch(batch: RecordBatch) -> Response<<SqlService as FlightService>::DoGetStream> {
    let schema: SchemaRef = batch.schema();
    let stream = FlightDataEncoderBuilder::new().with_schema(schema).build(futures::stream::once(async { Ok(batch) })).map_err(Status::from);
    Response::new(Box::pin(stream))
}

/// `plan` as a DataFrame of `ctx`, its DDL and `SET` run now, after the object stores a
/// `CREATE EXTERNAL TABLE` needs are registered.
async fn execute_plan(ctx: &SessionContext, plan: LogicalPlan) -> std::result::Result<DataFrame, Status> {
    register_stores(ctx, &plan).map_err(|e| status_from_error(&e))?;
    ctx.execute_logical_plan(plan).await.map_err(df_status)
}

/// Registers the object stores a `CREATE EXTERNAL TABLE` plan needs (nothing for other plans).
fn register_stores(ctx: &SessionContext, plan: &LogicalPlan) -> Result<()> {
    if let LogicalPlan::Ddl(DdlStatement::CreateExternalTable(cmd)) = plan {
        for location in &cmd.locations {
            register_store(ctx, location, &cmd.options)?;
        }
    }
    Ok(())
}

/// Registers an object store for `location` unless the session already has one (local paths
/// need none). Credentials come from the environment (`AWS_*`, `GOOGLE_*`, `AZURE_*`) and the
/// statement's `OPTIONS ('aws.access_key_id' '…', …)`.
fn register_store(ctx: &SessionContext, location: &str, options: &HashMap<String, String>) -> Result<()> {
    let Ok(url) = url::Url::parse(location) else { return Ok(()) };
    if url.scheme() == "file" || url.scheme().len() == 1 {
        return Ok(());
    }
    let base = url::Url::parse(&url[..url::Position::BeforePath]).map_err(|e| Error::external(ErrorKind::InvalidArgument, location, e))?;
    let store_url =
        datafusion::execution::object_store::ObjectStoreUrl::parse(base.as_str()).map_err(|e| shapfusion_sql::from_datafusion(location, e))?;
    if ctx.runtime_env().object_store(&store_url).is_ok() {
        return Ok(());
    }
    let from_statement = options.iter().map(|(k, v)| (k.replace('.', "_"), v.clone()));
    let (store, _) = object_store::parse_url_opts(&url, std::env::vars().chain(from_statement))
        .map_err(|e| Error::external(ErrorKind::InvalidArgument, format!("no object store for {location}"), e))?;
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
        let client = client_of(&request);
        tracing::debug!(sql = query.query, client, "statement");
        let _planning = self.admission.admit(&client).await?;
        let frame = self.plan(&client, &query.query).await?;
        Ok(Response::new(self.ticket_for(&client, frame, request.into_inner())?))
    }

    async fn get_flight_info_prepared_statement(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<FlightInfo>, Status> {
        self.authorize(request.metadata())?;
        let client = client_of(&request);
        let _planning = self.admission.admit(&client).await?;
        let mut runs = self.plan_prepared(&client, &query.prepared_statement_handle).await?.into_iter();
        let first = runs.next().ok_or_else(|| Status::internal("a prepared statement planned no run"))?;
        // Each bound parameter set is a run of its own; their rows come back one after another.
        let frame = runs.try_fold(first, |all, run| all.union(run)).map_err(df_status)?;
        Ok(Response::new(self.ticket_for(&client, frame, request.into_inner())?))
    }

    async fn do_get_statement(
        &self,
        ticket: TicketStatementQuery,
        request: Request<Ticket>,
    ) -> std::result::Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        self.authorize(request.metadata())?;
        let client = client_of(&request);
        let (_, frame) = self.with_session(&client, |s| {
            s.planned.remove(&ticket.statement_handle).ok_or_else(|| {
                Status::not_found(
                    "unknown, expired or already used ticket (tickets belong to the connection that planned them); run the statement again",
                )
            })
        })?;
        let mut permit = self.admission.admit(&client).await?;
        let schema = Arc::new(frame.schema().as_arrow().clone());
        let batches = match frame.execute_stream().await {
            Ok(batches) => batches,
            Err(e) => {
                permit.fail();
                return Err(df_status(e));
            }
        };
        let admission = self.admission.clone();
        let stream = FlightDataEncoderBuilder::new()
            .with_schema(schema)
            .build(batches.inspect_ok(move |b| admission.add_rows(b.num_rows() as u64)).map_err(|e| FlightError::Tonic(Box::new(df_status(e)))))
            .map_err(Status::from);
        Ok(Response::new(self.admission.bounded(Box::pin(stream), permit)))
    }

    async fn do_put_statement_update(
        &self,
        command: CommandStatementUpdate,
        request: Request<arrow_flight::sql::server::PeekableFlightDataStream>,
    ) -> std::result::Result<i64, Status> {
        self.authorize(request.metadata())?;
        let client = client_of(&request);
        let _running = self.admission.admit(&client).await?;
        let frame = self.plan(&client, &command.query).await?;
        self.run_update(vec![frame]).await
    }

    async fn do_put_prepared_statement_query(
        &self,
        query: CommandPreparedStatementQuery,
        request: Request<PeekableFlightDataStream>,
    ) -> std::result::Result<DoPutPreparedStatementResult, Status> {
        self.authorize(request.metadata())?;
        let client = client_of(&request);
        let handle = query.prepared_statement_handle;
        self.bind(&client, &handle, request.into_inner()).await?;
        Ok(DoPutPreparedStatementResult { prepared_statement_handle: Some(handle) })
    }

    /// Runs a prepared statement that returns a count; parameter rows sent with it are bound
    /// first (JDBC sends them here), otherwise those bound before are used.
    async fn do_put_prepared_statement_update(
        &self,
        query: CommandPreparedStatementUpdate,
        request: Request<PeekableFlightDataStream>,
    ) -> std::result::Result<i64, Status> {
        self.authorize(request.metadata())?;
        let client = client_of(&request);
        let handle = query.prepared_statement_handle;
        self.bind(&client, &handle, request.into_inner()).await?;
        let _running = self.admission.admit(&client).await?;
        let runs = self.plan_prepared(&client, &handle).await?;
        self.run_update(runs).await
    }

    async fn do_action_create_prepared_statement(
        &self,
        query: ActionCreatePreparedStatementRequest,
        request: Request<arrow_flight::Action>,
    ) -> std::result::Result<ActionCreatePreparedStatementResult, Status> {
        self.authorize(request.metadata())?;
        let client = client_of(&request);
        // Plan only to report the schema (and refuse bad or forbidden SQL now); DDL waits for
        // execution.
        let ctx = self.session_ctx(&client)?;
        let plan = self.allowed_plan(&ctx, &query.query).await?;
        let parameters = parameters::parameter_fields(&plan)?;
        let schema = plan.schema().as_arrow().clone();
        let options = arrow::ipc::writer::IpcWriteOptions::default();
        let encode = |schema: &arrow::datatypes::Schema| -> std::result::Result<Bytes, Status> {
            let IpcMessage(bytes) = SchemaAsIpc::new(schema, &options)
                .try_into()
                .map_err(|e: arrow::error::ArrowError| Status::internal(format!("encoding schema: {e}")))?;
            Ok(bytes)
        };
        let dataset_schema = encode(&schema)?;
        // No parameters, no parameter schema: clients then bind nothing.
        let parameter_schema = if parameters.is_empty() { Bytes::new() } else { encode(&arrow::datatypes::Schema::new(parameters.clone()))? };
        let handle = random_handle("prep")?;
        self.with_session(&client, |s| {
            s.room_for_handle()?;
            let prepared = Prepared { used: Instant::now(), sql: query.query.clone(), parameters, bound: Vec::new() };
            s.prepared.insert(handle.clone(), prepared);
            Ok(())
        })?;
        Ok(ActionCreatePreparedStatementResult { prepared_statement_handle: handle, dataset_schema, parameter_schema })
    }

    async fn do_action_close_prepared_statement(
        &self,
        query: ActionClosePreparedStatementRequest,
        request: Request<arrow_flight::Action>,
    ) -> std::result::Result<(), Status> {
        self.authorize(request.metadata())?;
        let client = client_of(&request);
        self.with_session(&client, |s| {
            s.prepared.remove(&query.prepared_statement_handle);
            Ok(())
        })
    }

    /// The `health` action, as on workers (no token needed), so one health check serves both.
    async fn do_action_fallback(
        &self,
        request: Request<arrow_flight::Action>,
    ) -> std::result::Result<Response<<Self as FlightService>::DoActionStream>, Status> {
        let action = request.get_ref().r#type.clone();
        if action != crate::net::ACTION_HEALTH {
            return Err(Status::invalid_argument(format!("unknown action {action:?}; besides Flight SQL's own, this server has: health")));
        }
        let body = Bytes::from_static(br#"{"status":"serving","role":"flight-sql"}"#);
        Ok(Response::new(Box::pin(futures::stream::iter([Ok(arrow_flight::Result { body })]))))
    }

    async fn get_flight_info_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<FlightInfo>, Status> {
        let schema = query.clone().into_builder(&self.sql_info).schema();
        self.listing(&query, &schema, request)
    }

    async fn do_get_sql_info(
        &self,
        query: CommandGetSqlInfo,
        request: Request<Ticket>,
    ) -> std::result::Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        self.authorize(request.metadata())?;
        let batch = query.into_builder(&self.sql_info).build().map_err(|e| Status::internal(format!("building the SQL info: {e}")))?;
        Ok(one_batch(batch))
    }

    async fn get_flight_info_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<FlightInfo>, Status> {
        self.listing(&query, &query.into_builder().schema(), request)
    }

    async fn do_get_catalogs(
        &self,
        query: CommandGetCatalogs,
        request: Request<Ticket>,
    ) -> std::result::Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        Ok(one_batch(catalog::catalogs(&self.listed_session(&request)?, query)?))
    }

    async fn get_flight_info_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<FlightInfo>, Status> {
        self.listing(&query, &query.clone().into_builder().schema(), request)
    }

    async fn do_get_schemas(
        &self,
        query: CommandGetDbSchemas,
        request: Request<Ticket>,
    ) -> std::result::Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        Ok(one_batch(catalog::schemas(&self.listed_session(&request)?, query)?))
    }

    async fn get_flight_info_tables(
        &self,
        query: CommandGetTables,
        request: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<FlightInfo>, Status> {
        self.listing(&query, &query.clone().into_builder().schema(), request)
    }

    async fn do_get_tables(
        &self,
        query: CommandGetTables,
        request: Request<Ticket>,
    ) -> std::result::Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        Ok(one_batch(catalog::tables(&self.listed_session(&request)?, query).await?))
    }

    async fn get_flight_info_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<FlightInfo>, Status> {
        self.listing(&query, &query.into_builder().schema(), request)
    }

    async fn do_get_table_types(
        &self,
        query: CommandGetTableTypes,
        request: Request<Ticket>,
    ) -> std::result::Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        self.authorize(request.metadata())?;
        Ok(one_batch(catalog::table_types(query)?))
    }

    // Keys: DataFusion's tables have none, so each listing is empty, in its own schema.

    async fn get_flight_info_primary_keys(
        &self,
        query: CommandGetPrimaryKeys,
        request: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<FlightInfo>, Status> {
        self.listing(&query, &catalog::primary_keys_schema(), request)
    }

    async fn do_get_primary_keys(
        &self,
        _query: CommandGetPrimaryKeys,
        request: Request<Ticket>,
    ) -> std::result::Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        self.no_rows(&request, catalog::primary_keys_schema())
    }

    async fn get_flight_info_exported_keys(
        &self,
        query: CommandGetExportedKeys,
        request: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<FlightInfo>, Status> {
        self.listing(&query, &catalog::foreign_keys_schema(), request)
    }

    async fn do_get_exported_keys(
        &self,
        _query: CommandGetExportedKeys,
        request: Request<Ticket>,
    ) -> std::result::Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        self.no_rows(&request, catalog::foreign_keys_schema())
    }

    async fn get_flight_info_imported_keys(
        &self,
        query: CommandGetImportedKeys,
        request: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<FlightInfo>, Status> {
        self.listing(&query, &catalog::foreign_keys_schema(), request)
    }

    async fn do_get_imported_keys(
        &self,
        _query: CommandGetImportedKeys,
        request: Request<Ticket>,
    ) -> std::result::Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        self.no_rows(&request, catalog::foreign_keys_schema())
    }

    async fn get_flight_info_cross_reference(
        &self,
        query: CommandGetCrossReference,
        request: Request<FlightDescriptor>,
    ) -> std::result::Result<Response<FlightInfo>, Status> {
        self.listing(&query, &catalog::foreign_keys_schema(), request)
    }

    async fn do_get_cross_reference(
        &self,
        _query: CommandGetCrossReference,
        request: Request<Ticket>,
    ) -> std::result::Result<Response<<Self as FlightService>::DoGetStream>, Status> {
        self.no_rows(&request, catalog::foreign_keys_schema())
    }

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}
