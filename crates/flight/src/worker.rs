//! `shapfusion worker`: an Arrow Flight service that explains the record batches a client streams
//! in through `DoExchange` and streams the attributions back, one row per input row, in order.
//!
//! The batch path is the same as everywhere else (features → engine → layout); this module only
//! speaks Flight: descriptors, schemas, auth, actions and statistics.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use arrow::array::RecordBatch;
use arrow::datatypes::{Schema, SchemaRef};
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::flight_service_server::FlightService;
use arrow_flight::{
    Action, ActionType, Criteria, Empty, FlightData, FlightDescriptor, FlightInfo, HandshakeRequest, PollInfo, PutResult, SchemaAsIpc, SchemaResult,
    Ticket,
};
use bytes::Bytes;
use futures::stream;
use futures::{StreamExt, TryStreamExt};
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status, Streaming};

use super::protocol::{
    call_from_descriptor, decode_guarded, descriptor, output_schema, status_from_error, ModelInfo, WorkerStats, ACTION_HEALTH, ACTION_STATS,
    ACTION_VERSION, PROTOCOL_VERSION, REQUEST_BYTES_HEADER, SESSION_HEADER, UNDECODABLE,
};
use crate::net::auth;
use crate::net::limits::{Admission, Growth, Permit, SessionGuard, StatusStream, SMALL_REQUEST_BYTES};
use crate::net::metrics::{Exposition, Render};
use shapfusion_core::error::{Error, Result};
use shapfusion_core::expected_panic;
use shapfusion_core::features::FeatureColumns;
use shapfusion_core::ComputeSettings;
use shapfusion_core::{Explainer, OutputKind};
use shapfusion_sql::call::{PinnedCall, ResolvedCall};
use shapfusion_sql::registry::{LoadedModel, ModelRegistry};

/// This process in the errors it sends back.
const HERE: &str = "this worker";

/// How a worker computes and whom it serves.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// How requests compute when the caller sends no settings, and the bounds (threads,
    /// memory) of a caller's own settings.
    pub settings: ComputeSettings,
    /// Where `{"model": "name"}` is looked up when `name` is not registered.
    pub model_dir: Option<String>,
    /// Bearer token every call but `health` must present; `None`: no auth.
    pub token: Option<String>,
    /// A batch computing longer than this makes `health` report the worker stuck, so pools and
    /// orchestrators stop sending it work.
    pub stuck_after: std::time::Duration,
    /// Exchanges at once, the queue in front of them, time per exchange, rows and bytes per
    /// exchange ([`Admission::new`] with the limits, named in refusals as the front end says).
    pub admission: Admission,
}

/// Default of [`WorkerConfig::stuck_after`]: far beyond any healthy batch (a 64k-row batch of a
/// 1000-tree depth-16 model takes about 15 minutes on 2 cores).
pub const DEFAULT_STUCK_AFTER: std::time::Duration = std::time::Duration::from_secs(3600);

/// Counters behind the `stats` action, beside the admission's (which counts requests and rows).
#[derive(Debug, Default)]
struct Counters {
    compute_nanos: AtomicU64,
    /// Input batches answered by an engine call joined with other requests' batches.
    joined_batches: AtomicU64,
    /// When each batch now computing started, by a running number.
    computing: std::sync::Mutex<std::collections::HashMap<u64, Instant>>,
    next_compute: AtomicU64,
}

impl Counters {
    /// Marks a batch as computing until the returned guard drops.
    fn computing(self: &Arc<Self>) -> Computing {
        let id = self.next_compute.fetch_add(1, Ordering::Relaxed);
        self.computing.lock().expect("computing").insert(id, Instant::now());
        Computing { counters: self.clone(), id }
    }

    /// How long the oldest batch now computing has been at it.
    fn longest_compute(&self) -> Option<std::time::Duration> {
        self.computing.lock().expect("computing").values().map(Instant::elapsed).max()
    }
}

/// A batch on the compute pool (see [`Counters::computing`]).
struct Computing {
    counters: Arc<Counters>,
    id: u64,
}

