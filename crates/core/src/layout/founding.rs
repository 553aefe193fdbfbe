//! Recording a cluster's membership: the layout of epoch 0, written by `segmint migrate`.
//!
//! Servers take the members from the databases, never from their own configuration
//! alone: a server configured with some of the databases would otherwise see only
//! those, and two servers of one cluster configured differently would each think
//! itself complete (each recording its own snowflake spec and leasing). So the first
//! `migrate` of a cluster records the configured databases and classes as the layout of
//! epoch 0, and a server serves nothing until it has read a layout that is done.
//!
//! The record is a protocol of its own, the same as a layout change's claim: it is
//! inserted as `moving` on every member one at a time in [`claim_order`] (of two
//! commands with different configurations racing, the second finds the first's row on
//! a database both name and stops), then marked `done` on every member. A server uses
//! no database under a layout still `moving`, so a record cut off midway, or one that
//! lost a race, serves nothing; running `migrate` again finishes it.
//!
//! [`Founding`] is the machine: pure, it says which write it needs next ([`Need`]) and
//! takes the answer. The store carries the steps out on its engines; the model checker
//! carries them out on simulated databases.

use super::{Layout, LayoutState, claim_order, merge, overlap, uncovered};
use crate::rows::LayoutRow;

/// Why the membership cannot be recorded. Nothing was written, or what was written
/// serves nothing until `migrate` runs again.
#[derive(Debug, Clone, PartialEq, Eq, Hash, thiserror::Error)]
pub enum FoundingError {
    /// Databases of the configuration did not answer (or failed a write): the record
    /// names every member, so every one must take it.
    #[error(
        "the cluster's membership is recorded only when every configured database answers; not answering: {}",
        .0.join(", ")
    )]
    Unanswered(Vec<String>),
    /// The configured classes leave IDs to no database: a database is missing from the
    /// configuration.
    #[error(
        "the configured classes ({classes}) give IDs like {id} to no database: a database is missing from this configuration; its membership was not recorded"
    )]
    Uncovered { classes: String, id: i64 },
    /// Two configured databases share IDs.
    #[error("databases \"{0}\" and \"{1}\" have overlapping classes; nothing recorded")]
    Overlap(String, String),
    /// A database holds another epoch-0 record (another configuration's, written
    /// at the same time or before), or rows that cannot be read.
    #[error("database \"{database}\" records another membership: {found}")]
    Differs { database: String, found: String },
}

/// The step the machine needs next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Need {
    /// Insert `row` on `database` if it holds no row of epoch 0 (a claim); answer with
    /// [`Founding::claimed`].
    Claim { database: String, row: LayoutRow },
    /// Read `database`'s layout rows after a claim found a row there; answer with
    /// [`Founding::read`].
    Read { database: String },
    /// Replace the `moving` row of epoch 0 on `database` with `row` (`done`); answer
    /// with [`Founding::marked`].
    MarkDone { database: String, row: LayoutRow },
    /// Finished: the membership is recorded on every member.
    Recorded(Layout),
    /// Stopped; see the error.
    Failed(FoundingError),
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Phase {
    /// Claiming on `order[at]`.
    Claiming {
        at: usize,
    },
    /// The claim on `order[at]` found a row: reading it.
    Checking {
        at: usize,
    },
    /// Marking done on `order[at]`.
    Marking {
        at: usize,
    },
    Recorded,
    Failed(FoundingError),
}

/// The recording of one cluster's membership, as a machine.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Founding {
    /// The layout recorded: epoch 0, the configured members and classes.
    layout: Layout,
    /// The members in claim order.
    order: Vec<String>,
    /// When the rows are written (Unix milliseconds; never 0).
    at_ms: i64,
    phase: Phase,
    /// Whether the rows are claimed `moving` before any is marked `done` (the
    /// safeguard; the model checker switches it off to show it is needed).
    claim: bool,
}

