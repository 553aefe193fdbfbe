//! A `segmint db add/remove` command (`Store::change_layout`), one database statement
//! per step: read the layouts, decide with `layout::required` and `layout::plan`, claim
//! the epoch in `layout::claim_order` (or finish / supersede a change cut off), move
//! the biz ([`Mover`]), move the worker IDs, mark the layout done.
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

use segmint_core::layout::{self, Layout, LayoutState, Member, Plan};

use crate::model::{Db, Holder, Lay, LeaseRow, St, State, Sys};
use crate::mover::{Moved, Mover};

/// Where a command is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Read the layouts and witnesses of the configured databases that answer, and
    /// decide ([`crate::model::Action::Begin`]).
    Start,
    /// Claim the configured classes as epoch 0 on `parts[k]` (nothing stored yet).
    Epoch0 {
        k: usize,
    },
    /// Claim the new epoch on `order[k]`.
    Claim {
        k: usize,
    },
    /// Mark the change cut off `superseded` on `parts[k]`.
    Supersede {
        k: usize,
    },
    /// Put the change being finished (`moving`) on `parts[k]`.
    Finish {
        k: usize,
    },
    /// Read which bizs exist and the witnesses, on every database of the change.
    Gather,
    Move(Box<Mover>),
    /// Read the lease rows of every database of the change.
    Leases,
    /// Block the worker IDs leaving `parts[k]`.
    Block {
        k: usize,
    },
    /// Free the worker IDs arriving on `parts[k]`.
    Free {
        k: usize,
    },
    /// Mark the layout `done` on `parts[k]`.
    Done {
        k: usize,
    },
    Finished,
    /// Stopped (refused, or failed) for the reason given; kept in the state as
    /// [`STOPPED`], the reason being told by the step that stopped it.
    Stopped(&'static str),
}

/// How a stopped command is kept: two commands stopped for different reasons at the
/// same point are the same state.
const STOPPED: Phase = Phase::Stopped("stopped");

/// What the command decided after reading the layouts.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Decided {
    pub parts: Vec<Db>,
    pub from: Lay,
    pub to: Lay,
    pub supersede: Option<Lay>,
    pub finishing: bool,
    /// The layouts read (merged).
    pub layouts: Vec<Lay>,
    pub order: Vec<Db>,
    /// The lease rows read, per database of `parts`.
    pub leases: Vec<Vec<LeaseRow>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Cmd {
    pub phase: Phase,
    pub plan: Option<Box<Decided>>,
}

impl Cmd {
    pub fn new() -> Cmd {
        Cmd {
            phase: Phase::Start,
            plan: None,
        }
    }

    pub fn running(&self) -> bool {
        !matches!(self.phase, Phase::Finished | Phase::Stopped(_))
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
        let phase = std::mem::replace(&mut self.phase, Phase::Finished);
        let next = match phase {
            Phase::Move(mut mover) => match mover.step(&mut st.dbs) {
                Moved::Going => Phase::Move(mover),
                Moved::Done => Phase::Leases,
                Moved::Stopped(why) => Phase::Stopped(why),
            },
            phase => self.write(sys, phase, st),
        };
        self.settle(next)
    }

    pub fn crash(&mut self) {
        self.phase = STOPPED;
        self.plan = None;
    }

