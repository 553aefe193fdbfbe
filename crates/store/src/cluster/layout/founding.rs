//! Recording the cluster's membership (the layout of epoch 0) on `segmint migrate`: the
//! store carries out the steps of [`layout::Founding`] on its engines.

use super::*;
use crate::layout::{Founding, FoundingError, Need};

impl Cluster {
    /// Records the configured databases and classes as the cluster's membership (the
    /// layout of epoch 0, `done`) on every configured database, unless a layout is
    /// recorded already (then `Ok(None)`). Every configured database must answer.
    ///
    /// # Errors
    /// [`StoreError::Refused`] saying why nothing (usable) was recorded: a database
    /// that did not answer, configured classes that leave IDs to none or overlap, or
    /// another membership found on a database.
    pub async fn record_membership(&self) -> Result<Option<Layout>, StoreError> {
        let read: Vec<(String, Option<Vec<LayoutRow>>)> = self
            .on_all(|db| db.layouts())
            .await
            .into_iter()
            .zip(&self.names)
            .map(|(rows, name)| (name.clone(), rows.ok()))
            .collect();
        let Some(mut machine) =
            Founding::start(&self.configured_layout(), &read, self.unix_ms()).map_err(refusal)?
        else {
            return Ok(None);
        };
        loop {
            match machine.next() {
                Need::Claim { database, row } => {
                    let answer = self.on_named(&database, |db| db.claim_layout(&row)).await;
                    machine.claimed(answer);
                }
                Need::Read { database } => {
                    let answer = self.on_named(&database, |db| db.layouts()).await;
                    machine.read(answer);
                }
                Need::MarkDone { database, row } => {
                    let answer = self.on_named(&database, |db| db.put_layout(&row)).await;
                    machine.marked(answer);
                }
                Need::Recorded(layout) => {
                    tracing::info!(members = %layout.describe(), "recorded the cluster's membership (layout epoch 0)");
                    self.load_layout().await;
                    return Ok(Some(layout));
                }
                Need::Failed(e) => return Err(refusal(e)),
            }
        }
    }
}

fn refusal(e: FoundingError) -> StoreError {
    let reason = match &e {
        FoundingError::Unanswered(_) => Reason::DatabaseUnanswered,
        FoundingError::Uncovered { .. } => Reason::DatabaseMissingFromConfig,
        FoundingError::Overlap(..) => Reason::LayoutImpossible,
        FoundingError::Differs { .. } => Reason::LayoutInvalid,
    };
    let hint = match &e {
        FoundingError::Unanswered(_) => {
            "run `segmint migrate` again once every configured database answers"
        }
        FoundingError::Uncovered { .. } | FoundingError::Overlap(..) => {
            "configure every database of the cluster, each with its class, and run `segmint migrate` again"
        }
        FoundingError::Differs { .. } => {
            "another configuration recorded the cluster's membership: configure this one as that record says (`segmint db list` shows it)"
        }
    };
    Refusal::new(reason, e.to_string()).hint(hint).into()
}
