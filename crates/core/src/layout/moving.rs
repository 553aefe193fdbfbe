//! One biz's move to a new layout, as a machine (sans-IO) that the store runs on its
//! engines and the model checker runs on simulated databases.
//!
//! A round reads the biz's row on every database of the change (its *parts*), then:
//!
//! ```text
//!   Read ──settled──────────────────────────────────────────────▶ Already
//!    │ └─a row missing──▶ Insert frozen placeholders ──▶ Read
//!    ▼
//!   Freeze every row (compare-and-set, in part order) ──lost a race──▶ Thaw ──▶ Read
//!    ▼
//!   Witness: on each part, record the others' frozen rows, read its witnesses of the biz
//!    │ └─a frozen row behind its witnesses──▶ Thaw the others ──▶ Stopped (went back)
//!    ▼
//!   Verify: read every row again, each still as frozen
//!    │ ├─one behind or gone──▶ Thaw the others ──▶ Stopped (went back)
//!    │ └─one rewritten (another change)──▶ Thaw ──▶ Read
//!    ▼
//!   Switch each row of the new layout's databases to its class at the fence ──▶ Moved
//! ```
//!
//! The fence is the highest `max_id` of the frozen rows, of what witnesses recorded
//! before the change (`witnessed`) and of every witness read in the round: nothing
//! issued under the old layout lies above it. A database that fails a write ends the
//! move: while it is frozen or witnessing, the rows this round froze are thawed first
//! (the state before the round was safe to serve from); while switching, the rows not
//! switched stay frozen (the next run finishes them). A round that loses a race starts
//! over, at most `attempts` rounds in all.
//!
//! Rows are [`Reclass`] values: what a change reads and writes of a row. Databases are
//! *parts*: positions among the change's databases.

use super::{fence, restriction, settled};
use crate::evidence::Mark;
use crate::rows::Reclass;
use crate::segment::Residue;

/// The layouts a move reads rows against, by part.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Frame {
    /// The epoch moved to.
    pub epoch: i64,
    /// Each part's class in the layout moved to; `None`: not a member (its row is left
    /// frozen).
    pub to: Vec<Option<Residue>>,
    /// Every epoch a row can be in, with each part's class in it.
    pub epochs: Vec<(i64, Vec<Option<Residue>>)>,
}

impl Frame {
    /// The frame of the change to `to` over the databases named `parts`, whose rows may
    /// be in any of `layouts`.
    pub fn new(to: &super::Layout, layouts: &[super::Layout], parts: &[&str]) -> Frame {
        let classes = |l: &super::Layout| parts.iter().map(|n| l.class_of(n)).collect();
        Frame {
            epoch: to.epoch,
            to: classes(to),
            epochs: layouts.iter().map(|l| (l.epoch, classes(l))).collect(),
        }
    }

    fn class_at(&self, epoch: i64, part: usize) -> Option<Residue> {
        self.epochs
            .iter()
            .find(|(e, _)| *e == epoch)
            .and_then(|(_, c)| c.get(part).copied().flatten())
    }
}

/// The safeguards of a move, all on but in the model checker, which takes one out to
/// show that it is needed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Safeguards {
    /// Track what the move saw of each row and read the witnesses of the freeze, then
    /// every row again, before switching: a row restored from a backup while the change
    /// runs is found.
    pub fresh_witnesses: bool,
    /// Stop where a later change stamped a row (`claimed_by`): a superseded change
    /// never writes it again.
    pub claimed_by: bool,
}

impl Safeguards {
    pub const ALL: Safeguards = Safeguards {
        fresh_witnesses: true,
        claimed_by: true,
    };
}

/// A read or write the move needs next.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Need {
    /// Read the biz's row on every part, at once; answer with [`Move::read`].
    Read,
    /// Insert `row`, a frozen placeholder, on `part` where the biz has no row (its
    /// other fields like the row read on part `like`, `begin_id` at its `max_id`);
    /// answer with [`Move::inserted`].
    Insert {
        part: usize,
        row: Reclass,
        like: usize,
    },
    /// Compare-and-set the row on `part` from `version` and `max_id` to `to`; answer
    /// with [`Move::written`].
    Write {
        part: usize,
        version: i64,
        max_id: i64,
        to: Reclass,
    },
    /// On `part`, record `marks` (part, mark of its frozen row) as witnesses, then read
    /// its witnesses of the biz; answer with [`Move::witnesses`].
    Witness {
        part: usize,
        marks: Vec<(usize, Mark)>,
    },
    /// The move ended.
    Done(Outcome),
}

