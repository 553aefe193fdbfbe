//! Reservations over N independent databases, in two parts.
//!
//! - The [`Cluster`] (`handle`): the databases, their health (back-off, fences:
//!   `health`), the layouts read and each database's class (`layout`), and carrying
//!   out one step of a machine on one database. Every machine that coordinates
//!   through the rows alone is executed on it, one module each: the layout change
//!   (`layout`), worker-ID leases (`lease`) and the snowflake agreement
//!   (`agreement`), sequence sections (`sequence`), the clocks (`clocks`), giving
//!   IDs back (`give_back`), and the operator commands (`admin`: migrations, `biz
//!   add`, `db raise`; `import`; `recover`; `shape`: decoding an ID).
//! - The [`Store`] (this file): the cluster with what a server keeps beside it, the
//!   catalog and its evidence (`refresh`, `early`), reservations and their witnesses
//!   (`reserve`) and the tokens' last uses (`tokens`). The few commands that read the
//!   catalog first do that here and hand the rest to the cluster.
//!
//! # Locks
//!
//! The locks of the [`Store`] and what they protect. "Brief": held for a few field or
//! map operations, never across an await. The state is split by concern, each part
//! owning its locks: `Cluster` (in `handle`, `Store.dbs`: the databases, their health
//! and back-off), `CatalogView` (in `refresh`, `Store.view`: the catalog, refresh and
//! evidence), `Layouts` (in `layout`, `Store.dbs.layouts`) and `Uses` (in `tokens`,
//! `Store.uses`: token last uses). The locks of the server's cache are in the module
//! docs of `src/cache.rs`.
//!
//! | lock | kind | protects |
//! | --- | --- | --- |
//! | `view.catalog` | `ArcSwap<Catalog>` | the catalog; read lock-free per request, replaced by a refresh |
//! | `view.refreshed` | `Arc<tokio::sync::Mutex>` | single flight of refreshes; **held across the whole refresh**, database reads, writes and a heal included, and by the refresh's work on a blocking thread (an owned guard) |
//! | `dbs.list[i].reserving` | `parking_lot::Mutex<HashMap>` | the per-biz queue locks of one database; brief (clone the `Arc`) |
//! | per (database, biz) queue | `tokio::sync::Mutex<()>` | one reservation of a biz per database per process; held across the attempt's round trips |
//! | `dbs.list[i].health` | `parking_lot::Mutex<Health>` | back-off, last error, fence; brief |
//! | `view.evidence` | `parking_lot::Mutex<Evidence>` | marks seen and witnessed; brief: a refresh holds it for one chunk of checks at a time (`CHECKS_PER_HOLD`) |
//! | `dbs.layouts.view` | `parking_lot::Mutex<LayoutView>` | layouts read, each database's class and standing; brief |
//! | biz names' table (`segmint_core::name`) | `parking_lot::RwLock` | the names by hash; read to find a name by its text, written to hold a new one (one insert); taken under any other lock, takes none |
//! | `view.snapshots`, `view.classes_seen`, `view.refused`, `view.unbuilt` | `parking_lot::Mutex` | last rows read per database and its feed position; classes accepted per row; bizs refused by the class checks; what the reads changed that no catalog was built from yet; refresh only (held for a whole step on the blocking thread) |
//! | `view.early.looked`, `view.early.flights` | `parking_lot::Mutex<HashMap>` | before the first catalog: the catalog of each biz looked at; the per-biz flight locks; brief, nest nothing |
//! | `view.misses` | `parking_lot::Mutex<HashMap>` | tokens a read did not grant, by catalog generation; brief, nests nothing |
//! | per biz flight | `tokio::sync::Mutex<()>` | one look at a biz at a time; held across the look's database reads |
//! | `uses.pending`; `uses.writing`, `dbs.usual_fetch_us` | `parking_lot::Mutex`; atomics | token last uses noted, brief; one use-write at a time; mean reservation time |
//!
//! Nesting, as the code does it (outer → inner); any pair not listed is never held
//! together (`health` and `reserving` are a database's, in `dbs.list`):
//!
//! - `view.refreshed` → `view.evidence`, `health`, `view.snapshots`, `dbs.layouts.view`,
//!   `view.classes_seen`, `view.unbuilt`, `uses.pending`: `Store::refresh_since` takes
//!   each while holding it, and awaits database calls under it, `Cluster::heal` included;
//!   `Store::copy_witnesses` (a fence recorded) takes `health`, `view.evidence` and
//!   `view.snapshots` under it and awaits the witness writes.
//! - per (database, biz) queue → `view.evidence`, `health`: `Store::attempt_on` holds the
//!   queue while `Store::attempt` takes `view.evidence`, and `Cluster::call` or
//!   `Cluster::fence` take `health`, one at a time. `reserving` is released before the
//!   queue lock is awaited.
//! - `view.evidence` → `health`: `Store::check_rows` holds `view.evidence` and calls
//!   `Cluster::fence` / `Cluster::unfence`.
//! - `view.evidence` → `view.snapshots`: `CatalogView::lacking_witnesses` holds both for
//!   each chunk of marks it looks at, and `CatalogView::build` holds both for each chunk
//!   of the class checks, which read the marks in place.
//! - `health` → `dbs.layouts.view`: `Cluster::status` holds a database's `health` while
//!   `Cluster::standing_of` takes `dbs.layouts.view`.
//! - `view.snapshots` → `view.classes_seen`, `view.refused`, `view.unbuilt`: the refresh
//!   reads the layouts' classes first (`dbs.layouts.view` alone); `CatalogView::build` then
//!   holds `view.evidence`, `view.snapshots` and `view.classes_seen` for each chunk of
//!   `check_classes`, which takes no lock; then, holding `view.snapshots` alone, it
//!   takes `view.refused`. `CatalogView::apply` holds `view.snapshots` and takes
//!   `view.unbuilt`. A look (`Store::look_up`) holds `view.evidence` alone for its class
//!   check.
//! - per biz flight → `view.evidence`, `health`, `dbs.layouts.view`, `view.early.looked`: a
//!   look holds its biz's flight across its reads and takes each one at a time.
//!
//! So the plain locks follow one order, `view.evidence` → `health` → `dbs.layouts.view` and
//! `view.evidence` → `view.snapshots` → `dbs.layouts.view` / `view.classes_seen` /
//! `view.refused` / `view.unbuilt`; no path takes them the other way, and none is held
//! across an await.
//!
//! One long hold is worth knowing: `view.refreshed` is held for a whole refresh. While a
//! cut-off change is being healed, that is every frozen biz's `Cluster::move_biz` (each
//! step bounded by the protocol's `step_timeout`). Callers of `Store::refresh_since`
//! wait meanwhile with no bound of their own: a reservation that met a frozen row, one
//! that records a fence (`Store::record_fences`), and a request whose token or biz
//! missed the catalog.

