//! Command-line parsing and wiring; no logic of its own beyond turning flags into options.

mod plot;

use std::path::PathBuf;

use std::sync::Arc;

use clap::builder::{PossibleValuesParser, TypedValueParser};
use clap::{Args, Parser, Subcommand};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use shapfusion::engine::{Index, DEFAULT_V2_MEMORY_BYTES};
use shapfusion::input::read_background;
use shapfusion::model::ModelFormat;
use shapfusion::pipeline::{explain_file, explain_with_model, ExplainOptions, Progress, DEFAULT_BATCH_ROWS};
#[cfg(feature = "sql")]
use shapfusion::shell::{self, OutputFormat, SessionSetup, ShellOptions};
use shapfusion::Result;
use shapfusion::{Algorithm, ComputeSettings, Device, OutputKind};

/// Exact SHAP values for XGBoost and LightGBM tree ensembles.
#[derive(Debug, Parser)]
#[command(name = "shapfusion", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Log level (error, warn, info, debug, trace); RUST_LOG overrides it. Every command logs
    /// warnings and errors only unless asked for more.
    #[arg(long, global = true, default_value = "warn")]
    pub log: String,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Explain every row of a Parquet, Arrow IPC or CSV file; write attributions as Parquet (or
    /// Arrow IPC for an output named .arrow, .feather or .ipc).
    Explain(ExplainArgs),
    /// SQL with the shap UDFs: an interactive shell, or a batch of statements (-c / -f).
    #[cfg(feature = "sql")]
    Sql(SqlArgs),
    /// Serve Arrow Flight: explain the record batches clients stream in with DoExchange.
    #[cfg(feature = "flight")]
    Worker(WorkerArgs),
    /// Serve Flight SQL (ADBC, JDBC): SQL with the shap UDFs, computed here or on workers.
    #[cfg(feature = "flight")]
    Serve(ServeArgs),
    /// Ask a worker or `serve` whether it is serving (exit 0) or not (exit 1); for health checks.
    #[cfg(feature = "flight")]
    Health {
        /// The server, e.g. http://127.0.0.1:50061.
        url: String,
        /// Give up after this many seconds.
        #[arg(long, default_value_t = 3.0)]
        timeout: f64,
    },
    /// Run a Ballista cluster member (scheduler or executor) with the shap UDFs: SQL planned
    /// by the scheduler and computed on executors next to the data.
    #[cfg(feature = "ballista")]
    Ballista {
        #[command(subcommand)]
        command: BallistaCommand,
    },
    /// Draw a chart of SHAP values (PNG or SVG): summary, bar, dependence or waterfall.
    Plot {
        #[command(subcommand)]
        command: plot::PlotCommand,
    },
    /// Work with model files.
    Models {
        #[command(subcommand)]
        command: ModelsCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum ModelsCommand {
    /// Describe a model: format, objective, trees, depth, leaves, features, output groups.
    Inspect {
        /// Model file; the format is read from the content.
        #[arg(help = model_file_help())]
        path: PathBuf,
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[cfg(feature = "ballista")]
#[derive(Debug, Subcommand)]
pub enum BallistaCommand {
    /// The scheduler: plans queries (pinning model versions) and hands tasks to executors.
    Scheduler(BallistaSchedulerArgs),
    /// An executor: scans its partitions and computes the UDFs with the planned model versions.
    Executor(BallistaExecutorArgs),
    /// Ask a scheduler (df://HOST:PORT) or an executor's data service (http://HOST:PORT)
    /// whether it serves (exit 0) or not (exit 1); for health checks.
    Health {
        /// The member, e.g. df://127.0.0.1:50050 or http://127.0.0.1:50071.
        url: String,
        /// Give up after this many seconds.
        #[arg(long, default_value_t = 3.0)]
        timeout: f64,
    },
}

/// Where a client (`sql`, `serve`) sends its queries when they run on a Ballista cluster.
#[cfg(feature = "ballista")]
#[derive(Debug, Args)]
pub struct BallistaClientArgs {
    /// Run the queries on this Ballista cluster, df://HOST:PORT (its scheduler).
    #[arg(id = "ballista", long = "ballista", conflicts_with = "workers")]
    pub url: Option<String>,
    /// File holding the Ballista cluster's token.
    #[arg(id = "ballista_token_file", long = "ballista-token-file", requires = "ballista")]
    pub token_file: Option<PathBuf>,
}

#[cfg(feature = "ballista")]
impl BallistaClientArgs {
    /// Where sessions run their queries: the scheduler's cluster if `--ballista` was given.
    fn backend(&self) -> Result<Option<std::sync::Arc<dyn shapfusion::sql::SessionBackend>>> {
        let Some(url) = self.url.clone() else { return Ok(None) };
        let token = self.token_file.as_deref().map(shapfusion::net::auth::read_token_file).transpose()?;
        let scheduler = shapfusion::ballista::client::RemoteScheduler { url, token };
        scheduler.grpc_address()?;
        Ok(Some(std::sync::Arc::new(scheduler)))
    }
}

/// Flags every Ballista cluster member shares.
#[cfg(feature = "ballista")]
#[derive(Debug, Args)]
pub struct BallistaMemberArgs {
    /// The host name the other members and clients reach this one at (default: the listen
    /// address, or with 0.0.0.0 the address that reaches the scheduler).
    #[arg(long)]
    pub external_host: Option<String>,
    /// The cluster token (the same file on every member and client).
    #[command(flatten)]
    pub access: AccessArgs,
    /// The models (the same flags on every member, on a store every member reads).
    #[command(flatten)]
    pub models: ModelArgs,
}

#[cfg(feature = "ballista")]
impl BallistaMemberArgs {
    fn models(&self) -> shapfusion::ballista::ClusterModels {
        shapfusion::ballista::ClusterModels {
            models: self.models.models.clone(),
            backgrounds: self.models.backgrounds.clone(),
            model_dir: self.models.model_dir.clone(),
        }
    }
}

/// Who may call a server, shared by `worker`, `serve` and the Ballista members.
#[cfg(feature = "flight")]
#[derive(Debug, Args)]
pub struct AccessArgs {
    /// File whose first line is the bearer token clients must send. Required to listen on
    /// anything but loopback (unless --insecure-no-auth).
    #[arg(long, alias = "auth-token-file")]
    pub token_file: Option<PathBuf>,
    /// Listen on a non-loopback address without a token: anyone who reaches it can use the server.
    #[arg(long, conflicts_with = "token_file")]
    pub insecure_no_auth: bool,
}

#[cfg(feature = "flight")]
impl AccessArgs {
    /// Plaintext listening on `listen` under these flags.
    fn listen(&self, listen: &str) -> shapfusion::net::transport::ListenOptions {
        shapfusion::net::transport::ListenOptions {
            authenticated: self.token_file.is_some(),
            insecure_no_auth: self.insecure_no_auth,
            remedy: Some("--token-file FILE, --listen 127.0.0.1:PORT, or --insecure-no-auth".into()),
            ..shapfusion::net::transport::ListenOptions::local(listen)
        }
    }

    /// The token in `--token-file`, if given.
    fn token(&self) -> Result<Option<String>> {
        self.token_file.as_deref().map(shapfusion::net::auth::read_token_file).transpose()
    }
}

/// The models a command may name, shared by `sql`, `worker`, `serve` and the Ballista members.
#[cfg(feature = "sql")]
#[derive(Debug, Args)]
pub struct ModelArgs {
    /// A named model, NAME=URL (a path, file://, s3://, gs://, az:// …); repeatable.
    #[arg(long = "model")]
    pub models: Vec<String>,
    /// A named background set, NAME=URL (Parquet or CSV with the models' feature columns), for
    /// interventional SHAP (SET shap.background = 'NAME', or "background" in a DoExchange
    /// command); repeatable.
    #[arg(long = "background")]
    pub backgrounds: Vec<String>,
    /// Where a model named NAME is looked up as NAME.json|.ubj|.txt, a directory or URL prefix
    /// (sets shap.model_dir).
    #[arg(long)]
    pub model_dir: Option<String>,
}

#[cfg(feature = "ballista")]
#[derive(Debug, Args)]
pub struct BallistaSchedulerArgs {
    /// Address to listen on (clients connect with df://HOST:PORT).
    #[arg(long, default_value = "127.0.0.1:50050")]
    pub listen: String,
    /// A directory or URL prefix queries may scan; repeatable (none: no file scans).
    #[arg(long = "data-root")]
    pub data_roots: Vec<String>,
    /// A directory or URL prefix COPY … TO may write under; repeatable (none: no writes).
    #[arg(long = "allow-write")]
    pub allow_write: Vec<String>,
    /// Seconds without a heartbeat before an executor counts as lost and its tasks run elsewhere.
    #[arg(long, default_value_t = 30)]
    pub executor_timeout_secs: u64,
    #[command(flatten)]
    pub member: BallistaMemberArgs,
}

#[cfg(feature = "ballista")]
#[derive(Debug, Args)]
pub struct BallistaExecutorArgs {
    /// Address of this executor's data service (shuffle and result fetches); a port is required.
    #[arg(long, default_value = "127.0.0.1:50071")]
    pub listen: String,
    /// The scheduler, HOST:PORT.
    #[arg(long, default_value = "127.0.0.1:50050")]
    pub scheduler: String,
    /// Tasks run at once (default: one per core).
    #[arg(long, default_value_t = 0)]
    pub concurrent_tasks: usize,
    /// Directory for shuffle files (default: a new temporary directory).
    #[arg(long)]
    pub work_dir: Option<String>,
    /// Seconds between heartbeats to the scheduler (keep well under its --executor-timeout-secs).
    #[arg(long, default_value_t = 5)]
    pub heartbeat_secs: u64,
    /// This executor's id in the cluster and in errors (default: random).
    #[arg(long)]
    pub executor_id: Option<String>,
    #[command(flatten)]
    pub member: BallistaMemberArgs,
}

#[cfg(feature = "sql")]
#[derive(Debug, Args)]
pub struct SqlArgs {
    /// A statement to run (repeatable; run in order, stopping at the first error).
    #[arg(short = 'c', long = "command")]
    pub commands: Vec<String>,
    /// A file of SQL statements to run (repeatable; run before -c).
    #[arg(short = 'f', long = "file")]
    pub files: Vec<PathBuf>,
    #[command(flatten)]
    pub models: ModelArgs,
    /// Output format (parquet writes the last result to --output).
    #[arg(long, default_value = "table", value_parser = PossibleValuesParser::new(OutputFormat::NAMES).try_map(|s| s.parse::<OutputFormat>()))]
    pub format: OutputFormat,
    /// File for --format parquet: receives the result of the last statement.
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// Do not print timing lines.
    #[arg(short, long)]
    pub quiet: bool,
    /// Run the queries on a Ballista cluster instead of in this process.
    #[cfg(feature = "ballista")]
    #[command(flatten)]
    pub ballista: BallistaClientArgs,
    /// Compute on these Flight workers (comma separated URLs; sets shap.workers).
    #[arg(long)]
    pub workers: Option<String>,
    /// File holding the bearer token the workers require (sets shap.worker_token_file).
    #[arg(long)]
    pub worker_token_file: Option<String>,
}

/// Server options shared by `worker` and `serve`.
#[cfg(feature = "flight")]
#[derive(Debug, Args)]
pub struct ServerArgs {
    #[command(flatten)]
    pub access: AccessArgs,
    /// PEM certificate chain: serve TLS (with --tls-key).
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// PEM private key for --tls-cert.
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// Largest gRPC message accepted or sent, in MiB (one record batch is one message).
    #[arg(long, default_value_t = shapfusion::net::transport::DEFAULT_MAX_MESSAGE_BYTES >> 20)]
    pub max_message_mb: usize,
    #[command(flatten)]
    pub models: ModelArgs,
    /// Requests (exchanges, statements) running at once (default: the cores); more wait in
    /// the queue, in turn across connections.
    #[arg(long, default_value_t = shapfusion::net::RequestLimits::default().max_concurrent)]
    pub max_concurrent: usize,
    /// Exchanges a worker also runs while --max-concurrent are running, as long as each has
    /// sent at most 64 KiB (a few rows): one-row clients then do not queue behind each other,
    /// and their rows that reach the engine together are computed together. One that sends
    /// more waits for a --max-concurrent slot first. 0 turns this off; `serve` has no small
    /// slots.
    #[arg(long, default_value_t = shapfusion::net::RequestLimits::default().max_small)]
    pub max_small_requests: usize,
    /// Requests waiting for a slot at once; more are refused as busy. Queued requests hold no
    /// decoded rows: at most the transport's window (8 MiB) of input each.
    #[arg(long, default_value_t = shapfusion::net::RequestLimits::default().max_queued)]
    pub max_queued: usize,
    /// Seconds a request may wait for a slot before it is refused as busy.
    #[arg(long, default_value_t = shapfusion::net::RequestLimits::default().queue_timeout.as_secs())]
    pub queue_timeout_secs: u64,
    /// Serve Prometheus metrics at http://ADDR/metrics (requests running and queued, served,
    /// refused by cause, rows, a latency histogram). Loopback unless --token-file is given;
    /// scrapes then carry the token as a bearer token.
    #[arg(long)]
    pub metrics_listen: Option<String>,
    /// Seconds one request may run, its reply stream included.
    #[arg(long, default_value_t = shapfusion::net::RequestLimits::default().deadline.as_secs())]
    pub request_timeout_secs: u64,
    /// Rows one DoExchange may send (workers).
    #[arg(long, default_value_t = shapfusion::net::RequestLimits::default().max_rows)]
    pub max_request_rows: u64,
    /// MiB of Arrow data one DoExchange may send (workers).
    #[arg(long, default_value_t = shapfusion::net::RequestLimits::default().max_bytes >> 20)]
    pub max_request_mb: u64,
    /// Sessions a worker keeps open at once: exchanges opened with the `shapfusion-session: 1`
    /// header, which stay open for many requests and hold no slot between them (online
    /// serving); more are refused as busy. `serve` has no sessions.
    #[arg(long, default_value_t = shapfusion::net::RequestLimits::default().max_sessions)]
    pub max_sessions: usize,
}

#[cfg(feature = "flight")]
impl ServerArgs {
    fn listen(&self, listen: &str) -> shapfusion::net::transport::ListenOptions {
        shapfusion::net::transport::ListenOptions {
            tls: self.tls_cert.clone().zip(self.tls_key.clone()),
            max_message_bytes: self.max_message_mb << 20,
            ..self.access.listen(listen)
        }
    }

    fn limits(&self) -> shapfusion::net::RequestLimits {
        shapfusion::net::RequestLimits {
            max_concurrent: self.max_concurrent,
            max_queued: self.max_queued,
            queue_timeout: std::time::Duration::from_secs(self.queue_timeout_secs),
            deadline: std::time::Duration::from_secs(self.request_timeout_secs),
            max_rows: self.max_request_rows,
            max_bytes: self.max_request_mb << 20,
            max_small: self.max_small_requests,
            max_sessions: self.max_sessions,
        }
    }

    /// The flags that raise each limit, for the servers' refusals.
    fn limit_names(&self) -> shapfusion::net::LimitNames {
        shapfusion::net::LimitNames {
            max_queued: "--max-queued".into(),
            queue_timeout: "--queue-timeout-secs".into(),
            deadline: "--request-timeout-secs".into(),
            max_sessions: "--max-sessions".into(),
        }
    }

    /// The admission of a server started with these flags.
    fn admission(&self) -> shapfusion::net::Admission {
        shapfusion::net::Admission::new(self.limits()).with_names(self.limit_names())
    }

    /// Starts `--metrics-listen`'s endpoint, if given, serving `render`'s page.
    async fn start_metrics(&self, what: &str, render: shapfusion::net::metrics::Render) -> Result<()> {
        let Some(listen) = &self.metrics_listen else { return Ok(()) };
        let options = shapfusion::net::transport::ListenOptions {
            remedy: Some("--token-file FILE, --metrics-listen 127.0.0.1:PORT, or --insecure-no-auth".into()),
            ..self.access.listen(listen)
        };
        shapfusion::net::metrics::serve_metrics(&options, self.access.token()?, what, render).await?;
        Ok(())
    }
}

#[cfg(feature = "flight")]
#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// Address to listen on (port 0: any free port; the address is printed). Loopback by
    /// default; any other address needs --token-file (or --insecure-no-auth).
    #[arg(long, default_value = "127.0.0.1:50061")]
    pub listen: String,
    /// The defaults for calls that carry no settings, and bounds for those that do.
    #[command(flatten)]
    pub compute: ComputeArgs,
    /// Seconds one batch may compute before `health` reports the worker stuck.
    #[arg(long, default_value_t = shapfusion::flight::DEFAULT_STUCK_AFTER.as_secs())]
    pub stuck_after_secs: u64,
    #[command(flatten)]
    pub server: ServerArgs,
}

#[cfg(feature = "flight")]
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on (port 0: any free port; the address is printed). Loopback by
    /// default; any other address needs --token-file (or --insecure-no-auth).
    #[arg(long, default_value = "127.0.0.1:50051")]
    pub listen: String,
    /// Compute on these Flight workers (comma separated URLs); default: in this process.
    #[arg(long)]
    pub workers: Option<String>,
    /// File holding the bearer token the workers require.
    #[arg(long)]
    pub worker_token_file: Option<String>,
    /// A table clients can query, NAME=URL (Parquet or CSV file or directory, local or object
    /// store); repeatable. Clients can also run CREATE EXTERNAL TABLE themselves.
    #[arg(long = "table")]
    pub tables: Vec<String>,
    /// A directory or URL prefix under which clients may CREATE EXTERNAL TABLE; repeatable
    /// (none: clients use the --table tables only).
    #[arg(long = "data-root")]
    pub data_roots: Vec<String>,
    /// A directory or URL prefix under which clients may COPY … TO; repeatable (none: no writes).
    #[arg(long = "allow-write")]
    pub allow_write: Vec<String>,
    /// Memory DataFusion's operators may hold across all clients (sorts, joins, aggregations),
    /// e.g. 8G or 512M; a query needing more fails with a message instead of the process.
    #[arg(long, default_value = "8G")]
    pub memory_limit: ByteSize,
    /// Run the queries on a Ballista cluster instead of in this process.
    #[cfg(feature = "ballista")]
    #[command(flatten)]
    pub ballista: BallistaClientArgs,
    #[command(flatten)]
    pub server: ServerArgs,
}

/// A size given as bytes with an optional K, M or G suffix (powers of 1024).
#[cfg(feature = "flight")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteSize(pub usize);

#[cfg(feature = "flight")]
impl std::str::FromStr for ByteSize {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        let t = s.trim();
        let (digits, shift) = match t.char_indices().last() {
            Some((i, 'k' | 'K')) => (&t[..i], 10),
            Some((i, 'm' | 'M')) => (&t[..i], 20),
            Some((i, 'g' | 'G')) => (&t[..i], 30),
            _ => (t, 0),
        };
        let n: usize = digits.trim().parse().map_err(|_| format!("{s:?} is not a size (e.g. 8G, 512M, 1048576)"))?;
        n.checked_mul(1 << shift).map(ByteSize).ok_or_else(|| format!("{s:?} is too large"))
    }
}

#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// Model file; the format is read from the content.
    #[arg(long, help = model_file_help())]
    pub model: PathBuf,
    /// Rows to explain: Parquet, Arrow IPC (Feather v2), or CSV with a header line.
    #[arg(long)]
    pub input: PathBuf,
    /// File to write: Parquet, or Arrow IPC when named .arrow, .feather or .ipc.
    #[arg(long)]
    pub output: PathBuf,
    #[command(flatten)]
    pub compute: ComputeArgs,
    /// Write SHAP interaction values (one `interactions` column) instead of SHAP values; with
    /// --background, those of the interventional game (rows summing to its SHAP values).
    #[arg(long, conflicts_with = "margin")]
    pub interactions: bool,
    /// The attribution index: shapley (SHAP values) or banzhaf (Banzhaf values: every
    /// coalition of the other features weighted alike; same layout, the bias column holding
    /// the prediction minus their sum; with --interactions, the Banzhaf interaction index whole
    /// off the diagonal). With --background, interventional Banzhaf values and interactions.
    /// On the CPU.
    #[arg(long, default_value = "shapley", value_parser = index_parser())]
    pub index: Index,
    /// Write margins (raw scores, one `margin` column) instead of SHAP values.
    #[arg(long, alias = "predict")]
    pub margin: bool,
    /// Input columns to copy to the output, comma separated (e.g. an id).
    #[arg(long, value_delimiter = ',')]
    pub keep: Vec<String>,
    /// Rows per batch; memory use grows with it.
    #[arg(long, default_value_t = DEFAULT_BATCH_ROWS)]
    pub batch_rows: usize,
    /// Never draw a progress bar.
    #[arg(long)]
    pub no_progress: bool,
    /// Background rows (Parquet or CSV with the model's feature columns): interventional SHAP
    /// values, what shap.TreeExplainer(model, data=background) computes, instead of
    /// path-dependent ones. Same output layout. With --workers, the file the workers
    /// registered (`worker --background NAME=PATH`, the same path): they compute over their
    /// copy, which must hold the same bytes.
    #[arg(long)]
    pub background: Option<PathBuf>,
    /// Use this many background rows, drawn without replacement (all rows by default).
    #[arg(long, requires = "background")]
    pub background_rows: Option<usize>,
    /// Seed of the --background-rows draw: the same seed draws the same rows.
    #[arg(long, default_value_t = 0, requires = "background_rows")]
    pub seed: u64,
    /// Compute on these Flight workers (comma separated URLs) instead of here. The model is sent
    /// to them as a file URL when --model is a local file, else as given (a name they serve).
    #[cfg(feature = "flight")]
    #[arg(long)]
    pub workers: Option<String>,
    /// File holding the bearer token the workers require.
    #[cfg(feature = "flight")]
    #[arg(long, requires = "workers")]
    pub worker_token_file: Option<String>,
}

