//! One reservation attempt on one database, as a machine (sans-IO) that the store runs
//! on its engines (`Store::attempt`) and the model checker runs on simulated databases.
//!
//! ```text
//!   Read the row (with the evidence known of it before the read)
//!    │ ├─none──────────────────────────────▶ Missing
//!    │ ├─behind the evidence───────────────▶ Behind (fence the database)
//!    ▼ │
//!   Learn its mark ─┬─frozen, or an earlier epoch──▶ Moving
//!    │              └─class not vetted, later epoch▶ Stale
//!    ▼
//!   Check its class (valid, disjoint from the other databases') ──▶ Refused
//!    ▼
//!   Step (the caller's policy) and cut the segment after the row, in the window if any
//!    │ └─no ID left in the window, or past it──▶ Window; an overflow──▶ Refused
//!    ▼
//!   Advance the row by compare-and-set ──lost──▶ Read (at most `ATTEMPTS` times, then
//!    ▼                                            Contended)
//!   Learn the new mark, check the class again (edited by hand meanwhile: the segment is
//!   cut again in the class the row has now) ──▶ Reserved
//! ```
//!
//! Which database to try, hedging a stalled one, retrying a pass and witnessing the
//! reservation elsewhere are the caller's: they choose among attempts, they do not
//! sequence one.

use super::judge::{Judged, first_overlap, judge};
use super::{Residue, SegmentError, SegmentRange, Window, WindowMiss};
use crate::evidence::Mark;
use crate::rows::Reclass;
use crate::step::StepChoice;

/// Compare-and-set attempts on one database before the attempt gives up as contended.
pub const ATTEMPTS: usize = 3;

/// The read or write the attempt needs next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Take the evidence's mark of the row, then read the row: answer with
    /// [`Reserve::read`].
    Read,
    /// Record `Mark` in the evidence: answer with [`Reserve::learned`].
    Learn(Mark),
    /// The step for a row whose own step is `row_step`, in a class of `delta`, with
    /// `room` IDs left below `i64::MAX`: answer with [`Reserve::stepped`].
    Step {
        row_step: i64,
        delta: i64,
        room: i64,
    },
    /// Compare-and-set the row from `version` and `max_id` to `to`: answer with
    /// [`Reserve::advanced`].
    Advance { version: i64, max_id: i64, to: i64 },
    /// The attempt is over.
    Done(Outcome),
}

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The segment `range`, the row at `version` after it, chosen for `choice`.
    Reserved {
        range: SegmentRange,
        version: i64,
        choice: StepChoice,
    },
    /// The database holds no row of the biz.
    Missing,
    /// Every compare-and-set lost: other writers are busy on this row.
    Contended,
    /// The row lies behind `known`, what was known of it before the read: its database
    /// went back in time and is fenced.
    Behind { row: Reclass, known: Mark },
    /// Frozen by a layout change, or left in an earlier layout.
    Moving,
    /// Its class was not vetted by the catalog, or its epoch is above the catalog's.
    Stale,
    /// No ID left in the window, or a later period begun on the row.
    Window(WindowMiss),
    /// The biz cannot be served from this row; trying elsewhere will not help.
    Refused(Refusal),
}

/// Why a row cannot be served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Its delta and remainder make no class.
    Invalid(SegmentError),
    /// Two databases' classes share an ID (as [`first_overlap`] gives them).
    Overlap((usize, Residue), (usize, Residue)),
    /// The step is below the class's delta: a segment could hold no ID.
    StepBelowDelta { step: i64, delta: i64 },
    /// The segment would pass `i64::MAX`.
    Overflow { max_id: i64, step: i64 },
    /// The class changed to one the step holds no ID of, during the attempt.
    ClassChanged(Residue),
}

/// The checks a mutation of the model checker switches off, one at a time, to show it
/// finds the duplicate each prevents. Always all on outside the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Safeguards {
    /// A window's segment starts above the row, never at the window's floor below it.
    pub window_above_row: bool,
}

impl Safeguards {
    pub const ALL: Safeguards = Safeguards {
        window_above_row: true,
    };
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Read,
    /// Learning the mark of the row read, which is judged `verdict`.
    Learn(Reclass, i64, Judged),
    /// The row, its class and its own step.
    Step(Reclass, Residue, i64),
    Advance {
        row: Reclass,
        residue: Residue,
        choice: StepChoice,
        range: SegmentRange,
    },
    /// Learning the mark of the row advanced.
    Advanced {
        from: Reclass,
        to: Reclass,
        choice: StepChoice,
        range: SegmentRange,
    },
    Done(Outcome),
}

