//! Bounds on the work one server takes on, and the queue in front of them: up to
//! [`RequestLimits::max_concurrent`] requests run at once; the next ones wait in a bounded queue,
//! served in turn across connections (one client's fifty requests do not starve another's one)
//! and in arrival order within a connection. A request is refused only when the queue is full or
//! its wait passes the queue's deadline, with a status saying which bound and its value. Queued
//! requests hold no decoded data: their input stays in the transport's flow-control window until
//! they run.
//!
//! Exchanges whose size is not known when they arrive may also take one of
//! [`RequestLimits::max_small`] small slots while the others are all taken: a request runs in a
//! small slot while it has sent at most [`SMALL_REQUEST_BYTES`] of Arrow data, and waits its turn
//! for one of the others before it takes more ([`Growth`]). One-row requests of online serving so
//! run at once rather than queued behind each other, and those that wait for the compute threads
//! together are computed together, while the memory that large requests hold stays bounded by
//! `max_concurrent`.
//!
//! A *session* (an exchange opened as one, [`Admission::open_session`]) is a stream of requests
//! rather than one: it holds no slot while it waits for its client, and each batch it sends
//! takes a slot of its own as an exchange would, held until that batch is answered. At most
//! [`RequestLimits::max_sessions`] are open at once.
//!
//! [`Admission`] also keeps what an operator watches: requests running and queued, requests and
//! rows served, refusals by cause, and the latency of every request (queue wait included).

use std::collections::{HashMap, VecDeque};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use tokio::sync::oneshot;
use tonic::Status;

/// The bounds of one server. The defaults suit a 2-core, 24 GiB machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestLimits {
    /// Requests (exchanges, statements) running at once (default: the machine's cores).
    pub max_concurrent: usize,
    /// Requests waiting for a slot at once; more are refused with `ResourceExhausted`.
    pub max_queued: usize,
    /// How long a request may wait for a slot before it is refused with `ResourceExhausted`.
    pub queue_timeout: Duration,
    /// Time one request may take once running, reply stream included.
    pub deadline: Duration,
    /// Rows one `DoExchange` may send.
    pub max_rows: u64,
    /// Bytes of Arrow data one `DoExchange` may send.
    pub max_bytes: u64,
    /// Small requests (at most [`SMALL_REQUEST_BYTES`] of input so far) running at once beyond
    /// `max_concurrent`, for the callers that ask for small slots ([`Admission::admit_small_or_full`]);
    /// 0 turns them off. Each holds a few KiB, and at most one message more (up to the
    /// transport's message size) while it waits to grow into a full slot.
    pub max_small: usize,
    /// Sessions open at once ([`Admission::open_session`]): exchanges that stay open for many
    /// requests, holding no slot between them; more are refused as busy.
    pub max_sessions: usize,
}

/// The most Arrow data (message headers and bodies) a request sends while in a small slot: 16
/// rows of 500 doubles, with room to spare.
pub const SMALL_REQUEST_BYTES: u64 = 64 << 10;

impl Default for RequestLimits {
    fn default() -> Self {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get()).max(2);
        RequestLimits {
            max_concurrent: cores,
            max_queued: 256,
            queue_timeout: Duration::from_secs(300),
            deadline: Duration::from_secs(3600),
            max_rows: 50_000_000,
            max_bytes: 16 << 30,
            // Enough for eight one-row clients on two cores to wait for the engine together.
            max_small: (4 * cores).max(8),
            max_sessions: 256,
        }
    }
}

/// How refusals name the setting that raises a bound: the command line gives its flags
/// (`--max-queued`); a library user who sets [`RequestLimits`] in code keeps the field names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitNames {
    /// Names [`RequestLimits::max_queued`].
    pub max_queued: String,
    /// Names [`RequestLimits::queue_timeout`].
    pub queue_timeout: String,
    /// Names [`RequestLimits::deadline`].
    pub deadline: String,
    /// Names [`RequestLimits::max_sessions`].
    pub max_sessions: String,
}

impl Default for LimitNames {
    fn default() -> Self {
        LimitNames {
            max_queued: "max_queued".into(),
            queue_timeout: "queue_timeout".into(),
            deadline: "deadline".into(),
            max_sessions: "max_sessions".into(),
        }
    }
}

