//! Owning a section and raising its bound: one claim, as a machine (sans-IO) that the
//! store runs on its engines and the model checker on simulated databases.
//!
//! ```text
//!   Read the section's row on every member database (answers in any order)
//!    │  a row below what this server knew of it ─▶ that database is fenced, not counted
//!    │  fewer than a majority answered ──────────▶ Unavailable
//!    │  a row held by another, not seen lapsed ──▶ Held (by whom)
//!    ▼
//!   floor = the highest bound read (at least `at_least`);
//!   bound = floor + the claim's step ─overflow─▶ Exhausted
//!   Write every row read by compare-and-set on its version: the holder, the bound
//!   (answers in any order)
//!    │  any row not written (lost, failed) ──────▶ Lost
//!    ▼
//!   Owned { floor: the highest bound read, bound, the versions written }
//! ```
//!
//! Why no number goes back:
//! - Every write of a row is a compare-and-set on the version just read, and a claim
//!   succeeds only once it wrote every row it read, a majority of the members at least.
//!   Two claims' majorities share a database, where the later one read the earlier
//!   one's write (or its compare-and-set failed). So the bound a claim reads as its
//!   floor is at least every bound an earlier successful claim wrote: every number any
//!   earlier owner may have answered.
//! - An owner answers only numbers up to a bound a claim of its own wrote to a
//!   majority, and only until its deadline ([`crate::lease`]). Another server takes a
//!   row held by a server only once it has seen that row unchanged for the lease and
//!   the grace by its own clock ([`Seen`]): the owner has stopped by then. No database
//!   clock takes part, so a database whose clock steps changes nothing.
//! - A released row (holder empty) is free at once: its holder stopped answering
//!   before it wrote the release.
//! - A layout change holds every section while it carries the bounds to the new
//!   members ([`change_holder`]): a server takes such a row only once it reads that
//!   change's layout done, which the change writes only after it carried every section.
//!   The change itself overrides every hold ([`Kind::Fence`]): an owner whose row it
//!   wrote can no longer raise its bound, and answers at most up to it, which the new
//!   members start above.
//! - A database restored from a backup holds an older row, and forgets a write it
//!   acknowledged. A claim that won a bare majority of three (the third row lost to a
//!   concurrent claim) could be undone by one restore, and the concurrent claim then
//!   win too: so a claim counts only when every row it read was written. Then, with
//!   three databases, a successful claim is on all three unless one was down, and a
//!   majority read after any one restore still meets it (any one may be down or
//!   restored). A server that knew a later version of a row fences its database for
//!   the claim (`fenced` of the outcomes): the claim writes that row too, up to its
//!   bound, but does not count it; the version written is the one it knows from then
//!   on, so the row counts again at the next claim.

use std::time::Duration;

use super::majority;
use crate::lease::{Seen, Timing};

/// A section's row on one database, as read or written.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SectionRow {
    /// Who owns (or last owned) the section: a server, a layout change
    /// ([`change_holder`]), or nobody (empty: released).
    pub holder: String,
    /// Grows with every write: the compare-and-set of the row.
    pub version: i64,
    /// Every number answered for the section's keys is at or below it.
    pub bound: i64,
    /// When the holder's lease runs out by the database's clock (Unix milliseconds):
    /// shown to operators, never used to decide.
    pub expires_ms: i64,
    /// The database's clock when the statement ran.
    pub db_now_ms: i64,
}

/// Who holds a row, by its `holder`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder<'a> {
    /// Nobody: released.
    Free,
    /// A layout change to this epoch, carrying the section to its members.
    Change(i64),
    /// A server (its address and a nonce).
    Server(&'a str),
}

const CHANGE_PREFIX: &str = "#layout@";

/// The holder a layout change to `epoch` writes into the rows it carries.
pub fn change_holder(epoch: i64) -> String {
    format!("{CHANGE_PREFIX}{epoch}")
}

/// Who `holder` is.
pub fn holder_of(holder: &str) -> Holder<'_> {
    if holder.is_empty() {
        return Holder::Free;
    }
    match holder
        .strip_prefix(CHANGE_PREFIX)
        .and_then(|e| e.parse().ok())
    {
        Some(epoch) => Holder::Change(epoch),
        None => Holder::Server(holder),
    }
}

