//! The handle on the cluster: the configured databases, their health and layouts, and
//! carrying out one step of a machine on one of them, bounded, its outcome recorded
//! in the database's health. Each machine's executor is an `impl Cluster` in a module
//! of its own (see the [`cluster`](super) module); the [`Store`](super::Store) holds
//! the handle beside the catalog and the token uses.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::future::join_all;

use super::layout::Layouts;
use super::{Database, Timing};
use crate::backoff::Failures;
use crate::config::Protocol;
use crate::segment::Residue;
use crate::snowflake::Spec;
use crate::store::{Clock, DbError, SegmentStore, Verdict};

/// The configured databases, their health and layouts, and the bounds of a step on one
/// of them.
///
/// # Lock order
/// Each database's `health` is a plain (`parking_lot`) mutex held for a few field
/// reads or updates, never across an await; it may be taken while holding
/// `CatalogView.evidence` or a per-biz queue, and may hold `Layouts.view` (the only
/// lock taken under it). A database's `reserving` is held only to clone one per-biz
/// queue and is released before that queue is awaited; the queue (an async lock) is
/// taken before `CatalogView.evidence` and `health`. `usual_fetch_us` is an atomic.
pub struct Cluster {
    /// Every database, in configuration order; indexes are database numbers.
    pub(super) list: Vec<Database>,
    /// Database names by index, for catalog messages.
    pub(super) names: Vec<String>,
    pub(super) timing: Timing,
    /// The cluster protocol's timings: a step's bound, the clocks' tolerance.
    pub(super) protocol: Protocol,
    /// Where back-offs and clock readings read the time (the store's clock).
    pub(super) clock: Arc<dyn Clock>,
    /// Moving average of successful reservation times, in microseconds.
    usual_fetch_us: AtomicU64,
    /// The layouts read and each database's class and standing in them.
    pub(super) layouts: Layouts,
    /// The snowflake epoch and bit layout: agreed with the cluster before a worker ID is
    /// leased, and bounding the worker IDs leased.
    pub(super) snowflake: Spec,
    /// The servers' leases of sequence sections: a layout change carrying the sections
    /// waits them out.
    pub(super) sequences: segmint_core::lease::Timing,
}

impl Cluster {
    /// The databases `list` with their configured classes `configured` (the layout
    /// before any is read), the default protocol, snowflake spec and sequence leases.
    pub(super) fn new(
        list: Vec<Database>,
        configured: Vec<Residue>,
        timing: Timing,
        clock: Arc<dyn Clock>,
    ) -> Cluster {
        let sequences = crate::config::SequencesConfig::default();
        Cluster {
            names: list.iter().map(|d| d.name.clone()).collect(),
            list,
            timing,
            protocol: Protocol::default(),
            clock,
            usual_fetch_us: AtomicU64::new(0),
            layouts: Layouts::configured(configured),
            snowflake: Spec::default(),
            sequences: segmint_core::lease::Timing::new(sequences.lease, sequences.grace),
        }
    }

    /// The configured databases' names, in configuration order.
    pub fn names(&self) -> &[String] {
        &self.names
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

    /// Runs `op` on database `i` within the fetch timeout, recording the outcome in the
    /// database's health by the failure's [`Verdict`]: a database down is backed off
    /// (doubling), one unusable as it is for the longest back-off, a transient failure
    /// (a lost transaction) not at all; a success clears the back-off.
    pub(super) async fn call<T>(
        &self,
        i: usize,
        op: impl Future<Output = Result<T, DbError>>,
    ) -> Result<T, DbError> {
        self.call_within(i, self.timing.fetch_timeout, op).await
    }

    /// [`Cluster::call`] within `limit`: an admin step that writes many rows in one
    /// transaction (a layout change's worker IDs) is not judged by a request's timeout.
    pub(super) async fn call_within<T>(
        &self,
        i: usize,
        limit: Duration,
        op: impl Future<Output = Result<T, DbError>>,
    ) -> Result<T, DbError> {
        let result = self.timed_within(limit, op).await;
        let db = &self.list[i];
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
                        tracing::debug!(database = %self.list[i].name, error = %e, "transient failure; retried, not backed off");
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
        let bound = self.protocol.step_timeout.max(self.timing.fetch_timeout);
        self.call_within(i, bound, op).await
    }

    /// Runs `op` on every database at once, each an admin step (bounded by
    /// [`Cluster::step`]'s bound: reading a million bizs takes seconds).
    pub(super) async fn on_all<'a, T, F>(
        &'a self,
        op: impl Fn(&'a dyn SegmentStore) -> F,
    ) -> Vec<Result<T, DbError>>
    where
        F: Future<Output = Result<T, DbError>> + 'a,
    {
        join_all((0..self.list.len()).map(|i| self.step(i, op(self.list[i].store.as_ref())))).await
    }

    /// Runs `op` on the configured database `name`, an admin step; the error as text.
    pub(super) async fn on_named<'a, T, F>(
        &'a self,
        name: &str,
        op: impl FnOnce(&'a dyn SegmentStore) -> F,
    ) -> Result<T, String>
    where
        F: Future<Output = Result<T, DbError>> + 'a,
    {
        let i = self
            .names
            .iter()
            .position(|n| n == name)
            .ok_or_else(|| format!("database \"{name}\" is not configured"))?;
        self.step(i, op(self.list[i].store.as_ref()))
            .await
            .map_err(|e| e.to_string())
    }

    /// Records that database `i` answered but may not be used as it is: it is skipped
    /// for the longest back-off at once.
    pub(super) fn unusable(&self, i: usize, error: &str) {
        let db = &self.list[i];
        let mut health = db.health.lock();
        let backoff = self.timing.backoff();
        let wait = health.failures.fail_for(backoff.max, self.clock.now());
        health.last_error = Some(error.to_string());
        tracing::warn!(database = %db.name, %error, backoff = ?wait, "database unusable as it is; backing off for the longest back-off");
    }

    /// Runs `op` within the fetch timeout.
    pub(super) async fn timed<T>(
        &self,
        op: impl Future<Output = Result<T, DbError>>,
    ) -> Result<T, DbError> {
        self.timed_within(self.timing.fetch_timeout, op).await
    }

    /// Runs `op` within `limit`.
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
        let db = &self.list[i];
        let mut health = db.health.lock();
        let backoff = health
            .failures
            .fail(self.timing.backoff(), self.clock.now());
        health.last_error = Some(error.to_string());
        tracing::warn!(database = %db.name, %error, ?backoff, "database failed; backing off");
    }

    /// Whether database `i` may be read: not backed off (it may be fenced).
    pub(super) fn is_reachable(&self, i: usize) -> bool {
        self.list[i]
            .health
            .lock()
            .failures
            .is_over(self.clock.now())
    }
}
