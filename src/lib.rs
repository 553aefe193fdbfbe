//! segmint: a distributed, segment-based ID server.
//!
//! The crates of the workspace are its layers; the dependency graph, not discipline,
//! keeps each one to its part:
//! - `segmint-core` ([`segment`], [`step`], [`rate`], [`layout`], [`shape`],
//!   [`snowflake`], [`backoff`], [`evidence`], [`biz`], [`import`], [`rows`]): the pure
//!   rules; no IO, no tokio, no SQL, no HTTP.
//! - `segmint-client` ([`client`]): the client library, issuing IDs locally from
//!   fetched segments; it depends on the core only.
//! - `segmint-config` ([`config`]): layered settings, validated at load.
//! - `segmint-metrics` ([`metrics`]): the Prometheus metrics.
//! - `segmint-store` ([`store`]): the engine trait, the PostgreSQL and embedded engines,
//!   the SQL, and [`store::Store`], the cluster protocol over all of them.
//! - this crate: [`cache`] (per-biz double buffers fed by background fetches),
//!   [`listing`] (the bizs a page at a time, for `/v1/bizs` and `/status`),
//!   [`worker`] (this server's snowflake worker ID), [`sequencer`] (the sections of
//!   sequence bizs this server owns), [`service`] (what a caller may ask, with no
//!   transport), [`server`] (its doors: the actix-web application and the Redis
//!   protocol), [`telemetry`], and the `segmint` binary with its admin CLI.
//!
//! Every layer is re-exported here under the name its modules use, so that
//! `segmint::store::Store` and `segmint::segment::Residue` name the same items as the
//! layers' own paths.

pub use segmint_client as client;
pub use segmint_config as config;
pub use segmint_core::{
    backoff, biz, biz_add, evidence, import, layout, lease, rate, rows, segment, sequence, shape,
    snowflake, step,
};
pub use segmint_metrics as metrics;
pub use segmint_store as store;

pub mod cache;
pub mod listing;
pub mod sequencer;
pub mod server;
pub mod service;
pub mod telemetry;
pub mod worker;