/// How a move ended.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The biz was already in the layout: nothing written.
    Already,
    /// Moved: `switched` rows now issue from the new classes above `fence`.
    Moved {
        fence: i64,
        switched: usize,
    },
    Stopped(Stop),
}

/// Why a move stopped. What it did so far is safe to serve from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Stop {
    /// The row on `part` went back in time while the change ran.
    Back { part: usize, back: Back },
    /// A later change (layout epoch `by`) moved the biz.
    Superseded { by: i64 },
    /// The rows cannot be moved as they are.
    Invalid(Invalid),
    /// Every round lost a race against other writers.
    RacesLost { rounds: u32 },
    /// A database failed (on `part`, or one of a read of every part) during `during`.
    Failed { part: Option<usize>, during: During },
}

/// How a row was found gone back in time.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Back {
    /// The row is gone; `version`: the one seen before, if known.
    Gone { version: Option<i64> },
    /// Found at `found` (version, `max_id`), where `known` was seen or witnessed.
    Behind { found: (i64, i64), known: Mark },
}

/// Why rows cannot be moved as they are.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Invalid {
    /// The row on `part` holds no valid class, or its restriction does not fit the new
    /// class: `why`.
    Class { part: usize, why: String },
    /// The row on `part` is in layout `epoch`, which does not name its database.
    NotInEpoch { part: usize, epoch: i64 },
    /// The row on `part` has `class`, not within its database's class `db` at `epoch`.
    NotWithin {
        part: usize,
        class: Residue,
        db: Residue,
        epoch: i64,
    },
    /// The rows disagree on the biz's restriction.
    Disagree {
        first: (usize, Residue),
        then: (usize, Residue),
    },
    /// No part holds a row.
    NoRow,
}

/// The operation of the round's writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum During {
    Reading,
    Inserting,
    Freezing,
    Witnessing,
    Verifying,
    Switching,
}

/// Where a move is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Phase {
    Read,
    /// Inserting placeholders `rows[k..]`.
    Place {
        k: usize,
        rows: Vec<(usize, Reclass)>,
        like: usize,
    },
    /// Freezing `rows[k]`; `frozen` holds the rows as frozen so far.
    Freeze {
        k: usize,
        round: Round,
    },
    /// On part `k`, recording the frozen rows and reading witnesses into `fresh`.
    Witness {
        k: usize,
        round: Round,
        fresh: Vec<Option<Mark>>,
        fence: (i64, i64),
    },
    /// Reading every row again.
    Verify {
        round: Round,
        fence: i64,
    },
    /// Thawing what this round froze, from `k` on; then `then`, or a new round.
    Thaw {
        k: usize,
        round: Round,
        then: Option<Stop>,
    },
    /// Switching part `k` and on.
    Switch {
        k: usize,
        round: Round,
        fence: i64,
        switched: usize,
    },
    Ended(Outcome),
}

/// One round's rows: as read (`rows`), as frozen by this round (`frozen`, a prefix),
/// and the class each part gets (`wanted`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Round {
    rows: Vec<Reclass>,
    frozen: Vec<Reclass>,
    wanted: Vec<Option<Residue>>,
}

/// One biz's move to a layout (see the module's documentation).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Move {
    frame: Frame,
    /// What witnesses recorded of the biz's rows before the change: `(max_id, version)`.
    witnessed: Vec<(i64, i64)>,
    /// What the move saw of each part's row, its own writes included.
    seen: Vec<Option<Mark>>,
    /// Rounds left, and in all.
    left: u32,
    rounds: u32,
    safeguards: Safeguards,
    phase: Phase,
}

