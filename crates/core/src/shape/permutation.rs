//! A keyed pseudo-random permutation of `[0, n)` for any `n`: a Feistel network over
//! the smallest number of bits that holds `n - 1` (split in two halves that differ by
//! at most a bit), with cycle walking (a value that lands outside `[0, n)` is encrypted
//! again; the network covers fewer than `2n` values, so that takes under 2 passes on
//! average, and none when `n` is a power of two such as 2^53 or 2^63). A Feistel network is
//! a bijection whatever its round function, so uniqueness never depends on the round
//! function's quality; the order's unpredictability does. Four rounds (Luby–Rackoff's
//! minimum for a pseudo-random permutation) of a keyed two-multiply mix, whose output
//! takes the best-mixed high bits, keep a permutation at a few nanoseconds: this runs
//! once per ID issued. It hides order and volume from someone without the key; it is
//! not a cipher against a determined cryptanalyst holding many IDs.

/// Rounds of the network.
const ROUNDS: usize = 4;

/// SplitMix64's finaliser: a fast, well-mixing bijection of `u64`.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A permutation of `[0, n)` chosen by a key and a tweak.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permutation {
    /// The size of the domain.
    n: u64,
    /// Bits of the high half of the network's word (the low half has `bits - high`).
    high: u32,
    /// Bits of the network's word.
    bits: u32,
    /// The round keys, from the key and the tweak.
    keys: [u64; ROUNDS],
}

impl Permutation {
    /// The permutation of `[0, n)` for `key` and `tweak` (different tweaks give
    /// unrelated permutations under one key). `n = 0` is taken as 1.
    pub fn new(key: u128, tweak: u64, n: u64) -> Permutation {
        let n = n.max(1);
        let bits = (64 - (n - 1).leading_zeros()).max(2);
        let high = bits / 2;
        // Both halves of the key and the tweak go through the mix before they meet, so
        // that related keys or tweaks give unrelated round keys.
        let (k0, k1) = (key as u64, (key >> 64) as u64);
        let base = mix(k0 ^ mix(tweak ^ mix(k1)));
        let mut keys = [0; ROUNDS];
        for (i, k) in keys.iter_mut().enumerate() {
            *k = mix(base.wrapping_add((i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)));
        }
        Permutation {
            n,
            high,
            bits,
            keys,
        }
    }

    /// The size of the domain.
    pub fn len(&self) -> u64 {
        self.n
    }

    /// Never empty: the domain holds at least 0.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// The round function: `out` (1 to 32) well-mixed bits of `r` under round key `k`.
    #[inline]
    fn round(r: u64, k: u64, out: u32) -> u64 {
        let z = (r ^ k).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        (z ^ (z >> 29)).wrapping_mul(0xd6e8_feb8_6659_fd93) >> (64 - out)
    }

    /// Each round turns `(L, R)` of `a` and `b` bits into `(R, L ^ F(R))` of `b` and
    /// `a` bits; after an even number of rounds the halves have their first widths.
    fn encrypt(&self, x: u64) -> u64 {
        let (mut a, mut b) = (self.high, self.bits - self.high);
        let (mut l, mut r) = (x >> b, x & ((1u64 << b) - 1));
        for k in self.keys {
            (l, r) = (r, l ^ Self::round(r, k, a));
            (a, b) = (b, a);
        }
        (l << b) | r
    }

    fn decrypt(&self, y: u64) -> u64 {
        let (mut a, mut b) = (self.high, self.bits - self.high);
        let (mut l, mut r) = (y >> b, y & ((1u64 << b) - 1));
        for k in self.keys.iter().rev() {
            // (l, r) of a and b bits came from (L, R) of b and a bits: R = l and
            // L = r ^ F(l), of b bits.
            (l, r) = (r ^ Self::round(l, *k, b), l);
            (a, b) = (b, a);
        }
        (l << b) | r
    }

    /// The image of `x`, for `x < n`.
    pub fn apply(&self, x: u64) -> u64 {
        debug_assert!(x < self.n);
        let mut y = self.encrypt(x);
        // Cycle walking; never taken when `n` is a power of two.
        while y >= self.n {
            y = self.encrypt(y);
        }
        y
    }

    /// The `x` whose image is `y`, for `y < n`.
    pub fn invert(&self, y: u64) -> u64 {
        debug_assert!(y < self.n);
        let mut x = self.decrypt(y);
        while x >= self.n {
            x = self.decrypt(x);
        }
        x
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use proptest::prelude::*;

    use super::*;

    #[test]
    fn every_small_size_is_a_bijection() {
        for n in 1..=300u64 {
            for key in [
                0u128,
                1,
                u128::MAX,
                0x0123_4567_89ab_cdef_0011_2233_4455_6677,
            ] {
                let p = Permutation::new(key, n, n);
                let image: HashSet<u64> = (0..n).map(|x| p.apply(x)).collect();
                assert_eq!(image.len() as u64, n, "n {n}");
                assert!(image.iter().all(|&y| y < n), "n {n}");
                assert!((0..n).all(|x| p.invert(p.apply(x)) == x), "n {n}");
            }
        }
    }

    #[test]
    fn keys_and_tweaks_give_different_orders() {
        let n = 1000;
        let order = |key, tweak| -> Vec<u64> {
            let p = Permutation::new(key, tweak, n);
            (0..n).map(|x| p.apply(x)).collect()
        };
        let base = order(7, 0);
        assert_ne!(base, order(8, 0));
        assert_ne!(base, order(7, 1));
        assert_ne!(base, (0..n).collect::<Vec<_>>(), "not the identity");
        // About half of consecutive pairs increase: no visible order.
        let up = base.windows(2).filter(|w| w[0] < w[1]).count();
        assert!((400..600).contains(&up), "{up} of 999 pairs increase");
    }

    proptest! {
        #[test]
        fn inverts_on_any_domain(key in any::<u128>(), tweak in any::<u64>(), n in 1u64..=u64::MAX, x in any::<u64>()) {
            let p = Permutation::new(key, tweak, n);
            let x = x % n;
            let y = p.apply(x);
            prop_assert!(y < n);
            prop_assert_eq!(p.invert(y), x);
        }

        #[test]
        fn is_a_bijection_on_random_sizes(key in any::<u128>(), n in 1u64..5000) {
            let p = Permutation::new(key, 3, n);
            let image: HashSet<u64> = (0..n).map(|x| p.apply(x)).collect();
            prop_assert_eq!(image.len() as u64, n);
        }
    }
}
