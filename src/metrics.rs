//! Prometheus metrics, served at `GET /metrics`.
//!
//! Counters on request paths are prometheus handles resolved once (per biz, per
//! database) and kept by their owners, so counting is one atomic add: no lock, no
//! allocation. Gauges that describe state (rates, cache, runway, database health) are
//! set from that state when `/metrics` is scraped. Label values come only from the
//! configuration (database names) or the catalog's bizs, capped at
//! `metrics_max_bizs`: later bizs share the label `_other`, so a flood of bizs cannot
//! grow the series without bound. Request input never becomes a label. Every series
//! whose labels are known before its first event (a biz once it has a label, a
//! database, a route) is created at zero, so that dashboards and alerts have data from
//! the first scrape.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use prometheus::{
    Encoder, GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

use crate::biz::BizTag;
use crate::step::StepReason;

/// Label shared by the bizs past the cap.
pub const OTHER_BIZ: &str = "_other";

/// HTTP latency buckets: fine below a millisecond, where the IDs served from memory
/// are, so that p99 and p999 can be read there; coarse up to the wait timeouts.
const HTTP_BUCKETS: &[f64] = &[
    0.000_025, 0.000_05, 0.000_075, 0.000_1, 0.000_15, 0.000_2, 0.000_3, 0.000_4, 0.000_5,
    0.000_75, 0.001, 0.001_5, 0.002, 0.003, 0.005, 0.007_5, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0,
];

/// Segment fetch latency buckets: a round trip and an UPDATE, up to the fetch timeout.
const FETCH_BUCKETS: &[f64] = &[
    0.000_25, 0.000_5, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// What a reservation attempt on one database came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchOutcome {
    /// A segment was reserved.
    Ok,
    /// A version-checked UPDATE lost to another writer.
    Conflict,
    /// The database failed or timed out.
    Error,
    /// The row cannot serve the biz (invalid, overlapping, or overflowing).
    Refused,
}

/// Per-database handles, resolved once.
pub struct DatabaseMetrics {
    ok: IntCounter,
    conflict: IntCounter,
    error: IntCounter,
    refused: IntCounter,
    latency: Histogram,
}

impl DatabaseMetrics {
    pub fn outcome(&self, outcome: FetchOutcome) {
        match outcome {
            FetchOutcome::Ok => &self.ok,
            FetchOutcome::Conflict => &self.conflict,
            FetchOutcome::Error => &self.error,
            FetchOutcome::Refused => &self.refused,
        }
        .inc();
    }

    pub fn observe(&self, took: Duration) {
        self.latency.observe(took.as_secs_f64());
    }
}

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

/// The reasons a client's asked step can have (see `StepPolicy::bound_asked`).
const CLIENT_STEP_REASONS: [StepReason; 3] =
    [StepReason::Minimum, StepReason::Target, StepReason::Maximum];

/// One database's state gauges, set at scrape time.
pub struct DatabaseState {
    pub name: String,
    pub up: bool,
    pub fenced: bool,
    /// The layout in force names it and this server may use it.
    pub in_layout: bool,
    /// Not used because of its layout rows: behind another database's, lost, or
    /// disagreeing (see [`crate::layout::Standing`]).
    pub layout_behind: bool,
}

/// Every metric segmint exports, in its own registry.
pub struct Metrics {
    registry: Registry,
    max_bizs: usize,
    /// The label of every biz seen so far.
    labels: Mutex<HashMap<BizTag, Arc<str>>>,
    ids_issued: IntCounterVec,
    cache_waits: IntCounterVec,
    segment_ids: IntCounterVec,
    biz_rate: GaugeVec,
    biz_peak: GaugeVec,
    biz_step: IntGaugeVec,
    biz_recommended: IntGaugeVec,
    biz_cached: IntGaugeVec,
    biz_runway: GaugeVec,
    step_choices: IntCounterVec,
    given_back: IntCounterVec,
    wasted: IntCounterVec,
    client_step: IntGaugeVec,
    client_steps: IntCounterVec,
    client_given_back: IntCounterVec,
    client_wasted: IntCounterVec,
    database_up: IntGaugeVec,
    database_fenced: IntGaugeVec,
    database_in_layout: IntGaugeVec,
    database_layout_behind: IntGaugeVec,
    layout_epoch: prometheus::IntGauge,
    layout_change_pending: prometheus::IntGauge,
    fetches: IntCounterVec,
    fetch_seconds: HistogramVec,
    http_requests: IntCounterVec,
    http_seconds: HistogramVec,
    snowflake: SnowflakeMetrics,
}

