//! This server's snowflake worker: a worker ID leased from the databases, kept renewed,
//! and IDs issued only while that cannot repeat one.
//!
//! Three rules make a worker ID's IDs unique across its holders, whatever their clocks:
//! - **Bound.** Every renewal records `bound_ms` (the holder's clock plus the lease) in
//!   the lease row before the holder issues up to it; the holder never issues a
//!   timestamp above the bound it recorded, and a later holder never issues one at or
//!   below the row's bound.
//! - **Deadline** and **waiting out**: the core's holder machine
//!   (`segmint_core::snowflake::holder`), which decides when the lease loop takes and
//!   renews and whether an ID may be issued; this module carries it out. The deadline
//!   is checked after the ID's timestamp was read: a process frozen by SIGSTOP past its
//!   lease issues nothing after SIGCONT.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use prometheus::IntCounter;

use crate::biz::BizTag;
use crate::config::SnowflakeConfig;
use crate::metrics::SnowflakeMetrics;
use crate::snowflake::holder::{Held, Holder, NotIssuing, Renewal, Renewed, Step};
use crate::snowflake::{Clock, Generator, Layout, Pause, SnowflakeError, SystemClock, SystemPause};
use crate::store::{Lease, Store};

/// Why no snowflake ID was issued.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IssueError {
    #[error("snowflake IDs are not served for biz `{0}`")]
    NotServed(BizTag),
    #[error("no worker ID is leased yet: {0}")]
    NoWorkerId(String),
    #[error(
        "the clock is {by} ms behind the last timestamp issued; no snowflake ID until it has caught up"
    )]
    ClockBehind {
        /// Milliseconds to wait.
        by: i64,
    },
    #[error("{0}")]
    Clock(SnowflakeError),
    #[error("count {count} is above {max}, the IDs one server issues in a second in this layout")]
    BatchTooLarge {
        /// The IDs asked for.
        count: usize,
        /// The IDs of a second of the layout's ticks.
        max: u64,
    },
}

impl IssueError {
    /// How long a caller should wait before asking again, when known.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            IssueError::NoWorkerId(_) => Some(Duration::from_secs(1)),
            IssueError::ClockBehind { by } => {
                Some(Duration::from_millis(u64::try_from(*by).unwrap_or(0)))
            }
            _ => None,
        }
    }
}

/// A [`Pause`] that counts the backward clock steps it waited out.
struct Counting {
    inner: SystemPause,
    waited: u64,
}

impl Pause for Counting {
    fn pause_ms(&mut self, ms: u64) {
        // The generator pauses 0 ms to spin to the next tick, more only to wait out a
        // clock that went back.
        if ms > 0 {
            self.waited += 1;
        }
        self.inner.pause_ms(ms);
    }

    fn sequence_start(&mut self, bound: u16) -> u16 {
        self.inner.sequence_start(bound)
    }
}

/// What this server issues with while its lease is active.
struct Active {
    generator: Generator<SystemClock>,
    pause: Counting,
    /// The bound recorded in the lease row: nothing is issued above it.
    bound_ms: i64,
    /// Whether the clock being behind was logged, so that a stretch of refusals logs
    /// once.
    behind_logged: bool,
}

type State = Holder<Lease, Box<Active>>;

/// What the renewal loop needs to know of the state, read under the lock.
enum Phase {
    Idle,
    Holding { lease: Lease, last_ms: i64 },
    Stopped,
}

/// This server's snowflake worker.
pub struct Worker {
    store: Arc<Store>,
    config: SnowflakeConfig,
    /// This process, as written in the lease rows.
    holder: String,
    /// The origin of the holder machine's clock: the store's monotonic clock less this.
    origin: Instant,
    /// Plain mutex: held to issue a batch (up to a used-up tick: the wait for the next
    /// is outside it) or update the state, never across an await.
    state: Mutex<State>,
    /// Why the last try to lease a worker ID failed (a spec the databases do not
    /// share, no database answering…), for the 503 of a request while none is held.
    /// Plain mutex: set and read briefly, never across an await.
    refused: Mutex<Option<String>>,
    metrics: SnowflakeMetrics,
    /// The IDs counter of every configured biz.
    issued: HashMap<BizTag, IntCounter>,
}

