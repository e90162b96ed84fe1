//! The worker pool: explains a record batch on a set of Flight workers.
//!
//! A batch is cut into chunks; chunks go out concurrently, each to the least-loaded worker that
//! is up and has room (at most `max_in_flight` chunks per worker), and the replies are put back
//! in input order. A chunk that fails for a reason another worker might not share (connection
//! refused or reset, a worker killed mid-stream, a timeout) is sent again elsewhere after a short
//! backoff, and its worker is marked down; down workers are probed with the `health` action
//! before they get work again. Errors that every worker would repeat (bad input, unknown model,
//! refused token, a model version other than the one planned) fail the batch at once with the
//! worker's message. An internal error from a worker is tried on one other worker, never
//! replayed across the fleet. A reply whose row count differs from its chunk's is an error,
//! never accepted. Every call has one overall deadline ([`PoolOptions::deadline`]), always
//! enforced. Dropping the future cancels every request it started.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use arrow::array::RecordBatch;
use arrow::compute::concat_batches;
use arrow::datatypes::{Schema, SchemaRef};
use arrow_flight::encode::FlightDataEncoderBuilder;
use arrow_flight::error::FlightError;
use arrow_flight::{Action, FlightClient};
use futures::{stream, StreamExt, TryStreamExt};
use tokio::sync::Notify;
use tonic::transport::{Channel, Endpoint};
use tonic::Code;

use super::protocol::{
    descriptor, human_duration, kind_of_status, replies_guarded, ModelInfo, ACTION_HEALTH, REPLY_MESSAGE_BYTES, REQUEST_BYTES_HEADER, UNDECODABLE,
};
use crate::net::limits::is_busy;
use crate::net::transport::{self, ConnectOptions};
use shapfusion_core::error::{Error, ErrorKind, Result};
use shapfusion_core::expected_panic;
use shapfusion_core::OutputKind;
use shapfusion_sql::call::PinnedCall;

/// Knobs of a [`WorkerPool`].
#[derive(Debug, Clone)]
pub struct PoolOptions {
    /// How to connect (timeout, token, TLS, message limit).
    pub connect: ConnectOptions,
    /// Largest chunk sent to one worker, in rows.
    pub max_chunk_rows: usize,
    /// Smallest chunk worth a round trip, in rows (batches are cut finer only down to this).
    pub min_chunk_rows: usize,
    /// Chunks in flight per worker.
    pub max_in_flight: usize,
    /// Time one attempt at one chunk may take before it is abandoned and retried elsewhere.
    pub request_timeout: Duration,
    /// How long a chunk keeps being retried while no worker can serve it.
    pub retry_for: Duration,
    /// Time one call ([`WorkerPool::explain`], [`WorkerPool::model_info`]) may take in all.
    pub deadline: Duration,
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions {
            connect: ConnectOptions::default(),
            max_chunk_rows: 16_384,
            min_chunk_rows: 512,
            max_in_flight: 2,
            request_timeout: Duration::from_secs(600),
            retry_for: Duration::from_secs(30),
            deadline: Duration::from_secs(900),
        }
    }
}

/// One worker as the pool sees it.
struct Worker {
    url: String,
    endpoint: Endpoint,
    channel: Mutex<Option<Channel>>,
    in_flight: AtomicUsize,
    health: Mutex<Health>,
}

#[derive(Debug, Default, Clone)]
struct Health {
    /// Down until this instant; then probed before it gets work.
    down_until: Option<Instant>,
    /// Consecutive failures (sets the backoff).
    failures: u32,
    last_error: Option<String>,
}

/// What the pool knows about one worker (for logs, `stats` and tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerState {
    /// The worker's URL.
    pub url: String,
    /// Whether it is taking work (not marked down).
    pub up: bool,
    /// Chunks being sent to it now.
    pub in_flight: usize,
    /// Consecutive failures.
    pub failures: u32,
    /// The last failure, if any.
    pub last_error: Option<String>,
}

/// A failed attempt: retried on another worker, or final.
enum Failure {
    /// Transport trouble (refused, reset, unavailable, timed out): any other worker may do.
    Retry(String),
    /// The worker answered with an internal error: tried on one other worker, no more.
    Internal(String),
    /// The worker's queue is full (or the wait for it too long): another worker first, else
    /// this one again after a backoff; the worker is not down.
    Busy(String),
    Fatal(Error),
}

