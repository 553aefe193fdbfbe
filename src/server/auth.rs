//! Who may use which biz: tokens checked against the in-memory catalog.

use std::time::Instant;

use crate::biz::{BizTag, TokenDigest, token_digest};
use crate::store::{BizEntry, Catalog, Store};

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
    let digest = token_digest(token);
    // A token granted a known biz is decided by the catalog in memory, looked up once;
    // anything else may be new since the last refresh, so the catalog is re-read first.
    let served = |catalog: &Catalog| match (
        catalog.granted(&digest, biz.as_str()),
        catalog.biz(biz.as_str()),
    ) {
        (Some(true), Some(entry)) => Some(servable(entry)),
        _ => None,
    };
    if let Some(decision) = store.with_catalog(served) {
        return decision;
    }
    decide(&*store.refresh_since(Instant::now()).await, &digest, biz)
}

/// Whether the token of `digest` may use `biz`, by `catalog`.
fn decide(catalog: &Catalog, digest: &TokenDigest, biz: &BizTag) -> Result<(), ApiError> {
    let granted = catalog
        .granted(digest, biz.as_str())
        .ok_or(ApiError::Unauthorized("invalid token"))?;
    let entry = catalog
        .biz(biz.as_str())
        .ok_or_else(|| crate::store::StoreError::NotFound(biz.to_string()))?;
    if !granted {
        return Err(ApiError::Forbidden(biz.to_string()));
    }
    servable(entry)
}

/// The biz's refusal when its rows overlap or are invalid.
fn servable(entry: &BizEntry) -> Result<(), ApiError> {
    match &entry.refused {
        Some(e) => Err(e.clone().into()),
        None => Ok(()),
    }
}
