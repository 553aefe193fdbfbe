//! A window of a row's ID space: the IDs a reservation may take when a biz's counter
//! restarts each period (see [`crate::shape::period`]). Each period owns the IDs
//! `base + start ..= base + modulus - 1` of one row, and a reservation for it jumps the
//! row up to the window's floor (never down) and stops at its ceiling, so the row's
//! `max_id` only ever grows and every protocol built on that (witnesses, fences,
//! layout changes, give-back) holds unchanged.

use super::{Residue, SegmentRange};

/// The IDs `floor + 1 ..= ceiling` of one period.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Window {
    /// A reservation starts above this, however low the row is.
    pub floor: i64,
    /// No reservation reaches above this.
    pub ceiling: i64,
}

/// Why a row yields no segment in a window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WindowMiss {
    /// The row is past the window: a later period has begun on it.
    Passed,
    /// The row's class has no ID left in the window: the period's counter is used up.
    Full,
}

impl Window {
    /// Whether `id` lies in the window.
    pub fn holds(&self, id: i64) -> bool {
        id > self.floor && id <= self.ceiling
    }

    /// The segment a row at `max_id` of class `residue` yields for at most `step` IDs'
    /// worth of the window: from the floor if the row is below it, cut at the ceiling.
    ///
    /// # Errors
    /// [`WindowMiss::Passed`] when the row is above the ceiling, [`WindowMiss::Full`]
    /// when no ID of the class is left in the window.
    pub fn range(
        &self,
        max_id: i64,
        step: i64,
        residue: Residue,
    ) -> Result<SegmentRange, WindowMiss> {
        if max_id > self.ceiling {
            return Err(WindowMiss::Passed);
        }
        let from = max_id.max(self.floor);
        let step = step.min(self.ceiling - from);
        match SegmentRange::after(from, step, residue) {
            Ok(range) if !range.is_empty() => Ok(range),
            _ => Err(WindowMiss::Full),
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn a_row_below_jumps_to_the_floor_and_stops_at_the_ceiling() {
        let w = Window {
            floor: 1000,
            ceiling: 1999,
        };
        let odd = Residue::new(2, 1).unwrap();
        let r = w.range(17, 100, odd).unwrap();
        assert_eq!((r.first_id(), r.max_id()), (Some(1001), 1100));
        let r = w.range(1950, 100, odd).unwrap();
        assert_eq!((r.first_id(), r.max_id()), (Some(1951), 1999));
        let even = Residue::new(2, 0).unwrap();
        assert_eq!(w.range(1998, 100, even), Err(WindowMiss::Full));
        assert_eq!(w.range(1998, 100, odd).map(|r| r.len()), Ok(1));
        assert_eq!(w.range(1999, 100, Residue::ALL), Err(WindowMiss::Full));
        assert_eq!(w.range(2000, 100, odd), Err(WindowMiss::Passed));
    }

    proptest! {
        /// Every segment lies inside the window and above the row: a period's IDs are
        /// never taken twice, nor taken from another period.
        #[test]
        fn segments_stay_inside(
            floor in 0i64..1_000_000,
            len in 1i64..10_000,
            max_id in 0i64..1_020_000,
            step in 1i64..5_000,
            delta in 1i64..5,
            rem in 0i64..5,
        ) {
            let w = Window { floor, ceiling: floor + len };
            let residue = Residue::new(delta, rem % delta).unwrap();
            if let Ok(r) = w.range(max_id, step, residue) {
                for id in r.ids() {
                    prop_assert!(w.holds(id) && id > max_id, "{id} of {r:?}");
                }
                prop_assert!(r.max_id() <= w.ceiling);
            }
        }
    }
}