/// A database's answer to a read of the section's row.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Read {
    /// It did not answer (down, fenced, timed out).
    Down,
    /// It holds no row for the section yet: it is inserted (version 1).
    Absent,
    Row(SectionRow),
}

/// A database's answer to a write.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Written {
    /// It did not answer, or its commit failed or is unknown.
    Down,
    /// The row was not at the version read (written since, or inserted since).
    Lost,
    /// Written at this version.
    At(i64),
}

/// A write a claim asks for: the row at `expected` (`None`: absent, insert it) set to
/// `holder` and `bound`, and version `expected + 1` (1 for an insert).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Write {
    pub expected: Option<i64>,
    pub holder: String,
    pub bound: i64,
}

/// How a claim ended.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The section is this holder's: answer numbers above `floor` (and above what it
    /// answered itself) up to `bound`, until the deadline of the claim's start.
    /// `versions[d]` is what database `d` holds now, if it was written.
    Owned {
        floor: i64,
        bound: i64,
        versions: Vec<Option<i64>>,
        /// Databases whose row lay below what this server knew of it.
        fenced: Vec<usize>,
    },
    /// Fewer than a majority of the members answered the read (`fenced`: those whose
    /// row lay below what this server knew of it).
    Unavailable { answered: usize, fenced: Vec<usize> },
    /// Another holder's lease is live on a database, or a change holds the section.
    Held { by: String },
    /// The bound would pass `i64::MAX`: the section has no number left.
    Exhausted { floor: i64 },
    /// A write did not succeed: another claim came between, or a database failed
    /// meanwhile. Whoever owns the section, this holder does not.
    Lost { written: usize },
}

/// The safeguards of the protocol, all on in the servers; the model checker switches
/// one off to show that it finds the bug it stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Safeguards {
    /// A row held by another, not seen lapsed, stops the claim.
    pub lease: bool,
    /// A claim needs a majority of the members to answer its read.
    pub majority: bool,
    /// A claim counts only when every row it read was written (else a majority of
    /// them).
    pub all_written: bool,
    /// A row below the version this server knew of it is fenced, not counted.
    pub evidence: bool,
}

impl Safeguards {
    pub const ALL: Safeguards = Safeguards {
        lease: true,
        majority: true,
        all_written: true,
        evidence: true,
    };
}

/// What a claim does to the rows it wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// Take, raise or renew: the rows name the claimant.
    Hold,
    /// End the claimant's hold: the rows name nobody, free for any server at once.
    Release,
    /// A layout change's: every hold is overridden, and the rows name the change.
    Fence,
}

/// What a claim asks for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Ask {
    /// Who claims (a server's holder, or [`change_holder`]).
    pub holder: String,
    pub kind: Kind,
    /// How far above the highest bound read the new bound goes (0: a renewal).
    pub step: i64,
    /// The floor is at least this (a change carrying a bound read elsewhere).
    pub at_least: i64,
    /// The layout epoch whose members the claim runs on: a change to it or before it
    /// has carried the section.
    pub epoch: i64,
}

impl Ask {
    /// A server's take, raise (`step` above) or renewal (a `step` of 0).
    pub fn hold(holder: impl Into<String>, step: i64, epoch: i64) -> Ask {
        Ask {
            holder: holder.into(),
            kind: Kind::Hold,
            step,
            at_least: 0,
            epoch,
        }
    }
}

/// What a claim knows of the rows before it reads them, one entry per member.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Known {
    /// The versions this server last wrote (its evidence against a restore).
    pub versions: Vec<Option<i64>>,
    /// What this server has seen of each row, and since when.
    pub seen: Vec<Option<Seen>>,
    /// When the claim started (before its reads), by this server's clock.
    pub now: Duration,
    pub timing: Timing,
}

