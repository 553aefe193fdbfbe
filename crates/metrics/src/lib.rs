//! Prometheus metrics, served at `GET /metrics`.
//!
//! Counters on request paths are prometheus handles resolved once (per biz, per
//! database) and kept by their owners, so counting is one atomic add: no lock, no
//! allocation. Gauges that describe state (rates, cache, runway, database health) are
//! set from that state when `/metrics` is scraped. Label values come only from the
//! configuration (database names) or the catalog's bizs, and at most
//! `metrics_max_bizs` bizs have series of their own, the busiest at each scrape; the
//! others are counted under the label `_other`, so however many bizs there are the
//! series stay bounded and a sum over bizs misses nothing. Request input never becomes
//! a label. Every series whose labels are known before its first event (a biz once it
//! has series of its own, a database, a route) is created at zero, so that dashboards
//! and alerts have data from the first scrape.

//!
//! Each subsystem registers its own metrics and keeps their handles, one file each:
//! [`BizMetrics`] (IDs issued, segments handed out, steps, IDs given back, per-biz
//! state), [`DatabasesMetrics`] (reservations and state per database),
//! [`LayoutMetrics`], [`HttpMetrics`], [`SnowflakeMetrics`], [`SequenceMetrics`] and
//! [`RespMetrics`].
//! [`Metrics`] holds one
//! of each on one registry, and renders them.

// The core, under the names the metrics' modules use.
use segmint_core::{rate, step};

mod biz;
mod database;
mod http;
mod layout;
mod resp;
mod sequence;
mod snowflake;

use prometheus::{Encoder, IntGaugeVec, Opts, Registry, TextEncoder};

pub use biz::{BizCounts, BizMetrics, BizStats, BizView, OTHER_BIZ, PeriodStats};
pub use database::{DatabaseMetrics, DatabaseState, DatabasesMetrics, FetchOutcome};
pub use http::HttpMetrics;
pub use layout::LayoutMetrics;
pub use resp::{RESP_COMMANDS, RespMetrics};
pub use sequence::{SequenceCounters, SequenceHeld, SequenceMetrics};
pub use snowflake::{LEASE_STATES, SnowflakeMetrics};

