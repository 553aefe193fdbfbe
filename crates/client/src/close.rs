//! Closing a client: no ID is issued any more, and the unissued rest of every segment
//! goes back to the server that handed it out.
//!
//! Each biz is sealed under its cache lock, before anything is read: the closer takes
//! every ID the chain still has, so a caller racing with close either got its ID
//! before (and it counts as issued) or gets none; what the closer took is given back.
//! The server gives back only its own segments, to the client that holds them, and
//! only where nobody reserved since (the compare-and-set of its own give-back at
//! stop); the rest is wasted, never reissued.

use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use super::fetch::{Fetched, Returned};
use super::{Cache, Client, MAX_SEGMENT_IDS};
use crate::segment::{Chain, MAX_TAKE, Take};

/// What [`Client::close`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CloseSummary {
    /// IDs the servers took back: the next reservation starts with them.
    pub given_back: u64,
    /// IDs cached but not issued that nobody will issue.
    pub wasted: u64,
    /// Why some segments could not be offered back (a server down or too slow).
    pub errors: Vec<String>,
}

/// A random identity for one client: 128 bits in hex, from two independently keyed
/// hashes of the time, the process and a counter (no random-number crate needed).
pub(super) fn client_id() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let seed = (
        nanos,
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed),
    );
    let a = RandomState::new().hash_one(seed);
    let b = RandomState::new().hash_one((seed, a));
    format!("{a:016x}{b:016x}")
}

/// Takes every ID left in `segment`, the chain's current one, so that nobody else
/// can: returns the last ID issued before (by anyone else) and how many IDs of the
/// segment were not.
fn seal(chain: &Chain, segment: &Fetched) -> (Option<i64>, u64) {
    let range = &segment.range;
    let (Some(first), delta) = (range.first_id(), range.residue().delta()) else {
        return (None, 0);
    };
    let len = range.len().min(MAX_SEGMENT_IDS);
    // Offsets taken here; others may take some in between, below the last of ours.
    let mut mine = Vec::new();
    while let (
        Take::Ids {
            first: at, count, ..
        },
        _,
    ) = chain.take(MAX_TAKE)
    {
        mine.push((((at - first) / delta) as u64, count));
    }
    // Issued: everything below the run of our takes that reaches the end.
    let mut end = len;
    for &(offset, count) in mine.iter().rev() {
        if offset + count == end {
            end = offset;
        } else {
            break;
        }
    }
    let last = end.checked_sub(1).map(|k| first + k as i64 * delta);
    (last, range.len() - end)
}

/// Segments of one biz to give back to one server, and their unissued IDs.
struct Batch {
    biz: String,
    server: usize,
    segments: Vec<Returned>,
    ids: u64,
}

