//! Bounds on the work one server takes on: requests at once, time per request, and rows and
//! bytes per `DoExchange`. A request over a bound gets a status saying which bound and its
//! value; the server keeps serving the others.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::{Stream, StreamExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::Status;

/// The bounds of one server. The defaults suit a 2-core, 24 GiB machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestLimits {
    /// Requests (exchanges, statements) running at once; more are refused with
    /// `ResourceExhausted` rather than queued without end.
    pub max_concurrent: usize,
    /// Time one request may take, reply stream included.
    pub deadline: Duration,
    /// Rows one `DoExchange` may send.
    pub max_rows: u64,
    /// Bytes of Arrow data one `DoExchange` may send.
    pub max_bytes: u64,
}

impl Default for RequestLimits {
    fn default() -> Self {
        RequestLimits { max_concurrent: 8, deadline: Duration::from_secs(3600), max_rows: 50_000_000, max_bytes: 16 << 30 }
    }
}

/// Admits requests up to [`RequestLimits::max_concurrent`] and ends their streams at the
/// deadline.
#[derive(Debug, Clone)]
pub struct Admission {
    limits: RequestLimits,
    slots: Arc<Semaphore>,
}

/// A stream of replies (or statuses), boxed.
pub type StatusStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

impl Admission {
    /// Admission under `limits`.
    pub fn new(limits: RequestLimits) -> Self {
        let slots = Arc::new(Semaphore::new(limits.max_concurrent.max(1)));
        Admission { limits, slots }
    }

    /// The bounds.
    pub fn limits(&self) -> &RequestLimits {
        &self.limits
    }

    /// A slot for one request, held until the returned permit drops; `ResourceExhausted` when
    /// every slot is taken.
    pub fn admit(&self) -> Result<OwnedSemaphorePermit, Status> {
        self.slots.clone().try_acquire_owned().map_err(|_| {
            Status::resource_exhausted(format!(
                "busy: {} requests are running, the most this server takes at once; retry shortly",
                self.limits.max_concurrent
            ))
        })
    }

    /// `stream`, holding `permit` until it ends, and ended with `DeadlineExceeded` once the
    /// deadline has passed.
    pub fn bounded<T: Send + 'static>(&self, stream: StatusStream<T>, permit: OwnedSemaphorePermit) -> StatusStream<T> {
        let deadline = self.limits.deadline;
        let sleep = Box::pin(tokio::time::sleep(deadline));
        let state = (stream, sleep, Some(permit));
        Box::pin(futures::stream::unfold(state, move |(mut stream, mut sleep, permit)| async move {
            let permit = permit?;
            tokio::select! {
                item = stream.next() => item.map(|item| (item, (stream, sleep, Some(permit)))),
                _ = &mut sleep => {
                    let status = Status::deadline_exceeded(format!(
                        "the request ran longer than this server's limit of {}s; send fewer rows per request",
                        deadline.as_secs()
                    ));
                    Some((Err(status), (stream, sleep, None)))
                }
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn requests_beyond_the_bounds_are_refused_and_streams_end_at_the_deadline() {
        let admission = Admission::new(RequestLimits { max_concurrent: 1, deadline: Duration::from_millis(50), ..Default::default() });
        let permit = admission.admit().unwrap();
        assert_eq!(admission.admit().unwrap_err().code(), tonic::Code::ResourceExhausted);
        let endless: StatusStream<u32> = Box::pin(futures::stream::pending());
        let items: Vec<_> = admission.bounded(endless, permit).collect().await;
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].as_ref().unwrap_err().code(), tonic::Code::DeadlineExceeded);
        // The slot is free again once the stream ended.
        assert!(admission.admit().is_ok());
    }
}
