//! Layout changes: adding and removing databases while servers serve.
//!
//! A change needs every database that may hold live rows or leases to be configured
//! and to answer ([`layout::required`]); a database gone for good is declared lost
//! instead (`segmint db remove NAME --lost`), and its classes are never given again.
//! The change then **claims** its epoch: it inserts the epoch's layout row, `moving`,
//! on every database one at a time in [`layout::claim_order`], so that of two changes
//! racing for one epoch the second finds the row on the first database it tries and
//! stops having written nothing. Then it moves each biz on its own:
//! 1. **Freeze** every row of the biz with a compare-and-set on its version, as a
//!    reservation's, stamping it `claimed_by` the change's epoch; a database of the
//!    change without a row gets a frozen placeholder. A frozen row gives out no
//!    segment, and a reservation that read the row before loses its race, so once every
//!    row is frozen no row can move again. A row stamped by a later change is never
//!    written: a command superseded while it ran (paused, slow) stops.
//! 2. **Fence**: the highest `max_id` of the frozen rows, and of every witness of them,
//!    lies at or above every ID issued or handed out under the old layout.
//! 3. **Switch** each row of the new layout's databases to its new class (the biz's own
//!    restriction kept) at the fence, unfrozen, with the same compare-and-set. Rows of
//!    removed databases stay frozen.
//!
//! Every new ID is above the fence, and the new classes are disjoint: no ID repeats.
//! While the command runs it rewrites its layout row every heartbeat (1 s by default;
//! see [`Protocol`](crate::config::Protocol)). A change whose row has not changed for the
//! silence (3 s; watched by the reader's own monotonic clock: no two hosts' clocks are
//! compared) was cut off: servers finish its bizs themselves
//! ([`Cluster::heal`]), and running the command again (or the opposite one) finishes it.
//! Worker IDs move last, under the same epoch (a lease write checks in its transaction
//! that the epoch is still `moving`): blocked where they leave (the holder's renewals
//! then fail), freed where they arrive with the last holder's bound, so the next holder
//! issues above every timestamp the last one could issue. Then the layout is `done`.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures_util::future::join_all;

use super::Cluster;
use super::lease::WORKER_IDS;
use crate::layout::{self, Layout, LayoutChange, LayoutState, Plan, Standing};
use crate::segment::Residue;
use crate::store::catalog::{Snapshot, merge_tokens};
use crate::store::evidence::{self, Mark};
use crate::store::{BizRow, DbError, LayoutRow, Reason, Reclass, Refusal, ShapeRow, StoreError};

mod change;
mod founding;
mod heal;
mod moving;

/// Lost races per biz before the change gives up (servers reserving between the read
/// and the freeze; a handful at most).
const MOVE_ATTEMPTS: u32 = 50;

/// What the witnesses recorded, by biz: `(highest max_id, version)` per witness.
type Witnessed = HashMap<String, Vec<(i64, i64)>>;

/// The layout part of the [`Cluster`]: the layouts read and each database's class.
///
/// # Lock order
/// `view` is a plain (`parking_lot`) mutex held to read or replace it, never across
/// an await. It is the innermost lock of the store: taken under a database's `health`
/// or `CatalogView.snapshots`, it nests nothing.
pub(super) struct Layouts {
    /// The layouts read from the databases, and each database's class in the one in
    /// force.
    pub(super) view: parking_lot::Mutex<LayoutView>,
}

impl Layouts {
    /// The configured classes, before any layout is read.
    pub(super) fn configured(configured: Vec<Residue>) -> Layouts {
        Layouts {
            view: parking_lot::Mutex::new(LayoutView::configured(configured)),
        }
    }
}

/// The layouts as servers see them.
pub(crate) struct LayoutView {
    /// Every epoch read, merged over the databases.
    layouts: Vec<Layout>,
    /// Per configured database: its class in the layout in force, when it may be used;
    /// `None` when the layout in force does not name it, or its standing is not current.
    classes: Vec<Option<Residue>>,
    /// Per configured database: its standing among the layouts, as last read.
    standing: Vec<Standing>,
    /// The configured classes: the layout before any change.
    configured: Vec<Residue>,
    /// The change under way as last read: its epoch, its row's `changed_ms`, and when
    /// this process first saw that pair (its own monotonic clock).
    watched: Option<(i64, i64, Instant)>,
}