impl Drop for Computing {
    fn drop(&mut self) {
        self.counters.computing.lock().expect("computing").remove(&self.id);
    }
}

/// The Flight service of `shapfusion worker`.
pub struct WorkerService {
    registry: Arc<ModelRegistry>,
    config: WorkerConfig,
    /// What computes, as `stats` and `version` report it (`gpu`, `cpu (2 threads)`).
    device_description: String,
    counters: Arc<Counters>,
    started: Instant,
    /// Turned true to end the sessions between their requests ([`SessionCloser`]).
    closing: Arc<tokio::sync::watch::Sender<bool>>,
}

type Stream<T> = Pin<Box<dyn futures::Stream<Item = std::result::Result<T, Status>> + Send + 'static>>;

impl WorkerService {
    /// A worker serving the models `registry` knows (and those under `config.model_dir`); an
    /// error when its own device cannot be used.
    pub fn new(registry: Arc<ModelRegistry>, config: WorkerConfig) -> Result<Self> {
        let device_description = config.settings.describe()?;
        let closing = Arc::new(tokio::sync::watch::Sender::new(false));
        Ok(WorkerService { registry, config, device_description, counters: Default::default(), started: Instant::now(), closing })
    }

    fn authorize(&self, metadata: &MetadataMap) -> std::result::Result<(), Status> {
        auth::check(metadata, self.config.token.as_deref())
    }

    /// Resolves a call's model and background, checking their versions, off the async threads
    /// (the registry blocks on object-store I/O).
    async fn resolve(&self, call: &PinnedCall) -> std::result::Result<ResolvedCall, Status> {
        self.resolve_then(call, "model lookup", Ok).await
    }

    /// An exchange's explainer: its call resolved as [`resolve`](Self::resolve) does, then the
    /// explainer with the settings it runs with here (built once per model version and
    /// settings), in the same trip to a blocking thread. `input`: the schema the first message
    /// carried, if any, so that missing columns are refused before an engine is built.
    async fn exchange_explainer(
        &self,
        call: &PinnedCall,
        settings: ComputeSettings,
        input: Option<Schema>,
    ) -> std::result::Result<Explainer, Status> {
        self.resolve_then(call, "engine set-up", move |resolved| {
            if let Some(schema) = input {
                FeatureColumns::resolve(&schema, &resolved.model.model)?;
            }
            resolved.explainer(&settings)
        })
        .await
    }

