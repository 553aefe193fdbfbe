//! A layout change once decided ([`plan`](super::plan)), as a machine (sans-IO) that the
//! store runs on its engines (`segmint db add/remove`) and the model checker runs on
//! simulated databases:
//!
//! ```text
//!   [no layout stored: claim the layout before it (epoch 0) on every part]
//!   finishing a change cut off: put it (moving) on every part
//!   else: claim the new epoch on every part, in claim order ──lost──▶ Stopped
//!         [superseding a change cut off: mark it superseded on every part]
//!   copy the catalog (shapes, tokens) to the members
//!   read the bizs and witnesses of every part
//!   move each biz ([`Move`]) ──stopped──▶ Stopped
//!   read the lease rows of every part
//!   block the worker IDs leaving each part   ┐ fenced by the epoch: a change
//!   free the worker IDs arriving on each part ┘ superseded meanwhile writes none ──▶ Stopped
//!   read the sequence bizs, carry each section ([`Carry`]) ──unavailable──▶ Stopped
//!   put the layout done on every part ──▶ Done
//! ```
//!
//! A database that fails a step ends the change where it is (what was done is safe to
//! serve from, and running the command again finishes it): the machine is dropped, but
//! for a biz's move, which thaws first ([`Move::failed`]).

use std::collections::BTreeMap;

use super::moving::{Outcome as MoveOutcome, Safeguards as MoveSafeguards, Stop as MoveStop};
use super::{Frame, Layout, LayoutState, Move, claim_order};
use crate::lease::Timing;
use crate::rows::{LeaseRow, LeaseSet, MOVED_HOLDER};
use crate::sequence::carry::{Carry, Carrying, Need as CarryNeed, Outcome as CarryOutcome};

/// What a change was decided to do, over its databases (`parts`, by name).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Decision {
    /// Every database the change writes: those of the target and every one that may
    /// hold live rows or worker IDs ([`required`](super::required)).
    pub parts: Vec<String>,
    /// The layout in force (or the configured classes, when none is stored).
    pub from: Layout,
    pub to: Layout,
    /// A change cut off before, replaced by this one.
    pub supersede: Option<Layout>,
    /// `to` is that change cut off, finished now.
    pub finishing: bool,
    /// The layouts read, merged.
    pub layouts: Vec<Layout>,
}

/// The safeguards of a change, all on but in the model checker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Safeguards {
    /// Claim the epoch by insert-if-absent (off: write it over whatever is there).
    pub claim: bool,
    /// Write lease rows only while the epoch is moving on the database.
    pub lease_fence: bool,
    /// A biz's move's.
    pub moves: MoveSafeguards,
    /// The sections' carry's.
    pub carry: Carrying,
}

impl Safeguards {
    pub const ALL: Safeguards = Safeguards {
        claim: true,
        lease_fence: true,
        moves: MoveSafeguards::ALL,
        carry: Carrying::ALL,
    };
}

/// A read or write the change needs next, on the part at this index of
/// [`Decision::parts`].
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Need {
    /// Insert `layout`'s row where the epoch has none (its result does not matter:
    /// the claims after it decide); answer with [`Change::claimed`].
    ClaimBefore {
        part: usize,
        layout: Layout,
    },
    /// Claim `layout`'s epoch: insert its row where the epoch has none (`exclusive`;
    /// else write it over whatever is there); answer with [`Change::claimed`].
    Claim {
        part: usize,
        layout: Layout,
        exclusive: bool,
    },
    /// Write `layout`'s row (a change cut off, finished or superseded; the change
    /// done); answer with [`Change::put`].
    Put {
        part: usize,
        layout: Layout,
    },
    /// Copy shape and token rows to the members that lack them; answer with
    /// [`Change::copied`].
    CopyCatalog,
    /// Read the bizs and the witnesses of every part; answer with
    /// [`Change::gathered`].
    Gather,
    /// Carry out the steps of the move of `biz` ([`Change::mover`]) until it ends;
    /// answer with [`Change::moved`].
    Move {
        biz: String,
    },
    /// Read the lease rows of every part; answer with [`Change::leases`].
    ReadLeases,
    /// Set these lease rows on `part` in one transaction, only while the epoch is
    /// moving there (`fenced`); answer with [`Change::set`].
    SetLeases {
        part: usize,
        rows: Vec<LeaseSet>,
        fenced: bool,
    },
    /// Read the sequence bizs (name and sections) the parts know; answer with
    /// [`Change::sequences`].
    Sequences,
    /// Carry out the steps of the carries of every section of `biz`
    /// ([`Change::carries`]), on the parts of the layout moved from (`from`, `None`
    /// for a member that is not a part) and moved to (`to`); answer with
    /// [`Change::carried`].
    Carry {
        biz: String,
        from: Vec<Option<usize>>,
        to: Vec<Option<usize>>,
    },
    Done(Outcome),
}

