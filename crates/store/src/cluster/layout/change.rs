//! Running a layout change: decide, claim, move every biz and the worker IDs, heartbeat
//! meanwhile, then mark the layout done.

use super::*;
use segmint_core::layout::Change;
use segmint_core::layout::changing::{
    Need as ChangeNeed, Outcome as ChangeOutcome, Stop as ChangeStop,
};
use segmint_core::layout::moving::Outcome as MoveOutcome;
use std::collections::BTreeMap;

/// What [`Cluster::check_change`] found: the layouts stored, the change's target and the
/// databases it declares lost, and the databases it needs (by index).
struct Checked {
    layouts: Vec<Layout>,
    target: Vec<String>,
    lost: Vec<String>,
    parts: Vec<usize>,
}

impl Cluster {
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
        let Checked {
            layouts,
            target,
            lost,
            parts,
        } = self.check_change(change, before, None).await?;
        let (target, lost) = (&target[..], &lost[..]);
        let (from, to, supersede, finishing) =
            match layout::plan(&layouts, before, target, lost).map_err(Refusal::from)? {
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
        let names: Vec<String> = parts.iter().map(|&i| self.names[i].clone()).collect();
        if let Some(running) = supersede.as_ref().or(finishing.then_some(&to)) {
            self.wait_unchanged(&parts, running, &layouts, say).await?;
        }
        let decision = layout::Decision {
            parts: names,
            from: from.clone(),
            to: to.clone(),
            supersede,
            finishing,
            layouts,
        };
        let mut change = Change::new(decision, (WORKER_IDS, MOVE_ATTEMPTS), self.sequences);
        // The claims, before the heartbeat: the row is this command's only once
        // claimed.
        self.claim_change(&parts, &mut change, &to, say).await?;
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
        self.run_beating(&parts, change, &to, say).await
    }

    /// Waits until the change to `running` has been silent ([`Cluster::wait_silent`]),
    /// then reads the layouts of `parts` again: what was decided from `layouts` holds
    /// only if the newest epoch stored, the one done and the one pending are the same.
    ///
    /// # Errors
    /// [`StoreError::Refused`] when the change's row changed meanwhile, a database does
    /// not answer, or the layouts changed (another command ran); nothing changed.
    async fn wait_unchanged(
        &self,
        parts: &[usize],
        running: &Layout,
        layouts: &[Layout],
        say: &mut (dyn FnMut(String) + Send),
    ) -> Result<(), StoreError> {
        self.wait_silent(parts, running, say).await?;
        // What was decided holds only if nothing moved on meanwhile.
        let rows: Vec<LayoutRow> = self
            .all_parts(parts, |db| db.layouts(), "nothing changed")
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
        if layout::merge(&rows).map(|l| key(&l)) != Ok(key(layouts)) {
            return Err(Refusal::new(
                Reason::ChangeClaimed,
                "the layouts changed while this command waited (another command ran); nothing changed",
            )
            .hint("run it again")
            .into());
        }
        Ok(())
    }

