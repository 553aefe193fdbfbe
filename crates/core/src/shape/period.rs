//! Counters that restart each period: a day, a month or a year in an IANA time zone.
//!
//! A period's IDs are a window of the biz's own rows: the period code (`20261125` for
//! a day, `202611` for a month, `2026` for a year) times the format's modulus (its
//! counter's base to the power of its width), plus the counter. So the stored value
//! of `ORD{yyyy}{MM}{dd}{seq:06}`'s 123rd ID on 25 November 2026 is `20261125000123`,
//! and a new period begins on a row by a reservation that jumps it to the period's
//! floor: `max_id` never goes down, and every guarantee that rests on it (no ID twice
//! across servers, databases, classes and layouts; restores fenced) carries over.

use jiff::Timestamp;
use jiff::civil::Date;
use jiff::tz::TimeZone;

use crate::segment::Window;

/// How often a biz's counter restarts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Reset {
    Daily,
    Monthly,
    Yearly,
}

impl Reset {
    /// The reset named `name`: `none` (no reset), `daily`, `monthly` or `yearly`.
    ///
    /// # Errors
    /// A message naming the resets allowed.
    pub fn parse(name: &str) -> Result<Option<Reset>, String> {
        match name {
            "none" | "" => Ok(None),
            "daily" => Ok(Some(Reset::Daily)),
            "monthly" => Ok(Some(Reset::Monthly)),
            "yearly" => Ok(Some(Reset::Yearly)),
            other => Err(format!(
                "unknown reset `{}`: use none, daily, monthly or yearly",
                other.chars().take(32).collect::<String>()
            )),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Reset::Daily => "daily",
            Reset::Monthly => "monthly",
            Reset::Yearly => "yearly",
        }
    }

    /// The code of the period holding `date`.
    fn code(self, date: Date) -> i64 {
        let (y, m, d) = (
            i64::from(date.year()),
            i64::from(date.month()),
            i64::from(date.day()),
        );
        match self {
            Reset::Daily => y * 10_000 + m * 100 + d,
            Reset::Monthly => y * 100 + m,
            Reset::Yearly => y,
        }
    }

    /// The first day of the period `code`, if it is one.
    pub fn first_day(self, code: i64) -> Option<Date> {
        let (y, m, d) = match self {
            Reset::Daily => (code / 10_000, code / 100 % 100, code % 100),
            Reset::Monthly => (code / 100, code % 100, 1),
            Reset::Yearly => (code, 1, 1),
        };
        let date = Date::new(
            i16::try_from(y).ok()?,
            i8::try_from(m).ok()?,
            i8::try_from(d).ok()?,
        )
        .ok()?;
        (y >= 1 && self.code(date) == code).then_some(date)
    }

    /// The code of the period after `code`.
    fn next(self, code: i64) -> Option<i64> {
        let first = self.first_day(code)?;
        let next = match self {
            Reset::Daily => first.tomorrow().ok()?,
            Reset::Monthly => first.last_of_month().tomorrow().ok()?,
            Reset::Yearly => first.last_of_year().tomorrow().ok()?,
        };
        Some(self.code(next))
    }

    /// The largest period code: that of 31 December 9999.
    fn largest_code(self) -> i64 {
        self.code(Date::constant(9999, 12, 31))
    }
}

/// A biz's periods: which, in which zone, and how its IDs hold them.
#[derive(Debug, Clone)]
pub struct Periodic {
    reset: Reset,
    zone: TimeZone,
    /// Counters are below this: the format's base to the power of its width.
    modulus: i64,
    /// The first counter of each period.
    start: i64,
    /// The periods before this code come from interim rows (`segmint biz recover`): the
    /// biz's own rows were moved into it before it began.
    interim_until: Option<i64>,
}

impl Periodic {
    /// Periods `reset` in the IANA zone `zone`, counters `start ..= modulus - 1`.
    ///
    /// # Errors
    /// A message when the zone is unknown, the counter has no room, or the IDs of
    /// the last period (9999) would not fit 63 bits.
    pub fn new(reset: Reset, zone: &str, modulus: i64, start: i64) -> Result<Periodic, String> {
        let tz = jiff::tz::db().get(zone).map_err(|_| {
            format!(
                "unknown time zone `{}`: use an IANA name such as Asia/Shanghai or UTC",
                zone.chars().take(64).collect::<String>()
            )
        })?;
        if start < 1 || start >= modulus {
            return Err(format!(
                "the counter starts at {start} but the format's counter holds 0 to {}",
                modulus - 1
            ));
        }
        if (reset.largest_code() + 1).checked_mul(modulus).is_none() {
            return Err(format!(
                "a {} counter of {modulus} values does not fit a 63-bit ID beside its date: use a narrower {{seq}}",
                reset.name()
            ));
        }
        Ok(Periodic {
            reset,
            zone: tz,
            modulus,
            start,
            interim_until: None,
        })
    }

    /// These periods, those before `until` issued from interim rows (see
    /// [`Periodic::interim_until`]).
    ///
    /// # Errors
    /// When `until` names no period.
    pub fn with_interim(self, until: i64) -> Result<Periodic, String> {
        if self.reset.first_day(until).is_none() {
            return Err(format!("`{until}` names no {} period", self.reset.name()));
        }
        Ok(Periodic {
            interim_until: Some(until),
            ..self
        })
    }

    /// The period from which the biz's own rows issue again, when the periods before
    /// it come from interim rows: a biz whose rows were moved into a later period
    /// before it began (a clock that was ahead), recovered by `segmint biz recover`.
    pub fn interim_until(&self) -> Option<i64> {
        self.interim_until
    }

    /// The first counter of each period.
    pub fn start(&self) -> i64 {
        self.start
    }

