//! Leases that one server holds at a time (sequence sections, presence slots, worker
//! IDs): when a holder stops using one, and when another may take it over.
//!
//! Times are a process's monotonic clock, as a [`Duration`] since an origin of the
//! process's choosing: never compared across processes, never read from a database.
//! Two rules, written once here and used by every holder:
//! - **Deadline** ([`Timing::deadline`]): a holder uses a lease until the lease, counted
//!   from the moment it *sent* the write that took or renewed it (before its reads),
//!   less a tenth, has passed by its own clock.
//! - **Seen unchanged** ([`Timing::lapsed`]): another server takes a lease over only
//!   once it has seen the same row (holder and version) unchanged for the lease and the
//!   grace by its own clock. Each write of the holder changes the version, and the
//!   first sight of a version comes after its write, which comes after the holder's
//!   deadline began counting: so by the time another takes over, the holder has
//!   stopped, whatever any database's clock or any wall clock says.
//!
//! The margin: the holder stops `lease - lease / 10` after a moment that precedes the
//! other's first sight, and the other waits `lease + grace` from that sight. Both are
//! measured by different clocks, so the rule holds while the fastest clock runs at most
//! [`Timing::rate_bound`] times the slowest (with the defaults of 1.5 s and 0.25 s:
//! 1.29, i.e. every clock within 12 % of true time; NTP keeps real clocks within
//! 0.05 %). Beyond it a holder that runs slow can answer after another took over.

use std::time::Duration;

/// The lengths of a kind of lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Timing {
    pub lease: Duration,
    pub grace: Duration,
    /// Whether the holder stops a tenth early; off only in the model checker, to show
    /// that it finds the bug the margin stops.
    pub margin: bool,
}

impl Timing {
    pub fn new(lease: Duration, grace: Duration) -> Timing {
        Timing {
            lease,
            grace,
            margin: true,
        }
    }

    /// When a holder that sent its taking or renewing write at `sent` stops using the
    /// lease.
    pub fn deadline(&self, sent: Duration) -> Duration {
        match self.margin {
            true => sent + self.lease - self.lease / 10,
            false => sent + self.lease + self.grace,
        }
    }

    /// How long another server sees a row unchanged before it takes it over.
    pub fn wait(&self) -> Duration {
        self.lease + self.grace
    }

    /// Whether a row seen unchanged since `since` may be taken over at `now`.
    pub fn lapsed(&self, since: Duration, now: Duration) -> bool {
        now.saturating_sub(since) >= self.wait()
    }

    /// How much faster than the slowest clock the fastest may run for the rule to hold:
    /// the other's wait over the holder's use.
    pub fn rate_bound(&self) -> f64 {
        let used = self.lease - self.lease / 10;
        self.wait().as_secs_f64() / used.as_secs_f64().max(f64::MIN_POSITIVE)
    }
}

/// What a server saw of a lease's row on one database: its holder and version, and
/// since when (by the server's clock) it has seen exactly that.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Seen {
    pub holder: String,
    pub version: i64,
    pub since: Duration,
}

impl Seen {
    /// `seen` updated with a sight of `holder` at `version` at `now`: the same row keeps
    /// its first sight, another starts counting at `now`.
    pub fn update(seen: Option<Seen>, holder: &str, version: i64, now: Duration) -> Seen {
        match seen {
            Some(s) if s.holder == holder && s.version == version => s,
            _ => Seen {
                holder: holder.to_owned(),
                version,
                since: now,
            },
        }
    }

    /// Whether this sight is of `holder` at `version`.
    pub fn is(&self, holder: &str, version: i64) -> bool {
        self.holder == holder && self.version == version
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_holder_stops_before_another_may_take_over() {
        let t = Timing::new(ms(1_500), ms(250));
        assert_eq!(t.deadline(ms(1_000)), ms(2_350));
        assert_eq!(t.wait(), ms(1_750));
        // Seen first at the earliest when the holder sent its write.
        assert!(t.deadline(ms(1_000)) < ms(1_000) + t.wait());
        assert!(!t.lapsed(ms(1_000), ms(2_749)));
        assert!(t.lapsed(ms(1_000), ms(2_750)));
        assert!((t.rate_bound() - 1_750.0 / 1_350.0).abs() < 1e-9);
        let no_margin = Timing { margin: false, ..t };
        assert_eq!(no_margin.deadline(ms(1_000)), ms(1_000) + t.wait());
    }

    #[test]
    fn a_sight_keeps_its_start_while_the_row_stays_the_same() {
        let s = Seen::update(None, "a", 3, ms(10));
        assert_eq!(s.since, ms(10));
        let s = Seen::update(Some(s), "a", 3, ms(50));
        assert_eq!(s.since, ms(10));
        let s = Seen::update(Some(s), "a", 4, ms(60));
        assert_eq!((s.version, s.since), (4, ms(60)));
        let s = Seen::update(Some(s), "b", 4, ms(70));
        assert_eq!((s.holder.as_str(), s.since), ("b", ms(70)));
        assert!(s.is("b", 4) && !s.is("a", 4));
    }
}
