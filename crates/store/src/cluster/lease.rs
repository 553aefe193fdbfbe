//! Snowflake worker-ID leases: which database may lease which worker ID, taking one on
//! a random live database, renewing and releasing it.
//!
//! A database leases only the worker IDs of its own residue class (`w % delta ==
//! remainder`): the configured classes are pairwise disjoint, so two databases can never
//! lease one worker ID, and no database needs to know about the others.

use std::time::Duration;

use futures_util::future::join_all;
use rand::seq::SliceRandom;

use segmint_core::snowflake::lease::{self, Agreed, RenewNeed, Renewed, TakeNeed};

use super::Cluster;
use crate::snowflake::MAX_WORKER_ID;
use crate::store::{DbError, LeaseRenewal, LeaseRow, StoreError};

/// How many worker IDs there are (0 to 1023).
pub const WORKER_IDS: u16 = MAX_WORKER_ID + 1;

/// Lost races on one database before the next database is tried.
const TAKES_PER_DATABASE: usize = 8;

/// A worker ID leased from one database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// Index of the database holding the lease row.
    pub database: usize,
    /// The leased worker ID.
    pub worker_id: u16,
    /// Who holds it: this process.
    pub holder: String,
    /// The row's version as last written by this holder.
    pub version: i64,
    /// Every timestamp at or below this may have been issued with this worker ID by an
    /// earlier holder (its recorded last timestamp and bound): issue only above it.
    pub floor_ms: i64,
    /// When the lease runs out, by the database's clock.
    pub expires_ms: i64,
}

impl Lease {
    fn from_row(database: usize, row: &LeaseRow) -> Lease {
        Lease {
            database,
            worker_id: row.worker_id,
            holder: row.holder.clone(),
            version: row.version,
            floor_ms: row.last_ms.max(row.bound_ms),
            expires_ms: row.expires_ms,
        }
    }
}

