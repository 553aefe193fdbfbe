//! Catalog refresh: re-reading bizs, tokens and witnesses from every database, checking
//! the rows against the evidence, and writing back the witnesses a database lacks.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;
use futures_util::future::join_all;
use parking_lot::Mutex;

use super::Store;
use crate::segment::Residue;
use crate::store::catalog::Snapshot;
use crate::store::evidence::{Evidence, Mark, Witness};
use crate::store::{BizRow, Catalog, StoreError};

/// The catalog as this process sees it, and what the refreshes and evidence checks
/// keep of the rows read.
///
/// # Lock order
/// `refreshed` (async, one refresh at a time) is taken before any other lock of the
/// store and held across the refresh's database calls, a heal's included. The plain
/// (`parking_lot`) mutexes are held for a few map or field operations, never across an
/// await: `evidence` may hold a database's `health` (and so `Layouts.view` after it);
/// `snapshots` may hold `Layouts.view`, then `classes_seen`; `classes_seen` nests
/// nothing. `catalog` is lock-free.
pub(super) struct CatalogView {
    /// Read on every request, replaced on refresh.
    pub(super) catalog: ArcSwap<Catalog>,
    /// Last rows read from each database; kept while a database is down so that its
    /// rows still take part in the residue checks.
    pub(super) snapshots: Mutex<Vec<Option<Snapshot>>>,
    /// Single flight for refreshes; holds when the last one started.
    pub(super) refreshed: tokio::sync::Mutex<Option<Instant>>,
    /// How far every row has advanced, as seen here and witnessed elsewhere. Plain
    /// mutex: held for map updates only, never across an await.
    pub(super) evidence: Mutex<Evidence>,
    /// What this process accepted of each row's class (by database and biz): a row
    /// whose class changes is used only once its `max_id` is above every ID issued
    /// before (see `refresh`). Plain mutex, as `evidence`.
    pub(super) classes_seen: Mutex<HashMap<(usize, String), SeenRow>>,
}

impl CatalogView {
    /// An empty catalog over `databases` databases, never refreshed.
    pub(super) fn new(databases: usize) -> CatalogView {
        CatalogView {
            catalog: ArcSwap::from_pointee(Catalog::default()),
            snapshots: Mutex::new(vec![None; databases]),
            refreshed: tokio::sync::Mutex::new(None),
            evidence: Mutex::new(Evidence::default()),
            classes_seen: Mutex::new(HashMap::new()),
        }
    }
}

/// What this process accepted of one biz row's class.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SeenRow {
    class: Residue,
    /// The row's layout epoch when its class was accepted.
    epoch: i64,
    /// The highest `max_id` seen in that class.
    top: i64,
    /// The highest `max_id` seen in earlier classes.
    earlier: i64,
}

impl SeenRow {
    fn first(class: Residue, row: &BizRow) -> SeenRow {
        SeenRow {
            class,
            epoch: row.epoch,
            top: row.max_id,
            earlier: i64::MIN,
        }
    }
}

