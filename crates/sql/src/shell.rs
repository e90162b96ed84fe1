//! `shapfusion sql`: DataFusion's own shell (the `datafusion-cli` crate) with the shap UDFs.
//!
//! Everything the DataFusion CLI does works: the interactive REPL with history, `-c` / `-f`
//! batches, `CREATE EXTERNAL TABLE … LOCATION 's3://…'` (object stores registered on demand,
//! credentials from the environment), `COPY (…) TO …`, and the table/csv/json output formats.
//! We add the UDFs, named models, and Parquet output of a query result.

use std::path::PathBuf;
use std::sync::Arc;

use datafusion::dataframe::DataFrame;
use datafusion::error::DataFusionError;
use datafusion::execution::context::SessionState;
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::execution::TaskContext;
use datafusion::logical_expr::LogicalPlan;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_cli::catalog::DynamicObjectStoreCatalog;
use datafusion_cli::cli_context::CliSessionContext;
use datafusion_cli::exec;
use datafusion_cli::object_storage::instrumented::InstrumentedObjectStoreRegistry;
use datafusion_cli::print_format::PrintFormat;
use datafusion_cli::print_options::{MaxRows, PrintOptions};

use crate::registry::ModelRegistry;
use crate::ShapOptions;
use shapfusion_core::error::{Error, ErrorKind, Result};

/// How `shapfusion sql` prints results.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputFormat {
    /// Aligned table (the default).
    Table,
    /// CSV with a header.
    Csv,
    /// A JSON array of objects.
    Json,
    /// Newline-delimited JSON.
    NdJson,
    /// The last statement's result written as Parquet to `--output`.
    Parquet,
}

impl OutputFormat {
    /// All names, in the order help texts list them.
    pub const NAMES: &'static [&'static str] = &["table", "csv", "json", "ndjson", "parquet"];
}

impl std::str::FromStr for OutputFormat {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Ok(match s {
            "table" => OutputFormat::Table,
            "csv" => OutputFormat::Csv,
            "json" => OutputFormat::Json,
            "ndjson" => OutputFormat::NdJson,
            "parquet" => OutputFormat::Parquet,
            other => return Err(Error::InvalidArgument(format!("unknown format {other:?}; expected one of {}", OutputFormat::NAMES.join(", ")))),
        })
    }
}

/// Where a new session's queries run, when not in this process: a cluster's client
/// (`shapfusion-ballista` implements it for a Ballista scheduler). The session's functions are
/// registered on it afterwards, so an implementation may replace them while it sets up.
pub trait SessionBackend: Send + Sync + std::fmt::Debug {
    /// A session with `config` on `runtime` whose queries run on the backend.
    fn new_context(&self, config: SessionConfig, runtime: Arc<RuntimeEnv>) -> Result<SessionContext>;
}

/// What a new session starts with (shared by `shapfusion sql` and `shapfusion serve`).
#[derive(Debug, Clone, Default)]
pub struct SessionSetup {
    /// `name=URL` models.
    pub models: Vec<String>,
    /// `name=URL` background sets for `SET shap.background = 'name'`.
    pub backgrounds: Vec<String>,
    /// Initial `shap.model_dir`.
    pub model_dir: Option<String>,
    /// Initial `shap.workers` (comma-separated Flight worker URLs).
    pub workers: Option<String>,
    /// Initial `shap.worker_token_file`.
    pub worker_token_file: Option<String>,
    /// Resolve registered model names (and names under the model directory) only, never a path
    /// or URL in a query: what a server does for its clients.
    pub names_only: bool,
    /// Bytes DataFusion's operators (sorts, joins, aggregations) may hold; `None`: no limit.
    pub memory_limit: Option<usize>,
    /// Run queries there (a Ballista cluster) instead of in this process.
    pub backend: Option<Arc<dyn SessionBackend>>,
}

/// Options of `shapfusion sql`.
#[derive(Debug, Clone)]
pub struct ShellOptions {
    /// Statements to run (`-c`), in order.
    pub commands: Vec<String>,
    /// SQL files to run (`-f`), before the commands.
    pub files: Vec<PathBuf>,
    /// Models, model directory and workers.
    pub setup: SessionSetup,
    /// Output format.
    pub format: OutputFormat,
    /// Where Parquet output goes.
    pub output: Option<PathBuf>,
    /// No timing lines.
    pub quiet: bool,
}

