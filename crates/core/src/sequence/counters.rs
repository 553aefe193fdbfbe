//! A section's per-key numbers in its owner's memory, at about 10 bytes a key.
//!
//! A key is held as a 32-bit fragment of its hash ([`fragment_of`]) and a 32-bit
//! offset above the section's `base` (the floor its owner claimed it at): every key
//! not held is at `base`, above every number any earlier owner answered. Two keys of
//! one section with the same fragment share a counter: each still only goes up (it
//! skips the numbers the other took), which the sequences allow; with a million keys
//! over 64 sections, about two such pairs are expected.
//!
//! Most keys sit in a vector sorted by fragment (8 bytes each, allocated exactly); keys
//! new since its last merge sit in a small hash table, merged into the vector once it
//! holds an eighth as many. A lookup tries the table, then searches the vector.

use hashbrown::HashMap;

/// The table of recent keys is merged into the sorted vector once it holds this many
/// and an eighth of the vector's.
const MERGE_AT_LEAST: usize = 256;

/// The fragment a key with hash `hash` is held under: the hash's low 32 bits (a key's
/// section comes from its high bits, [`super::section_of`]).
pub fn fragment_of(hash: u64) -> u32 {
    hash as u32
}

/// Numbers taken for one key: `first..=last`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Taken {
    pub first: i64,
    pub last: i64,
}

/// A section's keys and its bound, as its owner holds them.
#[derive(Debug, Clone)]
pub struct Counters {
    /// Every key not held is at `base`: the highest bound read when the section was
    /// claimed (or when offsets were rebased).
    base: i64,
    /// No number above it is answered: the bound written to the databases.
    bound: i64,
    /// The highest number answered, `base` before any.
    top: i64,
    /// `fragment << 32 | offset`, sorted by fragment; its capacity is its length.
    sorted: Vec<u64>,
    /// Keys new since the last merge: fragment to offset.
    recent: HashMap<u32, u32, foldhash::fast::RandomState>,
}

/// Equal when they hold the same numbers, however the keys are stored (the model
/// checker compares states).
impl PartialEq for Counters {
    fn eq(&self, other: &Counters) -> bool {
        (self.base, self.bound, self.top) == (other.base, other.bound, other.top)
            && self.entries() == other.entries()
    }
}

impl Eq for Counters {}

impl std::hash::Hash for Counters {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (self.base, self.bound, self.top).hash(state);
        self.entries().hash(state);
    }
}

impl Counters {
    /// Every key held, `fragment << 32 | offset`, sorted.
    fn entries(&self) -> Vec<u64> {
        let mut all: Vec<u64> = self
            .recent
            .iter()
            .map(|(&f, &o)| (u64::from(f) << 32) | u64::from(o))
            .chain(self.sorted.iter().copied())
            .collect();
        all.sort_unstable();
        all
    }

    /// A section whose keys all start at `base`, answering up to `bound`.
    ///
    /// # Panics
    /// When `bound` is below `base` or more than `u32::MAX` above it (an offset holds
    /// every number up to the bound).
    pub fn new(base: i64, bound: i64) -> Counters {
        assert!(
            Counters::fits(base, bound),
            "a section's bound is at most 2^32 - 1 above its base"
        );
        Counters {
            base,
            bound,
            top: base,
            sorted: Vec::new(),
            recent: HashMap::default(),
        }
    }

    /// Whether keys starting at `base` can be held up to `bound`.
    pub fn fits(base: i64, bound: i64) -> bool {
        bound >= base && bound - base <= i64::from(u32::MAX)
    }

    pub fn base(&self) -> i64 {
        self.base
    }

    pub fn bound(&self) -> i64 {
        self.bound
    }

    /// The highest number answered for any key.
    pub fn top(&self) -> i64 {
        self.top
    }