impl Store {
    /// Re-reads bizs and tokens, unless a refresh started at or after `since` (then
    /// its result is returned). Concurrent callers share one refresh, and refreshes
    /// start at least [`Protocol::min_refresh_gap`](crate::config::Protocol::min_refresh_gap)
    /// apart, so a flood of misses (unknown tokens) costs the databases a bounded
    /// number of reads.
    pub async fn refresh_since(&self, since: Instant) -> Arc<Catalog> {
        let mut last_start = self.view.refreshed.lock().await;
        if let Some(last) = *last_start {
            if last >= since {
                return self.catalog();
            }
            tokio::time::sleep_until((last + self.protocol.min_refresh_gap).into()).await;
        }
        *last_start = Some(self.clock.now());
        // Fenced databases are read too: their rows tell when the fence can be lifted.
        let live: Vec<usize> = (0..self.dbs.list.len())
            .filter(|&i| self.is_reachable(i))
            .collect();
        // Rows are checked against what was known before they were read: a mark learnt
        // meanwhile (a reservation elsewhere) may be newer than a row read earlier.
        let before = self.view.evidence.lock().clone();
        // A slow catalog read does not back a database off: only reservations and
        // pings judge its health, so that a read starved under load cannot take a
        // healthy database out of the reservations.
        let reads = join_all(live.iter().map(|&i| {
            self.timed(async move {
                let db = &self.dbs.list[i];
                // Bizs before shapes: a shape row is written before its biz's rows,
                // so every biz read here has its shape read too.
                Ok(Snapshot {
                    bizs: db.store.bizs().await?,
                    shapes: db.store.shapes().await?,
                    tokens: db.store.tokens().await?,
                    witnesses: db.store.witnesses().await?,
                    layouts: db.store.layouts().await?,
                })
            })
        }))
        .await;
        for (&i, read) in live.iter().zip(&reads) {
            if let Err(e) = read {
                tracing::warn!(database = %self.dbs.list[i].name, error = %e, "catalog read failed; keeping the last one");
                self.dbs.list[i].health.lock().last_error = Some(e.to_string());
            }
        }
        let read: Vec<(usize, Snapshot)> = live
            .into_iter()
            .zip(reads)
            .filter_map(|(i, r)| Some((i, r.ok()?)))
            .collect();
        let lagging = self.check_rows(&before, &read);
        let layouts: Vec<_> = read.iter().map(|(i, s)| (*i, s.layouts.clone())).collect();
        self.apply_layouts(&layouts);
        self.share_layouts(&read).await;
        let known = self.view.evidence.lock().clone();
        // A change cut off midway: its bizs are finished from here (it reads and writes
        // the rows again, so the catalog below sees where they got).
        let mut read = read;
        if self.layout_epochs().1.is_some() && self.heal(&read).await {
            for (i, snap) in &mut read {
                if let Ok(bizs) = self.timed(self.dbs.list[*i].store.bizs()).await {
                    snap.bizs = bizs;
                }
            }
        }
        let catalog = {
            let mut snapshots = self.view.snapshots.lock();
            for (i, snap) in read {
                snapshots[i] = Some(snap);
            }
            let mut catalog =
                Catalog::build_at(&self.dbs.names, &snapshots, self.layout_epochs().0);
            for (biz, why) in self.check_classes(&known, &snapshots, &catalog) {
                catalog.refuse(&biz, why);
            }
            Arc::new(catalog)
        };
        self.view.catalog.store(catalog.clone());
        self.write_uses();
        self.write_witnesses(lagging).await;
        catalog
    }

    /// Checks every row just `read` against the evidence known `before` the reads: a
    /// database with a row behind it is fenced, a fenced one whose rows all caught up
    /// is used again. Then learns the rows and the witnesses read. Returns, per
    /// database, the marks its witnesses lack (from what this process knows), to be
    /// written there.
    fn check_rows(
        &self,
        before: &Evidence,
        read: &[(usize, Snapshot)],
    ) -> Vec<(usize, Vec<Witness>)> {
        let mut evidence = self.view.evidence.lock();
        for (i, snap) in read {
            let mut behind = None;
            for row in &snap.bizs {
                match before.check(*i, row) {
                    Ok(()) => evidence.learn(*i, &row.biz_type, Mark::of(row)),
                    Err(regression) => behind = behind.or(Some(regression)),
                }
            }
            match behind {
                Some(regression) => self.fence(*i, &regression),
                None => self.unfence(*i),
            }
        }
        for (_, snap) in read {
            for w in &snap.witnesses {
                if let Some(db) = self.dbs.names.iter().position(|n| *n == w.database) {
                    evidence.learn(db, &w.biz, w.mark);
                }
            }
        }
        read.iter()
            .map(|(k, snap)| {
                let lacking = evidence.lacking(*k, &self.dbs.names, &snap.witnesses);
                (*k, lacking)
            })
            .filter(|(_, lacking)| !lacking.is_empty())
            .collect()
    }