impl Move {
    /// A move of a biz to `frame.epoch`, with what witnesses recorded of its rows before
    /// (`witnessed`: `(max_id, version)`), in at most `rounds` rounds.
    pub fn new(frame: Frame, witnessed: Vec<(i64, i64)>, rounds: u32) -> Move {
        let parts = frame.to.len();
        let mut m = Move {
            frame,
            witnessed,
            seen: vec![None; parts],
            left: rounds,
            rounds,
            safeguards: Safeguards::ALL,
            phase: Phase::Read,
        };
        m.enter(Phase::Read);
        m
    }

    /// The move with `safeguards` (the model checker's).
    #[must_use]
    pub fn with_safeguards(mut self, safeguards: Safeguards) -> Move {
        self.safeguards = safeguards;
        self
    }

    /// The parts of the move.
    pub fn parts(&self) -> usize {
        self.frame.to.len()
    }

    /// The epoch moved to.
    pub fn epoch(&self) -> i64 {
        self.frame.epoch
    }

    /// What the move needs next.
    pub fn need(&self) -> Need {
        match &self.phase {
            Phase::Read | Phase::Verify { .. } => Need::Read,
            Phase::Place { k, rows, like } => Need::Insert {
                part: rows[*k].0,
                row: rows[*k].1,
                like: *like,
            },
            Phase::Freeze { k, round } => {
                let r = round.rows[*k];
                Need::Write {
                    part: *k,
                    version: r.version,
                    max_id: r.max_id,
                    to: r.frozen_by(true, self.frame.epoch),
                }
            }
            Phase::Witness { k, round, .. } => Need::Witness {
                part: *k,
                marks: round
                    .frozen
                    .iter()
                    .enumerate()
                    .filter(|(q, _)| q != k)
                    .map(|(q, r)| (q, r.mark()))
                    .collect(),
            },
            Phase::Thaw { k, round, .. } => {
                let now = round.frozen[*k];
                Need::Write {
                    part: *k,
                    version: now.version,
                    max_id: now.max_id,
                    to: now.frozen_by(false, now.claimed_by),
                }
            }
            Phase::Switch {
                k, round, fence, ..
            } => {
                let row = round.frozen[*k];
                let class = round.wanted[*k].expect("a part of the new layout");
                Need::Write {
                    part: *k,
                    version: row.version,
                    max_id: row.max_id,
                    to: Reclass {
                        version: row.version + 1,
                        max_id: *fence,
                        delta: class.delta(),
                        remainder: class.remainder(),
                        epoch: self.frame.epoch,
                        frozen: false,
                        claimed_by: self.frame.epoch,
                    },
                }
            }
            Phase::Ended(o) => Need::Done(o.clone()),
        }
    }

    /// Whether the rows this round froze are being thawed.
    pub fn thawing(&self) -> bool {
        matches!(self.phase, Phase::Thaw { .. })
    }

    /// Whether the read needed is the one after the witnesses (for a trace).
    pub fn verifying(&self) -> bool {
        matches!(self.phase, Phase::Verify { .. })
    }

    /// The answer to [`Need::Read`]: the biz's row on every part.
    pub fn read(&mut self, rows: &[Option<Reclass>]) {
        assert_eq!(rows.len(), self.parts(), "a row (or none) per part");
        let next = match std::mem::replace(&mut self.phase, Phase::Read) {
            Phase::Read => self.decide(rows),
            Phase::Verify { round, fence } => verify(round, fence, rows),
            other => panic!("a read answered in {other:?}"),
        };
        self.enter(next);
    }

    /// The answer to [`Need::Insert`].
    pub fn inserted(&mut self) {
        let next = match std::mem::replace(&mut self.phase, Phase::Read) {
            Phase::Place { k, rows, like } if k + 1 < rows.len() => Phase::Place {
                k: k + 1,
                rows,
                like,
            },
            Phase::Place { .. } => Phase::Read,
            other => panic!("an insert answered in {other:?}"),
        };
        self.enter(next);
    }

