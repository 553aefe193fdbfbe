//! What the databases say exists: bizs (with the residue class of each row) and the
//! tokens granted to them. Held in memory so that requests never query for it.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use super::{BizRow, CatalogRows, FeedPosition, ShapeRow, StoreError, TokenRow};
use crate::biz::TokenDigest;
use crate::name::Name;
use crate::segment::Residue;
use crate::shape::{self, Base, BizShape, Format, Ordering as IdOrdering, Periodic, Reset};
use crate::store::evidence::{ByBiz, Mark};

/// The rows of one database, as last read: each catalog read replaces them (a full
/// read) or updates the rows it returned (a read of the database's change feed).
#[derive(Debug, Clone, Default)]
pub(crate) struct Snapshot {
    /// The biz rows, each found by its own name (a map keyed by name would hold every
    /// name twice).
    pub bizs: BTreeSet<ByName>,
    /// How bizs' IDs look; a biz without a shape row is sequential and plain.
    pub shapes: BTreeMap<String, ShapeRow>,
    /// What grants are merged from, by token row ID.
    pub tokens: BTreeMap<i64, GrantRow>,
    /// How far the other databases' rows advanced, as recorded here: by database name,
    /// then by biz (looked up by `&str`, with no key built).
    pub witnesses: BTreeMap<String, BTreeMap<Name, Mark>>,
    /// The layouts recorded here (see [`crate::layout`]); always read in full.
    pub layouts: Vec<super::LayoutRow>,
    /// Where the database's change feed stood at the last read.
    pub position: Option<FeedPosition>,
    /// When the database was last read in full (by the store's clock).
    pub full_at: Option<Instant>,
}

/// A biz row ordered, compared and found by its biz's name.
#[derive(Debug, Clone)]
pub(crate) struct ByName(pub BizRow);

impl std::ops::Deref for ByName {
    type Target = BizRow;

    fn deref(&self) -> &BizRow {
        &self.0
    }
}

impl std::borrow::Borrow<str> for ByName {
    fn borrow(&self) -> &str {
        &self.0.biz_type
    }
}

impl PartialEq for ByName {
    fn eq(&self, other: &Self) -> bool {
        self.0.biz_type == other.0.biz_type
    }
}

impl Eq for ByName {}

impl PartialOrd for ByName {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ByName {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.biz_type.cmp(&other.0.biz_type)
    }
}

/// What a [`Snapshot`] keeps of a token row: what its grant is merged from (the
/// remark and the times of use stay in the database).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GrantRow {
    /// The token's SHA-256; `None` when the stored hash is not 64 hex digits (in
    /// either case): the digest of no token.
    pub digest: Option<TokenDigest>,
    /// The biz the row grants.
    pub biz: Name,
    /// From when on the token is refused; `i64::MAX`: never (see
    /// [`GrantRow::expires`]). Not an `Option`: a row is 48 bytes, not 56.
    expires_at: i64,
    /// Whether the token was revoked (when says nothing about its grants).
    pub revoked: bool,
}

impl GrantRow {
    fn of(row: TokenRow) -> GrantRow {
        let mut digest: TokenDigest = [0; 32];
        GrantRow {
            digest: hex::decode_to_slice(&row.token_hash, &mut digest)
                .is_ok()
                .then_some(digest),
            biz: Name::new(&row.biz_type),
            expires_at: row.expires.unwrap_or(i64::MAX),
            revoked: row.revoked.is_some(),
        }
    }

    /// From when on the token is refused; `None`: never (a token refused from the end
    /// of time is never refused).
    pub fn expires(&self) -> Option<i64> {
        (self.expires_at != i64::MAX).then_some(self.expires_at)
    }
}

/// Whether any mark of `before` is missing from `after` or older there: both sorted by
/// biz, compared in one pass.
fn lost_any(before: &BTreeMap<Name, Mark>, after: &BTreeMap<Name, Mark>) -> bool {
    let mut after = after.iter().peekable();
    before.iter().any(|(biz, mark)| {
        while after.next_if(|(b, _)| ***b < **biz).is_some() {}
        match after.peek() {
            Some((b, now)) if *b == biz => now.join(*mark) != **now,
            _ => true,
        }
    })
}

/// What one catalog read changed in a [`Snapshot`].
#[derive(Debug, Default)]
pub(crate) struct Changes {
    /// Every row was read: anything may have changed.
    pub full: bool,
    /// The bizs whose row or shape row here was written; none is listed after a full
    /// read, where any may have been.
    pub bizs: BTreeSet<String>,
    /// Whether a shape row was written.
    pub shapes: bool,
    /// Whether a token row was written other than in its last use, so that grants
    /// may differ.
    pub grants: bool,
    /// The digests of the tokens whose grants may differ (what such a row held before
    /// and holds now), for a read of the feed.
    pub digests: HashSet<TokenDigest>,
    /// Whether a full read found a witness held before gone or older (deleted by
    /// hand, or the database went back): the marks it lacks must all be looked for
    /// again, not only those learnt since.
    pub witnesses_lost: bool,
}

impl Changes {
    /// Adds what `other` changed; says whether it found a witness lost.
    pub(crate) fn merge(&mut self, other: Changes) -> bool {
        self.full |= other.full;
        self.grants |= other.grants;
        self.shapes |= other.shapes;
        self.digests.extend(other.digests);
        self.bizs.extend(other.bizs);
        other.witnesses_lost
    }
}

impl Snapshot {
    /// A snapshot of `rows`, as a full read would leave it; the token rows numbered
    /// in order.
    #[cfg(test)]
    pub(crate) fn of(bizs: Vec<BizRow>, tokens: Vec<TokenRow>) -> Snapshot {
        let tokens = (1..)
            .zip(tokens)
            .map(|(id, t)| TokenRow { id, ..t })
            .collect();
        let mut snap = Snapshot::default();
        snap.apply(
            CatalogRows {
                full: true,
                bizs,
                tokens,
                ..CatalogRows::default()
            },
            Instant::now(),
        );
        snap
    }

    /// Every biz with a row in any of `snapshots`, sorted, each once: the sorted keys
    /// merged, with no sort (a million names sorted cost more than reading them).
    pub(crate) fn all_bizs(snapshots: &[Option<Snapshot>]) -> Vec<&str> {
        let mut all: Vec<&str> = Vec::new();
        for snap in snapshots.iter().flatten() {
            let mut merged = Vec::with_capacity(all.len().max(snap.bizs.len()));
            let names = snap.bizs.iter().map(|r| r.biz_type.as_str());
            let (mut a, mut b) = (all.iter().copied().peekable(), names.peekable());
            loop {
                let next = match (a.peek(), b.peek()) {
                    (Some(&x), Some(y)) => match x.cmp(y) {
                        std::cmp::Ordering::Less => a.next(),
                        std::cmp::Ordering::Greater => b.next(),
                        std::cmp::Ordering::Equal => {
                            b.next();
                            a.next()
                        }
                    },
                    (Some(_), None) => a.next(),
                    (None, Some(_)) => b.next(),
                    (None, None) => break,
                };
                merged.extend(next);
            }
            all = merged;
        }
        all
    }