    /// Keeps `next`; a command that ended forgets its plan.
    fn settle(&mut self, next: Phase) -> Option<&'static str> {
        let why = match next {
            Phase::Stopped(why) => Some(why),
            _ => None,
        };
        self.phase = if why.is_some() { STOPPED } else { next };
        if !self.running() {
            self.plan = None;
        }
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
        let part_names = sys.name_list(&parts);
        let prev = layouts.last().unwrap_or(&from);
        let order = layout::claim_order(prev, &part_names)
            .iter()
            .map(|n| sys.index(n))
            .collect();
        // `wait_silent`: a change under way is finished or superseded only once its
        // row fell silent, i.e. its command stopped (unless commands may pause).
        let running = supersede.as_ref().or(finishing.then_some(&to));
        if let Some(running) = running
            && !sys.spec.paused
            && st.cmds.iter().enumerate().any(|(k, other)| {
                k != c
                    && other.running()
                    && other
                        .plan
                        .as_ref()
                        .is_some_and(|p| p.to.epoch == running.epoch)
            })
        {
            return Phase::Stopped("the change's command still runs: its row is not silent");
        }
        let nothing_stored = layouts.is_empty();
        self.plan = Some(Box::new(Decided {
            parts,
            from: sys.lay(&from),
            to: sys.lay(&to),
            supersede: supersede.as_ref().map(|l| sys.lay(l)),
            finishing,
            layouts: layouts.iter().map(|l| sys.lay(l)).collect(),
            order,
            leases: Vec::new(),
        }));
        if nothing_stored {
            Phase::Epoch0 { k: 0 }
        } else if finishing {
            Phase::Finish { k: 0 }
        } else {
            Phase::Claim { k: 0 }
        }
    }

    /// The steps that write (and the reads between them).
    fn write(&mut self, sys: &Sys, phase: Phase, st: &mut State) -> Phase {
        let plan = self.plan.as_mut().expect("decided");
        let n = plan.parts.len();
        match phase {
            Phase::Epoch0 { k } => {
                st.dbs[plan.parts[k]].claim_layout(&plan.from);
                match (k + 1 < n, plan.finishing) {
                    (true, _) => Phase::Epoch0 { k: k + 1 },
                    (false, true) => Phase::Finish { k: 0 },
                    (false, false) => Phase::Claim { k: 0 },
                }
            }
            Phase::Claim { k } => {
                let d = plan.order[k];
                if sys.spec.fixes.claim {
                    if !st.dbs[d].claim_layout(&plan.to) {
                        return Phase::Stopped("another command claimed the epoch first");
                    }
                } else {
                    st.dbs[d].put_layout(&plan.to);
                }
                match (k + 1 < plan.order.len(), plan.supersede.is_some()) {
                    (true, _) => Phase::Claim { k: k + 1 },
                    (false, true) => Phase::Supersede { k: 0 },
                    (false, false) => Phase::Gather,
                }
            }
            Phase::Supersede { k } => {
                let p = plan.supersede.as_ref().expect("superseding");
                st.dbs[plan.parts[k]].put_layout(&p.with(St::Superseded));
                if k + 1 < n {
                    Phase::Supersede { k: k + 1 }
                } else {
                    Phase::Gather
                }
            }
            Phase::Finish { k } => {
                st.dbs[plan.parts[k]].put_layout(&plan.to);
                if k + 1 < n {
                    Phase::Finish { k: k + 1 }
                } else {
                    Phase::Gather
                }
            }
            Phase::Gather => {
                if plan.parts.iter().all(|&d| st.dbs[d].row.is_none()) {
                    return Phase::Leases;
                }
                let witnessed = plan
                    .parts
                    .iter()
                    .flat_map(|&d| st.dbs[d].witness.iter().flatten())
                    .map(|&(version, max_id, high)| (high.max(max_id), version))
                    .collect();
                let mut layouts = plan.layouts.clone();
                for l in [&plan.from, &plan.to] {
                    if !layouts.iter().any(|k| k.epoch == l.epoch) {
                        layouts.push(l.clone());
                    }
                }
                Phase::Move(Box::new(Mover::new(
                    sys,
                    plan.to.clone(),
                    plan.parts.clone(),
                    layouts,
                    witnessed,
                )))
            }
            Phase::Leases => {
                if sys.spec.workers == 0 {
                    return Phase::Done { k: 0 };
                }
                plan.leases = plan
                    .parts
                    .iter()
                    .map(|&d| st.dbs[d].leases.clone())
                    .collect();
                Phase::Block { k: 0 }
            }
            Phase::Block { k } => self.leases(sys, st, k, true),
            Phase::Free { k } => self.leases(sys, st, k, false),
            Phase::Done { k } => {
                st.dbs[plan.parts[k]].put_layout(&plan.to.with(St::Done));
                if k + 1 < n {
                    Phase::Done { k: k + 1 }
                } else {
                    Phase::Finished
                }
            }
            Phase::Start | Phase::Move(_) | Phase::Finished | Phase::Stopped(_) => {
                unreachable!("not a write")
            }
        }
    }

    /// The lease write of the worker IDs blocked (or freed) on `parts[k]`, or on the
    /// next database of the change that has some (`move_worker_ids`): one transaction,
    /// made only while the epoch is `moving` there.
    fn leases(&self, sys: &Sys, st: &mut State, from: usize, block: bool) -> Phase {
        let plan = self.plan.as_ref().expect("decided");
        let to = plan.to.layout(sys.names());
        let owner = |w: u16| to.owner_of(w).map(|n| sys.index(n));
        for k in from..plan.parts.len() {
            let d = plan.parts[k];
            let read = &plan.leases[k];
            let ws: Vec<u16> = (0..sys.spec.workers)
                .filter(|&w| {
                    let moved = read[usize::from(w)].holder == Holder::Moved;
                    if block {
                        owner(w) != Some(d) && !moved
                    } else {
                        owner(w) == Some(d) && moved
                    }
                })
                .collect();
            if ws.is_empty() {
                continue;
            }
            let db = &mut st.dbs[d];
            if sys.spec.fixes.lease_fence && !db.moving(plan.to.epoch) {
                return Phase::Stopped("the epoch is no longer moving: superseded");
            }
            for w in ws {
                db.leases[usize::from(w)] = LeaseRow {
                    holder: if block { Holder::Moved } else { Holder::Free },
                    expired: !block,
                };
            }
            return if k + 1 < plan.parts.len() {
                if block {
                    Phase::Block { k: k + 1 }
                } else {
                    Phase::Free { k: k + 1 }
                }
            } else if block {
                Phase::Free { k: 0 }
            } else {
                Phase::Done { k: 0 }
            };
        }
        if block {
            self.leases(sys, st, 0, false)
        } else {
            Phase::Done { k: 0 }
        }
    }
}
