//! Reservations over N independent databases.

pub(super) mod tokens;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use futures_util::future::join_all;
use parking_lot::Mutex;
use rand::Rng;
use rand::seq::SliceRandom;

use super::catalog::{Snapshot, conflict};
use super::evidence::{self, Evidence, Mark, Regression, Witness};
use super::postgres::PgStore;
use super::sqlite::{OpenMode, SqliteStore};
use super::{BizRow, Catalog, DbError, SegmentStore, StoreError};
use crate::biz::{BizTag, TokenDigest};
use crate::config::{Config, DatabaseKind};
use crate::metrics::{DatabaseMetrics, FetchOutcome, Metrics};
use crate::segment::{Residue, SegmentRange};
use crate::step::{StepHint, StepPolicy, StepReason};

/// Compare-and-set attempts on one database before trying another.
const CAS_ATTEMPTS: usize = 3;

/// Shortest hedge delay a short runway can bring about.
const MIN_HEDGE: Duration = Duration::from_millis(5);

/// `segmint db fence` raises a row's version to the next multiple of this: far above
/// every version reached by reservations since the last fence (one per reservation),
/// with room for millions of fences.
const FENCE_EPOCH: i64 = 1 << 40;

/// Shortest time between the starts of two catalog refreshes.
pub const MIN_REFRESH_GAP: Duration = Duration::from_millis(100);

/// A segment reserved for a caller, and where it came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reservation {
    pub range: SegmentRange,
    /// Index of the database in the configuration.
    pub database: usize,
    /// Why the segment has its step.
    pub reason: StepReason,
    /// The row's version after the reservation: still this version later means
    /// nobody reserved from the row since.
    pub version: i64,
}

/// How a database looks from here, for `/readyz` and status pages.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DatabaseStatus {
    pub name: String,
    pub location: String,
    pub residue: String,
    /// False while the database is backed off after a failure or fenced.
    pub up: bool,
    pub last_error: Option<String>,
    /// Why the database is fenced (it went back in time), while it is.
    pub fenced: Option<String>,
}

/// Timeouts and back-off, from the configuration.
#[derive(Debug, Clone, Copy)]
pub struct Timing {
    /// Bound on one database operation; past it the database counts as failed.
    pub fetch_timeout: Duration,
    /// First back-off after a failure; doubles per consecutive failure.
    pub backoff_initial: Duration,
    /// Cap on the back-off.
    pub backoff_max: Duration,
    /// Least time a database round trip may go unanswered before the reservation is
    /// tried on another database alongside it; `None` turns hedging off.
    pub hedge_after: Option<Duration>,
}

/// When the current database round trip of an attempt started, if one is under way.
#[derive(Default)]
struct RoundTrip {
    /// Microseconds since `epoch` at the start of the round trip; 0 when idle.
    since: std::sync::atomic::AtomicU64,
    epoch: std::sync::OnceLock<Instant>,
}

impl RoundTrip {
    fn now_us(&self) -> u64 {
        let epoch = *self.epoch.get_or_init(Instant::now);
        u64::try_from(epoch.elapsed().as_micros())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    /// Runs one round trip, marked as under way meanwhile.
    async fn around<T>(&self, op: impl Future<Output = T>) -> T {
        self.since
            .store(self.now_us(), std::sync::atomic::Ordering::Relaxed);
        let out = op.await;
        self.since.store(0, std::sync::atomic::Ordering::Relaxed);
        out
    }

    /// How long the round trip under way has gone unanswered; zero when none is.
    fn stuck_for(&self) -> Duration {
        match self.since.load(std::sync::atomic::Ordering::Relaxed) {
            0 => Duration::ZERO,
            since => Duration::from_micros(self.now_us().saturating_sub(since)),
        }
    }
}

struct Database {
    /// Configured name, used in every message about it.
    name: String,
    /// `host:port/db`, without credentials.
    location: String,
    /// The residue class plain bizs get here.
    residue: Residue,
    /// Shared with background writes (last uses) that outlive a borrow of the store.
    store: Arc<dyn SegmentStore>,
    metrics: DatabaseMetrics,
    /// Plain mutex: held only to read or update a few fields, never across an await.
    health: Mutex<Health>,
    /// One lock per biz: reservations of one biz on this database from this process
    /// queue instead of racing each other's compare-and-set, so lost races only come
    /// from other processes.
    reserving: Mutex<HashMap<BizTag, Arc<tokio::sync::Mutex<()>>>>,
}

#[derive(Default)]
struct Health {
    /// Consecutive failures; sets the back-off length.
    failures: u32,
    /// The database is skipped until then.
    down_until: Option<Instant>,
    last_error: Option<String>,
    /// Set while a row of the database is behind the evidence: it is not used until
    /// its rows are at or above every mark again (`segmint db fence` raises them).
    fenced: Option<String>,
}

/// What one database answered to a reservation attempt.
enum Attempt {
    Reserved(Reservation),
    Missing,
    /// Every compare-and-set lost: other writers are busy on this row.
    Contended,
    /// The biz cannot be served from this row; trying elsewhere will not help.
    Refused(StoreError),
}

/// All configured databases, with the merged catalog of bizs and tokens.
pub struct Store {
    dbs: Vec<Database>,
    /// Database names by index, for catalog messages.
    names: Vec<String>,
    timing: Timing,
    /// How the step of segments reserved with a [`StepHint`] is chosen.
    policy: StepPolicy,
    metrics: Arc<Metrics>,
    /// Moving average of successful reservation times, in microseconds.
    usual_fetch_us: std::sync::atomic::AtomicU64,
    /// Read on every request, replaced on refresh.
    catalog: ArcSwap<Catalog>,
    /// Last rows read from each database; kept while a database is down so that its
    /// rows still take part in the residue checks.
    snapshots: Mutex<Vec<Option<Snapshot>>>,
    /// Single flight for refreshes; holds when the last one started.
    refreshed: tokio::sync::Mutex<Option<Instant>>,
    /// How far every row has advanced, as seen here and witnessed elsewhere. Plain
    /// mutex: held for map updates only, never across an await.
    evidence: Mutex<Evidence>,
    /// Token uses noted since they were last written, by token. Plain mutex: held for
    /// one map update, which each HTTP worker makes about once a minute per token.
    uses: Mutex<HashMap<TokenDigest, i64>>,
    /// Set while last uses are being written, so that writes never pile up behind a
    /// slow database.
    writing_uses: Arc<AtomicBool>,
}

impl Store {
    /// Every configured database: PostgreSQL pools (connecting lazily) and embedded
    /// files (opened and migrated now, created if missing: an explicit initialisation).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when a pool cannot be built or a file not opened.
    pub fn connect(config: &Config) -> Result<Store, StoreError> {
        Store::open(config, OpenMode::Create)
    }