impl Worker {
    /// A worker with no lease yet; [`Worker::run`] leases and renews.
    pub fn new(store: Arc<Store>, config: SnowflakeConfig) -> Worker {
        let metrics = store.metrics().snowflake().clone();
        let issued = config
            .bizs
            .iter()
            .map(|b| (b.clone(), metrics.ids_counter(b)))
            .collect();
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_owned())
            .unwrap_or_else(|_| "unknown".into());
        let holder = format!(
            "{host}:{}:{:08x}",
            std::process::id(),
            rand::random::<u32>()
        );
        let timing = crate::lease::Timing::new(config.lease, config.grace);
        Worker {
            origin: store.now(),
            state: Mutex::new(Holder::new(timing, config.renew)),
            store,
            config,
            holder,
            refused: Mutex::new(None),
            metrics,
            issued,
        }
    }

    /// Whether `biz` gets snowflake IDs here.
    pub fn serves(&self, biz: &BizTag) -> bool {
        self.config.serves(biz)
    }

    /// The snowflake epoch (Unix milliseconds).
    pub fn epoch_ms(&self) -> i64 {
        self.config.epoch_ms
    }

    /// The bit layout of the IDs issued here.
    pub fn layout(&self) -> Layout {
        self.config.layout
    }

    /// The worker ID this server issues with, if it does.
    pub fn worker_id(&self) -> Option<u16> {
        match self.state.lock().held() {
            Held::Active { lease, .. } => Some(lease.worker_id),
            _ => None,
        }
    }

    /// The holder machine's clock: monotonic, since this worker was made.
    fn now(&self) -> Duration {
        self.store.now().saturating_duration_since(self.origin)
    }

    /// `n` snowflake IDs of `biz`, increasing, and the worker ID they carry.
    ///
    /// # Errors
    /// [`IssueError`] when `biz` is not served, `n` is above a second's IDs of the
    /// layout, no worker ID is held or its lease may have run out, or the clock is
    /// behind; no ID of a failed batch is issued.
    pub async fn next_ids(&self, biz: &BizTag, n: usize) -> Result<(u16, Vec<i64>), IssueError> {
        let counter = self
            .issued
            .get(biz)
            .filter(|_| self.config.enabled)
            .ok_or_else(|| IssueError::NotServed(biz.clone()))?;
        // A batch waits for as many ticks as it needs: no more than a second's (a coarse
        // layout's tick may hold few IDs).
        let max = self.config.layout.ids_per_second();
        if u64::try_from(n).unwrap_or(u64::MAX) > max {
            return Err(IssueError::BatchTooLarge { count: n, max });
        }
        let mut ids = Vec::with_capacity(n);
        let mut worker_id = None;
        while let Some(next_tick_ms) = self.issue_some(&mut ids, n, &mut worker_id)? {
            // The tick's sequences are used up and the next is more than a millisecond
            // away: waited for without the lock, so that renewals go on meanwhile.
            let left = next_tick_ms.saturating_sub(SystemClock.now_ms());
            let unit = u64::from(self.config.layout.unit_ms);
            tokio::time::sleep(Duration::from_millis(
                u64::try_from(left).unwrap_or(1).clamp(1, unit),
            ))
            .await;
        }
        counter.inc_by(ids.len() as u64);
        Ok((worker_id.unwrap_or_default(), ids))
    }

    /// Issues into `ids` until it holds `n`, under the state lock; returns when the
    /// next tick starts if this one's sequences ran out first. Every ID of one batch
    /// carries the worker ID of its first (`worker_id`).
    fn issue_some(
        &self,
        ids: &mut Vec<i64>,
        n: usize,
        worker_id: &mut Option<u16>,
    ) -> Result<Option<i64>, IssueError> {
        let mut state = self.state.lock();
        let (lease, active, deadline) = match state.issuing(self.now()) {
            Ok(issuing) => issuing,
            Err(NotIssuing::Waiting(left)) => {
                return Err(IssueError::NoWorkerId(format!(
                    "worker ID leased, waiting {} ms more for earlier holders to stop",
                    left.as_millis()
                )));
            }
            Err(NotIssuing::Idle) => {
                return Err(IssueError::NoWorkerId(
                    self.refused.lock().clone().map_or_else(
                        || "no database has leased one to this server".into(),
                        |why| format!("no database has leased one to this server: {why}"),
                    ),
                ));
            }
            Err(NotIssuing::Stopped) => {
                return Err(IssueError::NoWorkerId("the server is stopping".into()));
            }
        };
        let lease_worker = lease.worker_id;
        if *worker_id.get_or_insert(lease_worker) != lease_worker {
            return Err(IssueError::NoWorkerId(
                "the worker ID changed while the batch waited for a tick".into(),
            ));
        }
        let mut next_tick = None;
        let issued = (ids.len()..n).try_for_each(|_| {
            if next_tick.is_none() {
                match active.next_id(|| self.now(), deadline)? {
                    Issued::Id(id) => ids.push(id),
                    Issued::NextTickAt(ms) => next_tick = Some(ms),
                }
            }
            Ok(())
        });
        let waited = std::mem::take(&mut active.pause.waited);
        if waited > 0 {
            self.metrics.clock_back("waited", waited);
        }
        match issued {
            Ok(()) => {
                active.behind_logged = false;
                Ok(next_tick)
            }
            Err(e) => {
                if let IssueError::ClockBehind { by } = e {
                    self.metrics.clock_back("refused", 1);
                    if !std::mem::replace(&mut active.behind_logged, true) {
                        tracing::error!(
                            by_ms = by,
                            worker_id = lease_worker,
                            "the clock went back; no snowflake ID until it has caught up"
                        );
                    }
                }
                Err(e)
            }
        }
    }

    /// Leases a worker ID and keeps it renewed, until aborted. Never returns.
    pub async fn run(self: Arc<Self>) {
        loop {
            let pause = self.step().await;
            tokio::time::sleep(pause).await;
        }
    }

    /// One round of the lease loop; returns how long to wait before the next.
    async fn step(&self) -> Duration {
        let phase = {
            let state = self.state.lock();
            match (state.step(), state.held()) {
                (Step::Take, _) => Phase::Idle,
                (Step::Rest, _) => Phase::Stopped,
                (Step::Renew(lease), Held::Active { issuing, .. }) => Phase::Holding {
                    lease: lease.clone(),
                    last_ms: issuing.generator.last_ms(),
                },
                (Step::Renew(lease), _) => Phase::Holding {
                    lease: lease.clone(),
                    last_ms: lease.floor_ms,
                },
            }
        };
        match phase {
            Phase::Stopped => Duration::from_secs(3600),
            Phase::Idle => self.take().await,
            Phase::Holding { lease, last_ms } => self.renew(&lease, last_ms).await,
        }
    }

    /// The lease's length in milliseconds.
    fn lease_ms(&self) -> i64 {
        i64::try_from(self.config.lease.as_millis()).unwrap_or(i64::MAX)
    }

    async fn take(&self) -> Duration {
        let sent = self.now();
        match self
            .store
            .take_lease(&self.holder, self.config.lease, self.config.grace)
            .await
        {
            Ok(lease) => {
                self.metrics.acquisition("ok");
                *self.refused.lock() = None;
                tracing::info!(
                    worker_id = lease.worker_id,
                    database = self.store.cluster().database_name(lease.database),
                    floor_ms = lease.floor_ms,
                    wait_ms = self.lease_ms(),
                    "leased a snowflake worker ID; waiting out earlier holders before the first ID"
                );
                self.metrics.set_lease(Some(lease.worker_id), "waiting");
                self.state.lock().taken(lease, sent)
            }
            Err(e) => {
                self.metrics.acquisition("failed");
                tracing::warn!(error = %e, "cannot lease a snowflake worker ID; trying again");
                *self.refused.lock() = Some(e.to_string());
                self.config.renew
            }
        }
    }

    async fn renew(&self, lease: &Lease, last_ms: i64) -> Duration {
        let sent = self.now();
        let bound_ms = SystemClock.now_ms().saturating_add(self.lease_ms());
        let renewed = self
            .store
            .cluster()
            .renew_lease(lease, self.lease_ms(), last_ms, bound_ms)
            .await;
        let failed = renewed.as_ref().err().map(ToString::to_string);
        let answer = match renewed {
            Ok(Some(renewed)) => Renewal::Renewed(renewed),
            Ok(None) => Renewal::Lost,
            Err(_) => Renewal::Failed,
        };
        // The state may have moved on while the renewal ran (stopped, or lapsed).
        let same = |l: &Lease| l.worker_id == lease.worker_id && l.version == lease.version;
        let mut state = self.state.lock();
        let (outcome, next) = state.renewed(same, answer, (sent, self.now()), |renewed| {
            self.activate(renewed, bound_ms)
        });
        if let Ok((_, active, _)) = state.issuing(self.now()) {
            active.bound_ms = active.bound_ms.max(bound_ms);
        }
        drop(state);
        self.note_renewal(outcome, lease.worker_id, failed);
        next
    }

    /// What this server issues with once its wait is over, from the lease renewed
    /// (`None`, logged, when the layout cannot take the worker ID).
    fn activate(&self, renewed: &Lease, bound_ms: i64) -> Option<Box<Active>> {
        let layout = self.config.layout;
        match Generator::new(
            SystemClock,
            self.config.epoch_ms,
            layout,
            u32::from(renewed.worker_id),
            renewed.floor_ms,
        ) {
            Ok(generator) => {
                tracing::info!(
                    worker_id = renewed.worker_id,
                    layout = %layout,
                    ids_below = format!("2^{}", layout.total_bits()),
                    js_safe = layout.js_safe(),
                    "issuing snowflake IDs"
                );
                self.metrics.set_lease(Some(renewed.worker_id), "active");
                Some(Box::new(Active {
                    generator,
                    pause: Counting {
                        inner: SystemPause::default(),
                        waited: 0,
                    },
                    bound_ms,
                    behind_logged: false,
                }))
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot issue with the leased worker ID");
                None
            }
        }
    }

    /// Counts and logs what a renewal of `worker_id`'s lease came to (`failed`: why
    /// it failed, if it did).
    fn note_renewal(&self, outcome: Renewed, worker_id: u16, failed: Option<String>) {
        match outcome {
            Renewed::Stale => {}
            Renewed::Waiting | Renewed::Activated | Renewed::Kept | Renewed::NotActivated => {
                self.metrics.renewal("ok")
            }
            Renewed::Lost => {
                self.metrics.renewal("lost");
                self.metrics.set_lease(None, "none");
                tracing::error!(
                    worker_id,
                    "the snowflake worker ID's lease is no longer this server's (taken over, or its database went back in time); stopped issuing with it"
                );
            }
            Renewed::Lapsed => {
                self.metrics.renewal("failed");
                self.metrics.set_lease(None, "none");
                tracing::error!(
                    worker_id,
                    error = failed.unwrap_or_default(),
                    "could not renew the snowflake worker ID's lease in time; stopped issuing with it"
                );
            }
            Renewed::Retry => {
                self.metrics.renewal("failed");
                tracing::warn!(
                    worker_id,
                    error = failed.unwrap_or_default(),
                    "could not renew the snowflake worker ID's lease; trying again"
                );
            }
        }
    }

    /// Stops issuing and releases the lease, recording the last timestamp issued, so
    /// that the worker ID is free at once. Bounded by the store's fetch timeout.
    pub async fn release(&self) {
        let held = match self.state.lock().stop() {
            Held::Active { lease, issuing, .. } => {
                Some((lease, issuing.generator.last_ms(), issuing.bound_ms))
            }
            Held::Waiting { lease, .. } => {
                let floor = lease.floor_ms;
                Some((lease, floor, floor))
            }
            Held::Idle | Held::Stopped => None,
        };
        self.metrics.set_lease(None, "none");
        let Some((lease, last_ms, bound_ms)) = held else {
            return;
        };
        let grace_ms = i64::try_from(self.config.grace.as_millis()).unwrap_or(i64::MAX);
        match self
            .store
            .cluster()
            .renew_lease(&lease, -grace_ms.saturating_add(1), last_ms, bound_ms)
            .await
        {
            Ok(Some(_)) => {
                tracing::info!(
                    worker_id = lease.worker_id,
                    last_ms,
                    "released the snowflake worker ID"
                );
            }
            Ok(None) => {
                tracing::warn!(
                    worker_id = lease.worker_id,
                    "not releasing the snowflake worker ID: it is no longer this server's"
                );
            }
            Err(e) => {
                tracing::warn!(worker_id = lease.worker_id, error = %e, "could not release the snowflake worker ID; it is free once its lease and grace period have run out");
            }
        }
    }
}

