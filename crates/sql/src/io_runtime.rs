//! The process's I/O runtime: object-store reads and Flight pool calls made from sync code
//! (DataFusion planning and UDFs, the file pipeline) run here, so they never block a caller's
//! own tokio runtime on itself.

use std::future::Future;
use std::sync::OnceLock;

/// Runs object-store (and Flight pool) I/O on a runtime of its own and waits for it; callable
/// from sync code anywhere, including a tokio worker thread (DataFusion planning and UDFs).
///
/// The wait is a plain channel receive, not a poll of the task's `JoinHandle`: polled from
/// inside another runtime's task, a `JoinHandle` counts against that task's cooperative budget
/// and, once the budget is spent, defers its wake-up to a scheduler this thread never returns
/// to, which hangs the caller.
pub fn run_io<T: Send + 'static>(fut: impl Future<Output = T> + Send + 'static) -> T {
    static IO: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    let rt = IO.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("shapfusion-io")
            .enable_all()
            .build()
            .expect("start the model I/O runtime")
    });
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    rt.spawn(async move {
        let _ = tx.send(fut.await);
    });
    rx.recv().expect("an I/O task panicked")
}
