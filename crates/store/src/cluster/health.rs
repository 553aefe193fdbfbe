//! Database health: back-off after failures, fencing of databases that went back in
//! time, readiness and status.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::future::join_all;

use super::{Database, Store, Timing};
use crate::backoff::Failures;
use crate::store::evidence::Regression;
use crate::store::{DbError, Verdict};

/// The configured databases and what is known of their health.
///
/// # Lock order
/// Each [`Database`]'s `health` is a plain (`parking_lot`) mutex held for a few field
/// reads or updates, never across an await; it may be taken while holding
/// `CatalogView.evidence` or a per-biz queue, and may hold `Layouts.view` (the only
/// lock taken under it). A database's `reserving` is held only to clone one per-biz
/// queue and is released before that queue is awaited; the queue (an async lock) is
/// taken before `CatalogView.evidence` and `health`. `usual_fetch_us` is an atomic.
pub(super) struct Databases {
    /// Every database, in configuration order; indexes are database numbers.
    pub(super) list: Vec<Database>,
    /// Database names by index, for catalog messages.
    pub(super) names: Vec<String>,
    pub(super) timing: Timing,
    /// Moving average of successful reservation times, in microseconds.
    usual_fetch_us: AtomicU64,
}

impl Databases {
    pub(super) fn new(list: Vec<Database>, timing: Timing) -> Databases {
        Databases {
            names: list.iter().map(|d| d.name.clone()).collect(),
            list,
            timing,
            usual_fetch_us: AtomicU64::new(0),
        }
    }

    /// The moving average of successful reservation times.
    pub(super) fn usual_fetch(&self) -> Duration {
        Duration::from_micros(self.usual_fetch_us.load(Ordering::Relaxed))
    }

    /// Counts a successful reservation that took `took` into the moving average, over
    /// about eight reservations.
    pub(super) fn note_fetch(&self, took: Duration) {
        let took = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let _ = self
            .usual_fetch_us
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |avg| {
                Some(if avg == 0 { took } else { (avg * 7 + took) / 8 })
            });
    }
}

/// How a database looks from here, for `/readyz` and status pages.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DatabaseStatus {
    pub name: String,
    pub location: String,
    /// Its class in the layout in force; `None` when the layout does not name it.
    pub residue: Option<String>,
    /// Whether the layout in force names it and it may be used: one it does not name,
    /// or whose standing is not current, is never used.
    pub in_layout: bool,
    /// Its standing among the layouts read (see [`crate::layout::Standing`]):
    /// `current`, `behind`, `lost` or `disagrees`.
    pub layout: &'static str,
    /// False while the database is backed off after a failure or fenced.
    pub up: bool,
    pub last_error: Option<String>,
    /// Why the database is fenced (it went back in time), while it is.
    pub fenced: Option<String>,
    /// How far this server's clock was ahead of the database's (negative: behind) at
    /// the last catalog refresh; `None` before its clock was read.
    pub clock_ahead_ms: Option<i64>,
}

