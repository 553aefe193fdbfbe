//! A `segmint db add/remove` command (`Store::change_layout`): read the layouts,
//! decide with `layout::required` and `layout::plan`, then the store's machine
//! ([`Change`]: claim, finish or supersede a change cut off, move each biz, move the
//! worker IDs, mark the layout done), its steps carried out on the simulated
//! databases, one database statement per step.
//!
//! A command can stop after any step and never run again ([`crate::model::Action::Crash`],
//! or, when commands may pause, simply never being scheduled again): a crash, a
//! command paused for good, or a database failing under it (a command stops at the
//! first error; the thaw it then makes after a failed freeze is left out, which only
//! leaves more rows frozen). A database that does not answer the first read is
//! modelled by the subset of its configured databases that the command reads.
//!
//! Finishing or superseding a change waits for its row to fall silent: here, until its
//! command crashed, or (`Spec::paused`) not at all, as if the command were paused and
//! woke up afterwards. Safety must hold either way.

use std::collections::BTreeMap;
use std::time::Duration;

use segmint_core::layout::changing::{Need, Safeguards};
use segmint_core::layout::moving::Safeguards as MoveSafeguards;
use segmint_core::layout::{self, Change, Decision, Layout, LayoutState, Member, Plan};
use segmint_core::rows::{LeaseSet, MOVED_HOLDER};

use crate::model::{Db, DbState, Holder, LeaseRow, State, Sys};
use crate::mover;

/// Where a command is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Read the layouts and witnesses of the configured databases that answer, and
    /// decide ([`crate::model::Action::Begin`]).
    Start,
    /// Carrying out the steps of the change decided.
    Run(Box<Change>),
    Finished,
    /// Stopped (refused, or failed) for the reason given; kept in the state as
    /// [`STOPPED`], the reason being told by the step that stopped it.
    Stopped(&'static str),
}

/// How a stopped command is kept: two commands stopped for different reasons at the
/// same point are the same state.
const STOPPED: Phase = Phase::Stopped("stopped");

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Cmd {
    pub phase: Phase,
}

impl Cmd {
    pub fn new() -> Cmd {
        Cmd {
            phase: Phase::Start,
        }
    }

    pub fn running(&self) -> bool {
        !matches!(self.phase, Phase::Finished | Phase::Stopped(_))
    }

    /// The change the command runs, once decided.
    pub fn change(&self) -> Option<&Change> {
        match &self.phase {
            Phase::Run(change) => Some(change),
            _ => None,
        }
    }

    /// The epoch the command moves to, once decided.
    pub fn epoch(&self) -> Option<i64> {
        self.change().map(|c| c.decision().to.epoch)
    }