    /// Takes in the rows of a catalog read made at `now`, and says what changed.
    pub(crate) fn apply(&mut self, rows: CatalogRows, now: Instant) -> Changes {
        let mut changes = Changes {
            full: rows.full,
            ..Changes::default()
        };
        if rows.full {
            // Built in one pass from the rows sorted (a map filled row by row leaves
            // its nodes half full: twice the memory at a million rows). Every biz may
            // have changed: none is listed.
            changes.shapes = !rows.shapes.is_empty();
            changes.grants = true;
            self.bizs = rows.bizs.into_iter().map(ByName).collect();
            self.shapes = rows
                .shapes
                .into_iter()
                .map(|r| (r.biz_type.clone(), r))
                .collect();
            self.tokens = rows
                .tokens
                .into_iter()
                .map(|t| (t.id, GrantRow::of(t)))
                .collect();
            let before = std::mem::take(&mut self.witnesses);
            let mut witnesses = rows.witnesses;
            witnesses.sort_unstable_by(|a, b| a.database.cmp(&b.database));
            for group in witnesses.chunk_by(|a, b| a.database == b.database) {
                let marks = group
                    .iter()
                    .map(|w| (w.biz.as_str().into(), w.mark))
                    .collect();
                self.witnesses.insert(group[0].database.clone(), marks);
            }
            changes.witnesses_lost = before.iter().any(|(db, marks)| {
                lost_any(marks, self.witnesses.get(db).unwrap_or(&BTreeMap::new()))
            });
            self.full_at = Some(now);
            self.layouts = rows.layouts;
            self.position = rows.position;
            return changes;
        }
        for row in rows.bizs {
            changes.bizs.insert(row.biz_type.to_string());
            self.bizs.replace(ByName(row));
        }
        for row in rows.shapes {
            changes.shapes = true;
            changes.bizs.insert(row.biz_type.clone());
            self.shapes.insert(row.biz_type.clone(), row);
        }
        for row in rows.tokens {
            let (id, row) = (row.id, GrantRow::of(row));
            // A row written only by its last use changes no grant.
            let was = self.tokens.get(&id);
            if was != Some(&row) {
                changes.grants = true;
                changes.digests.extend(was.and_then(|w| w.digest));
                changes.digests.extend(row.digest);
            }
            self.tokens.insert(id, row);
        }
        for w in rows.witnesses {
            self.witnesses
                .entry(w.database)
                .or_default()
                .insert(Name::new(&w.biz), w.mark);
        }
        self.layouts = rows.layouts;
        self.position = rows.position;
        changes
    }
}

/// Bizs and tokens merged over every database.
///
/// A catalog is built in full (at a full read) into a base shared by the catalogs
/// updated from it; an update (a read of the change feed) adds the entries and grants
/// it built again to a small overlay, so that it costs what changed, not a copy of
/// every entry. Once the overlay outgrows a sixteenth of the base, an update folds it
/// into a new base: a copy every so many changes, not at each.
#[derive(Debug, Default)]
pub struct Catalog {
    /// Every known biz, as of the base's build.
    bizs: Arc<Entries>,
    /// The names of the base's bizs in order, sorted at the first listing: a listing of
    /// a catalog updated since merges the overlay in, with no sort.
    sorted: Arc<OnceLock<SortedNames>>,
    /// The entries built since (`None`: the biz has no row any more); they hide the
    /// base's.
    changed: ByBiz<Option<BizEntry>>,
    /// How many bizs are known, the overlay's counted in.
    count: usize,
    /// Grants of the tokens not revoked, as of the base's build, sorted by the first
    /// four bytes of their digests (one allocation for them all). The lookup key is
    /// only a prefix of a SHA-256 digest; the full digest is then compared in constant
    /// time, so response times say nothing about how close a guess came.
    tokens: Arc<Vec<Grant>>,
    /// The grants merged since, sorted as `tokens` and looked up the same way; a
    /// digest whose grant went (revoked, no row left) is here with no biz and no
    /// expiry, and refused. They hide the base's grants of their digests.
    tokens_changed: Vec<Grant>,
    /// Tells this catalog from every other built in the process (0: the empty one
    /// before the first read). What was decided by a catalog holds while it is current.
    generation: u64,
    /// Whether any database's rows went into it. Until then an unknown token or biz
    /// says nothing about the token or biz, only that no database has answered.
    read: bool,
}

impl BizEntry {
    /// The entry of `biz` from the rows of the `snapshots` (`None` for a database never
    /// read) of the databases named `names`, under a layout in force of epoch `floor`;
    /// `None` when no database holds a row of it.
    pub(crate) fn of(
        biz: &str,
        names: &[String],
        snapshots: &[Option<Snapshot>],
        floor: i64,
    ) -> Option<BizEntry> {
        let rows = || {
            snapshots
                .iter()
                .enumerate()
                .filter_map(move |(db, snap)| Some((db, &**snap.as_ref()?.bizs.get(biz)?)))
        };
        let mut entry = BizEntry {
            classes: Vec::with_capacity(rows().count()),
            epoch: floor,
            refused: None,
            shape: None,
        };
        let mut any = false;
        for (_, row) in rows() {
            any = true;
            if !row.frozen {
                entry.epoch = entry.epoch.max(row.epoch);
            }
        }
        if !any {
            return None;
        }
        for (db, row) in rows() {
            // A frozen row gives out no segment, nor does one left in an earlier layout
            // (a layout change froze it after this snapshot was read, or its database
            // went back in time): they take no part in the checks.
            if row.frozen || row.epoch < entry.epoch {
                continue;
            }
            match Residue::new(row.delta, row.remainder) {
                Ok(class) => entry.classes.push((db, class)),
                Err(e) => {
                    entry.refused.get_or_insert_with(|| {
                        Box::new(StoreError::InvalidRow {
                            biz: biz.to_owned(),
                            database: names[db].clone(),
                            reason: e.to_string(),
                        })
                    });
                }
            }
        }
        if entry.refused.is_none() {
            entry.refused = conflict(biz, names, &entry.classes).map(Box::new);
        }
        // The shape of a biz whose rows are all frozen (a layout change moving it) is
        // read from those rows' databases: the biz is still the same biz.
        let holding: Vec<usize> = match entry.classes.is_empty() {
            true => rows().map(|(db, _)| db).collect(),
            false => entry.classes.iter().map(|&(db, _)| db).collect(),
        };
        match merged_shape(biz, names, snapshots, &holding) {
            Ok(shape) => entry.shape = shape,
            Err(e) => {
                entry.refused.get_or_insert(Box::new(e));
            }
        }
        Some(entry)
    }
}

