//! Admin operations on every database: migrations, bizs, raising a database that went
//! back in time, and the audit trail of changes.

use futures_util::future::join_all;

use super::Cluster;
use crate::biz::BizTag;
use crate::segment::Residue;
use crate::store::evidence::{Evidence, Mark, Witness};
use crate::store::{
    BizRow, DbError, Inserted, Reason, Refusal, SegmentStore, ShapeRow, StoreError,
};
use crate::{biz_add, db_fence};

/// What `segmint migrate` did: per database, the migrations applied (or its error),
/// and the membership recorded (`Ok(None)`: recorded before).
#[derive(Debug)]
pub struct Migration {
    pub databases: Vec<(String, Result<Vec<String>, DbError>)>,
    pub membership: Result<Option<crate::layout::Layout>, StoreError>,
}

impl Migration {
    /// Each database's result, then the membership's (named `membership`) when it
    /// could not be recorded: what a caller checks all of.
    pub fn results(self) -> Vec<(String, Result<Vec<String>, String>)> {
        let membership = self
            .membership
            .err()
            .map(|e| ("membership".to_owned(), Err(e.to_string())));
        self.databases
            .into_iter()
            .map(|(name, r)| (name, r.map_err(|e| e.to_string())))
            .chain(membership)
            .collect()
    }
}

/// The note of a command that creates biz rows, stopped when a database already holds a
/// later layout (of `epoch`) than the one it read.
pub(super) fn layout_began(epoch: i64) -> String {
    format!(
        "not written: a change to layout epoch {epoch} began meanwhile; the rows written before it are moved by the change"
    )
}

/// The refusal of a command that creates biz rows, `stopped` (what stopped where) by a
/// change to layout `epoch` begun meanwhile; `notes`, its steps up to there.
pub(super) fn change_began(stopped: String, epoch: i64, notes: Vec<String>) -> StoreError {
    Refusal::new(
        Reason::ChangePending,
        format!("{stopped}: a change to layout epoch {epoch} began meanwhile"),
    )
    .hint("run the command again once the change is done")
    .notes(notes)
    .into()
}

/// The refusal of a read that database `name` did not answer (`e`): nothing changed.
pub(super) fn unreachable(name: &str, e: &DbError) -> StoreError {
    Refusal::new(
        Reason::DatabaseUnanswered,
        format!("database \"{name}\" is unreachable ({e}); nothing changed"),
    )
    .into()
}

impl Cluster {
    /// Applies pending migrations to every database, then records the cluster's
    /// membership if none is ([`Cluster::record_membership`]; only once every database
    /// migrated).
    pub async fn migrate(&self) -> Migration {
        let databases = self.migrate_schema().await;
        let membership = match databases.iter().find(|(_, r)| r.is_err()) {
            Some((name, Err(e))) => Err(Refusal::new(
                Reason::DatabaseUnanswered,
                format!("the cluster's membership is recorded only once every configured database is migrated; \"{name}\": {e}"),
            )
            .hint("run `segmint migrate` again once every configured database answers")
            .into()),
            _ => self.record_membership().await,
        };
        Migration {
            databases,
            membership,
        }
    }

    /// Applies pending migrations to every database; one line per database.
    pub async fn migrate_schema(&self) -> Vec<(String, Result<Vec<String>, DbError>)> {
        let results = self.on_all(|db| db.migrate()).await;
        self.names.iter().cloned().zip(results).collect()
    }

    /// Every biz row of every database.
    pub async fn list_bizs(&self) -> Vec<(String, Result<Vec<BizRow>, DbError>)> {
        let results = self.on_all(|db| db.bizs()).await;
        self.names.iter().cloned().zip(results).collect()
    }

    /// Reads `biz` on every database; every one must answer.
    pub(super) async fn biz_everywhere(
        &self,
        biz: &BizTag,
    ) -> Result<Vec<Option<BizRow>>, StoreError> {
        self.all_answer(|db| db.biz(biz.as_str())).await
    }

    /// Runs `op` on every database, all of which must answer: else the refusal of the
    /// first database that did not ([`unreachable`]).
    pub(super) async fn all_answer<'a, T, F>(
        &'a self,
        op: impl Fn(&'a dyn SegmentStore) -> F,
    ) -> Result<Vec<T>, StoreError>
    where
        F: Future<Output = Result<T, DbError>> + 'a,
    {
        self.on_all(op)
            .await
            .into_iter()
            .zip(&self.names)
            .map(|(r, name)| r.map_err(|e| unreachable(name, &e)))
            .collect()
    }