    /// The answer to [`Need::Write`]: the row as written, or `None` when the
    /// compare-and-set found it changed.
    pub fn written(&mut self, done: Option<Reclass>) {
        match std::mem::replace(&mut self.phase, Phase::Read) {
            Phase::Freeze { k, mut round } => {
                let Some(done) = done else {
                    // A reservation (or another change) got in: give back, read again.
                    return self.enter(thaw(0, round, None));
                };
                assert!(
                    done.frozen && done.claimed_by == self.frame.epoch,
                    "a row frozen by this change"
                );
                if self.safeguards.fresh_witnesses {
                    learn(&mut self.seen[k], done.mark());
                }
                round.frozen.push(done);
                self.phase = if k + 1 < round.rows.len() {
                    Phase::Freeze { k: k + 1, round }
                } else if self.safeguards.fresh_witnesses {
                    Phase::Witness {
                        k: 0,
                        fresh: vec![None; round.rows.len()],
                        round,
                        fence: (0, 0),
                    }
                } else {
                    let (fence, _) = self.fence(&round.frozen, None);
                    switch(0, round, fence, 0)
                };
            }
            Phase::Thaw { k, round, then } => {
                // Thawed or not (a thaw that fails leaves the row frozen, until the
                // change is run again): the next.
                self.enter(thaw(k + 1, round, then));
            }
            Phase::Switch {
                k,
                round,
                fence,
                switched,
            } => match done {
                Some(done) => {
                    assert!(
                        done.max_id == fence && !done.frozen && done.epoch == self.frame.epoch,
                        "a row switched at the fence"
                    );
                    self.phase = switch(k + 1, round, fence, switched + 1);
                }
                // Only another layout change writes frozen rows: start over.
                None => self.enter(Phase::Read),
            },
            other => panic!("a write answered in {other:?}"),
        }
    }

    /// The answer to [`Need::Witness`]: the witnesses of the biz the part holds, each
    /// with the part it is of (`None`: a database outside the change).
    pub fn witnesses(&mut self, read: &[(Option<usize>, Mark)]) {
        let Phase::Witness {
            k,
            round,
            mut fresh,
            fence: mut outside,
        } = std::mem::replace(&mut self.phase, Phase::Read)
        else {
            panic!("witnesses answered out of turn");
        };
        for (part, mark) in read {
            if let Some(q) = part {
                learn(&mut fresh[*q], *mark);
            }
            outside = (
                outside.0.max(mark.high_id.max(mark.max_id)),
                outside.1.max(mark.version),
            );
        }
        if k + 1 < round.rows.len() {
            self.phase = Phase::Witness {
                k: k + 1,
                round,
                fresh,
                fence: outside,
            };
            return;
        }
        // Against the rows as frozen: a witness ahead of one is a reservation the row
        // lost.
        if let Some((k, known)) = round
            .frozen
            .iter()
            .zip(&fresh)
            .enumerate()
            .find_map(|(k, (r, w))| w.filter(|w| r.is_behind(w)).map(|w| (k, w)))
        {
            let found = &round.frozen[k];
            let back = Back::Behind {
                found: (found.version, found.max_id),
                known,
            };
            return self.enter(thaw_but(k, round, Stop::Back { part: k, back }));
        }
        let (fence, _) = self.fence(&round.frozen, Some(outside));
        self.phase = Phase::Verify { round, fence };
    }

    /// The answer to any need when its database (or one of a read's) failed: the move
    /// ends, thawing first what this round froze (but while switching).
    pub fn failed(&mut self, part: Option<usize>) {
        let stop = |during| Stop::Failed { part, during };
        let next = match std::mem::replace(&mut self.phase, Phase::Read) {
            Phase::Read => Phase::Ended(Outcome::Stopped(stop(During::Reading))),
            Phase::Place { .. } => Phase::Ended(Outcome::Stopped(stop(During::Inserting))),
            Phase::Freeze { round, .. } => thaw(0, round, Some(stop(During::Freezing))),
            Phase::Witness { round, .. } => thaw(0, round, Some(stop(During::Witnessing))),
            Phase::Verify { round, .. } => thaw(0, round, Some(stop(During::Verifying))),
            Phase::Thaw { k, round, then } => thaw(k + 1, round, then),
            Phase::Switch { .. } => Phase::Ended(Outcome::Stopped(stop(During::Switching))),
            ended @ Phase::Ended(_) => ended,
        };
        self.enter(next);
    }

