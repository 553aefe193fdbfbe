//! The snowflake spec (epoch and bit layout) a cluster's servers agree on before any of
//! them leases a worker ID. Two servers with different specs could issue equal IDs
//! (a JavaScript-safe ID of one is a Leaf ID of another), so every database keeps one
//! record of the spec, written once and never changed, and [`agree`] decides from a
//! read of every database of the layout in force:
//!
//! - a database holding another spec refuses the lease for good
//!   ([`Agreement::Differs`]);
//! - a server leases when every database answered and holds its spec, and then marks
//!   each record *confirmed* (a conditional write: only a record of its spec); it also
//!   leases when every database that answered holds its spec and one of them holds it
//!   confirmed, while others are down or not configured here ([`Agreement::Agreed`]);
//! - a database without the record (new, restored from a backup older than it, or the
//!   whole cluster on its first lease) gets it only from a server that has just read
//!   every database, all answering, each empty or holding its spec
//!   ([`Agreement::Record`]); the server inserts it where absent (insert-if-absent)
//!   and reads every database again, deciding again by these rules (a second
//!   `Record` is not followed: the try ends undecided).
//!
//! Two servers with different specs starting at once on empty databases may then both
//! be refused (each inserted first on one), never both lease. A partial read leases
//! only on a confirmed record: leasing on any partial read (every database that
//! answered holds the spec) is unsafe, as the model checker (`crates/model`) finds: a
//! server whose insert was decided before another's lease lands on a database just
//! restored from a backup (its record gone), and with the other database down it reads
//! only its own record. That record is never confirmed: no read can find it on every
//! database while another holds the first spec.

/// What a read of one database's record found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read<'a> {
    /// The database did not answer.
    Down,
    /// It answered and holds no record.
    Empty,
    /// It holds this spec's record, confirmed or not.
    Holds(&'a str, bool),
}

/// What a server does after reading every database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Agreement {
    /// Lease. `every`: every database answered and holds the spec; the caller then
    /// confirms each record it read unconfirmed.
    Agreed {
        /// Whether every database held the spec in this read.
        every: bool,
    },
    /// Insert the spec where absent (insert-if-absent), then read every database again.
    Record,
    /// Database `index` holds `found`, another spec: this server must never lease.
    Differs {
        /// The database's index in the reads.
        index: usize,
        /// The record it holds.
        found: String,
    },
    /// Not now: a database lacks the record or did not answer, and neither rule above
    /// applies. Read again later.
    Undecided,
}

/// The decision of a server whose spec's record is `own`, from `reads` of every
/// database of the layout in force.
pub fn agree(own: &str, reads: &[Read<'_>]) -> Agreement {
    if let Some((index, found)) = reads.iter().enumerate().find_map(|(i, r)| match r {
        Read::Holds(s, _) if *s != own => Some((i, (*s).to_owned())),
        _ => None,
    }) {
        return Agreement::Differs { index, found };
    }
    let holds = reads
        .iter()
        .filter(|r| matches!(r, Read::Holds(..)))
        .count();
    let confirmed = reads.iter().any(|r| matches!(r, Read::Holds(_, true)));
    let empty = reads.iter().any(|r| matches!(r, Read::Empty));
    let down = reads.iter().any(|r| matches!(r, Read::Down));
    if holds > 0 && holds == reads.len() {
        Agreement::Agreed { every: true }
    } else if confirmed && holds > 0 && !empty {
        Agreement::Agreed { every: false }
    } else if empty && !down {
        Agreement::Record
    } else {
        Agreement::Undecided
    }
}

/// What a read of one member's record found, owned: the machine keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Record {
    /// The member did not answer, or this server is not configured with it.
    Down,
    /// It answered and holds no record.
    Empty,
    /// It holds this record, confirmed or not.
    Holds(String, bool),
}

impl Record {
    fn as_read(&self) -> Read<'_> {
        match self {
            Record::Down => Read::Down,
            Record::Empty => Read::Empty,
            Record::Holds(s, c) => Read::Holds(s, *c),
        }
    }
}

