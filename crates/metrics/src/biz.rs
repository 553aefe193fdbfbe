//! The metrics of bizs: IDs issued from the cache and handed to clients in segments,
//! the steps chosen, IDs given back, and the per-biz state gauges set at scrape time.
//! Every one is labelled by biz, so the bound on their series lives here.
//!
//! What a biz counts is kept in its own [`BizCounts`] (atomics, no label) and added to
//! the exported series at each scrape. A scrape chooses which bizs have series of
//! their own: the busiest in use, at most `max_bizs` (all of the catalog's while it has
//! no more than that). Every other biz's counts since the last scrape go to the series
//! labelled [`OTHER_BIZ`], and its rate and cache are summed into `_other`'s gauges,
//! so a sum over `biz` misses nothing. A biz that drops out of the chosen set loses its
//! series; if it comes back, its counters start again from zero (Prometheus reads that
//! as a reset), so each count is in exactly one series.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};

use parking_lot::Mutex;
use prometheus::{GaugeVec, IntCounterVec, IntGaugeVec, Opts, Registry};

use super::registered;
use crate::step::StepReason;
use segmint_core::biz::BizTag;

/// Label of the bizs without series of their own.
pub const OTHER_BIZ: &str = "_other";

/// The reasons a client's asked step can have (see `StepPolicy::bound_asked`).
const CLIENT_STEP_REASONS: [StepReason; 3] =
    [StepReason::Minimum, StepReason::Target, StepReason::Maximum];

/// A biz's counters, by index into [`BizCounts::counters`]: the plain ones first.
const ISSUED: usize = 0;
const CACHE_WAITS: usize = 1;
const SEGMENT_IDS: usize = 2;
const GIVEN_BACK: usize = 3;
const WASTED: usize = 4;
const CLIENT_GIVEN_BACK: usize = 5;
const CLIENT_WASTED: usize = 6;
/// Then the steps chosen for the cache, one per [`StepReason::ALL`]...
const STEP_CHOICES: usize = 7;
/// ...and the client's steps, likewise.
const CLIENT_STEPS: usize = STEP_CHOICES + StepReason::ALL.len();
const COUNTERS: usize = CLIENT_STEPS + StepReason::ALL.len();

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
    /// For a biz whose counter restarts each period: this period's figures.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub period: Option<PeriodStats>,
}

/// A period's figures for a biz whose counter restarts each period.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct PeriodStats {
    /// IDs this server issued in the period.
    pub issued: u64,
    /// How far into the counter's range (from its start to its last value) the
    /// highest segment this server reserved in the period reaches: 1 is used up.
    pub counter_ratio: f64,
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
            period: None,
        }
    }
}

/// What one biz counted since the server started. Counting is one atomic add, with no
/// lock and no label; a scrape adds what was counted since the last one to the biz's
/// series or to `_other`'s.
pub struct BizCounts {
    counters: [AtomicU64; COUNTERS],
    /// Step of the last segment handed to a client that asked for a size (0 before).
    client_step: AtomicI64,
    /// The counters as the last scrape read them. Taken only by scrapes, under
    /// [`BizMetrics::exported`].
    scraped: Mutex<[u64; COUNTERS]>,
}

impl BizCounts {
    fn new() -> BizCounts {
        BizCounts {
            counters: std::array::from_fn(|_| AtomicU64::new(0)),
            client_step: AtomicI64::new(0),
            scraped: Mutex::new([0; COUNTERS]),
        }
    }

    fn add(&self, counter: usize, n: u64) {
        self.counters[counter].fetch_add(n, Relaxed);
    }

    /// Counts `n` IDs issued from the cache.
    pub fn issued(&self, n: u64) {
        self.add(ISSUED, n);
    }

    /// Counts a request that found the cache short and waited for a fetch.
    pub fn waited(&self) {
        self.add(CACHE_WAITS, 1);
    }

    /// What was counted since the last call, per counter.
    fn since_last_scrape(&self) -> [u64; COUNTERS] {
        let mut scraped = self.scraped.lock();
        std::array::from_fn(|i| {
            let now = self.counters[i].load(Relaxed);
            let delta = now.saturating_sub(scraped[i]);
            scraped[i] = now;
            delta
        })
    }
}

/// The index of `reason` in [`StepReason::ALL`].
fn reason_index(reason: StepReason) -> usize {
    StepReason::ALL
        .iter()
        .position(|r| *r == reason)
        .unwrap_or_default()
}