    /// The first read of a round: decides what the round does.
    fn decide(&mut self, rows: &[Option<Reclass>]) -> Phase {
        let stop = |s| Phase::Ended(Outcome::Stopped(s));
        if self.safeguards.fresh_witnesses
            && let Some(back) = self.gone_back(rows)
        {
            return stop(back);
        }
        if self.safeguards.claimed_by
            && let Some(r) = rows
                .iter()
                .flatten()
                .find(|r| r.claimed_by > self.frame.epoch)
        {
            return stop(Stop::Superseded { by: r.claimed_by });
        }
        let wanted = match self.wanted(rows) {
            Ok(w) => w,
            Err(e) => return stop(Stop::Invalid(e)),
        };
        if settled(rows, &wanted, self.frame.epoch) {
            return Phase::Ended(Outcome::Already);
        }
        let (fence, newest) = fence(
            rows.iter()
                .flatten()
                .map(|r| (r.max_id, r.version))
                .chain(self.witnessed.iter().copied()),
        );
        // A part without a row gets a frozen placeholder first: a change superseded
        // meanwhile can then no longer insert a live row there.
        if rows.iter().any(Option::is_none) {
            return match self.place(rows, &wanted, (fence, newest)) {
                Ok(place) => place,
                Err(e) => stop(Stop::Invalid(e)),
            };
        }
        Phase::Freeze {
            k: 0,
            round: Round {
                rows: rows.iter().flatten().copied().collect(),
                frozen: Vec::new(),
                wanted,
            },
        }
    }

    /// Checks the rows of a round's first read against what the move saw of each
    /// part's row, learning each row up to the first found gone back in time. Returns
    /// the stop for that row, if any.
    fn gone_back(&mut self, rows: &[Option<Reclass>]) -> Option<Stop> {
        for (k, row) in rows.iter().enumerate() {
            let back = match (self.seen[k], row) {
                (Some(m), Some(r)) if r.is_behind(&m) => Some(Back::Behind {
                    found: (r.version, r.max_id),
                    known: m,
                }),
                (Some(m), None) => Some(Back::Gone {
                    version: Some(m.version),
                }),
                _ => None,
            };
            if let Some(back) = back {
                return Some(Stop::Back { part: k, back });
            }
            if let Some(r) = row {
                learn(&mut self.seen[k], r.mark());
            }
        }
        None
    }

    /// The class each part gets in the layout moved to (`None`: not a member), its
    /// class there restricted as the biz's rows are ([`Move::restriction`]).
    fn wanted(&self, rows: &[Option<Reclass>]) -> Result<Vec<Option<Residue>>, Invalid> {
        let within = self.restriction(rows)?;
        let mut wanted = Vec::with_capacity(rows.len());
        for (part, to) in self.frame.to.iter().enumerate() {
            match to.map(|c| c.restrict(within)) {
                Some(Ok(c)) => wanted.push(Some(c)),
                Some(Err(e)) => {
                    let why = e.to_string();
                    return Err(Invalid::Class { part, why });
                }
                None => wanted.push(None),
            }
        }
        Ok(wanted)
    }

    /// The phase that inserts a frozen placeholder on every part of `rows` without a
    /// row: in its class of `wanted` (a part that is not a member: the class of the
    /// first row read, which its other fields are modelled on), at `fence` and one
    /// version above `newest`.
    fn place(
        &self,
        rows: &[Option<Reclass>],
        wanted: &[Option<Residue>],
        (fence, newest): (i64, i64),
    ) -> Result<Phase, Invalid> {
        let Some(like) = rows.iter().position(Option::is_some) else {
            return Err(Invalid::NoRow);
        };
        let template = rows[like].expect("a row");
        let mut place = Vec::new();
        for (part, want) in wanted.iter().enumerate() {
            if rows[part].is_some() {
                continue;
            }
            let class = match want.map_or_else(|| template.class(), Ok) {
                Ok(c) => c,
                Err(e) => {
                    let why = e.to_string();
                    return Err(Invalid::Class { part: like, why });
                }
            };
            place.push((
                part,
                Reclass {
                    version: newest + 1,
                    max_id: fence,
                    delta: class.delta(),
                    remainder: class.remainder(),
                    epoch: self.frame.epoch,
                    frozen: true,
                    claimed_by: self.frame.epoch,
                },
            ));
        }
        Ok(Phase::Place {
            k: 0,
            rows: place,
            like,
        })
    }

