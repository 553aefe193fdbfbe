//! Snowflake IDs: the pure core (bit layouts, decoding, the clock guard, the spec a
//! cluster agrees on). No IO and no tokio: the clock is injected, so every rule is
//! testable without waiting.
//!
//! An ID, high to low: 1 sign bit (always 0), the ticks of `unit_ms` since an epoch
//! (Leaf's default [`LEAF_EPOCH_MS`]), the worker ID, the sequence within a tick; the
//! widths are a [`Layout`] ([`Layout::LEAF`]: 1 ms, 41/10/12 bits, Leaf's own).

pub mod agreement;
pub mod holder;
mod layout;
pub mod lease;

pub use layout::{
    JS_SAFE_BITS, Layout, LayoutError, MAX_SEQUENCE_BITS, MAX_TOTAL_BITS, MAX_UNIT_MS,
    MAX_WORKER_BITS, Spec,
};

/// Leaf's default epoch (`twepoch`): 2010-11-04 01:42:54.657 UTC, in Unix milliseconds.
pub const LEAF_EPOCH_MS: i64 = 1_288_834_974_657;
/// Largest worker ID of any layout (1023): the lease table's range.
pub const MAX_WORKER_ID: u16 = (1 << MAX_WORKER_BITS) - 1;
/// Largest backward clock step that is waited out rather than refused, as in Leaf.
pub const MAX_WAITED_BACK_MS: i64 = 5;

/// The parts of a snowflake ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded {
    /// Unix milliseconds: the epoch plus the ID's ticks, the first millisecond of its
    /// tick.
    pub timestamp_ms: i64,
    /// The worker that issued the ID.
    pub worker_id: u16,
    /// The ID's place within its tick.
    pub sequence: u16,
}

/// Why an ID or a generator was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnowflakeError {
    #[error("a snowflake ID is not negative: the sign bit is always 0")]
    Negative,
    #[error("{id} is wider than the {bits} bits of the layout {layout}")]
    TooWide { id: i64, bits: u32, layout: Layout },
    #[error("worker ID {worker_id} is above {max}, the layout's largest")]
    WorkerId { worker_id: u32, max: u16 },
    #[error("the clock is {by} ms behind the last timestamp issued; no ID until it has caught up")]
    ClockBehind {
        /// Milliseconds between the clock and the last timestamp issued.
        by: i64,
    },
    #[error("the tick's sequences are used up; the next tick starts at Unix ms {next_tick_ms}")]
    TickUsedUp {
        /// The first millisecond of the next tick: ask again then.
        next_tick_ms: i64,
    },
    #[error("the clock ({now_ms} ms) is before the epoch ({epoch_ms} ms)")]
    BeforeEpoch { now_ms: i64, epoch_ms: i64 },
    #[error(
        "the clock ({now_ms} ms) is beyond the timestamp bits of the layout after the epoch ({epoch_ms} ms)"
    )]
    TimeExhausted { now_ms: i64, epoch_ms: i64 },
}

/// The parts of `id` in `layout`, with its timestamp counted from `epoch_ms`.
///
/// # Errors
/// [`SnowflakeError::Negative`] for a negative `id` (no snowflake ID has its sign bit
/// set), [`SnowflakeError::TooWide`] for one above the layout's bits.
pub fn decode(id: i64, epoch_ms: i64, layout: &Layout) -> Result<Decoded, SnowflakeError> {
    if id < 0 {
        return Err(SnowflakeError::Negative);
    }
    let bits = layout.total_bits();
    if bits < MAX_TOTAL_BITS && id >> bits != 0 {
        return Err(SnowflakeError::TooWide {
            id,
            bits,
            layout: *layout,
        });
    }
    let (tick, worker_id, sequence) = layout.parts(id);
    Ok(Decoded {
        timestamp_ms: layout.tick_start_ms(tick, epoch_ms),
        worker_id,
        sequence,
    })
}

/// A source of Unix milliseconds, injected so that tests can step time as they like.
pub trait Clock {
    /// The current time in Unix milliseconds.
    fn now_ms(&mut self) -> i64;
}

impl<F: FnMut() -> i64> Clock for F {
    fn now_ms(&mut self) -> i64 {
        self()
    }
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&mut self) -> i64 {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        i64::try_from(now.as_millis()).unwrap_or(i64::MAX)
    }
}

