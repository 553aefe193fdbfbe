//! Who may use which biz: tokens checked against the in-memory catalog.

use std::cell::RefCell;

use subtle::ConstantTimeEq;

use crate::biz::{BizTag, TokenDigest, token_digest};
use crate::store::{BizEntry, Catalog, Store, StoreError, live_at};

use super::Error;

/// Whether `token` is a live token (known, neither revoked nor expired), whatever it is
/// granted: what `AUTH` of the Redis protocol checks. Each command then checks the
/// token against the biz its key names.
pub async fn live_token(store: &Store, token: &str) -> bool {
    if token.is_empty() {
        return false;
    }
    let now = store.unix_now();
    let digest = token_digest(token);
    if store.with_catalog(|c| c.grant(&digest, now).is_some()) {
        return true;
    }
    store
        .look_up("", Some(&digest))
        .await
        .grant(&digest, now)
        .is_some()
}

/// Checks that `token` may use `biz` and that the biz can be served.
///
/// The catalog is in memory; on a miss (a token or biz created since the last
/// refresh) it is re-read once, so new bizs and tokens work without a restart.
///
/// # Errors
/// 401 for a missing token, and alike for an unknown, revoked or expired one; 404 for
/// an unknown biz, 403 for a token not granted the biz, the biz's refusal when its rows
/// overlap; 503 (unavailable) while no database has been read since the start.
pub async fn authorize(store: &Store, token: Option<&str>, biz: &BizTag) -> Result<(), Error> {
    authorize_for(store, token, biz, true).await
}

/// [`authorize`]; `needs_row`: whether the biz must have rows to be served (a biz of
/// snowflake IDs alone, named in `[snowflake] bizs`, has none: its token is enough).
pub async fn authorize_for(
    store: &Store,
    token: Option<&str>,
    biz: &BizTag,
    needs_row: bool,
) -> Result<(), Error> {
    let token = token
        .filter(|t| !t.is_empty())
        .ok_or(Error::Unauthorized("missing token"))?;
    // Expiry is judged by the clock at the request, not at the last refresh. (The clock
    // read is a vDSO call, no system call.)
    let now = store.unix_now();
    if let Some(note) =
        store.with_catalog(|catalog| Recent::allowed(catalog.generation(), token, biz, now))
    {
        if let Some(digest) = note {
            store.note_use(&digest, now);
        }
        return Ok(());
    }
    let digest = token_digest(token);
    // A live token granted a known biz is decided by the catalog in memory, looked up
    // once; anything else may be new since the last refresh, so the catalog is re-read
    // first. A revoked or expired token is then refused as an unknown one is.
    let served = |catalog: &Catalog| {
        let grant = catalog.grant(&digest, now)?;
        let decision = match needs_row {
            true => servable(catalog.biz(biz.as_str())?),
            false => Ok(()),
        };
        grant
            .allows(biz.as_str())
            .then(|| (catalog.generation(), grant.expires, decision))
    };
    let (generation, expires, decision) = match store.with_catalog(served) {
        Some(served) => served,
        None => {
            let catalog = store.look_up(biz.as_str(), Some(&digest)).await;
            let expires = catalog.grant(&digest, now).and_then(|g| g.expires);
            let decision = decide(&catalog, &digest, biz, now, needs_row);
            (catalog.generation(), expires, decision)
        }
    };
    if decision.is_ok() && Recent::remember(generation, token, biz, expires, digest, now) {
        store.note_use(&digest, now);
    }
    decision
}

/// Seconds between two notes of one token's use by one thread: last use is shown
/// approximately, and noting it costs a lock shared by the workers.
const NOTE_EVERY: i64 = 60;

/// Tokens recently allowed a biz on this thread (an HTTP worker is one thread), each
/// with the generation of the catalog that allowed it and the token's expiry. While
/// that catalog is current and the expiry not reached, the same token and biz are
/// allowed again without hashing the token and looking it up: the decision depends on
/// nothing else. A new catalog (a token revoked, a biz refused) has a new generation,
/// so nothing decided before it is reused.
///
/// The token is compared in constant time, as the catalog compares digests; only an
/// exact match, which the answer reveals anyway, takes the shorter path. The tokens
/// stay in this thread's memory, as long as the requests that carried them did.
struct Recent {
    /// The catalog that allowed the token.
    generation: u64,
    /// The biz it was allowed.
    biz: BizTag,
    /// The token as the request carried it.
    token: Box<[u8]>,
    /// From when on (unix seconds) the token is refused, as that catalog said.
    expires: Option<i64>,
    /// The token's SHA-256, for noting its use without hashing it again.
    digest: TokenDigest,
    /// When this thread last noted the token's use (unix seconds).
    noted: i64,
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

    /// Whether the catalog of `generation` allowed `token` to use `biz` on this thread,
    /// and the token has not expired by `now`: `None` when not; else the token's digest
    /// when its use is due to be noted (then counted as noted).
    fn allowed(
        generation: u64,
        token: &str,
        biz: &BizTag,
        now: i64,
    ) -> Option<Option<TokenDigest>> {
        RECENT.with_borrow_mut(|recent| {
            let r = recent.iter_mut().find(|r| {
                r.generation == generation && r.matches(token, biz) && live_at(r.expires, now)
            })?;
            Some(r.note_due(now))
        })
    }

