//! segmint's doors: the actix-web application (Tinyid-compatible routes, the v1 JSON
//! API, Leaf's routes, health and status) and the Redis protocol (`resp`), each an
//! adapter that parses a request, calls the [`service`](crate::service) and renders
//! its answer. `base` is what every route imports; `app` assembles them.

mod app;
mod base;
mod clients;
mod compat;
mod error;
mod forward;
mod handed_out;
mod leaf;
mod observe;
mod openapi;
mod operator;
mod params;
mod resp;
mod sequences;
mod snowflake;
mod status;
mod status_page;
mod v1;

pub use app::{
    Application, DRAIN_TIMEOUT, RELEASE_LIMIT, Routes, STOP_LIMIT, StartupError, WORKER_STOP_GRACE,
    shutdown_signal,
};
pub use base::AppState;
pub use handed_out::{ClientId, HANDED_OUT_CAPACITY, HandedOut};
pub(crate) use params::Params;
