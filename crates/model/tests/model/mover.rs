//! One biz's move to a layout (`Store::move_biz`), one database statement per step:
//! read every row, insert frozen placeholders where rows are missing, freeze every row
//! by compare-and-set (thawing what this pass froze when a race is lost), fence, switch.
//! Run by a command and by a server healing a change cut off.

use segmint_core::layout;
use segmint_core::segment::Residue;
use segmint_store::{BizRow, Reclass};

use crate::model::{Db, DbState, Lay, MarkT, Row, Sys, learn, to_mark};

/// Where a move is.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum MoveStep {
    /// Read the rows of every database of the change (at once, as `all_parts` does).
    Read,
    /// Insert the frozen placeholder `rows[k]` where the row was missing.
    Place { k: usize, rows: Vec<(Db, Row)> },
    /// Freeze `rows[k]`; `frozen` holds the rows frozen so far.
    Freeze {
        k: usize,
        rows: Vec<Row>,
        frozen: Vec<Row>,
        wanted: Vec<Option<Residue>>,
    },
    /// Thaw what this pass froze (from `k` on), then read again (or stop, for `stop`).
    Thaw {
        k: usize,
        rows: Vec<Row>,
        frozen: Vec<Row>,
        stop: Option<&'static str>,
    },
    /// Every row frozen: on the database `parts[k]`, record the other frozen rows as
    /// witnesses and read its witnesses of the biz into `fresh`; after the last, check
    /// the frozen rows against them and fence.
    Witnesses {
        k: usize,
        rows: Vec<Row>,
        frozen: Vec<Row>,
        wanted: Vec<Option<Residue>>,
        fresh: Vec<Option<MarkT>>,
    },
    /// Read every row again: each still as frozen (else it went back in time, or
    /// another change wrote it), then switch.
    Verify {
        rows: Vec<Row>,
        frozen: Vec<Row>,
        wanted: Vec<Option<Residue>>,
        fence: i64,
    },
    /// Switch each row of the new layout's databases (from `k` on) to its class at
    /// `fence`.
    Switch {
        k: usize,
        frozen: Vec<Row>,
        wanted: Vec<Option<Residue>>,
        fence: i64,
    },
}

/// A biz being moved to `to` over the databases `parts`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Mover {
    pub to: Lay,
    pub parts: Vec<Db>,
    /// Every epoch a row can be in (for the biz's restriction).
    pub layouts: Vec<Lay>,
    /// What the witnesses recorded of the biz's rows: `(max_id, version)`.
    pub witnessed: Vec<(i64, i64)>,
    /// What the move saw of each database's row (its own writes included).
    pub seen: Vec<Option<MarkT>>,
    /// Rounds left (`MOVE_ATTEMPTS`).
    pub attempts: u8,
    pub step: MoveStep,
}

/// What a step of a move came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moved {
    Going,
    Done,
    Stopped(&'static str),
}

impl Mover {
    pub fn new(
        sys: &Sys,
        to: Lay,
        parts: Vec<Db>,
        layouts: Vec<Lay>,
        witnessed: Vec<(i64, i64)>,
    ) -> Mover {
        Mover {
            to,
            parts,
            layouts,
            witnessed,
            seen: Vec::new(),
            attempts: sys.spec.attempts,
            step: MoveStep::Read,
        }
    }

