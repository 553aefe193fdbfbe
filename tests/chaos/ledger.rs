//! Every ID received, as spans of consecutive class members, and the audit that finds
//! any ID received twice.

use super::*;

/// IDs `class + modulus × k` for `k` in `lo..=hi`, received by `source`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Span {
    pub(crate) lo: i64,
    pub(crate) hi: i64,
    pub(crate) source: u32,
}

impl Span {
    pub(crate) fn len(&self) -> u64 {
        (self.hi - self.lo + 1) as u64
    }
}

/// A segment as a server described it: the IDs `current < x <= max` of
/// `x % delta == remainder`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Seg {
    pub(crate) current: i64,
    pub(crate) max: i64,
    pub(crate) delta: i64,
    pub(crate) remainder: i64,
}

impl Seg {
    /// The smallest and largest ID of the segment, or `None` when it holds none (or
    /// its class is invalid).
    pub(crate) fn bounds(&self) -> Option<(i64, i64)> {
        if self.delta < 1 || !(0..self.delta).contains(&self.remainder) {
            return None;
        }
        let first = self.current + 1 + (self.remainder - (self.current + 1)).rem_euclid(self.delta);
        let last = self.max - (self.max - self.remainder).rem_euclid(self.delta);
        (first <= last).then_some((first, last))
    }

    pub(crate) fn count(&self) -> u64 {
        self.bounds()
            .map_or(0, |(first, last)| ((last - first) / self.delta + 1) as u64)
    }
}

/// IDs by biz and class, as spans.
pub(crate) struct Ledger {
    /// `[biz][class]`: spans in the order received.
    pub(crate) spans: Vec<Vec<Vec<Span>>>,
}

impl Ledger {
    pub(crate) fn new() -> Ledger {
        Ledger {
            spans: BIZS
                .iter()
                .map(|b| vec![Vec::new(); b.modulus() as usize])
                .collect(),
        }
    }

    /// Extends the last span of the class when `k` follows it from the same source;
    /// anything else, a repeat included, starts a span of its own.
    pub(crate) fn add_run(&mut self, biz: Biz, class: i64, lo: i64, hi: i64, source: u32) {
        let spans = &mut self.spans[biz.index()][class as usize];
        if let Some(last) = spans.last_mut()
            && last.source == source
            && last.hi.checked_add(1) == Some(lo)
        {
            last.hi = hi;
            return;
        }
        spans.push(Span { lo, hi, source });
    }

    pub(crate) fn add_ids(&mut self, biz: Biz, ids: &[i64], source: u32) {
        let m = biz.modulus();
        for &id in ids {
            let k = id.div_euclid(m);
            self.add_run(biz, id.rem_euclid(m), k, k, source);
        }
    }

    /// Every ID of `seg` (nothing when its class is invalid: that is reported apart).
    pub(crate) fn add_segment(&mut self, biz: Biz, seg: &Seg, source: u32) {
        let Some((first, last)) = seg.bounds() else {
            return;
        };
        let m = biz.modulus();
        if seg.delta == m {
            self.add_run(
                biz,
                seg.remainder,
                first.div_euclid(m),
                last.div_euclid(m),
                source,
            );
        } else {
            let ids: Vec<i64> = (0..)
                .map(|i| first + i * seg.delta)
                .take_while(|&x| x <= last)
                .collect();
            self.add_ids(biz, &ids, source);
        }
    }

    pub(crate) fn absorb(&mut self, other: Ledger) {
        for (mine, theirs) in self.spans.iter_mut().zip(other.spans) {
            for (a, b) in mine.iter_mut().zip(theirs) {
                a.extend(b);
            }
        }
    }

    pub(crate) fn total(&self, biz: Biz) -> u64 {
        self.spans[biz.index()]
            .iter()
            .flatten()
            .map(Span::len)
            .sum()
    }

    pub(crate) fn span_count(&self) -> usize {
        self.spans.iter().flatten().map(Vec::len).sum()
    }
}

/// Distinct IDs and duplicates of one biz in a ledger (whose spans it sorts).
pub(crate) struct Audit {
    pub(crate) distinct: u64,
    pub(crate) duplicates: u64,
    pub(crate) examples: Vec<String>,
}