    /// Inserts `biz` into every database: first ID `start` (or the next one of its
    /// class), segments of `step`, restricted to the class `within` if given (odd-only
    /// is `1 mod 2`). Returns one report line per database.
    ///
    /// # Errors
    /// [`StoreError::Refused`] when a database is unreachable, the biz exists in some
    /// or all databases, or the parameters are invalid; nothing is changed then.
    pub async fn add_biz(
        &self,
        biz: &BizTag,
        step: i64,
        start: i64,
        within: Option<Residue>,
    ) -> Result<Vec<String>, StoreError> {
        self.add_described_biz(biz, step, start, within, "").await
    }

    /// [`Cluster::add_biz`] with a description stored in every row.
    ///
    /// # Errors
    /// As [`Cluster::add_biz`].
    pub async fn add_described_biz(
        &self,
        biz: &BizTag,
        step: i64,
        start: i64,
        within: Option<Residue>,
        description: &str,
    ) -> Result<Vec<String>, StoreError> {
        self.add_shaped_biz(biz, step, start, within, description, None)
            .await
    }

    /// [`Cluster::add_described_biz`] with the look of its IDs: `shape` gives the order's
    /// name and domain and the format (its key, block and restriction are filled in
    /// here: a new random key, the step's worth of indexes, `within`). The shape row is
    /// written to every database before any biz row, so that no server ever reads the
    /// biz without its shape.
    ///
    /// # Errors
    /// As [`Cluster::add_biz`]; also when the shape is invalid, the first segment does
    /// not fit an opaque domain, or the format's width cannot hold the biz's IDs.
    pub async fn add_shaped_biz(
        &self,
        biz: &BizTag,
        step: i64,
        start: i64,
        within: Option<Residue>,
        description: &str,
        shape: Option<ShapeRow>,
    ) -> Result<Vec<String>, StoreError> {
        let add = biz_add::BizAdd {
            biz,
            step,
            start,
            within,
            description,
        };
        let shape = shape.map(|row| checked_shape(&add, row)).transpose()?;
        biz_add::check(&add).map_err(|e| refused(biz, e))?;
        let epoch = self.layout_for_writes().await?;
        // The databases of the layout in force, each with its class there.
        let members: Vec<(usize, Residue)> = (0..self.list.len())
            .filter_map(|i| Some((i, self.class_of(i)?)))
            .collect();
        let existing = self.biz_everywhere(biz).await?;
        let read: Vec<biz_add::Member> = members
            .iter()
            .map(|&(i, class)| biz_add::Member {
                name: &self.names[i],
                class,
                has_biz: existing[i].is_some(),
            })
            .collect();
        let rows = biz_add::plan(&add, &read, epoch).map_err(|e| refused(biz, e))?;
        let sequence = shape
            .as_ref()
            .is_some_and(|s| s.id_order == crate::store::SEQUENCE);
        if sequence {
            self.refuse_leftover_sections(biz, &members).await?;
        }
        let mut report = Vec::with_capacity(rows.len() + 1);
        if let Some(shape) = &shape {
            self.put_shapes(shape, &members).await?;
            report.push(shape_line(biz, step, shape));
        }
        let dbs: Vec<usize> = members.iter().map(|&(i, _)| i).collect();
        self.insert_biz_rows(&add, sequence, &dbs, &rows, report)
            .await
    }

    /// Writes the shape row of a new biz to each member: no database holds a row of
    /// the biz (checked before), so a shape row there is left from an interrupted
    /// `biz add`, and is replaced.
    async fn put_shapes(
        &self,
        shape: &ShapeRow,
        members: &[(usize, Residue)],
    ) -> Result<(), StoreError> {
        for db in members.iter().map(|&(i, _)| &self.list[i]) {
            if let Err(e) = db.store.put_shape(shape).await {
                return Err(Refusal::new(
                    Reason::WriteFailed,
                    format!(
                        "database \"{}\": FAILED writing the shape: {e}; no biz row was written, and shape rows without a biz are ignored",
                        db.name
                    ),
                )
                .hint("run the command again: it replaces a shape row left without a biz")
                .into());
            }
        }
        Ok(())
    }

