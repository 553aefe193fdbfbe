//! A snowflake bit layout: how many bits of an ID hold the time (in ticks of `unit_ms`
//! since an epoch), the worker ID and the sequence within a tick, high to low below a
//! sign bit that is always 0.
//!
//! [`Layout::LEAF`] is Leaf's layout (1 ms, 41/10/12 bits: today's IDs, bit for bit);
//! [`Layout::JS`] keeps every ID below 2^53, so that JavaScript's `Number` holds it
//! exactly. Other widths are accepted within [`Layout::new`]'s bounds.

use std::fmt;

/// Largest time unit accepted: a second. A coarser unit would leave a worker ID's
/// sequences used up for long stretches and make each wait for the next tick longer.
pub const MAX_UNIT_MS: u32 = 1_000;
/// Most worker-ID bits: the lease table holds worker IDs 0 to 1023.
pub const MAX_WORKER_BITS: u32 = 10;
/// Most sequence bits: a sequence is a `u16`.
pub const MAX_SEQUENCE_BITS: u32 = 16;
/// Bits below the sign bit of an `i64`.
pub const MAX_TOTAL_BITS: u32 = 63;
/// Bits of an integer a JavaScript `Number` holds exactly (`Number.MAX_SAFE_INTEGER`
/// is 2^53 − 1).
pub const JS_SAFE_BITS: u32 = 53;
/// Leaf starts each millisecond's 4096 sequences at `Random.nextInt(100)`; the start
/// of a smaller sequence space stays below a fortieth of it (see
/// [`Layout::sequence_start_bound`]).
const LEAF_SEQUENCE_START_BOUND: u32 = 100;

/// The widths of a snowflake ID's parts and the length of its time unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Layout {
    /// Milliseconds per tick of the timestamp.
    pub unit_ms: u32,
    /// Bits of ticks since the epoch: how long the layout lasts.
    pub timestamp_bits: u32,
    /// Bits of the worker ID: how many servers can issue at once.
    pub worker_bits: u32,
    /// Bits of the sequence within a tick: how many IDs a worker issues per tick.
    pub sequence_bits: u32,
}

/// Why a layout was refused; [`LayoutError::field`] names the offending width.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LayoutError {
    #[error("must be between {min} and {max}, got {got}")]
    Range {
        /// The layout's field (`unit_ms`, `timestamp_bits`, …).
        field: &'static str,
        min: u32,
        max: u32,
        got: u32,
    },
    #[error("the widths add up to {total} bits; at most {MAX_TOTAL_BITS} fit below the sign bit")]
    TooWide {
        /// The sum of the three widths.
        total: u32,
    },
}

impl LayoutError {
    /// The field at fault: a width's name, or `timestamp_bits` when the sum is too wide
    /// (the width to lower first, since it usually has bits to spare).
    pub fn field(&self) -> &'static str {
        match self {
            LayoutError::Range { field, .. } => field,
            LayoutError::TooWide { .. } => "timestamp_bits",
        }
    }
}

impl Layout {
    /// Leaf's layout: 1 ms, 41 bits of time (about 69.7 years), 1,024 worker IDs,
    /// 4,096 IDs per millisecond per worker.
    pub const LEAF: Layout = Layout {
        unit_ms: 1,
        timestamp_bits: 41,
        worker_bits: 10,
        sequence_bits: 12,
    };

    /// Every ID below 2^53 (CosId's `SafeJavaScriptSnowflakeId` in milliseconds): the
    /// 41 bits of milliseconds of Leaf's layout (so it lasts as long from the same
    /// epoch and decodes to the same times), 32 worker IDs and 128 IDs per millisecond
    /// per worker (128,000 a second, more than one server issues).
    pub const JS: Layout = Layout {
        unit_ms: 1,
        timestamp_bits: 41,
        worker_bits: 5,
        sequence_bits: 7,
    };

