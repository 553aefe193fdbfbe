//! Whose clock begins a period: a server begins one (reserves in its window) only once
//! a database's clock, as the server last read it, has reached it too. One wrong clock
//! then cannot move a biz into a period that has not begun: a server whose clock is
//! ahead is refused, and the databases' rows stay in the current period for every
//! server whose clock is right. The store and the model checker both decide with
//! [`may_begin`].

/// A database's clock as a server read it: how far it was from the server's own clock
/// (the database's minus the server's, in milliseconds, at the middle of the round
/// trip), give or take `uncertainty_ms` (half the round trip).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Reading {
    pub offset_ms: i64,
    pub uncertainty_ms: i64,
}

impl Reading {
    /// The reading of a database clock that answered `database_ms` to a question sent
    /// at `sent_ms` and answered at `received_ms`, both by the server's clock.
    pub fn of(sent_ms: i64, database_ms: i64, received_ms: i64) -> Reading {
        let trip = received_ms.saturating_sub(sent_ms).max(0);
        let middle = sent_ms.saturating_add(trip / 2);
        Reading {
            offset_ms: database_ms.saturating_sub(middle),
            uncertainty_ms: (trip + 1) / 2,
        }
    }

    /// How far the server's clock is ahead of this database's (negative: behind).
    pub fn server_ahead_ms(&self) -> i64 {
        self.offset_ms.saturating_neg()
    }
}

/// Why a server may not begin a period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NotBegun {
    /// How far the period's beginning lies ahead of the latest database clock read
    /// (its uncertainty and the tolerance given the clock's benefit).
    pub early_ms: i64,
    /// How far the server's clock is ahead of the latest database clock read.
    pub server_ahead_ms: i64,
}

/// Whether a server whose clock reads `now_ms` may issue in the period that begins at
/// `begins_ms`: when its own clock has reached it and so, within its uncertainty and
/// `tolerance_ms`, has at least one database's clock as the server last read it
/// (`readings`). With no reading yet, the server's clock alone decides (an embedded
/// database's clock is its process's, the same clock).
///
/// # Errors
/// [`NotBegun`] when no database's clock has reached the period.
pub fn may_begin(
    begins_ms: i64,
    now_ms: i64,
    readings: &[Reading],
    tolerance_ms: i64,
) -> Result<(), NotBegun> {
    let Some(latest) = readings
        .iter()
        .max_by_key(|r| r.offset_ms.saturating_add(r.uncertainty_ms))
    else {
        return Ok(());
    };
    let database_ms = now_ms
        .saturating_add(latest.offset_ms)
        .saturating_add(latest.uncertainty_ms)
        .saturating_add(tolerance_ms);
    match database_ms >= begins_ms {
        true => Ok(()),
        false => Err(NotBegun {
            early_ms: begins_ms - database_ms,
            server_ahead_ms: latest.server_ahead_ms(),
        }),
    }
}

/// How far a server whose clock reads `readings` against the databases' takes the
/// period ahead of its own clock: by as much as it is behind *every* database's clock
/// (each read at its latest, less the tolerance), when two or more were read. One
/// database's clock far ahead then moves nothing (the others hold the server back), and
/// with a single database the server's own clock decides.
pub fn follow_ms(readings: &[Reading], tolerance_ms: i64) -> i64 {
    if readings.len() < 2 {
        return 0;
    }
    let behind_every = readings
        .iter()
        .map(|r| r.offset_ms.saturating_sub(r.uncertainty_ms))
        .min()
        .unwrap_or(0);
    match behind_every > tolerance_ms {
        true => behind_every,
        false => 0,
    }
}

