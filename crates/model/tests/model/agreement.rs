//! A model of the snowflake spec agreement: the machine the servers run
//! (`segmint_core::snowflake::agreement::Try`, carried out by
//! `crates/store/src/cluster/agreement.rs`) driven here one step at a time against
//! simulated databases. Three servers, one with Leaf's layout and two with the
//! JavaScript-safe one (their records made by `Spec::record`), two databases of the
//! layout in force, each server configured with both or with one of them (a member it
//! is not configured with counts as not answering). Databases go down and come back,
//! and one is restored from a backup older than its record (its record and
//! confirmation erased). A server undecided tries again, and a server that leased may
//! lose its lease and take another, a bounded number of times.
//!
//! The property: never two servers with different specs both allowed to lease. Not
//! modelled: every database restored to before the record while a server holds a
//! lease (then nothing records what it issued with).

use std::collections::BTreeSet;

use segmint_core::snowflake::agreement::{Agreement, Outcome, Read, Record, Step, Try, agree};
use segmint_core::snowflake::{Layout, Spec};
use stateright::{Model, Property};

const BOTH: &str = "never two specs leased";
const SERVERS: usize = 3;
const DBS: usize = 2;

/// What one database holds: the index of the spec it records, and whether the record
/// is confirmed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Db {
    up: bool,
    record: Option<usize>,
    confirmed: bool,
}

/// Where a server is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Phase {
    /// Running a try of the agreement.
    Trying(Box<Try>),
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
    /// Server `s` makes its next read or write.
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
    /// A server takes the members from its configuration (`Store::members_in_force`
    /// without the recorded membership): the databases it is configured with are, to
    /// it, the whole cluster.
    MembersFromConfig,
}