    /// Starts command `c`: reads the databases of its configuration at the positions
    /// in `answer` (a bit each), the others not answering. Returns why it stopped, if
    /// it did.
    pub fn begin(&mut self, sys: &Sys, c: usize, st: &State, answer: u8) -> Option<&'static str> {
        let next = self.start(sys, c, st, answer);
        self.settle(next)
    }

    /// Runs the next step of command `c` (started). Returns why it stopped, if it did.
    pub fn step(&mut self, sys: &Sys, st: &mut State) -> Option<&'static str> {
        let next = match std::mem::replace(&mut self.phase, Phase::Finished) {
            Phase::Run(mut change) => {
                carry_out(sys, &mut change, st);
                match change.need() {
                    Need::Done(layout::changing::Outcome::Done { .. }) => Phase::Finished,
                    Need::Done(layout::changing::Outcome::Stopped(stop)) => {
                        Phase::Stopped(match stop {
                            layout::changing::Stop::Claimed { .. } => {
                                "another command claimed the epoch first"
                            }
                            layout::changing::Stop::Superseded { .. } => {
                                "the epoch is no longer moving: superseded"
                            }
                            layout::changing::Stop::Move { .. } => "a biz's move stopped",
                            layout::changing::Stop::Carry { .. } => {
                                unreachable!("no sequence biz in this model")
                            }
                        })
                    }
                    _ => Phase::Run(change),
                }
            }
            other => unreachable!("a step of a command in {other:?}"),
        };
        self.settle(next)
    }

    pub fn crash(&mut self) {
        self.phase = STOPPED;
    }

    /// Keeps `next`; a command stopped is kept as [`STOPPED`].
    fn settle(&mut self, next: Phase) -> Option<&'static str> {
        let why = match next {
            Phase::Stopped(why) => Some(why),
            _ => None,
        };
        self.phase = if why.is_some() { STOPPED } else { next };
        why
    }

    fn start(&mut self, sys: &Sys, c: usize, st: &State, answer: u8) -> Phase {
        let spec = &sys.spec.commands[c];
        let names = sys.names();
        let answers = |d: &Db| {
            spec.config
                .iter()
                .position(|x| x == d)
                .is_some_and(|p| answer & (1 << p) != 0)
        };
        let mut rows = Vec::new();
        let mut witnessed: Vec<String> = Vec::new();
        for &d in &spec.config {
            let db = &st.dbs[d];
            if answers(&d) {
                rows.extend(db.layout_rows(names));
                for (j, w) in db.witness.iter().enumerate() {
                    if w.is_some() {
                        witnessed.push(names[j].clone());
                    }
                }
            }
        }
        witnessed.sort();
        witnessed.dedup();
        let Ok(layouts) = layout::merge(&rows) else {
            return Phase::Stopped("the layouts read disagree");
        };
        let before = Layout {
            epoch: 0,
            members: spec
                .before
                .iter()
                .map(|&(d, class)| Member {
                    name: names[d].clone(),
                    class,
                })
                .collect(),
            state: LayoutState::Done,
            lost: Vec::new(),
        };
        let target = sys.name_list(&spec.target);
        let lost = sys.name_list(&spec.lost);
        let mut need = if sys.spec.fixes.required {
            layout::required(&layouts, &before, &witnessed, &lost)
        } else {
            Vec::new()
        };
        for name in &target {
            if !need.contains(name) {
                need.push(name.clone());
            }
        }
        let configured = |d: &Db| spec.config.contains(d);
        let parts: Vec<Db> = need.iter().map(|n| sys.index(n)).collect();
        if !parts.iter().all(configured) {
            return Phase::Stopped("a database that may hold live rows is not configured");
        }
        if !parts.iter().all(answers) {
            return Phase::Stopped("a database of the change did not answer");
        }
        if spec.lost.iter().any(answers) {
            return Phase::Stopped("the database declared lost answers");
        }
        // Without the retirement, `--lost` is a removal that skips the database.
        let plan_lost = if sys.spec.fixes.retire_lost {
            lost
        } else {
            Vec::new()
        };
        let plan = match layout::plan(&layouts, &before, &target, &plan_lost) {
            Err(_) => return Phase::Stopped("refused by plan"),
            Ok(Plan::Already(_)) => return Phase::Finished,
            Ok(plan) => plan,
        };
        let Plan::Change {
            from,
            to,
            supersede,
            finishing,
        } = plan
        else {
            unreachable!("Already is handled above")
        };
        // `wait_silent`: a change under way is finished or superseded only once its
        // row fell silent, i.e. its command stopped (unless commands may pause).
        let running = supersede.as_ref().or(finishing.then_some(&to));
        if let Some(running) = running
            && !sys.spec.paused
            && st
                .cmds
                .iter()
                .enumerate()
                .any(|(k, other)| k != c && other.running() && other.epoch() == Some(running.epoch))
        {
            return Phase::Stopped("the change's command still runs: its row is not silent");
        }
        let decision = Decision {
            parts: sys.name_list(&parts),
            from,
            to,
            supersede,
            finishing,
            layouts,
        };
        let fixes = &sys.spec.fixes;
        let safeguards = Safeguards {
            claim: fixes.claim,
            lease_fence: fixes.lease_fence,
            moves: MoveSafeguards {
                fresh_witnesses: fixes.fresh_witnesses,
                claimed_by: fixes.claimed_by_stamp,
            },
            carry: segmint_core::sequence::carry::Carrying::ALL,
        };
        let change = Change::new(
            decision,
            (sys.spec.workers, u32::from(sys.spec.attempts)),
            // No sequence biz in this model: never waited for.
            segmint_core::lease::Timing::new(Duration::ZERO, Duration::ZERO),
        )
        .with_safeguards(safeguards);
        Phase::Run(Box::new(change))
    }
}