    /// The fence over `frozen`, the witnesses from before the change, and `fresh` (the
    /// round's witnesses).
    fn fence(&self, frozen: &[Reclass], fresh: Option<(i64, i64)>) -> (i64, i64) {
        let fenced = fence(
            frozen
                .iter()
                .map(|r| (r.max_id, r.version))
                .chain(self.witnessed.iter().copied())
                .chain(fresh),
        );
        assert!(
            frozen.iter().all(|r| r.max_id <= fenced.0)
                && self.witnessed.iter().all(|w| w.0 <= fenced.0),
            "a fence at or above every frozen row and witness"
        );
        fenced
    }

    /// The biz's restriction (odd-only: `1 mod 2`) from its rows' classes and their
    /// parts' classes at the rows' epochs. Every row must agree; a frozen row the
    /// layouts cannot explain (a placeholder, a row of a removed database) is left out.
    fn restriction(&self, rows: &[Option<Reclass>]) -> Result<Residue, Invalid> {
        let mut found: Option<(usize, Residue)> = None;
        for (part, row) in rows.iter().enumerate() {
            let Some(r) = row else { continue };
            let class = r.class().map_err(|e| Invalid::Class {
                part,
                why: e.to_string(),
            })?;
            let within = match self.frame.class_at(r.epoch, part) {
                None => Err(Invalid::NotInEpoch {
                    part,
                    epoch: r.epoch,
                }),
                Some(db) => restriction(class, db).ok_or(Invalid::NotWithin {
                    part,
                    class,
                    db,
                    epoch: r.epoch,
                }),
            };
            let within = match within {
                Ok(w) => w,
                Err(_) if r.frozen => continue,
                Err(e) => return Err(e),
            };
            match found {
                Some(first) if first.1 != within => {
                    return Err(Invalid::Disagree {
                        first,
                        then: (part, within),
                    });
                }
                _ => found = Some((part, within)),
            }
        }
        found.map(|f| f.1).ok_or(Invalid::NoRow)
    }

    /// Enters `phase`; a read of a new round counts a round, or ends the move when
    /// every round was used.
    fn enter(&mut self, phase: Phase) {
        self.phase = phase;
        if self.phase == Phase::Read {
            if self.left == 0 {
                self.phase = Phase::Ended(Outcome::Stopped(Stop::RacesLost {
                    rounds: self.rounds,
                }));
            } else {
                self.left -= 1;
            }
        }
    }
}

/// The read after the witnesses: every row still as frozen, else the round ends.
fn verify(round: Round, fence: i64, again: &[Option<Reclass>]) -> Phase {
    for (k, (was, is)) in round.frozen.iter().zip(again).enumerate() {
        let back = match is {
            None => Some(Back::Gone { version: None }),
            Some(is) if is.is_behind(&was.mark()) => Some(Back::Behind {
                found: (is.version, is.max_id),
                known: was.mark(),
            }),
            Some(_) => None,
        };
        if let Some(back) = back {
            return thaw_but(k, round, Stop::Back { part: k, back });
        }
    }
    if round
        .frozen
        .iter()
        .zip(again)
        .any(|(was, is)| is.is_some_and(|is| is.version != was.version))
    {
        // Another change wrote a frozen row since: read again (a later one stops this
        // change).
        return thaw(0, round, None);
    }
    switch(0, round, fence, 0)
}

/// Switches the parts of the new layout from `k` on; moved when none is left.
fn switch(k: usize, round: Round, fence: i64, switched: usize) -> Phase {
    match (k..round.wanted.len()).find(|&j| round.wanted[j].is_some()) {
        Some(k) => Phase::Switch {
            k,
            round,
            fence,
            switched,
        },
        None => Phase::Ended(Outcome::Moved { fence, switched }),
    }
}

/// Thaws what `round` froze from `k` on (a row frozen now that was not before); then
/// `then`, or a new round.
fn thaw(k: usize, round: Round, then: Option<Stop>) -> Phase {
    match (k..round.frozen.len()).find(|&j| !round.rows[j].frozen && round.frozen[j].frozen) {
        Some(k) => Phase::Thaw { k, round, then },
        None => then.map_or(Phase::Read, |s| Phase::Ended(Outcome::Stopped(s))),
    }
}

