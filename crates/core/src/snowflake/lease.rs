//! Taking and keeping a worker ID's lease on one database, as machines (sans-IO) that
//! the store runs on its engines and the model checker on simulated databases.
//!
//! A database leases only the worker IDs of its own residue class in the layout in
//! force ([`worker_ids`]): the classes are pairwise disjoint, so two databases never
//! lease one worker ID.
//!
//! ```text
//!   Take:  read the lease rows ──▶ read the other members' ──▶ take the lowest free worker ID
//!          (compare-and-set)  └─lost (taken since the read)──▶ the next, a few at most
//!   Renew: still in the database's class? ──no──▶ give it up
//!          the spec agreed again ──another spec found──▶ give it up
//!          held live on another member? ──yes──▶ give it up
//!          renew the row (compare-and-set on holder and version) ──lost──▶ lost
//! ```
//!
//! **Held elsewhere.** A database restored from a backup taken before a layout change
//! forgets the change: the worker IDs it had blocked there (leaving its class) are free
//! again, and a server configured with that database alone reads only its layout from
//! before the change, so it may take one that a server holds on its new database. Only
//! a server that reaches both can see it: a take skips, and a renewal gives up, a worker
//! ID whose row on another member names another live holder ([`held_elsewhere`]). The
//! new holder waits a whole lease after its take before its first ID; the old one's
//! deadline is less than a lease after the start of its last renewal that kept it, and
//! a renewal started after the take sees the row: the old one stops first. A member
//! that does not answer is not read: a restore, and a partition that hides the restored
//! database from the holder alone, are two faults.

use crate::rows::{LeaseRow, MOVED_HOLDER};
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

/// The row among `rows` (lease rows of the other members) that names another live
/// holder of worker ID `w` than `holder`: not a change's block, not run out by its
/// database's clock. A change blocks a worker ID where it leaves before it frees it
/// where it goes, so such a row is seen only after a restore brought one back.
pub fn held_elsewhere<'a>(rows: &'a [LeaseRow], w: u16, holder: &str) -> Option<&'a LeaseRow> {
    rows.iter().find(|r| {
        r.worker_id == w
            && !r.holder.is_empty()
            && r.holder != holder
            && r.holder != MOVED_HOLDER
            && !is_free(Some(r), 0)
    })
}

/// A read or write a take needs next.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TakeNeed {
    /// Read the database's lease rows; answer with [`Take::read`].
    Read,
    /// Read the lease rows of the other configured members (those that answer); answer
    /// with [`Take::elsewhere`].
    Elsewhere,
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
    /// Free here: `free`, before the other members are read.
    Elsewhere(Vec<u16>),
    /// Trying `free[k]`.
    Taking {
        k: usize,
        free: Vec<u16>,
    },
    Ended(Option<LeaseRow>),
}

/// One take of a worker ID on one database for `holder`, lowest free first, at most
/// `tries` compare-and-sets.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Take {
    /// The worker IDs the database may lease ([`worker_ids`]).
    ids: Vec<u16>,
    holder: String,
    grace_ms: i64,
    tries: usize,
    phase: TakePhase,
}

impl Take {
    pub fn new(ids: Vec<u16>, holder: &str, grace_ms: i64, tries: usize) -> Take {
        Take {
            ids,
            holder: holder.to_owned(),
            grace_ms,
            tries,
            phase: TakePhase::Read,
        }
    }

