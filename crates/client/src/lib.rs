//! The segmint client: issues IDs locally from segments fetched over HTTP.
//!
//! ```no_run
//! # async fn demo() -> Result<(), segmint_client::ClientError> {
//! use segmint_client::Client;
//! let client = Client::builder()
//!     .servers(["http://10.0.0.1:9999", "http://10.0.0.2:9999"])
//!     .token("3f9a…")
//!     .build()?;
//! let orders = client.biz("order")?;
//! let id = orders.next_id().await?; // from memory, almost always
//! let ids = orders.next_ids(100).await?;
//! # Ok(()) }
//! ```
//!
//! Each biz keeps a [`Chain`] of segments: taking an ID is one atomic add and a few
//! loads, with no lock and no await ([`Biz::try_next_id`]). The caller that crosses
//! the prefetch point of a segment starts fetching the next one in the background, so
//! the next segment is normally ready before the current one runs out; callers only
//! wait when both are used up, and then for one fetch shared by all of them. Fetches
//! go to the servers in turn; a server that fails or times out is skipped for a
//! back-off period that doubles per failure.
//!
//! Segments are sized to the client's own consumption (`sizing.rs`): each fetch
//! asks for a segment that lasts [`ClientBuilder::segment_target`] at the biz's peak
//! rate in this client, growing at most ×2 per fetch; the server bounds the hint.
//! [`Client::close`] stops the fetches and gives the unissued rest of every segment
//! back to the server that handed it out (`close.rs`). Dropping the last handle
//! without closing stops the background fetches and gives nothing back.
//!
//! The client speaks segmint's `GET /v1/segments/{biz}` (the default) or Tinyid's
//! `nextSegmentIdSimple` ([`Protocol::Tinyid`]), so it also works against a Tinyid
//! server. [`blocking::BlockingClient`] wraps it for code without an async runtime.

// The core, under the names the client's modules use.
use segmint_core::{backoff, biz, rate, segment, step};

pub mod blocking;
mod close;
mod fetch;
mod sizing;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use tokio::sync::watch;

use crate::segment::{Chain, MAX_SEGMENT_IDS, SegmentRange, Take};
pub use close::CloseSummary;
use fetch::{Fetched, Servers};
use sizing::Sizing;

/// Which HTTP protocol the client uses to fetch segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    /// `GET /v1/segments/{biz}` with `Authorization: Bearer <token>`.
    #[default]
    V1,
    /// Tinyid's `GET /tinyid/id/nextSegmentIdSimple?bizType=…&token=…`.
    Tinyid,
}

/// Why the client could not issue IDs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// The builder was given bad settings.
    #[error("client configuration: {0}")]
    Config(String),
    /// The cache is empty and no server answered.
    #[error("no segment for biz `{biz}`: every server failed ({reasons})")]
    Unavailable { biz: String, reasons: String },
    /// A server refused the request: unknown biz, bad token, exhausted ID space.
    #[error("server {server} refused biz `{biz}` ({status}): {message}")]
    Refused {
        biz: String,
        server: String,
        status: u16,
        message: String,
    },
    /// A server answered with something that is not a valid segment.
    #[error("server {server} sent an invalid segment for biz `{biz}`: {reason}")]
    InvalidSegment {
        biz: String,
        server: String,
        reason: String,
    },
    /// The fetch the caller waited for did not finish in time.
    #[error("no segment for biz `{biz}` arrived within {waited:?}")]
    Timeout { biz: String, waited: Duration },
    /// [`Client::close`] was called: the client issues no more IDs.
    #[error("the client is closed: no more IDs of biz `{biz}`")]
    Closed { biz: String },
}

/// Settings of a [`Client`].
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    servers: Vec<String>,
    token: Option<String>,
    protocol: Protocol,
    prefetch_percent: u8,
    request_timeout: Duration,
    wait_timeout: Duration,
    backoff_initial: Duration,
    backoff_max: Duration,
    segment_target: Duration,
    close_timeout: Duration,
}

impl Default for ClientBuilder {
    fn default() -> Self {
        ClientBuilder {
            servers: Vec::new(),
            token: None,
            protocol: Protocol::V1,
            prefetch_percent: 20,
            request_timeout: Duration::from_secs(3),
            wait_timeout: Duration::from_secs(10),
            backoff_initial: Duration::from_millis(500),
            backoff_max: Duration::from_secs(10),
            segment_target: Duration::from_secs(600),
            close_timeout: Duration::from_secs(3),
        }
    }
}

impl ClientBuilder {
    /// Base URLs of the servers, e.g. `http://10.0.0.1:9999`.
    pub fn servers<I, S>(mut self, servers: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.servers = servers.into_iter().map(Into::into).collect();
        self
    }

    /// The token granted the bizs this client uses.
    pub fn token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    pub fn protocol(mut self, protocol: Protocol) -> Self {
        self.protocol = protocol;
        self
    }

