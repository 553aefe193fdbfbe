//! Layout changes: adding and removing databases while servers serve.
//!
//! A change writes the next layout epoch to every database as `moving`, then moves
//! each biz on its own:
//! 1. **Freeze** every row of the biz with a compare-and-set on its version, as a
//!    reservation's. A frozen row gives out no segment, and a reservation that read the
//!    row before loses its race, so once every row is frozen no row can move again.
//! 2. **Fence**: the highest `max_id` of the frozen rows, and of every witness of them,
//!    lies at or above every ID issued or handed out under the old layout.
//! 3. **Switch** each row of the new layout's databases to its new class (the biz's own
//!    restriction kept) at the fence, unfrozen, with the same compare-and-set; a row is
//!    inserted on a database that lacks one. Rows of removed databases stay frozen.
//!
//! Every new ID is above the fence, and the new classes are disjoint: no ID repeats.
//! A change cut off midway leaves rows either unfrozen in one layout or frozen, which
//! is safe to serve from; running the command again (or the opposite one) finishes it.
//! Worker IDs move last: blocked where they leave (the holder's renewals then fail),
//! freed where they arrive with the last holder's bound, so the next holder issues
//! above every timestamp the last one could issue. Then the layout is `done`.

use std::collections::{BTreeSet, HashMap};

use super::Store;
use super::lease::WORKER_IDS;
use crate::layout::{self, Layout, LayoutState};
use crate::segment::Residue;
use crate::store::catalog::merge_tokens;
use crate::store::{BizRow, DbError, LayoutRow, LeaseSet, Reclass, ShapeRow, StoreError};

/// The holder name of a worker ID blocked on a database it moved away from.
pub const MOVED_HOLDER: &str = "segmint-layout";

/// Lost races per biz before the change gives up (servers reserving between the read
/// and the freeze; a handful at most).
const MOVE_ATTEMPTS: usize = 50;

/// What the witnesses recorded, by biz: `(highest max_id, version)` per witness.
type Witnessed = HashMap<String, Vec<(i64, i64)>>;

/// How often a running change rewrites its layout row, and how long one must have been
/// silent before another command takes it over: a second command started while the
/// first runs is refused instead of racing it.
const HEARTBEAT: std::time::Duration = std::time::Duration::from_secs(1);
const SILENT_MS: i64 = 3000;

/// The layouts as servers see them.
pub(crate) struct LayoutView {
    /// Every epoch read, merged over the databases.
    layouts: Vec<Layout>,
    /// Per configured database: its class in the layout in force; `None` when a layout
    /// is in force and does not name it (removed, or not added yet).
    classes: Vec<Option<Residue>>,
    /// The configured classes: the layout before any change.
    configured: Vec<Residue>,
}