/// One reservation attempt on database `db`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reserve<'a> {
    db: usize,
    /// The biz's classes the catalog read vetted, by database.
    known: &'a [(usize, Residue)],
    /// The layout epoch of the catalog read.
    epoch: i64,
    window: Option<Window>,
    safeguards: Safeguards,
    attempts: usize,
    state: State,
}

impl<'a> Reserve<'a> {
    /// An attempt on database `db`, against the catalog's classes `known` and layout
    /// `epoch`, within `window` of the row's IDs if given.
    pub fn new(
        db: usize,
        known: &'a [(usize, Residue)],
        epoch: i64,
        window: Option<Window>,
        safeguards: Safeguards,
    ) -> Reserve<'a> {
        Reserve {
            db,
            known,
            epoch,
            window,
            safeguards,
            attempts: 0,
            state: State::Read,
        }
    }

    pub fn need(&self) -> Need {
        match self.state {
            State::Read => Need::Read,
            State::Learn(row, ..) => Need::Learn(row.mark()),
            State::Step(row, residue, row_step) => Need::Step {
                row_step,
                delta: residue.delta(),
                room: i64::MAX.saturating_sub(row.max_id),
            },
            State::Advance { row, range, .. } => Need::Advance {
                version: row.version,
                max_id: row.max_id,
                to: range.max_id(),
            },
            State::Advanced { to, .. } => Need::Learn(to.mark()),
            State::Done(outcome) => Need::Done(outcome),
        }
    }

    /// The row read, with its own step (`None`: no row), and `seen`, the evidence's
    /// mark of it taken before the read.
    pub fn read(&mut self, row: Option<(Reclass, i64)>, seen: Option<Mark>) {
        assert_eq!(self.state, State::Read, "a read answers a read");
        let Some((row, step)) = row else {
            self.state = State::Done(Outcome::Missing);
            return;
        };
        let vetted = self.known.iter().any(|&(db, c)| {
            db == self.db && (c.delta(), c.remainder()) == (row.delta, row.remainder)
        });
        self.state = match judge(&row, seen, self.epoch, vetted) {
            Judged::Behind(known) => State::Done(Outcome::Behind { row, known }),
            verdict => State::Learn(row, step, verdict),
        };
    }

    /// The evidence recorded the mark [`Need::Learn`] asked for.
    pub fn learned(&mut self) {
        self.state = match self.state {
            State::Learn(row, step, verdict) => match verdict {
                Judged::Moving => State::Done(Outcome::Moving),
                Judged::Stale => State::Done(Outcome::Stale),
                Judged::Behind(_) | Judged::Usable => match self.checked(&row) {
                    Ok(residue) => State::Step(row, residue, step),
                    Err(refusal) => State::Done(Outcome::Refused(refusal)),
                },
            },
            State::Advanced {
                from,
                to,
                choice,
                range,
            } => State::Done(match self.checked(&to) {
                Ok(r) if r == range.residue() => Outcome::Reserved {
                    range,
                    version: to.version,
                    choice,
                },
                // Edited by hand between the read and the update: the segment is
                // issued from the class the row has now.
                Ok(r) => match self.cut(&from, choice.step, r) {
                    Ok(range) if choice.step >= r.delta() => Outcome::Reserved {
                        range,
                        version: to.version,
                        choice,
                    },
                    _ => Outcome::Refused(Refusal::ClassChanged(r)),
                },
                Err(refusal) => Outcome::Refused(refusal),
            }),
            state => panic!("nothing to learn in {state:?}"),
        };
    }

    /// The step the caller's policy chose.
    pub fn stepped(&mut self, choice: StepChoice) {
        let State::Step(row, residue, _) = self.state else {
            panic!("a step answers a step");
        };
        let step = choice.step;
        self.state = if step < residue.delta() {
            State::Done(Outcome::Refused(Refusal::StepBelowDelta {
                step,
                delta: residue.delta(),
            }))
        } else {
            match self.cut(&row, step, residue) {
                Ok(range) => State::Advance {
                    row,
                    residue,
                    choice,
                    range,
                },
                Err(outcome) => State::Done(outcome),
            }
        };
    }

    /// The row after the compare-and-set; `None`: it lost (the row was not at the
    /// version and `max_id` read).
    pub fn advanced(&mut self, updated: Option<Reclass>) {
        let State::Advance {
            row,
            residue,
            choice,
            range,
        } = self.state
        else {
            panic!("an update answers an advance");
        };
        debug_assert_eq!(range.residue(), residue);
        self.state = match updated {
            Some(to) => {
                assert!(
                    to.max_id == range.max_id() && to.version > row.version,
                    "a compare-and-set moves the row to the segment's end"
                );
                State::Advanced {
                    from: row,
                    to,
                    choice,
                    range,
                }
            }
            None => {
                self.attempts += 1;
                match self.attempts < ATTEMPTS {
                    true => State::Read,
                    false => State::Done(Outcome::Contended),
                }
            }
        };
    }

    /// The class of `row`, if it is valid and disjoint from the classes the biz has on
    /// the other databases.
    fn checked(&self, row: &Reclass) -> Result<Residue, Refusal> {
        let residue = row.class().map_err(Refusal::Invalid)?;
        let mut classes: Vec<(usize, Residue)> = self
            .known
            .iter()
            .copied()
            .filter(|&(db, _)| db != self.db)
            .collect();
        classes.push((self.db, residue));
        match first_overlap(&classes) {
            Some((a, b)) => Err(Refusal::Overlap(a, b)),
            None => Ok(residue),
        }
    }

    /// The segment of `step` IDs of `residue` after `row`, in the window if one is
    /// asked.
    fn cut(&self, row: &Reclass, step: i64, residue: Residue) -> Result<SegmentRange, Outcome> {
        match self.window {
            Some(w) => {
                let at = match self.safeguards.window_above_row {
                    true => row.max_id,
                    false => w.floor,
                };
                w.range(at, step, residue).map_err(Outcome::Window)
            }
            None => SegmentRange::after(row.max_id, step, residue).map_err(|_| {
                Outcome::Refused(Refusal::Overflow {
                    max_id: row.max_id,
                    step,
                })
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::step::StepReason;

    fn class(d: i64, r: i64) -> Residue {
        Residue::new(d, r).expect("a class")
    }

    fn row(version: i64, max_id: i64, c: Residue) -> Reclass {
        Reclass {
            version,
            max_id,
            delta: c.delta(),
            remainder: c.remainder(),
            epoch: 0,
            frozen: false,
            claimed_by: 0,
        }
    }

    /// Runs `m` against one database holding `db`, whose writers other than this
    /// attempt move it by `race` before each compare-and-set (while any is left), with
    /// a fixed step of 10. Returns the outcome and the marks learned.
    fn drive(
        m: &mut Reserve<'_>,
        db: &mut Option<Reclass>,
        seen: Option<Mark>,
        mut race: Vec<Reclass>,
    ) -> (Outcome, Vec<Mark>) {
        let mut learned = Vec::new();
        loop {
            match m.need() {
                Need::Read => m.read(db.map(|r| (r, 10)), seen),
                Need::Learn(mark) => {
                    learned.push(mark);
                    m.learned();
                }
                Need::Step { row_step, .. } => m.stepped(StepChoice {
                    step: row_step,
                    reason: StepReason::Fixed,
                }),
                Need::Advance {
                    version,
                    max_id,
                    to,
                } => {
                    if let Some(r) = race.pop() {
                        *db = Some(r);
                    }
                    let now = db.expect("a row");
                    let won = now.version == version && now.max_id == max_id;
                    let updated = won.then(|| Reclass {
                        version: now.version + 1,
                        max_id: to,
                        ..now
                    });
                    if updated.is_some() {
                        *db = updated;
                    }
                    m.advanced(updated);
                }
                Need::Done(outcome) => return (outcome, learned),
            }
        }
    }

    #[test]
    fn a_usable_row_reserves_the_step_after_it_and_learns_both_marks() {
        let even = class(2, 0);
        let known = [(0, even), (1, class(2, 1))];
        let mut db = Some(row(3, 100, even));
        let mut m = Reserve::new(0, &known, 0, None, Safeguards::ALL);
        let (outcome, learned) = drive(&mut m, &mut db, None, vec![]);
        let Outcome::Reserved { range, version, .. } = outcome else {
            panic!("{outcome:?}");
        };
        assert_eq!(
            (range.first_id(), range.max_id(), version),
            (Some(102), 110, 4)
        );
        assert_eq!(
            learned,
            vec![row(3, 100, even).mark(), row(4, 110, even).mark()]
        );
    }

    #[test]
    fn a_row_behind_the_evidence_is_fenced_without_learning_it() {
        let even = class(2, 0);
        let known = [(0, even)];
        let mut db = Some(row(3, 100, even));
        let seen = row(5, 120, even).mark();
        let mut m = Reserve::new(0, &known, 0, None, Safeguards::ALL);
        let (outcome, learned) = drive(&mut m, &mut db, Some(seen), vec![]);
        assert_eq!(
            outcome,
            Outcome::Behind {
                row: row(3, 100, even),
                known: seen
            }
        );
        assert!(learned.is_empty());
    }

    #[test]
    fn lost_races_are_retried_then_given_up_as_contended() {
        let even = class(2, 0);
        let known = [(0, even)];
        let mut db = Some(row(1, 0, even));
        let mut m = Reserve::new(0, &known, 0, None, Safeguards::ALL);
        let race = vec![row(3, 40, even), row(2, 20, even)];
        let (outcome, _) = drive(&mut m, &mut db, None, race);
        assert!(matches!(outcome, Outcome::Reserved { range, .. } if range.max_id() == 50));
        let mut m = Reserve::new(0, &known, 0, None, Safeguards::ALL);
        let race = (0..ATTEMPTS as i64)
            .map(|k| row(10 + k, 100 + k, even))
            .collect();
        assert_eq!(drive(&mut m, &mut db, None, race).0, Outcome::Contended);
    }

    #[test]
    fn an_overlapping_or_invalid_class_is_refused_before_any_write() {
        let known = [(0, class(2, 0)), (1, class(2, 1))];
        let mut db = Some(row(1, 0, class(4, 1)));
        let mut m = Reserve::new(0, &known, 0, None, Safeguards::ALL);
        let (outcome, _) = drive(&mut m, &mut db, None, vec![]);
        assert_eq!(outcome, Outcome::Stale, "a class the catalog did not vet");
        let known = [(0, class(4, 1)), (1, class(2, 1))];
        let mut m = Reserve::new(0, &known, 0, None, Safeguards::ALL);
        let (outcome, _) = drive(&mut m, &mut db, None, vec![]);
        assert_eq!(
            outcome,
            Outcome::Refused(Refusal::Overlap((1, class(2, 1)), (0, class(4, 1))))
        );
        assert_eq!(db, Some(row(1, 0, class(4, 1))), "nothing written");
    }

    #[test]
    fn a_class_edited_during_the_attempt_cuts_the_segment_again() {
        let even = class(2, 0);
        let known = [(0, even), (0, class(2, 1))];
        let db = Some(row(1, 0, even));
        let mut m = Reserve::new(0, &known, 0, None, Safeguards::ALL);
        loop {
            match m.need() {
                Need::Read => m.read(db.map(|r| (r, 10)), None),
                Need::Learn(_) => m.learned(),
                Need::Step { .. } => m.stepped(StepChoice {
                    step: 10,
                    reason: StepReason::Fixed,
                }),
                Need::Advance { to, .. } => m.advanced(Some(Reclass {
                    version: 2,
                    max_id: to,
                    ..row(2, to, class(2, 1))
                })),
                Need::Done(outcome) => {
                    let Outcome::Reserved { range, .. } = outcome else {
                        panic!("{outcome:?}");
                    };
                    assert_eq!((range.residue(), range.first_id()), (class(2, 1), Some(1)));
                    break;
                }
            }
        }
    }

    #[test]
    fn a_window_starts_above_the_row_unless_the_safeguard_is_off() {
        let all = Residue::ALL;
        let known = [(0, all)];
        let window = Window {
            floor: 1000,
            ceiling: 1999,
        };
        for (safeguards, first) in [
            (Safeguards::ALL, 1501),
            (
                Safeguards {
                    window_above_row: false,
                },
                1001,
            ),
        ] {
            let mut db = Some(row(1, 1500, all));
            let mut m = Reserve::new(0, &known, 0, Some(window), safeguards);
            let (outcome, _) = drive(&mut m, &mut db, None, vec![]);
            assert!(
                matches!(outcome, Outcome::Reserved { range, .. } if range.first_id() == Some(first)),
                "{outcome:?}"
            );
        }
        let mut db = Some(row(1, 2000, all));
        let mut m = Reserve::new(0, &known, 0, Some(window), Safeguards::ALL);
        assert_eq!(
            drive(&mut m, &mut db, None, vec![]).0,
            Outcome::Window(WindowMiss::Passed)
        );
    }

    #[test]
    fn a_step_below_delta_or_past_the_id_space_is_refused() {
        let c = class(16, 3);
        let known = [(0, c)];
        let mut db = Some(row(1, 0, c));
        let mut m = Reserve::new(0, &known, 0, None, Safeguards::ALL);
        assert_eq!(
            drive(&mut m, &mut db, None, vec![]).0,
            Outcome::Refused(Refusal::StepBelowDelta {
                step: 10,
                delta: 16
            })
        );
        let mut db = Some(row(1, i64::MAX - 5, Residue::ALL));
        let known = [(0, Residue::ALL)];
        let mut m = Reserve::new(0, &known, 0, None, Safeguards::ALL);
        assert!(matches!(
            drive(&mut m, &mut db, None, vec![]).0,
            Outcome::Refused(Refusal::Overflow { .. })
        ));
    }
}