/// Milliseconds of `d`, saturating.
fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl Cluster {
    /// The worker IDs database `i` may lease: those of its residue class below the
    /// snowflake layout's `2^worker_bits`. None for a database the layout in force does
    /// not name.
    pub fn worker_ids_of(&self, i: usize) -> Vec<u16> {
        lease::worker_ids(
            self.class_of(i),
            self.leases_allowed(),
            self.snowflake.layout.worker_ids(),
        )
    }

    /// The name of database `i`.
    pub fn database_name(&self, i: usize) -> &str {
        &self.names[i]
    }

    /// Takes a free worker ID for `holder` on a random live database, lowest first: one
    /// with no lease row, or whose lease ran out more than `grace` ago (by that
    /// database's clock). A database that fails is backed off and the next is tried.
    /// Only once the databases agree on this store's snowflake spec (see
    /// [`agreement`](crate::snowflake::agreement)).
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] when no live database has a free worker ID or
    /// answers, or the databases do not agree on the snowflake spec (the message says
    /// which database holds which spec).
    pub async fn take_lease(
        &self,
        holder: &str,
        lease: Duration,
        grace: Duration,
    ) -> Result<Lease, StoreError> {
        if !self.leases_allowed() {
            return Err(StoreError::Unavailable(
                "no worker ID could be leased: no layout done was read (the cluster's membership is recorded by `segmint migrate`; a database whose layout change is still moving does not say which worker IDs are its own)".into(),
            ));
        }
        self.agree_snowflake().await?;
        let mut order: Vec<usize> = (0..self.list.len()).filter(|&i| self.is_live(i)).collect();
        order.shuffle(&mut rand::rng());
        let mut why = Vec::new();
        for i in order {
            match self.take_on(i, holder, millis(lease), millis(grace)).await {
                Ok(Some(lease)) => return Ok(lease),
                Ok(None) => why.push(format!(
                    "\"{}\": every worker ID of its class is leased",
                    self.names[i]
                )),
                Err(e) => why.push(format!("\"{}\": {e}", self.names[i])),
            }
        }
        if why.is_empty() {
            why.push(self.last_errors());
        }
        Err(StoreError::Unavailable(format!(
            "no worker ID could be leased: {}",
            why.join("; ")
        )))
    }

    /// Tries the free worker IDs of database `i`, lowest first: carries out the steps
    /// of [`lease::Take`].
    async fn take_on(
        &self,
        i: usize,
        holder: &str,
        lease_ms: i64,
        grace_ms: i64,
    ) -> Result<Option<Lease>, DbError> {
        let db = &self.list[i];
        let mut take =
            lease::Take::new(self.worker_ids_of(i), holder, grace_ms, TAKES_PER_DATABASE);
        loop {
            match take.need() {
                TakeNeed::Read => take.read(&self.call(i, db.store.leases()).await?),
                TakeNeed::Elsewhere => take.elsewhere(&self.leases_elsewhere(i).await),
                TakeNeed::Take(w) => take.taken(
                    self.call(i, db.store.take_lease(w, holder, lease_ms, grace_ms))
                        .await?,
                ),
                TakeNeed::Done(row) => return Ok(row.map(|row| Lease::from_row(i, &row))),
            }
        }
    }

    /// Renews `lease` until `lease_for` from its database's clock now, recording
    /// `last_ms` and `bound_ms`; a negative `lease_for_ms` releases it. Returns the
    /// renewed lease, or `None` when it is no longer this holder's (taken by another
    /// process, or its database went back in time).
    ///
    /// # Errors
    /// [`DbError`] when the database fails or does not answer in time (it is backed
    /// off); whether the renewal landed is then unknown.
    pub async fn renew_lease(
        &self,
        lease: &Lease,
        lease_for_ms: i64,
        last_ms: i64,
        bound_ms: i64,
    ) -> Result<Option<Lease>, DbError> {
        let renewal = LeaseRenewal {
            worker_id: lease.worker_id,
            holder: lease.holder.clone(),
            version: lease.version,
            expires_in_ms: lease_for_ms,
            last_ms,
            bound_ms,
        };
        let i = lease.database;
        let mut renew = match lease_for_ms >= 0 {
            true => lease::Renew::new(lease.worker_id, &lease.holder, &self.worker_ids_of(i)),
            false => lease::Renew::release(),
        };
        loop {
            match renew.need() {
                // The spec is checked again at each renewal: a database restored from a
                // backup older than its record gets the record back (while every member
                // answers), so that a server of another spec reaching only that
                // database finds it; a record of another spec found now (written by
                // hand, or a restore of another cluster's backup) ends the lease.
                // Undecided (a database down) keeps it: it was taken on an agreement.
                RenewNeed::Agree => renew.agreed(match self.agree_snowflake().await {
                    Err(super::agreement::Disagreement::Differs(why)) => Agreed::Differs(why),
                    _ => Agreed::Keep,
                }),
                RenewNeed::Elsewhere => renew.elsewhere(&self.leases_elsewhere(i).await),
                RenewNeed::Renew => renew.renewed(
                    self.call(i, self.list[i].store.renew_lease(&renewal))
                        .await?,
                ),
                RenewNeed::Done(Renewed::Kept(row)) => {
                    return Ok(Some(Lease {
                        floor_ms: lease.floor_ms,
                        ..Lease::from_row(i, &row)
                    }));
                }
                RenewNeed::Done(Renewed::Lost) => return Ok(None),
                // A worker ID that left its database's class in the layout in force (or
                // whose database is not used: behind, lost) is given up at once: a
                // change may have freed it on its new database already.
                RenewNeed::Done(Renewed::LeftClass) => {
                    tracing::warn!(worker_id = lease.worker_id, database = %self.names[i], "the worker ID is no longer in its database's class in the layout in force; giving it up");
                    return Ok(None);
                }
                RenewNeed::Done(Renewed::HeldElsewhere(row)) => {
                    tracing::error!(worker_id = lease.worker_id, database = %self.names[i], other_holder = %row.holder, "another configured database leases this worker ID to a live holder (restored from a backup taken before a layout change?); giving it up");
                    return Ok(None);
                }
                RenewNeed::Done(Renewed::Differs(why)) => {
                    tracing::error!(worker_id = lease.worker_id, %why, "a database records another snowflake spec; giving up the worker ID");
                    return Ok(None);
                }
            }
        }
    }

    /// The lease rows of every configured database but `i` that answers
    /// ([`lease::held_elsewhere`] reads them): one backed off or failing is left out,
    /// but not one fenced or whose layout is behind: a database restored from a backup
    /// is both, and its rows are the ones to see.
    async fn leases_elsewhere(&self, i: usize) -> Vec<LeaseRow> {
        let reads = (0..self.list.len())
            .filter(|&j| j != i && self.is_reachable(j))
            .map(|j| self.call(j, self.list[j].store.leases()));
        join_all(reads)
            .await
            .into_iter()
            .flatten()
            .flatten()
            .collect()
    }

    /// Every lease row of every database, for status pages and tests.
    pub async fn list_leases(&self) -> Vec<(String, Result<Vec<LeaseRow>, DbError>)> {
        let results = self.on_all(|db| db.leases()).await;
        self.names.iter().cloned().zip(results).collect()
    }
}
