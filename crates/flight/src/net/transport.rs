//! gRPC plumbing shared by the worker, the pool and `serve`: listening (with optional TLS and a
//! graceful stop on SIGTERM/Ctrl-C), connecting, and the HTTP/2 window and message sizes that let
//! large record batches through at full speed.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use arrow_flight::flight_service_client::FlightServiceClient;
use arrow_flight::flight_service_server::{FlightService, FlightServiceServer};
use arrow_flight::FlightClient;
use futures::TryStreamExt;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity, Server, ServerTlsConfig};

use shapfusion_core::error::{Error, ErrorKind, Result};

/// Default limit of one gRPC message, both directions (a record batch is one message unless
/// the sender splits it). Large enough for 64k-row batches of 500 features.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 256 << 20;

/// HTTP/2 windows: the defaults (64 KiB) throttle multi-megabyte batches on fast links.
const STREAM_WINDOW: u32 = 8 << 20;
const CONNECTION_WINDOW: u32 = 32 << 20;

/// Selects rustls' crypto provider once per process. Both `ring` (through the object-store
/// HTTP stack) and `aws-lc-rs` (through tonic) are linked, and rustls refuses to guess.
fn install_crypto_provider() {
    static INSTALLED: std::sync::Once = std::sync::Once::new();
    INSTALLED.call_once(|| {
        // Err means another part of the process installed one first; that one is used.
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    });
}

/// Where and how a server listens.
#[derive(Debug, Clone)]
pub struct ListenOptions {
    /// `host:port` (port 0 picks a free port; the chosen address is printed).
    pub listen: String,
    /// PEM certificate chain and private key: serve TLS instead of plaintext.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// Largest gRPC message accepted or sent, in bytes.
    pub max_message_bytes: usize,
    /// Whether calls must carry a token (`--token-file`).
    pub authenticated: bool,
    /// `--insecure-no-auth`: listen beyond loopback without a token (warned at every start).
    pub insecure_no_auth: bool,
    /// How the operator allows listening beyond loopback, in the front end's own terms (the
    /// command line's flags), added to the refusal; `None`: it is said in words.
    pub remedy: Option<String>,
}

impl ListenOptions {
    /// Loopback plaintext without a token: for tests and in-process examples.
    pub fn local(listen: &str) -> ListenOptions {
        ListenOptions {
            listen: listen.to_string(),
            tls: None,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            authenticated: false,
            insecure_no_auth: false,
            remedy: None,
        }
    }
}

/// Refuses to expose an unauthenticated server beyond this machine: a non-loopback address
/// needs a token, or `--insecure-no-auth`, which is warned about at every start. A token sent in
/// clear over a network is warned about too.
pub fn check_exposure(addr: SocketAddr, options: &ListenOptions, what: &str) -> Result<()> {
    if addr.ip().is_loopback() {
        return Ok(());
    }
    if !options.authenticated {
        if !options.insecure_no_auth {
            return Err(Error::InvalidArgument(format!(
                "{what}: refusing to listen on {addr} without authentication: anyone who reaches that address could use it. \
                 Configure a token (clients then send 'authorization: Bearer <token>'), listen on 127.0.0.1, \
                 or allow unauthenticated calls from the network explicitly{}",
                options.remedy.as_deref().map(|r| format!(" ({r})")).unwrap_or_default()
            )));
        }
        tracing::warn!("{what}: listening on {addr} without authentication, as configured: anyone who reaches this address can run requests");
    } else if options.tls.is_none() {
        tracing::warn!("{what}: listening on {addr} without TLS: the bearer token travels in clear; configure a certificate and key");
    }
    Ok(())
}

/// Binds the listener and says where it listens on stdout (`listening on http://…`), which
/// scripts and tests read to find a port-0 server. Refuses an unauthenticated non-loopback
/// address (see [`check_exposure`]) before accepting anything.
pub async fn bind(options: &ListenOptions, what: &str) -> Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(&options.listen)
        .await
        .map_err(|e| Error::external(ErrorKind::Io, format!("{what}: cannot listen on {}", options.listen), e))?;
    let addr = listener.local_addr().map_err(|e| Error::external(ErrorKind::Io, what, e))?;
    check_exposure(addr, options, what)?;
    let scheme = if options.tls.is_some() { "https" } else { "http" };
    println!("{what} listening on {scheme}://{addr}");
    use std::io::Write;
    let _ = std::io::stdout().flush();
    Ok((listener, addr))
}

/// How long calls in flight may run on after a shutdown signal before the server stops anyway.
pub const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(60);