impl BizEntry {
    /// [`BizEntry::of`], refused for the reason `refused` holds for `biz` unless its
    /// rows refuse it already: the entry a catalog holds once the class checks' refusals
    /// are applied.
    fn refused_by(
        biz: &str,
        names: &[String],
        snapshots: &[Option<Snapshot>],
        floor: i64,
        refused: &HashMap<String, StoreError>,
    ) -> Option<BizEntry> {
        let mut entry = BizEntry::of(biz, names, snapshots, floor)?;
        if let Some(why) = refused.get(biz) {
            entry.refused.get_or_insert_with(|| Box::new(why.clone()));
        }
        Some(entry)
    }
}

/// A catalog's base of entries: a table of indexes over entries held in one vector, each
/// keyed by its [`Name`]. At a million bizs, 80 MB where a map of `String`s, its table
/// half empty just past a power of two, took 170 MB.
type Entries = indexmap::IndexMap<Name, BizEntry, foldhash::fast::RandomState>;

/// The generation of the next catalog built.
static NEXT_GENERATION: AtomicU64 = AtomicU64::new(1);

/// One biz across the databases.
#[derive(Debug, Clone)]
pub struct BizEntry {
    /// Index of each database holding a row of the biz that may give out segments,
    /// with the row's class.
    pub classes: Vec<(usize, Residue)>,
    /// The latest layout epoch of those rows: a row of an earlier one is not used.
    pub epoch: i64,
    /// Set when the biz must not be served: its rows overlap or are invalid. Boxed:
    /// an entry stays small for the many bizs that are served.
    pub refused: Option<Box<StoreError>>,
    /// How its IDs look; `None`: sequential and plain.
    pub shape: Option<Arc<BizShape>>,
}

/// What a token not revoked may use, merged over the databases.
#[derive(Debug, Clone)]
pub struct Grant {
    /// The token's SHA-256.
    digest: TokenDigest,
    /// The bizs it may use.
    bizs: Granted,
    /// From when on (unix seconds) it is refused: the earliest expiry of its rows.
    pub expires: Option<i64>,
}

/// The bizs a token may use: one (nearly every token), held in the grant, or many.
#[derive(Debug, Clone)]
enum Granted {
    One(Name),
    /// Sorted; none for a token whose grant went (shared: a catalog updated in place
    /// copies it without copying the names).
    Many(Arc<[Name]>),
}

impl Granted {
    fn of(mut bizs: Vec<Name>) -> Granted {
        match bizs.pop() {
            Some(one) if bizs.is_empty() => Granted::One(one),
            Some(last) => {
                bizs.push(last);
                Granted::Many(bizs.into())
            }
            None => Granted::Many(Arc::from([])),
        }
    }

    fn is_empty(&self) -> bool {
        matches!(self, Granted::Many(bizs) if bizs.is_empty())
    }
}

impl Grant {
    /// Whether the token may use `biz`.
    pub fn allows(&self, biz: &str) -> bool {
        match &self.bizs {
            Granted::One(one) => one.as_str() == biz,
            Granted::Many(bizs) => bizs.binary_search_by(|b| b.as_str().cmp(biz)).is_ok(),
        }
    }

    /// Whether the token is still accepted at `now` (unix seconds).
    pub fn live_at(&self, now: i64) -> bool {
        live_at(self.expires, now)
    }
}

/// Whether a token expiring at `expires` is accepted at `now`: up to the second before.
pub fn live_at(expires: Option<i64>, now: i64) -> bool {
    expires.is_none_or(|e| now < e)
}

/// One token across the databases: the rows of its hash merged. A token revoked on
/// any database is revoked, and the earliest expiry holds, so a change that reached
/// only some databases (one was down) still takes effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenSummary {
    /// The token's SHA-256, lower-case hex.
    pub hash: String,
    /// Every biz it is granted on some database.
    pub bizs: BTreeSet<String>,
    /// The remark of its first row read.
    pub remark: String,
    /// The earliest creation of its rows.
    pub created: i64,
    /// The earliest expiry of its rows.
    pub expires: Option<i64>,
    /// The earliest revocation of its rows.
    pub revoked: Option<i64>,
    /// The latest use noted on any database.
    pub last_used: Option<i64>,
    /// Indexes of the databases holding a row of it.
    pub databases: BTreeSet<usize>,
}

/// Whether a token is accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenState {
    Active,
    Expired,
    Revoked,
}

impl std::fmt::Display for TokenState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `pad`, not `write_str`: a table column's width applies.
        f.pad(match self {
            TokenState::Active => "active",
            TokenState::Expired => "expired",
            TokenState::Revoked => "revoked",
        })
    }
}

impl TokenSummary {
    /// The token's state at `now` (unix seconds).
    pub fn state(&self, now: i64) -> TokenState {
        match (self.revoked, live_at(self.expires, now)) {
            (Some(_), _) => TokenState::Revoked,
            (None, false) => TokenState::Expired,
            (None, true) => TokenState::Active,
        }
    }
}

/// Merges token rows, each with the index of its database, into one summary per
/// token (hashes compared in lower case), oldest first.
pub fn merge_tokens<'a>(
    rows: impl IntoIterator<Item = (usize, &'a TokenRow)>,
) -> Vec<TokenSummary> {
    fn earliest(a: Option<i64>, b: Option<i64>) -> Option<i64> {
        a.into_iter().chain(b).min()
    }
    let mut merged: HashMap<String, TokenSummary> = HashMap::new();
    for (db, row) in rows {
        let hash = row.token_hash.to_ascii_lowercase();
        let t = merged.entry(hash.clone()).or_insert_with(|| TokenSummary {
            hash,
            bizs: BTreeSet::new(),
            remark: row.remark.clone(),
            created: row.create_time,
            expires: row.expires,
            revoked: row.revoked,
            last_used: row.last_used,
            databases: BTreeSet::new(),
        });
        t.bizs.insert(row.biz_type.clone());
        t.created = t.created.min(row.create_time);
        t.expires = earliest(t.expires, row.expires);
        t.revoked = earliest(t.revoked, row.revoked);
        t.last_used = t.last_used.max(row.last_used);
        t.databases.insert(db);
    }
    let mut tokens: Vec<TokenSummary> = merged.into_values().collect();
    tokens.sort_by(|a, b| (a.created, &a.hash).cmp(&(b.created, &b.hash)));
    tokens
}

/// The grants of the tokens whose digests pass `wanted`, merged over the token rows of
/// `snapshots`: the bizs granted, the earliest expiry; a token revoked on any database
/// is left out (it is then refused exactly as an unknown one). Unsorted.
fn grants(snapshots: &[Option<Snapshot>], wanted: impl Fn(&TokenDigest) -> bool) -> Vec<Grant> {
    let mut merged: HashMap<TokenDigest, (Vec<Name>, Option<i64>, bool)> = HashMap::new();
    for row in snapshots.iter().flatten().flat_map(|s| s.tokens.values()) {
        let Some(digest) = row.digest.filter(|d| wanted(d)) else {
            continue;
        };
        let (bizs, expires, revoked) = merged
            .entry(digest)
            .or_insert_with(|| (Vec::new(), row.expires(), false));
        bizs.push(row.biz);
        *expires = (*expires).into_iter().chain(row.expires()).min();
        *revoked |= row.revoked;
    }
    merged
        .into_iter()
        .filter(|(_, (_, _, revoked))| !revoked)
        .map(|(digest, (mut bizs, expires, _))| {
            bizs.sort_unstable();
            bizs.dedup();
            Grant {
                digest,
                bizs: Granted::of(bizs),
                expires,
            }
        })
        .collect()
}

