//! A model of the snowflake spec agreement (`crates/core/src/snowflake/agreement.rs`,
//! run by `crates/store/src/cluster/agreement.rs`): three servers, one with Leaf's
//! layout and two with the JavaScript-safe one (their records made by `Spec::record`),
//! two databases of the layout in force, each server reading every database one at a
//! time, inserting its record where absent (insert-if-absent) and reading every
//! database again, each decision made by the project's own `agree`; after a read that
//! found every database holding its spec, it confirms each record (one database a
//! step, only a record of its spec). Databases go down and come back, and one is
//! restored from a backup older than its record (its record and confirmation erased).
//! A server undecided tries again, and a server that leased may lose its lease and take
//! another, a bounded number of times.
//!
//! The property: never two servers with different specs both allowed to lease. Not
//! modelled: every database restored to before the record while a server holds a
//! lease (then nothing records what it issued with).

use std::collections::BTreeSet;
use std::time::Instant;

use segmint_core::snowflake::agreement::{Agreement, Read, agree};
use segmint_core::snowflake::{Layout, Spec};
use stateright::{Checker, HasDiscoveries, Model, Property};

use crate::threads;

const BOTH: &str = "never two specs leased";
const SERVERS: usize = 3;
/// The spec of each server: Leaf's, then the JavaScript-safe one twice (a fresh server
/// of a spec another server already recorded somewhere).
const SPEC_OF: [usize; SERVERS] = [0, 1, 1];
const DBS: usize = 2;

/// What one database holds: the index of the spec it records, and whether the record
/// is confirmed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Db {
    up: bool,
    record: Option<usize>,
    confirmed: bool,
}

/// What a read found, by spec index rather than text (the text is compared by
/// `agree`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Seen {
    Down,
    Empty,
    Holds(usize, bool),
}