    /// `then` of the call resolved, both on one blocking thread; `what` names the step in the
    /// error when that thread fails.
    async fn resolve_then<T: Send + 'static>(
        &self,
        call: &PinnedCall,
        what: &str,
        then: impl FnOnce(ResolvedCall) -> Result<T> + Send + 'static,
    ) -> std::result::Result<T, Status> {
        let (registry, call, dir) = (self.registry.clone(), call.clone(), self.config.model_dir.clone());
        tokio::task::spawn_blocking(move || then(call.resolve(&registry, dir.as_deref(), HERE)?))
            .await
            .map_err(|e| Status::internal(format!("{what} failed: {e}")))?
            .map_err(|e| status_from_error(&e))
    }

    fn flight_info(&self, call: &PinnedCall, loaded: &LoadedModel) -> std::result::Result<FlightInfo, Status> {
        let schema = output_schema(&loaded.model, call.output);
        let info = ModelInfo {
            model: call.model.clone(),
            url: loaded.url.clone(),
            version: loaded.version.clone(),
            content_hash: loaded.content_hash.clone(),
            features: loaded.model.feature_names().to_vec(),
            output_groups: loaded.model.num_groups(),
        };
        Ok(FlightInfo::new()
            .try_with_schema(&schema)
            .map_err(|e| Status::internal(format!("encoding schema: {e}")))?
            .with_descriptor(descriptor(call))
            .with_app_metadata(serde_json::to_vec(&info).expect("model info serialises")))
    }

    /// Models named on the command line and those found under the model directory.
    async fn served_models(&self) -> Vec<String> {
        let mut names: Vec<String> = self.registry.names().into_iter().map(|(n, _)| n).collect();
        if let Some(dir) = &self.config.model_dir {
            let registry = self.registry.clone();
            let dir = dir.clone();
            match tokio::task::spawn_blocking(move || registry.list_dir(&dir)).await {
                Ok(Ok(found)) => names.extend(found),
                Ok(Err(e)) => tracing::warn!("cannot list the model directory: {e}"),
                Err(e) => tracing::warn!("cannot list the model directory: {e}"),
            }
        }
        names.sort();
        names.dedup();
        names
    }

    /// What the `stats` action and the metrics endpoint report.
    pub fn stats(&self) -> WorkerStats {
        let admission = self.config.admission.stats();
        let rows = admission.rows;
        let secs = self.counters.compute_nanos.load(Ordering::Relaxed) as f64 * 1e-9;
        WorkerStats {
            rows,
            rows_per_second: if secs > 0.0 { rows as f64 / secs } else { 0.0 },
            uptime_seconds: self.started.elapsed().as_secs_f64(),
            device: self.device_description.clone(),
            in_flight: admission.running,
            in_flight_small: admission.running_small,
            queued: admission.queued,
            requests: admission.served,
            failed_requests: admission.failed,
            refused_queue_full: admission.refused_queue_full,
            refused_queue_timeout: admission.refused_queue_timeout,
            sessions: admission.sessions,
            refused_sessions: admission.refused_sessions,
            latency_buckets: admission.latency_buckets,
            latency_seconds_sum: admission.latency_seconds_sum,
            joined_batches: self.counters.joined_batches.load(Ordering::Relaxed),
        }
    }

    /// The page of the metrics endpoint (`--metrics-listen`): the admission's counters and
    /// latency histogram, and the engine's compute time.
    pub fn metrics(&self) -> Render {
        let (admission, counters) = (self.config.admission.clone(), self.counters.clone());
        Arc::new(move || {
            let mut page = Exposition::default();
            page.admission("shapfusion_worker_requests", "DoExchange requests", &admission.stats());
            page.metric(
                "shapfusion_worker_compute_seconds_total",
                "counter",
                "Time spent inside the engines.",
                &[("", counters.compute_nanos.load(Ordering::Relaxed) as f64 * 1e-9)],
            );
            page.metric(
                "shapfusion_worker_joined_batches_total",
                "counter",
                "Input batches of at most 16 rows computed in one engine call with other requests' batches that waited with them.",
                &[("", counters.joined_batches.load(Ordering::Relaxed) as f64)],
            );
            page.finish()
        })
    }

    /// Reads an exchange's call from its first message, checks it and the schema that message
    /// may carry, and builds the explainer; returns them with that first message.
    async fn open_exchange(&self, input: &mut Streaming<FlightData>) -> std::result::Result<(Opened, FlightData), Status> {
        let first = input
            .message()
            .await?
            .ok_or_else(|| Status::invalid_argument("DoExchange received no messages: the first must carry the descriptor with the command"))?;
        let descriptor = first.flight_descriptor.as_ref().ok_or_else(|| {
            Status::invalid_argument(r#"the first DoExchange message has no flight descriptor; set one holding {"model": "...", "output": "shap"}"#)
        })?;
        let call = call_from_descriptor(descriptor)?;
        let settings = call.settings_on(&self.config.settings, HERE).map_err(|e| status_from_error(&e))?;
        // A schema in the first message lets us refuse missing columns before any data moves.
        let input_schema = if first.data_header.is_empty() {
            None
        } else {
            // A client's bytes must not panic the task (see `protocol::GuardedBatches`).
            expected_panic::catch(|| Schema::try_from(&first))
                .ok_or_else(|| Status::invalid_argument(format!("the schema in the first message does not decode: {UNDECODABLE}")))?
                .ok()
        };
        let explainer = self.exchange_explainer(&call, settings, input_schema).await?;
        let schema = output_schema(explainer.model(), call.output);
        Ok((Opened { explainer, schema, output: call.output }, first))
    }

    /// Reads an exchange's call, checks it and its first schema, and returns the reply stream:
    /// every input batch explained, in order.
    async fn start_exchange(&self, mut input: Streaming<FlightData>, growth: Growth) -> std::result::Result<StatusStream<FlightData>, Status> {
        let (opened, first) = self.open_exchange(&mut input).await?;
        let (counters, admission) = (self.counters.clone(), self.config.admission.clone());
        let (max_rows, max_bytes) = (self.config.admission.limits().max_rows, self.config.admission.limits().max_bytes);
        let mut bytes = 0u64;
        let data = ipc_messages(first, input)
            .and_then(move |m| {
                bytes += (m.data_header.len() + m.data_body.len()) as u64;
                let (sent, growth) = (bytes, growth.clone());
                async move { within_bytes(sent, max_bytes, &growth, EXCHANGE).await.map(|()| m) }
            })
            .map_err(FlightError::from);
        let Opened { explainer, schema, output } = opened;
        let reply_schema = schema.clone();
        let mut rows_seen = 0u64;
        let results = decoded(data).and_then(move |batch| {
            rows_seen += batch.num_rows() as u64;
            // Nothing is computed for a batch past the bound.
            let explained = (rows_seen <= max_rows).then(|| explain_on_pool(&counters, &explainer, batch, output, &reply_schema));
            let admission = admission.clone();
            async move {
                let Some(explained) = explained else { return Err(too_many_rows(max_rows, EXCHANGE)) };
                let (rows, result) = explained.await;
                if result.is_ok() {
                    admission.add_rows(rows as u64);
                }
                result
            }
        });
        Ok(encoded(schema, results))
    }

    /// A session's reply stream ([`SESSION_HEADER`]): every input batch a request of its own,
    /// taking a slot when its first message arrives (a small one when it is small and the full
    /// ones are taken, as an exchange would) and giving it back once answered, held to the rows,
    /// bytes and time of one request, and answered as soon as it is computed. Between requests
    /// the session holds no slot; once the worker stops, it ends there with `Unavailable`.
    async fn start_session(
        &self,
        mut input: Streaming<FlightData>,
        client: String,
        session: SessionGuard,
    ) -> std::result::Result<StatusStream<FlightData>, Status> {
        let (opened, first) = self.open_exchange(&mut input).await?;
        let (counters, admission) = (self.counters.clone(), self.config.admission.clone());
        let limits = admission.limits().clone();
        let request: Arc<std::sync::Mutex<Option<SessionRequest>>> = Default::default();
        let between_requests = until_closed(input, self.closing.subscribe(), request.clone());
        let (held, gate) = (request.clone(), admission.clone());
        let data = ipc_messages(first, between_requests)
            .and_then(move |m| {
                let (request, admission, client) = (held.clone(), gate.clone(), client.clone());
                async move {
                    // A schema is not a request: a client may send it before its first rows.
                    if is_schema(&m) {
                        return Ok(m);
                    }
                    let len = (m.data_header.len() + m.data_body.len()) as u64;
                    let current = lock(&request).as_mut().map(|r| {
                        r.bytes += len;
                        (r.bytes, r.growth.clone())
                    });
                    let (bytes, growth) = match current {
                        Some(current) => current,
                        None => {
                            let permit = if len > SMALL_REQUEST_BYTES {
                                admission.admit(&client).await?
                            } else {
                                admission.admit_small_or_full(&client).await?
                            };
                            let growth = permit.growth(&admission, &client);
                            *lock(&request) = Some(SessionRequest { permit, growth: growth.clone(), bytes: len });
                            (len, growth)
                        }
                    };
                    within_bytes(bytes, admission.limits().max_bytes, &growth, SESSION_REQUEST).await.inspect_err(|_| fail_request(&request))?;
                    Ok(m)
                }
            })
            .map_err(FlightError::from);
        let Opened { explainer, schema, output } = opened;
        let reply_schema = schema.clone();
        let deadline_flag: Arc<str> = admission.names().deadline.as_str().into();
        let results = decoded(data).and_then(move |batch| {
            // Nothing is computed for a batch past the bound.
            let (max_rows, deadline, deadline_flag) = (limits.max_rows, limits.deadline, deadline_flag.clone());
            let explained = (batch.num_rows() as u64 <= max_rows).then(|| explain_on_pool(&counters, &explainer, batch, output, &reply_schema));
            let (request, admission) = (request.clone(), admission.clone());
            async move {
                let (rows, result) = match explained {
                    None => (0, Err(too_many_rows(max_rows, SESSION_REQUEST))),
                    Some(explained) => tokio::time::timeout(deadline, explained).await.unwrap_or_else(|_| {
                        let status = Status::deadline_exceeded(format!(
                            "a request of this session ran longer than this server's limit of {}s ({deadline_flag} raises it); send fewer rows per batch",
                            deadline.as_secs()
                        ));
                        (0, Err(FlightError::Tonic(Box::new(status))))
                    }),
                };
                // The request's slot is given back before its answer goes out.
                if result.is_err() {
                    fail_request(&request);
                }
                drop(lock(&request).take());
                if result.is_ok() {
                    admission.add_rows(rows as u64);
                }
                result
            }
        });
        // The session's place among the open sessions is held until its reply stream ends.
        Ok(Box::pin(encoded(schema, results).map(move |m| {
            let _open = &session;
            m
        })))
    }

    /// The handle that ends this worker's sessions between their requests, for a server that
    /// stops: a session's client may keep it open for hours, and a stopping server waits for
    /// its open calls.
    pub fn session_closer(&self) -> SessionCloser {
        SessionCloser(self.closing.clone())
    }
}

