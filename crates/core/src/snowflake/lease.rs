//! Taking and keeping a worker ID's lease on one database, as machines (sans-IO) that
//! the store runs on its engines and the model checker on simulated databases.
//!
//! A database leases only the worker IDs of its own residue class in the layout in
//! force ([`worker_ids`]): the classes are pairwise disjoint, so two databases never
//! lease one worker ID.
//!
//! ```text
//!   Take:  read the lease rows ──▶ take the lowest free worker ID (compare-and-set)
//!                                    └─lost (taken since the read)──▶ the next, a few at most
//!   Renew: still in the database's class? ──no──▶ give it up
//!          the spec agreed again ──another spec found──▶ give it up
//!          renew the row (compare-and-set on holder and version) ──lost──▶ lost
//! ```

use crate::rows::LeaseRow;
use crate::segment::Residue;

/// The worker IDs (below `count`) a database whose class in the layout in force is
/// `class` may lease: none before a layout done was read (`allowed`), or for a
/// database the layout does not name.
pub fn worker_ids(class: Option<Residue>, allowed: bool, count: u16) -> Vec<u16> {
    match class.filter(|_| allowed) {
        Some(class) => (0..count)
            .filter(|&w| class.contains(i64::from(w)))
            .collect(),
        None => Vec::new(),
    }
}

/// Whether worker ID `w` may be taken, its row being `row`: none, or a lease that ran
/// out more than `grace_ms` ago by its database's clock.
pub fn is_free(row: Option<&LeaseRow>, grace_ms: i64) -> bool {
    row.is_none_or(|r| r.expires_ms.saturating_add(grace_ms) < r.db_now_ms)
}

/// A read or write a take needs next.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TakeNeed {
    /// Read the database's lease rows; answer with [`Take::read`].
    Read,
    /// Take worker ID `w` if it is still free (compare-and-set); answer with
    /// [`Take::taken`].
    Take(u16),
    /// The take ended: the row taken, or none (every worker ID of the class leased,
    /// or every try lost).
    Done(Option<LeaseRow>),
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum TakePhase {
    Read,
    /// Trying `free[k]`.
    Taking {
        k: usize,
        free: Vec<u16>,
    },
    Ended(Option<LeaseRow>),
}

/// One take of a worker ID on one database, lowest free first, at most `tries`
/// compare-and-sets.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Take {
    /// The worker IDs the database may lease ([`worker_ids`]).
    ids: Vec<u16>,
    grace_ms: i64,
    tries: usize,
    phase: TakePhase,
}

impl Take {
    pub fn new(ids: Vec<u16>, grace_ms: i64, tries: usize) -> Take {
        Take {
            ids,
            grace_ms,
            tries,
            phase: TakePhase::Read,
        }
    }

    pub fn need(&self) -> TakeNeed {
        match &self.phase {
            TakePhase::Read => TakeNeed::Read,
            TakePhase::Taking { k, free } => TakeNeed::Take(free[*k]),
            TakePhase::Ended(row) => TakeNeed::Done(row.clone()),
        }
    }

    /// The answer to [`TakeNeed::Read`]: the database's lease rows.
    pub fn read(&mut self, rows: &[LeaseRow]) {
        assert_eq!(self.phase, TakePhase::Read, "a read answered out of turn");
        let free: Vec<u16> = self
            .ids
            .iter()
            .copied()
            .filter(|&w| is_free(rows.iter().find(|r| r.worker_id == w), self.grace_ms))
            .take(self.tries)
            .collect();
        self.phase = match free.is_empty() {
            true => TakePhase::Ended(None),
            false => TakePhase::Taking { k: 0, free },
        };
    }

    /// The answer to [`TakeNeed::Take`]: the row taken, or `None` when another process
    /// took it since the read.
    pub fn taken(&mut self, row: Option<LeaseRow>) {
        let TakePhase::Taking { k, free } = std::mem::replace(&mut self.phase, TakePhase::Read)
        else {
            panic!("a take answered out of turn");
        };
        self.phase = match row {
            Some(row) => {
                assert!(
                    row.worker_id == free[k] && self.ids.contains(&row.worker_id),
                    "a worker ID taken inside its database's class"
                );
                TakePhase::Ended(Some(row))
            }
            None if k + 1 < free.len() => TakePhase::Taking { k: k + 1, free },
            None => TakePhase::Ended(None),
        };
    }
}

/// A read or write a renewal needs next.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum RenewNeed {
    /// Agree on the snowflake spec again (its own machine,
    /// [`agreement::Try`](super::agreement::Try)); answer with [`Renew::agreed`].
    Agree,
    /// Renew the row (compare-and-set on holder and version); answer with
    /// [`Renew::renewed`].
    Renew,
    Done(Renewed),
}

