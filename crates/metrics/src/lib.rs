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

//!
//! Each subsystem registers its own metrics and keeps their handles, one file each:
//! [`BizMetrics`] (IDs issued, segments handed out, steps, IDs given back, per-biz
//! state), [`DatabasesMetrics`] (reservations and state per database),
//! [`LayoutMetrics`], [`HttpMetrics`] and [`SnowflakeMetrics`]. [`Metrics`] holds one
//! of each on one registry, and renders them.

// The core, under the names the metrics' modules use.
use segmint_core::{rate, step};

mod biz;
mod database;
mod http;
mod layout;
mod snowflake;

use prometheus::{Encoder, IntGaugeVec, Opts, Registry, TextEncoder};

pub use biz::{BizMetrics, BizStats, OTHER_BIZ};
pub use database::{DatabaseMetrics, DatabaseState, DatabasesMetrics, FetchOutcome};
pub use http::HttpMetrics;
pub use layout::LayoutMetrics;
pub use snowflake::{LEASE_STATES, SnowflakeMetrics};

/// Every metric segmint exports, in its own registry.
pub struct Metrics {
    /// What `/metrics` renders: the subsystems below, build info, process metrics.
    registry: Registry,
    /// Per-biz counters and state gauges; owns the cap on biz labels.
    bizs: BizMetrics,
    /// Per-database reservation handles and state gauges.
    databases: DatabasesMetrics,
    /// The layout epoch followed and whether a change is pending.
    layout: LayoutMetrics,
    /// Request counts and latencies per route template.
    http: HttpMetrics,
    /// Snowflake IDs and the worker-ID lease; cloned into the worker.
    snowflake: SnowflakeMetrics,
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
    /// Every subsystem's metrics on a new registry; at most `max_bizs` bizs get a
    /// label of their own.
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

    /// Sets the state gauges and renders every metric in the text format.
    pub fn render(&self, bizs: &[BizStats], databases: &[DatabaseState]) -> String {
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

    #[test]
    fn bizs_past_the_cap_share_one_label() {
        let m = Metrics::new(2);
        assert_eq!(&*m.bizs().label(&tag("a")), "a");
        assert_eq!(&*m.bizs().label(&tag("b")), "b");
        assert_eq!(&*m.bizs().label(&tag("c")), OTHER_BIZ);
        assert_eq!(&*m.bizs().label(&tag("d")), OTHER_BIZ);
        assert_eq!(&*m.bizs().label(&tag("a")), "a", "stable");
        m.bizs().issued_counter(&tag("c")).inc_by(3);
        m.bizs().issued_counter(&tag("d")).inc_by(4);
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
        "segmint_build_info gauge",
        "segmint_cache_waits_total counter",
        "segmint_catalog_reads_total counter",
        "segmint_catalog_rows_read_total counter",
        "segmint_client_ids_given_back_total counter",
        "segmint_client_ids_wasted_total counter",
        "segmint_client_segment_step gauge",
        "segmint_client_steps_total counter",
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
        "segmint_segment_fetch_duration_seconds histogram",
        "segmint_segment_fetches_total counter",
        "segmint_segment_ids_total counter",
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
        m.bizs().label(&order);
        m.databases().database("pg-a");
        m.http().requests("/v1/ids", "GET", "200");
        m.http().seconds("/v1/ids");
        m.snowflake().ids_counter(&order);
        let text = m.render(
            &[BizStats::idle("order")],
            &[DatabaseState {
                name: "pg-a".into(),
                up: true,
                fenced: false,
                in_layout: true,
                layout_behind: false,
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
