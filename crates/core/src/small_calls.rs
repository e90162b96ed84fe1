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

use std::collections::VecDeque;
use std::sync::{Condvar, Mutex, OnceLock};
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
pub(crate) struct Waiting {
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

/// Where a job answering small requests runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lane {
    /// On the explainer's compute pool.
    Pool,
    /// On the [`QuickLane`], for calls within [`QUICK_SPLITS`] (see [`answer_waiting`]).
    Quick,
}

/// The job that answers `explainer`'s queue, on `lane`: answers `round` (requests already taken
/// from the queue, if any), then takes every request waiting, answers them in their order of
/// arrival (runs of requests for the same output with the same schema, up to
/// [`MOST_JOINED_ROWS`], in one engine call each), and again, until none is left. Requests that
/// arrive meanwhile wait for the next round together. On the quick lane, the first call too
/// large for it hands the job over to the compute pool, with that call and the rest of its round:
/// the queue keeps one job answering it, and the lane never waits on the pool; and each next
/// round is a job queued on the lane anew, behind other explainers' jobs.
pub(crate) fn answer_waiting(explainer: &Explainer, lane: Lane, mut round: Vec<Waiting>) {
    let calls = explainer.small_calls();
    // Should an engine panic, the job ends here (`Explainer::spawn` and the quick lane catch
    // it): its requests fail, and those that came after it get a job of their own.
    struct Unwinding<'a>(&'a Explainer);
    impl Drop for Unwinding<'_> {
        fn drop(&mut self) {
            if std::thread::panicking() {
                let mut queue = self.0.small_calls().lock();
                queue.answering = !queue.waiting.is_empty();
                if queue.answering {
                    start_answering(self.0, false);
                }
            }
        }
    }
    let _unwinding = Unwinding(explainer);
    // Whether this job has a round of its own to answer (on the quick lane, one round a job).
    let mut answering_a_round = !round.is_empty();
    loop {
        if let Some(rest) = answer_round(explainer, round, lane) {
            explainer.spawn(move |explainer| answer_waiting(explainer, Lane::Pool, rest));
            return;
        }
        round = {
            let mut queue = calls.lock();
            if queue.waiting.is_empty() {
                queue.answering = false;
                return;
            }
            if lane == Lane::Quick && answering_a_round {
                // The lane is every explainer's: this one's next round waits its turn behind the
                // jobs queued on it meanwhile, so that a model whose requests never stop cannot
                // hold the lane from the others. Still answering, so requests keep waiting.
                drop(queue);
                start_answering(explainer, true);
                return;
            }
            answering_a_round = true;
            std::mem::take(&mut queue.waiting)
        };
    }
}

/// Starts a job answering `explainer`'s queue ([`answer_waiting`]): on the quick lane where
/// `quick` (and the lane's thread runs), else on the compute pool.
pub(crate) fn start_answering(explainer: &Explainer, quick: bool) {
    match QuickLane::get().filter(|_| quick) {
        Some(lane) => {
            let explainer = explainer.clone();
            lane.spawn(move || answer_waiting(&explainer, Lane::Quick, Vec::new()));
        }
        None => explainer.spawn(|explainer| answer_waiting(explainer, Lane::Pool, Vec::new())),
    }
}

/// Answers `waiting` in order, runs of it joined; on the quick lane, stops at the first call too
/// large for it and returns that call's requests and those after them, unanswered.
fn answer_round(explainer: &Explainer, waiting: Vec<Waiting>, lane: Lane) -> Option<Vec<Waiting>> {
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
        if lane == Lane::Quick && !explainer.is_quick(rows, joined[0].output) {
            return Some(joined.into_iter().chain(waiting).collect());
        }
        answer_joined(explainer, joined, rows, lane);
    }
    None
}

/// One engine call for `joined` (`rows` in all), each request's rows back to it; one call each
/// if the joined one fails.
fn answer_joined(explainer: &Explainer, joined: Vec<Waiting>, rows: usize, lane: Lane) {
    if joined.len() > 1 {
        let start = Instant::now();
        let batches: Vec<&RecordBatch> = joined.iter().map(|w| &w.batch).collect();
        let columns = arrow::compute::concat_batches(joined[0].batch.schema_ref(), batches)
            .map_err(|e| Error::arrow("joining small requests into one call", e))
            .and_then(|batch| explainer.output_columns_on(lane, &batch, joined[0].output));
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
        answer_alone(explainer, w.batch, w.output, w.reply, lane);
    }
}

/// One request's own engine call, on `lane`.
pub(crate) fn answer_alone(explainer: &Explainer, batch: RecordBatch, output: OutputKind, reply: Reply, lane: Lane) {
    let start = Instant::now();
    let columns = explainer.output_columns_on(lane, &batch, output);
    reply(columns, CallReport { compute: start.elapsed(), joined: 1 });
}

