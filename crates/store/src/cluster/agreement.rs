//! The snowflake spec (epoch and bit layout) the cluster agrees on, checked before any
//! worker ID is leased: the decision is [`agree`](crate::snowflake::agreement::agree),
//! made on reads of every database of the layout in force; this file reads and writes
//! the records (`segmint_snowflake`, one row per database, never changed).

use futures_util::future::join_all;

use super::Cluster;
use crate::snowflake::Spec;
use crate::snowflake::agreement::{Outcome, Record, Step, Try};
use crate::store::StoreError;

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

impl Cluster {
    /// The snowflake spec this store leases worker IDs for.
    pub fn snowflake(&self) -> &Spec {
        &self.snowflake
    }

    /// The snowflake spec recorded in each database, by name (`None`: no record),
    /// for status pages and tests.
    pub async fn snowflake_specs(&self) -> Vec<(String, Result<Option<(String, bool)>, String>)> {
        let results = self.on_all(|db| db.snowflake_spec()).await;
        self.names
            .iter()
            .cloned()
            .zip(results.into_iter().map(|r| r.map_err(|e| e.to_string())))
            .collect()
    }

    /// Succeeds when this server may lease a worker ID: one [`Try`] of the agreement
    /// over the members of the layout in force, its steps carried out here (each round's
    /// at once). A member this server is not configured with counts as not answering.
    ///
    /// # Errors
    /// [`Disagreement::Differs`] naming both specs when a member holds another spec
    /// (this server never leases), [`Disagreement::Undecided`] saying which member did
    /// not answer or lacks the record when none can be decided yet.
    pub(super) async fn agree_snowflake(&self) -> Result<(), Disagreement> {
        let members = self.in_force().map_or_else(Vec::new, |l| l.index);
        let own = self.snowflake.record();
        let mut agreement = Try::new(own.clone(), members.iter().map(Option::is_some).collect());
        loop {
            let steps = agreement.steps();
            if steps.is_empty() {
                break;
            }
            let own = own.as_str();
            let answers = join_all(steps.into_iter().map(|step| {
                let members = &members;
                async move {
                    let k = match step {
                        Step::Read(k) | Step::Insert(k) | Step::Confirm(k) => k,
                    };
                    // Steps name only members configured here.
                    let Some(i) = members[k] else {
                        return (step, Record::Down);
                    };
                    let db = &self.list[i].store;
                    let name = &self.names[i];
                    let record = match step {
                        Step::Read(_) => match self.call(i, db.snowflake_spec()).await {
                            Ok(None) => Record::Empty,
                            Ok(Some((spec, confirmed))) => Record::Holds(spec, confirmed),
                            Err(_) => Record::Down,
                        },
                        Step::Insert(_) => {
                            match self.call(i, db.record_snowflake_spec(own)).await {
                                Ok(true) => tracing::info!(database = %name, spec = %own, "recorded the snowflake spec"),
                                Ok(false) => {}
                                // The read that follows finds what became of it.
                                Err(e) => tracing::warn!(database = %name, error = %e, "could not record the snowflake spec"),
                            }
                            Record::Down
                        }
                        Step::Confirm(_) => {
                            if let Err(e) = self.call(i, db.confirm_snowflake_spec(own)).await {
                                // A later read confirms it.
                                tracing::warn!(database = %name, error = %e, "could not confirm the snowflake spec");
                            }
                            Record::Down
                        }
                    };
                    (step, record)
                }
            }))
            .await;
            for (step, record) in answers {
                match step {
                    Step::Read(k) => agreement.read(k, record),
                    Step::Insert(k) => agreement.inserted(k),
                    Step::Confirm(k) => agreement.confirmed(k),
                }
            }
        }
        let name = |k: usize| {
            members
                .get(k)
                .copied()
                .flatten()
                .map_or("(not configured here)", |i| self.names[i].as_str())
        };
        match agreement.outcome() {
            Some(Outcome::Lease) => Ok(()),
            Some(Outcome::Differs { member, found }) => Err(Disagreement::Differs(format!(
                "no worker ID is leased: database \"{}\" records the snowflake spec `{found}`, and this server's `snowflake.layout` and `snowflake.epoch_ms` make `{own}`; servers with different specs could issue equal IDs, so configure this server as the cluster's (the record is never changed)",
                name(*member)
            ))),
            Some(Outcome::Undecided { reads, recorded: true }) if reads.contains(&Record::Empty) => {
                Err(Disagreement::Undecided(format!(
                    "no worker ID is leased yet: recording the snowflake spec `{own}` did not reach every database of the layout; trying again"
                )))
            }
            Some(Outcome::Undecided { reads, .. }) => {
                let unanswered: Vec<String> = self.members_named(&members, reads, Record::Down);
                let lacking: Vec<String> = self.members_named(&members, reads, Record::Empty);
                Err(Disagreement::Undecided(format!(
                    "no worker ID is leased until the databases agree on the snowflake spec `{own}`: not answering {unanswered:?}, without a record {lacking:?} (a record is written only once every database of the layout answers, and a server leases while some are down only on a record confirmed by a read of them all)"
                )))
            }
            None => Err(Disagreement::Undecided(
                "no worker ID is leased: no layout done was read, so no database says it is a member".into(),
            )),
        }
    }

    /// The names of the members whose read was `which` (one not configured here named
    /// so).
    fn members_named(
        &self,
        members: &[Option<usize>],
        reads: &[Record],
        which: Record,
    ) -> Vec<String> {
        reads
            .iter()
            .zip(members)
            .filter(|(r, _)| **r == which)
            .map(|(_, m)| {
                m.map_or_else(
                    || "(not configured here)".to_owned(),
                    |i| self.names[i].clone(),
                )
            })
            .collect()
    }
}
