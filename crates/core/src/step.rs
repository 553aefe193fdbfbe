//! Step sizing: how many IDs the next segment of a biz should span.
//!
//! A segment should last [`StepPolicy::target`] (10 minutes by default) at the biz's
//! peak rate, so that the cache rides out a database outage of that length. The biz
//! row's `step` is the minimum, [`StepPolicy::max`] the maximum, and the step changes
//! by at most a factor of 2 from one fetch to the next, so one burst cannot blow a
//! segment up and a quiet hour cannot shrink it to nothing at once. Pure: no clock, no
//! IO; the caller passes the observed peak rate.

use std::time::Duration;

/// How the step of the cache's segments is chosen (from the configuration).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepPolicy {
    /// False: every segment of the server's cache uses the biz row's step, as Tinyid
    /// does (a client's asked step is bounded by [`StepPolicy::bound_asked`] either way).
    pub adaptive: bool,
    /// How long a segment should last at the peak rate.
    pub target: Duration,
    /// Upper bound on a chosen step; a row's own step is used even if larger.
    pub max: i64,
}

impl Default for StepPolicy {
    fn default() -> Self {
        StepPolicy {
            adaptive: true,
            target: Duration::from_secs(600),
            max: 1_000_000,
        }
    }
}

/// Why a step was chosen; reported in logs and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepReason {
    /// Adaptive sizing is off: the row's step.
    Fixed,
    /// The target was below the row's step, which is the minimum.
    Minimum,
    /// The step that lasts the target time at the peak rate.
    Target,
    /// The target was more than twice the previous step.
    GrowthLimited,
    /// The target was less than half the previous step.
    ShrinkLimited,
    /// The target exceeded the configured maximum.
    Maximum,
}

impl StepReason {
    pub const ALL: [StepReason; 6] = [
        StepReason::Fixed,
        StepReason::Minimum,
        StepReason::Target,
        StepReason::GrowthLimited,
        StepReason::ShrinkLimited,
        StepReason::Maximum,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            StepReason::Fixed => "fixed",
            StepReason::Minimum => "minimum",
            StepReason::Target => "target",
            StepReason::GrowthLimited => "growth_limited",
            StepReason::ShrinkLimited => "shrink_limited",
            StepReason::Maximum => "maximum",
        }
    }
}

impl std::fmt::Display for StepReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the cache knows when it asks for a segment.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct StepHint {
    /// Peak issue rate of the biz, IDs per second.
    pub peak_rate: f64,
    /// Step of the previous segment reserved for the cache, if any.
    pub previous: Option<i64>,
}

/// What the step of a reservation is based on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum StepRequest {
    /// The row's own step, as Tinyid does.
    Row,
    /// Chosen by the [`StepPolicy`] from what the server's cache observed.
    Adaptive(StepHint),
    /// Asked by a client that measured its own rate, bounded by the policy.
    Asked(i64),
}

/// A chosen step and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepChoice {
    pub step: i64,
    pub reason: StepReason,
}

/// Rounds up to two significant digits: 123 → 130, 1_234_567 → 1_300_000.
fn round_up_2_digits(x: f64) -> i64 {
    if x.is_nan() || x <= 0.0 {
        return 0;
    }
    if x >= i64::MAX as f64 {
        return i64::MAX;
    }
    let magnitude = 10f64.powi((x.log10().floor() as i32 - 1).max(0));
    let rounded = (x / magnitude).ceil() * magnitude;
    if rounded >= i64::MAX as f64 {
        i64::MAX
    } else {
        rounded as i64
    }
}

impl StepPolicy {
    /// The step that lasts [`StepPolicy::target`] at `peak_rate` IDs/s on a row of
    /// class modulus `delta` (a segment of step `s` holds about `s / delta` IDs),
    /// rounded up to two significant digits; 0 when nothing was issued.
    pub fn recommended(&self, peak_rate: f64, delta: i64) -> i64 {
        let ids = peak_rate * self.target.as_secs_f64();
        round_up_2_digits(ids * delta.max(1) as f64)
    }

