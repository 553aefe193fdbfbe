//! The snowflake spec (epoch and bit layout) the cluster agrees on, checked before any
//! worker ID is leased: the decision is [`agree`](crate::snowflake::agreement::agree),
//! made on reads of every database of the layout in force; this file reads and writes
//! the records (`segmint_snowflake`, one row per database, never changed).

use futures_util::future::join_all;

use super::Store;
use crate::snowflake::Spec;
use crate::snowflake::agreement::{Agreement, Read, agree};
use crate::store::StoreError;

/// One database's record as read (the spec and whether it is confirmed): `None` when
/// it did not answer (or is not configured here).
type Record = Option<Option<(String, bool)>>;

/// Why this server may not lease (or keep) a worker ID now.
#[derive(Debug)]
pub(super) enum Disagreement {
    /// A database holds another spec: this server never leases.
    Differs(String),
    /// Not decided yet (a database down or not configured here, a record missing).
    Undecided(String),
}

impl From<Disagreement> for StoreError {
    fn from(d: Disagreement) -> StoreError {
        match d {
            Disagreement::Differs(m) | Disagreement::Undecided(m) => StoreError::Unavailable(m),
        }
    }
}

impl Store {
    /// This store issuing snowflake IDs with `spec` (Leaf's epoch and layout unless
    /// set): the spec it agrees on with the cluster, whose layout bounds the worker IDs.
    #[must_use]
    pub fn with_snowflake(mut self, spec: Spec) -> Store {
        self.snowflake = spec;
        self
    }

    /// The snowflake spec this store leases worker IDs for.
    pub fn snowflake(&self) -> &Spec {
        &self.snowflake
    }

    /// The snowflake spec recorded in each database, by name (`None`: no record),
    /// for status pages and tests.
    pub async fn snowflake_specs(&self) -> Vec<(String, Result<Option<(String, bool)>, String>)> {
        let results = self.on_all(|db| db.snowflake_spec()).await;
        self.dbs
            .names
            .iter()
            .cloned()
            .zip(results.into_iter().map(|r| r.map_err(|e| e.to_string())))
            .collect()
    }

    /// Succeeds when this server may lease a worker ID: the databases of the layout in
    /// force agree on its spec, recording it first where none is and every database
    /// answered ([`agree`]). A read that found every database holding the spec marks
    /// each record confirmed; a read that found the others down or not configured here
    /// leases on a confirmed record.
    ///
    /// # Errors
    /// [`StoreError::Unavailable`] naming both specs when a database holds another
    /// spec (this server never leases), or saying which database did not answer when
    /// none can be decided yet.
    pub(super) async fn agree_snowflake(&self) -> Result<(), Disagreement> {
        let own = self.snowflake.record();
        let members = self.members_in_force();
        let first = self.read_records(&members).await;
        if self.decide(&own, &members, &first).await? {
            return Ok(());
        }
        let empty = members
            .iter()
            .zip(&first)
            .filter_map(|(m, r)| m.filter(|_| matches!(r, Some(None))));
        let own = own.as_str();
        join_all(empty.map(|i| async move {
            let written = self
                .call(i, self.dbs.list[i].store.record_snowflake_spec(own))
                .await;
            match written {
                Ok(true) => tracing::info!(database = %self.dbs.names[i], spec = %own, "recorded the snowflake spec"),
                Ok(false) => {}
                // The read that follows finds what became of it.
                Err(e) => tracing::warn!(database = %self.dbs.names[i], error = %e, "could not record the snowflake spec"),
            }
        }))
        .await;
        let again = self.read_records(&members).await;
        if self.decide(own, &members, &again).await? {
            Ok(())
        } else {
            Err(Disagreement::Undecided(format!(
                "no worker ID is leased yet: recording the snowflake spec `{own}` did not reach every database of the layout; trying again"
            )))
        }
    }

    /// [`agree`] on `records` of `members`: `true` to lease (confirming the records
    /// when every database held the spec), `false` to record the spec first; anything
    /// else as an error saying why.
    async fn decide(
        &self,
        own: &str,
        members: &[Option<usize>],
        records: &[Record],
    ) -> Result<bool, Disagreement> {
        let reads: Vec<Read<'_>> = records
            .iter()
            .map(|r| match r {
                None => Read::Down,
                Some(None) => Read::Empty,
                Some(Some((s, confirmed))) => Read::Holds(s, *confirmed),
            })
            .collect();
        let name = |k: usize| members[k].map_or("(not configured here)", |i| &self.dbs.names[i]);
        match agree(own, &reads) {
            Agreement::Differs { index, found } => Err(Disagreement::Differs(format!(
                "no worker ID is leased: database \"{}\" records the snowflake spec `{found}`, and this server's `snowflake.layout` and `snowflake.epoch_ms` make `{own}`; servers with different specs could issue equal IDs, so configure this server as the cluster's (the record is never changed)",
                name(index)
            ))),
            Agreement::Undecided => {
                let unanswered: Vec<&str> = (0..reads.len())
                    .filter(|&k| reads[k] == Read::Down)
                    .map(name)
                    .collect();
                let lacking: Vec<&str> = (0..reads.len())
                    .filter(|&k| reads[k] == Read::Empty)
                    .map(name)
                    .collect();
                Err(Disagreement::Undecided(format!(
                    "no worker ID is leased until the databases agree on the snowflake spec `{own}`: not answering {unanswered:?}, without a record {lacking:?} (a record is written only once every database of the layout answers, and a server leases while some are down only on a record confirmed by a read of them all)"
                )))
            }
            Agreement::Agreed { every } => {
                if every {
                    self.confirm_records(own, members, records).await;
                }
                Ok(true)
            }
            Agreement::Record => Ok(false),
        }
    }

    /// Marks confirmed each record of `own` read unconfirmed; a failure is logged (a
    /// later read confirms it).
    async fn confirm_records(&self, own: &str, members: &[Option<usize>], records: &[Record]) {
        let unconfirmed = members
            .iter()
            .zip(records)
            .filter_map(|(m, r)| m.filter(|_| matches!(r, Some(Some((_, false))))));
        join_all(unconfirmed.map(|i| async move {
            if let Err(e) = self
                .call(i, self.dbs.list[i].store.confirm_snowflake_spec(own))
                .await
            {
                tracing::warn!(database = %self.dbs.names[i], error = %e, "could not confirm the snowflake spec");
            }
        }))
        .await;
    }

    /// The records of `members`, read at once.
    async fn read_records(&self, members: &[Option<usize>]) -> Vec<Record> {
        join_all(members.iter().map(|m| async move {
            let i = (*m)?;
            self.call(i, self.dbs.list[i].store.snowflake_spec())
                .await
                .ok()
        }))
        .await
    }
}
