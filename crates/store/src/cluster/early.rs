//! Serving before the first catalog read ends.
//!
//! A server over a million bizs reads its catalog for seconds after it starts; it
//! serves meanwhile. A biz asked for before any catalog is read is read alone from
//! every database ([`SegmentStore::catalog_of`](crate::SegmentStore::catalog_of): its
//! row, shape and witnesses, the token's rows and the layouts, each by index), its rows
//! checked against the evidence as a reservation checks them, its witnesses learnt,
//! its classes checked as a refresh checks them, and it is served from a catalog of
//! that biz alone. Its reservations then meet the same checks as at any other time:
//! each reads the row again and compares it with the marks, which now hold the
//! biz's witnesses.
//!
//! Only answers that serve are taken from such a look: a biz or token it does not
//! find, a token that does not grant the biz, or a biz refused wait for the full
//! read, which decides them as before.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use parking_lot::Mutex;

use super::Store;
use crate::biz::TokenDigest;
use crate::store::catalog::Snapshot;
use crate::store::evidence::{self, ByBiz, Mark};
use crate::store::{Catalog, CatalogRows};

/// How long a look at one biz is used before the biz is read again: a token revoked
/// meanwhile is refused within this, well within `catalog_refresh_ms`.
const REUSE: Duration = Duration::from_secs(1);

/// Tokens remembered as unknown at once; past it the record starts again (a flood of
/// distinct unknown tokens is bounded by the refreshes' least gap instead).
const MISSES_KEPT: usize = 4096;

/// Tokens a catalog read for them did not grant, each with the generation of that
/// catalog: the same token asked again before the catalog changes is refused from
/// memory, without reading the databases. A token created since is read by the next
/// refresh, which changes the catalog's generation.
///
/// # Lock order
/// A plain (`parking_lot`) mutex held for one map operation, nesting no other lock.
#[derive(Default)]
pub(super) struct Misses {
    by_digest: Mutex<HashMap<TokenDigest, u64>>,
}

/// What was read of single bizs before the first catalog was read.
///
/// # Lock order
/// Both maps are plain (`parking_lot`) mutexes held for one map operation, nesting no
/// other lock; a look holds its biz's flight (async) across its database reads.
#[derive(Default)]
pub(super) struct Early {
    /// The catalog of each biz looked at, with when it was read.
    looked: Mutex<HashMap<String, (Instant, Arc<Catalog>)>>,
    /// One look at a time per biz: a burst of requests for one biz reads it once.
    flights: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl Early {
    /// Drops every look: a catalog has been read.
    pub(super) fn forget(&self) {
        let looked = std::mem::take(&mut *self.looked.lock());
        let flights = std::mem::take(&mut *self.flights.lock());
        drop((looked, flights));
    }
}

impl Store {
    /// The catalog that decides a request for `biz` (with the token of `digest`, if it
    /// has one) which the current catalog did not serve: the catalog read again
    /// ([`Store::refresh_since`]), so that bizs and tokens created since the last
    /// refresh are found. Before any catalog is read (a server's first read runs for
    /// seconds over a million bizs), a catalog of `biz` alone when it serves the
    /// request; else the wait is for the full read.
    ///
    /// A token that such a read did not grant is remembered with the catalog's
    /// generation (`Misses`): asked again before the catalog changes, it is refused
    /// from memory, so a client retrying a wrong password never reaches the databases.
    pub async fn look_up(&self, biz: &str, digest: Option<&TokenDigest>) -> Arc<Catalog> {
        if !self.catalog().is_read()
            && let Some(catalog) = self.early_catalog(biz, digest).await
        {
            return catalog;
        }
        if let Some(digest) = digest
            && let Some(catalog) = self.known_miss(digest)
        {
            return catalog;
        }
        let catalog = self.refresh_since(self.dbs.clock.now()).await;
        if let Some(digest) = digest {
            self.note_miss(&catalog, digest);
        }
        catalog
    }

    /// The current catalog, when it was read and the token of `digest` was not granted
    /// by it nor by a read for it since it was built.
    fn known_miss(&self, digest: &TokenDigest) -> Option<Arc<Catalog>> {
        let catalog = self.catalog();
        let missed = self.view.misses.by_digest.lock().get(digest).copied();
        (catalog.is_read()
            && missed == Some(catalog.generation())
            && catalog.grant(digest, self.unix_now()).is_none())
        .then_some(catalog)
    }

    /// Remembers the token of `digest` as unknown to `catalog`, if it is.
    fn note_miss(&self, catalog: &Catalog, digest: &TokenDigest) {
        if !catalog.is_read() || catalog.grant(digest, self.unix_now()).is_some() {
            return;
        }
        let mut misses = self.view.misses.by_digest.lock();
        if misses.len() >= MISSES_KEPT && !misses.contains_key(digest) {
            misses.clear();
        }
        misses.insert(*digest, catalog.generation());
    }

