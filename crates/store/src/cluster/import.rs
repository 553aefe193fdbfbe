//! `segmint import`: bizs of Tinyid or Leaf set up so that each keeps issuing above
//! every ID the old system could have issued.

use std::collections::HashMap;

use super::Cluster;
use super::admin::{audit, change_began, layout_began, unreachable};
use crate::import::{self, Import, Member, Plan};
use crate::store::{BizRow, DbError, Inserted, Reason, Refusal, StoreError};

/// What an import did (or, in a dry run, would do): one line per biz and database.
#[derive(Debug, Default)]
pub struct ImportReport {
    /// One line per biz and database: created, raised, unchanged or refused (and why).
    pub lines: Vec<String>,
    /// The bizs refused; the others were imported.
    pub refused: Vec<String>,
    /// How many rows were (or would be) created or raised.
    pub changes: usize,
}

/// Bizs imported per transaction on each database: a chunk is planned, its rows
/// created in one statement per database, then raised and described one by one.
const IMPORT_BATCH: usize = 2_000;

impl Cluster {
    /// Imports `imports` (see [`crate::import::parse`]) into every database: a missing
    /// row is created with the old `max_id` (its first ID is above it), in the database's
    /// class narrowed to the biz's old class; a row below the old `max_id` is raised to
    /// it; a row already there is left alone. A biz whose row on some database has
    /// another class or a higher `max_id` is refused on every database. With `dry_run`,
    /// nothing is written.
    ///
    /// # Errors
    /// [`StoreError::Refused`] when a database cannot be read (nothing is changed then)
    /// or a write fails midway (the message lists what was done before it; running the
    /// import again completes it).
    pub async fn import(
        &self,
        imports: &[Import],
        dry_run: bool,
    ) -> Result<ImportReport, StoreError> {
        let epoch = self.layout_for_writes().await?;
        let mut existing: Vec<HashMap<String, BizRow>> = Vec::with_capacity(self.list.len());
        for (result, name) in self
            .on_all(|db| db.bizs())
            .await
            .into_iter()
            .zip(&self.names)
        {
            let rows = result.map_err(|e| unreachable(name, &e))?;
            existing.push(
                rows.into_iter()
                    .map(|r| (r.biz_type.to_string(), r))
                    .collect(),
            );
        }
        let mut report = ImportReport::default();
        for chunk in imports.chunks(IMPORT_BATCH) {
            let planned = self.plan_chunk(chunk, epoch, &existing, &mut report);
            let created = self.create_chunk(&planned, dry_run, &mut report).await?;
            self.finish_chunk(planned, &created, dry_run, &mut report)
                .await?;
        }
        Ok(report)
    }

