//! Catalog refresh: re-reading bizs, tokens and witnesses from every database, checking
//! the rows against the evidence, and writing back the witnesses a database lacks.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;
use futures_util::future::join_all;
use parking_lot::Mutex;

use super::Store;
use crate::segment::Residue;
use crate::store::catalog::{BizEntry, ByName, Changes, Snapshot};
use crate::store::evidence::{ByBiz, Evidence, Mark, Witness};
use crate::store::{BizRow, Catalog, CatalogRows, FeedPosition, StoreError};

/// The most witness rows one refresh writes into one database: the marks of a large
/// catalog read for the first time (every row of a million bizs) are written over
/// several refreshes (ten at a million), each looking at the marks left once.
const WITNESSES_PER_REFRESH: usize = 100_000;

/// The witness rows written in one statement, well within the fetch timeout.
const WITNESSES_PER_WRITE: usize = 5_000;

/// The most bizs checked under one hold of `view.evidence` (a reservation takes it
/// too): a full read's checks of a million bizs take seconds, one chunk milliseconds.
const CHECKS_PER_HOLD: usize = 1_000;

/// The catalog as this process sees it, and what the refreshes and evidence checks
/// keep of the rows read.
///
/// # Lock order
/// `refreshed` (async, one refresh at a time) is taken before any other lock of the
/// store and held across the refresh's database calls, a heal's included, and across
/// the work it hands to a blocking thread. The plain (`parking_lot`) mutexes are held
/// for a few map or field operations, never across an await, or for a whole step on
/// the blocking thread (`snapshots` and `unbuilt`, which only a refresh takes):
/// `evidence` may hold a database's `health` (and so `Layouts.view` after it), or
/// `snapshots`; `snapshots` may hold `classes_seen`, `refused` and `unbuilt`;
/// `classes_seen`, `refused`, `unbuilt` and `early`'s maps nest nothing. `catalog` is
/// lock-free.
pub(super) struct CatalogView {
    /// Read on every request, replaced on refresh.
    pub(super) catalog: ArcSwap<Catalog>,
    /// Last rows read from each database; kept while a database is down so that its
    /// rows still take part in the residue checks.
    pub(super) snapshots: Mutex<Vec<Option<Snapshot>>>,
    /// Single flight for refreshes; holds when the last one started. Owned by the
    /// refresh's turn ([`Turn`]), which goes with its work to a blocking thread.
    pub(super) refreshed: Arc<tokio::sync::Mutex<Option<Instant>>>,
    /// What the reads applied to `snapshots` changed and no catalog was built from
    /// yet: a refresh given up between the two leaves it to the next one.
    unbuilt: Mutex<Changes>,
    /// How far every row has advanced, as seen here and witnessed elsewhere. Plain
    /// mutex: held for map updates only, never across an await.
    pub(super) evidence: Mutex<Evidence>,
    /// What this process accepted of each row's class (by database and biz): a row
    /// whose class changes is used only once its `max_id` is above every ID issued
    /// before (see `refresh`). Plain mutex, as `evidence`.
    pub(super) classes_seen: Mutex<ClassesSeen>,
    /// Why a biz is refused by [`check_classes`], kept between refreshes: only
    /// the bizs a refresh touched are checked again.
    pub(super) refused: Mutex<HashMap<String, StoreError>>,
    /// Before the first catalog is read: what was read of single bizs, for the
    /// requests that came meanwhile (see `Store::look_up`).
    pub(super) early: super::early::Early,
    /// Tokens a read did not grant, by the catalog generation that refused them.
    pub(super) misses: super::early::Misses,
}

impl CatalogView {
    /// An empty catalog over `databases` databases, never refreshed.
    pub(super) fn new(databases: usize) -> CatalogView {
        CatalogView {
            catalog: ArcSwap::from_pointee(Catalog::default()),
            snapshots: Mutex::new(vec![None; databases]),
            refreshed: Arc::new(tokio::sync::Mutex::new(None)),
            unbuilt: Mutex::new(Changes::default()),
            evidence: Mutex::new(Evidence::default()),
            classes_seen: Mutex::new(ClassesSeen::default()),
            refused: Mutex::new(HashMap::new()),
            early: super::early::Early::default(),
            misses: super::early::Misses::default(),
        }
    }

    /// Takes in the rows `read` at `now` (by database), noting what they changed for
    /// the next [`CatalogView::build`]; says of each database whether a witness it held
    /// went missing or back. Seconds after a full read of a million bizs: run on a
    /// blocking thread.
    fn apply(&self, read: Vec<(usize, CatalogRows)>, now: Instant) -> Vec<(usize, bool)> {
        let mut snapshots = self.snapshots.lock();
        let mut unbuilt = self.unbuilt.lock();
        read.into_iter()
            .map(|(i, rows)| {
                let changes = snapshots[i]
                    .get_or_insert_with(Snapshot::default)
                    .apply(rows, now);
                (i, unbuilt.merge(changes))
            })
            .collect()
    }

