//! `shapfusion ballista scheduler`: Ballista's scheduler with the shap UDFs, the operator's
//! models, a token check on every call, and an access check on every plan it is sent.

use std::net::SocketAddr;
use std::sync::Arc;

use ballista_core::config::TaskSchedulingPolicy;
use ballista_core::extension::{ballista_aggregate_functions, ballista_scalar_functions, ballista_window_functions};
use ballista_core::serde::protobuf::scheduler_grpc_server::SchedulerGrpcServer;
use ballista_core::serde::{BallistaCodec, BallistaLogicalExtensionCodec};
use ballista_core::utils::{create_grpc_server, GrpcServerConfig};
use ballista_scheduler::cluster::BallistaCluster;
use ballista_scheduler::config::SchedulerConfig;
use ballista_scheduler::metrics::default_metrics_collector;
use ballista_scheduler::scheduler_server::SchedulerServer;
use datafusion::common::config::ConfigOptions;
use datafusion::common::{plan_datafusion_err, Result as DfResult};
use datafusion::execution::runtime_env::{RuntimeEnv, RuntimeEnvBuilder};
use datafusion::execution::SessionStateBuilder;
use datafusion::logical_expr::LogicalPlan;
use datafusion::optimizer::AnalyzerRule;
use datafusion::prelude::{SessionConfig, SessionContext};
use datafusion_proto::protobuf::{LogicalPlanNode, PhysicalPlanNode};
use tokio_stream::wrappers::TcpListenerStream;

use super::{cluster_config, token_interceptor, ClusterModels};
use shapfusion_core::error::{Error, ErrorKind, Result};
use shapfusion_flight::net::transport::{self, ListenOptions};
use shapfusion_sql::AccessPolicy;
use shapfusion_sql::ShapOptions;

/// How a scheduler runs.
#[derive(Debug, Clone)]
pub struct SchedulerOptions {
    /// Where to listen (loopback unless a token is configured or `--insecure-no-auth`).
    pub listen: ListenOptions,
    /// The host name executors and clients reach this scheduler at (default: the listen host).
    pub external_host: Option<String>,
    /// The cluster token every call must carry.
    pub token: Option<String>,
    /// Models and background sets queries may name.
    pub models: ClusterModels,
    /// Prefixes under which queries may scan files (`--data-root`).
    pub data_roots: Vec<String>,
    /// Prefixes under which `COPY … TO` may write (`--allow-write`).
    pub allow_write: Vec<String>,
    /// Seconds without a heartbeat after which an executor counts as lost and its tasks run
    /// elsewhere.
    pub executor_timeout_secs: u64,
    /// The object stores models and data are read through (default: stores built from each
    /// URL and the environment's credentials).
    pub runtime: Option<Arc<RuntimeEnv>>,
}

/// A scheduler running in this process.
pub struct RunningScheduler {
    /// The address it listens on.
    pub addr: SocketAddr,
    /// The serving task (ends with an error if the server fails).
    pub task: tokio::task::JoinHandle<Result<()>>,
}

/// Refuses plans that scan outside the data roots or write outside the write roots, before
/// the scheduler plans them (clients name files in the plan they send).
#[derive(Debug)]
struct AccessRule(AccessPolicy);

impl AnalyzerRule for AccessRule {
    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> DfResult<LogicalPlan> {
        self.0.check(&plan).and_then(|()| self.0.check_scans(&plan)).map_err(|e| plan_datafusion_err!("{e}"))?;
        Ok(plan)
    }

    fn name(&self) -> &str {
        "shapfusion_access"
    }
}