    /// Inserts the planned `rows` of a new biz, one on each of `dbs` in order, after
    /// the lines of `report`; stops at the first database that fails or whose layout
    /// moved on, with the lines so far.
    async fn insert_biz_rows(
        &self,
        add: &biz_add::BizAdd<'_>,
        sequence: bool,
        dbs: &[usize],
        rows: &[BizRow],
        mut report: Vec<String>,
    ) -> Result<Vec<String>, StoreError> {
        let (biz, start, step) = (add.biz, add.start, add.step);
        let mut changed = Vec::with_capacity(rows.len());
        for (db, row) in dbs.iter().map(|&i| &self.list[i]).zip(rows) {
            let line = match db.store.insert_biz(row).await {
                Ok(Inserted::Yes) => {
                    changed.push(db.name.as_str());
                    match sequence {
                        true => format!("\"{}\": added biz `{biz}`", db.name),
                        false => format!(
                            "\"{}\": added biz `{biz}`: IDs ≡ {} mod {}, from {start}, step {step}",
                            db.name, row.remainder, row.delta
                        ),
                    }
                }
                Ok(Inserted::Exists) => format!(
                    "\"{}\": biz `{biz}` appeared meanwhile; left as it is",
                    db.name
                ),
                Ok(Inserted::LayoutAbove(epoch)) => {
                    audit("biz add", biz.as_str(), "", &changed);
                    report.push(format!("\"{}\": {}", db.name, layout_began(epoch)));
                    let stopped = format!("biz `{biz}`: stopped at database \"{}\"", db.name);
                    return Err(change_began(stopped, epoch, report));
                }
                Err(e) => {
                    audit("biz add", biz.as_str(), "", &changed);
                    report.push(format!("\"{}\": FAILED: {e}", db.name));
                    return Err(Refusal::new(
                        Reason::WriteFailed,
                        format!(
                            "biz `{biz}`: stopped at database \"{}\", which failed",
                            db.name
                        ),
                    )
                    .notes(report)
                    .into());
                }
            };
            report.push(line);
        }
        audit("biz add", biz.as_str(), "", &changed);
        Ok(report)
    }

    /// Refuses a sequence biz `biz` while section rows of an earlier biz of that name
    /// remain on a member (its rows deleted by hand): their bounds would count for
    /// keys that now fall in other sections, and numbers would go back.
    async fn refuse_leftover_sections(
        &self,
        biz: &BizTag,
        members: &[(usize, Residue)],
    ) -> Result<(), StoreError> {
        for &(i, _) in members {
            let db = &self.list[i];
            let rows = self
                .call(i, db.store.sections(biz.as_str()))
                .await
                .map_err(|e| unreachable(&db.name, &e))?;
            if !rows.is_empty() {
                return Err(Refusal::new(
                    Reason::BizExists,
                    format!(
                        "sequence biz `{biz}`: database \"{}\" still holds {} section rows of an earlier biz of that name; a biz added again over them could answer numbers below earlier ones; nothing changed",
                        db.name,
                        rows.len()
                    ),
                )
                .hint("choose another name (or delete those rows only once no key of the earlier biz will be asked for again)")
                .into());
            }
        }
        Ok(())
    }

