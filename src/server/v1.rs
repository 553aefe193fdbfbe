//! The JSON API: real status codes, `{"error":{"code","message"}}` bodies, and the
//! token in `Authorization: Bearer …`.

use actix_web::http::header::AUTHORIZATION;
use actix_web::{HttpRequest, HttpResponse, web};
use serde_json::json;

use super::error::ApiError;
use super::observe::Observer;
use super::{AppState, Params, app_state, authorize};
use crate::biz::{BatchSize, BizTag};

pub(super) fn routes(cfg: &mut web::ServiceConfig, observer: &Observer) {
    // The constant routes before the `{biz}` patterns, which are regular expressions.
    cfg.service(observer.resource("/healthz").route(web::get().to(healthz)))
        .service(observer.resource("/readyz").route(web::get().to(readyz)))
        .service(
            observer
                .resource("/v1/ids/{biz}")
                .route(web::get().to(ids))
                .route(web::post().to(ids)),
        )
        .service(
            observer
                .resource("/v1/segments/{biz}")
                .route(web::get().to(segment))
                .route(web::post().to(segment)),
        );
}

/// The bearer token, if the header is present.
///
/// # Errors
/// 401 when the header is not of the form `Bearer <token>`.
fn bearer(req: &HttpRequest) -> Result<Option<&str>, ApiError> {
    let Some(value) = req.headers().get(AUTHORIZATION) else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(|v| v.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| Some(token.trim()))
        .ok_or(ApiError::Unauthorized(
            "the Authorization header must be `Bearer <token>`",
        ))
}

/// Parses the biz of the path and checks the caller may use it. The segment is taken
/// as the router matched it, without an owned copy: the router has already decoded the
/// characters a biz name may hold (`%65` is `e`), and what is still encoded fails
/// `BizTag::parse` as its decoded form would.
async fn authorized(state: &AppState, req: &HttpRequest) -> Result<BizTag, ApiError> {
    let biz = BizTag::parse(req.match_info().get("biz").unwrap_or_default())?;
    authorize(&state.store, bearer(req)?, &biz).await?;
    Ok(biz)
}

async fn ids(req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let state = app_state(&req)?;
    let params = Params::from_query(&req);
    let count = BatchSize::parse("count", params.get("count"))?;
    let biz = authorized(state, &req).await?;
    let ids = state.generator.next_ids(&biz, count.get()).await?;
    Ok(HttpResponse::Ok().json(Ids {
        biz: biz.as_str(),
        ids: &ids,
    }))
}

/// `{"biz": …, "ids": […]}`, serialized straight from the slice.
#[derive(serde::Serialize)]
struct Ids<'a> {
    biz: &'a str,
    ids: &'a [i64],
}

async fn segment(req: HttpRequest) -> Result<HttpResponse, ApiError> {
    let state = app_state(&req)?;
    let biz = authorized(state, &req).await?;
    let reservation = state.segment_for_client(&biz).await?;
    let range = reservation.range;
    Ok(HttpResponse::Ok().json(json!({
        "biz": biz.as_str(),
        "database": state.store.database_names()[reservation.database],
        "current_id": range.current_id(),
        "max_id": range.max_id(),
        "step": range.step(),
        "delta": range.residue().delta(),
        "remainder": range.residue().remainder(),
        "first_id": range.first_id(),
        "count": range.len(),
        "loading_id": range.loading_id(state.preload_percent),
    })))
}

async fn healthz() -> HttpResponse {
    HttpResponse::Ok().json(json!({"status": "ok"}))
}

async fn readyz(state: web::Data<AppState>) -> HttpResponse {
    let ready = state.store.ready().await;
    let body = json!({
        "status": if ready { "ready" } else { "unavailable" },
        "databases": state.store.status(),
    });
    if ready {
        HttpResponse::Ok().json(body)
    } else {
        HttpResponse::ServiceUnavailable().json(body)
    }
}