impl LayoutView {
    /// Before any layout is read, no database is used: the members are the databases'
    /// to say ([`layout::Founding`]), never the configuration's alone.
    pub(crate) fn configured(classes: Vec<Residue>) -> LayoutView {
        LayoutView {
            layouts: Vec::new(),
            classes: vec![None; classes.len()],
            standing: vec![Standing::Current; classes.len()],
            configured: classes,
            watched: None,
        }
    }
}

impl LayoutView {
    /// Whether the change to `epoch`, whose row was last read with `changed_ms` `beat`
    /// at `at` (this process's monotonic clock), counts as cut off: its row released
    /// (`beat` 0), or unchanged for `silent` since this process first read it so.
    fn cut_off(&mut self, epoch: i64, beat: i64, at: Instant, silent: Duration) -> bool {
        let since = match self.watched {
            Some((e, b, since)) if e == epoch && b == beat => since,
            _ => {
                self.watched = Some((epoch, beat, at));
                at
            }
        };
        beat == 0 || at.saturating_duration_since(since) >= silent
    }
}

/// Which databases are the cluster's, as the layouts read say, against this server's
/// configuration.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Membership {
    /// The epoch of the layout in force; `None` while no layout done was read (no
    /// database is used: `segmint migrate` records the membership).
    pub epoch: Option<i64>,
    /// Members this server is not configured with: they count as not answering.
    pub unconfigured: Vec<String>,
    /// Configured databases that are not members (nor declared lost): never used.
    pub not_members: Vec<String>,
}

/// What `segmint db list` shows.
#[derive(Debug, Clone)]
pub struct LayoutReport {
    /// The layout in force; `None` before any change.
    pub current: Option<Layout>,
    /// A change under way (or cut off), if any.
    pub pending: Option<Layout>,
    /// Per configured database: name, class in force, whether it answers (with the
    /// error), its biz rows and how many of them are frozen.
    pub databases: Vec<DatabaseLayout>,
}

#[derive(Debug, Clone)]
pub struct DatabaseLayout {
    pub name: String,
    pub class: Option<Residue>,
    pub error: Option<String>,
    pub rows: usize,
    pub frozen: usize,
    /// The highest layout epoch among its rows.
    pub epoch: i64,
    /// Its standing among the layouts read.
    pub standing: Standing,
}

/// One biz's move, for the report.
enum Moved {
    Already,
    Moved { fence: i64, rows: usize },
}

impl Cluster {
    /// The wall time stamped on a layout row: never 0, which says a row was released.
    fn unix_ms(&self) -> i64 {
        self.clock.unix_ms().max(1)
    }