/// The bizs a scrape reports on; the default: none.
#[derive(Default)]
pub struct BizView<'a> {
    /// How many bizs the catalog knows.
    pub known: usize,
    /// Every biz in use here (with a cache), with its figures.
    pub in_use: &'a [BizStats],
    /// Bizs to give series too, at zero unless in use: the whole catalog when it has
    /// no more than `max_bizs` bizs, else none.
    pub idle: &'a [&'a str],
    /// Of those, the bizs whose counter restarts each period: their period gauges
    /// are at zero too until a period begins here.
    pub periodic: &'a [&'a str],
}

/// Which bizs the last scrape gave series of their own.
#[derive(Default)]
struct Exported {
    own: HashSet<String>,
    /// Whether `_other` has state gauges.
    other_gauges: bool,
}

/// Every biz-labelled metric, and what each biz counted.
pub struct BizMetrics {
    /// Bizs with series of their own at most.
    max_bizs: usize,
    /// The counts of every biz that counted anything here. Plain mutex: held for a map
    /// lookup; a biz's hot counters are resolved once and kept by their owner.
    counts: Mutex<HashMap<BizTag, Arc<BizCounts>>>,
    /// Held through a scrape's export, so that two scrapes at once never add a count
    /// twice nor disagree on the bizs with series.
    exported: Mutex<Exported>,
    ids_issued: IntCounterVec,
    cache_waits: IntCounterVec,
    segment_ids: IntCounterVec,
    rate: GaugeVec,
    peak: GaugeVec,
    step: IntGaugeVec,
    recommended: IntGaugeVec,
    cached: IntGaugeVec,
    runway: GaugeVec,
    period_issued: IntGaugeVec,
    period_ratio: GaugeVec,
    step_choices: IntCounterVec,
    given_back: IntCounterVec,
    wasted: IntCounterVec,
    client_step: IntGaugeVec,
    client_steps: IntCounterVec,
    client_given_back: IntCounterVec,
    client_wasted: IntCounterVec,
    /// How many bizs are known, in use, and have series of their own.
    bizs: IntGaugeVec,
}

impl BizMetrics {
    /// Registers the biz metrics with `r`; at most `max_bizs` bizs get series of
    /// their own.
    pub(super) fn new(r: &Registry, max_bizs: usize) -> BizMetrics {
        // Registered in this order: issue counters, state gauges, the cache's step
        // and give-back counters, the client's, then the count of bizs.
        let [ids_issued, cache_waits, segment_ids] = issue_counters(r);
        let (rate, peak, step, recommended, cached, runway) = state_gauges(r);
        let (period_issued, period_ratio) = period_gauges(r);
        let [step_choices, given_back, wasted] = cache_counters(r);
        let (client_step, [client_steps, client_given_back, client_wasted]) = client_metrics(r);
        BizMetrics {
            max_bizs,
            counts: Mutex::new(HashMap::new()),
            exported: Mutex::new(Exported::default()),
            ids_issued,
            cache_waits,
            segment_ids,
            rate,
            peak,
            step,
            recommended,
            cached,
            runway,
            period_issued,
            period_ratio,
            step_choices,
            given_back,
            wasted,
            client_step,
            client_steps,
            client_given_back,
            client_wasted,
            bizs: bizs_gauge(r),
        }
    }

    /// Bizs with series of their own at most.
    pub fn max_bizs(&self) -> usize {
        self.max_bizs
    }

    /// The counts of `biz`, to keep and bump.
    pub fn counts(&self, biz: &BizTag) -> Arc<BizCounts> {
        let mut counts = self.counts.lock();
        match counts.get(biz) {
            Some(c) => c.clone(),
            None => {
                let c = Arc::new(BizCounts::new());
                counts.insert(biz.clone(), c.clone());
                c
            }
        }
    }

    /// Counts `n` IDs handed to a client in a segment.
    pub fn segment_handed_out(&self, biz: &BizTag, n: u64) {
        self.counts(biz).add(SEGMENT_IDS, n);
    }

    /// Counts a segment reserved for the cache of `biz` with a step chosen for `reason`.
    pub fn step_chosen(&self, biz: &BizTag, reason: StepReason) {
        self.counts(biz).add(STEP_CHOICES + reason_index(reason), 1);
    }

    /// Counts `n` IDs of `biz` given back at a graceful stop.
    pub fn given_back(&self, biz: &BizTag, n: u64) {
        self.counts(biz).add(GIVEN_BACK, n);
    }

    /// Counts `n` cached IDs of `biz` abandoned at a graceful stop.
    pub fn wasted(&self, biz: &BizTag, n: u64) {
        self.counts(biz).add(WASTED, n);
    }