/// What [`Active::next_id`] gave.
enum Issued {
    Id(i64),
    /// The tick's sequences are used up; the next starts at this Unix millisecond.
    NextTickAt(i64),
}

impl Active {
    /// One ID, checked against the lease's `deadline` after its timestamp was read;
    /// `now` reads the holder machine's clock.
    fn next_id(
        &mut self,
        now: impl Fn() -> Duration,
        deadline: Duration,
    ) -> Result<Issued, IssueError> {
        let id = match self.generator.next_id(&mut self.pause) {
            Ok(id) => id,
            Err(SnowflakeError::TickUsedUp { next_tick_ms }) => {
                return Ok(Issued::NextTickAt(next_tick_ms));
            }
            Err(SnowflakeError::ClockBehind { by }) => {
                return Err(IssueError::ClockBehind { by });
            }
            Err(e) => return Err(IssueError::Clock(e)),
        };
        if now() >= deadline {
            return Err(IssueError::NoWorkerId(
                "the worker ID's lease was not renewed in time".into(),
            ));
        }
        if self.generator.last_ms() > self.bound_ms {
            return Err(IssueError::NoWorkerId(
                "the worker ID's lease was not renewed in time (the clock passed its recorded bound)".into(),
            ));
        }
        Ok(Issued::Id(id))
    }
}