/// How a change ended.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The layout is done: every biz moved (`moved` of `bizs`), `blocked` worker IDs
    /// blocked where they left and `freed` freed where they arrived, `carried`
    /// sequence sections carried.
    Done {
        layout: Layout,
        bizs: usize,
        moved: usize,
        blocked: usize,
        freed: usize,
        carried: usize,
    },
    Stopped(Stop),
}

/// Why a change stopped.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Stop {
    /// Another change claimed the epoch first on `part`: on the first database of the
    /// claim order (`first`, nothing changed), or after it.
    Claimed { part: usize, first: bool },
    /// The epoch is no longer moving on `part`: a later change superseded this one.
    Superseded { part: usize },
    /// The move of `biz` stopped.
    Move { biz: String, stop: MoveStop },
    /// A section of sequence biz `biz` could not be carried.
    Carry {
        biz: String,
        section: u32,
        outcome: CarryOutcome,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Phase {
    ClaimBefore { k: usize },
    Finish { k: usize },
    Claim { k: usize },
    Supersede { k: usize },
    Copy,
    Gather,
    Move { k: usize, mover: Box<Move> },
    Leases,
    Block { k: usize },
    Free { k: usize },
    Sequences,
    Carry { k: usize, carries: Vec<Carry> },
    Done { k: usize },
    Ended(Outcome),
}

/// One layout change (see the module's documentation).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Change {
    decision: Decision,
    /// The parts in claim order.
    order: Vec<usize>,
    /// Every epoch a row can be in: those read, the one moved from and the target.
    epochs: Vec<Layout>,
    /// Worker IDs there are (0 to `worker_ids - 1`).
    worker_ids: u16,
    /// Rounds of each biz's move.
    rounds: u32,
    /// The servers' leases of sequence sections, which a carry waits out.
    leases_of_sections: Timing,
    safeguards: Safeguards,
    /// The bizs to move, with what witnesses recorded of their rows:
    /// `(max_id, version)`.
    bizs: BTreeMap<String, Vec<(i64, i64)>>,
    moved: usize,
    /// The lease rows read, by part.
    leases: Vec<Vec<LeaseRow>>,
    /// Per worker ID, the highest `(last_ms, bound_ms)` of any holder found.
    floors: Vec<(i64, i64)>,
    blocked: usize,
    freed: usize,
    /// The sequence bizs and their sections.
    sequences: Vec<(String, u32)>,
    carried: usize,
    phase: Phase,
}

impl Change {
    /// The change `decision` (a [`Plan::Change`](super::Plan::Change) and its
    /// databases), with `worker_ids` worker IDs and `rounds` rounds per biz, carrying
    /// sequence sections past the servers' leases of `sequences`.
    pub fn new(decision: Decision, (worker_ids, rounds): (u16, u32), sequences: Timing) -> Change {
        let prev = decision.layouts.last().unwrap_or(&decision.from);
        let order = claim_order(prev, &decision.parts)
            .iter()
            .filter_map(|n| decision.parts.iter().position(|p| p == n))
            .collect();
        let mut epochs = decision.layouts.clone();
        for l in [&decision.from, &decision.to] {
            if !epochs.iter().any(|k| k.epoch == l.epoch) {
                epochs.push(l.clone());
            }
        }
        let phase = if decision.layouts.is_empty() {
            Phase::ClaimBefore { k: 0 }
        } else if decision.finishing {
            Phase::Finish { k: 0 }
        } else {
            Phase::Claim { k: 0 }
        };
        Change {
            decision,
            order,
            epochs,
            worker_ids,
            rounds,
            leases_of_sections: sequences,
            safeguards: Safeguards::ALL,
            bizs: BTreeMap::new(),
            moved: 0,
            leases: Vec::new(),
            floors: vec![(0, 0); usize::from(worker_ids)],
            blocked: 0,
            freed: 0,
            sequences: Vec::new(),
            carried: 0,
            phase,
        }
    }