impl LayoutView {
    pub(crate) fn configured(classes: Vec<Residue>) -> LayoutView {
        LayoutView {
            layouts: Vec::new(),
            classes: classes.iter().copied().map(Some).collect(),
            configured: classes,
        }
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
}

/// One biz's move, for the report.
enum Moved {
    Already,
    Moved { fence: i64, rows: usize },
}

fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

impl Store {
    /// Takes in the layout rows read from the databases (at a catalog refresh, or by an
    /// admin command): each database's class and membership follow the layout in force.
    pub(super) fn apply_layouts(&self, rows: &[LayoutRow]) {
        let mut view = self.layout.lock();
        // Added to what was known: a read that reached no database (or only one that
        // joined later and lacks the older epochs) takes nothing away.
        let known = view.layouts.iter().map(|l| l.row(0));
        let rows: Vec<LayoutRow> = known.chain(rows.iter().cloned()).collect();
        let layouts = match layout::merge(&rows) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(error = %e, "layout rows disagree; keeping the layout known before");
                return;
            }
        };
        let classes = match layout::current(&layouts).0 {
            Some(current) => self.names.iter().map(|n| current.class_of(n)).collect(),
            None => view.configured.iter().copied().map(Some).collect(),
        };
        if classes != view.classes {
            tracing::info!(
                layout = %layout::current(&layouts).0.map_or_else(|| "configured".into(), |l| format!("epoch {}: {}", l.epoch, l.describe())),
                "database layout changed"
            );
        }
        view.classes = classes;
        view.layouts = layouts;
    }

    /// The class plain bizs get on database `i` in the layout in force; `None` when the
    /// layout does not name it: it is then never used.
    pub fn class_of(&self, i: usize) -> Option<Residue> {
        self.layout.lock().classes[i]
    }

    /// Every `(epoch, database, class)` of the layouts read.
    pub(super) fn layout_classes(&self) -> Vec<(i64, String, Residue)> {
        let view = self.layout.lock();
        view.layouts
            .iter()
            .flat_map(|l| l.members.iter().map(|m| (l.epoch, m.name.clone(), m.class)))
            .collect()
    }

    /// The layout in force (`None` before any change) and the change under way above
    /// it, as last read.
    pub fn layouts(&self) -> (Option<Layout>, Option<Layout>) {
        let view = self.layout.lock();
        let (done, pending) = layout::current(&view.layouts);
        (done.cloned(), pending.cloned())
    }

    /// The epoch in force (0 before any change) and the change under way, if any.
    pub fn layout_epochs(&self) -> (i64, Option<i64>) {
        let view = self.layout.lock();
        let (done, pending) = layout::current(&view.layouts);
        (done.map_or(0, |l| l.epoch), pending.map(|l| l.epoch))
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
        let rows: Vec<LayoutRow> = self
            .on_all(|db| db.layouts())
            .await
            .into_iter()
            .filter_map(Result::ok)
            .flatten()
            .collect();
        self.apply_layouts(&rows);
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
                    Err(e) => (Some(e.0), Vec::new()),
                };
                DatabaseLayout {
                    name: self.names[i].clone(),
                    class: self.class_of(i),
                    error,
                    rows: rows.len(),
                    frozen: rows.iter().filter(|r| r.frozen).count(),
                    epoch: rows.iter().map(|r| r.epoch).max().unwrap_or(0),
                }
            })
            .collect();
        LayoutReport {
            current,
            pending,
            databases,
        }
    }

    /// Moves the cluster to the layout of `target` (database names, in order: database
    /// `i` of `n` gets the class `i mod n`). Every configured database must answer;
    /// `before` is the layout before any change (the configured classes), used when no
    /// layout was ever stored. Reports progress through `say` as it goes, so that a
    /// command killed midway has said how far it got.
    ///
    /// A change under way with the same databases is finished; one with other
    /// databases is superseded (rolled back or forward: every biz is moved to `target`
    /// from wherever it got).
    ///
    /// # Errors
    /// [`StoreError::Refused`] when a database does not answer or a biz cannot be
    /// moved: what was done so far is safe to serve from, and running the command again
    /// finishes it.
    pub async fn change_layout(
        &self,
        target: &[String],
        before: &Layout,
        say: &mut (dyn FnMut(String) + Send),
    ) -> Result<Layout, StoreError> {
        let refused = |e: String| StoreError::Refused(e);
        if target.is_empty() {
            return Err(refused(
                "a layout needs at least one database; nothing changed".into(),
            ));
        }
        for name in target {
            if !self.names.contains(name) {
                return Err(refused(format!(
                    "database \"{name}\" is not configured; nothing changed"
                )));
            }
        }
        let rows = self
            .everywhere(|db| db.layouts(), "nothing changed")
            .await?;
        let rows: Vec<LayoutRow> = rows.into_iter().flatten().collect();
        let layouts = layout::merge(&rows).map_err(refused)?;
        let (done, pending) = layout::current(&layouts);
        let from = done.cloned().unwrap_or_else(|| before.clone());
        let now = unix_ms();
        if done.is_none() && !layouts.iter().any(|l| l.epoch == from.epoch) {
            self.write_layout(&from, now).await?;
        }
        if let Some(p) = pending {
            let changed_ms = rows
                .iter()
                .filter(|r| r.epoch == p.epoch)
                .map(|r| r.changed_ms)
                .max()
                .unwrap_or(0);
            let silent = now.saturating_sub(changed_ms);
            if silent < SILENT_MS {
                return Err(refused(format!(
                    "a change to layout epoch {} ({}) was active {silent} ms ago: another `segmint db` command seems to be running; if it was cut off, run this again once it has been silent for {} s; nothing changed",
                    p.epoch,
                    p.describe(),
                    SILENT_MS / 1000
                )));
            }
        }
        let next_epoch = layouts.iter().map(|l| l.epoch).max().unwrap_or(from.epoch) + 1;
        let to = match pending {
            Some(p) if p.names() == target => {
                say(format!(
                    "finishing the change to layout epoch {} cut off before",
                    p.epoch
                ));
                p.clone()
            }
            _ if pending.is_none() && from.names() == target => {
                say(format!(
                    "layout epoch {} already has these databases: {}",
                    from.epoch,
                    from.describe()
                ));
                return Ok(from);
            }
            _ => {
                if let Some(p) = pending {
                    say(format!(
                        "superseding the change to layout epoch {} ({}) cut off before",
                        p.epoch,
                        p.describe()
                    ));
                    let superseded = Layout {
                        state: LayoutState::Superseded,
                        ..p.clone()
                    };
                    self.write_layout(&superseded, now).await?;
                }
                Layout::spread(next_epoch, target, LayoutState::Moving).map_err(refused)?
            }
        };
        say(format!(
            "layout epoch {} → {}: {}",
            from.epoch,
            to.epoch,
            to.describe()
        ));
        self.write_layout(&to, now).await?;
        self.apply_layouts(&[from.row(now), to.row(now)]);
        let result = self.apply_change(&from, to.clone(), layouts, say).await;
        if result.is_err() {
            // Stopped by an error, not killed: the next command need not wait for this
            // one to fall silent. Best effort (a database may be down).
            let released = to.row(0);
            let released = &released;
            let _ = self.on_all(move |db| db.put_layout(released)).await;
        }
        result
    }

    /// The moves of a change under way from `from` to `to`, whose layout row is
    /// written; `layouts` as read before.
    async fn apply_change(
        &self,
        from: &Layout,
        to: Layout,
        layouts: Vec<Layout>,
        say: &mut (dyn FnMut(String) + Send),
    ) -> Result<Layout, StoreError> {
        let members: Vec<usize> = to
            .members
            .iter()
            .filter_map(|m| self.names.iter().position(|n| *n == m.name))
            .collect();
        self.copy_catalog(&members, say).await?;
        // Every epoch a row can be in: those read, the one moved from and the target.
        let mut layouts = layouts;
        for l in [from, &to] {
            if !layouts.iter().any(|k| k.epoch == l.epoch) {
                layouts.push(l.clone());
            }
        }
        let bizs: BTreeSet<String> = self
            .everywhere(|db| db.bizs(), "stopped")
            .await?
            .into_iter()
            .flatten()
            .map(|r| r.biz_type)
            .collect();
        // What the witnesses recorded of each biz's rows: (highest max_id, version).
        let mut witnessed: Witnessed = HashMap::new();
        for w in self
            .everywhere(|db| db.witnesses(), "stopped")
            .await?
            .into_iter()
            .flatten()
        {
            witnessed
                .entry(w.biz)
                .or_default()
                .push((w.mark.high_id.max(w.mark.max_id), w.mark.version));
        }
        let (mut moved, total) = (0, bizs.len());
        let mut beat = std::time::Instant::now();
        for biz in &bizs {
            if beat.elapsed() >= HEARTBEAT {
                // Still running: another command waits (see `change_layout`).
                self.write_layout(&to, unix_ms()).await?;
                beat = std::time::Instant::now();
            }
            match self.move_biz(biz, &to, &layouts, &witnessed).await? {
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
        let leases = self.move_worker_ids(&to).await?;
        say(format!("worker IDs: {leases}"));
        let done = Layout {
            state: LayoutState::Done,
            ..to
        };
        self.write_layout(&done, unix_ms()).await?;
        self.apply_layouts(&[done.row(0)]);
        let changed: Vec<&str> = self.names.iter().map(String::as_str).collect();
        super::admin::audit(&format!("layout epoch {}", done.epoch), "", "", &changed);
        say(format!(
            "layout epoch {} is done: {}",
            done.epoch,
            done.describe()
        ));
        Ok(done)
    }

    /// [`Store::all_answer`] for a change: the error names the first database that did
    /// not answer, followed by `then` (what that means for the change).
    async fn everywhere<'a, T, F>(
        &'a self,
        op: impl Fn(&'a dyn crate::store::SegmentStore) -> F,
        then: &str,
    ) -> Result<Vec<T>, StoreError>
    where
        F: Future<Output = Result<T, DbError>> + 'a,
    {
        self.all_answer(op, |name, e| {
            format!("database \"{name}\" did not answer ({e}); {then}; what was done is safe to serve from: run the command again once it answers")
        })
        .await
    }

    async fn write_layout(&self, layout: &Layout, at: i64) -> Result<(), StoreError> {
        let row = layout.row(at);
        let row = &row;
        self.everywhere(move |db| db.put_layout(row), "stopped")
            .await
            .map(drop)
    }

    /// Copies shape and token rows to the members that lack them: a biz's shape before
    /// any of its rows, and tokens so that the new database alone can answer.
    async fn copy_catalog(
        &self,
        members: &[usize],
        say: &mut (dyn FnMut(String) + Send),
    ) -> Result<(), StoreError> {
        let shapes = self.everywhere(|db| db.shapes(), "stopped").await?;
        let tokens = self.everywhere(|db| db.tokens(), "stopped").await?;
        let mut all_shapes: HashMap<&str, &ShapeRow> = HashMap::new();
        for s in shapes.iter().flatten() {
            all_shapes.entry(s.biz_type.as_str()).or_insert(s);
        }
        let merged = merge_tokens(
            tokens
                .iter()
                .enumerate()
                .flat_map(|(i, rows)| rows.iter().map(move |t| (i, t))),
        );
        let stopped = |i: usize, e: DbError| {
            StoreError::Refused(format!(
                "database \"{}\": {e}; stopped; what was done is safe to serve from: run the command again",
                self.names[i]
            ))
        };
        for &i in members {
            let store = &self.dbs[i].store;
            let mut copied = (0, 0);
            for (biz, shape) in &all_shapes {
                if !shapes[i].iter().any(|s| s.biz_type == *biz) {
                    self.call(i, store.put_shape(shape))
                        .await
                        .map_err(|e| stopped(i, e))?;
                    copied.0 += 1;
                }
            }
            for t in &merged {
                for biz in &t.bizs {
                    let held = tokens[i]
                        .iter()
                        .any(|r| r.token_hash.eq_ignore_ascii_case(&t.hash) && r.biz_type == *biz);
                    if !held {
                        self.call(i, store.insert_token(&t.hash, biz, &t.remark, t.expires))
                            .await
                            .map_err(|e| stopped(i, e))?;
                        copied.1 += 1;
                    }
                }
                if let Some(at) = t.revoked {
                    self.call(i, store.revoke_tokens(&t.hash, at))
                        .await
                        .map_err(|e| stopped(i, e))?;
                }
            }
            if copied != (0, 0) {
                say(format!(
                    "\"{}\": copied {} shape rows and {} token grants",
                    self.names[i], copied.0, copied.1
                ));
            }
        }
        Ok(())
    }

    /// Moves `biz` to layout `to`: freeze every row, fence, switch (see the module's
    /// documentation). Lost races re-read the rows and start over.
    async fn move_biz(
        &self,
        biz: &str,
        to: &Layout,
        layouts: &[Layout],
        witnessed: &Witnessed,
    ) -> Result<Moved, StoreError> {
        let fail = |why: String| {
            StoreError::Refused(format!(
                "biz `{biz}`: {why}; stopped; what was done is safe to serve from: run the command again"
            ))
        };
        for _ in 0..MOVE_ATTEMPTS {
            let rows = self.everywhere(|db| db.biz(biz), "stopped").await?;
            let within = self.restriction_of(&rows, layouts).map_err(fail)?;
            let wanted = |i: usize| -> Result<Option<Residue>, String> {
                to.class_of(&self.names[i])
                    .map(|c| c.restrict(within).map_err(|e| e.to_string()))
                    .transpose()
            };
            let mut settled = true;
            for (i, row) in rows.iter().enumerate() {
                settled &= match (wanted(i).map_err(fail)?, row) {
                    (Some(class), Some(r)) => {
                        !r.frozen
                            && r.epoch == to.epoch
                            && (r.delta, r.remainder) == (class.delta(), class.remainder())
                    }
                    (Some(_), None) => false,
                    (None, r) => r.as_ref().is_none_or(|r| r.frozen),
                };
            }
            if settled {
                return Ok(Moved::Already);
            }
            // 1. Freeze.
            let mut frozen: Vec<Option<BizRow>> = Vec::with_capacity(rows.len());
            let mut lost = false;
            for (i, row) in rows.iter().enumerate() {
                let Some(r) = row else {
                    frozen.push(None);
                    continue;
                };
                // A frozen row is written too (its version bumped): a change that froze
                // it before, still running or cut off, can then no longer switch it.
                let to_frozen = Reclass::freezing(r, true);
                match self
                    .call(
                        i,
                        self.dbs[i]
                            .store
                            .reclass(biz, r.version, r.max_id, &to_frozen),
                    )
                    .await
                {
                    Ok(Some(done)) => frozen.push(Some(done)),
                    Ok(None) => {
                        lost = true;
                        break;
                    }
                    Err(e) => {
                        self.thaw(biz, &rows, &frozen).await;
                        return Err(fail(format!(
                            "database \"{}\" failed while freezing ({e}); the rows frozen so far were thawed",
                            self.names[i]
                        )));
                    }
                }
            }
            if lost {
                // A reservation got in between: give its rows back and read again.
                self.thaw(biz, &rows, &frozen).await;
                continue;
            }
            // 2. Fence: every row is frozen; nothing issued under the old layout lies
            // above the highest max_id (a give-back lowers it only to the first ID not
            // issued), nor, to be sure, above what any witness saw.
            let witnessed = witnessed.get(biz).map_or(&[][..], Vec::as_slice);
            let fence = frozen
                .iter()
                .flatten()
                .map(|r| r.max_id)
                .chain(witnessed.iter().map(|w| w.0))
                .max()
                .unwrap_or(0);
            let newest = frozen
                .iter()
                .flatten()
                .map(|r| r.version)
                .chain(witnessed.iter().map(|w| w.1))
                .max()
                .unwrap_or(0);
            let template = frozen
                .iter()
                .flatten()
                .next()
                .cloned()
                .ok_or_else(|| fail("no database holds a row".into()))?;
            // 3. Switch.
            let mut switched = 0;
            for (i, row) in frozen.iter().enumerate() {
                let class = wanted(i).map_err(fail)?;
                let result = match (class, row) {
                    (Some(class), Some(r)) => {
                        let to_row = Reclass {
                            version: r.version + 1,
                            max_id: fence,
                            delta: class.delta(),
                            remainder: class.remainder(),
                            epoch: to.epoch,
                            frozen: false,
                        };
                        self.call(
                            i,
                            self.dbs[i].store.reclass(biz, r.version, r.max_id, &to_row),
                        )
                        .await
                        .map(|done| done.is_some())
                    }
                    (Some(class), None) => {
                        let new = BizRow {
                            begin_id: fence,
                            max_id: fence,
                            delta: class.delta(),
                            remainder: class.remainder(),
                            version: newest + 1,
                            epoch: to.epoch,
                            frozen: false,
                            ..template.clone()
                        };
                        self.call(i, self.dbs[i].store.insert_biz(&new)).await
                    }
                    // Rows of databases out of the layout stay frozen as they are.
                    (None, _) => Ok(true),
                };
                match result {
                    Ok(true) => switched += 1,
                    // Only another layout change writes frozen rows: start over.
                    Ok(false) => {
                        lost = true;
                        break;
                    }
                    Err(e) => {
                        return Err(fail(format!(
                            "database \"{}\" failed while switching ({e}); the rows not switched stay frozen",
                            self.names[i]
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

    /// Unfreezes the rows this pass froze (`frozen[i]` where `rows[i]` was not): it
    /// gives back the state before the pass, which was safe to serve from.
    async fn thaw(&self, biz: &str, rows: &[Option<BizRow>], frozen: &[Option<BizRow>]) {
        for (i, (before, now)) in rows.iter().zip(frozen).enumerate() {
            let (Some(before), Some(now)) = (before, now) else {
                continue;
            };
            if before.frozen || !now.frozen {
                continue;
            }
            let back = Reclass::freezing(now, false);
            if let Err(e) = self
                .call(
                    i,
                    self.dbs[i]
                        .store
                        .reclass(biz, now.version, now.max_id, &back),
                )
                .await
            {
                tracing::warn!(biz, database = %self.names[i], error = %e, "could not thaw a row: it stays frozen until the change is run again");
            }
        }
    }

    /// The biz's own restriction (odd-only: `1 mod 2`), from its rows' classes and their
    /// databases' classes at the rows' epochs. Every row must agree.
    fn restriction_of(
        &self,
        rows: &[Option<BizRow>],
        layouts: &[Layout],
    ) -> Result<Residue, String> {
        let mut found: Option<(Residue, String)> = None;
        for (i, row) in rows.iter().enumerate() {
            let Some(r) = row else { continue };
            let class = Residue::new(r.delta, r.remainder).map_err(|e| e.to_string())?;
            let name = &self.names[i];
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
            // A frozen row gives out nothing: one the layouts cannot explain is left out.
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

    /// Moves every worker ID to its owner in `to`: blocked on every other database
    /// (a holder there fails its next renewal), then freed on its owner with the
    /// highest bound recorded anywhere, above which the next holder issues. Returns a
    /// summary.
    async fn move_worker_ids(&self, to: &Layout) -> Result<String, StoreError> {
        let leases = self.everywhere(|db| db.leases(), "stopped").await?;
        let stopped = |i: usize, e: DbError| {
            StoreError::Refused(format!(
                "database \"{}\" failed while moving worker IDs ({e}); stopped; what was done is safe: run the command again",
                self.names[i]
            ))
        };
        let owner: Vec<Option<usize>> = (0..WORKER_IDS)
            .map(|w| {
                to.owner_of(w)
                    .and_then(|n| self.names.iter().position(|x| x == n))
            })
            .collect();
        let mut floor: Vec<(i64, i64)> = vec![(0, 0); usize::from(WORKER_IDS)];
        let mut blocked = 0;
        for (i, rows) in leases.iter().enumerate() {
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
            for row in self
                .call(i, self.dbs[i].store.set_leases(&block))
                .await
                .map_err(|e| stopped(i, e))?
            {
                let f = &mut floor[usize::from(row.worker_id)];
                *f = (f.0.max(row.last_ms), f.1.max(row.bound_ms));
            }
        }
        let mut freed = 0;
        for (i, rows) in leases.iter().enumerate() {
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
                self.call(i, self.dbs[i].store.set_leases(&free))
                    .await
                    .map_err(|e| stopped(i, e))?;
            }
        }
        Ok(format!(
            "{blocked} blocked where they left, {freed} freed where they arrived"
        ))
    }
}
