//! The per-biz double buffer: the segment being issued and the one fetched ahead.

use super::{Cursor, SegmentRange};

/// The current segment plus the next one, and whether a fetch is in flight.
///
/// Pure state: the caller holds it under a lock, performs the fetch it asks for, and
/// reports the outcome with [`DoubleBuffer::install`] or [`DoubleBuffer::fetch_failed`].
#[derive(Debug)]
pub struct DoubleBuffer {
    /// The segment IDs are issued from.
    current: Option<Cursor>,
    /// The segment fetched ahead, used once `current` is exhausted.
    next: Option<Cursor>,
    /// A fetch is in flight (single flight: at most one per biz).
    fetching: bool,
    /// Share of `current` (in percent) issued before the next segment is fetched.
    prefetch_percent: u8,
}

impl DoubleBuffer {
    pub fn new(prefetch_percent: u8) -> Self {
        DoubleBuffer {
            current: None,
            next: None,
            fetching: false,
            prefetch_percent: prefetch_percent.min(100),
        }
    }

    /// Appends up to `n` IDs to `out`, moving to the next segment when the current
    /// one runs out. Returns how many it appended.
    pub fn take(&mut self, n: usize, out: &mut Vec<i64>) -> usize {
        let mut taken = 0;
        while taken < n {
            match &mut self.current {
                Some(c) if !c.is_exhausted() => taken += c.take(n - taken, out),
                _ => match self.next.take() {
                    Some(next) => self.current = Some(next),
                    None => break,
                },
            }
        }
        taken
    }

    /// Up to `n` IDs of one segment as a segment of their own (see [`Cursor::carve`]),
    /// moving to the next segment when the current one is used up; `None` when neither
    /// has an ID left.
    pub fn carve(&mut self, n: u64) -> Option<SegmentRange> {
        if self.current.as_ref().is_none_or(Cursor::is_exhausted) {
            self.current = Some(self.next.take()?);
        }
        self.current.as_mut()?.carve(n)
    }

    /// Whether a fetch should start now; if so, marks it in flight so that no other
    /// caller starts one. A fetch is due when no segment is waiting and the current one
    /// is missing, exhausted, used past its prefetch point, or `short` of what a caller
    /// needs.
    pub fn start_fetch(&mut self, short: bool) -> bool {
        let due = !self.fetching
            && self.next.is_none()
            && (short
                || self
                    .current
                    .as_ref()
                    .is_none_or(|c| c.used_at_least(self.prefetch_percent)));
        if due {
            self.fetching = true;
        }
        due
    }

    /// Whether the next segment is already waiting (no fetch can add more).
    pub fn is_full(&self) -> bool {
        self.next.is_some()
    }

    /// A fetch completed: the segment becomes current if nothing is left to issue,
    /// else it waits as the next one.
    pub fn install(&mut self, range: SegmentRange) {
        self.fetching = false;
        let cursor = Cursor::new(range);
        match &self.current {
            Some(c) if !c.is_exhausted() => self.next = Some(cursor),
            _ => self.current = Some(cursor),
        }
    }

    /// A fetch failed; the next caller may start another.
    pub fn fetch_failed(&mut self) {
        self.fetching = false;
    }

    pub fn is_fetching(&self) -> bool {
        self.fetching
    }

    /// IDs that can be issued without a fetch. Saturating: two segments near the top
    /// of the ID space come close to `u64::MAX`, and this runs under the biz's lock.
    pub fn remaining(&self) -> u64 {
        [&self.current, &self.next]
            .into_iter()
            .flatten()
            .map(Cursor::remaining)
            .fold(0, u64::saturating_add)
    }

    /// The segments held (current first), with the last ID issued from each and how
    /// many it has left.
    pub fn held(&self) -> Vec<(SegmentRange, Option<i64>, u64)> {
        [&self.current, &self.next]
            .into_iter()
            .flatten()
            .map(|c| (*c.range(), c.last_issued(), c.remaining()))
            .collect()
    }

