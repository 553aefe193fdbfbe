//! Snowflake IDs in Leaf's layout: the pure core (bit layout, decoding, the clock guard).
//! No IO and no tokio: the clock is injected, so every rule is testable without waiting.
//!
//! Layout, high to low: 1 sign bit (always 0), 41 bits of milliseconds since an epoch
//! (Leaf's default [`LEAF_EPOCH_MS`]), 10 bits of worker ID, 12 bits of sequence.

/// Leaf's default epoch (`twepoch`): 2010-11-04 01:42:54.657 UTC, in Unix milliseconds.
pub const LEAF_EPOCH_MS: i64 = 1_288_834_974_657;
/// Bits of the worker ID.
pub const WORKER_ID_BITS: u32 = 10;
/// Bits of the sequence within a millisecond.
pub const SEQUENCE_BITS: u32 = 12;
/// Bits of the timestamp: what is left of an `i64` without its sign bit.
pub const TIMESTAMP_BITS: u32 = 63 - WORKER_ID_BITS - SEQUENCE_BITS;
/// Largest worker ID (1023).
pub const MAX_WORKER_ID: u16 = (1 << WORKER_ID_BITS) - 1;
/// Largest sequence within a millisecond (4095).
pub const MAX_SEQUENCE: u16 = (1 << SEQUENCE_BITS) - 1;
/// Largest millisecond offset from the epoch (about 69.7 years).
pub const MAX_OFFSET_MS: i64 = (1 << TIMESTAMP_BITS) - 1;
/// Leaf starts each millisecond's sequence at `Random.nextInt(100)`: below this.
pub const SEQUENCE_START_BOUND: u16 = 100;
/// Largest backward clock step that is waited out rather than refused, as in Leaf.
pub const MAX_WAITED_BACK_MS: i64 = 5;

/// The parts of a snowflake ID.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded {
    /// Unix milliseconds: the epoch plus the ID's 41-bit offset.
    pub timestamp_ms: i64,
    /// The worker that issued the ID.
    pub worker_id: u16,
    /// The ID's place within its millisecond.
    pub sequence: u16,
}

/// Why an ID or a generator was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SnowflakeError {
    #[error("a snowflake ID is not negative: the sign bit is always 0")]
    Negative,
    #[error("worker ID {0} is above {MAX_WORKER_ID}")]
    WorkerId(u32),
    #[error("the clock is {by} ms behind the last timestamp issued; no ID until it has caught up")]
    ClockBehind {
        /// Milliseconds between the clock and the last timestamp issued.
        by: i64,
    },
    #[error("the clock ({now_ms} ms) is before the epoch ({epoch_ms} ms)")]
    BeforeEpoch { now_ms: i64, epoch_ms: i64 },
    #[error(
        "the clock ({now_ms} ms) is beyond the 41 bits of time after the epoch ({epoch_ms} ms)"
    )]
    TimeExhausted { now_ms: i64, epoch_ms: i64 },
}

/// The ID of `offset_ms` after the epoch, `worker_id` and `sequence`. Parts out of
/// range are masked by the caller's types and constants, never here.
fn compose(offset_ms: i64, worker_id: u16, sequence: u16) -> i64 {
    (offset_ms << (WORKER_ID_BITS + SEQUENCE_BITS))
        | (i64::from(worker_id) << SEQUENCE_BITS)
        | i64::from(sequence)
}