    /// Share of a segment issued before the next is fetched (default 20 %).
    pub fn prefetch_percent(mut self, percent: u8) -> Self {
        self.prefetch_percent = percent;
        self
    }

    /// Longest one HTTP request may take before the server counts as failed (3 s).
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = timeout;
        self
    }

    /// Longest a caller waits for a segment when the cache is empty (10 s).
    pub fn wait_timeout(mut self, timeout: Duration) -> Self {
        self.wait_timeout = timeout;
        self
    }

    /// Back-off of a failed server: first `initial`, doubling to at most `max`.
    pub fn backoff(mut self, initial: Duration, max: Duration) -> Self {
        self.backoff_initial = initial;
        self.backoff_max = max;
        self
    }

    /// How long a segment should last at the biz's peak rate in this client (10
    /// minutes): the size asked for at each fetch, within the server's bounds.
    pub fn segment_target(mut self, target: Duration) -> Self {
        self.segment_target = target;
        self
    }

    /// Longest [`Client::close`] waits for the servers to take segments back (3 s).
    pub fn close_timeout(mut self, timeout: Duration) -> Self {
        self.close_timeout = timeout;
        self
    }

    /// Builds the client. Must be called within a Tokio runtime, which runs its
    /// background fetches.
    ///
    /// # Errors
    /// [`ClientError::Config`] naming the bad setting.
    pub fn build(self) -> Result<Client, ClientError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| {
            ClientError::Config(
                "build() must run within a Tokio runtime (or use blocking::BlockingClient)".into(),
            )
        })?;
        if self.servers.is_empty() {
            return Err(ClientError::Config(
                "servers: at least one is needed".into(),
            ));
        }
        let token = self
            .token
            .clone()
            .filter(|t| !t.trim().is_empty())
            .ok_or_else(|| ClientError::Config("token: required".into()))?;
        if self.prefetch_percent > 100 {
            return Err(ClientError::Config(
                "prefetch_percent: must be between 0 and 100".into(),
            ));
        }
        if self.backoff_max < self.backoff_initial {
            return Err(ClientError::Config(
                "backoff: max must be at least initial".into(),
            ));
        }
        if self.segment_target.is_zero() {
            return Err(ClientError::Config(
                "segment_target: must be above zero".into(),
            ));
        }
        let servers = Arc::new(Servers::new(&self, token, close::client_id())?);
        Ok(Client {
            inner: Arc::new(Inner {
                servers,
                runtime,
                prefetch_percent: self.prefetch_percent,
                wait_timeout: self.wait_timeout,
                segment_target: self.segment_target,
                close_timeout: self.close_timeout,
                closed: Arc::new(AtomicBool::new(false)),
                bizs: RwLock::new(HashMap::new()),
            }),
        })
    }
}

/// A segmint client; cheap to clone, shared by every biz handle it gives out.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

struct Inner {
    servers: Arc<Servers>,
    runtime: tokio::runtime::Handle,
    prefetch_percent: u8,
    wait_timeout: Duration,
    segment_target: Duration,
    close_timeout: Duration,
    /// Set once by [`Client::close`]; shared with every biz's cache.
    closed: Arc<AtomicBool>,
    bizs: RwLock<HashMap<String, Arc<Cache>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        for cache in self.bizs.read().values() {
            if let Some(task) = cache.slow.lock().task.take() {
                task.abort();
            }
        }
    }
}

/// The IDs of one biz held by a client.
struct Cache {
    biz: String,
    chain: Chain,
    slow: Mutex<Slow>,
    /// Bumped when a fetch completes or the client closes; waiting callers watch it.
    fetched: watch::Sender<u64>,
    /// The client's closed flag: read under `slow`'s lock before anything is fetched
    /// or installed, so that nothing enters the cache once close has sealed it.
    closed: Arc<AtomicBool>,
}

/// Plain mutex: held only to read or update the fields, never across an await.
struct Slow {
    /// The segment the chain issues from, as fetched: what close gives back.
    current: Option<Fetched>,
    /// A fetched segment waiting for the current one to run out.
    next: Option<Fetched>,
    /// The fetch in flight.
    task: Option<tokio::task::AbortHandle>,
    /// Why the last fetch failed, for the callers that waited for it.
    last_error: Option<ClientError>,
    /// Segments installed, for [`Biz::segments`].
    installed: Vec<SegmentRange>,
    /// Whether to remember installed segments (tests and audits).
    record: bool,
    /// The consumption that sizes the next segment.
    sizing: Sizing,
    /// What [`Biz::stats`] reports.
    stats: BizStats,
}

/// How one biz of a client has fared, for tuning and benchmarks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BizStats {
    /// Segments fetched.
    pub fetches: u64,
    /// Times a caller had to wait for a segment (each wait counts once per caller).
    pub waits: u64,
    /// The step of the newest segment fetched.
    pub last_step: Option<i64>,
}

