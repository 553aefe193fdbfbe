//! How far each database's biz rows have advanced, as far as anyone knows: what this
//! process has seen and what the witnesses in the other databases recorded. A row found
//! below that has gone back in time (a restore from backup, a promoted asynchronous
//! replica, a crash with `synchronous_commit = off`), and reserving from it would
//! reissue IDs; its database is fenced. Pure: no IO.

use std::collections::{HashMap, HashSet};

use crate::name::Name;
use crate::rows::{BizRow, Reclass};

/// The progress of one biz row: versions only grow (a give-back bumps it too).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Mark {
    /// The highest version known.
    pub version: i64,
    /// The row's `max_id` at that version.
    pub max_id: i64,
    /// The highest `max_id` the row ever had: no ID above it was reserved from the row.
    /// A give-back lowers `max_id`, never this.
    pub high_id: i64,
}

impl Mark {
    pub fn of(row: &BizRow) -> Mark {
        Mark {
            version: row.version,
            max_id: row.max_id,
            high_id: row.max_id,
        }
    }

    /// The later of two marks of one row, keeping the higher `high_id` of both.
    #[must_use]
    pub fn join(self, other: Mark) -> Mark {
        let later = match other.version > self.version {
            true => other,
            false => self,
        };
        Mark {
            high_id: self.high_id.max(other.high_id),
            ..later
        }
    }

    /// Whether a row read as `found` lies behind this mark: an older version, or the
    /// same version with another `max_id` (a row rewritten behind segmint's back).
    pub fn is_ahead_of(&self, found: &BizRow) -> bool {
        crate::rows::Reclass::of(found).is_behind(self)
    }
}

/// One witness row: the mark of the row of `biz` on the database named `database`,
/// recorded in another database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Witness {
    pub database: String,
    pub biz: String,
    pub mark: Mark,
}

/// A row found behind the evidence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Regression {
    pub biz: String,
    pub found: (i64, i64),
    pub known: Mark,
}

impl std::fmt::Display for Regression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "gone back in time: biz `{}` is at version {} (max_id {}), but version {} (max_id {}) was seen or witnessed",
            self.biz, self.found.0, self.found.1, self.known.version, self.known.max_id
        )
    }
}

/// Whether `row` is behind `known`, the mark of its row (if any).
///
/// # Errors
/// [`Regression`] when it is.
pub fn behind(known: Option<Mark>, row: &BizRow) -> Result<(), Regression> {
    match known {
        Some(known) if known.is_ahead_of(row) => Err(Regression::of(row, known)),
        _ => Ok(()),
    }
}

impl Regression {
    /// `row`, found behind `known`.
    pub fn of(row: &BizRow, known: Mark) -> Regression {
        Regression::at(&row.biz_type, &Reclass::of(row), known)
    }

    /// The row of `biz` read as `row`, found behind `known`.
    pub fn at(biz: &str, row: &Reclass, known: Mark) -> Regression {
        Regression {
            biz: biz.to_owned(),
            found: (row.version, row.max_id),
            known,
        }
    }
}

/// A database's row of a biz: the database's index, and the number of the biz's
/// [`Name`]. Names and marks are never removed, so a key stays valid, and holding one
/// allocates nothing.
pub type MarkKey = (usize, usize);

/// The marks of one database's rows, by the number of the biz's [`Name`] (32 bytes a
/// row, where a map by name took about 60 and the name).
type Marks = Vec<Option<Mark>>;

/// A map keyed by biz name, with a fast hasher seeded per process: it holds a mark of
/// every row of every biz (two million at a million bizs on two databases), and its
/// keys are biz names read from the databases, never a request's input.
pub type ByBiz<V> = HashMap<String, V, foldhash::fast::RandomState>;

/// The marks of every row of every database, by database index and biz, with what a
/// catalog read in flight must be checked against and what each database's witnesses
/// may lack. Every operation costs what it touches, never the number of marks, except
/// the first look for what a database's witnesses lack (and the first after
/// [`Evidence::unsettle`]), which a caller may take in chunks ([`Evidence::lacking`]);
/// a lookup allocates nothing.
#[derive(Debug, Clone, Default)]
pub struct Evidence {
    /// By database index, then biz.
    marks: Vec<Marks>,
    /// While a catalog read is in flight ([`Evidence::begin_read`]): the marks, as they
    /// were when it started, of the keys learnt since (`None`: unknown then).
    journal: Option<HashMap<MarkKey, Option<Mark>>>,
    /// The databases whose witnesses were last brought up to date (by
    /// [`Evidence::lacking`]), each with the keys learnt since: only those can be
    /// lacking there. A database not in it may lack any mark.
    settled: HashMap<usize, HashSet<MarkKey>>,
}