    /// Claims the epoch of `change`, the change to `to` over the databases `parts`,
    /// and writes the rows of the change cut off before that it finishes or supersedes,
    /// as `change` asks, until it asks for something else.
    ///
    /// # Errors
    /// [`StoreError::Refused`] when a database fails, or another command claimed the
    /// epoch first.
    async fn claim_change(
        &self,
        parts: &[usize],
        change: &mut Change,
        to: &Layout,
        say: &mut (dyn FnMut(String) + Send),
    ) -> Result<(), StoreError> {
        let now = self.unix_ms();
        loop {
            match change.need() {
                ChangeNeed::ClaimBefore { part, layout } => {
                    // The configured classes become epoch 0, as a claim: a command that
                    // raced this one wrote the same or its claim below fails.
                    let i = parts[part];
                    self.step(i, self.list[i].store.claim_layout(&layout.row(now)))
                        .await
                        .map_err(|e| self.stopped(i, &e, "nothing changed"))?;
                    change.claimed(true);
                }
                ChangeNeed::Claim { part, layout, .. } => {
                    let i = parts[part];
                    let claimed = self
                        .step(i, self.list[i].store.claim_layout(&layout.row(now)))
                        .await
                        .map_err(|e| self.stopped(i, &e, "stopped"))?;
                    change.claimed(claimed);
                }
                ChangeNeed::Put { part, layout } => {
                    if part == 0 {
                        say(match layout.state {
                            LayoutState::Superseded => format!(
                                "superseding the change to layout epoch {} ({}) cut off before",
                                layout.epoch,
                                layout.describe()
                            ),
                            _ => format!(
                                "finishing the change to layout epoch {} cut off before",
                                layout.epoch
                            ),
                        });
                    }
                    let i = parts[part];
                    self.step(i, self.list[i].store.put_layout(&layout.row(now)))
                        .await
                        .map_err(|e| self.stopped(i, &e, "stopped"))?;
                    change.put();
                }
                ChangeNeed::Done(ChangeOutcome::Stopped(ChangeStop::Claimed { part, first })) => {
                    return Err(self.claimed_refusal(parts[part], first, to.epoch));
                }
                _ => break,
            }
        }
        Ok(())
    }

    /// The refusal of a change whose claim of layout `epoch` found another row for it
    /// on database `i`: `first`, the first database it tried (another command claimed
    /// the epoch first, and nothing changed), or a later one.
    fn claimed_refusal(&self, i: usize, first: bool, epoch: i64) -> StoreError {
        let name = &self.names[i];
        let refusal = if first {
            Refusal::new(
                Reason::ChangeClaimed,
                format!(
                    "another `segmint db` command claimed layout epoch {epoch} first (on database \"{name}\"): two changes never run at once; nothing changed"
                ),
            )
            .hint("see `segmint db list`, and run this again once it is done")
        } else {
            Refusal::new(
                Reason::ChangeClaimed,
                format!(
                    "layout epoch {epoch} was claimed here but database \"{name}\" holds another row for it"
                ),
            )
            .hint("see `segmint db list`")
        };
        refusal.into()
    }