/// Thaws what `round` froze but part `k`'s row, then stops for `stop`: the row behind
/// stays frozen (thawed, its version bump would pass it off as caught up).
fn thaw_but(k: usize, mut round: Round, stop: Stop) -> Phase {
    round.rows[k].frozen = true;
    thaw(0, round, Some(stop))
}

/// Joins `m` into what is known of a row.
fn learn(known: &mut Option<Mark>, m: Mark) {
    *known = Some(known.map_or(m, |k| k.join(m)));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(d: i64, r: i64) -> Residue {
        Residue::new(d, r).expect("a class")
    }

    fn row(max_id: i64, version: i64, c: Residue) -> Reclass {
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

    /// Two databases (even, odd) at epoch 0; the move takes the odd one out (epoch 1:
    /// the even one alone, all IDs).
    fn remove_odd() -> Move {
        let frame = Frame {
            epoch: 1,
            to: vec![Some(class(1, 0)), None],
            epochs: vec![
                (0, vec![Some(class(2, 0)), Some(class(2, 1))]),
                (1, vec![Some(class(1, 0)), None]),
            ],
        };
        Move::new(frame, vec![(40, 3)], 3)
    }

    /// Databases: their rows, and the witnesses each holds (by part).
    struct Dbs {
        rows: Vec<Option<Reclass>>,
        witness: Vec<Vec<Option<Mark>>>,
    }

    impl Dbs {
        fn new(rows: Vec<Option<Reclass>>) -> Dbs {
            let n = rows.len();
            Dbs {
                rows,
                witness: vec![vec![None; n]; n],
            }
        }

        /// Carries out one need; `before` may change the databases first.
        fn step(&mut self, m: &mut Move) -> Need {
            let need = m.need();
            match need.clone() {
                Need::Read => m.read(&self.rows),
                Need::Insert { part, row, .. } => {
                    self.rows[part].get_or_insert(row);
                    m.inserted();
                }
                Need::Write {
                    part,
                    version,
                    max_id,
                    to,
                } => {
                    let done = match &mut self.rows[part] {
                        Some(r) if r.version == version && r.max_id == max_id => {
                            *r = to;
                            Some(to)
                        }
                        _ => None,
                    };
                    m.written(done);
                }
                Need::Witness { part, marks } => {
                    for (q, mark) in marks {
                        learn(&mut self.witness[part][q], mark);
                    }
                    let read: Vec<_> = self.witness[part]
                        .iter()
                        .enumerate()
                        .filter_map(|(q, w)| w.map(|w| (Some(q), w)))
                        .collect();
                    m.witnesses(&read);
                }
                Need::Done(_) => panic!("stepped after the end"),
            }
            need
        }

        fn run(&mut self, m: &mut Move) -> Outcome {
            for _ in 0..100 {
                if let Need::Done(o) = m.need() {
                    return o;
                }
                self.step(m);
            }
            panic!("a move of 100 steps");
        }
    }

    #[test]
    fn freezes_witnesses_verifies_and_switches_at_the_fence() {
        let mut dbs = Dbs::new(vec![
            Some(row(20, 5, class(2, 0))),
            Some(row(31, 4, class(2, 1))),
        ]);
        let mut m = remove_odd();
        // The fence lies above the highest frozen row and what witnesses recorded.
        assert_eq!(
            dbs.run(&mut m),
            Outcome::Moved {
                fence: 40,
                switched: 1
            }
        );
        let even = dbs.rows[0].expect("a row");
        assert_eq!(
            (even.max_id, even.class(), even.epoch),
            (40, Ok(class(1, 0)), 1)
        );
        assert!(!even.frozen);
        let odd = dbs.rows[1].expect("a row");
        assert!(
            odd.frozen && odd.claimed_by == 1,
            "the row out of the layout stays frozen"
        );
        // Each database witnessed the other's frozen row.
        assert!(dbs.witness[0][1].is_some() && dbs.witness[1][0].is_some());
        // Run again: nothing to do.
        assert_eq!(dbs.run(&mut remove_odd()), Outcome::Already);
    }

    #[test]
    fn a_missing_row_gets_a_frozen_placeholder_first() {
        let mut dbs = Dbs::new(vec![None, Some(row(31, 4, class(2, 1)))]);
        let mut m = remove_odd();
        assert_eq!(dbs.step(&mut m), Need::Read);
        let Need::Insert {
            part: 0,
            row,
            like: 1,
        } = m.need()
        else {
            panic!("a placeholder on the even database: {:?}", m.need());
        };
        assert!(row.frozen && row.max_id == 40 && row.version == 5);
        assert!(matches!(dbs.run(&mut m), Outcome::Moved { fence: 40, .. }));
    }

    #[test]
    fn a_lost_race_thaws_what_the_round_froze_and_reads_again() {
        let mut dbs = Dbs::new(vec![
            Some(row(20, 5, class(2, 0))),
            Some(row(31, 4, class(2, 1))),
        ]);
        let mut m = remove_odd();
        dbs.step(&mut m); // read
        dbs.step(&mut m); // freeze the even row
        // A reservation on the odd one gets in before its freeze.
        dbs.rows[1] = Some(row(51, 5, class(2, 1)));
        dbs.step(&mut m); // the freeze loses
        assert!(m.thawing());
        dbs.step(&mut m); // thaw
        assert!(!dbs.rows[0].expect("a row").frozen, "given back");
        assert_eq!(m.need(), Need::Read);
        assert_eq!(
            dbs.run(&mut m),
            Outcome::Moved {
                fence: 51,
                switched: 1
            }
        );
    }

    #[test]
    fn a_row_restored_behind_its_witnesses_stops_the_move_and_stays_frozen() {
        let mut dbs = Dbs::new(vec![
            Some(row(20, 5, class(2, 0))),
            Some(row(31, 4, class(2, 1))),
        ]);
        // The even database witnessed the odd row further on than it is.
        dbs.witness[0][1] = Some(Mark {
            version: 7,
            max_id: 61,
            high_id: 61,
        });
        let mut m = remove_odd();
        let Outcome::Stopped(Stop::Back { part: 1, .. }) = dbs.run(&mut m) else {
            panic!("stopped on the odd row: {:?}", m.need());
        };
        assert!(!dbs.rows[0].expect("a row").frozen, "the other is thawed");
        assert!(
            dbs.rows[1].expect("a row").frozen,
            "the row behind stays frozen"
        );
    }

    #[test]
    fn a_failed_freeze_thaws_and_ends_and_every_round_may_be_lost() {
        let mut dbs = Dbs::new(vec![
            Some(row(20, 5, class(2, 0))),
            Some(row(31, 4, class(2, 1))),
        ]);
        let mut m = remove_odd();
        dbs.step(&mut m);
        dbs.step(&mut m);
        m.failed(Some(1));
        dbs.step(&mut m); // thaw the even row
        assert_eq!(
            m.need(),
            Need::Done(Outcome::Stopped(Stop::Failed {
                part: Some(1),
                during: During::Freezing
            }))
        );
        assert!(!dbs.rows[0].expect("a row").frozen);

        let mut m = remove_odd();
        for _ in 0..3 {
            dbs.step(&mut m); // read
            dbs.step(&mut m); // freeze the even row
            let odd = dbs.rows[1].expect("a row");
            dbs.rows[1] = Some(row(odd.max_id + 10, odd.version + 1, class(2, 1)));
            dbs.step(&mut m); // lost
            dbs.step(&mut m); // thawed
        }
        assert_eq!(
            m.need(),
            Need::Done(Outcome::Stopped(Stop::RacesLost { rounds: 3 }))
        );
    }

    #[test]
    fn a_row_stamped_by_a_later_change_stops_a_superseded_one() {
        let mut later = row(20, 5, class(2, 0));
        later.claimed_by = 2;
        let mut dbs = Dbs::new(vec![Some(later), Some(row(31, 4, class(2, 1)))]);
        assert_eq!(
            dbs.run(&mut remove_odd()),
            Outcome::Stopped(Stop::Superseded { by: 2 })
        );
    }
}