/// The help of a model file argument, listing the formats read.
fn model_file_help() -> String {
    format!("Model file: {}; the format is read from the content", ModelFormat::list())
}

/// The compute flags of every command that computes (`explain`, `worker`, `plot --model`),
/// declared once and turned into the one [`ComputeSettings`] value the library takes.
#[derive(Debug, Args)]
pub struct ComputeArgs {
    /// Engine (auto picks one from the model's shape and logs why).
    #[arg(long, default_value = "auto", value_parser = algorithm_parser())]
    pub algorithm: Algorithm,
    /// Where to compute: auto is the GPU when one is usable, else the CPU; gpu is an error
    /// when none is.
    #[arg(long, default_value = "auto", value_parser = device_parser())]
    pub device: Device,
    /// Compute threads (default: all cores; more than the cores runs on all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Memory bound for fast-v2's tables, in MiB.
    #[arg(long, default_value_t = DEFAULT_V2_MEMORY_BYTES >> 20)]
    pub v2_memory_mb: usize,
}

impl ComputeArgs {
    /// The settings these flags say; a bad value is named by its flag.
    pub fn settings(&self) -> Result<ComputeSettings> {
        ComputeSettings::new(self.algorithm, self.device, self.threads, self.v2_memory_mb)
            .map_err(|e| e.context(format!("--v2-memory-mb {}", self.v2_memory_mb)))
    }
}