impl Founding {
    /// Decides from the layout rows read on each configured database (`None`: it did
    /// not answer) whether `configured` (the configured databases and classes, in the
    /// configuration's order) must be recorded. `Ok(None)` when a layout is recorded
    /// already: a layout done, or any epoch above 0 (a database that lacks it gets it
    /// from servers, which share the final rows, or from `db add`).
    ///
    /// # Errors
    /// A [`FoundingError`] when recording is refused: a database that did not answer,
    /// classes that leave IDs to none or overlap, or another membership found.
    pub fn start(
        configured: &Layout,
        read: &[(String, Option<Vec<LayoutRow>>)],
        at_ms: i64,
    ) -> Result<Option<Founding>, FoundingError> {
        let rows: Vec<(&String, &LayoutRow)> = read
            .iter()
            .filter_map(|(name, rows)| Some(rows.as_ref()?.iter().map(move |r| (name, r))))
            .flatten()
            .collect();
        if rows
            .iter()
            .any(|(_, r)| r.epoch > 0 || r.state != LayoutState::Moving.as_str())
        {
            return Ok(None);
        }
        let unanswered: Vec<String> = read
            .iter()
            .filter(|(_, rows)| rows.is_none())
            .map(|(name, _)| name.clone())
            .collect();
        if !unanswered.is_empty() {
            return Err(FoundingError::Unanswered(unanswered));
        }
        let classes = configured.members.iter().map(|m| m.class);
        if let Some(id) = uncovered(classes) {
            return Err(FoundingError::Uncovered {
                classes: configured.describe(),
                id,
            });
        }
        for (k, a) in configured.members.iter().enumerate() {
            if let Some(b) = configured.members[k + 1..]
                .iter()
                .find(|b| overlap(a.class, b.class))
            {
                return Err(FoundingError::Overlap(a.name.clone(), b.name.clone()));
            }
        }
        let layout = Layout {
            epoch: 0,
            members: configured.members.clone(),
            state: LayoutState::Moving,
            lost: Vec::new(),
        };
        // A record cut off before continues only if it is this one.
        for (name, row) in rows {
            if !same(&layout, row) {
                return Err(FoundingError::Differs {
                    database: name.clone(),
                    found: describe(row),
                });
            }
        }
        let order = claim_order(&layout, &layout.names());
        Ok(Some(Founding {
            layout,
            order,
            at_ms: at_ms.max(1),
            phase: Phase::Claiming { at: 0 },
            claim: true,
        }))
    }

    /// This record written `done` at once on each member in turn, without the claim:
    /// for the model checker, to show the claim is needed.
    #[must_use]
    pub fn without_the_claim(mut self) -> Founding {
        self.claim = false;
        self
    }

    /// The step needed next.
    pub fn next(&self) -> Need {
        let row = |state| {
            Layout {
                state,
                ..self.layout.clone()
            }
            .row(self.at_ms)
        };
        match &self.phase {
            Phase::Claiming { at } => Need::Claim {
                database: self.order[*at].clone(),
                row: row(match self.claim {
                    true => LayoutState::Moving,
                    false => LayoutState::Done,
                }),
            },
            Phase::Checking { at } => Need::Read {
                database: self.order[*at].clone(),
            },
            Phase::Marking { at } => Need::MarkDone {
                database: self.order[*at].clone(),
                row: row(LayoutState::Done),
            },
            Phase::Recorded => Need::Recorded(Layout {
                state: LayoutState::Done,
                ..self.layout.clone()
            }),
            Phase::Failed(e) => Need::Failed(e.clone()),
        }
    }

    /// The answer to [`Need::Claim`]: `Ok(true)` inserted, `Ok(false)` a row of epoch
    /// 0 was there, `Err` the database failed (the write may or may not have landed).
    pub fn claimed(&mut self, answer: Result<bool, String>) {
        let Phase::Claiming { at } = self.phase else {
            return;
        };
        self.phase = match answer {
            Ok(true) => self.after(at, false),
            Ok(false) => Phase::Checking { at },
            Err(_) => self.unanswered(at),
        };
    }

    /// The answer to [`Need::Read`]: the database's layout rows.
    pub fn read(&mut self, answer: Result<Vec<LayoutRow>, String>) {
        let Phase::Checking { at } = self.phase else {
            return;
        };
        self.phase = match answer {
            Err(_) => self.unanswered(at),
            Ok(rows) => match rows.iter().find(|r| r.epoch == 0) {
                Some(row) if same(&self.layout, row) => self.after(at, false),
                Some(row) => Phase::Failed(FoundingError::Differs {
                    database: self.order[at].clone(),
                    found: describe(row),
                }),
                // Gone between the claim and the read: claim again.
                None => Phase::Claiming { at },
            },
        };
    }

    /// The answer to [`Need::MarkDone`]: `Ok(false)` when the row was not `moving`
    /// (done already: another run of the same record got there first).
    pub fn marked(&mut self, answer: Result<bool, String>) {
        let Phase::Marking { at } = self.phase else {
            return;
        };
        self.phase = match answer {
            Ok(_) => self.after(at, true),
            Err(_) => self.unanswered(at),
        };
    }

    /// The phase after database `at` of the claims (`marking` false) or of the marks.
    fn after(&self, at: usize, marking: bool) -> Phase {
        match (at + 1 < self.order.len(), marking) {
            (true, false) => Phase::Claiming { at: at + 1 },
            (true, true) => Phase::Marking { at: at + 1 },
            (false, false) if self.claim => Phase::Marking { at: 0 },
            (false, _) => Phase::Recorded,
        }
    }

    fn unanswered(&self, at: usize) -> Phase {
        Phase::Failed(FoundingError::Unanswered(vec![self.order[at].clone()]))
    }
}

/// Whether `row` records `layout`'s members (whatever its state).
fn same(layout: &Layout, row: &LayoutRow) -> bool {
    merge(std::slice::from_ref(row)).is_ok_and(|l| {
        l.first()
            .is_some_and(|l| l.members == layout.members && l.lost == layout.lost)
    })
}