    /// Keys held (fragments, strictly).
    pub fn len(&self) -> usize {
        self.sorted.len() + self.recent.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes allocated for the keys.
    pub fn bytes(&self) -> usize {
        self.sorted.capacity() * size_of::<u64>() + self.recent.allocation_size()
    }

    /// Raises the bound to `bound`, unless offsets from the base cannot reach it: then
    /// `false`, and the owner starts over from a later base.
    ///
    /// # Panics
    /// When `bound` is below the bound held: a bound never goes down.
    pub fn raise(&mut self, bound: i64) -> bool {
        assert!(bound >= self.bound, "a section's bound never goes down");
        if !Counters::fits(self.base, bound) {
            return false;
        }
        self.bound = bound;
        true
    }

    /// The number the key of `fragment` is at: the last answered for it, or the base.
    pub fn current(&self, fragment: u32) -> i64 {
        self.base + i64::from(self.offset(fragment).unwrap_or(0))
    }

    /// Takes the next `count` numbers of the key of `fragment`; `None`, changing
    /// nothing, when they pass the bound.
    ///
    /// # Panics
    /// When `count` is not positive.
    pub fn take(&mut self, fragment: u32, count: i64) -> Option<Taken> {
        assert!(count > 0, "a take is of one number at least");
        let at = self.offset(fragment).unwrap_or(0);
        let last = (self.base + i64::from(at)).checked_add(count)?;
        if last > self.bound {
            return None;
        }
        // Fits: the bound is at most u32::MAX above the base.
        let offset = (last - self.base) as u32;
        self.set(fragment, offset);
        self.top = self.top.max(last);
        Some(Taken {
            first: last - count + 1,
            last,
        })
    }

    fn offset(&self, fragment: u32) -> Option<u32> {
        if let Some(&o) = self.recent.get(&fragment) {
            return Some(o);
        }
        self.find(fragment).ok().map(|i| self.sorted[i] as u32)
    }

    fn find(&self, fragment: u32) -> Result<usize, usize> {
        self.sorted
            .binary_search_by_key(&fragment, |&e| (e >> 32) as u32)
    }

    fn set(&mut self, fragment: u32, offset: u32) {
        let entry = (u64::from(fragment) << 32) | u64::from(offset);
        if let Ok(i) = self.find(fragment) {
            self.sorted[i] = entry;
            return;
        }
        self.recent.insert(fragment, offset);
        if self.recent.len() >= MERGE_AT_LEAST.max(self.sorted.len() / 8) {
            self.merge();
        }
    }

    /// Moves the recent keys into the sorted vector, allocated to its length.
    fn merge(&mut self) {
        let mut recent: Vec<u64> = self
            .recent
            .drain()
            .map(|(f, o)| (u64::from(f) << 32) | u64::from(o))
            .collect();
        recent.sort_unstable();
        // A fragment is in one of the two: comparing entries compares fragments.
        let (a, b) = (&self.sorted, &recent);
        let mut merged = Vec::with_capacity(a.len() + b.len());
        let (mut i, mut j) = (0, 0);
        while i < a.len() && j < b.len() {
            if a[i] < b[j] {
                merged.push(a[i]);
                i += 1;
            } else {
                merged.push(b[j]);
                j += 1;
            }
        }
        merged.extend_from_slice(&a[i..]);
        merged.extend_from_slice(&b[j..]);
        debug_assert!(merged.windows(2).all(|w| w[0] >> 32 < w[1] >> 32));
        self.sorted = merged;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_start_at_the_base_and_only_go_up() {
        let mut c = Counters::new(1_000, 1_010);
        assert_eq!(c.current(7), 1_000);
        assert_eq!(
            c.take(7, 1),
            Some(Taken {
                first: 1_001,
                last: 1_001
            })
        );
        assert_eq!(
            c.take(7, 3),
            Some(Taken {
                first: 1_002,
                last: 1_004
            })
        );
        assert_eq!(c.take(9, 10).map(|t| t.last), Some(1_010));
        assert_eq!(c.take(9, 1), None, "past the bound");
        assert_eq!(c.take(7, 7), None, "past the bound by one");
        assert_eq!(c.current(7), 1_004, "a refused take changes nothing");
        assert_eq!(c.top(), 1_010);
        assert!(c.raise(1_020));
        assert_eq!(c.take(9, 1).map(|t| t.last), Some(1_011));
    }

    #[test]
    fn offsets_that_cannot_reach_the_bound_ask_for_a_new_base() {
        let mut c = Counters::new(0, 10);
        assert!(!c.raise(i64::from(u32::MAX) + 1));
        assert_eq!(c.bound(), 10);
        assert!(c.raise(i64::from(u32::MAX)));
        assert_eq!(
            c.take(1, i64::from(u32::MAX)).map(|t| t.last),
            Some(i64::from(u32::MAX))
        );
        assert_eq!(c.take(2, i64::MAX), None, "no overflow past i64::MAX");
    }

    #[test]
    fn many_keys_keep_their_own_numbers_across_merges() {
        let mut c = Counters::new(0, i64::from(u32::MAX));
        let keys: Vec<u32> = (0..20_000u32)
            .map(|i| i.wrapping_mul(2_654_435_761))
            .collect();
        for round in 1..=3i64 {
            for (i, &k) in keys.iter().enumerate() {
                let n = c.take(k, 1 + i as i64 % 3).map(|t| t.last);
                assert_eq!(n, Some(round * (1 + i as i64 % 3)), "key {i} round {round}");
            }
        }
        assert_eq!(c.len(), keys.len());
        for (i, &k) in keys.iter().enumerate() {
            assert_eq!(c.current(k), 3 * (1 + i as i64 % 3));
        }
        assert_eq!(c.current(5), 0, "a key never taken");
    }

    /// The budget: at most 16 bytes per active key, a million keys over the
    /// default 64 sections.
    #[test]
    fn a_million_keys_take_at_most_16_bytes_each() {
        let mut sections: Vec<Counters> = (0..64).map(|_| Counters::new(0, 1 << 20)).collect();
        for i in 0..1_000_000u32 {
            let h = super::super::key_hash(&format!("user:{i}"));
            let s = super::super::section_of(h, 64) as usize;
            sections[s].take(fragment_of(h), 1);
        }
        let keys: usize = sections.iter().map(Counters::len).sum();
        let bytes: usize = sections.iter().map(Counters::bytes).sum();
        assert!(keys > 999_000, "{keys} distinct fragments");
        let per_key = bytes as f64 / keys as f64;
        assert!(per_key <= 16.0, "{per_key:.1} bytes per key");
        assert!(per_key >= 8.0, "{per_key:.1} bytes per key");
    }
}
