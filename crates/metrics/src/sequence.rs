//! The metrics of sequence bizs as this server serves them.

use prometheus::{IntCounter, IntCounterVec, IntGaugeVec, Opts, Registry};

use super::registered;

/// The metrics of sequence bizs. Cheap to clone: handles to the registered series.
/// Labels are sequence biz names from the catalog, a finite set.
#[derive(Clone)]
pub struct SequenceMetrics {
    /// Numbers this server answered from memory, by biz.
    numbers: IntCounterVec,
    /// Requests this server sent on to the owner of their key's section, by biz.
    forwarded: IntCounterVec,
    /// Sections this server took by a claim (first owner, takeover, move), by biz.
    taken: IntCounterVec,
    /// Sections this server owns now, by biz; set at each scrape.
    owned: IntGaugeVec,
    /// Keys held in memory, by biz; set at each scrape.
    keys: IntGaugeVec,
    /// Bytes allocated for those keys, by biz; set at each scrape.
    key_bytes: IntGaugeVec,
}

/// A biz's counters, kept by its holder so that counting takes no label lookup.
#[derive(Clone)]
pub struct SequenceCounters {
    pub numbers: IntCounter,
    pub forwarded: IntCounter,
    pub taken: IntCounter,
}

/// What this server holds of one sequence biz, for the gauges.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SequenceHeld {
    pub sections: usize,
    pub keys: usize,
    pub bytes: usize,
}

impl SequenceMetrics {
    /// Registers the sequence metrics with `r`.
    pub(super) fn new(r: &Registry) -> SequenceMetrics {
        let counter = |name: &str, help: &str| {
            registered(r, IntCounterVec::new(Opts::new(name, help), &["biz"]))
        };
        let gauge = |name: &str, help: &str| {
            registered(r, IntGaugeVec::new(Opts::new(name, help), &["biz"]))
        };
        SequenceMetrics {
            numbers: counter(
                "segmint_sequence_numbers_total",
                "Numbers of sequence keys this server answered (a run of count numbers counts count), by biz",
            ),
            forwarded: counter(
                "segmint_sequence_forwarded_total",
                "Sequence requests this server sent on to the owner of their key's section, by biz",
            ),
            taken: counter(
                "segmint_sequence_sections_taken_total",
                "Sections this server took by a claim: a first owner, a takeover after another owner's lease ran out (a failover), or a section moved to it, by biz",
            ),
            owned: gauge(
                "segmint_sequence_sections_owned",
                "Sections of the biz this server owns now",
            ),
            keys: gauge(
                "segmint_sequence_keys",
                "Keys of the biz this server holds in memory (in the sections it owns)",
            ),
            key_bytes: gauge(
                "segmint_sequence_key_bytes",
                "Bytes allocated for the keys this server holds in memory, by biz",
            ),
        }
    }

    /// The counters of `biz`, to keep.
    pub fn counters(&self, biz: &str) -> SequenceCounters {
        SequenceCounters {
            numbers: self.numbers.with_label_values(&[biz]),
            forwarded: self.forwarded.with_label_values(&[biz]),
            taken: self.taken.with_label_values(&[biz]),
        }
    }

    /// Sets the gauges of `biz` to what this server holds of it.
    pub fn set_held(&self, biz: &str, held: SequenceHeld) {
        let set = |g: &IntGaugeVec, v: usize| {
            g.with_label_values(&[biz])
                .set(i64::try_from(v).unwrap_or(i64::MAX));
        };
        set(&self.owned, held.sections);
        set(&self.keys, held.keys);
        set(&self.key_bytes, held.bytes);
    }
}