    pub fn need(&self) -> TakeNeed {
        match &self.phase {
            TakePhase::Read => TakeNeed::Read,
            TakePhase::Elsewhere(_) => TakeNeed::Elsewhere,
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
            .collect();
        self.phase = match free.is_empty() {
            true => TakePhase::Ended(None),
            false => TakePhase::Elsewhere(free),
        };
    }

    /// The answer to [`TakeNeed::Elsewhere`]: the lease rows of the other members that
    /// answered. A worker ID held live on one of them is not taken.
    pub fn elsewhere(&mut self, rows: &[LeaseRow]) {
        let TakePhase::Elsewhere(free) = std::mem::replace(&mut self.phase, TakePhase::Read) else {
            panic!("the other members' rows answered out of turn");
        };
        let free: Vec<u16> = free
            .into_iter()
            .filter(|&w| held_elsewhere(rows, w, &self.holder).is_none())
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
    /// Read the lease rows of the other configured members (those that answer); answer
    /// with [`Renew::elsewhere`].
    Elsewhere,
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
    /// Given up: another member's row names another live holder (a restore brought
    /// it back): that row.
    HeldElsewhere(LeaseRow),
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
    w: u16,
    holder: String,
    phase: Result<RenewNeed, Renewed>,
}

impl Renew {
    /// A renewal of worker ID `w` by `holder`, whose database may now lease `ids`
    /// ([`worker_ids`]).
    pub fn new(w: u16, holder: &str, ids: &[u16]) -> Renew {
        Renew {
            w,
            holder: holder.to_owned(),
            phase: match ids.contains(&w) {
                true => Ok(RenewNeed::Agree),
                false => Err(Renewed::LeftClass),
            },
        }
    }

    /// A release: the row written at once.
    pub fn release() -> Renew {
        Renew {
            w: 0,
            holder: String::new(),
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
            Agreed::Keep => Ok(RenewNeed::Elsewhere),
            Agreed::Differs(why) => Err(Renewed::Differs(why)),
        };
    }

    /// The answer to [`RenewNeed::Elsewhere`]: the lease rows of the other members that
    /// answered.
    pub fn elsewhere(&mut self, rows: &[LeaseRow]) {
        assert_eq!(
            self.phase,
            Ok(RenewNeed::Elsewhere),
            "elsewhere out of turn"
        );
        self.phase = match held_elsewhere(rows, self.w, &self.holder) {
            Some(row) => Err(Renewed::HeldElsewhere(row.clone())),
            None => Ok(RenewNeed::Renew),
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
        let mut t = Take::new(vec![1, 3, 5, 7], "b", 1_000, 8);
        t.read(&[row(1, 5_000), row(3, 400), row(5, -10_000)]);
        assert_eq!(t.need(), TakeNeed::Elsewhere);
        t.elsewhere(&[]);
        assert_eq!(t.need(), TakeNeed::Take(5));
        t.taken(None);
        assert_eq!(t.need(), TakeNeed::Take(7));
        t.taken(Some(row(7, 6_000)));
        assert_eq!(t.need(), TakeNeed::Done(Some(row(7, 6_000))));

        let mut t = Take::new(vec![1], "b", 0, 8);
        t.read(&[row(1, 5_000)]);
        assert_eq!(t.need(), TakeNeed::Done(None));
        let mut t = Take::new(Vec::new(), "b", 0, 8);
        t.read(&[]);
        assert_eq!(t.need(), TakeNeed::Done(None));
    }

    #[test]
    fn a_renewal_gives_up_a_worker_id_out_of_class_or_of_another_spec() {
        assert_eq!(
            Renew::new(2, "a", &[1, 3]).need(),
            RenewNeed::Done(Renewed::LeftClass)
        );
        let mut r = Renew::new(1, "a", &[1, 3]);
        r.agreed(Agreed::Differs("js".into()));
        assert_eq!(r.need(), RenewNeed::Done(Renewed::Differs("js".into())));
        let mut r = Renew::new(1, "a", &[1, 3]);
        r.agreed(Agreed::Keep);
        r.elsewhere(&[]);
        r.renewed(None);
        assert_eq!(r.need(), RenewNeed::Done(Renewed::Lost));
        let mut r = Renew::release();
        r.renewed(Some(row(1, 0)));
        assert_eq!(r.need(), RenewNeed::Done(Renewed::Kept(row(1, 0))));
    }

    #[test]
    fn a_worker_id_held_live_on_another_member_is_neither_taken_nor_kept() {
        let mut other = row(3, 5_000);
        other.holder = "c".into();
        let blocked = LeaseRow {
            holder: MOVED_HOLDER.into(),
            ..row(1, i64::MAX / 4)
        };
        let mine = LeaseRow {
            holder: "b".into(),
            ..row(5, 5_000)
        };
        let ran_out = LeaseRow {
            holder: "c".into(),
            ..row(7, 900)
        };
        let rows = [other.clone(), blocked, mine, ran_out];
        // 3 is held live by c on another member; a block, this holder's own row and a
        // lease run out are not holders.
        let mut t = Take::new(vec![1, 3, 5, 7], "b", 0, 8);
        t.read(&[]);
        t.elsewhere(&rows);
        assert_eq!(t.need(), TakeNeed::Take(1));
        t.taken(None);
        assert_eq!(t.need(), TakeNeed::Take(5));
        let mut t = Take::new(vec![3], "b", 0, 8);
        t.read(&[]);
        t.elsewhere(&rows);
        assert_eq!(t.need(), TakeNeed::Done(None));

        let mut r = Renew::new(3, "b", &[1, 3]);
        r.agreed(Agreed::Keep);
        assert_eq!(r.need(), RenewNeed::Elsewhere);
        r.elsewhere(&rows);
        assert_eq!(r.need(), RenewNeed::Done(Renewed::HeldElsewhere(other)));
        let mut r = Renew::new(1, "b", &[1, 3]);
        r.agreed(Agreed::Keep);
        r.elsewhere(&rows);
        assert_eq!(r.need(), RenewNeed::Renew);
    }
}