/// What the generator needs besides the clock: how to wait (Leaf's `wait(offset << 1)`
/// for a clock that went back; a spin through the last millisecond before the next
/// tick) and where each tick's sequence starts.
pub trait Pause {
    /// Lets about `ms` milliseconds pass while a clock that went back catches up; 0:
    /// one spin of a wait for the next tick, within its last millisecond.
    fn pause_ms(&mut self, ms: u64);
    /// The sequence a new tick starts at, below `bound`
    /// ([`Layout::sequence_start_bound`]).
    fn sequence_start(&mut self, bound: u16) -> u16;
}

/// Real waiting: a sleep for a backward step, a spin for the last millisecond before
/// the next tick (as Leaf's `tilNextMillis`), and
/// sequence starts from a xorshift generator, which is as random as Leaf's
/// `java.util.Random` needs to be (the low bits vary; nothing secret).
#[derive(Debug, Clone)]
pub struct SystemPause {
    /// The xorshift64 state; never 0.
    state: u64,
}

impl Default for SystemPause {
    fn default() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        SystemPause {
            state: u64::from(nanos) | 1,
        }
    }
}

impl Pause for SystemPause {
    fn pause_ms(&mut self, ms: u64) {
        if ms == 0 {
            std::hint::spin_loop();
        } else {
            std::thread::sleep(std::time::Duration::from_millis(ms));
        }
    }

    fn sequence_start(&mut self, bound: u16) -> u16 {
        let mut x = self.state;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.state = x;
        // Below a u16: the conversion cannot fail.
        u16::try_from(x % u64::from(bound.max(1))).unwrap_or(0)
    }
}

/// Issues the snowflake IDs of one worker ID, as Leaf's `SnowflakeIDGenImpl.get` in
/// ticks of the layout's unit: never below the last timestamp issued, strictly
/// increasing. The clock guard and the bounds are in milliseconds whatever the unit.
#[derive(Debug)]
pub struct Generator<C> {
    /// The time source.
    clock: C,
    /// Unix milliseconds at tick 0.
    epoch_ms: i64,
    /// The widths of the IDs and the length of a tick.
    layout: Layout,
    /// This generator's worker ID.
    worker_id: u16,
    /// The clock's reading (Unix ms) when the last ID was issued; the clock guard and
    /// the lease's bound compare the clock with it.
    last_ms: i64,
    /// The tick of the last ID issued; every later ID is in it or a later one.
    last_tick: i64,
    /// The sequence of the last ID issued.
    sequence: u16,
}

impl<C: Clock> Generator<C> {
    /// A generator of `layout`'s IDs for `worker_id` whose IDs are all in ticks after
    /// the one holding `last_ms` (the last timestamp recorded for that worker ID, or
    /// `i64::MIN` when none is): with a coarse unit, several milliseconds map to that
    /// tick, and an earlier holder may have used any of its sequences.
    ///
    /// # Errors
    /// [`SnowflakeError::WorkerId`] for a worker ID above the layout's largest.
    pub fn new(
        clock: C,
        epoch_ms: i64,
        layout: Layout,
        worker_id: u32,
        last_ms: i64,
    ) -> Result<Generator<C>, SnowflakeError> {
        let max = layout.max_worker_id();
        let worker_id = u16::try_from(worker_id)
            .ok()
            .filter(|w| *w <= max)
            .ok_or(SnowflakeError::WorkerId { worker_id, max })?;
        Ok(Generator {
            clock,
            epoch_ms,
            layout,
            worker_id,
            last_ms,
            last_tick: layout.tick_of(last_ms, epoch_ms),
            // The recorded tick may have been used up by an earlier holder: the first
            // ID is in a later one.
            sequence: layout.max_sequence(),
        })
    }

    /// The clock's reading at the last ID issued (to record with a lease).
    pub fn last_ms(&self) -> i64 {
        self.last_ms
    }

    /// The worker ID of every ID this generator issues.
    pub fn worker_id(&self) -> u16 {
        self.worker_id
    }