/// How a renewal ended.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Renewed {
    /// Renewed: the row as written.
    Kept(LeaseRow),
    /// The row is no longer this holder's (taken by another process, or its database
    /// went back in time): stop using the worker ID.
    Lost,
    /// Given up: the worker ID left its database's class in the layout in force (a
    /// change may have freed it on its new database already).
    LeftClass,
    /// Given up: a database records another spec (`why`).
    Differs(String),
}

/// What a renewal's spec agreement came to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Agreed {
    /// Agreed, or undecided (a database down): the lease was taken on an agreement,
    /// and is kept.
    Keep,
    /// Another spec recorded: `why`.
    Differs(String),
}

/// One renewal of a held worker ID (a release skips the checks: see
/// [`Renew::release`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Renew {
    phase: Result<RenewNeed, Renewed>,
}

impl Renew {
    /// A renewal of worker ID `w`, whose database may now lease `ids`
    /// ([`worker_ids`]).
    pub fn new(w: u16, ids: &[u16]) -> Renew {
        Renew {
            phase: match ids.contains(&w) {
                true => Ok(RenewNeed::Agree),
                false => Err(Renewed::LeftClass),
            },
        }
    }

    /// A release: the row written at once.
    pub fn release() -> Renew {
        Renew {
            phase: Ok(RenewNeed::Renew),
        }
    }

    pub fn need(&self) -> RenewNeed {
        match &self.phase {
            Ok(need) => need.clone(),
            Err(done) => RenewNeed::Done(done.clone()),
        }
    }

    /// The answer to [`RenewNeed::Agree`].
    pub fn agreed(&mut self, agreed: Agreed) {
        assert_eq!(self.phase, Ok(RenewNeed::Agree), "agreed out of turn");
        self.phase = match agreed {
            Agreed::Keep => Ok(RenewNeed::Renew),
            Agreed::Differs(why) => Err(Renewed::Differs(why)),
        };
    }

    /// The answer to [`RenewNeed::Renew`]: the row as written, or `None`.
    pub fn renewed(&mut self, row: Option<LeaseRow>) {
        assert_eq!(self.phase, Ok(RenewNeed::Renew), "renewed out of turn");
        self.phase = Err(row.map_or(Renewed::Lost, Renewed::Kept));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(w: u16, expires_ms: i64) -> LeaseRow {
        LeaseRow {
            worker_id: w,
            holder: "a".into(),
            version: 1,
            expires_ms,
            last_ms: 0,
            bound_ms: 0,
            db_now_ms: 1_000,
        }
    }

    #[test]
    fn a_database_leases_its_own_class_once_a_layout_is_done() {
        let odd = Residue::new(2, 1).ok();
        assert_eq!(worker_ids(odd, true, 8), vec![1, 3, 5, 7]);
        assert!(worker_ids(odd, false, 8).is_empty());
        assert!(worker_ids(None, true, 8).is_empty());
    }

    #[test]
    fn takes_the_lowest_free_and_the_next_after_a_lost_race() {
        // 1 is held; 3 ran out 600 ms ago, within a grace of 1 s; 5 long ago.
        let mut t = Take::new(vec![1, 3, 5, 7], 1_000, 8);
        t.read(&[row(1, 5_000), row(3, 400), row(5, -10_000)]);
        assert_eq!(t.need(), TakeNeed::Take(5));
        t.taken(None);
        assert_eq!(t.need(), TakeNeed::Take(7));
        t.taken(Some(row(7, 6_000)));
        assert_eq!(t.need(), TakeNeed::Done(Some(row(7, 6_000))));

        let mut t = Take::new(vec![1], 0, 8);
        t.read(&[row(1, 5_000)]);
        assert_eq!(t.need(), TakeNeed::Done(None));
        let mut t = Take::new(Vec::new(), 0, 8);
        t.read(&[]);
        assert_eq!(t.need(), TakeNeed::Done(None));
    }

    #[test]
    fn a_renewal_gives_up_a_worker_id_out_of_class_or_of_another_spec() {
        assert_eq!(
            Renew::new(2, &[1, 3]).need(),
            RenewNeed::Done(Renewed::LeftClass)
        );
        let mut r = Renew::new(1, &[1, 3]);
        r.agreed(Agreed::Differs("js".into()));
        assert_eq!(r.need(), RenewNeed::Done(Renewed::Differs("js".into())));
        let mut r = Renew::new(1, &[1, 3]);
        r.agreed(Agreed::Keep);
        r.renewed(None);
        assert_eq!(r.need(), RenewNeed::Done(Renewed::Lost));
        let mut r = Renew::release();
        r.renewed(Some(row(1, 0)));
        assert_eq!(r.need(), RenewNeed::Done(Renewed::Kept(row(1, 0))));
    }
}