/// Binds the scheduler's port and starts serving; returns once it listens.
pub async fn start_scheduler(options: SchedulerOptions) -> Result<RunningScheduler> {
    let what = "shapfusion ballista scheduler";
    let policy = AccessPolicy::new(&options.data_roots, &options.allow_write)?;
    let (listener, addr) = transport::bind(&options.listen, what).await?;
    let runtime = match options.runtime.clone() {
        Some(runtime) => runtime,
        None => RuntimeEnvBuilder::new()
            .with_object_store_registry(Arc::new(shapfusion_sql::file_guard::GuardedStores::default()))
            .build_arc()
            .map_err(|e| shapfusion_sql::from_datafusion(what, e))?,
    };
    let registry = options.models.registry(Some(runtime.clone()))?;

    let model_dir = options.models.model_dir.clone();
    let session_registry = registry.clone();
    let rule = Arc::new(AccessRule(policy));
    let session_builder = Arc::new(move |config: SessionConfig| {
        let config = operator_scoped(config, model_dir.as_deref());
        let state = SessionStateBuilder::new()
            .with_default_features()
            .with_config(config)
            .with_runtime_env(runtime.clone())
            .with_optimizer_rules(ballista_core::optimizer::ballista_default_optimizer_rules())
            .with_analyzer_rule(rule.clone())
            .with_scalar_functions(ballista_scalar_functions())
            .with_aggregate_functions(ballista_aggregate_functions())
            .with_window_functions(ballista_window_functions())
            .build();
        let ctx = SessionContext::new_with_state(state);
        shapfusion_sql::register_with(&ctx, session_registry.clone()).map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?;
        Ok(ctx.state())
    });
    let token = options.token.clone();
    let config_producer = Arc::new(move || cluster_config(token.as_deref()));

    let host = match &options.external_host {
        Some(host) => host.clone(),
        None if addr.ip().is_unspecified() => super::own_host_name().ok_or_else(|| {
            Error::InvalidArgument(format!("{what}: listening on {addr}; give the external host name other machines reach this one at"))
        })?,
        None => addr.ip().to_string(),
    };
    let endpoint = format!("{host}:{}", addr.port());
    let mut config = SchedulerConfig::default().with_hostname(host).with_port(addr.port()).with_scheduler_policy(TaskSchedulingPolicy::PullStaged);
    config.bind_host = addr.ip().to_string();
    config.executor_timeout_seconds = options.executor_timeout_secs;
    config.no_executors_grace_period_seconds = options.executor_timeout_secs;
    config.expire_dead_executor_interval_seconds = (options.executor_timeout_secs / 4).clamp(1, 15);
    if let Some(token) = &options.token {
        config.override_create_grpc_client_endpoint = Some(crate::client::token_agent(token)?);
    }
    let codec = BallistaCodec::new(
        Arc::new(BallistaLogicalExtensionCodec::default()),
        Arc::new(super::ShapPhysicalCodec::new(registry, options.models.model_dir.clone(), "scheduler")),
    );
    let cluster = BallistaCluster::new_memory(endpoint.clone(), session_builder, config_producer);
    let ballista = |e: ballista_core::error::BallistaError| Error::external(ErrorKind::Internal, what, e);
    let metrics = default_metrics_collector().map_err(ballista)?;
    let mut server: SchedulerServer<LogicalPlanNode, PhysicalPlanNode> =
        SchedulerServer::new(endpoint, cluster, codec, Arc::new(config.clone()), metrics);
    server.init().await.map_err(ballista)?;

    let grpc = SchedulerGrpcServer::new(server)
        .max_decoding_message_size(config.grpc_server_max_decoding_message_size as usize)
        .max_encoding_message_size(config.grpc_server_max_encoding_message_size as usize);
    let service = tonic::service::interceptor::InterceptedService::new(grpc, token_interceptor(options.token.clone()));
    let task = tokio::spawn(async move {
        create_grpc_server(&GrpcServerConfig::default())
            .add_service(service)
            .serve_with_incoming_shutdown(TcpListenerStream::new(listener), transport::shutdown_signal())
            .await
            .map_err(|e| Error::external(ErrorKind::Internal, format!("{what} stopped"), e))
    });
    Ok(RunningScheduler { addr, task })
}

/// The client's session settings with the server-scoped `shap.*` options replaced by the
/// operator's: a client picks the algorithm or a registered background, never where models
/// are looked up or which workers see its rows.
fn operator_scoped(mut config: SessionConfig, model_dir: Option<&str>) -> SessionConfig {
    if config.options().extensions.get::<ShapOptions>().is_none() {
        config = config.with_option_extension(ShapOptions::default());
    }
    if let Some(shap) = config.options_mut().extensions.get_mut::<ShapOptions>() {
        let operator = ShapOptions::default();
        shap.model_dir = model_dir.unwrap_or_default().to_string();
        shap.workers.clone_from(&operator.workers);
        shap.worker_token_file.clone_from(&operator.worker_token_file);
        shap.v2_memory_mb = operator.v2_memory_mb;
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clients_cannot_move_model_lookups_or_rows() {
        let mut config = SessionConfig::new().with_option_extension(ShapOptions::default());
        for (k, v) in [("shap.model_dir", "/etc"), ("shap.workers", "http://evil:1"), ("shap.algorithm", "linear"), ("shap.v2_memory_mb", "999999")] {
            config.options_mut().set(k, v).unwrap();
        }
        let config = operator_scoped(config, Some("/models"));
        let shap = config.options().extensions.get::<ShapOptions>().unwrap();
        assert_eq!(shap.model_dir, "/models");
        assert_eq!(shap.workers, "");
        assert_eq!(shap.v2_memory_mb, ShapOptions::default().v2_memory_mb);
        // What the client may choose survives.
        assert_eq!(shap.algorithm, "linear");
    }
}