    /// Runs one step against the databases.
    pub fn step(&mut self, sys: &Sys, dbs: &mut [DbState]) -> Moved {
        let step = std::mem::replace(&mut self.step, MoveStep::Read);
        match step {
            MoveStep::Read => self.read(sys, dbs),
            MoveStep::Place { k, rows } => {
                let (d, row) = rows[k];
                if dbs[d].row.is_none() {
                    dbs[d].row = Some(row);
                }
                if k + 1 < rows.len() {
                    self.step = MoveStep::Place { k: k + 1, rows };
                }
                Moved::Going
            }
            MoveStep::Freeze {
                k,
                rows,
                mut frozen,
                wanted,
            } => {
                let d = self.parts[k];
                let r = rows[k];
                let Some(done) = dbs[d].cas(r.version, r.max_id, r.freezing(true, self.to.epoch))
                else {
                    // A reservation (or another change) got in: give back, read again.
                    return self.thaw(0, rows, frozen, None);
                };
                if sys.spec.fixes.fresh_witnesses {
                    learn(&mut self.seen[k], done.mark());
                }
                frozen.push(done);
                if k + 1 < rows.len() {
                    self.step = MoveStep::Freeze {
                        k: k + 1,
                        rows,
                        frozen,
                        wanted,
                    };
                    return Moved::Going;
                }
                if sys.spec.fixes.fresh_witnesses {
                    self.step = MoveStep::Witnesses {
                        k: 0,
                        rows,
                        frozen,
                        wanted,
                        fresh: vec![None; self.parts.len()],
                    };
                    return Moved::Going;
                }
                let (fence, _) = layout::fence(
                    frozen
                        .iter()
                        .map(|r| (r.max_id, r.version))
                        .chain(self.witnessed.iter().copied()),
                );
                self.switch(0, frozen, wanted, fence)
            }
            MoveStep::Witnesses {
                k,
                rows,
                frozen,
                wanted,
                mut fresh,
            } => {
                // `Store::witness_freeze` on one database: `witness`, then
                // `witnesses_of`.
                let j = self.parts[k];
                for (q, &d) in self.parts.iter().enumerate() {
                    if d != j {
                        learn(&mut dbs[j].witness[d], frozen[q].mark());
                    }
                }
                for (q, &d) in self.parts.iter().enumerate() {
                    if let Some(w) = dbs[j].witness[d] {
                        learn(&mut fresh[q], to_mark(w));
                    }
                }
                if k + 1 < self.parts.len() {
                    self.step = MoveStep::Witnesses {
                        k: k + 1,
                        rows,
                        frozen,
                        wanted,
                        fresh,
                    };
                    return Moved::Going;
                }
                // Against the rows as frozen: a witness ahead of one is a reservation the
                // row lost.
                if let Some(k) = frozen
                    .iter()
                    .zip(&fresh)
                    .position(|(r, w)| w.is_some_and(|w| to_mark(w).is_ahead_of(&r.biz_row(0))))
                {
                    // The others are thawed; the row behind stays frozen (taken as
                    // frozen before the pass, `thaw` leaves it).
                    let mut rows = rows;
                    rows[k].frozen = true;
                    return self.thaw(0, rows, frozen, Some("a row was behind its witnesses"));
                }
                let (fence, _) = layout::fence(
                    frozen
                        .iter()
                        .map(|r| (r.max_id, r.version))
                        .chain(self.witnessed.iter().copied())
                        .chain(fresh.iter().flatten().map(|&(v, m, h)| (h.max(m), v))),
                );
                self.step = MoveStep::Verify {
                    rows,
                    frozen,
                    wanted,
                    fence,
                };
                Moved::Going
            }
            MoveStep::Verify {
                rows,
                frozen,
                wanted,
                fence,
            } => {
                // Every row read again at once (`all_parts`): still as frozen?
                let again: Vec<Option<Row>> = self.parts.iter().map(|&d| dbs[d].row).collect();
                if let Some(k) = frozen.iter().zip(&again).position(|(was, is)| match is {
                    None => true,
                    Some(is) => was.mark().is_ahead_of(&is.biz_row(0)),
                }) {
                    let mut rows = rows;
                    rows[k].frozen = true;
                    return self.thaw(0, rows, frozen, Some("a frozen row went back in time"));
                }
                if frozen
                    .iter()
                    .zip(&again)
                    .any(|(was, is)| is.is_some_and(|is| is.version != was.version))
                {
                    return self.thaw(0, rows, frozen, None);
                }
                self.switch(0, frozen, wanted, fence)
            }
            MoveStep::Thaw {
                k,
                rows,
                frozen,
                stop,
            } => {
                let now = frozen[k];
                dbs[self.parts[k]].cas(
                    now.version,
                    now.max_id,
                    now.freezing(false, now.claimed_by),
                );
                self.thaw(k + 1, rows, frozen, stop)
            }
            MoveStep::Switch {
                k,
                frozen,
                wanted,
                fence,
            } => {
                let d = self.parts[k];
                let row = frozen[k];
                let class = wanted[k].expect("a database of the new layout");
                let to = Reclass {
                    version: row.version + 1,
                    max_id: fence,
                    delta: class.delta(),
                    remainder: class.remainder(),
                    epoch: self.to.epoch,
                    frozen: false,
                    claimed_by: self.to.epoch,
                };
                if dbs[d]
                    .cas(row.version, row.max_id, Row::reclassed(&to))
                    .is_none()
                {
                    // Only another change writes frozen rows: start over.
                    return Moved::Going;
                }
                self.switch(k + 1, frozen, wanted, fence)
            }
        }
    }

