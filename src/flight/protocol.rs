//! The wire contract between Flight clients, the pool and workers: the `DoExchange` command, the
//! action names, what `ListFlights` and `stats` return, and how our errors become gRPC statuses.

use std::time::Duration;

use arrow::datatypes::{Schema, SchemaRef};
use arrow_flight::FlightDescriptor;
use serde::{Deserialize, Serialize};
use tonic::Status;

use crate::error::Error;
use crate::batch::{output_fields, OutputKind};
use crate::model::Model;

/// `DoAction` type: is the worker serving? Returns `{"status":"serving", ...}`.
pub const ACTION_HEALTH: &str = "health";
/// `DoAction` type: build and protocol version.
pub const ACTION_VERSION: &str = "version";
/// `DoAction` type: rows served, rows/s, device, requests in flight.
pub const ACTION_STATS: &str = "stats";

/// Default limit of one gRPC message, both directions (a record batch is one message unless
/// the sender splits it). Large enough for 64k-row batches of 500 features.
pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 256 << 20;

/// Size the worker aims for when it splits a reply into Flight messages.
pub const REPLY_MESSAGE_BYTES: usize = 4 << 20;

/// Version of this JSON protocol, reported by the `version` action.
pub const PROTOCOL_VERSION: u32 = 1;

/// What a `DoExchange` (or `GetFlightInfo`/`GetSchema`) descriptor asks for: the JSON in its
/// `cmd`, e.g. `{"model": "fraud", "output": "shap"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExchangeCommand {
    /// A model name the worker knows, or a URL it can read.
    pub model: String,
    /// `shap` (default), `interactions` or `predict`.
    #[serde(default, with = "output_name")]
    pub output: OutputKind,
    /// The content hash of the model the caller planned with ([`ModelInfo::content_hash`]): a
    /// worker whose copy differs refuses the request instead of mixing versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_version: Option<String>,
    /// A background set the worker has registered by this name: interventional SHAP values
    /// over its rows instead of path-dependent ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub background: Option<String>,
    /// The content hash of the background the caller planned with: a worker whose rows differ
    /// refuses the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub background_version: Option<String>,
}

impl ExchangeCommand {
    /// A command for `model` and `output`.
    pub fn new(model: impl Into<String>, output: OutputKind) -> Self {
        ExchangeCommand { model: model.into(), output, model_version: None, background: None, background_version: None }
    }

    /// The same command, pinned to the model version with content hash `version`.
    pub fn pinned(mut self, version: Option<String>) -> Self {
        self.model_version = version;
        self
    }

    /// The same command over the background registered as `name`, pinned to content hash
    /// `version` (`None`: path-dependent values).
    pub fn with_background(mut self, background: Option<(String, String)>) -> Self {
        (self.background, self.background_version) = match background {
            Some((name, version)) => (Some(name), Some(version)),
            None => (None, None),
        };
        self
    }

    /// The command-type descriptor carrying this command.
    pub fn descriptor(&self) -> FlightDescriptor {
        FlightDescriptor::new_cmd(serde_json::to_vec(self).expect("command serialises"))
    }

    /// Reads the command from a descriptor; the error says what a valid one looks like.
    pub fn from_descriptor(d: &FlightDescriptor) -> Result<Self, Status> {
        const EXAMPLE: &str = r#"{"model": "fraud", "output": "shap"}"#;
        if d.r#type != arrow_flight::flight_descriptor::DescriptorType::Cmd as i32 {
            return Err(Status::invalid_argument(format!(
                "the flight descriptor must be a command (CMD) holding JSON like {EXAMPLE}, not a path"
            )));
        }
        let cmd: ExchangeCommand = serde_json::from_slice(&d.cmd).map_err(|e| {
            Status::invalid_argument(format!(
                "bad descriptor command {:?}: {e}; expected JSON like {EXAMPLE} (output: shap, interactions or predict)",
                String::from_utf8_lossy(&d.cmd)
            ))
        })?;
        if cmd.model.trim().is_empty() {
            return Err(Status::invalid_argument("descriptor command names no model"));
        }
        Ok(cmd)
    }
}

/// `OutputKind` as the protocol spells it.
mod output_name {
    use super::OutputKind;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(k: &OutputKind, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(super::output_kind_name(*k))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<OutputKind, D::Error> {
        let s = String::deserialize(d)?;
        super::parse_output_kind(&s).map_err(serde::de::Error::custom)
    }
}

/// The protocol name of an output kind.
pub fn output_kind_name(k: OutputKind) -> &'static str {
    match k {
        OutputKind::Shap => "shap",
        OutputKind::Interactions => "interactions",
        OutputKind::Predict => "predict",
    }
}

/// Parses `shap`, `interactions` or `predict`.
pub fn parse_output_kind(s: &str) -> Result<OutputKind, String> {
    match s {
        "shap" => Ok(OutputKind::Shap),
        "interactions" => Ok(OutputKind::Interactions),
        "predict" => Ok(OutputKind::Predict),
        other => Err(format!("unknown output {other:?}; expected shap, interactions or predict")),
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
    /// Exchanges being served now.
    pub in_flight: usize,
    /// Exchanges served since start (finished or failed).
    pub requests: u64,
    /// Exchanges that ended in an error.
    pub failed_requests: u64,
}

/// Maps a library error to the gRPC status a client should see.
pub fn status_from_error(e: &Error) -> Status {
    let msg = e.to_string();
    match e {
        Error::ModelNotFound(_) => Status::not_found(msg),
        Error::MissingColumn { .. } | Error::ColumnType { .. } | Error::Input(_) => Status::invalid_argument(msg),
        Error::Unavailable(_) => Status::failed_precondition(msg),
        Error::ModelFormat { .. } | Error::InvalidTree { .. } | Error::UnsupportedModel { .. } => {
            Status::failed_precondition(msg)
        }
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
    fn command_round_trips_and_bad_ones_explain_themselves() {
        let c = ExchangeCommand::new("fraud", OutputKind::Interactions);
        assert_eq!(ExchangeCommand::from_descriptor(&c.descriptor()).unwrap(), c);
        let d = FlightDescriptor::new_cmd(r#"{"model":"m"}"#);
        assert_eq!(ExchangeCommand::from_descriptor(&d).unwrap().output, OutputKind::Shap);
        for (bad, needle) in [
            (r#"{"model":"m","output":"shapp"}"#, "unknown output"),
            ("not json", "bad descriptor command"),
            (r#"{"model":""}"#, "names no model"),
            (r#"{"modle":"m"}"#, "unknown field"),
        ] {
            let e = ExchangeCommand::from_descriptor(&FlightDescriptor::new_cmd(bad)).unwrap_err();
            assert_eq!(e.code(), tonic::Code::InvalidArgument);
            assert!(e.message().contains(needle), "{bad}: {}", e.message());
        }
        let e = ExchangeCommand::from_descriptor(&FlightDescriptor::new_path(vec!["fraud".into()])).unwrap_err();
        assert!(e.message().contains("must be a command"));
    }

    #[test]
    fn errors_map_to_statuses() {
        let missing = Error::MissingColumn { name: "age".into(), index: 1, available: "x".into() };
        assert_eq!(status_from_error(&missing).code(), tonic::Code::InvalidArgument);
        let unknown = Error::ModelNotFound("unknown model \"x\"; searched: …".into());
        assert_eq!(status_from_error(&unknown).code(), tonic::Code::NotFound);
    }
}