    /// Brings database `name` back after it went back in time (a restore from backup, a
    /// promoted replica): raises each of its biz rows that is behind the witnesses in
    /// the other databases to a version above theirs and a `max_id` at or above every ID
    /// they say was reserved from it (and at or above `above`, if given: evidence the
    /// operator has, e.g. the highest ID in the application's tables). Running servers
    /// use the database again at their next catalog refresh. Returns one line per row.
    ///
    /// # Errors
    /// [`StoreError::Refused`] when `name` is not configured or a database cannot be
    /// read (every other database must answer: each may hold the only witness):
    /// nothing is changed then; or when a raise fails midway: the message lists the
    /// rows raised before it.
    pub async fn raise_database(
        &self,
        name: &str,
        above: Option<i64>,
    ) -> Result<Vec<String>, StoreError> {
        let t = self.names.iter().position(|n| n == name).ok_or_else(|| {
            Refusal::new(
                Reason::DatabaseUnknown,
                format!("no database named \"{name}\" is configured"),
            )
            .hint("`segmint db list` shows the databases configured")
        })?;
        let mut evidence = Evidence::default();
        for (k, read) in self
            .on_all(|db| db.witnesses())
            .await
            .into_iter()
            .enumerate()
        {
            if k == t {
                continue;
            }
            for w in read.map_err(|e| unreachable(&self.names[k], &e))? {
                if w.database == name {
                    evidence.learn(t, &w.biz, w.mark);
                }
            }
        }
        self.load_layout().await;
        let (done, pending) = self.layouts();
        let layouts = db_fence::Layouts {
            done: done.map(|d| d.epoch),
            pending: pending.map(|p| p.epoch),
        };
        let rows = self
            .call(t, self.list[t].store.bizs())
            .await
            .map_err(|e| unreachable(name, &e))?;
        let mut report = Vec::with_capacity(rows.len());
        let mut raised = Vec::new();
        for row in rows {
            let plan = db_fence::plan_row(&row, evidence.mark(t, &row.biz_type), above, layouts);
            match self.fence_row(t, &row, plan).await {
                Ok((line, witness)) => {
                    report.push(line);
                    raised.extend(witness);
                }
                // Rows raised before stay raised (that is safe); say which they were.
                Err(e) => {
                    audit_fence(name, &raised);
                    let biz = &row.biz_type;
                    report.push(format!("\"{name}\": biz `{biz}` FAILED: {e}"));
                    return Err(Refusal::new(
                        Reason::WriteFailed,
                        format!(
                            "database \"{name}\": stopped at biz `{biz}`; the rows raised before it stay raised"
                        ),
                    )
                    .hint("run the command again")
                    .notes(report)
                    .into());
                }
            }
        }
        audit_fence(name, &raised);
        let raised = &raised;
        let others = (0..self.list.len()).filter(|&k| k != t);
        join_all(others.map(|k| self.call(k, self.list[k].store.witness(raised)))).await;
        Ok(report)
    }

    /// Carries out the fence's plan for `row` of database `t`: the report's line, and
    /// the witness of the new mark when the row was raised.
    async fn fence_row(
        &self,
        t: usize,
        row: &BizRow,
        plan: db_fence::RowPlan,
    ) -> Result<(String, Option<Witness>), DbError> {
        let (name, biz) = (&self.names[t], &row.biz_type);
        let store = &self.list[t].store;
        let (version, max_id, done) = match plan {
            db_fence::RowPlan::Keep => {
                return Ok((
                    format!(
                        "\"{name}\": biz `{biz}` at version {} (max_id {}) is not behind any evidence; left as it is",
                        row.version, row.max_id
                    ),
                    None,
                ));
            }
            db_fence::RowPlan::NoVersionLeft => {
                return Ok((
                    format!(
                        "\"{name}\": biz `{biz}` has no version left to raise to; left as it is"
                    ),
                    None,
                ));
            }
            db_fence::RowPlan::Raise { version, max_id } => {
                let write = store.raise(biz, row.version, row.max_id, version, max_id);
                (version, max_id, self.call(t, write).await?.is_some())
            }
            db_fence::RowPlan::RaiseFrozen(to) => {
                let write = store.reclass(biz, row.version, row.max_id, &to);
                (to.version, to.max_id, self.call(t, write).await?.is_some())
            }
        };
        if !done {
            return Ok((
                format!(
                    "\"{name}\": biz `{biz}` changed while being raised; left as it is: run the command again"
                ),
                None,
            ));
        }
        let line = format!(
            "\"{name}\": biz `{biz}` raised from version {} (max_id {}) to version {version} (max_id {max_id})",
            row.version, row.max_id
        );
        let witness = Witness {
            database: name.to_string(),
            biz: biz.to_string(),
            mark: Mark {
                version,
                max_id,
                high_id: max_id,
            },
        };
        Ok((line, Some(witness)))
    }
}

/// Logs one admin change for the audit trail: the command, the biz, the token's hash
/// prefix (never the token; empty for a biz change) and the databases changed. Who ran
/// the command is unknown to segmint: the operator's shell or deployment tool says.
pub(super) fn audit(command: &str, biz: &str, token: &str, databases: &[&str]) {
    tracing::info!(
        target: "segmint::audit",
        command,
        biz,
        token,
        databases = %databases.join(","),
        "admin change"
    );
}