impl Known {
    /// Nothing known of `members` rows: a fresh process, or a change's command.
    pub fn nothing(members: usize, now: Duration, timing: Timing) -> Known {
        Known {
            versions: vec![None; members],
            seen: vec![None; members],
            now,
            timing,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Phase {
    Reading,
    Writing {
        floor: i64,
        bound: i64,
        writes: Vec<Option<Write>>,
        written: Vec<Option<Written>>,
        fenced: Vec<usize>,
    },
    Done(Outcome),
}

/// One claim of a section on `members` databases.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Claim {
    ask: Ask,
    known: Known,
    safeguards: Safeguards,
    /// The answers to the reads, by member.
    reads: Vec<Option<Read>>,
    phase: Phase,
}

/// What a claim needs next.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Need {
    /// Read the section's row on these databases (each answered with [`Claim::read`]).
    Read(Vec<usize>),
    /// Write these rows (each answered with [`Claim::written`]).
    Write(Vec<(usize, Write)>),
    Done(Outcome),
}

impl Claim {
    /// A claim of `ask` by a server that knows `known` of the rows.
    pub fn new(ask: Ask, known: Known, safeguards: Safeguards) -> Claim {
        let members = known.versions.len();
        assert!(members > 0, "a section lives on one database at least");
        assert_eq!(known.seen.len(), members, "one sight per member");
        assert!(ask.step >= 0, "a claim never lowers a bound");
        Claim {
            ask,
            known,
            safeguards,
            reads: vec![None; members],
            phase: Phase::Reading,
        }
    }

    pub fn ask(&self) -> &Ask {
        &self.ask
    }

    /// When the claim started, by its server's clock.
    pub fn started(&self) -> Duration {
        self.known.now
    }

    fn members(&self) -> usize {
        self.reads.len()
    }

    /// How many answers count: a majority of the members, or one without the safeguard.
    fn quorum(&self) -> usize {
        match self.safeguards.majority {
            true => majority(self.members()),
            false => 1,
        }
    }

    pub fn need(&self) -> Need {
        match &self.phase {
            Phase::Reading => Need::Read(
                (0..self.members())
                    .filter(|&d| self.reads[d].is_none())
                    .collect(),
            ),
            Phase::Writing {
                writes, written, ..
            } => Need::Write(
                (0..writes.len())
                    .filter(|&d| written[d].is_none())
                    .filter_map(|d| writes[d].clone().map(|w| (d, w)))
                    .collect(),
            ),
            Phase::Done(outcome) => Need::Done(outcome.clone()),
        }
    }

    /// The rows this claim read: what its server saw of each member.
    pub fn reads(&self) -> impl Iterator<Item = (usize, &Read)> {
        self.reads
            .iter()
            .enumerate()
            .filter_map(|(d, r)| r.as_ref().map(|r| (d, r)))
    }

    /// Database `d`'s answer to the read.
    pub fn read(&mut self, d: usize, read: Read) {
        assert!(
            matches!(self.phase, Phase::Reading),
            "a read answered out of turn"
        );
        assert!(self.reads[d].is_none(), "database {d} read twice");
        self.reads[d] = Some(read);
        if self.reads.iter().all(Option::is_some) {
            self.decide();
        }
    }

    fn decide(&mut self) {
        let mut fenced: Vec<(usize, Option<&SectionRow>)> = Vec::new();
        let mut rows: Vec<(usize, Option<&SectionRow>)> = Vec::new();
        for (d, read) in self.reads.iter().enumerate() {
            match read {
                None | Some(Read::Down) => {}
                Some(Read::Absent) if self.behind(d, 0) => fenced.push((d, None)),
                Some(Read::Absent) => rows.push((d, None)),
                Some(Read::Row(row)) if self.behind(d, row.version) => fenced.push((d, Some(row))),
                Some(Read::Row(row)) => rows.push((d, Some(row))),
            }
        }
        if rows.len() < self.quorum() {
            self.phase = Phase::Done(Outcome::Unavailable {
                answered: rows.len(),
                fenced: fenced.iter().map(|(d, _)| *d).collect(),
            });
            return;
        }
        if let Some((_, row)) = rows
            .iter()
            .filter_map(|&(d, r)| Some((d, r?)))
            .find(|&(d, r)| self.blocks(d, r))
        {
            self.phase = Phase::Done(Outcome::Held {
                by: row.holder.clone(),
            });
            return;
        }
        let floor = rows
            .iter()
            .flat_map(|(_, r)| r)
            .map(|r| r.bound)
            .chain([self.ask.at_least])
            .max()
            .unwrap_or(0);
        let Some(bound) = floor.checked_add(self.ask.step) else {
            self.phase = Phase::Done(Outcome::Exhausted { floor });
            return;
        };
        let holder = match self.ask.kind {
            Kind::Hold | Kind::Fence => self.ask.holder.clone(),
            Kind::Release => String::new(),
        };
        // A fenced row is written too, not counted: repaired to the bound, at a
        // version this server then knows.
        let mut writes = vec![None; self.members()];
        for &(d, row) in rows.iter().chain(&fenced) {
            writes[d] = Some(Write {
                expected: row.map(|r| r.version),
                holder: holder.clone(),
                bound,
            });
        }
        self.phase = Phase::Writing {
            floor,
            bound,
            writes,
            written: vec![None; self.members()],
            fenced: fenced.iter().map(|(d, _)| *d).collect(),
        };
    }