    /// The catalog once one has been read: the operator views list every biz, so
    /// before the first read ends they wait for it (and a refresh after it).
    pub async fn read_catalog(&self) -> Arc<Catalog> {
        let catalog = self.catalog();
        match catalog.is_read() {
            true => catalog,
            false => self.refresh_since(self.dbs.clock.now()).await,
        }
    }

    /// A catalog of `biz` alone that serves it (to the token of `digest`), read at most
    /// [`REUSE`] ago; `None` when no catalog of it would, or a catalog has been read.
    async fn early_catalog(&self, biz: &str, digest: Option<&TokenDigest>) -> Option<Arc<Catalog>> {
        let serves = |c: &Catalog| {
            let now = self.unix_now();
            c.biz(biz).is_some_and(|e| e.refused.is_none())
                && digest.is_none_or(|d| c.grant(d, now).is_some_and(|g| g.allows(biz)))
        };
        let cached = || {
            let looked = self.view.early.looked.lock();
            let (at, catalog) = looked.get(biz)?;
            let fresh = self.dbs.clock.now().saturating_duration_since(*at) < REUSE;
            (fresh && serves(catalog)).then(|| catalog.clone())
        };
        if let Some(catalog) = cached() {
            return Some(catalog);
        }
        let flight = self
            .view
            .early
            .flights
            .lock()
            .entry(biz.to_owned())
            .or_default()
            .clone();
        let _one = flight.lock().await;
        if let Some(catalog) = cached() {
            return Some(catalog);
        }
        if self.catalog().is_read() {
            return None;
        }
        let catalog = Arc::new(self.read_biz(biz, digest).await?);
        let served = serves(&catalog).then(|| catalog.clone());
        self.view
            .early
            .looked
            .lock()
            .insert(biz.to_owned(), (self.dbs.clock.now(), catalog));
        served
    }

    /// Reads `biz` (and the rows of the token of `digest`) from every reachable
    /// database and checks them: a catalog of that biz, or `None` when no database
    /// answered.
    async fn read_biz(&self, biz: &str, digest: Option<&TokenDigest>) -> Option<Catalog> {
        let count = self.dbs.list.len();
        let hash = digest.map(hex::encode);
        let live: Vec<usize> = (0..count).filter(|&i| self.dbs.is_reachable(i)).collect();
        // Each row is judged by the marks known before it was read: a mark learnt
        // meanwhile (a reservation elsewhere) may be newer than the row.
        let before: Vec<Option<Mark>> = {
            let evidence = self.view.evidence.lock();
            (0..count).map(|i| evidence.mark(i, biz)).collect()
        };
        let reads = join_all(live.iter().map(|&i| {
            let store = &self.dbs.list[i].store;
            self.dbs
                .timed(store.catalog_of(biz, hash.as_deref(), &self.dbs.names))
        }))
        .await;
        let mut read: Vec<(usize, CatalogRows)> = Vec::with_capacity(live.len());
        for (i, rows) in live.into_iter().zip(reads) {
            match rows {
                Ok(rows) => read.push((i, rows)),
                Err(e) => {
                    tracing::warn!(database = %self.dbs.list[i].name, %biz, error = %e, "could not read a biz before the catalog");
                }
            }
        }
        if read.is_empty() {
            return None;
        }
        for (i, rows) in &read {
            for row in &rows.bizs {
                match evidence::behind(before[*i], row) {
                    Err(regression) => self.dbs.fence(*i, &regression),
                    Ok(()) => {
                        self.view.evidence.lock().learn(*i, biz, Mark::of(row));
                    }
                }
            }
            super::refresh::learn_witnesses(
                &self.dbs.names,
                &mut self.view.evidence.lock(),
                &rows.witnesses,
            );
        }
        let layouts: Vec<_> = read.iter().map(|(i, r)| (*i, r.layouts.clone())).collect();
        self.dbs.apply_layouts(&layouts);
        let floor = self.dbs.layout_epochs().0;
        let classes = self.dbs.layout_classes();
        let now = self.dbs.clock.now();
        let mut snapshots: Vec<Option<Snapshot>> = vec![None; count];
        for (i, rows) in read {
            snapshots[i]
                .get_or_insert_with(Snapshot::default)
                .apply(rows, now);
        }
        // Checked as a server's first refresh checks every biz: against no class
        // accepted before (a scratch record, so that the first full read still sees
        // every row as its first).
        let refusals = {
            let evidence = self.view.evidence.lock();
            let mut seen: Vec<ByBiz<_>> = vec![ByBiz::default(); count];
            super::refresh::check_classes(
                &self.dbs.names,
                &evidence,
                &snapshots,
                &[biz.to_owned()],
                (floor, &classes),
                &mut seen,
            )
        };
        let mut catalog = Catalog::build_at(&self.dbs.names, &snapshots, floor);
        for (biz, why) in refusals {
            catalog.refuse(&biz, why);
        }
        Some(catalog)
    }
}