/// Upper bounds of the latency histogram's buckets, in seconds.
pub const LATENCY_BUCKETS: [f64; 14] = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0];

/// What an [`Admission`] has seen, for `stats` and the metrics endpoint.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AdmissionStats {
    /// Requests running now, small slots included.
    pub running: usize,
    /// Of those, requests in small slots ([`RequestLimits::max_small`]).
    #[serde(default)]
    pub running_small: usize,
    /// Requests waiting for a slot now.
    pub queued: usize,
    /// Requests admitted since start (queued first or not) and finished.
    pub served: u64,
    /// Of those, requests that ended in an error.
    pub failed: u64,
    /// Rows served since start.
    pub rows: u64,
    /// Requests refused because the queue was full.
    pub refused_queue_full: u64,
    /// Requests refused because their wait passed the queue's deadline.
    pub refused_queue_timeout: u64,
    /// Sessions open now ([`Admission::open_session`]).
    #[serde(default)]
    pub sessions: usize,
    /// Sessions refused because [`RequestLimits::max_sessions`] were open.
    #[serde(default)]
    pub refused_sessions: u64,
    /// Per bucket of [`LATENCY_BUCKETS`] (then +Inf), finished requests whose latency (arrival
    /// to the end of the reply, queue wait included) was at most its bound: cumulative, as
    /// Prometheus counts them.
    pub latency_buckets: Vec<u64>,
    /// Sum of the finished requests' latencies, in seconds.
    pub latency_seconds_sum: f64,
}

/// Admits requests up to [`RequestLimits::max_concurrent`], queues the rest fairly within
/// [`RequestLimits::max_queued`] and [`RequestLimits::queue_timeout`], and ends running
/// requests' streams at the deadline. Cheap to clone; clones share the slots and the counters.
#[derive(Debug, Clone)]
pub struct Admission {
    limits: RequestLimits,
    names: LimitNames,
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    state: Mutex<Queue>,
    served: AtomicU64,
    failed: AtomicU64,
    rows: AtomicU64,
    refused_queue_full: AtomicU64,
    refused_queue_timeout: AtomicU64,
    refused_sessions: AtomicU64,
    /// Per bucket (not cumulative; the last is +Inf), and the sum in microseconds.
    latency: Mutex<(Vec<u64>, f64)>,
}

/// The slots and the waiting requests.
#[derive(Debug, Default)]
struct Queue {
    /// Requests in full slots (`max_concurrent`).
    running: usize,
    /// Requests in small slots (`max_small`).
    running_small: usize,
    queued: usize,
    /// Sessions open.
    sessions: usize,
    next_id: u64,
    /// Waiting requests per connection, in arrival order.
    waiting: HashMap<String, VecDeque<(u64, oneshot::Sender<()>)>>,
    /// Connections with waiting requests, in turn.
    turns: VecDeque<String>,
}

impl Queue {
    /// Frees a full slot: hands it to the next waiting request, else counts it free.
    fn release_full(&mut self) {
        if !self.hand_over() {
            self.running -= 1;
        }
    }

    /// Hands a freed slot to the next waiting request, in turn across connections; false when
    /// nobody waits (the slot is then free).
    fn hand_over(&mut self) -> bool {
        while let Some(client) = self.turns.pop_front() {
            let Some(waiting) = self.waiting.get_mut(&client) else { continue };
            let next = waiting.pop_front();
            if waiting.is_empty() {
                self.waiting.remove(&client);
            } else {
                self.turns.push_back(client);
            }
            if let Some((_, tx)) = next {
                self.queued -= 1;
                // A receiver gone (its request was cancelled) cannot take the slot: try the next.
                if tx.send(()).is_ok() {
                    return true;
                }
            }
        }
        false
    }

    /// Takes waiting request `id` of `client` out of the queue; false when it is not there (it
    /// was handed a slot).
    fn remove(&mut self, client: &str, id: u64) -> bool {
        let Some(waiting) = self.waiting.get_mut(client) else { return false };
        let Some(at) = waiting.iter().position(|(i, _)| *i == id) else { return false };
        waiting.remove(at);
        if waiting.is_empty() {
            self.waiting.remove(client);
            self.turns.retain(|c| c != client);
        }
        self.queued -= 1;
        true
    }
}

