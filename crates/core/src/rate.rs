//! Issue rates of a biz, from samples of its running total.
//!
//! The current rate is the number of IDs issued over the last minute divided by a
//! minute (by the time observed, if longer): short bursts are smoothed away, and a
//! fresh start never reports more than was really issued. A minute is short enough to
//! follow load changes and long enough that one large batch does not look like a
//! sustained rate. The peak is the highest current rate of the last 24 hours, kept as
//! one maximum per 5-minute slot (288 numbers per biz), so the step sized from it
//! (see [`crate::step`]) covers the day's busiest minute, not just this one. Pure: the
//! caller passes the time of every sample.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Window of the current rate.
pub const RATE_WINDOW: Duration = Duration::from_secs(60);
/// How far back the peak looks.
pub const PEAK_HORIZON: Duration = Duration::from_secs(24 * 3600);
/// Resolution of the peak's history.
pub const PEAK_SLOT: Duration = Duration::from_secs(300);

/// Rate and peak of one running total.
#[derive(Debug, Clone)]
pub struct RateTracker {
    /// `(time, total)` samples covering at least the last [`RATE_WINDOW`].
    samples: VecDeque<(Instant, u64)>,
    /// `(slot start, highest rate seen in the slot)`, oldest first.
    peaks: VecDeque<(Instant, f64)>,
    rate: f64,
    /// IDs per second between the last two samples: follows a sudden load at once.
    recent: f64,
}

impl Default for RateTracker {
    fn default() -> Self {
        Self::new()
    }
}

impl RateTracker {
    pub fn new() -> Self {
        RateTracker {
            samples: VecDeque::new(),
            peaks: VecDeque::new(),
            rate: 0.0,
            recent: 0.0,
        }
    }

    /// Records that `total` IDs had been issued at `now`. Samples must come in time
    /// order (an earlier one is ignored); once a second is plenty.
    pub fn record(&mut self, now: Instant, total: u64) {
        if let Some(&(last, _)) = self.samples.back()
            && now < last
        {
            return;
        }
        if let Some(&(last, before)) = self.samples.back()
            && now > last
        {
            self.recent =
                total.saturating_sub(before) as f64 / now.duration_since(last).as_secs_f64();
        }
        self.samples.push_back((now, total));
        // Keep one sample at or before the window's start, so the window is covered.
        while self.samples.len() > 2
            && self
                .samples
                .get(1)
                .is_some_and(|&(t, _)| now.duration_since(t) >= RATE_WINDOW)
        {
            self.samples.pop_front();
        }
        self.rate = match (self.samples.front(), self.samples.back()) {
            (Some(&(t0, n0)), Some(&(t1, n1))) => {
                let span = t1.duration_since(t0).max(RATE_WINDOW);
                n1.saturating_sub(n0) as f64 / span.as_secs_f64()
            }
            _ => 0.0,
        };
        match self.peaks.back_mut() {
            Some((start, peak)) if now.duration_since(*start) < PEAK_SLOT => {
                *peak = peak.max(self.rate);
            }
            _ => self.peaks.push_back((now, self.rate)),
        }
        while self
            .peaks
            .front()
            .is_some_and(|&(start, _)| now.duration_since(start) >= PEAK_HORIZON)
        {
            self.peaks.pop_front();
        }
    }

    /// IDs per second over the last [`RATE_WINDOW`], as of the last sample.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// IDs per second between the last two samples (a second apart, as sampled).
    pub fn recent(&self) -> f64 {
        self.recent
    }

    /// The highest [`RateTracker::rate`] over the last [`PEAK_HORIZON`].
    pub fn peak(&self) -> f64 {
        self.peaks.iter().map(|&(_, p)| p).fold(0.0, f64::max)
    }
}

/// Seconds `cached` IDs last at `rate` IDs/s: infinite when nothing is being issued,
/// 0 when nothing is cached.
pub fn runway(cached: u64, rate: f64) -> f64 {
    if cached == 0 {
        0.0
    } else if rate > 0.0 {
        cached as f64 / rate
    } else {
        f64::INFINITY
    }
}

