//! A model of recording the cluster's membership (`segmint migrate`): the machine the
//! store runs (`segmint_core::layout::Founding`, carried out by
//! `crates/store/src/cluster/layout/founding.rs`) driven here one step at a time
//! against two simulated databases. Two commands with different configurations run at
//! once (an operator's two shells): one names pg0 and pg1 (`0 mod 2`, `1 mod 2`), the
//! other pg1 alone (every ID). Either may stop after any step and be run again;
//! databases go down and come back.
//!
//! The property: whatever part of the databases a server reads, the classes it may
//! use (`layout::read`, then the layout done in force, as `Store::apply_layouts`
//! decides) never overlap on two databases.

use segmint_core::layout::{self, Founding, Layout, LayoutState, Member, Need, Standing};
use segmint_core::rows::LayoutRow;
use segmint_core::segment::Residue;
use stateright::{Model, Property};

const NAMES: [&str; 2] = ["pg0", "pg1"];
const DISJOINT: &str = "no two databases used with overlapping classes";

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Db {
    up: bool,
    /// Its layout row of epoch 0.
    row: Option<LayoutRow>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Cmd {
    /// Not running: started `runs` times so far.
    Idle {
        runs: u8,
    },
    Running {
        machine: Box<Founding>,
        runs: u8,
    },
    /// Recorded, or refused.
    Ended,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FoundState {
    dbs: [Db; 2],
    cmds: [Cmd; 2],
    outages: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FoundAction {
    /// Command `c` reads every database it is configured with and decides.
    Start(usize),
    /// Command `c` makes its next write or read.
    Step(usize),
    /// Command `c` stops where it is (killed).
    Crash(usize),
    Down(usize),
    Up(usize),
}

struct Migrations {
    /// Each command's configured databases and classes.
    configs: [Layout; 2],
    /// Runs per command (a run killed midway is run again).
    runs: u8,
    outages: u8,
    /// The safeguard switched off: rows written `done` at once, without the claim.
    without_claim: bool,
}

fn class(delta: i64, remainder: i64) -> Residue {
    Residue::new(delta, remainder).expect("small")
}

fn config(members: &[(usize, Residue)]) -> Layout {
    Layout {
        epoch: 0,
        members: members
            .iter()
            .map(|&(d, class)| Member {
                name: NAMES[d].to_owned(),
                class,
            })
            .collect(),
        state: LayoutState::Done,
        lost: Vec::new(),
    }
}

impl Migrations {
    fn new(without_claim: bool, outages: u8) -> Migrations {
        Migrations {
            configs: [
                config(&[(0, class(2, 0)), (1, class(2, 1))]),
                config(&[(1, class(1, 0))]),
            ],
            runs: 3,
            outages,
            without_claim,
        }
    }

    fn db_of(name: &str) -> usize {
        NAMES
            .iter()
            .position(|n| *n == name)
            .expect("a modelled database")
    }

    /// `Store::record_membership`'s start: the reads, then the decision.
    fn start(&self, st: &mut FoundState, c: usize) {
        let Cmd::Idle { runs } = st.cmds[c] else {
            return;
        };
        let read: Vec<(String, Option<Vec<LayoutRow>>)> = self.configs[c]
            .members
            .iter()
            .map(|m| {
                let db = &st.dbs[Migrations::db_of(&m.name)];
                (
                    m.name.clone(),
                    db.up.then(|| db.row.iter().cloned().collect()),
                )
            })
            .collect();
        st.cmds[c] = match Founding::start(&self.configs[c], &read, 1) {
            Ok(Some(f)) => Cmd::Running {
                machine: Box::new(match self.without_claim {
                    true => f.without_the_claim(),
                    false => f,
                }),
                runs: runs + 1,
            },
            // Recorded before, or refused: this command is over.
            Ok(None) | Err(_) if runs + 1 >= self.runs => Cmd::Ended,
            Ok(None) | Err(_) => Cmd::Idle { runs: runs + 1 },
        };
    }

    fn step(&self, st: &mut FoundState, c: usize) {
        let Cmd::Running { machine, runs } = &st.cmds[c] else {
            return;
        };
        let (mut f, runs) = (machine.clone(), *runs);
        match f.next() {
            Need::Claim { database, row } => {
                let db = &mut st.dbs[Migrations::db_of(&database)];
                f.claimed(match (db.up, &db.row) {
                    (false, _) => Err("down".into()),
                    (true, Some(_)) => Ok(false),
                    (true, None) => {
                        db.row = Some(row);
                        Ok(true)
                    }
                });
            }
            Need::Read { database } => {
                let db = &st.dbs[Migrations::db_of(&database)];
                f.read(match db.up {
                    false => Err("down".into()),
                    true => Ok(db.row.iter().cloned().collect()),
                });
            }
            Need::MarkDone { database, row } => {
                // `put_layout`: replaces the epoch's row only while it is `moving`.
                let db = &mut st.dbs[Migrations::db_of(&database)];
                let moving = db
                    .row
                    .as_ref()
                    .is_some_and(|r| r.state == LayoutState::Moving.as_str());
                f.marked(match (db.up, moving) {
                    (false, _) => Err("down".into()),
                    (true, true) => {
                        db.row = Some(row);
                        Ok(true)
                    }
                    (true, false) => Ok(false),
                });
            }
            Need::Recorded(_) | Need::Failed(_) => {}
        }
        st.cmds[c] = match f.next() {
            Need::Recorded(_) => Cmd::Ended,
            Need::Failed(_) if runs >= self.runs => Cmd::Ended,
            Need::Failed(_) => Cmd::Idle { runs },
            _ => Cmd::Running { machine: f, runs },
        };
    }
}

/// The classes a server reading the databases of `read` (bits) may use, by database:
/// `layout::read`, then the members of the layout done in force whose standing is
/// current (`Store::apply_layouts`).
fn usable(st: &FoundState, read: u8) -> Vec<(usize, Residue)> {
    let per_db: Vec<(String, Vec<LayoutRow>)> = (0..2)
        .filter(|d| read & (1 << d) != 0)
        .map(|d| (NAMES[d].to_owned(), st.dbs[d].row.iter().cloned().collect()))
        .collect();
    let Ok(reading) = layout::read(&[], &per_db) else {
        return Vec::new();
    };
    let Some(done) = layout::current(&reading.layouts).0 else {
        return Vec::new();
    };
    per_db
        .iter()
        .zip(&reading.standing)
        .filter(|(_, s)| **s == Standing::Current)
        .filter_map(|((name, _), _)| Some((Migrations::db_of(name), done.class_of(name)?)))
        .collect()
}

impl Model for Migrations {
    type State = FoundState;
    type Action = FoundAction;

    fn init_states(&self) -> Vec<FoundState> {
        let db = Db {
            up: true,
            row: None,
        };
        vec![FoundState {
            dbs: [db.clone(), db],
            cmds: [Cmd::Idle { runs: 0 }, Cmd::Idle { runs: 0 }],
            outages: self.outages,
        }]
    }

    fn actions(&self, st: &FoundState, actions: &mut Vec<FoundAction>) {
        for (c, cmd) in st.cmds.iter().enumerate() {
            match cmd {
                Cmd::Idle { .. } => actions.push(FoundAction::Start(c)),
                Cmd::Running { runs, .. } => {
                    actions.push(FoundAction::Step(c));
                    if *runs < self.runs {
                        actions.push(FoundAction::Crash(c));
                    }
                }
                Cmd::Ended => {}
            }
        }
        for (d, db) in st.dbs.iter().enumerate() {
            match db.up {
                true if st.outages > 0 => actions.push(FoundAction::Down(d)),
                true => {}
                false => actions.push(FoundAction::Up(d)),
            }
        }
    }

    fn next_state(&self, last: &FoundState, action: FoundAction) -> Option<FoundState> {
        let mut st = last.clone();
        match action {
            FoundAction::Start(c) => self.start(&mut st, c),
            FoundAction::Step(c) => self.step(&mut st, c),
            FoundAction::Crash(c) => {
                if let Cmd::Running { runs, .. } = st.cmds[c] {
                    st.cmds[c] = Cmd::Idle { runs };
                }
            }
            FoundAction::Down(d) => {
                st.dbs[d].up = false;
                st.outages -= 1;
            }
            FoundAction::Up(d) => st.dbs[d].up = true,
        }
        Some(st)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(DISJOINT, |_, st: &FoundState| {
                let used: Vec<(usize, Residue)> =
                    (1..4u8).flat_map(|read| usable(st, read)).collect();
                used.iter().all(|&(a, ca)| {
                    used.iter()
                        .all(|&(b, cb)| a == b || !layout::overlap(ca, cb))
                })
            }),
            Property::sometimes("a membership recorded", |_, st: &FoundState| {
                (1..4u8).any(|read| !usable(st, read).is_empty())
            }),
        ]
    }
}

fn check(title: &str, model: Migrations, expect_bug: bool) {
    crate::check_small(title, model, DISJOINT, expect_bug);
}

#[test]
fn m_two_migrates_of_different_configurations_never_record_overlapping_members() {
    check("M: two migrates at once", Migrations::new(false, 2), false);
}

#[test]
fn m_without_the_claim_two_memberships_serve_overlapping_classes() {
    check("M without the claim", Migrations::new(true, 0), true);
}