/// Parses an engine name, listing the names in `--help` and in errors from the parser's own list.
fn algorithm_parser() -> impl TypedValueParser<Value = Algorithm> {
    PossibleValuesParser::new(Algorithm::NAMES).try_map(|s| s.parse::<Algorithm>())
}

/// Parses an index name, from the parser's own list as [`algorithm_parser`].
fn index_parser() -> impl TypedValueParser<Value = Index> {
    PossibleValuesParser::new(Index::NAMES).try_map(|s| s.parse::<Index>())
}

/// Parses a device name, from the parser's own list as [`algorithm_parser`].
fn device_parser() -> impl TypedValueParser<Value = Device> {
    PossibleValuesParser::new(Device::NAMES).try_map(|s| s.parse::<Device>())
}

/// `explain`'s progress bar; indicatif draws nothing when stderr is not a terminal.
#[derive(Debug, Default)]
struct ProgressBarOnStderr {
    bar: std::sync::OnceLock<ProgressBar>,
}

impl Progress for ProgressBarOnStderr {
    fn start(&self, total: Option<u64>) {
        let bar = ProgressBar::with_draw_target(total, ProgressDrawTarget::stderr());
        let style = match total {
            Some(_) => ProgressStyle::with_template("{bar:40} {human_pos}/{human_len} rows  {per_sec}  eta {eta}"),
            None => ProgressStyle::with_template("{spinner} {human_pos} rows  {per_sec}"),
        };
        if let Ok(style) = style {
            bar.set_style(style);
        }
        let _ = self.bar.set(bar);
    }