/// One request's admission, held until dropped; counts the request as served then, with its
/// latency from arrival. Its slot is freed once the permit and the request's [`Growth`] are
/// both gone.
#[derive(Debug)]
pub struct Permit {
    inner: Arc<Inner>,
    arrived: Instant,
    failed: bool,
    slot: Arc<Slot>,
}

impl Permit {
    /// Marks the request as failed (counted when the permit drops).
    pub fn fail(&mut self) {
        self.failed = true;
    }

    /// Whether the request holds a small slot now.
    pub fn is_small(&self) -> bool {
        self.slot.small.load(Ordering::Relaxed)
    }

    /// The handle by which the request, before it takes more than [`SMALL_REQUEST_BYTES`] of
    /// input, waits for a full slot in place of its small one (at once when it holds a full one).
    pub fn growth(&self, admission: &Admission, client: &str) -> Growth {
        Growth { admission: admission.clone(), client: client.to_string(), slot: self.slot.clone() }
    }
}

/// The slot a request holds, freed (or handed to the next waiting request) when dropped. It
/// outlives the [`Permit`] while a [`Growth`] still holds it: a request's input stream may end
/// after its reply has.
#[derive(Debug)]
struct Slot {
    inner: Arc<Inner>,
    /// A small slot; changed only under the queue's lock.
    small: AtomicBool,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut queue = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        if self.small.load(Ordering::Relaxed) {
            queue.running_small -= 1;
        } else {
            queue.release_full();
        }
    }
}

/// Lets a request in a small slot trade it for a full slot before it takes more input; see
/// [`Permit::growth`]. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Growth {
    admission: Admission,
    client: String,
    slot: Arc<Slot>,
}

impl Growth {
    /// Returns once the request holds a full slot: at once when it does already; else after
    /// waiting its turn for one (as [`Admission::admit`] does), its small slot then freed.
    /// `ResourceExhausted` (busy) when the queue is full or the wait passes its deadline.
    pub async fn full_slot(&self) -> Result<(), Status> {
        if !self.slot.small.load(Ordering::Relaxed) {
            return Ok(());
        }
        self.admission.full_slot(&self.client).await?;
        let mut queue = self.admission.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        if self.slot.small.swap(false, Ordering::Relaxed) {
            queue.running_small -= 1;
        } else {
            // Another call grew the slot meanwhile: the one just taken is not needed.
            queue.release_full();
        }
        Ok(())
    }
}

impl Drop for Permit {
    // The slot is released by `Slot`'s own drop, once no `Growth` holds it either.
    fn drop(&mut self) {
        let inner = &self.inner;
        inner.served.fetch_add(1, Ordering::Relaxed);
        if self.failed {
            inner.failed.fetch_add(1, Ordering::Relaxed);
        }
        let seconds = self.arrived.elapsed().as_secs_f64();
        let mut latency = inner.latency.lock().unwrap_or_else(|e| e.into_inner());
        let bucket = LATENCY_BUCKETS.iter().position(|b| seconds <= *b).unwrap_or(LATENCY_BUCKETS.len());
        latency.0[bucket] += 1;
        latency.1 += seconds;
    }
}

/// A session's place among [`RequestLimits::max_sessions`], given back when dropped.
#[derive(Debug)]
pub struct SessionGuard {
    inner: Arc<Inner>,
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner()).sessions -= 1;
    }
}

/// A request waiting in the queue; leaves it when dropped (its client went away) and passes on
/// a slot it was handed meanwhile.
struct Waiting<'a> {
    admission: &'a Admission,
    client: String,
    id: u64,
    rx: oneshot::Receiver<()>,
    settled: bool,
}

impl Waiting<'_> {
    /// Leaves the queue; true when a slot was handed over first (the request then runs).
    fn leave(&mut self) -> bool {
        self.settled = true;
        let mut queue = self.admission.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        if queue.remove(&self.client, self.id) {
            return false;
        }
        // Not queued any more: a slot was handed over (under the lock, so it is here now).
        self.rx.try_recv().is_ok()
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if !self.settled && self.leave() {
            // Handed a slot nobody will use: pass it on.
            self.admission.inner.state.lock().unwrap_or_else(|e| e.into_inner()).release_full();
        }
    }
}