    /// Records a segment of step `step` handed to a client of `biz` that asked for a
    /// size, bounded for `reason`.
    pub fn client_step_chosen(&self, biz: &BizTag, step: i64, reason: StepReason) {
        let counts = self.counts(biz);
        counts.client_step.store(step, Relaxed);
        counts.add(CLIENT_STEPS + reason_index(reason), 1);
    }

    /// Counts the IDs of `biz` a client gave back: `given` returned to the databases,
    /// `wasted` not.
    pub fn client_gave_back(&self, biz: &BizTag, given: u64, wasted: u64) {
        let counts = self.counts(biz);
        counts.add(CLIENT_GIVEN_BACK, given);
        counts.add(CLIENT_WASTED, wasted);
    }

    /// The counter family of counter `i` of [`BizCounts`], with its `reason` label.
    fn family(&self, i: usize) -> (&IntCounterVec, Option<&'static str>) {
        match i {
            ISSUED => (&self.ids_issued, None),
            CACHE_WAITS => (&self.cache_waits, None),
            SEGMENT_IDS => (&self.segment_ids, None),
            GIVEN_BACK => (&self.given_back, None),
            WASTED => (&self.wasted, None),
            CLIENT_GIVEN_BACK => (&self.client_given_back, None),
            CLIENT_WASTED => (&self.client_wasted, None),
            i if i < CLIENT_STEPS => (
                &self.step_choices,
                Some(StepReason::ALL[i - STEP_CHOICES].as_str()),
            ),
            i => (
                &self.client_steps,
                Some(StepReason::ALL[(i - CLIENT_STEPS) % StepReason::ALL.len()].as_str()),
            ),
        }
    }

    /// Whether counter `i` is created at zero for a biz with series of its own: every
    /// plain one and step choice, and the client's steps for the reasons they can have.
    fn at_zero(i: usize) -> bool {
        i < CLIENT_STEPS
            || CLIENT_STEP_REASONS
                .iter()
                .any(|r| CLIENT_STEPS + reason_index(*r) == i)
    }

    /// Adds `n` to counter `i` of the series labelled `label`.
    fn add_to_series(&self, i: usize, label: &str, n: u64) {
        match self.family(i) {
            (family, None) => family.with_label_values(&[label]).inc_by(n),
            (family, Some(reason)) => family.with_label_values(&[label, reason]).inc_by(n),
        }
    }

    /// Creates every counter of `label` at zero, so that the dashboard and the alerts
    /// see a series from the first scrape that gives the biz series of its own, not
    /// from its first event (Prometheus's instrumentation guide: avoid missing metrics).
    fn series_at_zero(&self, label: &str) {
        for i in (0..COUNTERS).filter(|&i| Self::at_zero(i)) {
            self.add_to_series(i, label, 0);
        }
        self.client_step.with_label_values(&[label]);
    }

    /// Removes every series of `label`.
    fn remove_series(&self, label: &str) {
        for i in 0..COUNTERS {
            // A series never created is not there to remove: that error is expected.
            let _ = match self.family(i) {
                (family, None) => family.remove_label_values(&[label]),
                (family, Some(reason)) => family.remove_label_values(&[label, reason]),
            };
        }
        self.remove_state_gauges(label);
        let _ = self.client_step.remove_label_values(&[label]);
    }

    fn remove_state_gauges(&self, label: &str) {
        for family in [&self.rate, &self.peak, &self.runway, &self.period_ratio] {
            let _ = family.remove_label_values(&[label]);
        }
        for family in [
            &self.step,
            &self.recommended,
            &self.cached,
            &self.period_issued,
        ] {
            let _ = family.remove_label_values(&[label]);
        }
    }