    fn read(&mut self, sys: &Sys, dbs: &[DbState]) -> Moved {
        if self.attempts == 0 {
            return Moved::Stopped("lost every race");
        }
        self.attempts -= 1;
        let rows: Vec<Option<Row>> = self.parts.iter().map(|&d| dbs[d].row).collect();
        if sys.spec.fixes.fresh_witnesses {
            self.seen.resize(self.parts.len(), None);
            for (k, row) in rows.iter().enumerate() {
                let back = match (self.seen[k], row) {
                    (Some(m), Some(r)) => to_mark(m).is_ahead_of(&r.biz_row(0)),
                    (Some(_), None) => true,
                    (None, _) => false,
                };
                if back {
                    return Moved::Stopped("a row went back in time while the change ran");
                }
                if let Some(r) = row {
                    learn(&mut self.seen[k], r.mark());
                }
            }
        }
        if sys.spec.fixes.claimed_by_stamp
            && rows.iter().flatten().any(|r| r.claimed_by > self.to.epoch)
        {
            return Moved::Stopped("a later change moved the biz: superseded");
        }
        let Some(within) = self.restriction(&rows) else {
            return Moved::Stopped("the biz's restriction cannot be told from its rows");
        };
        let mut wanted = Vec::with_capacity(self.parts.len());
        for &d in &self.parts {
            match self.to.class_of(d).map(|c| c.restrict(within)) {
                Some(Ok(c)) => wanted.push(Some(c)),
                Some(Err(_)) => return Moved::Stopped("restricted class too large"),
                None => wanted.push(None),
            }
        }
        let biz_rows: Vec<Option<BizRow>> = rows.iter().map(|r| r.map(|r| r.biz_row(0))).collect();
        let refs: Vec<Option<&BizRow>> = biz_rows.iter().map(Option::as_ref).collect();
        if layout::settled(&refs, &wanted, self.to.epoch) {
            return Moved::Done;
        }
        let (fence, newest) = layout::fence(
            rows.iter()
                .flatten()
                .map(|r| (r.max_id, r.version))
                .chain(self.witnessed.iter().copied()),
        );
        if rows.iter().any(Option::is_none) {
            let Some(template) = rows.iter().flatten().next().copied() else {
                return Moved::Stopped("no database holds a row");
            };
            let place = self
                .parts
                .iter()
                .zip(&rows)
                .zip(&wanted)
                .filter(|((_, r), _)| r.is_none())
                .map(|((&d, _), w)| {
                    (
                        d,
                        Row {
                            version: newest + 1,
                            max_id: fence,
                            class: w.unwrap_or(template.class),
                            epoch: self.to.epoch,
                            frozen: true,
                            claimed_by: self.to.epoch,
                        },
                    )
                })
                .collect();
            self.step = MoveStep::Place { k: 0, rows: place };
            return Moved::Going;
        }
        self.step = MoveStep::Freeze {
            k: 0,
            rows: rows.into_iter().flatten().collect(),
            frozen: Vec::new(),
            wanted,
        };
        Moved::Going
    }

    /// The biz's restriction from its rows' classes and their databases' classes at the
    /// rows' epochs (`Store::restriction_of`, over `layout::restriction`).
    fn restriction(&self, rows: &[Option<Row>]) -> Option<Residue> {
        let mut found: Option<Residue> = None;
        for (k, row) in rows.iter().enumerate() {
            let Some(r) = row else { continue };
            let within = self
                .layouts
                .iter()
                .find(|l| l.epoch == r.epoch)
                .and_then(|l| l.class_of(self.parts[k]))
                .and_then(|db| layout::restriction(r.class, db));
            let within = match within {
                Some(w) => w,
                // A frozen row gives out nothing: one the layouts cannot explain is
                // left out.
                None if r.frozen => continue,
                None => return None,
            };
            if found.is_some_and(|f| f != within) {
                return None;
            }
            found = Some(within);
        }
        found
    }

    /// Thaws the rows this pass froze, from index `k` on (those frozen now that were
    /// not before); then reads again, or stops for `stop`.
    fn thaw(
        &mut self,
        k: usize,
        rows: Vec<Row>,
        frozen: Vec<Row>,
        stop: Option<&'static str>,
    ) -> Moved {
        if let Some(k) = (k..frozen.len()).find(|&j| !rows[j].frozen && frozen[j].frozen) {
            self.step = MoveStep::Thaw {
                k,
                rows,
                frozen,
                stop,
            };
            return Moved::Going;
        }
        stop.map_or(Moved::Going, Moved::Stopped)
    }

    fn switch(
        &mut self,
        k: usize,
        frozen: Vec<Row>,
        wanted: Vec<Option<Residue>>,
        fence: i64,
    ) -> Moved {
        match (k..wanted.len()).find(|&j| wanted[j].is_some()) {
            Some(k) => {
                self.step = MoveStep::Switch {
                    k,
                    frozen,
                    wanted,
                    fence,
                };
                Moved::Going
            }
            None => Moved::Done,
        }
    }
}
