//! The order a biz's IDs are issued in: a keyed bijection of the sequential value,
//! applied after issuance. Both keyed orders act on the biz's own class (an odd-only
//! biz, `1 mod 2`, stays odd): a value `x = m·q + p` of the restriction `p mod m` has
//! the index `q`, which is permuted, and `m·q' + p` is issued. Distinct sequential
//! values have distinct indexes, so their images are distinct: no order can make two
//! databases, servers or segments issue one ID.

use super::permutation::Permutation;
use crate::segment::Residue;

/// The largest biz ID.
const MAX_ID: u64 = i64::MAX as u64;

/// How a biz's IDs are ordered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdOrder {
    /// As reserved: increasing within a segment (the default).
    Sequential,
    /// Within each block of `block` consecutive indexes (the biz's step, so a block is
    /// a segment of that step), in a keyed order: IDs stay in their block, and the
    /// next cannot be guessed from the last.
    Shuffled {
        /// Indexes per block, at least 1.
        block: u64,
    },
    /// A keyed bijection of every ID below `domain`: no visible order or volume.
    Opaque {
        /// Every ID issued is below this (e.g. 2^53 for JavaScript's numbers).
        domain: u64,
    },
}

/// Why a value has no image.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OrderError {
    #[error("ID {0} is outside the biz's class")]
    OutsideClass(i64),
    #[error("ID {value} is at or beyond the biz's domain {domain}: IDs never wrap")]
    BeyondDomain { value: i64, domain: u64 },
}

/// A biz's order with its key and class: what turns a sequential value into the ID
/// issued, and back.
#[derive(Debug, Clone)]
pub struct Ordering {
    order: IdOrder,
    key: u128,
    /// The biz's own restriction (`1 mod 2` for odd-only; all integers when none).
    within: Residue,
    /// The opaque permutation, built once.
    opaque: Option<Permutation>,
}

impl Ordering {
    /// The order `order` of a biz restricted to `within`, keyed by `key`.
    pub fn new(order: IdOrder, key: u128, within: Residue) -> Ordering {
        let opaque = match order {
            IdOrder::Opaque { domain } => {
                Some(Permutation::new(key, 0, indexes_below(domain, within)))
            }
            _ => None,
        };
        Ordering {
            order,
            key,
            within,
            opaque,
        }
    }

    /// The order.
    pub fn order(&self) -> IdOrder {
        self.order
    }

    /// The index of `x` in the biz's class.
    fn index(&self, x: i64) -> Result<u64, OrderError> {
        if x < 0 || !self.within.contains(x) {
            return Err(OrderError::OutsideClass(x));
        }
        Ok(((x - self.within.remainder()) / self.within.delta()) as u64)
    }

    /// The value of index `q` (which came from a value of the class: it fits).
    fn value(&self, q: u64) -> i64 {
        (q as i64) * self.within.delta() + self.within.remainder()
    }

    /// Puts the sequential values `ids` in this order, in place: [`Ordering::apply`]
    /// to each, with the permutation of a shuffled block built once per block.
    ///
    /// # Errors
    /// As [`Ordering::apply`]; `ids` is then partly changed and must not be issued.
    pub fn apply_all(&self, ids: &mut [i64]) -> Result<(), OrderError> {
        match self.order {
            IdOrder::Sequential => Ok(()),
            IdOrder::Shuffled { block } => {
                let mut current: Option<(u64, Permutation)> = None;
                for id in ids {
                    let q = self.index(*id)?;
                    let (start, size) = self.block_of(q, block);
                    let p = match &current {
                        Some((s, p)) if *s == start => p,
                        _ => {
                            &current
                                .insert((start, Permutation::new(self.key, start / block, size)))
                                .1
                        }
                    };
                    *id = self.value(start + p.apply(q - start));
                }
                Ok(())
            }
            IdOrder::Opaque { .. } => {
                for id in ids {
                    *id = self.apply(*id)?;
                }
                Ok(())
            }
        }
    }

    /// The ID issued for the sequential value `x`.
    ///
    /// # Errors
    /// [`OrderError`] for a value outside the biz's class or beyond an opaque domain.
    pub fn apply(&self, x: i64) -> Result<i64, OrderError> {
        match self.order {
            IdOrder::Sequential => Ok(x),
            IdOrder::Shuffled { block } => {
                let q = self.index(x)?;
                let (start, size) = self.block_of(q, block);
                let p = Permutation::new(self.key, start / block, size);
                Ok(self.value(start + p.apply(q - start)))
            }
            IdOrder::Opaque { domain } => {
                let q = self.index(x)?;
                match &self.opaque {
                    Some(p) if q < p.len() && x < domain as i64 => Ok(self.value(p.apply(q))),
                    _ => Err(OrderError::BeyondDomain { value: x, domain }),
                }
            }
        }
    }

