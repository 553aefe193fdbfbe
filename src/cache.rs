//! Per-biz double buffers: IDs come from memory, segments from the store in the
//! background.
//!
//! # Locks
//!
//! The request path takes one plain lock per biz, `Buffer.state`, for arithmetic only:
//! nothing awaits under it, and no code that can panic runs under it.
//! The store's locks and their order are in the module docs of the store's cluster
//! (`crates/store/src/cluster/mod.rs`); none of the locks below is held while a store
//! lock is taken.
//!
//! | lock | kind | protects |
//! | --- | --- | --- |
//! | `Cache.buffers` | `ArcSwap<HashMap>` | the per-biz buffers; copied on a new biz |
//! | `Buffer.state` | `parking_lot::Mutex<State>` | the double buffer, issue count, origins, `closed`; arithmetic only |
//! | `Buffer.sizing` | `parking_lot::Mutex<Sizing>` | rates and the last step; off the request path |
//! | `Buffer.fetched` | `tokio::sync::watch` | wakes requests waiting for a fetch |
//! | `AppState.names.index` | `ArcSwap<NameIndex>` | the biz names in order; read lock-free by a listing, replaced after the catalog changed |
//! | `AppState.names.building` | `tokio::sync::Mutex` | single flight of name-index rebuilds; held across a rebuild, which runs on a blocking thread |
//! | `BizMetrics.counts` | `parking_lot::Mutex<HashMap>` | each biz's counts; brief (clone the `Arc`) |
//! | `BizMetrics.exported` | `parking_lot::Mutex` | the bizs with series of their own; held through a scrape's export of the biz metrics |
//!
//! Nesting: `Buffer.state` and `Buffer.sizing` never nest (`Cache::stats` and
//! `Cache::sample` release `state` first), nor take a store lock. `FetchGuard` takes
//! `state` when dropped: it is made only after `Buffer::serve` returned.
//! `BizMetrics.exported` → `BizMetrics.counts`, each biz's `scraped`:
//! `BizMetrics::set_state` copies the counts out and reads each biz's counters, one lock
//! at a time, while holding `exported`.
//!
//! Two other locks hold for a while: `Worker`'s `state` lock (in `src/worker.rs`) is
//! held while `Generator::next_id` waits out a clock step back (a thread sleep of up to
//! 10 ms) or spins to the next tick, on an HTTP worker thread; it nests
//! nothing but metrics, nor does `AppState`'s `handed_out` lock.

use std::collections::HashMap;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use tokio::sync::watch;

use crate::biz::BizTag;
use crate::metrics::{BizCounts, BizStats, PeriodStats};
use crate::rate::{RateTracker, runway, runway_duration};
use crate::segment::{DoubleBuffer, Held, SegmentRange, Window, plan_give_back};
use crate::shape::Periodic;
use crate::shape::clocks::human_ms;
use crate::step::{StepHint, StepReason};
use crate::store::{ClockFault, Reservation, Store, StoreError};

/// Longest the give-back at stop takes, whatever the number of bizs and however the
/// databases fail; what is not given back by then is wasted.
pub const GIVE_BACK_LIMIT: Duration = Duration::from_secs(3);

/// Longest the stop waits for a biz's lock: it is held for arithmetic only, so a lock
/// held longer belongs to a stuck request.
const LOCK_WAIT: Duration = Duration::from_millis(200);

/// Issues IDs for every biz from its double buffer.
pub struct Cache {
    store: Arc<Store>,
    /// One buffer per biz, created on first use. Only bizs the catalog knows get one,
    /// so the map is bounded by the configured bizs. Read on every request without a
    /// lock or a reference count (both HTTP workers would write to them); replaced
    /// with a copy when a biz is added.
    buffers: ArcSwap<HashMap<BizTag, Arc<Buffer>>>,
    /// Share of a segment issued before the next is fetched (the `preload_percent` setting).
    prefetch_percent: u8,
    /// Longest a request waits for the in-flight fetch when both segments are empty.
    wait_timeout: Duration,
}

