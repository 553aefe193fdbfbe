//! The metrics of HTTP requests, labelled by route template (never the raw path).

use prometheus::{
    Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, Opts, Registry,
};

use super::registered;

/// HTTP latency buckets: fine below a millisecond, where the IDs served from memory
/// are, so that p99 and p999 can be read there; coarse up to the wait timeouts.
const HTTP_BUCKETS: &[f64] = &[
    0.000_025, 0.000_05, 0.000_075, 0.000_1, 0.000_15, 0.000_2, 0.000_3, 0.000_4, 0.000_5,
    0.000_75, 0.001, 0.001_5, 0.002, 0.003, 0.005, 0.007_5, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 5.0, 10.0,
];

/// Request counts and latencies.
pub struct HttpMetrics {
    requests: IntCounterVec,
    seconds: HistogramVec,
}

impl HttpMetrics {
    /// Registers the HTTP metrics with `r`.
    pub(super) fn new(r: &Registry) -> HttpMetrics {
        HttpMetrics {
            requests: registered(
                r,
                IntCounterVec::new(
                    Opts::new(
                        "segmint_http_requests_total",
                        "HTTP requests by route template, method and status",
                    ),
                    &["route", "method", "status"],
                ),
            ),
            seconds: registered(
                r,
                HistogramVec::new(
                    HistogramOpts::new(
                        "segmint_http_request_duration_seconds",
                        "HTTP request latency by route template",
                    )
                    .buckets(HTTP_BUCKETS.to_vec()),
                    &["route"],
                ),
            ),
        }
    }

    /// The request latency histogram of the route template `route`, to keep.
    pub fn seconds(&self, route: &str) -> Histogram {
        self.seconds.with_label_values(&[route])
    }

    /// The request counter of `route`, `method` and `status`, to keep and bump.
    pub fn requests(&self, route: &str, method: &str, status: &str) -> IntCounter {
        self.requests.with_label_values(&[route, method, status])
    }
}