    /// As [`Store::connect`], creating missing embedded files only as `mode` allows.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when a pool cannot be built or a file not opened,
    /// or is missing and may not be created.
    pub fn open(config: &Config, mode: OpenMode) -> Result<Store, StoreError> {
        let mut dbs = Vec::with_capacity(config.databases.len());
        for db in &config.databases {
            let store = match &db.kind {
                DatabaseKind::Postgres(pg) => {
                    PgStore::new(pg, config.pool_size, config.fetch_timeout)
                        .map(|s| Box::new(s) as Box<dyn SegmentStore>)
                }
                DatabaseKind::Sqlite(path) => SqliteStore::open(path, config.fetch_timeout, mode)
                    .map(|s| Box::new(s) as Box<dyn SegmentStore>),
            }
            .map_err(|e| StoreError::Unavailable(format!("database \"{}\": {e}", db.name)))?;
            dbs.push((db.name.clone(), db.location(), db.residue, store));
        }
        Ok(Store::new(
            dbs,
            Timing {
                fetch_timeout: config.fetch_timeout,
                backoff_initial: config.backoff_initial,
                backoff_max: config.backoff_max,
                hedge_after: (!config.hedge_after.is_zero()).then_some(config.hedge_after),
            },
            config.step,
            Arc::new(Metrics::new(config.metrics_max_bizs)),
        ))
    }

    /// A store over `dbs`: `(name, location, residue class, database)`.
    pub fn new(
        dbs: Vec<(String, String, Residue, Box<dyn SegmentStore>)>,
        timing: Timing,
        policy: StepPolicy,
        metrics: Arc<Metrics>,
    ) -> Store {
        let names: Vec<String> = dbs.iter().map(|d| d.0.clone()).collect();
        Store {
            snapshots: Mutex::new(vec![None; dbs.len()]),
            dbs: dbs
                .into_iter()
                .map(|(name, location, residue, store)| Database {
                    location,
                    residue,
                    metrics: metrics.database(&name),
                    name,
                    store: Arc::from(store),
                    health: Mutex::new(Health::default()),
                    reserving: Mutex::new(HashMap::new()),
                })
                .collect(),
            names,
            timing,
            policy,
            metrics,
            usual_fetch_us: std::sync::atomic::AtomicU64::new(0),
            catalog: ArcSwap::from_pointee(Catalog::default()),
            refreshed: tokio::sync::Mutex::new(None),
            evidence: Mutex::new(Evidence::default()),
            uses: Mutex::new(HashMap::new()),
            writing_uses: Arc::new(AtomicBool::new(false)),
        }
    }

    /// The metrics of this store's databases, shared with the server.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// How segments reserved with a [`StepHint`] are sized.
    pub fn step_policy(&self) -> StepPolicy {
        self.policy
    }

    pub fn database_names(&self) -> &[String] {
        &self.names
    }

    /// The bizs and tokens as last read.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.catalog.load_full()
    }

    /// Runs `f` on the bizs and tokens as last read. Unlike [`Store::catalog`], this
    /// writes to nothing the other HTTP workers read (no lock, no reference count),
    /// which is what every ID request needs.
    pub fn with_catalog<R>(&self, f: impl FnOnce(&Catalog) -> R) -> R {
        f(&self.catalog.load())
    }