struct Buffer {
    biz: BizTag,
    /// For a biz whose counter restarts each period, the window of the period this
    /// buffer issues: each segment is reserved within it. A new period gets a new
    /// buffer; the old one's IDs are never issued after it.
    window: Option<Window>,
    /// Plain mutex: held for arithmetic only, never across an await.
    state: Mutex<State>,
    /// Bumped after every fetch completes; requests waiting for a segment watch it.
    fetched: watch::Sender<u64>,
    /// The biz's counts for the metrics: IDs issued, brought up to date from
    /// [`State::issued`] when the figures are read (so that issuing an ID touches
    /// nothing shared but the buffer's lock), and requests that waited for a fetch (off
    /// the path of a request served from memory).
    counts: Arc<BizCounts>,
    /// Rates and the last step; off the request path (sampler, fetches, scrapes).
    sizing: Mutex<Sizing>,
}

struct Sizing {
    rates: RateTracker,
    /// Step, class modulus and reason of the last segment reserved.
    last: Option<(i64, i64, StepReason)>,
}

impl Sizing {
    /// Counting from zero now, so that the IDs issued before the first sample count.
    fn starting_now() -> Sizing {
        let mut rates = RateTracker::new();
        rates.record(Instant::now(), 0);
        Sizing { rates, last: None }
    }
}

struct State {
    buffer: DoubleBuffer,
    /// Why the last fetch failed; returned to the requests that waited for it.
    last_error: Option<StoreError>,
    /// Where the last few segments came from: `(segment, database, version)`.
    origins: Vec<(SegmentRange, usize, i64)>,
    /// Set when the server stops: nothing more is issued.
    closed: bool,
    /// IDs issued from this buffer since start; sampled for the rate.
    issued: u64,
    /// Of those, the IDs already added to the buffer's `counts`.
    reported: u64,
}

/// What a request takes from a biz's buffer.
trait Portion {
    /// IDs still wanted.
    fn need(&self) -> usize;
    /// Takes what it can from `buffer`; returns how many IDs it took.
    fn fill(&mut self, buffer: &mut DoubleBuffer) -> u64;
}

/// `n` IDs, one by one.
struct Ids {
    n: usize,
    ids: Vec<i64>,
}

impl Ids {
    fn new(n: usize) -> Ids {
        Ids {
            n,
            ids: Vec::with_capacity(n),
        }
    }
}

impl Portion for Ids {
    fn need(&self) -> usize {
        self.n.saturating_sub(self.ids.len())
    }

    fn fill(&mut self, buffer: &mut DoubleBuffer) -> u64 {
        let need = self.need();
        // Only what completes the request, unless the buffer cannot hold more: a
        // request that then fails has not burnt the cache.
        if buffer.remaining() >= need as u64 || buffer.is_full() {
            buffer.take(need, &mut self.ids) as u64
        } else {
            0
        }
    }
}

/// Up to `n` IDs of one segment, as a segment of their own.
struct Run {
    n: u64,
    run: Option<SegmentRange>,
}

impl Portion for Run {
    fn need(&self) -> usize {
        match self.run {
            Some(_) => 0,
            None => usize::try_from(self.n).unwrap_or(usize::MAX),
        }
    }

    fn fill(&mut self, buffer: &mut DoubleBuffer) -> u64 {
        if self.run.is_some() {
            return 0;
        }
        self.run = buffer.carve(self.n);
        self.run.map_or(0, |r| r.len())
    }
}

