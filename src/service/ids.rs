//! IDs in their biz's order and format: the shape is looked up before IDs are taken
//! from the cache, applied to them after, and segments of a biz with a keyed order are
//! not handed out.

use std::sync::Arc;

use super::{Error, Service};
use crate::biz::BizTag;
use crate::shape::{BizShape, IdOrder, order_name};
use crate::store::StoreError;

impl Service {
    /// How the IDs of `biz` look (`None`: sequential and plain). A biz the catalog does
    /// not know yet (added since the last refresh) is looked up again first: its IDs
    /// are never issued without their shape.
    ///
    /// # Errors
    /// 404 when no database knows the biz.
    pub async fn shape_of(&self, biz: &BizTag) -> Result<Option<Arc<BizShape>>, Error> {
        if let Some(shape) = self.store.with_catalog(|c| c.shape_of(biz.as_str())) {
            return Ok(shape);
        }
        self.store
            .look_up(biz.as_str(), None)
            .await
            .shape_of(biz.as_str())
            .ok_or_else(|| StoreError::NotFound(biz.to_string()).into())
    }

    /// `n` IDs of `biz` in its order, with its shape.
    ///
    /// # Errors
    /// As the cache's; 409 when an ID falls beyond an opaque domain (the batch is not
    /// issued: its IDs are never used).
    pub async fn ordered_ids(
        &self,
        biz: &BizTag,
        n: usize,
    ) -> Result<(Vec<i64>, Option<Arc<BizShape>>), Error> {
        let shape = self.shape_of(biz).await?;
        refuse_sequence(biz, shape.as_deref())?;
        let mut ids = match shape.as_ref().and_then(|s| s.period.as_ref()) {
            Some(period) => self.cache.next_ids_in(biz, n, period).await?,
            None => self.cache.next_ids(biz, n).await?,
        };
        if let Some(shape) = &shape {
            shape.order_ids(&mut ids).map_err(|e| Error::Conflict {
                code: "id_space_exhausted",
                message: format!("biz `{biz}`: {e}"),
            })?;
        }
        Ok((ids, shape))
    }

    /// Whether segments of `biz` may be handed to a client: not for a keyed order,
    /// which the client could not apply without the key (and handing out keys would
    /// leak them).
    ///
    /// # Errors
    /// 409 `segments_unavailable` for a shuffled or opaque biz, and for one whose
    /// counter restarts each period (the v1 route carves its segments before this
    /// check; Tinyid's answer cannot say when the period ends).
    pub async fn check_segments(&self, biz: &BizTag) -> Result<(), Error> {
        let shape = self.shape_of(biz).await?;
        refuse_sequence(biz, shape.as_deref())?;
        match shape {
            Some(shape) if shape.period.is_some() => {
                Err(StoreError::Periodic(biz.to_string()).into())
            }
            Some(shape) if shape.ordering.order() != IdOrder::Sequential => Err(Error::Conflict {
                code: "segments_unavailable",
                message: format!(
                    "biz `{biz}` issues its IDs in a {} order, which only the server applies: take IDs from nextId or /v1/ids/{biz}",
                    order_name(shape.ordering.order())
                ),
            }),
            _ => Ok(()),
        }
    }
}

/// 409 `sequence_biz` for a sequence biz, which has per-key numbers and no IDs.
///
/// # Errors
/// As said, when `shape` is a sequence's.
pub fn refuse_sequence(biz: &BizTag, shape: Option<&BizShape>) -> Result<(), Error> {
    match shape.and_then(|s| s.sequence) {
        None => Ok(()),
        Some(_) => Err(Error::Conflict {
            code: "sequence_biz",
            message: format!(
                "biz `{biz}` is a sequence: it issues per-key numbers, not IDs; take them from /v1/sequences/{biz}/next"
            ),
        }),
    }
}
