//! Database health as the store judges it: fencing of databases that went back in
//! time, readiness and status. Back-off after failures is recorded by the
//! [`Cluster`](super::Cluster) handle, which carries out every step.

use futures_util::future::join_all;

use super::Cluster;
use crate::store::evidence::Regression;

/// How a database looks from here, for `/readyz` and status pages.
#[derive(Debug, Clone, serde::Serialize)]
pub struct DatabaseStatus {
    pub name: String,
    pub location: String,
    /// Its class in the layout in force; `None` when the layout does not name it.
    pub residue: Option<String>,
    /// Whether the layout in force names it and it may be used: one it does not name,
    /// or whose standing is not current, is never used.
    pub in_layout: bool,
    /// Its standing among the layouts read (see [`crate::layout::Standing`]):
    /// `current`, `behind`, `lost` or `disagrees`.
    pub layout: &'static str,
    /// False while the database is backed off after a failure or fenced.
    pub up: bool,
    pub last_error: Option<String>,
    /// Why the database is fenced (it went back in time), while it is.
    pub fenced: Option<String>,
    /// How far this server's clock was ahead of the database's (negative: behind) at
    /// the last catalog refresh; `None` before its clock was read.
    pub clock_ahead_ms: Option<i64>,
}

impl Cluster {
    /// Fences database `i`: it went back in time, and reserving from it could reissue
    /// IDs.
    pub(super) fn fence(&self, i: usize, regression: &Regression) {
        let db = &self.list[i];
        let reason = regression.to_string();
        let mut health = db.health.lock();
        if health.fenced.is_none() {
            tracing::error!(database = %db.name, %reason, "database went back in time; fenced until `segmint db fence` raises its rows");
            health.unrecorded = true;
        }
        health.fenced = Some(reason);
    }

    /// Lifts the fence of database `i`, if any: its rows are at or above every mark.
    pub(super) fn unfence(&self, i: usize) {
        let db = &self.list[i];
        if db.health.lock().fenced.take().is_some() {
            tracing::warn!(database = %db.name, "database rows are above every mark again; fence lifted");
        }
    }

    /// Whether database `i` may be used: not backed off after a failure (a call sent
    /// there now would most likely only wait for its timeout), not fenced.
    /// Also false for a database the layout in force does not name (removed, or not
    /// added yet): it is never used.
    pub fn is_live(&self, i: usize) -> bool {
        let up = self.list[i].health.lock().up(self.clock.now());
        up && self.class_of(i).is_some()
    }

    pub(super) fn last_errors(&self) -> String {
        self.status()
            .into_iter()
            .map(|s| {
                format!(
                    "\"{}\": {}",
                    s.name,
                    s.last_error.unwrap_or_else(|| "no error".into())
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }

    /// Pings every database that is not backing off; true when one answers.
    pub async fn ready(&self) -> bool {
        let live: Vec<usize> = (0..self.list.len()).filter(|&i| self.is_live(i)).collect();
        join_all(
            live.into_iter()
                .map(|i| self.call(i, self.list[i].store.ping())),
        )
        .await
        .iter()
        .any(Result::is_ok)
    }

    pub fn status(&self) -> Vec<DatabaseStatus> {
        self.list
            .iter()
            .enumerate()
            .map(|(i, db)| {
                let class = self.class_of(i);
                let health = db.health.lock();
                DatabaseStatus {
                    name: db.name.clone(),
                    location: db.location.clone(),
                    residue: class.map(|c| c.to_string()),
                    in_layout: class.is_some(),
                    layout: self.standing_of(i).as_str(),
                    up: health.up(self.clock.now()),
                    last_error: health.last_error.clone(),
                    fenced: health.fenced.clone(),
                    clock_ahead_ms: health.clock.map(|r| r.server_ahead_ms()),
                }
            })
            .collect()
    }
}