/// Every metric segmint exports, in its own registry.
pub struct Metrics {
    /// What `/metrics` renders: the subsystems below, build info, process metrics.
    registry: Registry,
    /// Per-biz counters and state gauges; owns the bound on the bizs with series.
    bizs: BizMetrics,
    /// Per-database reservation handles and state gauges.
    databases: DatabasesMetrics,
    /// The layout epoch followed and whether a change is pending.
    layout: LayoutMetrics,
    /// Request counts and latencies per route template.
    http: HttpMetrics,
    /// Snowflake IDs and the worker-ID lease; cloned into the worker.
    snowflake: SnowflakeMetrics,
    /// Sequence bizs; cloned into the sequencer.
    sequence: SequenceMetrics,
    /// The Redis-protocol listener.
    resp: RespMetrics,
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
    /// Every subsystem's metrics on a new registry; at most `max_bizs` bizs get
    /// series of their own.
    pub fn new(max_bizs: usize) -> Metrics {
        let r = Registry::new();
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
            bizs: BizMetrics::new(&r, max_bizs),
            databases: DatabasesMetrics::new(&r),
            layout: LayoutMetrics::new(&r),
            http: HttpMetrics::new(&r),
            snowflake: SnowflakeMetrics::new(&r),
            sequence: SequenceMetrics::new(&r),
            resp: RespMetrics::new(&r),
            registry: r,
        }
    }

    /// The biz metrics.
    pub fn bizs(&self) -> &BizMetrics {
        &self.bizs
    }

    /// The database metrics.
    pub fn databases(&self) -> &DatabasesMetrics {
        &self.databases
    }

    /// The layout metrics.
    pub fn layout(&self) -> &LayoutMetrics {
        &self.layout
    }

    /// The HTTP metrics.
    pub fn http(&self) -> &HttpMetrics {
        &self.http
    }

    /// The snowflake metrics.
    pub fn snowflake(&self) -> &SnowflakeMetrics {
        &self.snowflake
    }

    /// The metrics of sequence bizs.
    pub fn sequence(&self) -> &SequenceMetrics {
        &self.sequence
    }

    /// The metrics of the Redis-protocol listener.
    pub fn resp(&self) -> &RespMetrics {
        &self.resp
    }

    /// Brings the biz series up to date with `bizs`, sets the state gauges and renders
    /// every metric in the text format.
    pub fn render(&self, bizs: &BizView<'_>, databases: &[DatabaseState]) -> String {
        self.databases.set_state(databases);
        self.bizs.set_state(bizs);
        let mut out = Vec::new();
        // Encoding into a Vec cannot fail on IO; a metric family it rejects would be a
        // bug in the subsystems' definitions, and shows as an empty scrape in tests.
        if let Err(e) = TextEncoder::new().encode(&self.registry.gather(), &mut out) {
            tracing::error!(error = %e, "cannot encode metrics");
        }
        infinities_as_prometheus_writes_them(&String::from_utf8(out).unwrap_or_default())
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
    use crate::step::StepReason;
    use segmint_core::biz::BizTag;

    fn tag(s: &str) -> BizTag {
        BizTag::parse(s).unwrap()
    }

    /// A biz in use at `rate`.
    fn busy(biz: &str, rate: f64) -> BizStats {
        BizStats {
            rate,
            peak_rate: rate,
            cached_ids: 100,
            runway_seconds: None,
            ..BizStats::idle(biz)
        }
    }

    fn in_use(bizs: &[BizStats]) -> BizView<'_> {
        BizView {
            known: bizs.len(),
            in_use: bizs,
            idle: &[],
            periodic: &[],
        }
    }

    /// The value of `series` in `text`, if it is there.
    fn sample(text: &str, series: &str) -> Option<f64> {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
            .map(|v| v.parse().unwrap())
    }

    #[test]
    fn only_the_busiest_bizs_have_series_and_the_rest_sum_into_other() {
        let m = Metrics::new(2);
        for (biz, n) in [("a", 3), ("b", 4), ("c", 7)] {
            m.bizs().counts(&tag(biz)).issued(n);
        }
        let text = m.render(
            &in_use(&[busy("a", 5.0), busy("b", 10.0), busy("c", 1.0)]),
            &[],
        );
        let issued =
            |biz: &str| sample(&text, &format!("segmint_ids_issued_total{{biz=\"{biz}\"}}"));
        assert_eq!(issued("a"), Some(3.0), "{text}");
        assert_eq!(issued("b"), Some(4.0), "{text}");
        assert_eq!(issued("c"), None, "{text}");
        assert_eq!(issued(OTHER_BIZ), Some(7.0), "{text}");
        assert!(!text.contains("biz=\"c\""), "{text}");
        // The sums over bizs are whole: c's rate and cache are `_other`'s.
        assert_eq!(
            sample(&text, "segmint_biz_rate_ids_per_second{biz=\"_other\"}"),
            Some(1.0)
        );
        assert_eq!(
            sample(&text, "segmint_biz_cached_ids{biz=\"_other\"}"),
            Some(100.0)
        );
        assert_eq!(sample(&text, "segmint_biz_step{biz=\"_other\"}"), None);
        assert_eq!(sample(&text, "segmint_bizs{state=\"in_use\"}"), Some(3.0));
        assert_eq!(
            sample(&text, "segmint_bizs{state=\"own_series\"}"),
            Some(2.0)
        );
    }

    #[test]
    fn a_biz_that_leaves_the_busiest_loses_its_series_and_counts_under_other() {
        let m = Metrics::new(1);
        let (a, b) = (m.bizs().counts(&tag("a")), m.bizs().counts(&tag("b")));
        a.issued(5);
        let text = m.render(&in_use(&[busy("a", 10.0), busy("b", 1.0)]), &[]);
        assert_eq!(
            sample(&text, "segmint_ids_issued_total{biz=\"a\"}"),
            Some(5.0)
        );
        assert!(!text.contains("biz=\"b\""), "{text}");
        assert_eq!(
            sample(&text, "segmint_ids_issued_total{biz=\"_other\"}"),
            None,
            "nothing counted there yet"
        );

        // b is now the busier: a's every series goes, and what a counts from now on
        // is `_other`'s.
        a.issued(2);
        b.issued(4);
        let text = m.render(&in_use(&[busy("a", 1.0), busy("b", 20.0)]), &[]);
        assert!(!text.contains("biz=\"a\""), "{text}");
        assert_eq!(
            sample(&text, "segmint_ids_issued_total{biz=\"b\"}"),
            Some(4.0)
        );
        assert_eq!(
            sample(&text, "segmint_ids_issued_total{biz=\"_other\"}"),
            Some(2.0)
        );
        assert_eq!(
            sample(&text, "segmint_biz_rate_ids_per_second{biz=\"_other\"}"),
            Some(1.0)
        );

        // a comes back: its counters start again from zero, and `_other` keeps what
        // it counted.
        a.issued(1);
        let text = m.render(&in_use(&[busy("a", 30.0), busy("b", 20.0)]), &[]);
        assert_eq!(
            sample(&text, "segmint_ids_issued_total{biz=\"a\"}"),
            Some(1.0)
        );
        assert!(!text.contains("biz=\"b\""), "{text}");
        assert_eq!(
            sample(&text, "segmint_ids_issued_total{biz=\"_other\"}"),
            Some(2.0)
        );
        // No biz in use is left without series of its own but b.
        assert_eq!(
            sample(&text, "segmint_biz_rate_ids_per_second{biz=\"_other\"}"),
            Some(20.0)
        );
        let text = m.render(&in_use(&[busy("a", 30.0)]), &[]);
        assert_eq!(
            sample(&text, "segmint_biz_rate_ids_per_second{biz=\"_other\"}"),
            None,
            "{text}"
        );
    }

    #[test]
    fn bizs_in_use_come_before_bizs_with_client_segments_and_idle_ones() {
        let m = Metrics::new(2);
        m.bizs().segment_handed_out(&tag("b-client"), 10);
        let view = BizView {
            known: 3,
            in_use: &[busy("z-quiet", 0.0)],
            idle: &["a-idle", "b-client", "z-quiet"],
            periodic: &[],
        };
        let text = m.render(&view, &[]);
        assert!(
            text.contains("segmint_biz_step{biz=\"z-quiet\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("segmint_segment_ids_total{biz=\"b-client\"} 10"),
            "{text}"
        );
        assert!(!text.contains("a-idle"), "{text}");
    }

    #[test]
    fn the_series_stay_bounded_whatever_the_number_of_bizs() {
        let per_biz = |bizs: usize| {
            let m = Metrics::new(10);
            let stats: Vec<BizStats> = (0..bizs)
                .map(|i| busy(&format!("tenant-{i:06}"), i as f64))
                .collect();
            for s in &stats {
                m.bizs().counts(&tag(&s.biz)).issued(1);
            }
            let text = m.render(&in_use(&stats), &[]);
            let own = text.lines().filter(|l| l.contains("biz=\"tenant-")).count();
            // The busiest have series of their own.
            assert!(text.contains(&format!("biz=\"tenant-{:06}\"", bizs - 1)));
            assert_eq!(
                sample(&text, "segmint_ids_issued_total{biz=\"_other\"}"),
                Some((bizs - 10) as f64)
            );
            own
        };
        // 23 series per biz: 16 counters (7, the steps chosen for 6 reasons, a client's
        // for 3) and 7 gauges, as docs/observability.md says.
        assert_eq!(per_biz(20), 10 * 23);
        assert_eq!(per_biz(2_000), 10 * 23);
    }

    #[test]
    fn a_biz_has_its_counters_at_zero_once_it_has_series() {
        let m = Metrics::new(10);
        let before = m.render(&in_use(&[]), &[]);
        assert!(!before.contains("biz=\"order\""), "{before}");
        let text = m.render(
            &BizView {
                known: 1,
                in_use: &[],
                idle: &["order"],
                periodic: &[],
            },
            &[],
        );
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
            "segmint_bizs{state=\"known\"} 1",
            "segmint_bizs{state=\"in_use\"} 0",
            "segmint_bizs{state=\"own_series\"} 1",
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
            period: None,
        };
        let text = m.render(
            &in_use(&[stats]),
            &[
                DatabaseState {
                    name: "pg-a".into(),
                    up: true,
                    fenced: false,
                    in_layout: true,
                    layout_behind: false,
                    clock_ahead_seconds: Some(-0.25),
                },
                DatabaseState {
                    name: "pg-b".into(),
                    up: false,
                    fenced: true,
                    in_layout: false,
                    layout_behind: true,
                    clock_ahead_seconds: None,
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
            "segmint_clock_offset_seconds{database=\"pg-a\"} -0.25",
            "segmint_layout_epoch 0",
            "segmint_layout_change_pending 0",
            "segmint_build_info{version=\"",
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
    }
    /// Every metric family exported, with its type. The dashboard, the alert rules and
    /// docs/observability.md use these names: a rename or a lost registration in any
    /// subsystem fails here.
    const EXPORTED: &[&str] = &[
        "segmint_biz_cached_ids gauge",
        "segmint_biz_peak_rate_ids_per_second gauge",
        "segmint_biz_rate_ids_per_second gauge",
        "segmint_biz_recommended_step gauge",
        "segmint_biz_runway_seconds gauge",
        "segmint_biz_step gauge",
        "segmint_bizs gauge",
        "segmint_build_info gauge",
        "segmint_cache_waits_total counter",
        "segmint_catalog_reads_total counter",
        "segmint_catalog_rows_read_total counter",
        "segmint_client_ids_given_back_total counter",
        "segmint_client_ids_wasted_total counter",
        "segmint_client_segment_step gauge",
        "segmint_client_steps_total counter",
        "segmint_clock_offset_seconds gauge",
        "segmint_database_fenced gauge",
        "segmint_database_in_layout gauge",
        "segmint_database_layout_behind gauge",
        "segmint_database_up gauge",
        "segmint_http_request_duration_seconds histogram",
        "segmint_http_requests_total counter",
        "segmint_ids_given_back_total counter",
        "segmint_ids_issued_total counter",
        "segmint_ids_wasted_total counter",
        "segmint_layout_change_pending gauge",
        "segmint_layout_epoch gauge",
        "segmint_layout_members_unconfigured gauge",
        "segmint_layout_recorded gauge",
        "segmint_resp_commands_total counter",
        "segmint_resp_connections gauge",
        "segmint_segment_fetch_duration_seconds histogram",
        "segmint_segment_fetches_total counter",
        "segmint_segment_ids_total counter",
        "segmint_sequence_forwarded_total counter",
        "segmint_sequence_key_bytes gauge",
        "segmint_sequence_keys gauge",
        "segmint_sequence_numbers_total counter",
        "segmint_sequence_sections_owned gauge",
        "segmint_sequence_sections_taken_total counter",
        "segmint_snowflake_clock_back_total counter",
        "segmint_snowflake_ids_total counter",
        "segmint_snowflake_lease_acquisitions_total counter",
        "segmint_snowflake_lease_renewals_total counter",
        "segmint_snowflake_lease_state gauge",
        "segmint_snowflake_worker_id gauge",
        "segmint_step_choices_total counter",
    ];

    #[test]
    fn every_subsystem_exports_exactly_the_expected_metrics() {
        let m = Metrics::new(10);
        // A series in each labelled family: the encoder skips a family without one.
        let order = tag("order");
        m.databases().database("pg-a");
        m.http().requests("/v1/ids", "GET", "200");
        m.http().seconds("/v1/ids");
        m.snowflake().ids_counter(&order);
        m.sequence().counters("chat");
        m.sequence().set_held("chat", SequenceHeld::default());
        let text = m.render(
            &BizView {
                known: 1,
                in_use: &[],
                idle: &["order"],
                periodic: &[],
            },
            &[DatabaseState {
                name: "pg-a".into(),
                up: true,
                fenced: false,
                in_layout: true,
                layout_behind: false,
                clock_ahead_seconds: Some(0.0),
            }],
        );
        let mut exported: Vec<&str> = text
            .lines()
            .filter_map(|line| line.strip_prefix("# TYPE "))
            .filter(|family| family.starts_with("segmint_"))
            .collect();
        exported.sort_unstable();
        assert_eq!(exported, EXPORTED);
    }
}
