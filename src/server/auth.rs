//! Who may use which biz: tokens checked against the in-memory catalog.

use std::time::Instant;

use crate::biz::{BizTag, hash_token};
use crate::store::{Catalog, Store};

use super::error::ApiError;

/// Checks that `token` may use `biz` and that the biz can be served.
///
/// The catalog is in memory; on a miss (a token or biz created since the last
/// refresh) it is re-read once, so new bizs and tokens work without a restart.
///
/// # Errors
/// 401 for a missing or unknown token, 404 for an unknown biz, 403 for a token not
/// granted the biz, the biz's refusal when its rows overlap.
pub async fn authorize(store: &Store, token: Option<&str>, biz: &BizTag) -> Result<(), ApiError> {
    let token = token
        .filter(|t| !t.is_empty())
        .ok_or(ApiError::Unauthorized("missing token"))?;
    let hash = hash_token(token);
    let known = |catalog: &Catalog| {
        catalog.granted(&hash, biz.as_str()) == Some(true) && catalog.biz(biz.as_str()).is_some()
    };
    if let Some(decision) = store.with_catalog(|c| known(c).then(|| decide(c, &hash, biz))) {
        return decision;
    }
    decide(&*store.refresh_since(Instant::now()).await, &hash, biz)
}

/// Whether the token hashed to `hash` may use `biz`, by `catalog`.
fn decide(catalog: &Catalog, hash: &str, biz: &BizTag) -> Result<(), ApiError> {
    let granted = catalog
        .granted(hash, biz.as_str())
        .ok_or(ApiError::Unauthorized("invalid token"))?;
    let entry = catalog
        .biz(biz.as_str())
        .ok_or_else(|| crate::store::StoreError::NotFound(biz.to_string()))?;
    if !granted {
        return Err(ApiError::Forbidden(biz.to_string()));
    }
    match &entry.refused {
        Some(e) => Err(e.clone().into()),
        None => Ok(()),
    }
}
