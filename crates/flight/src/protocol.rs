//! The wire contract between Flight clients, the pool and workers: the `DoExchange` descriptor
//! (a [`PinnedCall`] as JSON), the action names, what `ListFlights` and `stats` return, and how
//! our errors become gRPC statuses.

use std::time::Duration;

use arrow::datatypes::{Schema, SchemaRef};
use arrow_flight::FlightDescriptor;
use serde::{Deserialize, Serialize};
use tonic::Status;

use shapfusion_core::error::Error;
use shapfusion_core::model::Model;
use shapfusion_core::{output_fields, OutputKind};
use shapfusion_sql::call::{PinnedCall, CALL_VERSION};

/// `DoAction` type: is the worker serving? Returns `{"status":"serving", ...}` (no token needed).
pub use crate::net::ACTION_HEALTH;
/// `DoAction` type: build and protocol version.
pub const ACTION_VERSION: &str = "version";
/// `DoAction` type: rows served, rows/s, device, requests in flight.
pub const ACTION_STATS: &str = "stats";

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
    /// Exchanges computing now.
    pub in_flight: usize,
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
    /// Finished exchanges per latency bucket (`crate::net::limits::LATENCY_BUCKETS`, then
    /// +Inf), cumulative; latency is arrival to the end of the reply, queue wait included.
    #[serde(default)]
    pub latency_buckets: Vec<u64>,
    /// Sum of the finished exchanges' latencies, in seconds.
    #[serde(default)]
    pub latency_seconds_sum: f64,
}

/// Maps a library error to the gRPC status a client should see.
pub fn status_from_error(e: &Error) -> Status {
    let msg = e.to_string();
    match e {
        Error::ModelNotFound(_) => Status::not_found(msg),
        Error::MissingColumn { .. } | Error::ColumnType { .. } | Error::Input(_) => Status::invalid_argument(msg),
        Error::Unavailable(_) | Error::VersionMismatch(_) => Status::failed_precondition(msg),
        Error::ModelFormat { .. } | Error::InvalidTree { .. } | Error::UnsupportedModel { .. } => Status::failed_precondition(msg),
        _ => Status::internal(msg),
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
    }
}