    /// Remembers that the catalog of `generation` allowed `token` (of `digest`, refused
    /// from `expires` on) to use `biz`. Returns whether its use is due to be noted.
    fn remember(
        generation: u64,
        token: &str,
        biz: &BizTag,
        expires: Option<i64>,
        digest: TokenDigest,
        now: i64,
    ) -> bool {
        RECENT.with_borrow_mut(|recent| {
            if let Some(r) = recent.iter_mut().find(|r| r.matches(token, biz)) {
                r.generation = generation;
                r.expires = expires;
                return r.note_due(now).is_some();
            }
            if recent.len() == RECENT_GRANTS {
                recent.remove(0);
            }
            recent.push(Recent {
                generation,
                biz: biz.clone(),
                token: token.as_bytes().into(),
                expires,
                digest,
                noted: now,
            });
            true
        })
    }

    /// The digest, when the use was last noted [`NOTE_EVERY`] or more seconds before
    /// `now`; it then counts as noted at `now`.
    fn note_due(&mut self, now: i64) -> Option<TokenDigest> {
        if now - self.noted < NOTE_EVERY {
            return None;
        }
        self.noted = now;
        Some(self.digest)
    }
}

/// Whether the token of `digest` may use `biz`, by `catalog`. A catalog no database
/// has been read into knows no token and no biz: that is an outage (503, Tinyid code 6,
/// so that clients try another server), never a verdict on the token.
fn decide(
    catalog: &Catalog,
    digest: &TokenDigest,
    biz: &BizTag,
    now: i64,
    needs_row: bool,
) -> Result<(), Error> {
    if !catalog.is_read() {
        return Err(StoreError::Unavailable(
            "no database has answered since this server started: tokens and bizs are not known yet"
                .into(),
        )
        .into());
    }
    let granted = catalog
        .grant(digest, now)
        .ok_or(Error::Unauthorized("invalid token"))?
        .allows(biz.as_str());
    let entry = match needs_row {
        true => Some(
            catalog
                .biz(biz.as_str())
                .ok_or_else(|| StoreError::NotFound(biz.to_string()))?,
        ),
        false => None,
    };
    if !granted {
        return Err(Error::Forbidden(biz.to_string()));
    }
    entry.map_or(Ok(()), servable)
}

/// The biz's refusal when its rows overlap or are invalid.
fn servable(entry: &BizEntry) -> Result<(), Error> {
    match &entry.refused {
        Some(e) => Err(StoreError::clone(e).into()),
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

    /// Whether `token` is remembered allowed at time 0.
    fn allowed(generation: u64, token: &str, biz: &BizTag) -> bool {
        Recent::allowed(generation, token, biz, 0).is_some()
    }

    /// Remembers `token` allowed without expiry at time 0.
    fn remember(generation: u64, token: &str, biz: &BizTag) {
        Recent::remember(generation, token, biz, None, token_digest(token), 0);
    }

    #[test]
    fn an_expired_grant_is_not_remembered_allowed() {
        let order = biz("order");
        let digest = token_digest(TOKEN);
        Recent::remember(3, TOKEN, &order, Some(100), digest, 50);
        assert!(Recent::allowed(3, TOKEN, &order, 99).is_some());
        assert!(Recent::allowed(3, TOKEN, &order, 100).is_none());
    }

    #[test]
    fn a_use_is_noted_at_most_once_a_minute() {
        let order = biz("order");
        let digest = token_digest(TOKEN);
        assert!(
            Recent::remember(4, TOKEN, &order, None, digest, 1000),
            "first use"
        );
        assert_eq!(Recent::allowed(4, TOKEN, &order, 1059), Some(None));
        assert!(!Recent::remember(5, TOKEN, &order, None, digest, 1059));
        assert_eq!(Recent::allowed(5, TOKEN, &order, 1060), Some(Some(digest)));
        assert_eq!(Recent::allowed(5, TOKEN, &order, 1061), Some(None));
        assert!(Recent::remember(6, TOKEN, &order, None, digest, 1120));
    }

    #[test]
    fn only_the_exact_token_biz_and_catalog_are_remembered() {
        let (order, pay) = (biz("order"), biz("pay"));
        assert!(!allowed(7, TOKEN, &order));
        remember(7, TOKEN, &order);
        assert!(allowed(7, TOKEN, &order));
        assert!(!allowed(8, TOKEN, &order), "another catalog");
        assert!(!allowed(7, TOKEN, &pay), "another biz");
        let last_changed = format!("{}0", &TOKEN[..63]);
        for other in [&TOKEN[..63], &format!("{TOKEN}0"), &last_changed, ""] {
            assert!(!allowed(7, other, &order), "{other:?}");
        }
        // A newer catalog's grant replaces the older one.
        remember(8, TOKEN, &order);
        assert!(allowed(8, TOKEN, &order));
        assert!(!allowed(7, TOKEN, &order));
    }

    #[test]
    fn the_oldest_grant_is_forgotten_first() {
        let tokens: Vec<String> = (0..=RECENT_GRANTS).map(|i| format!("{i:064}")).collect();
        let order = biz("order");
        for t in &tokens {
            remember(1, t, &order);
        }
        assert!(!allowed(1, &tokens[0], &order));
        assert!(tokens[1..].iter().all(|t| allowed(1, t, &order)));
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
