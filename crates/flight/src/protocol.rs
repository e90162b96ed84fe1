//! The wire contract between Flight clients, the pool and workers: the `DoExchange` descriptor
//! (a [`PinnedCall`] as JSON), the action names and headers, what `ListFlights` and `stats`
//! return, how our errors become gRPC statuses, and how a client's Arrow IPC messages are decoded
//! ([`decode_guarded`]).

use std::time::Duration;

use arrow::array::RecordBatch;
use arrow::datatypes::{Schema, SchemaRef};
use arrow_flight::decode::FlightRecordBatchStream;
use arrow_flight::error::FlightError;
use arrow_flight::FlightData;
use arrow_flight::FlightDescriptor;
use futures::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use tonic::Status;

use shapfusion_core::error::{Error, ErrorKind};
use shapfusion_core::expected_panic;
use shapfusion_core::model::Model;
use shapfusion_core::{output_fields, OutputKind};
use shapfusion_sql::call::{PinnedCall, CALL_VERSION};

/// `DoAction` type: is the worker serving? Returns `{"status":"serving", ...}` (no token needed).
pub use crate::net::ACTION_HEALTH;
/// `DoAction` type: build and protocol version.
pub const ACTION_VERSION: &str = "version";
/// `DoAction` type: rows served, rows/s, device, requests in flight.
pub const ACTION_STATS: &str = "stats";

/// Request metadata by which a client says how many bytes of Arrow data its exchange will send.
/// A hint: an exchange that says more than [`crate::net::SMALL_REQUEST_BYTES`] waits for a full
/// slot at once rather than taking a small one it would soon outgrow, so large requests leave
/// the small slots to small ones. One that says less, or nothing, is held to the small slot's
/// bound as any other.
pub const REQUEST_BYTES_HEADER: &str = "shapfusion-request-bytes";

/// Request metadata that opens a `DoExchange` as a session (value `1` or `true`): the exchange
/// stays open for many requests, each batch the client sends being one, admitted, bounded and
/// answered on its own as it arrives, while the session holds no slot between them. For online
/// serving, where a client explains one decision at a time: a request then costs one batch each
/// way on an open stream instead of a new call (`docs/src/flight.md`).
pub const SESSION_HEADER: &str = "shapfusion-session";

/// Size the worker aims for when it splits a reply into Flight messages.
pub const REPLY_MESSAGE_BYTES: usize = 4 << 20;

/// Version of this protocol, reported by the `version` action: 2 is the pinned call with the
/// caller's settings ([`PinnedCall`], [`CALL_VERSION`]).
pub const PROTOCOL_VERSION: u32 = CALL_VERSION;

/// The command-type descriptor carrying `call` (`DoExchange`, `GetFlightInfo`, `GetSchema`).
pub fn descriptor(call: &PinnedCall) -> FlightDescriptor {
    FlightDescriptor::new_cmd(call.to_json())
}

/// The call in a descriptor's `cmd`; the error says what a valid one looks like.
pub fn call_from_descriptor(d: &FlightDescriptor) -> Result<PinnedCall, Status> {
    if d.r#type != arrow_flight::flight_descriptor::DescriptorType::Cmd as i32 {
        return Err(Status::invalid_argument(
            r#"the flight descriptor must be a command (CMD) holding JSON like {"model": "fraud", "output": "shap"}, not a path"#,
        ));
    }
    PinnedCall::from_json(&d.cmd).map_err(|e| status_from_error(&e))
}

/// What the client hears when the Arrow IPC reader panicked on its message.
pub(crate) const UNDECODABLE: &str = "the Arrow IPC reader failed on it (its metadata contradicts itself or names what Arrow does not know)";

/// Record batches decoded from Flight messages by arrow-flight, with a panic of the decoder
/// turned into an error that ends the stream: the Arrow IPC crate asserts some invariants of the
/// messages it decodes (a schema's float precision, say) instead of returning an error, and
/// bytes from the other end of a call must not panic the task reading them (a worker's client
/// would get a reset and no reason; the pool would lose its query instead of the worker).
pub(crate) struct GuardedBatches {
    /// `None` once the decoder panicked: its state is unknown, so nothing more is read from it.
    decoder: Option<FlightRecordBatchStream>,
    /// The error a panic becomes, which says whose message it was.
    on_panic: fn() -> FlightError,
}

impl GuardedBatches {
    /// The schema of the stream, once its first message is decoded.
    pub(crate) fn schema(&self) -> Option<&SchemaRef> {
        self.decoder.as_ref().and_then(FlightRecordBatchStream::schema)
    }
}