/// This server's clock, in Unix milliseconds.
fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl Cache {
    pub fn new(store: Arc<Store>, prefetch_percent: u8, wait_timeout: Duration) -> Self {
        Cache {
            store,
            buffers: ArcSwap::from_pointee(HashMap::new()),
            prefetch_percent,
            wait_timeout,
        }
    }

    /// Runs `f` on the buffer of `biz` for `window` (see [`Buffer::window`]), created
    /// on first use. The buffer of a period is replaced by that of a later one, never
    /// by an earlier one: once this server issues a period, its clock going back (or a
    /// zone falling back over midnight) keeps it there.
    fn with_buffer<R>(
        &self,
        biz: &BizTag,
        window: Option<Window>,
        f: impl FnOnce(&Arc<Buffer>) -> R,
    ) -> R {
        let serves = |b: &Buffer| match (b.window, window) {
            (Some(have), Some(want)) => have.floor >= want.floor,
            (None, None) | (Some(_), None) => true,
            (None, Some(_)) => false,
        };
        let old = match self.buffers.load().get(biz) {
            Some(b) if serves(b) => return f(b),
            old => old.cloned(),
        };
        // The rates and the last step carry over to the next period's buffer: its
        // first segment is sized for the load, as any other.
        let sizing = old.map_or_else(Sizing::starting_now, |b| {
            std::mem::replace(&mut *b.sizing.lock(), Sizing::starting_now())
        });
        let fresh = Arc::new(Buffer {
            biz: biz.clone(),
            window,
            state: Mutex::new(State {
                buffer: DoubleBuffer::new(self.prefetch_percent),
                last_error: None,
                origins: Vec::new(),
                closed: false,
                issued: 0,
                reported: 0,
            }),
            fetched: watch::Sender::new(0),
            counts: self.store.metrics().bizs().counts(biz),
            sizing: Mutex::new(sizing),
        });
        // Another request may add the biz (or a later period) meanwhile: it stays.
        self.buffers.rcu(|buffers| {
            let mut buffers = HashMap::clone(buffers);
            match buffers.get(biz) {
                Some(b) if serves(b) => {}
                _ => {
                    buffers.insert(biz.clone(), fresh.clone());
                }
            }
            buffers
        });
        f(self.buffers.load().get(biz).unwrap_or(&fresh))
    }

    /// Every buffer.
    fn buffers(&self) -> Vec<Arc<Buffer>> {
        self.buffers.load().values().cloned().collect()
    }

    /// `n` IDs of `biz`. Served from memory while the cache holds them; starts the
    /// background fetch of the next segment at the prefetch point; waits only when
    /// the cache is short, and then for the one fetch in flight. A request that fails
    /// leaves the cache as it was, unless it was larger than both segments together.
    ///
    /// # Errors
    /// The [`StoreError`] of the fetch it waited for, or [`StoreError::Unavailable`]
    /// when no segment arrived within the wait timeout.
    pub async fn next_ids(&self, biz: &BizTag, n: usize) -> Result<Vec<i64>, StoreError> {
        self.take(biz, Ids::new(n), None).await.map(|p| p.ids)
    }

    /// [`Cache::next_ids`] of a biz whose counter restarts each `period`: the period
    /// this server's clock is in, or a later one this server issued already. When
    /// every database has begun the next period (a server whose clock is ahead began
    /// it), its IDs are issued: a period's IDs come from its window of the rows alone,
    /// so whichever clock is right, none is issued twice.
    ///
    /// # Errors
    /// As [`Cache::next_ids`]; [`StoreError::PeriodFull`] when the period's counter is
    /// used up.
    pub async fn next_ids_in(
        &self,
        biz: &BizTag,
        n: usize,
        period: &Periodic,
    ) -> Result<Vec<i64>, StoreError> {
        let ids = self.take_in(biz, period, || Ids::new(n)).await?;
        Ok(ids.ids)
    }

    /// Up to `n` IDs of a biz whose counter restarts each `period`, as a segment of
    /// their own, carved out of this server's buffer for the period as
    /// [`Cache::next_ids_in`] would issue them: what a client library gets. However
    /// many clients cross into a new period at once, the databases see this server's
    /// one reservation per segment of its buffer, not one per client. Returns the
    /// segment and this server's clock (Unix ms) read once it was carved.
    ///
    /// # Errors
    /// As [`Cache::next_ids_in`].
    pub async fn carve_in(
        &self,
        biz: &BizTag,
        n: u64,
        period: &Periodic,
    ) -> Result<(SegmentRange, i64), StoreError> {
        let run = self.take_in(biz, period, || Run { n, run: None }).await?;
        // Read after the carve, which may have waited for a fetch: the period's time
        // left is counted from then.
        let now_ms = unix_ms();
        run.run
            .map(|range| (range, now_ms))
            .ok_or_else(|| StoreError::Unavailable(format!("no segment of biz `{biz}`")))
    }

    /// A portion of `biz`'s buffer for the period this server's clock is in, or for the
    /// next ones while the databases say they have begun; never of a period that no
    /// database's clock has begun
    /// ([`Cluster::may_begin`](segmint_store::Cluster::may_begin)). A server whose clock
    /// is behind every database's by more than the tolerance (stepped back, or a
    /// restart with a wrong clock) takes the period by their clocks instead
    /// ([`Cluster::follow_ms`](segmint_store::Cluster::follow_ms)): its numbers never go
    /// back to a period they have left.
    async fn take_in<P: Portion>(
        &self,
        biz: &BizTag,
        period: &Periodic,
        portion: impl Fn() -> P,
    ) -> Result<P, StoreError> {
        let now = unix_ms();
        let own = period.code_at(now.saturating_add(self.store.cluster().follow_ms()));
        let mut code = own;
        let mut result = self.take_begun(biz, period, own, code, portion()).await;
        for _ in 0..2 {
            if !matches!(result, Err(StoreError::PeriodPassed(_))) {
                break;
            }
            code = period.next(code);
            result = self.take_begun(biz, period, own, code, portion()).await;
        }
        result
    }

    /// `portion` of `biz`'s buffer for period `code`, once a database's clock has begun
    /// it too; `own` is the period this server's clock is in. A period before the one
    /// the biz's rows were moved into ([`Periodic::interim_until`]) comes from its
    /// interim rows, with a buffer of their own.
    async fn take_begun<P: Portion>(
        &self,
        biz: &BizTag,
        period: &Periodic,
        own: i64,
        code: i64,
        portion: P,
    ) -> Result<P, StoreError> {
        let window = period.window(code);
        let interim = period
            .interim_until()
            .filter(|&until| code < until)
            .map(|until| biz.interim(until));
        let rows = interim.as_ref().unwrap_or(biz);
        // A period this server issues already was begun.
        let begun = self
            .buffers
            .load()
            .get(rows)
            .is_some_and(|b| b.window.is_some_and(|w| w.floor >= window.floor));
        if !begun
            && let Some(begins_ms) = period.begins_ms(code)
            && let Err(not) = self.store.cluster().may_begin(begins_ms)
        {
            let tolerance = human_ms(self.store.cluster().clock_tolerance_ms());
            return Err(match code == own {
                true => StoreError::Clock {
                    biz: biz.to_string(),
                    fault: ClockFault::Ahead,
                    detail: format!(
                        "this server's clock is {} ahead of the databases' (the latest one read): it does not begin period {} before a database's clock reaches it (tolerance {tolerance})",
                        human_ms(not.server_ahead_ms),
                        period.label(code)
                    ),
                },
                false => StoreError::Clock {
                    biz: biz.to_string(),
                    fault: ClockFault::RowsAhead,
                    detail: format!(
                        "every database's row is past period {}, the one this server's clock and the databases' are in; period {} is {} away by the latest database clock: a clock that was ahead moved the rows",
                        period.label(own),
                        period.label(code),
                        human_ms(not.early_ms)
                    ),
                },
            });
        }
        self.take(rows, portion, Some(window)).await
    }

    /// `portion` of `biz` from its buffer for `window`.
    async fn take<P: Portion>(
        &self,
        biz: &BizTag,
        mut portion: P,
        window: Option<Window>,
    ) -> Result<P, StoreError> {
        let mut waited = false;
        loop {
            // Nothing of the buffer is held across the wait but the receiver.
            let step = self.with_buffer(biz, window, |buffer| {
                let (step, fetch) = buffer.serve(&mut portion, waited);
                // Started only once the state's lock is released: nothing that can
                // panic runs under it, and the fetch's guard, which takes the lock when
                // dropped, never exists while it is held.
                if let Some(cached) = fetch {
                    self.spawn_fetch(buffer.clone(), cached);
                }
                if step.is_continue() && !waited {
                    buffer.counts.waited();
                }
                step.map_continue(|()| buffer.fetched.subscribe())
            });
            let mut fetched = match step {
                ControlFlow::Break(done) => return done.map(|()| portion),
                ControlFlow::Continue(fetched) => fetched,
            };
            if tokio::time::timeout(self.wait_timeout, fetched.changed())
                .await
                .is_err()
            {
                return Err(StoreError::Unavailable(format!(
                    "no segment of biz `{biz}` arrived within {:?}",
                    self.wait_timeout
                )));
            }
            waited = true;
        }
    }

    /// Stops issuing and gives back the unissued IDs of every cache where that is
    /// provably safe (see [`plan_give_back`]); the rest are wasted, never reissued.
    /// Called once the server has stopped serving. Every biz and database at once, a
    /// database backing off after failures skipped, and all of it within
    /// [`GIVE_BACK_LIMIT`]: a dead database costs the stop that long at most, whatever
    /// the number of bizs. Returns `(given back, wasted)`.
    pub async fn give_back(&self) -> (u64, u64) {
        let deadline = tokio::time::Instant::now() + GIVE_BACK_LIMIT;
        let closed: Vec<(Arc<Buffer>, Vec<Held>)> = self
            .buffers()
            .into_iter()
            .filter_map(|b| {
                let held = b.close()?;
                Some((b, held))
            })
            .collect();
        let backs = futures_util::future::join_all(closed.iter().map(|(b, held)| {
            futures_util::future::join_all(plan_give_back(held).into_iter().map(|plan| {
                self.store
                    .cluster()
                    .give_back(&b.biz, plan, deadline, "server")
            }))
        }))
        .await;
        let metrics = self.store.metrics().bizs();
        let (mut given, mut wasted) = (0u64, 0u64);
        for ((b, held), backs) in closed.iter().zip(backs) {
            let cached = held
                .iter()
                .map(|h| h.remaining)
                .fold(0, u64::saturating_add);
            let back = backs.into_iter().fold(0, u64::saturating_add).min(cached);
            metrics.given_back(&b.biz, back);
            metrics.wasted(&b.biz, cached - back);
            given = given.saturating_add(back);
            wasted = wasted.saturating_add(cached - back);
        }
        (given, wasted)
    }

    /// IDs of `biz` issuable without a fetch.
    pub fn remaining(&self, biz: &BizTag) -> u64 {
        self.buffers
            .load()
            .get(biz)
            .map_or(0, |b| b.state.lock().buffer.remaining())
    }

    /// Samples every biz's issue count at `now`, for its rate and peak. Called about
    /// once a second, on the thread that also handles the stop signal: a biz whose
    /// lock is taken this instant is sampled next time rather than waited for, so
    /// that a request stuck under it cannot keep the server from stopping. Samples
    /// carry their time, so one skipped does not skew the rate.
    pub fn sample(&self, now: Instant) {
        let buffers = self.buffers();
        for b in buffers {
            let Some(issued) = b.state.try_lock().map(|state| state.issued) else {
                continue;
            };
            b.sizing.lock().rates.record(now, issued);
        }
    }

    /// The state of every biz that has served a request, by name. Also brings each
    /// biz's count of IDs issued up to date for the metrics: call it before rendering
    /// them.
    pub fn stats(&self) -> Vec<BizStats> {
        let policy = self.store.step_policy();
        let mut stats: Vec<BizStats> = self
            .buffers
            .load()
            .values()
            .map(|b| b.stats(&policy))
            .collect();
        stats.sort_by(|a, b| a.biz.cmp(&b.biz));
        stats
    }

    /// The state of `biz`, if it has served a request.
    pub fn stats_of(&self, biz: &str) -> Option<BizStats> {
        let biz = BizTag::parse(biz).ok()?;
        let policy = self.store.step_policy();
        self.buffers.load().get(&biz).map(|b| b.stats(&policy))
    }

    /// How many bizs have served a request.
    pub fn in_use(&self) -> usize {
        self.buffers.load().len()
    }

    /// The bizs that have served a request, in no order.
    pub fn names_in_use(&self) -> Vec<BizTag> {
        self.buffers.load().keys().cloned().collect()
    }

    /// Fetches the next segment in the background; `cached` IDs are left meanwhile.
    /// Called without the buffer's state locked: the guard made first clears the
    /// fetch's mark if anything below fails, and takes that lock to do so.
    fn spawn_fetch(&self, buffer: Arc<Buffer>, cached: u64) {
        let guard = FetchGuard(Some(buffer.clone()));
        let store = self.store.clone();
        let (hint, runway) = {
            let sizing = buffer.sizing.lock();
            let hint = StepHint {
                peak_rate: sizing.rates.peak(),
                previous: sizing.last.map(|(step, _, _)| step),
            };
            // The faster of the minute's rate and the last second's, so that a sudden
            // load does not make the runway look longer than it is. An empty cache has
            // requests waiting already: the usual hedge delay applies.
            let rate = sizing.rates.rate().max(sizing.rates.recent());
            (hint, runway_duration(cached, rate))
        };
        tokio::spawn(async move {
            let result = store
                .reserve_in(&buffer.biz, Some(hint), runway, buffer.window)
                .await;
            guard.disarm();
            if let Ok(r) = &result {
                buffer.reserved(&store, r, hint);
            }
            buffer.complete(result);
        });
    }
}

