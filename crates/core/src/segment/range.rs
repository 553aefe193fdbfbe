//! Segments: reserved ID ranges and the cursor that issues from them.

use super::{Residue, SegmentError};

/// A reserved segment: the half-open range `(max_id - step, max_id]` restricted to
/// the IDs of `residue`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentRange {
    /// Inclusive upper end: the row's `max_id` after the reservation.
    max_id: i64,
    /// Width of the range; the exclusive lower end is `max_id - step`.
    step: i64,
    /// The class of the row the segment was reserved from.
    residue: Residue,
}

impl SegmentRange {
    /// The segment a row at `max_id` yields when it is advanced by `step`.
    ///
    /// # Errors
    /// [`SegmentError::Step`] when `step < 1`; [`SegmentError::Overflow`] when
    /// `max_id + step` exceeds `i64::MAX` (IDs never wrap).
    pub fn after(max_id: i64, step: i64, residue: Residue) -> Result<Self, SegmentError> {
        if step < 1 {
            return Err(SegmentError::Step(step));
        }
        let new_max = max_id
            .checked_add(step)
            .ok_or(SegmentError::Overflow { max_id, step })?;
        Ok(SegmentRange {
            max_id: new_max,
            step,
            residue,
        })
    }

    pub fn max_id(&self) -> i64 {
        self.max_id
    }

    pub fn step(&self) -> i64 {
        self.step
    }

    pub fn residue(&self) -> Residue {
        self.residue
    }

    /// Tinyid's `currentId`: the exclusive lower end `max_id - step`, not aligned.
    pub fn current_id(&self) -> i64 {
        self.max_id - self.step
    }

    /// Tinyid's `loadingId`: the ID past which a client fetches the next segment.
    pub fn loading_id(&self, percent: u8) -> i64 {
        let ahead = i128::from(self.step) * i128::from(percent) / 100;
        self.current_id() + ahead as i64
    }

    /// The smallest ID of the class greater than `max_id - step`, as Tinyid aligns it,
    /// or `None` when the range holds no ID of the class.
    pub fn first_id(&self) -> Option<i64> {
        let start = self.current_id();
        let delta = self.residue.delta();
        let mut offset = (self.residue.remainder() - start.rem_euclid(delta)).rem_euclid(delta);
        if offset == 0 {
            offset = delta;
        }
        start.checked_add(offset).filter(|&id| id <= self.max_id)
    }

    /// How many IDs the segment yields.
    pub fn len(&self) -> u64 {
        match self.first_id() {
            Some(first) => ((self.max_id - first) / self.residue.delta()) as u64 + 1,
            None => 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.first_id().is_none()
    }

    /// Every ID of the segment, smallest first.
    pub fn ids(&self) -> impl Iterator<Item = i64> + use<> {
        let delta = self.residue.delta();
        let first = self.first_id().unwrap_or(0);
        (0..self.len() as i64).map(move |i| first + i * delta)
    }
}

/// Issues the IDs of one segment in order. Not synchronised: the owner locks it.
#[derive(Debug, Clone)]
pub struct Cursor {
    /// The segment being issued.
    range: SegmentRange,
    /// First ID of the segment (meaningless when `len == 0`).
    first: i64,
    /// Number of IDs in the segment.
    len: u64,
    /// Number of IDs already issued.
    used: u64,
}

impl Cursor {
    pub fn new(range: SegmentRange) -> Self {
        Cursor {
            first: range.first_id().unwrap_or(0),
            len: range.len(),
            used: 0,
            range,
        }
    }

    pub fn range(&self) -> &SegmentRange {
        &self.range
    }

    pub fn remaining(&self) -> u64 {
        self.len - self.used
    }

    /// The last ID issued from the segment, if any.
    pub fn last_issued(&self) -> Option<i64> {
        (self.used > 0).then(|| self.first + (self.used as i64 - 1) * self.range.residue().delta())
    }

    pub fn is_exhausted(&self) -> bool {
        self.used == self.len
    }

    /// Whether `percent` % of the segment has been issued.
    pub fn used_at_least(&self, percent: u8) -> bool {
        u128::from(self.used) * 100 >= u128::from(self.len) * u128::from(percent)
    }