pub(crate) fn audit(ledger: &mut Ledger, biz: Biz, sources: &[String]) -> Audit {
    let m = biz.modulus();
    let mut a = Audit {
        distinct: 0,
        duplicates: 0,
        examples: Vec::new(),
    };
    for (class, spans) in ledger.spans[biz.index()].iter_mut().enumerate() {
        spans.sort_unstable_by_key(|s| (s.lo, s.hi));
        let mut cover: Option<Span> = None;
        for s in spans.iter() {
            match cover {
                Some(c) if s.lo <= c.hi => {
                    let overlap = (s.hi.min(c.hi) - s.lo + 1) as u64;
                    a.duplicates += overlap;
                    if a.examples.len() < 10 {
                        a.examples.push(format!(
                            "biz `{}`: {overlap} ID(s) from {} received twice, by {} and by {}",
                            biz.name(),
                            class as i64 + m * s.lo,
                            sources[c.source as usize],
                            sources[s.source as usize]
                        ));
                    }
                    if s.hi > c.hi {
                        a.distinct += (s.hi - c.hi) as u64;
                        cover = Some(*s);
                    }
                }
                _ => {
                    a.distinct += s.len();
                    cover = Some(*s);
                }
            }
        }
    }
    a
}

/// Spans of `ids` not inside the spans of `segments`: IDs a client returned that no
/// segment it installed holds. Sorts both.
pub(crate) fn outside(ids: &mut Ledger, segments: &mut Ledger, biz: Biz) -> Vec<String> {
    let m = biz.modulus();
    let mut out = Vec::new();
    let classes = ids.spans[biz.index()]
        .iter_mut()
        .zip(segments.spans[biz.index()].iter_mut());
    for (class, (id_spans, seg_spans)) in classes.enumerate() {
        seg_spans.sort_unstable_by_key(|s| s.lo);
        let mut merged: Vec<(i64, i64)> = Vec::new();
        for s in seg_spans.iter() {
            match merged.last_mut() {
                Some(last) if s.lo <= last.1 + 1 => last.1 = last.1.max(s.hi),
                _ => merged.push((s.lo, s.hi)),
            }
        }
        for s in id_spans.iter() {
            let i = merged.partition_point(|&(lo, _)| lo <= s.lo);
            let inside = i > 0 && merged[i - 1].1 >= s.hi;
            if !inside && out.len() < 10 {
                out.push(format!(
                    "biz `{}`: IDs {}..={} are in no installed segment",
                    biz.name(),
                    class as i64 + m * s.lo,
                    class as i64 + m * s.hi
                ));
            }
        }
    }
    out
}

/// The audit must see what it is there to see: a planted duplicate (an ID both issued
/// alone and inside a segment), an ID in no segment, and nothing in a clean ledger.
pub(crate) fn audit_self_check() {
    let sources = vec!["a".to_string(), "b".to_string()];
    let seg = Seg {
        current: 0,
        max: 300,
        delta: 3,
        remainder: 1,
    };
    let mut clean = Ledger::new();
    clean.add_ids(Biz::Chaos, &[2, 5, 8, 302], 0);
    clean.add_segment(Biz::Chaos, &seg, 1);
    let a = audit(&mut clean, Biz::Chaos, &sources);
    assert_eq!((a.distinct, a.duplicates), (104, 0), "{:?}", a.examples);

    let mut planted = Ledger::new();
    planted.add_ids(Biz::Chaos, &[2, 5, 298, 301], 0);
    planted.add_segment(Biz::Chaos, &seg, 1);
    let a = audit(&mut planted, Biz::Chaos, &sources);
    assert_eq!((a.distinct, a.duplicates), (103, 1), "{:?}", a.examples);
    assert!(a.examples[0].contains("from 298"), "{:?}", a.examples);

    let mut segments = Ledger::new();
    segments.add_segment(
        Biz::Odd,
        &Seg {
            current: 0,
            max: 300,
            delta: 6,
            remainder: 1,
        },
        1,
    );
    let mut returned = Ledger::new();
    returned.add_ids(Biz::Odd, &[1, 7, 295], 0);
    assert!(outside(&mut returned, &mut segments, Biz::Odd).is_empty());
    returned.add_ids(Biz::Odd, &[301], 0);
    let stray = outside(&mut returned, &mut segments, Biz::Odd);
    assert!(stray.len() == 1 && stray[0].contains("301"), "{stray:?}");
}
