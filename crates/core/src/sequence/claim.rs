//! Owning a section and raising its bound: one claim, as a machine (sans-IO) that the
//! store runs on its engines and the model checker on simulated databases.
//!
//! ```text
//!   Read the section's row on every member database (answers in any order)
//!    │  a row below what this server knew of it ─▶ that database is fenced, not counted
//!    │  fewer than a majority answered ──────────▶ Unavailable
//!    │  a row held by another, its lease live ───▶ Held (by whom)
//!    ▼
//!   floor = the highest bound read; bound = floor + the claim's step ─overflow─▶ Exhausted
//!   Write every row read by compare-and-set on its version: this holder, the bound,
//!   a new lease (answers in any order)
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
//!   majority, and only while its lease lasts: from the moment the claim began (before
//!   its reads), for the lease less a margin, by its own clock. Another server takes
//!   a row only once its lease ran out, with a grace, by that database's clock, which
//!   began counting later (when the row was written). So a new owner answers only after
//!   the last owner stopped, and above everything it answered.
//! - A database restored from a backup holds an older row, and forgets a write it
//!   acknowledged. A claim that won a bare majority of three (the third row lost to a
//!   concurrent claim) could be undone by one restore, and the concurrent claim then
//!   win too: so a claim counts only when every row it read was written. Then, with
//!   three databases, a successful claim is on all three unless one was down, and a
//!   majority read after any one restore still meets it (any one may be down or
//!   restored). A server that knew a later version of a row fences its database
//!   (`fenced` of the outcomes).

use super::majority;

/// A section's row on one database, as read or written. Times are Unix milliseconds by
/// the database's clock when the statement ran.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SectionRow {
    /// The server that owns (or last owned) the section.
    pub holder: String,
    /// Grows with every write: the compare-and-set of the row.
    pub version: i64,
    /// Every number answered for the section's keys is at or below it.
    pub bound: i64,
    /// When the holder's lease runs out.
    pub expires_ms: i64,
    /// The database's clock when the statement ran.
    pub db_now_ms: i64,
}

impl SectionRow {
    /// Whether another holder may take the row: its lease ran out more than `grace_ms`
    /// ago by its database's clock.
    pub fn lapsed(&self, grace_ms: i64) -> bool {
        self.expires_ms.saturating_add(grace_ms) < self.db_now_ms
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
/// `holder`, `bound`, a lease of the claim's length from the database's clock, and
/// version `expected + 1` (1 for an insert).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Write {
    pub expected: Option<i64>,
    pub bound: i64,
}

/// How a claim ended.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// The section is this holder's: answer numbers above `floor` (and above what it
    /// answered itself) up to `bound`, while the lease begun with the claim lasts.
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
    /// Another holder's lease is live on a database.
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
    /// A row held by another, its lease live, stops the claim.
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

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Phase {
    Reading(Vec<Option<Read>>),
    Writing {
        floor: i64,
        bound: i64,
        writes: Vec<Option<Write>>,
        written: Vec<Option<Written>>,
        fenced: Vec<usize>,
    },
    Done(Outcome),
}

/// One claim of a section by `holder` on `members` databases: a take or a raise (a step
/// above the bound read), or a renewal of the lease (a step of 0).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Claim {
    holder: String,
    step: i64,
    grace_ms: i64,
    /// The versions this server last knew of each database's row.
    known: Vec<Option<i64>>,
    safeguards: Safeguards,
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
    /// A claim by `holder` of the bound `step` above the rows', which knew the versions
    /// `known` of the rows (one entry per member; `None` where it knows none).
    pub fn new(
        holder: impl Into<String>,
        step: i64,
        grace_ms: i64,
        known: Vec<Option<i64>>,
        safeguards: Safeguards,
    ) -> Claim {
        assert!(
            !known.is_empty(),
            "a section lives on one database at least"
        );
        assert!(step >= 0, "a claim never lowers a bound");
        let members = known.len();
        Claim {
            holder: holder.into(),
            step,
            grace_ms,
            known,
            safeguards,
            phase: Phase::Reading(vec![None; members]),
        }
    }