    /// Checks each row whose class changed since this process last accepted it.
    ///
    /// - Changed by a layout change (a later layout epoch, which the stored layouts
    ///   name with a class holding the row's): the change fenced it above every ID of
    ///   the earlier layout; it is checked against the rows still in earlier epochs.
    /// - Changed by hand (same epoch): it is used only when its `max_id` is at or above
    ///   every ID known issued of the biz: every row's `max_id`, and every mark seen or
    ///   witnessed. Else the biz is refused, naming both rows, until the row is raised.
    fn check_classes(
        &self,
        known: &Evidence,
        snapshots: &[Option<Snapshot>],
        catalog: &Catalog,
    ) -> Vec<(String, StoreError)> {
        let layouts = self.layout_classes();
        let mut seen = self.view.classes_seen.lock();
        let mut refusals = Vec::new();
        for (i, snap) in snapshots.iter().enumerate() {
            let Some(snap) = snap else { continue };
            for row in &snap.bizs {
                let biz = &row.biz_type;
                // Only the rows the catalog would reserve from.
                let Some(class) = catalog
                    .biz(biz)
                    .and_then(|e| e.classes.iter().find(|(db, _)| *db == i).map(|(_, c)| *c))
                else {
                    continue;
                };
                // Once layouts are stored, every row's class must be its database's class
                // in the row's epoch (narrowed to the biz's restriction), whoever looks:
                // a server started after an edit by hand refuses it too.
                let stored = layouts.iter().any(|(epoch, ..)| *epoch == row.epoch);
                if stored {
                    let db = layouts
                        .iter()
                        .find(|(epoch, name, _)| *epoch == row.epoch && *name == self.dbs.names[i])
                        .map(|(.., c)| *c);
                    if db.is_none_or(|db| crate::layout::restriction(class, db).is_none()) {
                        refusals.push((
                            biz.clone(),
                            StoreError::InvalidRow {
                                biz: biz.clone(),
                                database: self.dbs.names[i].clone(),
                                reason: format!(
                                    "its class {class} is not the class layout epoch {} gives database \"{}\" ({}): changed by hand? Move databases with `segmint db add` / `db remove`",
                                    row.epoch,
                                    self.dbs.names[i],
                                    db.map_or_else(|| "none: not in that layout".into(), |c| c.to_string())
                                ),
                            },
                        ));
                        continue;
                    }
                }
                let key = (i, biz.clone());
                let mark = |k: usize| known.mark(k, biz).map(|m| m.high_id.max(m.max_id));
                let Some(was) = seen.get(&key).copied() else {
                    seen.insert(key, SeenRow::first(class, row));
                    continue;
                };
                if was.class == class {
                    seen.insert(
                        key,
                        SeenRow {
                            epoch: was.epoch.max(row.epoch),
                            top: was.top.max(row.max_id).max(mark(i).unwrap_or(i64::MIN)),
                            ..was
                        },
                    );
                    continue;
                }
                // A stored layout names the row's epoch with a class holding the row's
                // (checked above): the layout change moved it.
                let by_layout = row.epoch > was.epoch && stored;
                let tops = (0..self.dbs.names.len()).filter_map(|k| {
                    let other = snapshots[k]
                        .as_ref()
                        .and_then(|s| s.bizs.iter().find(|r| r.biz_type == *biz));
                    let s = seen.get(&(k, biz.clone()));
                    let top = if by_layout {
                        // Rows moved by the same change issue from disjoint classes.
                        match (k == i, other) {
                            (true, _) => s.map(|s| s.top.max(s.earlier)),
                            (false, Some(o)) if o.epoch < row.epoch => Some(o.max_id),
                            _ => None,
                        }
                    } else {
                        let other = other.filter(|_| k != i).map(|o| o.max_id);
                        let s = s.map(|s| s.top.max(s.earlier));
                        other.max(s).max(mark(k))
                    };
                    top.map(|top| (k, top))
                });
                match tops.max_by_key(|&(_, top)| top) {
                    Some((k, top)) if row.max_id < top || row.epoch < was.epoch => refusals.push((
                        biz.clone(),
                        StoreError::InvalidRow {
                            biz: biz.clone(),
                            database: self.dbs.names[i].clone(),
                            reason: format!(
                                "its class changed from {} to {class} (layout epoch {} to {}) without a fence: its max_id {} is not above max_id {top} of the row on database \"{}\", so it could issue IDs issued before; raise it with `segmint db fence {} --above {top}`, or move databases with `segmint db add` / `db remove`",
                                was.class, was.epoch, row.epoch, row.max_id, self.dbs.names[k], self.dbs.names[i]
                            ),
                        },
                    )),
                    _ => {
                        tracing::info!(%biz, database = %self.dbs.names[i], from = %was.class, to = %class, max_id = row.max_id, by_layout, "row class changed above every ID issued before; using it");
                        seen.insert(key, SeenRow {
                            earlier: was.top.max(was.earlier),
                            ..SeenRow::first(class, row)
                        });
                    }
                }
            }
        }
        refusals
    }

    /// Writes `witnesses` to their databases, each bounded by the fetch timeout; a
    /// failure is only logged (the marks are written again at a later refresh).
    async fn write_witnesses(&self, witnesses: Vec<(usize, Vec<Witness>)>) {
        let writes = witnesses.iter().map(|(k, rows)| async move {
            if let Err(e) = self.timed(self.dbs.list[*k].store.witness(rows)).await {
                tracing::warn!(database = %self.dbs.list[*k].name, error = %e, "could not record witnesses");
            }
        });
        join_all(writes).await;
    }
}
