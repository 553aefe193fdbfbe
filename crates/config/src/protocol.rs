//! The `[protocol]` table: the timings of the cluster protocol (layout changes and
//! their healing, catalog refreshes, hedging), which every server and every `segmint
//! db` command of one cluster must share.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{ConfigError, invalid};

/// Longest any protocol timing may be: an hour, as the lease timings.
const MAX_MS: u64 = 3_600_000;

/// Least number of heartbeats a change's row gets within the silence that counts it as
/// cut off, so that a late beat or two is not taken for a dead command.
pub const BEATS_PER_SILENCE: u32 = 3;

/// `[protocol]` as written.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawProtocol {
    heartbeat_ms: u64,
    silent_ms: u64,
    step_timeout_ms: u64,
    min_refresh_gap_ms: u64,
    min_hedge_ms: u64,
    full_refresh_ms: u64,
    clock_tolerance_ms: u64,
}

impl Default for RawProtocol {
    fn default() -> Self {
        RawProtocol {
            heartbeat_ms: 1_000,
            silent_ms: 3_000,
            step_timeout_ms: 30_000,
            min_refresh_gap_ms: 100,
            min_hedge_ms: 5,
            full_refresh_ms: 600_000,
            clock_tolerance_ms: 5_000,
        }
    }
}

/// The timings of the cluster protocol. Only liveness hangs on them: no setting of
/// these (nor two processes disagreeing on them) can make an ID repeat, but a cluster
/// whose servers and commands disagree refuses or stops changes that would have gone
/// through (see `docs/configuration.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Protocol {
    /// How often a running layout change rewrites its layout row, so that servers and
    /// other commands can tell it is alive.
    pub heartbeat: Duration,
    /// How long a change's layout row must stay the same before the change counts as
    /// cut off: a second command then finishes or supersedes it, and servers finish its
    /// bizs. At least [`BEATS_PER_SILENCE`] heartbeats, so a late beat is not a death.
    pub silent: Duration,
    /// Bound on one step of a change on one database (a read, a freeze, a transaction
    /// of up to 1024 lease rows): an admin step is not judged by a request's fetch
    /// timeout (the longer of the two applies).
    pub step_timeout: Duration,
    /// Shortest time between the starts of two catalog refreshes, so that a flood of
    /// misses (unknown tokens) costs the databases a bounded number of reads.
    pub min_refresh_gap: Duration,
    /// Least hedge delay when a cache's runway is short, so that a merely busy
    /// database is not hedged on every fetch.
    pub min_hedge: Duration,
    /// How often a server reads every catalog row of a database, between refreshes that
    /// read only the rows written since the last (the databases' change feeds). The
    /// feed misses nothing on its own; the full read is a second look, bounded in cost.
    pub full_refresh: Duration,
    /// How far a server's clock may be ahead of the latest database clock it read and
    /// still begin a period of a biz whose counter restarts each period (see
    /// `docs/periods.md`): clocks a little apart begin a day together, one far ahead is
    /// refused.
    pub clock_tolerance: Duration,
}

impl Default for Protocol {
    fn default() -> Self {
        // The defaults are valid: validation cannot fail.
        RawProtocol::default()
            .validate()
            .unwrap_or_else(|_| unreachable!("the default [protocol] is valid"))
    }
}

impl Protocol {
    /// How often a command waiting out a change's silence re-reads its row: four
    /// times per silence, at most every 250 ms.
    pub fn silence_poll(&self) -> Duration {
        (self.silent / 4).min(Duration::from_millis(250))
    }
}