impl Evidence {
    /// Makes room for a mark of every name held in database `db`'s rows, unless `n`
    /// (the rows of a full read about to be learnt) is 0: one allocation, not a doubling
    /// per power of two.
    pub fn reserve(&mut self, db: usize, n: usize) {
        if n > 0 {
            let marks = self.marks_of(db);
            marks.reserve_exact(Name::count().saturating_sub(marks.len()));
        }
    }

    /// Gives back the room for database `db`'s marks beyond a tenth more than it holds
    /// (marks learnt one by one grow by doubling: up to twice the room they need).
    pub fn shrink(&mut self, db: usize) {
        if let Some(marks) = self.marks.get_mut(db)
            && marks.capacity() > marks.len() + marks.len() / 10
        {
            marks.shrink_to_fit();
        }
    }

    fn marks_of(&mut self, db: usize) -> &mut Marks {
        if self.marks.len() <= db {
            self.marks.resize_with(db + 1, Marks::default);
        }
        &mut self.marks[db]
    }

    /// Adds what is known elsewhere of the row of `biz` on database `db`. Returns
    /// whether the mark moved.
    pub fn learn(&mut self, db: usize, biz: impl Into<Name>, mark: Mark) -> bool {
        let index = biz.into().index();
        let marks = self.marks_of(db);
        if marks.len() <= index {
            marks.resize(index + 1, None);
        }
        let old = marks[index];
        let new = old.map_or(mark, |m| m.join(mark));
        if old == Some(new) {
            return false;
        }
        marks[index] = Some(new);
        if let Some(journal) = &mut self.journal {
            journal.entry((db, index)).or_insert(old);
        }
        for (other, pending) in &mut self.settled {
            if *other != db {
                pending.insert((db, index));
            }
        }
        true
    }

    /// Whether `row`, read from database `db`, is behind the evidence.
    ///
    /// # Errors
    /// [`Regression`] when it is.
    pub fn check(&self, db: usize, row: &BizRow) -> Result<(), Regression> {
        behind(self.mark_of(db, row.biz_type), row)
    }

    /// The mark of the row of `biz` on database `db`, if any is known.
    pub fn mark(&self, db: usize, biz: &str) -> Option<Mark> {
        self.mark_of(db, Name::find(biz)?)
    }

    /// [`Evidence::mark`], of a name held.
    pub fn mark_of(&self, db: usize, biz: Name) -> Option<Mark> {
        *self.marks.get(db)?.get(biz.index())?
    }

    /// Starts a catalog read: until [`Evidence::end_read`], [`Evidence::check_read`]
    /// judges rows by the marks as they are now. A mark learnt meanwhile (a reservation
    /// here, a witness) may be newer than a row the read returns, without the row
    /// having gone back.
    pub fn begin_read(&mut self) {
        self.journal = Some(HashMap::new());
    }

    /// Ends the catalog read begun last.
    pub fn end_read(&mut self) {
        self.journal = None;
    }

    /// As [`Evidence::check`], by the marks as they were when the read in flight
    /// began (or as they are, when none is).
    ///
    /// # Errors
    /// [`Regression`] when `row` is behind them.
    pub fn check_read(&self, db: usize, row: &BizRow) -> Result<(), Regression> {
        let then = self
            .journal
            .as_ref()
            .filter(|j| !j.is_empty())
            .and_then(|j| j.get(&(db, row.biz_type.index())));
        match then {
            Some(then) => behind(*then, row),
            None => self.check(db, row),
        }
    }

    /// The marks of the other databases' rows (named by index in `names`) that the
    /// witnesses of database `db` lack or hold older, `held` giving the mark a witness
    /// there holds of a database (by name) and biz; at most `limit` of them, the first
    /// by database and biz, the others left for the next call. Only the marks learnt
    /// since the last call for `db` are looked at, or every mark on the first call (and
    /// after [`Evidence::unsettle`]); `db` then counts as up to date but for the marks
    /// left: call `unsettle` if the witnesses returned could not be written.
    ///
    /// In one go: [`Evidence::lacking`], [`Evidence::lacking_among`] and
    /// [`Evidence::first_lacking`], which a caller holding the evidence under a lock
    /// runs in chunks.
    pub fn take_lacking(
        &mut self,
        db: usize,
        names: &[String],
        held: impl Fn(&str, &str) -> Option<Mark>,
        limit: usize,
    ) -> Vec<Witness> {
        let keys = self.lacking(db);
        let lacking = self.lacking_among(db, names, &keys, held);
        let (taken, left) = Evidence::first_lacking(lacking, limit);
        self.leave(db, left);
        taken
    }

