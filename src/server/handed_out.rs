//! The segments handed out to identified clients, remembered so that a client's
//! give-back is acted on only for segments this server reserved for that very client.
//! Pure: no IO, no lock (the caller holds one); bounded, the oldest forgotten first.

use std::collections::{BTreeMap, HashMap};

use crate::biz::BizTag;
use crate::segment::{Held, SegmentRange};

/// Segments remembered at most: some 20 MiB at worst, far more segments than clients
/// hold at once.
pub const HANDED_OUT_CAPACITY: usize = 65_536;

/// The `X-Segmint-Client` header's value: 16 to 64 characters of `[0-9A-Za-z_-]`,
/// random per client, so that one client cannot give back another's segments.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ClientId(Box<str>);

impl ClientId {
    /// # Errors
    /// A message saying what a client id must be.
    pub fn parse(value: &str) -> Result<ClientId, String> {
        let ok = (16..=64).contains(&value.len())
            && value
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if ok {
            Ok(ClientId(value.into()))
        } else {
            Err("a client id must be 16 to 64 characters of 0-9, A-Z, a-z, `_` and `-`".into())
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A segment is known by its biz, database and the version its reservation produced.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    biz: BizTag,
    database: usize,
    version: i64,
}

/// What a client says of a segment it gives back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Returned {
    pub database: usize,
    /// The version of the segment's answer.
    pub version: i64,
    /// The last ID the client issued from it, if any.
    pub last_issued: Option<i64>,
}

/// What becomes of one returned segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claim {
    /// The client's own segment: its unissued IDs may go back.
    Held(Held),
    /// Nothing goes back: `ids` are lost (0 when the segment is not known, or is
    /// another client's, which keeps it), for the reason given.
    Wasted { ids: u64, why: &'static str },
}

/// The segments handed out with a client id, oldest first out.
#[derive(Debug)]
pub struct HandedOut {
    capacity: usize,
    /// Sequence number of the next record, for the eviction order.
    next: u64,
    /// Each segment's range, client and sequence number.
    segments: HashMap<Key, (u64, SegmentRange, ClientId)>,
    /// Keys by sequence number: the first is the oldest.
    order: BTreeMap<u64, Key>,
}

impl HandedOut {
    pub fn new(capacity: usize) -> HandedOut {
        HandedOut {
            capacity: capacity.max(1),
            next: 0,
            segments: HashMap::new(),
            order: BTreeMap::new(),
        }
    }

    /// Segments remembered.
    pub fn len(&self) -> usize {
        self.segments.len()
    }

    pub fn is_empty(&self) -> bool {
        self.segments.is_empty()
    }

    /// Remembers that `range`, reserved from `database` at `version`, went to `client`;
    /// forgets the oldest record when full (its segment can then only be wasted).
    pub fn record(
        &mut self,
        biz: &BizTag,
        database: usize,
        version: i64,
        range: SegmentRange,
        client: ClientId,
    ) {
        let key = Key {
            biz: biz.clone(),
            database,
            version,
        };
        let seq = self.next;
        self.next += 1;
        if let Some((old, _, _)) = self.segments.insert(key.clone(), (seq, range, client)) {
            self.order.remove(&old);
        }
        self.order.insert(seq, key);
        while self.segments.len() > self.capacity {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            self.segments.remove(&oldest);
        }
    }