    /// The next up to `n` IDs as a segment of their own, as if issued: what a server
    /// hands a client out of its own segment. `None` when none is left.
    pub fn carve(&mut self, n: u64) -> Option<SegmentRange> {
        let k = n.min(self.remaining());
        if k == 0 {
            return None;
        }
        let delta = self.range.residue().delta();
        // Cannot overflow: both ends are IDs of the segment, at most `max_id`.
        let start = self.first + self.used as i64 * delta;
        let last = start + (k as i64 - 1) * delta;
        self.used += k;
        // `(start - 1, last]` holds exactly the IDs of the class from `start` to `last`.
        SegmentRange::after(
            start.checked_sub(1)?,
            last - start + 1,
            self.range.residue(),
        )
        .ok()
    }

    /// Appends up to `n` IDs to `out`; returns how many it appended.
    pub fn take(&mut self, n: usize, out: &mut Vec<i64>) -> usize {
        let k = (n as u64).min(self.remaining());
        let delta = self.range.residue().delta();
        // Cannot overflow: every issued ID is at most `max_id`.
        let start = self.first + self.used as i64 * delta;
        if k == 0 {
        } else if delta == 1 {
            // A plain range compiles to vector stores.
            out.extend(start..=start + (k as i64 - 1));
        } else {
            out.extend((0..k as i64).map(|i| start + i * delta));
        }
        self.used += k;
        k as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn residue(d: i64, r: i64) -> Residue {
        Residue::new(d, r).unwrap()
    }

    #[test]
    fn aligns_like_tinyid() {
        // (1000, 2000], delta 3, remainder 0: 1000 % 3 == 1, so the first ID is 1002.
        let seg = SegmentRange::after(1000, 1000, residue(3, 0)).unwrap();
        assert_eq!(seg.current_id(), 1000);
        assert_eq!(seg.first_id(), Some(1002));
        assert_eq!(seg.loading_id(20), 1200);
        assert_eq!(seg.ids().last(), Some(1998));
        // A start already in the class is excluded: the range is open at the bottom.
        let seg = SegmentRange::after(999, 1000, residue(3, 0)).unwrap();
        assert_eq!(seg.first_id(), Some(1002));
    }

    #[test]
    fn refuses_overflow_and_bad_step() {
        assert_eq!(
            SegmentRange::after(i64::MAX - 5, 10, Residue::ALL),
            Err(SegmentError::Overflow {
                max_id: i64::MAX - 5,
                step: 10
            })
        );
        assert_eq!(
            SegmentRange::after(0, 0, Residue::ALL),
            Err(SegmentError::Step(0))
        );
        let top = SegmentRange::after(i64::MAX - 10, 10, residue(2, 1)).unwrap();
        assert_eq!(top.ids().last(), Some(i64::MAX));
    }

    #[test]
    fn empty_when_step_below_delta() {
        let seg = SegmentRange::after(10, 1, residue(2, 0)).unwrap();
        assert!(seg.is_empty());
        assert_eq!(Cursor::new(seg).remaining(), 0);
    }

    #[test]
    fn cursor_issues_in_order_and_reports_use() {
        let mut c = Cursor::new(SegmentRange::after(0, 10, residue(2, 1)).unwrap());
        let mut out = Vec::new();
        assert!(!c.used_at_least(20));
        assert_eq!(c.take(1, &mut out), 1);
        assert!(c.used_at_least(20));
        assert_eq!(c.take(10, &mut out), 4);
        assert_eq!(out, vec![1, 3, 5, 7, 9]);
        assert!(c.is_exhausted());
        assert_eq!(c.take(1, &mut out), 0);
    }

    proptest! {
        /// Every ID is in its range and class, the cursor yields exactly `ids()`, and
        /// consecutive segments of one row never overlap.
        #[test]
        fn segments_are_exact_and_disjoint(
            start in -1_000_000i64..1_000_000,
            steps in proptest::collection::vec(1i64..500, 1..6),
            d in 1i64..9,
            r in 0i64..9,
            chunk in 1usize..40,
        ) {
            let res = residue(d, r % d);
            let mut max_id = start;
            let mut last: Option<i64> = None;
            for step in steps {
                let seg = SegmentRange::after(max_id, step, res).unwrap();
                let expected: Vec<i64> = ((max_id + 1)..=seg.max_id()).filter(|&x| res.contains(x)).collect();
                prop_assert_eq!(seg.ids().collect::<Vec<_>>(), expected.clone());
                prop_assert_eq!(seg.len() as usize, expected.len());
                let mut cursor = Cursor::new(seg);
                let mut got = Vec::new();
                while cursor.take(chunk, &mut got) > 0 {}
                prop_assert_eq!(&got, &expected);
                if let (Some(prev), Some(first)) = (last, got.first()) {
                    prop_assert!(*first > prev);
                }
                last = got.last().copied().or(last);
                max_id = seg.max_id();
            }
        }
    }
}
