//! Sessions whose queries run on an Apache Ballista cluster (`sql --ballista`, `serve
//! --ballista`, and library users through [`remote_context`]).
//!
//! The client plans the SQL (so it resolves models for their types, as a local session does),
//! then Ballista's query planner sends the logical plan to the scheduler, which plans it again
//! with its own registry (that is where model versions are pinned) and runs it on executors.
//!
//! A token reaches every Ballista server the session talks to: the scheduler through gRPC
//! metadata (`authorization: Bearer …`), executors (result fetches) through the user agent of
//! the Flight channel, because Ballista 55 lets a client customise that channel's endpoint but
//! not add headers to it. Servers accept either form (see `ballista` and `net::auth`).

use std::collections::HashMap;
use std::sync::Arc;

use ballista_core::extension::{SessionConfigExt, SessionStateExt};
use datafusion::execution::runtime_env::RuntimeEnv;
use datafusion::prelude::{SessionConfig, SessionContext};

use shapfusion_core::error::{Error, Result};
use shapfusion_flight::net::auth::TOKEN_AGENT_PREFIX;
use shapfusion_sql::SessionBackend;

/// The port Ballista's scheduler listens on when a `df://` URL names none.
pub const DEFAULT_SCHEDULER_PORT: u16 = 50050;

/// A Ballista scheduler to run queries on.
#[derive(Debug, Clone)]
pub struct RemoteScheduler {
    /// `df://host:port` (or `http://host:port`).
    pub url: String,
    /// The cluster's token, if it requires one.
    pub token: Option<String>,
}

impl RemoteScheduler {
    /// The scheduler's gRPC address (`http://host:port`) from a `df://host[:port]` or
    /// `http://host[:port]` URL.
    pub fn grpc_address(&self) -> Result<String> {
        let bad = |why: &str| {
            Error::InvalidArgument(format!("Ballista scheduler {:?}: {why}; expected df://HOST:PORT, e.g. df://127.0.0.1:50050", self.url))
        };
        let url = url::Url::parse(&self.url).map_err(|e| bad(&e.to_string()))?;
        if !matches!(url.scheme(), "df" | "http") {
            return Err(bad(&format!("unsupported scheme {:?}", url.scheme())));
        }
        let host = url.host_str().filter(|h| !h.is_empty()).ok_or_else(|| bad("no host"))?;
        Ok(format!("http://{host}:{}", url.port().unwrap_or(DEFAULT_SCHEDULER_PORT)))
    }
}

/// Sessions of `shapfusion sql --ballista` and `serve --ballista`: their queries run on the
/// scheduler's cluster.
impl SessionBackend for RemoteScheduler {
    fn new_context(&self, config: SessionConfig, runtime: Arc<RuntimeEnv>) -> Result<SessionContext> {
        remote_context(config, runtime, self)
    }
}

/// `config` with Ballista's settings and, when `token` is set, the credentials every Ballista
/// channel of the session sends.
fn remote_config(config: SessionConfig, token: Option<&str>) -> Result<SessionConfig> {
    let config = config.upgrade_for_ballista();
    let Some(token) = token else { return Ok(config) };
    Ok(config
        .with_ballista_grpc_metadata(HashMap::from([("authorization".to_string(), format!("Bearer {token}"))]))
        .with_ballista_override_create_grpc_client_endpoint(token_agent(token)?))
}

/// An endpoint customisation that puts the token in the channel's user agent.
pub fn token_agent(token: &str) -> Result<ballista_core::extension::EndpointOverrideFn> {
    let agent = format!("{TOKEN_AGENT_PREFIX}{token}");
    // Checked once here, so the closure's own check cannot fail later.
    tonic::metadata::MetadataValue::<tonic::metadata::Ascii>::try_from(agent.as_str())
        .map_err(|_| Error::InvalidArgument("the token is not a valid header value (printable ASCII only)".into()))?;
    Ok(Arc::new(move |endpoint: tonic::transport::Endpoint| {
        endpoint.user_agent(agent.clone()).map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)
    }))
}

/// A session on `runtime` whose queries run on `scheduler`: `config` with Ballista's settings
/// and the scheduler's token. Ballista replaces the session's functions with its own set while
/// upgrading, so register the shap UDFs on it afterwards ([`shapfusion_sql::register_with`]); URL
/// tables and catalogs that keep a reference to their session also come after.
pub fn remote_context(config: SessionConfig, runtime: Arc<RuntimeEnv>, scheduler: &RemoteScheduler) -> Result<SessionContext> {
    let address = scheduler.grpc_address()?;
    let local = SessionContext::new_with_config_rt(remote_config(config, scheduler.token.as_deref())?, runtime);
    let state = local
        .state()
        .upgrade_for_ballista(address)
        .map_err(|e| shapfusion_sql::from_datafusion(format!("Ballista scheduler {}", scheduler.url), e))?;
    Ok(SessionContext::new_with_state(state))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scheduler_urls_become_grpc_addresses() {
        let at = |url: &str| RemoteScheduler { url: url.into(), token: None }.grpc_address();
        assert_eq!(at("df://10.0.0.5:50050").unwrap(), "http://10.0.0.5:50050");
        assert_eq!(at("df://scheduler").unwrap(), "http://scheduler:50050");
        assert_eq!(at("http://localhost:7000").unwrap(), "http://localhost:7000");
        let e = at("s3://bucket/x").unwrap_err().to_string();
        assert!(e.contains("unsupported scheme") && e.contains("df://HOST:PORT"), "{e}");
        assert!(at("not a url").is_err());
    }

    #[test]
    fn a_token_that_is_no_header_value_is_refused() {
        assert!(token_agent("ok-token").is_ok());
        let refused = token_agent("bad\ntoken").err().map(|e| e.to_string()).unwrap_or_default();
        assert!(refused.contains("printable ASCII"), "{refused}");
    }
}