    /// The marks that database `db`'s witnesses may lack: those learnt since the last
    /// look, or every mark of the other databases on the first look (and after
    /// [`Evidence::unsettle`]). From here on `db` counts as up to date, but for the
    /// marks learnt later and those [`Evidence::leave`] puts back. Costs one key per
    /// mark on a first look, no lookup and no allocation of a name.
    pub fn lacking(&mut self, db: usize) -> Vec<MarkKey> {
        match self.settled.insert(db, HashSet::new()) {
            Some(pending) => pending.into_iter().collect(),
            None => self
                .marks
                .iter()
                .enumerate()
                .filter(|&(other, _)| other != db)
                .flat_map(|(other, marks)| {
                    let known = marks.iter().enumerate().filter(|(_, m)| m.is_some());
                    known.map(move |(i, _)| (other, i))
                })
                .collect(),
        }
    }

    /// Of the marks `keys` (from [`Evidence::lacking`]), those that database `db`'s
    /// witnesses lack or hold older, as [`Evidence::take_lacking`] has `held` and
    /// `names`, each with its key.
    pub fn lacking_among(
        &self,
        db: usize,
        names: &[String],
        keys: &[MarkKey],
        held: impl Fn(&str, &str) -> Option<Mark>,
    ) -> Vec<(MarkKey, Witness)> {
        keys.iter()
            .filter(|&&(other, _)| other != db)
            .filter_map(|&(other, i)| {
                let mark = (*self.marks.get(other)?.get(i)?)?;
                let biz = Name::from_index(i)?;
                held(&names[other], biz.as_str())
                    .is_none_or(|h| h.join(mark) != h)
                    .then(|| {
                        let witness = Witness {
                            database: names[other].clone(),
                            biz: biz.to_string(),
                            mark,
                        };
                        ((other, i), witness)
                    })
            })
            .collect()
    }

    /// The first `limit` of `lacking` by database and biz, in that order, and the keys
    /// of the others (to [`Evidence::leave`] for the next look). Selects without
    /// sorting the rest: a backlog of a million marks costs one pass, not a sort.
    pub fn first_lacking(
        mut lacking: Vec<(MarkKey, Witness)>,
        limit: usize,
    ) -> (Vec<Witness>, Vec<MarkKey>) {
        let order = |a: &(MarkKey, Witness), b: &(MarkKey, Witness)| {
            (&a.1.database, &a.1.biz).cmp(&(&b.1.database, &b.1.biz))
        };
        let left = if lacking.len() > limit {
            lacking.select_nth_unstable_by(limit, order);
            lacking
                .split_off(limit)
                .into_iter()
                .map(|(k, _)| k)
                .collect()
        } else {
            Vec::new()
        };
        lacking.sort_unstable_by(order);
        (lacking.into_iter().map(|(_, w)| w).collect(), left)
    }

    /// Puts `keys` back among the marks database `db`'s witnesses may lack, for its
    /// next look.
    pub fn leave(&mut self, db: usize, keys: impl IntoIterator<Item = MarkKey>) {
        let mut keys = keys.into_iter().peekable();
        if keys.peek().is_some() {
            self.settled.entry(db).or_default().extend(keys);
        }
    }

    /// Forgets what database `db`'s witnesses hold: the next
    /// [`Evidence::take_lacking`] for it looks at every mark.
    pub fn unsettle(&mut self, db: usize) {
        self.settled.remove(&db);
    }