    /// The change with `safeguards` (the model checker's).
    #[must_use]
    pub fn with_safeguards(mut self, safeguards: Safeguards) -> Change {
        self.safeguards = safeguards;
        self
    }

    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// The bizs gathered, and how many of them were moved so far.
    pub fn moves(&self) -> (usize, usize) {
        (self.bizs.len(), self.moved)
    }

    /// The worker IDs blocked and freed so far.
    pub fn worker_ids(&self) -> (usize, usize) {
        (self.blocked, self.freed)
    }

    /// The parts in claim order.
    pub fn order(&self) -> &[usize] {
        &self.order
    }

    /// What the change needs next.
    pub fn need(&self) -> Need {
        let d = &self.decision;
        match &self.phase {
            Phase::ClaimBefore { k } => Need::ClaimBefore {
                part: *k,
                layout: d.from.clone(),
            },
            Phase::Finish { k } => Need::Put {
                part: *k,
                layout: d.to.clone(),
            },
            Phase::Claim { k } => Need::Claim {
                part: self.order[*k],
                layout: d.to.clone(),
                exclusive: self.safeguards.claim,
            },
            Phase::Supersede { k } => Need::Put {
                part: *k,
                layout: Layout {
                    state: LayoutState::Superseded,
                    ..d.supersede.clone().expect("superseding")
                },
            },
            Phase::Copy => Need::CopyCatalog,
            Phase::Gather => Need::Gather,
            Phase::Move { k, .. } => Need::Move {
                biz: self.biz(*k).to_owned(),
            },
            Phase::Leases => Need::ReadLeases,
            Phase::Block { k } => Need::SetLeases {
                part: *k,
                rows: self.block(*k),
                fenced: self.safeguards.lease_fence,
            },
            Phase::Free { k } => Need::SetLeases {
                part: *k,
                rows: self.free(*k),
                fenced: self.safeguards.lease_fence,
            },
            Phase::Sequences => Need::Sequences,
            Phase::Carry { k, .. } => {
                let parts = |l: &Layout| {
                    l.members
                        .iter()
                        .map(|m| d.parts.iter().position(|p| *p == m.name))
                        .collect()
                };
                Need::Carry {
                    biz: self.sequences[*k].0.clone(),
                    from: parts(&d.from),
                    to: parts(&d.to),
                }
            }
            Phase::Done { k } => Need::Put {
                part: *k,
                layout: Layout {
                    state: LayoutState::Done,
                    ..d.to.clone()
                },
            },
            Phase::Ended(o) => Need::Done(o.clone()),
        }
    }

    /// The answer to [`Need::ClaimBefore`] and [`Need::Claim`]: whether the row was
    /// inserted (or written).
    pub fn claimed(&mut self, claimed: bool) {
        let n = self.decision.parts.len();
        self.phase = match self.phase {
            Phase::ClaimBefore { k } if k + 1 < n => Phase::ClaimBefore { k: k + 1 },
            Phase::ClaimBefore { .. } if self.decision.finishing => Phase::Finish { k: 0 },
            Phase::ClaimBefore { .. } => Phase::Claim { k: 0 },
            Phase::Claim { k } if !claimed => Phase::Ended(Outcome::Stopped(Stop::Claimed {
                part: self.order[k],
                first: k == 0,
            })),
            Phase::Claim { k } if k + 1 < n => Phase::Claim { k: k + 1 },
            Phase::Claim { .. } if self.decision.supersede.is_some() => Phase::Supersede { k: 0 },
            Phase::Claim { .. } => Phase::Copy,
            ref other => panic!("a claim answered in {other:?}"),
        };
    }

    /// The answer to [`Need::Put`].
    pub fn put(&mut self) {
        let n = self.decision.parts.len();
        self.phase = match self.phase {
            Phase::Finish { k } if k + 1 < n => Phase::Finish { k: k + 1 },
            Phase::Supersede { k } if k + 1 < n => Phase::Supersede { k: k + 1 },
            Phase::Finish { .. } | Phase::Supersede { .. } => Phase::Copy,
            Phase::Done { k } if k + 1 < n => Phase::Done { k: k + 1 },
            Phase::Done { .. } => Phase::Ended(Outcome::Done {
                layout: Layout {
                    state: LayoutState::Done,
                    ..self.decision.to.clone()
                },
                bizs: self.bizs.len(),
                moved: self.moved,
                blocked: self.blocked,
                freed: self.freed,
                carried: self.carried,
            }),
            ref other => panic!("a put answered in {other:?}"),
        };
    }