    /// The marks that the witnesses of each database just `read` lack (with whether a
    /// witness it held went missing or back, so that every mark must be looked for
    /// again): at most [`WITNESSES_PER_REFRESH`] a database, the others left for the
    /// next refresh. Looked at a chunk at a time under `evidence` (a reservation takes
    /// it too): a first look at a million bizs takes seconds. Run on a blocking thread.
    fn lacking_witnesses(
        &self,
        names: &[String],
        read: &[(usize, bool)],
    ) -> Vec<(usize, Vec<Witness>)> {
        let mut all = Vec::new();
        for &(k, lost) in read {
            // Only a refresh changes the snapshots, and the caller holds a refresh's turn.
            if self.snapshots.lock()[k].is_none() {
                continue;
            }
            let keys = {
                let mut evidence = self.evidence.lock();
                if lost {
                    evidence.unsettle(k);
                }
                evidence.lacking(k)
            };
            let mut lacking = Vec::new();
            for chunk in keys.chunks(CHECKS_PER_HOLD) {
                let evidence = self.evidence.lock();
                let snapshots = self.snapshots.lock();
                let Some(snap) = snapshots[k].as_ref() else {
                    continue;
                };
                let held = |db: &str, biz: &str| {
                    snap.witnesses
                        .get(db)
                        .and_then(|marks| marks.get(biz))
                        .copied()
                };
                lacking.extend(evidence.lacking_among(k, names, chunk, held));
            }
            let (taken, left) = Evidence::first_lacking(lacking, WITNESSES_PER_REFRESH);
            self.evidence.lock().leave(k, left);
            if !taken.is_empty() {
                all.push((k, taken));
            }
        }
        all
    }

    /// The catalog after the changes applied since the last one was built (`unbuilt`),
    /// under a layout in force of epoch `floor` whose classes are `layouts`
    /// ([`Cluster::layout_classes`]): the rows of the bizs touched are checked again
    /// ([`check_classes`]), and the catalog is built again only if what it holds
    /// changed (else the current one is kept, generation and all). Seconds after a
    /// full read of a million bizs: run on a blocking thread.
    fn build(
        &self,
        names: &[String],
        floor: i64,
        layouts: &[(i64, String, Residue)],
    ) -> Arc<Catalog> {
        let changes = std::mem::take(&mut *self.unbuilt.lock());
        let touched: Vec<String> = {
            let snapshots = self.snapshots.lock();
            match changes.full {
                true => Snapshot::all_bizs(&snapshots)
                    .into_iter()
                    .map(str::to_owned)
                    .collect(),
                false => changes.bizs.iter().cloned().collect(),
            }
        };
        // Checked against the marks where they are (`evidence` before `snapshots`, as
        // the lock order has it), a chunk at a time: a reservation never waits on the
        // marks for longer than one chunk. Marks only grow, so a mark learnt between
        // two chunks is as good as one known before the first.
        let mut refusals = Vec::new();
        for chunk in touched.chunks(CHECKS_PER_HOLD) {
            let evidence = self.evidence.lock();
            let snapshots = self.snapshots.lock();
            let mut seen = self.classes_seen.lock();
            refusals.extend(check_classes(
                names,
                &evidence,
                &snapshots,
                chunk,
                (floor, layouts),
                &mut *seen,
            ));
        }
        let snapshots = self.snapshots.lock();
        let mut refused = self.refused.lock();
        for biz in &touched {
            refused.remove(biz);
        }
        refused.extend(refusals);
        let current = self.catalog.load_full();
        let rebuild = changes.full
            || changes.grants
            || changes.shapes
            || !current.is_read()
            || current.differs(names, &snapshots, floor, &touched, &refused);
        if !rebuild {
            return current;
        }
        // Built again in full after a full read or a layout change; else the entries
        // and grants that may differ are updated in a copy of the current one.
        let catalog = if changes.full || !current.is_read() {
            let mut catalog = Catalog::build_at(names, &snapshots, floor);
            for (biz, why) in refused.iter() {
                catalog.refuse(biz, why.clone());
            }
            catalog
        } else {
            current.updated(
                names,
                &snapshots,
                floor,
                &touched,
                &refused,
                &changes.digests,
            )
        };
        let catalog = Arc::new(catalog);
        self.catalog.store(catalog.clone());
        catalog
    }
}

/// A refresh's turn: held from its start to its end (see [`CatalogView::refreshed`]).
type Turn = tokio::sync::OwnedMutexGuard<Option<Instant>>;

/// Runs `work` on a blocking thread, its `turn` with it. A full read of a million bizs
/// is seconds of CPU (learning, checking and building); on a runtime's thread it would
/// starve the connections that thread drives, which requests use too. A refresh given
/// up meanwhile (its caller went away) leaves `work` to finish and keep the turn until
/// it is over, so no other refresh runs beside it. `None` when the runtime is shutting
/// down.
async fn off_thread<T: Send + 'static>(
    turn: Turn,
    work: impl FnOnce() -> T + Send + 'static,
) -> Option<(Turn, T)> {
    match tokio::task::spawn_blocking(move || {
        let out = work();
        (turn, out)
    })
    .await
    {
        Ok(done) => Some(done),
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => None,
    }
}

