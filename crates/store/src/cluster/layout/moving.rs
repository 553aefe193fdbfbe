//! Moving one biz (freeze, fence, switch) and the worker IDs to a new layout.

use super::*;

impl Store {
    /// Moves `biz` to layout `to` over the databases `parts`: freeze every row (a
    /// placeholder where one is missing), fence, switch (see the module's
    /// documentation). Lost races re-read the rows and start over.
    pub(super) async fn move_biz(
        &self,
        biz: &str,
        to: &Layout,
        layouts: &[Layout],
        witnessed: &Witnessed,
        parts: &[usize],
    ) -> Result<Moved, StoreError> {
        let fail = |reason: Reason, why: String| {
            let hint = match reason {
                // Rows that no run of the command can move as they are.
                Reason::RowInvalid => "fix the biz's rows by hand, then run the command again",
                _ => "run the command again",
            };
            StoreError::from(
                Refusal::new(
                    reason,
                    format!("biz `{biz}`: {why}; stopped; what was done is safe to serve from"),
                )
                .hint(hint),
            )
        };
        let invalid = |why: String| fail(Reason::RowInvalid, why);
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
                return Err(Refusal::new(
                    Reason::ChangeSuperseded,
                    format!(
                        "biz `{biz}`: a later change (layout epoch {}) moved it: this change to epoch {} was superseded; stopped; what was done is safe to serve from",
                        r.claimed_by, to.epoch
                    ),
                )
                .hint("run the command again")
                .into());
            }
            let within = self
                .restriction_of(parts, &rows, layouts)
                .map_err(invalid)?;
            let wanted: Vec<Option<Residue>> = parts
                .iter()
                .map(|&i| {
                    to.class_of(&self.dbs.names[i])
                        .map(|c| c.restrict(within).map_err(|e| e.to_string()))
                        .transpose()
                })
                .collect::<Result<_, String>>()
                .map_err(invalid)?;
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
                    .ok_or_else(|| invalid("no database holds a row".into()))?;
                for (k, &i) in parts.iter().enumerate() {
                    if rows[k].is_some() {
                        continue;
                    }
                    let class = wanted[k].unwrap_or(
                        Residue::new(template.delta, template.remainder)
                            .map_err(|e| invalid(e.to_string()))?,
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
                            fail(
                                Reason::DatabaseUnanswered,
                                format!(
                                    "database \"{}\" failed while inserting a frozen row ({e})",
                                    self.dbs.names[i]
                                ),
                            )
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
                        return Err(fail(
                            Reason::DatabaseUnanswered,
                            format!(
                                "database \"{}\" failed while freezing ({e}); the rows frozen so far were thawed",
                                self.dbs.names[i]
                            ),
                        ));
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
                    return Err(fail(Reason::DatabaseUnanswered, e));
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
                        return Err(fail(
                            Reason::DatabaseUnanswered,
                            format!(
                                "database \"{}\" failed while switching ({e}); the rows not switched stay frozen",
                                self.dbs.names[i]
                            ),
                        ));
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
        Err(fail(
            Reason::RacesLost,
            format!("lost {MOVE_ATTEMPTS} races in a row against other writers"),
        ))
    }

    /// Writes, on each database of `parts`, the frozen rows of the others as witnesses,
    /// and reads its witnesses of `biz`.
    pub(super) async fn witness_freeze(
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
    pub(super) fn went_back(&self, biz: &str, i: usize, why: &str) -> StoreError {
        let name = &self.dbs.names[i];
        Refusal::new(
            Reason::RowBehindWitness,
            format!(
                "biz `{biz}`: database \"{name}\" went back in time while the change ran ({why}); servers fence it; stopped, what was done is safe to serve from"
            ),
        )
        .hint(format!(
            "raise its rows above every issued ID with `segmint db fence {name}`, then run the command again"
        ))
        .into()
    }

    /// Unfreezes the rows this pass froze (`frozen[k]` where `rows[k]` was not): it
    /// gives back the state before the pass, which was safe to serve from.
    pub(super) async fn thaw(
        &self,
        biz: &str,
        parts: &[usize],
        rows: &[BizRow],
        frozen: &[Option<BizRow>],
    ) {
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
    pub(super) fn restriction_of(
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
                    layout::restriction(class, db).ok_or_else(|| format!("its row on \"{name}\" has class {class}, which is not within the database's class {db} of epoch {}", r.epoch))
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
    pub(super) async fn move_worker_ids(
        &self,
        to: &Layout,
        parts: &[usize],
    ) -> Result<String, StoreError> {
        let leases = self.all_parts(parts, |db| db.leases(), "stopped").await?;
        let superseded = || {
            StoreError::from(Refusal::new(
                Reason::ChangeSuperseded,
                format!(
                    "layout epoch {} is no longer moving: a later change superseded this one; stopped",
                    to.epoch
                ),
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
}
