//! Moving one biz (freeze, fence, switch) and the worker IDs to a new layout.

use super::*;

use segmint_core::layout::moving::{Back, During, Invalid, Need, Outcome, Stop};
use segmint_core::layout::{Frame, Move};

impl Cluster {
    /// Moves `biz` to layout `to` over the databases `parts`: carries out the steps of
    /// [`Move`] (freeze every row, a placeholder where one is missing; fence; switch;
    /// lost races re-read the rows and start over) on the engines.
    pub(super) async fn move_biz(
        &self,
        biz: &str,
        to: &Layout,
        layouts: &[Layout],
        witnessed: &Witnessed,
        parts: &[usize],
    ) -> Result<Moved, StoreError> {
        let names: Vec<&str> = parts.iter().map(|&i| self.names[i].as_str()).collect();
        let witnessed = witnessed.get(biz).map_or(&[][..], Vec::as_slice).to_vec();
        let mut machine = Move::new(Frame::new(to, layouts, &names), witnessed, MOVE_ATTEMPTS);
        let (outcome, read_failed, db_failed) = self.drive_move(biz, parts, &mut machine).await;
        self.moved(biz, parts, to.epoch, outcome, read_failed, &db_failed)
    }

    /// Carries out the steps of `machine`, the move of `biz` over the databases
    /// `parts`, until it ends. Returns how, with the error of a read that ended it, and
    /// a database's error that did.
    pub(super) async fn drive_move(
        &self,
        biz: &str,
        parts: &[usize],
        machine: &mut Move,
    ) -> (Outcome, Option<StoreError>, String) {
        let names: Vec<&str> = parts.iter().map(|&i| self.names[i].as_str()).collect();
        // The rows last read (a placeholder takes the fields a change does not write
        // from one of them), and what failed: a read's error, or a database's.
        let mut rows: Vec<Option<BizRow>> = Vec::new();
        let mut read_failed: Option<StoreError> = None;
        let mut db_failed = String::new();
        loop {
            match machine.need() {
                Need::Read => match self.all_parts(parts, |db| db.biz(biz), "stopped").await {
                    Ok(read) => {
                        let marks: Vec<Option<Reclass>> =
                            read.iter().map(|r| r.as_ref().map(Reclass::of)).collect();
                        machine.read(&marks);
                        rows = read;
                    }
                    Err(e) => {
                        read_failed = Some(e);
                        machine.failed(None);
                    }
                },
                Need::Insert { part, row, like } => {
                    let Some(template) = rows.get(like).cloned().flatten() else {
                        unreachable!("a placeholder is modelled on a row read");
                    };
                    match self.insert_placeholder(parts[part], row, template).await {
                        Ok(()) => machine.inserted(),
                        Err(e) => {
                            db_failed = e.to_string();
                            machine.failed(Some(part));
                        }
                    }
                }
                Need::Write {
                    part,
                    version,
                    max_id,
                    to,
                } => {
                    let i = parts[part];
                    let store = &self.list[i].store;
                    match self.step(i, store.reclass(biz, version, max_id, &to)).await {
                        Ok(done) => machine.written(done.as_ref().map(Reclass::of)),
                        Err(e) if machine.thawing() => {
                            tracing::warn!(biz, database = %self.names[i], error = %e, "could not thaw a row: it stays frozen until the change is run again");
                            machine.failed(Some(part));
                        }
                        Err(e) => {
                            db_failed = e.to_string();
                            machine.failed(Some(part));
                        }
                    }
                }
                Need::Witness { part, marks } => {
                    match self.witness(biz, parts[part], &names, &marks).await {
                        Ok(read) => machine.witnesses(&read),
                        Err(e) => {
                            db_failed = e.to_string();
                            machine.failed(Some(part));
                        }
                    }
                }
                Need::Done(outcome) => return (outcome, read_failed, db_failed),
            }
        }
    }

    /// Inserts on database `i` the frozen placeholder `row` where the biz has no row:
    /// its other fields like `template`, a row read, and `begin_id` at its `max_id`.
    async fn insert_placeholder(
        &self,
        i: usize,
        row: Reclass,
        template: BizRow,
    ) -> Result<(), DbError> {
        let placeholder = BizRow {
            begin_id: row.max_id,
            max_id: row.max_id,
            delta: row.delta,
            remainder: row.remainder,
            version: row.version,
            epoch: row.epoch,
            frozen: row.frozen,
            claimed_by: row.claimed_by,
            ..template
        };
        self.step(i, self.list[i].store.insert_biz(&placeholder))
            .await
            .map(|_| ())
    }

    /// On database `i`, records `marks` as witnesses of `biz` (each a part, by its
    /// position in `names`, the move's databases, and the mark of its frozen row), then
    /// reads its witnesses of `biz`. Returns each as the part it names (`None`: not one
    /// of `names`) and its mark.
    async fn witness(
        &self,
        biz: &str,
        i: usize,
        names: &[&str],
        marks: &[(usize, Mark)],
    ) -> Result<Vec<(Option<usize>, Mark)>, DbError> {
        let marks: Vec<crate::store::Witness> = marks
            .iter()
            .map(|&(q, mark)| crate::store::Witness {
                database: names[q].to_owned(),
                biz: biz.to_owned(),
                mark,
            })
            .collect();
        let store = &self.list[i].store;
        let read = match self.step(i, store.witness(&marks)).await {
            Ok(()) => self.step(i, store.witnesses_of(biz)).await,
            Err(e) => Err(e),
        };
        read.map(|read| {
            read.iter()
                .map(|w| (names.iter().position(|n| *n == w.database), w.mark))
                .collect()
        })
    }