/// Sets `biz`'s entry in `map` to `value`, allocating its key only when new.
/// Where [`check_classes`] keeps what it accepted of each row's class.
pub(super) trait Seen {
    /// What was accepted of the row of `biz` on database `db`.
    fn get(&self, db: usize, biz: &str) -> Option<SeenRow>;
    /// Records what is accepted of the row of `biz` on database `db`.
    fn put(&mut self, db: usize, biz: &str, row: SeenRow);
}

/// A scratch record, by database and biz (a look at one biz).
impl Seen for Vec<ByBiz<SeenRow>> {
    fn get(&self, db: usize, biz: &str) -> Option<SeenRow> {
        self.as_slice().get(db)?.get(biz).copied()
    }

    fn put(&mut self, db: usize, biz: &str, row: SeenRow) {
        if self.len() <= db {
            self.resize_with(db + 1, ByBiz::default);
        }
        match self[db].get_mut(biz) {
            Some(v) => *v = row,
            None => {
                self[db].insert(biz.to_owned(), row);
            }
        }
    }
}

/// What this process accepted of every row's class: by database, in a vector indexed by
/// the number of the biz's [`Name`](crate::name::Name). 40 bytes a row, where a map by
/// name took about 150 at a million rows.
#[derive(Debug, Default)]
pub(crate) struct ClassesSeen {
    /// By database, then name.
    by_name: Vec<Vec<Option<SeenRow>>>,
}

impl Seen for ClassesSeen {
    fn get(&self, db: usize, biz: &str) -> Option<SeenRow> {
        let name = crate::name::Name::find(biz)?;
        *self.by_name.get(db)?.get(name.index())?
    }

    fn put(&mut self, db: usize, biz: &str, row: SeenRow) {
        let i = crate::name::Name::new(biz).index();
        if self.by_name.len() <= db {
            self.by_name.resize_with(db + 1, Vec::new);
        }
        let rows = &mut self.by_name[db];
        if rows.len() <= i {
            // To every name held at once (a full read's first checks fill nearly every
            // one): no doubling past it.
            let names = crate::name::Name::count().max(i + 1);
            rows.reserve_exact(names.saturating_sub(rows.len()));
            rows.resize(i + 1, None);
        }
        rows[i] = Some(row);
    }
}

/// What this process accepted of one biz row's class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SeenRow {
    class: Residue,
    /// The row's layout epoch when its class was accepted.
    epoch: i64,
    /// The highest `max_id` seen in that class.
    top: i64,
    /// The highest `max_id` seen in earlier classes.
    earlier: i64,
}

impl SeenRow {
    fn first(class: Residue, row: &BizRow) -> SeenRow {
        SeenRow {
            class,
            epoch: row.epoch,
            top: row.max_id,
            earlier: i64::MIN,
        }
    }
}

impl Store {
    /// Re-reads bizs and tokens, unless a refresh started at or after `since` (then
    /// its result is returned). Concurrent callers share one refresh, and refreshes
    /// start at least [`Protocol::min_refresh_gap`](crate::config::Protocol::min_refresh_gap)
    /// apart, so a flood of misses (unknown tokens) costs the databases a bounded
    /// number of reads.
    ///
    /// A database is read through its change feed ([`SegmentStore::catalog`](crate::SegmentStore::catalog)): only
    /// the rows written since the last read, so that a refresh at rest costs the same
    /// whatever the number of bizs. It is read in full when never read before, every
    /// [`Protocol::full_refresh`](crate::config::Protocol::full_refresh), while fenced
    /// (only a full read shows every row caught up), and whenever its feed cannot
    /// resume (it restarted, or went back). The catalog is built again only when a
    /// read changed what it holds.
    pub async fn refresh_since(&self, since: Instant) -> Arc<Catalog> {
        self.refresh_with(since, true).await
    }

    /// The first refresh of a server, before it serves: as [`Store::refresh_since`],
    /// but the witnesses the databases lack are left to the next refresh. A server
    /// over a million bizs serves that much sooner; the witnesses it would write are
    /// the marks of rows it has not reserved from yet.
    pub async fn first_refresh(&self) -> Arc<Catalog> {
        self.refresh_with(self.dbs.clock.now(), false).await
    }

    async fn refresh_with(&self, since: Instant, witnesses: bool) -> Arc<Catalog> {
        match self.refresh_in_turn(since, witnesses).await {
            Some(catalog) => catalog,
            // The runtime is shutting down.
            None => self.catalog(),
        }
    }

