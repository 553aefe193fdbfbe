//! [`Biz`]: one biz's handle, issuing its IDs from the client's cache, and
//! [`NextId`], the future of one ID.

use super::*;

/// One biz of a [`Client`]: issues its IDs.
#[derive(Clone)]
pub struct Biz {
    pub(crate) cache: Arc<Cache>,
    pub(crate) client: Arc<Inner>,
}

impl Biz {
    pub fn name(&self) -> &str {
        &self.cache.biz
    }

    /// An ID from the cache, if it has one: no lock, no await, no IO. Starts the
    /// background fetch of the next segment at the prefetch point. Calling it on a
    /// used-up cache any number of times is harmless: the chain closes the segment.
    #[inline]
    pub fn try_next_id(&self) -> Option<i64> {
        if self.cache.expired() {
            return None;
        }
        match self.cache.chain.take(1).0 {
            Take::Ids {
                first, prefetch, ..
            } => {
                if prefetch {
                    self.prefetch();
                }
                Some(first)
            }
            _ => None,
        }
    }

    /// One ID: from the cache when it has one, else after the next segment arrives.
    ///
    /// # Errors
    /// [`ClientError`] when the cache is empty and no segment could be fetched.
    #[inline]
    pub fn next_id(&self) -> NextId<'_> {
        NextId {
            biz: self,
            slow: None,
        }
    }

    /// [`Biz::next_id`] once the cache ran out.
    pub(crate) async fn next_id_after_refill(&self) -> Result<i64, ClientError> {
        loop {
            self.refill().await?;
            if let Some(id) = self.try_next_id() {
                return Ok(id);
            }
        }
    }

    /// `n` IDs, in increasing order within each segment; spans segments as needed.
    ///
    /// # Errors
    /// [`ClientError`] when the cache ran short and no segment could be fetched; the
    /// IDs taken before are then discarded (never reissued).
    pub async fn next_ids(&self, n: usize) -> Result<Vec<i64>, ClientError> {
        let mut ids = Vec::with_capacity(n);
        while !self.take_into(n, &mut ids) {
            self.refill().await?;
        }
        Ok(ids)
    }

    /// Fills `ids` up to `n` from the cache; false when it ran out first.
    #[inline]
    pub(crate) fn take_into(&self, n: usize, ids: &mut Vec<i64>) -> bool {
        while ids.len() < n {
            if self.cache.expired() {
                return false;
            }
            let (take, _) = self.cache.chain.take((n - ids.len()) as u64);
            match take {
                Take::Ids { prefetch, .. } => {
                    take.extend_into(ids);
                    if prefetch {
                        self.prefetch();
                    }
                }
                Take::Exhausted { .. } => return false,
                Take::Lost => {}
            }
        }
        true
    }

    /// IDs left in the current segment (not counting a prefetched one).
    pub fn cached(&self) -> u64 {
        self.cache.chain.remaining()
            + self
                .cache
                .slow
                .lock()
                .next
                .as_ref()
                .map_or(0, |n| n.range.len())
    }

    /// Fetches, waits and the newest segment's step so far.
    pub fn stats(&self) -> BizStats {
        self.cache.slow.lock().stats
    }

    /// Starts recording the segments this handle's biz installs, for audits and tests:
    /// every ID the client issues comes from one of them.
    pub fn record_segments(&self) {
        self.cache.slow.lock().record = true;
    }

    /// The segments installed since [`Biz::record_segments`], oldest first.
    pub fn segments(&self) -> Vec<SegmentRange> {
        self.cache.slow.lock().installed.clone()
    }

    /// Ends the current segment of `generation`, whose period has ended, and drops the
    /// next one too if its period has ended as well. Their IDs left are never issued.
    fn drop_expired(&self, slow: &mut Slow, generation: u32) {
        self.cache.chain.retire(generation);
        if slow.current.take().is_some() {
            slow.stats.expired += 1;
        }
        let now = Instant::now();
        if slow
            .next
            .as_ref()
            .is_some_and(|n| n.expires.is_some_and(|at| at <= now))
        {
            slow.next = None;
            slow.stats.expired += 1;
        }
    }

    /// Starts the fetch of the next segment unless one is fetched or in flight.
    pub(crate) fn prefetch(&self) {
        let mut slow = self.cache.slow.lock();
        if slow.next.is_none() && slow.task.is_none() {
            self.spawn_fetch(&mut slow);
        }
    }

    pub(crate) fn spawn_fetch(&self, slow: &mut Slow) {
        if self.cache.closed.load(Ordering::Acquire) {
            return;
        }
        let newest = slow.next.as_ref().or(slow.current.as_ref());
        let step = slow
            .sizing
            .hint(
                Instant::now(),
                self.cache.chain.used(),
                newest.map(|f| &f.range),
            )
            .filter(|_| self.client.servers.protocol() == Protocol::V1);
        let fetch = fetch_into(
            self.client.servers.clone(),
            self.cache.clone(),
            self.client.prefetch_percent,
            step,
        );
        slow.last_error = None;
        slow.task = Some(self.client.runtime.spawn(fetch).abort_handle());
    }

    /// Makes the next segment current, fetching it if needed; returns when the chain
    /// may have IDs again.
    pub(crate) async fn refill(&self) -> Result<(), ClientError> {
        let deadline = Instant::now() + self.client.wait_timeout;
        let mut waited = false;
        loop {
            let mut fetched = {
                let mut slow = self.cache.slow.lock();
                if let Some(e) = self.cache.closed_error() {
                    return Err(e);
                }
                let chain = &self.cache.chain;
                let generation = chain.generation();
                if self.cache.expired() {
                    self.drop_expired(&mut slow, generation);
                } else if chain.remaining() > 0 {
                    return Ok(());
                }
                chain.close(generation);
                if let Some(next) = slow.next.take() {
                    // Cannot fail (used up, under the lock), but a segment is never dropped.
                    if let Err(next) = self.cache.install(
                        &mut slow,
                        generation,
                        next,
                        self.client.prefetch_percent,
                    ) {
                        slow.next = Some(next);
                    }
                    return Ok(());
                }
                if slow.task.is_none() {
                    if waited && let Some(e) = slow.last_error.clone() {
                        return Err(e);
                    }
                    self.spawn_fetch(&mut slow);
                }
                slow.stats.waits += 1;
                self.cache.fetched.subscribe()
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if tokio::time::timeout(left, fetched.changed()).await.is_err() {
                return Err(ErrorKind::Timeout {
                    biz: self.cache.biz.clone(),
                    waited: self.client.wait_timeout,
                }
                .into());
            }
            waited = true;
        }
    }
}

