//! Networking shared by every server and client of this crate: listening and connecting
//! ([`transport`]: loopback unless a token is configured, TLS, graceful stop), bearer tokens
//! ([`auth`]), the admission limits and fair queue in front of a server's work ([`limits`]),
//! and the opt-in Prometheus endpoint that shows them ([`metrics`]).
//! Nothing here knows what a request computes: the Flight worker, the Flight SQL front door and
//! the Ballista members build on it.

pub mod auth;
pub mod limits;
pub mod metrics;
pub mod transport;

pub use limits::{Admission, AdmissionStats, Growth, LimitNames, Permit, RequestLimits, SessionGuard, SMALL_REQUEST_BYTES};

/// `DoAction` type every server answers without a token: is it serving? (Load balancers and
/// compose health checks need no secret.)
pub const ACTION_HEALTH: &str = "health";