    async fn refresh_in_turn(&self, since: Instant, witnesses: bool) -> Option<Arc<Catalog>> {
        let mut turn = self.view.refreshed.clone().lock_owned().await;
        if let Some(last) = *turn {
            if last >= since {
                return Some(self.catalog());
            }
            tokio::time::sleep_until((last + self.dbs.protocol.min_refresh_gap).into()).await;
        }
        let now = self.dbs.clock.now();
        *turn = Some(now);
        let (live, resume) = self.feed_positions(now);
        // Rows are checked against what was known before they were read: a mark learnt
        // meanwhile (a reservation elsewhere) may be newer than a row read earlier.
        self.view.evidence.lock().begin_read();
        let read = self.read_catalogs(live, &resume).await;
        self.check_rows(&read).await;
        for (i, rows) in &read {
            self.dbs.list[*i].metrics.catalog_read(
                rows.full,
                rows.bizs.len() + rows.shapes.len() + rows.tokens.len() + rows.witnesses.len(),
            );
        }
        let layouts: Vec<_> = read.iter().map(|(i, r)| (*i, r.layouts.clone())).collect();
        let layout_was = (self.dbs.layout_epochs().0, self.dbs.layout_classes());
        self.dbs.apply_layouts(&layouts);
        self.dbs.share_layouts(&layouts).await;
        let view = self.view.clone();
        let (turn, read) = off_thread(turn, move || view.apply(read, now)).await?;
        // A change cut off midway: its bizs are finished from here (it reads and writes
        // the rows again, so the catalog below sees where they got).
        if self.dbs.layout_epochs().1.is_some() {
            self.heal_cut_off(&read).await;
        }
        let floor = self.dbs.layout_epochs().0;
        let classes = self.dbs.layout_classes();
        if (floor, &classes) != (layout_was.0, &layout_was.1) {
            self.view.unbuilt.lock().full = true;
        }
        let (view, names) = (self.view.clone(), self.dbs.names.clone());
        let (turn, catalog) = off_thread(turn, move || view.build(&names, floor, &classes)).await?;
        if catalog.is_read() {
            self.view.early.forget();
        }
        self.write_uses();
        if witnesses {
            drop(self.write_lacking(turn, read).await?);
        }
        Some(catalog)
    }

    /// The databases a refresh reads at `now`: every reachable one, and where the
    /// change feed of each resumes (`None`: it is read in full, being never read, not
    /// read in full within [`Protocol::full_refresh`](crate::config::Protocol::full_refresh),
    /// fenced, or without a position to resume from).
    fn feed_positions(&self, now: Instant) -> (Vec<usize>, Vec<Option<FeedPosition>>) {
        // Fenced databases are read too: their rows tell when the fence can be lifted.
        let live: Vec<usize> = (0..self.dbs.list.len())
            .filter(|&i| self.dbs.is_reachable(i))
            .collect();
        let fenced: Vec<bool> = live
            .iter()
            .map(|&i| self.dbs.list[i].health.lock().fenced.is_some())
            .collect();
        let resume: Vec<Option<FeedPosition>> = {
            let snapshots = self.view.snapshots.lock();
            live.iter()
                .zip(fenced)
                .map(|(&i, fenced)| {
                    let snap = snapshots[i].as_ref()?;
                    let recent = snap.full_at.is_some_and(|t| {
                        now.saturating_duration_since(t) < self.dbs.protocol.full_refresh
                    });
                    snap.position.clone().filter(|_| recent && !fenced)
                })
                .collect()
        };
        (live, resume)
    }

    /// Reads the rows of each database of `live` at once, each beside its clock: from
    /// where its feed resumes (`resume`, by database of `live`), or in full. A failed
    /// read is logged and kept as the database's last error, and the database keeps its
    /// last rows; after a failed read of its feed, it is next read in full. Returns the
    /// rows read, by database.
    async fn read_catalogs(
        &self,
        live: Vec<usize>,
        resume: &[Option<FeedPosition>],
    ) -> Vec<(usize, CatalogRows)> {
        // A slow catalog read does not back a database off: only reservations and
        // pings judge its health, so that a read starved under load cannot take a
        // healthy database out of the reservations. A read of the feed is bounded by
        // the fetch timeout; a full read (a million bizs: seconds) by the step bound.
        let full_bound = self
            .dbs
            .protocol
            .step_timeout
            .max(self.dbs.timing.fetch_timeout);
        let reads = join_all(live.iter().zip(resume).map(|(&i, since)| {
            let bound = match since {
                Some(_) => self.dbs.timing.fetch_timeout,
                None => full_bound,
            };
            // The database's clock is read beside its rows (see `Cluster::may_begin`).
            async move {
                let catalog = self.dbs.timed_within(bound, async move {
                    self.dbs.list[i].store.catalog(since.as_ref()).await
                });
                tokio::join!(self.dbs.read_clock(i), catalog).1
            }
        }))
        .await;
        for ((&i, read), since) in live.iter().zip(&reads).zip(resume) {
            if let Err(e) = read {
                tracing::warn!(database = %self.dbs.list[i].name, error = %e, "catalog read failed; keeping the last one");
                self.dbs.list[i].health.lock().last_error = Some(e.to_string());
                // A read of the feed the database turned into a full one (it restarted)
                // is given the full read's bound next time.
                if since.is_some()
                    && let Some(snap) = &mut self.view.snapshots.lock()[i]
                {
                    snap.position = None;
                }
            }
        }
        live.into_iter()
            .zip(reads)
            .filter_map(|(i, r)| Some((i, r.ok()?)))
            .collect()
    }