    /// The answer to [`Need::CopyCatalog`].
    pub fn copied(&mut self) {
        assert_eq!(self.phase, Phase::Copy, "a copy answered out of turn");
        self.phase = Phase::Gather;
    }

    /// The answer to [`Need::Gather`]: every biz with a row on a part, and what the
    /// parts' witnesses recorded of each (`(max_id, version)`).
    pub fn gathered(&mut self, bizs: BTreeMap<String, Vec<(i64, i64)>>) {
        assert_eq!(self.phase, Phase::Gather, "a gather answered out of turn");
        self.bizs = bizs;
        self.phase = self.next_biz(0);
    }

    /// The move of [`Need::Move`]'s biz, whose steps the caller carries out.
    pub fn mover(&mut self) -> &mut Move {
        match &mut self.phase {
            Phase::Move { mover, .. } => mover,
            other => panic!("no move in {other:?}"),
        }
    }

    /// The answer to [`Need::Move`]: how the biz's move ended.
    pub fn moved(&mut self, outcome: MoveOutcome) {
        let Phase::Move { k, .. } = self.phase else {
            panic!("a move answered out of turn");
        };
        self.phase = match outcome {
            MoveOutcome::Already => self.next_biz(k + 1),
            MoveOutcome::Moved { .. } => {
                self.moved += 1;
                self.next_biz(k + 1)
            }
            MoveOutcome::Stopped(stop) => Phase::Ended(Outcome::Stopped(Stop::Move {
                biz: self.biz(k).to_owned(),
                stop,
            })),
        };
    }

    /// The answer to [`Need::ReadLeases`]: the lease rows of every part.
    pub fn leases(&mut self, rows: Vec<Vec<LeaseRow>>) {
        assert_eq!(self.phase, Phase::Leases, "leases answered out of turn");
        assert_eq!(rows.len(), self.decision.parts.len(), "rows of every part");
        self.leases = rows;
        // Worker IDs blocked before (by a change cut off) keep the bounds their last
        // holder recorded: the next holder issues above them.
        for (k, rows) in self.leases.iter().enumerate() {
            for r in rows.iter().filter(|r| r.holder == MOVED_HOLDER) {
                if self.owner(r.worker_id) != Some(k)
                    && let Some(f) = self.floors.get_mut(usize::from(r.worker_id))
                {
                    *f = (f.0.max(r.last_ms), f.1.max(r.bound_ms));
                }
            }
        }
        self.phase = self.next_leases(0, true);
    }

    /// The answer to [`Need::SetLeases`]: the rows as written, or `None` when the
    /// epoch was no longer moving on the database.
    pub fn set(&mut self, written: Option<Vec<LeaseRow>>) {
        let (k, block) = match self.phase {
            Phase::Block { k } => (k, true),
            Phase::Free { k } => (k, false),
            ref other => panic!("leases set in {other:?}"),
        };
        let Some(written) = written else {
            self.phase = Phase::Ended(Outcome::Stopped(Stop::Superseded { part: k }));
            return;
        };
        if block {
            self.blocked += self.block(k).len();
            // The rows as blocked: with the last holder's bounds, final now that its
            // renewals fail.
            for row in written {
                if let Some(f) = self.floors.get_mut(usize::from(row.worker_id)) {
                    *f = (f.0.max(row.last_ms), f.1.max(row.bound_ms));
                }
            }
        } else {
            self.freed += self.free(k).len();
        }
        self.phase = self.next_leases(k + 1, block);
    }

    /// The answer to [`Need::Sequences`]: every sequence biz and its sections.
    pub fn sequences(&mut self, mut bizs: Vec<(String, u32)>) {
        assert_eq!(
            self.phase,
            Phase::Sequences,
            "sequences answered out of turn"
        );
        bizs.sort();
        bizs.dedup_by(|a, b| a.0 == b.0);
        self.sequences = bizs;
        self.phase = self.next_carry(0);
    }