    /// The presets by name, as `[snowflake] layout` takes them.
    pub const PRESETS: [(&'static str, Layout); 2] = [("leaf", Layout::LEAF), ("js", Layout::JS)];

    /// A layout of these widths.
    ///
    /// # Errors
    /// [`LayoutError`] naming the first width out of bounds: `unit_ms` 1 to
    /// [`MAX_UNIT_MS`], `timestamp_bits` 1 to 62, `worker_bits` 1 to
    /// [`MAX_WORKER_BITS`], `sequence_bits` 1 to [`MAX_SEQUENCE_BITS`], the three at
    /// most [`MAX_TOTAL_BITS`] together.
    pub fn new(
        unit_ms: u32,
        timestamp_bits: u32,
        worker_bits: u32,
        sequence_bits: u32,
    ) -> Result<Layout, LayoutError> {
        for (field, got, max) in [
            ("unit_ms", unit_ms, MAX_UNIT_MS),
            ("timestamp_bits", timestamp_bits, MAX_TOTAL_BITS - 1),
            ("worker_bits", worker_bits, MAX_WORKER_BITS),
            ("sequence_bits", sequence_bits, MAX_SEQUENCE_BITS),
        ] {
            if !(1..=max).contains(&got) {
                return Err(LayoutError::Range {
                    field,
                    min: 1,
                    max,
                    got,
                });
            }
        }
        let total = timestamp_bits + worker_bits + sequence_bits;
        if total > MAX_TOTAL_BITS {
            return Err(LayoutError::TooWide { total });
        }
        Ok(Layout {
            unit_ms,
            timestamp_bits,
            worker_bits,
            sequence_bits,
        })
    }

    /// The preset called `name`.
    pub fn preset(name: &str) -> Option<Layout> {
        Layout::PRESETS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, l)| *l)
    }

    /// The name of this layout if it is a preset.
    pub fn name(&self) -> Option<&'static str> {
        Layout::PRESETS
            .iter()
            .find(|(_, l)| l == self)
            .map(|(n, _)| *n)
    }

    /// Bits an ID of this layout may use: every ID is below `2^total_bits`.
    pub fn total_bits(&self) -> u32 {
        self.timestamp_bits + self.worker_bits + self.sequence_bits
    }

    /// Whether every ID is at most `Number.MAX_SAFE_INTEGER`.
    pub fn js_safe(&self) -> bool {
        self.total_bits() <= JS_SAFE_BITS
    }

    /// How many worker IDs there are (`2^worker_bits`, at most 1,024).
    pub fn worker_ids(&self) -> u16 {
        1 << self.worker_bits.min(MAX_WORKER_BITS)
    }

    /// The largest worker ID.
    pub fn max_worker_id(&self) -> u16 {
        self.worker_ids() - 1
    }

    /// The largest sequence within a tick.
    pub fn max_sequence(&self) -> u16 {
        u16::try_from((1u32 << self.sequence_bits.min(MAX_SEQUENCE_BITS)) - 1).unwrap_or(u16::MAX)
    }

    /// The largest tick since the epoch.
    pub fn max_tick(&self) -> i64 {
        (1i64 << self.timestamp_bits.min(MAX_TOTAL_BITS - 1)) - 1
    }

    /// The most IDs one worker ID issues in a second: the sequences of the ticks that
    /// start in it (at least one tick).
    pub fn ids_per_second(&self) -> u64 {
        u64::from((1_000 / self.unit_ms.max(1)).max(1)) * (u64::from(self.max_sequence()) + 1)
    }

    /// A new tick's sequence starts at random below this. Leaf's 100 for its 4,096
    /// sequences (so its IDs' low bits vary, as Leaf's do); a smaller space a fortieth
    /// of it, at least 1 (the JavaScript-safe layout's 128 sequences start below 3), so
    /// that the start never costs more than 2.5 % of a tick's IDs.
    pub fn sequence_start_bound(&self) -> u16 {
        let space = (u32::from(self.max_sequence()) + 1) / 40;
        u16::try_from(space.clamp(1, LEAF_SEQUENCE_START_BOUND)).unwrap_or(1)
    }

    /// The tick of Unix millisecond `ms` counted from `epoch_ms` (negative before it):
    /// every millisecond of one tick maps to it.
    pub fn tick_of(&self, ms: i64, epoch_ms: i64) -> i64 {
        ms.saturating_sub(epoch_ms)
            .div_euclid(i64::from(self.unit_ms.max(1)))
    }

    /// The first Unix millisecond of `tick`.
    pub fn tick_start_ms(&self, tick: i64, epoch_ms: i64) -> i64 {
        tick.saturating_mul(i64::from(self.unit_ms))
            .saturating_add(epoch_ms)
    }

    /// The first Unix millisecond past the layout's last tick from `epoch_ms`: no ID
    /// can be issued from then on.
    pub fn ends_ms(&self, epoch_ms: i64) -> i64 {
        self.tick_start_ms(self.max_tick().saturating_add(1), epoch_ms)
    }

    /// The ID of `tick`, `worker_id` and `sequence`, each masked to its width.
    pub fn compose(&self, tick: i64, worker_id: u16, sequence: u16) -> i64 {
        let tick = tick & self.max_tick();
        let worker = i64::from(worker_id & self.max_worker_id());
        let sequence = i64::from(sequence & self.max_sequence());
        (tick << (self.worker_bits + self.sequence_bits))
            | (worker << self.sequence_bits)
            | sequence
    }

    /// The tick, worker ID and sequence of a non-negative `id`. Bits above the layout's
    /// width are read as ticks: the caller checks `id` against [`Layout::total_bits`].
    pub fn parts(&self, id: i64) -> (i64, u16, u16) {
        let worker = (id >> self.sequence_bits) & i64::from(self.max_worker_id());
        let sequence = id & i64::from(self.max_sequence());
        (
            id >> (self.worker_bits + self.sequence_bits),
            // Masked to their widths (at most 10 and 16 bits): the conversions cannot fail.
            u16::try_from(worker).unwrap_or(0),
            u16::try_from(sequence).unwrap_or(0),
        )
    }
}

