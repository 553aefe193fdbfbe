//! Residue classes: the `id % delta == remainder` rule that keeps databases disjoint.

use std::num::NonZeroI64;

use super::SegmentError;

/// The residue class `remainder mod delta` a biz row issues from.
///
/// Invariant: `delta >= 1` and `0 <= remainder < delta`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Residue {
    /// Distance between two consecutive IDs of the class. Never zero: an
    /// `Option<Residue>`, kept for every row, takes no more room than a class.
    delta: NonZeroI64,
    /// Value every ID of the class leaves modulo `delta`.
    remainder: i64,
}

impl Residue {
    /// The class of every integer (`delta = 1`): a biz on a single database.
    pub const ALL: Residue = Residue {
        delta: NonZeroI64::new(1).unwrap(),
        remainder: 0,
    };

    /// Parses a residue class.
    ///
    /// # Errors
    /// [`SegmentError::Delta`] when `delta < 1`, [`SegmentError::Remainder`] when
    /// `remainder` is not in `0..delta`.
    pub fn new(delta: i64, remainder: i64) -> Result<Self, SegmentError> {
        let Some(nonzero) = NonZeroI64::new(delta).filter(|_| delta >= 1) else {
            return Err(SegmentError::Delta(delta));
        };
        if !(0..delta).contains(&remainder) {
            return Err(SegmentError::Remainder { delta, remainder });
        }
        Ok(Residue {
            delta: nonzero,
            remainder,
        })
    }

    pub fn delta(self) -> i64 {
        self.delta.get()
    }

    pub fn remainder(self) -> i64 {
        self.remainder
    }

    /// Whether `id` belongs to this class.
    pub fn contains(self, id: i64) -> bool {
        id.rem_euclid(self.delta()) == self.remainder
    }

    /// Whether some integer is in both classes: `r1 ≡ r2 (mod gcd(d1, d2))`.
    pub fn overlaps(self, other: Residue) -> bool {
        let g = gcd(self.delta(), other.delta());
        (self.remainder - other.remainder).rem_euclid(g) == 0
    }

    /// The row class of a biz restricted to `within` (e.g. odd-only: `1 mod 2`) on a
    /// database whose class is `self`: `delta = m·d, remainder = p + m·r`.
    ///
    /// Every ID of the result is in `within`, and two databases with disjoint classes
    /// give disjoint results, so the biz stays collision-free across databases.
    ///
    /// # Errors
    /// [`SegmentError::TooLarge`] when `m·d` does not fit in an `i64`.
    pub fn restrict(self, within: Residue) -> Result<Residue, SegmentError> {
        let delta = within
            .delta()
            .checked_mul(self.delta())
            .ok_or(SegmentError::TooLarge)?;
        let remainder = within.delta() * self.remainder + within.remainder;
        Residue::new(delta, remainder)
    }
}

impl std::fmt::Display for Residue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} mod {}", self.remainder, self.delta())
    }
}

fn gcd(mut a: i64, mut b: i64) -> i64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn rejects_bad_classes() {
        assert_eq!(Residue::new(0, 0), Err(SegmentError::Delta(0)));
        assert!(matches!(
            Residue::new(2, 2),
            Err(SegmentError::Remainder { .. })
        ));
        assert!(matches!(
            Residue::new(2, -1),
            Err(SegmentError::Remainder { .. })
        ));
    }

    #[test]
    fn overlap_follows_gcd_rule() {
        let even = Residue::new(2, 0).unwrap();
        let odd = Residue::new(2, 1).unwrap();
        assert!(!even.overlaps(odd));
        assert!(even.overlaps(Residue::new(4, 2).unwrap()));
        assert!(!odd.overlaps(Residue::new(4, 2).unwrap()));
        assert!(Residue::new(3, 1).unwrap().overlaps(odd));
        assert!(Residue::ALL.overlaps(even));
    }

    #[test]
    fn odd_biz_on_even_odd_databases() {
        let odd = Residue::new(2, 1).unwrap();
        let a = Residue::new(2, 0).unwrap().restrict(odd).unwrap();
        let b = Residue::new(2, 1).unwrap().restrict(odd).unwrap();
        assert_eq!((a.delta(), a.remainder()), (4, 1));
        assert_eq!((b.delta(), b.remainder()), (4, 3));
        assert!(!a.overlaps(b));
    }

    proptest! {
        /// `overlaps` agrees with brute force over one full period.
        #[test]
        fn overlap_matches_brute_force(d1 in 1i64..12, d2 in 1i64..12, r1 in 0i64..12, r2 in 0i64..12) {
            let (a, b) = (Residue::new(d1, r1 % d1).unwrap(), Residue::new(d2, r2 % d2).unwrap());
            let brute = (0..d1 * d2).any(|x| a.contains(x) && b.contains(x));
            prop_assert_eq!(a.overlaps(b), brute);
        }

        /// Restricting disjoint database classes keeps them disjoint and inside `within`.
        #[test]
        fn restrict_keeps_classes_disjoint(d1 in 1i64..8, d2 in 1i64..8, r1 in 0i64..8, r2 in 0i64..8, m in 1i64..5, p in 0i64..5) {
            let (a, b) = (Residue::new(d1, r1 % d1).unwrap(), Residue::new(d2, r2 % d2).unwrap());
            let within = Residue::new(m, p % m).unwrap();
            let (ra, rb) = (a.restrict(within).unwrap(), b.restrict(within).unwrap());
            prop_assert!(ra.delta() % within.delta() == 0 && within.contains(ra.remainder()));
            if !a.overlaps(b) {
                prop_assert!(!ra.overlaps(rb));
            }
        }
    }
}