    /// The bizs with series of their own: at most `max_bizs`, the bizs in use first,
    /// the highest rates first; then those that counted something without being in
    /// use (segments handed to clients); then `idle`; each group by name after that.
    fn choose<'a>(
        &self,
        view: &BizView<'a>,
        counted: &'a [(BizTag, Arc<BizCounts>)],
    ) -> HashSet<&'a str> {
        let mut seen: HashSet<&str> = HashSet::new();
        let mut ranked: Vec<(u8, f64, &str)> = Vec::new();
        let in_use = view.in_use.iter().map(|s| (0, s.rate, s.biz.as_str()));
        let counted = counted.iter().map(|(biz, _)| (1, 0.0, biz.as_str()));
        let idle = view.idle.iter().map(|name| (2, 0.0, *name));
        for (group, rate, name) in in_use.chain(counted).chain(idle) {
            if seen.insert(name) {
                ranked.push((group, rate, name));
            }
        }
        let order = |a: &(u8, f64, &str), b: &(u8, f64, &str)| {
            (a.0.cmp(&b.0)).then(b.1.total_cmp(&a.1)).then(a.2.cmp(b.2))
        };
        if ranked.len() > self.max_bizs {
            ranked.select_nth_unstable_by(self.max_bizs, order);
            ranked.truncate(self.max_bizs);
        }
        ranked.into_iter().map(|(_, _, name)| name).collect()
    }

    /// Brings the series up to date with `view`: chooses the bizs with series of their
    /// own, removes the series of those no longer chosen, adds every biz's counts
    /// since the last scrape to its series or `_other`'s, and sets the state gauges.
    /// Bizs in use without series of their own are summed into `_other`; their steps
    /// are not comparable, so `_other` has no step gauges.
    pub(super) fn set_state(&self, view: &BizView<'_>) {
        let mut exported = self.exported.lock();
        let counted: Vec<(BizTag, Arc<BizCounts>)> = self
            .counts
            .lock()
            .iter()
            .map(|(biz, c)| (biz.clone(), c.clone()))
            .collect();
        let own = self.choose(view, &counted);
        for gone in exported.own.iter().filter(|b| !own.contains(b.as_str())) {
            self.remove_series(gone);
        }
        for new in own.iter().filter(|b| !exported.own.contains(**b)) {
            self.series_at_zero(new);
        }
        for (biz, counts) in &counted {
            let mine = own.contains(biz.as_str());
            let label = if mine { biz.as_str() } else { OTHER_BIZ };
            for (i, n) in counts.since_last_scrape().into_iter().enumerate() {
                // A series is created at zero only where `series_at_zero` makes one;
                // `_other`'s once it has something to count.
                if n > 0 || (mine && Self::at_zero(i)) {
                    self.add_to_series(i, label, n);
                }
            }
            if mine {
                self.client_step
                    .with_label_values(&[label])
                    .set(counts.client_step.load(Relaxed));
            }
        }
        let mut other: Option<(f64, f64, u64)> = None;
        let mut in_use: HashSet<&str> = HashSet::new();
        for s in view.in_use {
            in_use.insert(&s.biz);
            if own.contains(s.biz.as_str()) {
                self.set_gauges(s);
            } else {
                let o = other.get_or_insert((0.0, 0.0, 0));
                o.0 += s.rate;
                o.1 += s.peak_rate;
                o.2 = o.2.saturating_add(s.cached_ids);
            }
        }
        for idle in own.iter().filter(|b| !in_use.contains(**b)) {
            let mut stats = BizStats::idle(idle);
            if view.periodic.contains(idle) {
                stats.period = Some(PeriodStats {
                    issued: 0,
                    counter_ratio: 0.0,
                });
            }
            self.set_gauges(&stats);
        }
        match other {
            Some((rate, peak, cached)) => {
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
            None if exported.other_gauges => self.remove_state_gauges(OTHER_BIZ),
            None => {}
        }
        for (state, n) in [
            ("known", view.known),
            ("in_use", view.in_use.len()),
            ("own_series", own.len()),
        ] {
            self.bizs
                .with_label_values(&[state])
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
        exported.other_gauges = other.is_some();
        exported.own = own.into_iter().map(str::to_owned).collect();
    }

    /// Sets the state gauges of the biz of `s`, which has series of its own.
    fn set_gauges(&self, s: &BizStats) {
        let l = [s.biz.as_str()];
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
        if let Some(p) = s.period {
            self.period_issued
                .with_label_values(&l)
                .set(i64::try_from(p.issued).unwrap_or(i64::MAX));
            self.period_ratio.with_label_values(&l).set(p.counter_ratio);
        }
    }
}

/// Labels of a biz's series.
const BIZ: &[&str] = &["biz"];

/// Labels of a biz's series by why a step was chosen.
const BY_REASON: &[&str] = &["biz", "reason"];

/// A counter family `name` labelled `labels`, registered with `r`.
fn counter(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    registered(r, IntCounterVec::new(Opts::new(name, help), labels))
}

/// A gauge family `name` labelled by biz, registered with `r`.
fn gauge(r: &Registry, name: &str, help: &str) -> GaugeVec {
    registered(r, GaugeVec::new(Opts::new(name, help), BIZ))
}

/// An integer gauge family `name` labelled by biz, registered with `r`.
fn int_gauge(r: &Registry, name: &str, help: &str) -> IntGaugeVec {
    registered(r, IntGaugeVec::new(Opts::new(name, help), BIZ))
}

/// The counters of what a biz issued: IDs from the cache, requests that waited for
/// it, and IDs handed to clients in segments.
fn issue_counters(r: &Registry) -> [IntCounterVec; 3] {
    [
        counter(
            r,
            "segmint_ids_issued_total",
            "IDs issued from the server's cache (nextId, nextIdSimple, /v1/ids)",
            BIZ,
        ),
        counter(
            r,
            "segmint_cache_waits_total",
            "Requests that found the cache short and waited for a segment fetch \
             (the first request of a biz always does)",
            BIZ,
        ),
        counter(
            r,
            "segmint_segment_ids_total",
            "IDs in segments handed to clients (nextSegmentId, /v1/segments)",
            BIZ,
        ),
    ]
}

/// A biz's state gauges, in the order [`state_gauges`] registers them: rate, peak
/// rate, step, recommended step, cached IDs, runway.
type StateGauges = (
    GaugeVec,
    GaugeVec,
    IntGaugeVec,
    IntGaugeVec,
    IntGaugeVec,
    GaugeVec,
);

/// The state gauges of a biz's cache: its rate and peak rate, its last and
/// recommended steps, the IDs it holds and how long they last.
fn state_gauges(r: &Registry) -> StateGauges {
    (
        gauge(
            r,
            "segmint_biz_rate_ids_per_second",
            "IDs issued per second over the last minute",
        ),
        gauge(
            r,
            "segmint_biz_peak_rate_ids_per_second",
            "Highest one-minute issue rate over the last 24 hours",
        ),
        int_gauge(
            r,
            "segmint_biz_step",
            "Step of the last segment reserved for the cache (0 before the first)",
        ),
        int_gauge(
            r,
            "segmint_biz_recommended_step",
            "Step lasting step_target_secs at the peak rate",
        ),
        int_gauge(r, "segmint_biz_cached_ids", "IDs left in the cache"),
        gauge(
            r,
            "segmint_biz_runway_seconds",
            "Seconds the cache lasts at the current rate (+Inf when idle)",
        ),
    )
}

/// The period gauges of a biz whose counter restarts each period: the IDs issued
/// in the current period, and how far its counter got.
fn period_gauges(r: &Registry) -> (IntGaugeVec, GaugeVec) {
    (
        int_gauge(
            r,
            "segmint_biz_period_issued",
            "IDs issued by this server in the current period (bizs whose counter \
             restarts each period)",
        ),
        gauge(
            r,
            "segmint_biz_period_used_ratio",
            "Share of the period's counter range reached by this server's highest \
             segment (1: used up until the next period)",
        ),
    )
}

/// The counters of a biz's cache: segments reserved by why their step was chosen,
/// and the IDs given back or abandoned at a graceful stop.
fn cache_counters(r: &Registry) -> [IntCounterVec; 3] {
    [
        counter(
            r,
            "segmint_step_choices_total",
            "Segments reserved for the cache, by why their step was chosen",
            BY_REASON,
        ),
        counter(
            r,
            "segmint_ids_given_back_total",
            "Unissued IDs returned to the databases at a graceful stop",
            BIZ,
        ),
        counter(
            r,
            "segmint_ids_wasted_total",
            "Cached IDs abandoned at a graceful stop (never reissued)",
            BIZ,
        ),
    ]
}

/// The metrics of the segments clients asked a size for: the last step gauge, then
/// the counters of steps by how the ask was bounded, and of the IDs clients gave
/// back that returned to the databases or could not.
fn client_metrics(r: &Registry) -> (IntGaugeVec, [IntCounterVec; 3]) {
    let step = int_gauge(
        r,
        "segmint_client_segment_step",
        "Step of the last segment handed to a client that asked for a size \
         (0 before the first; none for `_other`)",
    );
    let counters = [
        counter(
            r,
            "segmint_client_steps_total",
            "Segments handed to clients that asked for a size, by how the ask \
             was bounded",
            BY_REASON,
        ),
        counter(
            r,
            "segmint_client_ids_given_back_total",
            "Unissued IDs clients gave back that returned to the databases",
            BIZ,
        ),
        counter(
            r,
            "segmint_client_ids_wasted_total",
            "Unissued IDs clients gave back that could not return (never reissued)",
            BIZ,
        ),
    ];
    (step, counters)
}

/// The gauge of how many bizs the catalog knows, are in use, and have series of
/// their own.
fn bizs_gauge(r: &Registry) -> IntGaugeVec {
    registered(
        r,
        IntGaugeVec::new(
            Opts::new(
                "segmint_bizs",
                "Bizs the catalog knows (known), with a cache here (in_use), and \
                 with series of their own in these metrics (own_series)",
            ),
            &["state"],
        ),
    )
}