/// The states of this server's snowflake worker ID, for `segmint_snowflake_lease_state`.
pub const LEASE_STATES: [&str; 3] = ["none", "waiting", "active"];

/// The metrics of snowflake IDs and this server's worker-ID lease. Cheap to clone:
/// handles to the registered series.
#[derive(Clone)]
pub struct SnowflakeMetrics {
    /// One-hot over [`LEASE_STATES`].
    lease_state: IntGaugeVec,
    /// The worker ID held, -1 when none.
    worker_id: prometheus::IntGauge,
    /// Renewals by outcome: ok, failed (no answer or an error), lost (taken by another).
    renewals: IntCounterVec,
    /// Attempts to lease a worker ID, by outcome: ok, failed.
    acquisitions: IntCounterVec,
    /// Backward clock steps by outcome: waited (≤ 5 ms), refused.
    clock_back: IntCounterVec,
    /// Snowflake IDs issued, by biz (labels from `[snowflake] bizs`).
    ids: IntCounterVec,
}

impl SnowflakeMetrics {
    fn new(r: &Registry) -> SnowflakeMetrics {
        let counter = |name: &str, help: &str, label: &str| {
            registered(r, IntCounterVec::new(Opts::new(name, help), &[label]))
        };
        let metrics = SnowflakeMetrics {
            lease_state: registered(
                r,
                IntGaugeVec::new(
                    Opts::new(
                        "segmint_snowflake_lease_state",
                        "1 for the state of this server's worker-ID lease: none, waiting (leased, waiting out earlier holders) or active (issuing)",
                    ),
                    &["state"],
                ),
            ),
            worker_id: registered(
                r,
                prometheus::IntGauge::new(
                    "segmint_snowflake_worker_id",
                    "The snowflake worker ID this server holds, -1 when none",
                ),
            ),
            renewals: counter(
                "segmint_snowflake_lease_renewals_total",
                "Worker-ID lease renewals by outcome: ok, failed (error or no answer), lost (the lease was no longer this server's)",
                "outcome",
            ),
            acquisitions: counter(
                "segmint_snowflake_lease_acquisitions_total",
                "Attempts to lease a worker ID by outcome: ok, failed",
                "outcome",
            ),
            clock_back: counter(
                "segmint_snowflake_clock_back_total",
                "Snowflake IDs that met a clock behind the last timestamp issued: waited (up to 5 ms) or refused",
                "outcome",
            ),
            ids: counter(
                "segmint_snowflake_ids_total",
                "Snowflake IDs issued, by biz",
                "biz",
            ),
        };
        for outcome in ["ok", "failed", "lost"] {
            metrics.renewals.with_label_values(&[outcome]);
        }
        for outcome in ["ok", "failed"] {
            metrics.acquisitions.with_label_values(&[outcome]);
        }
        for outcome in ["waited", "refused"] {
            metrics.clock_back.with_label_values(&[outcome]);
        }
        metrics.set_lease(None, "none");
        metrics
    }

    /// Records the lease state (one of [`LEASE_STATES`]) and the worker ID held.
    pub fn set_lease(&self, worker_id: Option<u16>, state: &str) {
        for s in LEASE_STATES {
            self.lease_state
                .with_label_values(&[s])
                .set(i64::from(s == state));
        }
        self.worker_id.set(worker_id.map_or(-1, i64::from));
    }