/// Ends a worker's open sessions between their requests ([`WorkerService::session_closer`]).
/// Cheap to clone.
#[derive(Debug, Clone)]
pub struct SessionCloser(Arc<tokio::sync::watch::Sender<bool>>);

impl SessionCloser {
    /// Ends every session of the worker, now and from now on, once its request in progress (if
    /// any) is answered: its client gets `Unavailable` and opens a new one elsewhere.
    pub fn close(&self) {
        self.0.send_replace(true);
    }
}

/// How refusals name an exchange's input, and what its client can do about it.
const EXCHANGE: (&str, &str) = ("this exchange", "split the rows over several requests");
/// How refusals name one request of a session, and what its client can do about it.
const SESSION_REQUEST: (&str, &str) = ("a request of this session", "send fewer rows per batch");

/// Holds a request ([`EXCHANGE`] or [`SESSION_REQUEST`]) that has sent `bytes` of Arrow data to
/// `max_bytes`; past a small slot's bytes, it waits for a full slot before more of it is decoded.
async fn within_bytes(bytes: u64, max_bytes: u64, growth: &Growth, (request, remedy): (&str, &str)) -> std::result::Result<(), Status> {
    if bytes > max_bytes {
        return Err(Status::out_of_range(format!("{request} sent more than {max_bytes} bytes, the most one request may send; {remedy}")));
    }
    if bytes > SMALL_REQUEST_BYTES {
        growth.full_slot().await?;
    }
    Ok(())
}

