//! The one clock of the store: monotonic time for deadlines and silences, wall time for
//! the timestamps written into rows. Injected into [`Store`](super::Store) so that the
//! layout, heal and refresh paths read time from one place.
//!
//! The snowflake core keeps its own [`snowflake::Clock`](crate::snowflake::Clock): it is
//! pure (no tokio) and stateful test clocks drive it; [`RuntimeClock`] reads its wall
//! time through the same [`SystemClock`](crate::snowflake::SystemClock).

use std::time::Instant;

/// Where the store reads the time.
pub trait Clock: Send + Sync {
    /// Monotonic time, for deadlines and for how long a row stayed the same: never
    /// compared across hosts.
    fn now(&self) -> Instant;
    /// Wall time in Unix milliseconds (0 before 1970), for timestamps written to rows.
    fn unix_ms(&self) -> i64;
}

/// The runtime's clock: real time in production, the paused clock of a timing test
/// (`tokio::time::pause`), so that back-off, hedging and deadlines can be tested to the
/// microsecond without a database; the system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct RuntimeClock;

impl Clock for RuntimeClock {
    fn now(&self) -> Instant {
        tokio::time::Instant::now().into_std()
    }

    fn unix_ms(&self) -> i64 {
        crate::snowflake::Clock::now_ms(&mut crate::snowflake::SystemClock)
    }
}
