//! The databases' clocks as this server reads them: at each catalog refresh, one
//! round trip per database ([`SegmentStore::clock_ms`](crate::SegmentStore::clock_ms)).
//! A biz whose counter restarts each period begins one only once a database's clock has
//! reached it too ([`clocks::may_begin`]); `/readyz`, `/status` and
//! `segmint_clock_offset_seconds` show how far this server's clock is from each.

use std::time::Duration;

use super::Cluster;
use crate::shape::clocks::{self, NotBegun, Reading};

impl Cluster {
    /// Reads database `i`'s clock against this server's, and keeps the reading. A
    /// database that does not answer keeps its last reading.
    pub(super) async fn read_clock(&self, i: usize) {
        let db = &self.list[i];
        let sent = self.clock.unix_ms();
        let answer = tokio::time::timeout(self.timing.fetch_timeout, db.store.clock_ms()).await;
        let received = self.clock.unix_ms();
        match answer {
            Ok(Ok(database_ms)) => {
                db.health.lock().clock = Some(Reading::of(sent, database_ms, received));
            }
            Ok(Err(e)) => {
                tracing::debug!(database = %db.name, error = %e, "could not read the database's clock");
            }
            Err(_) => {
                tracing::debug!(database = %db.name, "the database's clock did not answer in time");
            }
        }
    }

    /// Database `i`'s clock as last read, if it was.
    pub(super) fn clock_reading(&self, i: usize) -> Option<Reading> {
        self.list[i].health.lock().clock
    }

    /// Whether this server may issue in the period that begins at `begins_ms`: its
    /// clock has reached it, and so has a database's clock as last read (within its
    /// round trip and [`Protocol::clock_tolerance`](crate::config::Protocol::clock_tolerance)).
    ///
    /// # Errors
    /// [`NotBegun`], with how far this server's clock is ahead of the latest database
    /// clock.
    pub fn may_begin(&self, begins_ms: i64) -> Result<(), NotBegun> {
        let readings: Vec<Reading> = (0..self.list.len())
            .filter_map(|i| self.clock_reading(i))
            .collect();
        let tolerance = duration_ms(self.protocol.clock_tolerance);
        clocks::may_begin(begins_ms, self.clock.unix_ms(), &readings, tolerance)
    }

    /// How far this server's clock is ahead of the latest database clock read
    /// (negative: behind); `None` before any was read.
    pub fn clock_ahead_ms(&self) -> Option<i64> {
        (0..self.list.len())
            .filter_map(|i| self.clock_reading(i))
            .map(|r| r.server_ahead_ms())
            .min()
    }

    /// How far ahead of its own clock this server takes a period
    /// ([`clocks::follow_ms`]): by as much as it is behind every database's clock.
    pub fn follow_ms(&self) -> i64 {
        let readings: Vec<Reading> = (0..self.list.len())
            .filter_map(|i| self.clock_reading(i))
            .collect();
        clocks::follow_ms(&readings, duration_ms(self.protocol.clock_tolerance))
    }

    /// The tolerance of [`Cluster::may_begin`], in milliseconds.
    pub fn clock_tolerance_ms(&self) -> i64 {
        duration_ms(self.protocol.clock_tolerance)
    }
}

fn duration_ms(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}