    /// The sequential value whose ID is `id`.
    ///
    /// # Errors
    /// [`OrderError`] for an ID outside the biz's class or beyond an opaque domain.
    pub fn invert(&self, id: i64) -> Result<i64, OrderError> {
        match self.order {
            IdOrder::Sequential => Ok(id),
            IdOrder::Shuffled { block } => {
                let q = self.index(id)?;
                let (start, size) = self.block_of(q, block);
                let p = Permutation::new(self.key, start / block, size);
                Ok(self.value(start + p.invert(q - start)))
            }
            IdOrder::Opaque { domain } => {
                let q = self.index(id)?;
                match &self.opaque {
                    Some(p) if q < p.len() && id < domain as i64 => Ok(self.value(p.invert(q))),
                    _ => Err(OrderError::BeyondDomain { value: id, domain }),
                }
            }
        }
    }

    /// The first index and the size of the block holding index `q`; the last block
    /// of the class stops at the largest ID.
    fn block_of(&self, q: u64, block: u64) -> (u64, u64) {
        let start = q - q % block;
        let last = indexes_below(MAX_ID + 1, self.within).saturating_sub(1);
        (start, block.min(last - start + 1))
    }
}

/// How many values of `within` lie in `[0, bound)`.
fn indexes_below(bound: u64, within: Residue) -> u64 {
    let (m, p) = (within.delta() as u64, within.remainder() as u64);
    if bound <= p {
        0
    } else {
        (bound - p).div_ceil(m)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use proptest::prelude::*;

    use super::*;

    fn odd() -> Residue {
        Residue::new(2, 1).unwrap()
    }

    #[test]
    fn sequential_is_the_identity() {
        let o = Ordering::new(IdOrder::Sequential, 5, Residue::ALL);
        assert_eq!(o.apply(42), Ok(42));
        assert_eq!(o.invert(42), Ok(42));
    }

    #[test]
    fn shuffled_stays_in_its_block_and_class() {
        // Step 100 of an odd-only biz: 50 indexes per block.
        let o = Ordering::new(IdOrder::Shuffled { block: 50 }, 9, odd());
        for segment in 0..4i64 {
            let ids: Vec<i64> = (0..50)
                .map(|i| o.apply(segment * 100 + 2 * i + 1).unwrap())
                .collect();
            let set: HashSet<i64> = ids.iter().copied().collect();
            assert_eq!(set.len(), 50);
            assert!(ids.iter().all(|&id| id % 2 == 1));
            assert!(
                ids.iter()
                    .all(|&id| (segment * 100..(segment + 1) * 100).contains(&id))
            );
            assert_ne!(
                ids,
                (0..50)
                    .map(|i| segment * 100 + 2 * i + 1)
                    .collect::<Vec<_>>()
            );
        }
        assert_eq!(o.apply(2), Err(OrderError::OutsideClass(2)));
    }

    #[test]
    fn opaque_refuses_beyond_its_domain_and_keeps_the_class() {
        let o = Ordering::new(IdOrder::Opaque { domain: 1 << 53 }, 11, odd());
        let id = o.apply(12345).unwrap();
        assert!(id < 1 << 53 && id % 2 == 1);
        assert_eq!(o.invert(id), Ok(12345));
        assert!(matches!(
            o.apply(1 << 53 | 1),
            Err(OrderError::BeyondDomain { .. })
        ));
        let top = Ordering::new(IdOrder::Opaque { domain: MAX_ID }, 11, Residue::ALL);
        let id = top.apply(i64::MAX - 1).unwrap();
        assert_eq!(top.invert(id), Ok(i64::MAX - 1));
    }

    #[test]
    fn the_last_block_stops_at_the_largest_id() {
        let o = Ordering::new(IdOrder::Shuffled { block: 1000 }, 3, Residue::ALL);
        for x in (i64::MAX - 20)..=i64::MAX {
            let id = o.apply(x).unwrap();
            assert_eq!(o.invert(id), Ok(x));
            assert!(id > i64::MAX - 1000);
        }
    }

    proptest! {
        #[test]
        fn every_order_inverts_and_keeps_restrictions(
            key in any::<u128>(),
            m in 1i64..7,
            p in 0i64..7,
            block in 1u64..10_000,
            domain_bits in 8u32..63,
            q in 0i64..1_000_000,
        ) {
            let within = Residue::new(m, p % m).unwrap();
            let x = q * m + p % m;
            for order in [IdOrder::Shuffled { block }, IdOrder::Opaque { domain: 1 << domain_bits }] {
                let o = Ordering::new(order, key, within);
                match o.apply(x) {
                    Ok(id) => {
                        prop_assert!(within.contains(id));
                        prop_assert_eq!(o.invert(id), Ok(x));
                    }
                    Err(e) => {
                        let beyond = matches!(e, OrderError::BeyondDomain { .. });
                        prop_assert!(beyond, "{}", e);
                    }
                }
            }
        }

        #[test]
        fn opaque_is_a_bijection_on_small_domains(key in any::<u128>(), domain in 1u64..3000, m in 1i64..4) {
            let within = Residue::new(m, m - 1).unwrap();
            let o = Ordering::new(IdOrder::Opaque { domain }, key, within);
            let xs: Vec<i64> = (0..domain as i64).filter(|x| within.contains(*x)).collect();
            let image: HashSet<i64> = xs.iter().map(|&x| o.apply(x).unwrap()).collect();
            prop_assert_eq!(image.len(), xs.len());
            prop_assert!(image.iter().all(|&id| (id as u64) < domain && within.contains(id)));
        }
    }
}
