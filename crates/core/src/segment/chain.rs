//! A chain of segments issued without a lock: the fast path of the client library.
//!
//! One `AtomicU64` holds the generation of the current segment (high 32 bits) and
//! the offset of the next ID in it (low 32 bits). Taking an ID is one `fetch_add` on
//! that word plus a few plain loads of the current segment's descriptor, which sits at
//! a fixed address on a cache line of its own (a load whose address depended on the
//! `fetch_add` would double the cost); the word hands every offset out once, so every
//! ID of a segment is issued exactly once. Descriptors are published seqlock-style: a
//! reader checks the generation before and after reading one, so it never computes an
//! ID from a descriptor being rewritten. A reader whose segment was replaced between
//! its `fetch_add` and its read finds the segment in a ring of the last [`SLOTS`]
//! ones; preempted for longer than that, it finds its slot reused and gets
//! [`Take::Lost`]: that one ID is skipped, never issued twice. A take that finds the
//! offset far past the segment's end pulls it back to the end, and one take asks for
//! at most [`MAX_TAKE`] IDs, so callers polling a used-up segment never carry the
//! offset into the generation. Switching to the next segment is rare and left to the owner (under
//! its own lock): [`Chain::advance`].

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering, fence};

use super::SegmentRange;

/// Past segments kept for readers that were overtaken by a switch.
pub const SLOTS: usize = 8;
const OFFSET_BITS: u32 = 32;
const OFFSET_MASK: u64 = (1 << OFFSET_BITS) - 1;
/// IDs used of one segment at most; the rest of a larger segment is skipped. Half
/// the offset space, so that offsets past the end cannot carry into the generation
/// before they are pulled back (see [`MAX_TAKE`]).
pub const MAX_SEGMENT_IDS: u64 = 1 << (OFFSET_BITS - 1);
/// IDs one [`Chain::take`] asks for at most; a larger batch takes several.
pub const MAX_TAKE: u64 = 1 << 16;
/// How far past a used-up segment's end the offset may run before a take pulls it
/// back. Polling a used-up segment stays one `fetch_add` (and a pull-back every 2²⁰
/// calls); the offset stays below `MAX_SEGMENT_IDS + PULL_BACK_AFTER` plus the takes in
/// flight between their add and their pull-back, so a carry into the generation would
/// need about 2¹⁵ of those at the same moment.
const PULL_BACK_AFTER: u64 = 1 << 20;
/// Slot generation while the slot is being written.
const WRITING: u64 = u64::MAX;

/// What one attempt to take IDs got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// `count` IDs: `first`, `first + delta`, …; `prefetch` is set for the one
    /// caller whose IDs include the segment's prefetch point (see [`Chain::advance`]).
    Ids {
        first: i64,
        delta: i64,
        count: u64,
        prefetch: bool,
    },
    /// The segment of generation `generation` is used up (for a batch: the IDs it
    /// still had are in the preceding [`Take::Ids`], see [`Chain::take`]).
    Exhausted { generation: u32 },
    /// The slot was reused while this reader was preempted; its IDs are skipped.
    Lost,
}

/// One segment as the readers see it; a cache line of its own.
#[repr(align(64))]
struct Slot {
    generation: AtomicU64,
    first: AtomicI64,
    delta: AtomicI64,
    len: AtomicU64,
    /// Offset whose taker starts fetching the next segment.
    prefetch_at: AtomicU64,
}

/// A consistent read of a [`Slot`].
#[derive(Clone, Copy)]
struct Segment {
    first: i64,
    delta: i64,
    len: u64,
    prefetch_at: u64,
}

/// The `fetch_add` word, alone on its cache line: it bounces between the cores that
/// issue, and must not drag the descriptors along.
#[repr(align(64))]
struct State(AtomicU64);

/// Segments issued lock-free; see the module documentation.
pub struct Chain {
    /// `generation << 32 | offset`.
    state: State,
    /// The current segment.
    current: Slot,
    /// The last [`SLOTS`] segments, by generation modulo [`SLOTS`].
    slots: [Slot; SLOTS],
}

impl Slot {
    fn empty() -> Slot {
        Slot {
            generation: AtomicU64::new(0),
            first: AtomicI64::new(0),
            delta: AtomicI64::new(1),
            len: AtomicU64::new(0),
            prefetch_at: AtomicU64::new(0),
        }
    }

