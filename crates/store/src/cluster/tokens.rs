//! Token administration on every database (add, revoke, rotate, list), and the last
//! uses that servers note in memory and write back off the request path.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures_util::future::join_all;
use parking_lot::Mutex;

use super::Store;
use super::admin::audit;
use crate::biz::{BizTag, TokenDigest, generate_token, hash_token};
use crate::store::catalog::{TokenSummary, merge_tokens};
use crate::store::{DbError, Reason, Refusal, StoreError};

/// Hex digits of a token's hash shown by `token list` and in reports and audit lines.
pub const HASH_PREFIX: usize = 16;

/// Fewest hex digits of a token's hash that `token revoke` and `token rotate` accept:
/// a shorter prefix too easily names a token other than the one meant.
const MIN_HASH_PREFIX: usize = 8;

/// Every token, merged over the databases that answered.
#[derive(Debug)]
pub struct TokenList {
    /// One summary per token, oldest first.
    pub tokens: Vec<TokenSummary>,
    /// The databases that could not be read, with why.
    pub unreachable: Vec<(String, DbError)>,
}

/// A token created by `token rotate`, and how the old one was retired.
#[derive(Debug)]
pub struct Rotation {
    /// The new token: shown once, only its hash is stored.
    pub token: String,
    /// The bizs the new token is granted: the old token's.
    pub bizs: Vec<String>,
    /// One line per database and step.
    pub report: Vec<String>,
    /// Databases where the old token's expiry could not be lowered.
    pub failed: Vec<String>,
}

/// The hash prefix shown for a token.
fn short(hash: &str) -> &str {
    hash.get(..HASH_PREFIX).unwrap_or(hash)
}

/// Unix seconds `after` the Unix second `now`.
fn after(now: i64, after: Duration) -> i64 {
    now.saturating_add(i64::try_from(after.as_secs()).unwrap_or(i64::MAX))
}

/// The token uses noted in memory and not yet written to the databases.
///
/// # Lock order
/// `pending` is a plain (`parking_lot`) mutex held for one map update or swap, never
/// across an await; it nests no other lock. `writing` is an atomic, no lock.
#[derive(Default)]
pub(super) struct Uses {
    /// Token uses noted since they were last written, by token. Plain mutex: held for
    /// one map update, which each HTTP worker makes about once a minute per token.
    pub(super) pending: Mutex<HashMap<TokenDigest, i64>>,
    /// Set while last uses are being written, so that writes never pile up behind a
    /// slow database.
    pub(super) writing: Arc<AtomicBool>,
}

impl Uses {
    /// Notes that the token of `digest` was used at `at` (unix seconds), keeping the
    /// latest use per token.
    fn note(&self, digest: &TokenDigest, at: i64) {
        let mut uses = self.pending.lock();
        let last = uses.entry(*digest).or_insert(at);
        *last = (*last).max(at);
    }

    /// The uses noted so far, hex-encoded, unless there are none or an earlier write is
    /// still under way (then the notes wait for the next call). Returning some marks a
    /// write as under way: clear `writing` when it is over.
    fn start_write(&self) -> Option<Vec<(String, i64)>> {
        if self.pending.lock().is_empty() || self.writing.swap(true, Ordering::AcqRel) {
            return None;
        }
        Some(
            std::mem::take(&mut *self.pending.lock())
                .into_iter()
                .map(|(digest, at)| (hex::encode(digest), at))
                .collect(),
        )
    }
}

impl Store {
    /// Notes that the token of `digest` was used at `at` (unix seconds). The notes are
    /// written to the databases by the next catalog refresh, in the background.
    pub fn note_use(&self, digest: &TokenDigest, at: i64) {
        self.uses.note(digest, at);
    }