    fn members(&self) -> usize {
        self.known.len()
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
            Phase::Reading(reads) => {
                Need::Read((0..reads.len()).filter(|&d| reads[d].is_none()).collect())
            }
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

    /// Database `d`'s answer to the read.
    pub fn read(&mut self, d: usize, read: Read) {
        let Phase::Reading(reads) = &mut self.phase else {
            panic!("a read answered out of turn");
        };
        assert!(reads[d].is_none(), "database {d} read twice");
        reads[d] = Some(read);
        if reads.iter().all(Option::is_some) {
            let reads: Vec<Read> = reads.iter().flatten().cloned().collect();
            self.decide(reads);
        }
    }

    fn decide(&mut self, reads: Vec<Read>) {
        let mut fenced = Vec::new();
        let mut rows: Vec<(usize, Option<SectionRow>)> = Vec::new();
        for (d, read) in reads.into_iter().enumerate() {
            match read {
                Read::Down => {}
                Read::Absent if self.behind(d, 0) => fenced.push(d),
                Read::Absent => rows.push((d, None)),
                Read::Row(row) if self.behind(d, row.version) => fenced.push(d),
                Read::Row(row) => rows.push((d, Some(row))),
            }
        }
        if rows.len() < self.quorum() {
            self.phase = Phase::Done(Outcome::Unavailable {
                answered: rows.len(),
                fenced,
            });
            return;
        }
        if self.safeguards.lease
            && let Some(row) = rows.iter().flat_map(|(_, r)| r).find(|r| {
                r.holder != self.holder && !r.holder.is_empty() && !r.lapsed(self.grace_ms)
            })
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
            .max()
            .unwrap_or(0);
        let Some(bound) = floor.checked_add(self.step) else {
            self.phase = Phase::Done(Outcome::Exhausted { floor });
            return;
        };
        let mut writes = vec![None; self.members()];
        for (d, row) in rows {
            writes[d] = Some(Write {
                expected: row.map(|r| r.version),
                bound,
            });
        }
        self.phase = Phase::Writing {
            floor,
            bound,
            writes,
            written: vec![None; self.members()],
            fenced,
        };
    }

    /// Whether a row at `version` on database `d` lies below what this server knew.
    fn behind(&self, d: usize, version: i64) -> bool {
        self.safeguards.evidence && self.known[d].is_some_and(|k| version < k)
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
        let count = versions.iter().flatten().count();
        let asked = writes.iter().flatten().count();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn row(holder: &str, version: i64, bound: i64, expires_ms: i64) -> Read {
        Read::Row(SectionRow {
            holder: holder.into(),
            version,
            bound,
            expires_ms,
            db_now_ms: 10_000,
        })
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
        let mut c = Claim::new("b", 100, 1_000, vec![None; 3], Safeguards::ALL);
        assert_eq!(c.need(), Need::Read(vec![0, 1, 2]));
        c.read(1, row("a", 4, 200, 5_000));
        c.read(0, row("a", 5, 300, 5_000));
        c.read(2, Read::Down);
        assert_eq!(
            c.need(),
            Need::Write(vec![
                (
                    0,
                    Write {
                        expected: Some(5),
                        bound: 400
                    }
                ),
                (
                    1,
                    Write {
                        expected: Some(4),
                        bound: 400
                    }
                )
            ])
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
    }

    #[test]
    fn a_live_lease_of_another_stops_a_take_and_a_lapsed_one_does_not() {
        // Ran out 500 ms ago, within a grace of 1 s: still live.
        let mut c = Claim::new("b", 0, 1_000, vec![None; 2], Safeguards::ALL);
        let out = run(
            &mut c,
            vec![row("a", 1, 10, 9_500), row("a", 1, 10, 0)],
            &[],
        );
        assert_eq!(out, Outcome::Held { by: "a".into() });
        let mut c = Claim::new("b", 0, 1_000, vec![None; 2], Safeguards::ALL);
        let out = run(
            &mut c,
            vec![row("a", 1, 10, 8_000), Read::Absent],
            &[Written::At(2), Written::At(1)],
        );
        assert!(
            matches!(
                out,
                Outcome::Owned {
                    floor: 10,
                    bound: 10,
                    ..
                }
            ),
            "{out:?}"
        );
        // Its own rows, live, are the holder's to raise.
        let mut c = Claim::new("a", 10, 1_000, vec![Some(1), Some(1)], Safeguards::ALL);
        let out = run(
            &mut c,
            vec![row("a", 1, 10, 20_000), row("a", 1, 10, 20_000)],
            &[Written::At(2), Written::At(2)],
        );
        assert!(
            matches!(
                out,
                Outcome::Owned {
                    floor: 10,
                    bound: 20,
                    ..
                }
            ),
            "{out:?}"
        );
    }

    #[test]
    fn without_a_majority_nothing_is_owned() {
        let mut c = Claim::new("b", 0, 0, vec![None; 3], Safeguards::ALL);
        let out = run(&mut c, vec![Read::Down, Read::Absent, Read::Down], &[]);
        assert_eq!(
            out,
            Outcome::Unavailable {
                answered: 1,
                fenced: vec![]
            }
        );
        let mut c = Claim::new("b", 0, 0, vec![None; 3], Safeguards::ALL);
        let out = run(
            &mut c,
            vec![Read::Absent, Read::Absent, Read::Absent],
            &[Written::Lost, Written::At(1), Written::Down],
        );
        assert_eq!(out, Outcome::Lost { written: 1 });
    }

    #[test]
    fn a_bound_past_the_last_number_is_refused() {
        let mut c = Claim::new("a", 10, 0, vec![None], Safeguards::ALL);
        let out = run(&mut c, vec![row("", 1, i64::MAX - 5, 0)], &[]);
        assert_eq!(
            out,
            Outcome::Exhausted {
                floor: i64::MAX - 5
            }
        );
    }

    #[test]
    fn a_row_below_what_was_known_is_fenced() {
        let mut c = Claim::new("a", 0, 0, vec![Some(7), Some(7), Some(7)], Safeguards::ALL);
        let out = run(
            &mut c,
            vec![row("a", 7, 30, 0), row("a", 3, 10, 0), Read::Absent],
            &[],
        );
        assert_eq!(
            out,
            Outcome::Unavailable {
                answered: 1,
                fenced: vec![1, 2]
            }
        );
    }
}