impl Buffer {
    /// The biz's figures; brings its count of IDs issued up to date. Takes `state`,
    /// then `sizing`, never both at once.
    fn stats(&self, policy: &crate::step::StepPolicy) -> BizStats {
        let (cached_ids, issued, period) = {
            let mut state = self.state.lock();
            self.counts
                .issued(state.issued.saturating_sub(state.reported));
            state.reported = state.issued;
            // This buffer is the period's: its counts are the period's.
            let period = self.window.map(|w| {
                let top = state.origins.iter().map(|o| o.0.max_id()).max();
                PeriodStats {
                    issued: state.issued,
                    counter_ratio: top.map_or(0.0, |top| {
                        (top - w.floor) as f64 / (w.ceiling - w.floor).max(1) as f64
                    }),
                }
            });
            (state.buffer.remaining(), state.issued, period)
        };
        let sizing = self.sizing.lock();
        let (rate, peak_rate) = (sizing.rates.rate(), sizing.rates.peak());
        let (step, delta, reason) = match sizing.last {
            Some((step, delta, reason)) => (step, delta, Some(reason)),
            None => (0, 1, None),
        };
        let runway = runway(cached_ids, rate);
        BizStats {
            biz: self.biz.to_string(),
            rate,
            peak_rate,
            step,
            recommended_step: policy.recommended(peak_rate, delta),
            last_step_reason: reason,
            cached_ids,
            runway_seconds: runway.is_finite().then_some(runway),
            issued,
            period,
        }
    }

