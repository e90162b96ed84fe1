//! `shapfusion serve`: a Flight SQL server backed by DataFusion with the shap UDFs (and, with
//! workers, the pool), so ADBC, JDBC and other Flight SQL clients run
//! `SELECT shap('fraud', amount, age) FROM payments` over tables on disk or object stores.
//!
//! Statements go through the standard path: `GetFlightInfo(CommandStatementQuery)` plans the
//! statement (`SET` and the permitted DDL take effect here) and returns a ticket; `DoGet` on the
//! ticket streams the result. Prepared statements (used by JDBC) plan the same way.
//!
//! **One session per client.** Each client connection (its gRPC connection, identified by the
//! peer address) gets its own DataFusion session: the operator's `--table` tables and the shap
//! functions, with its own `SET` values and its own external tables. Statement tickets and
//! prepared-statement handles are random, bound to the session that made them, expire, and are
//! capped per session. What a client may do to the server is [`AccessPolicy`]'s to decide.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::sql::server::FlightSqlService;
use arrow_flight::sql::{
    ActionClosePreparedStatementRequest, ActionCreatePreparedStatementRequest, ActionCreatePreparedStatementResult, CommandPreparedStatementQuery,
    CommandStatementQuery, CommandStatementUpdate, ProstMessageExt, SqlInfo, TicketStatementQuery,
};
use arrow_flight::{FlightDescriptor, FlightEndpoint, FlightInfo, HandshakeRequest, IpcMessage, SchemaAsIpc, Ticket};
use bytes::Bytes;
use datafusion::catalog::TableProvider;
use datafusion::dataframe::DataFrame;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::logical_expr::{DdlStatement, LogicalPlan};
use datafusion::prelude::{SessionConfig, SessionContext};
use futures::TryStreamExt;
use prost::Message;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status, Streaming};

use crate::net::auth;
use crate::net::limits::Admission;
use crate::protocol::status_from_error;
use shapfusion_core::error::{Error, ErrorKind, Result};
use shapfusion_sql::registry::ModelRegistry;
use shapfusion_sql::{AccessPolicy, SessionBackend};

/// Planned statements wait this long for their `DoGet` before they are dropped.
const TICKET_TTL: Duration = Duration::from_secs(600);

/// Planned statements and prepared statements one session may hold at once.
pub const MAX_HANDLES_PER_SESSION: usize = 64;

/// A session unused this long is dropped (with its tables, settings and handles).
const SESSION_IDLE: Duration = Duration::from_secs(1800);

/// Sessions held at once; a new client beyond this is refused until one goes idle.
pub const MAX_SESSIONS: usize = 256;

/// One client's state.
struct Session {
    ctx: SessionContext,
    last_used: Instant,
    /// Planned statements by ticket handle.
    planned: HashMap<Bytes, (Instant, DataFrame)>,
    /// Prepared statements' SQL by handle.
    prepared: HashMap<Bytes, (Instant, String)>,
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
        self.prepared.retain(|_, (at, _)| at.elapsed() < SESSION_IDLE);
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
}

/// A DataFusion error's status, by the kind it has as shapfusion's (an error of a shap function
/// keeps its own).
fn df_status(e: datafusion::error::DataFusionError) -> Status {
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
        let template = SessionTemplate { config, runtime: ctx.runtime_env(), registry, tables: Vec::new(), backend: None };
        SqlService { base: ctx, template: Mutex::new(template), token, policy, admission, sessions: Mutex::new(HashMap::new()) }
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
        register_stores(&ctx, &plan).map_err(|e| status_from_error(&e))?;
        ctx.execute_logical_plan(plan).await.map_err(df_status)
    }

    /// The logical plan of `sql` in `ctx`, once the access policy allowed it.
    async fn allowed_plan(&self, ctx: &SessionContext, sql: &str) -> std::result::Result<LogicalPlan, Status> {
        let plan = ctx.state().create_logical_plan(sql).await.map_err(df_status)?;
        self.policy.check(&plan).map_err(Status::permission_denied)?;
        Ok(plan)
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
        let endpoint = FlightEndpoint::new().with_ticket(Ticket::new(ticket.as_any().encode_to_vec()));
        Ok(FlightInfo::new()
            .try_with_schema(&schema)
            .map_err(|e| Status::internal(format!("encoding schema: {e}")))?
            .with_endpoint(endpoint)
            .with_descriptor(descriptor))
    }

    /// The SQL of the client's prepared statement `handle`.
    fn prepared_sql(&self, client: &str, handle: &Bytes) -> std::result::Result<String, Status> {
        self.with_session(client, |s| {
            s.prepared
                .get(handle)
                .map(|(_, sql)| sql.clone())
                .ok_or_else(|| Status::not_found("unknown or closed prepared statement (handles belong to the connection that made them)"))
        })
    }
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
        let sql = self.prepared_sql(&client, &query.prepared_statement_handle)?;
        let _planning = self.admission.admit(&client).await?;
        let frame = self.plan(&client, &sql).await?;
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
        let batches = tokio::time::timeout(self.admission.limits().deadline, frame.collect())
            .await
            .map_err(|_| {
                Status::deadline_exceeded(format!(
                    "the statement ran longer than this server's limit of {}s",
                    self.admission.limits().deadline.as_secs()
                ))
            })?
            .map_err(df_status)?;
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
        let client = client_of(&request);
        // Plan only to report the schema (and refuse bad or forbidden SQL now); DDL waits for
        // execution.
        let ctx = self.session_ctx(&client)?;
        let plan = self.allowed_plan(&ctx, &query.query).await?;
        let schema = plan.schema().as_arrow().clone();
        let options = arrow::ipc::writer::IpcWriteOptions::default();
        let IpcMessage(dataset_schema) = SchemaAsIpc::new(&schema, &options)
            .try_into()
            .map_err(|e: arrow::error::ArrowError| Status::internal(format!("encoding schema: {e}")))?;
        let handle = random_handle("prep")?;
        self.with_session(&client, |s| {
            s.room_for_handle()?;
            s.prepared.insert(handle.clone(), (Instant::now(), query.query.clone()));
            Ok(())
        })?;
        Ok(ActionCreatePreparedStatementResult { prepared_statement_handle: handle, dataset_schema, parameter_schema: Bytes::new() })
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

    async fn register_sql_info(&self, _id: i32, _result: &SqlInfo) {}
}
