//! One biz's move to a layout: the store's machine ([`Move`]), its steps carried out
//! on the simulated databases, one database statement per step. Run by a command and
//! by a server healing a change cut off.

use segmint_core::layout::moving::{Need, Outcome, Safeguards, Stop};
use segmint_core::layout::{Frame, Move};

use crate::model::{Db, DbState, Lay, Row, Sys, learn, to_mark};

/// A biz being moved over the databases `parts`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Mover {
    pub parts: Vec<Db>,
    pub machine: Move,
}

/// What a step of a move came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moved {
    Going,
    Done,
    Stopped(&'static str),
}

impl Mover {
    /// A move to `to` over `parts`, whose rows may be in any of `layouts`, above what
    /// witnesses recorded before it (`witnessed`: `(max_id, version)`).
    pub fn new(
        sys: &Sys,
        to: Lay,
        parts: Vec<Db>,
        layouts: Vec<Lay>,
        witnessed: Vec<(i64, i64)>,
    ) -> Mover {
        let classes = |l: &Lay| parts.iter().map(|&d| l.class_of(d)).collect();
        let frame = Frame {
            epoch: to.epoch,
            to: classes(&to),
            epochs: layouts.iter().map(|l| (l.epoch, classes(l))).collect(),
        };
        let safeguards = Safeguards {
            fresh_witnesses: sys.spec.fixes.fresh_witnesses,
            claimed_by: sys.spec.fixes.claimed_by_stamp,
        };
        let machine =
            Move::new(frame, witnessed, u32::from(sys.spec.attempts)).with_safeguards(safeguards);
        Mover { parts, machine }
    }

    /// Carries out the step the machine needs on the databases.
    pub fn step(&mut self, dbs: &mut [DbState]) -> Moved {
        carry_out(&mut self.machine, &self.parts, dbs);
        match self.machine.need() {
            Need::Done(Outcome::Stopped(stop)) => Moved::Stopped(match stop {
                Stop::Back { .. } => "a row went back in time while the change ran",
                Stop::Superseded { .. } => "a later change moved the biz: superseded",
                Stop::Invalid(_) => "the biz's rows cannot be moved as they are",
                Stop::RacesLost { .. } => "lost every race",
                Stop::Failed { .. } => "a database failed",
            }),
            Need::Done(_) => Moved::Done,
            _ => Moved::Going,
        }
    }
}

/// Carries out the step `machine`, a move over the databases `parts`, needs on the
/// databases; returns how it ended, if it did.
pub fn carry_out(machine: &mut Move, parts: &[Db], dbs: &mut [DbState]) -> Option<Outcome> {
    match machine.need() {
        Need::Read => {
            let rows: Vec<_> = parts
                .iter()
                .map(|&d| dbs[d].row.map(|r| r.reclass()))
                .collect();
            machine.read(&rows);
        }
        Need::Insert { part, row, .. } => {
            let db = &mut dbs[parts[part]];
            if db.row.is_none() {
                db.row = Some(Row::reclassed(&row));
            }
            machine.inserted();
        }
        Need::Write {
            part,
            version,
            max_id,
            to,
        } => {
            let done = dbs[parts[part]].cas(version, max_id, Row::reclassed(&to));
            machine.written(done.map(|r| r.reclass()));
        }
        Need::Witness { part, marks } => {
            // `Store`'s witness step on one database: `witness`, then `witnesses_of`.
            let j = parts[part];
            for (q, mark) in marks {
                learn(&mut dbs[j].witness[parts[q]], mark);
            }
            let read: Vec<_> = parts
                .iter()
                .enumerate()
                .filter_map(|(q, &d)| dbs[j].witness[d].map(|w| (Some(q), to_mark(w))))
                .collect();
            machine.witnesses(&read);
        }
        Need::Done(_) => unreachable!("a move that ended is not stepped"),
    }
    match machine.need() {
        Need::Done(outcome) => Some(outcome),
        _ => None,
    }
}
