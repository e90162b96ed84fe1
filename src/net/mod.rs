//! Networking shared by every server and client of this crate: listening and connecting
//! ([`transport`]: loopback unless a token is configured, TLS, graceful stop), bearer tokens
//! ([`auth`]) and the admission limits that bound the work a server takes on ([`limits`]).
//! Nothing here knows what a request computes: the Flight worker, the Flight SQL front door and
//! the Ballista members build on it.

pub mod auth;
pub mod limits;
pub mod transport;

pub use limits::{Admission, RequestLimits};

/// `DoAction` type every server answers without a token: is it serving? (Load balancers and
/// compose health checks need no secret.)
pub const ACTION_HEALTH: &str = "health";
