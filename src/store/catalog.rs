//! What the databases say exists: bizs (with the residue class of each row) and the
//! tokens granted to them. Held in memory so that requests never query for it.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};

use super::{BizRow, StoreError, TokenRow};
use crate::biz::TokenDigest;
use crate::segment::Residue;

/// The rows of one database, as last read.
#[derive(Debug, Clone, Default)]
pub(crate) struct Snapshot {
    pub bizs: Vec<BizRow>,
    pub tokens: Vec<TokenRow>,
    /// How far the other databases' rows advanced, as recorded here.
    pub witnesses: Vec<super::Witness>,
}

/// Bizs and tokens merged over every database.
#[derive(Debug, Default)]
pub struct Catalog {
    /// Every known biz.
    bizs: HashMap<String, BizEntry>,
    /// Token digests by their first four bytes, each with the bizs it may use. The
    /// lookup key is only a prefix of a SHA-256 digest; the full digest is then
    /// compared in constant time, so response times say nothing about how close a
    /// guess came.
    tokens: HashMap<[u8; 4], Vec<(TokenDigest, HashSet<String>)>>,
    /// Tells this catalog from every other built in the process (0: the empty one
    /// before the first read). What was decided by a catalog holds while it is current.
    generation: u64,
    /// Whether any database's rows went into it. Until then an unknown token or biz
    /// says nothing about the token or biz, only that no database has answered.
    read: bool,
}

/// The generation of the next catalog built.
static NEXT_GENERATION: AtomicU64 = AtomicU64::new(1);

/// One biz across the databases.
#[derive(Debug, Clone)]
pub struct BizEntry {
    /// Index of each database holding a row of the biz, with the row's class.
    pub classes: Vec<(usize, Residue)>,
    /// Set when the biz must not be served: its rows overlap or are invalid.
    pub refused: Option<StoreError>,
}

/// The first bytes of a token digest: its lookup key.
fn token_key(digest: &TokenDigest) -> [u8; 4] {
    [digest[0], digest[1], digest[2], digest[3]]
}

impl Catalog {
    /// Merges the snapshots (`None` for a database never read) of the databases
    /// named `names`, refusing every biz whose rows could overlap.
    pub(crate) fn build(names: &[String], snapshots: &[Option<Snapshot>]) -> Catalog {
        let mut bizs: HashMap<String, BizEntry> = HashMap::new();
        let mut tokens: HashMap<[u8; 4], Vec<(TokenDigest, HashSet<String>)>> = HashMap::new();
        for (db, snap) in snapshots.iter().enumerate() {
            let Some(snap) = snap else { continue };
            for row in &snap.bizs {
                let entry = bizs.entry(row.biz_type.clone()).or_insert(BizEntry {
                    classes: Vec::new(),
                    refused: None,
                });
                match Residue::new(row.delta, row.remainder) {
                    Ok(class) => entry.classes.push((db, class)),
                    Err(e) => {
                        entry.refused.get_or_insert(StoreError::InvalidRow {
                            biz: row.biz_type.clone(),
                            database: names[db].clone(),
                            reason: e.to_string(),
                        });
                    }
                }
            }
            for t in &snap.tokens {
                // A stored hash that is not 64 hex digits is the digest of no token.
                let mut digest: TokenDigest = [0; 32];
                if hex::decode_to_slice(&t.token_hash, &mut digest).is_err() {
                    continue;
                }
                let same = tokens.entry(token_key(&digest)).or_default();
                match same.iter_mut().find(|(d, _)| *d == digest) {
                    Some((_, bizs)) => {
                        bizs.insert(t.biz_type.clone());
                    }
                    None => same.push((digest, HashSet::from([t.biz_type.clone()]))),
                }
            }
        }
        for (biz, entry) in &mut bizs {
            if entry.refused.is_none() {
                entry.refused = conflict(biz, names, &entry.classes);
            }
        }
        Catalog {
            bizs,
            tokens,
            generation: NEXT_GENERATION.fetch_add(1, Ordering::Relaxed),
            read: snapshots.iter().any(Option::is_some),
        }
    }

    /// Whether any database has been read into this catalog: false while every
    /// database has been unreachable since the process started.
    pub fn is_read(&self) -> bool {
        self.read
    }

    /// Unique to this catalog within the process.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub fn biz(&self, name: &str) -> Option<&BizEntry> {
        self.bizs.get(name)
    }

    /// `None` when no database knows the token of `digest`; else whether it may use
    /// `biz`.
    pub fn granted(&self, digest: &TokenDigest, biz: &str) -> Option<bool> {
        use subtle::ConstantTimeEq;
        self.tokens
            .get(&token_key(digest))?
            .iter()
            .find(|(known, _)| bool::from(known.ct_eq(digest)))
            .map(|(_, bizs)| bizs.contains(biz))
    }

    /// Every known biz, sorted.
    pub fn biz_names(&self) -> Vec<&str> {
        let mut names: Vec<&str> = self.bizs.keys().map(String::as_str).collect();
        names.sort_unstable();
        names
    }
}