    /// What `client` may give back of the segment it `returned` for `biz`. The
    /// client's own segment is forgotten whatever becomes of it, so that a replay finds
    /// nothing; another client's stays for its owner.
    pub fn claim(&mut self, biz: &BizTag, client: &ClientId, returned: Returned) -> Claim {
        let key = Key {
            biz: biz.clone(),
            database: returned.database,
            version: returned.version,
        };
        let Some((seq, range, owner)) = self.segments.get(&key) else {
            return Claim::Wasted {
                ids: 0,
                why: "not a segment this server handed out (or it was forgotten)",
            };
        };
        if owner != client {
            return Claim::Wasted {
                ids: 0,
                why: "the segment was handed out to another client",
            };
        }
        let (seq, range) = (*seq, *range);
        self.order.remove(&seq);
        self.segments.remove(&key);
        let remaining = match returned.last_issued {
            None => range.len(),
            Some(last) if in_segment(&range, last) => {
                // `last` is an ID of the class: the IDs above it are every delta-th.
                ((range.max_id() - last) / range.residue().delta()) as u64
            }
            Some(_) => {
                return Claim::Wasted {
                    ids: range.len(),
                    why: "last_issued is not an ID of the segment",
                };
            }
        };
        Claim::Held(Held {
            range,
            last_issued: returned.last_issued,
            remaining,
            database: returned.database,
            version: returned.version,
        })
    }
}

/// Whether `id` is one of the IDs `range` yields.
fn in_segment(range: &SegmentRange, id: i64) -> bool {
    let residue = range.residue();
    id > range.current_id()
        && id <= range.max_id()
        && id.rem_euclid(residue.delta()) == residue.remainder()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::{Residue, plan_give_back};

    fn biz() -> BizTag {
        BizTag::parse("order").unwrap()
    }

    fn client(c: char) -> ClientId {
        ClientId::parse(&c.to_string().repeat(22)).unwrap()
    }

    /// `(from, from + step]` in class `d, r`.
    fn range(from: i64, step: i64, d: i64, r: i64) -> SegmentRange {
        SegmentRange::after(from, step, Residue::new(d, r).unwrap()).unwrap()
    }

    fn returned(version: i64, last_issued: Option<i64>) -> Returned {
        Returned {
            database: 0,
            version,
            last_issued,
        }
    }

    #[test]
    fn client_ids_are_16_to_64_safe_characters() {
        for good in ["a".repeat(16), "Az09_-".repeat(10), "x".repeat(64)] {
            assert!(ClientId::parse(&good).is_ok(), "{good}");
        }
        for bad in [
            String::new(),
            "a".repeat(15),
            "a".repeat(65),
            "abcdefghijklmnop ".into(),
            "abcdefghijklmnop/".into(),
            "abcdefghijklmnopé".into(),
        ] {
            assert!(ClientId::parse(&bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_owner_gets_back_the_ids_above_its_last_issued_once() {
        let mut h = HandedOut::new(8);
        // Odd IDs 101..=199: 50 of them; 107 is the fourth.
        h.record(&biz(), 0, 7, range(100, 100, 2, 1), client('a'));
        let Claim::Held(held) = h.claim(&biz(), &client('a'), returned(7, Some(107))) else {
            panic!("not held");
        };
        assert_eq!((held.remaining, held.last_issued), (46, Some(107)));
        let plan = plan_give_back(&[held]);
        assert_eq!((plan[0].new_max_id, plan[0].ids), (107, 46));
        // A replay finds nothing.
        assert!(h.is_empty());
        assert_eq!(
            h.claim(&biz(), &client('a'), returned(7, Some(107))),
            Claim::Wasted {
                ids: 0,
                why: "not a segment this server handed out (or it was forgotten)"
            }
        );
    }

    #[test]
    fn an_untouched_segment_is_held_whole() {
        let mut h = HandedOut::new(8);
        h.record(&biz(), 1, 3, range(0, 10, 1, 0), client('a'));
        let claim = h.claim(
            &biz(),
            &client('a'),
            Returned {
                database: 1,
                version: 3,
                last_issued: None,
            },
        );
        assert!(matches!(claim, Claim::Held(Held { remaining: 10, .. })));
    }

    #[test]
    fn another_clients_segment_stays_for_its_owner() {
        let mut h = HandedOut::new(8);
        h.record(&biz(), 0, 7, range(0, 10, 1, 0), client('a'));
        let claim = h.claim(&biz(), &client('b'), returned(7, None));
        assert!(matches!(claim, Claim::Wasted { ids: 0, .. }));
        let other_biz = BizTag::parse("user").unwrap();
        let claim = h.claim(&other_biz, &client('a'), returned(7, None));
        assert!(matches!(claim, Claim::Wasted { ids: 0, .. }));
        assert!(matches!(
            h.claim(&biz(), &client('a'), returned(7, None)),
            Claim::Held(_)
        ));
    }

    #[test]
    fn a_last_issued_outside_the_segment_or_its_class_wastes_it_all() {
        for last in [100, 201, 102, i64::MIN, i64::MAX] {
            let mut h = HandedOut::new(8);
            h.record(&biz(), 0, 7, range(100, 100, 2, 1), client('a'));
            let claim = h.claim(&biz(), &client('a'), returned(7, Some(last)));
            assert!(
                matches!(claim, Claim::Wasted { ids: 50, .. }),
                "{last}: {claim:?}"
            );
            assert!(h.is_empty(), "{last}");
        }
    }

    #[test]
    fn the_oldest_is_forgotten_at_capacity() {
        let mut h = HandedOut::new(3);
        let record = |h: &mut HandedOut, version: i64| {
            h.record(
                &biz(),
                0,
                version,
                range(version * 10, 10, 1, 0),
                client('a'),
            );
        };
        for version in 1..=5 {
            record(&mut h, version);
        }
        assert_eq!(h.len(), 3);
        for (version, known) in [(1, false), (2, false), (3, true), (4, true), (5, true)] {
            let claim = h.claim(&biz(), &client('a'), returned(version, None));
            assert_eq!(matches!(claim, Claim::Held(_)), known, "{version}");
        }
        // Claimed records leave the eviction order too: the next ones fill up again.
        for version in 6..=8 {
            record(&mut h, version);
        }
        assert_eq!((h.len(), h.order.len()), (3, 3));
    }
}