    /// The carries of [`Need::Carry`]'s biz, one per section, whose steps the caller
    /// carries out.
    pub fn carries(&mut self) -> &mut [Carry] {
        match &mut self.phase {
            Phase::Carry { carries, .. } => carries,
            other => panic!("no carry in {other:?}"),
        }
    }

    /// The answer to [`Need::Carry`]: every carry of the biz is done.
    pub fn carried(&mut self) {
        let Phase::Carry { k, carries } = &self.phase else {
            panic!("a carry answered out of turn");
        };
        let k = *k;
        let stopped = carries
            .iter()
            .enumerate()
            .find_map(|(s, c)| match c.need() {
                CarryNeed::Done(CarryOutcome::Carried { .. } | CarryOutcome::Skipped) => None,
                CarryNeed::Done(outcome) => Some((s, outcome)),
                _ => panic!("a carry answered before it was done"),
            });
        self.phase = match stopped {
            Some((section, outcome)) => Phase::Ended(Outcome::Stopped(Stop::Carry {
                biz: self.sequences[k].0.clone(),
                section: section as u32,
                outcome,
            })),
            None => {
                self.carried += carries.len();
                self.next_carry(k + 1)
            }
        };
    }

    /// The carries of the `k`-th sequence biz, or done when none is left.
    fn next_carry(&self, k: usize) -> Phase {
        let d = &self.decision;
        match self.sequences.get(k) {
            Some((_, sections)) => Phase::Carry {
                k,
                carries: (0..*sections)
                    .map(|_| {
                        Carry::new(
                            d.to.epoch,
                            (d.from.members.len(), d.to.members.len()),
                            self.leases_of_sections,
                            self.safeguards.carry,
                        )
                    })
                    .collect(),
            },
            None => Phase::Done { k: 0 },
        }
    }

    fn biz(&self, k: usize) -> &str {
        self.bizs.keys().nth(k).map_or("", String::as_str)
    }

    /// The move of the `k`-th biz, or the worker IDs when none is left.
    fn next_biz(&self, k: usize) -> Phase {
        match self.bizs.iter().nth(k) {
            Some((_, witnessed)) => {
                let parts: Vec<&str> = self.decision.parts.iter().map(String::as_str).collect();
                let frame = Frame::new(&self.decision.to, &self.epochs, &parts);
                let mover = Move::new(frame, witnessed.clone(), self.rounds)
                    .with_safeguards(self.safeguards.moves);
                Phase::Move {
                    k,
                    mover: Box::new(mover),
                }
            }
            None if self.worker_ids == 0 => Phase::Sequences,
            None => Phase::Leases,
        }
    }

    /// The next part from `k` on with worker IDs to block (`block`) or free; then the
    /// frees, then done.
    fn next_leases(&self, k: usize, block: bool) -> Phase {
        let n = self.decision.parts.len();
        let found = (k..n).find(|&k| match block {
            true => !self.block(k).is_empty(),
            false => !self.free(k).is_empty(),
        });
        match (found, block) {
            (Some(k), true) => Phase::Block { k },
            (Some(k), false) => Phase::Free { k },
            (None, true) => self.next_leases(0, false),
            (None, false) => Phase::Sequences,
        }
    }

    /// The part that owns worker ID `w` in the layout moved to.
    fn owner(&self, w: u16) -> Option<usize> {
        let name = self.decision.to.owner_of(w)?;
        self.decision.parts.iter().position(|p| p == name)
    }

    fn row(&self, k: usize, w: u16) -> Option<&LeaseRow> {
        self.leases.get(k)?.iter().find(|r| r.worker_id == w)
    }

    /// The worker IDs part `k` does not own and has not blocked: blocked there (a
    /// holder there fails its next renewal).
    fn block(&self, k: usize) -> Vec<LeaseSet> {
        (0..self.worker_ids)
            .filter(|&w| self.owner(w) != Some(k))
            .filter(|&w| self.row(k, w).is_none_or(|r| r.holder != MOVED_HOLDER))
            .map(|w| LeaseSet {
                worker_id: w,
                holder: MOVED_HOLDER.into(),
                expires_ms: i64::MAX / 4,
                last_ms: 0,
                bound_ms: 0,
            })
            .collect()
    }

