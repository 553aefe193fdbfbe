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

mod biz_handle;
pub mod blocking;
mod builder;
mod close;
mod fetch;
mod sequence;
mod sizing;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use tokio::sync::watch;

use crate::segment::{Chain, MAX_SEGMENT_IDS, SegmentRange, Take};
pub use biz_handle::{Biz, NextId};
pub use builder::ClientBuilder;
pub use close::CloseSummary;
use fetch::{Fetched, Servers};
pub use sequence::Sequence;
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

/// Why the client could not issue IDs: [`ClientError::kind`] says which way.
///
/// One pointer wide, so that `Result<i64, ClientError>` is two words: the awaited
/// [`Biz::next_id`] returns it on every call, and an error carried inline (its
/// strings) made every ID cost a larger copy.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(transparent)]
pub struct ClientError(Box<ErrorKind>);

impl ClientError {
    /// Which way it failed, with its details.
    pub fn kind(&self) -> &ErrorKind {
        &self.0
    }

    /// The kind, owned.
    pub fn into_kind(self) -> ErrorKind {
        *self.0
    }
}

impl From<ErrorKind> for ClientError {
    fn from(kind: ErrorKind) -> Self {
        Self(Box::new(kind))
    }
}

/// The ways a [`ClientError`] fails.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ErrorKind {
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
    /// When the current segment's period ends, in nanoseconds after `born`;
    /// [`NEVER`] for a biz whose counter never restarts. Read on the fast path: one
    /// atomic load (acquire) for such a biz, and a clock reading for one that restarts.
    expires: AtomicU64,
    /// What `expires` counts from.
    born: Instant,
}

/// `expires` of a segment that never expires.
const NEVER: u64 = u64::MAX;

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
    /// Segments dropped because their period ended (a biz whose counter restarts
    /// each period): their IDs left are never issued.
    pub expired: u64,
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
        if self.chain.generation() != generation || self.chain.remaining() > 0 {
            return Err(fetched);
        }
        // Before the segment is published: the old one is used up or retired, so no
        // reader issues from it under the new period's end.
        let expires = fetched.expires.map_or(NEVER, |at| self.nanos(at));
        self.expires.store(expires, Ordering::Release);
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

    /// Whether the current segment's period has ended: none of its IDs is issued.
    #[inline]
    fn expired(&self) -> bool {
        let expires = self.expires.load(Ordering::Acquire);
        expires != NEVER && self.nanos(Instant::now()) >= expires
    }

    /// `at` in nanoseconds after the cache was made.
    fn nanos(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.born).as_nanos()).unwrap_or(NEVER - 1)
    }

    /// An error for callers once the client is closed.
    fn closed_error(&self) -> Option<ClientError> {
        self.closed.load(Ordering::Acquire).then(|| {
            ErrorKind::Closed {
                biz: self.biz.clone(),
            }
            .into()
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
    /// [`ErrorKind::Config`] for a name the server would refuse (the rule of
    /// [`BizTag::parse`](crate::biz::BizTag::parse)).
    pub fn biz(&self, biz: &str) -> Result<Biz, ClientError> {
        crate::biz::BizTag::parse(biz)
            .map_err(|e| ErrorKind::Config(format!("biz: `{biz}`: {e}")))?;
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
                    expires: AtomicU64::new(NEVER),
                    born: Instant::now(),
                })
            })
            .clone();
        Ok(Biz {
            cache,
            client: self.inner.clone(),
        })
    }

    /// The handle of sequence biz `biz`: per-key numbers that only go up, each asked
    /// of the server that owns the key's section ([`Sequence`]).
    ///
    /// # Errors
    /// [`ErrorKind::Config`] for a name the server would refuse.
    pub fn sequence(&self, biz: &str) -> Result<Sequence, ClientError> {
        crate::biz::BizTag::parse(biz)
            .map_err(|e| ErrorKind::Config(format!("biz: `{biz}`: {e}")))?;
        Ok(Sequence::new(biz, self.inner.servers.clone()))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Installs `range` as the current segment of `biz`, ending at `expires`.
    fn install(biz: &Biz, from: i64, expires: Option<Instant>) {
        let range =
            SegmentRange::after(from, 10, crate::segment::Residue::new(1, 0).unwrap()).unwrap();
        let cache = &biz.cache;
        let mut slow = cache.slow.lock();
        let generation = cache.chain.generation();
        cache.chain.retire(generation);
        let fetched = Fetched {
            range,
            server: 0,
            origin: None,
            expires,
        };
        assert!(cache.install(&mut slow, generation, fetched, 50).is_ok());
    }

    #[tokio::test]
    async fn a_segment_whose_period_ended_issues_nothing_more() {
        let client = Client::builder()
            .servers(["http://127.0.0.1:9"])
            .token("t")
            .build()
            .unwrap();
        let biz = client.biz("order").unwrap();
        install(&biz, 0, Some(Instant::now() + Duration::from_secs(3600)));
        assert_eq!(biz.try_next_id(), Some(1));
        let mut ids = Vec::new();
        assert!(biz.take_into(3, &mut ids));
        assert_eq!(ids, [2, 3, 4]);
        // The next segment's period has ended already: nothing of it is issued, one
        // by one or in a batch, and the next segment of a plain biz never ends.
        install(&biz, 10, Some(Instant::now()));
        assert_eq!(biz.try_next_id(), None);
        assert!(!biz.take_into(1, &mut Vec::new()));
        install(&biz, 20, None);
        assert_eq!(biz.try_next_id(), Some(21));
    }

    #[test]
    fn an_id_result_is_two_words() {
        // What the awaited `next_id` returns on every call: an error carried inline
        // made each ID a larger copy (measured by scripts/client-bench).
        assert_eq!(
            std::mem::size_of::<Result<i64, ClientError>>(),
            2 * std::mem::size_of::<usize>()
        );
        assert_eq!(
            std::mem::size_of::<Poll<Result<i64, ClientError>>>(),
            2 * std::mem::size_of::<usize>()
        );
    }

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
            assert!(matches!(e.kind(), ErrorKind::Config(_)), "{e}");
            assert!(e.to_string().contains("1 to 63 characters"), "{e}");
        }
    }
}