/// [`runway`] as a [`Duration`], for timers: `None` when nothing is cached or the
/// runway is endless (nothing issued, or a rate too small to divide by). A runway
/// longer than a `Duration` holds (a segment of 10¹⁸ IDs at one ID a minute) saturates
/// at [`Duration::MAX`]: this runs while a biz's fetch is being started and must not
/// panic.
pub fn runway_duration(cached: u64, rate: f64) -> Option<Duration> {
    let secs = runway(cached, rate);
    (cached > 0 && secs.is_finite())
        .then(|| Duration::try_from_secs_f64(secs).unwrap_or(Duration::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Feeds one sample per second for `secs` seconds at `per_sec` IDs/s, starting
    /// from `t` and `total`; returns the new time and total.
    fn run(
        tracker: &mut RateTracker,
        t: Instant,
        total: u64,
        secs: u64,
        per_sec: u64,
    ) -> (Instant, u64) {
        let (mut t, mut total) = (t, total);
        for _ in 0..secs {
            t += Duration::from_secs(1);
            total += per_sec;
            tracker.record(t, total);
        }
        (t, total)
    }

    #[test]
    fn steady_load_reads_as_its_rate() {
        let mut r = RateTracker::new();
        let t0 = Instant::now();
        r.record(t0, 0);
        run(&mut r, t0, 0, 120, 500);
        assert!((r.rate() - 500.0).abs() < 1e-9, "{}", r.rate());
        assert!((r.peak() - 500.0).abs() < 1e-9);
    }

    #[test]
    fn a_fresh_start_does_not_overstate() {
        let mut r = RateTracker::new();
        let t0 = Instant::now();
        r.record(t0, 0);
        // 1000 IDs in the first second: a burst, not 1000/s sustained.
        r.record(t0 + Duration::from_secs(1), 1000);
        assert!((r.rate() - 1000.0 / 60.0).abs() < 1e-9, "{}", r.rate());
    }

    #[test]
    fn rate_falls_to_zero_a_minute_after_traffic_stops_but_peak_stays() {
        let mut r = RateTracker::new();
        let t0 = Instant::now();
        r.record(t0, 0);
        let (t, total) = run(&mut r, t0, 0, 120, 1000);
        let (t, total) = run(&mut r, t, total, 30, 0);
        assert!(
            (r.rate() - 500.0).abs() < 1e-9,
            "half the window idle: {}",
            r.rate()
        );
        let (t, total) = run(&mut r, t, total, 30, 0);
        assert_eq!(r.rate(), 0.0);
        assert!((r.peak() - 1000.0).abs() < 1e-9);
        // Still remembered 23 hours later, forgotten after 24 (plus one slot).
        let t = t + Duration::from_secs(23 * 3600);
        r.record(t, total);
        assert!((r.peak() - 1000.0).abs() < 1e-9);
        r.record(t + Duration::from_secs(3600), total);
        assert_eq!(r.peak(), 0.0);
    }

    #[test]
    fn recent_follows_a_sudden_load_that_the_minute_rate_smooths() {
        let mut r = RateTracker::new();
        let t0 = Instant::now();
        r.record(t0, 0);
        let (t, total) = run(&mut r, t0, 0, 120, 10);
        run(&mut r, t, total, 2, 30_000);
        assert!((r.recent() - 30_000.0).abs() < 1e-9, "{}", r.recent());
        assert!(r.rate() < 1_100.0, "{}", r.rate());
    }

    #[test]
    fn peak_is_the_busiest_minute() {
        let mut r = RateTracker::new();
        let t0 = Instant::now();
        r.record(t0, 0);
        let (t, total) = run(&mut r, t0, 0, 600, 100);
        let (t, total) = run(&mut r, t, total, 60, 2000);
        run(&mut r, t, total, 600, 100);
        assert!((r.rate() - 100.0).abs() < 1e-9);
        assert!((r.peak() - 2000.0).abs() < 1e-9, "{}", r.peak());
    }

    #[test]
    fn out_of_order_samples_are_ignored() {
        let mut r = RateTracker::new();
        let t0 = Instant::now() + Duration::from_secs(10);
        r.record(t0, 100);
        r.record(t0 - Duration::from_secs(5), 0);
        r.record(t0 + Duration::from_secs(60), 700);
        assert!((r.rate() - 10.0).abs() < 1e-9);
    }

    #[test]
    fn runway_is_cache_over_rate() {
        assert_eq!(runway(6000, 10.0), 600.0);
        assert_eq!(runway(0, 10.0), 0.0);
        assert_eq!(runway(0, 0.0), 0.0);
        assert_eq!(runway(5, 0.0), f64::INFINITY);
    }

    #[test]
    fn runway_duration_saturates_instead_of_panicking() {
        assert_eq!(runway_duration(6000, 10.0), Some(Duration::from_secs(600)));
        assert_eq!(runway_duration(u64::MAX, 1e-9), Some(Duration::MAX));
        assert_eq!(runway_duration(u64::MAX, 1.0 / 60.0), Some(Duration::MAX));
        assert_eq!(runway_duration(u64::MAX, f64::MIN_POSITIVE), None);
        assert_eq!(runway_duration(5, 0.0), None);
        assert_eq!(runway_duration(5, f64::NAN), None);
        assert_eq!(runway_duration(5, -1.0), None);
        assert_eq!(runway_duration(0, 1e-300), None);
        assert_eq!(runway_duration(1, f64::INFINITY), Some(Duration::ZERO));
    }

    proptest! {
        /// Whatever the cache and the rate, a runway is a number or endless, and the
        /// timer's `Duration` never panics and never falls below the runway it stands
        /// for (up to rounding) unless saturated.
        #[test]
        fn runway_arithmetic_never_panics(
            cached in prop_oneof![Just(0u64), Just(1), Just(u64::MAX), any::<u64>()],
            rate in prop_oneof![
                Just(0.0f64), Just(f64::MIN_POSITIVE), Just(1e-300), Just(f64::NAN),
                Just(f64::INFINITY), Just(-1.0), Just(f64::MAX), any::<f64>(),
            ],
        ) {
            let secs = runway(cached, rate);
            prop_assert!(!secs.is_nan());
            prop_assert!(secs >= 0.0);
            match runway_duration(cached, rate) {
                Some(d) if d == Duration::MAX => prop_assert!(secs >= u64::MAX as f64),
                Some(d) => prop_assert!((d.as_secs_f64() - secs).abs() <= secs * 1e-9 + 1e-9),
                None => prop_assert!(cached == 0 || secs.is_infinite()),
            }
        }

        /// The tracker's rates stay finite and non-negative for any totals and gaps,
        /// including counts that jump to `u64::MAX` and samples a nanosecond apart.
        #[test]
        fn rates_stay_finite(samples in proptest::collection::vec((0u64..=1_000_000_000, any::<u64>()), 1..30)) {
            let mut r = RateTracker::new();
            let mut t = Instant::now();
            for (gap_ns, total) in samples {
                t += Duration::from_nanos(gap_ns);
                r.record(t, total);
                for v in [r.rate(), r.recent(), r.peak()] {
                    prop_assert!(v.is_finite() && v >= 0.0, "{v}");
                }
            }
        }
    }
}
