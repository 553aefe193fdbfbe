//! Back-off after consecutive failures, one rule for the server's databases and the
//! client's servers: the first back-off doubles with each further failure, up to a
//! cap. Pure: callers pass the time.

use std::time::{Duration, Instant};

/// How long a failing peer is skipped, from the configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// Back-off after the first failure; doubles per further consecutive failure.
    pub initial: Duration,
    /// Cap on the back-off.
    pub max: Duration,
}

impl Backoff {
    /// The back-off after `failures` consecutive failures: `initial × 2^(failures − 1)`,
    /// at most `max`.
    pub fn after(self, failures: u32) -> Duration {
        // Past 2^16 the cap has long been reached; the shift stays in range.
        let factor = 1u32 << failures.saturating_sub(1).min(16);
        self.initial.saturating_mul(factor).min(self.max)
    }
}

/// The consecutive failures of one peer and the back-off they started.
#[derive(Debug, Default, Clone, Copy)]
pub struct Failures {
    /// Consecutive failures; sets the back-off length.
    count: u32,
    /// The peer is skipped until then.
    until: Option<Instant>,
}

impl Failures {
    /// Counts one more failure at `now` and starts its back-off, which it returns.
    pub fn fail(&mut self, backoff: Backoff, now: Instant) -> Duration {
        self.count = self.count.saturating_add(1);
        let wait = backoff.after(self.count);
        self.until = Some(now + wait);
        wait
    }

    /// Records a failure that no retry soon will see changed: the peer is skipped for
    /// `wait` at once; it counts as one more consecutive failure.
    pub fn fail_for(&mut self, wait: Duration, now: Instant) -> Duration {
        self.count = self.count.saturating_add(1);
        self.until = Some(now + wait);
        wait
    }

    /// Whether the peer may be used at `now`: no back-off, or it is over.
    pub fn is_over(&self, now: Instant) -> bool {
        self.until.is_none_or(|t| now >= t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn doubles_per_failure_up_to_the_cap() {
        let backoff = Backoff {
            initial: 100 * MS,
            max: 1000 * MS,
        };
        let cases = [
            (0, 100),
            (1, 100),
            (2, 200),
            (3, 400),
            (4, 800),
            (5, 1000),
            (17, 1000),
            (40, 1000),
            (u32::MAX, 1000),
        ];
        for (failures, ms) in cases {
            assert_eq!(backoff.after(failures), ms * MS, "{failures} failures");
        }
    }

    #[test]
    fn the_doubling_stops_at_two_to_the_sixteen() {
        let backoff = Backoff {
            initial: MS,
            max: Duration::MAX,
        };
        assert_eq!(backoff.after(17), 65_536 * MS);
        assert_eq!(backoff.after(u32::MAX), 65_536 * MS);
    }

    #[test]
    fn a_huge_initial_saturates_instead_of_overflowing() {
        let backoff = Backoff {
            initial: Duration::MAX,
            max: Duration::MAX,
        };
        assert_eq!(backoff.after(10), Duration::MAX);
    }

    #[test]
    fn failures_back_off_until_the_back_off_is_over() {
        let backoff = Backoff {
            initial: 100 * MS,
            max: 1000 * MS,
        };
        let now = Instant::now();
        let mut failures = Failures::default();
        assert!(failures.is_over(now), "no failure yet");
        assert_eq!(failures.fail(backoff, now), 100 * MS);
        assert!(!failures.is_over(now + 99 * MS));
        assert!(failures.is_over(now + 100 * MS));
        assert_eq!(failures.fail(backoff, now), 200 * MS, "the second doubles");
        assert!(!failures.is_over(now + 199 * MS));
        assert!(failures.is_over(now + 200 * MS));
    }
}