    /// The next ID. A clock up to [`MAX_WAITED_BACK_MS`] behind the last timestamp is
    /// waited out (twice the gap, once, as Leaf waits); a clock further behind is
    /// refused until it has caught up. When a tick's sequences are used, the next tick
    /// is spun for within its last millisecond (as Leaf spins to the next millisecond);
    /// further from it, the caller is told when it starts, to wait without holding
    /// what it holds (a coarse tick may be a second away).
    ///
    /// # Errors
    /// [`SnowflakeError::ClockBehind`] while the clock is behind;
    /// [`SnowflakeError::TickUsedUp`] while the next tick is more than a millisecond
    /// away (nothing changed: ask again then); `BeforeEpoch` or `TimeExhausted` when
    /// the clock is outside the layout's timestamp bits.
    pub fn next_id(&mut self, pause: &mut impl Pause) -> Result<i64, SnowflakeError> {
        let mut now = self.clock.now_ms();
        if now < self.last_ms {
            let by = self.last_ms.saturating_sub(now);
            if by > MAX_WAITED_BACK_MS {
                return Err(SnowflakeError::ClockBehind { by });
            }
            pause.pause_ms(u64::try_from(by).unwrap_or(0) << 1);
            now = self.clock.now_ms();
            if now < self.last_ms {
                return Err(SnowflakeError::ClockBehind {
                    by: self.last_ms.saturating_sub(now),
                });
            }
        }
        let tick = self.layout.tick_of(now, self.epoch_ms);
        let (now, tick, sequence) = if tick <= self.last_tick {
            if self.sequence < self.layout.max_sequence() {
                (now, self.last_tick, self.sequence + 1)
            } else {
                let (now, tick) = self.next_tick(pause)?;
                (
                    now,
                    tick,
                    pause.sequence_start(self.layout.sequence_start_bound()),
                )
            }
        } else {
            (
                now,
                tick,
                pause.sequence_start(self.layout.sequence_start_bound()),
            )
        };
        if tick < 0 {
            return Err(SnowflakeError::BeforeEpoch {
                now_ms: now,
                epoch_ms: self.epoch_ms,
            });
        }
        if tick > self.layout.max_tick() {
            return Err(SnowflakeError::TimeExhausted {
                now_ms: now,
                epoch_ms: self.epoch_ms,
            });
        }
        self.last_ms = now;
        self.last_tick = tick;
        self.sequence = sequence;
        Ok(self.layout.compose(tick, self.worker_id, sequence))
    }