    /// Stops the buffer issuing; returns its segments with where they came from, or
    /// `None` when its lock stayed taken for [`LOCK_WAIT`] (a stuck request holds it:
    /// its IDs are then neither given back nor issued by this stop).
    fn close(&self) -> Option<Vec<Held>> {
        let Some(mut state) = self.state.try_lock_for(LOCK_WAIT) else {
            tracing::error!(biz = %self.biz, "the biz's cache stayed locked: its unissued IDs are not given back");
            return None;
        };
        state.closed = true;
        let held = state
            .buffer
            .held()
            .into_iter()
            .filter_map(|(range, last_issued, remaining)| {
                let &(_, database, version) =
                    state.origins.iter().rev().find(|(r, _, _)| *r == range)?;
                Some(Held {
                    range,
                    last_issued,
                    remaining,
                    database,
                    version,
                })
            })
            .collect();
        Some(held)
    }

    /// Takes what it can of `portion` (which holds what was taken before), under the
    /// state's lock and with arithmetic that cannot panic. Returns whether the request
    /// is done (or failed) or must wait for a fetch, and the cached IDs left if a fetch
    /// is due: the caller starts it after the lock is released.
    fn serve(
        &self,
        portion: &mut impl Portion,
        waited: bool,
    ) -> (ControlFlow<Result<(), StoreError>>, Option<u64>) {
        let mut state = self.state.lock();
        if state.closed {
            return (
                ControlFlow::Break(Err(StoreError::Unavailable(
                    "the server is stopping".into(),
                ))),
                None,
            );
        }
        let taken = portion.fill(&mut state.buffer);
        state.issued = state.issued.saturating_add(taken);
        let need = portion.need();
        if need > 0
            && waited
            && !state.buffer.is_fetching()
            && let Some(e) = state.last_error.clone()
        {
            return (ControlFlow::Break(Err(e)), None);
        }
        let cached = state.buffer.remaining();
        let fetch = state.buffer.start_fetch(cached < need as u64).then(|| {
            state.last_error = None;
            cached
        });
        let step = if need == 0 {
            ControlFlow::Break(Ok(()))
        } else {
            ControlFlow::Continue(())
        };
        (step, fetch)
    }