    /// The segment of `generation`, if this slot holds it and was not being written.
    #[inline(always)]
    fn read(&self, generation: u32) -> Option<Segment> {
        let seen = self.generation.load(Ordering::Acquire);
        let segment = Segment {
            first: self.first.load(Ordering::Relaxed),
            delta: self.delta.load(Ordering::Relaxed),
            len: self.len.load(Ordering::Relaxed),
            prefetch_at: self.prefetch_at.load(Ordering::Relaxed),
        };
        fence(Ordering::Acquire);
        (seen == u64::from(generation) && self.generation.load(Ordering::Relaxed) == seen)
            .then_some(segment)
    }

    /// Rewrites the slot; readers of the old contents see it change.
    fn write(&self, generation: u32, segment: Segment) {
        self.generation.store(WRITING, Ordering::Relaxed);
        fence(Ordering::Release);
        self.first.store(segment.first, Ordering::Relaxed);
        self.delta.store(segment.delta, Ordering::Relaxed);
        self.len.store(segment.len, Ordering::Relaxed);
        self.prefetch_at
            .store(segment.prefetch_at, Ordering::Relaxed);
        self.generation
            .store(u64::from(generation), Ordering::Release);
    }
}

impl Default for Chain {
    fn default() -> Self {
        Self::new()
    }
}

impl Chain {
    /// An empty chain: generation 0, a segment of no IDs.
    pub fn new() -> Chain {
        Chain {
            state: State(AtomicU64::new(0)),
            current: Slot::empty(),
            slots: std::array::from_fn(|_| Slot::empty()),
        }
    }

    /// Takes one ID.
    #[inline]
    pub fn next(&self) -> Result<i64, Take> {
        match self.take(1) {
            (Take::Ids { first, .. }, _) => Ok(first),
            (other, _) => Err(other),
        }
    }

    /// Takes up to `n` IDs (at most [`MAX_TAKE`]) of the current segment. Returns what
    /// it got and, when the segment ran out before `n`, `Some(generation)` of the
    /// used-up segment: the rest must come from the next one. A take that finds the
    /// offset far past the end closes the segment (see [`Chain::close`]), so that
    /// callers polling a used-up segment cannot grow its offset into the generation.
    #[inline]
    pub fn take(&self, n: u64) -> (Take, Option<u32>) {
        let n = n.min(MAX_TAKE);
        let v = self.state.0.fetch_add(n, Ordering::AcqRel);
        let generation = (v >> OFFSET_BITS) as u32;
        let offset = v & OFFSET_MASK;
        let Some(Segment {
            first,
            delta,
            len,
            prefetch_at,
        }) = self
            .current
            .read(generation)
            .or_else(|| self.slots[generation as usize % SLOTS].read(generation))
        else {
            return (Take::Lost, None);
        };
        if offset >= len {
            if offset - len >= PULL_BACK_AFTER {
                self.pull_back(generation, len);
            }
            return (Take::Exhausted { generation }, Some(generation));
        }
        let count = n.min(len - offset);
        let take = Take::Ids {
            // Within the segment: at most its last ID, so no overflow.
            first: first + offset as i64 * delta,
            delta,
            count,
            // Offsets are handed out once, so exactly one caller crosses this point.
            prefetch: offset <= prefetch_at && prefetch_at < offset + count,
        };
        (take, (count < n).then_some(generation))
    }

    /// The generation and offset of the current segment, and its size in IDs.
    fn position(&self) -> (u32, u64, u64) {
        let v = self.state.0.load(Ordering::Acquire);
        let generation = (v >> OFFSET_BITS) as u32;
        let len = self.slots[generation as usize % SLOTS]
            .read(generation)
            .map_or(0, |s| s.len);
        (generation, v & OFFSET_MASK, len)
    }

    /// Generation of the current segment.
    pub fn generation(&self) -> u32 {
        self.position().0
    }

    /// IDs left in the current segment.
    pub fn remaining(&self) -> u64 {
        let (_, offset, len) = self.position();
        len.saturating_sub(offset)
    }

    /// IDs of the current segment issued so far.
    pub fn used(&self) -> u64 {
        let (_, offset, len) = self.position();
        offset.min(len)
    }