    /// Writes the noted token uses to every reachable database in a task of its own,
    /// so that no request waiting on a refresh also waits on these writes. While an
    /// earlier write is under way, the notes wait for the next refresh.
    pub(super) fn write_uses(&self) {
        let Some(uses) = self.uses.start_write() else {
            return;
        };
        let targets: Vec<(String, Arc<dyn crate::store::SegmentStore>)> = (0..self.dbs.list.len())
            .filter(|&i| self.dbs.is_reachable(i))
            .map(|i| {
                (
                    self.dbs.list[i].name.clone(),
                    self.dbs.list[i].store.clone(),
                )
            })
            .collect();
        let (timeout, writing) = (self.dbs.timing.fetch_timeout, self.uses.writing.clone());
        tokio::spawn(async move {
            let uses = &uses;
            join_all(targets.iter().map(|(name, db)| async move {
                let outcome = tokio::time::timeout(timeout, db.touch_tokens(uses)).await;
                if let Err(e) = outcome.unwrap_or_else(|_| Err(DbError::Timeout { after: timeout })) {
                    // Last use is approximate: a missed write is made good by the next use.
                    tracing::warn!(database = %name, error = %e, "could not record token last uses");
                }
            }))
            .await;
            writing.store(false, Ordering::Release);
        });
    }

    /// Every token merged over the databases, and the databases that did not answer.
    pub async fn list_tokens(&self) -> TokenList {
        let mut rows = Vec::new();
        let mut unreachable = Vec::new();
        let reads = self.dbs.on_all(|db| db.tokens()).await;
        for ((i, name), read) in self.dbs.names.iter().enumerate().zip(reads) {
            match read {
                Ok(read) => rows.extend(read.into_iter().map(|r| (i, r))),
                Err(e) => unreachable.push((name.clone(), e)),
            }
        }
        TokenList {
            tokens: merge_tokens(rows.iter().map(|(i, r)| (*i, r))),
            unreachable,
        }
    }

