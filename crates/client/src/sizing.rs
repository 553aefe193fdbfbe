//! Sizing a client's segments from its own consumption: the step asked for lasts
//! [`ClientBuilder::segment_target`](super::ClientBuilder::segment_target) at the
//! biz's peak rate in this client, by the server's own rule ([`StepPolicy`]): at most
//! twice the previous segment, and never more than one chain can issue. The server
//! bounds the hint again (the row's step below, its `step_max` above).

use std::time::{Duration, Instant};

use crate::rate::RateTracker;
use crate::segment::{MAX_SEGMENT_IDS, SegmentRange};
use crate::step::{StepHint, StepPolicy};

/// Samples closer than this add nothing to a rate over a minute, and would grow the
/// tracker's history by one per fetch when segments are small and fetches frequent.
const SAMPLE_EVERY: Duration = Duration::from_millis(50);
/// Fetches sampled however close together: a burst from a standing start fetches
/// every millisecond at first, and its segments grow only once its rate is seen.
const SAMPLE_FIRST: u32 = 64;

/// The consumption of one biz in one client.
#[derive(Debug, Clone)]
pub(super) struct Sizing {
    rates: RateTracker,
    /// IDs of the segments used up so far (the current one's are added at fetch time).
    finished: u64,
    /// When the tracker was last sampled.
    sampled: Option<Instant>,
    /// Samples taken, up to [`SAMPLE_FIRST`].
    samples: u32,
    /// How long a segment should last at the peak rate.
    target: Duration,
}

impl Sizing {
    pub(super) fn new(target: Duration) -> Sizing {
        Sizing {
            rates: RateTracker::new(),
            finished: 0,
            sampled: None,
            samples: 0,
            target,
        }
    }

    /// A segment of `ids` IDs was used up.
    pub(super) fn finished(&mut self, ids: u64) {
        self.finished = self.finished.saturating_add(ids);
    }

    /// Samples the consumption at `now` (`used` IDs of the current segment so far) and
    /// returns the step to ask for after `previous`, the newest segment; `None` for the
    /// first fetch, which takes the row's step.
    pub(super) fn hint(
        &mut self,
        now: Instant,
        used: u64,
        previous: Option<&SegmentRange>,
    ) -> Option<i64> {
        if self.samples < SAMPLE_FIRST
            || self
                .sampled
                .is_none_or(|t| now.saturating_duration_since(t) >= SAMPLE_EVERY)
        {
            self.rates.record(now, self.finished.saturating_add(used));
            self.sampled = Some(now);
            self.samples = self.samples.saturating_add(1);
        }
        let previous = previous?;
        let delta = previous.residue().delta();
        let policy = StepPolicy {
            adaptive: true,
            target: self.target,
            // One chain issues at most this many IDs of a segment: more would be wasted.
            max: i64::try_from(MAX_SEGMENT_IDS)
                .unwrap_or(i64::MAX)
                .saturating_mul(delta),
        };
        let hint = StepHint {
            peak_rate: self.rates.peak(),
            previous: Some(previous.step()),
        };
        // The row's step is the server's to apply: 1 leaves the minimum to it.
        Some(policy.choose(1, delta, Some(hint)).step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::segment::Residue;

    fn segment(step: i64) -> SegmentRange {
        SegmentRange::after(0, step, Residue::ALL).unwrap()
    }

    #[test]
    fn the_first_fetch_asks_nothing() {
        let mut s = Sizing::new(Duration::from_secs(600));
        assert_eq!(s.hint(Instant::now(), 0, None), None);
    }

    #[test]
    fn a_fast_client_doubles_per_fetch_up_to_the_chains_limit() {
        let mut s = Sizing::new(Duration::from_secs(600));
        let mut t = Instant::now();
        s.hint(t, 0, None);
        let mut step = 1000;
        let mut steps = Vec::new();
        for _ in 0..40 {
            // Each segment used up in 10 ms: 100,000 IDs/s and more.
            t += Duration::from_millis(100);
            s.finished(step as u64);
            step = s.hint(t, 0, Some(&segment(step))).unwrap();
            steps.push(step);
        }
        assert_eq!(steps[..4], [2000, 4000, 8000, 16_000]);
        assert!(steps.windows(2).all(|w| w[1] <= 2 * w[0]), "{steps:?}");
        assert_eq!(*steps.last().unwrap(), 1 << 31, "{steps:?}");
    }

    #[test]
    fn a_burst_from_a_standing_start_grows_from_its_second_fetch() {
        let mut s = Sizing::new(Duration::from_secs(600));
        let t = Instant::now();
        s.hint(t, 0, None);
        // The first segment's prefetch point, a millisecond later.
        let step = s.hint(t + Duration::from_millis(1), 200, Some(&segment(1000)));
        assert_eq!(step, Some(2000));
    }

    #[test]
    fn a_slow_client_asks_for_its_target_and_shrinks_by_half_at_most() {
        let mut s = Sizing::new(Duration::from_secs(60));
        let t0 = Instant::now();
        s.hint(t0, 0, None);
        // 10 IDs/s for two minutes: a minute's worth is 600 IDs.
        let mut t = t0;
        for k in 1..=120 {
            t = t0 + Duration::from_secs(k);
            s.hint(t, k * 10, Some(&segment(10_000)));
        }
        assert_eq!(s.hint(t, 1200, Some(&segment(1000))), Some(600));
        assert_eq!(s.hint(t, 1200, Some(&segment(10_000))), Some(5000));
    }

    #[test]
    fn an_odd_only_biz_asks_twice_the_step_for_the_same_ids() {
        let mut s = Sizing::new(Duration::from_secs(60));
        let t0 = Instant::now();
        s.hint(t0, 0, None);
        let odd = SegmentRange::after(0, 1000, Residue::new(2, 1).unwrap()).unwrap();
        let plain = segment(1000);
        let a = s.hint(t0 + Duration::from_secs(60), 600, Some(&plain));
        let b = s.hint(t0 + Duration::from_secs(60), 600, Some(&odd));
        assert_eq!((a, b), (Some(600), Some(1200)));
    }
}