    /// The plans of the bizs of `chunk` on every database
    /// ([`import::plan`](crate::import::plan)); a biz refused by any database is
    /// reported and left out.
    fn plan_chunk<'a>(
        &self,
        chunk: &'a [Import],
        epoch: i64,
        existing: &[HashMap<String, BizRow>],
        report: &mut ImportReport,
    ) -> Vec<(&'a Import, Vec<Plan>)> {
        let mut planned = Vec::with_capacity(chunk.len());
        for import in chunk {
            let biz = import.biz.as_str();
            let members: Vec<Member> = (0..self.list.len())
                .zip(existing)
                .map(|(i, rows)| Member {
                    name: &self.names[i],
                    class: self.class_of(i),
                    row: rows.get(biz),
                })
                .collect();
            match import::plan(import, &members, epoch) {
                Ok(plans) => planned.push((import, plans)),
                Err(lines) => {
                    report.lines.extend(lines);
                    report.refused.push(biz.to_string());
                }
            }
        }
        planned
    }

    /// Inserts the rows `planned` creates, one transaction per database for the whole
    /// chunk ([`SegmentStore::insert_bizs`](crate::store::SegmentStore::insert_bizs)):
    /// what became of each, by database and biz (every one `Yes` in a dry run).
    ///
    /// # Errors
    /// As [`Cluster::import`]: a database that fails, or holds a layout claimed since.
    async fn create_chunk(
        &self,
        planned: &[(&Import, Vec<Plan>)],
        dry_run: bool,
        report: &mut ImportReport,
    ) -> Result<Vec<HashMap<String, Inserted>>, StoreError> {
        let mut created: Vec<HashMap<String, Inserted>> = Vec::new();
        for (i, name) in self.names.iter().enumerate() {
            let rows: Vec<BizRow> = planned
                .iter()
                .filter_map(|(_, plans)| match &plans[i] {
                    Plan::Create(row) => Some(row.clone()),
                    _ => None,
                })
                .collect();
            let results = match (dry_run, rows.first()) {
                (_, None) => Vec::new(),
                (true, _) => vec![Inserted::Yes; rows.len()],
                (false, Some(first)) => {
                    let first = first.biz_type;
                    match self.step(i, self.list[i].store.insert_bizs(&rows)).await {
                        Ok(results) => results,
                        Err(e) => {
                            self.report_created(planned, &created, report);
                            return Err(failed_midway(report, name, &first, e));
                        }
                    }
                }
            };
            if let Some(Inserted::LayoutAbove(epoch)) = results.first() {
                let first = &rows[0].biz_type;
                self.report_created(planned, &created, report);
                report.lines.push(format!(
                    "\"{name}\": biz `{first}`: {}",
                    layout_began(*epoch)
                ));
                let stopped = format!("the import stopped at biz `{first}` on database \"{name}\"");
                return Err(change_began(stopped, *epoch, report.lines.clone()));
            }
            created.push(
                rows.into_iter()
                    .map(|r| r.biz_type.to_string())
                    .zip(results)
                    .collect(),
            );
        }
        Ok(created)
    }

    /// Reports the rows of `planned` created on the databases of `created` (those
    /// written before a failure), for the error's lines.
    fn report_created(
        &self,
        planned: &[(&Import, Vec<Plan>)],
        created: &[HashMap<String, Inserted>],
        report: &mut ImportReport,
    ) {
        for (import, plans) in planned {
            for (i, done) in created.iter().enumerate() {
                if let (Plan::Create(row), Some(Inserted::Yes)) =
                    (&plans[i], done.get(import.biz.as_str()))
                {
                    report.lines.push(created_line(&self.names[i], row, ""));
                }
            }
        }
    }

    /// Reports the bizs of `planned` in order, one line per database, raising and
    /// describing rows as planned (the rows to create were inserted by
    /// [`Cluster::create_chunk`], which said what became of each in `created`).
    async fn finish_chunk(
        &self,
        planned: Vec<(&Import, Vec<Plan>)>,
        created: &[HashMap<String, Inserted>],
        dry_run: bool,
        report: &mut ImportReport,
    ) -> Result<(), StoreError> {
        let would = if dry_run { "would be " } else { "" };
        for (import, plans) in planned {
            let biz = import.biz.as_str();
            let mut changed = Vec::new();
            for (i, plan) in plans.into_iter().enumerate() {
                let name = &self.names[i];
                // A row that exists takes the old system's description too, when it has one.
                let describe = match &plan {
                    Plan::Raise(row) | Plan::Unchanged(row)
                        if !import.description.is_empty()
                            && *row.description != *import.description =>
                    {
                        Some(row.description.clone())
                    }
                    _ => None,
                };
                let mut line = match plan {
                    Plan::Unchanged(row) if row.max_id > import.max_id => format!(
                        "\"{name}\": biz `{biz}`: unchanged (max_id {}, above the file's {}: it issues none of the IDs the file's system issued)",
                        row.max_id, import.max_id
                    ),
                    Plan::Unchanged(row) => {
                        format!("\"{name}\": biz `{biz}`: unchanged (max_id {})", row.max_id)
                    }
                    Plan::Create(row) => {
                        report.changes += 1;
                        match created[i].get(biz) {
                            Some(Inserted::Yes) => {
                                changed.push(name.as_str());
                                created_line(name, &row, would)
                            }
                            _ => format!(
                                "\"{name}\": biz `{biz}`: appeared meanwhile; left as it is: run the import again"
                            ),
                        }
                    }
                    Plan::Raise(row) => {
                        report.changes += 1;
                        let written = match dry_run {
                            true => true,
                            false => self
                                .call(
                                    i,
                                    self.list[i].store.raise(
                                        biz,
                                        row.version,
                                        row.max_id,
                                        row.version + 1,
                                        import.max_id,
                                    ),
                                )
                                .await
                                .map_err(|e| failed_midway(report, name, biz, e))?
                                .is_some(),
                        };
                        if written {
                            changed.push(name.as_str());
                        }
                        match written {
                            true => format!(
                                "\"{name}\": biz `{biz}`: {would}raised: max_id {} to {}",
                                row.max_id, import.max_id
                            ),
                            false => format!(
                                "\"{name}\": biz `{biz}`: changed meanwhile; left as it is: run the import again"
                            ),
                        }
                    }
                };
                if let Some(old) = describe {
                    report.changes += 1;
                    if !dry_run {
                        self.call(i, self.list[i].store.describe(biz, &import.description))
                            .await
                            .map_err(|e| failed_midway(report, name, biz, e))?;
                        if !changed.contains(&name.as_str()) {
                            changed.push(name.as_str());
                        }
                    }
                    line.push_str(&format!("; description {would}set (was {old:?})"));
                }
                report.lines.push(line);
            }
            if !dry_run {
                audit("import", biz, "", &changed);
            }
        }
        Ok(())
    }
}

/// The report line of `row` created (or, with `would`, to be created) on database
/// `name`.
fn created_line(name: &str, row: &BizRow, would: &str) -> String {
    format!(
        "\"{name}\": biz `{}`: {would}created: IDs ≡ {} mod {} above {}, step {}",
        row.biz_type, row.remainder, row.delta, row.max_id, row.step
    )
}

/// The error of a write that failed midway, after the lines of what was done.
fn failed_midway(report: &mut ImportReport, name: &str, biz: &str, e: DbError) -> StoreError {
    report
        .lines
        .push(format!("\"{name}\": biz `{biz}`: FAILED: {e}"));
    Refusal::new(
        Reason::WriteFailed,
        format!("the import stopped at biz `{biz}` on database \"{name}\", which failed"),
    )
    .hint("run the import again")
    .notes(report.lines.clone())
    .into()
}
