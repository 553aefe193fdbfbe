//! The `[snowflake]` table: whether snowflake IDs are issued, for which bizs, the
//! epoch and bit layout, and the timing of worker-ID leases.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{ConfigError, biz_list, invalid};
use crate::biz::BizTag;
use segmint_core::snowflake::{LEAF_EPOCH_MS, Layout, Spec};

/// How long a layout must still last after now, from its epoch: ten years.
const YEARS_LEFT: i64 = 10;
/// Milliseconds of a year of 365.25 days.
const YEAR_MS: i64 = 31_557_600_000;

/// `[snowflake] layout` as written: a preset's name, or the widths.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(untagged)]
enum RawLayout {
    Preset(String),
    Widths(RawWidths),
}

/// `[snowflake.layout]` as a table; every width is required, `unit_ms` is 1 unless given.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWidths {
    unit_ms: Option<u32>,
    timestamp_bits: Option<u32>,
    worker_bits: Option<u32>,
    sequence_bits: Option<u32>,
}

impl RawLayout {
    /// The layout named or described, each fault naming its key.
    fn validate(&self) -> Result<Layout, ConfigError> {
        let w = match self {
            RawLayout::Preset(name) => {
                return Layout::preset(name).ok_or_else(|| {
                    invalid(
                        "snowflake.layout",
                        format!(
                            "`{name}` is no preset: \"leaf\" (Leaf's 41/10/12 bits of 1 ms), \"js\" (41/5/7 bits of 1 ms, every ID below 2^53), or a table {{ unit_ms, timestamp_bits, worker_bits, sequence_bits }}"
                        ),
                    )
                });
            }
            RawLayout::Widths(w) => w,
        };
        let required = |key: &str, v: Option<u32>| {
            v.ok_or_else(|| {
                invalid(
                    format!("snowflake.layout.{key}"),
                    "is required in a layout table",
                )
            })
        };
        Layout::new(
            w.unit_ms.unwrap_or(1),
            required("timestamp_bits", w.timestamp_bits)?,
            required("worker_bits", w.worker_bits)?,
            required("sequence_bits", w.sequence_bits)?,
        )
        .map_err(|e| invalid(format!("snowflake.layout.{}", e.field()), e.to_string()))
    }
}

/// `[snowflake]` as written.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub(super) struct RawSnowflake {
    enabled: bool,
    bizs: Vec<String>,
    epoch_ms: i64,
    layout: RawLayout,
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
            layout: RawLayout::Preset("leaf".into()),
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
    /// The bit layout of the IDs (Leaf's by default); the decode routes use it too.
    pub layout: Layout,
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

    /// The epoch and layout, which every server of the cluster must share.
    pub fn spec(&self) -> Spec {
        Spec {
            epoch_ms: self.epoch_ms,
            layout: self.layout,
        }
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
        let layout = self.layout.validate()?;
        let ends_ms = layout.ends_ms(self.epoch_ms);
        if ends_ms.saturating_sub(now_ms) < YEARS_LEFT * YEAR_MS {
            return Err(invalid(
                "snowflake.layout.timestamp_bits",
                format!(
                    "the layout {layout} from epoch_ms {} runs out at {} (Unix ms {ends_ms}), less than {YEARS_LEFT} years after now: give the timestamp more bits, a coarser unit_ms or a later epoch_ms",
                    self.epoch_ms,
                    humantime::format_rfc3339_seconds(
                        std::time::UNIX_EPOCH
                            + Duration::from_millis(u64::try_from(ends_ms).unwrap_or(0))
                    ),
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
        // A restored lease row keeps a new holder's first ID above the last holder's
        // only by a tenth of the lease of real time (docs/operations.md): that must
        // span a tick.
        if self.lease_ms < 10 * u64::from(layout.unit_ms) {
            return Err(invalid(
                "snowflake.lease_ms",
                format!(
                    "must be at least 10 × snowflake.layout.unit_ms ({} ms), so that a tenth of a lease spans a tick",
                    layout.unit_ms
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
            layout,
            lease: Duration::from_millis(self.lease_ms),
            renew: Duration::from_millis(renew_ms),
            grace: Duration::from_millis(grace_ms),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use segmint_core::snowflake::Layout;

    use crate::with_one_database as load;

    #[test]
    fn off_by_default_with_leafs_epoch_and_a_six_second_lease() {
        let s = load("").expect("loads").snowflake;
        assert!(!s.enabled);
        assert!(s.bizs.is_empty());
        assert_eq!(s.epoch_ms, 1_288_834_974_657);
        assert_eq!(s.layout, Layout::LEAF);
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
            ("[snowflake]\nlayout = \"javascript\"", "`snowflake.layout`"),
            (
                "[snowflake]\nlayout = { timestamp_bits = 41, worker_bits = 11, sequence_bits = 7 }",
                "`snowflake.layout.worker_bits`",
            ),
            (
                "[snowflake]\nlayout = { timestamp_bits = 41, worker_bits = 5, sequence_bits = 0 }",
                "`snowflake.layout.sequence_bits`",
            ),
            (
                "[snowflake]\nlayout = { unit_ms = 0, timestamp_bits = 41, worker_bits = 5, sequence_bits = 7 }",
                "`snowflake.layout.unit_ms`",
            ),
            (
                "[snowflake]\nlayout = { unit_ms = 1001, timestamp_bits = 41, worker_bits = 5, sequence_bits = 7 }",
                "`snowflake.layout.unit_ms`",
            ),
            (
                "[snowflake]\nlayout = { timestamp_bits = 50, worker_bits = 10, sequence_bits = 12 }",
                "`snowflake.layout.timestamp_bits`",
            ),
            (
                "[snowflake]\nlayout = { worker_bits = 5, sequence_bits = 7 }",
                "`snowflake.layout.timestamp_bits`",
            ),
            (
                "[snowflake]\nlayout = { timestamp_bits = 39, worker_bits = 5, sequence_bits = 7 }",
                "`snowflake.layout.timestamp_bits`",
            ),
            (
                "[snowflake]\nlayout = { unit_ms = 1000, timestamp_bits = 31, worker_bits = 5, sequence_bits = 7 }",
                "`snowflake.lease_ms`",
            ),
        ] {
            let e = load(toml).expect_err(toml);
            assert!(e.contains(key), "{toml}: {e}");
        }
    }

    #[test]
    fn layouts_are_read_by_name_or_widths() {
        let js = load("[snowflake]\nlayout = \"js\"")
            .expect("loads")
            .snowflake;
        assert_eq!(js.layout, Layout::JS);
        let table = load(
            "[snowflake]\nlease_ms = 10000\n[snowflake.layout]\nunit_ms = 1000\ntimestamp_bits = 31\nworker_bits = 8\nsequence_bits = 14",
        )
        .expect("loads")
        .snowflake;
        assert_eq!(table.layout, Layout::new(1000, 31, 8, 14).unwrap());
        assert!(table.layout.js_safe());
        assert_ne!(js.spec().record(), table.spec().record());
    }

    #[test]
    fn a_layout_running_out_says_when() {
        let e = load(
            "[snowflake]\nlayout = { timestamp_bits = 39, worker_bits = 5, sequence_bits = 7 }",
        )
        .expect_err("39 bits of ms from 2010 end in 2028");
        assert!(
            e.contains("runs out at 2028-04-05T23:39:48Z (Unix ms 1838590788545)"),
            "{e}"
        );
    }
}
