//! Who may use which biz: tokens checked against the in-memory catalog.

use std::cell::RefCell;
use std::time::Instant;

use subtle::ConstantTimeEq;

use crate::biz::{BizTag, TokenDigest, token_digest};
use crate::store::{BizEntry, Catalog, Store, StoreError};

use super::error::ApiError;

/// Checks that `token` may use `biz` and that the biz can be served.
///
/// The catalog is in memory; on a miss (a token or biz created since the last
/// refresh) it is re-read once, so new bizs and tokens work without a restart.
///
/// # Errors
/// 401 for a missing or unknown token, 404 for an unknown biz, 403 for a token not
/// granted the biz, the biz's refusal when its rows overlap; 503 (unavailable) while no
/// database has been read since the start.
pub async fn authorize(store: &Store, token: Option<&str>, biz: &BizTag) -> Result<(), ApiError> {
    let token = token
        .filter(|t| !t.is_empty())
        .ok_or(ApiError::Unauthorized("missing token"))?;
    if store.with_catalog(|catalog| Recent::allowed(catalog.generation(), token, biz)) {
        return Ok(());
    }
    let digest = token_digest(token);
    // A token granted a known biz is decided by the catalog in memory, looked up once;
    // anything else may be new since the last refresh, so the catalog is re-read first.
    let served = |catalog: &Catalog| match (
        catalog.granted(&digest, biz.as_str()),
        catalog.biz(biz.as_str()),
    ) {
        (Some(true), Some(entry)) => Some((catalog.generation(), servable(entry))),
        _ => None,
    };
    let (generation, decision) = match store.with_catalog(served) {
        Some(served) => served,
        None => {
            let catalog = store.refresh_since(Instant::now()).await;
            (catalog.generation(), decide(&catalog, &digest, biz))
        }
    };
    if decision.is_ok() {
        Recent::remember(generation, token, biz);
    }
    decision
}

/// Tokens recently allowed a biz on this thread (an HTTP worker is one thread), each
/// with the generation of the catalog that allowed it. While that catalog is current,
/// the same token and biz are allowed again without hashing the token and looking it
/// up: the decision depends on nothing else. A new catalog (a token revoked, a biz
/// refused) has a new generation, so nothing decided before it is reused.
///
/// The token is compared in constant time, as the catalog compares digests; only an
/// exact match, which the answer reveals anyway, takes the shorter path. The tokens
/// stay in this thread's memory, as long as the requests that carried them did.
struct Recent {
    generation: u64,
    biz: BizTag,
    token: Box<[u8]>,
}

/// Whether `a` equals `b`, in a time that depends on their lengths only: every byte
/// is compared and the differences are folded without a branch. (`subtle`'s slice
/// comparison does the same behind a barrier per byte, which for a 64-character token
/// costs as much as the lookup this saves; the barrier here is on the folded result.)
fn same_token(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |diff, (x, y)| diff | (x ^ y));
    bool::from(diff.ct_eq(&0))
}

/// Most grants a thread remembers; the oldest is forgotten first.
const RECENT_GRANTS: usize = 16;

thread_local! {
    static RECENT: RefCell<Vec<Recent>> = const { RefCell::new(Vec::new()) };
}

impl Recent {
    fn matches(&self, token: &str, biz: &BizTag) -> bool {
        self.biz == *biz && same_token(&self.token, token.as_bytes())
    }

    /// Whether the catalog of `generation` allowed `token` to use `biz` on this thread.
    fn allowed(generation: u64, token: &str, biz: &BizTag) -> bool {
        RECENT.with_borrow(|recent| {
            recent
                .iter()
                .any(|r| r.generation == generation && r.matches(token, biz))
        })
    }

    fn remember(generation: u64, token: &str, biz: &BizTag) {
        RECENT.with_borrow_mut(|recent| {
            if let Some(r) = recent.iter_mut().find(|r| r.matches(token, biz)) {
                r.generation = generation;
                return;
            }
            if recent.len() == RECENT_GRANTS {
                recent.remove(0);
            }
            recent.push(Recent {
                generation,
                biz: biz.clone(),
                token: token.as_bytes().into(),
            });
        });
    }
}

/// Whether the token of `digest` may use `biz`, by `catalog`. A catalog no database
/// has been read into knows no token and no biz: that is an outage (503, Tinyid code 6,
/// so that clients try another server), never a verdict on the token.
fn decide(catalog: &Catalog, digest: &TokenDigest, biz: &BizTag) -> Result<(), ApiError> {
    if !catalog.is_read() {
        return Err(StoreError::Unavailable(
            "no database has answered since this server started: tokens and bizs are not known yet"
                .into(),
        )
        .into());
    }
    let granted = catalog
        .granted(digest, biz.as_str())
        .ok_or(ApiError::Unauthorized("invalid token"))?;
    let entry = catalog
        .biz(biz.as_str())
        .ok_or_else(|| StoreError::NotFound(biz.to_string()))?;
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

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    fn biz(name: &str) -> BizTag {
        BizTag::parse(name).unwrap()
    }

    #[test]
    fn only_the_exact_token_biz_and_catalog_are_remembered() {
        let (order, pay) = (biz("order"), biz("pay"));
        assert!(!Recent::allowed(7, TOKEN, &order));
        Recent::remember(7, TOKEN, &order);
        assert!(Recent::allowed(7, TOKEN, &order));
        assert!(!Recent::allowed(8, TOKEN, &order), "another catalog");
        assert!(!Recent::allowed(7, TOKEN, &pay), "another biz");
        let last_changed = format!("{}0", &TOKEN[..63]);
        for other in [&TOKEN[..63], &format!("{TOKEN}0"), &last_changed, ""] {
            assert!(!Recent::allowed(7, other, &order), "{other:?}");
        }
        // A newer catalog's grant replaces the older one.
        Recent::remember(8, TOKEN, &order);
        assert!(Recent::allowed(8, TOKEN, &order));
        assert!(!Recent::allowed(7, TOKEN, &order));
    }

    #[test]
    fn the_oldest_grant_is_forgotten_first() {
        let tokens: Vec<String> = (0..=RECENT_GRANTS).map(|i| format!("{i:064}")).collect();
        let order = biz("order");
        for t in &tokens {
            Recent::remember(1, t, &order);
        }
        assert!(!Recent::allowed(1, &tokens[0], &order));
        assert!(tokens[1..].iter().all(|t| Recent::allowed(1, t, &order)));
        RECENT.with_borrow(|recent| assert_eq!(recent.len(), RECENT_GRANTS));
    }

    #[test]
    fn tokens_compare_by_every_byte() {
        assert!(same_token(b"abc", b"abc"));
        assert!(same_token(b"", b""));
        assert!(!same_token(b"abc", b"abd"));
        assert!(!same_token(b"abc", b"bbc"));
        assert!(!same_token(b"abc", b"abcd"));
    }
}
