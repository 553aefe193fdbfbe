//! Giving unissued IDs back to a database: one compare-and-set per plan, for the
//! server's own cache at stop and for the segments clients return alike.

use super::Cluster;
use crate::biz::BizTag;
use crate::segment::GiveBack;
use crate::store::DbError;

impl Cluster {
    /// Carries out `plan` (from [`plan_give_back`](crate::segment::plan_give_back)) for
    /// `biz` by `deadline`, on behalf of `by` (the server's cache or a client's id, for
    /// the log); returns the IDs given back. The row moves back only if it is still at
    /// the plan's version, so a database that answers late, fails or was reserved from
    /// since gives back nothing, and the IDs are wasted, never reissued.
    pub async fn give_back(
        &self,
        biz: &BizTag,
        plan: GiveBack,
        deadline: tokio::time::Instant,
        by: &str,
    ) -> u64 {
        let name = &self.names[plan.database];
        if !self.is_live(plan.database) {
            tracing::warn!(biz = %biz, database = %name, by, ids = plan.ids, "not giving back: the database is backing off after failures or fenced; the IDs are wasted");
            return 0;
        }
        let give_back = || self.compare_and_move_back(biz, plan);
        // Once more on an error: a pooled connection may have died with a database
        // restart. The compare-and-set makes a repeat harmless.
        let attempts = async {
            match give_back().await {
                Err(_) => give_back().await,
                done => done,
            }
        };
        match tokio::time::timeout_at(deadline, attempts).await {
            Ok(Ok(true)) => {
                tracing::info!(biz = %biz, database = %name, by, ids = plan.ids, max_id = plan.new_max_id, "gave back unissued IDs");
                plan.ids
            }
            Ok(Ok(false)) => {
                tracing::info!(biz = %biz, database = %name, by, ids = plan.ids, "not giving back: reserved by another since; the IDs are wasted");
                0
            }
            Ok(Err(e)) => {
                tracing::warn!(biz = %biz, database = %name, by, error = %e, ids = plan.ids, "could not give back unissued IDs; they are wasted");
                0
            }
            Err(_) => {
                // Counted as wasted even if the update still lands: it moves the row
                // down to the last ID issued, never below, and nothing is issued from
                // these segments any more.
                tracing::warn!(biz = %biz, database = %name, by, ids = plan.ids, "no answer to the give-back in time; the IDs are wasted");
                0
            }
        }
    }

    /// Moves the row of `biz` back from the plan's `max_id` to its `new_max_id` if its
    /// version is still the plan's, i.e. if the segments above `new_max_id` were the
    /// last reservations there and nobody reserved since. Returns whether it did; the
    /// version moves on either way, so nobody can reserve from the old state.
    async fn compare_and_move_back(&self, biz: &BizTag, plan: GiveBack) -> Result<bool, DbError> {
        debug_assert!(plan.new_max_id <= plan.max_id);
        let i = plan.database;
        let updated = self
            .call(
                i,
                self.list[i].store.advance(
                    biz.as_str(),
                    plan.version,
                    plan.max_id,
                    plan.new_max_id,
                ),
            )
            .await?;
        Ok(updated.is_some())
    }
}