/// The audit line of a fence of database `name` that raised the rows of `raised`.
fn audit_fence(name: &str, raised: &[Witness]) {
    let bizs: Vec<&str> = raised.iter().map(|w| w.biz.as_str()).collect();
    let changed: &[&str] = if raised.is_empty() { &[] } else { &[name] };
    audit("db fence", &bizs.join(","), "", changed);
}

/// A new biz's shape row, filled in (its biz, restriction, block and a new random key)
/// and checked: the first segment fits an opaque domain and the format's width holds
/// the biz's IDs.
fn checked_shape(add: &biz_add::BizAdd<'_>, mut row: ShapeRow) -> Result<ShapeRow, StoreError> {
    let refuse = |why: String| {
        StoreError::from(Refusal::new(
            Reason::InvalidShape,
            format!("{why}; nothing changed"),
        ))
    };
    let (step, start) = (add.step, add.start);
    let restriction = add.within.unwrap_or(Residue::ALL);
    row.biz_type = add.biz.to_string();
    row.within_delta = restriction.delta();
    row.within_remainder = restriction.remainder();
    row.block = (step / restriction.delta()).max(1);
    row.key = format!("{:032x}", rand::random::<u128>());
    let look = crate::store::catalog::biz_shape(&row).map_err(&refuse)?;
    let last_of_first_segment = start.saturating_sub(1).saturating_add(step);
    if let crate::shape::IdOrder::Opaque { domain } = look.ordering.order()
        && u64::try_from(last_of_first_segment).unwrap_or(u64::MAX) >= domain
    {
        return Err(refuse(format!(
            "the first segment (up to {last_of_first_segment}) does not fit the opaque domain (IDs below {domain})"
        )));
    }
    let widest = match look.ordering.order() {
        crate::shape::IdOrder::Opaque { domain } => i64::try_from(domain - 1).unwrap_or(i64::MAX),
        _ => last_of_first_segment,
    };
    // A periodic counter's room was checked with its period (below the modulus, the
    // last period's IDs within 63 bits).
    if look.period.is_none() {
        look.format
            .encode(widest)
            .map_err(|e| refuse(format!("--width is too small for the biz's IDs: {e}")))?;
    }
    Ok(row)
}

/// The plan's refusal of `biz add` as the store's.
fn refused(biz: &BizTag, refused: biz_add::Refused) -> StoreError {
    let list = |names: &[String]| {
        names
            .iter()
            .map(|n| format!("\"{n}\""))
            .collect::<Vec<_>>()
            .join(", ")
    };
    match refused {
        biz_add::Refused::Invalid(what) => Refusal::new(Reason::InvalidArgument, what).into(),
        biz_add::Refused::Exists => Refusal::new(
            Reason::BizExists,
            format!("biz `{biz}` already exists on every database; nothing changed"),
        )
        .into(),
        biz_add::Refused::Partial { have, lack } => Refusal::new(
            Reason::BizPartial,
            format!(
                "biz `{biz}` exists on {} but not on {}; nothing changed",
                list(&have),
                list(&lack)
            ),
        )
        .hint("fix the rows by hand (they must have disjoint residue classes)")
        .into(),
    }
}

/// The report's line for a new biz's shape.
fn shape_line(biz: &BizTag, step: i64, shape: &ShapeRow) -> String {
    if shape.id_order == crate::store::SEQUENCE {
        return format!(
            "biz `{biz}`: a sequence of per-key numbers over {} sections, each raised {step} at a time (no IDs)",
            shape.domain
        );
    }
    let check = if shape.check_char {
        " with a check character"
    } else {
        ""
    };
    let written = if let Some((reset, zone, start, pattern)) =
        crate::store::catalog::period_parts(&shape.period)
    {
        format!(
            "as {pattern} in base {}{check}, the counter restarting {reset} at {start} ({zone})",
            shape.base
        )
    } else if shape.prefix.is_empty() && shape.width == 0 && shape.base == 10 && !shape.check_char {
        "as plain numbers".to_owned()
    } else {
        let digits = if shape.width > 0 {
            format!("<{} digits>", shape.width)
        } else {
            "<digits>".into()
        };
        format!("as {}{digits} in base {}{check}", shape.prefix, shape.base)
    };
    format!("biz `{biz}`: {} IDs, written {written}", shape.id_order)
}
