//! The `[snowflake]` table: whether snowflake IDs are issued, for which bizs, the
//! epoch, and the timing of worker-ID leases.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{ConfigError, biz_list, invalid};
use crate::biz::BizTag;
use segmint_core::snowflake::LEAF_EPOCH_MS;

/// `[snowflake]` as written.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawSnowflake {
    enabled: bool,
    bizs: Vec<String>,
    epoch_ms: i64,
    lease_ms: u64,
    renew_ms: Option<u64>,
    grace_ms: Option<u64>,
}

impl Default for RawSnowflake {
    fn default() -> Self {
        RawSnowflake {
            enabled: false,
            bizs: Vec::new(),
            epoch_ms: LEAF_EPOCH_MS,
            lease_ms: 6_000,
            renew_ms: None,
            grace_ms: None,
        }
    }
}

/// Snowflake IDs: issued only when enabled, only for the bizs listed, with a worker ID
/// leased from the databases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnowflakeConfig {
    /// Whether this server leases a worker ID and issues snowflake IDs; off by default.
    pub enabled: bool,
    /// The bizs that may get snowflake IDs (also their metrics labels); empty: none.
    pub bizs: Vec<BizTag>,
    /// Unix milliseconds at which snowflake timestamps start (Leaf's `twepoch`); the
    /// decode routes use it too.
    pub epoch_ms: i64,
    /// How long a lease lasts from its last renewal; also how long a new holder waits
    /// before its first ID (the longest an earlier holder can still be issuing).
    pub lease: Duration,
    /// How often the lease is renewed.
    pub renew: Duration,
    /// How long after its lease ran out a worker ID stays unused.
    pub grace: Duration,
}

impl Default for SnowflakeConfig {
    fn default() -> Self {
        // The defaults are valid: validation cannot fail.
        RawSnowflake::default()
            .validate()
            .unwrap_or_else(|_| unreachable!("the default [snowflake] is valid"))
    }
}

impl SnowflakeConfig {
    /// Whether `biz` may get snowflake IDs.
    pub fn serves(&self, biz: &BizTag) -> bool {
        self.enabled && self.bizs.contains(biz)
    }
}

impl RawSnowflake {
    /// Validates `[snowflake]`.
    pub(super) fn validate(self) -> Result<SnowflakeConfig, ConfigError> {
        let bizs = biz_list("snowflake.bizs", &self.bizs)?;
        let now_ms =
            segmint_core::snowflake::Clock::now_ms(&mut segmint_core::snowflake::SystemClock);
        if !(0..now_ms).contains(&self.epoch_ms) {
            return Err(invalid(
                "snowflake.epoch_ms",
                format!(
                    "must be Unix milliseconds between 0 and now ({now_ms}); Leaf's default is {LEAF_EPOCH_MS}"
                ),
            ));
        }
        if !(100..=3_600_000).contains(&self.lease_ms) {
            return Err(invalid(
                "snowflake.lease_ms",
                "must be between 100 and 3600000 (an hour)",
            ));
        }
        let renew_ms = self.renew_ms.unwrap_or(self.lease_ms / 3);
        if renew_ms == 0 || renew_ms * 2 > self.lease_ms {
            return Err(invalid(
                "snowflake.renew_ms",
                format!(
                    "must be above 0 and at most half of lease_ms ({}), so that a renewal can fail once and the lease still hold",
                    self.lease_ms
                ),
            ));
        }
        let grace_ms = self.grace_ms.unwrap_or(self.lease_ms);
        if grace_ms > 3_600_000 {
            return Err(invalid(
                "snowflake.grace_ms",
                "must be at most 3600000 (an hour)",
            ));
        }
        Ok(SnowflakeConfig {
            enabled: self.enabled,
            bizs,
            epoch_ms: self.epoch_ms,
            lease: Duration::from_millis(self.lease_ms),
            renew: Duration::from_millis(renew_ms),
            grace: Duration::from_millis(grace_ms),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::with_one_database as load;

    #[test]
    fn off_by_default_with_leafs_epoch_and_a_six_second_lease() {
        let s = load("").expect("loads").snowflake;
        assert!(!s.enabled);
        assert!(s.bizs.is_empty());
        assert_eq!(s.epoch_ms, 1_288_834_974_657);
        assert_eq!(s.lease, Duration::from_secs(6));
        assert_eq!(s.renew, Duration::from_secs(2));
        assert_eq!(s.grace, Duration::from_secs(6));
    }

    #[test]
    fn keys_are_read() {
        let s = load(
            "[snowflake]\nenabled = true\nbizs = [\"order\", \"order\", \"user\"]\nepoch_ms = 1000\nlease_ms = 900\nrenew_ms = 300\ngrace_ms = 0",
        )
        .expect("loads")
        .snowflake;
        assert!(s.enabled);
        assert_eq!(s.bizs.len(), 2);
        assert_eq!(s.epoch_ms, 1000);
        assert_eq!(s.lease, Duration::from_millis(900));
        assert_eq!(s.renew, Duration::from_millis(300));
        assert_eq!(s.grace, Duration::ZERO);
    }

    #[test]
    fn bad_values_name_their_key() {
        for (toml, key) in [
            ("[snowflake]\nbizs = [\"a b\"]", "`snowflake.bizs[0]`"),
            ("[snowflake]\nepoch_ms = -1", "`snowflake.epoch_ms`"),
            (
                "[snowflake]\nepoch_ms = 99999999999999",
                "`snowflake.epoch_ms`",
            ),
            ("[snowflake]\nlease_ms = 10", "`snowflake.lease_ms`"),
            (
                "[snowflake]\nlease_ms = 1000\nrenew_ms = 600",
                "`snowflake.renew_ms`",
            ),
            ("[snowflake]\nrenew_ms = 0", "`snowflake.renew_ms`"),
            ("[snowflake]\ngrace_ms = 99999999", "`snowflake.grace_ms`"),
            ("[snowflake]\nworker = 1", "worker"),
        ] {
            let e = load(toml).expect_err(toml);
            assert!(e.contains(key), "{toml}: {e}");
        }
    }
}