pub(super) mod admin;
mod agreement;
mod clocks;
mod early;
mod give_back;
mod handle;
mod health;
pub(super) mod import;
pub(super) mod layout;
pub(super) mod lease;
mod recover;
mod refresh;
mod reserve;
pub mod sequence;
mod shape;
pub(super) mod tokens;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

pub use handle::Cluster;
pub use health::DatabaseStatus;
pub use reserve::Reservation;
pub use shape::Decoded;

use super::mysql::MyStore;
use super::postgres::PgStore;
use super::sqlite::{OpenMode, SqliteStore};
use super::{Catalog, Clock, Reason, Refusal, RuntimeClock, SegmentStore, StoreError};
use crate::backoff::{Backoff, Failures};
use crate::biz::BizTag;
use crate::config::{Config, DatabaseKind, Protocol};
use crate::metrics::{DatabaseMetrics, Metrics};
use crate::segment::Residue;
use crate::snowflake::Spec;
use crate::step::StepPolicy;

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

impl Timing {
    /// The back-off of a failed database.
    fn backoff(&self) -> Backoff {
        Backoff {
            initial: self.backoff_initial,
            max: self.backoff_max,
        }
    }
}

struct Database {
    /// Configured name, used in every message about it.
    name: String,
    /// `host:port/db`, without credentials.
    location: String,
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
    /// The database is skipped until the back-off of its failures is over.
    failures: Failures,
    last_error: Option<String>,
    /// Set while a row of the database is behind the evidence: it is not used until
    /// its rows are at or above every mark again (`segmint db fence` raises them).
    fenced: Option<String>,
    /// Set with a fence until another database holds every mark of this one known here
    /// (`Store::record_fences`): until then only this process could tell that the
    /// database went back, and a server started after it stops would use it.
    unrecorded: bool,
    /// Its clock as last read (at a catalog refresh).
    clock: Option<crate::shape::clocks::Reading>,
}

impl Health {
    /// Neither backed off after a failure at `now` nor fenced.
    fn up(&self, now: Instant) -> bool {
        self.fenced.is_none() && self.failures.is_over(now)
    }
}