    fn advance(&self, rows: u64) {
        if let Some(bar) = self.bar.get() {
            bar.inc(rows);
        }
    }

    fn finish(&self) {
        if let Some(bar) = self.bar.get() {
            bar.finish_and_clear();
        }
    }
}

pub fn run(cli: Cli) -> Result<()> {
    // SQL functions in this process reach Flight workers (`shap.workers`) through the pool.
    #[cfg(feature = "flight")]
    shapfusion::flight::install();
    match cli.command {
        Command::Explain(a) => {
            let options = ExplainOptions {
                settings: ComputeSettings { index: a.index, ..a.compute.settings()? },
                output: if a.interactions {
                    OutputKind::Interactions
                } else if a.margin {
                    OutputKind::Margin
                } else {
                    OutputKind::Shap
                },
                keep: a.keep,
                batch_rows: a.batch_rows,
                progress: (!a.no_progress).then(|| Arc::new(ProgressBarOnStderr::default()) as Arc<dyn Progress>),
                background: None,
            };
            let local = |mut options: ExplainOptions| match &a.background {
                Some(path) => {
                    let model = shapfusion::load_model(&a.model)?;
                    options.background = Some(read_background(path, &model, a.background_rows, a.seed)?);
                    explain_with_model(Arc::new(model), &a.input, &a.output, &options)
                }
                None => explain_file(&a.model, &a.input, &a.output, &options),
            };
            #[cfg(feature = "flight")]
            let s = match &a.workers {
                Some(_) if a.background_rows.is_some() => {
                    return Err(shapfusion::Error::InvalidArgument(
                        "--background-rows with --workers: the workers use every row of the background they registered; write the sample to a file, register that on the workers and pass it as --background".into(),
                    ))
                }
                Some(workers) => explain_remote(
                    &a.model,
                    a.background.as_deref(),
                    workers,
                    a.worker_token_file.as_deref().unwrap_or(""),
                    &a.input,
                    &a.output,
                    &options,
                )?,
                None => local(options)?,
            };
            #[cfg(not(feature = "flight"))]
            let s = local(options)?;
            let rate = if s.seconds > 0.0 { s.rows as f64 / s.seconds } else { 0.0 };
            eprintln!("explained {} rows with {} in {:.2}s ({:.0} rows/s) -> {}", s.rows, s.algorithm, s.seconds, rate, a.output.display());
            Ok(())
        }
        #[cfg(feature = "sql")]
        Command::Sql(a) => async_runtime()?.block_on(shell::run(ShellOptions {
            commands: a.commands,
            files: a.files,
            setup: SessionSetup {
                models: a.models.models,
                backgrounds: a.models.backgrounds,
                model_dir: a.models.model_dir,
                workers: a.workers,
                worker_token_file: a.worker_token_file,
                names_only: false,
                memory_limit: None,
                #[cfg(feature = "ballista")]
                backend: a.ballista.backend()?,
                #[cfg(not(feature = "ballista"))]
                backend: None,
            },
            format: a.format,
            output: a.output,
            quiet: a.quiet,
        })),
        #[cfg(feature = "flight")]
        Command::Worker(a) => run_worker(a),
        #[cfg(feature = "flight")]
        Command::Serve(a) => run_serve(a),
        #[cfg(feature = "ballista")]
        Command::Ballista { command } => run_ballista(command),
        #[cfg(feature = "flight")]
        Command::Health { url, timeout } => {
            let reply = async_runtime()?.block_on(shapfusion::flight::health(&url, std::time::Duration::from_secs_f64(timeout)))?;
            println!("{reply}");
            Ok(())
        }
        Command::Plot { command } => plot::run(command),
        Command::Models { command: ModelsCommand::Inspect { path, json } } => {
            let model = shapfusion::load_model(&path)?;
            let s = model.summary();
            if json {
                println!("{}", serde_json::to_string_pretty(&s).expect("summary serialises"));
            } else {
                println!("model:          {}", path.display());
                println!("format:         {}{}", s.format, s.library_version.map(|v| format!(" (version {v})")).unwrap_or_default());
                println!("objective:      {}", s.objective);
                println!("trees:          {}", s.trees);
                println!("max depth:      {}", s.max_depth);
                println!("leaves:         {}", s.leaves);
                if s.linear_leaves > 0 {
                    println!("linear leaves:  {} (LightGBM linear_tree: values over a background only)", s.linear_leaves);
                }
                println!("output groups:  {}", s.output_groups);
                println!("base margin:    {:?}", s.base_margin);
                println!("features ({}): {}", s.features.len(), s.features.join(", "));
                if !s.categorical.is_empty() {
                    println!("categorical:    {}", s.categorical.join(", "));
                }
                for (feature, categories) in &s.stored_categories {
                    let shown: Vec<&str> = categories.iter().take(12).map(String::as_str).collect();
                    let more = if categories.len() > shown.len() { ", ..." } else { "" };
                    println!("  {feature}: {} stored categories: {}{more}", categories.len(), shown.join(", "));
                }
                if !s.combinations.is_empty() {
                    // CatBoost's CTRs of feature combinations: each is credited to its categorical
                    // features together.
                    println!("feature combinations ({}):", s.combinations.len());
                    for combination in s.combinations.iter().take(12) {
                        println!("  {combination}");
                    }
                    if s.combinations.len() > 12 {
                        println!("  ...");
                    }
                }
            }
            Ok(())
        }
    }
}