impl Store {
    /// Fences database `i`: it went back in time, and reserving from it could reissue
    /// IDs.
    pub(super) fn fence(&self, i: usize, regression: &Regression) {
        let db = &self.dbs.list[i];
        let reason = regression.to_string();
        let mut health = db.health.lock();
        if health.fenced.is_none() {
            tracing::error!(database = %db.name, %reason, "database went back in time; fenced until `segmint db fence` raises its rows");
            health.unrecorded = true;
        }
        health.fenced = Some(reason);
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

    /// Lifts the fence of database `i`, if any: its rows are at or above every mark.
    pub(super) fn unfence(&self, i: usize) {
        let db = &self.dbs.list[i];
        if db.health.lock().fenced.take().is_some() {
            tracing::warn!(database = %db.name, "database rows are above every mark again; fence lifted");
        }
    }

    /// Runs `op` on database `i` within the fetch timeout, recording the outcome in the
    /// database's health by the failure's [`Verdict`]: a database down is backed off
    /// (doubling), one unusable as it is for the longest back-off, a transient failure
    /// (a lost transaction) not at all; a success clears the back-off.
    pub(super) async fn call<T>(
        &self,
        i: usize,
        op: impl Future<Output = Result<T, DbError>>,
    ) -> Result<T, DbError> {
        self.call_within(i, self.dbs.timing.fetch_timeout, op).await
    }

    /// [`Store::call`] within `limit`: an admin step that writes many rows in one
    /// transaction (a layout change's worker IDs) is not judged by a request's timeout.
    pub(super) async fn call_within<T>(
        &self,
        i: usize,
        limit: Duration,
        op: impl Future<Output = Result<T, DbError>>,
    ) -> Result<T, DbError> {
        let result = self.timed_within(limit, op).await;
        let db = &self.dbs.list[i];
        let mut health = db.health.lock();
        match &result {
            Ok(_) => {
                health.failures = Failures::default();
            }
            Err(e) => {
                drop(health);
                match e.verdict() {
                    Verdict::Down => self.failed(i, &e.to_string()),
                    Verdict::Unusable => self.unusable(i, &e.to_string()),
                    Verdict::Transient => {
                        tracing::debug!(database = %self.dbs.list[i].name, error = %e, "transient failure; retried, not backed off");
                    }
                }
            }
        }
        result
    }

    /// One step of an admin command on database `i` (a layout change's read, freeze or
    /// lease batch, a batch of imported rows), within
    /// [`Protocol::step_timeout`](crate::config::Protocol::step_timeout) (or the fetch
    /// timeout, when longer).
    pub(super) async fn step<T>(
        &self,
        i: usize,
        op: impl Future<Output = Result<T, DbError>>,
    ) -> Result<T, DbError> {
        self.call_within(
            i,
            self.protocol
                .step_timeout
                .max(self.dbs.timing.fetch_timeout),
            op,
        )
        .await
    }

    /// Records that database `i` answered but may not be used as it is: it is skipped
    /// for the longest back-off at once.
    pub(super) fn unusable(&self, i: usize, error: &str) {
        let db = &self.dbs.list[i];
        let mut health = db.health.lock();
        let backoff = self.dbs.timing.backoff();
        let wait = health.failures.fail_for(backoff.max, self.clock.now());
        health.last_error = Some(error.to_string());
        tracing::warn!(database = %db.name, %error, backoff = ?wait, "database unusable as it is; backing off for the longest back-off");
    }

    /// Runs `op` within the fetch timeout.
    pub(super) async fn timed<T>(
        &self,
        op: impl Future<Output = Result<T, DbError>>,
    ) -> Result<T, DbError> {
        self.timed_within(self.dbs.timing.fetch_timeout, op).await
    }

    pub(super) async fn timed_within<T>(
        &self,
        limit: Duration,
        op: impl Future<Output = Result<T, DbError>>,
    ) -> Result<T, DbError> {
        match tokio::time::timeout(limit, op).await {
            Ok(r) => r,
            Err(_) => Err(DbError::Timeout { after: limit }),
        }
    }

    /// Records a failure of database `i`: it is skipped for a back-off that doubles
    /// with each consecutive failure.
    pub(super) fn failed(&self, i: usize, error: &str) {
        let db = &self.dbs.list[i];
        let mut health = db.health.lock();
        let backoff = health
            .failures
            .fail(self.dbs.timing.backoff(), self.clock.now());
        health.last_error = Some(error.to_string());
        tracing::warn!(database = %db.name, %error, ?backoff, "database failed; backing off");
    }

    /// Whether database `i` may be used: not backed off after a failure (a call sent
    /// there now would most likely only wait for its timeout), not fenced.
    /// Also false for a database the layout in force does not name (removed, or not
    /// added yet): it is never used.
    pub fn is_live(&self, i: usize) -> bool {
        let up = self.dbs.list[i].health.lock().up(self.clock.now());
        up && self.class_of(i).is_some()
    }

    /// Whether database `i` may be read: not backed off (it may be fenced).
    pub(super) fn is_reachable(&self, i: usize) -> bool {
        self.dbs.list[i]
            .health
            .lock()
            .failures
            .is_over(self.clock.now())
    }

    pub(super) fn last_errors(&self) -> String {
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

    /// Pings every database that is not backing off; true when one answers.
    pub async fn ready(&self) -> bool {
        let live: Vec<usize> = (0..self.dbs.list.len())
            .filter(|&i| self.is_live(i))
            .collect();
        join_all(
            live.into_iter()
                .map(|i| self.call(i, self.dbs.list[i].store.ping())),
        )
        .await
        .iter()
        .any(Result::is_ok)
    }

    pub fn status(&self) -> Vec<DatabaseStatus> {
        self.dbs
            .list
            .iter()
            .enumerate()
            .map(|(i, db)| {
                let class = self.class_of(i);
                let health = db.health.lock();
                DatabaseStatus {
                    name: db.name.clone(),
                    location: db.location.clone(),
                    residue: class.map(|c| c.to_string()),
                    in_layout: class.is_some(),
                    layout: self.standing_of(i).as_str(),
                    up: health.up(self.clock.now()),
                    last_error: health.last_error.clone(),
                    fenced: health.fenced.clone(),
                    clock_ahead_ms: health.clock.map(|r| r.server_ahead_ms()),
                }
            })
            .collect()
    }
}