    /// Counts a renewal with `outcome` (ok, failed, lost).
    pub fn renewal(&self, outcome: &str) {
        self.renewals.with_label_values(&[outcome]).inc();
    }

    /// Counts an attempt to lease a worker ID with `outcome` (ok, failed).
    pub fn acquisition(&self, outcome: &str) {
        self.acquisitions.with_label_values(&[outcome]).inc();
    }

    /// Counts `n` backward clock steps with `outcome` (waited, refused).
    pub fn clock_back(&self, outcome: &str, n: u64) {
        self.clock_back.with_label_values(&[outcome]).inc_by(n);
    }

    /// The counter of snowflake IDs issued for `biz` (a configured biz), to keep.
    pub fn ids_counter(&self, biz: &BizTag) -> IntCounter {
        self.ids.with_label_values(&[biz.as_str()])
    }
}

/// Registers `metric` with `registry`; every name here is static and distinct, so
/// registration cannot fail.
fn registered<M: prometheus::core::Collector + Clone + 'static>(
    registry: &Registry,
    metric: prometheus::Result<M>,
) -> M {
    let metric = metric.expect("static metric definition");
    registry
        .register(Box::new(metric.clone()))
        .expect("metric names are distinct");
    metric
}

impl Metrics {
    pub fn new(max_bizs: usize) -> Metrics {
        let r = Registry::new();
        let biz = &["biz"];
        let build = registered(
            &r,
            IntGaugeVec::new(
                Opts::new("segmint_build_info", "segmint build; always 1"),
                &["version"],
            ),
        );
        build.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1);
        #[cfg(target_os = "linux")]
        r.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))
        .expect("process metrics registered once");
        Metrics {
            max_bizs,
            labels: Mutex::new(HashMap::new()),
            ids_issued: registered(
                &r,
                IntCounterVec::new(
                    Opts::new(
                        "segmint_ids_issued_total",
                        "IDs issued from the server's cache (nextId, nextIdSimple, /v1/ids)",
                    ),
                    biz,
                ),
            ),
            cache_waits: registered(
                &r,
                IntCounterVec::new(
                    Opts::new(
                        "segmint_cache_waits_total",
                        "Requests that found the cache short and waited for a segment fetch \
                         (the first request of a biz always does)",
                    ),
                    biz,
                ),
            ),
            segment_ids: registered(
                &r,
                IntCounterVec::new(
                    Opts::new(
                        "segmint_segment_ids_total",
                        "IDs in segments handed to clients (nextSegmentId, /v1/segments)",
                    ),
                    biz,
                ),
            ),
            biz_rate: registered(
                &r,
                GaugeVec::new(
                    Opts::new(
                        "segmint_biz_rate_ids_per_second",
                        "IDs issued per second over the last minute",
                    ),
                    biz,
                ),
            ),
            biz_peak: registered(
                &r,
                GaugeVec::new(
                    Opts::new(
                        "segmint_biz_peak_rate_ids_per_second",
                        "Highest one-minute issue rate over the last 24 hours",
                    ),
                    biz,
                ),
            ),
            biz_step: registered(
                &r,
                IntGaugeVec::new(
                    Opts::new(
                        "segmint_biz_step",
                        "Step of the last segment reserved for the cache (0 before the first)",
                    ),
                    biz,
                ),
            ),
            biz_recommended: registered(
                &r,
                IntGaugeVec::new(
                    Opts::new(
                        "segmint_biz_recommended_step",
                        "Step lasting step_target_secs at the peak rate",
                    ),
                    biz,
                ),
            ),
            biz_cached: registered(
                &r,
                IntGaugeVec::new(
                    Opts::new("segmint_biz_cached_ids", "IDs left in the cache"),
                    biz,
                ),
            ),
            biz_runway: registered(
                &r,
                GaugeVec::new(
                    Opts::new(
                        "segmint_biz_runway_seconds",
                        "Seconds the cache lasts at the current rate (+Inf when idle)",
                    ),
                    biz,
                ),
            ),
            step_choices: registered(
                &r,
                IntCounterVec::new(
                    Opts::new(
                        "segmint_step_choices_total",
                        "Segments reserved for the cache, by why their step was chosen",
                    ),
                    &["biz", "reason"],
                ),
            ),
            given_back: registered(
                &r,
                IntCounterVec::new(
                    Opts::new(
                        "segmint_ids_given_back_total",
                        "Unissued IDs returned to the databases at a graceful stop",
                    ),
                    biz,
                ),
            ),
            wasted: registered(
                &r,
                IntCounterVec::new(
                    Opts::new(
                        "segmint_ids_wasted_total",
                        "Cached IDs abandoned at a graceful stop (never reissued)",
                    ),
                    biz,
                ),
            ),
            client_step: registered(
                &r,
                IntGaugeVec::new(
                    Opts::new(
                        "segmint_client_segment_step",
                        "Step of the last segment handed to a client that asked for a size \
                         (0 before the first; `_other` bizs share it)",
                    ),
                    biz,
                ),
            ),
            client_steps: registered(
                &r,
                IntCounterVec::new(
                    Opts::new(
                        "segmint_client_steps_total",
                        "Segments handed to clients that asked for a size, by how the ask \
                         was bounded",
                    ),
                    &["biz", "reason"],
                ),
            ),
            client_given_back: registered(
                &r,
                IntCounterVec::new(
                    Opts::new(
                        "segmint_client_ids_given_back_total",
                        "Unissued IDs clients gave back that returned to the databases",
                    ),
                    biz,
                ),
            ),
            client_wasted: registered(
                &r,
                IntCounterVec::new(
                    Opts::new(
                        "segmint_client_ids_wasted_total",
                        "Unissued IDs clients gave back that could not return (never reissued)",
                    ),
                    biz,
                ),
            ),
            database_up: registered(
                &r,
                IntGaugeVec::new(
                    Opts::new(
                        "segmint_database_up",
                        "1 when the database is in use, 0 while it backs off after a failure",
                    ),
                    &["database"],
                ),
            ),
            database_fenced: registered(
                &r,
                IntGaugeVec::new(
                    Opts::new(
                        "segmint_database_fenced",
                        "1 while the database is fenced: a row went back in time (a restore, a promoted replica) and reserving from it could reissue IDs",
                    ),
                    &["database"],
                ),
            ),
            database_in_layout: registered(
                &r,
                IntGaugeVec::new(
                    Opts::new(
                        "segmint_database_in_layout",
                        "1 while the database layout in force names the database, 0 once `segmint db remove` took it out (it is then not used)",
                    ),
                    &["database"],
                ),
            ),
            database_layout_behind: registered(
                &r,
                IntGaugeVec::new(
                    Opts::new(
                        "segmint_database_layout_behind",
                        "1 while the database is not used because of its layout rows: its newest layout epoch is below another database's, it was declared lost, or its rows disagree with another database's (/status says which)",
                    ),
                    &["database"],
                ),
            ),
            layout_epoch: registered(
                &r,
                prometheus::IntGauge::new(
                    "segmint_layout_epoch",
                    "The database layout epoch this server follows (0: the configured classes, before any `segmint db add`/`remove`)",
                ),
            ),
            layout_change_pending: registered(
                &r,
                prometheus::IntGauge::new(
                    "segmint_layout_change_pending",
                    "1 while a database layout change is under way, or was cut off, as the databases say: bizs it moves may be frozen",
                ),
            ),
            fetches: registered(
                &r,
                IntCounterVec::new(
                    Opts::new(
                        "segmint_segment_fetches_total",
                        "Segment reservation attempts by outcome (ok, conflict, error, refused)",
                    ),
                    &["database", "outcome"],
                ),
            ),
            fetch_seconds: registered(
                &r,
                HistogramVec::new(
                    HistogramOpts::new(
                        "segmint_segment_fetch_duration_seconds",
                        "Time of one segment reservation on one database",
                    )
                    .buckets(FETCH_BUCKETS.to_vec()),
                    &["database"],
                ),
            ),
            http_requests: registered(
                &r,
                IntCounterVec::new(
                    Opts::new(
                        "segmint_http_requests_total",
                        "HTTP requests by route template, method and status",
                    ),
                    &["route", "method", "status"],
                ),
            ),
            http_seconds: registered(
                &r,
                HistogramVec::new(
                    HistogramOpts::new(
                        "segmint_http_request_duration_seconds",
                        "HTTP request latency by route template",
                    )
                    .buckets(HTTP_BUCKETS.to_vec()),
                    &["route"],
                ),
            ),
            snowflake: SnowflakeMetrics::new(&r),
            registry: r,
        }
    }

    /// The snowflake metrics.
    pub fn snowflake(&self) -> &SnowflakeMetrics {
        &self.snowflake
    }

    /// Bizs with a label of their own at most.
    pub fn max_bizs(&self) -> usize {
        self.max_bizs
    }

    /// The label of `biz`: its name while fewer than `max_bizs` bizs have one, else
    /// [`OTHER_BIZ`]. Stable for the life of the process.
    pub fn biz_label(&self, biz: &BizTag) -> Arc<str> {
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
        self.ids_issued.with_label_values(&[&*self.biz_label(biz)])
    }

    /// The counter of requests of `biz` that waited for a segment fetch, to keep and
    /// bump.
    pub fn cache_waits_counter(&self, biz: &BizTag) -> IntCounter {
        self.cache_waits.with_label_values(&[&*self.biz_label(biz)])
    }

    /// Counts `n` IDs handed to a client in a segment.
    pub fn segment_handed_out(&self, biz: &BizTag, n: u64) {
        self.segment_ids
            .with_label_values(&[&*self.biz_label(biz)])
            .inc_by(n);
    }

    /// Counts a segment reserved for the cache of `biz` with a step chosen for `reason`.
    pub fn step_chosen(&self, biz: &BizTag, reason: StepReason) {
        self.step_choices
            .with_label_values(&[&*self.biz_label(biz), reason.as_str()])
            .inc();
    }

    /// Counts `n` IDs of `biz` given back at a graceful stop.
    pub fn given_back(&self, biz: &BizTag, n: u64) {
        self.given_back
            .with_label_values(&[&*self.biz_label(biz)])
            .inc_by(n);
    }

    /// Counts `n` cached IDs of `biz` abandoned at a graceful stop.
    pub fn wasted(&self, biz: &BizTag, n: u64) {
        self.wasted
            .with_label_values(&[&*self.biz_label(biz)])
            .inc_by(n);
    }

    /// Records a segment of step `step` handed to a client of `biz` that asked for a
    /// size, bounded for `reason`.
    pub fn client_step_chosen(&self, biz: &BizTag, step: i64, reason: StepReason) {
        let label = self.biz_label(biz);
        self.client_step.with_label_values(&[&*label]).set(step);
        self.client_steps
            .with_label_values(&[&*label, reason.as_str()])
            .inc();
    }

    /// Counts the IDs of `biz` a client gave back: `given` returned to the databases,
    /// `wasted` not.
    pub fn client_gave_back(&self, biz: &BizTag, given: u64, wasted: u64) {
        let label = self.biz_label(biz);
        self.client_given_back
            .with_label_values(&[&*label])
            .inc_by(given);
        self.client_wasted
            .with_label_values(&[&*label])
            .inc_by(wasted);
    }

    /// Handles for the database `name`.
    pub fn database(&self, name: &str) -> DatabaseMetrics {
        let outcome = |o: &str| self.fetches.with_label_values(&[name, o]);
        DatabaseMetrics {
            ok: outcome("ok"),
            conflict: outcome("conflict"),
            error: outcome("error"),
            refused: outcome("refused"),
            latency: self.fetch_seconds.with_label_values(&[name]),
        }
    }

    /// The request latency histogram of the route template `route`, to keep.
    pub fn http_seconds(&self, route: &str) -> Histogram {
        self.http_seconds.with_label_values(&[route])
    }

    /// The layout epoch this server follows, and whether a change is under way.
    pub fn set_layout(&self, epoch: i64, pending: bool) {
        self.layout_epoch.set(epoch);
        self.layout_change_pending.set(i64::from(pending));
    }

    /// The request counter of `route`, `method` and `status`, to keep and bump.
    pub fn http_requests(&self, route: &str, method: &str, status: &str) -> IntCounter {
        self.http_requests
            .with_label_values(&[route, method, status])
    }

    /// Sets the state gauges and renders every metric in the text format.
    pub fn render(&self, bizs: &[BizStats], databases: &[DatabaseState]) -> String {
        for d in databases {
            let name = [d.name.as_str()];
            self.database_up
                .with_label_values(&name)
                .set(i64::from(d.up));
            self.database_fenced
                .with_label_values(&name)
                .set(i64::from(d.fenced));
            self.database_in_layout
                .with_label_values(&name)
                .set(i64::from(d.in_layout));
            self.database_layout_behind
                .with_label_values(&name)
                .set(i64::from(d.layout_behind));
        }
        // Bizs past the cap are summed into `_other`; their steps are not comparable,
        // so `_other` has no step gauges.
        let mut other: Option<(f64, f64, u64)> = None;
        for s in bizs {
            let label = self.biz_label_if_known(&s.biz);
            if &*label == OTHER_BIZ {
                let o = other.get_or_insert((0.0, 0.0, 0));
                o.0 += s.rate;
                o.1 += s.peak_rate;
                o.2 += s.cached_ids;
                continue;
            }
            let l = [&*label];
            self.biz_rate.with_label_values(&l).set(s.rate);
            self.biz_peak.with_label_values(&l).set(s.peak_rate);
            self.biz_step.with_label_values(&l).set(s.step);
            self.biz_recommended
                .with_label_values(&l)
                .set(s.recommended_step);
            self.biz_cached
                .with_label_values(&l)
                .set(i64::try_from(s.cached_ids).unwrap_or(i64::MAX));
            self.biz_runway
                .with_label_values(&l)
                .set(s.runway_seconds.unwrap_or(f64::INFINITY));
        }
        if let Some((rate, peak, cached)) = other {
            let l = [OTHER_BIZ];
            self.biz_rate.with_label_values(&l).set(rate);
            self.biz_peak.with_label_values(&l).set(peak);
            self.biz_cached
                .with_label_values(&l)
                .set(i64::try_from(cached).unwrap_or(i64::MAX));
            self.biz_runway
                .with_label_values(&l)
                .set(crate::rate::runway(cached, rate));
        }
        let mut out = Vec::new();
        // Encoding into a Vec cannot fail on IO; a metric family it rejects would be a
        // bug in the definitions above, and shows as an empty scrape in tests.
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            tracing::error!(error = %e, "cannot encode metrics");
        }
        infinities_as_prometheus_writes_them(&String::from_utf8(out).unwrap_or_default())
    }

    fn biz_label_if_known(&self, biz: &str) -> Arc<str> {
        match BizTag::parse(biz) {
            Ok(tag) => self.biz_label(&tag),
            Err(_) => Arc::from(OTHER_BIZ),
        }
    }
}