    /// Whether `row`, read on database `d`, stops the claim: held by another server
    /// not seen lapsed, or by a change this claim's layout does not follow yet.
    fn blocks(&self, d: usize, row: &SectionRow) -> bool {
        if self.ask.kind == Kind::Fence || row.holder == self.ask.holder {
            return false;
        }
        match holder_of(&row.holder) {
            Holder::Free => false,
            Holder::Change(epoch) => epoch > self.ask.epoch,
            Holder::Server(_) if !self.safeguards.lease => false,
            Holder::Server(holder) => !self.known.seen[d].as_ref().is_some_and(|s| {
                s.is(holder, row.version) && self.known.timing.lapsed(s.since, self.known.now)
            }),
        }
    }

    /// Whether a row at `version` on database `d` lies below what this server knew.
    fn behind(&self, d: usize, version: i64) -> bool {
        self.safeguards.evidence && self.known.versions[d].is_some_and(|k| version < k)
    }

    /// Database `d`'s answer to its write.
    pub fn written(&mut self, d: usize, answer: Written) {
        let quorum = self.quorum();
        let all_written = self.safeguards.all_written;
        let Phase::Writing {
            floor,
            bound,
            writes,
            written,
            fenced,
        } = &mut self.phase
        else {
            panic!("a write answered out of turn");
        };
        let asked = writes[d].as_ref().expect("a write that was asked for");
        assert!(written[d].is_none(), "database {d} written twice");
        if let Written::At(v) = answer {
            assert_eq!(
                v,
                asked.expected.unwrap_or(0) + 1,
                "a row written one version above the one read"
            );
        }
        written[d] = Some(answer);
        if (0..writes.len()).any(|d| writes[d].is_some() && written[d].is_none()) {
            return;
        }
        let versions: Vec<Option<i64>> = written
            .iter()
            .map(|w| match w {
                Some(Written::At(v)) => Some(*v),
                _ => None,
            })
            .collect();
        let counted = |d: &usize| !fenced.contains(d);
        let count = (0..versions.len())
            .filter(counted)
            .filter(|&d| versions[d].is_some())
            .count();
        let asked = (0..writes.len())
            .filter(counted)
            .filter(|&d| writes[d].is_some())
            .count();
        let enough = match all_written {
            true => count == asked,
            false => count >= majority(writes.len()),
        };
        let outcome = if enough && count >= quorum {
            assert!(*bound >= *floor, "a bound below the floor it was read with");
            Outcome::Owned {
                floor: *floor,
                bound: *bound,
                versions,
                fenced: std::mem::take(fenced),
            }
        } else {
            Outcome::Lost { written: count }
        };
        self.phase = Phase::Done(outcome);
    }
}

/// What the tests of the sequence machines share.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    /// A lease of 1 s and a grace of 200 ms.
    pub const TIMING: Timing = Timing {
        lease: Duration::from_millis(1_000),
        grace: Duration::from_millis(200),
        margin: true,
    };

    /// A row held by `holder` at `version`, up to `bound`.
    pub fn section_row(holder: &str, version: i64, bound: i64) -> SectionRow {
        SectionRow {
            holder: holder.into(),
            version,
            bound,
            expires_ms: 0,
            db_now_ms: 0,
        }
    }