    /// Spins to a tick after the last one (its sequences are used up) when it starts
    /// within a millisecond, as Leaf spins to the next millisecond. Returns the
    /// clock's reading and its tick.
    ///
    /// # Errors
    /// [`SnowflakeError::TickUsedUp`] when the next tick is further away.
    fn next_tick(&mut self, pause: &mut impl Pause) -> Result<(i64, i64), SnowflakeError> {
        let next_tick_ms = self
            .layout
            .tick_start_ms(self.last_tick.saturating_add(1), self.epoch_ms);
        loop {
            let now = self.clock.now_ms();
            let tick = self.layout.tick_of(now, self.epoch_ms);
            if tick > self.last_tick {
                return Ok((now, tick));
            }
            if next_tick_ms.saturating_sub(now) > 1 {
                return Err(SnowflakeError::TickUsedUp { next_tick_ms });
            }
            pause.pause_ms(0);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::rc::Rc;

    use proptest::prelude::*;

    use super::*;

    /// Leaf's decoding, as `LeafMonitorController.decodeSnowflakeId` writes it.
    fn leaf_decode(snowflake_id: i64) -> (i64, i64, i64) {
        let origin_timestamp = (snowflake_id >> 22) + 1288834974657;
        let worker_id = (snowflake_id >> 12) ^ (snowflake_id >> 22 << 10);
        let sequence = snowflake_id ^ (snowflake_id >> 12 << 12);
        (origin_timestamp, worker_id, sequence)
    }

    /// A clock the test moves; pausing advances it, as real waiting would.
    #[derive(Debug, Clone)]
    struct TestClock(Rc<Cell<i64>>);

    impl Clock for TestClock {
        fn now_ms(&mut self) -> i64 {
            self.0.get()
        }
    }

    /// Pauses advance the shared clock by the time asked (at least 1 ms when spinning);
    /// sequence starts follow a fixed pattern below 100.
    struct TestPause {
        clock: Rc<Cell<i64>>,
        paused: Vec<u64>,
        next_start: u16,
        /// Whether a pause moves the clock at all.
        advances: bool,
    }

    impl Pause for TestPause {
        fn pause_ms(&mut self, ms: u64) {
            self.paused.push(ms);
            if self.advances {
                let step = i64::try_from(ms.max(1)).unwrap_or(1);
                self.clock.set(self.clock.get() + step);
            }
        }
        fn sequence_start(&mut self, bound: u16) -> u16 {
            self.next_start = (self.next_start + 37) % bound;
            self.next_start
        }
    }

    fn setup(start_ms: i64, worker: u32) -> (Rc<Cell<i64>>, Generator<TestClock>, TestPause) {
        setup_in(Layout::LEAF, start_ms, worker, i64::MIN)
    }

    const NOW: i64 = 1_764_000_000_000;

    #[test]
    fn a_known_id_decodes_as_leaf_decodes_it() {
        let id = Layout::LEAF.compose(NOW - LEAF_EPOCH_MS, 39, 3448);
        let d = decode(id, LEAF_EPOCH_MS, &Layout::LEAF).unwrap();
        assert_eq!(
            leaf_decode(id),
            (NOW, 39, 3448),
            "Leaf's formula on our layout"
        );
        assert_eq!((d.timestamp_ms, d.worker_id, d.sequence), (NOW, 39, 3448));
        assert_eq!(
            decode(-1, LEAF_EPOCH_MS, &Layout::LEAF),
            Err(SnowflakeError::Negative)
        );
    }

    #[test]
    fn each_millisecond_starts_at_a_small_sequence_then_counts_up() {
        let (time, mut g, mut pause) = setup(NOW, 7);
        let a = decode(g.next_id(&mut pause).unwrap(), LEAF_EPOCH_MS, &Layout::LEAF).unwrap();
        let b = decode(g.next_id(&mut pause).unwrap(), LEAF_EPOCH_MS, &Layout::LEAF).unwrap();
        assert!(a.sequence < 100);
        assert_eq!(b.sequence, a.sequence + 1);
        assert_eq!((a.timestamp_ms, b.timestamp_ms), (NOW, NOW));
        time.set(NOW + 1);
        let c = decode(g.next_id(&mut pause).unwrap(), LEAF_EPOCH_MS, &Layout::LEAF).unwrap();
        assert_eq!(c.timestamp_ms, NOW + 1);
        assert!(c.sequence < 100);
        assert_eq!(c.worker_id, 7);
    }

    #[test]
    fn a_used_up_millisecond_waits_for_the_next() {
        let (_, mut g, mut pause) = setup(NOW, 1);
        let mut last = 0;
        let mut count = 0;
        while decode(last, LEAF_EPOCH_MS, &Layout::LEAF)
            .unwrap()
            .timestamp_ms
            <= NOW
        {
            last = g.next_id(&mut pause).unwrap();
            count += 1;
        }
        let d = decode(last, LEAF_EPOCH_MS, &Layout::LEAF).unwrap();
        assert_eq!(d.timestamp_ms, NOW + 1);
        assert!(d.sequence < 100);
        // The first millisecond was used to its last sequence.
        assert!(count > 4095 - 100);
        assert_eq!(pause.paused, [0]);
    }

    #[test]
    fn a_small_backward_step_is_waited_out() {
        let (time, mut g, mut pause) = setup(NOW, 1);
        let first = g.next_id(&mut pause).unwrap();
        time.set(NOW - 3);
        let second = g.next_id(&mut pause).unwrap();
        assert_eq!(pause.paused, [6], "Leaf waits twice the gap");
        assert!(second > first);
        assert!(
            decode(second, LEAF_EPOCH_MS, &Layout::LEAF)
                .unwrap()
                .timestamp_ms
                >= NOW
        );
    }

    #[test]
    fn a_small_step_not_caught_up_after_the_wait_is_refused() {
        let (time, mut g, mut pause) = setup(NOW, 1);
        pause.advances = false;
        g.next_id(&mut pause).unwrap();
        time.set(NOW - 5);
        assert_eq!(
            g.next_id(&mut pause),
            Err(SnowflakeError::ClockBehind { by: 5 })
        );
    }

    #[test]
    fn a_large_backward_step_is_refused_until_the_clock_catches_up() {
        let (time, mut g, mut pause) = setup(NOW, 1);
        let first = g.next_id(&mut pause).unwrap();
        time.set(NOW - 2_000);
        assert_eq!(
            g.next_id(&mut pause),
            Err(SnowflakeError::ClockBehind { by: 2_000 })
        );
        assert!(pause.paused.is_empty(), "a large step is not waited for");
        time.set(NOW - 6);
        assert_eq!(
            g.next_id(&mut pause),
            Err(SnowflakeError::ClockBehind { by: 6 })
        );
        time.set(NOW);
        assert!(g.next_id(&mut pause).unwrap() > first);
    }

    #[test]
    fn a_recorded_last_timestamp_holds_across_a_restart() {
        let time = Rc::new(Cell::new(NOW - 60_000));
        let mut g =
            Generator::new(TestClock(time.clone()), LEAF_EPOCH_MS, Layout::LEAF, 3, NOW).unwrap();
        let mut pause = TestPause {
            clock: time.clone(),
            paused: Vec::new(),
            next_start: 0,
            advances: true,
        };
        assert_eq!(
            g.next_id(&mut pause),
            Err(SnowflakeError::ClockBehind { by: 60_000 })
        );
        time.set(NOW + 1);
        assert_eq!(
            decode(g.next_id(&mut pause).unwrap(), LEAF_EPOCH_MS, &Layout::LEAF)
                .unwrap()
                .timestamp_ms,
            NOW + 1
        );
    }

    #[test]
    fn bad_worker_ids_and_times_are_refused() {
        let time = Rc::new(Cell::new(LEAF_EPOCH_MS - 1));
        assert_eq!(
            Generator::new(
                TestClock(time.clone()),
                LEAF_EPOCH_MS,
                Layout::LEAF,
                1024,
                0
            )
            .unwrap_err(),
            SnowflakeError::WorkerId {
                worker_id: 1024,
                max: 1023
            }
        );
        let mut g = Generator::new(
            TestClock(time.clone()),
            LEAF_EPOCH_MS,
            Layout::LEAF,
            0,
            i64::MIN,
        )
        .unwrap();
        let mut pause = TestPause {
            clock: time.clone(),
            paused: Vec::new(),
            next_start: 0,
            advances: true,
        };
        assert!(matches!(
            g.next_id(&mut pause),
            Err(SnowflakeError::BeforeEpoch { .. })
        ));
        time.set(Layout::LEAF.ends_ms(LEAF_EPOCH_MS));
        assert!(matches!(
            g.next_id(&mut pause),
            Err(SnowflakeError::TimeExhausted { .. })
        ));
    }

    #[test]
    fn the_system_pause_starts_sequences_below_the_bound_and_varies() {
        let mut pause = SystemPause::default();
        let starts: std::collections::HashSet<u16> =
            (0..1000).map(|_| pause.sequence_start(100)).collect();
        assert!(starts.iter().all(|s| *s < 100));
        assert!(starts.len() > 50, "{starts:?}");
        assert!(
            starts.iter().any(|s| s % 2 == 1),
            "low bits not always even"
        );
    }

    proptest! {
        /// Whatever the clock does (forward, still, small or large steps back), the IDs
        /// issued strictly increase, carry the worker ID, never go below the last
        /// timestamp, and Leaf's formula decodes them as `decode` does.
        #[test]
        fn ids_increase_and_decode_as_leaf_does(
            worker in 0u32..=1023,
            steps in proptest::collection::vec(-20i64..20, 1..300),
        ) {
            let (time, mut g, mut pause) = setup(NOW, worker);
            let mut last_id = i64::MIN;
            let mut last_ms = i64::MIN;
            for step in steps {
                time.set(time.get() + step);
                match g.next_id(&mut pause) {
                    Ok(id) => {
                        prop_assert!(id > last_id);
                        let d = decode(id, LEAF_EPOCH_MS, &Layout::LEAF).unwrap();
                        prop_assert!(d.timestamp_ms >= last_ms);
                        prop_assert_eq!(u32::from(d.worker_id), worker);
                        prop_assert_eq!(
                            leaf_decode(id),
                            (d.timestamp_ms, i64::from(d.worker_id), i64::from(d.sequence))
                        );
                        last_id = id;
                        last_ms = d.timestamp_ms;
                    }
                    Err(SnowflakeError::ClockBehind { by }) => {
                        prop_assert!(by > 0);
                        prop_assert!(time.get() < last_ms);
                    }
                    Err(e) => prop_assert!(false, "unexpected {e}"),
                }
            }
        }

        /// For random layouts (coarse units included), `decode` gives back the tick's
        /// first millisecond, the worker ID and the sequence an ID was composed of.
        #[test]
        fn decode_inverts_compose(
            unit in 1u32..=1000,
            w_bits in 1u32..=10,
            s_bits in 1u32..=16,
            t_seed in any::<u32>(),
            tick_seed in any::<i64>(),
            worker in any::<u16>(),
            sequence in any::<u16>(),
            epoch in 0i64..=LEAF_EPOCH_MS,
        ) {
            let t_bits = 1 + t_seed % (MAX_TOTAL_BITS - w_bits - s_bits);
            let layout = Layout::new(unit, t_bits, w_bits, s_bits).unwrap();
            // Ticks whose milliseconds fit in an i64 (wide timestamps of coarse units
            // outlast it: such a layout ends, for decoding, at i64::MAX).
            let ticks = (layout.max_tick() + 1).min((i64::MAX - epoch) / i64::from(unit));
            let tick = tick_seed.rem_euclid(ticks);
            let (worker, sequence) = (worker & layout.max_worker_id(), sequence & layout.max_sequence());
            let id = layout.compose(tick, worker, sequence);
            let d = decode(id, epoch, &layout).unwrap();
            prop_assert_eq!(d, Decoded {
                timestamp_ms: epoch + tick * i64::from(unit),
                worker_id: worker,
                sequence,
            });
            prop_assert_eq!(layout.tick_of(d.timestamp_ms, epoch), tick);
        }

        /// With a coarse unit, whatever the clock does, IDs strictly increase, stay in
        /// their layout's bits, and never fall in the tick of the floor they started
        /// above.
        #[test]
        fn coarse_ids_increase_above_the_floor(
            unit in prop::sample::select(vec![10u32, 1000]),
            floor_back in 0i64..3_000,
            steps in proptest::collection::vec(-20i64..40, 1..200),
        ) {
            let layout = Layout::new(unit, 40, 5, 3).unwrap();
            let floor = NOW - floor_back;
            let (time, mut g, mut pause) = setup_in(layout, NOW, 3, floor);
            let mut last_id = i64::MIN;
            for step in steps {
                time.set(time.get() + step);
                if let Ok(id) = g.next_id(&mut pause) {
                    prop_assert!(id > last_id);
                    prop_assert!(id < 1 << layout.total_bits());
                    let d = decode(id, LEAF_EPOCH_MS, &layout).unwrap();
                    prop_assert!(layout.tick_of(d.timestamp_ms, LEAF_EPOCH_MS) > layout.tick_of(floor, LEAF_EPOCH_MS));
                    prop_assert_eq!(d.worker_id, 3);
                    last_id = id;
                }
            }
        }
    }

    fn setup_in(
        layout: Layout,
        start_ms: i64,
        worker: u32,
        floor_ms: i64,
    ) -> (Rc<Cell<i64>>, Generator<TestClock>, TestPause) {
        let time = Rc::new(Cell::new(start_ms));
        let generator = Generator::new(
            TestClock(time.clone()),
            LEAF_EPOCH_MS,
            layout,
            worker,
            floor_ms,
        )
        .unwrap();
        let pause = TestPause {
            clock: time.clone(),
            paused: Vec::new(),
            next_start: 0,
            advances: true,
        };
        (time, generator, pause)
    }

    /// A tick of 10 ms starting at `NOW`: `NOW` is its first millisecond.
    const TICK: i64 = 1_764_000_000_000 - (1_764_000_000_000 - LEAF_EPOCH_MS) % 10;

    #[test]
    fn a_coarse_tick_used_up_says_when_the_next_starts_then_moves_to_it() {
        let layout = Layout::new(10, 40, 5, 3).unwrap();
        let (time, mut g, mut pause) = setup_in(layout, TICK + 2, 1, i64::MIN);
        let ids: Vec<Decoded> = (0..8)
            .map(|_| decode(g.next_id(&mut pause).unwrap(), LEAF_EPOCH_MS, &layout).unwrap())
            .collect();
        // 8 sequences, started at 0 (a bound of 1).
        assert_eq!(layout.sequence_start_bound(), 1);
        assert!(ids.iter().all(|d| d.timestamp_ms == TICK));
        assert_eq!(
            ids.iter().map(|d| d.sequence).collect::<Vec<_>>(),
            (0..8).collect::<Vec<_>>()
        );
        // The ninth waits for the next tick, 8 ms away: the caller is told, nothing
        // spun, nothing changed.
        let used_up = Err(SnowflakeError::TickUsedUp {
            next_tick_ms: TICK + 10,
        });
        assert_eq!(g.next_id(&mut pause), used_up);
        assert!(pause.paused.is_empty());
        time.set(TICK + 8);
        assert_eq!(g.next_id(&mut pause), used_up);
        // Within a millisecond of it, it is spun for, as Leaf spins.
        time.set(TICK + 9);
        let d = decode(g.next_id(&mut pause).unwrap(), LEAF_EPOCH_MS, &layout).unwrap();
        assert_eq!((d.timestamp_ms, d.sequence), (TICK + 10, 0));
        assert_eq!(pause.paused, [0]);
        assert_eq!(g.last_ms(), TICK + 10);
    }

    #[test]
    fn a_second_tick_used_up_is_waited_for_by_the_caller() {
        let layout = Layout::new(1000, 35, 5, 1).unwrap();
        let start = LEAF_EPOCH_MS + 1_000 * 1_000_000;
        let (time, mut g, mut pause) = setup_in(layout, start, 0, i64::MIN);
        let a = g.next_id(&mut pause).unwrap();
        let b = g.next_id(&mut pause).unwrap();
        assert_eq!(
            g.next_id(&mut pause),
            Err(SnowflakeError::TickUsedUp {
                next_tick_ms: start + 1_000
            })
        );
        time.set(start + 1_000);
        let c = g.next_id(&mut pause).unwrap();
        assert!(a < b && b < c);
        assert!(pause.paused.is_empty());
        assert_eq!(
            decode(c, LEAF_EPOCH_MS, &layout).unwrap().timestamp_ms,
            start + 1_000
        );
    }

    #[test]
    fn a_floor_excludes_its_whole_tick() {
        let layout = Layout::new(10, 40, 5, 7).unwrap();
        // The floor is the tick's first millisecond; the clock is 5 ms past it, in
        // the same tick: that tick may hold an earlier holder's IDs.
        let (time, mut g, mut pause) = setup_in(layout, TICK + 5, 2, TICK);
        assert_eq!(
            g.next_id(&mut pause),
            Err(SnowflakeError::TickUsedUp {
                next_tick_ms: TICK + 10
            })
        );
        time.set(TICK + 10);
        let d = decode(g.next_id(&mut pause).unwrap(), LEAF_EPOCH_MS, &layout).unwrap();
        assert_eq!(d.timestamp_ms, TICK + 10);
        // The clock guard stays in milliseconds: 3 ms back within the tick is waited
        // out, 6 ms back refused.
        time.set(TICK + 7);
        assert!(g.next_id(&mut pause).is_ok());
        assert_eq!(pause.paused.last(), Some(&6));
        time.set(g.last_ms() - 6);
        assert_eq!(
            g.next_id(&mut pause),
            Err(SnowflakeError::ClockBehind { by: 6 })
        );
    }

    #[test]
    fn js_ids_stay_below_two_to_the_53() {
        let (time, mut g, mut pause) = setup_in(Layout::JS, NOW, 31, i64::MIN);
        let mut last = 0;
        for _ in 0..1_000 {
            last = g.next_id(&mut pause).unwrap();
            assert!(last < 1 << 53);
        }
        time.set(Layout::JS.ends_ms(LEAF_EPOCH_MS) - 1);
        let top = g.next_id(&mut pause).unwrap();
        assert!(top > last && top < 1 << 53, "{top}");
        let d = decode(top, LEAF_EPOCH_MS, &Layout::JS).unwrap();
        assert_eq!(d.worker_id, 31);
        assert!(matches!(
            decode(1 << 53, LEAF_EPOCH_MS, &Layout::JS),
            Err(SnowflakeError::TooWide { bits: 53, .. })
        ));
    }
}
