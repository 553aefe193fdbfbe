//! The metrics of bizs: IDs issued from the cache and handed to clients in segments,
//! the steps chosen, IDs given back, and the per-biz state gauges set at scrape time.
//! Every one is labelled by biz, so the cap on labels lives here.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use prometheus::{GaugeVec, IntCounter, IntCounterVec, IntGaugeVec, Opts, Registry};

use super::registered;
use crate::step::StepReason;
use segmint_core::biz::BizTag;

/// Label shared by the bizs past the cap.
pub const OTHER_BIZ: &str = "_other";

/// The reasons a client's asked step can have (see `StepPolicy::bound_asked`).
const CLIENT_STEP_REASONS: [StepReason; 3] =
    [StepReason::Minimum, StepReason::Target, StepReason::Maximum];

/// The state of one biz, as the gauges show it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BizStats {
    pub biz: String,
    /// IDs issued per second over the last minute.
    pub rate: f64,
    /// Highest such rate over the last 24 hours.
    pub peak_rate: f64,
    /// Step of the last segment reserved for the cache (0 before the first).
    pub step: i64,
    /// Step that would last the target time at the peak rate.
    pub recommended_step: i64,
    /// Why the last step was chosen.
    pub last_step_reason: Option<StepReason>,
    /// IDs left in the cache.
    pub cached_ids: u64,
    /// Seconds the cache lasts at the current rate; `None` when infinite.
    pub runway_seconds: Option<f64>,
    /// IDs issued since the server started.
    pub issued: u64,
}

impl BizStats {
    /// A biz that has not served an ID here.
    pub fn idle(biz: &str) -> BizStats {
        BizStats {
            biz: biz.to_string(),
            rate: 0.0,
            peak_rate: 0.0,
            step: 0,
            recommended_step: 0,
            last_step_reason: None,
            cached_ids: 0,
            runway_seconds: Some(0.0),
            issued: 0,
        }
    }
}

/// Every biz-labelled metric, and the labels given out so far.
pub struct BizMetrics {
    max_bizs: usize,
    /// The label of every biz seen so far.
    labels: Mutex<HashMap<BizTag, Arc<str>>>,
    ids_issued: IntCounterVec,
    cache_waits: IntCounterVec,
    segment_ids: IntCounterVec,
    rate: GaugeVec,
    peak: GaugeVec,
    step: IntGaugeVec,
    recommended: IntGaugeVec,
    cached: IntGaugeVec,
    runway: GaugeVec,
    step_choices: IntCounterVec,
    given_back: IntCounterVec,
    wasted: IntCounterVec,
    client_step: IntGaugeVec,
    client_steps: IntCounterVec,
    client_given_back: IntCounterVec,
    client_wasted: IntCounterVec,
}