    /// Records the step of a new segment: in the log, the metrics and for the next
    /// choice.
    fn reserved(&self, store: &Store, r: &Reservation, hint: StepHint) {
        let (step, delta) = (r.range.step(), r.range.residue().delta());
        tracing::info!(
            biz = %self.biz,
            database = %store.database_names()[r.database],
            step,
            reason = %r.reason,
            peak_rate = hint.peak_rate,
            previous_step = hint.previous.unwrap_or(0),
            "reserved a segment"
        );
        store.metrics().bizs().step_chosen(&self.biz, r.reason);
        self.sizing.lock().last = Some((step, delta, r.reason));
    }

    fn complete(&self, result: Result<Reservation, StoreError>) {
        {
            let mut state = self.state.lock();
            match result {
                Ok(r) => {
                    state.buffer.install(r.range);
                    if state.origins.len() >= 4 {
                        state.origins.remove(0);
                    }
                    state.origins.push((r.range, r.database, r.version));
                }
                Err(e) => {
                    tracing::warn!(biz = %self.biz, error = %e, "segment fetch failed");
                    state.buffer.fetch_failed();
                    state.last_error = Some(e);
                }
            }
        }
        self.fetched.send_modify(|n| *n += 1);
    }
}

/// Ends a fetch that was dropped before completing (its task cancelled, or its start
/// failed), so that the biz does not stay marked as fetching forever. Dropping it takes
/// the buffer's state lock: it must never be dropped while that lock is held.
struct FetchGuard(Option<Arc<Buffer>>);

