//! Segments handed to client libraries: sized by their ask, remembered when the client
//! says who it is, and their unissued rest given back when it closes, by the same plan
//! and compare-and-set as the server's own cache at stop.

use futures_util::future::join_all;

use super::AppState;
use super::handed_out::{Claim, ClientId, Returned};
use crate::biz::BizTag;
use crate::cache::GIVE_BACK_LIMIT;
use crate::segment::{SegmentRange, plan_give_back};
use crate::shape::Periodic;
use crate::step::StepRequest;
use crate::store::{Reservation, StoreError};

/// One segment of a give-back request, as the client describes it.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReturnedSegment {
    /// The `database` of the segment's answer.
    pub database: String,
    /// The `version` of the segment's answer.
    pub version: i64,
    /// The last ID the client issued from it; `null` (or absent) if none.
    #[serde(default)]
    pub last_issued: Option<i64>,
}

/// The body of `POST /v1/segments/{biz}/return`.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GiveBackRequest {
    /// The client id the segments were fetched with.
    pub client: String,
    /// Every segment the client still holds.
    pub segments: Vec<ReturnedSegment>,
}

/// What became of a client's give-back, in IDs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct GaveBack {
    /// Returned to the databases: they will be issued again.
    pub given_back: u64,
    /// Lost: never issued by anyone.
    pub wasted: u64,
}

/// IDs a client gets of a periodic biz when it asks for no size.
pub const CARVED_BY_DEFAULT: u64 = 1000;

/// A segment carved for a client out of this server's buffer of a period.
#[derive(Debug, Clone)]
pub struct Carved {
    pub range: SegmentRange,
    /// The period its IDs belong to, as `segmint id decode` names it.
    pub period: String,
    /// Milliseconds until the period ends by this server's clock: the client issues
    /// none of the segment's IDs after that.
    pub left_ms: i64,
}

impl AppState {
    /// Reserves a segment of `biz` to hand to a client: with the row's own step, or,
    /// when the client `asked` for a size, that size within the step policy's bounds.
    /// Remembered for a give-back when the client gave its id.
    ///
    /// # Errors
    /// The [`StoreError`] of the reservation.
    pub async fn segment_for_client(
        &self,
        biz: &BizTag,
        asked: Option<i64>,
        client: Option<ClientId>,
    ) -> Result<Reservation, StoreError> {
        let request = asked.map_or(StepRequest::Row, StepRequest::Asked);
        let r = self.store.reserve_for(biz, request, None).await?;
        let metrics = self.store.metrics().bizs();
        metrics.segment_handed_out(biz, r.range.len());
        if asked.is_some() {
            metrics.client_step_chosen(biz, r.range.step(), r.reason);
        }
        if let Some(client) = client {
            self.handed_out
                .lock()
                .record(biz, r.database, r.version, r.range, client);
        }
        Ok(r)
    }

    /// A segment of `biz`, whose counter restarts each `period`, to hand to a client:
    /// up to `asked` IDs (else `CARVED_BY_DEFAULT`) carved out of this server's own
    /// buffer for the period, with the period's label and how long it has left by this
    /// server's clock. Nothing of it can be given back: it was never a reservation.
    ///
    /// # Errors
    /// As [`crate::cache::Cache::next_ids_in`].
    pub async fn carve_for_client(
        &self,
        biz: &BizTag,
        asked: Option<i64>,
        period: &Periodic,
    ) -> Result<Carved, StoreError> {
        let n = asked.map_or(CARVED_BY_DEFAULT, |a| a.unsigned_abs());
        let (range, now_ms) = self.cache.carve_in(biz, n, period).await?;
        self.store
            .metrics()
            .bizs()
            .segment_handed_out(biz, range.len());
        let code = range
            .first_id()
            .and_then(|id| period.split(id))
            .map_or_else(|| period.code_at(now_ms), |(code, _)| code);
        let ends_ms = period.begins_ms(period.next(code)).unwrap_or(i64::MAX);
        Ok(Carved {
            range,
            period: period.label(code),
            // `now_ms` is truncated: the true time may be up to 1 ms later, so 1 ms
            // less is left at most.
            left_ms: ends_ms.saturating_sub(now_ms).saturating_sub(1).max(0),
        })
    }

    /// Gives back what can be of the `segments` `client` returns for `biz`: only
    /// segments this server handed to that client, down to the last ID it issued from
    /// them, and only where nobody reserved since (the version compare-and-set). The
    /// rest is wasted, never reissued. Within [`GIVE_BACK_LIMIT`].
    pub async fn give_back_for_client(
        &self,
        biz: &BizTag,
        client: &ClientId,
        segments: &[ReturnedSegment],
    ) -> GaveBack {
        let names = self.store.database_names();
        let claims: Vec<Claim> = {
            let mut records = self.handed_out.lock();
            segments
                .iter()
                .map(|s| match names.iter().position(|n| *n == s.database) {
                    Some(database) => records.claim(
                        biz,
                        client,
                        Returned {
                            database,
                            version: s.version,
                            last_issued: s.last_issued,
                        },
                    ),
                    None => Claim::Wasted {
                        ids: 0,
                        why: "no such database",
                    },
                })
                .collect()
        };
        let mut held = Vec::new();
        let mut wasted = 0u64;
        for (s, claim) in segments.iter().zip(claims) {
            match claim {
                Claim::Held(h) => held.push(h),
                Claim::Wasted { ids, why } => {
                    tracing::info!(biz = %biz, database = %s.database, by = client.as_str(), version = s.version, ids, why, "not giving back a client's segment");
                    wasted = wasted.saturating_add(ids);
                }
            }
        }
        let deadline = tokio::time::Instant::now() + GIVE_BACK_LIMIT;
        let backs = join_all(plan_give_back(&held).into_iter().map(|plan| {
            self.store
                .cluster()
                .give_back(biz, plan, deadline, client.as_str())
        }))
        .await;
        let cached = held
            .iter()
            .map(|h| h.remaining)
            .fold(0, u64::saturating_add);
        let given = backs.into_iter().fold(0, u64::saturating_add).min(cached);
        let wasted = wasted.saturating_add(cached - given);
        self.store
            .metrics()
            .bizs()
            .client_gave_back(biz, given, wasted);
        GaveBack {
            given_back: given,
            wasted,
        }
    }
}