/// All configured databases, with the merged catalog of bizs and tokens.
///
/// The state is split by concern, each part owning its locks: `dbs` ([`Cluster`], in
/// `handle`: the databases, their health and back-off, the layouts (`Layouts`, in
/// `layout`), the protocol's timings and the clock, and carrying out a step), `view`
/// (`CatalogView`, in `refresh`: the catalog, refresh and evidence) and `uses` (`Uses`,
/// in `tokens`: token last uses). The step policy and metrics are shared configuration.
///
/// # Lock order
/// The plain (`parking_lot`) locks below are held for a few field or map operations,
/// never across an await, and nest in one order only:
/// `view.evidence` → a database's `health` (in `dbs.list`) → `dbs.layouts.view`, and
/// `view.snapshots` → `dbs.layouts.view` / `view.classes_seen`; `uses.pending` nests
/// nothing. Of the async locks, `view.refreshed` (one refresh at a time) is taken
/// before any of them and held across the refresh's database calls (a heal's
/// included); a database's per-biz queue (in its `reserving`) is taken before
/// `view.evidence` and `health`, and `reserving` itself is released before the queue
/// is awaited. Each part states the rule for its own locks; this module's docs
/// (Locks) name the code path behind each pair.
pub struct Store {
    /// The handle on the cluster: the databases, their names, timings, health and
    /// layouts, and carrying out a step on one.
    dbs: handle::Cluster,
    /// The catalog, the rows last read and the evidence checked against them.
    view: Arc<refresh::CatalogView>,
    /// Token uses noted and not yet written.
    uses: tokens::Uses,
    /// How the step of a segment is chosen from its [`StepRequest`](crate::step::StepRequest).
    policy: StepPolicy,
    metrics: Arc<Metrics>,
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
        Store::open_bounded(config, mode, config.fetch_timeout)
    }

    /// As [`Store::open`], for an admin command: each database also bounds a statement
    /// by [`Protocol::step_timeout`](crate::config::Protocol::step_timeout) when that
    /// is longer than the fetch timeout. A server's sessions keep the fetch timeout, so
    /// a statement a request gave up on does not hold its connection longer; a
    /// command's step (a freeze, a batch of witnesses or of imported rows) waiting on
    /// a lock is judged by the step bound the configuration documents, not cut off by
    /// the database at a request's.
    ///
    /// # Errors
    /// As [`Store::open`].
    pub fn open_for_commands(config: &Config, mode: OpenMode) -> Result<Store, StoreError> {
        let bound = config.protocol.step_timeout.max(config.fetch_timeout);
        Store::open_bounded(config, mode, bound)
    }

    /// As [`Store::open`], each database bounding a statement (PostgreSQL's
    /// `statement_timeout`, SQLite's busy timeout) by `statements`.
    fn open_bounded(
        config: &Config,
        mode: OpenMode,
        statements: Duration,
    ) -> Result<Store, StoreError> {
        let mut dbs = Vec::with_capacity(config.databases.len());
        for db in &config.databases {
            let store = match &db.kind {
                DatabaseKind::Postgres(pg) => PgStore::new(pg, config.pool_size, statements)
                    .map(|s| Box::new(s) as Box<dyn SegmentStore>),
                DatabaseKind::Sqlite(path) => SqliteStore::open(path, statements, mode)
                    .map(|s| Box::new(s) as Box<dyn SegmentStore>),
                DatabaseKind::MySql(my) => MyStore::new(my, config.pool_size, statements)
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
        )
        .with_protocol(config.protocol)
        .with_snowflake(config.snowflake.spec())
        .with_sequences(segmint_core::lease::Timing::new(
            config.sequences.lease,
            config.sequences.grace,
        )))
    }

    /// A store over `dbs`: `(name, location, residue class, database)`, with the
    /// default [`Protocol`] and the [`RuntimeClock`].
    pub fn new(
        dbs: Vec<(String, String, Residue, Box<dyn SegmentStore>)>,
        timing: Timing,
        policy: StepPolicy,
        metrics: Arc<Metrics>,
    ) -> Store {
        let configured: Vec<Residue> = dbs.iter().map(|d| d.2).collect();
        let view = Arc::new(refresh::CatalogView::new(dbs.len()));
        let list = dbs
            .into_iter()
            .map(|(name, location, _, store)| Database {
                location,
                metrics: metrics.databases().database(&name),
                name,
                store: Arc::from(store),
                health: Mutex::new(Health::default()),
                reserving: Mutex::new(HashMap::new()),
            })
            .collect();
        Store {
            dbs: handle::Cluster::new(list, configured, timing, Arc::new(RuntimeClock)),
            view,
            uses: tokens::Uses::default(),
            policy,
            metrics,
        }
    }

    /// This store with the servers' leases of sequence sections `timing`.
    #[must_use]
    pub fn with_sequences(mut self, timing: segmint_core::lease::Timing) -> Store {
        self.dbs.sequences = timing;
        self
    }

    /// This store issuing snowflake IDs with `spec` (Leaf's epoch and layout unless
    /// set): the spec it agrees on with the cluster, whose layout bounds the worker IDs.
    #[must_use]
    pub fn with_snowflake(mut self, spec: Spec) -> Store {
        self.dbs.snowflake = spec;
        self
    }

    /// This store with the protocol timings `protocol` (validated where they were
    /// built: [`Config`] refuses timings that break their rules).
    #[must_use]
    pub fn with_protocol(mut self, protocol: Protocol) -> Store {
        self.dbs.protocol = protocol;
        self
    }

    /// This store reading the time from `clock`.
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Store {
        self.dbs.clock = clock;
        self
    }

    /// The clock this store reads: every deadline of the store and of the server's
    /// parts built on it (worker-ID leases, token expiry) reads it too.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.dbs.clock
    }

    /// Monotonic time by this store's clock.
    pub fn now(&self) -> Instant {
        self.dbs.clock.now()
    }

    /// Wall time by this store's clock in Unix seconds, as token times are kept.
    pub fn unix_now(&self) -> i64 {
        self.dbs.clock.unix_ms().div_euclid(1000)
    }

    /// The protocol timings in use.
    pub fn protocol(&self) -> &Protocol {
        &self.dbs.protocol
    }

    /// The metrics of this store's databases, shared with the server.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// How segments are sized.
    pub fn step_policy(&self) -> StepPolicy {
        self.policy
    }

    pub fn database_names(&self) -> &[String] {
        &self.dbs.names
    }

    /// The handle on the cluster: its databases, their health and layouts, and the
    /// executors of the machines that coordinate through its rows alone.
    pub fn cluster(&self) -> &Cluster {
        &self.dbs
    }

    /// The bizs and tokens as last read.
    pub fn catalog(&self) -> Arc<Catalog> {
        self.view.catalog.load_full()
    }

    /// Runs `f` on the bizs and tokens as last read. Unlike [`Store::catalog`], this
    /// writes to nothing the other HTTP workers read (no lock, no reference count),
    /// which is what every ID request needs.
    pub fn with_catalog<R>(&self, f: impl FnOnce(&Catalog) -> R) -> R {
        f(&self.view.catalog.load())
    }

    // The commands that read the catalog (or write a token) beside the cluster's rows:
    // each does that part here and hands the rest to the cluster's executor.

    /// Records the cluster's membership if none is (an embedded store is migrated when
    /// opened: this is its `segmint migrate`). Then, on a store with no biz at all,
    /// creates the biz `test` and a token for it, so that
    /// a fresh `segmint serve` can be tried at once. Returns the token; `None` when a biz
    /// exists already.
    ///
    /// # Errors
    /// [`StoreError::Refused`] when a database cannot be read, or the biz or the token
    /// cannot be added.
    pub async fn first_start(&self) -> Result<Option<String>, StoreError> {
        self.dbs.record_membership().await?;
        for (db, rows) in self.dbs.list_bizs().await {
            match rows {
                Ok(rows) if rows.is_empty() => {}
                Ok(_) => return Ok(None),
                Err(e) => {
                    return Err(Refusal::new(
                        Reason::DatabaseUnanswered,
                        format!("database \"{db}\": {e}"),
                    )
                    .into());
                }
            }
        }
        let biz = BizTag::parse("test")?;
        self.dbs.add_biz(&biz, 1000, 1, None).await?;
        let (token, _) = self.add_token(&biz, "created on first start").await?;
        Ok(Some(token))
    }

    /// Takes a free worker ID for `holder` ([`Cluster::take_lease`]) once the layout in
    /// force was read: which database may lease which worker ID follows it (a worker ID
    /// leased by an earlier layout's classes is blocked where it left, so a stale read
    /// costs worker IDs, never a duplicate).
    ///
    /// # Errors
    /// As [`Cluster::take_lease`].
    pub async fn take_lease(
        &self,
        holder: &str,
        lease: Duration,
        grace: Duration,
    ) -> Result<lease::Lease, StoreError> {
        if !self.catalog().is_read() {
            self.refresh_since(self.dbs.clock.now()).await;
        }
        self.dbs.take_lease(holder, lease, grace).await
    }

    /// Recovers `biz` on the catalog read now ([`Cluster::recover_period`]).
    ///
    /// # Errors
    /// As [`Cluster::recover_period`].
    pub async fn recover_period(
        &self,
        biz: &BizTag,
        above: Option<i64>,
    ) -> Result<Vec<String>, StoreError> {
        let catalog = self.refresh_since(self.dbs.clock.now()).await;
        self.dbs.recover_period(&catalog, biz, above).await
    }

    /// What `text`, an ID of `biz`, stands for, by the catalog read now
    /// ([`Cluster::decode_id`]).
    ///
    /// # Errors
    /// As [`Cluster::decode_id`].
    pub async fn decode_id(&self, biz: &BizTag, text: &str) -> Result<Decoded, StoreError> {
        let catalog = self.refresh_since(self.dbs.clock.now()).await;
        self.dbs.decode_id(&catalog, biz, text).await
    }
}
