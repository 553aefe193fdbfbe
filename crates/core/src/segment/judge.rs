//! What a reservation makes of the row it read, before its compare-and-set: the one
//! decision the store's reservation (`Store::attempt`) and the model checker's servers
//! both take, and the class check after it.

use super::Residue;
use crate::evidence::Mark;
use crate::rows::Reclass;

/// What to do with a row read for a reservation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Judged {
    /// The row lies behind `known`, what was seen or witnessed of it before the read:
    /// its database went back in time; fence it.
    Behind(Mark),
    /// Frozen, or in an epoch below the layout read: a layout change is moving it.
    Moving,
    /// Its class was not vetted by the catalog read, or its epoch is above it: read
    /// the catalog again first.
    Stale,
    /// Reserve from it.
    Usable,
}

/// The verdict on `row`, of which `seen` was known before the read, for a server whose
/// catalog read is at layout epoch `epoch` and vetted the row's class (`vetted`).
pub fn judge(row: &Reclass, seen: Option<Mark>, epoch: i64, vetted: bool) -> Judged {
    if let Some(known) = seen.filter(|m| row.is_behind(m)) {
        return Judged::Behind(known);
    }
    if row.frozen || row.epoch < epoch {
        return Judged::Moving;
    }
    if !vetted || row.epoch > epoch {
        return Judged::Stale;
    }
    Judged::Usable
}

/// The first two classes of different databases (by index) that share an ID, if any:
/// a biz's classes must be disjoint, or two databases would issue one ID.
pub fn first_overlap(classes: &[(usize, Residue)]) -> Option<((usize, Residue), (usize, Residue))> {
    classes.iter().enumerate().find_map(|(i, &(a, ca))| {
        classes[i + 1..]
            .iter()
            .find(|&&(b, cb)| a != b && ca.overlaps(cb))
            .map(|&second| ((a, ca), second))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(version: i64, max_id: i64, epoch: i64, frozen: bool) -> Reclass {
        Reclass {
            version,
            max_id,
            delta: 2,
            remainder: 0,
            epoch,
            frozen,
            claimed_by: epoch,
        }
    }

    #[test]
    fn a_row_behind_is_fenced_before_anything_else() {
        let seen = Mark {
            version: 5,
            max_id: 50,
            high_id: 50,
        };
        assert_eq!(
            judge(&row(4, 40, 1, true), Some(seen), 1, true),
            Judged::Behind(seen)
        );
        assert_eq!(
            judge(&row(5, 50, 1, false), Some(seen), 1, true),
            Judged::Usable
        );
        assert_eq!(
            judge(&row(6, 60, 1, true), Some(seen), 1, true),
            Judged::Moving
        );
        assert_eq!(judge(&row(6, 60, 0, false), None, 1, true), Judged::Moving);
        assert_eq!(judge(&row(6, 60, 2, false), None, 1, true), Judged::Stale);
        assert_eq!(judge(&row(6, 60, 1, false), None, 1, false), Judged::Stale);
    }

    #[test]
    fn overlapping_classes_of_two_databases_are_found() {
        let c = |d, r| Residue::new(d, r).expect("a class");
        assert_eq!(first_overlap(&[(0, c(2, 0)), (1, c(2, 1))]), None);
        assert_eq!(
            first_overlap(&[(0, c(2, 0)), (1, c(2, 1)), (2, c(4, 2))]),
            Some(((0, c(2, 0)), (2, c(4, 2))))
        );
        assert_eq!(first_overlap(&[(0, c(2, 0)), (0, c(2, 0))]), None);
    }
}