/// A stream of replies (or statuses), boxed.
pub type StatusStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

impl Admission {
    /// Admission under `limits`, naming them by their field names in refusals.
    pub fn new(limits: RequestLimits) -> Self {
        let inner = Inner { latency: Mutex::new((vec![0; LATENCY_BUCKETS.len() + 1], 0.0)), ..Default::default() };
        Admission { limits, names: LimitNames::default(), inner: Arc::new(inner) }
    }

    /// The same admission naming its bounds as `names` in refusals (the command line's flags).
    pub fn with_names(mut self, names: LimitNames) -> Self {
        self.names = names;
        self
    }

    /// The bounds.
    pub fn limits(&self) -> &RequestLimits {
        &self.limits
    }

    /// How refusals name the bounds.
    pub fn names(&self) -> &LimitNames {
        &self.names
    }

    /// A full slot for one request from `client` (its connection), held until the permit drops:
    /// at once when one is free, else after waiting its turn. `ResourceExhausted` when the
    /// queue is full or the wait passes the queue's deadline, naming which.
    pub async fn admit(&self, client: &str) -> Result<Permit, Status> {
        let arrived = Instant::now();
        self.full_slot(client).await?;
        Ok(self.permit(arrived, false))
    }

    /// A slot for a request whose size is not known yet: a full slot when one is free, else a
    /// small one ([`RequestLimits::max_small`]) when one is free, else a full slot after waiting
    /// its turn, as [`Admission::admit`] gives. A request in a small slot must wait for
    /// [`Growth::full_slot`] before it takes more than [`SMALL_REQUEST_BYTES`] of input.
    pub async fn admit_small_or_full(&self, client: &str) -> Result<Permit, Status> {
        let arrived = Instant::now();
        {
            let mut queue = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
            if queue.running >= self.limits.max_concurrent.max(1) && queue.running_small < self.limits.max_small {
                queue.running_small += 1;
                return Ok(self.permit(arrived, true));
            }
        }
        self.full_slot(client).await?;
        Ok(self.permit(arrived, false))
    }

    /// Opens a session: an exchange that stays open for many requests, each of which takes its
    /// own slot ([`Admission::admit`], [`Admission::admit_small_or_full`]) while it runs; the
    /// session itself holds none, only its place among [`RequestLimits::max_sessions`] until the
    /// returned guard drops. `ResourceExhausted` (busy) when that many are open.
    pub fn open_session(&self) -> Result<SessionGuard, Status> {
        let mut queue = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        if queue.sessions >= self.limits.max_sessions {
            self.inner.refused_sessions.fetch_add(1, Ordering::Relaxed);
            return Err(busy(format!(
                "busy: {} sessions are open, the most this server keeps ({} raises it); close one, or send requests without a session",
                queue.sessions, self.names.max_sessions
            )));
        }
        queue.sessions += 1;
        Ok(SessionGuard { inner: self.inner.clone() })
    }

    fn permit(&self, arrived: Instant, small: bool) -> Permit {
        let slot = Arc::new(Slot { inner: self.inner.clone(), small: AtomicBool::new(small) });
        Permit { inner: self.inner.clone(), arrived, failed: false, slot }
    }

    /// Takes a full slot for `client`: at once when one is free, else after waiting in the
    /// queue. The caller owns the slot (a [`Slot`] releases it).
    async fn full_slot(&self, client: &str) -> Result<(), Status> {
        let (id, rx) = {
            let mut queue = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
            if queue.running < self.limits.max_concurrent.max(1) {
                queue.running += 1;
                return Ok(());
            }
            if queue.queued >= self.limits.max_queued {
                self.inner.refused_queue_full.fetch_add(1, Ordering::Relaxed);
                return Err(busy(format!(
                    "busy: the queue is full ({} requests running, {} waiting, the most this server queues; {} raises it); retry shortly",
                    queue.running + queue.running_small,
                    queue.queued,
                    self.names.max_queued
                )));
            }
            let (tx, rx) = oneshot::channel();
            let id = queue.next_id;
            queue.next_id += 1;
            if !queue.waiting.contains_key(client) {
                queue.turns.push_back(client.to_string());
            }
            queue.waiting.entry(client.to_string()).or_default().push_back((id, tx));
            queue.queued += 1;
            (id, rx)
        };
        let mut waiting = Waiting { admission: self, client: client.to_string(), id, rx, settled: false };
        match tokio::time::timeout(self.limits.queue_timeout, &mut waiting.rx).await {
            Ok(Ok(())) => {
                waiting.settled = true;
                Ok(())
            }
            // The sender is only dropped after a send; treated as the deadline for safety.
            Ok(Err(_)) | Err(_) => {
                if waiting.leave() {
                    return Ok(());
                }
                self.inner.refused_queue_timeout.fetch_add(1, Ordering::Relaxed);
                Err(busy(format!(
                    "busy: the request waited {:?} for a slot, this server's queue deadline ({} raises it); retry later",
                    self.limits.queue_timeout, self.names.queue_timeout
                )))
            }
        }
    }