    /// Finishes the bizs of a change cut off midway ([`Cluster::heal`]) from the last rows
    /// of the databases just `read`. When it moved any, their bizs are read again
    /// (those that answer) and the next catalog is built in full.
    async fn heal_cut_off(&self, read: &[(usize, bool)]) {
        let whole: Vec<(usize, Snapshot)> = {
            let snapshots = self.view.snapshots.lock();
            read.iter()
                .filter_map(|&(i, _)| Some((i, snapshots[i].clone()?)))
                .collect()
        };
        if self.dbs.heal(&whole).await {
            for &(i, _) in read {
                if let Ok(bizs) = self.dbs.timed(self.dbs.list[i].store.bizs()).await
                    && let Some(snap) = &mut self.view.snapshots.lock()[i]
                {
                    snap.bizs = bizs.into_iter().map(ByName).collect();
                }
            }
            self.view.unbuilt.lock().full = true;
        }
    }

    /// Writes into each database of `read` (with whether a witness it held went missing
    /// or back) the marks it lacks, by the witnesses it held at its last read, holding
    /// the refresh's `turn` throughout. `None` when the runtime is shutting down.
    async fn write_lacking(&self, turn: Turn, read: Vec<(usize, bool)>) -> Option<Turn> {
        let (view, names) = (self.view.clone(), self.dbs.names.clone());
        let (turn, lacking) =
            off_thread(turn, move || view.lacking_witnesses(&names, &read)).await?;
        self.write_witnesses(&lacking).await;
        Some(turn)
    }

    /// Records in the other databases the evidence of every fence this process alone
    /// knows of: the marks a fenced database's rows lie behind may have missed their
    /// witnesses (the other databases slow or backed off), and a server started after
    /// this one stops knows only what the databases hold. Copies what each reachable
    /// database lacks ([`Store::copy_witnesses`]); a fence stays unrecorded, for the
    /// next call, until another database holds every mark of the fenced one.
    pub(super) async fn record_fences(&self) {
        let unrecorded: Vec<usize> = (0..self.dbs.list.len())
            .filter(|&i| {
                let health = self.dbs.list[i].health.lock();
                health.fenced.is_some() && health.unrecorded
            })
            .collect();
        if unrecorded.is_empty() {
            return;
        }
        for i in self.copy_witnesses(&unrecorded).await {
            self.dbs.list[i].health.lock().unrecorded = false;
        }
    }

    /// Copies into every reachable database the marks it lacks, as a refresh does after
    /// its reads, without reading again (a database's witnesses only grow, so what it
    /// held at its last read it holds still). Returns those of the databases `of` whose
    /// every mark known here another database now holds. Waits for a refresh under way.
    pub(super) async fn copy_witnesses(&self, of: &[usize]) -> Vec<usize> {
        let turn = self.view.refreshed.clone().lock_owned().await;
        let reachable = (0..self.dbs.list.len())
            .filter(|&k| self.dbs.is_reachable(k))
            .map(|k| (k, false))
            .collect();
        let Some(turn) = self.write_lacking(turn, reachable).await else {
            return Vec::new();
        };
        // Judged with the turn still held: no other look is under way.
        let witnessed = {
            let evidence = self.view.evidence.lock();
            let others = 0..self.dbs.list.len();
            of.iter()
                .copied()
                .filter(|&i| others.clone().any(|k| evidence.witnessed_by(i, k)))
                .collect()
        };
        drop(turn);
        witnessed
    }

    /// Checks every row just `read` against the evidence known before the reads
    /// began: a database with a row behind it is fenced, a fenced one whose rows all
    /// caught up (a full read) is used again. Then learns the rows and the witnesses
    /// read, and ends the read.
    async fn check_rows(&self, read: &[(usize, CatalogRows)]) {
        // Every row is checked before any is learnt. A read's rows are all of one
        // database and each biz once, so learning them cannot change how another of
        // them is judged; learnt after the read ends, they are not journalled. The
        // marks are held a chunk at a time (a reservation takes them too): until the
        // read ends, a mark learnt between two chunks is journalled, and the rows are
        // still judged by the marks from before the read. The task yields after each
        // chunk, so that a full read (a million rows: a second) never holds the
        // runtime's thread, and the connections it drives, for longer than a chunk.
        let mut ok: Vec<Vec<bool>> = Vec::with_capacity(read.len());
        for (i, rows) in read {
            let mut behind = None;
            let mut fine = Vec::with_capacity(rows.bizs.len());
            for chunk in rows.bizs.chunks(CHECKS_PER_HOLD) {
                {
                    let evidence = self.view.evidence.lock();
                    for row in chunk {
                        fine.push(match evidence.check_read(*i, row) {
                            Ok(()) => true,
                            Err(regression) => {
                                behind = behind.take().or(Some(regression));
                                false
                            }
                        });
                    }
                }
                tokio::task::yield_now().await;
            }
            ok.push(fine);
            let fencing = self.view.evidence.lock();
            match behind {
                Some(regression) => self.dbs.fence(*i, &regression),
                None if rows.full => self.dbs.unfence(*i),
                None => {}
            }
            drop(fencing);
        }
        self.view.evidence.lock().end_read();
        for ((i, rows), ok) in read.iter().zip(ok) {
            self.view
                .evidence
                .lock()
                .reserve(*i, if rows.full { rows.bizs.len() } else { 0 });
            for (chunk, ok) in rows
                .bizs
                .chunks(CHECKS_PER_HOLD)
                .zip(ok.chunks(CHECKS_PER_HOLD))
            {
                {
                    let mut evidence = self.view.evidence.lock();
                    for (row, _) in chunk.iter().zip(ok).filter(|(_, ok)| **ok) {
                        evidence.learn(*i, row.biz_type, Mark::of(row));
                    }
                }
                tokio::task::yield_now().await;
            }
            if rows.full {
                // The witnesses learnt before may have grown the marks by doubling.
                self.view.evidence.lock().shrink(*i);
            }
        }
        for (_, rows) in read {
            for chunk in rows.witnesses.chunks(CHECKS_PER_HOLD) {
                learn_witnesses(&self.dbs.names, &mut self.view.evidence.lock(), chunk);
                tokio::task::yield_now().await;
            }
        }
    }