    /// Whether database `witness` holds every mark known here of database `db`'s rows:
    /// it was brought up to date ([`Evidence::lacking`]) and no mark of `db` learnt
    /// since, or left then, waits to be written there. Call it while no look for
    /// `witness` is under way: a look counts the database up to date before its writes
    /// are done.
    pub fn witnessed_by(&self, db: usize, witness: usize) -> bool {
        db != witness
            && self
                .settled
                .get(&witness)
                .is_some_and(|pending| pending.iter().all(|&(of, _)| of != db))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checks `row` of database `db` and learns it if it is not behind.
    fn observe(ev: &mut Evidence, db: usize, row: &BizRow) -> Result<(), Regression> {
        ev.check(db, row)?;
        ev.learn(db, row.biz_type, Mark::of(row));
        Ok(())
    }

    fn row(version: i64, max_id: i64) -> BizRow {
        BizRow {
            biz_type: "order".into(),
            begin_id: 0,
            max_id,
            step: 10,
            delta: 1,
            remainder: 0,
            version,
            description: Box::default(),
            epoch: 0,
            frozen: false,
            claimed_by: 0,
        }
    }

    #[test]
    fn a_row_that_advanced_or_gave_back_is_fine() {
        let mut ev = Evidence::default();
        observe(&mut ev, 0, &row(3, 30)).unwrap();
        observe(&mut ev, 0, &row(4, 40)).unwrap();
        // A give-back: a newer version with a lower max_id.
        observe(&mut ev, 0, &row(5, 33)).unwrap();
        assert_eq!(
            ev.mark(0, "order"),
            Some(Mark {
                version: 5,
                max_id: 33,
                high_id: 40
            })
        );
        observe(&mut ev, 0, &row(5, 33)).unwrap();
    }

    #[test]
    fn an_older_version_or_a_rewritten_row_is_a_regression() {
        let mut ev = Evidence::default();
        observe(&mut ev, 1, &row(9, 90)).unwrap();
        let e = observe(&mut ev, 1, &row(7, 70)).unwrap_err();
        assert_eq!(e.found, (7, 70));
        assert!(e.to_string().contains("gone back in time"), "{e}");
        assert!(observe(&mut ev, 1, &row(9, 80)).is_err());
        // Nothing learnt from a regressed row; other databases are separate.
        assert_eq!(ev.mark(1, "order").map(|m| m.version), Some(9));
        observe(&mut ev, 0, &row(1, 10)).unwrap();
    }

    #[test]
    fn witnesses_join_to_the_latest_version_and_the_highest_id() {
        let mut ev = Evidence::default();
        let mark = |version, max_id, high_id| Mark {
            version,
            max_id,
            high_id,
        };
        ev.learn(0, "order", mark(5, 50, 60));
        ev.learn(0, "order", mark(4, 40, 70));
        assert_eq!(ev.mark(0, "order"), Some(mark(5, 50, 70)));
        assert!(ev.check(0, &row(4, 40)).is_err());
        assert!(ev.check(0, &row(6, 20)).is_ok());
    }

    #[test]
    fn a_database_lacks_the_marks_of_the_others_it_holds_older_or_not_at_all() {
        let names = ["a".to_string(), "b".to_string(), "c".to_string()];
        let mut ev = Evidence::default();
        observe(&mut ev, 0, &row(5, 50)).unwrap();
        observe(&mut ev, 1, &row(2, 21)).unwrap();
        observe(&mut ev, 2, &row(7, 70)).unwrap();
        let held = |db: &str, version, max_id| Witness {
            database: db.into(),
            biz: "order".into(),
            mark: Mark {
                version,
                max_id,
                high_id: max_id,
            },
        };
        let holding = |has: Vec<Witness>| {
            move |db: &str, biz: &str| {
                has.iter()
                    .find(|w| w.database == db && w.biz == biz)
                    .map(|w| w.mark)
            }
        };
        // Database b holds a's mark as it is and c's older: only c's is written.
        let lacking = ev.take_lacking(
            1,
            &names,
            holding(vec![held("a", 5, 50), held("c", 6, 60)]),
            10,
        );
        assert_eq!(lacking, [held("c", 7, 70)]);
        // Settled: nothing learnt since, nothing looked at (even against no witness).
        assert!(ev.take_lacking(1, &names, holding(vec![]), 10).is_empty());
        // What is learnt since is looked at, and only that.
        observe(&mut ev, 2, &row(8, 80)).unwrap();
        assert_eq!(
            ev.take_lacking(1, &names, holding(vec![]), 10),
            [held("c", 8, 80)]
        );
        // A witness ahead of what is known here needs nothing.
        ev.unsettle(1);
        assert!(
            ev.take_lacking(
                1,
                &names,
                holding(vec![held("a", 9, 90), held("c", 8, 80)]),
                10
            )
            .is_empty()
        );
        // Unsettled, every mark is looked at again.
        ev.unsettle(1);
        assert_eq!(ev.take_lacking(1, &names, holding(vec![]), 10).len(), 2);
        // At most `limit` at a time; the rest at the next calls, in order.
        ev.unsettle(1);
        assert_eq!(
            ev.take_lacking(1, &names, holding(vec![]), 1),
            [held("a", 5, 50)]
        );
        assert_eq!(
            ev.take_lacking(1, &names, holding(vec![]), 1),
            [held("c", 8, 80)]
        );
        assert!(ev.take_lacking(1, &names, holding(vec![]), 1).is_empty());
    }

    /// A database holds another's marks once brought up to date, until a mark of that
    /// one is learnt or left over; marks of a third database do not count.
    #[test]
    fn a_database_witnesses_another_once_up_to_date_and_until_a_mark_of_it_waits() {
        let names = ["a".to_string(), "b".to_string(), "c".to_string()];
        let none = |_: &str, _: &str| None;
        let mut ev = Evidence::default();
        observe(&mut ev, 0, &row(5, 50)).unwrap();
        assert!(!ev.witnessed_by(0, 1), "never brought up to date");
        assert_eq!(ev.take_lacking(1, &names, none, 10).len(), 1);
        assert!(ev.witnessed_by(0, 1));
        assert!(!ev.witnessed_by(0, 0), "no database witnesses itself");
        observe(&mut ev, 2, &row(7, 70)).unwrap();
        assert!(ev.witnessed_by(0, 1), "a mark of c waits, none of a");
        observe(&mut ev, 0, &row(6, 60)).unwrap();
        assert!(!ev.witnessed_by(0, 1));
        let mut order = Evidence::default();
        for n in 0..3 {
            order.learn(0, format!("biz{n}"), Mark::of(&row(n, n * 10)));
        }
        assert_eq!(order.take_lacking(1, &names, none, 2).len(), 2);
        assert!(!order.witnessed_by(0, 1), "one mark left for the next look");
        assert_eq!(order.take_lacking(1, &names, none, 2).len(), 1);
        assert!(order.witnessed_by(0, 1));
    }

    /// A look taken in chunks, with the evidence let go between them, finds what one
    /// look finds; a mark learnt meanwhile is looked at the next time.
    #[test]
    fn a_look_in_chunks_finds_what_one_look_finds_and_the_marks_learnt_meanwhile_next() {
        let names = ["a".to_string(), "b".to_string()];
        let mark = |n: i64| Mark {
            version: n,
            max_id: n * 10,
            high_id: n * 10,
        };
        let mut ev = Evidence::default();
        for n in 0..50 {
            ev.learn(0, format!("biz{n:02}"), mark(n));
        }
        let mut whole = ev.clone();
        let held = |_: &str, biz: &str| (biz < "biz10").then(|| mark(0).join(mark(99)));
        let expected = whole.take_lacking(1, &names, held, 1_000);
        assert_eq!(expected.len(), 40);
        let keys = ev.lacking(1);
        let mut found = Vec::new();
        for (i, chunk) in keys.chunks(7).enumerate() {
            found.extend(ev.lacking_among(1, &names, chunk, held));
            // Learnt between two chunks: a new biz, and a biz already looked at.
            if i == 2 {
                ev.learn(0, "new", mark(1));
                ev.learn(0, "biz11", mark(12));
            }
        }
        let (taken, left) = Evidence::first_lacking(found, 30);
        ev.leave(1, left);
        let later = ev.take_lacking(1, &names, held, 1_000);
        assert_eq!(taken[..], expected[..30]);
        // What was left, then what was learnt meanwhile.
        let mut rest: Vec<_> = later.iter().map(|w| (w.biz.as_str(), w.mark)).collect();
        rest.sort_by_key(|(biz, _)| *biz);
        let mut wanted: Vec<_> = expected[30..]
            .iter()
            .map(|w| (w.biz.as_str(), w.mark))
            .chain([("biz11", mark(12)), ("new", mark(1))])
            .collect();
        wanted.sort_by_key(|(biz, _)| *biz);
        assert_eq!(rest, wanted);
        assert!(ev.take_lacking(1, &names, held, 1_000).is_empty());
    }

    #[test]
    fn a_read_in_flight_is_judged_by_the_marks_from_before_it() {
        let mut ev = Evidence::default();
        observe(&mut ev, 0, &row(3, 30)).unwrap();
        ev.begin_read();
        // A reservation here moves the row on while the read runs.
        ev.learn(0, "order", Mark::of(&row(4, 40)));
        ev.learn(1, "order", Mark::of(&row(2, 20)));
        // The read returned the row as it was: not a regression.
        assert!(ev.check_read(0, &row(3, 30)).is_ok());
        assert!(ev.check_read(1, &row(1, 10)).is_ok());
        // Behind what was known before the read: a regression still.
        assert!(ev.check_read(0, &row(2, 20)).is_err());
        ev.end_read();
        assert!(ev.check_read(0, &row(3, 30)).is_err());
    }
}