/// Where a server is in its try.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Phase {
    /// Reading database `reads.len()` next; `recorded` on the read after inserting.
    Reading { reads: Vec<Seen>, recorded: bool },
    /// Inserting its record on database `next` (where the read found none).
    Inserting { next: usize, empty: Vec<bool> },
    /// Confirming its record on database `next`, then leasing.
    Confirming { next: usize },
    /// Allowed to lease.
    Leased,
    /// Refused for good (another spec found), or out of tries.
    Refused,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Server {
    phase: Phase,
    /// Tries left after this one.
    tries: u8,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AgreeState {
    dbs: [Db; DBS],
    servers: [Server; SERVERS],
    /// Outages left to start.
    outages: u8,
    /// Restores left.
    restores: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AgreeAction {
    /// Server `s` makes its next read or insert.
    Step(usize),
    Down(usize),
    Up(usize),
    /// Database `d` restored from a backup older than its record.
    Restore(usize),
    /// Server `s` lost its lease and tries to take another.
    Lose(usize),
}

/// Which safeguard is switched off, to check that the model finds the bug it stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutation {
    None,
    /// `agree` given only the databases that answered: a server writes (and leases)
    /// having read some of the layout's databases.
    AnsweringOnly,
    /// A server leases right after its inserts, without reading every database again.
    NoReread,
    /// Every server leases on a partial read (every database that answered holds its
    /// spec, one at least), the records confirmed or not.
    PartialForAll,
}

pub struct Agreement2 {
    /// Each spec's record.
    records: [String; 2],
    mutation: Mutation,
    outages: u8,
    restores: u8,
    tries: u8,
}

impl Agreement2 {
    fn new(mutation: Mutation, outages: u8, restores: u8) -> Agreement2 {
        let leaf = Spec::default();
        let js = Spec {
            layout: Layout::JS,
            ..leaf
        };
        Agreement2 {
            records: [leaf.record(), js.record()],
            mutation,
            outages,
            restores,
            // Every try after the first multiplies the states: a second one (7.4 million
            // unique states, 75 s on two cores) only in the deep run.
            tries: if crate::deep() { 2 } else { 1 },
        }
    }

    /// The decision of a server of spec `spec` on `reads`, through the project's
    /// `agree`.
    fn decide(&self, spec: usize, reads: &[Seen]) -> Agreement {
        let reads: Vec<Read<'_>> = reads
            .iter()
            .filter(|r| self.mutation != Mutation::AnsweringOnly || **r != Seen::Down)
            .map(|r| match r {
                Seen::Down => Read::Down,
                Seen::Empty => Read::Empty,
                Seen::Holds(o, confirmed) => Read::Holds(
                    &self.records[*o],
                    *confirmed || self.mutation == Mutation::PartialForAll,
                ),
            })
            .collect();
        agree(&self.records[spec], &reads)
    }

    /// After a try ends undecided: another from the start, or refused when none is left.
    fn again(server: &mut Server) {
        if server.tries == 0 {
            server.phase = Phase::Refused;
        } else {
            server.tries -= 1;
            server.phase = Phase::Reading {
                reads: Vec::new(),
                recorded: false,
            };
        }
    }

    fn step(&self, st: &mut AgreeState, s: usize) {
        let server = &mut st.servers[s];
        match server.phase.clone() {
            Phase::Reading {
                mut reads,
                recorded,
            } => {
                let db = st.dbs[reads.len()];
                reads.push(match (db.up, db.record) {
                    (false, _) => Seen::Down,
                    (true, None) => Seen::Empty,
                    (true, Some(o)) => Seen::Holds(o, db.confirmed),
                });
                if reads.len() < DBS {
                    server.phase = Phase::Reading { reads, recorded };
                    return;
                }
                match self.decide(SPEC_OF[s], &reads) {
                    Agreement::Agreed { every: true } => {
                        server.phase = Phase::Confirming { next: 0 };
                    }
                    Agreement::Agreed { every: false } => server.phase = Phase::Leased,
                    Agreement::Differs { .. } => server.phase = Phase::Refused,
                    Agreement::Undecided => Agreement2::again(server),
                    Agreement::Record if recorded => Agreement2::again(server),
                    Agreement::Record => {
                        server.phase = Phase::Inserting {
                            next: 0,
                            empty: reads.iter().map(|r| *r == Seen::Empty).collect(),
                        };
                    }
                }
            }
            Phase::Inserting { next, empty } => {
                let db = &mut st.dbs[next];
                // Insert-if-absent; a database down fails the insert (the read after
                // decides).
                if empty[next] && db.up && db.record.is_none() {
                    db.record = Some(SPEC_OF[s]);
                }
                server.phase = if next + 1 < DBS {
                    Phase::Inserting {
                        next: next + 1,
                        empty,
                    }
                } else if self.mutation == Mutation::NoReread {
                    Phase::Leased
                } else {
                    Phase::Reading {
                        reads: Vec::new(),
                        recorded: true,
                    }
                };
            }
            Phase::Confirming { next } => {
                let db = &mut st.dbs[next];
                if db.up && db.record == Some(SPEC_OF[s]) {
                    db.confirmed = true;
                }
                server.phase = if next + 1 < DBS {
                    Phase::Confirming { next: next + 1 }
                } else {
                    Phase::Leased
                };
            }
            Phase::Leased | Phase::Refused => {}
        }
    }
}

impl Model for Agreement2 {
    type State = AgreeState;
    type Action = AgreeAction;

    fn init_states(&self) -> Vec<AgreeState> {
        let server = Server {
            phase: Phase::Reading {
                reads: Vec::new(),
                recorded: false,
            },
            tries: self.tries,
        };
        vec![AgreeState {
            dbs: [Db {
                up: true,
                record: None,
                confirmed: false,
            }; DBS],
            servers: [server.clone(), server.clone(), server],
            outages: self.outages,
            restores: self.restores,
        }]
    }

    fn actions(&self, st: &AgreeState, actions: &mut Vec<AgreeAction>) {
        for (s, server) in st.servers.iter().enumerate() {
            match server.phase {
                Phase::Leased if server.tries > 0 => actions.push(AgreeAction::Lose(s)),
                Phase::Leased | Phase::Refused => {}
                _ => actions.push(AgreeAction::Step(s)),
            }
        }
        for (d, db) in st.dbs.iter().enumerate() {
            if db.up && st.outages > 0 {
                actions.push(AgreeAction::Down(d));
            }
            if !db.up {
                actions.push(AgreeAction::Up(d));
            }
            if db.record.is_some() && st.restores > 0 {
                actions.push(AgreeAction::Restore(d));
            }
        }
    }

    fn next_state(&self, last: &AgreeState, action: AgreeAction) -> Option<AgreeState> {
        let mut st = last.clone();
        match action {
            AgreeAction::Step(s) => self.step(&mut st, s),
            AgreeAction::Lose(s) => Agreement2::again(&mut st.servers[s]),
            AgreeAction::Down(d) => {
                st.dbs[d].up = false;
                st.outages -= 1;
            }
            AgreeAction::Up(d) => st.dbs[d].up = true,
            AgreeAction::Restore(d) => {
                st.dbs[d].record = None;
                st.dbs[d].confirmed = false;
                st.restores -= 1;
            }
        }
        Some(st)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(BOTH, |_, st: &AgreeState| {
                let leased: BTreeSet<usize> = (0..SERVERS)
                    .filter(|&s| st.servers[s].phase == Phase::Leased)
                    .map(|s| SPEC_OF[s])
                    .collect();
                leased.len() < 2
            }),
            Property::sometimes("a server leases", |_, st: &AgreeState| {
                st.servers.iter().any(|s| s.phase == Phase::Leased)
            }),
            Property::sometimes("every server refused", |_, st: &AgreeState| {
                st.servers.iter().all(|s| s.phase == Phase::Refused)
            }),
            Property::sometimes("a lease taken on a partial read", |_, st: &AgreeState| {
                st.servers
                    .iter()
                    .any(|s| s.phase == Phase::Leased && st.dbs.iter().any(|d| !d.up))
            }),
        ]
    }
}