/// Most work, in splits walked (a row's splits over all trees, times the call's rows, times the
/// features for interaction values), of a call computed on the [quick lane](QuickLane): about a
/// tenth of a millisecond of one core. Past that, the compute pool's threads sharing the call's
/// trees gain more than their hand-offs cost: measured with one-row requests to a worker on 2
/// cores, the lane cut the worker's CPU a request by a fifth on a model of 20 trees of depth 4
/// (about 300 splits), and, with a limit four times this one, added 0.25 ms to the round trip of
/// one of 100 trees of depth 8 (25,000 splits, 0.3 ms on one core).
pub(crate) const QUICK_SPLITS: usize = 1 << 13;

/// Splits a call of `rows` of `output` walks in a model of `splits_a_row` splits: the cost the
/// quick lane's choice reads.
pub(crate) fn call_splits(splits_a_row: usize, rows: usize, output: OutputKind, features: usize) -> usize {
    let per_row = if output == OutputKind::Interactions { splits_a_row.saturating_mul(features.max(1)) } else { splits_a_row };
    per_row.saturating_mul(rows)
}

/// A job for the quick lane.
type Job = Box<dyn FnOnce() + Send>;

/// One compute thread of its own for calls too small to share among the compute threads (a
/// request to explain one application on a model that walks it in a tenth of a millisecond):
/// the process's one quick lane, which answers small requests for every explainer whose calls
/// it can take (see [`Explainer::spawn_output`](crate::Explainer::spawn_output)).
///
/// Why: on the compute pool, such a call costs more in hand-offs than in work. Each request
/// wakes the pool's threads for a walk of a few microseconds, and after it rayon's idle threads
/// yield the CPU about thirty times each before they sleep again: measured on a 2-core machine
/// with one-row requests of a 20-tree model to a worker, 36 context switches a request on the
/// compute threads and 0.17 ms of their CPU, a third of the worker's, on the cores the clients
/// use too. The lane's thread instead waits on a
/// condition variable between jobs (one wake a request, no spinning) and is a rayon pool of
/// one thread, so the engines' parallel loops run in place on it and a call takes one hand-off
/// in and one out. Its values are the pool's bits: every CPU engine gives a row the same bits
/// on any number of threads.
pub(crate) struct QuickLane {
    jobs: Mutex<VecDeque<Job>>,
    ready: Condvar,
}