    /// The step for the next segment from a row with step `row_step` and class
    /// modulus `delta`.
    pub fn choose(&self, row_step: i64, delta: i64, hint: Option<StepHint>) -> StepChoice {
        let Some(hint) = hint.filter(|_| self.adaptive) else {
            return StepChoice {
                step: row_step,
                reason: StepReason::Fixed,
            };
        };
        let mut step = self.recommended(hint.peak_rate, delta);
        let mut reason = StepReason::Target;
        if let Some(previous) = hint.previous.filter(|p| *p > 0) {
            if step > previous.saturating_mul(2) {
                step = previous.saturating_mul(2);
                reason = StepReason::GrowthLimited;
            } else if step < (previous / 2 + previous % 2) {
                step = previous / 2 + previous % 2;
                reason = StepReason::ShrinkLimited;
            }
        }
        if step > self.max {
            step = self.max;
            reason = StepReason::Maximum;
        }
        if step <= row_step {
            step = row_step;
            reason = StepReason::Minimum;
        }
        StepChoice { step, reason }
    }

    /// As [`StepPolicy::choose`], for a row with only `room` IDs left below
    /// `i64::MAX`: a chosen step wider than that shrinks to fit, down to the row's step,
    /// so that a large adaptive step never exhausts the ID space before the row's own
    /// step would. The row's step itself is not shrunk: past it, overflow is an error.
    pub fn choose_within(
        &self,
        row_step: i64,
        delta: i64,
        hint: Option<StepHint>,
        room: i64,
    ) -> StepChoice {
        fit(self.choose(row_step, delta, hint), row_step, room)
    }

    /// The step for `request` from a row with step `row_step`, class modulus `delta`
    /// and `room` IDs left below `i64::MAX`.
    pub fn for_request(
        &self,
        row_step: i64,
        delta: i64,
        request: StepRequest,
        room: i64,
    ) -> StepChoice {
        match request {
            StepRequest::Row => self.choose_within(row_step, delta, None, room),
            StepRequest::Adaptive(hint) => self.choose_within(row_step, delta, Some(hint), room),
            StepRequest::Asked(asked) => self.bound_asked(row_step, asked, room),
        }
    }

    /// The step of a segment a client asked to be `asked` IDs wide, from a row with
    /// step `row_step` and `room` IDs left below `i64::MAX`: at least the row's step,
    /// at most [`StepPolicy::max`] (unless the row's step is larger), and shrunk to the
    /// room as [`StepPolicy::choose_within`] does. The client measured its own rate:
    /// the server only keeps the ask within bounds, and ignores `adaptive`, which is
    /// about its own cache.
    pub fn bound_asked(&self, row_step: i64, asked: i64, room: i64) -> StepChoice {
        let choice = if asked <= row_step || self.max <= row_step {
            StepChoice {
                step: row_step,
                reason: StepReason::Minimum,
            }
        } else if asked > self.max {
            StepChoice {
                step: self.max,
                reason: StepReason::Maximum,
            }
        } else {
            StepChoice {
                step: asked,
                reason: StepReason::Target,
            }
        };
        fit(choice, row_step, room)
    }
}