/// The encoder writes infinite samples as Rust prints them (`inf`); the text format
/// spells them `+Inf` and `-Inf`.
fn infinities_as_prometheus_writes_them(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.lines() {
        let fixed = if line.starts_with('#') {
            None
        } else if let Some(head) = line.strip_suffix(" inf") {
            Some((head, " +Inf"))
        } else {
            line.strip_suffix(" -inf").map(|head| (head, " -Inf"))
        };
        match fixed {
            Some((head, value)) => {
                out.push_str(head);
                out.push_str(value);
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag(s: &str) -> BizTag {
        BizTag::parse(s).unwrap()
    }

    #[test]
    fn bizs_past_the_cap_share_one_label() {
        let m = Metrics::new(2);
        assert_eq!(&*m.biz_label(&tag("a")), "a");
        assert_eq!(&*m.biz_label(&tag("b")), "b");
        assert_eq!(&*m.biz_label(&tag("c")), OTHER_BIZ);
        assert_eq!(&*m.biz_label(&tag("d")), OTHER_BIZ);
        assert_eq!(&*m.biz_label(&tag("a")), "a", "stable");
        m.issued_counter(&tag("c")).inc_by(3);
        m.issued_counter(&tag("d")).inc_by(4);
        let text = m.render(&[], &[]);
        assert!(
            text.contains("segmint_ids_issued_total{biz=\"_other\"} 7"),
            "{text}"
        );
    }

    #[test]
    fn a_biz_has_its_counters_at_zero_once_it_has_a_label() {
        let m = Metrics::new(10);
        let before = m.render(&[], &[]);
        assert!(!before.contains("biz=\"order\""), "{before}");
        let text = m.render(&[BizStats::idle("order")], &[]);
        for line in [
            "segmint_ids_issued_total{biz=\"order\"} 0",
            "segmint_cache_waits_total{biz=\"order\"} 0",
            "segmint_segment_ids_total{biz=\"order\"} 0",
            "segmint_ids_given_back_total{biz=\"order\"} 0",
            "segmint_ids_wasted_total{biz=\"order\"} 0",
            "segmint_client_segment_step{biz=\"order\"} 0",
            "segmint_client_ids_given_back_total{biz=\"order\"} 0",
            "segmint_client_ids_wasted_total{biz=\"order\"} 0",
            "segmint_client_steps_total{biz=\"order\",reason=\"minimum\"} 0",
            "segmint_client_steps_total{biz=\"order\",reason=\"target\"} 0",
            "segmint_client_steps_total{biz=\"order\",reason=\"maximum\"} 0",
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
        for reason in StepReason::ALL {
            let line = format!(
                "segmint_step_choices_total{{biz=\"order\",reason=\"{}\"}} 0",
                reason.as_str()
            );
            assert!(text.contains(&line), "missing {line} in\n{text}");
        }
    }

    #[test]
    fn renders_state_gauges() {
        let m = Metrics::new(10);
        let stats = BizStats {
            biz: "order".into(),
            rate: 12.5,
            peak_rate: 40.0,
            step: 1000,
            recommended_step: 24_000,
            last_step_reason: Some(StepReason::Minimum),
            cached_ids: 900,
            runway_seconds: None,
            issued: 100,
        };
        let text = m.render(
            &[stats],
            &[
                DatabaseState {
                    name: "pg-a".into(),
                    up: true,
                    fenced: false,
                    in_layout: true,
                    layout_behind: false,
                },
                DatabaseState {
                    name: "pg-b".into(),
                    up: false,
                    fenced: true,
                    in_layout: false,
                    layout_behind: true,
                },
            ],
        );
        for line in [
            "segmint_biz_rate_ids_per_second{biz=\"order\"} 12.5",
            "segmint_biz_peak_rate_ids_per_second{biz=\"order\"} 40",
            "segmint_biz_step{biz=\"order\"} 1000",
            "segmint_biz_recommended_step{biz=\"order\"} 24000",
            "segmint_biz_cached_ids{biz=\"order\"} 900",
            "segmint_biz_runway_seconds{biz=\"order\"} +Inf",
            "segmint_database_up{database=\"pg-a\"} 1",
            "segmint_database_up{database=\"pg-b\"} 0",
            "segmint_database_fenced{database=\"pg-a\"} 0",
            "segmint_database_fenced{database=\"pg-b\"} 1",
            "segmint_database_in_layout{database=\"pg-a\"} 1",
            "segmint_database_in_layout{database=\"pg-b\"} 0",
            "segmint_database_layout_behind{database=\"pg-a\"} 0",
            "segmint_database_layout_behind{database=\"pg-b\"} 1",
            "segmint_layout_epoch 0",
            "segmint_layout_change_pending 0",
            "segmint_build_info{version=\"",
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
    }
}
