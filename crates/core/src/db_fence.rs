//! `segmint db fence NAME`, as `biz add` and the layout change are: the store reads
//! the fenced database's biz rows and every other database's witnesses of them, this
//! module decides each row, the store writes it (compare-and-set on what it read) and
//! records the new marks as witnesses in the other databases.
//!
//! ```text
//!   per row: not behind any mark, and at or above `--above` ──▶ Keep
//!            else ──▶ Raise: version to the next multiple of FENCE_EPOCH above every
//!                     version seen, max_id to the highest ID anyone saw issued
//!                     (and `--above`); frozen for a pending change, or for the
//!                     change a restore undid, so no class is put back in service
//! ```

use crate::evidence::{self, Mark};
use crate::rows::{BizRow, Reclass};

/// A fence raises a row's version to the next multiple of this: far above every
/// version reached by reservations since the last fence (one per reservation), with
/// room for millions of fences.
pub const FENCE_EPOCH: i64 = 1 << 40;

/// What the layouts say when the fence runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layouts {
    /// The epoch of the layout in force, if one is done.
    pub done: Option<i64>,
    /// The epoch of a change under way, if any.
    pub pending: Option<i64>,
}

/// What the fence does with one row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RowPlan {
    /// Not behind any evidence, and at or above `--above`: left as it is.
    Keep,
    /// Behind, but no version is left to raise it to: left as it is.
    NoVersionLeft,
    /// Raised in service (compare-and-set on the row read) to `version` and `max_id`.
    Raise { version: i64, max_id: i64 },
    /// Raised and frozen (compare-and-set on the row read): written as `to`.
    RaiseFrozen(Reclass),
}

/// What to do with `row` of the fenced database, the highest mark anyone saw or
/// witnessed of it being `mark`, raised above `above` if given.
///
/// A row raised while a change is under way is frozen for it (stamped with its epoch),
/// never put back into service in a class the change may be taking away; a row of an
/// epoch below the layout in force (a restore undid its move) is raised frozen too:
/// its class may belong to another database now, and the next change moves it.
pub fn plan_row(row: &BizRow, mark: Option<Mark>, above: Option<i64>, layouts: Layouts) -> RowPlan {
    let floor = mark
        .map_or(row.max_id, |m| m.high_id)
        .max(above.unwrap_or(i64::MIN));
    if evidence::behind(mark, row).is_ok() && row.max_id >= floor {
        return RowPlan::Keep;
    }
    let newest = mark.map_or(row.version, |m| m.version.max(row.version));
    let Some(version) = (newest / FENCE_EPOCH)
        .checked_add(1)
        .and_then(|e| e.checked_mul(FENCE_EPOCH))
    else {
        return RowPlan::NoVersionLeft;
    };
    let max_id = row.max_id.max(floor);
    let stale = layouts.done.is_some_and(|d| row.epoch < d);
    let freeze_by = match layouts.pending {
        Some(change) => Some(change),
        None if stale => Some(row.claimed_by),
        None => None,
    };
    assert!(
        version > newest && mark.is_none_or(|m| max_id >= m.high_id),
        "a fenced row raised above every version and ID seen"
    );
    match freeze_by {
        None => RowPlan::Raise { version, max_id },
        Some(by) => RowPlan::RaiseFrozen(Reclass {
            version,
            max_id,
            ..Reclass::freezing(row, true, row.claimed_by.max(by))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(version: i64, max_id: i64, epoch: i64) -> BizRow {
        BizRow {
            biz_type: "order".into(),
            begin_id: 0,
            max_id,
            step: 100,
            delta: 2,
            remainder: 0,
            version,
            description: "".into(),
            epoch,
            frozen: false,
            claimed_by: epoch,
        }
    }

    const NONE: Layouts = Layouts {
        done: Some(1),
        pending: None,
    };

    #[test]
    fn a_row_behind_its_mark_is_raised_above_it_and_one_ahead_is_kept() {
        let mark = Mark {
            version: 7,
            max_id: 700,
            high_id: 700,
        };
        assert_eq!(
            plan_row(&row(3, 300, 1), Some(mark), None, NONE),
            RowPlan::Raise {
                version: FENCE_EPOCH,
                max_id: 700
            }
        );
        assert_eq!(
            plan_row(&row(9, 900, 1), Some(mark), None, NONE),
            RowPlan::Keep
        );
        // `--above` raises a row no evidence holds back.
        assert!(matches!(
            plan_row(&row(9, 900, 1), None, Some(5_000), NONE),
            RowPlan::Raise { max_id: 5_000, .. }
        ));
        let last = row(i64::MAX - 1, 10, 1);
        assert_eq!(
            plan_row(&last, None, Some(20), NONE),
            RowPlan::NoVersionLeft
        );
    }

    #[test]
    fn a_row_raised_during_a_change_or_of_an_older_epoch_stays_frozen() {
        let pending = Layouts {
            done: Some(1),
            pending: Some(2),
        };
        let RowPlan::RaiseFrozen(to) = plan_row(&row(1, 100, 1), None, Some(500), pending) else {
            panic!("raised frozen");
        };
        assert!(
            to.frozen && to.claimed_by == 2 && to.max_id == 500,
            "{to:?}"
        );
        let newer = Layouts {
            done: Some(3),
            pending: None,
        };
        let RowPlan::RaiseFrozen(to) = plan_row(&row(1, 100, 1), None, Some(500), newer) else {
            panic!("raised frozen");
        };
        assert!(to.frozen && to.claimed_by == 1, "{to:?}");
    }
}
