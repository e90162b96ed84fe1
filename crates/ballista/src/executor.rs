//! `shapfusion ballista executor`: Ballista's executor with the shap UDFs. It computes with the
//! model versions each plan was pinned to (loaded from the shared store through the operator's
//! registry), serves its shuffle and result data only to callers with the cluster token, and
//! sends the token on its own calls to the scheduler and to other executors.

use std::net::SocketAddr;
use std::sync::Arc;

use arrow_flight::flight_service_server::FlightServiceServer;
use ballista_core::config::TaskSchedulingPolicy;
use ballista_core::registry::BallistaFunctionRegistry;
use ballista_core::utils::create_grpc_server;
use ballista_executor::executor_process::{start_executor_process, ExecutorProcessConfig};
use ballista_executor::flight_service::BallistaFlightService;
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::prelude::SessionContext;

use super::{cluster_config, token_interceptor, ClusterModels, ShapPhysicalCodec};
use shapfusion_core::error::{Error, ErrorKind, Result};
use shapfusion_flight::net::transport::{check_exposure, ListenOptions};

/// How an executor runs.
#[derive(Debug, Clone)]
pub struct ExecutorOptions {
    /// Where its Flight service (shuffle and result data) listens: loopback unless a token is
    /// configured or `--insecure-no-auth`. A port is required (Ballista advertises it).
    pub listen: ListenOptions,
    /// The host name other executors and clients reach it at (default: the listen host).
    pub external_host: Option<String>,
    /// The scheduler, `host:port`.
    pub scheduler: String,
    /// The cluster token.
    pub token: Option<String>,
    /// Models and background sets it may load (the scheduler's, on a shared store).
    pub models: ClusterModels,
    /// Tasks run at once (0: one per core).
    pub concurrent_tasks: usize,
    /// Directory for shuffle files (default: a new temporary directory).
    pub work_dir: Option<String>,
    /// Seconds between heartbeats to the scheduler.
    pub heartbeat_secs: u64,
    /// Its identity in the cluster and in errors (default: a random id).
    pub executor_id: Option<String>,
    /// The object stores models and data are read through (default: stores built from each
    /// URL and the environment's credentials, spilling into the work directory).
    pub runtime: Option<Arc<RuntimeEnv>>,
}

/// This machine's address on the route to `peer` (`host:port`): a UDP socket "connected" to it
/// (nothing is sent) has that interface's address as its own.
fn address_towards(peer: &str) -> Option<String> {
    let socket = std::net::UdpSocket::bind("0.0.0.0:0").ok()?;
    socket.connect(peer).ok()?;
    let ip = socket.local_addr().ok()?.ip();
    (!ip.is_unspecified()).then(|| ip.to_string())
}

/// Runs an executor until it is stopped (SIGTERM, Ctrl-C) or its services fail.
pub async fn run_executor(options: ExecutorOptions) -> Result<()> {
    let what = "shapfusion ballista executor";
    let addr: SocketAddr =
        options.listen.listen.parse().map_err(|e| {
            Error::external(ErrorKind::InvalidArgument, format!("{what}: listen address {:?} must be IP:PORT", options.listen.listen), e)
        })?;
    if addr.port() == 0 {
        return Err(Error::InvalidArgument(format!(
            "{what}: the listen address needs a port (the scheduler tells clients and other executors where to fetch data)"
        )));
    }
    check_exposure(addr, &options.listen, what)?;
    let (scheduler_host, scheduler_port) = options
        .scheduler
        .rsplit_once(':')
        .and_then(|(h, p)| Some((h.to_string(), p.parse::<u16>().ok()?)))
        .ok_or_else(|| Error::InvalidArgument(format!("{what}: scheduler {:?}: expected HOST:PORT, e.g. 127.0.0.1:50050", options.scheduler)))?;
    let mut config = ExecutorProcessConfig::default();
    if let Some(id) = &options.executor_id {
        config.executor_id = id.clone();
    }
    let external = match &options.external_host {
        Some(host) => host.clone(),
        // The address of the interface that reaches the scheduler: what the others reach too.
        None if addr.ip().is_unspecified() => address_towards(&options.scheduler).or_else(super::own_host_name).ok_or_else(|| {
            Error::InvalidArgument(format!("{what}: listening on {addr}; give the external host name other machines reach this one at"))
        })?,
        None => addr.ip().to_string(),
    };
    let here = format!("executor {} ({external}:{})", config.executor_id, addr.port());
    let work_dir = match &options.work_dir {
        Some(dir) => dir.clone(),
        None => {
            let dir = tempfile::Builder::new().prefix("shapfusion-executor-").tempdir().map_err(|e| Error::io("a work directory", e))?;
            dir.keep().to_string_lossy().into_owned()
        }
    };

    // One runtime for the registry's object stores and every task's, spilling into the work
    // directory.
    let runtime = match &options.runtime {
        Some(runtime) => runtime.clone(),
        None => RuntimeEnvBuilder::new()
            .with_temp_file_path(work_dir.clone())
            .with_object_store_registry(Arc::new(shapfusion_sql::file_guard::GuardedStores::default()))
            .build_arc()
            .map_err(|e| shapfusion_sql::from_datafusion(what, e))?,
    };
    let registry = options.models.registry(Some(runtime.clone()))?;
    let functions = {
        let ctx = SessionContext::new_with_config_rt(cluster_config(None), runtime.clone());
        shapfusion_flight::install();
        shapfusion_sql::register_with(&ctx, registry.clone())?;
        BallistaFunctionRegistry::from(&ctx.state())
    };
    let token = options.token.clone();

    config.bind_host = addr.ip().to_string();
    config.port = addr.port();
    config.external_host = Some(external.clone());
    config.scheduler_host = scheduler_host;
    config.scheduler_port = scheduler_port;
    config.scheduler_connect_timeout_seconds = 60;
    config.task_scheduling_policy = TaskSchedulingPolicy::PullStaged;
    config.vcores = options.concurrent_tasks;
    config.work_dir = Some(work_dir);
    config.executor_heartbeat_interval_seconds = options.heartbeat_secs.max(1);
    config.override_function_registry = Some(Arc::new(functions));
    config.override_physical_codec = Some(Arc::new(ShapPhysicalCodec::new(registry, options.models.model_dir.clone(), here.clone())));
    config.override_config_producer = Some(Arc::new(move || cluster_config(token.as_deref())));
    config.override_runtime_producer = Some(Arc::new(move |_| Ok(runtime.clone())));
    if let Some(token) = &options.token {
        config.override_create_grpc_client_endpoint = Some(crate::client::token_agent(token)?);
    }
    let flight_token = options.token.clone();
    let max_message = options.listen.max_message_bytes;
    config.override_arrow_flight_service = Some(Arc::new(move |work_dir, address, mut shutdown, grpc| {
        let flight = FlightServiceServer::new(BallistaFlightService::new(work_dir))
            .max_decoding_message_size(max_message)
            .max_encoding_message_size(max_message);
        let service = tonic::service::interceptor::InterceptedService::new(flight, token_interceptor(flight_token.clone()));
        tokio::spawn(async move {
            create_grpc_server(&grpc)
                .add_service(service)
                .serve_with_shutdown(address, shutdown.recv())
                .await
                .map_err(ballista_core::error::BallistaError::TonicError)
        })
    }));
    tracing::info!(%here, scheduler = %options.scheduler, "starting");
    println!("{what} {} listening on http://{addr} (advertised as {external}:{})", config.executor_id, addr.port());
    start_executor_process(Arc::new(config)).await.map_err(|e| Error::external(ErrorKind::Unavailable, here, e))
}
