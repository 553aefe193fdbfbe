//! The cache's keys: how early the next segment is fetched (`preload_percent`), how
//! long a fetch and a waiting request may take, the back-off of a failed database,
//! the catalog's refresh, how a segment's step is chosen, and how many bizs have
//! metrics of their own (`metrics_max_bizs`). The keys without a check
//! (`hedge_after_ms`, `adaptive_step`) are taken as written.

use std::time::Duration;

use crate::raw::RawSettings;
use crate::step::StepPolicy;
use crate::{ConfigError, invalid};

/// Most bizs `metrics_max_bizs` may give series of their own: each has 23, so a scrape
/// of that many busy bizs is already some 14 MB.
pub const METRICS_MAX_BIZS_LIMIT: usize = 10_000;

impl RawSettings {
    /// Checks `preload_percent` and the cache's fetch timings; the share preloaded.
    pub(crate) fn fetch_timings(&self) -> Result<u8, ConfigError> {
        let preload_percent = u8::try_from(self.preload_percent)
            .ok()
            .filter(|p| *p <= 100)
            .ok_or_else(|| invalid("preload_percent", "must be between 0 and 100"))?;
        for (key, ms) in [
            ("fetch_timeout_ms", self.fetch_timeout_ms),
            ("wait_timeout_ms", self.wait_timeout_ms),
            ("backoff_initial_ms", self.backoff_initial_ms),
            ("catalog_refresh_ms", self.catalog_refresh_ms),
        ] {
            if ms == 0 {
                return Err(invalid(key, "must be at least 1"));
            }
        }
        Ok(preload_percent)
    }

    /// Checks `metrics_max_bizs`; 0 gives every biz's metrics to `_other`.
    pub(crate) fn metrics_bound(&self) -> Result<usize, ConfigError> {
        if self.metrics_max_bizs > METRICS_MAX_BIZS_LIMIT {
            return Err(invalid(
                "metrics_max_bizs",
                format!(
                    "must be at most {METRICS_MAX_BIZS_LIMIT} (each biz with metrics of its own adds 23 series to every scrape)"
                ),
            ));
        }
        Ok(self.metrics_max_bizs)
    }

    /// Checks the step keys and the back-off's cap; the step policy.
    pub(crate) fn step_and_backoff(&self) -> Result<StepPolicy, ConfigError> {
        if self.step_target_secs == 0 {
            return Err(invalid("step_target_secs", "must be at least 1"));
        }
        if self.step_max < 1 {
            return Err(invalid("step_max", "must be at least 1"));
        }
        if self.backoff_max_ms < self.backoff_initial_ms {
            return Err(invalid(
                "backoff_max_ms",
                "must be at least backoff_initial_ms",
            ));
        }
        Ok(StepPolicy {
            adaptive: self.adaptive_step,
            target: Duration::from_secs(self.step_target_secs),
            max: self.step_max,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::{Config, TWO, error};

    #[test]
    fn keys_are_read() {
        let cfg = Config::from_toml(&format!(
            "preload_percent = 0\nfetch_timeout_ms = 1\nwait_timeout_ms = 2\nbackoff_initial_ms = 3\nbackoff_max_ms = 3\ncatalog_refresh_ms = 4\nadaptive_step = false\nstep_target_secs = 5\nstep_max = 6\nhedge_after_ms = 0\nmetrics_max_bizs = 0\n{TWO}"
        ))
        .unwrap();
        assert_eq!(cfg.preload_percent, 0);
        assert_eq!(cfg.fetch_timeout, Duration::from_millis(1));
        assert_eq!(cfg.wait_timeout, Duration::from_millis(2));
        assert_eq!(cfg.backoff_initial, Duration::from_millis(3));
        assert_eq!(cfg.backoff_max, Duration::from_millis(3));
        assert_eq!(cfg.catalog_refresh, Duration::from_millis(4));
        assert!(!cfg.step.adaptive);
        assert_eq!(cfg.step.target, Duration::from_secs(5));
        assert_eq!(cfg.step.max, 6);
        assert_eq!(cfg.hedge_after, Duration::ZERO);
        assert_eq!(cfg.metrics_max_bizs, 0);
    }

    #[test]
    fn names_the_offending_key() {
        for (keys, message) in [
            (
                "preload_percent = 101",
                "`preload_percent`: must be between 0 and 100",
            ),
            (
                "preload_percent = -1",
                "`preload_percent`: must be between 0 and 100",
            ),
            (
                "fetch_timeout_ms = 0",
                "`fetch_timeout_ms`: must be at least 1",
            ),
            (
                "wait_timeout_ms = 0",
                "`wait_timeout_ms`: must be at least 1",
            ),
            (
                "backoff_initial_ms = 0",
                "`backoff_initial_ms`: must be at least 1",
            ),
            (
                "catalog_refresh_ms = 0",
                "`catalog_refresh_ms`: must be at least 1",
            ),
            (
                "step_target_secs = 0",
                "`step_target_secs`: must be at least 1",
            ),
            ("step_max = 0", "`step_max`: must be at least 1"),
            (
                "metrics_max_bizs = 10001",
                "`metrics_max_bizs`: must be at most 10000",
            ),
            (
                "backoff_max_ms = 499",
                "`backoff_max_ms`: must be at least backoff_initial_ms",
            ),
        ] {
            let msg = error(&format!("{keys}\n{TWO}"));
            assert!(msg.contains(message), "{keys}: {msg}");
        }
    }
}