    /// What the move of `biz` to `epoch` over `parts` came to (`outcome`), in the words of a refusal; `read_failed`: the
    /// error of a read that ended it, `db_failed`: a database's error that did.
    pub(super) fn moved(
        &self,
        biz: &str,
        parts: &[usize],
        epoch: i64,
        outcome: Outcome,
        read_failed: Option<StoreError>,
        db_failed: &str,
    ) -> Result<Moved, StoreError> {
        match outcome {
            Outcome::Already => Ok(Moved::Already),
            Outcome::Moved { fence, switched } => Ok(Moved::Moved {
                fence,
                rows: switched,
            }),
            Outcome::Stopped(stop) => {
                Err(self.move_refusal(biz, parts, epoch, stop, read_failed, db_failed))
            }
        }
    }

    /// The refusal of the move of `biz` to `epoch` over `parts` that stopped for
    /// `stop`; `read_failed`: the error of a read that ended it, `db_failed`: a
    /// database's error that did.
    pub(super) fn move_refusal(
        &self,
        biz: &str,
        parts: &[usize],
        epoch: i64,
        stop: Stop,
        read_failed: Option<StoreError>,
        db_failed: &str,
    ) -> StoreError {
        let name = |part: usize| self.names[parts[part]].as_str();
        let fail = |reason: Reason, why: String| {
            let hint = match reason {
                // Rows that no run of the command can move as they are.
                Reason::RowInvalid => "fix the biz's rows by hand, then run the command again",
                _ => "run the command again",
            };
            StoreError::from(
                Refusal::new(
                    reason,
                    format!("biz `{biz}`: {why}; stopped; what was done is safe to serve from"),
                )
                .hint(hint),
            )
        };
        match stop {
            Stop::Back { part, back } => self.went_back(biz, parts[part], &back_why(biz, back)),
            Stop::Superseded { by } => Refusal::new(
                Reason::ChangeSuperseded,
                format!(
                    "biz `{biz}`: a later change (layout epoch {by}) moved it: this change to epoch {epoch} was superseded; stopped; what was done is safe to serve from"
                ),
            )
            .hint("run the command again")
            .into(),
            Stop::Invalid(invalid) => fail(Reason::RowInvalid, invalid_why(invalid, name)),
            Stop::RacesLost { rounds } => fail(
                Reason::RacesLost,
                format!("lost {rounds} races in a row against other writers"),
            ),
            Stop::Failed { part: None, .. } => read_failed.unwrap_or_else(|| {
                fail(Reason::DatabaseUnanswered, "a read failed".into())
            }),
            Stop::Failed {
                part: Some(part),
                during,
            } => {
                let (what, after) = failed_during(during);
                fail(
                    Reason::DatabaseUnanswered,
                    format!(
                        "database \"{}\" failed {what} ({db_failed}){after}",
                        name(part)
                    ),
                )
            }
        }
    }

    /// The error of a move that found database `i`'s row of `biz` gone back in time
    /// (`why`): servers fence that database too; nothing is switched.
    pub(super) fn went_back(&self, biz: &str, i: usize, why: &str) -> StoreError {
        let name = &self.names[i];
        Refusal::new(
            Reason::RowBehindWitness,
            format!(
                "biz `{biz}`: database \"{name}\" went back in time while the change ran ({why}); servers fence it; stopped, what was done is safe to serve from"
            ),
        )
        .hint(format!(
            "raise its rows above every issued ID with `segmint db fence {name}`, then run the command again"
        ))
        .into()
    }
}

/// How the row of `biz` went back in time (`back`), in the words of a refusal.
fn back_why(biz: &str, back: Back) -> String {
    match back {
        Back::Gone { version: Some(v) } => format!("its row of biz `{biz}` (version {v}) is gone"),
        Back::Gone { version: None } => format!("its row of biz `{biz}` is gone"),
        Back::Behind { found, known } => evidence::Regression {
            biz: biz.to_owned(),
            found,
            known,
        }
        .to_string(),
    }
}

/// Why rows cannot be moved as they are (`invalid`), in the words of a refusal; `name`
/// gives a part's database name.
fn invalid_why<'a>(invalid: Invalid, name: impl Fn(usize) -> &'a str) -> String {
    match invalid {
        Invalid::Class { why, .. } => why,
        Invalid::NotInEpoch { part, epoch } => format!(
            "its row on \"{0}\" is in layout epoch {epoch}, which does not name \"{0}\"",
            name(part)
        ),
        Invalid::NotWithin {
            part,
            class,
            db,
            epoch,
        } => format!(
            "its row on \"{}\" has class {class}, which is not within the database's class {db} of epoch {epoch}",
            name(part)
        ),
        Invalid::Disagree { first, then } => format!(
            "its rows disagree on its restriction: {} on \"{}\", {} on \"{}\"",
            first.1,
            name(first.0),
            then.1,
            name(then.0)
        ),
        Invalid::NoRow => "no database holds a row".into(),
    }
}

/// What a database that failed `during` a move was doing, and what that left of the
/// rows, in the words of a refusal.
fn failed_during(during: During) -> (&'static str, &'static str) {
    let what = match during {
        During::Inserting => "while inserting a frozen row",
        During::Freezing => "while freezing",
        During::Witnessing => "while recording the frozen rows",
        During::Switching => "while switching",
        During::Reading | During::Verifying => "while reading",
    };
    let after = match during {
        During::Freezing | During::Witnessing | During::Verifying => {
            "; the rows frozen so far were thawed"
        }
        During::Switching => "; the rows not switched stay frozen",
        During::Inserting | During::Reading => "",
    };
    (what, after)
}