    /// Takes in the layout rows read from each database (`(index, rows)`: at a catalog
    /// refresh, or by an admin command): each database's class and standing follow the
    /// layouts merged with those known before. A database whose rows disagree with
    /// another's, whose newest epoch is behind another's, or that was declared lost is
    /// not used (see [`layout::read`]).
    pub(super) fn apply_layouts(&self, per_db: &[(usize, Vec<LayoutRow>)]) {
        let mut view = self.layouts.view.lock();
        let named: Vec<(String, Vec<LayoutRow>)> = per_db
            .iter()
            .map(|(i, rows)| (self.names[*i].clone(), rows.clone()))
            .collect();
        let reading = match layout::read(&view.layouts, &named) {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(error = %e, "layout rows unreadable; keeping the layout known before");
                return;
            }
        };
        for ((i, _), standing) in per_db.iter().zip(reading.standing) {
            if standing != view.standing[*i] {
                tracing::warn!(database = %self.names[*i], standing = standing.as_str(), detail = ?standing, "database layout standing changed");
            }
            view.standing[*i] = standing;
        }
        // A database that was not read keeps its standing, unless a newer epoch is
        // known now than it was seen to hold.
        let newest = reading.layouts.last().map(|l| l.epoch);
        let current = layout::current(&reading.layouts).0;
        // Only a layout done names the members: before one is read (a cluster whose
        // membership `segmint migrate` has not recorded, or a record cut off), no
        // database is used.
        let classes: Vec<Option<Residue>> = (0..self.names.len())
            .map(|i| {
                if view.standing[i] != Standing::Current {
                    return None;
                }
                current.and_then(|l| l.class_of(&self.names[i]))
            })
            .collect();
        if classes != view.classes {
            tracing::info!(
                layout = %current.map_or_else(|| "configured".into(), |l| format!("epoch {}: {}", l.epoch, l.describe())),
                newest = ?newest,
                "database layout changed"
            );
        }
        view.classes = classes;
        view.layouts = reading.layouts;
    }

    /// Whether worker IDs may be leased now ([`layout::leases_allowed`]).
    pub fn leases_allowed(&self) -> bool {
        let view = self.layouts.view.lock();
        layout::leases_allowed(&view.layouts)
    }

    /// The class plain bizs get on database `i` in the layout in force; `None` when the
    /// layout does not name it, or its standing is not current: it is then never used.
    pub fn class_of(&self, i: usize) -> Option<Residue> {
        self.layouts.view.lock().classes[i]
    }

    /// The layout done in force, whose members hold the sequence sections and the
    /// snowflake spec; `None` before one was read (the cluster's membership is recorded
    /// by `segmint migrate`).
    pub fn in_force(&self) -> Option<InForce> {
        let view = self.layouts.view.lock();
        let done = layout::current(&view.layouts).0?;
        Some(InForce {
            epoch: done.epoch,
            names: done.names(),
            index: done
                .members
                .iter()
                .map(|m| self.names.iter().position(|n| *n == m.name))
                .collect(),
        })
    }

    /// The membership as this server sees it, for `/readyz`, status pages and metrics.
    pub fn membership(&self) -> Membership {
        let view = self.layouts.view.lock();
        let done = layout::current(&view.layouts).0;
        Membership {
            epoch: done.map(|l| l.epoch),
            unconfigured: done.map_or_else(Vec::new, |l| {
                l.names()
                    .into_iter()
                    .filter(|m| !self.names.contains(m))
                    .collect()
            }),
            not_members: done.map_or_else(Vec::new, |l| {
                self.names
                    .iter()
                    .filter(|n| l.class_of(n).is_none() && !l.is_lost(n))
                    .cloned()
                    .collect()
            }),
        }
    }

    /// The standing of database `i` among the layouts last read.
    pub fn standing_of(&self, i: usize) -> Standing {
        self.layouts.view.lock().standing[i].clone()
    }

    /// Every `(epoch, database, class)` of the layouts read.
    pub(super) fn layout_classes(&self) -> Vec<(i64, String, Residue)> {
        let view = self.layouts.view.lock();
        view.layouts
            .iter()
            .flat_map(|l| l.members.iter().map(|m| (l.epoch, m.name.clone(), m.class)))
            .collect()
    }

    /// The layout in force (`None` before any change) and the change under way above
    /// it, as last read.
    pub fn layouts(&self) -> (Option<Layout>, Option<Layout>) {
        let view = self.layouts.view.lock();
        let (done, pending) = layout::current(&view.layouts);
        (done.cloned(), pending.cloned())
    }

    /// The epoch in force (0 before any change) and the change under way, if any.
    pub fn layout_epochs(&self) -> (i64, Option<i64>) {
        let view = self.layouts.view.lock();
        let (done, pending) = layout::current(&view.layouts);
        (done.map_or(0, |l| l.epoch), pending.map(|l| l.epoch))
    }

    /// The layout of the configured classes: the layout before any change.
    pub fn configured_layout(&self) -> Layout {
        let view = self.layouts.view.lock();
        Layout {
            epoch: 0,
            members: self
                .names
                .iter()
                .zip(&view.configured)
                .map(|(name, class)| layout::Member {
                    name: name.clone(),
                    class: *class,
                })
                .collect(),
            state: LayoutState::Done,
            lost: Vec::new(),
        }
    }

    /// Reads the layouts for an admin command that writes rows in the layout in force
    /// (`biz add`, `import`): its epoch, or a refusal while a change is under way.
    /// A cluster whose membership is not recorded yet gets it first, as `segmint
    /// migrate` records it (an embedded store's first command, or a cluster migrated by
    /// an earlier version).
    pub(super) async fn layout_for_writes(&self) -> Result<i64, StoreError> {
        self.load_layout().await;
        if self.layouts() == (None, None) {
            self.record_membership().await?;
        }
        match self.layout_epochs() {
            (_, Some(pending)) => Err(Refusal::new(
                Reason::ChangePending,
                format!(
                    "a change to layout epoch {pending} is under way (or was cut off); nothing changed"
                ),
            )
            .hint("finish it first by running it again")
            .into()),
            (epoch, None) => Ok(epoch),
        }
    }

    /// Reads the layouts from every database that answers, for admin commands that
    /// need the classes in force.
    pub async fn load_layout(&self) {
        let read: Vec<(usize, Vec<LayoutRow>)> = self
            .on_all(|db| db.layouts())
            .await
            .into_iter()
            .enumerate()
            .filter_map(|(i, r)| Some((i, r.ok()?)))
            .collect();
        self.apply_layouts(&read);
    }

    /// The layouts and every database's state in them, for `segmint db list`.
    pub async fn layout_report(&self) -> LayoutReport {
        self.load_layout().await;
        let bizs = self.on_all(|db| db.bizs()).await;
        let (current, pending) = self.layouts();
        let databases = bizs
            .into_iter()
            .enumerate()
            .map(|(i, rows)| {
                let (error, rows) = match rows {
                    Ok(rows) => (None, rows),
                    Err(e) => (Some(e.to_string()), Vec::new()),
                };
                DatabaseLayout {
                    name: self.names[i].clone(),
                    class: self.class_of(i),
                    error,
                    rows: rows.len(),
                    frozen: rows.iter().filter(|r| r.frozen).count(),
                    epoch: rows.iter().map(|r| r.epoch).max().unwrap_or(0),
                    standing: self.standing_of(i),
                }
            })
            .collect();
        LayoutReport {
            current,
            pending,
            databases,
        }
    }
}