/// The first pair of rows whose classes overlap, as a refusal naming both databases.
pub(crate) fn conflict(
    biz: &str,
    names: &[String],
    classes: &[(usize, Residue)],
) -> Option<StoreError> {
    classes.iter().enumerate().find_map(|(i, &(a, ca))| {
        classes[i + 1..]
            .iter()
            .find(|&&(b, cb)| a != b && ca.overlaps(cb))
            .map(|&(b, cb)| StoreError::ResidueConflict {
                biz: biz.to_owned(),
                first: names[a].clone(),
                first_class: ca.to_string(),
                second: names[b].clone(),
                second_class: cb.to_string(),
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::biz::{hash_token, token_digest};

    fn row(biz: &str, delta: i64, remainder: i64) -> BizRow {
        BizRow {
            biz_type: biz.into(),
            begin_id: 0,
            max_id: 0,
            step: 10,
            delta,
            remainder,
            version: 0,
        }
    }

    fn token(hash: &str, biz: &str) -> TokenRow {
        TokenRow {
            id: 1,
            token_hash: hash.into(),
            biz_type: biz.into(),
            remark: String::new(),
            create_time: String::new(),
        }
    }

    /// A digest whose first four bytes are `prefix` and whose last byte is `last`.
    fn digest(prefix: u8, last: u8) -> TokenDigest {
        let mut d = [0x5a; 32];
        d[..4].fill(prefix);
        d[31] = last;
        d
    }

    #[test]
    fn tokens_sharing_a_lookup_key_are_told_apart() {
        let names = vec!["a".to_string(), "b".to_string()];
        let (t1, t2) = (digest(0xab, 1), digest(0xab, 2));
        let a = Snapshot {
            witnesses: vec![],
            bizs: vec![row("x", 1, 0), row("y", 1, 0)],
            tokens: vec![token(&hex::encode(t1), "x"), token(&hex::encode(t2), "y")],
        };
        let b = Snapshot {
            witnesses: vec![],
            bizs: vec![],
            tokens: vec![
                // The same hash in upper case is the same digest.
                token(&hex::encode_upper(t1), "y"),
                token("not a hash", "x"),
                token(&hex::encode(t1)[..62], "x"),
            ],
        };
        let cat = Catalog::build(&names, &[Some(a), Some(b)]);
        assert_eq!(cat.granted(&t1, "x"), Some(true));
        assert_eq!(cat.granted(&t1, "y"), Some(true), "grants merge");
        assert_eq!(cat.granted(&t2, "x"), Some(false));
        assert_eq!(
            cat.granted(&digest(0xab, 3), "x"),
            None,
            "same key, other digest"
        );
        assert_eq!(cat.granted(&digest(0xcd, 1), "x"), None);
        assert_eq!(cat.tokens.values().map(Vec::len).sum::<usize>(), 2);
    }

    #[test]
    fn refuses_only_the_overlapping_biz() {
        let names = vec!["a".to_string(), "b".to_string()];
        let a = Snapshot {
            witnesses: vec![],
            bizs: vec![row("ok", 2, 0), row("bad", 2, 0)],
            tokens: vec![token(&hash_token("t1"), "ok")],
        };
        let b = Snapshot {
            witnesses: vec![],
            bizs: vec![row("ok", 2, 1), row("bad", 4, 2), row("only-b", 1, 0)],
            tokens: vec![token(&hash_token("t1"), "bad")],
        };
        let cat = Catalog::build(&names, &[Some(a), Some(b)]);
        assert!(cat.biz("ok").unwrap().refused.is_none());
        assert!(cat.biz("only-b").unwrap().refused.is_none());
        let msg = cat
            .biz("bad")
            .unwrap()
            .refused
            .as_ref()
            .unwrap()
            .to_string();
        assert!(
            msg.contains("`bad`") && msg.contains("\"a\"") && msg.contains("\"b\""),
            "{msg}"
        );
        assert_eq!(cat.granted(&token_digest("t1"), "ok"), Some(true));
        assert_eq!(cat.granted(&token_digest("t1"), "only-b"), Some(false));
        assert_eq!(cat.granted(&token_digest("t2"), "ok"), None);
        assert_eq!(cat.biz_names(), vec!["bad", "ok", "only-b"]);
    }

    #[test]
    fn every_catalog_built_has_its_own_generation() {
        let names = vec!["a".to_string()];
        let first = Catalog::build(&names, &[None]);
        let second = Catalog::build(&names, &[None]);
        assert_ne!(first.generation(), second.generation());
        assert_ne!(first.generation(), Catalog::default().generation());
    }

    #[test]
    fn keeps_rows_of_unread_databases_out() {
        let names = vec!["a".to_string(), "b".to_string()];
        let cat = Catalog::build(
            &names,
            &[
                None,
                Some(Snapshot {
                    witnesses: vec![],
                    bizs: vec![row("x", 1, 0)],
                    tokens: vec![],
                }),
            ],
        );
        assert_eq!(cat.biz("x").unwrap().classes, vec![(1, Residue::ALL)]);
        assert!(cat.is_read(), "one database read is a catalog read");
    }

    #[test]
    fn a_catalog_of_no_database_is_not_read() {
        let names = vec!["a".to_string(), "b".to_string()];
        assert!(!Catalog::default().is_read());
        assert!(!Catalog::build(&names, &[None, None]).is_read());
        let empty = Some(Snapshot::default());
        assert!(Catalog::build(&names, &[None, empty]).is_read());
    }
}