    /// Runs the rest of `change`, the change to `to` over the databases `parts` whose
    /// row is claimed ([`Cluster::run_change`]), while its row is rewritten every
    /// heartbeat ([`Cluster::heartbeat`]). Returns the layout done; a change stopped by an
    /// error releases its row first, best effort.
    async fn run_beating(
        &self,
        parts: &[usize],
        change: Change,
        to: &Layout,
        say: &mut (dyn FnMut(String) + Send),
    ) -> Result<Layout, StoreError> {
        // The moves run while the row is rewritten every second: another command, and
        // the servers, then know the change is alive.
        let finishing_flag = AtomicBool::new(false);
        let change = self.run_change(parts, change, &finishing_flag, say);
        let beat = self.heartbeat(parts, to, &finishing_flag);
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
                .on_parts(parts, move |db| db.put_layout(released))
                .await;
        }
        result
    }

    /// Rewrites the layout row of the change to `to` every
    /// [`Protocol::heartbeat`](crate::config::Protocol::heartbeat) until
    /// `finishing` is set. Returns only when the row is no longer `moving` on some
    /// database before that: a later change superseded this one.
    pub(super) async fn heartbeat(
        &self,
        parts: &[usize],
        to: &Layout,
        finishing: &AtomicBool,
    ) -> StoreError {
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
                    return Refusal::new(
                        Reason::ChangeSuperseded,
                        format!(
                            "layout epoch {} is no longer moving on database \"{}\": a later change superseded this one; stopped",
                            to.epoch, self.names[parts[k]]
                        ),
                    )
                    .into();
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
    pub(super) async fn wait_silent(
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
                return Err(Refusal::new(
                    Reason::ChangeClaimed,
                    format!(
                        "another `segmint db` command is running the change to layout epoch {} ({}): its row changed within {} s; nothing changed",
                        running.epoch,
                        running.describe(),
                        silent.as_secs_f64()
                    ),
                )
                .hint("run this again once it is done")
                .into());
            }
        }
        Ok(())
    }

    /// The rest of `change`, whose layout row is claimed, over the databases `parts`:
    /// carries out its steps (copy the catalog, move every biz and the worker IDs, mark
    /// the layout done) on the engines; sets `finishing` before the layout is marked
    /// done.
    pub(super) async fn run_change(
        &self,
        parts: &[usize],
        mut change: Change,
        finishing: &AtomicBool,
        say: &mut (dyn FnMut(String) + Send),
    ) -> Result<Layout, StoreError> {
        let epoch = change.decision().to.epoch;
        let mut told = false;
        loop {
            let need = change.need();
            if !told && matches!(need, ChangeNeed::ReadLeases | ChangeNeed::Put { .. }) {
                told = true;
                say(moves_told(&change, epoch));
            }
            match need {
                ChangeNeed::CopyCatalog => {
                    let members = self.positions(&change.decision().to);
                    self.copy_catalog(parts, &members, say).await?;
                    change.copied();
                }
                ChangeNeed::Gather => {
                    let bizs = self.gather(parts).await?;
                    change.gathered(bizs);
                }
                ChangeNeed::Move { biz } => {
                    self.run_move(&biz, parts, &mut change, epoch, say).await?;
                }
                ChangeNeed::ReadLeases => {
                    let rows = self.all_parts(parts, |db| db.leases(), "stopped").await?;
                    change.leases(rows);
                }
                ChangeNeed::SetLeases { part, rows, .. } => {
                    let i = parts[part];
                    let written = self
                        .step(i, self.list[i].store.set_leases(epoch, &rows))
                        .await
                        .map_err(|e| self.stopped(i, &e, "stopped"))?;
                    change.set(written);
                }
                ChangeNeed::Sequences => {
                    let bizs = self.sequence_bizs(parts).await?;
                    change.sequences(bizs);
                }
                ChangeNeed::Carry { biz, from, to } => {
                    self.carry_sections(&mut change, parts, &biz, (&from, &to))
                        .await?;
                    say(format!(
                        "sequence biz `{biz}`: sections carried to epoch {epoch}"
                    ));
                }
                ChangeNeed::Put { part, layout } => {
                    if part == 0 {
                        let (blocked, freed) = change.worker_ids();
                        say(format!(
                            "worker IDs: {blocked} blocked where they left, {freed} freed where they arrived"
                        ));
                    }
                    finishing.store(true, Ordering::SeqCst);
                    self.put_done(parts[part], &layout).await?;
                    change.put();
                }
                ChangeNeed::Done(ChangeOutcome::Done { layout, .. }) => {
                    return Ok(self.change_done(parts, layout, say).await);
                }
                ChangeNeed::Done(ChangeOutcome::Stopped(_)) => return Err(superseded(epoch)),
                ChangeNeed::ClaimBefore { .. } | ChangeNeed::Claim { .. } => {
                    unreachable!("claimed before the change runs")
                }
            }
        }
    }

    /// The members of `layout` that are configured, by their position in the
    /// configuration.
    fn positions(&self, layout: &Layout) -> Vec<usize> {
        layout
            .members
            .iter()
            .filter_map(|m| self.names.iter().position(|n| *n == m.name))
            .collect()
    }

    /// Reads the bizs and the witnesses of every database of `parts`. Returns each biz
    /// with what the witnesses recorded of it.
    ///
    /// # Errors
    /// [`StoreError::Refused`] naming the first database that did not answer.
    async fn gather(
        &self,
        parts: &[usize],
    ) -> Result<BTreeMap<String, Vec<(i64, i64)>>, StoreError> {
        let bizs: BTreeSet<String> = self
            .all_parts(parts, |db| db.bizs(), "stopped")
            .await?
            .into_iter()
            .flatten()
            .map(|r| r.biz_type.to_string())
            .collect();
        let mut witnessed = witnessed(
            self.all_parts(parts, |db| db.witnesses(), "stopped")
                .await?
                .into_iter()
                .flatten(),
        );
        Ok(bizs
            .into_iter()
            .map(|b| {
                let w = witnessed.remove(&b).unwrap_or_default();
                (b, w)
            })
            .collect())
    }

    /// Moves `biz` to layout `epoch` over the databases `parts`, as `change`'s move
    /// asks ([`Cluster::drive_move`]), and tells it how the move ended.
    ///
    /// # Errors
    /// [`StoreError::Refused`] when the move stopped ([`Cluster::move_refusal`]).
    async fn run_move(
        &self,
        biz: &str,
        parts: &[usize],
        change: &mut Change,
        epoch: i64,
        say: &mut (dyn FnMut(String) + Send),
    ) -> Result<(), StoreError> {
        let (outcome, read_failed, db_failed) = self.drive_move(biz, parts, change.mover()).await;
        match &outcome {
            MoveOutcome::Moved { fence, switched } => say(format!(
                "biz `{biz}`: {switched} rows moved above {fence} (epoch {epoch})"
            )),
            MoveOutcome::Stopped(stop) => {
                return Err(self.move_refusal(
                    biz,
                    parts,
                    epoch,
                    stop.clone(),
                    read_failed,
                    &db_failed,
                ));
            }
            MoveOutcome::Already => {}
        }
        change.moved(outcome);
        Ok(())
    }

    /// Writes `layout`'s row, the change done, on database `i`, stamped now.
    ///
    /// # Errors
    /// [`StoreError::Refused`] when the database fails.
    async fn put_done(&self, i: usize, layout: &Layout) -> Result<(), StoreError> {
        self.step(
            i,
            self.list[i].store.put_layout(&layout.row(self.unix_ms())),
        )
        .await
        .map_err(|e| self.stopped(i, &e, "stopped"))?;
        Ok(())
    }

    /// Once the change over the databases `parts` marked `layout` done: reads the
    /// layouts again, records the change in the audit log and says so. Returns
    /// `layout`.
    async fn change_done(
        &self,
        parts: &[usize],
        layout: Layout,
        say: &mut (dyn FnMut(String) + Send),
    ) -> Layout {
        self.load_layout().await;
        let changed: Vec<&str> = parts.iter().map(|&i| self.names[i].as_str()).collect();
        super::super::admin::audit(&format!("layout epoch {}", layout.epoch), "", "", &changed);
        say(format!(
            "layout epoch {} is done: {}",
            layout.epoch,
            layout.describe()
        ));
        layout
    }

    /// Carries the sections of sequence biz `biz` (the members `from` and `to` by their
    /// position in `parts`) as `change`'s carry asks, and tells it; a section that could
    /// not be carried stops the change, its sections held by it until the command runs
    /// again.
    async fn carry_sections(
        &self,
        change: &mut Change,
        parts: &[usize],
        biz: &str,
        (from, to): (&[Option<usize>], &[Option<usize>]),
    ) -> Result<(), StoreError> {
        let at = |m: &[Option<usize>]| -> Vec<Option<usize>> {
            m.iter().map(|p| p.map(|p| parts[p])).collect()
        };
        let (from, to) = (at(from), at(to));
        self.run_carries(biz, change.carries(), (&from, &to)).await;
        change.carried();
        let epoch = change.decision().to.epoch;
        match change.need() {
            ChangeNeed::Done(ChangeOutcome::Stopped(ChangeStop::Carry {
                biz,
                section,
                outcome,
            })) => Err(Refusal::new(
                Reason::DatabaseUnanswered,
                format!(
                    "section {section} of sequence biz `{biz}` could not be carried to layout epoch {epoch} ({outcome:?}); its sections stay held by the change, answered 503 until it is done"
                ),
            )
            .hint("run the command again once the databases answer")
            .into()),
            _ => Ok(()),
        }
    }

    /// The checks a change to the layout `change` asks for must pass before it
    /// writes anything: the layouts readable, every database of the target and every
    /// one that may hold live rows or worker IDs ([`layout::required`]) configured and
    /// answering, a database declared lost not answering. `fresh` names a database
    /// not migrated yet (the one `segmint db add` adds), which need only answer.
    ///
    /// # Errors
    /// [`StoreError::Refused`] naming the first check that failed; nothing changed.
    async fn check_change(
        &self,
        change: &LayoutChange,
        before: &Layout,
        fresh: Option<&str>,
    ) -> Result<Checked, StoreError> {
        let (reads, witnesses) = self.read_for_change(fresh).await;
        let rows: Vec<LayoutRow> = reads
            .iter()
            .filter_map(|r| r.as_ref().ok())
            .flatten()
            .cloned()
            .collect();
        let layouts = layout::merge(&rows).map_err(|e| {
            Refusal::new(Reason::LayoutInvalid, format!("{e}; nothing changed"))
                .hint("run `segmint db list` and mend the layout rows by hand")
        })?;
        let (target, lost) =
            layout::target(change, &layouts, before, &self.names).map_err(Refusal::from)?;
        for name in &target {
            if !self.names.contains(name) {
                return Err(Refusal::new(
                    Reason::DatabaseMissingFromConfig,
                    format!("database \"{name}\" is not configured; nothing changed"),
                )
                .hint(configure(name))
                .into());
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
        let mut need = layout::required(&layouts, before, &witnessed, &lost);
        for name in &target {
            if !need.contains(name) {
                need.push(name.clone());
            }
        }
        self.check_configured(&need)?;
        let parts: Vec<usize> = need
            .iter()
            .filter_map(|n| self.names.iter().position(|x| x == n))
            .collect();
        self.check_answers(&reads, &parts, &lost)?;
        Ok(Checked {
            layouts,
            target,
            lost,
            parts,
        })
    }

    /// Reads the layout rows and the witnesses of every configured database, each
    /// read's error kept. `fresh` names a database not migrated yet: when either read
    /// of it fails but it answers a ping, it is taken to hold neither.
    async fn read_for_change(
        &self,
        fresh: Option<&str>,
    ) -> (
        Vec<Result<Vec<LayoutRow>, DbError>>,
        Vec<Result<Vec<crate::store::Witness>, DbError>>,
    ) {
        let all: Vec<usize> = (0..self.list.len()).collect();
        let mut reads = self.on_parts(&all, |db| db.layouts()).await;
        let mut witnesses = self.on_parts(&all, |db| db.witnesses()).await;
        // A database not migrated yet has no layout or witness rows, and need only
        // answer.
        if let Some(i) = fresh.and_then(|n| self.names.iter().position(|x| x == n))
            && (reads[i].is_err() || witnesses[i].is_err())
            && let Some(Ok(())) = self.on_parts(&[i], |db| db.ping()).await.pop()
        {
            reads[i] = Ok(Vec::new());
            witnesses[i] = Ok(Vec::new());
        }
        (reads, witnesses)
    }

    /// Checks that every database of `need`, those a change needs, is configured.
    ///
    /// # Errors
    /// [`StoreError::Refused`] naming those that are not; nothing changed.
    fn check_configured(&self, need: &[String]) -> Result<(), StoreError> {
        let missing: Vec<&String> = need.iter().filter(|n| !self.names.contains(n)).collect();
        if !missing.is_empty() {
            let names = missing
                .iter()
                .map(|n| format!("\"{n}\""))
                .collect::<Vec<_>>()
                .join(", ");
            return Err(Refusal::new(
                Reason::DatabaseMissingFromConfig,
                format!(
                    "database {names} may hold live rows or worker IDs (the stored layouts or witnesses name it) but is not configured: a change needs every such database configured and answering, or a database left behind would keep issuing from its old class; nothing changed"
                ),
            )
            .hint(configure(match missing[..] {
                [one] => one,
                _ => "NAME",
            }))
            .into());
        }
        Ok(())
    }

    /// Checks, from the layout `reads` of every configured database, that each of
    /// `parts` (those a change needs) answered and that none declared `lost` did.
    ///
    /// # Errors
    /// [`StoreError::Refused`] naming the first database that failed the check; nothing
    /// changed.
    fn check_answers(
        &self,
        reads: &[Result<Vec<LayoutRow>, DbError>],
        parts: &[usize],
        lost: &[String],
    ) -> Result<(), StoreError> {
        for &i in parts {
            if let Err(e) = &reads[i] {
                let name = &self.names[i];
                return Err(Refusal::new(
                    Reason::DatabaseUnanswered,
                    format!(
                        "database \"{name}\" did not answer ({e}): a change needs every database of the layout; nothing changed"
                    ),
                )
                .hint(format!(
                    "run it again once it answers, or if it is gone for good, declare it lost with `segmint db remove {name} --lost`"
                ))
                .into());
            }
        }
        for name in lost {
            if let Some(i) = self.names.iter().position(|n| n == name)
                && reads[i].is_ok()
            {
                return Err(Refusal::new(
                    Reason::DatabaseAnswers,
                    format!("database \"{name}\" answers: it is not lost; nothing changed"),
                )
                .hint(format!(
                    "remove it with `segmint db remove {name}` (its rows are then frozen), not as lost"
                ))
                .into());
            }
        }
        Ok(())
    }

    /// Checks, before `segmint db add` migrates the database `adding`, what the change
    /// would check before writing anything ([`Cluster::change_layout`]): a change refused
    /// for a database missing or not answering is refused before the new database is
    /// touched.
    ///
    /// # Errors
    /// [`StoreError::Refused`] as [`Cluster::change_layout`] refuses before writing.
    pub async fn check_layout_change(
        &self,
        change: &LayoutChange,
        before: &Layout,
        adding: &str,
    ) -> Result<(), StoreError> {
        self.check_change(change, before, Some(adding))
            .await
            .map(|_| ())
    }

    /// Runs `op` on each database of `parts` at once, each within
    /// [`Protocol::step_timeout`](crate::config::Protocol::step_timeout).
    pub(super) async fn on_parts<'a, T, F>(
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
                .map(|&i| self.step(i, op(self.list[i].store.as_ref()))),
        )
        .await
    }

    /// [`Cluster::on_parts`], every database answering: the error names the first that
    /// did not, followed by `then` (what that means for the change).
    pub(super) async fn all_parts<'a, T, F>(
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

    /// Every sequence biz the parts know, with its sections: their shape rows.
    async fn sequence_bizs(&self, parts: &[usize]) -> Result<Vec<(String, u32)>, StoreError> {
        let shapes = self.all_parts(parts, |db| db.shapes(), "stopped").await?;
        Ok(shapes
            .into_iter()
            .flatten()
            .filter(|r| r.id_order == crate::store::SEQUENCE)
            .filter_map(|r| Some((r.biz_type, u32::try_from(r.domain).ok()?)))
            .collect())
    }

    /// The refusal of a change stopped by database `i`'s error; `then` says what that
    /// left (`stopped`, `nothing changed`).
    pub(super) fn stopped(&self, i: usize, e: &DbError, then: &str) -> StoreError {
        Refusal::new(
            Reason::DatabaseUnanswered,
            format!(
                "database \"{}\" failed ({e}); {then}; what was done is safe to serve from",
                self.names[i]
            ),
        )
        .hint("run the command again once it answers")
        .into()
    }

    /// Copies shape and token rows to the members that lack them: a biz's shape before
    /// any of its rows, and tokens so that the new database alone can answer.
    pub(super) async fn copy_catalog(
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
            let store = &self.list[i].store;
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
                    self.names[i], copied.0, copied.1
                ));
            }
        }
        Ok(())
    }
}

/// The refusal of a change to layout `epoch` that a later change superseded while it
/// ran.
fn superseded(epoch: i64) -> StoreError {
    StoreError::from(Refusal::new(
        Reason::ChangeSuperseded,
        format!(
            "layout epoch {epoch} is no longer moving: a later change superseded this one; stopped"
        ),
    ))
}

/// The way out for database `name`, needed by a change but not configured.
fn configure(name: &str) -> String {
    format!(
        "configure it, or if it is gone for good, declare it lost with `segmint db remove {name} --lost`"
    )
}

/// How many of `change`'s bizs it moved, and how many were already in layout `epoch`,
/// in the words of its progress report.
fn moves_told(change: &Change, epoch: i64) -> String {
    let (bizs, moved) = change.moves();
    format!(
        "{moved} of {bizs} bizs moved, {} already in epoch {epoch}",
        bizs - moved
    )
}
