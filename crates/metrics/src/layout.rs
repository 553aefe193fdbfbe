//! The metrics of the database layout this server follows.

use prometheus::{IntGauge, Registry};

use super::registered;

/// The layout epoch and whether a change is under way.
pub struct LayoutMetrics {
    epoch: IntGauge,
    change_pending: IntGauge,
    recorded: IntGauge,
    unconfigured: IntGauge,
}

impl LayoutMetrics {
    /// Registers the layout metrics with `r`.
    pub(super) fn new(r: &Registry) -> LayoutMetrics {
        LayoutMetrics {
            epoch: registered(
                r,
                IntGauge::new(
                    "segmint_layout_epoch",
                    "The database layout epoch this server follows (0: the membership `segmint migrate` recorded, before any `segmint db add`/`remove`)",
                ),
            ),
            change_pending: registered(
                r,
                IntGauge::new(
                    "segmint_layout_change_pending",
                    "1 while a database layout change is under way, or was cut off, as the databases say: bizs it moves may be frozen",
                ),
            ),
            recorded: registered(
                r,
                IntGauge::new(
                    "segmint_layout_recorded",
                    "1 once this server read a layout done from the databases, which names the cluster's members; 0: no database is used (`segmint migrate` records the membership)",
                ),
            ),
            unconfigured: registered(
                r,
                IntGauge::new(
                    "segmint_layout_members_unconfigured",
                    "Members of the layout in force this server is not configured with: each counts as not answering",
                ),
            ),
        }
    }

    /// The layout epoch this server follows, and whether a change is under way.
    pub fn set(&self, epoch: i64, pending: bool) {
        self.epoch.set(epoch);
        self.change_pending.set(i64::from(pending));
    }

    /// Whether a layout done was read, and how many of its members this server is not
    /// configured with.
    pub fn set_membership(&self, recorded: bool, unconfigured: usize) {
        self.recorded.set(i64::from(recorded));
        self.unconfigured
            .set(i64::try_from(unconfigured).unwrap_or(i64::MAX));
    }
}