/// Names in order, one after the other in one string: a million names take two
/// allocations.
#[derive(Debug, Default)]
struct SortedNames {
    text: String,
    /// Where each name ends in `text`.
    ends: Vec<usize>,
}

impl SortedNames {
    fn of<'a>(names: impl Iterator<Item = &'a str>) -> SortedNames {
        let mut names: Vec<&str> = names.collect();
        names.sort_unstable();
        let mut sorted = SortedNames {
            text: String::with_capacity(names.iter().map(|n| n.len()).sum()),
            ends: Vec::with_capacity(names.len()),
        };
        for name in names {
            sorted.text.push_str(name);
            sorted.ends.push(sorted.text.len());
        }
        sorted
    }

    fn iter(&self) -> impl Iterator<Item = &str> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(self.ends.iter().copied())
            .map(|(from, to)| self.text.get(from..to).unwrap_or(""))
    }
}

/// The first bytes of a token digest: its lookup key.
fn token_key(digest: &TokenDigest) -> [u8; 4] {
    [digest[0], digest[1], digest[2], digest[3]]
}

impl Catalog {
    /// Merges the snapshots (`None` for a database never read) of the databases
    /// named `names`, refusing every biz whose rows could overlap.
    #[cfg(test)]
    pub(crate) fn build(names: &[String], snapshots: &[Option<Snapshot>]) -> Catalog {
        Catalog::build_at(names, snapshots, 0)
    }

    /// [`Catalog::build`] under a layout in force of epoch `floor`: once a change is
    /// done every live row of every biz is in its epoch (or a later one), so a row below
    /// it (a database restored from an older backup, one that missed the change) is
    /// never reserved from.
    pub(crate) fn build_at(
        names: &[String],
        snapshots: &[Option<Snapshot>],
        floor: i64,
    ) -> Catalog {
        let most = snapshots.iter().flatten().map(|s| s.bizs.len()).max();
        let mut bizs = Entries::with_capacity_and_hasher(most.unwrap_or(0), Default::default());
        for snap in snapshots.iter().flatten() {
            for biz in snap.bizs.iter().map(|r| r.biz_type.as_str()) {
                if !bizs.contains_key(biz)
                    && let Some(entry) = BizEntry::of(biz, names, snapshots, floor)
                {
                    bizs.insert(biz.into(), entry);
                }
            }
        }
        // The databases' sets of bizs differ: no room left for more.
        bizs.shrink_to_fit();
        let mut tokens = grants(snapshots, |_| true);
        // By lookup key only: the order within a key says nothing about the digests.
        tokens.sort_by_key(|g| token_key(&g.digest));
        tokens.shrink_to_fit();
        Catalog {
            count: bizs.len(),
            bizs: Arc::new(bizs),
            sorted: Arc::default(),
            changed: ByBiz::default(),
            tokens: Arc::new(tokens),
            tokens_changed: Vec::new(),
            generation: NEXT_GENERATION.fetch_add(1, Ordering::Relaxed),
            read: snapshots.iter().any(Option::is_some),
        }
    }

    /// The overlay a catalog of a base of `base` entries holds before an update folds
    /// it into a new base.
    fn overlay_limit(base: usize) -> usize {
        (base / 16).max(1024)
    }

    /// This catalog with the entries of `bizs` built again from `snapshots` (under a
    /// layout in force of epoch `floor`, with the refusals `refused`) and the grants of
    /// the tokens of `digests` merged again: what a refresh that read only those
    /// changes makes of it, at the cost of a copy of the entries rather than of
    /// building each again (a million bizs: tens of milliseconds, not seconds).
    pub(crate) fn updated(
        &self,
        names: &[String],
        snapshots: &[Option<Snapshot>],
        floor: i64,
        bizs: &[String],
        refused: &HashMap<String, StoreError>,
        digests: &HashSet<TokenDigest>,
    ) -> Catalog {
        self.updated_within(
            (names, snapshots, floor),
            bizs,
            refused,
            digests,
            Catalog::overlay_limit(self.bizs.len()),
        )
    }

    /// [`Catalog::updated`] with an overlay of at most `limit` entries or grants.
    fn updated_within(
        &self,
        (names, snapshots, floor): (&[String], &[Option<Snapshot>], i64),
        bizs: &[String],
        refused: &HashMap<String, StoreError>,
        digests: &HashSet<TokenDigest>,
        limit: usize,
    ) -> Catalog {
        let mut changed = self.changed.clone();
        let mut count = self.count;
        for biz in bizs {
            let was = self.biz(biz).is_some();
            let now = BizEntry::refused_by(biz, names, snapshots, floor, refused);
            count = count + usize::from(now.is_some()) - usize::from(was);
            match (now, self.bizs.contains_key(biz.as_str())) {
                // The base's entry is hidden, or the overlay holds it.
                (now, true) => {
                    changed.insert(biz.clone(), now);
                }
                (Some(entry), false) => {
                    changed.insert(biz.clone(), Some(entry));
                }
                (None, false) => {
                    changed.remove(biz.as_str());
                }
            }
        }
        let mut tokens_changed = self.tokens_changed.clone();
        if !digests.is_empty() {
            tokens_changed.retain(|g| !digests.contains(&g.digest));
            // Every token row is looked at: by its lookup key first, which costs
            // nanoseconds, where hashing each of a million digests costs milliseconds.
            let mut keys: Vec<[u8; 4]> = digests.iter().map(token_key).collect();
            keys.sort_unstable();
            let merged = grants(snapshots, |d| {
                keys.binary_search(&token_key(d)).is_ok() && digests.contains(d)
            });
            // A digest with no grant now is kept as a refusal, hiding the base's.
            let gone: Vec<Grant> = digests
                .iter()
                .filter(|d| !merged.iter().any(|g| g.digest == **d))
                .map(|d| Grant {
                    digest: *d,
                    bizs: Granted::Many(Arc::from([])),
                    expires: Some(i64::MIN),
                })
                .collect();
            tokens_changed.extend(merged);
            tokens_changed.extend(gone);
            tokens_changed.sort_by_key(|g| token_key(&g.digest));
        }
        let mut catalog = Catalog {
            bizs: self.bizs.clone(),
            sorted: self.sorted.clone(),
            changed,
            count,
            tokens: self.tokens.clone(),
            tokens_changed,
            generation: NEXT_GENERATION.fetch_add(1, Ordering::Relaxed),
            read: snapshots.iter().any(Option::is_some),
        };
        if catalog.changed.len().max(catalog.tokens_changed.len()) > limit {
            catalog.fold();
        }
        catalog
    }