impl BizMetrics {
    /// Registers the biz metrics with `r`; at most `max_bizs` bizs get a label of
    /// their own.
    pub(super) fn new(r: &Registry, max_bizs: usize) -> BizMetrics {
        let biz = &["biz"];
        let by_reason = &["biz", "reason"];
        let counter = |name: &str, help: &str, labels: &[&str]| {
            registered(r, IntCounterVec::new(Opts::new(name, help), labels))
        };
        let gauge =
            |name: &str, help: &str| registered(r, GaugeVec::new(Opts::new(name, help), biz));
        let int_gauge =
            |name: &str, help: &str| registered(r, IntGaugeVec::new(Opts::new(name, help), biz));
        BizMetrics {
            max_bizs,
            labels: Mutex::new(HashMap::new()),
            ids_issued: counter(
                "segmint_ids_issued_total",
                "IDs issued from the server's cache (nextId, nextIdSimple, /v1/ids)",
                biz,
            ),
            cache_waits: counter(
                "segmint_cache_waits_total",
                "Requests that found the cache short and waited for a segment fetch \
                 (the first request of a biz always does)",
                biz,
            ),
            segment_ids: counter(
                "segmint_segment_ids_total",
                "IDs in segments handed to clients (nextSegmentId, /v1/segments)",
                biz,
            ),
            rate: gauge(
                "segmint_biz_rate_ids_per_second",
                "IDs issued per second over the last minute",
            ),
            peak: gauge(
                "segmint_biz_peak_rate_ids_per_second",
                "Highest one-minute issue rate over the last 24 hours",
            ),
            step: int_gauge(
                "segmint_biz_step",
                "Step of the last segment reserved for the cache (0 before the first)",
            ),
            recommended: int_gauge(
                "segmint_biz_recommended_step",
                "Step lasting step_target_secs at the peak rate",
            ),
            cached: int_gauge("segmint_biz_cached_ids", "IDs left in the cache"),
            runway: gauge(
                "segmint_biz_runway_seconds",
                "Seconds the cache lasts at the current rate (+Inf when idle)",
            ),
            step_choices: counter(
                "segmint_step_choices_total",
                "Segments reserved for the cache, by why their step was chosen",
                by_reason,
            ),
            given_back: counter(
                "segmint_ids_given_back_total",
                "Unissued IDs returned to the databases at a graceful stop",
                biz,
            ),
            wasted: counter(
                "segmint_ids_wasted_total",
                "Cached IDs abandoned at a graceful stop (never reissued)",
                biz,
            ),
            client_step: int_gauge(
                "segmint_client_segment_step",
                "Step of the last segment handed to a client that asked for a size \
                 (0 before the first; `_other` bizs share it)",
            ),
            client_steps: counter(
                "segmint_client_steps_total",
                "Segments handed to clients that asked for a size, by how the ask \
                 was bounded",
                by_reason,
            ),
            client_given_back: counter(
                "segmint_client_ids_given_back_total",
                "Unissued IDs clients gave back that returned to the databases",
                biz,
            ),
            client_wasted: counter(
                "segmint_client_ids_wasted_total",
                "Unissued IDs clients gave back that could not return (never reissued)",
                biz,
            ),
        }
    }

    /// Bizs with a label of their own at most.
    pub fn max_bizs(&self) -> usize {
        self.max_bizs
    }

    /// The label of `biz`: its name while fewer than `max_bizs` bizs have one, else
    /// [`OTHER_BIZ`]. Stable for the life of the process.
    pub fn label(&self, biz: &BizTag) -> Arc<str> {
        let label = {
            let mut labels = self.labels.lock();
            if let Some(label) = labels.get(biz) {
                return label.clone();
            }
            let own = labels.values().filter(|l| &***l != OTHER_BIZ).count();
            let label: Arc<str> = if own < self.max_bizs {
                Arc::from(biz.as_str())
            } else {
                Arc::from(OTHER_BIZ)
            };
            labels.insert(biz.clone(), label.clone());
            label
        };
        self.counters_at_zero(&label);
        label
    }

    /// Creates every counter of the biz label `label` at zero, so that the dashboard
    /// and the alerts see a series from the first scrape that knows the biz, not from
    /// its first event (Prometheus's instrumentation guide: avoid missing metrics).
    fn counters_at_zero(&self, label: &str) {
        for counter in [
            &self.ids_issued,
            &self.cache_waits,
            &self.segment_ids,
            &self.given_back,
            &self.wasted,
            &self.client_given_back,
            &self.client_wasted,
        ] {
            counter.with_label_values(&[label]);
        }
        for reason in StepReason::ALL {
            self.step_choices
                .with_label_values(&[label, reason.as_str()]);
        }
        for reason in CLIENT_STEP_REASONS {
            self.client_steps
                .with_label_values(&[label, reason.as_str()]);
        }
        self.client_step.with_label_values(&[label]);
    }

    /// The counter of IDs issued from the cache for `biz`, to keep and bump.
    pub fn issued_counter(&self, biz: &BizTag) -> IntCounter {
        self.ids_issued.with_label_values(&[&*self.label(biz)])
    }