/// The refusal of a request ([`EXCHANGE`] or [`SESSION_REQUEST`]) past `max_rows` rows.
fn too_many_rows(max_rows: u64, (request, remedy): (&str, &str)) -> FlightError {
    FlightError::Tonic(Box::new(Status::out_of_range(format!("{request} sent more than {max_rows} rows, the most one request may send; {remedy}"))))
}

/// What an exchange computes, from its first message.
struct Opened {
    explainer: Explainer,
    schema: SchemaRef,
    output: OutputKind,
}

/// The request of a session now being received or computed: its slot and the bytes it sent.
struct SessionRequest {
    permit: Permit,
    growth: Growth,
    bytes: u64,
}

fn lock(request: &std::sync::Mutex<Option<SessionRequest>>) -> std::sync::MutexGuard<'_, Option<SessionRequest>> {
    request.lock().unwrap_or_else(|e| e.into_inner())
}

/// Counts a session's request in progress as failed (when its permit drops).
fn fail_request(request: &std::sync::Mutex<Option<SessionRequest>>) {
    if let Some(r) = lock(request).as_mut() {
        r.permit.fail();
    }
}

/// A session's input: its messages, ended with `Unavailable` when `closing` turns true while
/// no request is in progress (a request's own messages are still read, so it is answered).
fn until_closed(
    input: Streaming<FlightData>,
    closing: tokio::sync::watch::Receiver<bool>,
    request: Arc<std::sync::Mutex<Option<SessionRequest>>>,
) -> impl futures::Stream<Item = std::result::Result<FlightData, Status>> + Send {
    stream::unfold(Some((input, closing)), move |state| {
        let request = request.clone();
        async move {
            let (mut input, mut closing) = state?;
            let next = if lock(&request).is_some() {
                input.message().await
            } else {
                tokio::select! {
                    m = input.message() => m,
                    closed = async { closing.wait_for(|closed| *closed).await.is_ok() } => {
                        if !closed {
                            // The worker is gone without closing: nothing will end the session.
                            std::future::pending::<()>().await;
                        }
                        let status = Status::unavailable("this worker is stopping: the session ended between requests; open a new one");
                        return Some((Err(status), None));
                    }
                }
            };
            match next {
                Ok(Some(m)) => Some((Ok(m), Some((input, closing)))),
                Ok(None) => None,
                Err(status) => Some((Err(status), None)),
            }
        }
    })
}

