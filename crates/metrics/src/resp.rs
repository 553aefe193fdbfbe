//! The metrics of the Redis-protocol listener.

use std::sync::Arc;

use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts, Registry};

use super::registered;

/// The commands counted by name; any other counts as `other`.
pub const RESP_COMMANDS: [&str; 17] = [
    "auth", "client", "command", "config", "discard", "exec", "get", "hello", "ids", "incr",
    "incrby", "info", "multi", "ping", "quit", "select", "other",
];

/// The metrics of the Redis-protocol listener. Cheap to clone: handles to the
/// registered series. IDs and numbers it issues are counted by biz with those of HTTP
/// (`segmint_ids_issued_total`, `segmint_sequence_numbers_total`).
#[derive(Clone)]
pub struct RespMetrics {
    /// Commands by name and outcome: each of [`RESP_COMMANDS`]' series, ok and error,
    /// resolved once (a command counts with one atomic add, no label lookup).
    commands: Arc<[[IntCounter; 2]]>,
    /// Connections open now.
    connections: IntGauge,
}

impl RespMetrics {
    /// Registers the metrics with `r`, every command's series at zero.
    pub(super) fn new(r: &Registry) -> RespMetrics {
        let commands: IntCounterVec = registered(
            r,
            IntCounterVec::new(
                Opts::new(
                    "segmint_resp_commands_total",
                    "Commands of the Redis protocol by name and outcome: ok, error (an error reply)",
                ),
                &["command", "outcome"],
            ),
        );
        RespMetrics {
            commands: RESP_COMMANDS
                .iter()
                .map(|c| ["ok", "error"].map(|o| commands.with_label_values(&[c, o])))
                .collect(),
            connections: registered(
                r,
                IntGauge::new(
                    "segmint_resp_connections",
                    "Connections of Redis clients open now",
                ),
            ),
        }
    }

    /// Counts a command (one of [`RESP_COMMANDS`]) answered `ok` or not.
    pub fn command(&self, command: &str, ok: bool) {
        let at = RESP_COMMANDS
            .iter()
            .position(|c| *c == command)
            .unwrap_or(RESP_COMMANDS.len() - 1);
        self.commands[at][usize::from(!ok)].inc();
    }

    /// A connection opened (+1) or closed (-1).
    pub fn connection(&self, change: i64) {
        self.connections.add(change);
    }
}
