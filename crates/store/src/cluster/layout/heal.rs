//! What servers do with the layouts they read: share the final rows with databases
//! that lack them, and finish the bizs of a change that was cut off.

use super::*;
use crate::layout::Heal;

impl Cluster {
    /// Writes the final layout rows (`done`, `superseded`) known here into each
    /// database just `read` that lacks them (or holds them as `moving`): a database
    /// that missed the end of a change, or one declared lost that came back, learns it,
    /// so that a server that later reaches only that database knows it too (and does
    /// not use a lost one). Rows of a change under way are left to its command. Best
    /// effort: a failed write is written again at a later refresh.
    pub(in crate::cluster) async fn share_layouts(&self, read: &[(usize, Vec<LayoutRow>)]) {
        let (layouts, standing) = {
            let view = self.layouts.view.lock();
            (view.layouts.clone(), view.standing.clone())
        };
        for (i, rows) in read {
            if standing[*i] == Standing::Disagrees {
                continue;
            }
            for l in layouts.iter().filter(|l| l.state != LayoutState::Moving) {
                let held = rows.iter().find(|r| r.epoch == l.epoch);
                if held.is_some_and(|r| r.state != LayoutState::Moving.as_str()) {
                    continue;
                }
                let row = l.row(self.unix_ms());
                let store = &self.list[*i].store;
                let written = match held {
                    None => self.timed(store.claim_layout(&row)).await,
                    Some(_) => self.timed(store.put_layout(&row)).await,
                };
                match written {
                    Ok(true) => {
                        tracing::info!(database = %self.names[*i], epoch = l.epoch, state = l.state.as_str(), "wrote a layout row the database lacked")
                    }
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(database = %self.names[*i], error = %e, "could not write a layout row the database lacks")
                    }
                }
            }
        }
    }

    /// Finishes the bizs of a change that was cut off, from a server: once the change's
    /// row has stayed the same for [`Protocol::silent`](crate::config::Protocol::silent)
    /// (by this process's clock, from the first
    /// read that saw it), every biz with a member's row frozen by the change is moved
    /// as the command would move it, provided this server is configured with, and just
    /// `read`, every database the change needs. Moving a biz twice at once (two
    /// servers, or the command alive after all) is safe: each step is a compare-and-set.
    /// The worker IDs and the layout row are left to the command, run again. Returns
    /// whether a biz was moved.
    pub(in crate::cluster) async fn heal(&self, read: &[(usize, Snapshot)]) -> bool {
        let (pending, layouts) = {
            let mut view = self.layouts.view.lock();
            let Some(pending) = layout::current(&view.layouts).1.cloned() else {
                view.watched = None;
                return false;
            };
            let beat = read
                .iter()
                .flat_map(|(_, s)| &s.layouts)
                .filter(|r| r.epoch == pending.epoch)
                .map(|r| r.changed_ms)
                .max()
                .unwrap_or(0);
            if !view.cut_off(pending.epoch, beat, self.clock.now(), self.protocol.silent) {
                return false;
            }
            (pending, view.layouts.clone())
        };
        let before = self.configured_layout();
        let witnesses: Vec<_> = read
            .iter()
            .flat_map(|(_, s)| &s.witnesses)
            .flat_map(|(database, marks)| {
                marks.iter().map(|(biz, &mark)| crate::store::Witness {
                    database: database.clone(),
                    biz: biz.to_string(),
                    mark,
                })
            })
            .collect();
        let mut names: Vec<String> = witnesses.iter().map(|w| w.database.clone()).collect();
        names.sort();
        names.dedup();
        let read_at: Vec<usize> = read.iter().map(|(i, _)| *i).collect();
        let parts = match layout::healing(&layouts, &before, &self.names, &read_at, &names) {
            Heal::Move { parts, .. } => parts,
            Heal::Nothing => return false,
            Heal::Lacks(need) => {
                tracing::warn!(epoch = pending.epoch, needs = ?need, "a change to the layout was cut off; this server cannot finish its bizs without every database it needs: run the command again");
                return false;
            }
        };
        let mut bizs: BTreeSet<&str> = BTreeSet::new();
        for (i, snap) in read {
            for r in &snap.bizs {
                if layout::frozen_by(&pending, &self.names[*i], r.frozen, r.claimed_by) {
                    bizs.insert(&r.biz_type);
                }
            }
        }
        let witnessed = witnessed(witnesses.into_iter());
        let mut healed = false;
        for biz in bizs {
            match self
                .move_biz(biz, &pending, &layouts, &witnessed, &parts)
                .await
            {
                Ok(Moved::Already) => {}
                Ok(Moved::Moved { fence, rows }) => {
                    healed = true;
                    tracing::warn!(
                        biz,
                        epoch = pending.epoch,
                        fence,
                        rows,
                        "finished moving a biz whose layout change was cut off"
                    );
                }
                Err(e) => {
                    tracing::warn!(biz, epoch = pending.epoch, error = %e, "could not finish moving a biz whose layout change was cut off")
                }
            }
        }
        healed
    }
}
