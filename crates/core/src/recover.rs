//! `segmint biz recover`, in the form of `biz add`: this module checks and plans, the
//! store reads and writes. A biz whose counter restarts each period, with its rows moved
//! into a later period than the databases' clocks are in (a clock that was ahead), serves
//! the periods before that one again, from interim rows.
//!
//! The biz's own rows are not touched: their `max_id` only grows, and lowering it would
//! fence the databases as gone back in time (rightly: the numbers above are issued).
//! Instead the periods before the one the rows are in (`until`) come from interim rows,
//! a biz of their own named `BIZ#UNTIL` (`#` is in no name a user gives) with the same
//! classes and shape, starting above what the current period issued; the biz's shape
//! then says so (`;interim=UNTIL` after its pattern), and servers reserve each period
//! before `until` from the interim rows. From `until` on, the biz's own rows issue again,
//! above every number they issued in it.
//!
//! ```text
//!   check: the biz restarts its counter each period, and was not recovered ─no─▶ Nothing
//!   read: the biz's row and shape on each of its databases; the databases' clocks
//!   plan: until = the lowest period of the rows; now = the current period
//!         until ≤ now ──▶ Nothing (the biz serves the current period from its rows)
//!         --above after the current period ──▶ Invalid
//!         else: the interim rows `BIZ#UNTIL`, from above --above (or the period's end)
//!   write: the interim biz (as `biz add` does, skipped when it exists), then the shape
//!          marked `;interim=UNTIL` on each database; run again, it skips what is done
//! ```

use crate::biz::BizTag;
use crate::shape::period::Periodic;

/// Why the plan refuses; nothing was written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// There is nothing to recover: why.
    Nothing(String),
    /// A bad argument: what is wrong.
    Invalid(String),
}

/// The biz's periods, checked before anything is read: `period` is the biz's (`None`
/// when its counter does not restart), not recovered yet.
///
/// # Errors
/// [`Refused::Nothing`] for a biz without periods or one recovered already.
pub fn check<'p>(biz: &BizTag, period: Option<&'p Periodic>) -> Result<&'p Periodic, Refused> {
    let Some(period) = period else {
        return Err(Refused::Nothing(format!(
            "biz `{biz}` does not restart its counter each period"
        )));
    };
    if let Some(done) = period.interim_until() {
        return Err(Refused::Nothing(format!(
            "biz `{biz}` was recovered already: its periods before {} come from `{}`",
            period.label(done),
            biz.interim(done)
        )));
    }
    Ok(period)
}

/// One database's row of the biz, as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Row<'a> {
    /// The database's name.
    pub name: &'a str,
    pub max_id: i64,
    pub step: i64,
}

/// What the recovery writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The period the rows are in: the biz's own rows issue again from it.
    pub until: i64,
    /// The current period, by the databases' clocks.
    pub now: i64,
    /// The interim rows' biz: the periods before `until` come from it.
    pub interim: BizTag,
    /// The interim rows start above this number (their first ID is the next).
    pub start_after: i64,
    /// The interim rows' step: the widest of the biz's rows.
    pub step: i64,
    /// The interim rows' description.
    pub description: String,
    /// The report's closing line.
    pub done: String,
}

impl Plan {
    /// The biz's shape pattern `pattern` marked as recovered.
    pub fn marked(&self, pattern: &str) -> String {
        format!("{pattern};interim={}", self.until)
    }
}

/// Longest name a biz may have in the databases.
const MAX_NAME: usize = 63;

