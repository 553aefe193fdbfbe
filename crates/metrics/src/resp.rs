//! The metrics of the Redis-protocol listener.

use prometheus::{IntCounterVec, IntGauge, Opts, Registry};

use super::registered;

/// The commands counted by name; any other counts as `other`.
pub const RESP_COMMANDS: [&str; 13] = [
    "auth", "client", "command", "config", "get", "hello", "ids", "incr", "incrby", "ping", "quit",
    "select", "other",
];

/// The metrics of the Redis-protocol listener. Cheap to clone: handles to the
/// registered series. IDs and numbers it issues are counted by biz with those of HTTP
/// (`segmint_ids_issued_total`, `segmint_sequence_numbers_total`).
#[derive(Clone)]
pub struct RespMetrics {
    /// Commands by name and outcome (ok, error).
    commands: IntCounterVec,
    /// Connections open now.
    connections: IntGauge,
}

impl RespMetrics {
    /// Registers the metrics with `r`, every command's series at zero.
    pub(super) fn new(r: &Registry) -> RespMetrics {
        let metrics = RespMetrics {
            commands: registered(
                r,
                IntCounterVec::new(
                    Opts::new(
                        "segmint_resp_commands_total",
                        "Commands of the Redis protocol by name and outcome: ok, error (an error reply)",
                    ),
                    &["command", "outcome"],
                ),
            ),
            connections: registered(
                r,
                IntGauge::new(
                    "segmint_resp_connections",
                    "Connections of Redis clients open now",
                ),
            ),
        };
        for command in RESP_COMMANDS {
            for outcome in ["ok", "error"] {
                metrics.commands.with_label_values(&[command, outcome]);
            }
        }
        metrics
    }

    /// Counts a command (one of [`RESP_COMMANDS`]) answered `ok` or not.
    pub fn command(&self, command: &str, ok: bool) {
        let outcome = if ok { "ok" } else { "error" };
        self.commands.with_label_values(&[command, outcome]).inc();
    }

    /// A connection opened (+1) or closed (-1).
    pub fn connection(&self, change: i64) {
        self.connections.add(change);
    }
}