impl Slow {
    fn new(segment_target: Duration) -> Slow {
        Slow {
            current: None,
            next: None,
            task: None,
            last_error: None,
            installed: Vec::new(),
            record: false,
            sizing: Sizing::new(segment_target),
            stats: BizStats::default(),
        }
    }
}

impl Cache {
    /// Makes `fetched` the current segment if the chain's segment `generation` is
    /// used up; else hands it back.
    fn install(
        &self,
        slow: &mut Slow,
        generation: u32,
        fetched: Fetched,
        prefetch_percent: u8,
    ) -> Result<(), Fetched> {
        let used_up = self.chain.len();
        if !self
            .chain
            .advance(generation, &fetched.range, prefetch_percent)
        {
            return Err(fetched);
        }
        slow.sizing.finished(used_up);
        if slow.record {
            slow.installed.push(fetched.range);
        }
        slow.current = Some(fetched);
        Ok(())
    }

    /// An error for callers once the client is closed.
    fn closed_error(&self) -> Option<ClientError> {
        self.closed
            .load(Ordering::Acquire)
            .then(|| ClientError::Closed {
                biz: self.biz.clone(),
            })
    }
}

impl Client {
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

    /// The handle of `biz`; keep it, as its methods skip the lookup by name.
    ///
    /// # Errors
    /// [`ClientError::Config`] for a name the server would refuse (the rule of
    /// [`BizTag::parse`](crate::biz::BizTag::parse)).
    pub fn biz(&self, biz: &str) -> Result<Biz, ClientError> {
        crate::biz::BizTag::parse(biz)
            .map_err(|e| ClientError::Config(format!("biz: `{biz}`: {e}")))?;
        if let Some(cache) = self.inner.bizs.read().get(biz) {
            return Ok(Biz {
                cache: cache.clone(),
                client: self.inner.clone(),
            });
        }
        let cache = self
            .inner
            .bizs
            .write()
            .entry(biz.to_string())
            .or_insert_with(|| {
                Arc::new(Cache {
                    biz: biz.to_string(),
                    chain: Chain::new(),
                    slow: Mutex::new(Slow::new(self.inner.segment_target)),
                    fetched: watch::Sender::new(0),
                    closed: self.inner.closed.clone(),
                })
            })
            .clone();
        Ok(Biz {
            cache,
            client: self.inner.clone(),
        })
    }

    /// One ID of `biz`.
    ///
    /// # Errors
    /// As [`Biz::next_id`].
    pub async fn next_id(&self, biz: &str) -> Result<i64, ClientError> {
        self.biz(biz)?.next_id().await
    }

    /// `n` IDs of `biz`.
    ///
    /// # Errors
    /// As [`Biz::next_ids`].
    pub async fn next_ids(&self, biz: &str, n: usize) -> Result<Vec<i64>, ClientError> {
        self.biz(biz)?.next_ids(n).await
    }
}

/// One biz of a [`Client`]: issues its IDs.
#[derive(Clone)]
pub struct Biz {
    cache: Arc<Cache>,
    client: Arc<Inner>,
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
    async fn next_id_after_refill(&self) -> Result<i64, ClientError> {
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
    fn take_into(&self, n: usize, ids: &mut Vec<i64>) -> bool {
        while ids.len() < n {
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

    /// Starts the fetch of the next segment unless one is fetched or in flight.
    fn prefetch(&self) {
        let mut slow = self.cache.slow.lock();
        if slow.next.is_none() && slow.task.is_none() {
            self.spawn_fetch(&mut slow);
        }
    }

    fn spawn_fetch(&self, slow: &mut Slow) {
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
    async fn refill(&self) -> Result<(), ClientError> {
        let deadline = Instant::now() + self.client.wait_timeout;
        let mut waited = false;
        loop {
            let mut fetched = {
                let mut slow = self.cache.slow.lock();
                if let Some(e) = self.cache.closed_error() {
                    return Err(e);
                }
                let chain = &self.cache.chain;
                if chain.remaining() > 0 {
                    return Ok(());
                }
                let generation = chain.generation();
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
                return Err(ClientError::Timeout {
                    biz: self.cache.biz.clone(),
                    waited: self.client.wait_timeout,
                });
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
    biz: &'a Biz,
    /// The wait for a segment, once the cache ran out.
    slow: Option<Waiting<'a>>,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn biz_names_follow_the_servers_rule() {
        let client = Client::builder()
            .servers(["http://127.0.0.1:9"])
            .token("t")
            .build()
            .unwrap();
        for ok in ["order", "a", &"x".repeat(63), "a.b-c_D9"] {
            assert!(client.biz(ok).is_ok(), "{ok}");
        }
        for refused in ["", &"x".repeat(64), "a/b", "a b", "é"] {
            let e = client.biz(refused).err().expect(refused);
            assert!(matches!(e, ClientError::Config(_)), "{e}");
            assert!(e.to_string().contains("1 to 63 characters"), "{e}");
        }
    }
}
