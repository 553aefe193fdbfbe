//! `segmint biz recover` carried out: the store reads the biz's rows and the databases'
//! clocks, [`recover`](crate::recover) checks and plans (its docs say what a recovery
//! is), and the store writes the interim rows and the marked shape.

use super::Cluster;
use crate::Catalog;
use crate::biz::BizTag;
use crate::recover::{self, Refused};
use crate::store::{Reason, Refusal, ShapeRow, StoreError};

impl Cluster {
    /// Recovers `biz` (see [`recover`](crate::recover)). `above`: the highest number
    /// of the current period the operator's system holds (the interim rows start above
    /// it); `None`: the current period issues nothing more, the next ones do.
    ///
    /// # Errors
    /// A [`Refusal`] when the biz is not periodic, its rows are not all ahead of the
    /// databases' clocks, it was recovered already for another period, `above` lies
    /// outside the current period, or a database does not answer or fails a write
    /// (the command is run again: each step it finds done is skipped).
    pub async fn recover_period(
        &self,
        catalog: &Catalog,
        biz: &BizTag,
        above: Option<i64>,
    ) -> Result<Vec<String>, StoreError> {
        let entry = catalog
            .biz(biz.as_str())
            .ok_or_else(|| StoreError::NotFound(biz.to_string()))?;
        let period = recover::check(biz, entry.shape.as_ref().and_then(|s| s.period.as_ref()))
            .map_err(refused)?;
        let members: Vec<usize> = entry.classes.iter().map(|&(i, _)| i).collect();
        let (rows, shape) = self.rows_to_recover(biz, &members).await?;
        // The current period, by the latest database clock read.
        let ahead = self.clock_ahead_ms().unwrap_or(0);
        let now = period.code_at(self.clock.unix_ms().saturating_sub(ahead));
        let read: Vec<recover::Row> = rows
            .iter()
            .map(|&(i, max_id, step)| recover::Row {
                name: &self.names[i],
                max_id,
                step,
            })
            .collect();
        let plan = recover::plan(biz, period, &read, now, above).map_err(refused)?;
        let mut report = Vec::new();
        if catalog.biz(plan.interim.as_str()).is_none() {
            let mut interim_shape = shape.clone();
            interim_shape.biz_type = plan.interim.to_string();
            let within = crate::segment::Residue::new(shape.within_delta, shape.within_remainder)
                .ok()
                .filter(|r| r.delta() > 1);
            report.extend(
                self.add_shaped_biz(
                    &plan.interim,
                    plan.step,
                    plan.start_after + 1,
                    within,
                    &plan.description,
                    Some(interim_shape),
                )
                .await?,
            );
        }
        let mut recovered = shape;
        recovered.period = plan.marked(&recovered.period);
        for &i in &members {
            let db = &self.list[i];
            self.timed(db.store.put_shape(&recovered))
                .await
                .map_err(|e| {
                    StoreError::from(
                        Refusal::new(
                            Reason::WriteFailed,
                            format!(
                                "database \"{}\": FAILED writing the shape of `{biz}`: {e}",
                                db.name
                            ),
                        )
                        .notes(report.clone())
                        .hint("run the command again: it skips what is done"),
                    )
                })?;
        }
        report.push(plan.done);
        Ok(report)
    }

    /// The row (database, `max_id`, step) of `biz` on each of `members`, read now with
    /// each one's clock, and the biz's shape row.
    ///
    /// # Errors
    /// A [`Refusal`] when a database does not answer or the biz has no shape row;
    /// [`StoreError::NotFound`] when a member lacks the biz's row.
    async fn rows_to_recover(
        &self,
        biz: &BizTag,
        members: &[usize],
    ) -> Result<(Vec<(usize, i64, i64)>, ShapeRow), StoreError> {
        let mut rows = Vec::with_capacity(members.len());
        let mut shapes: Vec<ShapeRow> = Vec::new();
        for &i in members {
            let db = &self.list[i];
            self.read_clock(i).await;
            let read = self
                .timed(db.store.catalog_of(biz.as_str(), None, &[]))
                .await
                .map_err(|e| {
                    StoreError::from(Refusal::new(
                        Reason::DatabaseUnanswered,
                        format!(
                            "database \"{}\" did not answer: {e}; nothing changed",
                            db.name
                        ),
                    ))
                })?;
            let row = read
                .bizs
                .into_iter()
                .find(|r| r.biz_type.as_str() == biz.as_str())
                .ok_or_else(|| StoreError::NotFound(biz.to_string()))?;
            rows.push((i, row.max_id, row.step));
            shapes.extend(
                read.shapes
                    .into_iter()
                    .filter(|s| s.biz_type == biz.as_str()),
            );
        }
        match shapes.into_iter().next() {
            Some(shape) => Ok((rows, shape)),
            None => Err(refused(Refused::Nothing(format!(
                "biz `{biz}` has no shape row"
            )))),
        }
    }
}

/// The store's error for a recovery refused by its plan.
fn refused(refused: Refused) -> StoreError {
    match refused {
        Refused::Nothing(why) => {
            Refusal::new(Reason::NothingToRecover, format!("{why}; nothing changed")).into()
        }
        Refused::Invalid(what) => Refusal::new(Reason::InvalidArgument, what).into(),
    }
}
