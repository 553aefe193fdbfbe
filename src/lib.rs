//! segmint: a distributed, segment-based ID server.
//!
//! Layout:
//! - [`segment`]: the pure core (residue classes, segments, the double buffer); no IO.
//! - [`store`]: the only code that talks SQL; one [`store::SegmentStore`] per database
//!   and [`store::Store`] spreading reservations over all of them.
//! - [`config`]: layered settings, validated at load.
//! - [`biz`]: parsed request inputs (the biz-name rule, shared with the client) and token
//!   hashing.
//! - [`cache`]: the ID cache: per-biz double buffers fed by background fetches.
//! - [`server`]: the actix-web application (Tinyid-compatible routes, v1 API, status).
//! - [`import`]: parsing Tinyid's and Leaf's table exports for `segmint import`; pure.
//! - [`backoff`]: the back-off after failures, for databases and servers alike; pure.
//! - [`snowflake`]: Leaf's snowflake layout, decoding and the clock guard; pure.
//! - [`worker`]: this server's snowflake worker ID, leased from the databases, and the
//!   rules that keep its IDs unique across holders.
//! - [`shape`]: a biz's ID order (sequential, shuffled, opaque) and format; pure.
//! - [`rate`] and [`step`]: issue rates and the step sized from them; pure.
//! - [`metrics`]: the Prometheus metrics.
//! - [`client`]: the client library, issuing IDs locally from fetched segments.
//!
//! Features: `server` (the server, its CLI and stores) and `client`, both on by
//! default; `default-features = false, features = ["client"]` builds the client alone.

pub mod backoff;
pub mod biz;
#[cfg(feature = "server")]
pub mod cache;
#[cfg(feature = "client")]
pub mod client;
#[cfg(feature = "server")]
pub mod config;
#[cfg(feature = "server")]
pub mod import;
#[cfg(feature = "server")]
pub mod layout;
#[cfg(feature = "server")]
pub mod metrics;
pub mod rate;
pub mod segment;
#[cfg(feature = "server")]
pub mod server;
#[cfg(feature = "server")]
pub mod shape;
pub mod snowflake;
pub mod step;
#[cfg(feature = "server")]
pub mod store;
#[cfg(feature = "server")]
pub mod telemetry;
#[cfg(feature = "server")]
pub mod worker;