    /// Counts `rows` as served.
    pub fn add_rows(&self, rows: u64) {
        self.inner.rows.fetch_add(rows, Ordering::Relaxed);
    }

    /// What this admission has seen.
    pub fn stats(&self) -> AdmissionStats {
        let (running, running_small, queued, sessions) = {
            let queue = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
            (queue.running + queue.running_small, queue.running_small, queue.queued, queue.sessions)
        };
        let (buckets, sum) = self.inner.latency.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let latency_buckets = buckets
            .iter()
            .scan(0u64, |total, n| {
                *total += n;
                Some(*total)
            })
            .collect();
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        AdmissionStats {
            running,
            running_small,
            queued,
            served: load(&self.inner.served),
            failed: load(&self.inner.failed),
            rows: load(&self.inner.rows),
            refused_queue_full: load(&self.inner.refused_queue_full),
            refused_queue_timeout: load(&self.inner.refused_queue_timeout),
            sessions,
            refused_sessions: load(&self.inner.refused_sessions),
            latency_buckets,
            latency_seconds_sum: sum,
        }
    }

    /// `stream`, holding `permit` until it ends, and ended with `DeadlineExceeded` once the
    /// deadline has passed; an error item marks the request failed and ends the stream, its
    /// permit freed before the error goes out.
    ///
    /// Why before: gRPC ends a response at its first error, and tonic stops polling the stream
    /// there but drops it only later, with the response body, which can be after the client
    /// has the error. A client that reads the server's stats on seeing the error (a pool
    /// checking that nothing is left running) would still count the request.
    pub fn bounded<T: Send + 'static>(&self, stream: StatusStream<T>, permit: Permit) -> StatusStream<T> {
        let deadline = self.limits.deadline;
        let name = self.names.deadline.clone();
        let sleep = Box::pin(tokio::time::sleep(deadline));
        let state = (stream, sleep, Some(permit));
        Box::pin(futures::stream::unfold(state, move |(mut stream, mut sleep, permit)| {
            let name = name.clone();
            async move {
                let mut permit = permit?;
                tokio::select! {
                    item = stream.next() => item.map(|item| {
                        if item.is_err() {
                            permit.fail();
                            return (item, (stream, sleep, None)); // the permit drops here
                        }
                        (item, (stream, sleep, Some(permit)))
                    }),
                    _ = &mut sleep => {
                        permit.fail();
                        let status = Status::deadline_exceeded(format!(
                            "the request ran longer than this server's limit of {}s ({name} raises it); send fewer rows per request",
                            deadline.as_secs()
                        ));
                        Some((Err(status), (stream, sleep, None)))
                    }
                }
            }
        }))
    }
}

/// The metadata key by which a server asks a client to try again after a pause (gRPC's own
/// name for server pushback, in milliseconds).
pub const RETRY_PUSHBACK: &str = "grpc-retry-pushback-ms";

/// How long a busy answer asks the client to wait before trying again.
const BUSY_PUSHBACK_MS: u32 = 50;

/// A `ResourceExhausted` answer that says "busy, try again shortly": it carries
/// [`RETRY_PUSHBACK`], which a request over its own bounds (too many rows, too much memory)
/// does not, so a pool retries the one and fails fast on the other.
pub fn busy(message: String) -> Status {
    let mut status = Status::resource_exhausted(message);
    status.metadata_mut().insert(RETRY_PUSHBACK, tonic::metadata::MetadataValue::from(BUSY_PUSHBACK_MS));
    status
}

