//! The service: what segmint does for a caller, whatever door the request came
//! through. It authorizes a token for a biz ([`authorize`]), takes IDs in their biz's
//! order and format ([`Service::ordered_ids`]), takes and reads sequence numbers
//! ([`Service::take`], [`Service::current`]) and reaches the owner of a key through a
//! port it owns ([`Forward`]). It knows no transport: the HTTP routes (`server`) and
//! the Redis commands (`server::resp`) parse a request, call it, and render its answer
//! or its [`Error`], each with one table.

mod auth;
mod error;
mod ids;
mod sequences;
mod snowflake;

use std::sync::Arc;

pub use auth::{authorize, authorize_for, live_token};
pub use error::Error;
pub use ids::refuse_sequence;
pub use sequences::{Caller, Forward};
pub use snowflake::{leaf_time, parse_and_decode};

use crate::cache::Cache;
use crate::listing::Names;
use crate::sequencer::Sequencer;
use crate::store::Store;
use crate::worker::Worker;

/// What the service works with: the cluster, the ID cache, the snowflake worker, the
/// sequencer and the way to the other servers.
pub struct Service {
    pub store: Arc<Store>,
    pub cache: Arc<Cache>,
    /// This server's snowflake worker: its leased worker ID and the IDs it issues.
    pub snowflake: Arc<Worker>,
    /// Every biz's name in order, for listing them a page at a time; rebuilt when the
    /// catalog changes.
    pub names: Arc<Names>,
    /// The sections of sequence bizs this server owns, and the others' owners.
    pub sequencer: Arc<Sequencer>,
    /// Reaches the owner of a key's section.
    pub forward: Arc<dyn Forward>,
}