/// The record batches of a client's Flight messages, a panic of the decoder being an
/// `InvalidArgument` that ends them ([`GuardedBatches`]).
pub(crate) fn decode_guarded(data: impl Stream<Item = Result<FlightData, FlightError>> + Send + 'static) -> GuardedBatches {
    let on_panic = || FlightError::Tonic(Box::new(Status::invalid_argument(format!("an input message does not decode: {UNDECODABLE}"))));
    GuardedBatches { decoder: Some(FlightRecordBatchStream::new_from_flight_data(data)), on_panic }
}

/// The record batches of a worker's reply, a panic of the decoder being a
/// [`FlightError::DecodeError`] that ends them ([`GuardedBatches`]): the worker's fault, not the
/// request's.
pub(crate) fn replies_guarded(replies: FlightRecordBatchStream) -> GuardedBatches {
    let on_panic = || FlightError::DecodeError(format!("a reply message does not decode: {UNDECODABLE}"));
    GuardedBatches { decoder: Some(replies), on_panic }
}

impl Stream for GuardedBatches {
    type Item = Result<RecordBatch, FlightError>;

    fn poll_next(mut self: std::pin::Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Option<Self::Item>> {
        let Some(decoder) = self.decoder.as_mut() else { return std::task::Poll::Ready(None) };
        match expected_panic::catch(|| decoder.poll_next_unpin(cx)) {
            Some(poll) => poll,
            None => {
                self.decoder = None;
                std::task::Poll::Ready(Some(Err((self.on_panic)())))
            }
        }
    }
}

/// The schema of a reply: the `explain` layout for `output`.
pub fn output_schema(model: &Model, output: OutputKind) -> SchemaRef {
    SchemaRef::new(Schema::new(output_fields(model, output)))
}

/// What `ListFlights` and `GetFlightInfo` put in `app_metadata` about a model: enough for a
/// client to build its input batches.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelInfo {
    /// The name (or URL) the client asked for.
    pub model: String,
    /// Where the worker loaded it from.
    pub url: String,
    /// The store's version of that object.
    pub version: String,
    /// A hash of the model file's content (`blake3:…`): what requests pin.
    #[serde(default)]
    pub content_hash: String,
    /// Input feature columns, in the model's order.
    pub features: Vec<String>,
    /// Output groups (classes for multiclass models).
    pub output_groups: usize,
}

/// The `stats` action's reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WorkerStats {
    /// Rows explained since start.
    pub rows: u64,
    /// Rows per second of compute time (time spent inside the engine).
    pub rows_per_second: f64,
    /// Seconds since the worker started.
    pub uptime_seconds: f64,
    /// `cpu` (with thread count) or the GPU's name.
    pub device: String,
    /// Requests running now, small slots included: exchanges, and a session's batch while it is
    /// received and computed (an exchange opened as a session is a request per batch it sends).
    pub in_flight: usize,
    /// Of those, exchanges in small slots: beyond `--max-concurrent`, each having sent at most
    /// `crate::net::limits::SMALL_REQUEST_BYTES` of input.
    #[serde(default)]
    pub in_flight_small: usize,
    /// Exchanges waiting for a slot now.
    #[serde(default)]
    pub queued: usize,
    /// Exchanges served since start (finished or failed).
    pub requests: u64,
    /// Exchanges that ended in an error.
    pub failed_requests: u64,
    /// Exchanges refused because the queue was full.
    #[serde(default)]
    pub refused_queue_full: u64,
    /// Exchanges refused because their wait passed the queue's deadline.
    #[serde(default)]
    pub refused_queue_timeout: u64,
    /// Sessions open now ([`SESSION_HEADER`]); each of their requests counts as a request above.
    #[serde(default)]
    pub sessions: usize,
    /// Sessions refused because the most a worker keeps were open (`--max-sessions`).
    #[serde(default)]
    pub refused_sessions: u64,
    /// Finished exchanges per latency bucket (`crate::net::limits::LATENCY_BUCKETS`, then
    /// +Inf), cumulative; latency is arrival to the end of the reply, queue wait included.
    #[serde(default)]
    pub latency_buckets: Vec<u64>,
    /// Sum of the finished exchanges' latencies, in seconds.
    #[serde(default)]
    pub latency_seconds_sum: f64,
    /// Input batches (of at most 16 rows) computed in one engine call with other requests'
    /// batches that waited for the compute threads with them, each with the bits of a call of
    /// its own.
    #[serde(default)]
    pub joined_batches: u64,
}