    /// Re-reads bizs and tokens, unless a refresh started at or after `since` (then
    /// its result is returned). Concurrent callers share one refresh, and refreshes
    /// start at least [`MIN_REFRESH_GAP`] apart, so a flood of misses (unknown tokens)
    /// costs the databases a bounded number of reads.
    pub async fn refresh_since(&self, since: Instant) -> Arc<Catalog> {
        let mut last_start = self.refreshed.lock().await;
        if let Some(last) = *last_start {
            if last >= since {
                return self.catalog();
            }
            tokio::time::sleep_until((last + MIN_REFRESH_GAP).into()).await;
        }
        *last_start = Some(Instant::now());
        // Fenced databases are read too: their rows tell when the fence can be lifted.
        let live: Vec<usize> = (0..self.dbs.len())
            .filter(|&i| self.is_reachable(i))
            .collect();
        // Rows are checked against what was known before they were read: a mark learnt
        // meanwhile (a reservation elsewhere) may be newer than a row read earlier.
        let before = self.evidence.lock().clone();
        // A slow catalog read does not back a database off: only reservations and
        // pings judge its health, so that a read starved under load cannot take a
        // healthy database out of the reservations.
        let reads = join_all(live.iter().map(|&i| {
            self.timed(async move {
                let db = &self.dbs[i];
                Ok(Snapshot {
                    bizs: db.store.bizs().await?,
                    tokens: db.store.tokens().await?,
                    witnesses: db.store.witnesses().await?,
                })
            })
        }))
        .await;
        for (&i, read) in live.iter().zip(&reads) {
            if let Err(e) = read {
                tracing::warn!(database = %self.dbs[i].name, error = %e, "catalog read failed; keeping the last one");
                self.dbs[i].health.lock().last_error = Some(e.0.clone());
            }
        }
        let read: Vec<(usize, Snapshot)> = live
            .into_iter()
            .zip(reads)
            .filter_map(|(i, r)| Some((i, r.ok()?)))
            .collect();
        let lagging = self.check_rows(&before, &read);
        let catalog = {
            let mut snapshots = self.snapshots.lock();
            for (i, snap) in read {
                snapshots[i] = Some(snap);
            }
            Arc::new(Catalog::build(&self.names, &snapshots))
        };
        self.catalog.store(catalog.clone());
        self.write_uses();
        self.write_witnesses(lagging).await;
        catalog
    }

    /// Checks every row just `read` against the evidence known `before` the reads: a
    /// database with a row behind it is fenced, a fenced one whose rows all caught up
    /// is used again. Then learns the rows and the witnesses read. Returns, per
    /// database, the marks its witnesses lack (from what this process knows), to be
    /// written there.
    fn check_rows(
        &self,
        before: &Evidence,
        read: &[(usize, Snapshot)],
    ) -> Vec<(usize, Vec<Witness>)> {
        let mut evidence = self.evidence.lock();
        for (i, snap) in read {
            let mut behind = None;
            for row in &snap.bizs {
                match before.check(*i, row) {
                    Ok(()) => evidence.learn(*i, &row.biz_type, Mark::of(row)),
                    Err(regression) => behind = behind.or(Some(regression)),
                }
            }
            match behind {
                Some(regression) => self.fence(*i, &regression),
                None => self.unfence(*i),
            }
        }
        for (_, snap) in read {
            for w in &snap.witnesses {
                if let Some(db) = self.names.iter().position(|n| *n == w.database) {
                    evidence.learn(db, &w.biz, w.mark);
                }
            }
        }
        read.iter()
            .map(|(k, snap)| {
                let lacking = evidence.lacking(*k, &self.names, &snap.witnesses);
                (*k, lacking)
            })
            .filter(|(_, lacking)| !lacking.is_empty())
            .collect()
    }

    /// Writes `witnesses` to their databases, each bounded by the fetch timeout; a
    /// failure is only logged (the marks are written again at a later refresh).
    async fn write_witnesses(&self, witnesses: Vec<(usize, Vec<Witness>)>) {
        let writes = witnesses.iter().map(|(k, rows)| async move {
            if let Err(e) = self.timed(self.dbs[*k].store.witness(rows)).await {
                tracing::warn!(database = %self.dbs[*k].name, error = %e, "could not record witnesses");
            }
        });
        join_all(writes).await;
    }

    /// Fences database `i`: it went back in time, and reserving from it could reissue
    /// IDs.
    fn fence(&self, i: usize, regression: &Regression) {
        let db = &self.dbs[i];
        let reason = regression.to_string();
        let mut health = db.health.lock();
        if health.fenced.is_none() {
            tracing::error!(database = %db.name, %reason, "database went back in time; fenced until `segmint db fence` raises its rows");
        }
        health.fenced = Some(reason);
    }

    /// Lifts the fence of database `i`, if any: its rows are at or above every mark.
    fn unfence(&self, i: usize) {
        let db = &self.dbs[i];
        if db.health.lock().fenced.take().is_some() {
            tracing::warn!(database = %db.name, "database rows are above every mark again; fence lifted");
        }
    }