impl Default for Layout {
    fn default() -> Self {
        Layout::LEAF
    }
}

impl fmt::Display for Layout {
    /// `js (1 ms, 41/5/7 bits)`, or the widths alone for a layout that is no preset.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(name) = self.name() {
            write!(f, "{name} (")?;
        } else {
            write!(f, "(")?;
        }
        write!(
            f,
            "{} ms, {}/{}/{} bits)",
            self.unit_ms, self.timestamp_bits, self.worker_bits, self.sequence_bits
        )
    }
}

/// What servers of one cluster must agree on for their snowflake IDs never to collide:
/// the epoch and the layout. Recorded once in every database
/// ([`agreement`](super::agreement)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Spec {
    /// Unix milliseconds at tick 0.
    pub epoch_ms: i64,
    /// The bit layout.
    pub layout: Layout,
}

impl Spec {
    /// The text recorded in the databases: every value, so that two specs are equal
    /// exactly when their texts are.
    pub fn record(&self) -> String {
        let Layout {
            unit_ms,
            timestamp_bits,
            worker_bits,
            sequence_bits,
        } = self.layout;
        format!(
            "epoch_ms={} unit_ms={unit_ms} timestamp_bits={timestamp_bits} worker_bits={worker_bits} sequence_bits={sequence_bits}",
            self.epoch_ms
        )
    }
}