    /// Writes into each database its witnesses `lacking` (from
    /// [`CatalogView::lacking_witnesses`]), each write bounded by the fetch timeout. A
    /// failure is only logged: the database's witnesses are looked at in full at the
    /// next refresh.
    async fn write_witnesses(&self, lacking: &[(usize, Vec<Witness>)]) {
        let writes = lacking.iter().map(|(k, rows)| async move {
            for rows in rows.chunks(WITNESSES_PER_WRITE) {
                if let Err(e) = self.dbs.timed(self.dbs.list[*k].store.witness(rows)).await {
                    tracing::warn!(database = %self.dbs.list[*k].name, error = %e, "could not record witnesses");
                    self.view.evidence.lock().unsettle(*k);
                    return;
                }
            }
        });
        join_all(writes).await;
    }
}

/// Learns the marks that `witnesses` record of the databases named `names` (a witness
/// of a database not configured here is passed over).
pub(super) fn learn_witnesses(names: &[String], evidence: &mut Evidence, witnesses: &[Witness]) {
    for w in witnesses {
        if let Some(db) = names.iter().position(|n| *n == w.database) {
            evidence.learn(db, &w.biz, w.mark);
        }
    }
}

/// Checks each row whose class changed since this process last accepted it.
///
/// - Changed by a layout change (a later layout epoch, which the stored layouts
///   name with a class holding the row's): the change fenced it above every ID of
///   the earlier layout; it is checked against the rows still in earlier epochs.
/// - Changed by hand (same epoch): it is used only when its `max_id` is at or above
///   every ID known issued of the biz: every row's `max_id`, and every mark seen or
///   witnessed. Else the biz is refused, naming both rows, until the row is raised.
///
/// `names` are the databases' names; `layouts` are [`Cluster::layout_classes`]; `seen` what was accepted before, by
/// database (`view.classes_seen`, or a scratch one for a look at one biz).
pub(super) fn check_classes(
    names: &[String],
    evidence: &Evidence,
    snapshots: &[Option<Snapshot>],
    touched: &[String],
    (floor, layouts): (i64, &[(i64, String, Residue)]),
    seen: &mut impl Seen,
) -> Vec<(String, StoreError)> {
    let mut refusals = Vec::new();
    for biz in touched.iter().map(String::as_str) {
        let Some(entry) = BizEntry::of(biz, names, snapshots, floor) else {
            continue;
        };
        for (i, snap) in snapshots.iter().enumerate() {
            let Some(row) = snap.as_ref().and_then(|s| s.bizs.get(biz)).map(|r| &r.0) else {
                continue;
            };
            // Only the rows the catalog would reserve from.
            let Some(class) = entry
                .classes
                .iter()
                .find(|(db, _)| *db == i)
                .map(|(_, c)| *c)
            else {
                continue;
            };
            // Once a change has stored layouts, every row's class must be its
            // database's class in the row's epoch (narrowed to the biz's restriction),
            // whoever looks: a server started after an edit by hand refuses it too.
            // Rows of epoch 0 keep their own classes, as Tinyid's rows do (any class,
            // checked against each other's): the membership `segmint migrate` records
            // names the databases, not the bizs' classes.
            let stored = row.epoch > 0 && layouts.iter().any(|(epoch, ..)| *epoch == row.epoch);
            if stored && let Some(why) = off_layout(names, biz, (i, row, class), layouts) {
                refusals.push((biz.to_owned(), why));
                continue;
            }
            let looked = (names, evidence, snapshots);
            if let Some(why) = accept_class(looked, biz, (i, row, class), stored, seen) {
                refusals.push((biz.to_owned(), why));
            }
        }
    }
    refusals
}