    /// Size of the current segment, in IDs.
    pub fn len(&self) -> u64 {
        self.position().2
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Pulls the offset of a used-up segment back to its end, so that failed attempts
    /// cannot grow it into the generation bits. [`Chain::take`] does it once the
    /// offset is far past the end; the owner may call it before switching segments.
    pub fn close(&self, generation: u32) {
        if let Some(segment) = self.slots[generation as usize % SLOTS].read(generation) {
            self.pull_back(generation, segment.len);
        }
    }

    /// Ends the segment of `generation` where it stands: its IDs not yet taken are never
    /// issued (a client's segment whose period ended). A take already past its
    /// `fetch_add` keeps its IDs.
    pub fn retire(&self, generation: u32) {
        let Some(segment) = self.slots[generation as usize % SLOTS].read(generation) else {
            return;
        };
        let mut v = self.state.0.load(Ordering::Acquire);
        while (v >> OFFSET_BITS) as u32 == generation && (v & OFFSET_MASK) < segment.len {
            let ended = (v & !OFFSET_MASK) | segment.len;
            match self
                .state
                .0
                .compare_exchange_weak(v, ended, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return,
                Err(now) => v = now,
            }
        }
    }

    /// Sets the offset back to `end` if the segment is still `generation` and the
    /// offset is past `end`. Off the fast path: a take calls it once per
    /// [`PULL_BACK_AFTER`] calls on a used-up segment.
    #[cold]
    fn pull_back(&self, generation: u32, end: u64) {
        let mut v = self.state.0.load(Ordering::Acquire);
        while (v >> OFFSET_BITS) as u32 == generation && (v & OFFSET_MASK) > end {
            let closed = (v & !OFFSET_MASK) | end;
            match self
                .state
                .0
                .compare_exchange_weak(v, closed, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return,
                Err(now) => v = now,
            }
        }
    }

    /// Makes `range` the current segment, if the current one is still `generation`
    /// and used up; returns whether it did. The caller that takes the ID at
    /// `prefetch_percent` % of the new segment is told to fetch the next one. The owner
    /// serialises calls (a segment is installed once); readers never block on it.
    pub fn advance(&self, generation: u32, range: &SegmentRange, prefetch_percent: u8) -> bool {
        let (current, offset, len) = self.position();
        if current != generation || offset < len {
            return false;
        }
        let next = generation.wrapping_add(1);
        let len = range.len().min(MAX_SEGMENT_IDS);
        let segment = Segment {
            first: range.first_id().unwrap_or(0),
            delta: range.residue().delta(),
            len,
            prefetch_at: (len * u64::from(prefetch_percent.min(100)) / 100)
                .min(len.saturating_sub(1)),
        };
        // The ring first, for readers of the old segment that meet the new one in
        // `current`; then `current`; then the word that sends readers to it.
        self.slots[next as usize % SLOTS].write(next, segment);
        self.current.write(next, segment);
        self.state
            .0
            .store(u64::from(next) << OFFSET_BITS, Ordering::Release);
        true
    }
}

impl Take {
    /// The IDs of a [`Take::Ids`], appended to `out`.
    pub fn extend_into(&self, out: &mut Vec<i64>) {
        if let Take::Ids {
            first,
            delta,
            count,
            ..
        } = *self
        {
            // `count` IDs up to the segment's last, so no overflow; the plain range
            // of the common `delta == 1` compiles to vector stores.
            if count == 0 {
            } else if delta == 1 {
                out.extend(first..=first + (count as i64 - 1));
            } else {
                out.extend((0..count as i64).map(|i| first + i * delta));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::Residue;
    use std::collections::HashSet;
    use std::sync::Arc;

    fn seg(max_before: i64, step: i64, d: i64, r: i64) -> SegmentRange {
        SegmentRange::after(max_before, step, Residue::new(d, r).unwrap()).unwrap()
    }

    #[test]
    fn issues_each_segment_exactly_then_reports_exhaustion() {
        let chain = Chain::new();
        assert_eq!(chain.next(), Err(Take::Exhausted { generation: 0 }));
        assert!(chain.advance(0, &seg(0, 10, 2, 1), 20));
        let ids: Vec<i64> = (0..5).map(|_| chain.next().unwrap()).collect();
        assert_eq!(ids, [1, 3, 5, 7, 9]);
        assert_eq!(chain.next(), Err(Take::Exhausted { generation: 1 }));
        assert!(
            !chain.advance(0, &seg(10, 10, 2, 1), 20),
            "stale generation"
        );
        assert!(chain.advance(1, &seg(10, 10, 2, 1), 20));
        assert_eq!(chain.next(), Ok(11));
        assert!(!chain.advance(2, &seg(20, 10, 2, 1), 20), "not used up");
    }

    #[test]
    fn a_batch_stops_at_the_segment_end() {
        let chain = Chain::new();
        chain.advance(0, &seg(100, 5, 1, 0), 40);
        let (take, rest) = chain.take(3);
        assert_eq!(
            take,
            Take::Ids {
                first: 101,
                delta: 1,
                // 40 % of 5 IDs is offset 2, within this batch.
                count: 3,
                prefetch: true,
            }
        );
        assert_eq!(rest, None);
        let (take, rest) = chain.take(3);
        let mut out = Vec::new();
        take.extend_into(&mut out);
        assert_eq!(out, [104, 105]);
        assert!(matches!(
            take,
            Take::Ids {
                prefetch: false,
                ..
            }
        ));
        assert_eq!(rest, Some(1));
    }

    #[test]
    fn exactly_one_taker_is_told_to_prefetch() {
        let chain = Chain::new();
        chain.advance(0, &seg(0, 100, 1, 0), 20);
        let told: Vec<i64> = (0..100)
            .filter_map(|_| match chain.take(1).0 {
                Take::Ids {
                    first,
                    prefetch: true,
                    ..
                } => Some(first),
                _ => None,
            })
            .collect();
        assert_eq!(told, [21]);
        // Even a segment of one ID has a prefetch point.
        let chain = Chain::new();
        chain.advance(0, &seg(0, 1, 1, 0), 90);
        assert!(matches!(chain.take(1).0, Take::Ids { prefetch: true, .. }));
    }

    #[test]
    fn close_pulls_the_offset_back() {
        let chain = Chain::new();
        chain.advance(0, &seg(0, 2, 1, 0), 0);
        for _ in 0..100 {
            let _ = chain.next();
        }
        chain.close(1);
        assert_eq!(chain.state.0.load(Ordering::Relaxed) & OFFSET_MASK, 2);
        assert_eq!(chain.generation(), 1);
    }

    #[test]
    fn a_retired_segment_issues_nothing_more_and_can_be_replaced() {
        let chain = Chain::new();
        chain.advance(0, &seg(0, 10, 1, 0), 0);
        assert_eq!(chain.next(), Ok(1));
        chain.retire(0);
        assert_eq!(chain.next(), Ok(2), "another generation is left alone");
        chain.retire(1);
        assert_eq!(chain.remaining(), 0);
        assert_eq!(chain.next(), Err(Take::Exhausted { generation: 1 }));
        assert!(chain.advance(1, &seg(10, 10, 1, 0), 0));
        assert_eq!(chain.next(), Ok(11));
    }

    /// The raw offset of the chain's word.
    fn offset(chain: &Chain) -> u64 {
        chain.state.0.load(Ordering::Relaxed) & OFFSET_MASK
    }

    #[test]
    fn polling_a_used_up_segment_keeps_pulling_the_offset_back() {
        let bound = |len: u64| len + PULL_BACK_AFTER + 1;
        let chain = Chain::new();
        // Even the empty chain a client starts with.
        for _ in 0..PULL_BACK_AFTER + 1000 {
            assert_eq!(chain.next(), Err(Take::Exhausted { generation: 0 }));
        }
        assert!(offset(&chain) <= bound(0), "{}", offset(&chain));
        chain.advance(0, &seg(0, 2, 1, 0), 0);
        assert_eq!(chain.take(5).1, Some(1), "2 of the 5");
        for i in 0..3 * PULL_BACK_AFTER {
            assert_eq!(chain.next(), Err(Take::Exhausted { generation: 1 }));
            assert!(offset(&chain) <= bound(2), "{} after {i}", offset(&chain));
        }
        assert_eq!(chain.generation(), 1);
        chain.close(1);
        assert_eq!(offset(&chain), 2);
    }

    #[test]
    fn polling_a_used_up_segment_never_carries_into_the_generation() {
        let chain = Chain::new();
        chain.advance(0, &seg(0, 3, 1, 0), 0);
        // As after 2³² - 8 calls on the used-up segment, were nothing pulled back: the
        // next few would carry into generation 2 and meet its IDs before they exist.
        chain
            .state
            .0
            .store(1 << OFFSET_BITS | (OFFSET_MASK - 7), Ordering::Relaxed);
        for _ in 0..100 {
            assert_eq!(chain.next(), Err(Take::Exhausted { generation: 1 }));
        }
        assert_eq!(chain.generation(), 1);
        assert_eq!(
            offset(&chain),
            3 + 99,
            "pulled back to the end by the first take"
        );
    }

    #[test]
    fn a_take_of_2_pow_32_is_capped() {
        let chain = Chain::new();
        chain.advance(0, &seg(0, 10, 1, 0), 0);
        let (take, rest) = chain.take(1 << OFFSET_BITS);
        assert!(
            matches!(
                take,
                Take::Ids {
                    first: 1,
                    count: 10,
                    ..
                }
            ),
            "{take:?}"
        );
        assert_eq!(rest, Some(1));
        assert_eq!(
            chain.generation(),
            1,
            "the offset carried into the generation"
        );
        assert_eq!(offset(&chain), MAX_TAKE, "one capped take past the end");
        let (take, _) = chain.take(u64::MAX);
        assert_eq!(take, Take::Exhausted { generation: 1 });
        assert_eq!(chain.generation(), 1);
        // A segment larger than one take: a huge batch gets MAX_TAKE IDs, then more.
        let chain = Chain::new();
        chain.advance(0, &seg(0, 1 << 20, 1, 0), 0);
        let (take, rest) = chain.take(u64::MAX);
        assert!(
            matches!(
                take,
                Take::Ids {
                    count: MAX_TAKE,
                    ..
                }
            ),
            "{take:?}"
        );
        assert_eq!(rest, None, "the segment has more");
        assert_eq!(offset(&chain), MAX_TAKE);
    }

    #[test]
    fn a_reader_whose_slot_was_reused_loses_its_id() {
        let chain = Chain::new();
        chain.advance(0, &seg(0, 1, 1, 0), 0);
        // Simulate a reader that took the offset of generation 1 and was preempted
        // while SLOTS switches happened: the slot of generation 1 now holds another.
        for g in 1..=SLOTS as u32 {
            while chain.next().is_ok() {}
            assert!(chain.advance(g, &seg(i64::from(g), 1, 1, 0), 0));
        }
        let slot = &chain.slots[1 % SLOTS];
        assert_ne!(slot.generation.load(Ordering::Relaxed), 1);
        chain.state.0.store(1u64 << OFFSET_BITS, Ordering::Relaxed);
        assert_eq!(chain.next(), Err(Take::Lost));
    }

    #[test]
    fn threads_never_share_an_id_and_miss_none() {
        let chain = Arc::new(Chain::new());
        let owner = Arc::new(parking_lot::Mutex::new(0i64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (chain, owner) = (chain.clone(), owner.clone());
                std::thread::spawn(move || {
                    let mut got = Vec::new();
                    while got.len() < 50_000 {
                        match chain.take(1 + got.len() as u64 % 3) {
                            (t @ Take::Ids { .. }, _) => t.extend_into(&mut got),
                            (Take::Exhausted { generation }, _) => {
                                let mut max_id = owner.lock();
                                chain.close(generation);
                                if chain.advance(generation, &seg(*max_id, 97, 1, 0), 20) {
                                    *max_id += 97;
                                }
                            }
                            (Take::Lost, _) => {}
                        }
                    }
                    got
                })
            })
            .collect();
        let mut all = HashSet::new();
        let mut total = 0;
        for t in threads {
            let got = t.join().unwrap();
            total += got.len();
            all.extend(got);
        }
        assert_eq!(all.len(), total, "an ID was issued twice");
        let max = *owner.lock();
        let issued = all.len() as i64;
        // Every ID below the chain's position was issued: none skipped.
        let missing = (1..=max).filter(|id| !all.contains(id)).count() as i64;
        assert_eq!(missing, max - issued);
        assert!(all.iter().all(|&id| id >= 1 && id <= max));
        assert!(
            max - issued < 97,
            "only the current segment's rest is unissued"
        );
    }
}
