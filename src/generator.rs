//! Per-biz double buffers: IDs come from memory, segments from the store in the
//! background.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use prometheus::IntCounter;
use tokio::sync::watch;

use crate::biz::BizTag;
use crate::metrics::BizStats;
use crate::rate::{RateTracker, runway};
use crate::segment::DoubleBuffer;
use crate::step::{StepHint, StepReason};
use crate::store::{Reservation, Store, StoreError};

/// Issues IDs for every biz from its double buffer.
pub struct Generator {
    store: Arc<Store>,
    /// One buffer per biz, created on first use. Only bizs the catalog knows get one,
    /// so the map is bounded by the configured bizs.
    buffers: RwLock<HashMap<BizTag, Arc<Buffer>>>,
    /// Share of a segment issued before the next is fetched.
    preload_percent: u8,
    /// Longest a request waits for the in-flight fetch when both segments are empty.
    wait_timeout: Duration,
}

struct Buffer {
    biz: BizTag,
    /// Plain mutex: held for arithmetic only, never across an await.
    state: Mutex<State>,
    /// Bumped after every fetch completes; requests waiting for a segment watch it.
    fetched: watch::Sender<u64>,
    /// IDs issued from this buffer since start; sampled for the rate.
    issued: AtomicU64,
    /// The biz's `segmint_ids_issued_total` (shared by the bizs past the label cap).
    issued_metric: IntCounter,
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
}

impl Generator {
    pub fn new(store: Arc<Store>, preload_percent: u8, wait_timeout: Duration) -> Self {
        Generator {
            store,
            buffers: RwLock::new(HashMap::new()),
            preload_percent,
            wait_timeout,
        }
    }

    fn buffer(&self, biz: &BizTag) -> Arc<Buffer> {
        if let Some(b) = self.buffers.read().get(biz) {
            return b.clone();
        }
        self.buffers
            .write()
            .entry(biz.clone())
            .or_insert_with(|| {
                Arc::new(Buffer {
                    biz: biz.clone(),
                    state: Mutex::new(State {
                        buffer: DoubleBuffer::new(self.preload_percent),
                        last_error: None,
                    }),
                    fetched: watch::Sender::new(0),
                    issued: AtomicU64::new(0),
                    issued_metric: self.store.metrics().issued_counter(biz),
                    sizing: Mutex::new(Sizing::starting_now()),
                })
            })
            .clone()
    }

    /// `n` IDs of `biz`. Served from memory while the cache holds them; starts the
    /// background fetch of the next segment at the preload threshold; waits only when
    /// the cache is short, and then for the one fetch in flight. A request that fails
    /// leaves the cache as it was, unless it was larger than both segments together.
    ///
    /// # Errors
    /// The [`StoreError`] of the fetch it waited for, or [`StoreError::Unavailable`]
    /// when no segment arrived within the wait timeout.
    pub async fn next_ids(&self, biz: &BizTag, n: usize) -> Result<Vec<i64>, StoreError> {
        let buffer = self.buffer(biz);
        let mut ids = Vec::with_capacity(n);
        let mut waited = false;
        loop {
            let mut fetched = {
                let mut state = buffer.state.lock();
                let need = n - ids.len();
                // Take only what completes the request, unless the buffer cannot hold
                // more: a request that then fails has not burnt the cache.
                if state.buffer.remaining() >= need as u64 || state.buffer.is_full() {
                    let took = state.buffer.take(need, &mut ids) as u64;
                    buffer.issued.fetch_add(took, Ordering::Relaxed);
                    buffer.issued_metric.inc_by(took);
                }
                let need = n - ids.len();
                if need > 0
                    && waited
                    && !state.buffer.is_fetching()
                    && let Some(e) = state.last_error.clone()
                {
                    return Err(e);
                }
                let short = state.buffer.remaining() < need as u64;
                if state.buffer.start_fetch(short) {
                    state.last_error = None;
                    self.spawn_fetch(buffer.clone());
                }
                if need == 0 {
                    return Ok(ids);
                }
                buffer.fetched.subscribe()
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

    /// IDs of `biz` issuable without a fetch.
    pub fn remaining(&self, biz: &BizTag) -> u64 {
        self.buffers
            .read()
            .get(biz)
            .map_or(0, |b| b.state.lock().buffer.remaining())
    }

    /// Samples every biz's issue count at `now`, for its rate and peak. Called about
    /// once a second.
    pub fn sample(&self, now: Instant) {
        let buffers: Vec<Arc<Buffer>> = self.buffers.read().values().cloned().collect();
        for b in buffers {
            let issued = b.issued.load(Ordering::Relaxed);
            b.sizing.lock().rates.record(now, issued);
        }
    }

    /// The state of every biz that has served a request, by name.
    pub fn stats(&self) -> Vec<BizStats> {
        let policy = self.store.step_policy();
        let buffers: Vec<Arc<Buffer>> = self.buffers.read().values().cloned().collect();
        let mut stats: Vec<BizStats> = buffers
            .iter()
            .map(|b| {
                let cached_ids = b.state.lock().buffer.remaining();
                let sizing = b.sizing.lock();
                let (rate, peak_rate) = (sizing.rates.rate(), sizing.rates.peak());
                let (step, delta, reason) = match sizing.last {
                    Some((step, delta, reason)) => (step, delta, Some(reason)),
                    None => (0, 1, None),
                };
                let runway = runway(cached_ids, rate);
                BizStats {
                    biz: b.biz.to_string(),
                    rate,
                    peak_rate,
                    step,
                    recommended_step: policy.recommended(peak_rate, delta),
                    last_step_reason: reason,
                    cached_ids,
                    runway_seconds: runway.is_finite().then_some(runway),
                    issued: b.issued.load(Ordering::Relaxed),
                }
            })
            .collect();
        stats.sort_by(|a, b| a.biz.cmp(&b.biz));
        stats
    }

    fn spawn_fetch(&self, buffer: Arc<Buffer>) {
        let store = self.store.clone();
        let guard = FetchGuard(Some(buffer.clone()));
        let hint = {
            let sizing = buffer.sizing.lock();
            StepHint {
                peak_rate: sizing.rates.peak(),
                previous: sizing.last.map(|(step, _, _)| step),
            }
        };
        tokio::spawn(async move {
            let result = store.reserve(&buffer.biz, Some(hint)).await;
            guard.disarm();
            if let Ok(r) = &result {
                buffer.reserved(&store, r, hint);
            }
            buffer.complete(result.map(|r| r.range));
        });
    }
}

impl Buffer {
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
        store.metrics().step_chosen(&self.biz, r.reason);
        self.sizing.lock().last = Some((step, delta, r.reason));
    }

    fn complete(&self, result: Result<crate::segment::SegmentRange, StoreError>) {
        {
            let mut state = self.state.lock();
            match result {
                Ok(range) => state.buffer.install(range),
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

/// Ends a fetch that was dropped before completing (its task cancelled), so that the
/// biz does not stay marked as fetching forever.
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
