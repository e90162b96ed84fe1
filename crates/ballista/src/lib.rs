//! # shapfusion-ballista
//!
//! Distributed SQL on Apache Ballista: a scheduler and executors that know the shap UDFs.
//!
//! A client (`shapfusion sql --ballista`, `serve --ballista`, or a remote `SessionContext`
//! from [`client`]) sends its logical plan to the [scheduler](start_scheduler). The
//! scheduler plans it with its own model registry: expression simplification pins every
//! `shap(...)` call to the model (and background) version it resolves, and
//! [`ShapPhysicalCodec`] carries that pin to the [executors](run_executor), which load the same
//! URL from the shared store and refuse a different version. Executors scan their partitions,
//! compute through the same batch step as `explain`, and Ballista retries a failed task
//! elsewhere.
//!
//! Security follows the Flight servers: loopback unless a token is configured (or
//! `--insecure-no-auth`), the token checked on every call to the scheduler and to executors'
//! data service, models only from the operator's registry, and files scanned only under the
//! scheduler's `--data-root` prefixes.
//!
//! What it may use: every shapfusion crate but the CLI, Ballista and DataFusion.
#![warn(missing_docs)]

pub mod client;
mod codec;
mod executor;
mod scheduler;

use std::sync::Arc;

use ballista_core::extension::SessionConfigExt;
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::prelude::SessionConfig;
use tonic::{Request, Status};

pub use codec::ShapPhysicalCodec;
pub use executor::{run_executor, ExecutorOptions};
pub use scheduler::{start_scheduler, RunningScheduler, SchedulerOptions};

use shapfusion_core::error::Result;
use shapfusion_sql::registry::ModelRegistry;
use shapfusion_sql::ShapOptions;

/// The models and background sets a scheduler or executor serves: the same flags on every
/// member of the cluster, pointing at the same shared store.
#[derive(Debug, Clone, Default)]
pub struct ClusterModels {
    /// `NAME=URL` models.
    pub models: Vec<String>,
    /// `NAME=URL` background sets.
    pub backgrounds: Vec<String>,
    /// Where a model named NAME is looked up as `NAME.<ext>`, for each model file extension.
    pub model_dir: Option<String>,
}

impl ClusterModels {
    /// A registry of these names only (a server never loads a path or URL a client names).
    pub fn registry(&self, runtime: Option<Arc<RuntimeEnv>>) -> Result<Arc<ModelRegistry>> {
        let registry = Arc::new(ModelRegistry::names_only(runtime));
        registry.register_args(&self.models, &self.backgrounds)?;
        Ok(registry)
    }
}

/// The session configuration of a cluster member: Ballista's settings, the `shap.*` options
/// (so a client's `SET shap.algorithm` travels with its queries), and the token on the data
/// channels this member opens to executors.
fn cluster_config(token: Option<&str>) -> SessionConfig {
    let config = SessionConfig::new_with_ballista().with_option_extension(ShapOptions::default());
    match token.map(crate::client::token_agent) {
        Some(Ok(agent)) => config.with_ballista_override_create_grpc_client_endpoint(agent),
        // A token that is no header value was refused when the member started.
        _ => config,
    }
}

/// A gRPC interceptor refusing calls without the cluster token (bearer header, or the user
/// agent Ballista's own channels carry it in); no token configured: every call passes.
fn token_interceptor(token: Option<String>) -> impl FnMut(Request<()>) -> std::result::Result<Request<()>, Status> + Clone {
    move |request: Request<()>| {
        shapfusion_flight::net::auth::check(request.metadata(), token.as_deref())?;
        Ok(request)
    }
}

/// Whether a cluster member answers: a scheduler at `df://HOST:PORT`, or an executor's data
/// service at `http://HOST:PORT`. Any gRPC reply counts (a refusal for want of the token
/// included: the process serves); a connection failure or silence within `timeout` does not.
pub async fn health(url: &str, timeout: std::time::Duration) -> Result<String> {
    use ballista_core::serde::protobuf::scheduler_grpc_client::SchedulerGrpcClient;
    use ballista_core::serde::protobuf::GetJobStatusParams;
    let unreachable =
        |message: String| shapfusion_core::Error::Remote { worker: url.to_string(), message, kind: shapfusion_core::ErrorKind::Unavailable };
    let (address, scheduler) = match url.strip_prefix("df://") {
        Some(_) => (crate::client::RemoteScheduler { url: url.to_string(), token: None }.grpc_address()?, true),
        None => (url.to_string(), false),
    };
    let attempt = async {
        let channel = tonic::transport::Endpoint::from_shared(address.clone())
            .map_err(|e| unreachable(format!("bad address {address:?}: {e}")))?
            .connect_timeout(timeout)
            .connect()
            .await
            .map_err(|e| unreachable(format!("cannot connect: {e}")))?;
        let reply = if scheduler {
            SchedulerGrpcClient::new(channel).get_job_status(GetJobStatusParams { job_id: "health-check".into() }).await.map(|_| ())
        } else {
            arrow_flight::flight_service_client::FlightServiceClient::new(channel).list_actions(arrow_flight::Empty {}).await.map(|_| ())
        };
        match reply {
            Err(status) if status.code() == tonic::Code::Unavailable => Err(unreachable(status.message().to_string())),
            Err(status) => Ok(format!("{} serving (answered {:?})", if scheduler { "scheduler" } else { "executor" }, status.code())),
            Ok(()) => Ok(format!("{} serving", if scheduler { "scheduler" } else { "executor" })),
        }
    };
    tokio::time::timeout(timeout, attempt).await.map_err(|_| unreachable(format!("no reply within {timeout:?}")))?
}

/// The host name other machines reach this one at when it listens on every interface: the
/// kernel's host name (a container's id under Docker, which compose networks resolve).
fn own_host_name() -> Option<String> {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").ok()?;
    Some(name.trim().to_string()).filter(|n| !n.is_empty())
}