/// A session with DataFusion's dynamic object-store catalog, URL tables and the shap UDFs.
/// Functions that compute on workers (`shap.workers`) need a transport installed first
/// ([`install_remote`](crate::install_remote); `shapfusion_flight::install`).
pub async fn new_session(setup: &SessionSetup) -> Result<(SessionContext, Arc<ModelRegistry>, Arc<InstrumentedObjectStoreRegistry>)> {
    let df = |e: datafusion::error::DataFusionError| crate::from_datafusion("shapfusion sql", e);
    let stores = Arc::new(InstrumentedObjectStoreRegistry::new());
    // Every store behind a Parquet guard: DataFusion's Parquet reader trusts what a file says.
    let guarded = Arc::new(crate::file_guard::GuardedStores::new(stores.clone()));
    let mut runtime = RuntimeEnvBuilder::new().with_object_store_registry(guarded);
    if let Some(bytes) = setup.memory_limit {
        runtime = runtime.with_memory_limit(bytes, 1.0);
    }
    let runtime = runtime.build_arc().map_err(df)?;
    let ctx = match &setup.backend {
        Some(backend) => backend.new_context(crate::session_config(), runtime)?,
        None => SessionContext::new_with_config_rt(crate::session_config(), runtime),
    };
    // After the remote upgrade: URL tables and the catalog below keep a reference to the session.
    let ctx = ctx.enable_url_table();
    ctx.refresh_catalogs().await.map_err(df)?;
    ctx.register_catalog_list(Arc::new(DynamicObjectStoreCatalog::new(ctx.state().catalog_list().clone(), ctx.state_weak_ref())));
    let registry = if setup.names_only {
        let registry = Arc::new(ModelRegistry::names_only(Some(ctx.runtime_env())));
        crate::register_with(&ctx, registry.clone())?;
        registry
    } else {
        crate::register(&ctx)?
    };
    registry.register_args(&setup.models, &setup.backgrounds)?;
    let settings = [("model_dir", &setup.model_dir), ("workers", &setup.workers), ("worker_token_file", &setup.worker_token_file)];
    for (name, value) in settings {
        if let Some(value) = value {
            ctx.sql(&format!("SET shap.{name} = '{}'", value.replace('\'', "''"))).await.map_err(df)?;
        }
    }
    Ok((ctx, registry, stores))
}

/// Runs the shell: files, then commands, else the REPL.
pub async fn run(options: ShellOptions) -> Result<()> {
    let df = |e: datafusion::error::DataFusionError| crate::from_datafusion("shapfusion sql", e);
    let (ctx, _registry, stores) = new_session(&options.setup).await?;
    let shell = ShellSession::new(ctx);
    let repl = options.commands.is_empty() && options.files.is_empty();
    let mut print = PrintOptions {
        format: match options.format {
            OutputFormat::Csv => PrintFormat::Csv,
            OutputFormat::Json => PrintFormat::Json,
            OutputFormat::NdJson => PrintFormat::NdJson,
            OutputFormat::Table | OutputFormat::Parquet => PrintFormat::Table,
        },
        quiet: options.quiet || !repl,
        maxrows: if repl { MaxRows::Limited(40) } else { MaxRows::Unlimited },
        color: false,
        instrumented_registry: stores,
    };
    if repl {
        return exec::exec_from_repl(&shell, &mut print).await.map_err(|e| Error::external(ErrorKind::Io, "the SQL shell", e));
    }
    let mut statements: Vec<String> = Vec::new();
    for f in &options.files {
        statements.push(std::fs::read_to_string(f).map_err(|e| Error::io(f, e))?);
    }
    statements.extend(options.commands.iter().cloned());
    if options.format == OutputFormat::Parquet {
        let output = options.output.clone().ok_or_else(|| Error::InvalidArgument("Parquet output needs an output path".into()))?;
        let last = statements.pop().unwrap_or_default();
        exec::exec_from_commands(&shell, statements, &print).await.map_err(df)?;
        let plan = shell.ctx.state().create_logical_plan(&last).await.map_err(df)?;
        let frame = CliSessionContext::execute_logical_plan(&shell, plan).await.map_err(df)?;
        frame.write_parquet(&output.to_string_lossy(), Default::default(), None).await.map_err(df)?;
        return Ok(());
    }
    // Statements run one by one and stop at the first error (non-zero exit), as a batch job wants.
    exec::exec_from_commands(&shell, statements, &print).await.map_err(df)
}

/// The shell's session as datafusion-cli drives it: DataFusion's own, except that `RESET
/// shap.<name>` returns the option to the value the shell started with
/// ([`ShapOptions::resolve_reset`]).
struct ShellSession {
    ctx: SessionContext,
    /// The `shap.*` options after the command line's settings, before any statement.
    start: ShapOptions,
}

impl ShellSession {
    fn new(ctx: SessionContext) -> Self {
        let start = ShapOptions::of(ctx.state().config().options());
        ShellSession { ctx, start }
    }
}

#[async_trait::async_trait]
impl CliSessionContext for ShellSession {
    fn task_ctx(&self) -> Arc<TaskContext> {
        self.ctx.task_ctx()
    }

    fn session_state(&self) -> SessionState {
        self.ctx.state()
    }

    fn register_object_store(&self, url: &url::Url, store: Arc<dyn object_store::ObjectStore>) -> Option<Arc<dyn object_store::ObjectStore>> {
        CliSessionContext::register_object_store(&self.ctx, url, store)
    }

    fn register_table_options_extension_from_scheme(&self, scheme: &str) {
        self.ctx.register_table_options_extension_from_scheme(scheme)
    }

    async fn execute_logical_plan(&self, plan: LogicalPlan) -> std::result::Result<DataFrame, DataFusionError> {
        self.ctx.execute_logical_plan(self.start.resolve_reset(plan)?).await
    }
}