/// `choice` for a row with step `row_step` and only `room` IDs left below `i64::MAX`:
/// a step wider than the room shrinks to fit, down to the row's step, which itself is
/// never shrunk (past it, overflow is an error).
fn fit(choice: StepChoice, row_step: i64, room: i64) -> StepChoice {
    if choice.step > room && room > row_step {
        StepChoice {
            step: room,
            reason: StepReason::Maximum,
        }
    } else if choice.step > room && choice.step > row_step {
        StepChoice {
            step: row_step,
            reason: StepReason::Minimum,
        }
    } else {
        choice
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn policy() -> StepPolicy {
        StepPolicy::default()
    }

    fn hint(peak_rate: f64, previous: Option<i64>) -> Option<StepHint> {
        Some(StepHint {
            peak_rate,
            previous,
        })
    }

    #[test]
    fn recommended_is_600_times_peak_rounded_up() {
        let p = policy();
        assert_eq!(p.recommended(0.0, 1), 0);
        assert_eq!(p.recommended(1000.0, 1), 600_000);
        assert_eq!(p.recommended(1234.0, 1), 750_000); // 740_400 → 750_000
        assert_eq!(p.recommended(0.5, 1), 300);
        assert_eq!(p.recommended(0.01, 1), 6);
        // Every other ID of an odd-only row: twice the step for the same IDs.
        assert_eq!(p.recommended(1000.0, 2), 1_200_000);
        assert_eq!(p.recommended(f64::INFINITY, 1), i64::MAX);
        assert_eq!(p.recommended(f64::NAN, 1), 0);
    }

    #[test]
    fn fixed_when_off_or_without_a_hint() {
        let off = StepPolicy {
            adaptive: false,
            ..policy()
        };
        let fixed = StepChoice {
            step: 1000,
            reason: StepReason::Fixed,
        };
        assert_eq!(off.choose(1000, 1, hint(1e6, Some(5000))), fixed);
        assert_eq!(policy().choose(1000, 1, None), fixed);
    }

    #[test]
    fn row_step_is_the_minimum() {
        let c = policy().choose(1000, 1, hint(0.0, None));
        assert_eq!((c.step, c.reason), (1000, StepReason::Minimum));
        // Shrinking stops at the row's step as well.
        let c = policy().choose(1000, 1, hint(0.0, Some(1500)));
        assert_eq!((c.step, c.reason), (1000, StepReason::Minimum));
    }

    #[test]
    fn first_adaptive_step_is_the_target() {
        let c = policy().choose(1000, 1, hint(100.0, None));
        assert_eq!((c.step, c.reason), (60_000, StepReason::Target));
    }

    #[test]
    fn grows_and_shrinks_by_at_most_two() {
        let c = policy().choose(1000, 1, hint(100.0, Some(10_000)));
        assert_eq!((c.step, c.reason), (20_000, StepReason::GrowthLimited));
        let c = policy().choose(1000, 1, hint(10.0, Some(60_001)));
        assert_eq!((c.step, c.reason), (30_001, StepReason::ShrinkLimited));
        let c = policy().choose(1000, 1, hint(100.0, Some(40_000)));
        assert_eq!((c.step, c.reason), (60_000, StepReason::Target));
    }

    #[test]
    fn capped_at_the_maximum_unless_the_row_says_more() {
        let p = StepPolicy {
            max: 50_000,
            ..policy()
        };
        let c = p.choose(1000, 1, hint(1000.0, Some(40_000)));
        assert_eq!((c.step, c.reason), (50_000, StepReason::Maximum));
        let c = p.choose(80_000, 1, hint(1000.0, Some(40_000)));
        assert_eq!((c.step, c.reason), (80_000, StepReason::Minimum));
    }

    #[test]
    fn near_the_top_a_wide_step_shrinks_to_fit() {
        let p = policy();
        let wide = hint(1e6, Some(500_000));
        // Room for 5000 more: the adaptive step shrinks to it.
        let c = p.choose_within(100, 1, wide, 5_000);
        assert_eq!((c.step, c.reason), (5_000, StepReason::Maximum));
        // Room for less than the row's step: the row's step, which then overflows.
        let c = p.choose_within(100, 1, wide, 50);
        assert_eq!((c.step, c.reason), (100, StepReason::Minimum));
        // Plenty of room: unchanged.
        assert_eq!(
            p.choose_within(100, 1, wide, i64::MAX),
            p.choose(100, 1, wide)
        );
    }

    #[test]
    fn an_asked_step_is_kept_within_the_row_step_and_the_maximum() {
        let p = StepPolicy {
            max: 50_000,
            adaptive: false,
            ..policy()
        };
        let c = p.bound_asked(1000, 20_000, i64::MAX);
        assert_eq!((c.step, c.reason), (20_000, StepReason::Target));
        let c = p.bound_asked(1000, 10_000_000, i64::MAX);
        assert_eq!((c.step, c.reason), (50_000, StepReason::Maximum));
        let c = p.bound_asked(1000, 10, i64::MAX);
        assert_eq!((c.step, c.reason), (1000, StepReason::Minimum));
        // A row wider than the maximum keeps its own step.
        let c = p.bound_asked(80_000, 10_000_000, i64::MAX);
        assert_eq!((c.step, c.reason), (80_000, StepReason::Minimum));
        // Near the top the ask shrinks to the room, never below the row's step.
        let c = p.bound_asked(1000, 40_000, 5_000);
        assert_eq!((c.step, c.reason), (5_000, StepReason::Maximum));
        let c = p.bound_asked(1000, 40_000, 500);
        assert_eq!((c.step, c.reason), (1000, StepReason::Minimum));
    }

    proptest! {
        #[test]
        fn an_asked_step_respects_every_bound(
            row in prop_oneof![Just(1i64), Just(i64::MAX), 1i64..=i64::MAX],
            asked in prop_oneof![Just(1i64), Just(i64::MAX), 1i64..=i64::MAX],
            max in prop_oneof![Just(1i64), Just(i64::MAX), 1i64..=i64::MAX],
            room in prop_oneof![Just(0i64), Just(i64::MAX), 0i64..=i64::MAX],
        ) {
            let p = StepPolicy { max, ..policy() };
            let c = p.bound_asked(row, asked, room);
            prop_assert!(c.step >= row, "{c:?} below the row's step {row}");
            prop_assert!(c.step <= max.max(row), "{c:?} above the maximum {max}");
            if row <= room {
                prop_assert!(c.step <= room, "{c:?} beyond room {room}");
            }
            if asked >= row && asked <= max && asked <= room {
                prop_assert_eq!(c.step, asked);
            }
        }

        #[test]
        fn choice_respects_every_bound(
            row in 1i64..10_000_000,
            delta in 1i64..8,
            peak in 0.0f64..1e7,
            previous in proptest::option::of(1i64..100_000_000),
            max in 1i64..100_000_000,
        ) {
            let p = StepPolicy { max, ..policy() };
            let c = p.choose(row, delta, hint(peak, previous));
            prop_assert!(c.step >= row);
            prop_assert!(c.step <= max.max(row));
            if let Some(prev) = previous && c.step > row && c.step < max {
                prop_assert!(c.step <= prev * 2 && c.step >= (prev / 2 + prev % 2));
            }
        }
        /// Extreme inputs (a row step near `i64::MAX`, a peak of infinity or NaN, any
        /// previous step, no room at all) never panic and keep the bounds: at least the
        /// row's step, and within the room whenever the row's step fits in it.
        #[test]
        fn extreme_inputs_saturate(
            row in prop_oneof![Just(1i64), Just(i64::MAX), Just(5_000_000_000_000_000_000), 1i64..=i64::MAX],
            delta in prop_oneof![Just(1i64), Just(i64::MAX), 1i64..=i64::MAX],
            peak in prop_oneof![Just(f64::INFINITY), Just(f64::NAN), Just(f64::MAX), Just(-1.0), any::<f64>()],
            previous in proptest::option::of(prop_oneof![Just(i64::MAX), Just(i64::MIN), any::<i64>()]),
            max in prop_oneof![Just(i64::MAX), 1i64..=i64::MAX],
            room in prop_oneof![Just(0i64), Just(i64::MAX), 0i64..=i64::MAX],
            secs in prop_oneof![Just(u64::MAX), any::<u64>()],
        ) {
            let p = StepPolicy { max, target: Duration::from_secs(secs), ..policy() };
            prop_assert!(p.recommended(peak, delta) >= 0);
            let c = p.choose(row, delta, hint(peak, previous));
            prop_assert!(c.step >= row);
            let c = p.choose_within(row, delta, hint(peak, previous), room);
            prop_assert!(c.step >= row);
            if row <= room {
                prop_assert!(c.step <= room, "{c:?} beyond room {room}");
            }
        }
    }
}
