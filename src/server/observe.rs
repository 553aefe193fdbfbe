//! Every request: counted while in flight (for the graceful stop), run in a span with
//! its method, route template and status (never the query string, where Tinyid
//! clients put their token), measured for the metrics, and answered with
//! `Connection: close` once the server is stopping.
//!
//! The middleware wraps each route on its own and is told the route's template when
//! the route is declared: asking actix for the matched pattern would route the request
//! a second time (regular expressions for `{biz}` segments), and that cost more than
//! the handlers themselves. The metric handles of a route are resolved once per
//! worker, not looked up by label on every request.

use std::cell::RefCell;
use std::future::{Ready, ready};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use actix_web::dev::{
    Service, ServiceFactory, ServiceRequest, ServiceResponse, Transform, forward_ready,
};
use actix_web::http::{ConnectionType, Method, StatusCode};
use actix_web::{Error, Resource, web};
use futures_util::future::LocalBoxFuture;
use prometheus::{Histogram, IntCounter};
use tracing::Instrument;

use crate::metrics::Metrics;

/// Counts the requests being served, and whether the server is stopping.
#[derive(Clone, Default)]
pub(crate) struct InFlight(Arc<InFlightState>);

#[derive(Default)]
struct InFlightState {
    count: AtomicUsize,
    closing: AtomicBool,
}

/// One request being served; leaving the count when dropped, even on cancellation.
/// Holds its route's worker-local state, so entering clones no reference count shared
/// between the workers.
struct Entered(Rc<RouteState>);

impl Entered {
    fn new(route: Rc<RouteState>) -> Entered {
        route.in_flight.0.count.fetch_add(1, Ordering::SeqCst);
        Entered(route)
    }

    /// Whether the server is stopping, so the connection should be closed.
    fn closing(&self) -> bool {
        self.0.in_flight.0.closing.load(Ordering::Relaxed)
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        self.0.in_flight.0.count.fetch_sub(1, Ordering::SeqCst);
    }
}

impl InFlight {
    pub(crate) fn count(&self) -> usize {
        self.0.count.load(Ordering::SeqCst)
    }

    /// From now on, every response closes its connection.
    pub(crate) fn close(&self) {
        self.0.closing.store(true, Ordering::SeqCst);
    }

    /// Waits until no request is being served, or `timeout` passes.
    pub(crate) async fn drained(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while self.count() > 0 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// The route label of requests that match no route.
pub(crate) const UNMATCHED: &str = "unmatched";

/// Makes the middleware of each route.
#[derive(Clone)]
pub(crate) struct Observer {
    pub(crate) in_flight: InFlight,
    pub(crate) metrics: Arc<Metrics>,
}

impl Observer {
    /// The middleware for the route with template `route` (its metric and log label).
    pub(crate) fn route(&self, route: &'static str) -> Observe {
        Observe {
            route,
            observer: self.clone(),
        }
    }

    /// The resource at `path`, observed under that template.
    pub(crate) fn resource(
        &self,
        path: &'static str,
    ) -> Resource<
        impl ServiceFactory<
            ServiceRequest,
            Config = (),
            Response = ServiceResponse,
            Error = Error,
            InitError = (),
        > + use<>,
    > {
        web::resource(path).wrap(self.route(path))
    }
}

/// The middleware of one route.
pub(crate) struct Observe {
    route: &'static str,
    observer: Observer,
}

impl<S, B> Transform<S, ServiceRequest> for Observe
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error> + 'static,
    B: 'static,
{
    type Response = ServiceResponse<B>;
    type Error = Error;
    type Transform = ObserveService<S>;
    type InitError = ();
    type Future = Ready<Result<Self::Transform, Self::InitError>>;

    fn new_transform(&self, service: S) -> Self::Future {
        let metrics = &self.observer.metrics;
        // The answer a GET of this route usually gets, counted from zero so that the
        // request counter has a series per route before the first request.
        let usual = if self.route == UNMATCHED {
            StatusCode::NOT_FOUND
        } else {
            StatusCode::OK
        };
        let usual = (
            "GET",
            usual,
            metrics.http().requests(self.route, "GET", usual.as_str()),
        );
        ready(Ok(ObserveService {
            service: Rc::new(service),
            route: Rc::new(RouteState {
                route: self.route,
                in_flight: self.observer.in_flight.clone(),
                seconds: metrics.http().seconds(self.route),
                counters: RefCell::new(vec![usual]),
                metrics: metrics.clone(),
            }),
        }))
    }
}

/// What the requests of one route on one worker share.
struct RouteState {
    route: &'static str,
    in_flight: InFlight,
    /// `segmint_http_request_duration_seconds` of this route.
    seconds: Histogram,
    /// `segmint_http_requests_total` by method and status, resolved on first use: a
    /// route sees a handful of combinations. `RefCell`: a worker is one thread and
    /// nothing awaits while it is borrowed.
    counters: RefCell<Vec<(&'static str, StatusCode, IntCounter)>>,
    metrics: Arc<Metrics>,
}

impl RouteState {
    fn count(&self, method: &'static str, status: StatusCode, took: Duration) {
        self.seconds.observe(took.as_secs_f64());
        let mut counters = self.counters.borrow_mut();
        if let Some((_, _, c)) = counters
            .iter()
            .find(|(m, s, _)| *m == method && *s == status)
        {
            c.inc();
            return;
        }
        let counter = self
            .metrics
            .http()
            .requests(self.route, method, status.as_str());
        counter.inc();
        counters.push((method, status, counter));
    }
}

pub(crate) struct ObserveService<S> {
    service: Rc<S>,
    route: Rc<RouteState>,
}

impl<S, B> Service<ServiceRequest> for ObserveService<S>
where
    S: Service<ServiceRequest, Response = ServiceResponse<B>, Error = Error> + 'static,
    B: 'static,
{
    type Response = ServiceResponse<B>;
    type Error = Error;
    type Future = LocalBoxFuture<'static, Result<ServiceResponse<B>, Error>>;

    forward_ready!(service);

    fn call(&self, req: ServiceRequest) -> Self::Future {
        let entered = Entered::new(self.route.clone());
        let started = Instant::now();
        let method = method_label(req.method());
        let span = tracing::debug_span!(
            "http",
            method,
            route = self.route.route,
            status = tracing::field::Empty
        );
        let call = self.service.call(req).instrument(span.clone());
        Box::pin(async move {
            let mut response = call.await;
            let status = match &mut response {
                Ok(r) => {
                    if entered.closing() {
                        // Stopping: the client must not reuse this connection.
                        r.response_mut()
                            .head_mut()
                            .set_connection_type(ConnectionType::Close);
                    }
                    r.status()
                }
                Err(e) => e.as_response_error().status_code(),
            };
            span.record("status", status.as_u16());
            tracing::debug!(parent: &span, status = status.as_u16(), "request");
            entered.0.count(method, status, started.elapsed());
            response
        })
    }
}

/// The method as a metric label: the standard ones by name, any other as `other`, so
/// that made-up methods cannot create series.
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::HEAD => "HEAD",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::OPTIONS => "OPTIONS",
        Method::PATCH => "PATCH",
        _ => "other",
    }
}
