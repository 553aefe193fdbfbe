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
//! ([`Store::heal`]), and running the command again (or the opposite one) finishes it.
//! Worker IDs move last, under the same epoch (a lease write checks in its transaction
//! that the epoch is still `moving`): blocked where they leave (the holder's renewals
//! then fail), freed where they arrive with the last holder's bound, so the next holder
//! issues above every timestamp the last one could issue. Then the layout is `done`.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures_util::future::join_all;

use super::Store;
use super::lease::WORKER_IDS;
use crate::layout::{self, Layout, LayoutChange, LayoutState, Plan, Standing};
use crate::segment::Residue;
use crate::store::catalog::{Snapshot, merge_tokens};
use crate::store::evidence::{self, Evidence, Mark};
use crate::store::{BizRow, DbError, LayoutRow, LeaseSet, Reclass, ShapeRow, StoreError};

/// The holder name of a worker ID blocked on a database it moved away from.
pub const MOVED_HOLDER: &str = "segmint-layout";

/// Lost races per biz before the change gives up (servers reserving between the read
/// and the freeze; a handful at most).
const MOVE_ATTEMPTS: usize = 50;

/// What the witnesses recorded, by biz: `(highest max_id, version)` per witness.
type Witnessed = HashMap<String, Vec<(i64, i64)>>;

/// The layout part of the [`Store`]: the layouts read and each database's class.
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
    /// Every configured database answered one read, with no layout stored in any: the
    /// configured classes are confirmed for worker IDs ([`layout::leases_allowed`]).
    confirmed: bool,
}