    /// The one token whose hash starts with `prefix`, with the names of the databases
    /// that could not be read.
    async fn find_token(&self, prefix: &str) -> Result<(TokenSummary, Vec<String>), StoreError> {
        let prefix = prefix.trim().to_ascii_lowercase();
        if prefix.len() < MIN_HASH_PREFIX || !prefix.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Refusal::new(
                Reason::InvalidArgument,
                format!(
                    "`{prefix}` is not a token's hash prefix ({MIN_HASH_PREFIX} or more hex digits); nothing changed"
                ),
            )
            .hint(format!(
                "give at least {MIN_HASH_PREFIX} hex digits of the token's SHA-256, as `segmint token list` shows it"
            ))
            .into());
        }
        let list = self.list_tokens().await;
        let down: Vec<String> = list.unreachable.iter().map(|(n, _)| n.clone()).collect();
        if down.len() == self.dbs.list.len() {
            let why: Vec<String> = list
                .unreachable
                .iter()
                .map(|(n, e)| format!("\"{n}\": {e}"))
                .collect();
            return Err(StoreError::Unavailable(why.join("; ")));
        }
        let mut found: Vec<TokenSummary> = list
            .tokens
            .into_iter()
            .filter(|t| t.hash.starts_with(&prefix))
            .collect();
        match found.len() {
            1 => Ok((found.remove(0), down)),
            0 => Err(Refusal::new(
                Reason::TokenUnknown,
                format!(
                    "no token's hash starts with `{prefix}`{}; nothing changed",
                    match down.is_empty() {
                        true => String::new(),
                        false => format!(" on the databases read (not {})", quoted(&down)),
                    }
                ),
            )
            .hint("`segmint token list` shows the tokens' hashes")
            .into()),
            _ => {
                let candidates: Vec<String> = found
                    .iter()
                    .map(|t| format!("  {} (biz {})", short(&t.hash), joined(&t.bizs)))
                    .collect();
                Err(Refusal::new(
                    Reason::TokenAmbiguous,
                    format!("`{prefix}` names {} tokens; nothing changed", found.len()),
                )
                .hint("give more of the hash")
                .notes(candidates)
                .into())
            }
        }
    }

    /// Creates a token for `biz` and grants it on every database. Returns the token
    /// (shown once; only its hash is stored) and one report line per database.
    ///
    /// # Errors
    /// As [`Store::add_token_expiring`].
    pub async fn add_token(
        &self,
        biz: &BizTag,
        remark: &str,
    ) -> Result<(String, Vec<String>), StoreError> {
        self.add_token_expiring(biz, remark, None).await
    }

    /// As [`Store::add_token`], refused from `expires_in` after now on, if given.
    ///
    /// # Errors
    /// [`StoreError::Refused`] when a database is unreachable (nothing changed) or an
    /// insert fails midway (the report says where it was granted);
    /// [`StoreError::NotFound`] when no database has the biz.
    pub async fn add_token_expiring(
        &self,
        biz: &BizTag,
        remark: &str,
        expires_in: Option<Duration>,
    ) -> Result<(String, Vec<String>), StoreError> {
        self.add_token_for(std::slice::from_ref(biz), remark, expires_in, |_| true)
            .await
    }

    /// One token for every biz of `bizs` (each granted once, in the order given; at
    /// least one), as [`Store::add_token_expiring`]. `needs_row`: whether a biz must
    /// have a row (a biz of snowflake IDs alone, named in `[snowflake] bizs`, has
    /// none). Every biz is checked before anything is written.
    ///
    /// # Errors
    /// As [`Store::add_token_expiring`], naming the first biz no database has; a
    /// [`Refusal`] when `bizs` is empty.
    pub async fn add_token_for(
        &self,
        bizs: &[BizTag],
        remark: &str,
        expires_in: Option<Duration>,
        needs_row: impl Fn(&BizTag) -> bool,
    ) -> Result<(String, Vec<String>), StoreError> {
        let mut granted: Vec<String> = Vec::with_capacity(bizs.len());
        for biz in bizs {
            if granted.iter().any(|b| b == biz.as_str()) {
                continue;
            }
            let existing = self.dbs.biz_everywhere(biz).await?;
            if needs_row(biz) && existing.iter().all(Option::is_none) {
                return Err(StoreError::NotFound(biz.to_string()));
            }
            granted.push(biz.to_string());
        }
        if granted.is_empty() {
            return Err(
                Refusal::new(Reason::InvalidArgument, "a token needs at least one biz").into(),
            );
        }
        let bizs = granted;
        self.grant_token(
            "token add",
            &bizs,
            remark,
            expires_in.map(|e| after(self.unix_now(), e)),
        )
        .await
    }

    /// Creates a token, grants it `bizs` on every database and logs the change as
    /// `command`.
    async fn grant_token(
        &self,
        command: &str,
        bizs: &[String],
        remark: &str,
        expires: Option<i64>,
    ) -> Result<(String, Vec<String>), StoreError> {
        let token = generate_token();
        let hash = hash_token(&token);
        let mut report = Vec::with_capacity(self.dbs.list.len());
        let mut changed = Vec::with_capacity(self.dbs.list.len());
        let mut failed = None;
        'dbs: for db in &self.dbs.list {
            for biz in bizs {
                if let Err(e) = db.store.insert_token(&hash, biz, remark, expires).await {
                    report.push(format!("\"{}\": FAILED: {e}", db.name));
                    failed = Some(e);
                    break 'dbs;
                }
            }
            changed.push(db.name.as_str());
            report.push(format!(
                "\"{}\": granted biz {} to token {}…",
                db.name,
                bizs.iter()
                    .map(|b| format!("`{b}`"))
                    .collect::<Vec<_>>()
                    .join(", "),
                short(&hash)
            ));
        }
        audit(command, &bizs.join(","), short(&hash), &changed);
        match failed {
            Some(_) => Err(Refusal::new(
                Reason::WriteFailed,
                "the token could not be granted on every database, and is not shown",
            )
            .hint("run the command again: the token granted in part was never shown")
            .notes(report)
            .into()),
            None => Ok((token, report)),
        }
    }

    /// Revokes, on every database, the token whose hash starts with `prefix`. Servers
    /// refuse it from their next catalog refresh on, as an unknown token.
    ///
    /// # Errors
    /// [`StoreError::Refused`] when the prefix is too short or names no token or
    /// several (nothing changed), or when a database could not be written: the
    /// revocation then holds where it was written, since a token revoked on any
    /// database is revoked; the message says to run the command again.
    /// [`StoreError::Unavailable`] when no database answers.
    pub async fn revoke_token(&self, prefix: &str) -> Result<Vec<String>, StoreError> {
        let (token, _) = self.find_token(prefix).await?;
        let now = self.unix_now();
        let hash = &token.hash;
        let results = self.dbs.on_all(|db| db.revoke_tokens(hash, now)).await;
        let mut report = Vec::with_capacity(results.len());
        let (mut changed, mut failed) = (Vec::new(), Vec::new());
        for ((i, name), result) in self.dbs.names.iter().enumerate().zip(results) {
            report.push(match result {
                Ok(0) if token.databases.contains(&i) => {
                    format!("\"{name}\": token {}… was already revoked", short(hash))
                }
                Ok(0) => format!("\"{name}\": holds no row of token {}…", short(hash)),
                Ok(_) => {
                    changed.push(name.as_str());
                    format!(
                        "\"{name}\": revoked token {}… (biz {})",
                        short(hash),
                        joined(&token.bizs)
                    )
                }
                Err(e) => {
                    failed.push(name.clone());
                    format!("\"{name}\": FAILED: {e}")
                }
            });
        }
        audit("token revoke", &joined(&token.bizs), short(hash), &changed);
        if failed.is_empty() {
            return Ok(report);
        }
        Err(Refusal::new(
            Reason::WriteFailed,
            format!(
                "the revocation holds where it was written (a token revoked on any database is refused everywhere), but {} still grant(s) it on its own",
                quoted(&failed)
            ),
        )
        .hint("run the command again when it is back")
        .notes(report)
        .into())
    }

    /// Replaces the token whose hash starts with `prefix`: a new token for the same
    /// bizs and remark (refused from `expires_in` after now on, if given), and the old
    /// one's expiry lowered to `grace` from now on every database.
    ///
    /// # Errors
    /// [`StoreError::Refused`] when the prefix names no single token, the token is
    /// revoked, or a database is unreachable (nothing changed then), or when the new
    /// token could not be granted everywhere.
    pub async fn rotate_token(
        &self,
        prefix: &str,
        grace: Duration,
        expires_in: Option<Duration>,
    ) -> Result<Rotation, StoreError> {
        let (old, down) = self.find_token(prefix).await?;
        if !down.is_empty() {
            return Err(Refusal::new(
                Reason::DatabaseUnanswered,
                format!("{} unreachable; nothing changed", quoted(&down)),
            )
            .into());
        }
        if old.revoked.is_some() {
            return Err(Refusal::new(
                Reason::TokenRevoked,
                format!("token {}… is revoked; nothing changed", short(&old.hash)),
            )
            .hint("create a new one with `segmint token add`")
            .into());
        }
        let bizs: Vec<String> = old.bizs.iter().cloned().collect();
        let (token, mut report) = self
            .grant_token(
                "token rotate",
                &bizs,
                &old.remark,
                expires_in.map(|e| after(self.unix_now(), e)),
            )
            .await?;
        let until = after(self.unix_now(), grace);
        let hash = &old.hash;
        let results = self.dbs.on_all(|db| db.expire_token(hash, until)).await;
        let (mut changed, mut failed) = (Vec::new(), Vec::new());
        for (name, result) in self.dbs.names.iter().zip(results) {
            report.push(match result {
                Ok(0) => format!(
                    "\"{name}\": old token {}… already expires by then",
                    short(hash)
                ),
                Ok(_) => {
                    changed.push(name.as_str());
                    format!(
                        "\"{name}\": old token {}… expires in {}",
                        short(hash),
                        humantime::format_duration(grace)
                    )
                }
                Err(e) => {
                    failed.push(name.clone());
                    format!("\"{name}\": FAILED to lower the old token's expiry: {e}")
                }
            });
        }
        audit("token rotate", &bizs.join(","), short(hash), &changed);
        Ok(Rotation {
            token,
            bizs,
            report,
            failed,
        })
    }
}

/// `"a", "b"`: database names for a message.
fn quoted(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("\"{n}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `x,y`: a token's bizs for a message.
fn joined<'a>(bizs: impl IntoIterator<Item = &'a String>) -> String {
    bizs.into_iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .join(",")
}