    /// Folds the overlay into a new base (a copy of every entry and grant).
    fn fold(&mut self) {
        let mut bizs = Entries::clone(&self.bizs);
        // Room for the bizs added, and no more (a doubling is a copy's size again).
        bizs.reserve_exact(self.changed.len());
        for (biz, entry) in std::mem::take(&mut self.changed) {
            match entry {
                Some(entry) => {
                    bizs.insert(Name::new(&biz), entry);
                }
                None => {
                    bizs.swap_remove(biz.as_str());
                }
            }
        }
        let changed = std::mem::take(&mut self.tokens_changed);
        let digests: HashSet<TokenDigest> = changed.iter().map(|g| g.digest).collect();
        let mut tokens: Vec<Grant> = self
            .tokens
            .iter()
            .filter(|g| !digests.contains(&g.digest))
            .cloned()
            .chain(changed.into_iter().filter(|g| !g.bizs.is_empty()))
            .collect();
        tokens.sort_by_key(|g| token_key(&g.digest));
        tokens.shrink_to_fit();
        self.bizs = Arc::new(bizs);
        self.sorted = Arc::default();
        self.tokens = Arc::new(tokens);
    }

    /// Whether the entry of any of `bizs`, built again from `snapshots` with the
    /// refusals `refused`, differs from this catalog's (shapes aside: a written shape
    /// row is a change on its own, see [`Changes::shapes`]). Costs what `bizs` holds.
    pub(crate) fn differs(
        &self,
        names: &[String],
        snapshots: &[Option<Snapshot>],
        floor: i64,
        bizs: &[String],
        refused: &HashMap<String, StoreError>,
    ) -> bool {
        let key = |e: &BizEntry| {
            (
                e.classes.clone(),
                e.epoch,
                e.refused.as_ref().map(ToString::to_string),
            )
        };
        bizs.iter().any(|biz| {
            let now = BizEntry::refused_by(biz, names, snapshots, floor, refused);
            now.as_ref().map(key) != self.biz(biz).map(key)
        })
    }

    /// Refuses `biz` with `why`, unless it is refused already.
    pub(crate) fn refuse(&mut self, biz: &str, why: StoreError) {
        let entry = match self.changed.get_mut(biz) {
            Some(entry) => entry.as_mut(),
            // A catalog just built holds its base alone: no copy is made.
            None => Arc::make_mut(&mut self.bizs).get_mut(biz),
        };
        if let Some(entry) = entry {
            entry.refused.get_or_insert(Box::new(why));
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

    /// How the IDs of `biz` look: `None` when the biz is unknown here, `Some(None)`
    /// when they are sequential and plain.
    pub fn shape_of(&self, biz: &str) -> Option<Option<Arc<BizShape>>> {
        self.biz(biz).map(|e| e.shape.clone())
    }

    pub fn biz(&self, name: &str) -> Option<&BizEntry> {
        // An empty overlay (every catalog after a full build) costs no hashing.
        match self.changed.is_empty() {
            true => self.bizs.get(name),
            false => match self.changed.get(name) {
                Some(entry) => entry.as_ref(),
                None => self.bizs.get(name),
            },
        }
    }

    /// The grant of the token of `digest`; `None` when no database knows the token, it
    /// is revoked, or it has expired by `now` (unix seconds): all three are refused alike.
    pub fn grant<'a>(&'a self, digest: &TokenDigest, now: i64) -> Option<&'a Grant> {
        use subtle::ConstantTimeEq;
        let key = token_key(digest);
        let find = |grants: &'a [Grant]| {
            let first = grants.partition_point(|g| token_key(&g.digest) < key);
            grants[first..]
                .iter()
                .take_while(|g| token_key(&g.digest) == key)
                .find(|g| bool::from(g.digest.ct_eq(digest)))
        };
        find(&self.tokens_changed)
            .or_else(|| find(&self.tokens))
            .filter(|g| g.live_at(now))
    }

    /// Every known biz, sorted.
    pub fn biz_names(&self) -> Vec<&str> {
        let base = self
            .sorted
            .get_or_init(|| SortedNames::of(self.bizs.keys().map(|k| k.as_str())));
        // The overlay's names, each with whether it is known now: few, sorted here.
        let mut changed: Vec<(&str, bool)> = self
            .changed
            .iter()
            .map(|(b, e)| (b.as_str(), e.is_some()))
            .collect();
        changed.sort_unstable();
        let mut names = Vec::with_capacity(self.count);
        let mut changed = changed.into_iter().peekable();
        for name in base.iter() {
            while let Some(&(c, known)) = changed.peek().filter(|(c, _)| *c <= name) {
                changed.next();
                if known {
                    names.push(c);
                }
                if c == name {
                    break;
                }
            }
            if self.changed.is_empty() || !self.changed.contains_key(name) {
                names.push(name);
            }
        }
        names.extend(changed.filter(|(_, known)| *known).map(|(c, _)| c));
        names
    }

    /// Every sequence biz with its sections and step, sorted by name. Reads every
    /// biz: call it when the [`generation`](Catalog::generation) changed.
    pub fn sequence_bizs(&self) -> Vec<(String, shape::SequenceShape)> {
        let sections = |e: &BizEntry| e.shape.as_ref().and_then(|s| s.sequence);
        let mut found: Vec<(String, shape::SequenceShape)> = self
            .bizs
            .iter()
            .filter(|(name, _)| !self.changed.contains_key(name.as_str()))
            .filter_map(|(name, e)| Some((name.to_string(), sections(e)?)))
            .chain(
                self.changed
                    .iter()
                    .filter_map(|(name, e)| Some((name.to_string(), sections(e.as_ref()?)?))),
            )
            .collect();
        found.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        found
    }

    /// How many bizs are known, without listing them.
    pub fn biz_count(&self) -> usize {
        self.count
    }
}

/// The first pair of rows whose classes overlap, as a refusal naming both databases.
pub(crate) fn conflict(
    biz: &str,
    names: &[String],
    classes: &[(usize, Residue)],
) -> Option<StoreError> {
    segmint_core::segment::judge::first_overlap(classes).map(|pair| overlap(biz, names, pair))
}

/// The refusal of `biz` for the two databases' classes of `pair`, which share an ID.
pub(crate) fn overlap(
    biz: &str,
    names: &[String],
    ((a, ca), (b, cb)): ((usize, Residue), (usize, Residue)),
) -> StoreError {
    StoreError::ResidueConflict {
        biz: biz.to_owned(),
        first: names[a].clone(),
        first_class: ca.to_string(),
        second: names[b].clone(),
        second_class: cb.to_string(),
    }
}