    /// That row, as a read answers it.
    pub fn row(holder: &str, version: i64, bound: i64) -> Read {
        Read::Row(section_row(holder, version, bound))
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{TIMING, row};
    use super::*;

    fn at(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    fn claim(ask: Ask, members: usize) -> Claim {
        Claim::new(
            ask,
            Known::nothing(members, at(10_000), TIMING),
            Safeguards::ALL,
        )
    }

    fn run(claim: &mut Claim, reads: Vec<Read>, writes: &[Written]) -> Outcome {
        for (d, r) in reads.into_iter().enumerate() {
            claim.read(d, r);
        }
        let mut i = 0;
        loop {
            match claim.need() {
                Need::Write(ws) => {
                    for (d, _) in ws {
                        claim.written(d, writes[i].clone());
                        i += 1;
                    }
                }
                Need::Done(outcome) => return outcome,
                Need::Read(_) => panic!("reads were all answered"),
            }
        }
    }

    #[test]
    fn a_take_starts_above_the_highest_bound_of_a_majority() {
        let mut c = claim(Ask::hold("b", 100, 0), 3);
        assert_eq!(c.need(), Need::Read(vec![0, 1, 2]));
        c.read(1, row("", 4, 200));
        c.read(0, row("", 5, 300));
        c.read(2, Read::Down);
        let write = |expected, bound| Write {
            expected: Some(expected),
            holder: "b".into(),
            bound,
        };
        assert_eq!(
            c.need(),
            Need::Write(vec![(0, write(5, 400)), (1, write(4, 400))])
        );
        c.written(1, Written::At(5));
        c.written(0, Written::At(6));
        assert_eq!(
            c.need(),
            Need::Done(Outcome::Owned {
                floor: 300,
                bound: 400,
                versions: vec![Some(6), Some(5), None],
                fenced: vec![],
            })
        );
        assert_eq!(c.reads().count(), 3);
    }

    #[test]
    fn another_servers_row_is_taken_only_once_seen_unchanged_for_the_lease_and_grace() {
        let seen = |version, since| {
            Some(Seen {
                holder: "a".into(),
                version,
                since: at(since),
            })
        };
        let take = |sight: Option<Seen>| {
            let mut known = Known::nothing(2, at(10_000), TIMING);
            known.seen = vec![sight.clone(), sight];
            let mut c = Claim::new(Ask::hold("b", 10, 0), known, Safeguards::ALL);
            run(
                &mut c,
                vec![row("a", 3, 50), row("a", 3, 50)],
                &[Written::At(4), Written::At(4)],
            )
        };
        // Never seen, seen too recently, or seen at another version: live.
        let held = Outcome::Held { by: "a".into() };
        assert_eq!(take(None), held);
        assert_eq!(take(seen(3, 8_801)), held);
        assert_eq!(take(seen(2, 1_000)), held);
        // Unchanged for 1.2 s by this server's clock, whatever the databases' clocks.
        assert!(matches!(
            take(seen(3, 8_800)),
            Outcome::Owned {
                floor: 50,
                bound: 60,
                ..
            }
        ));
        // Its own rows are the holder's to raise; a released row is anyone's.
        let mut c = claim(Ask::hold("a", 10, 0), 2);
        let out = run(
            &mut c,
            vec![row("a", 1, 10), row("", 1, 10)],
            &[Written::At(2), Written::At(2)],
        );
        assert!(matches!(out, Outcome::Owned { bound: 20, .. }), "{out:?}");
    }

    #[test]
    fn a_changes_hold_is_free_only_in_its_layout_and_a_change_overrides_every_hold() {
        let reads = || vec![row(&change_holder(4), 2, 70), row("a", 9, 60)];
        let mut c = claim(Ask::hold("b", 10, 3), 2);
        assert_eq!(
            run(&mut c, reads(), &[]),
            Outcome::Held {
                by: "#layout@4".into()
            }
        );
        // In epoch 4 the change's hold is free; the server's live row still holds.
        let mut c = claim(Ask::hold("b", 10, 4), 2);
        assert_eq!(run(&mut c, reads(), &[]), Outcome::Held { by: "a".into() });
        let fence = Ask {
            holder: change_holder(5),
            kind: Kind::Fence,
            step: 0,
            at_least: 0,
            epoch: 4,
        };
        let mut c = claim(fence, 2);
        c.read(0, reads()[0].clone());
        c.read(1, reads()[1].clone());
        let Need::Write(ws) = c.need() else {
            panic!("a change writes");
        };
        assert!(
            ws.iter()
                .all(|(_, w)| w.holder == "#layout@5" && w.bound == 70)
        );
        assert_eq!(holder_of("#layout@5"), Holder::Change(5));
        assert_eq!(holder_of("#layout@x"), Holder::Server("#layout@x"));
        assert_eq!(holder_of(""), Holder::Free);
    }

    #[test]
    fn a_release_frees_the_rows_and_a_carried_floor_is_kept() {
        let release = Ask {
            kind: Kind::Release,
            ..Ask::hold("a", 0, 0)
        };
        let mut c = claim(release, 1);
        c.read(0, row("a", 3, 30));
        assert_eq!(
            c.need(),
            Need::Write(vec![(
                0,
                Write {
                    expected: Some(3),
                    holder: String::new(),
                    bound: 30
                }
            )])
        );
        let carry = Ask {
            at_least: 500,
            ..Ask::hold("#layout@2", 0, 1)
        };
        let mut c = claim(carry, 2);
        let out = run(
            &mut c,
            vec![Read::Absent, row("", 1, 20)],
            &[Written::At(1), Written::At(2)],
        );
        assert!(
            matches!(
                out,
                Outcome::Owned {
                    floor: 500,
                    bound: 500,
                    ..
                }
            ),
            "{out:?}"
        );
    }

    #[test]
    fn without_a_majority_nothing_is_owned() {
        let mut c = claim(Ask::hold("b", 0, 0), 3);
        let out = run(&mut c, vec![Read::Down, Read::Absent, Read::Down], &[]);
        assert_eq!(
            out,
            Outcome::Unavailable {
                answered: 1,
                fenced: vec![]
            }
        );
        let mut c = claim(Ask::hold("b", 0, 0), 3);
        let out = run(
            &mut c,
            vec![Read::Absent, Read::Absent, Read::Absent],
            &[Written::Lost, Written::At(1), Written::Down],
        );
        assert_eq!(out, Outcome::Lost { written: 1 });
    }

    #[test]
    fn a_bound_past_the_last_number_is_refused() {
        let mut c = claim(Ask::hold("a", 10, 0), 1);
        let out = run(&mut c, vec![row("", 1, i64::MAX - 5)], &[]);
        assert_eq!(
            out,
            Outcome::Exhausted {
                floor: i64::MAX - 5
            }
        );
    }

    #[test]
    fn a_row_below_what_was_known_is_fenced() {
        let mut known = Known::nothing(3, at(0), TIMING);
        known.versions = vec![Some(7); 3];
        let mut c = Claim::new(Ask::hold("a", 0, 0), known, Safeguards::ALL);
        let out = run(
            &mut c,
            vec![row("a", 7, 30), row("a", 3, 10), Read::Absent],
            &[],
        );
        assert_eq!(
            out,
            Outcome::Unavailable {
                answered: 1,
                fenced: vec![1, 2]
            }
        );
        // With a majority besides it, the row is written up to the bound, not counted.
        let mut known = Known::nothing(3, at(0), TIMING);
        known.versions = vec![Some(7); 3];
        let mut c = Claim::new(Ask::hold("a", 5, 0), known, Safeguards::ALL);
        let out = run(
            &mut c,
            vec![row("a", 7, 30), row("a", 7, 30), row("a", 3, 10)],
            &[Written::At(8), Written::At(8), Written::Lost],
        );
        assert_eq!(
            out,
            Outcome::Owned {
                floor: 30,
                bound: 35,
                versions: vec![Some(8), Some(8), None],
                fenced: vec![2]
            }
        );
        let mut c = Claim::new(
            Ask::hold("a", 5, 0),
            Known {
                versions: vec![Some(7); 3],
                ..Known::nothing(3, at(0), TIMING)
            },
            Safeguards::ALL,
        );
        let out = run(
            &mut c,
            vec![row("a", 7, 30), row("a", 7, 30), row("a", 3, 10)],
            &[Written::At(8), Written::At(8), Written::At(4)],
        );
        assert!(
            matches!(&out, Outcome::Owned { versions, .. } if versions[2] == Some(4)),
            "{out:?}"
        );
    }
}
