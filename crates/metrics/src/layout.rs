//! The metrics of the database layout this server follows.

use prometheus::{IntGauge, Registry};

use super::registered;

/// The layout epoch and whether a change is under way.
pub struct LayoutMetrics {
    epoch: IntGauge,
    change_pending: IntGauge,
}

impl LayoutMetrics {
    /// Registers the layout metrics with `r`.
    pub(super) fn new(r: &Registry) -> LayoutMetrics {
        LayoutMetrics {
            epoch: registered(
                r,
                IntGauge::new(
                    "segmint_layout_epoch",
                    "The database layout epoch this server follows (0: the configured classes, before any `segmint db add`/`remove`)",
                ),
            ),
            change_pending: registered(
                r,
                IntGauge::new(
                    "segmint_layout_change_pending",
                    "1 while a database layout change is under way, or was cut off, as the databases say: bizs it moves may be frozen",
                ),
            ),
        }
    }

    /// The layout epoch this server follows, and whether a change is under way.
    pub fn set(&self, epoch: i64, pending: bool) {
        self.epoch.set(epoch);
        self.change_pending.set(i64::from(pending));
    }
}