    /// Reserves the next segment of `biz` on a random live database, advancing its row
    /// by its own step, or with a `hint`, by the step the [`StepPolicy`] chooses.
    /// `runway`: how long the caller's cache lasts without this segment, if known; a
    /// stalled database is then hedged in time for the segment to arrive before the
    /// cache runs dry (see [`Store::hedge_delay`]).
    ///
    /// # Errors
    /// [`StoreError`]: the biz is unknown, refused (overlapping or invalid rows),
    /// would overflow, or no database could be reached.
    pub async fn reserve(
        &self,
        biz: &BizTag,
        hint: Option<StepHint>,
        runway: Option<Duration>,
    ) -> Result<Reservation, StoreError> {
        let mut catalog = self.catalog();
        if catalog.biz(biz.as_str()).is_none() {
            catalog = self.refresh_since(Instant::now()).await;
        }
        let entry = catalog
            .biz(biz.as_str())
            .ok_or_else(|| StoreError::NotFound(biz.to_string()))?;
        if let Some(refused) = &entry.refused {
            return Err(refused.clone());
        }
        // Lost races are retried in passes over the databases until the fetch timeout:
        // a busy row slows a reservation down but does not fail it.
        let deadline = Instant::now() + self.timing.fetch_timeout;
        let reserved = loop {
            let hedge = self.hedge_delay(runway);
            match self
                .reserve_pass(biz, hint, &entry.classes, deadline, hedge)
                .await
            {
                Err(StoreError::Contention(_)) if Instant::now() < deadline => {
                    let pause = rand::rng().random_range(1..=5);
                    tokio::time::sleep(Duration::from_millis(pause)).await;
                }
                result => break result?,
            }
        };
        let bound = self
            .hedge_delay(runway)
            .unwrap_or(self.timing.fetch_timeout);
        self.witness_reservation(biz, &reserved, bound).await;
        Ok(reserved)
    }