#[cfg(feature = "sql")]
fn async_runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| shapfusion::Error::external(shapfusion::ErrorKind::Internal, "cannot start the async runtime", e))
}

#[cfg(feature = "flight")]
fn explain_remote(
    model: &std::path::Path,
    background: Option<&std::path::Path>,
    workers: &str,
    token_file: &str,
    input: &std::path::Path,
    output: &std::path::Path,
    options: &ExplainOptions,
) -> Result<shapfusion::pipeline::ExplainSummary> {
    let pool = shapfusion::flight::shared_pool(workers, token_file)?;
    let (reference, version) = worker_reference(model)?;
    // A background is one the workers registered with this file's path, and this copy's content
    // pins it: workers never read a path a client names, and none may use other rows.
    let background = match background {
        Some(path) if !path.is_file() => {
            return Err(shapfusion::Error::InvalidArgument(format!(
                "--background {} with --workers: not a file here; pass the background file the workers registered (worker --background NAME=PATH), whose content pins the rows they use",
                path.display()
            )))
        }
        Some(path) => Some(pinned_file(path)?),
        None => None,
    };
    shapfusion::flight::explain_on_workers(pool, &reference, version, background, input, output, options)
}

/// How a file named on the command line is sent to workers: a local file as an absolute
/// file:// URL (workers on this machine, or with the same path mounted, registered it under that
/// path) with its content hash, which pins the version the workers must have; anything else as
/// given (a name or URL the workers resolve), unpinned.
#[cfg(feature = "flight")]
fn worker_reference(path: &std::path::Path) -> Result<(String, Option<String>)> {
    if path.is_file() {
        let (url, version) = pinned_file(path)?;
        Ok((url, Some(version)))
    } else {
        Ok((path.to_string_lossy().into_owned(), None))
    }
}

