//! A model of sequence sections: servers owning a section and raising its bound through
//! the machine they run (`segmint_core::sequence::claim::Claim`), driven here one read
//! or write at a time against simulated databases, and answering one key's next number
//! from memory. Faults: databases go down and come back, one is restored from a backup
//! (its row as before its last write), a server crashes (its memory lost, its rows live
//! until their lease runs out), and a server's lease runs out while it is paused or cut
//! off ([`Action::Lapse`]): it stops answering and forgets its keys, and only then do
//! the databases count its rows as run out (the lease measured by the server from the
//! start of its claim, by the databases from their write, with a grace).
//!
//! The property: every number answered for the key is greater than every number
//! answered before it (so none repeats or goes back), in the order of the answers.
//! With three databases, any one down or restored at a time; with two, one down (the
//! sections then stop) or restored; with one, a restore only under the one server that
//! wrote the row, alive since (another server goes back: checked to).

use segmint_core::sequence::claim::{Claim, Need, Outcome, Read, Safeguards, SectionRow, Written};
use stateright::{Model, Property};

const BACK: &str = "no number repeats or goes back";

/// A section's row on one database. The model keeps no times: a row's lease is live
/// until its holder's lease runs out ([`Action::Lapse`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Row {
    holder: usize,
    version: i64,
    bound: i64,
    live: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Db {
    up: bool,
    row: Option<Row>,
    /// The row before its last write: what a restore brings back.
    before: Option<Row>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Server {
    /// Answering the section: its floor and bound.
    serving: Option<(i64, i64)>,
    /// A claim in flight, and whether its lease ran out on the way.
    claim: Option<(Box<Claim>, bool)>,
    /// The last number it answered for the key since it took the section.
    last: i64,
    /// The versions of the rows it wrote last: the evidence it keeps while it lives.
    known: Vec<Option<i64>>,
    claims: u8,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SeqState {
    dbs: Vec<Db>,
    servers: Vec<Server>,
    /// The highest number answered, and by whom.
    answered: i64,
    by: Option<usize>,
    went_back: bool,
    /// A server answered after another had.
    failover: bool,
    outages: u8,
    restores: u8,
    crashes: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// Server `s` starts a claim: a take, or a raise once its bound is used up.
    Claim(usize),
    /// Server `s`'s claim reads database `d`.
    Read(usize, usize),
    /// Server `s`'s claim writes database `d`.
    Write(usize, usize),
    /// Server `s` answers the key's next number.
    Answer(usize),
    /// Server `s`'s lease runs out (paused, cut off, or crashed before).
    Lapse(usize),
    Crash(usize),
    Down(usize),
    Up(usize),
    Restore(usize),
}

pub struct Sections {
    title: &'static str,
    servers: usize,
    dbs: usize,
    step: i64,
    /// No bound above it is claimed: keeps the model finite.
    top: i64,
    /// Claims the first server may start; the others one fewer.
    claims: u8,
    outages: u8,
    restores: u8,
    crashes: u8,
    /// At most one database faulty (down or restored) at a time.
    one_fault: bool,
    safeguards: Safeguards,
}

impl Sections {
    fn new(title: &'static str, servers: usize, dbs: usize) -> Sections {
        Sections {
            title,
            servers,
            dbs,
            step: 2,
            // Deeper: bounds up to 6. (A claim more per server took the crash
            // scenario past 4 minutes, 2026-11-28: not checked.)
            top: if crate::deep() { 6 } else { 4 },
            claims: 2,
            outages: 1,
            restores: 1,
            crashes: 1,
            one_fault: true,
            safeguards: Safeguards::ALL,
        }
    }

    fn holder(s: usize) -> String {
        format!("server {s}")
    }

    fn read_of(db: &Db) -> Read {
        match (db.up, db.row) {
            (false, _) => Read::Down,
            (true, None) => Read::Absent,
            (true, Some(r)) => Read::Row(SectionRow {
                holder: Self::holder(r.holder),
                version: r.version,
                bound: r.bound,
                // A live lease runs out after the database's clock (0); a run-out one
                // before it, by more than any grace.
                expires_ms: if r.live { 1 } else { -1 },
                db_now_ms: 0,
            }),
        }
    }

    fn faulty(st: &SeqState) -> bool {
        st.dbs.iter().any(|d| !d.up) || st.restores == 0
    }

    /// Ends server `s`'s claim if it is done.
    fn settle(&self, st: &mut SeqState, s: usize) {
        let server = &mut st.servers[s];
        let Some((claim, late)) = &server.claim else {
            return;
        };
        let Need::Done(outcome) = claim.need() else {
            return;
        };
        let late = *late;
        server.claim = None;
        if let Outcome::Owned {
            floor,
            bound,
            versions,
            ..
        } = outcome
        {
            for (d, v) in versions.into_iter().enumerate() {
                if v.is_some() {
                    server.known[d] = v;
                }
            }
            if !late {
                let floor = server.serving.map_or(floor, |(f, _)| f.max(floor));
                server.serving = Some((floor, bound));
            }
        }
    }
}

impl Model for Sections {
    type State = SeqState;
    type Action = Action;

    fn init_states(&self) -> Vec<SeqState> {
        vec![SeqState {
            dbs: vec![
                Db {
                    up: true,
                    row: None,
                    before: None,
                };
                self.dbs
            ],
            servers: (0..self.servers)
                .map(|s| Server {
                    serving: None,
                    claim: None,
                    last: 0,
                    known: vec![None; self.dbs],
                    claims: if s == 0 { self.claims } else { self.claims - 1 },
                })
                .collect(),
            answered: 0,
            by: None,
            went_back: false,
            failover: false,
            outages: self.outages,
            restores: self.restores,
            crashes: self.crashes,
        }]
    }

    fn actions(&self, st: &SeqState, actions: &mut Vec<Action>) {
        for (s, server) in st.servers.iter().enumerate() {
            match &server.claim {
                Some((claim, _)) => match claim.need() {
                    Need::Read(ds) => actions.extend(ds.into_iter().map(|d| Action::Read(s, d))),
                    Need::Write(ws) => {
                        actions.extend(ws.into_iter().map(|(d, _)| Action::Write(s, d)))
                    }
                    Need::Done(_) => {}
                },
                None if server.claims > 0 => match server.serving {
                    None => actions.push(Action::Claim(s)),
                    Some((floor, bound)) if server.last.max(floor) >= bound && bound < self.top => {
                        actions.push(Action::Claim(s))
                    }
                    Some(_) => {}
                },
                None => {}
            }
            if let Some((floor, bound)) = server.serving
                && server.last.max(floor) < bound
            {
                actions.push(Action::Answer(s));
            }
            let rows_live = st
                .dbs
                .iter()
                .any(|d| d.row.is_some_and(|r| r.holder == s && r.live));
            if server.serving.is_some()
                || server.claim.as_ref().is_some_and(|(_, late)| !late)
                || rows_live
            {
                actions.push(Action::Lapse(s));
            }
            if st.crashes > 0 {
                actions.push(Action::Crash(s));
            }
        }
        for (d, db) in st.dbs.iter().enumerate() {
            if db.up {
                if st.outages > 0 && !(self.one_fault && Self::faulty(st)) {
                    actions.push(Action::Down(d));
                }
            } else {
                actions.push(Action::Up(d));
            }
            if st.restores > 0 && db.before != db.row && !(self.one_fault && Self::faulty(st)) {
                actions.push(Action::Restore(d));
            }
        }
    }

    fn next_state(&self, last: &SeqState, action: Action) -> Option<SeqState> {
        let mut st = last.clone();
        match action {
            Action::Claim(s) => {
                let server = &mut st.servers[s];
                server.claims -= 1;
                let claim = Claim::new(
                    Self::holder(s),
                    self.step,
                    0,
                    server.known.clone(),
                    self.safeguards,
                );
                server.claim = Some((Box::new(claim), false));
            }
            Action::Read(s, d) => {
                let read = Self::read_of(&st.dbs[d]);
                let (claim, _) = st.servers[s].claim.as_mut()?;
                claim.read(d, read);
                self.settle(&mut st, s);
            }
            Action::Write(s, d) => {
                let (claim, _) = st.servers[s].claim.as_mut()?;
                let Need::Write(ws) = claim.need() else {
                    return None;
                };
                let (_, write) = ws.into_iter().find(|(w, _)| *w == d)?;
                let db = &mut st.dbs[d];
                let answer = if !db.up {
                    Written::Down
                } else if db.row.map(|r| r.version) == write.expected {
                    let version = write.expected.unwrap_or(0) + 1;
                    db.before = db.row;
                    db.row = Some(Row {
                        holder: s,
                        version,
                        bound: write.bound,
                        live: true,
                    });
                    Written::At(version)
                } else {
                    Written::Lost
                };
                claim.written(d, answer);
                self.settle(&mut st, s);
            }
            Action::Answer(s) => {
                let server = &mut st.servers[s];
                let (floor, _) = server.serving?;
                let n = server.last.max(floor) + 1;
                server.last = n;
                if n <= st.answered {
                    st.went_back = true;
                }
                if st.by.is_some_and(|b| b != s) {
                    st.failover = true;
                }
                st.answered = st.answered.max(n);
                st.by = Some(s);
            }
            Action::Lapse(s) => {
                let server = &mut st.servers[s];
                server.serving = None;
                server.last = 0;
                if let Some((_, late)) = &mut server.claim {
                    *late = true;
                }
                for db in &mut st.dbs {
                    if let Some(r) = &mut db.row
                        && r.holder == s
                    {
                        r.live = false;
                    }
                }
            }
            Action::Crash(s) => {
                st.crashes -= 1;
                let server = &mut st.servers[s];
                server.serving = None;
                server.claim = None;
                server.last = 0;
                server.known = vec![None; self.dbs];
            }
            Action::Down(d) => {
                st.outages -= 1;
                st.dbs[d].up = false;
            }
            Action::Up(d) => st.dbs[d].up = true,
            Action::Restore(d) => {
                st.restores -= 1;
                let db = &mut st.dbs[d];
                db.row = db.before;
            }
        }
        // What a restore would bring back matters no more once none is left: one
        // state for all such histories.
        if st.restores == 0 {
            for db in &mut st.dbs {
                db.before = None;
            }
        }
        Some(st)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = vec![
            Property::always(BACK, |_, st: &SeqState| !st.went_back),
            Property::sometimes(
                "a number answered past a raise",
                |m: &Sections, st: &SeqState| st.answered > m.step,
            ),
        ];
        if self.servers > 1 {
            properties.push(Property::sometimes(
                "another server answers after a failover",
                |_, st: &SeqState| st.failover,
            ));
        }
        properties
    }
}

fn check(model: Sections, expect_bug: bool) {
    let title = model.title;
    crate::check_small(title, model, BACK, expect_bug);
}

/// `m` with these faults only: outages, restores, crashes. (All at once multiply the
/// states past what a check of seconds explores; each kind's bug is found alone.)
fn faults(mut m: Sections, (outages, restores, crashes): (u8, u8, u8)) -> Sections {
    (m.outages, m.restores, m.crashes) = (outages, restores, crashes);
    m
}

#[test]
fn p_three_databases_one_down() {
    let m = Sections::new("P: sections, three databases, one down", 2, 3);
    check(faults(m, (1, 0, 0)), false);
}

#[test]
fn p_three_databases_one_restored() {
    let m = Sections::new("P: sections, three databases, one restored", 2, 3);
    check(faults(m, (0, 1, 0)), false);
}

#[test]
fn p_three_databases_a_server_crashed() {
    let m = Sections::new("P: sections, three databases, a crash", 2, 3);
    check(faults(m, (0, 0, 1)), false);
}

#[test]
fn p_two_databases_one_down_or_restored() {
    let m = Sections::new("P: sections, two databases", 2, 2);
    check(faults(m, (1, 1, 0)), false);
}

#[test]
fn p_one_database_restored_under_its_living_server() {
    let mut m = Sections::new("P: sections, one database, one server", 1, 1);
    m.crashes = 0;
    check(m, false);
}

#[test]
fn p_one_database_restored_for_another_server_goes_back() {
    // What docs/sequences.md says: with one database, nothing but the server that
    // wrote the row knows it went back.
    let mut m = Sections::new("P: sections, one database, two servers", 2, 1);
    m.outages = 0;
    check(m, true);
}

#[test]
fn p_taking_a_live_lease_is_caught() {
    let mut m = Sections::new("P without the lease check", 2, 3);
    m.safeguards.lease = false;
    (m.outages, m.restores, m.crashes) = (0, 0, 0);
    check(m, true);
}

#[test]
fn p_a_minority_is_caught() {
    let mut m = Sections::new("P counting a minority", 2, 2);
    m.safeguards.majority = false;
    (m.outages, m.restores, m.crashes, m.one_fault) = (2, 0, 0, false);
    check(m, true);
}

#[test]
fn p_a_bare_majority_undone_by_a_restore_is_caught() {
    let mut m = Sections::new("P counting a bare majority of the rows read", 2, 3);
    m.safeguards.all_written = false;
    (m.outages, m.crashes) = (0, 0);
    check(m, true);
}

#[test]
fn p_a_restore_without_the_evidence_is_caught() {
    let mut m = Sections::new("P without the evidence", 1, 1);
    m.safeguards.evidence = false;
    (m.outages, m.crashes) = (0, 0);
    check(m, true);
}