/// Serves a Flight service on `listener` until `shutdown` resolves, then stops accepting and
/// lets in-flight calls finish (for at most [`SHUTDOWN_GRACE`]).
pub async fn serve<S: FlightService>(
    service: S,
    listener: TcpListener,
    options: &ListenOptions,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> Result<()> {
    let svc =
        FlightServiceServer::new(service).max_decoding_message_size(options.max_message_bytes).max_encoding_message_size(options.max_message_bytes);
    let mut builder = Server::builder().initial_stream_window_size(STREAM_WINDOW).initial_connection_window_size(CONNECTION_WINDOW).tcp_nodelay(true);
    if let Some((cert, key)) = &options.tls {
        install_crypto_provider();
        let cert_pem = std::fs::read(cert).map_err(|e| Error::io(cert, e))?;
        let key_pem = std::fs::read(key).map_err(|e| Error::io(key, e))?;
        builder = builder
            .tls_config(ServerTlsConfig::new().identity(Identity::from_pem(cert_pem, key_pem)))
            .map_err(|e| Error::external(ErrorKind::BadData, format!("TLS set-up with {} and {}", cert.display(), key.display()), e))?;
    }
    // The server gets a copy of the signal; the original starts the grace period.
    let (signalled_tx, signalled_rx) = tokio::sync::oneshot::channel::<()>();
    let shutdown = async move {
        shutdown.await;
        let _ = signalled_tx.send(());
    };
    let grace = async move {
        if signalled_rx.await.is_ok() {
            tokio::time::sleep(SHUTDOWN_GRACE).await;
            tracing::warn!("calls still in flight after {}s; stopping anyway", SHUTDOWN_GRACE.as_secs());
        } else {
            std::future::pending::<()>().await;
        }
    };
    let served = builder
        .add_service(svc)
        // `Server::tcp_nodelay` only applies to listeners tonic opens itself; without it, small
        // replies wait out delayed ACKs (~40 ms a request).
        .serve_with_incoming_shutdown(
            TcpListenerStream::new(listener).map_ok(|s| {
                let _ = s.set_nodelay(true);
                s
            }),
            shutdown,
        );
    tokio::select! {
        r = served => r.map_err(|e| Error::external(ErrorKind::Internal, "server stopped", e)),
        _ = grace => Ok(()),
    }
}

/// Resolves on SIGTERM or Ctrl-C (SIGINT), logging which.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("install SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => tracing::info!("interrupted; finishing requests in flight"),
            _ = term.recv() => tracing::info!("SIGTERM; finishing requests in flight"),
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
        tracing::info!("interrupted; finishing requests in flight");
    }
}

/// How a client reaches a Flight server.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// Time allowed to open the connection.
    pub connect_timeout: Duration,
    /// Bearer token sent on every call (warned about once per URL over plaintext `http://` to
    /// another machine).
    pub token: Option<String>,
    /// PEM CA certificate to trust for `https://` servers (system roots otherwise).
    pub ca_cert: Option<PathBuf>,
    /// Largest gRPC message accepted or sent, in bytes.
    pub max_message_bytes: usize,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions { connect_timeout: Duration::from_secs(3), token: None, ca_cert: None, max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES }
    }
}

/// A lazily connecting channel to `url` (`http://host:port` or `https://…`).
pub fn endpoint(url: &str, options: &ConnectOptions) -> Result<Endpoint> {
    let mut endpoint = Endpoint::from_shared(url.to_string())
        .map_err(|e| Error::external(ErrorKind::InvalidArgument, format!("bad worker URL {url:?} (expected http://host:port)"), e))?
        .connect_timeout(options.connect_timeout)
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(10))
        .keep_alive_timeout(Duration::from_secs(10));
    if options.token.is_some() && url.starts_with("http://") && !is_loopback_url(url) {
        warn_once(url);
    }
    if url.starts_with("https://") {
        install_crypto_provider();
        let mut tls = ClientTlsConfig::new().with_enabled_roots();
        if let Some(ca) = &options.ca_cert {
            let pem = std::fs::read(ca).map_err(|e| Error::io(ca, e))?;
            tls = tls.ca_certificate(Certificate::from_pem(pem));
        }
        endpoint = endpoint.tls_config(tls).map_err(|e| Error::external(ErrorKind::BadData, format!("TLS for {url}"), e))?;
    }
    Ok(endpoint)
}

/// Whether `url`'s host is this machine.
fn is_loopback_url(url: &str) -> bool {
    let host = url.split("://").nth(1).unwrap_or("").split(['/', '?']).next().unwrap_or("");
    let host = host.rsplit_once(':').map_or(host, |(h, _)| h).trim_matches(['[', ']']);
    host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// Warns once per URL that a token is sent in clear.
fn warn_once(url: &str) {
    static WARNED: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut warned = WARNED.lock().unwrap_or_else(|e| e.into_inner());
    if !warned.iter().any(|u| u == url) {
        warned.push(url.to_string());
        tracing::warn!("sending the worker token to {url} in clear (http://); use https:// workers (TLS on the worker)");
    }
}

/// A Flight client on `channel` with our message limits and the bearer token.
pub fn client(channel: Channel, options: &ConnectOptions) -> Result<FlightClient> {
    let inner =
        FlightServiceClient::new(channel).max_decoding_message_size(options.max_message_bytes).max_encoding_message_size(options.max_message_bytes);
    let mut client = FlightClient::new_from_inner(inner);
    if let Some(token) = &options.token {
        client.add_header("authorization", &format!("Bearer {token}")).map_err(|e| Error::external(ErrorKind::InvalidArgument, "bad token", e))?;
    }
    Ok(client)
}