/// The future of [`Biz::next_id`]: a plain type whose first poll is the cache's fast
/// path, inlined into the caller; the waiting path is boxed, as it is taken about once
/// per segment. (An `async fn` would build its whole state machine, waiting path
/// included, on every call.)
#[must_use = "futures do nothing unless awaited"]
pub struct NextId<'a> {
    pub(crate) biz: &'a Biz,
    /// The wait for a segment, once the cache ran out.
    pub(crate) slow: Option<Waiting<'a>>,
}

/// The boxed wait of [`NextId`].
type Waiting<'a> = Pin<Box<dyn Future<Output = Result<i64, ClientError>> + Send + 'a>>;

impl Future for NextId<'_> {
    type Output = Result<i64, ClientError>;

    #[inline]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let biz = self.biz;
        let slow = match &mut self.slow {
            Some(slow) => slow,
            None => {
                if let Some(id) = biz.try_next_id() {
                    return Poll::Ready(Ok(id));
                }
                self.slow.insert(Box::pin(biz.next_id_after_refill()))
            }
        };
        slow.as_mut().poll(cx)
    }
}

/// Fetches one segment for `cache` (of about `step` IDs when given) and hands it over:
/// installed at once if the chain is used up, else kept as the next one. A segment
/// that arrives after close is only kept, for close to give back.
async fn fetch_into(
    servers: Arc<Servers>,
    cache: Arc<Cache>,
    prefetch_percent: u8,
    step: Option<i64>,
) {
    let result = servers.fetch(&cache.biz, step).await;
    {
        let mut slow = cache.slow.lock();
        slow.task = None;
        match result {
            // Reserved for this client all the same: kept for close to give back.
            Ok(fetched) if cache.closed.load(Ordering::Acquire) => {
                if slow.next.is_none() {
                    slow.next = Some(fetched);
                }
            }
            // Its period ended on the way (a request slower than what was left): the
            // next caller fetches one of the next period.
            Ok(fetched) if fetched.expires.is_some_and(|at| at <= Instant::now()) => {
                slow.stats.fetches += 1;
                slow.stats.expired += 1;
            }
            Ok(fetched) => {
                slow.stats.fetches += 1;
                slow.stats.last_step = Some(fetched.range.step());
                let fetched = if cache.chain.remaining() == 0 && slow.next.is_none() {
                    let generation = cache.chain.generation();
                    cache.chain.close(generation);
                    cache
                        .install(&mut slow, generation, fetched, prefetch_percent)
                        .err()
                } else {
                    Some(fetched)
                };
                if fetched.is_some() {
                    slow.next = fetched;
                }
            }
            Err(e) => {
                tracing::warn!(biz = %cache.biz, error = %e, "segment fetch failed");
                slow.last_error = Some(e);
            }
        }
    }
    cache.fetched.send_modify(|n| *n += 1);
}