/// A span of milliseconds as people say it, rounded to its last unit: `3 d 0 h`,
/// `2 h 5 min`, `12 min 3 s`, `4.2 s`, `250 ms`.
pub fn human_ms(ms: i64) -> String {
    let a = ms.unsigned_abs();
    let sign = if ms < 0 { "-" } else { "" };
    let round = |unit: u64| (a + unit / 2) / unit;
    let (hours, minutes, seconds, tenths) =
        (round(3_600_000), round(60_000), round(1_000), round(100));
    if hours >= 24 {
        format!("{sign}{} d {} h", hours / 24, hours % 24)
    } else if minutes >= 60 {
        format!("{sign}{} h {} min", minutes / 60, minutes % 60)
    } else if seconds >= 60 {
        format!("{sign}{} min {} s", seconds / 60, seconds % 60)
    } else if tenths >= 10 {
        format!("{sign}{}.{} s", tenths / 10, tenths % 10)
    } else {
        format!("{sign}{a} ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: i64 = 86_400_000;

    #[test]
    fn a_reading_is_taken_at_the_middle_of_its_round_trip() {
        let r = Reading::of(1_000, 5_010, 1_020);
        assert_eq!(
            r,
            Reading {
                offset_ms: 4_000,
                uncertainty_ms: 10
            }
        );
        assert_eq!(r.server_ahead_ms(), -4_000);
        assert_eq!(Reading::of(1_000, 1_000, 999).uncertainty_ms, 0);
    }

    #[test]
    fn a_server_ahead_of_every_database_begins_no_period() {
        let midnight = 10 * DAY;
        let ahead = [Reading {
            offset_ms: -3 * DAY,
            uncertainty_ms: 2,
        }];
        let err = may_begin(midnight, midnight + 60_000, &ahead, 5_000).unwrap_err();
        assert_eq!(err.server_ahead_ms, 3 * DAY);
        assert_eq!(err.early_ms, 3 * DAY - 60_000 - 5_002);
        // The period the databases are in is served.
        assert!(may_begin(midnight - 3 * DAY, midnight + 60_000, &ahead, 5_000).is_ok());
        assert!(may_begin(midnight - DAY, midnight + 60_000, &ahead, 5_000).is_err());
    }

    #[test]
    fn one_database_that_reached_the_period_is_enough() {
        let midnight = 10 * DAY;
        let at = |offset_ms| Reading {
            offset_ms,
            uncertainty_ms: 0,
        };
        // The server's clock is right; one database is a day behind.
        assert!(may_begin(midnight, midnight + 1, &[at(-DAY), at(0)], 5_000).is_ok());
        // Within the tolerance: 200 ms ahead of both.
        assert!(may_begin(midnight, midnight + 100, &[at(-200), at(-250)], 5_000).is_ok());
        assert!(may_begin(midnight, midnight + 100, &[at(-6_000)], 5_000).is_err());
        assert!(
            may_begin(midnight, midnight, &[], 0).is_ok(),
            "no reading yet"
        );
    }

    #[test]
    fn a_server_follows_only_a_clock_every_database_agrees_on() {
        let at = |offset_ms| Reading {
            offset_ms,
            uncertainty_ms: 0,
        };
        assert_eq!(follow_ms(&[at(3 * DAY), at(3 * DAY + 5)], 5_000), 3 * DAY);
        assert_eq!(
            follow_ms(&[at(3 * DAY), at(0)], 5_000),
            0,
            "one database ahead"
        );
        assert_eq!(follow_ms(&[at(3 * DAY)], 5_000), 0, "a single database");
        assert_eq!(
            follow_ms(&[at(4_000), at(4_500)], 5_000),
            0,
            "within the tolerance"
        );
    }

    #[test]
    fn spans_read_as_people_say_them() {
        assert_eq!(human_ms(3 * DAY + 60_000), "3 d 0 h");
        assert_eq!(human_ms(-(2 * 3_600_000 + 5 * 60_000)), "-2 h 5 min");
        assert_eq!(human_ms(12 * 60_000 + 3_400), "12 min 3 s");
        assert_eq!(human_ms(4_240), "4.2 s");
        assert_eq!(human_ms(3 * DAY - 10), "3 d 0 h", "rounded");
        assert_eq!(human_ms(59_960), "1 min 0 s");
        assert_eq!(human_ms(250), "250 ms");
    }
}