    /// The counter of requests of `biz` that waited for a segment fetch, to keep and
    /// bump.
    pub fn cache_waits_counter(&self, biz: &BizTag) -> IntCounter {
        self.cache_waits.with_label_values(&[&*self.label(biz)])
    }

    /// Counts `n` IDs handed to a client in a segment.
    pub fn segment_handed_out(&self, biz: &BizTag, n: u64) {
        self.segment_ids
            .with_label_values(&[&*self.label(biz)])
            .inc_by(n);
    }

    /// Counts a segment reserved for the cache of `biz` with a step chosen for `reason`.
    pub fn step_chosen(&self, biz: &BizTag, reason: StepReason) {
        self.step_choices
            .with_label_values(&[&*self.label(biz), reason.as_str()])
            .inc();
    }

    /// Counts `n` IDs of `biz` given back at a graceful stop.
    pub fn given_back(&self, biz: &BizTag, n: u64) {
        self.given_back
            .with_label_values(&[&*self.label(biz)])
            .inc_by(n);
    }

    /// Counts `n` cached IDs of `biz` abandoned at a graceful stop.
    pub fn wasted(&self, biz: &BizTag, n: u64) {
        self.wasted
            .with_label_values(&[&*self.label(biz)])
            .inc_by(n);
    }

    /// Records a segment of step `step` handed to a client of `biz` that asked for a
    /// size, bounded for `reason`.
    pub fn client_step_chosen(&self, biz: &BizTag, step: i64, reason: StepReason) {
        let label = self.label(biz);
        self.client_step.with_label_values(&[&*label]).set(step);
        self.client_steps
            .with_label_values(&[&*label, reason.as_str()])
            .inc();
    }

    /// Counts the IDs of `biz` a client gave back: `given` returned to the databases,
    /// `wasted` not.
    pub fn client_gave_back(&self, biz: &BizTag, given: u64, wasted: u64) {
        let label = self.label(biz);
        self.client_given_back
            .with_label_values(&[&*label])
            .inc_by(given);
        self.client_wasted
            .with_label_values(&[&*label])
            .inc_by(wasted);
    }

    /// Sets the state gauges from `bizs`. Bizs past the cap are summed into `_other`;
    /// their steps are not comparable, so `_other` has no step gauges.
    pub(super) fn set_state(&self, bizs: &[BizStats]) {
        let mut other: Option<(f64, f64, u64)> = None;
        for s in bizs {
            let label = self.label_if_known(&s.biz);
            if &*label == OTHER_BIZ {
                let o = other.get_or_insert((0.0, 0.0, 0));
                o.0 += s.rate;
                o.1 += s.peak_rate;
                o.2 += s.cached_ids;
                continue;
            }
            let l = [&*label];
            self.rate.with_label_values(&l).set(s.rate);
            self.peak.with_label_values(&l).set(s.peak_rate);
            self.step.with_label_values(&l).set(s.step);
            self.recommended
                .with_label_values(&l)
                .set(s.recommended_step);
            self.cached
                .with_label_values(&l)
                .set(i64::try_from(s.cached_ids).unwrap_or(i64::MAX));
            self.runway
                .with_label_values(&l)
                .set(s.runway_seconds.unwrap_or(f64::INFINITY));
        }
        if let Some((rate, peak, cached)) = other {
            let l = [OTHER_BIZ];
            self.rate.with_label_values(&l).set(rate);
            self.peak.with_label_values(&l).set(peak);
            self.cached
                .with_label_values(&l)
                .set(i64::try_from(cached).unwrap_or(i64::MAX));
            self.runway
                .with_label_values(&l)
                .set(crate::rate::runway(cached, rate));
        }
    }

    fn label_if_known(&self, biz: &str) -> Arc<str> {
        match BizTag::parse(biz) {
            Ok(tag) => self.label(&tag),
            Err(_) => Arc::from(OTHER_BIZ),
        }
    }
}