/// Whether a Flight message carries an IPC schema (not a request's rows).
fn is_schema(m: &FlightData) -> bool {
    arrow::ipc::root_as_message(&m.data_header).is_ok_and(|h| h.header_type() == arrow::ipc::MessageHeader::Schema)
}

/// An exchange's messages from the first on, those that carry IPC data only: clients may send
/// the descriptor alone first (pyarrow does), or metadata-only messages, neither of which is
/// for the decoder.
fn ipc_messages(
    first: FlightData,
    rest: impl futures::Stream<Item = std::result::Result<FlightData, Status>> + Send + 'static,
) -> impl futures::Stream<Item = std::result::Result<FlightData, Status>> + Send + 'static {
    stream::once(async { Ok(first) }).chain(rest).try_filter(|m| std::future::ready(!m.data_header.is_empty()))
}

/// The record batches of an exchange's messages; what does not decode is the client's error,
/// a panic of the decoder included ([`decode_guarded`]).
fn decoded(
    data: impl futures::Stream<Item = std::result::Result<FlightData, FlightError>> + Send + 'static,
) -> impl futures::Stream<Item = std::result::Result<RecordBatch, FlightError>> + Send + 'static {
    decode_guarded(data).map_err(|e| match e {
        FlightError::Tonic(status) => FlightError::Tonic(status),
        other => FlightError::Tonic(Box::new(Status::invalid_argument(format!("cannot decode the input batches: {other}")))),
    })
}

/// One input batch explained on the compute pool, off the async threads; the reply comes back
/// by a channel (a job that panicked drops its sender unsent). Small batches waiting together
/// are computed in one engine call, each with the bits of a call of its own
/// (`Explainer::spawn_output`). Returns the batch's rows with its reply batch.
fn explain_on_pool(
    counters: &Arc<Counters>,
    explainer: &Explainer,
    batch: RecordBatch,
    output: OutputKind,
    schema: &SchemaRef,
) -> impl std::future::Future<Output = (usize, std::result::Result<RecordBatch, FlightError>)> + Send + 'static {
    let (rows, timing, schema) = (batch.num_rows(), counters.clone(), schema.clone());
    let computing = counters.computing();
    let (reply, replied) = futures::channel::oneshot::channel();
    explainer.spawn_output(batch, output, move |columns, report| {
        let _computing = computing;
        timing.compute_nanos.fetch_add(report.compute_time().as_nanos() as u64, Ordering::Relaxed);
        if report.joined() > 1 {
            timing.joined_batches.fetch_add(1, Ordering::Relaxed);
        }
        let batch = columns.and_then(|c| RecordBatch::try_new(schema, c).map_err(|e| Error::arrow("assembling the reply batch", e)));
        // The exchange may have ended meanwhile: nobody is left to tell.
        let _ = reply.send(batch);
    });
    async move {
        let result = match replied.await {
            Err(_) => Err(FlightError::Tonic(Box::new(Status::internal("a compute task panicked")))),
            Ok(batch) => batch.map_err(|e| FlightError::Tonic(Box::new(status_from_error(&e)))),
        };
        (rows, result)
    }
}