/// What the witnesses recorded of each biz's rows: (highest max_id, version).
fn witnessed(witnesses: impl Iterator<Item = crate::store::Witness>) -> Witnessed {
    let mut out: Witnessed = HashMap::new();
    for w in witnesses {
        out.entry(w.biz)
            .or_default()
            .push((w.mark.high_id.max(w.mark.max_id), w.mark.version));
    }
    out
}

/// The layout done in force, as this server reaches its members.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InForce {
    pub epoch: i64,
    /// The members' names, in the layout's order.
    pub names: Vec<String>,
    /// Each member's index among this server's databases (`None`: not configured).
    pub(in crate::cluster) index: Vec<Option<usize>>,
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::LayoutView;

    /// The silence is judged on the instants given (the store's clock), from the first
    /// read of a beat: no sleep needed to test it.
    #[test]
    fn a_change_is_cut_off_once_its_row_stayed_the_same_for_the_silence() {
        let silent = Duration::from_millis(300);
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let mut view = LayoutView::configured(Vec::new());
        assert!(!view.cut_off(2, 1000, ms(0), silent), "first seen");
        assert!(!view.cut_off(2, 1000, ms(299), silent));
        assert!(view.cut_off(2, 1000, ms(300), silent));
        assert!(
            !view.cut_off(2, 1100, ms(400), silent),
            "a beat restarts it"
        );
        assert!(!view.cut_off(2, 1100, ms(650), silent));
        assert!(view.cut_off(2, 1100, ms(700), silent));
        assert!(!view.cut_off(3, 1100, ms(800), silent), "another epoch");
        assert!(view.cut_off(3, 0, ms(800), silent), "released: at once");
    }
}