/// The recovery of `biz` with periods `period` and `rows` (each of its databases'),
/// in the current period `now`; `above`: the highest number of the current period the
/// operator's system holds (`None`: the current period issues nothing more).
///
/// # Errors
/// [`Refused::Nothing`] when there is no row, the rows are not all ahead of `now`, or
/// the interim rows' name is too long; [`Refused::Invalid`] when `above` lies after the
/// current period.
pub fn plan(
    biz: &BizTag,
    period: &Periodic,
    rows: &[Row<'_>],
    now: i64,
    above: Option<i64>,
) -> Result<Plan, Refused> {
    let code = |max_id: i64| max_id.div_euclid(period.modulus());
    let Some(lowest) = rows.iter().min_by_key(|r| code(r.max_id)) else {
        return Err(Refused::Nothing(format!(
            "biz `{biz}` has no row that gives out segments (a layout change is moving it)"
        )));
    };
    let until = code(lowest.max_id);
    if until <= now {
        return Err(Refused::Nothing(format!(
            "biz `{biz}`: database \"{}\"'s row is in period {}, not ahead of the databases' clocks (period {}): the biz serves the current period from it",
            lowest.name,
            period.label(until),
            period.label(now)
        )));
    }
    let window = period.window(now);
    let start_after = match above {
        None => window.ceiling,
        Some(n) if n > window.ceiling => {
            return Err(Refused::Invalid(format!(
                "--above {n} lies after period {} (its numbers end at {}); nothing changed",
                period.label(now),
                window.ceiling
            )));
        }
        Some(n) => n.max(window.floor),
    };
    let interim = biz.interim(until);
    if interim.as_str().len() > MAX_NAME {
        return Err(Refused::Nothing(format!(
            "the interim rows' name `{interim}` is longer than {MAX_NAME} characters"
        )));
    }
    // The interim rows issue only numbers of the periods before `until`, all above
    // what the current period issued: none the biz's own rows issue.
    assert!(
        start_after >= window.floor && start_after < period.window(until).floor,
        "interim rows planned to overlap the biz's own rows"
    );
    Ok(Plan {
        until,
        now,
        start_after,
        step: rows.iter().map(|r| r.step).max().unwrap_or(1),
        description: format!(
            "interim rows of `{biz}`: its periods before {} (segmint biz recover)",
            period.label(until)
        ),
        done: format!(
            "biz `{biz}`: its rows are in period {} (ahead of the databases' clocks, in period {}); the periods before it now come from `{interim}`, the current one above {start_after}; from {} on, the biz's own rows issue again, above every number they issued",
            period.label(until),
            period.label(now),
            period.label(until)
        ),
        interim,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shape::period::Reset;

    fn daily() -> Periodic {
        Periodic::new(Reset::Daily, "UTC", 10_000, 1).expect("a period")
    }

    /// The ID of counter `counter` in period `code`.
    fn id(code: i64, counter: i64) -> i64 {
        code * 10_000 + counter
    }

    fn rows(codes: &[(&'static str, i64)]) -> Vec<Row<'static>> {
        codes
            .iter()
            .map(|&(name, code)| Row {
                name,
                max_id: id(code, 40),
                step: 100,
            })
            .collect()
    }

    #[test]
    fn plans_interim_rows_for_the_periods_before_the_lowest_row() {
        let biz = BizTag::parse("order").expect("a name");
        let plan = plan(
            &biz,
            &daily(),
            &rows(&[("pg0", 20261209), ("pg1", 20261208)]),
            20261207,
            Some(id(20261207, 500)),
        )
        .expect("a plan");
        assert_eq!(plan.until, 20261208);
        assert_eq!(plan.interim.as_str(), "order#20261208");
        assert_eq!(plan.start_after, id(20261207, 500));
        assert_eq!(
            plan.marked("{yyyyMMdd}{seq:4}"),
            "{yyyyMMdd}{seq:4};interim=20261208"
        );
        let none = super::plan(&biz, &daily(), &rows(&[("pg0", 20261208)]), 20261207, None)
            .expect("a plan");
        assert_eq!(none.start_after, id(20261207, 9999));
    }

    #[test]
    fn refuses_rows_not_ahead_an_above_past_the_period_and_a_recovered_biz() {
        let biz = BizTag::parse("order").expect("a name");
        let period = daily();
        let behind = plan(
            &biz,
            &period,
            &rows(&[("pg0", 20261209), ("pg1", 20261207)]),
            20261207,
            None,
        );
        assert!(
            matches!(behind, Err(Refused::Nothing(m)) if m.contains("database \"pg1\"'s row is in period 2026-12-07"))
        );
        let past = plan(
            &biz,
            &period,
            &rows(&[("pg0", 20261209)]),
            20261207,
            Some(id(20261208, 1)),
        );
        assert!(
            matches!(past, Err(Refused::Invalid(m)) if m.contains("lies after period 2026-12-07"))
        );
        assert!(matches!(
            plan(&biz, &period, &[], 20261207, None),
            Err(Refused::Nothing(_))
        ));
        assert!(matches!(check(&biz, None), Err(Refused::Nothing(_))));
        let recovered = period.with_interim(20261208).expect("a period");
        assert!(
            matches!(check(&biz, Some(&recovered)), Err(Refused::Nothing(m)) if m.contains("order#20261208"))
        );
    }
}