/// The reply batches as Flight messages of the reply's size.
fn encoded(
    schema: SchemaRef,
    results: impl futures::Stream<Item = std::result::Result<RecordBatch, FlightError>> + Send + 'static,
) -> StatusStream<FlightData> {
    Box::pin(
        FlightDataEncoderBuilder::new()
            .with_schema(schema)
            .with_max_flight_data_size(super::protocol::REPLY_MESSAGE_BYTES)
            .build(results)
            .map_err(Status::from),
    )
}

/// Whether a call's metadata opens a session ([`SESSION_HEADER`]); a value other than `1`,
/// `true`, `0` or `false` is refused rather than read as either.
fn opens_session(metadata: &MetadataMap) -> std::result::Result<bool, Status> {
    let Some(value) = metadata.get(SESSION_HEADER) else { return Ok(false) };
    match value.to_str().map(str::to_ascii_lowercase).as_deref() {
        Ok("1" | "true") => Ok(true),
        Ok("0" | "false") => Ok(false),
        _ => Err(Status::invalid_argument(format!("the {SESSION_HEADER} header must be 1 or true (open a session), or 0 or false; got {value:?}"))),
    }
}

fn json_result(value: &impl serde::Serialize) -> arrow_flight::Result {
    arrow_flight::Result { body: Bytes::from(serde_json::to_vec(value).expect("reply serialises")) }
}

#[tonic::async_trait]
impl FlightService for WorkerService {
    type HandshakeStream = auth::HandshakeStream;
    type ListFlightsStream = Stream<FlightInfo>;
    type DoGetStream = Stream<FlightData>;
    type DoPutStream = Stream<PutResult>;
    type DoExchangeStream = Stream<FlightData>;
    type DoActionStream = Stream<arrow_flight::Result>;
    type ListActionsStream = Stream<ActionType>;

    async fn handshake(&self, request: Request<Streaming<HandshakeRequest>>) -> std::result::Result<Response<Self::HandshakeStream>, Status> {
        auth::handshake(request, self.config.token.as_deref()).await
    }

    async fn list_flights(&self, request: Request<Criteria>) -> std::result::Result<Response<Self::ListFlightsStream>, Status> {
        self.authorize(request.metadata())?;
        let mut infos = Vec::new();
        for name in self.served_models().await {
            let call = PinnedCall::new(name.clone(), Default::default());
            match self.resolve(&call).await {
                Ok(resolved) => infos.push(self.flight_info(&call, &resolved.model)),
                // One unreadable file must not hide the others; the log names it.
                Err(e) => tracing::warn!(model = name, "not listed: {}", e.message()),
            }
        }
        Ok(Response::new(Box::pin(stream::iter(infos))))
    }

    async fn get_flight_info(&self, request: Request<FlightDescriptor>) -> std::result::Result<Response<FlightInfo>, Status> {
        self.authorize(request.metadata())?;
        let call = call_from_descriptor(request.get_ref())?;
        let resolved = self.resolve(&call).await?;
        Ok(Response::new(self.flight_info(&call, &resolved.model)?))
    }

    async fn poll_flight_info(&self, _request: Request<FlightDescriptor>) -> std::result::Result<Response<PollInfo>, Status> {
        Err(Status::unimplemented("PollFlightInfo is not supported: results come back directly from DoExchange"))
    }

    async fn get_schema(&self, request: Request<FlightDescriptor>) -> std::result::Result<Response<SchemaResult>, Status> {
        self.authorize(request.metadata())?;
        let call = call_from_descriptor(request.get_ref())?;
        let resolved = self.resolve(&call).await?;
        let schema = output_schema(&resolved.model.model, call.output);
        let options = arrow::ipc::writer::IpcWriteOptions::default();
        let result: SchemaResult = SchemaAsIpc::new(&schema, &options)
            .try_into()
            .map_err(|e: arrow::error::ArrowError| Status::internal(format!("encoding schema: {e}")))?;
        Ok(Response::new(result))
    }