/// The refusal of the row of `biz` on database `i` (of class `class`) when its class
/// is not the one the stored layout of its epoch (among `layouts`) gives its database,
/// narrowed to the biz's restriction; `None` when it is.
fn off_layout(
    names: &[String],
    biz: &str,
    (i, row, class): (usize, &BizRow, Residue),
    layouts: &[(i64, String, Residue)],
) -> Option<StoreError> {
    let db = layouts
        .iter()
        .find(|(epoch, name, _)| *epoch == row.epoch && *name == names[i])
        .map(|(.., c)| *c);
    if db.is_none_or(|db| crate::layout::restriction(class, db).is_none()) {
        return Some(StoreError::InvalidRow {
            biz: biz.to_owned(),
            database: names[i].clone(),
            reason: format!(
                "its class {class} is not the class layout epoch {} gives database \"{}\" ({}): changed by hand? Move databases with `segmint db add` / `db remove`",
                row.epoch,
                names[i],
                db.map_or_else(|| "none: not in that layout".into(), |c| c.to_string())
            ),
        });
    }
    None
}

/// The highest ID that the mark of `biz` on database `k` says was issued, if a mark is
/// known.
fn marked(evidence: &Evidence, k: usize, biz: &str) -> Option<i64> {
    evidence.mark(k, biz).map(|m| m.high_id.max(m.max_id))
}

/// Accepts the class of the row of `biz` on database `i` (of class `class`; `stored`:
/// a stored layout names its epoch) into `seen`: a row seen first or in the class
/// accepted before, or a row whose class changed above every ID issued before.
/// Returns the refusal of a row whose class changed without a fence, which names the
/// row it is not above. `looked` are the databases' names, the evidence and the last
/// rows read.
fn accept_class(
    looked: (&[String], &Evidence, &[Option<Snapshot>]),
    biz: &str,
    (i, row, class): (usize, &BizRow, Residue),
    stored: bool,
    seen: &mut impl Seen,
) -> Option<StoreError> {
    let (names, evidence, _) = looked;
    let Some(was) = seen.get(i, biz) else {
        seen.put(i, biz, SeenRow::first(class, row));
        return None;
    };
    if was.class == class {
        seen.put(
            i,
            biz,
            SeenRow {
                epoch: was.epoch.max(row.epoch),
                top: was
                    .top
                    .max(row.max_id)
                    .max(marked(evidence, i, biz).unwrap_or(i64::MIN)),
                ..was
            },
        );
        return None;
    }
    // A stored layout names the row's epoch with a class holding the row's
    // (checked before): the layout change moved it.
    let by_layout = row.epoch > was.epoch && stored;
    match highest_issued(looked, biz, (i, row), by_layout, seen) {
        Some((k, top)) if row.max_id < top || row.epoch < was.epoch => {
            Some(StoreError::InvalidRow {
                biz: biz.to_owned(),
                database: names[i].clone(),
                reason: format!(
                    "its class changed from {} to {class} (layout epoch {} to {}) without a fence: its max_id {} is not above max_id {top} of the row on database \"{}\", so it could issue IDs issued before; raise it with `segmint db fence {} --above {top}`, or move databases with `segmint db add` / `db remove`",
                    was.class, was.epoch, row.epoch, row.max_id, names[k], names[i]
                ),
            })
        }
        _ => {
            tracing::info!(%biz, database = %names[i], from = %was.class, to = %class, max_id = row.max_id, by_layout, "row class changed above every ID issued before; using it");
            seen.put(
                i,
                biz,
                SeenRow {
                    earlier: was.top.max(was.earlier),
                    ..SeenRow::first(class, row)
                },
            );
            None
        }
    }
}