/// A local file's absolute file:// URL and content hash.
#[cfg(feature = "flight")]
fn pinned_file(path: &std::path::Path) -> Result<(String, String)> {
    let bytes = std::fs::read(path).map_err(|e| shapfusion::Error::io(path, e))?;
    Ok((shapfusion::registry::to_url(&path.to_string_lossy())?.to_string(), shapfusion::registry::content_hash(&bytes)))
}

#[cfg(feature = "flight")]
fn run_worker(a: WorkerArgs) -> Result<()> {
    use shapfusion::flight::{WorkerConfig, WorkerService};
    use shapfusion::net::transport;
    // The service checks the device, so a GPU that cannot be used stops the worker before it
    // listens; the engines get the device as asked, so `auto` keeps its per-model CPU fallback.
    let config = WorkerConfig {
        settings: a.compute.settings()?,
        model_dir: a.server.models.model_dir.clone(),
        token: a.server.access.token()?,
        stuck_after: std::time::Duration::from_secs(a.stuck_after_secs),
        admission: a.server.admission(),
    };
    // Workers load the models the operator configured, never a path or URL a client names.
    let registry = std::sync::Arc::new(shapfusion::registry::ModelRegistry::names_only(None));
    registry.register_args(&a.server.models.models, &a.server.models.backgrounds)?;
    let listen = a.server.listen(&a.listen);
    async_runtime()?.block_on(async move {
        let service = WorkerService::new(registry, config)?;
        let (listener, _) = transport::bind(&listen, "shapfusion worker").await?;
        let metrics = service.metrics();
        a.server.start_metrics("shapfusion worker", metrics).await?;
        // Open sessions end between their requests once the worker stops: the server waits for
        // its open calls, and a session's client may keep one open for hours.
        let sessions = service.session_closer();
        let stopping = async move {
            transport::shutdown_signal().await;
            sessions.close();
        };
        transport::serve(service, listener, &listen, stopping).await
    })
}