/// The gRPC status a client sees for a library error, from its kind; a planned model version a
/// machine does not hold is a failed precondition (the client re-plans).
pub fn status_from_error(e: &Error) -> Status {
    let msg = e.report();
    if matches!(e.innermost(), Error::VersionMismatch(_)) {
        return Status::failed_precondition(msg);
    }
    match e.kind() {
        ErrorKind::InvalidArgument | ErrorKind::BadData => Status::invalid_argument(msg),
        ErrorKind::NotFound => Status::not_found(msg),
        ErrorKind::Unavailable => Status::unavailable(msg),
        ErrorKind::ResourceExhausted => Status::resource_exhausted(msg),
        ErrorKind::Unsupported => Status::unimplemented(msg),
        ErrorKind::Io | ErrorKind::Internal => Status::internal(msg),
    }
}

/// The kind of failure a worker's gRPC status says (the other way round from
/// [`status_from_error`]).
pub fn kind_of_status(code: tonic::Code) -> ErrorKind {
    use tonic::Code;
    match code {
        Code::InvalidArgument | Code::OutOfRange | Code::AlreadyExists => ErrorKind::InvalidArgument,
        Code::NotFound => ErrorKind::NotFound,
        Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Aborted | Code::FailedPrecondition => ErrorKind::Unavailable,
        Code::Unauthenticated | Code::PermissionDenied => ErrorKind::InvalidArgument,
        Code::ResourceExhausted => ErrorKind::ResourceExhausted,
        Code::Unimplemented => ErrorKind::Unsupported,
        Code::Ok | Code::Unknown | Code::Internal | Code::DataLoss => ErrorKind::Internal,
    }
}

/// Formats a duration for messages: `1.5s`, `250ms`.
pub fn human_duration(d: Duration) -> String {
    if d >= Duration::from_secs(1) {
        format!("{:.1}s", d.as_secs_f64())
    } else {
        format!("{}ms", d.as_millis())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptors_carry_calls_and_bad_ones_explain_themselves() {
        let c = PinnedCall::new("fraud", OutputKind::Interactions);
        assert_eq!(call_from_descriptor(&descriptor(&c)).unwrap(), c);
        let e = call_from_descriptor(&FlightDescriptor::new_cmd(r#"{"model":"m","output":"shapp"}"#)).unwrap_err();
        assert_eq!(e.code(), tonic::Code::InvalidArgument);
        assert!(e.message().contains("unknown output"), "{}", e.message());
        let e = call_from_descriptor(&FlightDescriptor::new_path(vec!["fraud".into()])).unwrap_err();
        assert!(e.message().contains("must be a command"));
    }

    #[test]
    fn errors_map_to_statuses() {
        let missing = Error::MissingColumn { name: "age".into(), index: 1, available: "x".into() };
        assert_eq!(status_from_error(&missing).code(), tonic::Code::InvalidArgument);
        let unknown = Error::ModelNotFound("unknown model \"x\"; searched: …".into());
        assert_eq!(status_from_error(&unknown).code(), tonic::Code::NotFound);
        assert_eq!(status_from_error(&Error::Internal("no threads".into())).code(), tonic::Code::Internal);
        // Every kind has its code, and a client reading the code back gets the kind again.
        for (e, code) in [
            (Error::InvalidArgument("bad".into()), tonic::Code::InvalidArgument),
            (Error::BadData("no rows".into()), tonic::Code::InvalidArgument),
            (Error::Unavailable("store down".into()), tonic::Code::Unavailable),
            (Error::ResourceExhausted("over the bound".into()), tonic::Code::ResourceExhausted),
            (Error::Unsupported("not built".into()), tonic::Code::Unimplemented),
        ] {
            let status = status_from_error(&e);
            assert_eq!(status.code(), code, "{e}");
            assert_eq!(kind_of_status(status.code()), if e.kind() == ErrorKind::BadData { ErrorKind::InvalidArgument } else { e.kind() });
        }
        // A context keeps the kind and shows the cause once.
        let io = Error::io("/m/fraud.json", std::io::Error::from(std::io::ErrorKind::PermissionDenied)).context("loading model fraud");
        let status = status_from_error(&io);
        assert_eq!(status.code(), tonic::Code::Internal);
        assert!(status.message().starts_with("loading model fraud: /m/fraud.json:"), "{}", status.message());
        // A version another machine holds is a precondition, so the caller plans again.
        assert_eq!(status_from_error(&Error::VersionMismatch("v2".into()).context("worker")).code(), tonic::Code::FailedPrecondition);
    }
}
