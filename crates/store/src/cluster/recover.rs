//! `segmint biz recover`: a biz whose counter restarts each period, with its rows
//! moved into a later period than the databases' clocks are in (a clock that was
//! ahead), serves the periods before that one again, from interim rows.
//!
//! The biz's own rows are not touched: their `max_id` only grows, and lowering it would
//! fence the databases as gone back in time (rightly: the numbers above are issued).
//! Instead the periods before the one the rows are in (`until`) come from interim rows,
//! a biz of their own named `BIZ#UNTIL` (`#` is in no name a user gives) with the same
//! classes and shape, starting above what the current period issued; the biz's shape
//! then says so (`;interim=UNTIL` after its pattern), and servers reserve each period
//! before `until` from the interim rows. From `until` on, the biz's own rows issue again,
//! above every number they issued in it.

use super::Store;
use crate::biz::BizTag;
use crate::store::{Reason, Refusal, ShapeRow, StoreError};

impl Store {
    /// Recovers `biz` (see the module's text). `above`: the highest number of the
    /// current period the operator's system holds (the interim rows start above it);
    /// `None`: the current period issues nothing more, the next ones do.
    ///
    /// # Errors
    /// A [`Refusal`] when the biz is not periodic, its rows are not all ahead of the
    /// databases' clocks, it was recovered already for another period, `above` lies
    /// outside the current period, or a database does not answer or fails a write
    /// (the command is run again: each step it finds done is skipped).
    pub async fn recover_period(
        &self,
        biz: &BizTag,
        above: Option<i64>,
    ) -> Result<Vec<String>, StoreError> {
        let nothing = |why: String| -> StoreError {
            Refusal::new(Reason::NothingToRecover, format!("{why}; nothing changed")).into()
        };
        let catalog = self.refresh_since(self.clock.now()).await;
        let entry = catalog
            .biz(biz.as_str())
            .ok_or_else(|| StoreError::NotFound(biz.to_string()))?;
        let Some(period) = entry.shape.as_ref().and_then(|s| s.period.clone()) else {
            return Err(nothing(format!(
                "biz `{biz}` does not restart its counter each period"
            )));
        };
        // The rows and shape rows of every database of the biz, read now.
        let members: Vec<usize> = entry.classes.iter().map(|&(i, _)| i).collect();
        let mut rows = Vec::with_capacity(members.len());
        let mut shapes: Vec<ShapeRow> = Vec::new();
        for &i in &members {
            let db = &self.dbs.list[i];
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
            rows.push((i, row));
            shapes.extend(
                read.shapes
                    .into_iter()
                    .filter(|s| s.biz_type == biz.as_str()),
            );
        }
        let Some(shape) = shapes.first().cloned() else {
            return Err(nothing(format!("biz `{biz}` has no shape row")));
        };
        if rows.is_empty() {
            return Err(nothing(format!(
                "biz `{biz}` has no row that gives out segments (a layout change is moving it)"
            )));
        }
        // The current period, by the latest database clock read.
        let ahead = self.clock_ahead_ms().unwrap_or(0);
        let now = period.code_at(self.clock.unix_ms().saturating_sub(ahead));
        let until = rows
            .iter()
            .map(|(_, r)| r.max_id.div_euclid(period.modulus()))
            .min()
            .unwrap_or(now);
        if let Some(done) = period.interim_until() {
            return Err(nothing(format!(
                "biz `{biz}` was recovered already: its periods before {} come from `{}`",
                period.label(done),
                biz.interim(done)
            )));
        }
        if until <= now {
            let lowest = rows
                .iter()
                .find(|(_, r)| r.max_id.div_euclid(period.modulus()) == until)
                .map_or("?", |(i, _)| self.dbs.names[*i].as_str());
            return Err(nothing(format!(
                "biz `{biz}`: database \"{lowest}\"'s row is in period {}, not ahead of the databases' clocks (period {}): the biz serves the current period from it",
                period.label(until),
                period.label(now)
            )));
        }
        let window = period.window(now);
        let start_after = match above {
            None => window.ceiling,
            Some(n) if n > window.ceiling => {
                return Err(Refusal::new(
                    Reason::InvalidArgument,
                    format!(
                        "--above {n} lies after period {} (its numbers end at {}); nothing changed",
                        period.label(now),
                        window.ceiling
                    ),
                )
                .into());
            }
            Some(n) => n.max(window.floor),
        };
        let interim = biz.interim(until);
        if interim.as_str().len() > 63 {
            return Err(nothing(format!(
                "the interim rows' name `{interim}` is longer than 63 characters"
            )));
        }
        let mut report = Vec::new();
        if catalog.biz(interim.as_str()).is_none() {
            let mut interim_shape = shape.clone();
            interim_shape.biz_type = interim.to_string();
            let within = crate::segment::Residue::new(shape.within_delta, shape.within_remainder)
                .ok()
                .filter(|r| r.delta() > 1);
            let step = rows.iter().map(|(_, r)| r.step).max().unwrap_or(1);
            report.extend(
                self.add_shaped_biz(
                    &interim,
                    step,
                    start_after + 1,
                    within,
                    &format!(
                        "interim rows of `{biz}`: its periods before {} (segmint biz recover)",
                        period.label(until)
                    ),
                    Some(interim_shape),
                )
                .await?,
            );
        }
        let mut recovered = shape;
        recovered.period = format!("{};interim={until}", recovered.period);
        for &i in &members {
            let db = &self.dbs.list[i];
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
        report.push(format!(
            "biz `{biz}`: its rows are in period {} (ahead of the databases' clocks, in period {}); the periods before it now come from `{interim}`, the current one above {start_after}; from {} on, the biz's own rows issue again, above every number they issued",
            period.label(until),
            period.label(now),
            period.label(until)
        ));
        Ok(report)
    }
}