#[cfg(feature = "ballista")]
fn run_ballista(command: BallistaCommand) -> Result<()> {
    match command {
        BallistaCommand::Scheduler(a) => {
            let options = shapfusion::ballista::SchedulerOptions {
                listen: a.member.access.listen(&a.listen),
                external_host: a.member.external_host.clone(),
                token: a.member.access.token()?,
                models: a.member.models(),
                data_roots: a.data_roots,
                allow_write: a.allow_write,
                executor_timeout_secs: a.executor_timeout_secs,
                runtime: None,
            };
            async_runtime()?.block_on(async move {
                let running = shapfusion::ballista::start_scheduler(options).await?;
                running.task.await.map_err(|e| shapfusion::Error::external(shapfusion::ErrorKind::Internal, "scheduler task", e))?
            })
        }
        BallistaCommand::Executor(a) => {
            let options = shapfusion::ballista::ExecutorOptions {
                listen: a.member.access.listen(&a.listen),
                external_host: a.member.external_host.clone(),
                scheduler: a.scheduler,
                token: a.member.access.token()?,
                models: a.member.models(),
                concurrent_tasks: a.concurrent_tasks,
                work_dir: a.work_dir,
                heartbeat_secs: a.heartbeat_secs,
                executor_id: a.executor_id,
                runtime: None,
            };
            async_runtime()?.block_on(shapfusion::ballista::run_executor(options))
        }
        BallistaCommand::Health { url, timeout } => {
            let reply = async_runtime()?.block_on(shapfusion::ballista::health(&url, std::time::Duration::from_secs_f64(timeout)))?;
            println!("{reply}");
            Ok(())
        }
    }
}

