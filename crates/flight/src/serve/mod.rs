//! `shapfusion serve`: the Flight SQL front door. ADBC, JDBC and other Flight SQL clients run
//! SQL with the shap functions here, each client in its own session, within the operator's
//! [`AccessPolicy`](shapfusion_sql::AccessPolicy); the functions compute in this process, on Flight
//! workers (`shap.workers`), or the whole query runs on a Ballista cluster.

mod catalog;
mod parameters;
mod service;

pub use service::SqlService;