    pub fn modulus(&self) -> i64 {
        self.modulus
    }

    /// The code of the period holding the instant `unix_ms` in the biz's zone.
    pub fn code_at(&self, unix_ms: i64) -> i64 {
        let at = Timestamp::from_millisecond(unix_ms).unwrap_or(Timestamp::UNIX_EPOCH);
        self.reset.code(self.zone.to_datetime(at).date())
    }

    /// The code of the period after `code` (itself past 9999).
    pub fn next(&self, code: i64) -> i64 {
        self.reset.next(code).unwrap_or(code)
    }

    /// When the period `code` begins, in milliseconds since the epoch: the first
    /// instant of its first day in the zone (after the gap if a clock change skips
    /// midnight). `None` for a code that names no period.
    pub fn begins_ms(&self, code: i64) -> Option<i64> {
        let day = self.reset.first_day(code)?;
        Some(
            day.to_zoned(self.zone.clone())
                .ok()?
                .timestamp()
                .as_millisecond(),
        )
    }

    /// The IDs of period `code`.
    pub fn window(&self, code: i64) -> Window {
        let base = code.saturating_mul(self.modulus);
        Window {
            floor: base + self.start - 1,
            ceiling: base.saturating_add(self.modulus - 1),
        }
    }

    /// The period code and the counter of the ID `id`, if its period is a real one.
    pub fn split(&self, id: i64) -> Option<(i64, i64)> {
        let (code, counter) = (id.div_euclid(self.modulus), id.rem_euclid(self.modulus));
        self.reset.first_day(code).map(|_| (code, counter))
    }

    /// The period `code` as people write it: `2026-11-25`, `2026-11` or `2026`.
    pub fn label(&self, code: i64) -> String {
        match self.reset {
            Reset::Daily => format!(
                "{:04}-{:02}-{:02}",
                code / 10_000,
                code / 100 % 100,
                code % 100
            ),
            Reset::Monthly => format!("{:04}-{:02}", code / 100, code % 100),
            Reset::Yearly => format!("{code:04}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(text: &str) -> i64 {
        text.parse::<Timestamp>().unwrap().as_millisecond()
    }

    #[test]
    fn periods_follow_the_zone_calendar() {
        let p = Periodic::new(Reset::Daily, "Asia/Shanghai", 1_000_000, 1).unwrap();
        // Midnight in Shanghai is 16:00 UTC.
        assert_eq!(p.code_at(ms("2026-11-25T15:59:59.999Z")), 20261125);
        assert_eq!(p.code_at(ms("2026-11-25T16:00:00Z")), 20261126);
        assert_eq!(p.begins_ms(20261126), Some(ms("2026-11-25T16:00:00Z")));
        assert_eq!(p.next(20261130), 20261201);
        assert_eq!(p.next(20261231), 20270101);
        assert_eq!(p.next(20280228), 20280229);
        assert_eq!(
            p.window(20261125),
            Window {
                floor: 20261125000000,
                ceiling: 20261125999999
            }
        );
        assert_eq!(p.split(20261125000123), Some((20261125, 123)));
        assert_eq!(p.split(20261132000001), None);
        assert_eq!(p.label(20261125), "2026-11-25");
        let m = Periodic::new(Reset::Monthly, "UTC", 100, 5).unwrap();
        assert_eq!(m.code_at(ms("2026-12-31T23:59:59Z")), 202612);
        assert_eq!(m.next(202612), 202701);
        assert_eq!(m.window(202612).floor, 20261204);
        let y = Periodic::new(Reset::Yearly, "UTC", 10, 1).unwrap();
        assert_eq!(y.next(2026), 2027);
    }

    /// Santiago's clocks skip from midnight to 01:00 on the first Sunday of
    /// September 2026: that day begins at 01:00 local time, and the day before ends
    /// at its midnight all the same. New York's change at 02:00 moves no day's start.
    #[test]
    fn daylight_saving_changes_move_no_boundary_but_the_skipped_midnight() {
        let p = Periodic::new(Reset::Daily, "America/Santiago", 1000, 1).unwrap();
        let begins = p.begins_ms(20260906).unwrap();
        assert_eq!(begins, ms("2026-09-06T04:00:00Z"));
        assert_eq!(p.code_at(begins - 1), 20260905);
        assert_eq!(p.code_at(begins), 20260906);
        let ny = Periodic::new(Reset::Daily, "America/New_York", 1000, 1).unwrap();
        assert_eq!(ny.begins_ms(20260308), Some(ms("2026-03-08T05:00:00Z")));
        assert_eq!(ny.begins_ms(20260309), Some(ms("2026-03-09T04:00:00Z")));
        assert_eq!(ny.code_at(ms("2026-03-08T06:59:59Z")), 20260308);
        assert_eq!(ny.code_at(ms("2026-03-08T07:00:00Z")), 20260308);
    }

    #[test]
    fn bad_periods_are_refused() {
        assert!(Periodic::new(Reset::Daily, "Mars/Olympus", 1000, 1).is_err());
        assert!(Periodic::new(Reset::Daily, "UTC", 1000, 1000).is_err());
        assert!(Periodic::new(Reset::Daily, "UTC", 1000, 0).is_err());
        assert!(Periodic::new(Reset::Daily, "UTC", 10_i64.pow(11), 1).is_err());
        assert!(Periodic::new(Reset::Daily, "UTC", 10_i64.pow(10), 1).is_ok());
        assert!(Periodic::new(Reset::Yearly, "UTC", 10_i64.pow(14), 1).is_ok());
        assert!(Periodic::new(Reset::Yearly, "UTC", 10_i64.pow(15), 1).is_err());
        assert!(Reset::parse("hourly").unwrap_err().contains("daily"));
    }
}
