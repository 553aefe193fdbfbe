//! segmint: a distributed, segment-based ID server.
//!
//! Layout:
//! - [`segment`]: the pure core (residue classes, segments, the double buffer); no IO.
//! - [`store`]: the only code that talks SQL; one [`store::SegmentStore`] per database
//!   and [`store::Store`] spreading reservations over all of them.
//! - [`config`]: layered settings, validated at load.
//! - [`biz`]: parsed request inputs and token hashing.
//! - [`generator`]: per-biz double buffers fed by background fetches.
//! - [`server`]: the actix-web application (Tinyid-compatible routes, v1 API, status).
//! - [`rate`] and [`step`]: issue rates and the step sized from them; pure.
//! - [`metrics`]: the Prometheus metrics.

pub mod biz;
pub mod config;
pub mod generator;
pub mod metrics;
pub mod rate;
pub mod segment;
pub mod server;
pub mod step;
pub mod store;
pub mod telemetry;