impl FetchGuard {
    fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for FetchGuard {
    fn drop(&mut self) {
        if let Some(buffer) = self.0.take() {
            buffer.complete(Err(StoreError::Unavailable(
                "segment fetch was cancelled".into(),
            )));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An embedded store with bizs `order` and `user` (step 100) and a cache on it
    /// that has served 5 IDs of each.
    async fn two_bizs_served(dir: &std::path::Path) -> (Arc<Store>, Arc<Cache>) {
        let toml = format!(
            "[[databases]]\nname = \"db0\"\nurl = \"sqlite://{}\"\ndelta = 1\nremainder = 0\n",
            dir.join("db0.db").display()
        );
        let config = crate::config::Config::from_toml(&toml).unwrap();
        let store = Arc::new(Store::connect(&config).unwrap());
        for (_, migrated) in store.cluster().migrate().await.results() {
            migrated.unwrap();
        }
        let cache = Arc::new(Cache::new(store.clone(), 20, Duration::from_secs(3)));
        for biz in ["order", "user"] {
            let biz = BizTag::parse(biz).unwrap();
            store.cluster().add_biz(&biz, 100, 1, None).await.unwrap();
            assert_eq!(cache.next_ids(&biz, 5).await.unwrap(), [1, 2, 3, 4, 5]);
        }
        (store, cache)
    }

    /// Holds the lock of `biz`'s buffer on another thread for `how_long`, as a request
    /// stuck under it would; returns once the lock is held.
    fn hold_lock(cache: &Cache, biz: &str, how_long: Duration) -> std::thread::JoinHandle<()> {
        let biz = BizTag::parse(biz).unwrap();
        let buffer = cache.buffers.load().get(&biz).cloned().unwrap();
        let (locked, is_locked) = std::sync::mpsc::channel();
        let stuck = std::thread::spawn(move || {
            let _state = buffer.state.lock();
            locked.send(()).unwrap();
            std::thread::sleep(how_long);
        });
        is_locked.recv().unwrap();
        stuck
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_biz_stuck_under_its_lock_does_not_hold_the_stop_up() {
        let dir = tempfile::tempdir().unwrap();
        let (store, cache) = two_bizs_served(dir.path()).await;
        // A request stuck while holding `order`'s lock, as a deadlocked worker would.
        let stuck = hold_lock(&cache, "order", Duration::from_secs(3));
        let start = Instant::now();
        let (given, wasted) = cache.give_back().await;
        let took = start.elapsed();
        assert!(took < Duration::from_secs(1), "the stop waited {took:?}");
        // `user` gave back its 95; `order`'s cache is neither given back nor counted.
        assert_eq!((given, wasted), (95, 0));
        let rows: HashMap<String, i64> = store
            .cluster()
            .list_bizs()
            .await
            .into_iter()
            .flat_map(|(_, rows)| rows.unwrap())
            .map(|r| (r.biz_type.to_string(), r.max_id))
            .collect();
        assert_eq!(rows["order"], 100, "order's row stays above its issued IDs");
        assert_eq!(rows["user"], 5);
        stuck.join().unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_sampler_skips_a_biz_stuck_under_its_lock() {
        let dir = tempfile::tempdir().unwrap();
        let (_store, cache) = two_bizs_served(dir.path()).await;
        let stuck = hold_lock(&cache, "order", Duration::from_secs(2));
        // The sampler shares its thread with the stop signal: it must not wait.
        let start = Instant::now();
        cache.sample(Instant::now() + Duration::from_secs(1));
        let took = start.elapsed();
        assert!(
            took < Duration::from_millis(500),
            "the sampler waited {took:?}"
        );
        stuck.join().unwrap();
    }
}
