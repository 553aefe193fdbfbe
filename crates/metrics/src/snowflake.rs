//! The metrics of snowflake IDs and of this server's worker-ID lease.

use prometheus::{IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry};

use super::registered;
use segmint_core::biz::BizTag;

/// The states of this server's snowflake worker ID, for `segmint_snowflake_lease_state`.
pub const LEASE_STATES: [&str; 3] = ["none", "waiting", "active"];

/// The metrics of snowflake IDs and this server's worker-ID lease. Cheap to clone:
/// handles to the registered series.
#[derive(Clone)]
pub struct SnowflakeMetrics {
    /// One-hot over [`LEASE_STATES`].
    lease_state: IntGaugeVec,
    /// The worker ID held, -1 when none.
    worker_id: IntGauge,
    /// Renewals by outcome: ok, failed (no answer or an error), lost (taken by another).
    renewals: IntCounterVec,
    /// Attempts to lease a worker ID, by outcome: ok, failed.
    acquisitions: IntCounterVec,
    /// Backward clock steps by outcome: waited (≤ 5 ms), refused.
    clock_back: IntCounterVec,
    /// Snowflake IDs issued, by biz (labels from `[snowflake] bizs`).
    ids: IntCounterVec,
}

impl SnowflakeMetrics {
    /// Registers the snowflake metrics with `r`, every outcome counter at zero and the
    /// lease at none.
    pub(super) fn new(r: &Registry) -> SnowflakeMetrics {
        let counter = |name: &str, help: &str, label: &str| {
            registered(r, IntCounterVec::new(Opts::new(name, help), &[label]))
        };
        let metrics = SnowflakeMetrics {
            lease_state: registered(
                r,
                IntGaugeVec::new(
                    Opts::new(
                        "segmint_snowflake_lease_state",
                        "1 for the state of this server's worker-ID lease: none, waiting (leased, waiting out earlier holders) or active (issuing)",
                    ),
                    &["state"],
                ),
            ),
            worker_id: registered(
                r,
                IntGauge::new(
                    "segmint_snowflake_worker_id",
                    "The snowflake worker ID this server holds, -1 when none",
                ),
            ),
            renewals: counter(
                "segmint_snowflake_lease_renewals_total",
                "Worker-ID lease renewals by outcome: ok, failed (error or no answer), lost (the lease was no longer this server's)",
                "outcome",
            ),
            acquisitions: counter(
                "segmint_snowflake_lease_acquisitions_total",
                "Attempts to lease a worker ID by outcome: ok, failed",
                "outcome",
            ),
            clock_back: counter(
                "segmint_snowflake_clock_back_total",
                "Snowflake IDs that met a clock behind the last timestamp issued: waited (up to 5 ms) or refused",
                "outcome",
            ),
            ids: counter(
                "segmint_snowflake_ids_total",
                "Snowflake IDs issued, by biz",
                "biz",
            ),
        };
        for outcome in ["ok", "failed", "lost"] {
            metrics.renewals.with_label_values(&[outcome]);
        }
        for outcome in ["ok", "failed"] {
            metrics.acquisitions.with_label_values(&[outcome]);
        }
        for outcome in ["waited", "refused"] {
            metrics.clock_back.with_label_values(&[outcome]);
        }
        metrics.set_lease(None, "none");
        metrics
    }

    /// Records the lease state (one of [`LEASE_STATES`]) and the worker ID held.
    pub fn set_lease(&self, worker_id: Option<u16>, state: &str) {
        for s in LEASE_STATES {
            self.lease_state
                .with_label_values(&[s])
                .set(i64::from(s == state));
        }
        self.worker_id.set(worker_id.map_or(-1, i64::from));
    }

    /// Counts a renewal with `outcome` (ok, failed, lost).
    pub fn renewal(&self, outcome: &str) {
        self.renewals.with_label_values(&[outcome]).inc();
    }

    /// Counts an attempt to lease a worker ID with `outcome` (ok, failed).
    pub fn acquisition(&self, outcome: &str) {
        self.acquisitions.with_label_values(&[outcome]).inc();
    }

    /// Counts `n` backward clock steps with `outcome` (waited, refused).
    pub fn clock_back(&self, outcome: &str, n: u64) {
        self.clock_back.with_label_values(&[outcome]).inc_by(n);
    }

    /// The counter of snowflake IDs issued for `biz` (a configured biz), to keep.
    pub fn ids_counter(&self, biz: &BizTag) -> IntCounter {
        self.ids.with_label_values(&[biz.as_str()])
    }
}