/// The shape of `biz` from the databases `holding` its rows: every one must hold the
/// same shape row, or none. A biz whose databases disagree (a row edited or lost by
/// hand) is refused: serving it with either shape could issue an ID another server
/// issues under the other.
fn merged_shape(
    biz: &str,
    names: &[String],
    snapshots: &[Option<Snapshot>],
    holding: &[usize],
) -> Result<Option<Arc<BizShape>>, StoreError> {
    let invalid = |db: usize, reason: String| StoreError::InvalidRow {
        biz: biz.to_owned(),
        database: names[db].clone(),
        reason,
    };
    let mut found: Option<(usize, &ShapeRow)> = None;
    let mut missing = None;
    for &db in holding {
        let Some(snap) = &snapshots[db] else { continue };
        match snap.shapes.get(biz) {
            None => missing = missing.or(Some(db)),
            Some(row) => match found {
                Some((first, seen)) if seen != row => {
                    return Err(invalid(
                        db,
                        format!("its shape row differs from database \"{}\"'s", names[first]),
                    ));
                }
                Some(_) => {}
                None => found = Some((db, row)),
            },
        }
    }
    let Some((db, row)) = found else {
        return Ok(None);
    };
    if let Some(lacking) = missing {
        return Err(invalid(
            lacking,
            format!(
                "it has no shape row, but database \"{}\" has one",
                names[db]
            ),
        ));
    }
    biz_shape(row)
        .map(|s| Some(Arc::new(s)))
        .map_err(|e| invalid(db, e))
}

/// The shape a row describes.
///
/// # Errors
/// Why the row is invalid.
pub fn biz_shape(row: &ShapeRow) -> Result<BizShape, String> {
    let within = Residue::new(row.within_delta, row.within_remainder).map_err(|e| e.to_string())?;
    if row.id_order == SEQUENCE {
        return sequence_shape(row, within);
    }
    let block = u64::try_from(row.block).map_err(|_| format!("block {} is negative", row.block))?;
    let domain =
        u64::try_from(row.domain).map_err(|_| format!("domain {} is negative", row.domain))?;
    let order = shape::parse_order(&row.id_order, block, domain)?;
    let key = u128::from_str_radix(&row.key, 16)
        .ok()
        .filter(|_| row.key.len() == 32)
        .ok_or("its key is not 32 hex digits")?;
    let base = u32::try_from(row.base)
        .ok()
        .and_then(Base::from_radix)
        .ok_or_else(|| format!("base {} is not 10, 36 or 62", row.base))?;
    let width = u32::try_from(row.width).map_err(|_| format!("width {} is negative", row.width))?;
    if row.period.is_empty() {
        let format =
            Format::new(&row.prefix, width, base, row.check_char).map_err(|e| e.to_string())?;
        return Ok(BizShape {
            ordering: IdOrdering::new(order, key, within),
            format,
            as_string: row.as_string,
            period: None,
            sequence: None,
        });
    }
    let (format, period) = period_of(&row.period, base, row.check_char)?;
    if order != shape::IdOrder::Sequential {
        return Err("a counter that restarts each period is sequential".into());
    }
    Ok(BizShape {
        ordering: IdOrdering::new(order, key, within),
        format,
        as_string: true,
        period: Some(period),
        sequence: None,
    })
}

/// The `id_order` of a sequence biz's shape row, whose `domain` holds its number of
/// sections and `block` its step.
pub const SEQUENCE: &str = "sequence";

/// The largest step of a sequence biz: an owner holds a key as an offset of 32 bits
/// above its section's base.
pub const MAX_SEQUENCE_STEP: i64 = 1_000_000_000;

/// The shape of a sequence biz: no IDs, `row.domain` sections, a step of `row.block`.
fn sequence_shape(row: &ShapeRow, within: Residue) -> Result<BizShape, String> {
    let max = segmint_core::sequence::MAX_SECTIONS;
    let sections = u32::try_from(row.domain)
        .ok()
        .filter(|s| (1..=max).contains(s))
        .ok_or_else(|| format!("a sequence biz has 1 to {max} sections, not {}", row.domain))?;
    let step = Some(row.block)
        .filter(|s| (1..=MAX_SEQUENCE_STEP).contains(s))
        .ok_or_else(|| {
            format!(
                "a sequence biz's step is 1 to {MAX_SEQUENCE_STEP}, not {}",
                row.block
            )
        })?;
    Ok(BizShape {
        ordering: IdOrdering::new(shape::IdOrder::Sequential, 0, within),
        format: Format::default(),
        as_string: false,
        period: None,
        sequence: Some(shape::SequenceShape { sections, step }),
    })
}

/// The parts of a shape row's period spec (`reset;zone;start;pattern`), if it has four.
pub(crate) fn period_parts(spec: &str) -> Option<(&str, &str, &str, &str)> {
    let mut parts = spec.splitn(4, ';');
    Some((parts.next()?, parts.next()?, parts.next()?, parts.next()?))
}