impl RawProtocol {
    /// Validates `[protocol]`.
    pub(super) fn validate(self) -> Result<Protocol, ConfigError> {
        for (key, ms) in [
            ("protocol.heartbeat_ms", self.heartbeat_ms),
            ("protocol.silent_ms", self.silent_ms),
            ("protocol.step_timeout_ms", self.step_timeout_ms),
            ("protocol.min_refresh_gap_ms", self.min_refresh_gap_ms),
            ("protocol.min_hedge_ms", self.min_hedge_ms),
            ("protocol.full_refresh_ms", self.full_refresh_ms),
            ("protocol.clock_tolerance_ms", self.clock_tolerance_ms),
        ] {
            if !(1..=MAX_MS).contains(&ms) {
                return Err(invalid(key, "must be between 1 and 3600000 (an hour)"));
            }
        }
        if self.silent_ms < u64::from(BEATS_PER_SILENCE) * self.heartbeat_ms {
            return Err(invalid(
                "protocol.silent_ms",
                format!(
                    "must be at least {BEATS_PER_SILENCE} × protocol.heartbeat_ms ({} ms), so that a change whose command still runs is never taken for cut off",
                    self.heartbeat_ms
                ),
            ));
        }
        Ok(Protocol {
            heartbeat: Duration::from_millis(self.heartbeat_ms),
            silent: Duration::from_millis(self.silent_ms),
            step_timeout: Duration::from_millis(self.step_timeout_ms),
            min_refresh_gap: Duration::from_millis(self.min_refresh_gap_ms),
            min_hedge: Duration::from_millis(self.min_hedge_ms),
            full_refresh: Duration::from_millis(self.full_refresh_ms),
            clock_tolerance: Duration::from_millis(self.clock_tolerance_ms),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::with_one_database as load;

    #[test]
    fn defaults_are_todays_timings() {
        let p = load("").unwrap().protocol;
        assert_eq!(p, super::Protocol::default());
        assert_eq!(p.heartbeat, Duration::from_secs(1));
        assert_eq!(p.silent, Duration::from_secs(3));
        assert_eq!(p.step_timeout, Duration::from_secs(30));
        assert_eq!(p.min_refresh_gap, Duration::from_millis(100));
        assert_eq!(p.min_hedge, Duration::from_millis(5));
        assert_eq!(p.full_refresh, Duration::from_secs(600));
        assert_eq!(p.clock_tolerance, Duration::from_secs(5));
        assert_eq!(p.silence_poll(), Duration::from_millis(250));
    }

    #[test]
    fn short_timings_for_tests() {
        let p = load("[protocol]\nheartbeat_ms = 100\nsilent_ms = 300\n")
            .unwrap()
            .protocol;
        assert_eq!(p.heartbeat, Duration::from_millis(100));
        assert_eq!(p.silent, Duration::from_millis(300));
        assert_eq!(p.silence_poll(), Duration::from_millis(75));
        assert_eq!(p.step_timeout, Duration::from_secs(30), "left unset");
    }

    #[test]
    fn refuses_naming_the_key() {
        for (toml, key) in [
            ("[protocol]\nheartbeat_ms = 0", "`protocol.heartbeat_ms`"),
            ("[protocol]\nsilent_ms = 2000", "`protocol.silent_ms`"),
            (
                "[protocol]\nheartbeat_ms = 500\nsilent_ms = 1499",
                "`protocol.silent_ms`",
            ),
            (
                "[protocol]\nstep_timeout_ms = 0",
                "`protocol.step_timeout_ms`",
            ),
            (
                "[protocol]\nmin_refresh_gap_ms = 3600001",
                "`protocol.min_refresh_gap_ms`",
            ),
            ("[protocol]\nmin_hedge_ms = 0", "`protocol.min_hedge_ms`"),
            (
                "[protocol]\nclock_tolerance_ms = 0",
                "`protocol.clock_tolerance_ms`",
            ),
            ("[protocol]\nsilence_ms = 1", "silence_ms"),
        ] {
            let msg = load(toml).unwrap_err();
            assert!(msg.contains(key), "{toml}: {msg}");
        }
        assert!(
            load("[protocol]\nheartbeat_ms = 500\nsilent_ms = 1500").is_ok(),
            "three beats"
        );
    }
}