    /// The segment IDs are being issued from, if any.
    pub fn current(&self) -> Option<&SegmentRange> {
        self.current.as_ref().map(Cursor::range)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::Residue;
    use proptest::prelude::*;

    fn seg(max_id: i64, step: i64) -> SegmentRange {
        SegmentRange::after(max_id, step, Residue::ALL).unwrap()
    }

    #[test]
    fn empty_buffer_asks_for_one_fetch() {
        let mut buf = DoubleBuffer::new(20);
        let mut out = Vec::new();
        assert_eq!(buf.take(1, &mut out), 0);
        assert!(buf.start_fetch(false));
        assert!(!buf.start_fetch(false), "single flight");
        buf.install(seg(0, 10));
        assert_eq!(buf.take(1, &mut out), 1);
        assert_eq!(out, vec![1]);
    }

    #[test]
    fn prefetches_at_the_prefetch_point_and_switches_without_gap() {
        let mut buf = DoubleBuffer::new(20);
        buf.install(seg(0, 10));
        let mut out = Vec::new();
        buf.take(1, &mut out);
        assert!(
            !buf.start_fetch(false),
            "10 % used, below the 20 % threshold"
        );
        buf.take(1, &mut out);
        assert!(buf.start_fetch(false), "20 % used");
        buf.install(seg(100, 10));
        assert_eq!(buf.remaining(), 18);
        assert!(!buf.start_fetch(false), "next segment already waiting");
        buf.take(12, &mut out);
        assert_eq!(out, (1..=10).chain(101..=104).collect::<Vec<_>>());
        assert_eq!(buf.current().map(SegmentRange::max_id), Some(110));
    }

    #[test]
    fn a_short_caller_fetches_before_the_threshold() {
        let mut buf = DoubleBuffer::new(20);
        buf.install(seg(0, 10));
        assert!(!buf.start_fetch(false));
        assert!(
            buf.start_fetch(true),
            "a caller needing more than is cached"
        );
        buf.install(seg(10, 10));
        assert!(buf.is_full());
        assert!(!buf.start_fetch(true), "nothing more can be buffered");
    }

    #[test]
    fn failed_fetch_can_be_retried() {
        let mut buf = DoubleBuffer::new(20);
        assert!(buf.start_fetch(false));
        buf.fetch_failed();
        assert!(!buf.is_fetching());
        assert!(buf.start_fetch(false));
    }

    proptest! {
        /// Whatever the order of takes and installs, IDs come out strictly increasing
        /// (segments installed in increasing order) and none is lost or repeated.
        #[test]
        fn issues_every_installed_id_once(ops in proptest::collection::vec((1usize..30, any::<bool>()), 1..60), prefetch_percent in 0u8..=100) {
            let mut buf = DoubleBuffer::new(prefetch_percent);
            let mut out = Vec::new();
            let mut max_id = 0;
            let mut installed = 0u64;
            for (n, fetch) in ops {
                buf.take(n, &mut out);
                if fetch && buf.start_fetch(n > 20) {
                    buf.install(seg(max_id, 7));
                    max_id += 7;
                    installed += 7;
                }
            }
            prop_assert!(out.windows(2).all(|w| w[0] < w[1]));
            prop_assert_eq!(out.len() as u64 + buf.remaining(), installed);
        }

        /// Carving (what a server hands its clients) and taking, interleaved, over
        /// segments of any class: every installed ID comes out once, in order, and a
        /// carved segment holds exactly the IDs it took.
        #[test]
        fn carves_and_takes_every_installed_id_once(
            ops in proptest::collection::vec((1usize..30, any::<bool>(), any::<bool>()), 1..60),
            delta in 1i64..4,
        ) {
            let residue = Residue::new(delta, delta - 1).unwrap();
            let mut buf = DoubleBuffer::new(50);
            let mut out = Vec::new();
            let mut max_id = 0;
            let mut installed = 0u64;
            for (n, carve, fetch) in ops {
                if carve {
                    let before = buf.remaining();
                    if let Some(run) = buf.carve(n as u64) {
                        prop_assert!(!run.is_empty() && run.len() <= n as u64);
                        prop_assert_eq!(before - buf.remaining(), run.len());
                        prop_assert_eq!(run.residue(), residue);
                        out.extend(run.ids());
                    } else {
                        prop_assert_eq!(before, 0);
                    }
                } else {
                    buf.take(n, &mut out);
                }
                if fetch && buf.start_fetch(n > 20) {
                    let range = SegmentRange::after(max_id, 11, residue).unwrap();
                    installed += range.len();
                    buf.install(range);
                    max_id += 11;
                }
            }
            prop_assert!(out.windows(2).all(|w| w[0] < w[1]));
            prop_assert!(out.iter().all(|id| residue.contains(*id)));
            prop_assert_eq!(out.len() as u64 + buf.remaining(), installed);
        }
    }
}
