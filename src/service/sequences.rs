//! Numbers of sequence bizs: per-key numbers that only go up. A key whose section
//! another server owns is asked of that server once (one hop) through the [`Forward`]
//! port; a forwarded request is answered where it lands or refused, never forwarded
//! again.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures_util::future::BoxFuture;

use super::{Error, Service, authorize};
use crate::biz::BizTag;
use crate::sequence::counters::Taken;
use crate::sequencer::{Elsewhere, SequenceBiz};
use crate::store::StoreError;

/// Who asks: the token given, and whether another server forwarded the request here
/// (then it is answered here or refused, never forwarded on).
#[derive(Debug, Clone, Copy)]
pub struct Caller<'a> {
    pub token: Option<&'a str>,
    pub forwarded: bool,
}

impl<'a> Caller<'a> {
    /// A caller that reached this server directly.
    pub fn direct(token: Option<&'a str>) -> Caller<'a> {
        Caller {
            token,
            forwarded: false,
        }
    }
}

/// How a request reaches the server that owns a key's section: a port of the service,
/// carried by the HTTP client of `server::forward`. An owner's refusal comes back as
/// the owner gave it.
pub trait Forward: Send + Sync {
    /// `count` numbers of each of `keys` of sequence biz `biz`, taken by `owner`.
    fn next<'a>(
        &'a self,
        owner: &'a str,
        biz: &'a str,
        keys: &'a [&'a str],
        count: i64,
        token: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Vec<Taken>, Error>>;

    /// The number `key` of sequence biz `biz` is at, read by `owner`.
    fn current<'a>(
        &'a self,
        owner: &'a str,
        biz: &'a str,
        key: &'a str,
        token: Option<&'a str>,
    ) -> BoxFuture<'a, Result<i64, Error>>;
}

impl Service {
    /// `biz` checked for `token`, and its sequence if it is a sequence biz (`None`: a
    /// biz of IDs).
    ///
    /// # Errors
    /// As [`authorize`]; 404 for an unknown biz.
    pub async fn biz_for(
        &self,
        biz: &BizTag,
        token: Option<&str>,
    ) -> Result<Option<Arc<SequenceBiz>>, Error> {
        authorize(&self.store, token, biz).await?;
        let shape = self.shape_of(biz).await?;
        Ok(shape
            .and_then(|s| s.sequence)
            .map(|shape| self.sequencer.biz(biz.as_str(), shape)))
    }

    /// The sequence biz `biz`, checked for `token`.
    ///
    /// # Errors
    /// As [`Service::biz_for`]; 409 `not_a_sequence` for a biz of IDs.
    pub async fn sequence_biz(
        &self,
        biz: &BizTag,
        token: Option<&str>,
    ) -> Result<Arc<SequenceBiz>, Error> {
        self.biz_for(biz, token)
            .await?
            .ok_or_else(|| Error::Conflict {
                code: "not_a_sequence",
                message: format!(
                    "biz `{biz}` issues IDs, not per-key sequences: take its IDs from /v1/ids/{biz}"
                ),
            })
    }

    /// `count` numbers of each of `keys` (in order): forwarded once per other owner (as
    /// this server last saw the owners; unless the caller was forwarded here: a request
    /// is forwarded once at most), then taken here for the rest. A refused forward
    /// refuses the request before anything is taken here; numbers the owners that
    /// answered before it took are skipped (their keys' next numbers lie above them).
    ///
    /// # Errors
    /// As the owners refuse: 503 while a section moves, 409 when one is exhausted.
    pub async fn take(
        &self,
        biz: &SequenceBiz,
        keys: &[String],
        count: i64,
        caller: Caller<'_>,
    ) -> Result<Vec<Taken>, Error> {
        let sequencer = &self.sequencer;
        let mut answers: Vec<Option<Taken>> = vec![None; keys.len()];
        let mut remote: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        let mut local = Vec::with_capacity(keys.len());
        for (i, key) in keys.iter().enumerate() {
            match sequencer.owner(biz, key) {
                Some(owner) if !caller.forwarded && owner != sequencer.address() => {
                    remote.entry(owner).or_default().push(i)
                }
                _ => local.push(i),
            }
        }
        for (owner, at) in remote {
            let asked: Vec<&str> = at.iter().map(|&i| keys[i].as_str()).collect();
            sequencer.note_forwarded(biz);
            let numbers = self
                .forward
                .next(&owner, biz.name(), &asked, count, caller.token)
                .await?;
            if numbers.len() != at.len() {
                return Err(StoreError::Unavailable(format!(
                    "the owner {owner} answered {} numbers for {} keys",
                    numbers.len(),
                    at.len()
                ))
                .into());
            }
            for (i, n) in at.into_iter().zip(numbers) {
                answers[i] = Some(n);
            }
        }
        for i in local {
            let taken = sequencer.next(biz, &keys[i], count).await;
            answers[i] = Some(taken.map_err(|e| refusal(biz, e))?);
        }
        Ok(answers.into_iter().flatten().collect())
    }

    /// The number `key` is at, read here or from its section's owner (once).
    ///
    /// # Errors
    /// As [`Service::take`].
    pub async fn current(
        &self,
        biz: &SequenceBiz,
        key: &str,
        caller: Caller<'_>,
    ) -> Result<i64, Error> {
        let sequencer = &self.sequencer;
        match sequencer.current(biz, key).await {
            Ok(n) => Ok(n),
            Err(Elsewhere::Owner(Some(owner)))
                if !caller.forwarded && owner != sequencer.address() =>
            {
                sequencer.note_forwarded(biz);
                self.forward
                    .current(&owner, biz.name(), key, caller.token)
                    .await
            }
            Err(e) => Err(refusal(biz, e)),
        }
    }
}

/// What a refusal of the sequencer is to the caller.
fn refusal(biz: &SequenceBiz, elsewhere: Elsewhere) -> Error {
    match elsewhere {
        Elsewhere::Owner(owner) => Error::Elsewhere {
            message: format!(
                "this server does not own the key's section of `{}`{}; try again",
                biz.name(),
                owner
                    .as_deref()
                    .map(|o| format!(" (owner: {o})"))
                    .unwrap_or_default()
            ),
            owner,
        },
        Elsewhere::Moving(epoch) => Error::Elsewhere {
            message: format!(
                "a layout change to epoch {epoch} is carrying the key's section of `{}` to the new databases; try again",
                biz.name()
            ),
            owner: None,
        },
        Elsewhere::Unavailable { answered } => StoreError::Unavailable(format!(
            "no section of `{}` could be claimed: {answered} database(s) answered, fewer than a majority; try again",
            biz.name()
        ))
        .into(),
        Elsewhere::Exhausted => Error::Conflict {
            code: "sequence_exhausted",
            message: format!(
                "a section of `{}` has no number left below 2^63",
                biz.name()
            ),
        },
    }
}