    async fn do_get(&self, _request: Request<Ticket>) -> std::result::Result<Response<Self::DoGetStream>, Status> {
        Err(Status::unimplemented("DoGet is not supported: stream your rows with DoExchange and read the attributions from its reply"))
    }

    async fn do_put(&self, _request: Request<Streaming<FlightData>>) -> std::result::Result<Response<Self::DoPutStream>, Status> {
        Err(Status::unimplemented("DoPut is not supported: stream your rows with DoExchange and read the attributions from its reply"))
    }

    async fn do_exchange(&self, request: Request<Streaming<FlightData>>) -> std::result::Result<Response<Self::DoExchangeStream>, Status> {
        self.authorize(request.metadata())?;
        // Queued before anything is read: a waiting request holds no decoded data. While the full
        // slots are taken, a request may start in a small slot; it waits for a full one before
        // it takes more than a few rows (`Growth`), so one-row requests need not queue behind
        // each other, and those that reach the compute threads together are computed together.
        let client = request.remote_addr().map_or_else(|| "unknown-peer".to_string(), |a| a.to_string());
        if opens_session(request.metadata())? {
            let session = self.config.admission.open_session()?;
            return Ok(Response::new(self.start_session(request.into_inner(), client, session).await?));
        }
        let says_large = request
            .metadata()
            .get(REQUEST_BYTES_HEADER)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
            .is_some_and(|bytes| bytes > SMALL_REQUEST_BYTES);
        let mut permit =
            if says_large { self.config.admission.admit(&client).await? } else { self.config.admission.admit_small_or_full(&client).await? };
        let growth = permit.growth(&self.config.admission, &client);
        match self.start_exchange(request.into_inner(), growth).await {
            Ok(stream) => Ok(Response::new(self.config.admission.bounded(stream, permit))),
            Err(status) => {
                permit.fail();
                Err(status)
            }
        }
    }

    async fn do_action(&self, request: Request<Action>) -> std::result::Result<Response<Self::DoActionStream>, Status> {
        let action = request.get_ref().r#type.clone();
        if action != ACTION_HEALTH {
            // Health stays open so load balancers and compose health checks need no secret.
            self.authorize(request.metadata())?;
        }
        let body = match action.as_str() {
            ACTION_HEALTH => {
                if let Some(busy) = self.counters.longest_compute().filter(|d| *d > self.config.stuck_after) {
                    return Err(Status::unavailable(format!(
                        "stuck: a batch has been computing for {}s, longer than the {}s limit",
                        busy.as_secs(),
                        self.config.stuck_after.as_secs()
                    )));
                }
                json_result(&serde_json::json!({"status": "serving", "device": self.device_description}))
            }
            ACTION_VERSION => json_result(&serde_json::json!({
                "name": "shapfusion",
                "version": env!("CARGO_PKG_VERSION"),
                "protocol": PROTOCOL_VERSION,
                "device": self.device_description,
                "algorithm": self.config.settings.algorithm.name(),
            })),
            ACTION_STATS => json_result(&self.stats()),
            other => {
                return Err(Status::invalid_argument(format!(
                    "unknown action {other:?}; this worker has: {ACTION_HEALTH}, {ACTION_VERSION}, {ACTION_STATS}"
                )))
            }
        };
        Ok(Response::new(Box::pin(stream::iter([Ok(body)]))))
    }

    async fn list_actions(&self, _request: Request<Empty>) -> std::result::Result<Response<Self::ListActionsStream>, Status> {
        let actions = [
            (ACTION_HEALTH, "Whether the worker is serving (no token needed)"),
            (ACTION_VERSION, "Build version, protocol version, device and engine"),
            (ACTION_STATS, "Rows served, rows per second, device, requests in flight"),
        ]
        .map(|(t, d)| Ok(ActionType { r#type: t.to_string(), description: d.to_string() }));
        Ok(Response::new(Box::pin(stream::iter(actions))))
    }
}