/// Whether `status` is a [`busy`] answer: worth trying again, here or elsewhere.
pub fn is_busy(status: &Status) -> bool {
    status.code() == tonic::Code::ResourceExhausted && status.metadata().contains_key(RETRY_PUSHBACK)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max_concurrent: usize, max_queued: usize, queue_timeout: Duration) -> RequestLimits {
        RequestLimits { max_concurrent, max_queued, queue_timeout, ..Default::default() }
    }

    #[tokio::test]
    async fn streams_end_at_the_deadline_and_free_their_slot() {
        let admission = Admission::new(RequestLimits { max_concurrent: 1, deadline: Duration::from_millis(50), ..Default::default() });
        let permit = admission.admit("a").await.unwrap();
        let endless: StatusStream<u32> = Box::pin(futures::stream::pending());
        let items: Vec<_> = admission.bounded(endless, permit).collect().await;
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].as_ref().unwrap_err().code(), tonic::Code::DeadlineExceeded);
        let stats = admission.stats();
        assert_eq!((stats.running, stats.served, stats.failed), (0, 1, 1));
        assert!(admission.admit("a").await.is_ok());
    }

    #[tokio::test]
    async fn an_error_item_frees_the_slot_before_it_goes_out_and_ends_the_stream() {
        let admission = Admission::new(RequestLimits { max_concurrent: 1, ..Default::default() });
        let permit = admission.admit("a").await.unwrap();
        let items: StatusStream<u32> =
            Box::pin(futures::stream::iter([Ok(1), Err(Status::not_found("no such model")), Ok(2)]).chain(futures::stream::pending()));
        let mut bounded = admission.bounded(items, permit);
        assert_eq!(bounded.next().await.unwrap().unwrap(), 1);
        assert_eq!(admission.stats().running, 1);
        // The error, with the stream still held (as tonic holds it after sending the status):
        // the slot is already free and the request counted as failed.
        assert_eq!(bounded.next().await.unwrap().unwrap_err().code(), tonic::Code::NotFound);
        let stats = admission.stats();
        assert_eq!((stats.running, stats.failed), (0, 1));
        assert!(bounded.next().await.is_none(), "nothing follows an error");
        assert!(admission.admit("a").await.is_ok());
    }

    #[tokio::test]
    async fn requests_wait_their_turn_across_connections_and_a_full_queue_refuses_by_name() {
        let admission =
            Admission::new(limits(1, 4, Duration::from_secs(10))).with_names(LimitNames { max_queued: "--max-queued".into(), ..Default::default() });
        let first = admission.admit("busy").await.unwrap();
        // Connection "busy" queues three more, then "quiet" one: "quiet" runs second, not last.
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for (i, client) in ["busy", "busy", "busy", "quiet"].into_iter().enumerate() {
            let (admission, order) = (admission.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let permit = admission.admit(client).await.unwrap();
                order.lock().unwrap().push(format!("{client}{i}"));
                tokio::time::sleep(Duration::from_millis(5)).await;
                drop(permit);
            }));
            // Arrival order is the order of these calls.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(admission.stats().queued, 4);
        let e = admission.admit("late").await.unwrap_err();
        assert_eq!(e.code(), tonic::Code::ResourceExhausted);
        assert!(e.message().contains("queue is full") && e.message().contains("--max-queued"), "{}", e.message());
        drop(first);
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), ["busy0", "quiet3", "busy1", "busy2"]);
        let stats = admission.stats();
        assert_eq!((stats.running, stats.queued, stats.served, stats.refused_queue_full), (0, 0, 5, 1));
        assert_eq!(*stats.latency_buckets.last().unwrap(), 5);
    }

    #[tokio::test]
    async fn small_requests_run_past_the_full_slots_and_wait_their_turn_to_grow() {
        let admission = Admission::new(RequestLimits { max_small: 2, ..limits(1, 8, Duration::from_secs(10)) });
        let full = admission.admit_small_or_full("a").await.unwrap();
        assert!(!full.is_small());
        // The full slot is taken: small slots, while they last.
        let b = admission.admit_small_or_full("b").await.unwrap();
        let c = admission.admit_small_or_full("c").await.unwrap();
        assert!(b.is_small() && c.is_small());
        let stats = admission.stats();
        assert_eq!((stats.running, stats.running_small, stats.queued), (3, 2, 0));
        // Then the next waits for a full slot, and so does any caller of `admit`.
        let mut d = Box::pin(admission.admit_small_or_full("d"));
        assert!(futures::poll!(&mut d).is_pending());
        assert!(futures::poll!(Box::pin(admission.admit("x"))).is_pending());
        // b grows: it waits its turn behind d, in its small slot meanwhile.
        let growth = b.growth(&admission, "b");
        let mut grown = Box::pin(growth.full_slot());
        assert!(futures::poll!(&mut grown).is_pending());
        assert_eq!(admission.stats().queued, 2);
        drop(full);
        let d = d.await.unwrap();
        assert!(!d.is_small());
        assert!(futures::poll!(&mut grown).is_pending());
        drop(d);
        grown.await.unwrap();
        assert!(!b.is_small());
        let stats = admission.stats();
        assert_eq!((stats.running, stats.running_small, stats.queued), (2, 1, 0));
        // The small slot b left is free for the next; growing again takes nothing more.
        let e = admission.admit_small_or_full("e").await.unwrap();
        assert!(e.is_small());
        growth.full_slot().await.unwrap();
        assert_eq!(admission.stats().running, 3);
        // b's slot is held until its growth (its input stream) is gone too.
        drop(b);
        assert_eq!(admission.stats().running, 3);
        drop(growth);
        assert_eq!(admission.stats().running, 2);
        drop((c, e));
        let stats = admission.stats();
        assert_eq!((stats.running, stats.running_small, stats.queued, stats.served), (0, 0, 0, 5));

        // With no small slots, a request waits for a full one.
        let admission = Admission::new(RequestLimits { max_small: 0, ..limits(1, 8, Duration::from_secs(10)) });
        let _full = admission.admit_small_or_full("a").await.unwrap();
        assert!(futures::poll!(Box::pin(admission.admit_small_or_full("b"))).is_pending());
    }

    #[tokio::test]
    async fn sessions_are_bounded_by_name_and_hold_no_slot_of_their_own() {
        let admission = Admission::new(RequestLimits { max_sessions: 2, ..limits(1, 8, Duration::from_secs(10)) })
            .with_names(LimitNames { max_sessions: "--max-sessions".into(), ..Default::default() });
        let (a, b) = (admission.open_session().unwrap(), admission.open_session().unwrap());
        let e = admission.open_session().unwrap_err();
        assert!(is_busy(&e), "{e:?}");
        assert!(e.message().contains("2 sessions are open") && e.message().contains("--max-sessions"), "{}", e.message());
        // Two open sessions take no slot: a request is admitted at once.
        let stats = admission.stats();
        assert_eq!((stats.sessions, stats.refused_sessions, stats.running), (2, 1, 0));
        drop(admission.admit("x").await.unwrap());
        drop(a);
        assert_eq!(admission.stats().sessions, 1);
        let _c = admission.open_session().unwrap();
        drop(b);
        assert_eq!(admission.stats().sessions, 1);
    }

    #[tokio::test]
    async fn a_wait_past_the_deadline_is_refused_and_a_cancelled_wait_leaves_no_trace() {
        let admission = Admission::new(limits(1, 8, Duration::from_millis(30)));
        let held = admission.admit("a").await.unwrap();
        let e = admission.admit("b").await.unwrap_err();
        assert!(e.message().contains("waited 30ms") && e.message().contains("queue_timeout"), "{}", e.message());
        // A waiting request whose client goes away leaves the queue. Polled once (so it is
        // queued) and then dropped, rather than raced against a short timer: a timer shorter
        // than the queue timeout made the test depend on how busy the machine was.
        let mut waiting = Box::pin(admission.admit("c"));
        assert!(futures::poll!(&mut waiting).is_pending());
        assert_eq!(admission.stats().queued, 1);
        drop(waiting);
        assert_eq!(admission.stats().queued, 0);
        drop(held);
        let stats = admission.stats();
        assert_eq!((stats.running, stats.refused_queue_timeout), (0, 1));
        assert!(admission.admit("d").await.is_ok());
    }
}