/// Flight workers that explain batches together. Cheap to share (`Arc`); safe to use from
/// many tasks at once.
pub struct WorkerPool {
    workers: Vec<Worker>,
    options: PoolOptions,
    /// Woken when a chunk finishes, so waiters for a free slot look again.
    released: Notify,
}

impl std::fmt::Debug for WorkerPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerPool").field("workers", &self.workers.iter().map(|w| &w.url).collect::<Vec<_>>()).finish()
    }
}

/// Splits `a,b , c` into URLs, adding `http://` where no scheme is given.
pub fn parse_worker_list(list: &str) -> Vec<String> {
    list.split(',').map(str::trim).filter(|s| !s.is_empty()).map(|s| if s.contains("://") { s.to_string() } else { format!("http://{s}") }).collect()
}

/// Frees a worker slot when a chunk attempt ends, however it ends.
struct Slot<'a> {
    pool: &'a WorkerPool,
    index: usize,
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.pool.workers[self.index].in_flight.fetch_sub(1, Ordering::SeqCst);
        self.pool.released.notify_waiters();
    }
}

impl WorkerPool {
    /// A pool over `urls` (`http://host:port`, `https://…`). Connections open lazily.
    pub fn new(urls: &[String], options: PoolOptions) -> Result<Self> {
        if urls.is_empty() {
            return Err(Error::InvalidArgument("a worker pool needs at least one worker URL".into()));
        }
        if options.max_in_flight == 0 || options.max_chunk_rows == 0 {
            return Err(Error::InvalidArgument("pool: max_in_flight and max_chunk_rows must be at least 1".into()));
        }
        let workers = urls
            .iter()
            .map(|url| {
                Ok(Worker {
                    url: url.clone(),
                    endpoint: transport::endpoint(url, &options.connect)?,
                    channel: Mutex::new(None),
                    in_flight: AtomicUsize::new(0),
                    health: Mutex::new(Health::default()),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(WorkerPool { workers, options, released: Notify::new() })
    }

    /// The workers and what the pool knows of them.
    pub fn status(&self) -> Vec<WorkerState> {
        let now = Instant::now();
        self.workers
            .iter()
            .map(|w| {
                let h = w.health.lock().expect("health").clone();
                WorkerState {
                    url: w.url.clone(),
                    up: h.down_until.is_none_or(|t| t <= now),
                    in_flight: w.in_flight.load(Ordering::SeqCst),
                    failures: h.failures,
                    last_error: h.last_error,
                }
            })
            .collect()
    }

    fn client(&self, i: usize) -> Result<FlightClient> {
        let w = &self.workers[i];
        let channel = w.channel.lock().expect("channel").get_or_insert_with(|| w.endpoint.connect_lazy()).clone();
        transport::client(channel, &self.options.connect)
    }

    fn mark_down(&self, i: usize, error: &str) {
        let w = &self.workers[i];
        let mut h = w.health.lock().expect("health");
        h.failures += 1;
        // 250 ms, 500 ms, 1 s … capped at 5 s between probes.
        let backoff = Duration::from_millis(250u64 << (h.failures - 1).min(5)).min(Duration::from_secs(5));
        h.down_until = Some(Instant::now() + backoff);
        h.last_error = Some(error.to_string());
        // A fresh connection next time: the old one may be half-dead.
        *w.channel.lock().expect("channel") = None;
        tracing::warn!(worker = w.url, failures = h.failures, "worker marked down: {error}");
    }

    fn mark_up(&self, i: usize) {
        let mut h = self.workers[i].health.lock().expect("health");
        if h.failures > 0 || h.down_until.is_some() {
            tracing::info!(worker = self.workers[i].url, "worker is serving again");
        }
        *h = Health::default();
    }

    /// Asks a worker whether it is serving.
    async fn probe(&self, i: usize) -> bool {
        let attempt = async {
            let mut client = self.client(i).ok()?;
            let mut replies = client.do_action(Action::new(ACTION_HEALTH, "")).await.ok()?;
            replies.next().await?.ok()
        };
        matches!(tokio::time::timeout(self.options.connect.connect_timeout, attempt).await, Ok(Some(_)))
    }

    /// Takes a slot on the least-loaded worker that is up, probing workers whose backoff has
    /// passed, `avoid` last and `never` not at all; waits while all are busy; `None` when none
    /// is up by `deadline`.
    async fn acquire(&self, avoid: Option<usize>, never: Option<usize>, deadline: Instant) -> Option<Slot<'_>> {
        loop {
            let released = self.released.notified();
            let now = Instant::now();
            let mut candidates: Vec<(usize, bool, usize)> = Vec::new(); // (index, needs probe, load)
            let mut next_probe: Option<Instant> = None;
            for (i, w) in self.workers.iter().enumerate().filter(|&(i, _)| Some(i) != never) {
                let h = w.health.lock().expect("health");
                let load = w.in_flight.load(Ordering::SeqCst);
                match h.down_until {
                    Some(t) if t > now => next_probe = Some(next_probe.map_or(t, |n| n.min(t))),
                    down => {
                        if load < self.options.max_in_flight {
                            candidates.push((i, down.is_some(), load));
                        }
                    }
                }
            }
            // Least loaded first; the worker that just failed this chunk last.
            candidates.sort_by_key(|&(i, _, load)| (Some(i) == avoid && self.workers.len() > 1, load, i));
            for (i, needs_probe, _) in candidates {
                let w = &self.workers[i];
                if w.in_flight.fetch_add(1, Ordering::SeqCst) >= self.options.max_in_flight {
                    w.in_flight.fetch_sub(1, Ordering::SeqCst);
                    continue;
                }
                let slot = Slot { pool: self, index: i };
                if needs_probe {
                    if self.probe(i).await {
                        self.mark_up(i);
                    } else {
                        self.mark_down(i, "health probe failed");
                        continue;
                    }
                }
                return Some(slot);
            }
            let now = Instant::now();
            if now >= deadline {
                return None;
            }
            // Wait for a slot to free up or a down worker's next probe, whichever is first.
            let wake = next_probe.unwrap_or(deadline).min(deadline).max(now + Duration::from_millis(5));
            let _ = tokio::time::timeout(wake - now, released).await;
        }
    }

    /// Sends one chunk to worker `i` and collects the reply.
    async fn exchange(&self, i: usize, command: &PinnedCall, chunk: RecordBatch) -> Result<(SchemaRef, Vec<RecordBatch>), Failure> {
        let url = &self.workers[i].url;
        let mut client = self.client(i).map_err(Failure::Fatal)?;
        // A large chunk waits for a full slot at once rather than holding a small one. Only a
        // hint, so it may be left out: the exchange works without it. (The bytes of the chunk's
        // own rows: a chunk is a slice, and its buffers are the whole batch's.)
        let bytes: Option<usize> = chunk.columns().iter().map(|c| c.to_data().get_slice_memory_size().ok()).sum();
        if let Some(bytes) = bytes {
            let _ = client.add_header(REQUEST_BYTES_HEADER, &bytes.to_string());
        }
        let input = FlightDataEncoderBuilder::new()
            .with_flight_descriptor(Some(descriptor(command)))
            .with_max_flight_data_size(REPLY_MESSAGE_BYTES)
            .build(stream::iter([Ok(chunk)]));
        let classify = |e: FlightError| classify(url, e);
        let mut replies = replies_guarded(client.do_exchange(input).await.map_err(classify)?);
        let mut batches = Vec::new();
        while let Some(b) = replies.next().await {
            batches.push(b.map_err(classify)?);
        }
        let schema = replies.schema().cloned().ok_or_else(|| Failure::Retry("reply ended without a schema".into()))?;
        Ok((schema, batches))
    }

    /// Runs `attempt` on one worker after another until one succeeds, a failure is final, or
    /// no worker could be had for `retry_for`; `what` starts the error message then.
    async fn retrying<T, F, Fut>(&self, what: impl Fn() -> String, attempt: F) -> Result<T>
    where
        F: Fn(usize) -> Fut,
        Fut: std::future::Future<Output = Result<T, Failure>>,
    {
        let began = Instant::now();
        let mut errors: Vec<String> = Vec::new();
        let mut avoid = None;
        // The worker that answered with an internal error, and what it said: the attempt goes
        // to another worker, never back to it.
        let mut internal: Option<(usize, String)> = None;
        // Busy answers in a row: the backoff grows with them.
        let mut busy = 0u32;
        for tries in 0u32.. {
            // Checked after every failure too, not only while waiting for a free worker. Busy
            // workers are serving, so their answers are retried until the pool's deadline.
            if began.elapsed() >= self.options.retry_for && tries > 0 && busy == 0 {
                break;
            }
            let never = internal.as_ref().map(|(i, _)| *i);
            let Some(slot) = self.acquire(avoid, never, began + self.options.retry_for).await else { break };
            let i = slot.index;
            let outcome = match tokio::time::timeout(self.options.request_timeout, attempt(i)).await {
                Ok(r) => r,
                Err(_) => Err(Failure::Retry(format!("no reply within {}", human_duration(self.options.request_timeout)))),
            };
            drop(slot);
            match outcome {
                Ok(value) => {
                    self.mark_up(i);
                    return Ok(value);
                }
                Err(Failure::Fatal(e)) => return Err(e),
                Err(Failure::Internal(message)) => {
                    let here = format!("{}: {message}", self.workers[i].url);
                    let refused = |why: String| Error::Remote { worker: self.workers[i].url.clone(), message: why, kind: ErrorKind::Internal };
                    if let Some((_, first)) = internal {
                        return Err(refused(format!("{}: internal error on two workers, not retried further: {first}; {here}", what())));
                    }
                    if self.workers.len() == 1 {
                        return Err(refused(format!("{}: internal error, and the pool has no other worker to try: {here}", what())));
                    }
                    // The worker answered, so it is not down; the chunk goes elsewhere once.
                    tracing::warn!("internal error from {here}; trying one other worker");
                    errors.push(here.clone());
                    internal = Some((i, here));
                    avoid = Some(i);
                }
                Err(Failure::Busy(message)) => {
                    busy += 1;
                    if busy == 1 || busy % 10 == 0 {
                        tracing::info!(worker = self.workers[i].url, busy, "worker busy, trying again: {message}");
                    }
                    errors.push(format!("{}: {message}", self.workers[i].url));
                    avoid = Some(i);
                    tokio::time::sleep(busy_backoff(busy)).await;
                }
                Err(Failure::Retry(message)) => {
                    busy = 0;
                    self.mark_down(i, &message);
                    errors.push(format!("{}: {message}", self.workers[i].url));
                    avoid = Some(i);
                    tokio::time::sleep(Duration::from_millis(20 * u64::from(tries.min(10)))).await;
                }
            }
        }
        Err(Error::Remote {
            worker: "pool".into(),
            kind: ErrorKind::Unavailable,
            message: format!(
                "{} within {}; attempts: {}; {}",
                what(),
                human_duration(self.options.retry_for),
                if errors.is_empty() { "none (no worker was up)".to_string() } else { errors.join("; ") },
                self.describe_workers()
            ),
        })
    }

    /// Explains one chunk, retrying on other workers until one serves it or time runs out.
    async fn run_chunk(&self, command: &PinnedCall, start: usize, chunk: RecordBatch) -> Result<(SchemaRef, Vec<RecordBatch>)> {
        let rows = chunk.num_rows();
        let what = || format!("no worker could explain rows {start}..{} with model {:?}", start + rows, command.model);
        self.retrying(what, |i| {
            let chunk = chunk.clone();
            async move {
                let (schema, batches) = self.exchange(i, command, chunk).await?;
                let got: usize = batches.iter().map(RecordBatch::num_rows).sum();
                if got != rows {
                    return Err(Failure::Fatal(Error::Remote {
                        worker: self.workers[i].url.clone(),
                        message: format!("returned {got} rows for a chunk of {rows} rows (rows {start}..{}); reply refused", start + rows),
                        kind: ErrorKind::Internal,
                    }));
                }
                Ok((schema, batches))
            }
        })
        .await
    }

    /// Every worker and its last failure, for error messages.
    fn describe_workers(&self) -> String {
        let states: Vec<String> = self
            .status()
            .into_iter()
            .map(|w| format!("{}: {}", w.url, w.last_error.unwrap_or_else(|| if w.up { "up".into() } else { "down".into() })))
            .collect();
        format!("workers: {}", states.join("; "))
    }

    /// Rows per chunk for a batch of `rows`: enough chunks to keep every worker busy, within
    /// the configured bounds.
    fn chunk_rows(&self, rows: usize) -> usize {
        let slots = self.workers.len() * self.options.max_in_flight;
        rows.div_ceil(slots).clamp(self.options.min_chunk_rows.max(1), self.options.max_chunk_rows)
    }

    /// Explains `batch` (the model's feature columns, by name) with `model` on the workers and
    /// returns the `explain` layout, one row per input row in input order. With `version` (a
    /// [`content_hash`](shapfusion_sql::registry::content_hash)), a worker whose model differs refuses,
    /// so the reply never mixes versions. Fails once [`PoolOptions::deadline`] has passed.
    pub async fn explain(&self, model: &str, version: Option<&str>, output: OutputKind, batch: RecordBatch) -> Result<RecordBatch> {
        self.run(&PinnedCall::new(model, output).pinned(version.map(str::to_string)), batch).await
    }

    /// [`explain`](Self::explain) for any pinned call (a background set, the caller's settings):
    /// every chunk goes out with the same call.
    pub async fn run(&self, command: &PinnedCall, batch: RecordBatch) -> Result<RecordBatch> {
        let rows = batch.num_rows();
        let model = &command.model;
        self.within_deadline(|| format!("explaining {rows} rows with model {model:?}"), self.explain_chunks(command, batch)).await
    }

    /// Runs `call` under the pool's overall deadline.
    async fn within_deadline<T>(&self, what: impl Fn() -> String, call: impl std::future::Future<Output = Result<T>>) -> Result<T> {
        match tokio::time::timeout(self.options.deadline, call).await {
            Ok(r) => r,
            Err(_) => Err(Error::Remote {
                worker: "pool".into(),
                kind: ErrorKind::Unavailable,
                message: format!(
                    "{} did not finish within the pool's deadline of {}; {}",
                    what(),
                    human_duration(self.options.deadline),
                    self.describe_workers()
                ),
            }),
        }
    }

    async fn explain_chunks(&self, command: &PinnedCall, batch: RecordBatch) -> Result<RecordBatch> {
        let output = command.output;
        let rows = batch.num_rows();
        let step = self.chunk_rows(rows);
        let chunks: Vec<(usize, RecordBatch)> =
            if rows == 0 { vec![(0, batch)] } else { (0..rows).step_by(step).map(|s| (s, batch.slice(s, step.min(rows - s)))).collect() };
        tracing::debug!(rows, chunks = chunks.len(), output = output.name(), "sending to the pool");
        let concurrency = self.workers.len() * self.options.max_in_flight;
        let replies: Vec<(SchemaRef, Vec<RecordBatch>)> =
            stream::iter(chunks).map(|(start, chunk)| self.run_chunk(command, start, chunk)).buffered(concurrency).try_collect().await?;
        let schema = replies.first().map(|(s, _)| s.clone()).unwrap_or_else(|| Arc::new(Schema::empty()));
        concat_batches(&schema, replies.iter().flat_map(|(_, b)| b))
            .map_err(|e| Error::arrow("joining the workers' replies (do all workers serve the same model version?)", e))
    }

    /// What the workers say about `model`: its features and the output schema for `output`.
    pub async fn model_info(&self, model: &str, output: OutputKind) -> Result<(ModelInfo, SchemaRef)> {
        let command = PinnedCall::new(model, output);
        let what = || format!("no worker answered for model {model:?}");
        let info = self.retrying(what, |i| {
            let command = &command;
            async move {
                let url = &self.workers[i].url;
                let mut client = self.client(i).map_err(Failure::Fatal)?;
                let info = client.get_flight_info(descriptor(command)).await.map_err(|e| classify(url, e))?;
                let unreadable = |what: &str, e: String| {
                    Failure::Fatal(Error::Remote { worker: url.clone(), message: format!("unreadable {what}: {e}"), kind: ErrorKind::Internal })
                };
                let meta: ModelInfo = serde_json::from_slice(&info.app_metadata).map_err(|e| unreadable("model info", e.to_string()))?;
                let schema = expected_panic::catch(|| info.try_decode_schema())
                    .ok_or_else(|| unreadable("schema", UNDECODABLE.to_string()))?
                    .map_err(|e| unreadable("schema", e.to_string()))?;
                Ok((meta, Arc::new(schema)))
            }
        });
        self.within_deadline(|| format!("asking for model {model:?}"), info).await
    }
}

/// How long to wait after the `busy`-th busy answer in a row: 50 ms doubling to 2 s, each
/// between half and all of that at random, so clients that were refused together do not
/// come back together.
fn busy_backoff(busy: u32) -> Duration {
    let ceiling = Duration::from_millis(50u64 << busy.saturating_sub(1).min(6)).min(Duration::from_secs(2));
    ceiling.mul_f64(0.5 + 0.5 * fastrand::f64())
}

/// Whether another worker could do better: transport trouble and server crashes are retried;
/// answers about the request itself are final.
fn classify(url: &str, e: FlightError) -> Failure {
    match e {
        FlightError::Tonic(status) => match status.code() {
            Code::InvalidArgument
            | Code::NotFound
            | Code::Unauthenticated
            | Code::PermissionDenied
            | Code::FailedPrecondition
            | Code::OutOfRange
            | Code::Unimplemented
            | Code::AlreadyExists
            | Code::ResourceExhausted
                if !is_busy(&status) =>
            {
                Failure::Fatal(Error::Remote {
                    worker: url.to_string(),
                    message: format!("{} ({:?})", status.message(), status.code()),
                    kind: kind_of_status(status.code()),
                })
            }
            // An error status the worker sent; one raised here by the transport (a connection
            // reset mid-stream) carries its cause and is retried like any transport failure.
            Code::Internal | Code::Unknown | Code::DataLoss if std::error::Error::source(&*status).is_none() => {
                Failure::Internal(format!("{} ({:?})", status.message(), status.code()))
            }
            _ if is_busy(&status) => Failure::Busy(status.message().to_string()),
            code => Failure::Retry(format!("{} ({code:?})", status.message())),
        },
        // The worker's reply itself is wrong (it does not decode, or comes out of order): as an
        // internal error, tried on one other worker, not replayed across the fleet.
        FlightError::DecodeError(message) | FlightError::ProtocolError(message) => Failure::Internal(message),
        other => Failure::Retry(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_answers_back_off_with_jitter_up_to_two_seconds() {
        let b1: Vec<Duration> = (0..50).map(|_| busy_backoff(1)).collect();
        assert!(b1.iter().all(|d| *d >= Duration::from_millis(25) && *d <= Duration::from_millis(50)), "{b1:?}");
        assert!(b1.iter().any(|d| *d != b1[0]), "no jitter: {b1:?}");
        assert!(busy_backoff(30) <= Duration::from_secs(2) && busy_backoff(30) >= Duration::from_secs(1));
        let busy = classify("http://w", FlightError::Tonic(Box::new(crate::net::limits::busy("busy: the queue is full".into()))));
        assert!(matches!(busy, Failure::Busy(m) if m.contains("queue is full")));
        // Over a bound of the request itself: another try cannot do better.
        let too_big = classify("http://w", FlightError::Tonic(Box::new(tonic::Status::resource_exhausted("needs 40 GiB, over the bound"))));
        assert!(matches!(too_big, Failure::Fatal(e) if e.kind() == ErrorKind::ResourceExhausted));
    }

    #[test]
    fn worker_lists_get_a_scheme() {
        assert_eq!(parse_worker_list("a:1, http://b:2,,https://c:3"), vec!["http://a:1", "http://b:2", "https://c:3"]);
    }

    #[test]
    fn chunks_keep_every_worker_busy_within_bounds() {
        let urls: Vec<String> = (0..3).map(|i| format!("http://127.0.0.1:{}", 1 + i)).collect();
        let pool = WorkerPool::new(&urls, PoolOptions::default()).unwrap();
        assert_eq!(pool.chunk_rows(8192), 1366);
        assert_eq!(pool.chunk_rows(100), 512);
        assert_eq!(pool.chunk_rows(10_000_000), 16_384);
    }

    #[test]
    fn request_errors_are_final_and_transport_errors_retried() {
        let fatal = classify("w", FlightError::Tonic(Box::new(tonic::Status::not_found("unknown model"))));
        assert!(matches!(fatal, Failure::Fatal(Error::Remote { ref message, .. }) if message.contains("unknown model")));
        let retry = classify("w", FlightError::Tonic(Box::new(tonic::Status::unavailable("connection refused"))));
        assert!(matches!(retry, Failure::Retry(_)));
        let internal = classify("w", FlightError::Tonic(Box::new(tonic::Status::internal("boom"))));
        assert!(matches!(internal, Failure::Internal(_)));
        // A reply that does not decode is the worker's fault, not the transport's.
        let garbled = classify("w", FlightError::DecodeError("Error decoding ipc RecordBatch".into()));
        assert!(matches!(garbled, Failure::Internal(m) if m.contains("decoding")));
        let out_of_order = classify("w", FlightError::protocol("Unexpected message: Tensor"));
        assert!(matches!(out_of_order, Failure::Internal(_)));
    }
}