fn describe(row: &LayoutRow) -> String {
    format!("epoch {} ({}): {}", row.epoch, row.state, row.members)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::Residue;

    fn configured(names: &[&str]) -> Layout {
        let names: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        Layout::spread(0, &names, LayoutState::Done).unwrap()
    }

    fn empty(names: &[&str]) -> Vec<(String, Option<Vec<LayoutRow>>)> {
        names
            .iter()
            .map(|n| ((*n).to_owned(), Some(Vec::new())))
            .collect()
    }

    /// Runs the machine to its end against `held`, each database's epoch-0 row.
    fn run(mut f: Founding, held: &mut [(String, Option<LayoutRow>)]) -> Need {
        loop {
            match f.next() {
                Need::Claim { database, row } => {
                    let slot = &mut held.iter_mut().find(|(n, _)| *n == database).unwrap().1;
                    let inserted = slot.is_none();
                    if inserted {
                        *slot = Some(row);
                    }
                    f.claimed(Ok(inserted));
                }
                Need::Read { database } => {
                    let slot = &held.iter().find(|(n, _)| *n == database).unwrap().1;
                    f.read(Ok(slot.iter().cloned().collect()));
                }
                Need::MarkDone { database, row } => {
                    let slot = &mut held.iter_mut().find(|(n, _)| *n == database).unwrap().1;
                    let moving = slot.as_ref().is_some_and(|r| r.state == "moving");
                    if moving {
                        *slot = Some(row);
                    }
                    f.marked(Ok(moving));
                }
                end => return end,
            }
        }
    }

    #[test]
    fn records_every_member_moving_then_done() {
        let c = configured(&["b", "a"]);
        let f = Founding::start(&c, &empty(&["b", "a"]), 5)
            .unwrap()
            .unwrap();
        let mut held = vec![("a".to_owned(), None), ("b".to_owned(), None)];
        let Need::Recorded(l) = run(f, &mut held) else {
            panic!("not recorded")
        };
        assert_eq!(l.members, c.members);
        assert!(
            held.iter()
                .all(|(_, r)| r.as_ref().unwrap().state == "done")
        );
    }

    #[test]
    fn a_recorded_layout_is_left_alone() {
        let c = configured(&["a"]);
        let done = c.row(7);
        let read = vec![("a".to_owned(), Some(vec![done]))];
        assert_eq!(Founding::start(&c, &read, 5), Ok(None));
    }

    #[test]
    fn refuses_without_every_database_or_with_a_class_missing() {
        let c = configured(&["a", "b"]);
        let read = vec![("a".to_owned(), Some(Vec::new())), ("b".to_owned(), None)];
        assert_eq!(
            Founding::start(&c, &read, 5),
            Err(FoundingError::Unanswered(vec!["b".into()]))
        );
        let mut half = c.clone();
        half.members.truncate(1);
        assert!(matches!(
            Founding::start(&half, &empty(&["a"]), 5),
            Err(FoundingError::Uncovered { id: 1, .. })
        ));
        let mut both = c.clone();
        both.members[1].class = Residue::new(1, 0).unwrap();
        assert!(matches!(
            Founding::start(&both, &empty(&["a", "b"]), 5),
            Err(FoundingError::Overlap(..))
        ));
    }

    #[test]
    fn of_two_configurations_racing_the_second_stops_at_the_first_shared_database() {
        // One command names a and b; the other b alone, with every ID (1 mod 1).
        let ab = configured(&["a", "b"]);
        let mut b_only = configured(&["b"]);
        b_only.members[0].class = Residue::new(1, 0).unwrap();
        let first = Founding::start(&ab, &empty(&["a", "b"]), 5)
            .unwrap()
            .unwrap();
        let second = Founding::start(&b_only, &empty(&["b"]), 5)
            .unwrap()
            .unwrap();
        let mut held = vec![("a".to_owned(), None), ("b".to_owned(), None)];
        assert!(matches!(run(second, &mut held), Need::Recorded(_)));
        assert!(matches!(
            run(first, &mut held),
            Need::Failed(FoundingError::Differs { ref database, .. }) if database == "b"
        ));
        // The loser's claim on `a` stays moving: no server uses a database under it.
        assert_eq!(held[0].1.as_ref().unwrap().state, "moving");
    }

    #[test]
    fn a_record_cut_off_midway_is_finished_by_the_same_configuration_only() {
        let c = configured(&["a", "b"]);
        let moving = Layout {
            state: LayoutState::Moving,
            ..c.clone()
        }
        .row(3);
        let read = vec![
            ("a".to_owned(), Some(vec![moving.clone()])),
            ("b".to_owned(), Some(Vec::new())),
        ];
        let f = Founding::start(&c, &read, 5).unwrap().unwrap();
        let mut held = vec![("a".to_owned(), Some(moving)), ("b".to_owned(), None)];
        assert!(matches!(run(f, &mut held), Need::Recorded(_)));
        let other = configured(&["a", "c"]);
        assert!(matches!(
            Founding::start(&other, &read, 5),
            Err(FoundingError::Differs { .. })
        ));
    }
}
