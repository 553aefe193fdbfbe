//! The gate of the operator routes (`/metrics`, `/status`, `/v1/bizs`, `/readyz`): with
//! `operator_token` set, a request must carry it as `Authorization: Bearer <token>`.
//! Only these routes are wrapped, so the ID routes pay nothing for it.

use actix_web::body::BoxBody;
use actix_web::dev::{HttpServiceFactory, ServiceRequest};
use actix_web::middleware::{Next, from_fn};
use actix_web::{HttpRequest, Route, web};

use super::base::bearer;
use super::observe::Observer;
use crate::config::OperatorToken;
use crate::service::Error;

/// The operator route at `path`, observed under that template (refusals included) and
/// answered with 401 unless the request carries `token`, when one is configured.
pub(super) fn route(
    observer: &Observer,
    token: Option<&OperatorToken>,
    path: &'static str,
    route: Route,
) -> impl HttpServiceFactory + use<> {
    let token = token.cloned();
    let gate = from_fn(move |req: ServiceRequest, next: Next<BoxBody>| {
        let allowed = token
            .as_ref()
            .is_none_or(|token| carries(req.request(), token));
        async move {
            if allowed {
                next.call(req).await
            } else {
                // One answer for a missing, malformed or wrong token: nothing to probe.
                Ok(req.error_response(Error::Unauthorized(
                    "this route needs the operator token: `Authorization: Bearer <operator_token>`",
                )))
            }
        }
    });
    web::resource(path)
        .route(route)
        .wrap(gate)
        .wrap(observer.route(path))
}

/// Whether `req` carries the operator token in its `Authorization` header.
fn carries(req: &HttpRequest, token: &OperatorToken) -> bool {
    matches!(bearer(req), Ok(Some(presented)) if token.matches(presented))
}
