//! The metrics of the configured databases: segment reservations on each, and its
//! state (up, fenced, in the layout) set at scrape time.

use std::time::Duration;

use prometheus::{
    GaugeVec, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGaugeVec, Opts,
    Registry,
};

use super::registered;

/// Segment fetch latency buckets: a round trip and an UPDATE, up to the fetch timeout.
const FETCH_BUCKETS: &[f64] = &[
    0.000_25, 0.000_5, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// What a reservation attempt on one database came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchOutcome {
    /// A segment was reserved.
    Ok,
    /// A version-checked UPDATE lost to another writer, or the transaction was rolled
    /// back for another's (a serialization failure, a deadlock).
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
    /// Catalog reads and the rows they returned, full and through the change feed.
    reads: [IntCounter; 2],
    rows: [IntCounter; 2],
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

    /// Counts a catalog read of every row (`full`) or of the change feed, which
    /// returned `rows` rows.
    pub fn catalog_read(&self, full: bool, rows: usize) {
        let i = usize::from(full);
        self.reads[i].inc();
        self.rows[i].inc_by(rows as u64);
    }
}

/// One database's state gauges, set at scrape time.
pub struct DatabaseState {
    pub name: String,
    pub up: bool,
    pub fenced: bool,
    /// The layout in force names it and this server may use it.
    pub in_layout: bool,
    /// Not used because of its layout rows: behind another database's, lost, or
    /// disagreeing (see [`segmint_core::layout::Standing`]).
    pub layout_behind: bool,
    /// How far this server's clock is ahead of the database's, in seconds (negative:
    /// behind); `None` before it was read.
    pub clock_ahead_seconds: Option<f64>,
}

/// Every database-labelled metric.
pub struct DatabasesMetrics {
    up: IntGaugeVec,
    fenced: IntGaugeVec,
    in_layout: IntGaugeVec,
    layout_behind: IntGaugeVec,
    clock_offset: GaugeVec,
    fetches: IntCounterVec,
    fetch_seconds: HistogramVec,
    catalog_reads: IntCounterVec,
    catalog_rows: IntCounterVec,
}

impl DatabasesMetrics {
    /// Registers the database metrics with `r`.
    pub(super) fn new(r: &Registry) -> DatabasesMetrics {
        let state = |name: &str, help: &str| {
            registered(r, IntGaugeVec::new(Opts::new(name, help), &["database"]))
        };
        DatabasesMetrics {
            up: state(
                "segmint_database_up",
                "1 when the database is in use, 0 while it backs off after a failure",
            ),
            fenced: state(
                "segmint_database_fenced",
                "1 while the database is fenced: a row went back in time (a restore, a promoted replica) and reserving from it could reissue IDs",
            ),
            in_layout: state(
                "segmint_database_in_layout",
                "1 while the database layout in force names the database, 0 once `segmint db remove` took it out (it is then not used)",
            ),
            layout_behind: state(
                "segmint_database_layout_behind",
                "1 while the database is not used because of its layout rows: its newest layout epoch is below another database's, it was declared lost, or its rows disagree with another database's (/status says which)",
            ),
            clock_offset: registered(
                r,
                GaugeVec::new(
                    Opts::new(
                        "segmint_clock_offset_seconds",
                        "How far this server's clock is ahead of the database's (negative: behind), read at the last catalog refresh; a server further ahead of every database than protocol.clock_tolerance_ms begins no period of a biz whose counter restarts each period",
                    ),
                    &["database"],
                ),
            ),
            fetches: registered(
                r,
                IntCounterVec::new(
                    Opts::new(
                        "segmint_segment_fetches_total",
                        "Segment reservation attempts by outcome (ok, conflict, error, refused)",
                    ),
                    &["database", "outcome"],
                ),
            ),
            fetch_seconds: registered(
                r,
                HistogramVec::new(
                    HistogramOpts::new(
                        "segmint_segment_fetch_duration_seconds",
                        "Time of one segment reservation on one database",
                    )
                    .buckets(FETCH_BUCKETS.to_vec()),
                    &["database"],
                ),
            ),
            catalog_reads: registered(
                r,
                IntCounterVec::new(
                    Opts::new(
                        "segmint_catalog_reads_total",
                        "Catalog reads of the database: of every row (read=\"full\") or of the rows written since the last read (read=\"feed\")",
                    ),
                    &["database", "read"],
                ),
            ),
            catalog_rows: registered(
                r,
                IntCounterVec::new(
                    Opts::new(
                        "segmint_catalog_rows_read_total",
                        "Rows the catalog reads returned (bizs, shapes, tokens, witnesses), by kind of read: at rest the feed returns none",
                    ),
                    &["database", "read"],
                ),
            ),
        }
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
            reads: ["feed", "full"].map(|k| self.catalog_reads.with_label_values(&[name, k])),
            rows: ["feed", "full"].map(|k| self.catalog_rows.with_label_values(&[name, k])),
        }
    }

    /// Sets the state gauges from `databases`.
    pub(super) fn set_state(&self, databases: &[DatabaseState]) {
        for d in databases {
            let name = [d.name.as_str()];
            self.up.with_label_values(&name).set(i64::from(d.up));
            self.fenced
                .with_label_values(&name)
                .set(i64::from(d.fenced));
            self.in_layout
                .with_label_values(&name)
                .set(i64::from(d.in_layout));
            self.layout_behind
                .with_label_values(&name)
                .set(i64::from(d.layout_behind));
            if let Some(ahead) = d.clock_ahead_seconds {
                self.clock_offset.with_label_values(&name).set(ahead);
            }
        }
    }
}