/// Checks `model` over every reachable state, or until a counterexample to [`BOTH`]
/// when `expect_bug`; prints the counts, and the trace of a counterexample.
fn check(title: &str, model: Agreement2, expect_bug: bool) {
    let started = Instant::now();
    let mut builder = model.checker().threads(threads());
    if expect_bug {
        builder = builder.finish_when(HasDiscoveries::AnyOf(BTreeSet::from([BOTH])));
    }
    let checker = builder.spawn_bfs().join();
    eprintln!(
        "{title}: {} states ({} unique), depth {}, {:.2} s",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth(),
        started.elapsed().as_secs_f64()
    );
    match (checker.discovery(BOTH), expect_bug) {
        (Some(path), true) => eprintln!("{title}: counterexample, as expected:\n{path:?}"),
        (None, true) => panic!("{title}: expected a counterexample to \"{BOTH}\", found none"),
        (Some(path), false) => panic!("{title}: counterexample to \"{BOTH}\":\n{path:?}"),
        (None, false) => checker.assert_properties(),
    }
}

#[test]
fn k_servers_with_different_specs_never_both_lease() {
    check(
        "K: spec agreement",
        Agreement2::new(Mutation::None, 2, 1),
        false,
    );
}

#[test]
fn k_recording_after_reading_only_the_answering_databases_is_caught() {
    check(
        "K without reading every database",
        Agreement2::new(Mutation::AnsweringOnly, 2, 1),
        true,
    );
}

#[test]
fn k_leasing_on_a_partial_read_of_unconfirmed_records_is_caught() {
    check(
        "K leasing on partial reads of unconfirmed records",
        Agreement2::new(Mutation::PartialForAll, 2, 1),
        true,
    );
}

#[test]
fn k_leasing_without_the_read_after_recording_is_caught() {
    check(
        "K without the read after recording",
        Agreement2::new(Mutation::NoReread, 0, 0),
        true,
    );
}