/// Carries out the step `change` needs on the databases (a biz's move: one step of
/// it; the catalog copy, which the model leaves out, with the step after it).
fn carry_out(sys: &Sys, change: &mut Change, st: &mut State) {
    let parts: Vec<Db> = change
        .decision()
        .parts
        .iter()
        .map(|n| sys.index(n))
        .collect();
    let epoch = change.decision().to.epoch;
    match change.need() {
        Need::ClaimBefore { part, layout } => {
            st.dbs[parts[part]].claim_layout(&sys.lay(&layout));
            change.claimed(true);
        }
        Need::Claim {
            part,
            layout,
            exclusive,
        } => {
            let db = &mut st.dbs[parts[part]];
            let claimed = match exclusive {
                true => db.claim_layout(&sys.lay(&layout)),
                false => {
                    db.put_layout(&sys.lay(&layout));
                    true
                }
            };
            change.claimed(claimed);
        }
        Need::Put { part, layout } => {
            st.dbs[parts[part]].put_layout(&sys.lay(&layout));
            change.put();
        }
        Need::CopyCatalog => {
            change.copied();
            carry_out(sys, change, st);
        }
        // Sequence bizs and their carries are model P's (crates/model/tests/model/sequence.rs).
        Need::Sequences => {
            change.sequences(Vec::new());
            carry_out(sys, change, st);
        }
        Need::Carry { .. } => unreachable!("no sequence biz in this model"),
        Need::Gather => {
            // One biz, named by any row of it; the witnesses of the databases of the
            // change.
            let mut bizs = BTreeMap::new();
            if parts.iter().any(|&d| st.dbs[d].row.is_some()) {
                let witnessed = parts
                    .iter()
                    .flat_map(|&d| st.dbs[d].witness.iter().flatten())
                    .map(|&(version, max_id, high)| (high.max(max_id), version))
                    .collect();
                bizs.insert("biz".to_owned(), witnessed);
            }
            change.gathered(bizs);
        }
        Need::Move { .. } => {
            let mover = change.mover();
            if let Some(outcome) = mover::carry_out(mover, &parts, &mut st.dbs) {
                change.moved(outcome);
            }
        }
        Need::ReadLeases => {
            let rows = parts
                .iter()
                .map(|&d| {
                    st.dbs[d]
                        .leases
                        .iter()
                        .enumerate()
                        .map(|(w, r)| r.read(w))
                        .collect()
                })
                .collect();
            change.leases(rows);
        }
        Need::SetLeases { part, rows, fenced } => {
            let db = &mut st.dbs[parts[part]];
            if fenced && !db.moving(epoch) {
                change.set(None);
                return;
            }
            set_leases(db, &rows);
            change.set(Some(Vec::new()));
        }
        Need::Done(_) => unreachable!("a change that ended is not stepped"),
    }
}

/// A change's lease rows written on `db`: blocked where a worker ID left, freed where
/// it arrived (bounds raised only: the model keeps none).
fn set_leases(db: &mut DbState, rows: &[LeaseSet]) {
    for set in rows {
        let row = &mut db.leases[usize::from(set.worker_id)];
        match set.holder.as_str() {
            MOVED_HOLDER => {
                *row = LeaseRow {
                    holder: Holder::Moved,
                    expired: false,
                };
            }
            "" => {
                *row = LeaseRow {
                    holder: Holder::Free,
                    expired: true,
                };
            }
            _ => {}
        }
    }
}