#[cfg(feature = "flight")]
fn run_serve(a: ServeArgs) -> Result<()> {
    use shapfusion::net::transport;
    use shapfusion::serve::SqlService;
    use shapfusion::sql::AccessPolicy;
    let token = a.server.access.token()?;
    let policy = AccessPolicy::new(&a.data_roots, &a.allow_write)?;
    let listen = a.server.listen(&a.listen);
    async_runtime()?.block_on(async move {
        let setup = SessionSetup {
            models: a.server.models.models.clone(),
            backgrounds: a.server.models.backgrounds.clone(),
            model_dir: a.server.models.model_dir.clone(),
            workers: a.workers.clone(),
            worker_token_file: a.worker_token_file.clone(),
            names_only: true,
            memory_limit: Some(a.memory_limit.0),
            #[cfg(feature = "ballista")]
            backend: a.ballista.backend()?,
            #[cfg(not(feature = "ballista"))]
            backend: None,
        };
        let (ctx, registry, _stores) = shell::new_session(&setup).await?;
        let admission = a.server.admission();
        let watched = admission.clone();
        let render: shapfusion::net::metrics::Render = std::sync::Arc::new(move || {
            let mut page = shapfusion::net::metrics::Exposition::default();
            page.admission("shapfusion_serve_requests", "Flight SQL calls", &watched.stats());
            page.finish()
        });
        let mut service = SqlService::new(ctx, registry, token, policy, admission);
        if let Some(backend) = setup.backend.clone() {
            service = service.on_backend(backend);
        }
        for t in &a.tables {
            service.register_table(t).await?;
        }
        let (listener, _) = transport::bind(&listen, "shapfusion serve").await?;
        a.server.start_metrics("shapfusion serve", render).await?;
        transport::serve(service, listener, &listen, transport::shutdown_signal()).await
    })
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn every_subcommand_has_consistent_flags() {
        // clap checks flag names, ids, conflicts and requirements when a command is first
        // built; this builds them all (a clash otherwise shows only when that command runs).
        super::Cli::command().debug_assert();
    }
}
