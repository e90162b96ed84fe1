//! Small calls that wait for the compute threads together are computed together: what
//! [`Explainer::spawn_output`](crate::Explainer::spawn_output) does for a server's requests.
//!
//! Why: one row costs an engine about as much as four to sixteen (a lane group of `linear`
//! shares its walk's control flow and each split's coefficients among its rows; a row alone pays
//! them by itself). A server whose clients each send one row (a fraud or credit decision
//! explained as it is made) would pay that for every request. When requests arrive faster than
//! the compute threads answer them, the ones waiting are joined into one engine call and each
//! gets its own rows back: one job at a time answers the small requests, each round taking every
//! request that arrived during the round before (as servers' dynamic batching does, with no
//! timer).
//! Nothing waits on purpose: a request that arrives while no small request is computing is
//! computed at once, alone, so a lone client's latency is what it was.
//!
//! Bits: every CPU engine computes each row on its own, with the same operations whatever the
//! other rows of its block (`linear`'s lane groups of any width, its one-row walk and its trees
//! shared among threads are tested to give the same bits), so a row's values are the same joined
//! or alone. (The GPU engine adds by atomics, whose order, and so last bits, vary from run to run
//! whatever the batch.) A joined call that fails (a bad column in one request, say) is answered
//! again one request at a time, so each request gets its own answer or its own error.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use arrow::array::{ArrayRef, RecordBatch};

use crate::error::{Error, Result};
use crate::explainer::Explainer;
use crate::layout::OutputKind;

/// A request of at most this many rows may wait with others to be joined: a block of this size
/// already fills a lane group of `linear`, so larger ones gain nothing from company.
pub(crate) const JOINABLE_ROWS: usize = 16;

/// Most rows of one joined call: four lane groups, so that a joined call stays about as short
/// as the largest request that may join it, and the first request of a long queue is not held
/// for the rows of many others.
pub(crate) const MOST_JOINED_ROWS: usize = 64;

/// Where a spawned call's answer goes: its output columns (its own rows only), and how it was
/// computed.
pub(crate) type Reply = Box<dyn FnOnce(Result<Vec<ArrayRef>>, CallReport) + Send>;

/// How a call given to [`Explainer::spawn_output`](crate::Explainer::spawn_output) was
/// computed, for a server's statistics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallReport {
    compute: Duration,
    joined: usize,
}

impl CallReport {
    /// This call's share of the engine's time: a joined call's time split among its requests by
    /// their rows, so that the shares of all requests add up to the time the engine took.
    pub fn compute_time(&self) -> Duration {
        self.compute
    }

    /// Requests computed in the same engine call as this one, itself included (1: alone).
    pub fn joined(&self) -> usize {
        self.joined
    }
}

/// A request waiting for the compute threads.
struct Waiting {
    batch: RecordBatch,
    output: OutputKind,
    reply: Reply,
}

/// The requests waiting for the compute threads, shared by every clone of one explainer.
#[derive(Default)]
pub(crate) struct SmallCalls {
    queue: Mutex<Queue>,
}

#[derive(Default)]
struct Queue {
    waiting: Vec<Waiting>,
    /// Whether a job answering the queue ([`answer_waiting`]) is spawned or running. One at a
    /// time: a second, spawned for each request that arrives while the first computes, would be
    /// picked up at once by a thread that waits inside the first one's parallel work (rayon's
    /// threads run pending jobs while they wait), and requests would never wait together.
    answering: bool,
}

impl SmallCalls {
    /// Queues a request; true when no job is answering the queue, so that the caller must spawn
    /// one ([`answer_waiting`]).
    pub(crate) fn push(&self, batch: RecordBatch, output: OutputKind, reply: Reply) -> bool {
        let mut queue = self.lock();
        queue.waiting.push(Waiting { batch, output, reply });
        !std::mem::replace(&mut queue.answering, true)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        // A panic never leaves the queue half-changed (it happens outside the lock).
        self.queue.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The job that answers `explainer`'s queue: takes every request waiting, answers them in their
/// order of arrival (runs of requests for the same output with the same schema, up to
/// [`MOST_JOINED_ROWS`], in one engine call each), and again, until none is left. Requests that
/// arrive meanwhile wait for the next round together.
pub(crate) fn answer_waiting(explainer: &Explainer) {
    let calls = explainer.small_calls();
    // Should an engine panic, the job ends here (`Explainer::spawn` catches it): its requests
    // fail, and those that came after it get a job of their own.
    struct Unwinding<'a>(&'a Explainer);
    impl Drop for Unwinding<'_> {
        fn drop(&mut self) {
            if std::thread::panicking() {
                let mut queue = self.0.small_calls().lock();
                queue.answering = !queue.waiting.is_empty();
                if queue.answering {
                    self.0.spawn(answer_waiting);
                }
            }
        }
    }
    let _unwinding = Unwinding(explainer);
    loop {
        let waiting = {
            let mut queue = calls.lock();
            if queue.waiting.is_empty() {
                queue.answering = false;
                return;
            }
            std::mem::take(&mut queue.waiting)
        };
        let mut waiting = waiting.into_iter().peekable();
        while let Some(first) = waiting.next() {
            let mut rows = first.batch.num_rows();
            let mut joined = vec![first];
            while let Some(next) = waiting.next_if(|next| {
                let first = &joined[0];
                next.output == first.output && rows + next.batch.num_rows() <= MOST_JOINED_ROWS && next.batch.schema_ref() == first.batch.schema_ref()
            }) {
                rows += next.batch.num_rows();
                joined.push(next);
            }
            answer_joined(explainer, joined, rows);
        }
    }
}

/// One engine call for `joined` (`rows` in all), each request's rows back to it; one call each
/// if the joined one fails.
fn answer_joined(explainer: &Explainer, joined: Vec<Waiting>, rows: usize) {
    if joined.len() > 1 {
        let start = Instant::now();
        let batches: Vec<&RecordBatch> = joined.iter().map(|w| &w.batch).collect();
        let columns = arrow::compute::concat_batches(joined[0].batch.schema_ref(), batches)
            .map_err(|e| Error::arrow("joining small requests into one call", e))
            .and_then(|batch| explainer.output_columns(&batch, joined[0].output));
        if let Ok(columns) = columns {
            let elapsed = start.elapsed();
            let count = joined.len();
            let mut first = 0;
            for w in joined {
                let n = w.batch.num_rows();
                let share = elapsed.mul_f64(n as f64 / rows.max(1) as f64);
                (w.reply)(Ok(columns.iter().map(|c| c.slice(first, n)).collect()), CallReport { compute: share, joined: count });
                first += n;
            }
            return;
        }
        // Some request made the joined call fail: each answers for itself.
    }
    for w in joined {
        answer_alone(explainer, w.batch, w.output, w.reply);
    }
}

/// One request's own engine call.
pub(crate) fn answer_alone(explainer: &Explainer, batch: RecordBatch, output: OutputKind, reply: Reply) {
    let start = Instant::now();
    let columns = explainer.output_columns(&batch, output);
    reply(columns, CallReport { compute: start.elapsed(), joined: 1 });
}