impl Default for Spec {
    fn default() -> Self {
        Spec {
            epoch_ms: super::LEAF_EPOCH_MS,
            layout: Layout::LEAF,
        }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn presets_are_valid_and_named() {
        for (name, l) in Layout::PRESETS {
            assert_eq!(
                Layout::new(l.unit_ms, l.timestamp_bits, l.worker_bits, l.sequence_bits),
                Ok(l)
            );
            assert_eq!(Layout::preset(name), Some(l));
            assert_eq!(l.name(), Some(name));
        }
        assert_eq!(Layout::LEAF.total_bits(), 63);
        assert!(!Layout::LEAF.js_safe());
        assert_eq!(Layout::JS.total_bits(), 53);
        assert!(Layout::JS.js_safe());
        assert_eq!(Layout::JS.worker_ids(), 32);
        assert_eq!(Layout::JS.max_sequence(), 127);
        assert_eq!(Layout::LEAF.ids_per_second(), 4_096_000);
        assert_eq!(Layout::JS.ids_per_second(), 128_000);
        assert_eq!(Layout::new(1000, 31, 5, 7).unwrap().ids_per_second(), 128);
        assert_eq!(Layout::new(300, 31, 5, 7).unwrap().ids_per_second(), 384);
        assert_eq!(Layout::LEAF.sequence_start_bound(), 100);
        assert_eq!(Layout::JS.sequence_start_bound(), 3);
        assert_eq!(Layout::new(1, 41, 10, 1).unwrap().sequence_start_bound(), 1);
        assert_eq!(Layout::JS.to_string(), "js (1 ms, 41/5/7 bits)");
        assert_eq!(
            Layout::new(10, 40, 5, 8).unwrap().to_string(),
            "(10 ms, 40/5/8 bits)"
        );
    }

    #[test]
    fn bad_widths_name_their_field() {
        for (l, field) in [
            ((0, 41, 10, 12), "unit_ms"),
            ((1001, 41, 10, 12), "unit_ms"),
            ((1, 0, 10, 12), "timestamp_bits"),
            ((1, 41, 0, 12), "worker_bits"),
            ((1, 41, 11, 12), "worker_bits"),
            ((1, 41, 10, 0), "sequence_bits"),
            ((1, 41, 10, 17), "sequence_bits"),
            ((1, 42, 10, 12), "timestamp_bits"),
        ] {
            let e = Layout::new(l.0, l.1, l.2, l.3).unwrap_err();
            assert_eq!(e.field(), field, "{l:?}: {e}");
        }
    }

    #[test]
    fn a_tick_holds_every_millisecond_of_its_unit() {
        let l = Layout::new(10, 40, 5, 8).unwrap();
        assert_eq!(l.tick_of(1_000, 1_000), 0);
        assert_eq!(l.tick_of(1_009, 1_000), 0);
        assert_eq!(l.tick_of(1_010, 1_000), 1);
        assert_eq!(l.tick_of(999, 1_000), -1);
        assert_eq!(l.tick_start_ms(1, 1_000), 1_010);
        assert!(l.tick_of(i64::MIN, 1_000) < 0);
        assert_eq!(Layout::LEAF.ends_ms(0), 1 << 41);
    }

    #[test]
    fn spec_records_differ_whenever_specs_do() {
        let leaf = Spec::default();
        let js = Spec {
            layout: Layout::JS,
            ..leaf
        };
        let later = Spec {
            epoch_ms: leaf.epoch_ms + 1,
            ..leaf
        };
        assert_eq!(
            leaf.record(),
            "epoch_ms=1288834974657 unit_ms=1 timestamp_bits=41 worker_bits=10 sequence_bits=12"
        );
        assert_ne!(leaf.record(), js.record());
        assert_ne!(leaf.record(), later.record());
    }

    fn layouts() -> impl Strategy<Value = Layout> {
        (1u32..=1000, 1u32..=10, 1u32..=16)
            .prop_flat_map(|(unit, w, s)| {
                (
                    Just(unit),
                    1u32..=(MAX_TOTAL_BITS - w - s),
                    Just(w),
                    Just(s),
                )
            })
            .prop_map(|(unit, t, w, s)| Layout::new(unit, t, w, s).unwrap())
    }

    proptest! {
        /// Every layout within bounds takes its parts back from its IDs, and its IDs
        /// are non-negative and below `2^total_bits`.
        #[test]
        fn parts_invert_compose(layout in layouts(), tick in any::<i64>(), w in any::<u16>(), s in any::<u16>()) {
            let tick = tick.rem_euclid(layout.max_tick() + 1);
            let (w, s) = (w & layout.max_worker_id(), s & layout.max_sequence());
            let id = layout.compose(tick, w, s);
            prop_assert!(id >= 0);
            prop_assert!(layout.total_bits() == 63 || id < 1i64 << layout.total_bits());
            prop_assert_eq!(layout.parts(id), (tick, w, s));
        }
    }
}