impl QuickLane {
    /// The process's quick lane, its thread started by the first call; `None` where that thread
    /// could not start (said once in the log), and small calls stay on the compute pool.
    pub(crate) fn get() -> Option<&'static QuickLane> {
        static LANE: OnceLock<Option<&'static QuickLane>> = OnceLock::new();
        *LANE.get_or_init(|| {
            let lane: &'static QuickLane = Box::leak(Box::new(QuickLane { jobs: Mutex::default(), ready: Condvar::new() }));
            match rayon::ThreadPoolBuilder::new().num_threads(1).thread_name(|_| "shapfusion-quick".to_string()).build() {
                Ok(pool) => {
                    // The lane's loop is a job of the one-thread pool that never ends: code it
                    // calls runs on a rayon thread of a pool of one, so parallel loops run in place.
                    pool.spawn(move || lane.run());
                    // The pool lives as long as the process (its thread runs the loop above).
                    std::mem::forget(pool);
                    Some(lane)
                }
                Err(e) => {
                    tracing::warn!("cannot start the quick lane's thread ({e}); small requests run on the compute threads");
                    None
                }
            }
        })
    }

    /// Runs `job` on the lane's thread, after the jobs queued before it; returns at once.
    pub(crate) fn spawn(&self, job: impl FnOnce() + Send + 'static) {
        self.lock().push_back(Box::new(job));
        self.ready.notify_one();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Job>> {
        // Jobs run outside the lock, so a panic never leaves the queue half-changed.
        self.jobs.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The lane's thread: each job in turn, waiting (not spinning) while there is none.
    fn run(&self) {
        loop {
            let job = {
                let mut jobs = self.lock();
                loop {
                    match jobs.pop_front() {
                        Some(job) => break job,
                        None => jobs = self.ready.wait(jobs).unwrap_or_else(|poisoned| poisoned.into_inner()),
                    }
                }
            };
            // A job that panics ends itself only, as on the compute pool.
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).is_err() {
                tracing::error!("a compute job panicked on the quick lane; its request fails, the process goes on");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{mpsc, Arc};

    use arrow::array::{Array, Float64Array};
    use arrow::datatypes::{DataType, Field, Schema};

    use super::*;
    use crate::model::Model;

    fn fraud() -> Model {
        Model::load(concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/models/fraud.json")).unwrap()
    }

    /// `rows` rows of the model's features, some missing.
    fn rows(model: &Model, rows: usize) -> RecordBatch {
        let fields: Vec<Field> = model.feature_names().iter().map(|name| Field::new(name, DataType::Float64, true)).collect();
        let columns: Vec<ArrayRef> = (0..fields.len())
            .map(|j| {
                Arc::new(Float64Array::from_iter((0..rows).map(|r| ((r + j) % 5 != 4).then(|| ((r * 7 + j * 3) % 11) as f64 - 2.0)))) as ArrayRef
            })
            .collect();
        RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
    }

    /// Each row of `batch` as a request of its own through `spawn_output`, all at once or (with
    /// `one_at_a_time`) each after the reply before it: each reply's columns, and the name of
    /// the thread that answered it.
    fn one_row_requests(explainer: &Explainer, batch: &RecordBatch, output: OutputKind, one_at_a_time: bool) -> Vec<(String, Vec<ArrayRef>)> {
        let (sender, replies) = mpsc::channel();
        let mut got = Vec::new();
        for r in 0..batch.num_rows() {
            let sender = sender.clone();
            explainer.spawn_output(batch.slice(r, 1), output, move |columns, _| {
                let thread = std::thread::current().name().unwrap_or_default().to_string();
                sender.send((r, thread, columns.unwrap())).unwrap();
            });
            if one_at_a_time {
                got.push(replies.recv().unwrap());
            }
        }
        drop(sender);
        got.extend(replies.iter());
        got.sort_by_key(|(r, _, _)| *r);
        assert_eq!(got.len(), batch.num_rows(), "every request answered");
        got.into_iter().map(|(_, thread, columns)| (thread, columns)).collect()
    }

    fn assert_rows_of(got: &[(String, Vec<ArrayRef>)], want: &[ArrayRef], what: &str) {
        for (r, (_, columns)) in got.iter().enumerate() {
            for (c, (got, want)) in columns.iter().zip(want).enumerate() {
                assert_eq!(got.to_data(), want.slice(r, 1).to_data(), "{what}: row {r}, column {c} differs from the pool's bits");
            }
        }
    }

    fn threads(got: &[(String, Vec<ArrayRef>)]) -> Vec<&str> {
        got.iter().map(|(thread, _)| thread.as_str()).collect()
    }

    #[test]
    fn small_calls_of_a_small_model_run_on_the_quick_lane_with_the_pools_bits() {
        let model = fraud();
        let explainer = Explainer::builder(model.clone()).threads(2).build().unwrap();
        // The lane takes calls up to QUICK_SPLITS splits walked, whatever the model.
        let splits = model.trees().iter().map(|t| t.nodes.iter().filter(|n| !n.is_leaf()).count()).sum::<usize>();
        let most = QUICK_SPLITS / splits;
        assert!(most >= 1, "the fixture's one row fits the lane ({splits} splits)");
        assert!(explainer.is_quick(most, OutputKind::Shap) && !explainer.is_quick(most + 1, OutputKind::Shap));
        assert_eq!(explainer.is_quick(1, OutputKind::Interactions), splits * model.num_features() <= QUICK_SPLITS);

        let batch = rows(&model, 24);
        let want = explainer.output_columns(&batch, OutputKind::Shap).unwrap();
        // A lone request at a time: each on the lane.
        let got = one_row_requests(&explainer, &batch, OutputKind::Shap, true);
        assert!(threads(&got).iter().all(|&t| t == "shapfusion-quick"), "{:?}", threads(&got));
        assert_rows_of(&got, &want, "SHAP values on the quick lane");
        // All at once: the first on the lane, and those that waited meanwhile joined into a call
        // too large for it, which the lane hands over to the compute pool; the same bits.
        let got = one_row_requests(&explainer, &batch, OutputKind::Shap, false);
        assert!(threads(&got).iter().all(|&t| t == "shapfusion-quick" || t.starts_with("shapfusion-compute")), "{:?}", threads(&got));
        assert_rows_of(&got, &want, "SHAP values, joined");
        // Interaction values of a row walk past the lane's size: on the compute pool.
        if !explainer.is_quick(1, OutputKind::Interactions) {
            let want = explainer.output_columns(&batch, OutputKind::Interactions).unwrap();
            let got = one_row_requests(&explainer, &batch, OutputKind::Interactions, true);
            assert!(threads(&got).iter().all(|t| t.starts_with("shapfusion-compute")), "{:?}", threads(&got));
            assert_rows_of(&got, &want, "interaction values");
        }
    }

    #[test]
    fn small_calls_of_engines_whose_cost_is_not_their_splits_run_on_the_compute_pool() {
        let model = fraud();
        let explainer = Explainer::builder(model.clone()).threads(2).background(rows(&model, 30)).build().unwrap();
        assert!(!explainer.is_quick(1, OutputKind::Shap));
        let batch = rows(&model, 8);
        let want = explainer.output_columns(&batch, OutputKind::Shap).unwrap();
        let got = one_row_requests(&explainer, &batch, OutputKind::Shap, true);
        assert!(threads(&got).iter().all(|t| t.starts_with("shapfusion-compute")), "{:?}", threads(&got));
        assert_rows_of(&got, &want, "interventional SHAP values");
    }
}