/// The parts of `id`, with its timestamp counted from `epoch_ms`.
///
/// # Errors
/// [`SnowflakeError::Negative`] for a negative `id`: no snowflake ID has its sign bit set.
pub fn decode(id: i64, epoch_ms: i64) -> Result<Decoded, SnowflakeError> {
    if id < 0 {
        return Err(SnowflakeError::Negative);
    }
    let worker_mask = i64::from(MAX_WORKER_ID);
    let sequence_mask = i64::from(MAX_SEQUENCE);
    Ok(Decoded {
        timestamp_ms: (id >> (WORKER_ID_BITS + SEQUENCE_BITS)) + epoch_ms,
        // Masked to 10 and 12 bits: the conversions cannot fail.
        worker_id: u16::try_from((id >> SEQUENCE_BITS) & worker_mask).unwrap_or(MAX_WORKER_ID),
        sequence: u16::try_from(id & sequence_mask).unwrap_or(MAX_SEQUENCE),
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

/// What the generator needs besides the clock: how to wait a few milliseconds (Leaf's
/// `wait(offset << 1)`) and where each millisecond's sequence starts.
pub trait Pause {
    /// Lets about `ms` milliseconds pass.
    fn pause_ms(&mut self, ms: u64);
    /// The sequence a new millisecond starts at, below [`SEQUENCE_START_BOUND`].
    fn sequence_start(&mut self) -> u16;
}

/// Real waiting: a sleep for a backward step, a spin for the next millisecond (as
/// Leaf's `tilNextMillis`), and sequence starts from a xorshift generator, which is as
/// random as Leaf's `java.util.Random` needs to be (the low bits vary; nothing secret).
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

    fn sequence_start(&mut self) -> u16 {
        let mut x = self.state;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.state = x;
        // Below 100: the conversion cannot fail.
        u16::try_from(x % u64::from(SEQUENCE_START_BOUND)).unwrap_or(0)
    }
}

/// Issues the snowflake IDs of one worker ID, as Leaf's `SnowflakeIDGenImpl.get`:
/// never below the last timestamp issued, strictly increasing.
#[derive(Debug)]
pub struct Generator<C> {
    /// The time source.
    clock: C,
    /// Unix milliseconds at offset 0.
    epoch_ms: i64,
    /// This generator's worker ID.
    worker_id: u16,
    /// The timestamp (Unix ms) of the last ID issued; every later ID is at or above it.
    last_ms: i64,
    /// The sequence of the last ID issued.
    sequence: u16,
}

impl<C: Clock> Generator<C> {
    /// A generator for `worker_id` whose IDs are all above `last_ms` (the last
    /// timestamp recorded for that worker ID, or `i64::MIN` when none is).
    ///
    /// # Errors
    /// [`SnowflakeError::WorkerId`] for a worker ID above [`MAX_WORKER_ID`].
    pub fn new(
        clock: C,
        epoch_ms: i64,
        worker_id: u32,
        last_ms: i64,
    ) -> Result<Generator<C>, SnowflakeError> {
        let worker_id = u16::try_from(worker_id)
            .ok()
            .filter(|w| *w <= MAX_WORKER_ID)
            .ok_or(SnowflakeError::WorkerId(worker_id))?;
        Ok(Generator {
            clock,
            epoch_ms,
            worker_id,
            last_ms,
            // The recorded millisecond may have been used up by an earlier holder:
            // the first ID is in a later one.
            sequence: MAX_SEQUENCE,
        })
    }

    /// The timestamp of the last ID issued (to record with a lease).
    pub fn last_ms(&self) -> i64 {
        self.last_ms
    }

    /// The worker ID of every ID this generator issues.
    pub fn worker_id(&self) -> u16 {
        self.worker_id
    }

    /// The next ID. A clock up to [`MAX_WAITED_BACK_MS`] behind the last timestamp is
    /// waited out (twice the gap, once, as Leaf waits); a clock further behind is
    /// refused until it has caught up. When a millisecond's 4096 sequences are used,
    /// the next millisecond is waited for.
    ///
    /// # Errors
    /// [`SnowflakeError::ClockBehind`] while the clock is behind; `BeforeEpoch` or
    /// `TimeExhausted` when the clock is outside the 41 bits of time.
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
        let (now, sequence) = if now == self.last_ms {
            if self.sequence < MAX_SEQUENCE {
                (now, self.sequence + 1)
            } else {
                // This millisecond is used up: Leaf spins until the next one.
                let mut next = self.clock.now_ms();
                while next <= self.last_ms {
                    pause.pause_ms(0);
                    next = self.clock.now_ms();
                }
                (next, pause.sequence_start())
            }
        } else {
            (now, pause.sequence_start())
        };
        let offset = self.offset(now)?;
        self.last_ms = now;
        self.sequence = sequence;
        Ok(compose(offset, self.worker_id, sequence))
    }

    /// `now_ms` counted from the epoch, if it fits in 41 bits.
    fn offset(&self, now_ms: i64) -> Result<i64, SnowflakeError> {
        let offset = now_ms.saturating_sub(self.epoch_ms);
        if offset < 0 {
            return Err(SnowflakeError::BeforeEpoch {
                now_ms,
                epoch_ms: self.epoch_ms,
            });
        }
        if offset > MAX_OFFSET_MS {
            return Err(SnowflakeError::TimeExhausted {
                now_ms,
                epoch_ms: self.epoch_ms,
            });
        }
        Ok(offset)
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
        fn sequence_start(&mut self) -> u16 {
            self.next_start = (self.next_start + 37) % SEQUENCE_START_BOUND;
            self.next_start
        }
    }

    fn setup(start_ms: i64, worker: u32) -> (Rc<Cell<i64>>, Generator<TestClock>, TestPause) {
        let time = Rc::new(Cell::new(start_ms));
        let generator =
            Generator::new(TestClock(time.clone()), LEAF_EPOCH_MS, worker, i64::MIN).unwrap();
        let pause = TestPause {
            clock: time.clone(),
            paused: Vec::new(),
            next_start: 0,
            advances: true,
        };
        (time, generator, pause)
    }

    const NOW: i64 = 1_764_000_000_000;

    #[test]
    fn a_known_id_decodes_as_leaf_decodes_it() {
        let id = compose(NOW - LEAF_EPOCH_MS, 39, 3448);
        let d = decode(id, LEAF_EPOCH_MS).unwrap();
        assert_eq!(
            leaf_decode(id),
            (NOW, 39, 3448),
            "Leaf's formula on our layout"
        );
        assert_eq!((d.timestamp_ms, d.worker_id, d.sequence), (NOW, 39, 3448));
        assert_eq!(decode(-1, LEAF_EPOCH_MS), Err(SnowflakeError::Negative));
    }

    #[test]
    fn each_millisecond_starts_at_a_small_sequence_then_counts_up() {
        let (time, mut g, mut pause) = setup(NOW, 7);
        let a = decode(g.next_id(&mut pause).unwrap(), LEAF_EPOCH_MS).unwrap();
        let b = decode(g.next_id(&mut pause).unwrap(), LEAF_EPOCH_MS).unwrap();
        assert!(a.sequence < SEQUENCE_START_BOUND);
        assert_eq!(b.sequence, a.sequence + 1);
        assert_eq!((a.timestamp_ms, b.timestamp_ms), (NOW, NOW));
        time.set(NOW + 1);
        let c = decode(g.next_id(&mut pause).unwrap(), LEAF_EPOCH_MS).unwrap();
        assert_eq!(c.timestamp_ms, NOW + 1);
        assert!(c.sequence < SEQUENCE_START_BOUND);
        assert_eq!(c.worker_id, 7);
    }

    #[test]
    fn a_used_up_millisecond_waits_for_the_next() {
        let (_, mut g, mut pause) = setup(NOW, 1);
        let mut last = 0;
        let mut count = 0;
        while decode(last, LEAF_EPOCH_MS).unwrap().timestamp_ms <= NOW {
            last = g.next_id(&mut pause).unwrap();
            count += 1;
        }
        let d = decode(last, LEAF_EPOCH_MS).unwrap();
        assert_eq!(d.timestamp_ms, NOW + 1);
        assert!(d.sequence < SEQUENCE_START_BOUND);
        // The first millisecond was used to its last sequence.
        assert!(count > usize::from(MAX_SEQUENCE - SEQUENCE_START_BOUND));
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
        assert!(decode(second, LEAF_EPOCH_MS).unwrap().timestamp_ms >= NOW);
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
        let mut g = Generator::new(TestClock(time.clone()), LEAF_EPOCH_MS, 3, NOW).unwrap();
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
            decode(g.next_id(&mut pause).unwrap(), LEAF_EPOCH_MS)
                .unwrap()
                .timestamp_ms,
            NOW + 1
        );
    }

    #[test]
    fn bad_worker_ids_and_times_are_refused() {
        let time = Rc::new(Cell::new(LEAF_EPOCH_MS - 1));
        assert_eq!(
            Generator::new(TestClock(time.clone()), LEAF_EPOCH_MS, 1024, 0).unwrap_err(),
            SnowflakeError::WorkerId(1024)
        );
        let mut g = Generator::new(TestClock(time.clone()), LEAF_EPOCH_MS, 0, i64::MIN).unwrap();
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
        time.set(LEAF_EPOCH_MS + MAX_OFFSET_MS + 1);
        assert!(matches!(
            g.next_id(&mut pause),
            Err(SnowflakeError::TimeExhausted { .. })
        ));
    }

    #[test]
    fn the_system_pause_starts_sequences_below_the_bound_and_varies() {
        let mut pause = SystemPause::default();
        let starts: std::collections::HashSet<u16> =
            (0..1000).map(|_| pause.sequence_start()).collect();
        assert!(starts.iter().all(|s| *s < SEQUENCE_START_BOUND));
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
                        let d = decode(id, LEAF_EPOCH_MS).unwrap();
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

        #[test]
        fn decode_inverts_compose(
            offset in 0..=MAX_OFFSET_MS,
            worker in 0..=MAX_WORKER_ID,
            sequence in 0..=MAX_SEQUENCE,
            epoch in 0i64..=LEAF_EPOCH_MS,
        ) {
            let d = decode(compose(offset, worker, sequence), epoch).unwrap();
            prop_assert_eq!(d, Decoded { timestamp_ms: offset + epoch, worker_id: worker, sequence });
        }
    }
}