/// `agree` on the reads of the databases that answered only.
fn answering_only(own: &str, reads: &[Read<'_>]) -> Agreement {
    let answered: Vec<Read<'_>> = reads.iter().copied().filter(|r| *r != Read::Down).collect();
    agree(own, &answered)
}

/// `agree` taking every record read for confirmed.
fn partial_for_all(own: &str, reads: &[Read<'_>]) -> Agreement {
    let confirmed: Vec<Read<'_>> = reads
        .iter()
        .map(|r| match r {
            Read::Holds(s, _) => Read::Holds(s, true),
            r => *r,
        })
        .collect();
    agree(own, &confirmed)
}

pub struct Agreement2 {
    /// Each spec's record.
    records: [String; 2],
    /// The spec of each server (an index of `records`).
    spec_of: [usize; SERVERS],
    /// The databases each server is configured with (bits).
    configs: [u8; SERVERS],
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
            // Leaf's layout, then the JavaScript-safe one twice (a fresh server of a
            // spec another server already recorded somewhere).
            spec_of: [0, 1, 1],
            configs: [0b11; SERVERS],
            mutation,
            outages,
            restores,
            // Every try after the first multiplies the states: a second one (7.4 million
            // unique states, 75 s on two cores) only in the deep run.
            tries: if crate::deep() { 2 } else { 1 },
        }
    }

    /// Servers configured with parts of the cluster (issue 47's reproductions): Leaf's
    /// with pg0 alone, the JavaScript-safe ones with pg1 alone and with both.
    fn partial(mutation: Mutation, outages: u8, restores: u8) -> Agreement2 {
        Agreement2 {
            configs: [0b01, 0b10, 0b11],
            ..Agreement2::new(mutation, outages, restores)
        }
    }

    /// A new try of server `s`, as the store starts one: over the members of the
    /// layout (both databases), those it is not configured with counting as not
    /// answering; or, with the membership rule taken out, over its configuration.
    fn try_of(&self, s: usize) -> Box<Try> {
        let configured: Vec<bool> = (0..DBS).map(|d| self.configs[s] & (1 << d) != 0).collect();
        let members = match self.mutation {
            Mutation::MembersFromConfig => vec![true; configured.iter().filter(|c| **c).count()],
            _ => configured,
        };
        let t = Try::new(self.records[self.spec_of[s]].clone(), members);
        Box::new(match self.mutation {
            Mutation::AnsweringOnly => t.with_rule(answering_only),
            Mutation::PartialForAll => t.with_rule(partial_for_all),
            Mutation::NoReread => t.without_the_read_after_recording(),
            Mutation::None | Mutation::MembersFromConfig => t,
        })
    }

    /// The database of server `s`'s member `k` (its configuration's `k`-th, with the
    /// membership rule taken out).
    fn db_of(&self, s: usize, k: usize) -> usize {
        match self.mutation {
            Mutation::MembersFromConfig => (0..DBS)
                .filter(|d| self.configs[s] & (1 << d) != 0)
                .nth(k)
                .expect("a configured database"),
            _ => k,
        }
    }

    /// After a try ends undecided: another from the start, or refused when none is left.
    fn again(&self, st: &mut AgreeState, s: usize) {
        let server = &mut st.servers[s];
        if server.tries == 0 {
            server.phase = Phase::Refused;
        } else {
            server.tries -= 1;
            server.phase = Phase::Trying(self.try_of(s));
        }
    }

    /// Server `s` carries out the first step its try needs, on the simulated databases.
    fn step(&self, st: &mut AgreeState, s: usize) {
        let Phase::Trying(mut t) = st.servers[s].phase.clone() else {
            return;
        };
        let spec = self.spec_of[s];
        if let Some(&step) = t.steps().first() {
            match step {
                Step::Read(k) => {
                    let db = st.dbs[self.db_of(s, k)];
                    t.read(
                        k,
                        match (db.up, db.record) {
                            (false, _) => Record::Down,
                            (true, None) => Record::Empty,
                            (true, Some(o)) => Record::Holds(self.records[o].clone(), db.confirmed),
                        },
                    );
                }
                Step::Insert(k) => {
                    // Insert-if-absent; a database down fails the insert (the read
                    // after decides).
                    let db = &mut st.dbs[self.db_of(s, k)];
                    if db.up && db.record.is_none() {
                        db.record = Some(spec);
                    }
                    t.inserted(k);
                }
                Step::Confirm(k) => {
                    let db = &mut st.dbs[self.db_of(s, k)];
                    if db.up && db.record == Some(spec) {
                        db.confirmed = true;
                    }
                    t.confirmed(k);
                }
            }
        }
        match t.outcome() {
            None => st.servers[s].phase = Phase::Trying(t),
            Some(Outcome::Lease) => st.servers[s].phase = Phase::Leased,
            Some(Outcome::Differs { .. }) => st.servers[s].phase = Phase::Refused,
            Some(Outcome::Undecided { .. }) => self.again(st, s),
        }
    }
}

impl Model for Agreement2 {
    type State = AgreeState;
    type Action = AgreeAction;

    fn init_states(&self) -> Vec<AgreeState> {
        let server = |s: usize| Server {
            phase: Phase::Trying(self.try_of(s)),
            tries: self.tries,
        };
        vec![AgreeState {
            dbs: [Db {
                up: true,
                record: None,
                confirmed: false,
            }; DBS],
            servers: [server(0), server(1), server(2)],
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
            AgreeAction::Lose(s) => self.again(&mut st, s),
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
            Property::always(BOTH, |m: &Agreement2, st: &AgreeState| {
                let leased: BTreeSet<usize> = (0..SERVERS)
                    .filter(|&s| st.servers[s].phase == Phase::Leased)
                    .map(|s| m.spec_of[s])
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

fn check(title: &str, model: Agreement2, expect_bug: bool) {
    crate::check_small(title, model, BOTH, expect_bug);
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

#[test]
fn l_servers_configured_with_parts_of_the_cluster_never_lease_two_specs() {
    check(
        "L: spec agreement, partial configurations",
        Agreement2::partial(Mutation::None, 1, 1),
        false,
    );
}

#[test]
fn l_with_members_from_the_configuration_two_specs_lease() {
    check(
        "L with members from the configuration",
        Agreement2::partial(Mutation::MembersFromConfig, 0, 0),
        true,
    );
}