    /// Records the reservation `r` in the other reachable databases before its IDs are
    /// used, so that if its database later goes back in time, any server (also one
    /// started afterwards) finds the evidence. One witness is enough: this waits for
    /// the first database that records it, at most `bound` (a stalled database must not
    /// hold the segment back); the databases that miss it get it at a later catalog
    /// refresh.
    async fn witness_reservation(&self, biz: &BizTag, r: &Reservation, bound: Duration) {
        let max_id = r.range.max_id();
        let witness = [Witness {
            database: self.names[r.database].clone(),
            biz: biz.to_string(),
            mark: Mark {
                version: r.version,
                max_id,
                high_id: max_id,
            },
        }];
        let witness = &witness;
        let writes: Vec<_> = (0..self.dbs.len())
            .filter(|&k| k != r.database && self.is_reachable(k))
            .map(|k| Box::pin(self.dbs[k].store.witness(witness)))
            .collect();
        if writes.is_empty() {
            return;
        }
        match tokio::time::timeout(bound, futures_util::future::select_ok(writes)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::warn!(%biz, error = %e, "could not witness a reservation; retried at the next catalog refresh");
            }
            Err(_) => {
                tracing::warn!(%biz, ?bound, "no database witnessed a reservation in time; retried at the next catalog refresh");
            }
        }
    }

    /// One pass over the live databases in random order, stopping at the first that
    /// reserves a segment. Attempts run one at a time, except that when one has not
    /// answered within the hedge delay (a few times the usual reservation time) the
    /// next database is tried alongside it: a stalled database costs a request that
    /// delay, not the fetch timeout. The first reservation wins; attempts still running
    /// are dropped, and those that started before the winner count as failed (the
    /// database is backed off). A dropped attempt may still commit later: its segment
    /// is never used, so its IDs are lost, never issued twice.
    async fn reserve_pass(
        &self,
        biz: &BizTag,
        hint: Option<StepHint>,
        known: &[(usize, Residue)],
        deadline: Instant,
        hedge: Option<Duration>,
    ) -> Result<Reservation, StoreError> {
        use futures_util::StreamExt;
        let mut order: Vec<usize> = (0..self.dbs.len()).filter(|&i| self.is_live(i)).collect();
        order.shuffle(&mut rand::rng());
        let (mut refused, mut missing, mut contended, mut failed) = (None, 0, 0, Vec::new());
        // One round-trip tracker per database, declared before the attempts borrow them.
        let trips: Vec<RoundTrip> = (0..self.dbs.len()).map(|_| RoundTrip::default()).collect();
        let mut running = futures_util::stream::FuturesUnordered::new();
        let mut tried: Vec<usize> = Vec::new();
        let mut queue = order.into_iter();
        loop {
            if running.is_empty() {
                let Some(i) = queue.next() else { break };
                tried.push(i);
                running.push(self.attempt_on(i, biz, hint, known, deadline, &trips[i]));
            }
            let outcome = match hedge {
                Some(hedge) if queue.len() > 0 => {
                    tokio::select! {
                        done = running.next() => done,
                        () = tokio::time::sleep(hedge / 4) => {
                            // The newest attempt is stuck in one round trip: try the
                            // next database alongside it.
                            let newest = tried[tried.len() - 1];
                            if trips[newest].stuck_for() >= hedge
                                && let Some(i) = queue.next()
                            {
                                tracing::debug!(biz = %biz, database = %self.dbs[i].name, "hedging a stalled reservation");
                                tried.push(i);
                                running.push(self.attempt_on(i, biz, hint, known, deadline, &trips[i]));
                            }
                            continue;
                        }
                    }
                }
                _ => running.next().await,
            };
            let Some((i, result)) = outcome else { continue };
            match result {
                Ok(Attempt::Reserved(r)) => {
                    // The attempts left behind are dropped; those stuck in a round trip
                    // are the stalled databases, backed off.
                    for &db in &tried {
                        let stuck = trips[db].stuck_for();
                        if db != i && hedge.is_some_and(|h| stuck >= h) {
                            self.failed(
                                db,
                                &format!(
                                    "no answer within {stuck:?} while database \"{}\" reserved",
                                    self.dbs[i].name
                                ),
                            );
                            self.dbs[db].metrics.outcome(FetchOutcome::Error);
                        }
                    }
                    return Ok(r);
                }
                Ok(Attempt::Missing) => missing += 1,
                Ok(Attempt::Contended) => contended += 1,
                Ok(Attempt::Refused(e @ StoreError::ResidueConflict { .. })) => return Err(e),
                Ok(Attempt::Refused(e)) => refused = refused.or(Some(e)),
                Err(e) => failed.push(format!("\"{}\": {e}", self.dbs[i].name)),
            }
        }
        Err(if let Some(e) = refused {
            e
        } else if contended > 0 {
            StoreError::Contention(biz.to_string())
        } else if missing > 0 && failed.is_empty() {
            StoreError::NotFound(biz.to_string())
        } else if failed.is_empty() {
            StoreError::Unavailable(format!(
                "every database is backing off after failures ({})",
                self.last_errors()
            ))
        } else {
            StoreError::Unavailable(failed.join("; "))
        })
    }

    /// How long one round trip may go unanswered before another database is tried
    /// alongside it: four times the recent reservation time, at least the configured
    /// `hedge_after` (`None`: hedging is off), at most half the fetch timeout. When the
    /// caller's cache has less `runway` than that, half the runway instead, so that
    /// the other database's answer still comes before the cache is empty; never less
    /// than twice the recent reservation time or [`MIN_HEDGE`], so that a merely busy
    /// database is not hedged on every fetch.
    fn hedge_delay(&self, runway: Option<Duration>) -> Option<Duration> {
        let least = self.timing.hedge_after?;
        let usual = Duration::from_micros(
            self.usual_fetch_us
                .load(std::sync::atomic::Ordering::Relaxed),
        );
        let delay = (usual * 4).clamp(least, (self.timing.fetch_timeout / 2).max(least));
        Some(match runway {
            Some(runway) => delay.min((runway / 2).max(usual * 2).max(MIN_HEDGE)),
            None => delay,
        })
    }

    /// One reservation attempt on database `i`, queued behind this process's other
    /// reservations of `biz` there, measured and counted.
    async fn attempt_on(
        &self,
        i: usize,
        biz: &BizTag,
        hint: Option<StepHint>,
        known: &[(usize, Residue)],
        deadline: Instant,
        trip: &RoundTrip,
    ) -> (usize, Result<Attempt, DbError>) {
        let lock = self.dbs[i]
            .reserving
            .lock()
            .entry(biz.clone())
            .or_default()
            .clone();
        let Ok(_queued) = tokio::time::timeout_at(deadline.into(), lock.lock()).await else {
            return (i, Ok(Attempt::Contended));
        };
        let started = Instant::now();
        let result = self.call(i, self.attempt(i, biz, hint, known, trip)).await;
        let took = started.elapsed();
        let db = &self.dbs[i].metrics;
        db.observe(took);
        match &result {
            Ok(Attempt::Reserved(_)) => {
                db.outcome(FetchOutcome::Ok);
                // A moving average over about eight reservations.
                let took = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
                let _ = self.usual_fetch_us.fetch_update(
                    std::sync::atomic::Ordering::Relaxed,
                    std::sync::atomic::Ordering::Relaxed,
                    |avg| Some(if avg == 0 { took } else { (avg * 7 + took) / 8 }),
                );
            }
            Ok(Attempt::Missing | Attempt::Refused(_)) => db.outcome(FetchOutcome::Refused),
            // Each lost compare-and-set was counted as it happened.
            Ok(Attempt::Contended) => {}
            Err(_) => db.outcome(FetchOutcome::Error),
        }
        (i, result)
    }

    /// One optimistic reservation on database `i`: read the row, then compare-and-set
    /// it forward, at most [`CAS_ATTEMPTS`] times.
    async fn attempt(
        &self,
        i: usize,
        biz: &BizTag,
        hint: Option<StepHint>,
        known: &[(usize, Residue)],
        trip: &RoundTrip,
    ) -> Result<Attempt, DbError> {
        let db = &self.dbs[i];
        let refuse = |reason: String| {
            Attempt::Refused(StoreError::InvalidRow {
                biz: biz.to_string(),
                database: db.name.clone(),
                reason,
            })
        };
        for _ in 0..CAS_ATTEMPTS {
            let seen = self.evidence.lock().mark(i, biz.as_str());
            let Some(row) = trip.around(db.store.biz(biz.as_str())).await? else {
                return Ok(Attempt::Missing);
            };
            // Against what was known before the read: see `refresh_since`.
            if let Err(regression) = evidence::behind(seen, &row) {
                self.fence(i, &regression);
                return Err(DbError(format!("fenced: {regression}")));
            }
            self.evidence.lock().learn(i, biz.as_str(), Mark::of(&row));
            let residue = match self.checked_class(biz, i, &row, known) {
                Ok(r) => r,
                Err(e) => return Ok(Attempt::Refused(e)),
            };
            let room = i64::MAX.saturating_sub(row.max_id);
            let choice = self
                .policy
                .choose_within(row.step, residue.delta(), hint, room);
            let step = choice.step;
            if step < residue.delta() {
                return Ok(refuse(format!(
                    "step {step} is smaller than delta {}: a segment could hold no ID",
                    residue.delta()
                )));
            }
            let range = match SegmentRange::after(row.max_id, step, residue) {
                Ok(r) => r,
                Err(_) => {
                    return Ok(Attempt::Refused(StoreError::Overflow {
                        biz: biz.to_string(),
                        database: db.name.clone(),
                        max_id: row.max_id,
                        step,
                    }));
                }
            };
            let Some(updated) = trip
                .around(
                    db.store
                        .advance(biz.as_str(), row.version, row.max_id, range.max_id()),
                )
                .await?
            else {
                db.metrics.outcome(FetchOutcome::Conflict);
                continue;
            };
            self.evidence
                .lock()
                .learn(i, biz.as_str(), Mark::of(&updated));
            // The class may have been edited by hand between the read and the update:
            // the segment is issued from the class the row has now, checked again.
            let range = match self.checked_class(biz, i, &updated, known) {
                Ok(r) if r == residue => range,
                Ok(r) => match SegmentRange::after(row.max_id, step, r) {
                    Ok(range) if step >= r.delta() => range,
                    _ => return Ok(refuse(format!("class changed to {r} during a reservation"))),
                },
                Err(e) => return Ok(Attempt::Refused(e)),
            };
            return Ok(Attempt::Reserved(Reservation {
                range,
                database: i,
                reason: choice.reason,
                version: updated.version,
            }));
        }
        Ok(Attempt::Contended)
    }

    /// The class of `row` on database `i`, if it is valid and disjoint from the classes
    /// the biz has on the other databases.
    fn checked_class(
        &self,
        biz: &BizTag,
        i: usize,
        row: &BizRow,
        known: &[(usize, Residue)],
    ) -> Result<Residue, StoreError> {
        let residue =
            Residue::new(row.delta, row.remainder).map_err(|e| StoreError::InvalidRow {
                biz: biz.to_string(),
                database: self.dbs[i].name.clone(),
                reason: e.to_string(),
            })?;
        let mut classes: Vec<(usize, Residue)> =
            known.iter().copied().filter(|&(db, _)| db != i).collect();
        classes.push((i, residue));
        match conflict(biz.as_str(), &self.names, &classes) {
            Some(e) => Err(e),
            None => Ok(residue),
        }
    }

    /// Runs `op` on database `i` within the fetch timeout, recording the outcome in the
    /// database's health: a failure backs it off, a success clears the back-off.
    async fn call<T>(
        &self,
        i: usize,
        op: impl Future<Output = Result<T, DbError>>,
    ) -> Result<T, DbError> {
        let result = self.timed(op).await;
        let db = &self.dbs[i];
        let mut health = db.health.lock();
        match &result {
            Ok(_) => {
                health.failures = 0;
                health.down_until = None;
            }
            Err(e) => {
                drop(health);
                self.failed(i, &e.0);
            }
        }
        result
    }

    /// Runs `op` within the fetch timeout.
    async fn timed<T>(&self, op: impl Future<Output = Result<T, DbError>>) -> Result<T, DbError> {
        match tokio::time::timeout(self.timing.fetch_timeout, op).await {
            Ok(r) => r,
            Err(_) => Err(DbError(format!(
                "timed out after {:?}",
                self.timing.fetch_timeout
            ))),
        }
    }

    /// Records a failure of database `i`: it is skipped for a back-off that doubles
    /// with each consecutive failure.
    fn failed(&self, i: usize, error: &str) {
        let db = &self.dbs[i];
        let mut health = db.health.lock();
        health.failures = health.failures.saturating_add(1);
        let factor = 1u32 << (health.failures - 1).min(16);
        let backoff = self
            .timing
            .backoff_initial
            .saturating_mul(factor)
            .min(self.timing.backoff_max);
        health.down_until = Some(Instant::now() + backoff);
        health.last_error = Some(error.to_string());
        tracing::warn!(database = %db.name, %error, ?backoff, "database failed; backing off");
    }

    /// Whether database `i` may be used: not backed off after a failure (a call sent
    /// there now would most likely only wait for its timeout), not fenced.
    pub fn is_live(&self, i: usize) -> bool {
        let health = self.dbs[i].health.lock();
        health.fenced.is_none() && health.down_until.is_none_or(|t| Instant::now() >= t)
    }

    /// Whether database `i` may be read: not backed off (it may be fenced).
    fn is_reachable(&self, i: usize) -> bool {
        self.dbs[i]
            .health
            .lock()
            .down_until
            .is_none_or(|t| Instant::now() >= t)
    }

    fn last_errors(&self) -> String {
        self.status()
            .into_iter()
            .map(|s| {
                format!(
                    "\"{}\": {}",
                    s.name,
                    s.last_error.unwrap_or_else(|| "no error".into())
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// Moves the row of `biz` on database `i` back from `max_id` to `new_max_id` if its
    /// version is still `version`, i.e. if the segments above `new_max_id` were this
    /// process's last reservations and nobody reserved since. Returns whether it did;
    /// the version moves on either way nobody can reserve from the old state.
    ///
    /// # Errors
    /// [`DbError`] when the database fails.
    pub async fn give_back(
        &self,
        i: usize,
        biz: &BizTag,
        version: i64,
        max_id: i64,
        new_max_id: i64,
    ) -> Result<bool, DbError> {
        debug_assert!(new_max_id <= max_id);
        let updated = self
            .call(
                i,
                self.dbs[i]
                    .store
                    .advance(biz.as_str(), version, max_id, new_max_id),
            )
            .await?;
        Ok(updated.is_some())
    }

    /// Pings every database that is not backing off; true when one answers.
    pub async fn ready(&self) -> bool {
        let live: Vec<usize> = (0..self.dbs.len()).filter(|&i| self.is_live(i)).collect();
        join_all(
            live.into_iter()
                .map(|i| self.call(i, self.dbs[i].store.ping())),
        )
        .await
        .iter()
        .any(Result::is_ok)
    }

    pub fn status(&self) -> Vec<DatabaseStatus> {
        self.dbs
            .iter()
            .enumerate()
            .map(|(i, db)| {
                let up = self.is_live(i);
                let health = db.health.lock();
                DatabaseStatus {
                    name: db.name.clone(),
                    location: db.location.clone(),
                    residue: db.residue.to_string(),
                    up,
                    last_error: health.last_error.clone(),
                    fenced: health.fenced.clone(),
                }
            })
            .collect()
    }

    /// Runs `op` on every database at once, bounded by the fetch timeout.
    async fn on_all<'a, T, F>(
        &'a self,
        op: impl Fn(&'a dyn SegmentStore) -> F,
    ) -> Vec<Result<T, DbError>>
    where
        F: Future<Output = Result<T, DbError>> + 'a,
    {
        join_all((0..self.dbs.len()).map(|i| self.call(i, op(self.dbs[i].store.as_ref())))).await
    }

    /// Applies pending migrations to every database; one line per database.
    pub async fn migrate(&self) -> Vec<(String, Result<Vec<String>, DbError>)> {
        let results = self.on_all(|db| db.migrate()).await;
        self.names.iter().cloned().zip(results).collect()
    }

    /// Every biz row of every database.
    pub async fn list_bizs(&self) -> Vec<(String, Result<Vec<BizRow>, DbError>)> {
        let results = self.on_all(|db| db.bizs()).await;
        self.names.iter().cloned().zip(results).collect()
    }

    /// Reads `biz` on every database; every one must answer.
    async fn biz_everywhere(&self, biz: &BizTag) -> Result<Vec<Option<BizRow>>, StoreError> {
        self.on_all(|db| db.biz(biz.as_str()))
            .await
            .into_iter()
            .zip(&self.names)
            .map(|(r, name)| {
                r.map_err(|e| {
                    StoreError::Refused(format!(
                        "database \"{name}\" is unreachable ({e}); nothing changed"
                    ))
                })
            })
            .collect()
    }

    /// Inserts `biz` into every database: first ID `start` (or the next one of its
    /// class), segments of `step`, restricted to the class `within` if given (odd-only
    /// is `1 mod 2`). Returns one report line per database.
    ///
    /// # Errors
    /// [`StoreError::Refused`] when a database is unreachable, the biz exists in some
    /// or all databases, or the parameters are invalid; nothing is changed then.
    pub async fn add_biz(
        &self,
        biz: &BizTag,
        step: i64,
        start: i64,
        within: Option<Residue>,
    ) -> Result<Vec<String>, StoreError> {
        if step < 1 {
            return Err(StoreError::Refused(format!(
                "step must be at least 1, got {step}"
            )));
        }
        if start < 1 {
            return Err(StoreError::Refused(format!(
                "start must be at least 1, got {start}"
            )));
        }
        let existing = self.biz_everywhere(biz).await?;
        let (have, lack): (Vec<_>, Vec<_>) = self
            .names
            .iter()
            .zip(&existing)
            .partition(|(_, row)| row.is_some());
        let list = |v: &[(&String, &Option<BizRow>)]| {
            v.iter()
                .map(|(n, _)| format!("\"{n}\""))
                .collect::<Vec<_>>()
                .join(", ")
        };
        if lack.is_empty() {
            return Err(StoreError::Refused(format!(
                "biz `{biz}` already exists on every database; nothing changed"
            )));
        }
        if !have.is_empty() {
            return Err(StoreError::Refused(format!(
                "biz `{biz}` exists on {} but not on {}; fix the rows by hand (they must have disjoint residue classes); nothing changed",
                list(&have),
                list(&lack)
            )));
        }
        let mut rows = Vec::with_capacity(self.dbs.len());
        for db in &self.dbs {
            let class = match within {
                Some(w) => db.residue.restrict(w),
                None => Ok(db.residue),
            }
            .map_err(|e| StoreError::Refused(format!("database \"{}\": {e}", db.name)))?;
            if step < class.delta() {
                return Err(StoreError::Refused(format!(
                    "step {step} is smaller than the biz's delta {} on database \"{}\": a segment could hold no ID; nothing changed",
                    class.delta(),
                    db.name
                )));
            }
            rows.push(BizRow {
                biz_type: biz.to_string(),
                begin_id: start - 1,
                max_id: start - 1,
                step,
                delta: class.delta(),
                remainder: class.remainder(),
                version: 0,
            });
        }
        let mut report = Vec::with_capacity(rows.len());
        let mut changed = Vec::with_capacity(rows.len());
        for (db, row) in self.dbs.iter().zip(&rows) {
            let line = match db.store.insert_biz(row).await {
                Ok(true) => {
                    changed.push(db.name.as_str());
                    format!(
                        "\"{}\": added biz `{biz}`: IDs ≡ {} mod {}, from {start}, step {step}",
                        db.name, row.remainder, row.delta
                    )
                }
                Ok(false) => format!(
                    "\"{}\": biz `{biz}` appeared meanwhile; left as it is",
                    db.name
                ),
                Err(e) => {
                    audit("biz add", biz.as_str(), "", &changed);
                    report.push(format!("\"{}\": FAILED: {e}", db.name));
                    return Err(StoreError::Refused(report.join("\n")));
                }
            };
            report.push(line);
        }
        audit("biz add", biz.as_str(), "", &changed);
        Ok(report)
    }

    /// Brings database `name` back after it went back in time (a restore from backup, a
    /// promoted replica): raises each of its biz rows that is behind the witnesses in
    /// the other databases to a version above theirs and a `max_id` at or above every ID
    /// they say was reserved from it (and at or above `above`, if given: evidence the
    /// operator has, e.g. the highest ID in the application's tables). Running servers
    /// use the database again at their next catalog refresh. Returns one line per row.
    ///
    /// # Errors
    /// [`StoreError::Refused`] when `name` is not configured or a database cannot be
    /// read (every other database must answer: each may hold the only witness):
    /// nothing is changed then; or when a raise fails midway: the message lists the
    /// rows raised before it.
    pub async fn raise_database(
        &self,
        name: &str,
        above: Option<i64>,
    ) -> Result<Vec<String>, StoreError> {
        let t = self.names.iter().position(|n| n == name).ok_or_else(|| {
            StoreError::Refused(format!("no database named \"{name}\" is configured"))
        })?;
        let unreachable = |db: &str, e: DbError| {
            StoreError::Refused(format!(
                "database \"{db}\" is unreachable ({e}); nothing changed"
            ))
        };
        let mut evidence = Evidence::default();
        for (k, read) in self
            .on_all(|db| db.witnesses())
            .await
            .into_iter()
            .enumerate()
        {
            if k == t {
                continue;
            }
            for w in read.map_err(|e| unreachable(&self.names[k], e))? {
                if w.database == name {
                    evidence.learn(t, &w.biz, w.mark);
                }
            }
        }
        let rows = self
            .call(t, self.dbs[t].store.bizs())
            .await
            .map_err(|e| unreachable(name, e))?;
        let mut report = Vec::with_capacity(rows.len());
        let mut raised = Vec::new();
        for row in rows {
            let biz = &row.biz_type;
            let mark = evidence.mark(t, biz);
            let floor = mark
                .map_or(row.max_id, |m| m.high_id)
                .max(above.unwrap_or(i64::MIN));
            if evidence::behind(mark, &row).is_ok() && row.max_id >= floor {
                report.push(format!(
                    "\"{name}\": biz `{biz}` at version {} (max_id {}) is not behind any evidence; left as it is",
                    row.version, row.max_id
                ));
                continue;
            }
            let newest = mark.map_or(row.version, |m| m.version.max(row.version));
            // The next multiple of FENCE_EPOCH: above any version a running server can
            // have seen without a witness recording it (one with a single database).
            let Some(version) = (newest / FENCE_EPOCH)
                .checked_add(1)
                .and_then(|e| e.checked_mul(FENCE_EPOCH))
            else {
                report.push(format!(
                    "\"{name}\": biz `{biz}` has no version left to raise to; left as it is"
                ));
                continue;
            };
            let max_id = row.max_id.max(floor);
            let done = match self
                .call(
                    t,
                    self.dbs[t]
                        .store
                        .raise(biz, row.version, row.max_id, version, max_id),
                )
                .await
            {
                Ok(done) => done,
                // Rows raised before stay raised (that is safe); say which they were.
                Err(e) => {
                    audit_fence(name, &raised);
                    report.push(format!(
                        "\"{name}\": biz `{biz}` FAILED: {e}; run the command again"
                    ));
                    return Err(StoreError::Refused(report.join("\n")));
                }
            };
            match done {
                Some(_) => {
                    report.push(format!(
                        "\"{name}\": biz `{biz}` raised from version {} (max_id {}) to version {version} (max_id {max_id})",
                        row.version, row.max_id
                    ));
                    raised.push(Witness {
                        database: name.to_string(),
                        biz: biz.clone(),
                        mark: Mark {
                            version,
                            max_id,
                            high_id: max_id,
                        },
                    });
                }
                None => report.push(format!(
                    "\"{name}\": biz `{biz}` changed while being raised; left as it is: run the command again"
                )),
            }
        }
        audit_fence(name, &raised);
        let raised = &raised;
        let others = (0..self.dbs.len()).filter(|&k| k != t);
        join_all(others.map(|k| self.call(k, self.dbs[k].store.witness(raised)))).await;
        Ok(report)
    }
}

/// Logs one admin change for the audit trail: the command, the biz, the token's hash
/// prefix (never the token; empty for a biz change) and the databases changed. Who ran
/// the command is unknown to segmint: the operator's shell or deployment tool says.
fn audit(command: &str, biz: &str, token: &str, databases: &[&str]) {
    tracing::info!(
        target: "segmint::audit",
        command,
        biz,
        token,
        databases = %databases.join(","),
        "admin change"
    );
}

/// The audit line of a fence of database `name` that raised the rows of `raised`.
fn audit_fence(name: &str, raised: &[Witness]) {
    let bizs: Vec<&str> = raised.iter().map(|w| w.biz.as_str()).collect();
    let changed: &[&str] = if raised.is_empty() { &[] } else { &[name] };
    audit("db fence", &bizs.join(","), "", changed);
}
