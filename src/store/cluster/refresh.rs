//! Catalog refresh: re-reading bizs, tokens and witnesses from every database, checking
//! the rows against the evidence, and writing back the witnesses a database lacks.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;

use super::{Store, now};
use crate::store::Catalog;
use crate::store::catalog::Snapshot;
use crate::store::evidence::{Evidence, Mark, Witness};

/// Shortest time between the starts of two catalog refreshes.
pub const MIN_REFRESH_GAP: Duration = Duration::from_millis(100);

impl Store {
    /// Re-reads bizs and tokens, unless a refresh started at or after `since` (then
    /// its result is returned). Concurrent callers share one refresh, and refreshes
    /// start at least [`MIN_REFRESH_GAP`] apart, so a flood of misses (unknown tokens)
    /// costs the databases a bounded number of reads.
    pub async fn refresh_since(&self, since: Instant) -> Arc<Catalog> {
        let mut last_start = self.refreshed.lock().await;
        if let Some(last) = *last_start {
            if last >= since {
                return self.catalog();
            }
            tokio::time::sleep_until((last + MIN_REFRESH_GAP).into()).await;
        }
        *last_start = Some(now());
        // Fenced databases are read too: their rows tell when the fence can be lifted.
        let live: Vec<usize> = (0..self.dbs.len())
            .filter(|&i| self.is_reachable(i))
            .collect();
        // Rows are checked against what was known before they were read: a mark learnt
        // meanwhile (a reservation elsewhere) may be newer than a row read earlier.
        let before = self.evidence.lock().clone();
        // A slow catalog read does not back a database off: only reservations and
        // pings judge its health, so that a read starved under load cannot take a
        // healthy database out of the reservations.
        let reads = join_all(live.iter().map(|&i| {
            self.timed(async move {
                let db = &self.dbs[i];
                // Bizs before shapes: a shape row is written before its biz's rows,
                // so every biz read here has its shape read too.
                Ok(Snapshot {
                    bizs: db.store.bizs().await?,
                    shapes: db.store.shapes().await?,
                    tokens: db.store.tokens().await?,
                    witnesses: db.store.witnesses().await?,
                })
            })
        }))
        .await;
        for (&i, read) in live.iter().zip(&reads) {
            if let Err(e) = read {
                tracing::warn!(database = %self.dbs[i].name, error = %e, "catalog read failed; keeping the last one");
                self.dbs[i].health.lock().last_error = Some(e.0.clone());
            }
        }
        let read: Vec<(usize, Snapshot)> = live
            .into_iter()
            .zip(reads)
            .filter_map(|(i, r)| Some((i, r.ok()?)))
            .collect();
        let lagging = self.check_rows(&before, &read);
        let catalog = {
            let mut snapshots = self.snapshots.lock();
            for (i, snap) in read {
                snapshots[i] = Some(snap);
            }
            Arc::new(Catalog::build(&self.names, &snapshots))
        };
        self.catalog.store(catalog.clone());
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
        let mut evidence = self.evidence.lock();
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
                if let Some(db) = self.names.iter().position(|n| *n == w.database) {
                    evidence.learn(db, &w.biz, w.mark);
                }
            }
        }
        read.iter()
            .map(|(k, snap)| {
                let lacking = evidence.lacking(*k, &self.names, &snap.witnesses);
                (*k, lacking)
            })
            .filter(|(_, lacking)| !lacking.is_empty())
            .collect()
    }

    /// Writes `witnesses` to their databases, each bounded by the fetch timeout; a
    /// failure is only logged (the marks are written again at a later refresh).
    async fn write_witnesses(&self, witnesses: Vec<(usize, Vec<Witness>)>) {
        let writes = witnesses.iter().map(|(k, rows)| async move {
            if let Err(e) = self.timed(self.dbs[*k].store.witness(rows)).await {
                tracing::warn!(database = %self.dbs[*k].name, error = %e, "could not record witnesses");
            }
        });
        join_all(writes).await;
    }
}