impl Cache {
    /// Waits until `deadline` for the fetch in flight, if any: the server reserves its
    /// segment whether or not the client reads the answer, and a reservation the
    /// client never saw moves the row's version past every segment it holds.
    async fn settle(&self, deadline: Instant) {
        loop {
            let mut fetched = {
                let slow = self.slow.lock();
                if slow.task.is_none() {
                    return;
                }
                self.fetched.subscribe()
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if tokio::time::timeout(left, fetched.changed()).await.is_err() {
                return;
            }
        }
    }

    /// Stops fetching and seals the chain; the segments held, with their last issued
    /// ID and unissued count. Called once, by close, after the closed flag is set.
    fn seal(&self) -> Vec<(Fetched, Option<i64>, u64)> {
        let mut held = Vec::new();
        {
            let mut slow = self.slow.lock();
            if let Some(task) = slow.task.take() {
                task.abort();
            }
            if let Some(current) = slow.current.take() {
                let (last, unissued) = seal(&self.chain, &current);
                held.push((current, last, unissued));
            }
            if let Some(next) = slow.next.take() {
                let unissued = next.range.len();
                held.push((next, None, unissued));
            }
        }
        // Callers waiting for a fetch wake up and find the client closed.
        self.fetched.send_modify(|n| *n += 1);
        held
    }
}

impl Client {
    /// Closes the client: background fetches stop, every later `next_id`, `next_ids`
    /// or `try_next_id` fails ([`ErrorKind::Closed`](super::ErrorKind::Closed) or
    /// `None`), and the unissued rest of each biz's segments is offered back to the
    /// server that handed it out, one request per biz and server, all within
    /// [`close_timeout`](super::ClientBuilder::close_timeout). Closing again, or from
    /// another clone, does nothing more. Dropping a client without closing gives
    /// nothing back.
    pub async fn close(&self) -> CloseSummary {
        let mut summary = CloseSummary::default();
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            return summary;
        }
        let deadline = Instant::now() + self.inner.close_timeout;
        let caches: Vec<_> = self.inner.bizs.read().values().cloned().collect();
        for cache in &caches {
            cache.settle(deadline).await;
        }
        let mut batches: HashMap<(String, usize), Batch> = HashMap::new();
        for cache in caches {
            for (fetched, last_issued, ids) in cache.seal() {
                if ids == 0 {
                    continue;
                }
                let Some((database, version)) = fetched.origin else {
                    summary.wasted += ids;
                    continue;
                };
                let batch = batches
                    .entry((cache.biz.clone(), fetched.server))
                    .or_insert_with(|| Batch {
                        biz: cache.biz.clone(),
                        server: fetched.server,
                        segments: Vec::new(),
                        ids: 0,
                    });
                batch.segments.push(Returned {
                    database,
                    version,
                    last_issued,
                });
                batch.ids += ids;
            }
        }
        let mut sends = tokio::task::JoinSet::new();
        for batch in batches.into_values() {
            let servers = self.inner.servers.clone();
            sends.spawn_on(
                async move {
                    let result = servers
                        .give_back(batch.server, &batch.biz, &batch.segments)
                        .await;
                    (batch, result)
                },
                &self.inner.runtime,
            );
        }
        let mut pending: u64 = 0;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, sends.join_next()).await {
                Ok(None) => break,
                Ok(Some(Ok((_, Ok(answer))))) => {
                    summary.given_back += answer.given_back;
                    summary.wasted += answer.wasted;
                }
                Ok(Some(Ok((batch, Err(e))))) => {
                    tracing::warn!(biz = %batch.biz, error = %e, "give-back failed; the IDs are wasted");
                    summary.wasted += batch.ids;
                    summary.errors.push(format!("biz `{}`: {e}", batch.biz));
                }
                Ok(Some(Err(e))) => summary.errors.push(format!("give-back task: {e}")),
                Err(_) => {
                    pending = sends.len() as u64;
                    sends.abort_all();
                    break;
                }
            }
        }
        if pending > 0 {
            summary.errors.push(format!(
                "{pending} give-back request(s) unanswered within {:?}",
                self.inner.close_timeout
            ));
        }
        summary
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::{Residue, SegmentRange};

    fn fetched(from: i64, step: i64, delta: i64, remainder: i64) -> Fetched {
        Fetched {
            range: SegmentRange::after(from, step, Residue::new(delta, remainder).unwrap())
                .unwrap(),
            server: 0,
            origin: Some(("pg0".into(), 1)),
            expires: None,
        }
    }

    #[test]
    fn client_ids_are_distinct_and_well_formed() {
        let ids: std::collections::HashSet<String> = (0..1000).map(|_| client_id()).collect();
        assert_eq!(ids.len(), 1000);
        assert!(
            ids.iter()
                .all(|id| id.len() == 32 && id.bytes().all(|b| b.is_ascii_hexdigit()))
        );
    }

    #[test]
    fn sealing_finds_the_last_issued_id_and_stops_the_chain() {
        let chain = Chain::new();
        let f = fetched(100, 20, 2, 1); // 101, 103, …, 119
        chain.advance(0, &f.range, 20);
        for _ in 0..3 {
            chain.next().unwrap();
        }
        assert_eq!(seal(&chain, &f), (Some(105), 7));
        assert!(chain.next().is_err(), "nothing issued after the seal");
        // Sealed again: everything counts as issued, nothing left.
        assert_eq!(seal(&chain, &f), (Some(119), 0));
    }

    #[test]
    fn an_untouched_segment_seals_whole() {
        let chain = Chain::new();
        let f = fetched(0, 1 << 20, 1, 0);
        chain.advance(0, &f.range, 20);
        assert_eq!(seal(&chain, &f), (None, 1 << 20));
    }

    #[test]
    fn racing_takers_never_get_an_id_given_back() {
        for _ in 0..50 {
            let chain = std::sync::Arc::new(Chain::new());
            let f = fetched(0, 200_000, 1, 0);
            chain.advance(0, &f.range, 20);
            let takers: Vec<_> = (0..2)
                .map(|_| {
                    let chain = chain.clone();
                    std::thread::spawn(move || {
                        let mut got = Vec::new();
                        while let Ok(id) = chain.next() {
                            got.push(id);
                        }
                        got
                    })
                })
                .collect();
            let (last, unissued) = seal(&chain, &f);
            let issued: Vec<i64> = takers.into_iter().flat_map(|t| t.join().unwrap()).collect();
            let bound = last.unwrap_or(0);
            assert!(
                issued.iter().all(|&id| id <= bound),
                "an ID above {bound} was issued"
            );
            assert_eq!(unissued, (200_000 - bound) as u64);
        }
    }
}