impl LayoutView {
    pub(crate) fn configured(classes: Vec<Residue>) -> LayoutView {
        LayoutView {
            layouts: Vec::new(),
            classes: classes.iter().copied().map(Some).collect(),
            standing: vec![Standing::Current; classes.len()],
            configured: classes,
            watched: None,
            confirmed: false,
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

impl Store {
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
        let mut view = self.layout.view.lock();
        let named: Vec<(String, Vec<LayoutRow>)> = per_db
            .iter()
            .map(|(i, rows)| (self.dbs.names[*i].clone(), rows.clone()))
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
                tracing::warn!(database = %self.dbs.names[*i], standing = standing.as_str(), detail = ?standing, "database layout standing changed");
            }
            view.standing[*i] = standing;
        }
        // A database that was not read keeps its standing, unless a newer epoch is
        // known now than it was seen to hold.
        let newest = reading.layouts.last().map(|l| l.epoch);
        let current = layout::current(&reading.layouts).0;
        let classes: Vec<Option<Residue>> = (0..self.dbs.names.len())
            .map(|i| {
                if view.standing[i] != Standing::Current {
                    return None;
                }
                match current {
                    Some(l) => l.class_of(&self.dbs.names[i]),
                    None => Some(view.configured[i]),
                }
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
        view.confirmed |= per_db.len() == self.dbs.names.len() && reading.layouts.is_empty();
        view.layouts = reading.layouts;
    }

    /// Whether worker IDs may be leased now ([`layout::leases_allowed`]).
    pub fn leases_allowed(&self) -> bool {
        let view = self.layout.view.lock();
        layout::leases_allowed(&view.layouts, view.confirmed)
    }

    /// The class plain bizs get on database `i` in the layout in force; `None` when the
    /// layout does not name it, or its standing is not current: it is then never used.
    pub fn class_of(&self, i: usize) -> Option<Residue> {
        self.layout.view.lock().classes[i]
    }

    /// The standing of database `i` among the layouts last read.
    pub fn standing_of(&self, i: usize) -> Standing {
        self.layout.view.lock().standing[i].clone()
    }

    /// Every `(epoch, database, class)` of the layouts read.
    pub(super) fn layout_classes(&self) -> Vec<(i64, String, Residue)> {
        let view = self.layout.view.lock();
        view.layouts
            .iter()
            .flat_map(|l| l.members.iter().map(|m| (l.epoch, m.name.clone(), m.class)))
            .collect()
    }

    /// The layout in force (`None` before any change) and the change under way above
    /// it, as last read.
    pub fn layouts(&self) -> (Option<Layout>, Option<Layout>) {
        let view = self.layout.view.lock();
        let (done, pending) = layout::current(&view.layouts);
        (done.cloned(), pending.cloned())
    }

    /// The epoch in force (0 before any change) and the change under way, if any.
    pub fn layout_epochs(&self) -> (i64, Option<i64>) {
        let view = self.layout.view.lock();
        let (done, pending) = layout::current(&view.layouts);
        (done.map_or(0, |l| l.epoch), pending.map(|l| l.epoch))
    }

    /// The layout of the configured classes: the layout before any change.
    pub fn configured_layout(&self) -> Layout {
        let view = self.layout.view.lock();
        Layout {
            epoch: 0,
            members: self
                .dbs
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
    pub(super) async fn layout_for_writes(&self) -> Result<i64, StoreError> {
        self.load_layout().await;
        match self.layout_epochs() {
            (_, Some(pending)) => Err(StoreError::Refused(format!(
                "a change to layout epoch {pending} is under way (or was cut off): finish it first by running it again; nothing changed"
            ))),
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
                    name: self.dbs.names[i].clone(),
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

    /// Moves the cluster to the layout `change` asks for (see [`layout::target`]),
    /// worked out from the layouts it reads itself. `before` is the layout before any change
    /// (the configured classes), used when no layout was ever stored. Reports progress
    /// through `say` as it goes, so that a command killed midway has said how far it
    /// got.
    ///
    /// Every database that may hold live rows or leases must be configured and answer
    /// ([`layout::required`]). A change under way with the same databases is finished;
    /// one with other databases is superseded (every biz is moved to `target` from
    /// wherever it got); either only once its row has been silent for
    /// [`Protocol::silent`](crate::config::Protocol::silent).
    ///
    /// # Errors
    /// [`StoreError::Refused`] when a database is missing or does not answer, another
    /// command claimed the epoch first or is still running, or a biz cannot be moved:
    /// what was done so far is safe to serve from, and running the command again
    /// finishes it.
    pub async fn change_layout(
        &self,
        change: &LayoutChange,
        before: &Layout,
        say: &mut (dyn FnMut(String) + Send),
    ) -> Result<Layout, StoreError> {
        let refused = StoreError::Refused;
        let all: Vec<usize> = (0..self.dbs.list.len()).collect();
        let reads = self.on_parts(&all, |db| db.layouts()).await;
        let witnesses = self.on_parts(&all, |db| db.witnesses()).await;
        let rows: Vec<LayoutRow> = reads
            .iter()
            .filter_map(|r| r.as_ref().ok())
            .flatten()
            .cloned()
            .collect();
        let layouts = layout::merge(&rows).map_err(|e| {
            refused(format!(
                "{e}: run `segmint db list` and mend the layout rows by hand; nothing changed"
            ))
        })?;
        let (target, lost) =
            layout::target(change, &layouts, before, &self.dbs.names).map_err(refused)?;
        let (target, lost) = (&target[..], &lost[..]);
        for name in target {
            if !self.dbs.names.contains(name) {
                return Err(refused(format!(
                    "database \"{name}\" is not configured; nothing changed"
                )));
            }
        }
        let mut witnessed: Vec<String> = witnesses
            .iter()
            .filter_map(|r| r.as_ref().ok())
            .flatten()
            .map(|w| w.database.clone())
            .collect();
        witnessed.sort();
        witnessed.dedup();
        let mut need = layout::required(&layouts, before, &witnessed, lost);
        for name in target {
            if !need.contains(name) {
                need.push(name.clone());
            }
        }
        let missing: Vec<&String> = need
            .iter()
            .filter(|n| !self.dbs.names.contains(n))
            .collect();
        if !missing.is_empty() {
            let names = missing
                .iter()
                .map(|n| format!("\"{n}\""))
                .collect::<Vec<_>>()
                .join(", ");
            return Err(refused(format!(
                "database {names} may hold live rows or worker IDs (the stored layouts or witnesses name it) but is not configured: a change needs every such database configured and answering, or a database left behind would keep issuing from its old class; configure it, or if it is gone for good, declare it lost with `segmint db remove NAME --lost`; nothing changed"
            )));
        }
        let parts: Vec<usize> = need
            .iter()
            .filter_map(|n| self.dbs.names.iter().position(|x| x == n))
            .collect();
        for &i in &parts {
            if let Err(e) = &reads[i] {
                return Err(refused(format!(
                    "database \"{}\" did not answer ({e}): a change needs every database of the layout; run it again once it answers, or if it is gone for good, declare it lost with `segmint db remove {} --lost`; nothing changed",
                    self.dbs.names[i], self.dbs.names[i]
                )));
            }
        }
        for name in lost {
            if let Some(i) = self.dbs.names.iter().position(|n| n == name)
                && reads[i].is_ok()
            {
                return Err(refused(format!(
                    "database \"{name}\" answers: remove it with `segmint db remove {name}` (its rows are then frozen), not as lost; nothing changed"
                )));
            }
        }
        let (from, to, supersede, finishing) =
            match layout::plan(&layouts, before, target, lost).map_err(refused)? {
                Plan::Already(l) => {
                    say(format!(
                        "layout epoch {} already has these databases: {}",
                        l.epoch,
                        l.describe()
                    ));
                    return Ok(l);
                }
                Plan::Change {
                    from,
                    to,
                    supersede,
                    finishing,
                } => (from, to, supersede, finishing),
            };
        let names: Vec<String> = parts.iter().map(|&i| self.dbs.names[i].clone()).collect();
        if let Some(running) = supersede.as_ref().or(finishing.then_some(&to)) {
            self.wait_silent(&parts, running, say).await?;
            // What was decided holds only if nothing moved on meanwhile.
            let rows: Vec<LayoutRow> = self
                .all_parts(&parts, |db| db.layouts(), "nothing changed")
                .await?
                .into_iter()
                .flatten()
                .collect();
            let key = |l: &[Layout]| {
                let (done, pending) = layout::current(l);
                (
                    l.last().map(|l| l.epoch),
                    done.map(|l| l.epoch),
                    pending.map(|l| l.epoch),
                )
            };
            if layout::merge(&rows).map(|l| key(&l)) != Ok(key(&layouts)) {
                return Err(refused(
                    "the layouts changed while this command waited (another command ran): run it again; nothing changed".into(),
                ));
            }
        }
        let now = self.unix_ms();
        if layouts.is_empty() {
            // The configured classes become epoch 0, as a claim: a command that raced
            // this one wrote the same or its claim below fails.
            let row = from.row(now);
            for &i in &parts {
                self.step(i, self.dbs.list[i].store.claim_layout(&row))
                    .await
                    .map_err(|e| self.stopped(i, &e, "nothing changed"))?;
            }
        }
        if finishing {
            say(format!(
                "finishing the change to layout epoch {} cut off before",
                to.epoch
            ));
            let row = to.row(now);
            for &i in &parts {
                self.step(i, self.dbs.list[i].store.put_layout(&row))
                    .await
                    .map_err(|e| self.stopped(i, &e, "stopped"))?;
            }
        } else {
            let prev = layouts.last().unwrap_or(&from);
            let row = to.row(now);
            for (k, name) in layout::claim_order(prev, &names).iter().enumerate() {
                let Some(i) = self.dbs.names.iter().position(|n| n == name) else {
                    continue;
                };
                let claimed = self
                    .step(i, self.dbs.list[i].store.claim_layout(&row))
                    .await
                    .map_err(|e| self.stopped(i, &e, "stopped"))?;
                if !claimed {
                    return Err(refused(if k == 0 {
                        format!(
                            "another `segmint db` command claimed layout epoch {} first (on database \"{name}\"): two changes never run at once; see `segmint db list`, and run this again once it is done; nothing changed",
                            to.epoch
                        )
                    } else {
                        format!(
                            "layout epoch {} was claimed here but database \"{name}\" holds another row for it: see `segmint db list`",
                            to.epoch
                        )
                    }));
                }
            }
            if let Some(p) = &supersede {
                say(format!(
                    "superseding the change to layout epoch {} ({}) cut off before",
                    p.epoch,
                    p.describe()
                ));
                let row = Layout {
                    state: LayoutState::Superseded,
                    ..p.clone()
                }
                .row(now);
                for &i in &parts {
                    self.step(i, self.dbs.list[i].store.put_layout(&row))
                        .await
                        .map_err(|e| self.stopped(i, &e, "stopped"))?;
                }
            }
        }
        say(format!(
            "layout epoch {} → {}: {}{}",
            from.epoch,
            to.epoch,
            to.describe(),
            if lost.is_empty() {
                String::new()
            } else {
                format!("; lost for good: {}", lost.join(", "))
            }
        ));
        self.load_layout().await;
        // The moves run while the row is rewritten every second: another command, and
        // the servers, then know the change is alive.
        let finishing_flag = AtomicBool::new(false);
        let change = self.apply_change(&parts, &from, to.clone(), &layouts, &finishing_flag, say);
        let beat = self.heartbeat(&parts, &to, &finishing_flag);
        let result = tokio::select! {
            biased;
            r = change => r,
            e = beat => Err(e),
        };
        if result.is_err() {
            // Stopped by an error, not killed: the next command, and the servers, need
            // not wait for this one to fall silent (changed_ms 0 says so). Best effort.
            let released = to.row(0);
            let released = &released;
            let _ = self
                .on_parts(&parts, move |db| db.put_layout(released))
                .await;
        }
        result
    }

    /// Rewrites the layout row of the change to `to` every
    /// [`Protocol::heartbeat`](crate::config::Protocol::heartbeat) until
    /// `finishing` is set. Returns only when the row is no longer `moving` on some
    /// database before that: a later change superseded this one.
    async fn heartbeat(&self, parts: &[usize], to: &Layout, finishing: &AtomicBool) -> StoreError {
        loop {
            tokio::time::sleep(self.protocol.heartbeat).await;
            if finishing.load(Ordering::SeqCst) {
                std::future::pending::<()>().await;
            }
            let row = to.row(self.unix_ms());
            let row = &row;
            for (k, written) in self
                .on_parts(parts, move |db| db.put_layout(row))
                .await
                .into_iter()
                .enumerate()
            {
                if matches!(written, Ok(false)) && !finishing.load(Ordering::SeqCst) {
                    return StoreError::Refused(format!(
                        "layout epoch {} is no longer moving on database \"{}\": a later change superseded this one; stopped",
                        to.epoch, self.dbs.names[parts[k]]
                    ));
                }
            }
        }
    }

    /// Waits until the change to `running` has been silent for
    /// [`Protocol::silent`](crate::config::Protocol::silent): its row's
    /// `changed_ms` unchanged on every database of `parts` (or released, 0), as watched
    /// by this process's monotonic clock.
    ///
    /// # Errors
    /// [`StoreError::Refused`] when the row changes meanwhile: its command runs.
    async fn wait_silent(
        &self,
        parts: &[usize],
        running: &Layout,
        say: &mut (dyn FnMut(String) + Send),
    ) -> Result<(), StoreError> {
        let beat = |rows: Vec<Result<Vec<LayoutRow>, DbError>>| {
            rows.into_iter()
                .filter_map(Result::ok)
                .flatten()
                .filter(|r| r.epoch == running.epoch)
                .map(|r| r.changed_ms)
                .max()
                .unwrap_or(0)
        };
        let first = beat(self.on_parts(parts, |db| db.layouts()).await);
        if first == 0 {
            return Ok(());
        }
        let silent = self.protocol.silent;
        say(format!(
            "a change to layout epoch {} ({}) is under way or was cut off: waiting {} s to see whether its command still runs",
            running.epoch,
            running.describe(),
            silent.as_secs_f64()
        ));
        let until = self.clock.now() + silent;
        while self.clock.now() < until {
            tokio::time::sleep(self.protocol.silence_poll()).await;
            let seen = beat(self.on_parts(parts, |db| db.layouts()).await);
            if seen != first {
                return Err(StoreError::Refused(format!(
                    "another `segmint db` command is running the change to layout epoch {} ({}): its row changed within {} s; run this again once it is done; nothing changed",
                    running.epoch,
                    running.describe(),
                    silent.as_secs_f64()
                )));
            }
        }
        Ok(())
    }

    /// The moves of a change from `from` to `to`, whose layout row is claimed, over the
    /// databases `parts`; `layouts` as read before.
    async fn apply_change(
        &self,
        parts: &[usize],
        from: &Layout,
        to: Layout,
        layouts: &[Layout],
        finishing: &AtomicBool,
        say: &mut (dyn FnMut(String) + Send),
    ) -> Result<Layout, StoreError> {
        let members: Vec<usize> = to
            .members
            .iter()
            .filter_map(|m| self.dbs.names.iter().position(|n| *n == m.name))
            .collect();
        self.copy_catalog(parts, &members, say).await?;
        // Every epoch a row can be in: those read, the one moved from and the target.
        let mut layouts = layouts.to_vec();
        for l in [from, &to] {
            if !layouts.iter().any(|k| k.epoch == l.epoch) {
                layouts.push(l.clone());
            }
        }
        let bizs: BTreeSet<String> = self
            .all_parts(parts, |db| db.bizs(), "stopped")
            .await?
            .into_iter()
            .flatten()
            .map(|r| r.biz_type)
            .collect();
        let witnessed = witnessed(
            self.all_parts(parts, |db| db.witnesses(), "stopped")
                .await?
                .into_iter()
                .flatten(),
        );
        let (mut moved, total) = (0, bizs.len());
        for biz in &bizs {
            match self.move_biz(biz, &to, &layouts, &witnessed, parts).await? {
                Moved::Already => {}
                Moved::Moved { fence, rows } => {
                    moved += 1;
                    say(format!(
                        "biz `{biz}`: {rows} rows moved above {fence} (epoch {})",
                        to.epoch
                    ));
                }
            }
        }
        say(format!(
            "{moved} of {total} bizs moved, {} already in epoch {}",
            total - moved,
            to.epoch
        ));
        let leases = self.move_worker_ids(&to, parts).await?;
        say(format!("worker IDs: {leases}"));
        let done = Layout {
            state: LayoutState::Done,
            ..to
        };
        finishing.store(true, Ordering::SeqCst);
        let row = done.row(self.unix_ms());
        for &i in parts {
            self.step(i, self.dbs.list[i].store.put_layout(&row))
                .await
                .map_err(|e| self.stopped(i, &e, "stopped"))?;
        }
        self.load_layout().await;
        let changed: Vec<&str> = parts.iter().map(|&i| self.dbs.names[i].as_str()).collect();
        super::admin::audit(&format!("layout epoch {}", done.epoch), "", "", &changed);
        say(format!(
            "layout epoch {} is done: {}",
            done.epoch,
            done.describe()
        ));
        Ok(done)
    }

    /// Runs `op` on each database of `parts` at once, each within
    /// [`Protocol::step_timeout`](crate::config::Protocol::step_timeout).
    async fn on_parts<'a, T, F>(
        &'a self,
        parts: &[usize],
        op: impl Fn(&'a dyn crate::store::SegmentStore) -> F,
    ) -> Vec<Result<T, DbError>>
    where
        F: Future<Output = Result<T, DbError>> + 'a,
    {
        join_all(
            parts
                .iter()
                .map(|&i| self.step(i, op(self.dbs.list[i].store.as_ref()))),
        )
        .await
    }

    /// [`Store::on_parts`], every database answering: the error names the first that
    /// did not, followed by `then` (what that means for the change).
    async fn all_parts<'a, T, F>(
        &'a self,
        parts: &[usize],
        op: impl Fn(&'a dyn crate::store::SegmentStore) -> F,
        then: &str,
    ) -> Result<Vec<T>, StoreError>
    where
        F: Future<Output = Result<T, DbError>> + 'a,
    {
        self.on_parts(parts, op)
            .await
            .into_iter()
            .zip(parts)
            .map(|(r, &i)| r.map_err(|e| self.stopped(i, &e, then)))
            .collect()
    }

    /// One step of a change on database `i`, within
    /// [`Protocol::step_timeout`](crate::config::Protocol::step_timeout) (or the fetch
    /// timeout, when longer).
    async fn step<T>(
        &self,
        i: usize,
        op: impl Future<Output = Result<T, DbError>>,
    ) -> Result<T, DbError> {
        self.call_within(
            i,
            self.protocol
                .step_timeout
                .max(self.dbs.timing.fetch_timeout),
            op,
        )
        .await
    }

    /// The refusal of a change stopped by database `i`'s error.
    fn stopped(&self, i: usize, e: &DbError, then: &str) -> StoreError {
        StoreError::Refused(format!(
            "database \"{}\" failed ({e}); {then}; what was done is safe to serve from: run the command again once it answers",
            self.dbs.names[i]
        ))
    }

    /// Copies shape and token rows to the members that lack them: a biz's shape before
    /// any of its rows, and tokens so that the new database alone can answer.
    async fn copy_catalog(
        &self,
        parts: &[usize],
        members: &[usize],
        say: &mut (dyn FnMut(String) + Send),
    ) -> Result<(), StoreError> {
        let shapes = self.all_parts(parts, |db| db.shapes(), "stopped").await?;
        let tokens = self.all_parts(parts, |db| db.tokens(), "stopped").await?;
        let mut all_shapes: HashMap<&str, &ShapeRow> = HashMap::new();
        for s in shapes.iter().flatten() {
            all_shapes.entry(s.biz_type.as_str()).or_insert(s);
        }
        let merged = merge_tokens(
            tokens
                .iter()
                .enumerate()
                .flat_map(|(k, rows)| rows.iter().map(move |t| (parts[k], t))),
        );
        for &i in members {
            let Some(k) = parts.iter().position(|&p| p == i) else {
                continue;
            };
            let store = &self.dbs.list[i].store;
            let fail = |e: DbError| self.stopped(i, &e, "stopped");
            let mut copied = (0, 0);
            for (biz, shape) in &all_shapes {
                if !shapes[k].iter().any(|s| s.biz_type == *biz) {
                    self.step(i, store.put_shape(shape)).await.map_err(fail)?;
                    copied.0 += 1;
                }
            }
            for t in &merged {
                for biz in &t.bizs {
                    let held = tokens[k]
                        .iter()
                        .any(|r| r.token_hash.eq_ignore_ascii_case(&t.hash) && r.biz_type == *biz);
                    if !held {
                        self.step(i, store.insert_token(&t.hash, biz, &t.remark, t.expires))
                            .await
                            .map_err(fail)?;
                        copied.1 += 1;
                    }
                }
                if let Some(at) = t.revoked {
                    self.step(i, store.revoke_tokens(&t.hash, at))
                        .await
                        .map_err(fail)?;
                }
            }
            if copied != (0, 0) {
                say(format!(
                    "\"{}\": copied {} shape rows and {} token grants",
                    self.dbs.names[i], copied.0, copied.1
                ));
            }
        }
        Ok(())
    }

    /// Moves `biz` to layout `to` over the databases `parts`: freeze every row (a
    /// placeholder where one is missing), fence, switch (see the module's
    /// documentation). Lost races re-read the rows and start over.
    async fn move_biz(
        &self,
        biz: &str,
        to: &Layout,
        layouts: &[Layout],
        witnessed: &Witnessed,
        parts: &[usize],
    ) -> Result<Moved, StoreError> {
        let fail = |why: String| {
            StoreError::Refused(format!(
                "biz `{biz}`: {why}; stopped; what was done is safe to serve from: run the command again"
            ))
        };
        let witnessed = witnessed.get(biz).map_or(&[][..], Vec::as_slice);
        // What this change saw of each row, to tell a row that went back in time (a
        // restore from a backup) while the change ran.
        let mut seen = Evidence::default();
        for _ in 0..MOVE_ATTEMPTS {
            let rows = self.all_parts(parts, |db| db.biz(biz), "stopped").await?;
            for (k, row) in rows.iter().enumerate() {
                let i = parts[k];
                let back = match row {
                    Some(r) => seen.check(i, r).err().map(|g| g.to_string()),
                    None => seen
                        .mark(i, biz)
                        .map(|m| format!("its row of biz `{biz}` (version {}) is gone", m.version)),
                };
                if let Some(why) = back {
                    return Err(self.went_back(biz, i, &why));
                }
                if let Some(r) = row {
                    seen.learn(i, biz, Mark::of(r));
                }
            }
            if let Some(r) = rows.iter().flatten().find(|r| r.claimed_by > to.epoch) {
                return Err(fail(format!(
                    "a later change (layout epoch {}) moved it: this change to epoch {} was superseded",
                    r.claimed_by, to.epoch
                )));
            }
            let within = self.restriction_of(parts, &rows, layouts).map_err(fail)?;
            let wanted: Vec<Option<Residue>> = parts
                .iter()
                .map(|&i| {
                    to.class_of(&self.dbs.names[i])
                        .map(|c| c.restrict(within).map_err(|e| e.to_string()))
                        .transpose()
                })
                .collect::<Result<_, String>>()
                .map_err(fail)?;
            let refs: Vec<Option<&BizRow>> = rows.iter().map(Option::as_ref).collect();
            if layout::settled(&refs, &wanted, to.epoch) {
                return Ok(Moved::Already);
            }
            let (fence, newest) = layout::fence(
                rows.iter()
                    .flatten()
                    .map(|r| (r.max_id, r.version))
                    .chain(witnessed.iter().copied()),
            );
            // A database of the change without a row gets a frozen placeholder first:
            // a change superseded meanwhile can then no longer insert a live row there.
            if rows.iter().any(Option::is_none) {
                let template = rows
                    .iter()
                    .flatten()
                    .next()
                    .cloned()
                    .ok_or_else(|| fail("no database holds a row".into()))?;
                for (k, &i) in parts.iter().enumerate() {
                    if rows[k].is_some() {
                        continue;
                    }
                    let class = wanted[k].unwrap_or(
                        Residue::new(template.delta, template.remainder)
                            .map_err(|e| fail(e.to_string()))?,
                    );
                    let placeholder = BizRow {
                        begin_id: fence,
                        max_id: fence,
                        delta: class.delta(),
                        remainder: class.remainder(),
                        version: newest + 1,
                        epoch: to.epoch,
                        frozen: true,
                        claimed_by: to.epoch,
                        ..template.clone()
                    };
                    self.step(i, self.dbs.list[i].store.insert_biz(&placeholder))
                        .await
                        .map_err(|e| {
                            fail(format!(
                                "database \"{}\" failed while inserting a frozen row ({e})",
                                self.dbs.names[i]
                            ))
                        })?;
                }
                continue;
            }
            let rows: Vec<BizRow> = rows.into_iter().flatten().collect();
            // 1. Freeze.
            let mut frozen: Vec<Option<BizRow>> = Vec::with_capacity(rows.len());
            let mut lost = false;
            for (k, r) in rows.iter().enumerate() {
                let i = parts[k];
                // A frozen row is written too (its version bumped, stamped with this
                // epoch): a change that froze it before can then no longer switch it.
                let to_frozen = Reclass::freezing(r, true, to.epoch);
                match self
                    .step(
                        i,
                        self.dbs.list[i]
                            .store
                            .reclass(biz, r.version, r.max_id, &to_frozen),
                    )
                    .await
                {
                    Ok(Some(done)) => {
                        seen.learn(i, biz, Mark::of(&done));
                        frozen.push(Some(done));
                    }
                    Ok(None) => {
                        lost = true;
                        break;
                    }
                    Err(e) => {
                        self.thaw(biz, parts, &rows, &frozen).await;
                        return Err(fail(format!(
                            "database \"{}\" failed while freezing ({e}); the rows frozen so far were thawed",
                            self.dbs.names[i]
                        )));
                    }
                }
            }
            if lost {
                // A reservation got in between: give its rows back and read again.
                self.thaw(biz, parts, &rows, &frozen).await;
                continue;
            }
            // 2. Fence: every row is frozen; nothing issued under the old layout lies
            // above the highest max_id (a give-back lowers it only to the first ID not
            // issued), nor above what any witness saw. Each database of the change
            // first records the frozen rows of the others as witnesses (a row restored
            // from a backup taken before its freeze is then fenced by every server that
            // reads them), then gives its witnesses of the biz, read now that no row can
            // move: a row restored since the change's first read is found behind the
            // witnesses of the reservations it lost (written before their IDs were
            // used), and the fence lies above them.
            let fresh = match self.witness_freeze(biz, parts, &frozen).await {
                Ok(w) => w,
                Err(e) => {
                    self.thaw(biz, parts, &rows, &frozen).await;
                    return Err(fail(e));
                }
            };
            let mut evidence = Evidence::default();
            for w in &fresh {
                if let Some(i) = self.dbs.names.iter().position(|n| *n == w.database) {
                    evidence.learn(i, biz, w.mark);
                }
            }
            // The rows as frozen (by this pass, or before): a witness ahead of one is a
            // reservation the row lost.
            let now: Vec<&BizRow> = rows
                .iter()
                .zip(&frozen)
                .map(|(r, f)| f.as_ref().unwrap_or(r))
                .collect();
            if let Some((k, g)) = now
                .iter()
                .enumerate()
                .find_map(|(k, r)| evidence.check(parts[k], r).err().map(|g| (k, g)))
            {
                // The rows of the others are given back; the one behind stays frozen
                // (thawed, its version bump would pass it off as caught up).
                let mut thawed = frozen.clone();
                thawed[k] = None;
                self.thaw(biz, parts, &rows, &thawed).await;
                return Err(self.went_back(biz, parts[k], &g.to_string()));
            }
            // Every row must still be as frozen, now that the witnesses of the freeze
            // are written: a row restored from a backup between its freeze and them
            // would otherwise serve again beside the new layout, unknown to servers.
            let again = match self.all_parts(parts, |db| db.biz(biz), "stopped").await {
                Ok(r) => r,
                Err(e) => {
                    self.thaw(biz, parts, &rows, &frozen).await;
                    return Err(e);
                }
            };
            let mut moved = false;
            for (k, (was, is)) in now.iter().zip(&again).enumerate() {
                let back = match is {
                    None => Some(format!("its row of biz `{biz}` is gone")),
                    Some(is) => evidence::behind(Some(Mark::of(was)), is)
                        .err()
                        .map(|g| g.to_string()),
                };
                if let Some(why) = back {
                    let mut thawed = frozen.clone();
                    thawed[k] = None;
                    self.thaw(biz, parts, &rows, &thawed).await;
                    return Err(self.went_back(biz, parts[k], &why));
                }
                moved |= is.as_ref().is_some_and(|is| is.version != was.version);
            }
            if moved {
                // Another change wrote a frozen row since: read again (a later one
                // stops this change).
                self.thaw(biz, parts, &rows, &frozen).await;
                continue;
            }
            let (fence, _) = layout::fence(
                frozen
                    .iter()
                    .flatten()
                    .map(|r| (r.max_id, r.version))
                    .chain(witnessed.iter().copied())
                    .chain(
                        fresh
                            .iter()
                            .map(|w| (w.mark.high_id.max(w.mark.max_id), w.mark.version)),
                    ),
            );
            // 3. Switch.
            let mut switched = 0;
            for (k, row) in frozen.iter().flatten().enumerate() {
                let i = parts[k];
                let Some(class) = wanted[k] else {
                    // Rows of databases out of the layout stay frozen as they are.
                    continue;
                };
                let to_row = Reclass {
                    version: row.version + 1,
                    max_id: fence,
                    delta: class.delta(),
                    remainder: class.remainder(),
                    epoch: to.epoch,
                    frozen: false,
                    claimed_by: to.epoch,
                };
                match self
                    .step(
                        i,
                        self.dbs.list[i]
                            .store
                            .reclass(biz, row.version, row.max_id, &to_row),
                    )
                    .await
                {
                    Ok(Some(_)) => switched += 1,
                    // Only another layout change writes frozen rows: start over.
                    Ok(None) => {
                        lost = true;
                        break;
                    }
                    Err(e) => {
                        return Err(fail(format!(
                            "database \"{}\" failed while switching ({e}); the rows not switched stay frozen",
                            self.dbs.names[i]
                        )));
                    }
                }
            }
            if lost {
                continue;
            }
            return Ok(Moved::Moved {
                fence,
                rows: switched,
            });
        }
        Err(fail(format!(
            "lost {MOVE_ATTEMPTS} races in a row against other writers"
        )))
    }

    /// Writes, on each database of `parts`, the frozen rows of the others as witnesses,
    /// and reads its witnesses of `biz`.
    async fn witness_freeze(
        &self,
        biz: &str,
        parts: &[usize],
        frozen: &[Option<BizRow>],
    ) -> Result<Vec<crate::store::Witness>, String> {
        let mut read = Vec::new();
        for &i in parts {
            let marks: Vec<crate::store::Witness> = parts
                .iter()
                .zip(frozen)
                .filter(|(j, _)| **j != i)
                .filter_map(|(&j, row)| {
                    row.as_ref().map(|r| crate::store::Witness {
                        database: self.dbs.names[j].clone(),
                        biz: biz.to_owned(),
                        mark: Mark::of(r),
                    })
                })
                .collect();
            let store = &self.dbs.list[i].store;
            let failed = |e: DbError| {
                format!(
                    "database \"{}\" failed while recording the frozen rows ({e}); the rows frozen so far were thawed",
                    self.dbs.names[i]
                )
            };
            self.step(i, store.witness(&marks)).await.map_err(failed)?;
            read.extend(
                self.step(i, store.witnesses_of(biz))
                    .await
                    .map_err(failed)?,
            );
        }
        Ok(read)
    }

    /// The error of a move that found database `i`'s row of `biz` gone back in time
    /// (`why`): servers fence that database too; nothing is switched.
    fn went_back(&self, biz: &str, i: usize, why: &str) -> StoreError {
        StoreError::Refused(format!(
            "biz `{biz}`: database \"{name}\" went back in time while the change ran ({why}); servers fence it: raise its rows above every issued ID with `segmint db fence {name}`, then run the command again; stopped, what was done is safe to serve from",
            name = self.dbs.names[i]
        ))
    }

    /// Unfreezes the rows this pass froze (`frozen[k]` where `rows[k]` was not): it
    /// gives back the state before the pass, which was safe to serve from.
    async fn thaw(&self, biz: &str, parts: &[usize], rows: &[BizRow], frozen: &[Option<BizRow>]) {
        for (k, (before, now)) in rows.iter().zip(frozen).enumerate() {
            let Some(now) = now else { continue };
            if before.frozen || !now.frozen {
                continue;
            }
            let i = parts[k];
            let back = Reclass::freezing(now, false, now.claimed_by);
            if let Err(e) = self
                .step(
                    i,
                    self.dbs.list[i]
                        .store
                        .reclass(biz, now.version, now.max_id, &back),
                )
                .await
            {
                tracing::warn!(biz, database = %self.dbs.names[i], error = %e, "could not thaw a row: it stays frozen until the change is run again");
            }
        }
    }

    /// The biz's own restriction (odd-only: `1 mod 2`), from its rows' classes and their
    /// databases' classes at the rows' epochs. Every row must agree.
    fn restriction_of(
        &self,
        parts: &[usize],
        rows: &[Option<BizRow>],
        layouts: &[Layout],
    ) -> Result<Residue, String> {
        let mut found: Option<(Residue, String)> = None;
        for (k, row) in rows.iter().enumerate() {
            let Some(r) = row else { continue };
            let class = Residue::new(r.delta, r.remainder).map_err(|e| e.to_string())?;
            let name = &self.dbs.names[parts[k]];
            // Every epoch a row can be in is stored (epoch 0, the configured classes,
            // by the first change) and passed here.
            let within = layouts
                .iter()
                .find(|l| l.epoch == r.epoch)
                .and_then(|l| l.class_of(name))
                .ok_or_else(|| format!("its row on \"{name}\" is in layout epoch {}, which does not name \"{name}\"", r.epoch))
                .and_then(|db| {
                    layout::restriction(class, db).ok_or_else(|| format!("its row on \"{name}\" has class {class}, which is not within the database's class {db} of epoch {}: fix it by hand", r.epoch))
                });
            // A frozen row gives out nothing: one the layouts cannot explain (a
            // placeholder, a row of a removed database) is left out.
            let within = match within {
                Ok(w) => w,
                Err(_) if r.frozen => continue,
                Err(e) => return Err(e),
            };
            match &found {
                Some((w, other)) if *w != within => {
                    return Err(format!(
                        "its rows disagree on its restriction: {w} on \"{other}\", {within} on \"{name}\""
                    ));
                }
                _ => found = Some((within, name.clone())),
            }
        }
        found
            .map(|f| f.0)
            .ok_or_else(|| "no database holds a row".into())
    }

    /// Moves every worker ID to its owner in `to`: blocked on every other database of
    /// `parts` (a holder there fails its next renewal), then freed on its owner with
    /// the highest bound recorded anywhere, above which the next holder issues. A
    /// worker ID no member owns (a lost database's) is blocked everywhere. Every write
    /// is fenced by the epoch: a change superseded meanwhile writes nothing. Returns a
    /// summary.
    async fn move_worker_ids(&self, to: &Layout, parts: &[usize]) -> Result<String, StoreError> {
        let leases = self.all_parts(parts, |db| db.leases(), "stopped").await?;
        let superseded = || {
            StoreError::Refused(format!(
                "layout epoch {} is no longer moving: a later change superseded this one; stopped",
                to.epoch
            ))
        };
        let owner: Vec<Option<usize>> = (0..WORKER_IDS)
            .map(|w| {
                to.owner_of(w)
                    .and_then(|n| self.dbs.names.iter().position(|x| x == n))
            })
            .collect();
        let mut floor: Vec<(i64, i64)> = vec![(0, 0); usize::from(WORKER_IDS)];
        let mut blocked = 0;
        for (k, rows) in leases.iter().enumerate() {
            let i = parts[k];
            let row_of = |w: u16| rows.iter().find(|r| r.worker_id == w);
            let mut block = Vec::new();
            for w in 0..WORKER_IDS {
                if owner[usize::from(w)] == Some(i) {
                    continue;
                }
                match row_of(w) {
                    Some(r) if r.holder == MOVED_HOLDER => {
                        let f = &mut floor[usize::from(w)];
                        *f = (f.0.max(r.last_ms), f.1.max(r.bound_ms));
                    }
                    _ => block.push(LeaseSet {
                        worker_id: w,
                        holder: MOVED_HOLDER.into(),
                        expires_ms: i64::MAX / 4,
                        last_ms: 0,
                        bound_ms: 0,
                    }),
                }
            }
            if block.is_empty() {
                continue;
            }
            blocked += block.len();
            // The rows as blocked: with the last holder's bounds, final now that its
            // renewals fail.
            let written = self
                .step(i, self.dbs.list[i].store.set_leases(to.epoch, &block))
                .await
                .map_err(|e| self.stopped(i, &e, "stopped"))?
                .ok_or_else(superseded)?;
            for row in written {
                let f = &mut floor[usize::from(row.worker_id)];
                *f = (f.0.max(row.last_ms), f.1.max(row.bound_ms));
            }
        }
        let mut freed = 0;
        for (k, rows) in leases.iter().enumerate() {
            let i = parts[k];
            let mut free = Vec::new();
            for w in (0..WORKER_IDS).filter(|&w| owner[usize::from(w)] == Some(i)) {
                let (last, bound) = floor[usize::from(w)];
                // Expired at the epoch (free now), with the floor of every earlier
                // holder; a row of a holder here keeps its holder and expiry, its floor
                // raised.
                let set = match rows.iter().find(|r| r.worker_id == w) {
                    Some(r) if r.holder == MOVED_HOLDER => Some((String::new(), 0)),
                    Some(r) if r.last_ms < last || r.bound_ms < bound => {
                        Some((r.holder.clone(), r.expires_ms))
                    }
                    Some(_) => None,
                    None => (last > 0 || bound > 0).then_some((String::new(), 0)),
                };
                if let Some((holder, expires_ms)) = set {
                    free.push(LeaseSet {
                        worker_id: w,
                        holder,
                        expires_ms,
                        last_ms: last,
                        bound_ms: bound,
                    });
                }
            }
            if !free.is_empty() {
                freed += free.len();
                self.step(i, self.dbs.list[i].store.set_leases(to.epoch, &free))
                    .await
                    .map_err(|e| self.stopped(i, &e, "stopped"))?
                    .ok_or_else(superseded)?;
            }
        }
        Ok(format!(
            "{blocked} blocked where they left, {freed} freed where they arrived"
        ))
    }

    /// Writes the final layout rows (`done`, `superseded`) known here into each
    /// database just `read` that lacks them (or holds them as `moving`): a database
    /// that missed the end of a change, or one declared lost that came back, learns it,
    /// so that a server that later reaches only that database knows it too (and does
    /// not use a lost one). Rows of a change under way are left to its command. Best
    /// effort: a failed write is written again at a later refresh.
    pub(super) async fn share_layouts(&self, read: &[(usize, Snapshot)]) {
        let (layouts, standing) = {
            let view = self.layout.view.lock();
            (view.layouts.clone(), view.standing.clone())
        };
        for (i, snap) in read {
            if standing[*i] == Standing::Disagrees {
                continue;
            }
            for l in layouts.iter().filter(|l| l.state != LayoutState::Moving) {
                let held = snap.layouts.iter().find(|r| r.epoch == l.epoch);
                if held.is_some_and(|r| r.state != LayoutState::Moving.as_str()) {
                    continue;
                }
                let row = l.row(self.unix_ms());
                let store = &self.dbs.list[*i].store;
                let written = match held {
                    None => self.timed(store.claim_layout(&row)).await,
                    Some(_) => self.timed(store.put_layout(&row)).await,
                };
                match written {
                    Ok(true) => {
                        tracing::info!(database = %self.dbs.names[*i], epoch = l.epoch, state = l.state.as_str(), "wrote a layout row the database lacked")
                    }
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(database = %self.dbs.names[*i], error = %e, "could not write a layout row the database lacks")
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
    pub(super) async fn heal(&self, read: &[(usize, Snapshot)]) -> bool {
        let (pending, layouts) = {
            let mut view = self.layout.view.lock();
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
            .flat_map(|(_, s)| s.witnesses.iter().cloned())
            .collect();
        let mut names: Vec<String> = witnesses.iter().map(|w| w.database.clone()).collect();
        names.sort();
        names.dedup();
        let mut need = layout::required(&layouts, &before, &names, &[]);
        for m in pending.names() {
            if !need.contains(&m) {
                need.push(m);
            }
        }
        let parts: Option<Vec<usize>> = need
            .iter()
            .map(|n| {
                self.dbs
                    .names
                    .iter()
                    .position(|x| x == n)
                    .filter(|i| read.iter().any(|(k, _)| k == i))
            })
            .collect();
        let Some(parts) = parts else {
            tracing::warn!(epoch = pending.epoch, needs = ?need, "a change to the layout was cut off; this server cannot finish its bizs without every database it needs: run the command again");
            return false;
        };
        let mut bizs: BTreeSet<&str> = BTreeSet::new();
        for (i, snap) in read {
            // A member's row frozen by the change: rows of databases it removes stay
            // frozen for good.
            if pending.class_of(&self.dbs.names[*i]).is_none() {
                continue;
            }
            for r in &snap.bizs {
                if r.frozen && r.claimed_by == pending.epoch {
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