/// The highest ID known issued of `biz` that the row on database `i`, whose class
/// changed, must be above, and the database it was issued from: when the change was
/// a layout change's (`by_layout`), the highest `max_id` this row was accepted at (in
/// any class) and the `max_id` of every other row still in an earlier epoch (rows moved
/// by the same change issue from disjoint classes); else the highest of every other
/// row's `max_id`, every row's accepted one, and every mark. `looked` as for
/// [`accept_class`].
fn highest_issued(
    (names, evidence, snapshots): (&[String], &Evidence, &[Option<Snapshot>]),
    biz: &str,
    (i, row): (usize, &BizRow),
    by_layout: bool,
    seen: &impl Seen,
) -> Option<(usize, i64)> {
    let tops = (0..names.len()).filter_map(|k| {
        let other = snapshots[k]
            .as_ref()
            .and_then(|s| s.bizs.get(biz))
            .map(|r| &r.0);
        let s = seen.get(k, biz);
        let top = if by_layout {
            // Rows moved by the same change issue from disjoint classes.
            match (k == i, other) {
                (true, _) => s.map(|s| s.top.max(s.earlier)),
                (false, Some(o)) if o.epoch < row.epoch => Some(o.max_id),
                _ => None,
            }
        } else {
            let other = other.filter(|_| k != i).map(|o| o.max_id);
            let s = s.map(|s| s.top.max(s.earlier));
            other.max(s).max(marked(evidence, k, biz))
        };
        top.map(|top| (k, top))
    });
    tops.max_by_key(|&(_, top)| top)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::mpsc::{Receiver, RecvTimeoutError};
    use std::time::Duration;

    use crate::biz::BizTag;
    use crate::store::{Catalog, Store};

    /// An embedded store in `dir` with biz `order`, never refreshed.
    fn store_with_a_biz(dir: &std::path::Path) -> Arc<Store> {
        let toml = format!(
            "[[databases]]\nname = \"db0\"\nurl = \"sqlite://{}\"\ndelta = 1\nremainder = 0\n",
            dir.join("db0.db").display()
        );
        let config = crate::config::Config::from_toml(&toml).unwrap();
        let store = Arc::new(Store::connect(&config).unwrap());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            for (_, migrated) in store.cluster().migrate().await.results() {
                migrated.unwrap();
            }
            let biz = BizTag::parse("order").unwrap();
            store.cluster().add_biz(&biz, 100, 1, None).await.unwrap();
        });
        store
    }

    /// Runs `store`'s first refresh on a current-thread runtime of a thread of its own,
    /// beside a task of that runtime that sends a tick every 5 ms.
    fn refresh_beside_ticks(
        store: Arc<Store>,
    ) -> (Receiver<()>, std::thread::JoinHandle<Arc<Catalog>>) {
        let (tick, ticks) = std::sync::mpsc::channel();
        let refreshing = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let ticking = async {
                    loop {
                        let _ = tick.send(());
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                };
                tokio::select! {
                    catalog = store.first_refresh() => catalog,
                    () = ticking => unreachable!(),
                }
            })
        });
        (ticks, refreshing)
    }

    /// Waits until the refresh holds `view.snapshots` for good (it waits on a lock the
    /// test holds), then checks that the runtime's thread still ticks.
    fn ticks_while_the_refresh_waits(store: &Store, ticks: &Receiver<()>) {
        let mut held_for = 0;
        for _ in 0..2_000 {
            held_for = if store.view.snapshots.is_locked() {
                held_for + 1
            } else {
                0
            };
            if held_for == 20 {
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(held_for, 20, "the refresh never got to the step held");
        while ticks.try_recv().is_ok() {}
        for _ in 0..10 {
            match ticks.recv_timeout(Duration::from_secs(10)) {
                Ok(()) => {}
                Err(RecvTimeoutError::Timeout) => {
                    panic!(
                        "the runtime's thread stopped while the refresh waited: the step runs on it"
                    )
                }
                Err(RecvTimeoutError::Disconnected) => panic!("the runtime ended"),
            }
        }
    }

    /// A full read's rows are taken in off the runtime's thread: while that step waits
    /// (here on a lock the test holds; at a million bizs, on seconds of CPU), the
    /// runtime still runs its other tasks, the connections it drives among them.
    #[test]
    fn a_full_read_is_taken_in_off_the_runtime_thread() {
        let dir = tempfile::tempdir().unwrap();
        let store = store_with_a_biz(dir.path());
        let unbuilt = store.view.unbuilt.lock();
        let (ticks, refreshing) = refresh_beside_ticks(store.clone());
        ticks_while_the_refresh_waits(&store, &ticks);
        drop(unbuilt);
        let catalog = refreshing.join().unwrap();
        assert!(catalog.biz("order").is_some());
    }

    /// As for taking the rows in, so for checking and building the catalog.
    #[test]
    fn a_catalog_is_checked_and_built_off_the_runtime_thread() {
        let dir = tempfile::tempdir().unwrap();
        let store = store_with_a_biz(dir.path());
        let refused = store.view.refused.lock();
        let (ticks, refreshing) = refresh_beside_ticks(store.clone());
        ticks_while_the_refresh_waits(&store, &ticks);
        drop(refused);
        let catalog = refreshing.join().unwrap();
        assert!(catalog.biz("order").is_some());
    }

    /// A class accepted is found by its biz and database, and replaced when accepted
    /// again; rows of other bizs and databases are apart.
    #[test]
    fn a_class_accepted_is_found_by_biz_and_database() {
        use super::{ClassesSeen, Seen, SeenRow};
        use crate::segment::Residue;

        let seen_row = |top| SeenRow {
            class: Residue::new(2, 1).unwrap(),
            epoch: 0,
            top,
            earlier: i64::MIN,
        };
        let mut classes = ClassesSeen::default();
        assert_eq!(classes.get(0, "seen-test-never-held"), None);
        classes.put(1, "seen-test-order", seen_row(10));
        assert_eq!(classes.get(1, "seen-test-order"), Some(seen_row(10)));
        assert_eq!(classes.get(0, "seen-test-order"), None);
        assert_eq!(classes.get(3, "seen-test-order"), None);
        classes.put(1, "seen-test-invoice", seen_row(30));
        classes.put(1, "seen-test-order", seen_row(20));
        assert_eq!(classes.get(1, "seen-test-order"), Some(seen_row(20)));
        assert_eq!(classes.get(1, "seen-test-invoice"), Some(seen_row(30)));
    }
}