/// A read or write the machine needs, on the member at this index of the layout in
/// force.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Step {
    /// Read its record; answer with [`Try::read`].
    Read(usize),
    /// Insert this server's record if it holds none; answer with [`Try::inserted`]
    /// whatever became of it (the read that follows decides).
    Insert(usize),
    /// Mark its record confirmed, only if it is this server's spec; answer with
    /// [`Try::confirmed`] whatever became of it.
    Confirm(usize),
}

/// How a try ended.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// Lease a worker ID.
    Lease,
    /// Member `member` holds `found`, another spec: never lease.
    Differs { member: usize, found: String },
    /// Not now; try again later. `reads` is the last round's, by member.
    Undecided { reads: Vec<Record>, recorded: bool },
}

/// The decision rule a try applies to a round of reads: [`agree`]. The model checker
/// gives a weaker one to show that the rule is needed.
pub type Rule = fn(&str, &[Read<'_>]) -> Agreement;

/// The rule of a try, left out of its comparisons and hash: one machine's states are
/// compared with each other, all of one rule (function addresses do not compare
/// meaningfully).
#[derive(Debug, Clone, Copy)]
struct Decider(Rule);

impl PartialEq for Decider {
    fn eq(&self, _: &Decider) -> bool {
        true
    }
}

impl Eq for Decider {}

impl std::hash::Hash for Decider {
    fn hash<H: std::hash::Hasher>(&self, _: &mut H) {}
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Phase {
    Reading,
    /// Inserting on the members still `true`.
    Inserting(Vec<bool>),
    /// Confirming on the members still `true`.
    Confirming(Vec<bool>),
    Ended(Outcome),
}

/// One server's try at agreeing on its spec with the members of the layout in force,
/// as a machine (sans-IO): it says which reads and writes it needs ([`Try::steps`],
/// independent of each other: the store sends them at once, the model checker one at
/// a time) and takes their answers. A round of reads of every member is decided by
/// [`agree`]: lease (confirming first the records read unconfirmed when every member
/// held the spec), insert the record where absent and read every member again, or end.
/// A member this server is not configured with counts as not answering: it is never
/// read, and no record is ever inserted on the strength of a read that missed it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Try {
    /// This server's record ([`Spec::record`](super::Spec::record)).
    own: String,
    /// Per member of the layout in force: whether this server is configured with it.
    configured: Vec<bool>,
    /// The current round's reads, by member (`None`: not answered yet).
    reads: Vec<Option<Record>>,
    /// This round follows this try's inserts: a second `Record` ends it undecided.
    recorded: bool,
    phase: Phase,
    rule: Decider,
    /// Whether the round after the inserts is read (the safeguard; the model checker
    /// switches it off to show it is needed).
    reread: bool,
}

impl Try {
    /// A try of the server whose record is `own`, over the members of the layout in
    /// force (`configured`: per member, whether this server is configured with it).
    pub fn new(own: String, configured: Vec<bool>) -> Try {
        let mut t = Try {
            own,
            reads: Vec::new(),
            configured,
            recorded: false,
            phase: Phase::Reading,
            rule: Decider(agree),
            reread: true,
        };
        t.start_round();
        t
    }

    /// This try deciding by `rule` instead of [`agree`]: for the model checker.
    #[must_use]
    pub fn with_rule(mut self, rule: Rule) -> Try {
        self.rule = Decider(rule);
        self.decide_if_read();
        self
    }

    /// This try leasing right after its inserts, without the read that must follow
    /// them: for the model checker, to show that read is needed.
    #[must_use]
    pub fn without_the_read_after_recording(mut self) -> Try {
        self.reread = false;
        self
    }

    /// This server's record.
    pub fn own(&self) -> &str {
        &self.own
    }

    /// The steps needed now; empty once the try [ended](Try::outcome).
    pub fn steps(&self) -> Vec<Step> {
        match &self.phase {
            Phase::Reading => (0..self.reads.len())
                .filter(|&k| self.reads[k].is_none())
                .map(Step::Read)
                .collect(),
            Phase::Inserting(left) => pending(left).map(Step::Insert).collect(),
            Phase::Confirming(left) => pending(left).map(Step::Confirm).collect(),
            Phase::Ended(_) => Vec::new(),
        }
    }

    /// How the try ended, once it has.
    pub fn outcome(&self) -> Option<&Outcome> {
        match &self.phase {
            Phase::Ended(o) => Some(o),
            _ => None,
        }
    }

    /// The answer to [`Step::Read`] of `member`.
    pub fn read(&mut self, member: usize, record: Record) {
        if self.phase == Phase::Reading && self.reads[member].is_none() {
            self.reads[member] = Some(record);
            self.decide_if_read();
        }
    }

    /// The answer to [`Step::Insert`] on `member`.
    pub fn inserted(&mut self, member: usize) {
        if let Phase::Inserting(left) = &mut self.phase {
            left[member] = false;
            if !left.contains(&true) {
                if self.reread {
                    self.recorded = true;
                    self.start_round();
                } else {
                    self.phase = Phase::Ended(Outcome::Lease);
                }
            }
        }
    }

    /// The answer to [`Step::Confirm`] on `member`.
    pub fn confirmed(&mut self, member: usize) {
        if let Phase::Confirming(left) = &mut self.phase {
            left[member] = false;
            if !left.contains(&true) {
                self.phase = Phase::Ended(Outcome::Lease);
            }
        }
    }

    fn start_round(&mut self) {
        self.phase = Phase::Reading;
        self.reads = self
            .configured
            .iter()
            .map(|&c| (!c).then_some(Record::Down))
            .collect();
        self.decide_if_read();
    }

    /// Decides once every member's read is in.
    fn decide_if_read(&mut self) {
        if self.phase != Phase::Reading || self.reads.iter().any(Option::is_none) {
            return;
        }
        let records: Vec<Record> = self.reads.iter().flatten().cloned().collect();
        let reads: Vec<Read<'_>> = records.iter().map(Record::as_read).collect();
        let which = |want: fn(&Record, &str) -> bool| -> Vec<bool> {
            records.iter().map(|r| want(r, &self.own)).collect()
        };
        self.phase = match (self.rule.0)(&self.own, &reads) {
            Agreement::Agreed { every: true } => {
                let left = which(|r, own| matches!(r, Record::Holds(s, false) if s == own));
                match left.contains(&true) {
                    true => Phase::Confirming(left),
                    false => Phase::Ended(Outcome::Lease),
                }
            }
            Agreement::Agreed { every: false } => Phase::Ended(Outcome::Lease),
            Agreement::Differs { index, found } => Phase::Ended(Outcome::Differs {
                member: index,
                found,
            }),
            Agreement::Record if !self.recorded => {
                Phase::Inserting(which(|r, _| *r == Record::Empty))
            }
            Agreement::Record | Agreement::Undecided => Phase::Ended(Outcome::Undecided {
                reads: records.clone(),
                recorded: self.recorded,
            }),
        };
    }
}

fn pending(left: &[bool]) -> impl Iterator<Item = usize> + '_ {
    left.iter().enumerate().filter(|(_, l)| **l).map(|(k, _)| k)
}

#[cfg(test)]
mod tests {
    use super::Read::{Down, Empty, Holds};
    use super::*;

    const EVERY: Agreement = Agreement::Agreed { every: true };
    const PARTIAL: Agreement = Agreement::Agreed { every: false };

    #[test]
    fn leases_only_on_its_own_record() {
        assert_eq!(agree("a", &[Holds("a", false), Holds("a", false)]), EVERY);
        assert_eq!(agree("a", &[Holds("a", false), Down]), Agreement::Undecided);
        assert_eq!(agree("a", &[Holds("a", true), Down]), PARTIAL);
        assert_eq!(agree("a", &[Down, Down]), Agreement::Undecided);
        assert_eq!(
            agree("a", &[Down, Holds("b", true)]),
            Agreement::Differs {
                index: 1,
                found: "b".into()
            }
        );
    }

    #[test]
    fn records_only_after_reading_every_database() {
        assert_eq!(agree("a", &[Empty, Empty]), Agreement::Record);
        assert_eq!(agree("a", &[Empty, Holds("a", true)]), Agreement::Record);
        assert_eq!(agree("a", &[Empty, Down]), Agreement::Undecided);
        assert_eq!(
            agree("a", &[Empty, Holds("a", true), Down]),
            Agreement::Undecided
        );
        assert_eq!(agree("a", &[]), Agreement::Undecided);
    }

    /// Runs `t` against `dbs` (per member: up, and its record), each step in order.
    fn run(mut t: Try, dbs: &mut [(bool, Option<(String, bool)>)]) -> Outcome {
        loop {
            let Some(&step) = t.steps().first() else {
                return t.outcome().cloned().unwrap();
            };
            match step {
                Step::Read(k) => {
                    let r = match &dbs[k] {
                        (false, _) => Record::Down,
                        (true, None) => Record::Empty,
                        (true, Some((s, c))) => Record::Holds(s.clone(), *c),
                    };
                    t.read(k, r);
                }
                Step::Insert(k) => {
                    if dbs[k].0 && dbs[k].1.is_none() {
                        dbs[k].1 = Some((t.own().to_owned(), false));
                    }
                    t.inserted(k);
                }
                Step::Confirm(k) => {
                    if let (true, Some((s, c))) = &mut dbs[k]
                        && *s == t.own()
                    {
                        *c = true;
                    }
                    t.confirmed(k);
                }
            }
        }
    }

    #[test]
    fn a_try_records_rereads_and_confirms_on_every_member() {
        let mut dbs = vec![(true, None), (true, None)];
        let outcome = run(Try::new("a".into(), vec![true, true]), &mut dbs);
        assert_eq!(outcome, Outcome::Lease);
        assert!(dbs.iter().all(|d| d.1 == Some(("a".into(), true))));
    }

    #[test]
    fn a_member_not_configured_is_never_read_and_blocks_recording() {
        let mut dbs = vec![(true, None), (true, None)];
        let t = Try::new("a".into(), vec![true, false]);
        assert_eq!(t.steps(), [Step::Read(0)]);
        let outcome = run(t, &mut dbs);
        assert!(matches!(
            outcome,
            Outcome::Undecided {
                recorded: false,
                ..
            }
        ));
        assert_eq!(dbs, [(true, None), (true, None)], "nothing written");
        // On a record confirmed by a read of every member, it leases.
        let mut dbs = vec![(true, Some(("a".into(), true))), (true, None)];
        let outcome = run(Try::new("a".into(), vec![true, false]), &mut dbs);
        assert_eq!(outcome, Outcome::Lease);
        let mut dbs = vec![(true, Some(("b".into(), true))), (true, None)];
        let outcome = run(Try::new("a".into(), vec![true, false]), &mut dbs);
        assert_eq!(
            outcome,
            Outcome::Differs {
                member: 0,
                found: "b".into()
            }
        );
    }

    #[test]
    fn a_second_record_in_one_try_ends_it_undecided() {
        // A member that stays empty (the insert lost to a database going down).
        let mut t = Try::new("a".into(), vec![true, true]);
        t.read(0, Record::Empty);
        t.read(1, Record::Empty);
        assert_eq!(t.steps(), [Step::Insert(0), Step::Insert(1)]);
        t.inserted(1);
        t.inserted(0);
        t.read(0, Record::Holds("a".into(), false));
        t.read(1, Record::Empty);
        assert!(matches!(
            t.outcome(),
            Some(Outcome::Undecided { recorded: true, .. })
        ));
    }
}