    /// The worker IDs part `k` owns, freed there with the highest bounds recorded
    /// anywhere: expired at once (free now); a row of a holder here keeps its holder
    /// and expiry, its bounds raised.
    fn free(&self, k: usize) -> Vec<LeaseSet> {
        (0..self.worker_ids)
            .filter(|&w| self.owner(w) == Some(k))
            .filter_map(|w| {
                let (last, bound) = self.floors[usize::from(w)];
                let set = match self.row(k, w) {
                    Some(r) if r.holder == MOVED_HOLDER => Some((String::new(), 0)),
                    Some(r) if r.last_ms < last || r.bound_ms < bound => {
                        Some((r.holder.clone(), r.expires_ms))
                    }
                    Some(_) => None,
                    None => (last > 0 || bound > 0).then_some((String::new(), 0)),
                };
                set.map(|(holder, expires_ms)| {
                    assert!(
                        self.decision.to.owner_of(w) == Some(&self.decision.parts[k]),
                        "a worker ID freed only inside its database's class"
                    );
                    LeaseSet {
                        worker_id: w,
                        holder,
                        expires_ms,
                        last_ms: last,
                        bound_ms: bound,
                    }
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::layout::Member;
    use crate::segment::Residue;

    fn layout(epoch: i64, members: &[(&str, i64, i64)], state: LayoutState) -> Layout {
        Layout {
            epoch,
            members: members
                .iter()
                .map(|&(name, d, r)| Member {
                    name: name.into(),
                    class: Residue::new(d, r).expect("a class"),
                })
                .collect(),
            state,
            lost: Vec::new(),
        }
    }

    /// `db remove pg1` from {pg0: 0 mod 2, pg1: 1 mod 2}, with 4 worker IDs.
    fn remove() -> Change {
        let from = layout(1, &[("pg0", 2, 0), ("pg1", 2, 1)], LayoutState::Done);
        Change::new(
            Decision {
                parts: vec!["pg0".into(), "pg1".into()],
                to: layout(2, &[("pg0", 1, 0)], LayoutState::Moving),
                layouts: vec![from.clone()],
                from,
                supersede: None,
                finishing: false,
            },
            (4, 3),
            SEQUENCES,
        )
    }

    fn lease(w: u16, holder: &str, last_ms: i64) -> LeaseRow {
        LeaseRow {
            worker_id: w,
            holder: holder.into(),
            version: 1,
            expires_ms: 5_000,
            last_ms,
            bound_ms: last_ms,
            db_now_ms: 1_000,
        }
    }

    #[test]
    fn claims_moves_every_biz_blocks_and_frees_worker_ids_then_is_done() {
        let mut c = remove();
        // Claims in claim order (the layout in force's members by name).
        for part in [0, 1] {
            let Need::Claim {
                part: p,
                exclusive: true,
                ..
            } = c.need()
            else {
                panic!("a claim: {:?}", c.need());
            };
            assert_eq!(p, part);
            c.claimed(true);
        }
        assert_eq!(c.need(), Need::CopyCatalog);
        c.copied();
        assert_eq!(c.need(), Need::Gather);
        c.gathered(BTreeMap::from([("order".to_owned(), Vec::new())]));
        assert_eq!(
            c.need(),
            Need::Move {
                biz: "order".into()
            }
        );
        c.moved(MoveOutcome::Already);
        assert_eq!(c.need(), Need::ReadLeases);
        // pg1 holds worker ID 1 (odd), with a holder that issued up to 900.
        c.leases(vec![Vec::new(), vec![lease(1, "a", 900)]]);
        // Blocked: on pg0, none (it owns every worker ID now); on pg1, all four.
        let Need::SetLeases { part: 1, rows, .. } = c.need() else {
            panic!("blocks on pg1: {:?}", c.need());
        };
        assert_eq!(rows.len(), 4);
        assert!(rows.iter().all(|r| r.holder == MOVED_HOLDER));
        let mut written = lease(1, MOVED_HOLDER, 900);
        written.bound_ms = 950;
        c.set(Some(vec![written]));
        // Freed on pg0 with the bounds found: worker ID 1 only (the others had no
        // holder anywhere).
        let Need::SetLeases { part: 0, rows, .. } = c.need() else {
            panic!("frees on pg0: {:?}", c.need());
        };
        assert_eq!(
            rows,
            vec![LeaseSet {
                worker_id: 1,
                holder: String::new(),
                expires_ms: 0,
                last_ms: 900,
                bound_ms: 950,
            }]
        );
        c.set(Some(Vec::new()));
        // A sequence biz's two sections, carried from both parts to pg0.
        assert_eq!(c.need(), Need::Sequences);
        c.sequences(vec![("chat".into(), 2)]);
        let Need::Carry { biz, from, to } = c.need() else {
            panic!("carries: {:?}", c.need());
        };
        assert_eq!(biz, "chat");
        assert_eq!((from, to), (vec![Some(0), Some(1)], vec![Some(0)]));
        for carry in c.carries() {
            carry_on_absent_rows(carry);
        }
        c.carried();
        for part in [0, 1] {
            let Need::Put { part: p, layout } = c.need() else {
                panic!("done: {:?}", c.need());
            };
            assert_eq!((p, layout.state), (part, LayoutState::Done));
            c.put();
        }
        let Need::Done(Outcome::Done {
            bizs: 1,
            moved: 0,
            blocked: 4,
            freed: 1,
            carried: 2,
            ..
        }) = c.need()
        else {
            panic!("done: {:?}", c.need());
        };
    }

    const SEQUENCES: Timing = Timing {
        lease: std::time::Duration::from_millis(1_500),
        grace: std::time::Duration::from_millis(250),
        margin: true,
    };

    /// Carries a section whose rows are absent everywhere, every write succeeding.
    fn carry_on_absent_rows(carry: &mut Carry) {
        use crate::sequence::carry::Need as C;
        use crate::sequence::claim::{Read, Written};
        let now = std::time::Duration::ZERO;
        loop {
            match carry.need() {
                C::Read(_, ds) => ds
                    .into_iter()
                    .for_each(|d| carry.read(d, Read::Absent, now)),
                C::Write(_, ws) => ws.into_iter().for_each(|(d, w)| {
                    carry.written(d, Written::At(w.expected.unwrap_or(0) + 1), now)
                }),
                C::Wait(until) => carry.waited(until),
                C::Done(outcome) => {
                    assert_eq!(outcome, CarryOutcome::Carried { bound: 0 });
                    return;
                }
            }
        }
    }

    #[test]
    fn a_claim_lost_or_a_lease_write_outside_the_epoch_stops_the_change() {
        let mut c = remove();
        c.claimed(false);
        assert_eq!(
            c.need(),
            Need::Done(Outcome::Stopped(Stop::Claimed {
                part: 0,
                first: true
            }))
        );

        let mut c = remove();
        c.claimed(true);
        c.claimed(true);
        c.copied();
        c.gathered(BTreeMap::new());
        c.leases(vec![Vec::new(), Vec::new()]);
        c.set(None);
        assert_eq!(
            c.need(),
            Need::Done(Outcome::Stopped(Stop::Superseded { part: 1 }))
        );
    }

    #[test]
    fn a_change_cut_off_is_finished_or_superseded_on_every_part() {
        let from = layout(1, &[("pg0", 2, 0), ("pg1", 2, 1)], LayoutState::Done);
        let cut = layout(2, &[("pg0", 1, 0)], LayoutState::Moving);
        let decide = |supersede: Option<Layout>, finishing| Decision {
            parts: vec!["pg0".into(), "pg1".into()],
            from: from.clone(),
            to: layout(3, &[("pg0", 2, 0), ("pg1", 2, 1)], LayoutState::Moving),
            supersede,
            finishing,
            layouts: vec![from.clone(), cut.clone()],
        };
        let mut c = Change::new(decide(Some(cut.clone()), false), (0, 3), SEQUENCES);
        c.claimed(true);
        c.claimed(true);
        for part in [0, 1] {
            let Need::Put { part: p, layout } = c.need() else {
                panic!("supersedes: {:?}", c.need());
            };
            assert_eq!(
                (p, layout.epoch, layout.state),
                (part, 2, LayoutState::Superseded)
            );
            c.put();
        }
        assert_eq!(c.need(), Need::CopyCatalog);

        let c = Change::new(decide(None, true), (0, 3), SEQUENCES);
        let Need::Put { part: 0, layout } = c.need() else {
            panic!("finishes: {:?}", c.need());
        };
        assert_eq!((layout.epoch, layout.state), (3, LayoutState::Moving));
    }
}