/// The format and periods `spec` (`reset;zone;start;pattern`) describes, the
/// pattern's counter in `base`.
///
/// # Errors
/// Why the spec is invalid.
pub fn period_of(spec: &str, base: Base, check: bool) -> Result<(Format, Periodic), String> {
    let (reset, zone, start, pattern) =
        period_parts(spec).ok_or("its period is not reset;zone;start;pattern")?;
    let reset = Reset::parse(reset)?.ok_or("its period names no reset")?;
    // `segmint biz recover` adds `;interim=CODE` after the pattern (which holds no `;`).
    let (pattern, interim) = match pattern.split_once(';') {
        None => (pattern, None),
        Some((pattern, extra)) => {
            let code = extra
                .strip_prefix("interim=")
                .and_then(|c| c.parse::<i64>().ok())
                .ok_or_else(|| format!("`{extra}` after its pattern is not interim=CODE"))?;
            (pattern, Some(code))
        }
    };
    let start = start
        .parse::<i64>()
        .map_err(|_| format!("the counter's start `{start}` is not a number"))?;
    let format = Format::with_pattern(pattern, base, check).map_err(|e| e.to_string())?;
    let Some((named, modulus)) = format.period() else {
        return Err("its period has no pattern".into());
    };
    if named != reset {
        return Err(format!(
            "a {} reset needs {} in its format, and `{pattern}` has the fields of a {} one",
            reset.name(),
            match reset {
                Reset::Daily => "{yyyy}, {MM} and {dd}",
                Reset::Monthly => "{yyyy} and {MM}, without {dd}",
                Reset::Yearly => "{yyyy}, without {MM} or {dd}",
            },
            named.name()
        ));
    }
    let period = Periodic::new(reset, zone, modulus, start)?;
    let period = match interim {
        Some(until) => period.with_interim(until)?,
        None => period,
    };
    Ok((format, period))
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
            description: Box::default(),
            epoch: 0,
            frozen: false,
            claimed_by: 0,
        }
    }

    fn token(hash: &str, biz: &str) -> TokenRow {
        TokenRow {
            id: 1,
            token_hash: hash.into(),
            biz_type: biz.into(),
            remark: String::new(),
            create_time: 100,
            expires: None,
            revoked: None,
            last_used: None,
        }
    }

    /// Whether the catalog lets the token of `digest` use `biz` at time 1000; `None`
    /// when it refuses the token itself.
    fn granted(cat: &Catalog, digest: &TokenDigest, biz: &str) -> Option<bool> {
        cat.grant(digest, 1000).map(|g| g.allows(biz))
    }

    fn tokens_only(tokens: Vec<TokenRow>) -> Option<Snapshot> {
        Some(Snapshot::of(vec![], tokens))
    }

    #[test]
    fn a_token_revoked_on_one_database_is_revoked() {
        let names = vec!["a".to_string(), "b".to_string()];
        let hash = hash_token("t1");
        let revoked = TokenRow {
            revoked: Some(500),
            ..token(&hash, "x")
        };
        let cat = Catalog::build(
            &names,
            &[
                tokens_only(vec![token(&hash, "x")]),
                tokens_only(vec![revoked]),
            ],
        );
        assert_eq!(granted(&cat, &token_digest("t1"), "x"), None);
        assert!(cat.tokens.is_empty(), "a revoked token is not kept");
    }

    #[test]
    fn the_earliest_expiry_holds_at_request_time() {
        let names = vec!["a".to_string(), "b".to_string()];
        let hash = hash_token("t1");
        let expiring = |at| TokenRow {
            expires: Some(at),
            ..token(&hash, "x")
        };
        let cat = Catalog::build(
            &names,
            &[
                tokens_only(vec![expiring(2000), token(&hash, "y")]),
                tokens_only(vec![expiring(1500)]),
            ],
        );
        let d = token_digest("t1");
        assert_eq!(cat.grant(&d, 1499).map(|g| g.expires), Some(Some(1500)));
        assert!(cat.grant(&d, 1499).is_some_and(|g| g.allows("y")));
        assert!(cat.grant(&d, 1500).is_none(), "refused from the expiry on");
    }

    /// A token of one biz (its grant holds the name) and one of several (sorted
    /// names) allow their bizs alone.
    #[test]
    fn a_grant_allows_its_bizs_alone() {
        let names = vec!["a".to_string()];
        let (one, many) = (hash_token("t1"), hash_token("t2"));
        let cat = Catalog::build(
            &names,
            &[tokens_only(vec![
                token(&one, "m"),
                token(&many, "z"),
                token(&many, "b"),
                token(&many, "m"),
            ])],
        );
        let granted = |t, biz| granted(&cat, &token_digest(t), biz);
        assert_eq!(granted("t1", "m"), Some(true));
        assert_eq!(granted("t1", "b"), Some(false));
        assert_eq!(granted("t1", "mm"), Some(false));
        for biz in ["b", "m", "z"] {
            assert_eq!(granted("t2", biz), Some(true), "{biz}");
        }
        assert_eq!(granted("t2", "a"), Some(false));
        assert_eq!(granted("t2", "n"), Some(false));
    }

    #[test]
    fn summaries_merge_rows_of_one_hash() {
        let hash = hash_token("t1");
        let rows = [
            (
                0,
                TokenRow {
                    expires: Some(900),
                    last_used: Some(50),
                    create_time: 120,
                    ..token(&hash, "x")
                },
            ),
            (
                1,
                TokenRow {
                    expires: Some(700),
                    last_used: Some(60),
                    revoked: Some(40),
                    ..token(&hash.to_ascii_uppercase(), "y")
                },
            ),
            (1, token(&hash_token("t2"), "x")),
        ];
        let merged = merge_tokens(rows.iter().map(|(db, r)| (*db, r)));
        assert_eq!(merged.len(), 2);
        let t = merged.iter().find(|t| t.hash == hash).unwrap();
        assert_eq!(t.bizs, BTreeSet::from(["x".into(), "y".into()]));
        assert_eq!(
            (t.created, t.expires, t.revoked, t.last_used),
            (100, Some(700), Some(40), Some(60))
        );
        assert_eq!(t.databases, BTreeSet::from([0, 1]));
        assert_eq!(t.state(0), TokenState::Revoked);
        let t2 = merged.iter().find(|t| t.hash != hash).unwrap();
        assert_eq!(t2.state(i64::MAX), TokenState::Active);
        let expiring = TokenSummary {
            expires: Some(10),
            ..t2.clone()
        };
        assert_eq!(expiring.state(9), TokenState::Active);
        assert_eq!(expiring.state(10), TokenState::Expired);
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
        let a = Snapshot::of(
            vec![row("x", 1, 0), row("y", 1, 0)],
            vec![token(&hex::encode(t1), "x"), token(&hex::encode(t2), "y")],
        );
        let b = Snapshot::of(
            vec![],
            vec![
                // The same hash in upper case is the same digest.
                token(&hex::encode_upper(t1), "y"),
                token("not a hash", "x"),
                token(&hex::encode(t1)[..62], "x"),
            ],
        );
        let cat = Catalog::build(&names, &[Some(a), Some(b)]);
        assert_eq!(granted(&cat, &t1, "x"), Some(true));
        assert_eq!(granted(&cat, &t1, "y"), Some(true), "grants merge");
        assert_eq!(granted(&cat, &t2, "x"), Some(false));
        assert_eq!(
            granted(&cat, &digest(0xab, 3), "x"),
            None,
            "same key, other digest"
        );
        assert_eq!(granted(&cat, &digest(0xcd, 1), "x"), None);
        assert_eq!(cat.tokens.len(), 2);
    }

    /// Rows for the property below: a biz row of `b{biz}` in class `delta, remainder`
    /// (delta 0: a class that is no class, refused), maybe frozen; a token row `id` of
    /// token `t{token}` granting `b{biz}`, maybe expiring or revoked.
    type BizCase = (u8, i64, i64, bool);
    type TokenCase = (i64, u8, u8, Option<i64>, bool);

    fn biz_rows(cases: &[BizCase]) -> Vec<BizRow> {
        cases
            .iter()
            .map(|&(biz, delta, remainder, frozen)| BizRow {
                frozen,
                ..row(&format!("b{biz}"), delta, remainder.min(delta.max(1) - 1))
            })
            .collect()
    }

    fn case_digest(token: u8) -> TokenDigest {
        digest(token % 3, token)
    }

    fn token_rows(cases: &[TokenCase]) -> Vec<TokenRow> {
        cases
            .iter()
            .map(|&(id, token, biz, expires, revoked)| TokenRow {
                id,
                expires,
                revoked: revoked.then_some(1),
                ..token_row(&hex::encode(case_digest(token)), &format!("b{biz}"))
            })
            .collect()
    }

    fn token_row(hash: &str, biz: &str) -> TokenRow {
        token(hash, biz)
    }

    fn bizs() -> impl proptest::strategy::Strategy<Value = Vec<BizCase>> {
        proptest::collection::vec(
            (0..8u8, 0..3i64, 0..3i64, proptest::bool::weighted(0.2)),
            0..8,
        )
    }

    fn tokens() -> impl proptest::strategy::Strategy<Value = Vec<TokenCase>> {
        proptest::collection::vec(
            (
                1..10i64,
                0..5u8,
                0..8u8,
                proptest::option::of(500..1500i64),
                proptest::bool::weighted(0.2),
            ),
            0..8,
        )
    }

    proptest::proptest! {
        /// A catalog updated in place from what a read of the feed changed is the
        /// catalog built in full from the same rows: every entry and every grant.
        #[test]
        fn a_catalog_updated_in_place_is_the_one_built_in_full(
            first in proptest::collection::vec((bizs(), tokens()), 2),
            rounds in proptest::collection::vec(proptest::collection::vec((bizs(), tokens()), 2), 1..4),
            limit in 0usize..4,
        ) {
            let names = vec!["a".to_string(), "b".to_string()];
            let mut snapshots: Vec<Option<Snapshot>> = first
                .iter()
                .map(|(b, t)| {
                    let mut snap = Snapshot::default();
                    snap.apply(
                        CatalogRows {
                            full: true,
                            bizs: biz_rows(b),
                            tokens: token_rows(t),
                            ..CatalogRows::default()
                        },
                        Instant::now(),
                    );
                    Some(snap)
                })
                .collect();
            // Updated round after round, the overlay folded into a new base whenever
            // it outgrows `limit` (0: at every update that changed anything).
            let mut updated = Catalog::build(&names, &snapshots);
            for then in &rounds {
                let mut touched = BTreeSet::new();
                let mut digests = HashSet::new();
                for (snap, (b, t)) in snapshots.iter_mut().zip(then) {
                    let changes = snap.as_mut().unwrap().apply(
                        CatalogRows {
                            full: false,
                            bizs: biz_rows(b),
                            tokens: token_rows(t),
                            ..CatalogRows::default()
                        },
                        Instant::now(),
                    );
                    touched.extend(changes.bizs);
                    digests.extend(changes.digests);
                }
                let touched: Vec<String> = touched.into_iter().collect();
                updated = updated.updated_within(
                    (&names, &snapshots, 0),
                    &touched,
                    &HashMap::new(),
                    &digests,
                    limit,
                );
                let built = Catalog::build(&names, &snapshots);
                let key = |e: &BizEntry| {
                    (e.classes.clone(), e.epoch, e.refused.as_ref().map(ToString::to_string))
                };
                proptest::prop_assert_eq!(updated.biz_count(), built.biz_count());
                proptest::prop_assert_eq!(updated.biz_names(), built.biz_names());
                for biz in (0..8).map(|b| format!("b{b}")) {
                    proptest::prop_assert_eq!(updated.biz(&biz).map(key), built.biz(&biz).map(key), "{}", biz);
                    for token in 0..5 {
                        let d = case_digest(token);
                        proptest::prop_assert_eq!(
                            updated.grant(&d, 1000).map(|g| (g.allows(&biz), g.expires)),
                            built.grant(&d, 1000).map(|g| (g.allows(&biz), g.expires)),
                            "t{} {}", token, biz
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_full_read_says_whether_a_witness_was_lost() {
        let mark = |version| Mark {
            version,
            max_id: version * 10,
            high_id: version * 10,
        };
        let witness = |db: &str, biz: &str, version| super::super::Witness {
            database: db.into(),
            biz: biz.into(),
            mark: mark(version),
        };
        let full = |witnesses| CatalogRows {
            full: true,
            witnesses,
            ..CatalogRows::default()
        };
        let mut snap = Snapshot::default();
        let first = vec![
            witness("b", "x", 2),
            witness("b", "y", 3),
            witness("c", "x", 1),
        ];
        assert!(
            !snap
                .apply(full(first.clone()), Instant::now())
                .witnesses_lost
        );
        // The same, one advanced, one more: nothing lost.
        let more = vec![
            witness("b", "x", 2),
            witness("b", "y", 4),
            witness("c", "x", 1),
            witness("c", "z", 1),
        ];
        assert!(
            !snap
                .apply(full(more.clone()), Instant::now())
                .witnesses_lost
        );
        // One older.
        let older = vec![
            witness("b", "x", 1),
            witness("b", "y", 4),
            witness("c", "x", 1),
            witness("c", "z", 1),
        ];
        assert!(snap.apply(full(older), Instant::now()).witnesses_lost);
        snap.apply(full(more), Instant::now());
        // One gone, of a database whose other witnesses stay.
        let gone = vec![
            witness("b", "x", 2),
            witness("b", "y", 4),
            witness("c", "z", 1),
        ];
        assert!(snap.apply(full(gone), Instant::now()).witnesses_lost);
        // Every witness of a database gone.
        assert!(
            snap.apply(full(vec![witness("b", "x", 2)]), Instant::now())
                .witnesses_lost
        );
    }

    #[test]
    fn all_bizs_are_every_name_once_in_order() {
        let a = Snapshot::of(vec![row("b", 2, 0), row("d", 2, 0), row("e", 2, 0)], vec![]);
        let b = Snapshot::of(vec![row("a", 2, 1), row("d", 2, 1), row("f", 2, 1)], vec![]);
        let c = Snapshot::of(vec![row("c", 3, 2), row("f", 3, 2)], vec![]);
        assert_eq!(
            Snapshot::all_bizs(&[Some(a), None, Some(b), Some(c)]),
            vec!["a", "b", "c", "d", "e", "f"]
        );
        assert!(Snapshot::all_bizs(&[None, None]).is_empty());
    }

    #[test]
    fn every_token_is_found_whatever_its_lookup_key() {
        let names = vec!["a".to_string()];
        let digests: Vec<TokenDigest> = [0xff, 0x01, 0xab, 0x00, 0x80]
            .iter()
            .map(|&p| digest(p, p))
            .collect();
        let a = Snapshot::of(
            vec![row("x", 1, 0)],
            digests
                .iter()
                .map(|d| token(&hex::encode(d), "x"))
                .collect(),
        );
        let cat = Catalog::build(&names, &[Some(a)]);
        for d in &digests {
            assert_eq!(granted(&cat, d, "x"), Some(true), "{}", hex::encode(d));
        }
        for p in [0x02, 0xfe, 0x7f] {
            assert_eq!(granted(&cat, &digest(p, 0), "x"), None);
        }
    }

    #[test]
    fn refuses_only_the_overlapping_biz() {
        let names = vec!["a".to_string(), "b".to_string()];
        let a = Snapshot::of(
            vec![row("ok", 2, 0), row("bad", 2, 0)],
            vec![token(&hash_token("t1"), "ok")],
        );
        let b = Snapshot::of(
            vec![row("ok", 2, 1), row("bad", 4, 2), row("only-b", 1, 0)],
            vec![token(&hash_token("t1"), "bad")],
        );
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
        assert_eq!(granted(&cat, &token_digest("t1"), "ok"), Some(true));
        assert_eq!(granted(&cat, &token_digest("t1"), "only-b"), Some(false));
        assert_eq!(granted(&cat, &token_digest("t2"), "ok"), None);
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
            &[None, Some(Snapshot::of(vec![row("x", 1, 0)], vec![]))],
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
